"""dm_control's finger domain (``suite/finger.py``): spin, turn_easy, turn_hard.

Every observation is a function of the model's sensors. ``position``: the proximal and distal joint angles, then the
spinner tip's x, z relative to the hinge (``framepos`` sensors ``tip`` minus ``spinner``); ``velocity``: the proximal,
distal and hinge joint velocities; ``touch``: ``log1p`` of the ``touchtop`` and ``touchbottom`` sensors. The turn
tasks add ``target_position`` (the target's x, z relative to the hinge) and ``dist_to_target`` (the tip's distance
to it minus the target's radius, negative inside).

Reward: spin, 1 while the hinge turns at ``-_SPIN_VELOCITY = -15`` rad/s or faster (``hinge_velocity <= -15``);
turn, 1 while the tip is inside the target (``dist_to_target <= 0``), of radius ``_EASY_TARGET_SIZE = 0.07`` or
``_HARD_TARGET_SIZE = 0.03``. Else 0.

Initial state: every joint drawn by ``randomize_limited_and_rotational_joints`` (proximal and distal uniform in their
±110 degree ranges, the hinge in ``[-pi, pi)``), at rest, redrawn until nothing touches (dm_control's
``_set_random_joint_angles``: ``ncon == 0`` after ``after_reset``, at most 1,000 attempts). The turn tasks first
place the target on the circle the tip sweeps, at an angle uniform in ``[-pi, pi)`` from the hinge's vertical
(radius: cap1's size summed, 0.13). Spin sets the hinge's damping to 0.03 and hides the target and tip sites, as
dm_control does at every episode start (the same values every time: here in the model). 20 s at
``_CONTROL_TIMESTEP = 0.02`` (two 0.01 s physics steps): 1,000 steps.

Task state (turn tasks): ``[x, z]``, the target site's position (dm_control writes it into the model,
``site_pos['target']``; here each environment has its own).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import mujoco
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    index_tensor,
    name_id,
    randomize_limited_and_rotational_joints,
    read_model,
    read_rows,
    sensor_columns,
    sensor_slice,
    write_rows,
)

SPIN_VELOCITY = 15.0  # dm_control's _SPIN_VELOCITY (rad/s)
EASY_TARGET_SIZE = 0.07  # _EASY_TARGET_SIZE
HARD_TARGET_SIZE = 0.03  # _HARD_TARGET_SIZE
SPIN_HINGE_DAMPING = 0.03  # Spin.initialize_episode's dof_damping['hinge']
MAX_ATTEMPTS = 1000  # _set_random_joint_angles's max_attempts


class Spin(DMCTask):
    domain = "finger"
    time_limit = 20.0
    control_timestep = 0.02
    fields = ("sensordata",)
    observation_keys = ("position", "velocity", "touch")

    def model_xml(self) -> str:
        root = ET.fromstring(read_model("finger.xml"))
        self._edit_model(root)
        return ET.tostring(root, encoding="unicode")

    def _edit_model(self, root: ET.Element) -> None:
        root.find(".//joint[@name='hinge']").set("damping", repr(SPIN_HINGE_DAMPING))
        for name in ("target", "tip"):  # site_rgba[name, 3] = 0; the colour stays the compiled default
            root.find(f".//site[@name='{name}']").set("rgba", "0.5 0.5 0.5 0")

    def bind(self, model, physics):
        super().bind(model, physics)
        names = ("proximal", "distal", "proximal_velocity", "distal_velocity", "hinge_velocity")
        joint_sensors = [sensor_slice(model, name).start for name in names]
        self._joint_sensors = index_tensor(joint_sensors, physics)
        self._hinge_velocity = joint_sensors[4]
        self._tip, self._spinner, self._target_sensor = (sensor_slice(model, n) for n in ("tip", "spinner", "target"))
        self._touch = sensor_columns(model, physics, "touchtop", "touchbottom")

    def initialize_episode(self, physics, selection, rng):
        self._set_random_joint_angles(physics, selection, rng)

    def _set_random_joint_angles(self, physics, selection, rng):
        """``_set_random_joint_angles``: redraw every joint of the environments that still touch something, until
        none does."""

        def draw(pending):
            qpos = read_rows(physics.qpos, pending)
            randomize_limited_and_rotational_joints(self.model, qpos, pending, rng)
            write_rows(physics.qpos, pending, qpos)

        self.redraw_while_in_contact(physics, selection, draw, max_attempts=MAX_ATTEMPTS)

    def _xz(self, rows, sensor: slice):
        return rows.sensordata[:, sensor][:, 0::2]  # x and z of a 3-vector sensor

    def _tip_position(self, rows):
        return self._xz(rows, self._tip) - self._xz(rows, self._spinner)

    def observe(self, rows):
        joints = rows.sensordata[:, self._joint_sensors]
        position = torch.cat([joints[:, :2], self._tip_position(rows)], dim=1)
        return [position, joints[:, 2:], torch.log1p(rows.sensordata[:, self._touch])]

    def reward(self, rows):
        hinge_velocity = rows.sensordata[:, self._hinge_velocity]
        return (hinge_velocity <= -SPIN_VELOCITY).to(rows.sensordata.dtype)


class TurnEasy(Spin):
    observation_keys = ("position", "velocity", "touch", "target_position", "dist_to_target")
    task_state_size = 2
    target_radius = EASY_TARGET_SIZE

    def _edit_model(self, root: ET.Element) -> None:
        # site_size['target', 0] = target_radius at every episode start: the model's own size here. Sites do not
        # collide; only dist_to_target reads it.
        root.find(".//site[@name='target']").set("size", repr(self.target_radius))

    def bind(self, model, physics):
        super().bind(model, physics)
        self._target = name_id(model, mujoco.mjtObj.mjOBJ_SITE, "target")
        # the hinge's anchor (xanchor after mj_resetData's mj_forward: the spinner is fixed to the world, so it is
        # the same every episode) and the radius of the tip's circle, geom_size['cap1'].sum()
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        hinge = name_id(model, mujoco.mjtObj.mjOBJ_JOINT, "hinge")
        self._hinge_xz = data.xanchor[hinge, [0, 2]].copy()
        self._circle_radius = float(model.geom_size[name_id(model, mujoco.mjtObj.mjOBJ_GEOM, "cap1")].sum())
        # [N, nsite, 3]: each environment's target. Plain motors (no bias forces, no activations): after_reset's
        # mj_forward runs with actuation (reset_actuation's default here, and what the CPU backend allows with
        # per-environment model fields), the same numbers as dm_control's unactuated one at zero controls.
        self._site_pos = physics.model_field("site_pos")

    def initialize_episode(self, physics, selection, rng):
        angle = selection.uniform(rng, -math.pi, math.pi, 1, torch.float64)
        hinge = torch.as_tensor(self._hinge_xz, dtype=torch.float64, device=angle.device)
        self.set_task_state(hinge + self._circle_radius * torch.cat([angle.sin(), angle.cos()], dim=1), selection)
        self._set_random_joint_angles(physics, selection, rng)

    def _target_position(self, rows):
        return self._xz(rows, self._target_sensor) - self._xz(rows, self._spinner)

    def _dist_to_target(self, rows, target_position):
        """``[n]``: the tip's distance to the target's surface, negative inside."""
        return (target_position - self._tip_position(rows)).norm(dim=1) - self.target_radius

    def observe(self, rows):
        target_position = self._target_position(rows)
        distance = self._dist_to_target(rows, target_position)
        return [*super().observe(rows), target_position, distance[:, None]]

    def reward(self, rows):
        return (self._dist_to_target(rows, self._target_position(rows)) <= 0).to(rows.sensordata.dtype)

    def get_task_state(self):
        return self._site_pos[:, self._target, 0::2]

    def set_task_state(self, values, selection):
        site_pos = read_rows(self._site_pos, selection)
        site_pos[:, self._target, 0] = values[:, 0].to(site_pos)
        site_pos[:, self._target, 2] = values[:, 1].to(site_pos)
        write_rows(self._site_pos, selection, site_pos)

    def task_state_dict(self):
        return {"site_pos": self._site_pos}


class TurnHard(TurnEasy):
    target_radius = HARD_TARGET_SIZE


TASKS = {"spin": Spin, "turn_easy": TurnEasy, "turn_hard": TurnHard}
