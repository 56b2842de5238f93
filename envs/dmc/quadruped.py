"""dm_control's quadruped domain (``suite/quadruped.py``): walk, run.

The model is dm_control's ``make_model(floor_size=_DEFAULT_TIME_LIMIT * speed)``: ``quadruped.xml`` with the floor
``10 10 .5`` (walk) or ``100 100 .5`` (run), and without the walls, the ball, the target site, the terrain geom and
the rangefinder sensors (the height field asset stays, unused).

Observation: ``egocentric_state`` (the 12 hinges' positions, their velocities, then the 12 actuators' activations:
36), ``torso_velocity`` (the ``velocimeter`` sensor, torso frame), ``torso_upright`` (the torso xmat's zz), ``imu``
(the accelerometer, then the gyro: the sensors of those types in model order) and ``force_torque`` (``arcsinh`` of
the four toes' force sensors, then their torque sensors: 24).

Reward: ``upright * move``, with ``upright = tolerance(zz, (1, inf), linear, margin=2, value_at_margin=0)`` (0 upside
down, 1 upright) and ``move = tolerance(forward velocity, (speed, inf), linear, margin=speed, value_at_margin=0.5)``,
``_WALK_SPEED = 0.5`` and ``_RUN_SPEED = 5``.

Initial state: the torso at ``(0, 0, z)`` with an orientation uniform on the 3-sphere (a normalised ``randn(4)``),
joints at zero, at rest, where ``z`` is the first of 0, 0.01, 0.02, ... (accumulated as dm_control's
``_find_non_contacting_height`` does) at which nothing is in contact; each try is a reset and an ``mj_forward`` with
actuation disabled. 20 s (``_DEFAULT_TIME_LIMIT``) at ``_CONTROL_TIMESTEP = 0.02``, four 0.005 s physics steps: 1,000
steps.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import mujoco
import torch

from rl_suite.env import Selection
from rl_suite.envs.dmc.base import (
    DMCTask,
    name_id,
    random_quaternion,
    read_model,
    read_rows,
    selected_ids,
    selection_device,
    write_rows,
    xmat_component,
)
from rl_suite.envs.dmc.rewards import tolerance

TIME_LIMIT = 20.0  # dm_control's _DEFAULT_TIME_LIMIT, also the floor's half-size in seconds of travel
WALLS = ("wall_px", "wall_py", "wall_nx", "wall_ny")  # dm_control's _WALLS
HEIGHT_STEP = 0.01  # _find_non_contacting_height: "move up in 1cm increments until no contacts"
MAX_ATTEMPTS = 10_000  # it raises after this many


def make_model(floor_size: float) -> str:
    """dm_control's ``make_model(floor_size, terrain=False, rangefinders=False, walls_and_ball=False)``."""
    root = ET.fromstring(read_model("quadruped.xml"))
    parents = {child: parent for parent in root.iter() for child in parent}

    def remove(tag: str, name: str) -> None:
        element = root.find(f".//{tag}[@name='{name}']")
        if element is None:
            raise ValueError(f"quadruped.xml has no {tag} named {name!r}")
        parents[element].remove(element)

    root.find(".//geom[@name='floor']").set("size", f"{floor_size} {floor_size} .5")
    for wall in WALLS:
        remove("geom", wall)
    remove("body", "ball")
    remove("site", "target")
    remove("geom", "terrain")
    for rangefinder in root.findall(".//rangefinder"):
        parents[rangefinder].remove(rangefinder)
    return ET.tostring(root, encoding="unicode")


class Walk(DMCTask):
    domain = "quadruped"
    time_limit = TIME_LIMIT
    control_timestep = 0.02
    fields = ("xmat", "sensordata")
    observation_keys = ("egocentric_state", "torso_velocity", "torso_upright", "imu", "force_torque")
    desired_speed = 0.5  # dm_control's _WALK_SPEED

    def model_xml(self) -> str:
        return make_model(floor_size=TIME_LIMIT * self.desired_speed)

    def bind(self, model, physics):
        super().bind(model, physics)
        self._torso = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "torso")
        self._root = int(model.jnt_qposadr[name_id(model, mujoco.mjtObj.mjOBJ_JOINT, "root")])
        hinges = [j for j in range(model.njnt) if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_HINGE)]
        self._hinge_qpos = torch.as_tensor(model.jnt_qposadr[hinges], device=physics.device).long()
        self._hinge_qvel = torch.as_tensor(model.jnt_dofadr[hinges], device=physics.device).long()

        def sensor_columns(*kinds: mujoco.mjtSensor) -> torch.Tensor:
            # dm_control's _get_sensor_names: the sensors of these types, in model order
            ids = [s for s in range(model.nsensor) if int(model.sensor_type[s]) in {int(k) for k in kinds}]
            if not ids:
                raise ValueError(f"the model has no sensor of type {', '.join(k.name for k in kinds)}")
            columns = [int(model.sensor_adr[s]) + k for s in ids for k in range(int(model.sensor_dim[s]))]
            return torch.tensor(columns, device=physics.device)

        kind = mujoco.mjtSensor
        self._velocimeter = sensor_columns(kind.mjSENS_VELOCIMETER)
        self._imu = sensor_columns(kind.mjSENS_GYRO, kind.mjSENS_ACCELEROMETER)
        self._force_torque = sensor_columns(kind.mjSENS_FORCE, kind.mjSENS_TORQUE)

    def initialize_episode(self, physics, selection, rng):
        # by index, the draw on the selection's device (the random streams'), the physics on the physics'
        ids = selected_ids(selection, physics.device)
        qpos = read_rows(physics.qpos, Selection(ids=ids))  # just reset: the joints at zero
        draw = Selection(ids=ids.to(selection_device(selection)))
        qpos[:, self._root + 3 : self._root + 7] = random_quaternion(draw, rng).to(qpos)
        # dm_control raises the body from z = 0 until nothing touches; here, only the bodies still touching
        height = 0.0
        for _ in range(MAX_ATTEMPTS + 1):
            qpos[:, self._root : self._root + 2] = 0.0
            qpos[:, self._root + 2] = height
            write_rows(physics.qpos, Selection(ids=ids), qpos)
            self.after_reset(physics, ids)
            touching = physics.contact_counts().to(ids.device)[ids] > 0
            if not touching.any():
                return
            ids, qpos = ids[touching], qpos[touching.to(qpos.device)]
            height += HEIGHT_STEP  # accumulated as dm_control's z_pos, not multiplied
        raise RuntimeError("Failed to find a non-contacting configuration.")

    def _torso_velocity(self, rows) -> torch.Tensor:
        return rows.sensordata[:, self._velocimeter]

    def observe(self, rows):
        egocentric = torch.cat([rows.qpos[:, self._hinge_qpos], rows.qvel[:, self._hinge_qvel], rows.act], dim=1)
        upright = xmat_component(rows, self._torso, "zz")[:, None]
        sensors = rows.sensordata
        return [
            egocentric,
            self._torso_velocity(rows),
            upright,
            sensors[:, self._imu],
            torch.asinh(sensors[:, self._force_torque]),
        ]

    def reward(self, rows):
        # _upright_reward(deviation_angle=0): bounds (cos 0, inf), margin 1 + cos 0
        upright = tolerance(xmat_component(rows, self._torso, "zz"), (1.0, float("inf")), 2.0, "linear", 0.0)
        speed = self.desired_speed
        move = tolerance(self._torso_velocity(rows)[:, 0], (speed, float("inf")), speed, "linear", 0.5)
        return upright * move


class Run(Walk):
    desired_speed = 5.0  # dm_control's _RUN_SPEED


TASKS = {"walk": Walk, "run": Run}
