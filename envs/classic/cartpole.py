"""CartPole-v1 as batched torch, with gymnasium's dynamics (Barto, Sutton & Anderson, 1983; Euler steps)."""

from __future__ import annotations

import functools
import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.classic.common import FlatStateEnv
from rl_suite.envs.classic.render import GymnasiumRendering


class CartPole(GymnasiumRendering, FlatStateEnv):
    """Push a cart left or right to keep a pole upright.

    State (as gymnasium's ``env.unwrapped.state``): ``[x, x_dot, theta, theta_dot]``; the observation is the
    state. Reward 1 per step (with ``sutton_barto_reward``: -1 on termination, else 0). Terminates when
    ``|x| > 2.4`` or ``|theta| > 12 degrees``; truncated after 500 steps.
    """

    reward_threshold = 475.0
    state_dim = 4
    gymnasium_id = "CartPole-v1"

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds per step
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    init_low, init_high = -0.05, 0.05

    def __init__(
        self, num_envs: int = 1, *, max_episode_steps: int | None = 500, sutton_barto_reward: bool = False, **options
    ):
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], dtype=np.float32)
        observation_space, action_space = gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(2)
        super().__init__(num_envs, observation_space, action_space, max_episode_steps=max_episode_steps, **options)
        self.sutton_barto_reward = sutton_barto_reward
        # The state rows are (x, x_dot, theta, theta_dot): viewed as [coordinate, (position, velocity), N], the
        # positions (x, theta) and velocities (x_dot, theta_dot) are [2, N] views, so Euler steps both in one op.
        coordinates = self.state.rows.view(2, 2, self.num_envs)
        self._positions, self._velocities = coordinates[:, 0], coordinates[:, 1]
        self._reward.fill_(0.0 if sutton_barto_reward else 1.0)
        dtype = self.state.rows.dtype
        new = functools.partial(torch.empty, device=self.device, dtype=dtype)
        self._acceleration = new(2, self.num_envs)  # (x_acc, theta_acc)
        self._force, self._cos, self._sin, self._denominator = (new(self.num_envs) for _ in range(4))
        self._beyond = new(2, self.num_envs)
        self._fell = new(self.num_envs)
        self._force_of_action = torch.tensor([-self.force_mag, self.force_mag], device=self.device, dtype=dtype)
        self._limits = torch.tensor([[self.x_threshold], [self.theta_threshold]], device=self.device, dtype=dtype)

    def _advance(self, actions):
        theta, theta_dot = self._positions[1], self._velocities[1]
        x_acc, theta_acc = self._acceleration
        force, cos, sin, denominator = self._force, self._cos, self._sin, self._denominator
        # Each op costs about the same at small and middling N, so the dynamics are written in as few as possible.
        torch.index_select(self._force_of_action, 0, actions.long(), out=force)  # -force_mag or +force_mag
        torch.cos(theta, out=cos)
        torch.sin(theta, out=sin)
        # temp = (force + m_p l theta_dot^2 sin(theta)) / (m_c + m_p), kept in x_acc
        torch.mul(theta_dot, theta_dot, out=x_acc)
        torch.addcmul(force, x_acc, sin, value=self.polemass_length, out=x_acc).div_(self.total_mass)
        # theta_acc = (g sin(theta) - cos(theta) temp) / (l (4/3 - m_p cos^2(theta) / (m_c + m_p)))
        torch.mul(cos, cos, out=denominator).mul_(-self.masspole * self.length / self.total_mass)
        denominator.add_(4.0 / 3.0 * self.length)
        torch.mul(sin, self.gravity, out=theta_acc).addcmul_(cos, x_acc, value=-1.0).div_(denominator)
        # x_acc = temp - m_p l theta_acc cos(theta) / (m_c + m_p)
        x_acc.addcmul_(theta_acc, cos, value=-self.polemass_length / self.total_mass)
        # Euler: positions advance with the old velocities, then velocities with the accelerations.
        self._positions.add_(self._velocities, alpha=self.tau)
        self._velocities.add_(self._acceleration, alpha=self.tau)

        # Terminated when |x| > x_threshold or |theta| > theta_threshold. On the CPU, comparing into a float
        # buffer and casting to bool once is about twice as fast as comparing into bool.
        torch.gt(torch.abs(self._positions, out=self._beyond), self._limits, out=self._beyond)
        terminated = self._terminated.copy_(torch.amax(self._beyond, dim=0, out=self._fell))
        if self.sutton_barto_reward:
            self._reward.copy_(terminated).neg_()
        return self._reward, terminated

    def _reset_envs(self, selection: Selection):
        self.state.reset_uniform(selection, self.rng, self.init_low, self.init_high)
