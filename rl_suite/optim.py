"""Optimisation helpers every agent uses: one gradient step (gradients averaged over the ranks under torchrun, then
clipped), the finiteness check that skips a non-finite loss's update, the soft (Polyak) update of target networks,
and the weights of an expectile loss (annealed Q-learning's critics)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from rl_suite import distributed


def gradient_step(
    optimizer: torch.optim.Optimizer,
    loss: torch.Tensor,
    parameters: Sequence[nn.Parameter],
    max_grad_norm: float = 0.0,
    lr: float | None = None,
) -> None:
    """Minimise ``loss`` by one step of ``optimizer`` over ``parameters`` (a sequence: it is walked twice): under
    torchrun the gradients are first averaged over the ranks (one all-reduce, see rl_suite/distributed.py), then their
    global norm is clipped to ``max_grad_norm`` (0 for no clipping). ``lr``, if given, becomes the learning rate of
    every parameter group first (schedules and adaptive rules move it)."""
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    distributed.average_gradients(parameters)  # under torchrun; a no-op in a single process
    if max_grad_norm > 0:
        nn.utils.clip_grad_norm_(parameters, max_grad_norm, foreach=True)
    optimizer.step()


def finite_or_warn(
    loss: torch.Tensor, agent: str, loss_name: str = "loss", skipped: str = "this minibatch's update"
) -> bool:
    """Whether ``loss`` is finite (a host sync); if not, warn ``"{agent}: non-finite {loss_name}; {skipped} is
    skipped"``. Under torchrun the answer is agreed by all ranks (finite everywhere), so that they skip or step
    together."""
    if distributed.all_true(torch.isfinite(loss)):
        return True
    warnings.warn(f"{agent}: non-finite {loss_name}; {skipped} is skipped", stacklevel=3)
    return False


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Soft target update, ``theta' <- (1 - tau) theta' + tau theta``, for every parameter at once with one fused
    ``lerp_`` (as LeanRL writes it)."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


def expectile_weights(error: torch.Tensor, expectile: float) -> torch.Tensor:
    """The weights that turn a squared error into IQL's expectile loss L_2^tau(u) = |tau - 1(u < 0)| u^2, for
    ``error`` u = target - prediction, relative to the squared error's: ``2 |tau - 1(u < 0)|``, so that all are 1 at
    tau = 0.5 (the plain squared error) and targets above the prediction weigh more as tau rises towards 1."""
    return torch.where(error < 0, 2.0 * (1.0 - expectile), 2.0 * expectile)


def annealed_expectile(start: float, anneal_steps: int, progress: float, env_steps: int) -> float:
    """Annealed Q-learning's schedule (Omura et al., 2025): the expectile moved linearly from ``start`` to 0.5 over
    ``anneal_steps`` env steps (0: over the run's step budget, whose spent fraction is ``progress``), and 0.5 after."""
    fraction = progress if anneal_steps == 0 else env_steps / anneal_steps
    return start - (start - 0.5) * min(max(fraction, 0.0), 1.0)
