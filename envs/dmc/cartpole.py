"""dm_control's cartpole domain (``suite/cartpole.py``): balance, balance_sparse, swingup, swingup_sparse.

Observation: ``position`` (the cart's position, then the pole frame's zz and xz entries), ``velocity`` (qvel).
Smooth reward: ``upright * small_control * small_velocity * centered``, with ``upright = (cos + 1) / 2``,
``centered = (1 + tolerance(x, margin=2)) / 2``, ``small_control = (4 + tolerance(u, margin=1, value_at_margin=0,
quadratic)) / 5`` and ``small_velocity = (1 + tolerance(angular velocity, margin=5)) / 2``. Sparse reward: 1 while
the cart is within 0.25 of the centre and the pole's cosine is at least 0.995. Balance starts near upright (cart
uniform in ±0.1, pole in ±0.034 rad), swing-up hanging down (cart and pole angle with 0.01 noise); both add
velocity noise of 0.01. 10 s at the model's 0.01 s timestep: 1,000 steps.
"""

from __future__ import annotations

import math

import torch

from rl_suite.envs.dmc.base import DMCTask, read_model, read_rows, write_rows, xmat_component
from rl_suite.envs.dmc.rewards import tolerance

CART_RANGE = (-0.25, 0.25)  # dm_control's Balance._CART_RANGE
ANGLE_COSINE_RANGE = (0.995, 1.0)  # Balance._ANGLE_COSINE_RANGE


class Balance(DMCTask):
    domain = "cartpole"
    time_limit = 10.0
    fields = ("xmat",)
    observation_keys = ("position", "velocity")
    swing_up = False
    sparse = False

    def model_xml(self) -> str:
        return read_model("cartpole.xml")  # one pole: dm_control's _make_model(1) is the file as it is

    def initialize_episode(self, physics, selection, rng):
        nv = self.model.nv
        qpos = read_rows(physics.qpos, selection)
        if self.swing_up:
            noise = selection.normal(rng, nv, torch.float64).to(qpos)
            qpos[:, 0] = 0.01 * noise[:, 0]
            qpos[:, 1] = math.pi + 0.01 * noise[:, 1]
            qpos[:, 2:] = 0.1 * noise[:, 2:]
        else:
            qpos[:, 0] = selection.uniform(rng, -0.1, 0.1, 1, torch.float64)[:, 0].to(qpos)
            qpos[:, 1:] = selection.uniform(rng, -0.034, 0.034, nv - 1, torch.float64).to(qpos)
        write_rows(physics.qpos, selection, qpos)
        write_rows(physics.qvel, selection, 0.01 * selection.normal(rng, nv, torch.float64))

    def observe(self, rows):
        poles = slice(2, None)  # dm_control: named.data.xmat[2:, ['zz', 'xz']], bodies after world and cart
        angles = torch.stack([xmat_component(rows, poles, "zz"), xmat_component(rows, poles, "xz")], dim=2)
        return [torch.cat([rows.qpos[:, :1], angles.flatten(1)], dim=1), rows.qvel]

    def reward(self, rows):
        cart = rows.qpos[:, 0]
        cosine = xmat_component(rows, slice(2, None), "zz")
        if self.sparse:
            return tolerance(cart, CART_RANGE) * tolerance(cosine, ANGLE_COSINE_RANGE).prod(dim=1)
        upright = (cosine + 1) / 2
        centered = (1 + tolerance(cart, margin=2)) / 2
        small_control = tolerance(rows.ctrl, margin=1, value_at_margin=0, sigmoid="quadratic")[:, 0]
        small_control = (4 + small_control) / 5
        small_velocity = (1 + tolerance(rows.qvel[:, 1:], margin=5).amin(dim=1)) / 2
        return upright.mean(dim=1) * small_control * small_velocity * centered


class BalanceSparse(Balance):
    sparse = True


class SwingUp(Balance):
    swing_up = True


class SwingUpSparse(Balance):
    swing_up = True
    sparse = True


TASKS = {"balance": Balance, "balance_sparse": BalanceSparse, "swingup": SwingUp, "swingup_sparse": SwingUpSparse}
