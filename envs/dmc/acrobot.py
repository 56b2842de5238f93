"""dm_control's acrobot domain (``suite/acrobot.py``): swingup, swingup_sparse.

Observation: ``orientations`` (the x then the z component of the z-axes of ``upper_arm`` and ``lower_arm``:
``xmat[[upper_arm, lower_arm], 'xz']`` then ``[..., 'zz']``, the poles' sines and cosines), ``velocity`` (qvel,
shoulder and elbow). Reward: ``tolerance(distance from the site 'tip' to the site 'target', (0, target radius),
margin)`` with the target's radius the model's ``site_size['target', 0]`` (0.2), ``margin=1`` (gaussian) for the
smooth task and 0 (an indicator) for the sparse one. Episodes start at rest with shoulder and elbow uniform in
``[-pi, pi)``. 10 s (``_DEFAULT_TIME_LIMIT``) at the model's 0.01 s timestep (RK4, no constraints): 1,000 steps.
"""

from __future__ import annotations

import math

import mujoco
import torch

from rl_suite.envs.dmc.base import DMCTask, index_tensor, name_id, read_model, read_rows, write_rows, xmat_component
from rl_suite.envs.dmc.rewards import tolerance


class SwingUp(DMCTask):
    domain = "acrobot"
    time_limit = 10.0
    fields = ("xmat", "site_xpos")
    observation_keys = ("orientations", "velocity")
    sparse = False

    def model_xml(self) -> str:
        return read_model("acrobot.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        arms = [name_id(model, mujoco.mjtObj.mjOBJ_BODY, name) for name in ("upper_arm", "lower_arm")]
        self._arms = index_tensor(arms, physics)
        joints = [int(model.jnt_qposadr[name_id(model, mujoco.mjtObj.mjOBJ_JOINT, n)]) for n in ("shoulder", "elbow")]
        self._joints = index_tensor(joints, physics)
        self._tip = name_id(model, mujoco.mjtObj.mjOBJ_SITE, "tip")
        self._target = name_id(model, mujoco.mjtObj.mjOBJ_SITE, "target")
        self._target_radius = float(model.site_size[self._target, 0])

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        qpos[:, self._joints] = selection.uniform(rng, -math.pi, math.pi, 2, torch.float64).to(qpos)
        write_rows(physics.qpos, selection, qpos)

    def observe(self, rows):
        horizontal = xmat_component(rows, self._arms, "xz")
        vertical = xmat_component(rows, self._arms, "zz")
        return [torch.cat([horizontal, vertical], dim=1), rows.qvel]

    def reward(self, rows):
        distance = (rows.site_xpos[:, self._target] - rows.site_xpos[:, self._tip]).norm(dim=1)
        return tolerance(distance, (0.0, self._target_radius), margin=0.0 if self.sparse else 1.0)


class SwingUpSparse(SwingUp):
    sparse = True


TASKS = {"swingup": SwingUp, "swingup_sparse": SwingUpSparse}
