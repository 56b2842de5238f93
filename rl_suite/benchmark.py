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
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import yaml

GRID_KEYS = ("algos", "envs", "seeds", "total_steps", "time_budget_s", "set")


@dataclasses.dataclass(frozen=True)
class Grid:
    """What to run: every algorithm on every task with every seed, with the same budget and settings."""

    algos: tuple[str, ...]
    """Algorithm names (``rl-suite algos``)."""
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
        }


@dataclasses.dataclass(frozen=True)
class BenchmarkRun:
    algo: str
    env_id: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.algo}__{self.env_id.replace(':', '_').replace('/', '_')}__s{self.seed}"


def seeds_from(values: list[int] | int) -> tuple[int, ...]:
    """``--seeds 5`` (one number: a count) means seeds 0-4; several numbers name the seeds."""
    values = [values] if isinstance(values, int) else list(values)
    if not values or any(type(value) is not int or value < 0 for value in values):
        raise ValueError(f"seeds must be a count or a list of non-negative integers, got {values}")
    seeds = tuple(range(values[0])) if len(values) == 1 else tuple(values)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must name at least one seed, each once, got {values}")
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
    adapters = [env_id for env_id in data.get("envs", []) if ":" in env_id]
    if adapters:
        raise ValueError(f"{path} names adapter ids {adapters}: give those with --envs on the command line")
    return data


def make_grid(file_values: dict, algos=None, envs=None, seeds=None, total_steps=None, time_budget_s=None,
              settings=None) -> Grid:  # fmt: skip
    """The grid of a file's values with the command line's over them."""
    values = {**file_values}
    given = {"algos": algos, "envs": envs, "seeds": seeds, "total_steps": total_steps,
             "time_budget_s": time_budget_s, "set": settings}  # fmt: skip
    values.update({key: value for key, value in given.items() if value})
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
    return Grid(tuple(values["algos"]), tuple(values["envs"]), seeds_from(values["seeds"]), values["total_steps"],
                values["time_budget_s"], tuple(values.get("set") or ()))  # fmt: skip


def check_grid(grid: Grid) -> None:
    """Every algorithm and task exists, and every pair builds with the grid's settings (one environment each, on the
    CPU), so that a typo fails now rather than hours into the benchmark."""
    from rl_suite.config import parse_assignments
    from rl_suite.registry import load_algorithm, make
    from rl_suite.runner import RunConfig
    from rl_suite.settings import new_run_settings

    algos = {name: load_algorithm(name) for name in grid.algos}  # an unknown name fails here, with a suggestion
    overrides = parse_assignments(list(grid.settings))
    for env_id in grid.envs:
        env = make(env_id, num_envs=1, seed=0)  # an unknown id fails here, with the close ones
        try:
            for name, algo in algos.items():
                run_values, agent_values = new_run_settings(algo, env_id, {**overrides, "device": "cpu"})
                RunConfig(**run_values)
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

    command = [sys.executable, "-m", "rl_suite", "train", run.algo, run.env_id, *grid.budget_flags()]
    if checkpoints(directory):
        return command + ["--resume", str(directory)]
    return command + ["--seed", str(run.seed), "--run-dir", str(directory), "--set", *grid.settings]


def start_benchmark(bench_dir: pathlib.Path, grid: Grid) -> None:
    """Check the grid, and record it in ``bench_dir`` (or check that it is the one recorded there)."""
    check_grid(grid)
    recorded_path = bench_dir / "grid.yaml"
    if recorded_path.is_file():
        recorded = yaml.safe_load(recorded_path.read_text()) or {}
        for key in ("total_steps", "time_budget_s", "set"):
            if recorded.get(key) != grid.to_plain()[key]:
                raise ValueError(
                    f"{bench_dir} holds a benchmark with {key} {recorded.get(key)!r}, not {grid.to_plain()[key]!r}: "
                    "its runs would not compare; give the same value or another directory"
                )
        # algorithms, tasks and seeds may grow: a rerun adds their runs
        grid_values = {key: _union(recorded.get(key, []), grid.to_plain()[key]) for key in ("algos", "envs", "seeds")}
        recorded.update(grid_values)
    else:
        recorded = grid.to_plain()
    bench_dir.mkdir(parents=True, exist_ok=True)
    partial = recorded_path.with_suffix(".tmp")
    partial.write_text(yaml.safe_dump(recorded, sort_keys=False))
    os.replace(partial, recorded_path)


def _union(first: list, second: list) -> list:
    return list(dict.fromkeys([*first, *second]))


def run_grid(bench_dir: pathlib.Path, grid: Grid, jobs: int | None = None, threads: int = 1, echo=print) -> list[str]:
    """Run every run of ``grid`` that has not finished, ``jobs`` at a time; returns the failed runs' names (with
    their logs named in what ``echo`` printed). On Ctrl-C every running run is interrupted, writes its checkpoint and
    stops; a rerun continues them."""
    cores = sorted(os.sched_getaffinity(0))
    if threads < 1 or threads > len(cores):
        raise ValueError(f"threads must be between 1 and the {len(cores)} cores this process may use, got {threads}")
    jobs = jobs or max(1, len(cores) // threads)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    slots = [cores[(slot * threads) % len(cores):][:threads] or cores[:threads] for slot in range(jobs)]
    runs = grid.runs()
    waiting = [run for run in runs if not is_finished(run_dir(bench_dir, run))]
    echo(f"{len(runs) - len(waiting)} of {len(runs)} runs finished before; {len(waiting)} to run, {jobs} at a time "
         f"with {threads} thread(s) each")  # fmt: skip
    (bench_dir / "logs").mkdir(parents=True, exist_ok=True)
    running: dict[int, tuple[subprocess.Popen, BenchmarkRun]] = {}
    failed: list[str] = []
    try:
        while waiting or running:
            for slot in range(jobs):
                if slot not in running and waiting:
                    run = waiting.pop(0)
                    running[slot] = (_launch(bench_dir, grid, run, slots[slot], threads, echo), run)
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


def _launch(bench_dir, grid: Grid, run: BenchmarkRun, cores: list[int], threads: int, echo) -> subprocess.Popen:
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
    try:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=lambda: os.sched_setaffinity(0, cores))  # fmt: skip
    finally:
        log.close()  # the child has its own copy of the descriptor


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
    path = write_report(bench_dir, runs, len(whole.runs()), references, f"Benchmark {bench_dir.name}", notes)
    echo(f"report: {path} ({len(runs)} of {len(whole.runs())} runs finished)")
    return 1 if failed else 0
