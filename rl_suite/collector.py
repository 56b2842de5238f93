"""The collector: drives a ``VecEnv`` with an agent's policy and writes every transition into the agent's buffer.

The same collector loop serves every agent and every mode; what differs is the buffer (a ``[T, N]`` rollout, a replay
ring, whole episodes), the callables it steps with (compiled or captured ones, rl_suite/compiled.py; the deterministic
policy for evaluation, rl_suite/runner.py), and, for teams of agents, the hooks that ``MultiAgentCollector``
overrides (rl_suite/multiagent.py). Episode statistics accumulate as device tensors and are read, with one host
sync, only when the runner logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl_suite.env import VecEnv


class EpisodeStats:
    """Sums over the episodes finished since the last ``read``: count, return, length, for tasks with a winner
    (``wins=True``, ``info["won"]``) wins, and the task's episode metrics (``metrics``, ``info["episode_metrics"]``)."""

    def __init__(self, device: torch.device, wins: bool = False, metrics: tuple[str, ...] = ()):
        self.wins, self.metrics = wins, tuple(metrics)
        # per metric: the sum of its values and how many episodes had one (a metric is NaN where it is undefined)
        self.totals = torch.zeros((4 if wins else 3) + 2 * len(self.metrics), device=device, dtype=torch.float64)

    def record(self, info: dict[str, torch.Tensor]) -> None:
        done = info["done"].to(torch.float64)
        returns = info["episode_return"].to(torch.float64)
        sums = [done.sum(), returns.sum(), info["episode_length"].sum()]
        if self.wins:
            sums.append(info["won"].sum())
        for name in self.metrics:
            value = info["episode_metrics"][name].to(torch.float64)
            defined = info["done"] & ~value.isnan()
            sums += [torch.where(defined, value, 0.0).sum(), defined.sum()]
        self.totals += torch.stack(sums)

    def read(self) -> dict[str, float] | None:
        """Mean return and length (and the win rate, and each episode metric) of the finished episodes (``None`` if
        none finished), and restart the sums."""
        count, returns, lengths, *rest = self.totals.tolist()
        self.totals.zero_()
        if count == 0:
            return None
        result = {"episodes": count, "episode_return": returns / count, "episode_length": lengths / count}
        if self.wins:
            result["win_rate"] = rest.pop(0) / count
        for name, value, episodes in zip(self.metrics, rest[0::2], rest[1::2], strict=True):
            result[name] = value / episodes if episodes else float("nan")
        return result


class Collector:
    """Steps ``env`` with ``agent``'s policy into ``buffer``: ``act`` (default ``agent.act``) and ``step`` (default
    ``env.step``) are the callables of the loop, and ``seed`` seeds the first reset. Without a buffer it only drives
    the env (evaluation uses ``act`` and ``advance``)."""

    def __init__(
        self,
        env: VecEnv,
        agent,
        buffer=None,
        act: Callable | None = None,
        step: Callable | None = None,
        seed: int | None = None,
    ):
        self.env, self.agent, self.buffer = env, agent, buffer
        self.act_fn = agent.act if act is None else act
        self.step_fn = env.step if step is None else step
        self.stats = EpisodeStats(env.device, metrics=env.episode_metric_names)
        # A collector-owned copy: the env overwrites its own observation buffer on every step.
        self.obs = env.reset(seed=seed).clone()
        # An asymmetric critic's observations, where the buffer stores them (and so the env must offer them).
        self.critic_obs = None
        if "critic_obs" in getattr(buffer, "fields", ()):  # a buffer names the fields it stores
            if env.critic_obs is None:
                raise ValueError(f"{agent.name} wants a privileged critic observation, but {env} offers none")
            self.critic_obs = env.critic_obs.clone()

    @torch.no_grad()
    def collect(self, steps: int) -> None:
        """Run ``steps`` batched env steps with the agent's policy, writing each transition to the buffer."""
        self._collect(steps, self.step_fn)

    def _collect(self, steps: int, step: Callable) -> None:
        for _ in range(steps):
            actions, extras = self.act()
            next_obs, reward, terminated, truncated, info = step(actions)
            fields = self.fields(info)
            self.buffer.add(self.obs, actions, reward, terminated, truncated, info["final_obs"], **fields, **extras)
            self.stats.record(info)
            self.advance(next_obs, info)

    # -- the hooks a multi-agent collector overrides ------------------------------------------------------------

    def act(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The actions for the current observations, and the extras the agent stores with them."""
        return self.act_fn(self.obs)

    def fields(self, info: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What the buffer stores besides the transition and the agent's extras: an asymmetric critic's observations
        before and after the step."""
        if self.critic_obs is None:
            return {}
        return {"critic_obs": self.critic_obs, "next_critic_obs": info["final_critic_obs"]}

    def advance(self, next_obs: torch.Tensor, info: dict[str, torch.Tensor]) -> None:
        """Move on to the observations after the step (the first of new episodes where episodes ended)."""
        self.obs.copy_(next_obs)
        if self.critic_obs is not None:
            self.critic_obs.copy_(info["critic_obs"])

    def state_dict(self) -> dict[str, torch.Tensor]:
        state = {"obs": self.obs, "stats": self.stats.totals}
        if self.critic_obs is not None:
            state["critic_obs"] = self.critic_obs
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.obs.copy_(state["obs"])
        self.stats.totals.copy_(state["stats"])
        if self.critic_obs is not None:
            self.critic_obs.copy_(state["critic_obs"])
