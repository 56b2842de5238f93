"""dm_control's fish domain (``suite/fish.py``): upright, swim.

Observation: ``joint_angles`` (the seven tail and fin hinges of dm_control's ``_JOINTS``), ``upright`` (the torso
frame's zz entry), ``target`` (swim only: mouth to target in the mouth's frame) and ``velocity`` (all of qvel).
Upright's reward: ``tolerance(upright, (1, 1), margin=1)``. Swim's: ``(7 in_target + (upright + 1) / 2) / 8`` with
``in_target = tolerance(|mouth to target|, (0, r), margin=2 r)``, ``r`` the mouth's and target's radii summed. The
episode starts with the torso's orientation uniform on the 3-sphere, each of the seven hinges uniform in
``[-0.2, 0.2)``, at rest; swim draws the target uniformly in ``x, y`` in ``[-0.4, 0.4)``, ``z`` in ``[0.1, 0.3)``. 40 s
at a control timestep of 0.04 s (10 physics steps of 0.004 s): 1,000 steps. The fluid (density 5000) is MuJoCo's.

Task state (swim): the target's ``(x, y, z)`` (dm_control writes it into ``model.geom_pos['target']``; here a
per-environment model field).
"""

from __future__ import annotations

import mujoco
import torch

from rl_suite.envs.dmc.base import DMCTask, index_tensor, name_id, random_quaternion, read_model, read_rows, write_rows
from rl_suite.envs.dmc.rewards import tolerance

JOINTS = ("tail1", "tail_twist", "tail2", "finright_roll", "finright_pitch", "finleft_roll", "finleft_pitch")
JOINT_RANGE = (-0.2, 0.2)  # dm_control's initial hinge angles: uniform(-.2, .2)
TARGET_LOW, TARGET_HIGH = (-0.4, -0.4, 0.1), (0.4, 0.4, 0.3)  # Swim.initialize_episode's target box


class Upright(DMCTask):
    domain = "fish"
    time_limit = 40.0
    control_timestep = 0.04
    fields = ("xmat", "geom_xpos", "geom_xmat")
    observation_keys = ("joint_angles", "upright", "velocity")
    # dm_control's reset runs mj_forward with actuation disabled. The position actuators' bias forces make that
    # differ in the accelerations alone, and nothing read at reset is one (joint angles, frames, qvel), nor does
    # mj_forward change the state the first step starts from: with and without actuation, MuJoCo gives bit-identical
    # positions, frames, sensors and next steps (checked on 200 random starts). With actuation, swim's target can be a
    # per-environment model field, which the CPU backend's unactuated forward (on the shared model) refuses.
    reset_actuation = True
    hide_target = True  # dm_control's Upright makes the target transparent: it is irrelevant to the task

    def model_xml(self) -> str:
        return read_model("fish.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        joint = mujoco.mjtObj.mjOBJ_JOINT
        self._root = int(model.jnt_qposadr[name_id(model, joint, "root")])
        self._joints = index_tensor([int(model.jnt_qposadr[name_id(model, joint, name)]) for name in JOINTS], physics)
        self._torso = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        geom = mujoco.mjtObj.mjOBJ_GEOM
        self._mouth, self._target = name_id(model, geom, "mouth"), name_id(model, geom, "target")
        self._radii = float(model.geom_size[self._mouth, 0] + model.geom_size[self._target, 0])
        if self.hide_target:  # in the env's model, which only rendering reads
            model.geom_rgba[self._target, 3] = 0

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        qpos[:, self._root + 3 : self._root + 7] = random_quaternion(selection, rng).to(qpos)
        qpos[:, self._joints] = selection.uniform(rng, *JOINT_RANGE, len(JOINTS), torch.float64).to(qpos)
        write_rows(physics.qpos, selection, qpos)

    def _upright(self, rows):
        return rows.xmat[:, self._torso, 8]  # named.data.xmat['torso', 'zz']

    def observe(self, rows):
        return [rows.qpos[:, self._joints], self._upright(rows)[:, None], rows.qvel]

    def reward(self, rows):
        return tolerance(self._upright(rows), (1.0, 1.0), margin=1.0)


class Swim(Upright):
    observation_keys = ("joint_angles", "upright", "target", "velocity")
    task_state_size = 3
    hide_target = False

    def bind(self, model, physics):
        super().bind(model, physics)
        self._geom_pos = physics.model_field("geom_pos")

    def initialize_episode(self, physics, selection, rng):
        super().initialize_episode(physics, selection, rng)
        unit = selection.uniform(rng, 0.0, 1.0, 3, torch.float64)
        low, high = unit.new_tensor(TARGET_LOW), unit.new_tensor(TARGET_HIGH)
        self.set_task_state(low + (high - low) * unit, selection)

    def _mouth_to_target(self, rows):
        """dm_control's ``mouth_to_target``: ``(target - mouth) . mouth_xmat``."""
        offset = rows.geom_xpos[:, self._target] - rows.geom_xpos[:, self._mouth]
        return torch.einsum("ni,nij->nj", offset, rows.geom_xmat[:, self._mouth].view(-1, 3, 3))

    def observe(self, rows):
        joint_angles, upright, velocity = super().observe(rows)
        return [joint_angles, upright, self._mouth_to_target(rows), velocity]

    def reward(self, rows):
        radii = self._radii
        in_target = tolerance(self._mouth_to_target(rows).norm(dim=1), (0.0, radii), margin=2 * radii)
        return (7 * in_target + 0.5 * (self._upright(rows) + 1)) / 8

    def get_task_state(self):
        return self._geom_pos[:, self._target].to(torch.float64)

    def set_task_state(self, values, selection):
        position = read_rows(self._geom_pos, selection)
        position[:, self._target] = values.to(position)
        write_rows(self._geom_pos, selection, position)

    def task_state_dict(self):
        return {"geom_pos": self._geom_pos}


TASKS = {"upright": Upright, "swim": Swim}
