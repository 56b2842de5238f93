"""dm_control's point_mass domain (``suite/point_mass.py``): easy.

Observation: ``position`` (the two slide joints), ``velocity`` (qvel). Reward: ``near_target * small_control``, with
``near_target = tolerance(distance, (0, r), margin=r)`` (gaussian), ``r`` the target's radius (0.015 in the model),
the distance between the target's and the point mass's ``geom_xpos``, and ``small_control = (4 + mean(tolerance(u,
margin=1, value_at_margin=0, quadratic))) / 5``. The episode starts from both slides uniform in their ±0.29 range
(``randomize_limited_and_rotational_joints``), at rest; the target stays at the centre. 20 s at the model's 0.02 s
timestep: 1,000 steps. (dm_control's ``hard`` task, with randomised actuator gains, is not registered.)
"""

from __future__ import annotations

import mujoco

from rl_suite.envs.dmc.base import (
    DMCTask,
    name_id,
    randomize_limited_and_rotational_joints,
    read_model,
    read_rows,
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance


class Easy(DMCTask):
    domain = "point_mass"
    time_limit = 20.0
    fields = ("geom_xpos",)
    observation_keys = ("position", "velocity")

    def model_xml(self) -> str:
        return read_model("point_mass.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        self._target = name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "target")
        self._mass = name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "pointmass")
        self._target_size = float(model.geom_size[self._target, 0])

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        randomize_limited_and_rotational_joints(self.model, qpos, selection, rng)
        write_rows(physics.qpos, selection, qpos)

    def observe(self, rows):
        return [rows.qpos, rows.qvel]

    def reward(self, rows):
        distance = (rows.geom_xpos[:, self._target] - rows.geom_xpos[:, self._mass]).norm(dim=1)
        near_target = tolerance(distance, (0.0, self._target_size), margin=self._target_size)
        control = tolerance(rows.ctrl, margin=1, value_at_margin=0, sigmoid="quadratic").mean(dim=1)
        return near_target * (control + 4) / 5


TASKS = {"easy": Easy}
