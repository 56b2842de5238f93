"""Categorical return distributions (C51, Bellemare et al., 2017) for twin critics: the projection of a shifted
distribution back onto a fixed support, and the targets built from two target critics (PQL-D, FlashSAC)."""

from __future__ import annotations

import torch


def project_distribution(
    next_probs: torch.Tensor, rewards: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """The categorical projection of C51 (Bellemare et al., 2017): the distribution of ``rewards + discount * Z``,
    with ``Z`` distributed as ``next_probs[b]`` over ``support``, put back onto ``support``. Each shifted atom's
    probability goes to its two neighbours on the support in proportion to closeness; atoms beyond the ends go to
    the ends. Shapes: ``next_probs [B, K]``, ``rewards`` and ``discount [B]``, ``support [K]`` evenly spaced."""
    v_min, v_max, atoms = support[0], support[-1], support.shape[0]
    delta = (v_max - v_min) / (atoms - 1)
    shifted = (rewards.unsqueeze(-1) + discount.unsqueeze(-1) * support).clamp(v_min, v_max)
    position = (shifted - v_min) / delta  # in [0, K - 1]
    lower, upper = position.floor(), position.ceil()
    # An atom that lands exactly on the support (lower == upper) keeps all its mass there.
    lower_weight = (upper - position) + (lower == upper)
    upper_weight = position - lower
    projected = torch.zeros_like(next_probs)
    projected.scatter_add_(-1, lower.long(), next_probs * lower_weight)
    projected.scatter_add_(-1, upper.long(), next_probs * upper_weight)
    return projected


DISTRIBUTIONAL_TARGETS = ("lower_mean", "elementwise_min")


def distributional_target(
    next_probs: torch.Tensor, rewards: torch.Tensor, discount: torch.Tensor, support: torch.Tensor, how: str
) -> torch.Tensor:
    """The target ``[B, K]`` from twin target critics' next-state distributions ``next_probs [2, B, K]``:
    ``"lower_mean"``, the projection of the twin with the lower expected return (PQL-D's default, FlashSAC's), or
    ``"elementwise_min"``, the atom-by-atom minimum of both projections (``PQLConfig.distributional_target`` in
    agents/pql.py compares the two)."""
    if how == "lower_mean":
        means = next_probs @ support  # [2, B]
        lower = torch.where((means[0] <= means[1]).unsqueeze(-1), next_probs[0], next_probs[1])
        return project_distribution(lower, rewards, discount, support)
    first, second = (project_distribution(p, rewards, discount, support) for p in next_probs)
    return torch.minimum(first, second)  # "elementwise_min": left unnormalised, as in the reference
