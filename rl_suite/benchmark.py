"""``rl-suite benchmark``: a grid of (algorithm, task, seed) training runs, each an ordinary run directory, run in
parallel processes sized to the machine, resumable, and reported with reliable statistics (rl_suite/report.py).

A benchmark directory holds:

    grid.yaml                 the grid it was started with (a rerun must ask for the same budgets and settings)
    runs/<algo>__<env>__s<seed>/  one ordinary run directory per run (config.yaml, checkpoints/, summary.json, ...)
    logs/<algo>__<env>__s<seed>.log  what each run printed
    report.md, report.csv, report_curves.png, report_profiles.png  the report over the finished runs

A run is finished when its summary.json exists: the runner writes it atomically at the very end, so a run killed at
any point is never reported as finished. A rerun skips the finished runs, resumes the unfinished ones from their
newest checkpoints (``rl-suite train --resume``), and starts the rest.

Each run is its own process, ``python -m rl_suite train ...``, with ``threads`` torch threads (``OMP_NUM_THREADS``),
pinned to its own ``threads`` cores; ``jobs`` of them run at once, by default as many as the cores allow. Nothing is
written until the whole grid has been checked: every algorithm and task exists and every pair builds with its
settings.

A grid file may define variants: an algorithm with settings of its own, named, and listed in ``algos`` like an
algorithm (its runs and its rows in the report carry the name)::

    algos: [sac, sac-dsac, ppo]
    envs: [HalfCheetah-v5, Ant-v5]
    seeds: 3
    time_budget_s: 900
    set: [eval_episodes=10]
    variants:
      sac-dsac: {algo: sac, set: [critic=dsac]}

and what its report holds besides the returns (``report``; none of it changes a run): the final evaluation's task
metrics, play that learned nothing evaluated as the runs are (``zero`` actions, ``random`` N(0, 1) ones: the rows
every threshold is shown against), and a goal whose verdict the report states, for random play too::

    report:
      metrics: [tracking_error_lin, fell]
      fixed_plays: [zero, random]
      goal: {algos: [ppo], metric: tracking_error_lin, at_most: 0.25, every_seed: true}
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import torch
import yaml

from rl_suite.device import usable_cores

GRID_KEYS = ("algos", "envs", "seeds", "total_steps", "time_budget_s", "set", "variants", "report")
REPORT_KEYS = ("metrics", "fixed_plays", "goal")
GOAL_KEYS = ("algos", "metric", "at_least", "at_most", "every_seed")
FIXED_PLAYS = {"zero": "zero actions", "random": "random, N(0, 1) actions"}  # FixedPlay's kinds, as reports name them
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclasses.dataclass(frozen=True)
class Goal:
    """A line every (algorithm, task) of a benchmark is held to: a final evaluation's ``metric`` at least or at most a
    number, on every seed (or on the mean over seeds)."""

    metric: str = "mean_return"
    """A key of the runs' final evaluation: ``mean_return``, or a task metric (``tracking_error_lin``, ``fell``)."""
    at_least: float | tuple[tuple[str, float], ...] | None = None
    """Met where the metric is at least this: one number, or one per task (``{task: number}`` in the grid file).
    Give this or ``at_most``."""
    at_most: float | tuple[tuple[str, float], ...] | None = None
    """Met where the metric is at most this."""
    algos: tuple[str, ...] = ()
    """The algorithms (or variants) held to it; empty for every one of the grid."""
    every_seed: bool = True
    """Every seed's final evaluation must meet it; if false, the mean over seeds."""

    def line(self, task: str) -> float:
        """The number ``task`` is held to."""
        bound = self.at_least if self.at_least is not None else self.at_most
        return dict(bound)[task] if isinstance(bound, tuple) else bound

    def holds(self, value: float, task: str) -> bool:
        return value >= self.line(task) if self.at_least is not None else value <= self.line(task)

    def words(self, task: str | None = None) -> str:
        bound = self.at_least if self.at_least is not None else self.at_most
        if task is not None or not isinstance(bound, tuple):
            number = f"{self.line(task) if task is not None else bound:g}"
        else:
            number = "the task's number (" + ", ".join(f"{name} {value:g}" for name, value in bound) + ")"
        side = ">=" if self.at_least is not None else "<="
        over = "on every seed" if self.every_seed else "on the mean over seeds"
        return f"final {self.metric} {side} {number} {over}"


@dataclasses.dataclass(frozen=True)
class ReportSpec:
    """What a benchmark's report holds besides the returns; none of it changes a run."""

    metrics: tuple[str, ...] = ()
    """Task metrics of the final evaluation reported per (algorithm, task): ``tracking_error_lin``, ``fell``, ..."""
    fixed_plays: tuple[str, ...] = ()
    """Play that learned nothing, evaluated on each task as the runs' final evaluations are (``FIXED_PLAYS``)."""
    goal: Goal | None = None
    """The line the report gives a verdict on, for every algorithm it names and every task."""


def report_spec(values, where: str) -> ReportSpec:
    """A grid's ``report`` mapping as a ``ReportSpec``, refused with the key at fault named."""
    if values in (None, {}):
        return ReportSpec()
    if not isinstance(values, dict) or set(values) - set(REPORT_KEYS):
        raise ValueError(f"{where}: report must be a mapping of {', '.join(REPORT_KEYS)}, got {values!r}")
    for key in ("metrics", "fixed_plays"):
        if not (isinstance(values.get(key, []), list) and all(isinstance(v, str) for v in values.get(key, []))):
            raise ValueError(f"{where}: report {key} must be a list of names, got {values[key]!r}")
    unknown = [play for play in values.get("fixed_plays", []) if play not in FIXED_PLAYS]
    if unknown:
        raise ValueError(f"{where}: unknown fixed play {unknown[0]!r}; the plays are {', '.join(FIXED_PLAYS)}")
    goal = values.get("goal")
    if goal is not None:
        if not isinstance(goal, dict) or set(goal) - set(GOAL_KEYS):
            raise ValueError(f"{where}: report goal must be a mapping of {', '.join(GOAL_KEYS)}, got {goal!r}")
        bounds = [key for key in ("at_least", "at_most") if key in goal]
        bound = goal[bounds[0]] if len(bounds) == 1 else None
        per_task = isinstance(bound, dict)
        numbers = list(bound.values()) if per_task else [bound]
        if not numbers or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            raise ValueError(
                f"{where}: report goal needs one bound, at_least or at_most: a number, or one per task "
                f"({{task: number}}), got {goal!r}"
            )
        if per_task:
            goal = {**goal, bounds[0]: tuple((str(task), float(value)) for task, value in bound.items())}
        algos = goal.get("algos", [])
        if not isinstance(algos, list) or not all(isinstance(a, str) for a in algos):
            raise ValueError(f"{where}: report goal algos must be a list of names, got {algos!r}")
        if not isinstance(goal.get("metric", ""), str) or not isinstance(goal.get("every_seed", True), bool):
            raise ValueError(f"{where}: report goal metric must be a name and every_seed true or false, got {goal!r}")
        goal = Goal(**{**goal, "algos": tuple(algos)})
    return ReportSpec(tuple(values.get("metrics", [])), tuple(values.get("fixed_plays", [])), goal)


@dataclasses.dataclass(frozen=True)
class Grid:
    """What to run: every algorithm on every task with every seed, with the same budget and settings."""

    algos: tuple[str, ...]
    """Algorithm names (``rl-suite algos``), or names of ``variants``."""
    envs: tuple[str, ...]
    """Task ids (``rl-suite envs``); adapter ids (``gym:...``) only from the command line, never from a file."""
    seeds: tuple[int, ...]
    """One run per seed."""
    total_steps: int | None = None
    """Step budget of each run (its shipped settings' budget if neither this nor ``time_budget_s`` is given)."""
    time_budget_s: float | None = None
    """Wall-clock budget of each run, in seconds."""
    settings: tuple[str, ...] = ()
    """``key=value`` settings for every run (the ``--set`` of ``rl-suite train``)."""
    variants: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """``(name, algorithm, settings)``: an algorithm with its own ``key=value`` settings (after ``settings``)."""
    report: ReportSpec = ReportSpec()
    """What the report holds besides the returns (task metrics, play that learned nothing, a goal)."""

    def algorithm(self, name: str) -> tuple[str, tuple[str, ...]]:
        """The algorithm that ``name`` in ``algos`` runs, and the settings of its runs."""
        for variant, algo, settings in self.variants:
            if variant == name:
                return algo, self.settings + settings
        return name, self.settings

    def runs(self) -> list[BenchmarkRun]:
        return [BenchmarkRun(*run) for run in itertools.product(self.algos, self.envs, self.seeds)]

    def budget_flags(self) -> list[str]:
        flags = [] if self.total_steps is None else ["--total-steps", str(self.total_steps)]
        return flags + ([] if self.time_budget_s is None else ["--time-budget", str(self.time_budget_s)])

    def to_plain(self) -> dict:
        return {
            "algos": list(self.algos),
            "envs": list(self.envs),
            "seeds": list(self.seeds),
            "total_steps": self.total_steps,
            "time_budget_s": self.time_budget_s,
            "set": list(self.settings),
            "variants": {name: {"algo": algo, "set": list(settings)} for name, algo, settings in self.variants},
            "report": _plain_report(self.report),
        }


def _plain_report(spec: ReportSpec) -> dict:
    plain = {"metrics": list(spec.metrics), "fixed_plays": list(spec.fixed_plays)}
    if spec.goal is not None:
        goal = {key: value for key, value in dataclasses.asdict(spec.goal).items() if value is not None}
        goal = {key: dict(value) if key in ("at_least", "at_most") and isinstance(value, tuple) else value
                for key, value in goal.items()}  # fmt: skip
        plain["goal"] = {**goal, "algos": list(spec.goal.algos)}
    return {key: value for key, value in plain.items() if value}


@dataclasses.dataclass(frozen=True)
class BenchmarkRun:
    algo: str
    env_id: str
    seed: int

    @property
    def name(self) -> str:
        from rl_suite.runner import env_id_as_name

        return f"{self.algo}__{env_id_as_name(self.env_id)}__s{self.seed}"


def seeds_from(values: list[int] | int) -> tuple[int, ...]:
    """A count (``seeds: 5``, or ``--seeds 5`` on the command line) means seeds 0-4; a list names the seeds."""
    listed = [values] if isinstance(values, int) else list(values) if isinstance(values, list | tuple) else [None]
    if not listed or any(type(value) is not int or value < 0 for value in listed):
        raise ValueError(f"seeds must be a count or a list of non-negative integers, got {values!r}")
    seeds = tuple(range(values)) if isinstance(values, int) else tuple(listed)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must name at least one seed, each once, got {values!r}")
    return seeds


def load_grid(path: str | os.PathLike) -> dict:
    """A grid file's values (plain YAML: ``algos``, ``envs``, ``seeds``, ``total_steps``, ``time_budget_s``,
    ``set``). Adapter ids are refused: ids from files name native tasks only."""
    path = pathlib.Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read the benchmark grid {path}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must be a mapping with keys {', '.join(GRID_KEYS)}")
    unknown = sorted(set(data) - set(GRID_KEYS))
    if unknown:
        raise ValueError(f"{path} has unknown keys {unknown}; a grid has {', '.join(GRID_KEYS)}")
    for key in ("algos", "envs", "set"):
        if key in data and not (isinstance(data[key], list) and all(isinstance(v, str) for v in data[key])):
            raise ValueError(f"{path}: {key} must be a list of strings, got {data[key]!r}")
    variants = data.get("variants", {})
    if not isinstance(variants, dict):
        raise ValueError(f"{path}: variants must map names to {{algo: NAME, set: [KEY=VALUE, ...]}}, got {variants!r}")
    report_spec(data.get("report"), str(path))  # a bad report section fails before anything runs
    adapters = [env_id for env_id in data.get("envs", []) if ":" in env_id]
    if adapters:
        raise ValueError(f"{path} names adapter ids {adapters}: give those with --envs on the command line")
    return data


def make_grid(file_values: dict, algos=None, envs=None, seeds=None, total_steps=None, time_budget_s=None,
              settings=None) -> Grid:  # fmt: skip
    """The grid of a file's values with the command line's over them (its ``--set`` settings after the file's)."""
    values = {**file_values}
    given = {"algos": algos, "envs": envs, "seeds": seeds, "total_steps": total_steps,
             "time_budget_s": time_budget_s, "set": settings}  # fmt: skip
    values.update({key: value for key, value in given.items() if value not in (None, [], ()) and key != "set"})
    values["set"] = [*(values.get("set") or []), *(settings or [])]  # the command line's settings after the file's
    for key in ("algos", "envs"):
        if not values.get(key):
            raise ValueError(f"a benchmark needs at least one of --{key} (or a grid file listing {key})")
    if "seeds" not in values:
        raise ValueError("a benchmark needs --seeds (a count, or the seeds)")
    for key, cast in (("total_steps", int), ("time_budget_s", float)):
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
            raise ValueError(f"{key} must be a positive number, got {value!r}")
        values[key] = None if value is None else cast(value)
    for key in ("algos", "envs"):
        if len(set(values[key])) != len(values[key]):
            raise ValueError(f"{key} lists an entry twice: {values[key]}")
    return Grid(
        algos=tuple(values["algos"]),
        envs=tuple(values["envs"]),
        seeds=seeds_from(values["seeds"]),
        total_steps=values["total_steps"],
        time_budget_s=values["time_budget_s"],
        settings=tuple(values.get("set") or ()),
        variants=_variants(values.get("variants") or {}),
        report=report_spec(values.get("report"), "the grid"),
    )


def _variants(table: dict) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    from rl_suite.registry import ALGORITHMS

    variants = []
    for name, entry in table.items():
        if not isinstance(name, str) or not VARIANT_NAME.fullmatch(name) or name in ALGORITHMS:
            raise ValueError(
                f"a variant's name must be letters, digits and _.+- (it names run directories) and not an algorithm's "
                f"name, got {name!r}"
            )
        settings = entry.get("set", []) if isinstance(entry, dict) else None
        if (not isinstance(entry, dict) or set(entry) - {"algo", "set"} or not isinstance(entry.get("algo"), str)
                or not isinstance(settings, list) or not all(isinstance(item, str) for item in settings)):  # fmt: skip
            raise ValueError(f"variant {name!r} must be {{algo: NAME, set: [KEY=VALUE, ...]}}, got {entry!r}")
        variants.append((name, entry["algo"], tuple(settings)))
    return tuple(variants)


def check_grid(grid: Grid) -> None:
    """Every algorithm and task exists, and every pair builds with the grid's settings (one environment each, on the
    CPU), so that a typo fails now rather than hours into the benchmark."""
    from rl_suite.config import parse_assignments
    from rl_suite.multiagent import MultiAgentVecEnv
    from rl_suite.registry import load_algorithm, make
    from rl_suite.settings import check_new_run, new_run_settings

    # an unknown name fails here, with a suggestion
    algos = {name: load_algorithm(grid.algorithm(name)[0]) for name in grid.algos}
    goal = grid.report.goal
    if goal is not None and set(goal.algos) - set(grid.algos):
        raise ValueError(f"the report's goal names {sorted(set(goal.algos) - set(grid.algos))}, not in algos")
    per_task = goal is not None and isinstance(goal.at_least if goal.at_least is not None else goal.at_most, tuple)
    if per_task and set(grid.envs) != {task for task, _ in (goal.at_least or goal.at_most)}:
        raise ValueError(f"the report's goal needs one number for each task of the grid ({', '.join(grid.envs)})")
    for env_id in grid.envs:
        env = make(env_id, num_envs=1, seed=0)  # an unknown id fails here, with the close ones
        try:
            if grid.report.fixed_plays and isinstance(env, MultiAgentVecEnv):
                raise ValueError(f"the report's fixed plays are for single-agent tasks, not {env_id}")
            for name, algo in algos.items():
                overrides = {**parse_assignments(list(grid.algorithm(name)[1])), "device": "cpu"}
                run_values, agent_values = new_run_settings(algo, env_id, overrides)
                check_new_run(algo, run_values, agent_values)  # a setting out of range, before the env decides
                try:
                    algo.for_env(env, algo.Config(**agent_values), device="cpu")
                except ValueError as error:
                    raise ValueError(f"{name} cannot train on {env_id}: {error}") from None
        finally:
            env.close()


# -- the runs ---------------------------------------------------------------------------------------------------


def run_dir(bench_dir: pathlib.Path, run: BenchmarkRun) -> pathlib.Path:
    return bench_dir / "runs" / run.name


def is_finished(directory: pathlib.Path) -> bool:
    try:
        return isinstance(json.loads((directory / "summary.json").read_text()), dict)
    except (OSError, ValueError):
        return False


def train_command(grid: Grid, run: BenchmarkRun, directory: pathlib.Path) -> list[str]:
    """The ``rl-suite train`` command of ``run``: a resume where the run left a checkpoint."""
    from rl_suite.checkpoint import checkpoints

    algo, settings = grid.algorithm(run.algo)
    command = [sys.executable, "-m", "rl_suite", "train", algo, run.env_id, *grid.budget_flags()]
    if checkpoints(directory):
        return command + ["--resume", str(directory)]
    return command + ["--seed", str(run.seed), "--run-dir", str(directory), "--set", *settings]


def start_benchmark(bench_dir: pathlib.Path, grid: Grid) -> None:
    """Check the grid, and record it in ``bench_dir`` (or check that it is the one recorded there)."""
    check_grid(grid)
    recorded_path = bench_dir / "grid.yaml"
    if recorded_path.is_file():
        recorded = yaml.safe_load(recorded_path.read_text()) or {}
        shared = set(recorded.get("variants") or {}) & set(grid.to_plain()["variants"])
        for key in ("total_steps", "time_budget_s", "set", *(f"variant {name}" for name in sorted(shared))):
            if _recorded(recorded, key) != _recorded(grid.to_plain(), key):
                raise ValueError(
                    f"{bench_dir} holds a benchmark with {key} {_recorded(recorded, key)!r}, not "
                    f"{_recorded(grid.to_plain(), key)!r}: its runs would not compare; give the same value or another "
                    "directory"
                )
        # algorithms, tasks and seeds may grow: a rerun adds their runs
        grid_values = {key: _union(recorded.get(key, []), grid.to_plain()[key]) for key in ("algos", "envs", "seeds")}
        recorded.update(grid_values, variants={**(recorded.get("variants") or {}), **grid.to_plain()["variants"]})
        if grid.to_plain()["report"]:  # what the report holds changes no run: the newest grid's says
            recorded["report"] = grid.to_plain()["report"]
    else:
        recorded = grid.to_plain()
    bench_dir.mkdir(parents=True, exist_ok=True)
    partial = recorded_path.with_suffix(".tmp")
    partial.write_text(yaml.safe_dump(recorded, sort_keys=False))
    os.replace(partial, recorded_path)


def _recorded(grid_values: dict, key: str):
    """A grid's budget or common settings (``key``), or a variant's definition (``variant <name>``)."""
    if key.startswith("variant "):
        return (grid_values.get("variants") or {}).get(key.removeprefix("variant "))
    return grid_values.get(key)


def _union(first: list, second: list) -> list:
    return list(dict.fromkeys([*first, *second]))


def parallelism(jobs: int | None, threads: int) -> tuple[list[int], int]:
    """The cores this process may use, and how many runs go at once (default: as many as the cores hold)."""
    cores = usable_cores()
    if threads < 1 or threads > len(cores):
        raise ValueError(f"threads must be between 1 and the {len(cores)} cores this process may use, got {threads}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    return cores, jobs or max(1, len(cores) // threads)


def run_grid(bench_dir: pathlib.Path, grid: Grid, jobs: int | None = None, threads: int = 1, echo=print) -> list[str]:
    """Run every run of ``grid`` that has not finished, ``jobs`` at a time; returns the failed runs' names (with
    their logs named in what ``echo`` printed). On Ctrl-C every running run is interrupted, writes its checkpoint and
    stops; a rerun continues them."""
    cores, jobs = parallelism(jobs, threads)
    slots = [cores[(slot * threads) % len(cores) :][:threads] or cores[:threads] for slot in range(jobs)]
    (bench_dir / "logs").mkdir(parents=True, exist_ok=True)
    # Two benchmarks in one directory would train one run twice. The runs inherit the lock, so it is held until the
    # last of them has stopped, even when this process was killed (its runs then stop at their next step).
    lock = open(bench_dir / ".lock", "w")  # noqa: SIM115 - held until this function returns
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise RuntimeError(
            f"another rl-suite benchmark is running in {bench_dir}, or the runs of one that was stopped are writing "
            "their checkpoints: wait for them, or stop them"
        ) from None
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:  # a scheduler's SIGTERM stops the runs as Ctrl-C does
        previous = signal.signal(signal.SIGTERM, _as_interrupt)
    try:
        with lock:
            return _run_all(bench_dir, grid, jobs, slots, threads, echo, lock.fileno())
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _as_interrupt(signum, frame):
    raise KeyboardInterrupt


def _run_all(bench_dir, grid, jobs, slots, threads, echo, lock_fd: int) -> list[str]:
    runs = grid.runs()
    waiting = [run for run in runs if not is_finished(run_dir(bench_dir, run))]
    echo(f"{len(runs) - len(waiting)} of {len(runs)} runs finished before; {len(waiting)} to run, {jobs} at a time "
         f"with {threads} thread(s) each")  # fmt: skip
    running: dict[int, tuple[subprocess.Popen, BenchmarkRun]] = {}
    failed: list[str] = []
    try:
        while waiting or running:
            for slot in range(jobs):
                if slot not in running and waiting:
                    run = waiting.pop(0)
                    running[slot] = (_launch(bench_dir, grid, run, slots[slot], threads, echo, lock_fd), run)
            time.sleep(0.2)
            for slot, (process, run) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[slot]
                log = bench_dir / "logs" / f"{run.name}.log"
                if process.returncode == 0 and is_finished(run_dir(bench_dir, run)):
                    echo(f"finished {run.name}")
                else:
                    failed.append(run.name)
                    echo(f"FAILED {run.name} (exit {process.returncode}); see {log}")
    except KeyboardInterrupt:
        # The runs sit in sessions of their own, so a Ctrl-C in the terminal reaches this process only, and each run
        # is interrupted once, here: a second interrupt would cut its checkpoint short.
        echo(f"interrupted: stopping {len(running)} run(s), each writes a checkpoint; rerun to continue")
        for process, _ in running.values():
            process.send_signal(signal.SIGINT)
        for process, _ in running.values():
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
        raise
    return failed


def _launch(bench_dir, grid: Grid, run: BenchmarkRun, cores: list[int], threads: int, echo, lock_fd: int):
    directory = run_dir(bench_dir, run)
    command = train_command(grid, run, directory)
    if "--resume" in command:
        echo(f"resuming {run.name}")
    else:
        if directory.exists():  # a run killed before its first checkpoint: nothing in it to continue from
            shutil.rmtree(directory)
        echo(f"starting {run.name}")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log = open(bench_dir / "logs" / f"{run.name}.log", "a")  # noqa: SIM115 - the child process holds it
    log.write(f"$ {' '.join(command)}\n")
    log.flush()

    def in_the_child() -> None:
        os.sched_setaffinity(0, cores)
        # Linux's PR_SET_PDEATHSIG (1): if this benchmark dies, even by SIGKILL, its runs get SIGHUP, checkpoint and
        # stop, rather than train on unwatched while a rerun starts them again. SIGHUP, not SIGINT: the kernel sends it
        # once for each of this process's threads as they exit, and only SIGHUP's repeats leave the checkpoint alone.
        # Its default first: a benchmark started under nohup would pass on SIGHUP ignored, and the runs would not stop.
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        ctypes.CDLL(None).prctl(1, signal.SIGHUP)

    try:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=in_the_child,
                                start_new_session=True, pass_fds=(lock_fd,))  # fmt: skip
    finally:
        log.close()  # the child has its own copy of the descriptor


# -- play that learned nothing ------------------------------------------------------------------------------------


class FixedPlay:
    """Play that learned nothing, asked for actions as the runner's evaluation asks an agent: ``zero`` actions (on a
    legged task, the default pose held by its PD controllers) or ``random`` ones, N(0, 1) in a Box (an untrained
    Gaussian policy's; the task clips them to its bounds) and uniform over a discrete space, from a fixed seed."""

    def __init__(self, kind: str, action_space, seed: int):
        if kind not in FIXED_PLAYS:
            raise ValueError(f"unknown fixed play {kind!r}; the plays are {', '.join(FIXED_PLAYS)}")
        self.kind, self.action_space = kind, action_space
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, obs, deterministic: bool = True):
        import gymnasium as gym

        space, n = self.action_space, obs.shape[0]
        if isinstance(space, gym.spaces.Discrete):
            actions = torch.zeros(n, dtype=torch.long) if self.kind == "zero" else (
                torch.randint(int(space.n), (n,), generator=self.generator))  # fmt: skip
            return actions + int(space.start), {}
        if isinstance(space, gym.spaces.MultiDiscrete):
            nvec = torch.as_tensor(space.nvec)
            draws = (torch.rand(n, *nvec.shape, generator=self.generator) * nvec).long()
            return (torch.zeros_like(draws) if self.kind == "zero" else draws), {}
        shape = (n, *space.shape)
        return (torch.zeros(shape) if self.kind == "zero" else torch.randn(shape, generator=self.generator)), {}


def fixed_play_results(bench_dir: pathlib.Path, grid: Grid, summaries: dict[BenchmarkRun, dict]) -> dict:
    """``(play, task) -> the final evaluation's metrics`` of each of the report's fixed plays on each task with a
    finished run, evaluated as that task's first finished run evaluated (its env keywords, episodes and evaluation
    seed, from its config.yaml). Kept in ``fixed_plays.json`` and reused while the evaluation is the same."""
    from rl_suite.config import read_yaml
    from rl_suite.registry import make, trusted_env_spec
    from rl_suite.runner import EVAL_SEED_OFFSET, evaluate

    kept_path = bench_dir / "fixed_plays.json"
    kept = json.loads(kept_path.read_text()) if kept_path.is_file() else {}
    results = {}
    for env_id in grid.envs:
        finished = sorted((run for run in summaries if run.env_id == env_id), key=lambda run: (run.seed, run.algo))
        if not finished or not grid.report.fixed_plays or ":" in env_id:  # an adapter id read from grid.yaml names
            continue  # code to import: never built from a file (its runs were, from the command line)
        source = run_dir(bench_dir, finished[0]) / "config.yaml"
        run = read_yaml(source).get("run", {})
        _, env_kwargs = trusted_env_spec(env_id, run.get("env_kwargs"), str(source))
        episodes, seed = int(run.get("eval_episodes", 0)), int(run.get("seed", 0)) + EVAL_SEED_OFFSET
        for play in grid.report.fixed_plays:
            key = json.dumps([play, env_id, env_kwargs, episodes, seed], sort_keys=True)
            if key not in kept and episodes > 0:
                with make(env_id, num_envs=episodes, seed=seed, **env_kwargs) as env:
                    kept[key] = evaluate(FixedPlay(play, env.action_space, seed), env, seed=seed)
            if key in kept:
                results[(play, env_id)] = kept[key]
    partial = kept_path.with_suffix(".tmp")
    partial.write_text(json.dumps(kept, indent=1))
    os.replace(partial, kept_path)
    return results


def finished_summaries(bench_dir: pathlib.Path, grid: Grid) -> dict[BenchmarkRun, dict]:
    """The summary.json of every finished run of the grid."""
    summaries = {}
    for run in grid.runs():
        directory = run_dir(bench_dir, run)
        if is_finished(directory):
            summaries[run] = json.loads((directory / "summary.json").read_text())
    return summaries


def benchmark(bench_dir: pathlib.Path, grid: Grid, jobs=None, threads: int = 1, references=None, report_only=False,
              echo=print) -> int:  # fmt: skip
    """``rl-suite benchmark``: check and record the grid, run what has not finished (unless ``report_only``), and
    write the report over every finished run of the directory's grid. Returns the exit code: 1 if a run failed."""
    from rl_suite.report import load_references, write_report

    references = load_references(references)  # a bad file fails before any run
    failed = []
    if not report_only:
        parallelism(jobs, threads)  # a bad number fails before anything is written
        start_benchmark(bench_dir, grid)
        failed = run_grid(bench_dir, grid, jobs=jobs, threads=threads, echo=echo)
    recorded = bench_dir / "grid.yaml"
    if not recorded.is_file():
        raise ValueError(f"{bench_dir} holds no benchmark (no grid.yaml): run one there first")
    whole = make_grid(yaml.safe_load(recorded.read_text()))
    summaries = finished_summaries(bench_dir, whole)
    runs = [{"algo": run.algo, "env_id": run.env_id, "seed": run.seed, "summary": summary}
            for run, summary in summaries.items()]  # fmt: skip
    budgets = [f"{whole.total_steps:,} env steps"] if whole.total_steps else []
    budget = " and ".join(budgets + ([f"{whole.time_budget_s:g} s"] if whole.time_budget_s else []))
    notes = [
        f"Grid: {', '.join(whole.algos)} on {', '.join(whole.envs)}, seeds {', '.join(map(str, whole.seeds))}; "
        f"budget per run: {budget or 'the shipped settings'}"
        + (f"; settings: {' '.join(whole.settings)}" if whole.settings else "")
        + ".",
        "",
    ]
    if failed:
        notes += [f"Failed in this invocation (see logs/): {', '.join(failed)}.", ""]
    fixed = fixed_play_results(bench_dir, whole, summaries)
    path = write_report(bench_dir, runs, len(whole.runs()), references, f"Benchmark {bench_dir.name}", notes,
                        spec=whole.report, fixed=fixed)  # fmt: skip
    echo(f"report: {path} ({len(runs)} of {len(whole.runs())} runs finished)")
    return 1 if failed else 0
