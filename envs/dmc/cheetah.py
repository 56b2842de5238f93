"""dm_control's cheetah domain (``suite/cheetah.py``): run.

Observation: ``position`` (qpos without the horizontal root position ``rootx``), ``velocity`` (qvel). Reward:
``tolerance(speed, (10, inf), margin=10, value_at_margin=0, linear)``, i.e. ``min(speed / 10, 1)`` for a
non-negative speed (``_RUN_SPEED = 10``), with the speed the x component of the ``torso_subtreelinvel`` sensor (the
torso subtree's centre-of-mass velocity). 10 s (``_DEFAULT_TIME_LIMIT``) at the model's 0.01 s timestep: 1,000 steps.

Initial state: the limited joints (the six leg hinges) uniform in their ranges, the root at the model's pose, at
rest; then, as dm_control "stabilizes the model", 200 physics steps with zero controls (only on the environments
being reset), after which the clock is set back to 0. The episode starts where those steps left it: on the floor,
nearly still.

dm_control's quirk, reproduced: it runs those 200 steps through its legacy step, whose first substep only finishes
(``mj_step2``) the positions-and-velocities stage that ``Physics.reset`` computed at the model's initial pose
(``qpos0``, at rest, touching nothing), not at the drawn joint angles. That substep's accelerations are therefore
those of ``qpos0``: free fall, without the drawn angles' joint springs. They are the same for every episode, so
``bind`` computes that substep's velocity once (``mj_resetData``, ``mj_forward`` without actuation, ``mj_step2`` on a
plain ``MjData``), and each start applies it as MuJoCo's Euler step would (velocity, then positions advanced by
``timestep * velocity``) before 199 complete ``mj_step``s. This matters: 200 complete steps from the drawn pose give
starts measurably off dm_control's (e.g. the front thigh's angle's standard deviation 5% higher over 2,000 starts,
individual starts 0.01 apart at the median), while this reproduction follows dm_control's legacy substeps to 2e-14
(checked with plain ``MjData`` on MuJoCo 3.17 and 4.0). What it leaves out: dm_control's second substep starts its
constraint solver from the first's accelerations, and its episode from the last settling step's, where ours start
from zero (the reset clears the warm start): a starting point of the solver only (the first one moves 2,000 starts
by at most 2e-14).
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np
import torch

from rl_suite.envs.dmc.base import (
    DMCTask,
    as_tensor,
    index_tensor,
    read_model,
    read_rows,
    selected_ids,
    sensor_slice,
    write_rows,
)
from rl_suite.envs.dmc.rewards import tolerance

RUN_SPEED = 10.0  # dm_control's _RUN_SPEED
SETTLING_STEPS = 200  # physics.step(nstep=200) in dm_control's Cheetah.initialize_episode


def first_settling_velocity(model: mujoco.MjModel) -> np.ndarray:
    """The velocity after dm_control's first settling substep: ``mj_step2`` from the stage its ``Physics.reset``
    left (``mj_resetData``, then ``mj_forward`` with actuation disabled), whatever angles were drawn since."""
    data = mujoco.MjData(model)
    mujoco.mj_resetData(model, data)
    unactuated = copy.copy(model)
    unactuated.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_ACTUATION)
    mujoco.mj_forward(unactuated, data)
    mujoco.mj_step2(model, data)
    return data.qvel.copy()


class Run(DMCTask):
    domain = "cheetah"
    time_limit = 10.0
    fields = ("sensordata",)
    observation_keys = ("position", "velocity")

    def model_xml(self) -> str:
        return read_model("cheetah.xml")

    def bind(self, model, physics):
        super().bind(model, physics)
        if model.nq != model.njnt:  # dm_control asserts it: its draw indexes qpos by joint
            raise ValueError("cheetah's initial state assumes one qpos per joint")
        limited = [j for j in range(model.njnt) if model.jnt_limited[j]]
        self._limited = index_tensor([int(model.jnt_qposadr[j]) for j in limited], physics)
        self._limited_range = model.jnt_range[limited]
        self._speed = sensor_slice(model, "torso_subtreelinvel").start  # its x component
        self._first_velocity = as_tensor(first_settling_velocity(model), physics)
        self._timestep = float(model.opt.timestep)

    def initialize_episode(self, physics, selection, rng):
        qpos = read_rows(physics.qpos, selection)
        unit = selection.uniform(rng, 0.0, 1.0, len(self._limited), torch.float64)
        low, high = (torch.as_tensor(bound, dtype=torch.float64, device=unit.device) for bound in self._limited_range.T)
        qpos[:, self._limited] = (low + (high - low) * unit).to(qpos)
        # the first settling substep, dm_control's mj_step2 at qpos0's stage; hinges and slides only (nq == nv)
        velocity = self._first_velocity.to(qpos.device).expand(len(qpos), -1)
        write_rows(physics.qpos, selection, qpos + self._timestep * velocity)
        write_rows(physics.qvel, selection, velocity)
        ids = selected_ids(selection, physics.device)
        physics.step(SETTLING_STEPS - 1, env_ids=ids)  # their controls are zero since the reset
        physics.state[:, 0].index_fill_(0, ids, 0.0)  # physics.data.time = 0: time is the state's first column

    def observe(self, rows):
        return [rows.qpos[:, 1:], rows.qvel]

    def reward(self, rows):
        speed = rows.sensordata[:, self._speed]
        return tolerance(speed, (RUN_SPEED, float("inf")), margin=RUN_SPEED, value_at_margin=0.0, sigmoid="linear")


TASKS = {"run": Run}
