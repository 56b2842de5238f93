"""Environment ids, named by entry-point strings so that the core never imports a simulator until asked.

``make("CartPole-v1", num_envs=4096)`` builds a native simulator. An id of the form ``"gym:<id>"`` runs any
gymnasium environment through the adapter, including tasks that have no native version.

An id and keyword arguments read from a file (a run directory's checkpoint and config.yaml) go through
``trusted_env_spec`` before ``make``: an adapter id imports and calls whatever module and attribute it names, so a
file may name only a registered native task, with plain keyword arguments that the task's constructor takes, unless
the user repeats the id on the command line. Algorithms named by a file resolve only by their key in ``ALGORITHMS``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import pathlib
import pkgutil
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


class UntrustedEnvError(ValueError):
    """An environment read from a file that is not built unconfirmed: an adapter id that the user has not repeated on
    the command line, or keyword arguments that are not plain data or not the task's."""


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


def summary(env_spec: EnvSpec) -> dict[str, str]:
    """What ``rl-suite envs`` and the documentation's environment reference show of a registered task, read from one
    environment built with its defaults: ``observation`` (the shape), ``action`` (the space) and ``time_limit``, or
    ``unavailable`` (the optional extra it needs is not installed)."""
    try:
        env = env_spec.load()(num_envs=1, **env_spec.kwargs)
    except ImportError as error:
        return {"unavailable": str(error)}
    try:
        return {
            "observation": str(tuple(env.observation_space.shape)),
            "action": str(env.action_space),
            "time_limit": str(env.max_episode_steps),
        }
    finally:
        env.close()


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
    env.env_id, env.env_kwargs = env_id, dict(kwargs)
    return env


# -- ids and keyword arguments read from files ----------------------------------------------------------------

# The env contract's keyword options (VecEnv, MultiAgentVecEnv), which native tasks take through **contract_options.
CONTRACT_OPTIONS = ("check_values", "masked_resets")
# make's own arguments: a file's env_kwargs never set them.
_MAKE_ARGUMENTS = ("num_envs", "device", "seed")


def accepted_keywords(env_spec: EnvSpec) -> list[str]:
    """The keyword arguments ``make(env_spec.id, ...)`` takes from a file: the entry point's named parameters, less
    make's own arguments and those the registration fixes (the MuJoCo ids' ``task``). A class that forwards
    ``**options`` to its bases' constructors (the classic and MPE tasks) also takes their keyword-only parameters,
    and the contract's options once it reaches the contract's constructor. A function with ``**kwargs`` takes the
    contract's options, and one that forwards them further lists what it takes in an
    ``accepted_keywords(**registered_kwargs)`` attribute (the MuJoCo factory does)."""
    factory = env_spec.load()  # the registry's own entry point, never one named by a file
    declared = getattr(factory, "accepted_keywords", None)
    if declared is not None:
        names = list(declared(**env_spec.kwargs))
    elif isinstance(factory, type):
        names = _constructor_keywords(factory)
    else:
        parameters = inspect.signature(factory).parameters.values()
        names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            names += CONTRACT_OPTIONS
    return [name for name in dict.fromkeys(names) if name not in _MAKE_ARGUMENTS and name not in env_spec.kwargs]


_KEYWORD, _KEYWORD_ONLY = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY


def _constructor_keywords(cls: type) -> list[str]:
    """The named parameters of ``cls``'s constructor, then, while constructors forward ``**options`` up the MRO, the
    keyword-only ones of the bases' constructors, and the contract's options on reaching the contract's own."""
    names: list[str] = []
    constructors = [vars(base)["__init__"] for base in cls.__mro__ if "__init__" in vars(base)]
    for depth, constructor in enumerate(constructors):
        parameters = list(inspect.signature(constructor).parameters.values())[1:]  # less self
        forwards = any(p.kind is p.VAR_KEYWORD for p in parameters)
        if depth > 0 and not forwards:  # the contract's own constructor (VecEnv, MultiAgentVecEnv)
            names += CONTRACT_OPTIONS
            break
        named = (_KEYWORD, _KEYWORD_ONLY) if depth == 0 else (_KEYWORD_ONLY,)
        names += [p.name for p in parameters if p.kind in named]
        if not forwards:
            break
    return names


def not_plain_data(value: Any, where: str) -> str | None:
    """Where ``value`` stops being plain data (numbers, strings, booleans, None, and lists and string-keyed dicts of
    those), or None. Types are matched exactly: a subclass of ``str`` or ``dict`` could carry behaviour."""
    if type(value) in (bool, int, float, str, type(None)):
        return None
    if type(value) in (list, tuple):
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    elif type(value) is dict:
        keys = [key for key in value if type(key) is not str]
        if keys:
            return f"{where} has the key {keys[0]!r}, a {type(keys[0]).__name__}"
        items = [(f"{where}[{key!r}]", item) for key, item in value.items()]
    else:
        return f"{where} is a {type(value).__name__}"
    for place, item in items:
        problem = not_plain_data(item, place)
        if problem:
            return problem
    return None


def trusted_env_spec(
    env_id: Any, env_kwargs: Any, source: str, confirmed_id: str | None = None, flag: str = "--env"
) -> tuple[str, dict[str, Any]]:
    """Check an environment id and keyword arguments read from ``source`` (a checkpoint, a config.yaml) before anything
    is built from them; returns them, ready for ``make``.

    A registered native id is used as it is. An adapter id (``gym:``, ``pz:``, or any ``module:attribute``) imports
    and calls the code it names, so it is used only when the user repeated it on the command line (``confirmed_id``,
    given through ``flag``). ``env_kwargs`` must be plain data, and for a native id the names must be keyword
    arguments of its entry point (``accepted_keywords``); an adapter id's keywords go to the environment the user
    confirmed. Anything else raises ``UntrustedEnvError`` (an unknown id without a colon, ``UnknownEnvError``),
    before any import that the file's contents choose.
    """
    if type(env_id) is not str:
        raise UntrustedEnvError(f"{source} names the environment {env_id!r}, which is not an id (a string)")
    if confirmed_id is not None and confirmed_id != env_id:
        raise UntrustedEnvError(f"{source} was trained on {env_id!r}, but {flag} says {confirmed_id!r}")
    env_kwargs = {} if env_kwargs is None else env_kwargs
    if type(env_kwargs) is not dict:
        raise UntrustedEnvError(f"{source}: env_kwargs is a {type(env_kwargs).__name__}, not a mapping of keywords")
    problem = not_plain_data(env_kwargs, "env_kwargs")
    if problem:
        raise UntrustedEnvError(
            f"{source}: {problem}; env_kwargs read from a file must be plain data (numbers, strings, booleans, None, "
            "and lists and dicts of those)"
        )
    reserved = [name for name in env_kwargs if name in _MAKE_ARGUMENTS]
    if reserved:
        raise UntrustedEnvError(
            f"{source}: env_kwargs sets {reserved[0]!r}, which is make's own argument, not the environment's"
        )
    if env_id in _REGISTRY:
        accepted = accepted_keywords(_REGISTRY[env_id]) if env_kwargs else []
        unknown = [name for name in env_kwargs if name not in accepted]
        if unknown:
            raise UntrustedEnvError(
                f"{source}: {unknown[0]!r} is not a keyword argument of {env_id}; it takes {', '.join(accepted)}"
            )
    elif ":" in env_id:
        if confirmed_id is None:
            raise UntrustedEnvError(
                f"{source} names the environment {env_id!r}, an adapter id: building it imports and calls the code it "
                "names, so an id read from a file is used only when it is a registered native task. If you trust "
                f"this run directory, confirm the id on the command line: {flag} {env_id}"
            )
    else:
        raise UnknownEnvError(_unknown_id_message(env_id))
    return env_id, dict(env_kwargs)


def run_env_spec(
    run_dir: str | pathlib.Path, checkpoint: dict[str, Any], confirmed_id: str | None = None, flag: str = "--env"
) -> tuple[str, dict[str, Any]]:
    """The environment a run directory was trained on, ready for ``make``: the id from its ``checkpoint``, the keyword
    arguments from its config.yaml, checked by ``trusted_env_spec``."""
    from rl_suite.config import read_yaml

    run_dir = pathlib.Path(run_dir)
    config_path = run_dir / "config.yaml"
    run = read_yaml(config_path).get("run", {}) if config_path.is_file() else {}
    if type(run) is not dict:
        raise UntrustedEnvError(f"{config_path}: 'run' is a {type(run).__name__}, not a mapping of settings")
    env_id = checkpoint.get("env_id")
    if "env_id" in run and (type(env_id) is not str or run["env_id"] != env_id):
        raise UntrustedEnvError(f"{config_path} names the environment {run['env_id']!r} and the checkpoint {env_id!r}")
    return trusted_env_spec(env_id, run.get("env_kwargs"), f"the run {run_dir}", confirmed_id, flag)


# -- algorithms ---------------------------------------------------------------------------------------------------


def _shipped_algorithms() -> dict[str, str]:
    """The algorithms of ``rl_suite.agents``, one module each: ``agents/<name>.py`` holds the ``Agent`` whose ``name``
    is ``<name>``. Found by listing the installed package's modules (not importing them), so that a new algorithm
    needs no line here; modules whose names start with ``_`` are helpers, not algorithms."""
    spec = importlib.util.find_spec("rl_suite.agents")
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    modules = [m.name for m in pkgutil.iter_modules(locations) if not m.ispkg and not m.name.startswith("_")]
    modules.sort(key=lambda name: (_LISTING_ORDER.index(name) if name in _LISTING_ORDER else len(_LISTING_ORDER), name))
    return {name: f"rl_suite.agents.{name}" for name in modules}


# How `rl-suite algos` and error messages order the shipped algorithms (the README's Agents table); an algorithm not
# named here needs no line: it comes after these, by name.
_LISTING_ORDER = ("ppo", "sac", "pql", "fpo", "policyflow", "rarl", "mappo", "qmix", "maddpg")


# name -> entry point: ``module:Class``, or a module of ``rl_suite.agents``, whose algorithm of that name is taken.
ALGORITHMS: dict[str, str] = _shipped_algorithms()


def register_algorithm(name: str, entry_point: str) -> None:
    """Register an ``Agent`` subclass under ``name`` (for ``rl-suite train NAME ...``, and for files that name it)."""
    ALGORITHMS[name] = entry_point


def load_algorithm(name: str):
    """The ``Agent`` class registered as ``name``. Names read from files (checkpoints, ``Agent.load``) come here too:
    they select a key of ``ALGORITHMS``, whose entry points only code puts there (the built-ins and
    ``register_algorithm``, like the native envs' ``register``), and are never read as entry points."""
    if type(name) is not str:
        raise UnknownAlgorithmError(
            f"unknown algorithm {name!r}: an algorithm is named by a string. Algorithms: {', '.join(ALGORITHMS)}"
        )
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name.lower(), list(ALGORITHMS), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownAlgorithmError(f"unknown algorithm {name!r}.{hint} Algorithms: {', '.join(ALGORITHMS)}")
    entry_point = ALGORITHMS[name]
    if ":" in entry_point:
        return load_entry_point(entry_point)
    module = importlib.import_module(entry_point)
    defined = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__ and getattr(value, "name", None) == name
    ]
    if len(defined) != 1:
        raise UnknownAlgorithmError(f"{entry_point} defines {len(defined)} classes named {name!r}, not one")
    return defined[0]


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
# builds a MujocoVecEnv, wrapped for observation noise or motor strength when those keywords are given. This list is
# the one place that names them: rl_suite.envs.mujoco.tasks builds its TASKS from it (the core cannot import envs).
MUJOCO_TASKS = (
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
)
for _task in MUJOCO_TASKS:
    register(f"{_task}-v5", "rl_suite.envs.mujoco.randomization:make_mujoco_env", task=_task)
del _task

# Legged robots following velocity commands on flat ground: one task over a robot config (rl_suite/envs/robots), our
# Go1-size quadruped and gymnasium's Ant. No gymnasium counterparts.
register("QuadrupedVelocity-Flat-v0", "rl_suite.envs.robots.velocity:LeggedVelocityEnv", robot="quadruped")
register("AntVelocity-Flat-v0", "rl_suite.envs.robots.velocity:LeggedVelocityEnv", robot="ant")
# ... and on rough terrain: legged_gym's grid of tiles with its terrain curriculum (rl_suite/envs/robots/terrain.py)
register("QuadrupedVelocity-Rough-v0", "rl_suite.envs.robots.velocity:LeggedVelocityEnv", robot="quadruped", terrain={})
# ... and the G1-class humanoid on flat ground, with the biped reward terms (velocity.HUMANOID_SETTINGS)
register("HumanoidVelocity-Flat-v0", "rl_suite.envs.robots.velocity:HumanoidVelocityEnv", robot="humanoid")

# The DeepMind Control Suite on batched physics (rl_suite/envs/dmc), with dm_control's semantics and model files (the
# dm_control package, as data), as dm_control/<domain>-<task>-v0 (the Farama convention). This table is the one place
# that names them: rl_suite.envs.dmc.env builds its domains from it.
DMC_TASKS: dict[str, tuple[str, ...]] = {
    "acrobot": ("swingup", "swingup_sparse"),
    "ball_in_cup": ("catch",),
    "cartpole": ("balance", "balance_sparse", "swingup", "swingup_sparse"),
    "cheetah": ("run",),
    "finger": ("spin", "turn_easy", "turn_hard"),
    "fish": ("upright", "swim"),
    "hopper": ("stand", "hop"),
    "humanoid": ("stand", "walk", "run"),
    "manipulator": ("bring_ball",),
    "pendulum": ("swingup",),
    "point_mass": ("easy",),
    "reacher": ("easy", "hard"),
    "swimmer": ("swimmer6", "swimmer15"),
    "walker": ("stand", "walk", "run"),
    # the hard set that TD-MPC2 and BRO report on
    "quadruped": ("walk", "run"),
    "dog": ("stand", "walk", "trot", "run"),
}
for _domain, _tasks in DMC_TASKS.items():
    for _task in _tasks:
        register(f"dm_control/{_domain}-{_task}-v0", "rl_suite.envs.dmc.env:DMCVecEnv", domain=_domain, task=_task)
del _domain, _tasks, _task

# Multi-agent tasks (batched torch; no gymnasium counterparts). Spread and Tag follow mpe2's simple_spread_v3 and
# simple_tag_v3; the skirmish scenarios are ours, in the spirit of SMAC's maps of the same names.
register("Spread-v0", "rl_suite.envs.multiagent.mpe:Spread")
register("Tag-v0", "rl_suite.envs.multiagent.mpe:Tag")
register("Skirmish-3m-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="3m")
register("Skirmish-8m-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="8m")
register("Skirmish-2s3z-v0", "rl_suite.envs.multiagent.skirmish:Skirmish", scenario="2s3z")
register("Pursuit-v0", "rl_suite.envs.multiagent.pursuit:Pursuit")
