"""What the benchmarks that report returns share: their seeds, where their results go, statistics over seeds, a
random policy's return on the same evaluation, and what a full rerun costs in wall-clock.

Each of them runs at least three seeds by default, one run after another, and reports every final evaluation as
mean ± standard deviation over seeds. The best seed's value stands beside the mean, labelled with its seed, and
never in place of it.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from rl_suite.benchmark import FixedPlay
from rl_suite.deploy.inference import actions_from_offsets
from rl_suite.device import cpu_name
from rl_suite.runner import EVAL_SEED_OFFSET  # evaluations run on a run's seed plus this

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
DEFAULT_SEEDS = (0, 1, 2)
MIN_PUBLISHED_SEEDS = 3  # fewer seeds make a smoke test, not a result


# -- command line ---------------------------------------------------------------------------------------------------


def add_seed_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seeds`` (default 0 1 2) and ``--results-dir`` (default benchmarks/results)."""
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        help=f"one run per seed, one after another (at least {MIN_PUBLISHED_SEEDS} for published numbers)",
    )
    parser.add_argument(
        "--results-dir",
        type=pathlib.Path,
        default=RESULTS,
        help="where the result files are written (default: benchmarks/results)",
    )


def check_seed_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse repeated or negative seeds; warn when there are too few for a published number."""
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds repeats a seed ({' '.join(map(str, args.seeds))}): each seed is one run")
    if min(args.seeds) < 0:
        parser.error(f"--seeds must be non-negative integers, got {' '.join(map(str, args.seeds))}")
    if len(args.seeds) < MIN_PUBLISHED_SEEDS:
        print(
            f"note: {len(args.seeds)} seed(s); a published number needs at least {MIN_PUBLISHED_SEEDS}",
            file=sys.stderr,
        )


def count(items, noun: str) -> str:
    """``3 seeds``, ``1 task``, ``2 libraries``: ``items`` is a number or a collection to count."""
    n = items if isinstance(items, int) else len(items)
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


def grid(*dimensions: tuple) -> str:
    """``2 tasks x 4 trainings x 3 seeds``: each dimension is ``(items, noun)`` as ``count`` takes them."""
    return " x ".join(count(items, noun) for items, noun in dimensions)


def duration(minutes: float) -> str:
    """``45 min`` or ``4 h 30 min``."""
    if minutes < 90:
        return f"{minutes:.0f} min" if minutes >= 1 else f"{minutes * 60:.0f} s"
    hours, rest = divmod(round(minutes), 60)
    return f"{hours} h {rest:02d} min"


def wall_clock_estimate(runs: int, minutes_per_run: float, parts: str, extra: str = "") -> str:
    """The line each benchmark prints at its start: how long the whole invocation takes, at the least."""
    total = duration(runs * minutes_per_run)
    line = f"Estimated wall-clock: {count(runs, 'run')} ({parts}) x {minutes_per_run:.3g} min = {total}"
    return line + (f", plus {extra}" if extra else "") + "."


# -- runs kept on disk --------------------------------------------------------------------------------------------


class FinishedRuns:
    """Each finished run's result, kept as one JSON file in ``<--runs-dir>/<name>/`` (default ``benchmarks/runs/``,
    which git ignores).

    A suite that crashes, or is stopped, loses no finished run: started again with the same arguments, it reads the
    runs it has and starts only the missing ones, so a suite longer than one sitting can also be run in parts. A
    stored run is reused only if it was made by the same job (every argument that shapes it: task, algorithm, seed,
    budget, overrides); each result also records the commit it ran at, which the results list. ``--fresh`` on the
    command line ignores what earlier invocations stored. A suite longer than one session keeps its runs in
    ``--runs-dir benchmarks/results/finished``, which is committed, so that a later session on a fresh checkout
    resumes it.
    """

    def __init__(self, args: argparse.Namespace, name: str):
        self.directory = args.runs_dir / name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fresh = args.fresh
        self._written: set[pathlib.Path] = set()  # by this invocation, which --fresh does not ignore

    def _path(self, job: dict) -> pathlib.Path:
        digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:12]
        readable = "-".join(str(job[k]) for k in ("task", "lib", "label", "algo", "seed") if k in job)
        return self.directory / f"{readable.replace(' ', '_').replace(',', '')}-{digest}.json"

    def get(self, job: dict) -> dict | None:
        """The stored result of ``job`` with the commit it ran at, or ``None``."""
        path = self._path(job)
        if (self.fresh and path not in self._written) or not path.exists():
            return None
        stored = json.loads(path.read_text())
        if stored.get("job") != job:
            return None
        return {**stored["result"], "commit": stored["commit"], "machine": stored.get("machine", "not recorded")}

    def put(self, job: dict, result: dict) -> dict:
        """Store ``result`` as ``job``'s (atomically); returns it as ``get`` would."""
        path, commit = self._path(job), git_commit()
        temporary = path.with_suffix(".tmp")
        machine = cpu_name()  # wall-clock columns mean something only per machine
        temporary.write_text(json.dumps({"job": job, "commit": commit, "machine": machine, "result": result}))
        os.replace(temporary, path)
        self._written.add(path)
        return {**result, "commit": commit, "machine": machine}


def add_resume_arguments(parser: argparse.ArgumentParser) -> None:
    """``--runs-dir`` (where finished runs are kept, default benchmarks/runs) and ``--fresh`` (ignore them)."""
    parser.add_argument(
        "--runs-dir",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parent / "runs",
        help="where each finished run is kept, so that a stopped suite resumes (default: benchmarks/runs)",
    )
    parser.add_argument("--fresh", action="store_true", help="rerun every run, ignoring the finished runs kept")


def commits_line(rows: list[dict]) -> str:
    """Which commits the runs ran at (a suite resumed across commits mixes them, and says so), and, where the runs
    were not all made on this machine, which machines they were made on (kept runs from before machines were
    recorded say ``not recorded``)."""
    commits = list(dict.fromkeys(row.get("commit", "unknown") for row in rows))
    line = f"Code: commit {commits[0]}." if len(commits) == 1 else f"Code: runs from commits {', '.join(commits)}."
    machines = list(dict.fromkeys(row.get("machine", "not recorded") for row in rows))
    if machines != [cpu_name()]:
        line += f" Runs made on: {'; '.join(machines)} (wall-clock is comparable only between runs on one machine)."
    return line


def git_commit() -> str:
    """The working tree's commit (short hash, ``+`` when it has uncommitted changes), or ``unknown``."""
    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+" if dirty else "")


# -- the machine and the clock ---------------------------------------------------------------------------------------


class SimulatedClock:
    """A clock that moves only when the loop sleeps, for ``ControlLoop(clock=..., sleep=...)``: the control loop
    then runs as fast as the simulation."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# -- baselines and reports ---------------------------------------------------------------------------------------------


# Play that learned nothing (``fixed_policy``'s kinds), with the row label every report gives it.
FIXED_PLAYS = {"random": "random (N(0, 1) actions)", "standing": "standing (zero action)"}


def fixed_policy(kind: str, seed: int, action_size: int) -> FixedPlay:
    """Play that learned nothing, as the runner's evaluation asks for actions: ``rl_suite.benchmark.FixedPlay`` under
    the legged scripts' names, ``"standing"`` (zero actions: the default pose held by PD) or ``"random"`` (N(0, 1)
    actions: an untrained Gaussian policy's), over ``action_size`` unbounded actions."""
    if kind not in FIXED_PLAYS:
        raise ValueError(f"kind must be 'standing' or 'random', got {kind!r}")
    space = gym.spaces.Box(-np.inf, np.inf, (action_size,), np.float32)
    return FixedPlay("zero" if kind == "standing" else "random", space, seed)


def fixed_policy_evaluation(env_id: str, kind: str, seed: int, episodes: int, env_kwargs: dict) -> dict[str, float]:
    """The runner's evaluation (``rl_suite.runner.evaluate``, on the evaluation seed of a run with ``seed``) of standing
    or random play (``fixed_policy``) on ``env_id`` made with ``env_kwargs``: the task's metrics."""
    from rl_suite.registry import make
    from rl_suite.runner import evaluate

    eval_seed = seed + EVAL_SEED_OFFSET
    with make(env_id, num_envs=episodes, seed=eval_seed, **env_kwargs) as env:
        return evaluate(fixed_policy(kind, seed, env.action_space.shape[0]), env, seed=eval_seed)


class ExportedPlay:
    """An exported policy file (``rl-suite export``'s ONNX or TorchScript), asked for actions as the runner's
    evaluation asks an agent: what the file computes, normalisation, scaling and clipping included. A legged policy's
    file returns joint offsets (actions times ``action_scale``, for the robot's PD targets); they go back to the
    task's action units here, which the task scales again."""

    def __init__(self, path: pathlib.Path):
        from rl_suite.deploy.runtime import load_policy

        self.policy = load_policy(path)
        self.scale = None if self.policy.robot is None else np.asarray(self.policy.robot["action_scale"])

    def act(self, obs, deterministic: bool = True):
        actions = self.policy(obs.cpu().numpy())
        actions = actions if self.scale is None else actions_from_offsets(actions, self.scale)
        return torch.as_tensor(actions, dtype=torch.float32), {}


def exported_policy_evaluation(env_id: str, path: pathlib.Path, seed: int, episodes: int, env_kwargs: dict) -> dict:
    """The runner's evaluation of the exported policy at ``path`` on ``episodes`` episodes of ``env_id`` made with
    ``env_kwargs``, on ``seed``: the task's metrics. With the policy file's SHA-256, so that a result kept beside the
    file is reused only for the same file."""
    from rl_suite.registry import make
    from rl_suite.runner import evaluate

    with make(env_id, num_envs=episodes, seed=seed, **env_kwargs) as env:
        result = evaluate(ExportedPlay(path), env, seed=seed)
    return {**result, "policy_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "seed": seed}


def write_csv(path: pathlib.Path, rows: list[dict], fields: list[str] | None = None) -> None:
    """Write ``rows`` to ``path`` as CSV, with the columns ``fields`` (keys of a row outside them are left out) or, by
    default, the first row's keys."""
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields or list(rows[0]), extrasaction="ignore" if fields else "raise")
        writer.writeheader()
        writer.writerows(rows)


def write_report(path: pathlib.Path, lines: list[str]) -> None:
    """Write a report's markdown lines to ``path`` and print them."""
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def pyplot():
    """matplotlib's pyplot on the Agg backend, or ``None`` (said on stderr) where matplotlib is not installed."""
    from rl_suite.report import pyplot

    plt = pyplot()
    if plt is None:
        print("no matplotlib: no plot", file=sys.stderr)
    return plt


# -- one training run --------------------------------------------------------------------------------------------------


def shipped_settings(algo_name: str, env_id: str) -> dict:
    """``algo_name``'s shipped settings for ``env_id`` (its YAML's default section, then the task's), as plain data."""
    from rl_suite.registry import load_algorithm
    from rl_suite.settings import tuned_settings

    return tuned_settings(load_algorithm(algo_name), env_id)


def task_defaults(env_id: str) -> dict:
    """A legged task's own settings with no keywords (``VelocitySettings``, as plain data): its reward recipe lives
    there, not in the shipped settings, so a run trained on older defaults must not count for newer ones."""
    import dataclasses

    import rl_suite

    with rl_suite.make(env_id, num_envs=1) as env:
        settings = getattr(env, "settings", None)
        return json.loads(json.dumps(dataclasses.asdict(settings))) if dataclasses.is_dataclass(settings) else {}


def legged_arguments(
    doc: str,
    env_ids: tuple[str, ...] = (),
    minutes: float = 60.0,
    runs_per_seed: int = 1,
    start_minutes: float | None = None,
) -> argparse.Namespace:
    """The legged suites' command line (``--minutes``, default ``minutes``; ``--eval-every-steps``, 1M; the seeds;
    resuming; ``--env``, one of ``env_ids``, the first by default, where a suite offers several; where a suite's runs
    start from another task's, ``--start-minutes``, default ``start_minutes``), parsed and checked, with the
    wall-clock estimate (``runs_per_seed`` runs of each seed) printed."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if env_ids:
        parser.add_argument("--env", choices=env_ids, default=env_ids[0], help=f"the task (default {env_ids[0]})")
    parser.add_argument("--minutes", type=float, default=minutes, help="wall-clock budget of each run")
    if start_minutes is not None:
        parser.add_argument(
            "--start-minutes",
            type=float,
            default=start_minutes,
            help=f"wall-clock of the run each seed starts from (default {start_minutes:g}; 0 starts from scratch)",
        )
    parser.add_argument("--eval-every-steps", type=int, default=1_000_000)
    add_seed_arguments(parser)
    add_resume_arguments(parser)
    args = parser.parse_args()
    check_seed_arguments(parser, args)
    if getattr(args, "start_minutes", 0.0) < 0:
        parser.error(f"--start-minutes must be at least 0, got {args.start_minutes:g}")
    parts = grid((args.seeds, "seed"), (runs_per_seed, "training")) if runs_per_seed > 1 else grid((args.seeds, "seed"))
    per_run = args.minutes + getattr(args, "start_minutes", 0.0)
    print(wall_clock_estimate(len(args.seeds) * runs_per_seed, per_run, parts), flush=True)
    return args


def ppo_seed(
    finished: FinishedRuns, args, env_id: str, seed: int, eval_episodes: int, finish, start_from: str | None = None
) -> dict:
    """One seed of a legged suite: the result kept from an earlier invocation, or a run of PPO with its shipped
    settings for ``args.minutes``, stored with the run's ``env_kwargs`` and what ``finish(agent, config)`` returns
    (a dict: test courses, an export). The shipped settings are part of the job: the seeds of one table may train in
    different sessions, and a seed trained under an older recipe must train again, not be averaged with new ones.

    With ``start_from`` (a task) and ``args.start_minutes`` above 0, the run starts from a run of PPO on that task for
    ``args.start_minutes`` (``RunConfig.init_from``: rough terrain from flat ground), whose evaluations and env steps
    are stored as ``start_evaluations`` and ``start_env_steps``."""
    job = dict(
        task=env_id,
        seed=seed,
        minutes=args.minutes,
        eval_every_steps=args.eval_every_steps,
        settings=shipped_settings("ppo", env_id),
        task_defaults=task_defaults(env_id),
    )
    staged = start_from is not None and args.start_minutes > 0
    if staged:
        job.update(
            start_from=start_from, start_minutes=args.start_minutes, start_settings=shipped_settings("ppo", start_from)
        )
    result = finished.get(job)
    if result is None:
        every = dict(eval_every_steps=args.eval_every_steps, eval_episodes=eval_episodes)
        with tempfile.TemporaryDirectory() as start_dir:
            overrides, start = {}, {}
            if staged:
                first, _, _ = timed_run(
                    "ppo", start_from, seed, args.start_minutes * 60, {}, run_dir=start_dir, **every
                )
                overrides = {"init_from": start_dir}
                start = {"start_evaluations": first["evaluations"], "start_env_steps": first["env_steps"]}
            summary, config, agent = timed_run("ppo", env_id, seed, args.minutes * 60, overrides, **every)
        result = finished.put(job, {**summary, **finish(agent, config), "env_kwargs": config.env_kwargs, **start})
    return result


def timed_run(algo_name: str, env_id: str, seed: int, seconds: float, overrides: dict, **settings) -> tuple:
    """One run of ``algo_name`` on ``env_id`` with its shipped settings plus ``overrides``, for ``seconds`` of
    wall-clock (no step budget); otherwise as ``train``. Returns ``(summary, config, agent)``."""
    return train(algo_name, env_id, seed, overrides, total_steps=10**12, time_budget_s=seconds, **settings)


def train(algo_name: str, env_id: str, seed: int, overrides: dict, prepare=None, run_dir=None, **settings) -> tuple:
    """One run of ``algo_name`` on ``env_id`` with its shipped settings plus ``overrides`` (no progress output, and
    one checkpoint, at the end), in ``run_dir`` or a throwaway run directory; ``settings`` are further run settings,
    such as ``total_steps``, ``eval_every_steps`` and ``eval_episodes``. ``prepare(agent)``, if given, sees the agent
    before it trains. Returns ``(summary, config, agent)``."""
    import rl_suite
    from rl_suite.registry import load_algorithm
    from rl_suite.rng import seed_everything
    from rl_suite.runner import RunConfig, Runner
    from rl_suite.settings import layered, new_run_settings

    algo = load_algorithm(algo_name)
    fixed = dict(checkpoint_every_steps=10**12, progress=False, seed=seed)
    run_values, agent_values = new_run_settings(algo, env_id, layered(overrides, fixed, settings))
    config = RunConfig(**run_values)
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed, **config.env_kwargs)
    agent = algo.for_env(env, algo.Config(**agent_values))
    if prepare is not None:
        prepare(agent)
    if run_dir is not None:
        return Runner(agent, env, config, run_dir=run_dir).run(), config, agent
    with tempfile.TemporaryDirectory() as scratch:
        summary = Runner(agent, env, config, run_dir=scratch).run()
    return summary, config, agent


# -- many runs, each on its own core ---------------------------------------------------------------------------------


def run_pinned(finished: FinishedRuns, jobs: list[dict], script: str, at_a_time: int, describe) -> list[dict]:
    """Every job of ``jobs`` that ``finished`` does not keep, ``at_a_time`` at once, each as
    ``python script --worker JOB OUT`` in its own process pinned to its own core with one thread (see
    ``run_worker``); each result is kept as it arrives and ``describe(result)`` printed. Returns the results in job
    order. After a failure the running jobs finish and are kept, no new one starts, and the suite stops with the
    failures named."""
    results = {index: finished.get(job) for index, job in enumerate(jobs)}
    waiting = [index for index, result in results.items() if result is None]
    print(f"{len(jobs) - len(waiting)} of {len(jobs)} runs kept from earlier invocations", flush=True)
    cores = sorted(os.sched_getaffinity(0))[:at_a_time]
    running: dict[int, tuple[subprocess.Popen, int, pathlib.Path]] = {}  # core -> (process, job index, out)
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        while running or (waiting and not failed):
            for core in cores:
                if core not in running and waiting and not failed:
                    index = waiting.pop(0)
                    out = pathlib.Path(scratch) / f"run{index}.json"
                    running[core] = (_launch(script, jobs[index], core, out), index, out)
            time.sleep(1.0)
            for core, (process, index, out) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[core]
                if process.returncode != 0:
                    failed.append(f"{json.dumps(jobs[index], sort_keys=True)[:200]} (exit {process.returncode})")
                    continue
                results[index] = finished.put(jobs[index], json.loads(out.read_text()))
                print(describe(results[index]), flush=True)
    if failed:
        raise SystemExit(f"failed: {'; '.join(failed)} (the finished runs are kept; run again to resume)")
    return [results[index] for index in range(len(jobs))]


def _launch(script: str, job: dict, core: int, out: pathlib.Path) -> subprocess.Popen:
    command = [sys.executable, script, "--worker", json.dumps(job), str(out)]
    pin = (lambda: os.sched_setaffinity(0, {core})) if core in os.sched_getaffinity(0) else None
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen(command, preexec_fn=pin, env=env)


def run_worker(worker: list[str], run) -> None:
    """The worker side of ``run_pinned``: ``worker`` is ``[JOB, OUT]`` from the command line; ``run(job)`` returns
    the result, written to OUT with the job's fields (but its settings) and its wall-clock (``seconds``) added."""
    torch.set_num_threads(1)
    job = json.loads(worker[0])
    started = time.perf_counter()
    result = run(job)
    seconds = time.perf_counter() - started
    fields = {key: value for key, value in job.items() if key != "settings"}  # the result's own values win
    pathlib.Path(worker[1]).write_text(json.dumps({**fields, **result, "seconds": seconds}))


def add_pool_arguments(parser: argparse.ArgumentParser) -> None:
    """``--jobs`` (runs at a time, default 2) and the hidden ``--worker JOB OUT`` of ``run_pinned``'s processes."""
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, each on its own core (default 2)")
    parser.add_argument("--worker", nargs=2, metavar=("JOB", "OUT"), help=argparse.SUPPRESS)


def check_pool_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    cores = len(os.sched_getaffinity(0))
    if not 1 <= args.jobs <= cores:
        parser.error(f"--jobs must be between 1 and the {cores} cores this process may use, got {args.jobs}")


def pool_parser(description: str) -> argparse.ArgumentParser:
    """The parser of a script whose runs ``run_pinned`` pools: ``--jobs`` (and the hidden ``--worker``), ``--seeds``
    and ``--seed-count``, ``--runs-dir`` and ``--fresh``; the script adds its own grid's arguments."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pool_arguments(parser)
    add_seed_arguments(parser)
    add_resume_arguments(parser)
    return parser


def parse_pool_arguments(parser: argparse.ArgumentParser, run) -> argparse.Namespace | None:
    """The command line of a ``pool_parser``: in a worker process, ``run`` its job and return None; otherwise the
    arguments, with the seeds and ``--jobs`` checked."""
    args = parser.parse_args()
    if args.worker:
        run_worker(args.worker, run)
        return None
    check_seed_arguments(parser, args)
    check_pool_arguments(parser, args)
    return args


# -- statistics over seeds -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverSeeds:
    """One quantity measured once per seed (higher is better): its mean, standard deviation and best seed."""

    mean: float
    std: float
    """Sample standard deviation (n - 1 in the denominator); NaN for one seed."""
    best: float
    best_seed: int
    n: int


def over_seeds(by_seed: dict[int, float]) -> OverSeeds:
    """Summarise ``{seed: value}``; ties for the best go to the seed listed first."""
    if not by_seed:
        raise ValueError("over_seeds needs at least one seed's value")
    seeds, values = list(by_seed), np.array([float(v) for v in by_seed.values()])
    best = int(np.argmax(values))
    std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
    return OverSeeds(float(values.mean()), std, float(values[best]), seeds[best], len(values))


def lower_is_better(by_seed: dict[int, float]) -> OverSeeds:
    """``over_seeds`` for a quantity where lower is better (an error, a fall rate): the best seed is the lowest."""
    flipped = over_seeds({seed: -value for seed, value in by_seed.items()})
    # + 0.0: a mean of zeros comes back as -0.0, which would print as "-0.000"
    return OverSeeds(-flipped.mean + 0.0, flipped.std, -flipped.best + 0.0, flipped.best_seed, flipped.n)


def mean_std(stats: OverSeeds, fmt: str = "{:,.0f}") -> str:
    """``6,708 ± 312``; ``6,708 (1 seed)`` when there is no spread to give."""
    if stats.n == 1:
        return f"{fmt.format(stats.mean)} (1 seed)"
    return f"{fmt.format(stats.mean)} ± {fmt.format(stats.std)}"


def best_of(stats: OverSeeds, fmt: str = "{:,.0f}") -> str:
    """``7,020 (seed 2)``: for a column headed ``best (seed k)``."""
    return f"{fmt.format(stats.best)} (seed {stats.best_seed})"


def seeds_line(seeds: list[int]) -> str:
    """The sentence under each table's heading that says where its numbers come from."""
    line = (
        f"Seeds: {', '.join(map(str, seeds))} ({len(seeds)} run{'s' if len(seeds) > 1 else ''} per row, one after "
        "another). Each summary cell is the mean ± standard deviation over seeds (n - 1) of the runs' final "
        "evaluations; *best (seed k)* is the single best seed, shown beside the mean, not in place of it."
    )
    if len(seeds) < MIN_PUBLISHED_SEEDS:
        line += f" Fewer than {MIN_PUBLISHED_SEEDS} seeds: a smoke test, not a result."
    return line


def verdict(met: bool) -> str:
    return "met" if met else "missed"


# -- what a policy that learned nothing gets -------------------------------------------------------------------------


class UniformRandomAgent:
    """Uniformly random actions (in multi-agent tasks, among the available ones), answering the runner's evaluation
    through the same calls as a trained agent; ``deterministic`` is ignored."""

    def __init__(self, env, seed: int):
        from rl_suite.multiagent import MultiAgentVecEnv

        self.env, self.multiagent = env, isinstance(env, MultiAgentVecEnv)
        self.generator = torch.Generator(device=env.device).manual_seed(seed)
        space = env.agent_action_space if self.multiagent else env.action_space
        if not self.multiagent and not hasattr(space, "n") and not np.isfinite([space.low, space.high]).all():
            raise ValueError(f"a uniformly random policy needs a bounded action space, got {space}")

    def initial_memory(self, num_envs: int) -> dict:
        return {}

    def act(self, obs, memory=None, deterministic: bool = True):
        if self.multiagent:
            return self._multiagent_actions(obs), {}, memory
        return self._sample(self.env.action_space, (self.env.num_envs,)), {}

    def _multiagent_actions(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        env = self.env
        if "avail_actions" not in inputs:
            return self._sample(env.agent_action_space, (env.num_envs, env.num_agents))
        probs = inputs["avail_actions"].flatten(0, 1).float()
        return torch.multinomial(probs, 1, generator=self.generator).view(env.num_envs, env.num_agents)

    def _sample(self, space, batch: tuple[int, ...]) -> torch.Tensor:
        device = self.env.device
        if hasattr(space, "n"):
            return torch.randint(int(space.n), batch, generator=self.generator, device=device)
        low, high = (torch.as_tensor(bound, dtype=torch.float32, device=device) for bound in (space.low, space.high))
        uniform = torch.rand((*batch, *space.shape), generator=self.generator, device=device)
        return low + (high - low) * uniform


def random_policy_evaluation(env_id: str, episodes: int, seed: int, **env_kwargs) -> dict[str, float]:
    """The runner's evaluation (``rl_suite.runner.evaluate``: the first episode of each of ``episodes`` environments,
    on the evaluation seed of a run with ``seed``) of a uniformly random policy: ``mean_return``, and ``win_rate`` on
    tasks with winners."""
    from rl_suite.registry import make
    from rl_suite.runner import evaluate

    eval_seed = seed + EVAL_SEED_OFFSET
    env = make(env_id, num_envs=episodes, seed=eval_seed, **env_kwargs)
    result = evaluate(UniformRandomAgent(env, seed), env, seed=eval_seed)
    env.close()
    return result
