"""The settings a training run starts or resumes with, for ``rl-suite train`` and ``Agent.learn`` alike.

A new run takes the algorithm's shipped settings for its task (``agents/hyperparams/<algo>.yaml``: its ``default``
section, then the task's own, then the named profile the user chose from its ``profiles`` section, such as
FlashSAC's ``gpu``), then the user's. A resumed run keeps the settings its config.yaml holds: only those in
``RESUMABLE`` (budgets, stop conditions, the progress bar) may change. The run directory may come from a stranger, so
its config.yaml is read as plain YAML and its environment id and keywords are checked (``trusted_env_spec``) before
anything is built from them.
"""

from __future__ import annotations

import inspect
import os
import pathlib

import torch
import yaml

from rl_suite.config import ConfigError, read_yaml, split_overrides, to_plain
from rl_suite.registry import trusted_env_spec
from rl_suite.runner import RunConfig

RESUMABLE = frozenset({"total_steps", "time_budget_s", "stop_at_return", "stop_at_win_rate", "progress", "loggers"})
"""The settings a resumed run may change (what the run reports to, not what it trains); the others stay as the run
started."""


def tuned_table(algo) -> dict:
    """The algorithm's shipped settings file (``agents/hyperparams/<name>.yaml``) as read: section name (``default``,
    an env id, or ``profiles``: profile name to settings) to settings; empty where the algorithm ships none."""
    path = pathlib.Path(inspect.getfile(algo)).parent / "hyperparams" / f"{algo.name}.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def tuned_settings(algo, env_id: str, profile: str | None = None) -> dict:
    """The algorithm's shipped settings for ``env_id`` (its ``default`` section, then the task's own), then those of
    the named ``profile``."""
    table = tuned_table(algo)
    profiles = table.get("profiles") or {}
    if profile is not None and profile not in profiles:
        offered = ", ".join(sorted(profiles)) or "none"
        raise ConfigError(f"{algo.name} has no settings profile {profile!r} (its profiles: {offered})")
    return layered(table.get("default") or {}, table.get(env_id) or {}, profiles.get(profile) or {})


def layered(*layers: dict) -> dict:
    """Settings layered in order, each over the ones before; ``env_kwargs`` merge key by key, so that
    ``--set env_kwargs={backend: warp}`` keeps the task keywords a tuned section sets."""
    merged: dict = {}
    for layer in layers:
        env_kwargs = {**(merged.get("env_kwargs") or {}), **(layer.get("env_kwargs") or {})}
        merged.update(layer)
        if env_kwargs:
            merged["env_kwargs"] = env_kwargs
    return merged


def check_new_run(algo, run_values: dict, agent_values: dict) -> RunConfig:
    """The run's ``RunConfig``, once every setting is checked, before anything is built: each one's range
    (``RunConfig``'s and ``algo.Config``'s: ``rl_suite.config.setting``) and, for on-policy agents, the minibatches
    against the rollout of ``n_steps * num_envs`` samples."""
    from rl_suite.config import check_settings
    from rl_suite.onpolicy import OnPolicyAgent, check_minibatches

    config = RunConfig(**run_values)
    agent_config = algo.Config(**agent_values)
    check_settings(agent_config, algo.name)
    if issubclass(algo, OnPolicyAgent) and hasattr(agent_config, "minibatches"):
        check_minibatches(algo.name, agent_config.minibatches, agent_config.n_steps, config.num_envs)
    return config


def new_run_settings(algo, env_id: str, overrides: dict, profile: str | None = None) -> tuple[dict, dict]:
    """The run's and the agent's settings (``RunConfig`` and ``algo.Config`` values) of a new run of ``algo`` on
    ``env_id``: the shipped settings (with ``profile``'s), then ``overrides`` (``layered``)."""
    shipped = tuned_settings(algo, env_id, profile)
    run_values, agent_values = split_overrides(layered(shipped, overrides), RunConfig, algo.Config)
    run_values.update(algo=algo.name, env_id=env_id)
    return run_values, agent_values


def saved_settings(run_dir: pathlib.Path) -> tuple[dict, dict]:
    """The ``run`` and ``agent`` sections of a run directory's config.yaml (plain YAML only)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory: it has no config.yaml")
    saved = read_yaml(path)
    sections = [saved.get(name) for name in ("run", "agent")]
    if not all(type(section) is dict for section in sections):
        raise ConfigError(f"{path} lacks its 'run' and 'agent' settings")
    return sections[0], sections[1]


def resumed_settings(algo, env_id: str, run_dir: str | os.PathLike, overrides: dict) -> tuple[dict, dict]:
    """The run's and the agent's settings of the run in ``run_dir``, resumed with ``overrides``: the run must be one of
    ``algo`` on ``env_id``, and ``overrides`` may change only the ``RESUMABLE`` settings."""
    run_dir = pathlib.Path(run_dir)
    saved_run, saved_agent = saved_settings(run_dir)
    if (saved_run.get("algo"), saved_run.get("env_id")) != (algo.name, env_id):
        saved = f"{saved_run.get('algo')} on {saved_run.get('env_id')}"
        raise ConfigError(f"{run_dir} is a run of {saved}, not of {algo.name} on {env_id}")
    # The caller's env_id (the CLI's positional ENV_ID, the id of the env given to Agent.learn) is the user's
    # confirmation of the file's id; only checked values go on to make.
    env_id, env_kwargs = trusted_env_spec(
        saved_run["env_id"], saved_run.get("env_kwargs"), f"the run {run_dir}", env_id, "ENV_ID"
    )
    run_values, agent_values = split_overrides({**saved_run, **saved_agent}, RunConfig, algo.Config)
    run_values.update(env_id=env_id, env_kwargs=env_kwargs)
    changed, _ = split_overrides(overrides, RunConfig, algo.Config)
    if set(overrides) - RESUMABLE:
        raise ConfigError(f"a resumed run keeps its settings; only {sorted(RESUMABLE)} may change")
    run_values.update(changed)
    return run_values, agent_values


def check_built_as_saved(run_dir, config: RunConfig, agent_values: dict, agent, env) -> None:
    """Refuse to resume the run in ``run_dir`` (settings ``config`` and ``agent_values``) with an ``agent`` and an
    ``env`` that were built otherwise: another agent setting, another number of environments or another kind of
    device. ``Agent.learn(resume=...)`` needs this check; the CLI builds both from the run's settings."""
    saved = {"num_envs": config.num_envs, "device": torch.device(config.device).type}
    built = {"num_envs": env.num_envs, "device": agent.device.type}
    saved.update(to_plain(agent.Config(**agent_values)))
    built.update(to_plain(agent.config))
    for key, value in built.items():
        if value != saved[key]:
            raise ConfigError(
                f"{run_dir} ran with {key}={saved[key]!r}, not {value!r}: a resumed run keeps its settings, so build "
                "the agent and the env as the run's config.yaml says"
            )
