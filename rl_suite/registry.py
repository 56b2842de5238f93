"""Environment ids, named by entry-point strings so that the core never imports a simulator until asked.

``make("CartPole-v1", num_envs=4096)`` builds a native simulator. An id of the form ``"gym:<id>"`` runs any
gymnasium environment through the adapter, including tasks that have no native version.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any

import torch

from rl_suite.env import VecEnv, check_num_envs


@dataclass(frozen=True)
class EnvSpec:
    """A registered environment: its id, the ``"module:attribute"`` that builds it, and default kwargs."""

    id: str
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self):
        return load_entry_point(self.entry_point)


class UnknownEnvError(ValueError):
    """An id that is neither registered nor addressed to an adapter."""


_REGISTRY: dict[str, EnvSpec] = {}

# Prefixes that hand the rest of the id to an adapter: "gym:LunarLander-v3".
ADAPTER_PREFIXES: dict[str, str] = {
    "gym": "rl_suite.envs.adapters.gymnasium:GymnasiumVecEnv",
    "pz": "rl_suite.envs.adapters.pettingzoo:PettingZooVecEnv",
}


def register(env_id: str, entry_point: str, **kwargs) -> None:
    """Register ``env_id``; ``entry_point`` names a ``VecEnv`` class or factory as ``"module:attribute"``."""
    if ":" in env_id and env_id.split(":", 1)[0] in ADAPTER_PREFIXES:
        raise ValueError(f"{env_id!r} starts with an adapter prefix; choose another id")
    _REGISTRY[env_id] = EnvSpec(env_id, entry_point, dict(kwargs))


def registered() -> list[EnvSpec]:
    """Every registered spec, in registration order."""
    return list(_REGISTRY.values())


def spec(env_id: str) -> EnvSpec:
    try:
        return _REGISTRY[env_id]
    except KeyError:
        raise UnknownEnvError(_unknown_id_message(env_id)) from None


def load_entry_point(entry_point: str):
    module_name, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def make(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **kwargs,
) -> VecEnv:
    """Build ``num_envs`` environments of ``env_id`` on ``device``.

    ``seed`` seeds the per-environment random streams; extra keyword arguments go to the environment
    (for example ``max_episode_steps``, or task settings that gymnasium exposes, such as ``g`` for Pendulum).
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string such as 'CartPole-v1', got {type(env_id).__name__}")
    num_envs = check_num_envs(num_envs)
    prefix, colon, rest = env_id.partition(":")
    if colon and prefix in ADAPTER_PREFIXES:
        env = load_entry_point(ADAPTER_PREFIXES[prefix])(rest, num_envs=num_envs, device=device, seed=seed, **kwargs)
    else:
        env_spec = spec(env_id)
        env = env_spec.load()(num_envs=num_envs, device=device, seed=seed, **{**env_spec.kwargs, **kwargs})
    env.env_id = env_id
    return env


ALGORITHMS: dict[str, str] = {
    "ppo": "rl_suite.agents.ppo:PPO",
    "sac": "rl_suite.agents.sac:SAC",
    "pql": "rl_suite.agents.pql:PQL",
    "fpo": "rl_suite.agents.fpo:FPO",
    "policyflow": "rl_suite.agents.policyflow:PolicyFlow",
    "rarl": "rl_suite.agents.rarl:RARL",
    "mappo": "rl_suite.agents.mappo:MAPPO",
    "qmix": "rl_suite.agents.qmix:QMIX",
}


def register_algorithm(name: str, entry_point: str) -> None:
    """Register an ``Agent`` subclass under ``name`` (for ``rl-suite train NAME ...``)."""
    ALGORITHMS[name] = entry_point


def load_algorithm(name: str):
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name.lower(), list(ALGORITHMS), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownAlgorithmError(f"unknown algorithm {name!r}.{hint} Algorithms: {', '.join(ALGORITHMS)}")
    return load_entry_point(ALGORITHMS[name])


class UnknownAlgorithmError(ValueError):
    """An algorithm name that is not registered."""


def _unknown_id_message(env_id: str) -> str:
    message = f"unknown environment id {env_id!r}."
    close = difflib.get_close_matches(env_id, list(_REGISTRY), n=3, cutoff=0.6)
    if close:
        message += " Did you mean " + " or ".join(repr(c) for c in close) + "?"
    try:
        import gymnasium

        if env_id in gymnasium.registry:
            message += f" It has no native version, but gymnasium has it: use 'gym:{env_id}'."
    except ImportError:  # pragma: no cover - gymnasium is a dependency
        pass
    return message + " `rl-suite envs` lists the registered ids; 'gym:<id>' runs any gymnasium id."


# The built-in simulators. Entry points are strings: nothing here imports rl_suite.envs.
register("CartPole-v1", "rl_suite.envs.classic.cartpole:CartPole")
register("Pendulum-v1", "rl_suite.envs.classic.pendulum:Pendulum")
register("Acrobot-v1", "rl_suite.envs.classic.acrobot:Acrobot")
register("MountainCar-v0", "rl_suite.envs.classic.mountain_car:MountainCar")
register("MountainCarContinuous-v0", "rl_suite.envs.classic.mountain_car:MountainCarContinuous")
register("MultiGoal-v0", "rl_suite.envs.classic.multigoal:MultiGoal")  # no gymnasium counterpart

# gymnasium's v5 MuJoCo tasks on batched physics (MuJoCo's batch API on the CPU, mujoco_warp on CUDA). The factory
# builds a MujocoVecEnv, wrapped for observation noise or motor strength when those keywords are given.
for _task in (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
):
    register(f"{_task}-v5", "rl_suite.envs.mujoco.randomization:make_mujoco_env", task=_task)
del _task

# Multi-agent tasks (batched torch; no gymnasium counterparts). Spread and Tag follow mpe2's simple_spread_v3 and
# simple_tag_v3; the skirmish scenarios are ours, in the spirit of SMAC's maps of the same names.
register("Spread-v0", "rl_suite.envs.multiagent.mpe:Spread")
register("Tag-v0", "rl_suite.envs.multiagent.mpe:Tag")
register("Skirmish-3m-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="3m")
register("Skirmish-8m-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="8m")
register("Skirmish-2s3z-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="2s3z")
