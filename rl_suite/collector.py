"""The collector: drives a ``VecEnv`` with an agent's policy and writes every transition into the agent's buffer.

The same collector serves every agent; what differs is the buffer (a ``[T, N]`` rollout or a replay ring). Episode
statistics accumulate as device tensors and are read, with one host sync, only when the runner logs.
"""

from __future__ import annotations

import torch

from rl_suite.env import VecEnv


class EpisodeStats:
    """Sums over the episodes finished since the last ``read``: count, return, length and, for tasks with a winner
    (``wins=True``, ``info["won"]``), wins."""

    def __init__(self, device: torch.device, wins: bool = False):
        self.wins = wins
        self.totals = torch.zeros(4 if wins else 3, device=device, dtype=torch.float64)

    def record(self, info: dict[str, torch.Tensor]) -> None:
        done = info["done"].to(torch.float64)
        returns = info["episode_return"].to(torch.float64)
        sums = [done.sum(), returns.sum(), info["episode_length"].sum()]
        if self.wins:
            sums.append(info["won"].sum())
        self.totals += torch.stack(sums)

    def read(self) -> dict[str, float] | None:
        """Mean return and length (and the win rate) of the finished episodes (``None`` if none finished), and
        restart the sums."""
        count, returns, lengths, *wins = self.totals.tolist()
        self.totals.zero_()
        if count == 0:
            return None
        result = {"episodes": count, "episode_return": returns / count, "episode_length": lengths / count}
        if self.wins:
            result["win_rate"] = wins[0] / count
        return result


class Collector:
    def __init__(self, env: VecEnv, agent, buffer):
        self.env, self.agent, self.buffer = env, agent, buffer
        self.stats = EpisodeStats(env.device)
        # A collector-owned copy: the env overwrites its own observation buffer on every step.
        self.obs = env.reset().clone()

    @torch.no_grad()
    def collect(self, steps: int) -> None:
        """Run ``steps`` batched env steps with the agent's policy, writing each transition to the buffer."""
        for _ in range(steps):
            actions, extras = self.agent.act(self.obs)
            next_obs, reward, terminated, truncated, info = self.env.step(actions)
            self.buffer.add(self.obs, actions, reward, terminated, truncated, info["final_obs"], **extras)
            self.stats.record(info)
            self.obs.copy_(next_obs)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"obs": self.obs, "stats": self.stats.totals}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.obs.copy_(state["obs"])
        self.stats.totals.copy_(state["stats"])
