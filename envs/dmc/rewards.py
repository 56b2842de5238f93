"""dm_control's reward shapes (``dm_control.utils.rewards``) in torch: ``tolerance`` and its sigmoids.

``tolerance(x, bounds, margin, sigmoid, value_at_margin)`` is 1 where ``lower <= x <= upper``. Outside, with
``margin > 0``, it falls with ``d``, the distance to the nearest bound in units of ``margin``, through a sigmoid
``s(d)`` with ``s(0) = 1`` and ``s(1) = value_at_margin``; with ``margin == 0`` it is 0 outside. The sigmoids and their
scales are dm_control's, written from its definitions (each ``scale`` makes ``s(1) = value_at_margin``):

- gaussian ``exp(-(d k)^2 / 2)``, ``k = sqrt(-2 ln v)``;
- hyperbolic ``1 / cosh(d k)``, ``k = arccosh(1 / v)``;
- long_tail ``1 / ((d k)^2 + 1)``, ``k = sqrt(1 / v - 1)``;
- reciprocal ``1 / (|d| k + 1)``, ``k = 1 / v - 1``;
- cosine ``(1 + cos(pi d k)) / 2`` where ``|d k| < 1``, else 0, ``k = arccos(2 v - 1) / pi``;
- linear ``1 - d k`` where ``|d k| < 1``, else 0, ``k = 1 - v``;
- quadratic ``1 - (d k)^2`` where ``|d k| < 1``, else 0, ``k = sqrt(1 - v)``;
- tanh_squared ``1 - tanh(d k)^2``, ``k = arctanh(sqrt(1 - v))``.
"""

from __future__ import annotations

import math

import torch

DEFAULT_VALUE_AT_MARGIN = 0.1  # dm_control's _DEFAULT_VALUE_AT_MARGIN
SIGMOIDS = ("gaussian", "hyperbolic", "long_tail", "reciprocal", "cosine", "linear", "quadratic", "tanh_squared")


def _sigmoid(d: torch.Tensor, value_at_1: float, sigmoid: str) -> torch.Tensor:
    """``s(d)``: 1 at ``d == 0`` and ``value_at_1`` at ``d == 1``."""
    if sigmoid not in SIGMOIDS:
        raise ValueError(f"unknown sigmoid {sigmoid!r}; dm_control's sigmoids are {', '.join(SIGMOIDS)}")
    bounded = sigmoid in ("cosine", "linear", "quadratic")
    if not (0.0 <= value_at_1 < 1.0 if bounded else 0.0 < value_at_1 < 1.0):
        interval = "[0, 1)" if bounded else "(0, 1)"
        raise ValueError(f"value_at_margin must lie in {interval} for the {sigmoid} sigmoid, got {value_at_1!r}")
    v = value_at_1
    if sigmoid == "gaussian":
        return torch.exp(-0.5 * (d * math.sqrt(-2.0 * math.log(v))) ** 2)
    if sigmoid == "hyperbolic":
        return 1.0 / torch.cosh(d * math.acosh(1.0 / v))
    if sigmoid == "long_tail":
        return 1.0 / ((d * math.sqrt(1.0 / v - 1.0)) ** 2 + 1.0)
    if sigmoid == "reciprocal":
        return 1.0 / (d.abs() * (1.0 / v - 1.0) + 1.0)
    if sigmoid == "tanh_squared":
        return 1.0 - torch.tanh(d * math.atanh(math.sqrt(1.0 - v))) ** 2
    scale = {"cosine": math.acos(2.0 * v - 1.0) / math.pi, "linear": 1.0 - v, "quadratic": math.sqrt(1.0 - v)}[sigmoid]
    scaled = d * scale
    inside = scaled.abs() < 1.0
    if sigmoid == "cosine":
        value = (1.0 + torch.cos(math.pi * scaled)) / 2.0
    elif sigmoid == "linear":
        value = 1.0 - scaled
    else:
        value = 1.0 - scaled**2
    return torch.where(inside, value, torch.zeros_like(value))


def tolerance(
    x: torch.Tensor,
    bounds: tuple[float, float] = (0.0, 0.0),
    margin: float = 0.0,
    sigmoid: str = "gaussian",
    value_at_margin: float = DEFAULT_VALUE_AT_MARGIN,
) -> torch.Tensor:
    """dm_control's ``rewards.tolerance`` elementwise over ``x`` (see the module docstring). ``bounds`` and ``margin``
    are numbers, or tensors that broadcast with ``x`` (a per-environment target radius)."""
    lower, upper = bounds
    if isinstance(lower, (int, float)) and isinstance(upper, (int, float)) and lower > upper:
        raise ValueError(f"tolerance bounds must be (lower, upper) with lower <= upper, got {bounds!r}")
    if isinstance(margin, (int, float)) and margin < 0:
        raise ValueError(f"tolerance margin must be non-negative, got {margin!r}")
    in_bounds = (lower <= x) & (x <= upper)
    if isinstance(margin, (int, float)) and margin == 0:
        return in_bounds.to(x.dtype)
    d = torch.where(x < lower, lower - x, x - upper) / margin
    return torch.where(in_bounds, torch.ones_like(d), _sigmoid(d, value_at_margin, sigmoid))
