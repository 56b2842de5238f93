"""dm_control's hopper domain (``suite/hopper.py``): stand, hop.

Observation: ``position`` (qpos without the horizontal root position ``rootx``), ``velocity`` (qvel), ``touch``
(``log1p`` of the ``touch_toe`` and ``touch_heel`` sensors: the normal contact force on the foot's two ends, from
the last physics substep, as dm_control reads them). Reward: ``standing = tolerance(height, (0.6, 2))``
(``_STAND_HEIGHT = 0.6``), the height being the torso's centre of mass above the foot's (``xipos`` z). Stand:
``standing * (4 + mean small_control) / 5`` with ``small_control = tolerance(ctrl, margin=1, value_at_margin=0,
quadratic)`` per actuator. Hop: ``standing * tolerance(speed, (2, inf), margin=1, value_at_margin=0.5, linear)``
(``_HOP_SPEED = 2``), the speed being the x component of the ``torso_subtreelinvel`` sensor. Episodes start at rest
from dm_control's ``randomize_limited_and_rotational_joints``: the root's pitch uniform in ``[-pi, pi)``, the four
limited leg hinges uniform in their ranges, the root's slides at the model's pose (the foot may start in the floor,
as dm_control's may). 20 s (``_DEFAULT_TIME_LIMIT``) at ``_CONTROL_TIMESTEP = 0.02`` s, 4 physics steps of
0.005 s each: 1,000 steps.
"""

from __future__ import annotations

import mujoco
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    name_id,
    randomize_limited_and_rotational_joints,
    read_model,
    read_rows,
    sensor_columns,
    sensor_slice,
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance

STAND_HEIGHT = 0.6  # dm_control's _STAND_HEIGHT
HOP_SPEED = 2.0  # dm_control's _HOP_SPEED


class Stand(DMCTask):
    domain = "hopper"
    time_limit = 20.0
    control_timestep = 0.02
    fields = ("xipos", "sensordata")
    observation_keys = ("position", "velocity", "touch")
    hopping = False

    def model_xml(self) -> str:
        return read_model("hopper.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        self._torso = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        self._foot = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "foot")

        self._speed = sensor_slice(model, "torso_subtreelinvel").start  # its x component
        self._touch = sensor_columns(model, physics, "touch_toe", "touch_heel")

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection).to(torch.float64)
        randomize_limited_and_rotational_joints(self.model, qpos, selection, rng)
        write_rows(physics.qpos, selection, qpos)

    def observe(self, rows):
        return [rows.qpos[:, 1:], rows.qvel, torch.log1p(rows.sensordata[:, self._touch])]

    def reward(self, rows):
        height = rows.xipos[:, self._torso, 2] - rows.xipos[:, self._foot, 2]
        standing = tolerance(height, (STAND_HEIGHT, 2.0))
        if self.hopping:
            speed = rows.sensordata[:, self._speed]
            return standing * tolerance(
                speed, (HOP_SPEED, float("inf")), margin=HOP_SPEED / 2, value_at_margin=0.5, sigmoid="linear"
            )
        small_control = tolerance(rows.ctrl, margin=1.0, value_at_margin=0.0, sigmoid="quadratic").mean(dim=1)
        return standing * (small_control + 4) / 5


class Hop(Stand):
    hopping = True


TASKS = {"stand": Stand, "hop": Hop}
