"""A small multi-agent task for testing the contract and the learners without a simulator's cost."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.multiagent import MultiAgentVecEnv


class Rendezvous(MultiAgentVecEnv):
    """``A`` agents see a shared target ``k`` in ``0..K-1`` (one-hot) and the step; all are rewarded by the fraction
    of living agents whose action is ``k + 1``. The target starts random and moves to ``k + 1 mod K`` each step.

    Actions: 0 is the no-op, the only action of a dead agent; ``1..K`` name a target; ``K + 1`` is never available.
    The last agent dies after ``death_step`` steps (its observation is then zeros). Episodes are truncated after
    ``max_episode_steps``. Global state: the target one-hot and the step.
    """

    def __init__(self, num_envs=1, device="cpu", seed=None, agents=3, targets=3, max_episode_steps=8, death_step=4):
        self.targets, self.death_step = targets, death_step
        super().__init__(
            num_envs,
            device,
            num_agents=agents,
            agent_observation_space=gym.spaces.Box(0.0, 1.0, (targets + 1,), np.float32),
            agent_action_space=gym.spaces.Discrete(targets + 2),
            global_state_dim=targets + 1,
            max_episode_steps=max_episode_steps,
            seed=seed,
            agent_rewards=True,
        )
        self.physics = torch.zeros(self.num_envs, 2, device=self.device)  # target, step

    def _advance(self, actions):
        target, step = self.physics[:, 0].long(), self.physics[:, 1]
        correct = (actions == (target + 1).unsqueeze(1)) & self._alive
        self._agent_reward.copy_(correct.float())
        self._reward.copy_(correct.float().sum(1) / self._alive.sum(1))
        self.physics[:, 0] = ((target + 1) % self.targets).float()
        step.add_(1)
        return self._reward, self._terminated

    def _features(self, env_ids):
        rows = self.physics if env_ids is None else self.physics[env_ids]
        onehot = torch.nn.functional.one_hot(rows[:, 0].long(), self.targets).float()
        return torch.cat((onehot, rows[:, 1:] / 10), 1)

    def _alive_rows(self, env_ids):
        rows = self.physics if env_ids is None else self.physics[env_ids]
        alive = torch.ones(rows.shape[0], self.num_agents, dtype=torch.bool, device=self.device)
        alive[:, -1] = rows[:, 1] < self.death_step
        return alive

    def _observe(self, out, env_ids=None):
        obs = self._features(env_ids).unsqueeze(1) * self._alive_rows(env_ids).unsqueeze(-1)
        self._write(out, obs, env_ids)

    def _observe_global_state(self, out, env_ids=None):
        self._write(out, self._features(env_ids), env_ids)

    def _observe_alive(self, out, env_ids=None):
        self._write(out, self._alive_rows(env_ids), env_ids)

    def _observe_available_actions(self, out, env_ids=None):
        alive = self._alive_rows(env_ids).unsqueeze(-1)
        avail = torch.zeros(*alive.shape[:2], self.targets + 2, dtype=torch.bool, device=self.device)
        avail[..., 1 : self.targets + 1] = alive
        avail[..., 0] = ~alive[..., 0]
        self._write(out, avail, env_ids)

    @staticmethod
    def _write(out, values, env_ids):
        if env_ids is None:
            out.copy_(values)
        else:
            out[env_ids] = values

    def _reset_envs(self, selection: Selection):
        target = selection.uniform(self.rng, 0.0, float(self.targets), 1, torch.float32).floor()
        values = torch.cat((target, torch.zeros_like(target)), 1)
        selection.write(self.physics, values)

    def _state_view(self):
        return self.physics
