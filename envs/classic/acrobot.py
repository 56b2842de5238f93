"""Acrobot-v1 as batched torch, with gymnasium's dynamics ("book" variant, one RK4 step of 0.2 s)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.classic.common import FlatStateEnv, stack_into
from rl_suite.envs.classic.render import GymnasiumRendering


def wrap(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Shift ``x`` by whole periods into ``[low, high]``, as gymnasium's loop of subtractions does."""
    period = high - low
    x = torch.where(x > high, x - period * torch.ceil((x - high) / period), x)
    return torch.where(x < low, x + period * torch.ceil((low - x) / period), x)


class Acrobot(GymnasiumRendering, FlatStateEnv):
    """Swing the tip of a two-link pendulum, actuated at the elbow, above a line.

    State ``[theta1, theta2, dtheta1, dtheta2]``; observation
    ``[cos theta1, sin theta1, cos theta2, sin theta2, dtheta1, dtheta2]``. Torque in ``{-1, 0, +1}``.
    Reward -1 per step, 0 on the terminating step. Terminates when ``-cos(theta1) - cos(theta1 + theta2) > 1``;
    truncated after 500 steps.
    """

    reward_threshold = -100.0
    state_dim = 4
    gymnasium_id = "Acrobot-v1"

    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = 1.0
    link_mass_2 = 1.0
    link_com_pos_1 = 0.5
    link_com_pos_2 = 0.5
    link_moi = 1.0
    max_vel_1 = 4 * math.pi
    max_vel_2 = 9 * math.pi
    gravity = 9.8

    def __init__(
        self, num_envs: int = 1, *, max_episode_steps: int | None = 500, torque_noise_max: float = 0.0, **options
    ):
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], dtype=np.float32)
        observation_space, action_space = gym.spaces.Box(-high, high, dtype=np.float32), gym.spaces.Discrete(3)
        super().__init__(num_envs, observation_space, action_space, max_episode_steps=max_episode_steps, **options)
        self.torque_noise_max = torque_noise_max

    def _derivatives(self, theta1, theta2, dtheta1, dtheta2, torque):
        """Equations of motion (Sutton & Barto's book version): returns the time derivative of the state."""
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, i1, i2, g = self.link_com_pos_1, self.link_com_pos_2, self.link_moi, self.link_moi, self.gravity
        cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos2) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos2) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin2 - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2))

    def _advance(self, actions):
        s = self.state.rows
        torque = actions.to(s.dtype) - 1.0  # actions 0, 1, 2 -> torques -1, 0, +1
        if self.torque_noise_max > 0:
            noise = self.rng.uniform(
                -self.torque_noise_max, self.torque_noise_max, 1, env_ids=self._all_envs.ids, dtype=s.dtype
            )
            torque = torque + noise[:, 0]
        # One classical Runge-Kutta step of length dt; the torque is held constant over it.
        half = self.dt / 2.0
        k1 = self._derivatives(*s, torque)
        k2 = self._derivatives(*(s + half * k1), torque)
        k3 = self._derivatives(*(s + half * k2), torque)
        k4 = self._derivatives(*(s + self.dt * k3), torque)
        new = s + self.dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        s[0] = wrap(new[0], -math.pi, math.pi)
        s[1] = wrap(new[1], -math.pi, math.pi)
        s[2] = new[2].clamp(-self.max_vel_1, self.max_vel_1)
        s[3] = new[3].clamp(-self.max_vel_2, self.max_vel_2)
        terminated = torch.gt(-torch.cos(s[0]) - torch.cos(s[1] + s[0]), 1.0, out=self._terminated)
        self._reward.copy_(terminated).sub_(1.0)  # -1, or 0 when terminated
        return self._reward, terminated

    def _observe(self, out, env_ids=None):
        theta1, theta2, dtheta1, dtheta2 = self.state.of(env_ids)
        stack_into(
            out, (torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), dtheta1, dtheta2), env_ids
        )

    def _reset_envs(self, selection: Selection):
        self.state.reset_uniform(selection, self.rng, -0.1, 0.1)
