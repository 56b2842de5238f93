"""The shared core of the single-agent off-policy agents (SAC, FlashSAC), as ``onpolicy.py`` is the on-policy ones':
the replay settings each of them has, and the bookkeeping around their updates, so that an agent's file holds its
networks and losses.

- ``OffPolicyConfig``: replay capacity, batch, discount, target rate, n-step returns, the random warm-up and how many
  updates each collected step earns. An agent's config derives from it and redeclares a field only to change its
  default (the range and the docstring stay the base's: ``rl_suite.config.field_limits``).
- ``OffPolicyAgent``: counts the warm-up's env steps, makes the replay buffer (with the privileged observation where
  the agent's critics take it), and turns collected steps into whole updates, carrying fractions over
  (``updates_owed``); its counters go into checkpoints.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rl_suite.agent import Agent
from rl_suite.buffers import ReplayBuffer, owed_updates, transition_spec
from rl_suite.config import setting


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    buffer_size: int = setting(1_000_000, at_least=1)
    """Replay capacity in transitions (all environments together)."""
    batch_size: int = setting(256, at_least=1)
    """Transitions per gradient update."""
    gamma: float = setting(0.99, at_least=0, at_most=1)
    """Discount factor."""
    tau: float = setting(0.005, above=0, at_most=1)
    """Soft target update rate."""
    n_step: int = setting(1, at_least=1)
    """Length of the n-step returns sampled from the replay buffer."""
    learning_starts: int = setting(5_000, at_least=0)
    """Env steps (all environments together) of uniformly random actions before learning starts."""
    steps_per_iteration: int = setting(1, at_least=1)
    """Batched env steps collected between rounds of updates."""
    updates_per_transition: float = setting(1.0, above=0)
    """Critic updates per collected transition: with N environments each batched step brings N transitions, and so N
    times this many updates."""
    updates_per_env_step: float = setting(0.0, at_least=0)
    """Above 0, this replaces ``updates_per_transition``: critic updates per batched env step, whatever N."""


def updates_per_step(config: OffPolicyConfig, num_envs: int) -> float:
    """Gradient updates per batched env step of ``num_envs`` environments: ``updates_per_env_step`` where it is above
    0, else ``updates_per_transition`` for each of the step's ``num_envs`` transitions."""
    if config.updates_per_env_step > 0:
        return config.updates_per_env_step
    return config.updates_per_transition * num_envs


class OffPolicyAgent(Agent):
    """An agent that learns from a replay buffer: the subclass builds its networks (and ``critic_observation_space``,
    from ``privileged_critic_space()``), acts, and makes ``updates_owed(buffer)`` updates in ``update``."""

    config: OffPolicyConfig

    def __init__(self, observation_space, action_space, config=None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        self.critic_observation_space = None  # the subclass sets it where its critics take the privileged observation
        self.env_steps_seen = 0  # counts the random warm-up
        self.update_credit = 0.0  # fractional updates carried over between iterations
        self.updates = 0
        self.skipped_updates = 0

    @property
    def steps_per_iteration(self) -> int:
        return self.config.steps_per_iteration

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> ReplayBuffer:
        extras = {}
        if self.critic_observation_space is not None:  # the collector fills them (rl_suite/collector.py)
            shape = (tuple(self.critic_observation_space.shape), torch.float32)
            extras = {"critic_obs": shape, "next_critic_obs": shape}
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, torch.float32, extras)
        c = self.config
        return ReplayBuffer(c.buffer_size, num_envs, spec, self.device, n_step=c.n_step, gamma=c.gamma)

    def warming_up(self) -> bool:
        """Still in the random warm-up: fewer than ``learning_starts`` env steps acted."""
        return self.env_steps_seen < self.config.learning_starts

    def updates_owed(self, buffer: ReplayBuffer) -> int:
        """The whole updates that the ``steps_per_iteration`` batched steps just collected into ``buffer`` earned,
        with the fraction left from earlier iterations; the new fraction carries over."""
        earned = updates_per_step(self.config, buffer.num_envs) * self.config.steps_per_iteration
        updates, self.update_credit = owed_updates(self.update_credit, earned)
        return updates

    def counters(self) -> dict[str, Any]:
        return {
            "env_steps_seen": self.env_steps_seen,
            "update_credit": self.update_credit,
            "updates": self.updates,
            "skipped_updates": self.skipped_updates,
        }
