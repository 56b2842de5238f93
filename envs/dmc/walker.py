"""dm_control's planar walker domain (``suite/walker.py``): stand, walk, run.

Observation: ``orientations`` (the ``xx`` and ``xz`` entries of every body's rotation matrix but the world's, body by
body: ``named.data.xmat[1:, ['xx', 'xz']].ravel()``), ``height`` (the torso's ``xpos`` z), ``velocity`` (qvel).
Reward: ``stand = (3 * standing + upright) / 4`` with ``standing = tolerance(height, (1.2, inf), margin=0.6)``
(``_STAND_HEIGHT = 1.2``, gaussian) and ``upright = (1 + torso zz) / 2``; walk and run multiply it by
``(5 * move + 1) / 6``, ``move = tolerance(speed, (v, inf), margin=v / 2, value_at_margin=0.5, linear)`` with
``v = 1`` (``_WALK_SPEED``) or 8 (``_RUN_SPEED``) and the speed the x component of the ``torso_subtreelinvel``
sensor. Episodes start at rest from dm_control's ``randomize_limited_and_rotational_joints``: the root's pitch uniform
in ``[-pi, pi)``, the six limited leg hinges uniform in their ranges, the root's slides at the model's pose. 25 s
(``_DEFAULT_TIME_LIMIT``) at ``_CONTROL_TIMESTEP = 0.025`` s, 10 physics steps of 0.0025 s each: 1,000 steps.
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
    sensor_slice,
    write_rows,
    xmat_component,
)
from rl_suite.envs.dmc.rewards import tolerance

STAND_HEIGHT = 1.2  # dm_control's _STAND_HEIGHT
WALK_SPEED = 1.0  # _WALK_SPEED
RUN_SPEED = 8.0  # _RUN_SPEED


class Stand(DMCTask):
    domain = "walker"
    time_limit = 25.0
    control_timestep = 0.025
    fields = ("xmat", "xpos", "sensordata")
    observation_keys = ("orientations", "height", "velocity")
    move_speed = 0.0

    def model_xml(self) -> str:
        return read_model("walker.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        self._torso = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        self._speed = sensor_slice(model, "torso_subtreelinvel").start  # its x component

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection).to(torch.float64)
        randomize_limited_and_rotational_joints(self.model, qpos, selection, rng)
        write_rows(physics.qpos, selection, qpos)

    def _torso_height(self, rows):
        return rows.xpos[:, self._torso, 2]

    def observe(self, rows):
        bodies = slice(1, None)  # every body after the world
        orientations = torch.stack([xmat_component(rows, bodies, "xx"), xmat_component(rows, bodies, "xz")], dim=2)
        return [orientations.flatten(1), self._torso_height(rows)[:, None], rows.qvel]

    def reward(self, rows):
        standing = tolerance(self._torso_height(rows), (STAND_HEIGHT, float("inf")), margin=STAND_HEIGHT / 2)
        upright = (1 + xmat_component(rows, self._torso, "zz")) / 2
        stand = (3 * standing + upright) / 4
        if self.move_speed == 0:
            return stand
        speed = rows.sensordata[:, self._speed]
        move = tolerance(
            speed, (self.move_speed, float("inf")), margin=self.move_speed / 2, value_at_margin=0.5, sigmoid="linear"
        )
        return stand * (5 * move + 1) / 6


class Walk(Stand):
    move_speed = WALK_SPEED


class Run(Stand):
    move_speed = RUN_SPEED


TASKS = {"stand": Stand, "walk": Walk, "run": Run}
