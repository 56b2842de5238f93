"""Reset banks, after OmniReset: episodes that start from a bank of states instead of (or as well as) the task's own
reset, so that the learner meets diverse states (fallen robots, mid-task configurations) without a curriculum or
demonstrations.

A ``ResetBank`` holds states ``(qpos [B, nq], qvel [B, nv])`` of one MuJoCo model, and the model's signature (its
``nq``, ``nv`` and joint names and types), so that a bank made for another model is refused. Its states come from:

- a generator: ``ResetBank.generate(model, make_states, count, seed)``, where ``make_states(generator, count)``
  returns ``(qpos, qvel)`` drawn from a seeded ``torch.Generator``;
- rollouts: ``bank.record(qpos, qvel)`` appends states (for example ``env.get_state()`` rows of a policy's own
  trajectories, or its failures); a bank of ``capacity`` keeps the newest;
- a file: ``bank.save(path)`` and ``ResetBank.load(path, model)``, plain tensors read with ``weights_only=True``.

An environment with a bank (``env.use_reset_bank(bank, fraction)``, or the env keywords ``reset_bank=PATH`` and
``reset_bank_fraction``) starts each episode from a uniformly drawn bank state with probability ``fraction``, and
from its own reset otherwise. Both draws come from the environment's own random stream: seeded, independent of how
many environments there are, and resumed exactly, since the environment's checkpoint holds the bank's states too.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib

import torch

from rl_suite.env import Selection
from rl_suite.rng import EnvStreams


def model_signature(model) -> str:
    """A short fingerprint of what a state means for ``model``: ``nq``, ``nv`` and every joint's name and type."""
    joints = [[model.joint(j).name, int(model.jnt_type[j])] for j in range(model.njnt)]
    return hashlib.sha256(json.dumps([int(model.nq), int(model.nv), joints]).encode()).hexdigest()[:16]


def attached(bank: ResetBank | None, fraction: float, model, physics) -> tuple[ResetBank | None, float]:
    """``(bank, fraction)`` checked for an environment of ``model`` stepped by ``physics``, with the bank's states
    moved to the physics' device and precision; ``(None, 0.0)`` for no bank. What ``use_reset_bank`` sets."""
    if bank is None:
        return None, 0.0
    if bank.signature != model_signature(model):
        raise ValueError(
            "this reset bank was made for another model: its qpos and qvel would mean other joints "
            f"(the bank's nq={bank.nq}, nv={bank.nv}; this env's nq={model.nq}, nv={model.nv})"
        )
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"reset_bank_fraction must be in [0, 1], got {fraction!r}")
    return bank.to(physics.device, physics.dtype), float(fraction)


def bank_checkpoint(bank: ResetBank | None) -> dict:
    """What an environment's ``state_dict`` holds of its bank (the states recorded so far): nothing without one."""
    return {"reset_bank": bank.state_dict()} if bank is not None else {}


def restore_bank(bank: ResetBank | None, state: dict) -> None:
    """Load ``bank_checkpoint``'s part of an environment's ``state`` into its ``bank``."""
    if ("reset_bank" in state) != (bank is not None):
        raise ValueError("the checkpoint and this env disagree on a reset bank: attach the same bank to resume")
    if bank is not None:
        bank.load_state_dict(state["reset_bank"])


class ResetBank:
    """States to start episodes from (see the module docstring). ``capacity`` (default: as many as given) bounds
    what ``record`` keeps: beyond it, the oldest states are overwritten."""

    def __init__(self, qpos, qvel, model, capacity: int | None = None):
        self.nq, self.nv, self.signature = int(model.nq), int(model.nv), model_signature(model)
        qpos, qvel = self._checked(qpos, qvel)
        capacity = len(qpos) if capacity is None else int(capacity)
        if capacity < max(1, len(qpos)):
            raise ValueError(f"a reset bank's capacity must be at least 1 and hold its {len(qpos)} states")
        self.qpos = torch.zeros(capacity, self.nq, dtype=torch.float64)
        self.qvel = torch.zeros(capacity, self.nv, dtype=torch.float64)
        self.size, self.next = 0, 0
        self.record(qpos, qvel)

    @classmethod
    def generate(cls, model, make_states, count: int, seed: int, capacity: int | None = None) -> ResetBank:
        """``count`` states from ``make_states(generator, count) -> (qpos, qvel)``, given a generator seeded with
        ``seed``: the same seed, the same bank."""
        generator = torch.Generator().manual_seed(seed)
        qpos, qvel = make_states(generator, count)
        return cls(qpos, qvel, model, capacity)

    def _checked(self, qpos, qvel) -> tuple[torch.Tensor, torch.Tensor]:
        qpos = torch.as_tensor(qpos, dtype=torch.float64).cpu()
        qvel = torch.as_tensor(qvel, dtype=torch.float64).cpu()
        if qpos.dim() != 2 or qpos.shape[1] != self.nq or qvel.dim() != 2 or qvel.shape[1] != self.nv:
            raise ValueError(
                f"reset bank states must be qpos [B, nq={self.nq}] and qvel [B, nv={self.nv}] of the model, got "
                f"qpos {list(qpos.shape)} and qvel {list(qvel.shape)}"
            )
        if len(qpos) != len(qvel):
            raise ValueError(f"reset bank states: {len(qpos)} qpos rows but {len(qvel)} qvel rows")
        if not (torch.isfinite(qpos).all() and torch.isfinite(qvel).all()):
            raise ValueError("reset bank states must be finite")
        return qpos, qvel

    def record(self, qpos, qvel) -> None:
        """Append states (``[k, nq]``, ``[k, nv]``); beyond the capacity the oldest go."""
        qpos, qvel = self._checked(qpos, qvel)
        capacity = len(self.qpos)
        qpos, qvel = qpos[-capacity:], qvel[-capacity:]  # only the newest ``capacity`` can stay
        rows = (self.next + torch.arange(len(qpos))) % capacity
        self.qpos[rows.to(self.qpos.device)] = qpos.to(self.qpos)
        self.qvel[rows.to(self.qvel.device)] = qvel.to(self.qvel)
        self.next = (self.next + len(qpos)) % capacity
        self.size = min(self.size + len(qpos), capacity)

    def __len__(self) -> int:
        return self.size

    # -- drawing ------------------------------------------------------------------------------------------------

    def mix(
        self, selection: Selection, rng: EnvStreams, qpos: torch.Tensor, qvel: torch.Tensor, fraction: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The reset states ``(qpos, qvel)`` of the rows ``selection`` draws for: each row replaced, with
        probability ``fraction``, by a uniformly drawn bank state (two draws per row from ``rng``)."""
        if not self.size:
            raise ValueError("the reset bank is empty: record or load states before resetting from it")
        draws = selection.uniform(rng, 0.0, 1.0, 2, torch.float32).to(qpos.device)
        chosen = (draws[:, 1].double() * self.size).long().clamp_max(self.size - 1)
        if self.qpos.device != qpos.device or self.qpos.dtype != qpos.dtype:
            self.to(qpos.device, qpos.dtype)
        use = (draws[:, 0] < fraction)[:, None]
        return torch.where(use, self.qpos[chosen], qpos), torch.where(use, self.qvel[chosen], qvel)

    def to(self, device, dtype) -> ResetBank:
        """Keep the states on ``device`` in ``dtype`` (the physics'), so that drawing copies nothing to the host."""
        self.qpos, self.qvel = self.qpos.to(device, dtype), self.qvel.to(device, dtype)
        return self

    # -- files and checkpoints ------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {
            "qpos": self.qpos[: self.size].double().cpu().clone(),
            "qvel": self.qvel[: self.size].double().cpu().clone(),
            "capacity": len(self.qpos),
            "next": self.next,
            "signature": self.signature,
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("signature") != self.signature:
            raise ValueError(
                f"this reset bank was made for another model (signature {state.get('signature')!r}, this model's is "
                f"{self.signature!r}): its states would mean other joints"
            )
        qpos, qvel = self._checked(state["qpos"], state["qvel"])
        capacity = int(state["capacity"])
        if not len(qpos) <= capacity or not 0 <= int(state["next"]) < max(capacity, 1):
            raise ValueError(f"a reset bank's state is inconsistent: {len(qpos)} states, capacity {capacity}")
        device, dtype = self.qpos.device, self.qpos.dtype
        self.qpos = torch.zeros(capacity, self.nq, dtype=torch.float64)
        self.qvel = torch.zeros(capacity, self.nv, dtype=torch.float64)
        self.qpos[: len(qpos)], self.qvel[: len(qvel)] = qpos, qvel
        self.size, self.next = len(qpos), int(state["next"])
        self.to(device, dtype)

    def save(self, path: str | os.PathLike) -> None:
        """Write the bank to ``path`` (atomically: a temporary file, then a rename)."""
        path = pathlib.Path(path)
        temporary = path.with_name(path.name + ".tmp")
        torch.save(self.state_dict(), temporary)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | os.PathLike, model) -> ResetBank:
        """The bank saved at ``path``, for ``model``; refused if it was made for another model or is malformed.
        Read with ``weights_only=True``: a file holds tensors and numbers, never code."""
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or not {"qpos", "qvel", "capacity", "next", "signature"} <= set(state):
            raise ValueError(f"{path} is not a reset bank (saved by ResetBank.save)")
        bank = cls(torch.zeros(0, model.nq), torch.zeros(0, model.nv), model, capacity=1)
        bank.load_state_dict(state)
        return bank
