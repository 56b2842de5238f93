"""dm_control's pendulum domain (``suite/pendulum.py``): swingup.

Observation: ``orientation`` (the pole frame's zz and xz entries), ``velocity`` (the hinge's). Reward: 1 while the
pole is within 8 degrees of upright (``tolerance(zz, (cos 8 deg, 1))``), else 0. The episode starts from a hinge
angle uniform in ``[-pi, pi)`` at rest. 20 s at the model's 0.02 s timestep: 1,000 steps.
"""

from __future__ import annotations

import math

import mujoco
import torch

from rl_suite.envs.dmc.base import DMCTask, name_id, read_model, read_rows, write_rows, xmat_component
from rl_suite.envs.dmc.rewards import tolerance

COSINE_BOUND = math.cos(math.radians(8))  # dm_control's _ANGLE_BOUND = 8 degrees


class SwingUp(DMCTask):
    domain = "pendulum"
    time_limit = 20.0
    fields = ("xmat",)
    observation_keys = ("orientation", "velocity")

    def model_xml(self) -> str:
        return read_model("pendulum.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        self._pole = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "pole")
        self._hinge = int(model.jnt_qposadr[name_id(model, mujoco.mjtObj.mjOBJ_JOINT, "hinge")])

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        qpos[:, self._hinge] = selection.uniform(rng, -math.pi, math.pi, 1, torch.float64)[:, 0].to(qpos)
        write_rows(physics.qpos, selection, qpos)

    def observe(self, rows):
        orientation = torch.stack(
            [xmat_component(rows, self._pole, "zz"), xmat_component(rows, self._pole, "xz")], dim=1
        )
        return [orientation, rows.qvel[:, self._hinge : self._hinge + 1]]

    def reward(self, rows):
        return tolerance(xmat_component(rows, self._pole, "zz"), (COSINE_BOUND, 1.0))


TASKS = {"swingup": SwingUp}
