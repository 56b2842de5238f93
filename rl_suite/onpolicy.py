"""What the on-policy agents (PPO, FPO, PolicyFlow) share: values and GAE advantages from a rollout with truncation
bootstrapping, reward scaling by the running spread of the discounted return, the PPO-clip surrogate, and the loop of
epochs over shuffled minibatches."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

from rl_suite import distributed
from rl_suite.buffers import gae


@torch.no_grad()
def advantages_and_returns(
    d: dict[str, torch.Tensor],
    critic: nn.Module,
    obs: torch.Tensor,
    next_obs_normalizer: Callable[[torch.Tensor], torch.Tensor],
    rewards: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values, advantages, returns)``, each ``[T, N]``, for rollout fields ``d`` and its normalised ``obs``.

    V(s'_t) is V(s_{t+1}) unless the episode ended at t: only truncated steps (and the last one) need their final
    observation valued (terminated ones are not bootstrapped).
    """
    values = critic(obs).squeeze(-1)
    next_values = torch.cat((values[1:], values[:1]))
    needs = d["truncated"].clone()
    needs[-1] = True
    t, env = needs.nonzero(as_tuple=True)
    next_values[t, env] = critic(next_obs_normalizer(d["next_obs"][t, env])).squeeze(-1)
    done = d["terminated"] | d["truncated"]
    advantages, returns = gae(rewards, values, next_values, d["terminated"], done, gamma, gae_lambda)
    return values, advantages, returns


class RewardScaler:
    """Divides rewards by a running standard deviation of the discounted return, G_t = gamma G_{t-1} (1 - done) + r_t,
    tracked per environment across rollouts (as CleanRL's and SB3's reward normalisation do). The statistics live in
    ``return_norm`` (a ``RunningNorm`` the agent checkpoints) and the running returns in ``discounted_return``."""

    def __init__(self, return_norm: nn.Module, gamma: float):
        self.return_norm, self.gamma = return_norm, gamma
        self.discounted_return: torch.Tensor | None = None

    @torch.no_grad()
    def __call__(self, d: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.discounted_return is None:
            self.discounted_return = torch.zeros_like(d["rewards"][0])
        returns = torch.empty_like(d["rewards"])
        for t in range(d["rewards"].shape[0]):
            self.discounted_return = self.discounted_return * self.gamma + d["rewards"][t]
            returns[t] = self.discounted_return
            self.discounted_return = self.discounted_return * ~(d["terminated"][t] | d["truncated"][t])
        self.return_norm.update(returns)
        return d["rewards"] / torch.sqrt(self.return_norm.var + 1e-8).float()


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip: float, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """PPO's objective as a loss: ``-E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)]``. ``ratio`` may have trailing
    dimensions beyond ``advantages`` (FPO's per-sample ratios); advantages broadcast over them. ``weights`` (shaped
    like ``ratio``) turn the mean into a weighted one: MAPPO's death masking gives dead agents' samples weight 0."""
    advantages = advantages.view(*advantages.shape, *[1] * (ratio.dim() - advantages.dim()))
    loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip, 1 + clip))
    return loss.mean() if weights is None else weighted_mean(loss, weights)


def weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x * weights).sum() / weights.sum().clamp_min(1.0)


def normalized(advantages: torch.Tensor) -> torch.Tensor:
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def minibatches(samples: dict[str, torch.Tensor], count: int, device) -> Iterator[dict[str, torch.Tensor]]:
    """One epoch: the samples shuffled (one gather per field) and cut into ``count`` equal slices."""
    size = next(iter(samples.values())).shape[0]
    batch = max(size // count, 1)
    order = torch.randperm(size, device=device)
    shuffled = {k: v[order] for k, v in samples.items()}
    for start in range(0, size - batch + 1, batch):
        yield {k: v[start : start + batch] for k, v in shuffled.items()}


def gradient_step(optimizer, loss: torch.Tensor, parameters, max_grad_norm: float, lr: float | None = None) -> None:
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    distributed.average_gradients(parameters)  # under torchrun; a no-op in a single process
    if max_grad_norm > 0:
        nn.utils.clip_grad_norm_(parameters, max_grad_norm, foreach=True)
    optimizer.step()


def train_epochs(
    samples: dict[str, torch.Tensor],
    epochs: int,
    count: int,
    device,
    step: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor] | None],
    stop: Callable[[dict[str, torch.Tensor], int], bool] | None = None,
) -> dict[str, torch.Tensor]:
    """``epochs`` passes of ``step`` over ``count`` shuffled minibatches of ``samples``; ``step`` makes one gradient
    step and returns its detached metrics, or ``None`` if it skipped the minibatch. ``stop(totals, steps)``, asked
    after each epoch, ends the passes early. Returns the metrics averaged over the steps made."""
    totals: dict[str, torch.Tensor] = {}
    steps = 0
    for _ in range(epochs):
        for mb in minibatches(samples, count, device):
            metrics = step(mb)
            if metrics is None:
                continue
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
        if stop is not None and steps and stop(totals, steps):
            break
    return {key: value / max(steps, 1) for key, value in totals.items()}


def finite_or_warn(loss: torch.Tensor, agent: str) -> bool:
    """Whether ``loss`` is finite (a host sync); if not, warn that the minibatch's update is skipped. Under torchrun
    the answer is agreed by all ranks (finite everywhere), so that they skip or step together."""
    if distributed.all_true(torch.isfinite(loss)):
        return True
    warnings.warn(f"{agent}: non-finite loss; this minibatch's update is skipped", stacklevel=3)
    return False


def adapt_lr(lr: float, kl: float, target: float) -> float:
    """rsl_rl's and rl_games' rule: divide the learning rate by 1.5 when the KL is over twice the target, multiply
    it by 1.5 when under half, within [1e-5, 1e-2]."""
    if kl > 2 * target:
        return max(lr / 1.5, 1e-5)
    if kl < target / 2:
        return min(lr * 1.5, 1e-2)
    return lr
