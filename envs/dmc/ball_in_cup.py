"""dm_control's ball_in_cup domain (``suite/ball_in_cup.py``): catch.

Observation: ``position`` (qpos: the cup's x and z slides, then the ball's), ``velocity`` (qvel). Reward: 1 while
the ball is in the cup (``in_target``: on both x and z, ``|target site - ball|`` below the target box's half-size
minus the ball's radius, from ``site_xpos`` and ``xpos``), else 0. Each episode starts with the cup at rest at its
origin and the ball's slides uniform in ``[-.2, .2)`` (x) and ``[.2, .5)`` (z), redrawn until nothing touches
(``ncon == 0`` after ``after_reset``), at rest. 20 s at ``_CONTROL_TIMESTEP = 0.02`` (ten 0.002 s physics steps):
1,000 steps.
"""

from __future__ import annotations

import mujoco
import torch

from rl_suite.envs.dmc.base import DMCTask, as_tensor, name_id, read_model, read_rows, write_rows

BALL_X_RANGE = (-0.2, 0.2)  # dm_control's initialize_episode: qpos['ball_x'] = uniform(-.2, .2)
BALL_Z_RANGE = (0.2, 0.5)  # qpos['ball_z'] = uniform(.2, .5)


class Catch(DMCTask):
    domain = "ball_in_cup"
    time_limit = 20.0
    control_timestep = 0.02
    fields = ("xpos", "site_xpos")
    observation_keys = ("position", "velocity")

    def model_xml(self) -> str:
        return read_model("ball_in_cup.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        joint = mujoco.mjtObj.mjOBJ_JOINT
        self._ball_x = int(model.jnt_qposadr[name_id(model, joint, "ball_x")])
        self._ball_z = int(model.jnt_qposadr[name_id(model, joint, "ball_z")])
        self._target = name_id(model, mujoco.mjtObj.mjOBJ_SITE, "target")
        self._ball = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "ball")
        ball_size = model.geom_size[name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "ball"), 0]
        self._inner_half_size = as_tensor(model.site_size[self._target, [0, 2]] - ball_size, physics)

    def initialize_episode(self, physics, selection, rng):
        def draw(pending):  # dm_control's "while penetrating" body
            qpos = read_rows(physics.qpos, pending)
            qpos[:, self._ball_x] = pending.uniform(rng, *BALL_X_RANGE, 1, torch.float64)[:, 0].to(qpos)
            qpos[:, self._ball_z] = pending.uniform(rng, *BALL_Z_RANGE, 1, torch.float64)[:, 0].to(qpos)
            write_rows(physics.qpos, pending, qpos)

        self.redraw_while_in_contact(physics, selection, draw)

    def observe(self, rows):
        return [rows.qpos, rows.qvel]

    def reward(self, rows):
        ball_to_target = rows.site_xpos[:, self._target, 0::2] - rows.xpos[:, self._ball, 0::2]  # x and z
        return (ball_to_target.abs() < self._inner_half_size).all(dim=1).to(rows.xpos.dtype)


TASKS = {"catch": Catch}
