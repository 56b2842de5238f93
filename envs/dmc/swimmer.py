"""dm_control's swimmer domain (``suite/swimmer.py``): swimmer6, swimmer15.

The model is built in code, as dm_control's ``_make_model(n_bodies)`` builds it: ``swimmer.xml``'s head, then a
chain of ``n_bodies - 1`` segments (a visual capsule, an inertial box, a site and a hinge limited to
``±360 / n_bodies`` degrees), one motor per hinge, a velocimeter and a gyro per segment, and the tracking cameras
moved away by ``n_bodies / 6``.

Observation: ``joints`` (the internal hinge angles, ``qpos[3:]``), ``to_target`` (nose to target in the head's
frame, x and y), ``body_velocities`` (every link's local x and y velocity and z angular velocity, from the
velocimeter and gyro sensors, link by link). Reward: ``tolerance(|to_target|, (0, r), margin=5 r, long_tail)``
with ``r`` the target's radius (0.1). The episode starts with the head's heading uniform in ``[-pi, pi)``, each hinge
uniform in its range, at rest; the target lies uniformly in a box of half-width 0.3 (probability 0.2) or 2 (dm_control's
``close_target``). 30 s at a control timestep of 0.03 s (15 physics steps of 0.002 s): 1,000 steps.

Task state: the target's ``(x, y)`` (dm_control writes it into ``model.geom_pos['target']``; here a per-environment
model field). dm_control also moves the target's light there, which only rendering sees; ours renders from the
shared model, which has neither the target nor its light per environment.
"""

from __future__ import annotations

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
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance

CLOSE_TARGET_PROBABILITY = 0.2  # dm_control's Swimmer.initialize_episode: rand() < .2
CLOSE_TARGET_BOX, FAR_TARGET_BOX = 0.3, 2.0  # its target_box half-widths
ROOT_SENSORS = 12  # nose_pos, target_pos, head_xaxis, head_yaxis: before the velocimeter/gyro pairs (sensordata[12:])


def make_model(n_bodies: int) -> str:
    """dm_control's ``swimmer._make_model(n_bodies)``, with ElementTree."""
    if n_bodies < 3:
        raise ValueError(f"the swimmer needs at least 3 bodies, got {n_bodies}")
    root = ET.fromstring(read_model("swimmer.xml"))
    parent = root.find("./worldbody/body")
    actuator = ET.SubElement(root, "actuator")
    sensor = ET.SubElement(root, "sensor")
    joint_limit = 360.0 / n_bodies
    for index in range(n_bodies - 1):
        body = ET.SubElement(parent, "body", {"name": f"segment_{index}", "pos": "0 .1 0"})
        ET.SubElement(body, "geom", {"class": "visual", "name": f"visual_{index}"})
        ET.SubElement(body, "geom", {"class": "inertial", "name": f"inertial_{index}"})
        ET.SubElement(body, "site", {"name": f"site_{index}"})
        ET.SubElement(body, "joint", {"name": f"joint_{index}", "range": f"{-joint_limit} {joint_limit}"})
        ET.SubElement(actuator, "motor", {"name": f"motor_{index}", "joint": f"joint_{index}"})
        ET.SubElement(sensor, "velocimeter", {"name": f"velocimeter_{index}", "site": f"site_{index}"})
        ET.SubElement(sensor, "gyro", {"name": f"gyro_{index}", "site": f"site_{index}"})
        parent = body
    scale = n_bodies / 6.0
    for camera in root.findall("./worldbody/body/camera"):
        if camera.get("mode") == "trackcom":  # Python's float formatting, as dm_control writes it
            camera.set("pos", " ".join(str(float(value) * scale) for value in camera.get("pos").split(" ")))
    return ET.tostring(root, encoding="unicode")


class Swimmer(DMCTask):
    domain = "swimmer"
    time_limit = 30.0
    control_timestep = 0.03
    fields = ("geom_xpos", "xmat", "sensordata")
    observation_keys = ("joints", "to_target", "body_velocities")
    task_state_size = 2
    n_bodies: int

    def model_xml(self) -> str:
        return make_model(self.n_bodies)

    def bind(self, model, physics):
        super().bind(model, physics)
        geom = mujoco.mjtObj.mjOBJ_GEOM
        self._target = name_id(model, geom, "target")
        self._nose = name_id(model, geom, "nose")
        self._head = name_id(model, mujoco.mjtObj.mjOBJ_BODY, "head")
        self._target_size = float(model.geom_size[self._target, 0])
        self._geom_pos = physics.model_field("geom_pos")
        # sensordata after the root sensors: a velocimeter (vx, vy, vz) and a gyro (wx, wy, wz) per link; the
        # observation keeps each link's vx, vy and wz, link by link
        links = (model.nsensordata - ROOT_SENSORS) // 6
        columns = [ROOT_SENSORS + 6 * link + column for link in range(links) for column in (0, 1, 5)]
        self._body_velocities = index_tensor(columns, physics)

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        randomize_limited_and_rotational_joints(self.model, qpos, selection, rng)
        write_rows(physics.qpos, selection, qpos)
        close = selection.uniform(rng, 0.0, 1.0, 1, torch.float64) < CLOSE_TARGET_PROBABILITY
        unit = selection.uniform(rng, -1.0, 1.0, 2, torch.float64)
        self.set_task_state(torch.where(close, CLOSE_TARGET_BOX * unit, FAR_TARGET_BOX * unit), selection)

    def _nose_to_target(self, rows):
        """dm_control's ``nose_to_target``: ``(target - nose) . head_xmat``, its x and y."""
        offset = rows.geom_xpos[:, self._target] - rows.geom_xpos[:, self._nose]
        head = rows.xmat[:, self._head].view(-1, 3, 3)
        return torch.einsum("ni,nij->nj", offset, head)[:, :2]

    def observe(self, rows):
        body_velocities = rows.sensordata[:, self._body_velocities]  # local vx, vy and wz of each link
        return [rows.qpos[:, 3:], self._nose_to_target(rows), body_velocities]

    def reward(self, rows):
        distance = self._nose_to_target(rows).norm(dim=1)
        size = self._target_size
        return tolerance(distance, (0.0, size), margin=5 * size, sigmoid="long_tail")

    def get_task_state(self):
        return self._geom_pos[:, self._target, :2].to(torch.float64)

    def set_task_state(self, values, selection):
        position = read_rows(self._geom_pos, selection)
        position[:, self._target, :2] = values.to(position)
        write_rows(self._geom_pos, selection, position)

    def task_state_dict(self):
        return {"geom_pos": self._geom_pos}


class Swimmer6(Swimmer):
    n_bodies = 6


class Swimmer15(Swimmer):
    n_bodies = 15


TASKS = {"swimmer6": Swimmer6, "swimmer15": Swimmer15}
