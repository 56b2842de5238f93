"""Fallen and tumbling poses for recovery training: a reset bank (``rl_suite.envs.mujoco.reset_bank``) of states
made by dropping the robot from random orientations, as the reset-bank idea of OmniReset suggests for legged robots.

``fallen_states(robot, generator, count)`` drops each robot with its base at ``drop_height`` m, its orientation
uniform over all rotations, its joints uniform within their ranges and held there by its PD, and lets it fall and
tumble on flat ground for ``settle_s`` s; the state where it lies then (its base moved back over the origin, its
height kept) is one state of the bank. ``fallen_bank`` wraps them in a ``ResetBank`` for the task's model:

    bank = fallen_bank("quadruped", count=256, seed=0)
    env = rl_suite.make("QuadrupedVelocity-Flat-v0", fall_grace_s=3.0)
    env.use_reset_bank(bank, fraction=0.3)

With ``fall_grace_s`` (a task setting) trunk contact and tilt do not end an episode in its first seconds, which is
the time a robot started on its back has to get up.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from rl_suite.envs.mujoco.reset_bank import ResetBank
from rl_suite.envs.robots.config import RobotConfig, bind, build_model, robot_config


def fallen_states(
    robot: str | dict | RobotConfig,
    generator: torch.Generator,
    count: int,
    drop_height: float = 0.5,
    settle_s: float = 1.5,
    physics_dt: float = 0.005,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(qpos [count, nq], qvel [count, nv])`` of the robot lying where random drops left it (module docstring),
    float64. The model is the task's (``build_model``), so the states fit its reset bank."""
    robot = robot_config(robot)
    model = build_model(robot, physics_dt)
    bound = bind(robot, model)
    data = mujoco.MjData(model)
    low, high = (torch.as_tensor(bound.joint_range[:, k], dtype=torch.float64) for k in (0, 1))
    quat = torch.randn(count, 4, generator=generator, dtype=torch.float64)  # normalised: uniform over rotations
    quat /= quat.norm(dim=1, keepdim=True)
    joints = low + (high - low) * torch.rand(count, len(robot.joints), generator=generator, dtype=torch.float64)
    qpos, qvel = np.zeros((count, model.nq)), np.zeros((count, model.nv))
    steps = max(1, round(settle_s / physics_dt))
    for k in range(count):
        mujoco.mj_resetData(model, data)
        data.qpos[2] = drop_height
        data.qpos[3:7] = quat[k].numpy()
        data.qpos[bound.joint_qpos] = joints[k].numpy()
        data.ctrl[:] = joints[k].numpy()
        mujoco.mj_step(model, data, steps)
        qpos[k], qvel[k] = data.qpos, data.qvel
    qpos[:, :2] = 0.0  # over the origin: the task moves it to each episode's start point
    return torch.from_numpy(qpos), torch.from_numpy(qvel)


def fallen_bank(robot: str | dict | RobotConfig, count: int, seed: int, **drop) -> ResetBank:
    """A ``ResetBank`` of ``count`` ``fallen_states``, seeded: the same seed, the same bank."""
    config = robot_config(robot)
    physics_dt = drop.get("physics_dt", 0.005)
    model = build_model(config, physics_dt)
    return ResetBank.generate(model, lambda g, n: fallen_states(config, g, n, **drop), count, seed)
