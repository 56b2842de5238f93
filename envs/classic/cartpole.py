"""CartPole-v1 as batched torch, with gymnasium's dynamics (Barto, Sutton & Anderson, 1983; Euler steps)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection, VecEnv
from rl_suite.envs.classic.common import FlatState


class CartPole(VecEnv):
    """Push a cart left or right to keep a pole upright.

    State (as gymnasium's ``env.unwrapped.state``): ``[x, x_dot, theta, theta_dot]``; the observation is the
    state. Reward 1 per step (with ``sutton_barto_reward``: -1 on termination, else 0). Terminates when
    ``|x| > 2.4`` or ``|theta| > 12 degrees``; truncated after 500 steps.
    """

    reward_threshold = 475.0

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
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        max_episode_steps: int | None = 500,
        sutton_barto_reward: bool = False,
        dtype: torch.dtype = torch.float32,
        **contract_options,
    ):
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf], dtype=np.float32)
        super().__init__(
            num_envs,
            device,
            observation_space=gym.spaces.Box(-high, high, dtype=np.float32),
            action_space=gym.spaces.Discrete(2),
            max_episode_steps=max_episode_steps,
            seed=seed,
            **contract_options,
        )
        self.sutton_barto_reward = sutton_barto_reward
        self.state = FlatState(4, self.num_envs, self.device, dtype)
        self._reward.fill_(0.0 if sutton_barto_reward else 1.0)
        # Scratch buffers for the dynamics, allocated once.
        self._force, self._cos, self._sin, self._temp, self._theta_acc, self._scratch = (
            torch.empty(self.num_envs, device=self.device, dtype=dtype) for _ in range(6)
        )

    def _advance(self, actions):
        x, x_dot, theta, theta_dot = self.state.rows
        force, cos, sin, temp, theta_acc, scratch = (
            self._force,
            self._cos,
            self._sin,
            self._temp,
            self._theta_acc,
            self._scratch,
        )
        # force = +force_mag for action 1, -force_mag for action 0
        torch.mul(actions, 2.0 * self.force_mag, out=force).sub_(self.force_mag)
        torch.cos(theta, out=cos)
        torch.sin(theta, out=sin)
        # temp = (force + m_p l theta_dot^2 sin(theta)) / (m_c + m_p)
        torch.mul(theta_dot, theta_dot, out=temp).mul_(sin).mul_(self.polemass_length).add_(force)
        temp.div_(self.total_mass)
        # theta_acc = (g sin(theta) - cos(theta) temp) / (l (4/3 - m_p cos^2(theta) / (m_c + m_p)))
        torch.mul(cos, cos, out=scratch).mul_(-self.masspole / self.total_mass).add_(4.0 / 3.0).mul_(self.length)
        torch.mul(sin, self.gravity, out=theta_acc).addcmul_(cos, temp, value=-1.0).div_(scratch)
        # x_acc = temp - m_p l theta_acc cos(theta) / (m_c + m_p), kept in temp
        temp.addcmul_(theta_acc, cos, value=-self.polemass_length / self.total_mass)
        # Euler: positions advance with the old velocities
        x.add_(x_dot, alpha=self.tau)
        x_dot.add_(temp, alpha=self.tau)
        theta.add_(theta_dot, alpha=self.tau)
        theta_dot.add_(theta_acc, alpha=self.tau)

        # Terminated when |x| > x_threshold or |theta| > theta_threshold. On the CPU, comparing into a float
        # buffer and casting to bool once is about twice as fast as comparing into bool.
        torch.gt(torch.abs(x, out=scratch), self.x_threshold, out=scratch)
        torch.gt(torch.abs(theta, out=temp), self.theta_threshold, out=temp)
        terminated = self._terminated.copy_(torch.maximum(scratch, temp, out=scratch))
        if self.sutton_barto_reward:
            self._reward.copy_(terminated).neg_()
        return self._reward, terminated

    def _observe(self, out, env_ids=None):
        self.state.write_rows(out, env_ids)

    def _reset_envs(self, selection: Selection):
        self.state.reset_uniform(selection, self.rng, self.init_low, self.init_high)

    def _state_view(self):
        return self.state.rows.T
