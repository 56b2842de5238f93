"""dm_control's reacher domain (``suite/reacher.py``): easy, hard.

Observation: ``position`` (the shoulder and wrist angles), ``to_target`` (the target's x, y minus the finger's, from
``geom_xpos``), ``velocity`` (qvel). Reward: 1 while the finger is within the sum of the target's and the finger's
radii of the target (``tolerance(distance, (0, radii))``), else 0; the target's radius is the task's
(``_BIG_TARGET = .05`` for easy, ``_SMALL_TARGET = .015`` for hard), the finger's 0.01. Each episode starts with the
shoulder uniform in ``[-pi, pi)``, the wrist uniform in its ±160 degree range, at rest, and the target at an angle
uniform in ``[0, 2 pi)`` and a radius uniform in ``[.05, .20)`` from the centre (``x = r sin``, ``y = r cos``).
20 s at the model's 0.02 s timestep: 1,000 steps.

Task state: ``[x, y]``, the target's position (dm_control writes it into the model, ``geom_pos['target']``; here
each environment has its own).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import mujoco
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    name_id,
    randomize_limited_and_rotational_joints,
    read_model,
    read_rows,
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance

BIG_TARGET = 0.05  # dm_control's _BIG_TARGET (easy)
SMALL_TARGET = 0.015  # _SMALL_TARGET (hard)
TARGET_RADIUS_RANGE = (0.05, 0.20)  # the target's distance from the centre, uniform


class Easy(DMCTask):
    domain = "reacher"
    time_limit = 20.0
    fields = ("geom_xpos",)
    observation_keys = ("position", "to_target", "velocity")
    task_state_size = 2
    target_size = BIG_TARGET

    def model_xml(self) -> str:
        # dm_control writes geom_size['target', 0] = target_size at every episode start, the same value each time:
        # the model's own size here. The target is a world geom and contacts are disabled, so nothing else changes.
        root = ET.fromstring(read_model("reacher.xml"))
        target = root.find(".//geom[@name='target']")
        target.set("size", repr(self.target_size))
        return ET.tostring(root, encoding="unicode")

    def bind(self, model, physics):
        super().bind(model, physics)
        self._target = name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "target")
        self._finger = name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "finger")
        self._radii = float(model.geom_size[self._target, 0] + model.geom_size[self._finger, 0])
        # [N, ngeom, 3]: each environment's target. Plain motors (no bias forces, no activations): after_reset's
        # mj_forward runs with actuation (reset_actuation's default here, and what the CPU backend allows with
        # per-environment model fields), the same numbers as dm_control's unactuated one at zero controls.
        self._geom_pos = physics.model_field("geom_pos")

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        randomize_limited_and_rotational_joints(self.model, qpos, selection, rng)
        write_rows(physics.qpos, selection, qpos)
        angle = selection.uniform(rng, 0.0, 2 * math.pi, 1, torch.float64)[:, 0]
        radius = selection.uniform(rng, *TARGET_RADIUS_RANGE, 1, torch.float64)[:, 0]
        self.set_task_state(torch.stack([radius * torch.sin(angle), radius * torch.cos(angle)], dim=1), selection)

    def _to_target(self, rows):
        return rows.geom_xpos[:, self._target, :2] - rows.geom_xpos[:, self._finger, :2]

    def observe(self, rows):
        return [rows.qpos, self._to_target(rows), rows.qvel]

    def reward(self, rows):
        return tolerance(self._to_target(rows).norm(dim=1), (0.0, self._radii))

    def get_task_state(self):
        return self._geom_pos[:, self._target, :2]

    def set_task_state(self, values, selection):
        geom_pos = read_rows(self._geom_pos, selection)
        geom_pos[:, self._target, :2] = values.to(geom_pos)
        write_rows(self._geom_pos, selection, geom_pos)

    def task_state_dict(self):
        return {"geom_pos": self._geom_pos}


class Hard(Easy):
    target_size = SMALL_TARGET


TASKS = {"easy": Easy, "hard": Hard}
