"""dm_control's manipulator domain (``suite/manipulator.py``): bring_ball.

The model is ``manipulator.xml`` without the props bring_ball does not use, as dm_control's
``make_model(use_peg=False, insert=False)`` edits it: the bodies ``peg``, ``target_peg``, ``slot`` and ``cup`` go.

Observation (fully observable, dm_control's default): ``arm_pos`` (sine and cosine of each of the eight arm and hand
joints, joint by joint), ``arm_vel``, ``touch`` (``log1p`` of the five touch sensors), ``hand_pos``, ``object_pos``
and ``target_pos`` (each body's x, z and its quaternion's w, y), ``object_vel`` (the ball's x, z and angle
velocities). Reward: ``tolerance(d, (0, 0.01), margin=0.02)``, ``d`` the distance between the ball's and the
target's sites (``_CLOSE = .01``). 10 s at a control timestep of 0.01 s (10 physics steps of 0.001 s): 1,000 steps.

The episode starts from dm_control's rejection loop, redrawn until nothing touches (``ncon == 0``): the arm joints
uniform in their ranges (the unlimited root in ``[-pi, pi)``), the finger set to the thumb's angle; the target in
``x`` in ``[-0.4, 0.4)``, ``z`` in ``[0.1, 0.4)``, at an angle in ``[-pi, pi)``; the ball in the hand (probability
``_P_IN_HAND = 0.1``: at the grasp site, along the grasp), on the target (``_P_IN_TARGET = 0.1``), or else uniform
in ``x`` in ``[-0.5, 0.5)``, ``z`` in ``[0, 0.7)``, angle in ``[0, 2 pi)``, with an ``x`` velocity uniform in
``[-5, 5)``. Like dm_control's, that velocity stays when a redraw places the ball otherwise.

Task state: the target's ``(x, z, qw, qy)`` (dm_control writes them into ``model.body_pos['target_ball']`` and
``body_quat``; here per-environment model fields).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.dmc.base import (
    DMCTask,
    index_tensor,
    name_id,
    read_model,
    read_rows,
    selected_ids,
    selection_device,
    sensor_columns,
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance

CLOSE = 0.01  # dm_control's _CLOSE
P_IN_HAND, P_IN_TARGET = 0.1, 0.1  # _P_IN_HAND, _P_IN_TARGET
ARM_JOINTS = ("arm_root", "arm_shoulder", "arm_elbow", "arm_wrist", "finger", "fingertip", "thumb", "thumbtip")
ALL_PROPS = ("ball", "target_ball", "cup", "peg", "target_peg", "slot")
TOUCH_SENSORS = ("palm_touch", "finger_touch", "thumb_touch", "fingertip_touch", "thumbtip_touch")


def make_model(use_peg: bool = False, insert: bool = False) -> str:
    """dm_control's ``manipulator.make_model``: the file without the props the task does not use."""
    required = ["peg", "target_peg"] if use_peg else ["ball", "target_ball"]
    if insert:
        required.append("slot" if use_peg else "cup")
    root = ET.fromstring(read_model("manipulator.xml"))
    parents = {child: parent for parent in root.iter() for child in parent}
    for body in [body for body in root.iter("body") if body.get("name") in set(ALL_PROPS) - set(required)]:
        parents[body].remove(body)
    return ET.tostring(root, encoding="unicode")


class BringBall(DMCTask):
    domain = "manipulator"
    time_limit = 10.0
    control_timestep = 0.01
    fields = ("xpos", "xquat", "sensordata", "site_xpos", "site_xmat")
    observation_keys = ("arm_pos", "arm_vel", "touch", "hand_pos", "object_pos", "object_vel", "target_pos")
    task_state_size = 4

    def model_xml(self) -> str:
        return make_model(use_peg=False, insert=False)

    def bind(self, model, physics):
        super().bind(model, physics)
        joint, body, site = mujoco.mjtObj.mjOBJ_JOINT, mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_SITE
        arm = [name_id(model, joint, name) for name in ARM_JOINTS]
        self._arm_qpos = index_tensor([int(model.jnt_qposadr[j]) for j in arm], physics)
        self._arm_qvel = index_tensor([int(model.jnt_dofadr[j]) for j in arm], physics)
        limited = model.jnt_limited[arm].astype(bool)  # the unlimited root turns in [-pi, pi)
        self._arm_low = torch.as_tensor(np.where(limited, model.jnt_range[arm, 0], -math.pi))
        self._arm_high = torch.as_tensor(np.where(limited, model.jnt_range[arm, 1], math.pi))
        self._finger, self._thumb = (int(model.jnt_qposadr[name_id(model, joint, n)]) for n in ("finger", "thumb"))
        ball = [name_id(model, joint, f"ball_{axis}") for axis in "xzy"]  # dm_control's _object_joints order
        self._ball_qpos = index_tensor([int(model.jnt_qposadr[j]) for j in ball], physics)
        self._ball_qvel = index_tensor([int(model.jnt_dofadr[j]) for j in ball], physics)
        self._ball_x_dof = int(model.jnt_dofadr[ball[0]])
        self._hand, self._ball, self._target = (name_id(model, body, n) for n in ("hand", "ball", "target_ball"))
        self._grasp = name_id(model, site, "grasp")
        self._ball_site, self._target_site = (name_id(model, site, n) for n in ("ball", "target_ball"))
        self._touch = sensor_columns(model, physics, *TOUCH_SENSORS)  # one number each
        self._body_pos = physics.model_field("body_pos")
        self._body_quat = physics.model_field("body_quat")

    def initialize_episode(self, physics, selection, rng):
        # Redraw the whole configuration of the simulations that still penetrate, always by index (_draw's in-hand
        # placement needs the ids). qvel is not cleared between redraws: dm_control sets the ball's x velocity only
        # when it places the ball uniformly, and keeps it.
        by_index = Selection(ids=selected_ids(selection, selection_device(selection)))
        self.redraw_while_in_contact(physics, by_index, lambda pending: self._draw(physics, pending, rng))

    def _draw(self, physics, selection: Selection, rng):
        """One pass of dm_control's loop body for the selected simulations (by index)."""
        f64 = torch.float64
        qpos, qvel = read_rows(physics.qpos, selection), read_rows(physics.qvel, selection)
        low, high = self._arm_low.to(qpos.device), self._arm_high.to(qpos.device)
        qpos[:, self._arm_qpos] = low + (high - low) * selection.uniform(rng, 0.0, 1.0, len(ARM_JOINTS), f64).to(qpos)
        qpos[:, self._finger] = qpos[:, self._thumb]  # dm_control symmetrises the hand
        write_rows(physics.qpos, selection, qpos)

        target = selection.uniform(rng, 0.0, 1.0, 3, f64).to(qpos)
        target_x, target_z = -0.4 + 0.8 * target[:, 0], 0.1 + 0.3 * target[:, 1]
        target_angle = -math.pi + 2 * math.pi * target[:, 2]
        half = target_angle / 2
        self.set_task_state(torch.stack([target_x, target_z, torch.cos(half), torch.sin(half)], dim=1), selection)

        # dm_control's choice(['in_hand', 'in_target', 'uniform'], p=[.1, .1, .8]): the first bin the draw falls in
        kind = selection.uniform(rng, 0.0, 1.0, 1, f64)[:, 0].to(qpos.device)
        in_hand, in_target = kind < P_IN_HAND, (kind >= P_IN_HAND) & (kind < P_IN_HAND + P_IN_TARGET)
        spread = selection.uniform(rng, 0.0, 1.0, 4, f64).to(qpos)  # used where the ball is placed uniformly
        ball_x, ball_z, ball_angle = -0.5 + spread[:, 0], 0.7 * spread[:, 1], 2 * math.pi * spread[:, 2]
        ball_x = torch.where(in_target, target_x, ball_x)
        ball_z = torch.where(in_target, target_z, ball_z)
        ball_angle = torch.where(in_target, target_angle, ball_angle)
        if in_hand.any():  # at the grasp site of the arm just drawn: mj_forward (after_reset) first, as dm_control
            physics_ids = selection.ids.to(physics.device)[in_hand.to(physics.device)]
            self.after_reset(physics, physics_ids)
            grasp = physics.derived["site_xpos"][:, self._grasp].index_select(0, physics_ids).to(qpos)
            frame = physics.derived["site_xmat"][:, self._grasp].index_select(0, physics_ids).to(qpos)
            ball_x[in_hand], ball_z[in_hand] = grasp[:, 0], grasp[:, 2]
            ball_angle[in_hand] = math.pi - torch.atan2(frame[:, 6], frame[:, 0])  # the grasp's zx and xx entries
        placed = ~(in_hand | in_target)
        qvel[:, self._ball_x_dof] = torch.where(placed, -5 + 10 * spread[:, 3], qvel[:, self._ball_x_dof])
        qpos[:, self._ball_qpos] = torch.stack([ball_x, ball_z, ball_angle], dim=1)
        write_rows(physics.qpos, selection, qpos)
        write_rows(physics.qvel, selection, qvel)

    @staticmethod
    def _pose(rows, body):
        """dm_control's ``body_2d_pose``: the body's x and z, and its quaternion's w and y."""
        return torch.cat([rows.xpos[:, body, 0::2], rows.xquat[:, body, 0::2]], dim=1)

    def observe(self, rows):
        angles = rows.qpos[:, self._arm_qpos]
        arm_pos = torch.stack([torch.sin(angles), torch.cos(angles)], dim=2).flatten(1)
        touch = torch.log1p(rows.sensordata[:, self._touch])
        return [
            arm_pos,
            rows.qvel[:, self._arm_qvel],
            touch,
            self._pose(rows, self._hand),
            self._pose(rows, self._ball),
            rows.qvel[:, self._ball_qvel],
            self._pose(rows, self._target),
        ]

    def reward(self, rows):
        distance = (rows.site_xpos[:, self._ball_site] - rows.site_xpos[:, self._target_site]).norm(dim=1)
        return tolerance(distance, (0.0, CLOSE), margin=2 * CLOSE)

    def get_task_state(self):
        position, quat = self._body_pos[:, self._target], self._body_quat[:, self._target]
        return torch.cat([position[:, 0::2], quat[:, 0::2]], dim=1).to(torch.float64)

    def set_task_state(self, values, selection):
        position, quat = read_rows(self._body_pos, selection), read_rows(self._body_quat, selection)
        values = values.to(position)
        position[:, self._target, 0::2] = values[:, :2]
        quat[:, self._target, 0::2] = values[:, 2:]
        write_rows(self._body_pos, selection, position)
        write_rows(self._body_quat, selection, quat)

    def task_state_dict(self):
        return {"body_pos": self._body_pos, "body_quat": self._body_quat}


TASKS = {"bring_ball": BringBall}
