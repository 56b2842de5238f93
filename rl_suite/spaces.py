"""Gymnasium spaces as plain data, so that checkpoints and exported policies carry them without pickling."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def space_to_dict(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "low": space.low.tolist(), "high": space.high.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    raise ValueError(f"cannot describe {space} as data")


def space_from_dict(data: dict[str, Any]) -> gym.Space:
    kind = data["type"]
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        return gym.spaces.Box(np.array(data["low"], dtype=dtype), np.array(data["high"], dtype=dtype), dtype=dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(data["n"], start=data["start"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(data["nvec"], start=data["start"])
    raise ValueError(f"unknown space type {kind!r}")
