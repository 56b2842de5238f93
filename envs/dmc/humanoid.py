"""dm_control's humanoid domain (``suite/humanoid.py``): stand, walk, run.

Observation (dm_control's features, not its ``pure_state``): ``joint_angles`` (qpos after the free root joint, 21),
``head_height`` (the head's world z), ``extremities`` (left hand, left foot, right hand, right foot, each relative to
the torso and expressed in its frame: 12), ``torso_vertical`` (the torso xmat's zx, zy, zz), ``com_velocity`` (the
``torso_subtreelinvel`` sensor) and ``velocity`` (qvel, 27).

Reward: ``small_control * standing * upright * (dont_move or move)``, with ``standing = tolerance(head height,
(1.4, inf), margin=0.35)`` (``_STAND_HEIGHT = 1.4``), ``upright = tolerance(torso zz, (0.9, inf), linear, margin=1.9,
value_at_margin=0)``, ``small_control = (4 + mean tolerance(u, margin=1, quadratic, value_at_margin=0)) / 5``. Stand
(speed 0): ``dont_move`` = the mean of ``tolerance(v, margin=2)`` over the centre of mass's x and y velocities.
Walk and run (``_WALK_SPEED = 1``, ``_RUN_SPEED = 10``): ``move = (5 tolerance(|v_xy|, (speed, inf), linear,
margin=speed, value_at_margin=0) + 1) / 6``.

Initial state: ``randomize_limited_and_rotational_joints`` (limited hinges uniform in their ranges; the root's
orientation a normalised ``uniform(0, 1, 4)``, its position the model's, 1.5 m up), redrawn until nothing is in
contact; at rest. 25 s (``_DEFAULT_TIME_LIMIT``) at ``_CONTROL_TIMESTEP = 0.025``, five 0.005 s physics steps: 1,000
steps.
"""

from __future__ import annotations

import mujoco
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    index_tensor,
    name_id,
    randomize_limited_and_rotational_joints,
    read_model,
    read_rows,
    sensor_slice,
    write_rows,
    xmat_component,
)
from rl_suite.envs.dmc.rewards import tolerance

STAND_HEIGHT = 1.4  # dm_control's _STAND_HEIGHT: the head height above which standing is 1
EXTREMITIES = ("left_hand", "left_foot", "right_hand", "right_foot")  # Physics.extremities' order


class Stand(DMCTask):
    domain = "humanoid"
    time_limit = 25.0
    control_timestep = 0.025
    fields = ("xpos", "xmat", "sensordata")
    observation_keys = ("joint_angles", "head_height", "extremities", "torso_vertical", "com_velocity", "velocity")
    move_speed = 0.0

    def model_xml(self) -> str:
        return read_model("humanoid.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        body = mujoco.mjtObj.mjOBJ_BODY
        self._torso = name_id(model, body, "torso")
        self._head = name_id(model, body, "head")
        self._extremities = index_tensor([name_id(model, body, name) for name in EXTREMITIES], physics)
        self._com_velocity = sensor_slice(model, "torso_subtreelinvel")

    def initialize_episode(self, physics, selection, rng):
        # dm_control redraws every joint until the pose has no contact: here, only the poses still in contact
        def draw(pending):
            qpos = read_rows(physics.qpos, pending)
            randomize_limited_and_rotational_joints(self.model, qpos, pending, rng)
            write_rows(physics.qpos, pending, qpos)

        self.redraw_while_in_contact(physics, selection, draw)

    def _com_velocity_of(self, rows) -> torch.Tensor:
        return rows.sensordata[:, self._com_velocity]

    def observe(self, rows):
        xpos, torso_frame = rows.xpos, rows.xmat[:, self._torso].view(-1, 3, 3)
        # dm_control: (xpos[limb] - xpos[torso]).dot(torso_frame), a row vector times the matrix: R^T d
        offsets = xpos[:, self._extremities] - xpos[:, self._torso : self._torso + 1]
        extremities = torch.bmm(offsets, torso_frame)
        return [
            rows.qpos[:, 7:],  # after the free root joint's 7 coordinates
            xpos[:, self._head, 2:3],
            extremities.flatten(1),
            rows.xmat[:, self._torso, 6:9],  # zx, zy, zz
            self._com_velocity_of(rows),
            rows.qvel,
        ]

    def reward(self, rows):
        standing = tolerance(rows.xpos[:, self._head, 2], (STAND_HEIGHT, float("inf")), margin=STAND_HEIGHT / 4)
        upright = xmat_component(rows, self._torso, "zz")
        stand_reward = standing * tolerance(upright, (0.9, float("inf")), 1.9, "linear", value_at_margin=0)
        small_control = tolerance(rows.ctrl, margin=1, value_at_margin=0, sigmoid="quadratic").mean(dim=1)
        small_control = (4 + small_control) / 5
        horizontal_velocity = self._com_velocity_of(rows)[:, :2]
        if self.move_speed == 0:
            dont_move = tolerance(horizontal_velocity, margin=2).mean(dim=1)
            return small_control * stand_reward * dont_move
        speed = horizontal_velocity.norm(dim=1)
        move = tolerance(speed, (self.move_speed, float("inf")), self.move_speed, "linear", value_at_margin=0)
        return small_control * stand_reward * ((5 * move + 1) / 6)


class Walk(Stand):
    move_speed = 1.0  # dm_control's _WALK_SPEED


class Run(Stand):
    move_speed = 10.0  # dm_control's _RUN_SPEED


TASKS = {"stand": Stand, "walk": Walk, "run": Run}
