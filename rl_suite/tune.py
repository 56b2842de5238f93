"""Hyperparameter search with Optuna: ``rl-suite tune ALGO ENV_ID``.

A study lives in a database (SQLite by default, ``<study-dir>/study.db``; any SQLAlchemy URL, such as PostgreSQL,
with ``--storage``), so that several worker processes, on one machine or many, share it: another machine joins by
running the same command with the same ``--storage``. Each trial is an ordinary run, in ``<study-dir>/trials/
trial-<number>`` (config.yaml, checkpoints, summary.json), whose value is its final evaluation's mean return. Every
evaluation is reported to the study as it is made, and a pruner (median or Hyperband) may end a trial there: a
pruned trial's run directory has no summary.json.

The search space of an algorithm is shipped as YAML (``agents/search_spaces/<algo>.yaml``, next to its tuned
settings), one entry per setting of the run or the agent::

    lr: {type: float, low: 1.0e-5, high: 3.0e-3, log: true}
    epochs: {type: int, low: 1, high: 20}
    hidden: {type: categorical, choices: [[64, 64], [256, 256]]}

``--space FILE`` replaces it, and ``--set KEY=VALUE`` fixes a setting for every trial (taking it out of the space).
The file holds names and numbers only: it is read with ``yaml.safe_load`` and chooses nothing that is imported or
called. ``--best`` prints the best trial's settings as a ``--set`` line and as YAML for ``agents/hyperparams``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import multiprocessing
import os
import pathlib
import shlex
import socket
import types
import typing
from typing import Any

import numpy as np
import yaml

from rl_suite.config import ConfigError, coerce, field_types, parse_assignments, read_yaml
from rl_suite.device import usable_cores
from rl_suite.registry import load_algorithm
from rl_suite.runner import RunConfig, env_id_as_name
from rl_suite.settings import check_new_run, new_run_settings

TYPES = ("float", "int", "categorical")
PRUNERS = ("median", "hyperband", "none")

MEASURE = frozenset(
    {"algo", "env_id", "seed", "total_steps", "time_budget_s", "eval_every_steps", "eval_episodes",
     "stop_at_return", "stop_at_win_rate"}
)  # fmt: skip
"""Run settings that say how trials are measured, so that their values compare: fixed (``--set``), never searched."""

TRIAL_DEFAULTS = {"progress": False}
"""Settings of every trial unless ``--set`` says otherwise: W workers' progress bars would write over each other."""


# -- the search space -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched setting: a float or int range (``log``: sampled uniformly in log space; ``step``: a grid), or a
    list of choices (plain values; lists, such as a network's ``hidden`` sizes, are offered to Optuna as YAML
    strings, which are keys back to the values, never parsed)."""

    name: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        if self.type == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)
        if self.type == "int":
            return trial.suggest_int(self.name, self.low, self.high, log=self.log, step=self.step or 1)
        labels = {_label(choice): choice for choice in self.choices}
        return labels[trial.suggest_categorical(self.name, list(labels))]


def _label(choice: Any) -> Any:
    return yaml.safe_dump(choice, default_flow_style=True).strip() if isinstance(choice, list) else choice


def _number(value, number, where: str):
    """``value`` as a ``number`` (float or int); ``None`` stays ``None``. YAML reads ``1e-4`` (no dot) as a string,
    which a float takes."""
    if value is None:
        return None
    if isinstance(value, bool) or (number is int and not isinstance(value, int)):
        raise ConfigError(f"{where} {value!r} is not {'a number' if number is float else 'an integer'}")
    try:
        return number(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} {value!r} is not a number") from None


def _takes(value, annotation, name: str, where: str) -> None:
    try:
        coerce(value, annotation, name)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def _inner(annotation):
    """``X`` of ``X | None``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args and typing.get_origin(annotation) in (typing.Union, types.UnionType) else annotation


def shipped_space_path(algo) -> pathlib.Path:
    """``agents/search_spaces/<algo>.yaml``: next to the algorithm's module, as its tuned settings are (settings.py)."""
    return pathlib.Path(inspect.getfile(algo)).parent / "search_spaces" / f"{algo.name}.yaml"


def read_space(path, algo) -> dict[str, Dimension]:
    """The search space in the YAML file ``path``, checked against ``algo``'s settings and the run's: every entry
    names a setting, has a known type, a range whose ends the setting takes and ``low <= high``, or choices it takes."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"no search space for {algo.name}: {path} does not exist (give one with --space FILE)")
    settings = {**field_types(RunConfig), **field_types(algo.Config)}
    space = {}
    for name, entry in read_yaml(path).items():
        where = f"{path}: {name!r}"
        if name not in settings:
            raise ConfigError(f"{where} is not a setting of the run or of {algo.name}; settings: {', '.join(settings)}")
        if name in MEASURE:
            raise ConfigError(f"{where} says how trials are measured; fix it with --set {name}=... instead")
        if not isinstance(entry, dict) or entry.get("type") not in TYPES:
            kind = entry.get("type") if isinstance(entry, dict) else entry
            raise ConfigError(f"{where} has type {kind!r}; expected a mapping with type one of {', '.join(TYPES)}")
        unknown = set(entry) - (
            {"type", "choices"} if entry["type"] == "categorical" else {"type", "low", "high", "log", "step"}
        )
        if unknown:
            raise ConfigError(f"{where} has unknown keys {sorted(unknown)}")
        space[name] = _dimension(name, entry, settings[name], where)
    if not space:
        raise ConfigError(f"{path} searches no setting")
    return space


def _dimension(name: str, entry: dict, annotation, where: str) -> Dimension:
    if entry["type"] == "categorical":
        choices = entry.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where} needs a non-empty list of choices")
        for choice in choices:
            if not isinstance(choice, (type(None), bool, int, float, str, list)):
                raise ConfigError(f"{where}: choice {choice!r} is not a plain value or a list of them")
            _takes(choice, annotation, name, where)  # a choice the setting does not take fails here, not in a trial
        return Dimension(name, "categorical", choices=tuple(choices))
    number = float if entry["type"] == "float" else int
    bounds = {key: _number(entry.get(key), number, f"{where}: {key}") for key in ("low", "high", "step")}
    if bounds["low"] is None or bounds["high"] is None:
        raise ConfigError(f"{where} needs low and high")
    low, high, log = bounds["low"], bounds["high"], entry.get("log", False)
    if low > high:
        raise ConfigError(f"{where}: low {low} is above high {high}")
    if type(log) is not bool or (log and low <= 0):
        raise ConfigError(f"{where}: log must be true or false, and true needs low > 0 (got log {log!r}, low {low})")
    if log and bounds["step"] is not None:
        raise ConfigError(f"{where}: a range is sampled in log space or on a grid (step), not both")
    if number is float and _inner(annotation) is int:
        raise ConfigError(f"{where}: {name} is an integer setting; give it type int")
    _takes(low, annotation, name, where), _takes(high, annotation, name, where)  # a setting that takes no number
    return Dimension(name, entry["type"], low, high, log, bounds.get("step"))


# -- the storage ------------------------------------------------------------------------------------------------


def open_storage(url: str):
    """Optuna's storage at the SQLAlchemy URL ``url`` (tables made if new); a URL that names no database it can open
    is a ``ValueError`` that names it, raised before anything is written."""
    import optuna
    import sqlalchemy.engine
    import sqlalchemy.exc

    expected = "expected a SQLAlchemy database URL such as sqlite:///tune/study.db or postgresql://user@host/db"
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise ValueError(f"storage {url!r} is not a database URL; {expected}") from None
    shown = parsed.render_as_string(hide_password=True)
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and parsed.database in (None, "", ":memory:"):
        raise ValueError(f"storage {shown!r} is an in-memory database, which workers cannot share; {expected}")
    if sqlite and not pathlib.Path(parsed.database).parent.is_dir():
        raise ValueError(f"storage {shown!r}: the folder {pathlib.Path(parsed.database).parent} does not exist")
    # SQLite lets one writer in at a time: workers wait up to a minute for the lock rather than fail
    engine_kwargs = {"connect_args": {"timeout": 60}} if sqlite else None
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    except sqlalchemy.exc.ArgumentError as error:  # NoSuchModuleError too: an unknown dialect
        raise ValueError(f"storage {shown!r} names no database SQLAlchemy knows ({error}); {expected}") from None
    except ImportError:
        raise ValueError(
            f"storage {shown!r} needs a database driver that is not installed (psycopg2 for postgresql, "
            "PyMySQL for mysql+pymysql)"
        ) from None
    except sqlalchemy.exc.OperationalError as error:
        raise ValueError(f"storage {shown!r} cannot be opened: {error.orig}") from None


# -- the study --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Plan:
    """What every worker of a study runs (plain data: it travels to spawned processes)."""

    algo: str
    env_id: str
    space: dict[str, Dimension]
    fixed: dict[str, Any]
    """Settings of every trial: ``TRIAL_DEFAULTS``, then ``--set`` and the flags."""
    storage: str
    study_name: str
    study_dir: str
    pruner: str
    startup_trials: int


def default_study_name(algo: str, env_id: str) -> str:
    return f"{algo}-{env_id_as_name(env_id)}"


def tune(
    algo_name: str,
    env_id: str,
    trials: int,
    workers: int = 1,
    storage: str | None = None,
    study_name: str | None = None,
    study_dir: str | None = None,
    space_path: str | None = None,
    pruner: str = "median",
    startup_trials: int = 5,
    seed: int = 0,
    overrides: dict | None = None,
) -> str:
    """Run ``trials`` trials of ``algo_name`` on ``env_id``, shared out among ``workers`` processes, in the study
    ``study_name`` (joined if it exists); returns the best-trial report (``best_report``)."""
    if trials < 1 or workers < 1:
        raise ValueError(f"--trials and --workers must be at least 1, got {trials} and {workers}")
    if pruner not in PRUNERS:
        raise ValueError(f"unknown pruner {pruner!r}; expected one of {', '.join(PRUNERS)}")
    algo = load_algorithm(algo_name)
    # Everything the user gave is checked before the storage is touched or a folder made.
    space = read_space(space_path or shipped_space_path(algo), algo)
    fixed = {**TRIAL_DEFAULTS, "seed": seed, **(overrides or {})}
    space = {name: dimension for name, dimension in space.items() if name not in fixed}
    if not space:
        raise ConfigError("--set fixes every setting of the search space: nothing is left to search")
    run_values, agent_values = new_run_settings(algo, env_id, fixed)
    if check_new_run(algo, run_values, agent_values).eval_episodes < 1:  # every fixed setting within its range
        raise ConfigError("a trial's value is its evaluation's mean return: eval_episodes must be at least 1")
    study_name = study_name or default_study_name(algo.name, env_id)
    folder = pathlib.Path(study_dir or pathlib.Path("tune") / study_name)
    if storage is None:
        folder.mkdir(parents=True, exist_ok=True)
        storage = f"sqlite:///{(folder / 'study.db').resolve()}"
        opened = open_storage(storage)
    else:
        opened = open_storage(storage)
        folder.mkdir(parents=True, exist_ok=True)
    plan = Plan(algo.name, env_id, space, fixed, storage, study_name, str(folder), pruner, startup_trials)
    study = _study(plan, opened, create=True)
    before = len(study.trials)
    shares = [trials // workers + (index < trials % workers) for index in range(workers)]
    seeds = np.random.SeedSequence([seed, before]).generate_state(workers).tolist()  # a sampler seed per worker
    if workers == 1:
        run_worker(plan, 0, shares[0], seeds[0], threads=None)
    else:
        spawn = multiprocessing.get_context("spawn")
        threads = max(1, len(usable_cores()) // workers)  # workers share the cores rather than oversubscribe them
        processes = [
            spawn.Process(target=run_worker, args=(plan, index, share, seeds[index], threads), name=f"tune-{index}")
            for index, share in enumerate(shares)
            if share > 0
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        failed = [f"{p.name} (exit code {p.exitcode})" for p in processes if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"workers failed: {', '.join(failed)}; their errors are above")
    return best_report(plan.study_name, storage, algo.name, env_id, opened)


def _study(plan: Plan, storage, sampler=None, create: bool = False):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # each worker prints one line per trial instead
    study = optuna.create_study(
        storage=storage,
        study_name=plan.study_name,
        direction="maximize",
        sampler=sampler,
        pruner=_pruner(plan),
        load_if_exists=True,
    )
    attrs = study.user_attrs
    if create and not attrs:
        study.set_user_attr("algo", plan.algo)
        study.set_user_attr("env_id", plan.env_id)
    elif attrs and (attrs.get("algo"), attrs.get("env_id")) != (plan.algo, plan.env_id):
        raise ValueError(
            f"study {plan.study_name!r} searches {attrs.get('algo')} on {attrs.get('env_id')}, not {plan.algo} on "
            f"{plan.env_id}: give another --study-name"
        )
    return study


def _pruner(plan: Plan):
    """Median: a trial stops at an evaluation below the median of the finished trials' at the same step (once
    ``startup_trials`` have finished). Hyperband (Li et al. 2018): successive halving in brackets, from one
    evaluation interval to the whole budget."""
    import optuna

    if plan.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=plan.startup_trials, n_warmup_steps=0)
    if plan.pruner == "hyperband":
        run_values, _ = new_run_settings(load_algorithm(plan.algo), plan.env_id, plan.fixed)
        config = RunConfig(**run_values)
        return optuna.pruners.HyperbandPruner(
            min_resource=min(config.eval_every_steps, config.total_steps), max_resource=config.total_steps
        )
    return optuna.pruners.NopPruner()


# -- a worker and its trials ------------------------------------------------------------------------------------


def run_worker(plan: Plan, index: int, trials: int, sampler_seed: int, threads: int | None) -> None:
    """Run ``trials`` trials of ``plan``'s study, with a TPE sampler seeded ``sampler_seed`` (constant liar: trials
    that others run at the same time count as bad, so that workers spread out)."""
    import optuna
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    sampler = optuna.samplers.TPESampler(seed=sampler_seed, constant_liar=True)
    study = _study(plan, open_storage(plan.storage), sampler)
    study.optimize(lambda trial: _objective(plan, trial), n_trials=trials, callbacks=[_print_trial])


def _objective(plan: Plan, trial) -> float:
    import optuna

    from rl_suite.registry import make
    from rl_suite.rng import seed_everything
    from rl_suite.runner import Runner

    algo = load_algorithm(plan.algo)
    sampled = {name: dimension.suggest(trial) for name, dimension in plan.space.items()}
    trial.set_user_attr("settings", sampled)  # the values themselves (a list choice's, not its label)
    run_values, agent_values = new_run_settings(algo, plan.env_id, {**plan.fixed, **sampled})
    config = RunConfig(**run_values)
    run_dir = pathlib.Path(plan.study_dir) / "trials" / f"trial-{trial.number}"
    if run_dir.exists():
        raise ValueError(f"{run_dir} exists already (from an earlier study?): remove it or give another --study-dir")
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # which machine and process ran it
    every = max(config.eval_every_steps, 1)

    def report(row: dict) -> None:
        last = row["env_steps"] >= config.total_steps or (
            config.stop_at_return is not None and row["mean_return"] >= config.stop_at_return
        )
        # The step an evaluation stands for: its scheduled multiple of eval_every_steps, so that trials whose
        # iterations differ in size (n_steps, num_envs) compare at the same steps.
        step = config.total_steps if last else row["env_steps"] // every * every
        trial.report(row["mean_return"], step)
        trial.set_user_attr("env_steps", row["env_steps"])
        if not last and trial.should_prune():  # a trial at its end has nothing left to save
            raise optuna.TrialPruned()

    seed_everything(config.seed)
    env = make(plan.env_id, num_envs=config.num_envs, device=config.device, seed=config.seed, **config.env_kwargs)
    agent = algo.for_env(env, algo.Config(**agent_values), device=config.device)
    summary = Runner(agent, env, config, run_dir=run_dir, on_evaluation=report).run()
    return summary["final_eval"]["mean_return"]


def _print_trial(study, trial) -> None:
    if trial.state.name == "COMPLETE":
        outcome = f"mean return {trial.value:.1f}"
    elif trial.state.name == "PRUNED" and trial.intermediate_values:
        last = trial.intermediate_values[max(trial.intermediate_values)]
        outcome = f"pruned at {trial.user_attrs['env_steps']:,} env steps, mean return {last:.1f}"
    else:
        outcome = trial.state.name.lower()
    print(f"trial {trial.number}: {outcome}; {_set_line(trial.user_attrs.get('settings', {}))}", flush=True)


# -- the best trial ---------------------------------------------------------------------------------------------


def best(algo_name: str, env_id: str, storage: str | None, study_name: str | None, study_dir: str | None) -> str:
    """The report on the best trial of an existing study (``rl-suite tune --best``); nothing is run or written."""
    algo = load_algorithm(algo_name)
    study_name = study_name or default_study_name(algo.name, env_id)
    if storage is None:
        path = pathlib.Path(study_dir or pathlib.Path("tune") / study_name) / "study.db"
        storage = f"sqlite:///{path.resolve()}"
    else:
        path = _sqlite_file(storage)
    if path is not None and not path.is_file():
        raise ValueError(f"no study {study_name!r}: {path} does not exist (run `rl-suite tune` first)")
    return best_report(study_name, storage, algo.name, env_id, open_storage(storage))


def _sqlite_file(url: str) -> pathlib.Path | None:
    import sqlalchemy.engine
    import sqlalchemy.exc

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError:
        return None  # open_storage says what is wrong with it
    return pathlib.Path(parsed.database) if parsed.get_backend_name() == "sqlite" and parsed.database else None


def best_report(study_name: str, url: str, algo: str, env_id: str, storage) -> str:
    """The best trial as YAML: comments that name it and give a ``--set`` line, then ``<env_id>: {settings}``, the
    layout of ``agents/hyperparams/<algo>.yaml`` (so the output can be appended there)."""
    import optuna

    names = optuna.get_all_study_names(storage)
    if study_name not in names:
        known = f"; it holds {', '.join(sorted(names))}" if names else "; it holds none"
        raise ValueError(f"no study {study_name!r} in {url}{known}")
    study = optuna.load_study(study_name=study_name, storage=storage)
    attrs = study.user_attrs
    if (attrs.get("algo"), attrs.get("env_id")) != (algo, env_id):
        raise ValueError(f"study {study_name!r} searches {attrs.get('algo')} on {attrs.get('env_id')}, not {algo} on "
                         f"{env_id}")  # fmt: skip
    states = [trial.state.name.lower() for trial in study.trials]
    counts = ", ".join(
        f"{states.count(s)} {s}" for s in ("complete", "pruned", "fail", "running", "waiting") if s in states
    )
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise ValueError(f"study {study_name!r} has no complete trial yet ({counts or 'no trials'})")
    trial = study.best_trial
    settings = trial.user_attrs["settings"]
    lines = [
        f"# study {study_name!r} ({url}): {len(study.trials)} trials, {counts}",
        f"# best: trial {trial.number}, mean return {trial.value:.2f}, run {trial.user_attrs.get('run_dir')}",
        f"# rl-suite train {algo} {env_id} {_set_line(settings)}",
        f"# for agents/hyperparams/{algo}.yaml:",
        yaml.dump({env_id: settings}, Dumper=_HyperparamsDumper, sort_keys=False).rstrip(),
    ]
    return "\n".join(lines)


class _HyperparamsDumper(yaml.SafeDumper):
    """Block mappings with lists inline (``hidden: [64, 64]``), as agents/hyperparams/*.yaml are written."""


_HyperparamsDumper.add_representer(
    list, lambda dumper, value: dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)
)


def _set_line(settings: dict) -> str:
    """``--set k=v ...``, ready for a shell; values as ``--set`` reads them (YAML: lists as ``[64,64]``)."""

    def text(value):
        return json.dumps(value, separators=(",", ":")) if isinstance(value, (list, bool)) or value is None else value

    return "--set " + " ".join(shlex.quote(f"{key}={text(value)}") for key, value in settings.items())


def overrides_from_flags(flags: dict, assignments: list[str]) -> dict:
    """The fixed settings of ``rl-suite tune``: the flags that were given, then ``--set``."""
    return {**{key: value for key, value in flags.items() if value is not None}, **parse_assignments(assignments)}
