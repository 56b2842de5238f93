"""MountainCar-v0 and MountainCarContinuous-v0 as batched torch, with gymnasium's dynamics."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.classic.common import FlatState, FlatStateEnv
from rl_suite.envs.classic.render import GymnasiumRendering

MIN_POSITION, MAX_POSITION, MAX_SPEED = -1.2, 0.6, 0.07
# Initial position uniform in [-0.6, -0.4), velocity 0.
INIT_LOW, INIT_HIGH = (-0.6, 0.0), (-0.4, 0.0)


def move_car(state: FlatState, push: torch.Tensor) -> None:
    """One step of the car on the hill ``sin(3 x)``: ``v += push - 0.0025 cos(3 x)``, then clip, and stop at the
    left wall."""
    position, velocity = state.rows
    velocity.add_(push - 0.0025 * torch.cos(3 * position)).clamp_(-MAX_SPEED, MAX_SPEED)
    position.add_(velocity).clamp_(MIN_POSITION, MAX_POSITION)
    velocity.masked_fill_((position == MIN_POSITION) & (velocity < 0), 0.0)


def reached_goal(state: FlatState, goal_position: float, goal_velocity: float, out: torch.Tensor) -> torch.Tensor:
    position, velocity = state.rows
    return torch.logical_and(position >= goal_position, velocity >= goal_velocity, out=out)


class _Car(GymnasiumRendering, FlatStateEnv):
    """What both cars share: the state ``[position, velocity]``, its observation space, the goal's velocity and
    the initial states."""

    state_dim = 2

    def __init__(self, num_envs: int, action_space: gym.Space, *, goal_velocity: float, **options):
        observation_space = gym.spaces.Box(
            np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
            np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32),
            dtype=np.float32,
        )
        super().__init__(num_envs, observation_space, action_space, **options)
        self.goal_velocity = goal_velocity
        dtype = self.state.rows.dtype
        self._init_bounds = [torch.tensor(b, device=self.device, dtype=dtype) for b in (INIT_LOW, INIT_HIGH)]

    def _reset_envs(self, selection: Selection):
        self.state.reset_uniform(selection, self.rng, *self._init_bounds)


class MountainCar(_Car):
    """Drive an underpowered car up a hill by rocking it: discrete push left, none, right.

    State and observation ``[position, velocity]``. Reward -1 per step. Terminates at ``position >= 0.5``
    (and ``velocity >= goal_velocity``); truncated after 200 steps.
    """

    reward_threshold = -110.0
    gymnasium_id = "MountainCar-v0"
    force = 0.001
    goal_position = 0.5

    def __init__(
        self, num_envs: int = 1, *, max_episode_steps: int | None = 200, goal_velocity: float = 0.0, **options
    ):
        action_space = gym.spaces.Discrete(3)
        super().__init__(
            num_envs, action_space, max_episode_steps=max_episode_steps, goal_velocity=goal_velocity, **options
        )
        self._reward.fill_(-1.0)

    def _advance(self, actions):
        move_car(self.state, (actions - 1).to(self.state.rows.dtype) * self.force)
        return self._reward, reached_goal(self.state, self.goal_position, self.goal_velocity, self._terminated)


class MountainCarContinuous(_Car):
    """MountainCar with a continuous force in ``[-1, 1]``.

    Reward 100 on reaching ``position >= 0.45`` minus ``0.1 a^2`` per step, where ``a`` is the action as given
    (the force itself is clipped). Truncated after 999 steps.
    """

    reward_threshold = 90.0
    gymnasium_id = "MountainCarContinuous-v0"
    power = 0.0015
    goal_position = 0.45

    def __init__(
        self, num_envs: int = 1, *, max_episode_steps: int | None = 999, goal_velocity: float = 0.0, **options
    ):
        action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        super().__init__(
            num_envs, action_space, max_episode_steps=max_episode_steps, goal_velocity=goal_velocity, **options
        )

    def _advance(self, actions):
        action = actions[:, 0].to(self.state.rows.dtype)
        move_car(self.state, action.clamp(-1.0, 1.0) * self.power)
        terminated = reached_goal(self.state, self.goal_position, self.goal_velocity, self._terminated)
        torch.mul(terminated, 100.0, out=self._reward).sub_(0.1 * action.square())
        return self._reward, terminated
