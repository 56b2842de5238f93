"""Pendulum-v1 as batched torch, with gymnasium's dynamics, reward and initial states."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.classic.common import FlatStateEnv, stack_into
from rl_suite.envs.classic.render import GymnasiumRendering


class Pendulum(GymnasiumRendering, FlatStateEnv):
    """Swing a torque-limited pendulum up and hold it upright.

    State ``[theta, theta_dot]`` (``theta = 0`` is upright); observation ``[cos theta, sin theta, theta_dot]``.
    Reward ``-(angle_normalize(theta)^2 + 0.1 theta_dot^2 + 0.001 u^2)`` with the clipped torque ``u``.
    Never terminates; truncated after 200 steps.
    """

    state_dim = 2
    gymnasium_id = "Pendulum-v1"
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0

    def __init__(self, num_envs: int = 1, *, max_episode_steps: int | None = 200, g: float = 10.0, **options):
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        action_space = gym.spaces.Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32)
        super().__init__(num_envs, observation_space, action_space, max_episode_steps=max_episode_steps, **options)
        self.g = g
        self._init_high = torch.tensor([math.pi, 1.0], device=self.device, dtype=self.state.rows.dtype)

    def _advance(self, actions):
        theta, theta_dot = self.state.rows
        u = actions[:, 0].to(theta.dtype).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(theta + math.pi, 2 * math.pi) - math.pi  # angle_normalize
        cost = angle.square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        self._reward.copy_(cost).neg_()
        # theta_dot' = theta_dot + (3 g / (2 l) sin(theta) + 3 / (m l^2) u) dt, clipped; theta' = theta + theta_dot' dt
        theta_dot.add_((3 * self.g / (2 * self.l)) * torch.sin(theta) + (3.0 / (self.m * self.l**2)) * u, alpha=self.dt)
        theta_dot.clamp_(-self.max_speed, self.max_speed)
        theta.add_(theta_dot, alpha=self.dt)
        return self._reward, self._terminated  # never terminates

    def _observe(self, out, env_ids=None):
        theta, theta_dot = self.state.of(env_ids)
        stack_into(out, (torch.cos(theta), torch.sin(theta), theta_dot), env_ids)

    def _reset_envs(self, selection: Selection):
        self.state.reset_uniform(selection, self.rng, -self._init_high, self._init_high)
