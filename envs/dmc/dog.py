"""dm_control's dog domain (``suite/dog.py``): stand, walk, trot, run.

Observation: ``joint_angles`` and ``joint_velocites`` (dm_control's spelling; qpos and qvel of every hinge),
``torso_pelvis_height`` (the z of the torso and pelvis frames), ``z_projection`` (the z row ``zx zy zz`` of the skull,
torso and pelvis frames), ``torso_com_velocity`` (the sensor ``torso_linvel``, the torso subtree's linear velocity, in
the torso's frame), ``inertial_sensors`` (the head site's ``accelerometer``, ``velocimeter`` and ``gyro``),
``foot_forces`` (the force sensors ``foot_L``, ``foot_R``, ``hand_L``, ``hand_R``), ``touch_sensors`` (``palm_L``,
``palm_R``, ``sole_L``, ``sole_R``) and ``actuator_state`` (the 38 activations: every actuator is a first-order
filter, ``dyntype="filter"``).

Reward, the product of dm_control's factors: torso and pelvis at least 0.9 of their heights at the default pose
(``_STAND_HEIGHT_FRACTION``; gaussian ``tolerance`` with that height as the margin); the skull, torso and pelvis
z-axes within 30 degrees of vertical (``_MAX_UPRIGHT_ANGLE``; linear, margin ``cos 30 + 1``, one factor each); the
four touch sensors summing to the body weight (``-gravity_z * body_subtreemass['torso']``; linear, margin the
weight, 0.9 at it). Walk, trot and run multiply by ``(4 forward + 1) / 5``, ``forward`` the torso-frame x velocity
of the subtree in ``(speed, 2 speed)`` (linear, margin ``max(1, speed)``, 0 at it), ``speed`` dm_control's
``_WALK_SPEED = 1``, ``_TROT_SPEED = 3``, ``_RUN_SPEED = 9``.

Model: ``dog.xml`` as dm_control's ``make_model(floor_size, remove_ball=True)`` edits it: the floor
``floor_size x floor_size`` with ``floor_size = speed * 15`` (stand uses the walk speed), the ball, the target, the
walls and the ball and head cameras removed. Its meshes, skin and textures are read from ``dog_assets`` beside it.

Initial state: the default pose (``qpos0``) turned about z by an azimuth uniform in ``[0, 2 pi)``, the root's x, y
and yaw velocities ``2 * randn()`` each, and every activation uniform in its actuator's ctrlrange (``[-1, 1]``).
Nothing is redrawn for penetration. 15 s (``_DEFAULT_TIME_LIMIT``) at ``_CONTROL_TIMESTEP = 0.015`` (three 0.005 s
physics steps): 1,000 steps.

No task targets: the env's ``task_state`` is the 38 activations (``act``), which dm_control randomises at each
episode start and which qpos and qvel do not hold.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    as_tensor,
    index_tensor,
    name_id,
    read_model,
    read_rows,
    sensor_columns,
    suite_dir,
    write_rows,
    xmat_component,
)
from rl_suite.envs.dmc.rewards import tolerance

TIME_LIMIT = 15.0  # dm_control's _DEFAULT_TIME_LIMIT
WALK_SPEED, TROT_SPEED, RUN_SPEED = 1.0, 3.0, 9.0  # _WALK_SPEED, _TROT_SPEED, _RUN_SPEED
MIN_UPRIGHT_COSINE = math.cos(math.radians(30))  # _MIN_UPRIGHT_COSINE, from _MAX_UPRIGHT_ANGLE = 30 degrees
STAND_HEIGHT_FRACTION = 0.9  # _STAND_HEIGHT_FRACTION
UPRIGHT_BODIES = ("skull", "torso", "pelvis")  # Physics.z_projection's frames, in its order
INERTIAL_SENSORS = ("accelerometer", "velocimeter", "gyro")
FOOT_FORCE_SENSORS = ("foot_L", "foot_R", "hand_L", "hand_R")
TOUCH_SENSORS = ("palm_L", "palm_R", "sole_L", "sole_R")


def make_model_xml(floor_size: float) -> str:
    """dm_control's ``make_model(floor_size, remove_ball=True)``: dog.xml with the floor resized and the ball,
    target, walls and their cameras removed. The compiler reads the meshes and textures from the installed
    ``dog_assets`` folder (an absolute ``meshdir``/``texturedir``; dm_control hands the same files over as assets)."""
    root = ET.fromstring(read_model("dog.xml"))
    parents = {child: parent for parent in root.iter() for child in parent}

    def find(tag: str, name: str) -> ET.Element:
        return next(element for element in root.iter(tag) if element.get("name") == name)

    find("geom", "floor").set("size", f"{floor_size} {floor_size} .1")
    removed = [("body", "ball"), ("geom", "target"), ("camera", "ball"), ("camera", "head")]
    removed += [("geom", f"wall_{side}") for side in ("px", "nx", "py", "ny")]
    for tag, name in removed:
        element = find(tag, name)
        parents[element].remove(element)
    assets = str(suite_dir() / "dog_assets")
    compiler = root.find("compiler")
    compiler.set("meshdir", assets)
    compiler.set("texturedir", assets)
    return ET.tostring(root, encoding="unicode")


class Stand(DMCTask):
    domain = "dog"
    time_limit = TIME_LIMIT
    control_timestep = 0.015  # dm_control's _CONTROL_TIMESTEP
    fields = ("xpos", "xmat", "sensordata")
    observation_keys = (
        "joint_angles",
        "joint_velocites",
        "torso_pelvis_height",
        "z_projection",
        "torso_com_velocity",
        "inertial_sensors",
        "foot_forces",
        "touch_sensors",
        "actuator_state",
    )
    move_speed: float | None = None  # None: no move factor (Stand)
    floor_speed = WALK_SPEED  # the floor is floor_speed * time limit across (stand: the walk's)

    def model_xml(self) -> str:
        return make_model_xml(self.floor_speed * TIME_LIMIT)

    def bind(self, model, physics):
        super().bind(model, physics)
        body = mujoco.mjtObj.mjOBJ_BODY
        hinges = np.flatnonzero(model.jnt_type == mujoco.mjtJoint.mjJNT_HINGE)
        self._hinge_qpos = torch.as_tensor(model.jnt_qposadr[hinges], device=physics.device)
        self._hinge_qvel = torch.as_tensor(model.jnt_dofadr[hinges], device=physics.device)
        self._torso, self._pelvis = (name_id(model, body, name) for name in ("torso", "pelvis"))
        self._upright_bodies = index_tensor([name_id(model, body, name) for name in UPRIGHT_BODIES], physics)
        self._height_bodies = index_tensor([self._torso, self._pelvis], physics)
        root = name_id(model, mujoco.mjtObj.mjOBJ_JOINT, "root")
        self._root_qpos, self._root_dof = int(model.jnt_qposadr[root]), int(model.jnt_dofadr[root])
        # the root's x, y and yaw velocities, which each episode start draws
        self._planar_dofs = index_tensor([self._root_dof, self._root_dof + 1, self._root_dof + 5], physics)

        self._inertial = sensor_columns(model, physics, *INERTIAL_SENSORS)
        self._foot_forces = sensor_columns(model, physics, *FOOT_FORCE_SENSORS)
        self._touch = sensor_columns(model, physics, *TOUCH_SENSORS)
        self._torso_linvel = sensor_columns(model, physics, "torso_linvel")

        # dm_control measures the stand heights at each episode start from the default pose (physics.reset()):
        # the same numbers every episode, the torso and pelvis heights at qpos0.
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)
        self._stand_height = [STAND_HEIGHT_FRACTION * float(data.xpos[b, 2]) for b in (self._torso, self._pelvis)]
        self._body_weight = -float(model.opt.gravity[2]) * float(model.body_subtreemass[self._torso])

        # the activations: MuJoCo's mjSTATE_INTEGRATION rows hold time, qpos, qvel, then act (rows.act reads them)
        assert model.nu == model.na, "every dog actuator has an activation"
        start = 1 + model.nq + model.nv
        self._act = physics.state[:, start : start + model.na]
        self._act_low, self._act_high = (as_tensor(v, physics) for v in model.actuator_ctrlrange.T)

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        azimuth = selection.uniform(rng, 0.0, 2 * math.pi, 1, torch.float64)[:, 0].to(qpos)
        quat = qpos[:, self._root_qpos + 3 : self._root_qpos + 7]
        quat.zero_()
        quat[:, 0], quat[:, 3] = torch.cos(azimuth / 2), torch.sin(azimuth / 2)
        write_rows(physics.qpos, selection, qpos)

        qvel = read_rows(physics.qvel, selection)
        qvel[:, self._planar_dofs] = 2 * selection.normal(rng, 3, torch.float64).to(qvel)
        write_rows(physics.qvel, selection, qvel)

        unit = selection.uniform(rng, 0.0, 1.0, self.model.na, torch.float64).to(self._act)
        write_rows(self._act, selection, self._act_low + (self._act_high - self._act_low) * unit)

    def _heights(self, rows):
        return rows.xpos[:, self._height_bodies, 2]

    def _torso_com_velocity(self, rows):
        # dm_control: center_of_mass_velocity().dot(torso_frame), the row vector times the 3x3 frame
        frame = rows.xmat[:, self._torso].view(-1, 3, 3)
        velocity = rows.sensordata[:, self._torso_linvel]
        return torch.einsum("ni,nij->nj", velocity, frame)

    def observe(self, rows):
        sensors = rows.sensordata
        z_projection = rows.xmat[:, self._upright_bodies, 6:9].flatten(1)  # the zx, zy, zz entries of each frame
        return [
            rows.qpos[:, self._hinge_qpos],
            rows.qvel[:, self._hinge_qvel],
            self._heights(rows),
            z_projection,
            self._torso_com_velocity(rows),
            sensors[:, self._inertial],
            sensors[:, self._foot_forces],
            sensors[:, self._touch],
            rows.act,
        ]

    def reward(self, rows):
        heights = self._heights(rows)
        torso_height, pelvis_height = self._stand_height
        torso = tolerance(heights[:, 0], (torso_height, math.inf), margin=torso_height)
        pelvis = tolerance(heights[:, 1], (pelvis_height, math.inf), margin=pelvis_height)
        upright = tolerance(
            xmat_component(rows, self._upright_bodies, "zz"),
            (MIN_UPRIGHT_COSINE, math.inf),
            margin=MIN_UPRIGHT_COSINE + 1,
            sigmoid="linear",
            value_at_margin=0,
        ).prod(dim=1)
        weight = self._body_weight
        touch_total = rows.sensordata[:, self._touch].sum(dim=1)
        touch = tolerance(touch_total, (weight, math.inf), margin=weight, sigmoid="linear", value_at_margin=0.9)
        reward = torso * pelvis * upright * touch
        if self.move_speed is not None:
            speed = self.move_speed
            forward_velocity = self._torso_com_velocity(rows)[:, 0]
            forward = tolerance(
                forward_velocity, (speed, 2 * speed), margin=max(1.0, speed), sigmoid="linear", value_at_margin=0
            )
            reward = reward * (4 * forward + 1) / 5
        return reward


class Walk(Stand):
    move_speed = floor_speed = WALK_SPEED


class Trot(Stand):
    move_speed = floor_speed = TROT_SPEED


class Run(Stand):
    move_speed = floor_speed = RUN_SPEED


TASKS = {"stand": Stand, "walk": Walk, "trot": Trot, "run": Run}
