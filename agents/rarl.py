"""RARL: robust adversarial reinforcement learning (Pinto et al., 2017), with PPO for both players.

A protagonist learns the task while an adversary pushes it (``AdversarialVecEnv``: forces on chosen bodies, built
by the MuJoCo tasks' ``adversary_force`` keyword). The game is zero-sum: the adversary's reward is the negative of
the protagonist's. Each iteration, for a rollout of T steps from N environments:

    1. both act at every step: the protagonist's action a_t ~ pi(.|s_t) and the adversary's force u_t ~ mu(.|s_t)
       go to the env together, which returns the task's reward r_t;
    2. the protagonist's PPO update maximises the return of r_t, with mu held fixed;
    3. the adversary's PPO update maximises the return of -r_t, with pi held fixed (and its own critic).

RARL alternates the players over separate rollouts; here both learn from the same rollout, each against the other's
behaviour policy of that rollout: half the samples for the same game. Both players see the task's observation.

Acting deterministically (evaluation, export, deployment) is the protagonist alone: the env then applies no force.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch

from rl_suite.agent import Agent
from rl_suite.agents.ppo import PPO, PPOConfig
from rl_suite.config import setting


@dataclasses.dataclass(frozen=True)
class RARLConfig(PPOConfig):
    """The protagonist's PPO settings (every PPO field), and the adversary's differences."""

    adversary_dim: int = setting(0, at_least=0)
    """Components of the adversary's action (one per pushed body and axis); ``Agent.for_env`` reads it from the
    env's ``adversary_action_space`` (the default 0, left unset, is refused when the agent is built)."""
    adversary_lr: float | None = setting(None, above=0)
    """The adversary's learning rate; ``None``: the protagonist's."""
    adversary_init_log_std: float = 0.0
    """Initial log standard deviation of the adversary's Gaussian forces (in units of the maximum force)."""


class PairedRollout:
    """The collector's one buffer, holding the two players' rollouts: each gets the observations and its own
    actions; the adversary gets the negated reward."""

    def __init__(self, protagonist: PPO, adversary: PPO, num_envs: int, protagonist_dim: int):
        self.protagonist, self.adversary = protagonist.make_buffer(num_envs), adversary.make_buffer(num_envs)
        self._split = protagonist_dim

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> None:
        a = self._split
        mine = {key.split(".", 1)[1]: value for key, value in extras.items() if key.startswith("protagonist.")}
        theirs = {key.split(".", 1)[1]: value for key, value in extras.items() if key.startswith("adversary.")}
        self.protagonist.add(obs, actions[:, :a], reward, terminated, truncated, next_obs, **mine)
        self.adversary.add(obs, actions[:, a:], -reward, terminated, truncated, next_obs, **theirs)

    def state_dict(self) -> dict:
        return {"protagonist": self.protagonist.state_dict(), "adversary": self.adversary.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.protagonist.load_state_dict(state["protagonist"])
        self.adversary.load_state_dict(state["adversary"])


class RARL(Agent):
    name = "rarl"
    Config = RARLConfig
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config: RARLConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c = self.config
        if c.adversary_dim <= 0:
            raise ValueError(
                "rarl needs an env with an adversary: make it with adversary_force=<newtons> (MuJoCo tasks), "
                "e.g. --set env_kwargs='{\"adversary_force\": 20}'"
            )
        ppo = {field.name: getattr(c, field.name) for field in dataclasses.fields(PPOConfig)}
        self.protagonist = PPO(observation_space, action_space, PPOConfig(**ppo), device)
        adversary_settings = {
            **ppo,
            "lr": c.lr if c.adversary_lr is None else c.adversary_lr,
            "init_log_std": c.adversary_init_log_std,
        }
        self.adversary_space = gym.spaces.Box(-1.0, 1.0, (c.adversary_dim,), np.float32)
        self.adversary = PPO(observation_space, self.adversary_space, PPOConfig(**adversary_settings), device)
        self.players = {"protagonist": self.protagonist, "adversary": self.adversary}
        for player, agent in self.players.items():
            self.modules.update({f"{player}.{name}": module for name, module in agent.modules.items()})
            self.optimizers.update({f"{player}.{name}": opt for name, opt in agent.optimizers.items()})

    @classmethod
    def for_env(cls, env, config=None, device="cpu", **overrides) -> RARL:
        space = getattr(env, "adversary_action_space", None)
        if space is None:
            return cls(env.observation_space, env.action_space, config, device, **overrides)  # refused in __init__
        return cls(env.observation_space, env.action_space, config, device, adversary_dim=space.shape[0], **overrides)

    @property
    def steps_per_iteration(self) -> int:
        return self.config.n_steps

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> PairedRollout:
        return PairedRollout(self.protagonist, self.adversary, num_envs, self.action_space.shape[0])

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        action, extras = self.protagonist.act(obs, deterministic)
        if deterministic:
            return action, {}  # the task without the adversary
        force, adversary_extras = self.adversary.act(obs)
        extras = {f"protagonist.{k}": v for k, v in extras.items()}
        extras.update({f"adversary.{k}": v for k, v in adversary_extras.items()})
        return torch.cat([action, force], dim=1), extras

    def inference_policy(self):
        """The protagonist's policy alone: the adversary exists only in training."""
        return self.protagonist.inference_policy()

    def update(self, buffer: PairedRollout, progress: float = 0.0) -> dict[str, torch.Tensor]:
        # 2. and 3.: each player's PPO on its own half of the rollout (the other's policy was fixed while acting)
        metrics = self.protagonist.update(buffer.protagonist, progress)
        metrics.update({f"adversary_{k}": v for k, v in self.adversary.update(buffer.adversary, progress).items()})
        return metrics

    def counters(self):
        return {player: agent.counters() for player, agent in self.players.items()}

    def load_counters(self, counters) -> None:
        for player, agent in self.players.items():
            agent.load_counters(counters[player])
