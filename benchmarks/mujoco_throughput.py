"""Env-steps per second on MuJoCo: rl-suite's batched v5 tasks against gymnasium and against raw MuJoCo physics.

For HalfCheetah-v5, Ant-v5 and Humanoid-v5 at each N, side by side in one invocation:

- ours: ``rl_suite.make(id, num_envs=N)`` on the CPU backend (MuJoCo's batch API on ``--nthread`` native threads),
  the real ``env.step``: action checks, physics, observation, reward, time limits and same-step auto-reset.
- gymnasium ``SyncVectorEnv`` (``gym.make_vec(id, num_envs=N, vectorization_mode="sync")``).
- gymnasium ``AsyncVectorEnv``: one worker process per env (its default), shared memory, up to
  ``--async-max-envs``; beyond that it needs N processes on this machine's few cores, and the cell says so.
- ``mujoco.rollout.Rollout(nthread)``: physics only, the upper limit. N states are rolled forward by ``frame_skip``
  substeps per env-step; each call's final state is the next call's initial state. No observation, reward or reset.
- ``mujoco.batch.Batch(model, nsim=N, nthread).step(nstep=frame_skip)``: MuJoCo's own batch API from Python,
  a second physics-only reference (non-persistent, controls written before each step).

Actions are uniformly random within the actuators' control ranges, drawn once before timing (16 batches used in
turn). Each figure is the best of 3 windows of ``--seconds / 3`` after a warm-up, as ``timeit`` does: on a shared
machine the slower windows measure the neighbours. The methods of one row take their windows in turn, so that they
share the machine's quiet and busy moments; each row runs in a fresh interpreter. The report says how much CPU time
other processes took during the run.

    python benchmarks/mujoco_throughput.py [--seconds 2] [--num-envs 1 64 256 1024] [--quick]

Writes ``benchmarks/results/mujoco_throughput.{csv,md}`` with the machine it ran on (``--quick``, a smoke run with
short windows and small N, only prints).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import functools
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from collections.abc import Callable

import gymnasium as gym
import mujoco
import mujoco.batch
import mujoco.rollout
import numpy as np
import torch

import rl_suite
from rl_suite.envs.mujoco.physics import compile_spec
from rl_suite.throughput import random_actions

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
ASSETS = pathlib.Path(gym.__file__).parent / "envs" / "mujoco" / "assets"
TASKS = {"HalfCheetah-v5": "half_cheetah.xml", "Ant-v5": "ant.xml", "Humanoid-v5": "humanoid.xml"}
FRAME_SKIP = 5  # gymnasium's for all three tasks
ACTION_BATCHES = 16
WINDOWS = 3
SYNC_GOAL_N, SYNC_GOAL = 64, 3.0  # the goals for this machine: ours >= 3x SyncVectorEnv at N = 64 ...
ROLLOUT_GOAL = 0.8  # ... and ours >= 80% of mujoco.rollout's rate on the same threads
# The figures for this machine, to tell how fast this run's machine was
ANCHORS = {"HalfCheetah-v5": 14_900, "Ant-v5": 3_600}  # one gymnasium env, env-steps/s
ROLLOUT_ANCHOR = "58-65k"  # mujoco.rollout on 2 threads, HalfCheetah env-steps/s
METHODS = {
    "ours": "rl-suite",
    "gym_sync": "gym Sync",
    "gym_async": "gym Async",
    "rollout": "mujoco.rollout",
    "batch": "mujoco.batch",
}


def machine(nthread: int) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores; MuJoCo {mujoco.__version__} ({nthread} threads for ours, rollout and "
        f"batch), torch {torch.__version__} ({torch.get_num_threads()} threads), gymnasium {gym.__version__}, "
        f"numpy {np.__version__}, Python {platform.python_version()}"
    )


Stepper = tuple[Callable[[int], object], Callable[[], None]]  # step(i): one batched step; close()


def cpu_seconds() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its finished children)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan"), 0.0
    busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK"), sum(os.times()[:4])


def others_share(before: tuple[float, float], after: tuple[float, float], elapsed: float) -> str:
    """The share of the machine's CPU time that other processes took between two ``cpu_seconds()``."""
    other = (after[0] - before[0]) - (after[1] - before[1])
    return f"{max(other, 0.0) / (elapsed * os.cpu_count()):.0%}"


def rates(steppers: dict[str, Stepper], num_envs: int, seconds: float) -> dict[str, float]:
    """Env-steps per second of each stepper (``num_envs`` env-steps per call), measured side by side: after a
    warm-up of ``seconds / 4`` each (at least two calls), ``WINDOWS`` rounds in which every stepper runs one window
    of ``seconds / WINDOWS``; each keeps its fastest window. Interleaving spreads every method over the same
    stretch of time, so that a neighbour's burst of load does not land on one method only. The clock is read after
    every call, so slow calls (N = 1024 in Python) overrun a window by at most one call. Closes the steppers."""
    calls = dict.fromkeys(steppers, 0)
    best = dict.fromkeys(steppers, 0.0)
    try:
        for name, (step, _) in steppers.items():
            start = time.perf_counter()
            while calls[name] < 2 or time.perf_counter() - start < seconds / 4:
                step(calls[name])
                calls[name] += 1
        for _ in range(WINDOWS):
            for name, (step, _) in steppers.items():
                window_calls, start = 0, time.perf_counter()
                while True:
                    step(calls[name] + window_calls)
                    window_calls += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= seconds / WINDOWS:
                        break
                calls[name] += window_calls
                best[name] = max(best[name], window_calls * num_envs / elapsed)
    finally:
        for _, close in steppers.values():
            close()
    return best


def ours(env_id: str, num_envs: int, nthread: int) -> Stepper:
    env = rl_suite.make(env_id, num_envs=num_envs, seed=0, nthread=nthread)
    actions = random_actions(env.action_space, num_envs, env.device, count=ACTION_BATCHES)
    env.reset(seed=0)
    return (lambda i: env.step(actions[i % ACTION_BATCHES])), env.close


def numpy_actions(space: gym.spaces.Box, num_envs: int) -> list[np.ndarray]:
    generator = np.random.default_rng(0)
    shape = (num_envs, *space.shape)
    return [generator.uniform(space.low, space.high, shape).astype(space.dtype) for _ in range(ACTION_BATCHES)]


def gymnasium_vector(env: gym.vector.VectorEnv, num_envs: int) -> Stepper:
    """Vector envs auto-reset themselves (gymnasium 1.x: on the step after an episode ends)."""
    actions = numpy_actions(env.single_action_space, num_envs)
    env.reset(seed=0)
    return (lambda i: env.step(actions[i % ACTION_BATCHES])), env.close


def single_env(env_id: str) -> Stepper:
    """One plain ``gym.make`` env, reset when its episode ends: the issue's "gymnasium single env" anchor."""
    env = gym.make(env_id)
    actions = [a[0] for a in numpy_actions(env.action_space, 1)]
    env.reset(seed=0)

    def step(i: int) -> None:
        _, _, terminated, truncated, _ = env.step(actions[i % ACTION_BATCHES])
        if terminated or truncated:
            env.reset()

    return step, env.close


def physics_controls(model: mujoco.MjModel, num_envs: int, substeps: int) -> list[np.ndarray]:
    """Random controls ``[N, substeps, nu]`` (float64, held over the substeps of one env-step)."""
    generator = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange.T
    return [
        np.repeat(generator.uniform(low, high, (num_envs, 1, model.nu)), substeps, axis=1)
        for _ in range(ACTION_BATCHES)
    ]


def rollout(model: mujoco.MjModel, num_envs: int, nthread: int, substeps: int = FRAME_SKIP) -> Stepper:
    """``mujoco.rollout`` with its checks skipped and every array preallocated, so the figure is the native call:
    ``substeps`` physics steps per env-step."""
    data = mujoco.MjData(model)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS  # rollout's state rows
    initial = np.empty((num_envs, mujoco.mj_stateSize(model, spec)))
    mujoco.mj_getState(model, data, initial[0], spec)
    initial[1:] = initial[0]
    states = np.empty((num_envs, substeps, initial.shape[1]))
    controls = physics_controls(model, num_envs, substeps)
    models, datas = [model] * num_envs, [mujoco.MjData(model) for _ in range(nthread)]
    runner = mujoco.rollout.Rollout(nthread=nthread)

    def step(i: int) -> None:
        runner.rollout(
            models, datas, initial, controls[i % ACTION_BATCHES], nstep=substeps, state=states, skip_checks=True
        )
        initial[:] = states[:, -1]  # warm restart: the next env-step continues from where this one ended

    return step, runner.close


def load_model(xml_file: str) -> mujoco.MjModel:
    """gymnasium's model file compiled as our envs compile it (``compile_spec``: the same model, without MuJoCo 4's
    deprecation warning for half_cheetah.xml's ``settotalmass``)."""
    return compile_spec(mujoco.MjSpec.from_file(str(ASSETS / xml_file)))


def batch(xml_file: str, num_envs: int, nthread: int) -> Stepper:
    model = load_model(xml_file)
    sims = mujoco.batch.Batch(model, nsim=num_envs, nthread=nthread)
    ctrl = sims.bind("ctrl")
    controls = [c[:, 0] for c in physics_controls(model, num_envs, 1)]

    def step(i: int) -> None:
        ctrl[:] = controls[i % ACTION_BATCHES]
        sims.step(nstep=FRAME_SKIP)

    return step, lambda: None


def measure_group(env_id: str, num_envs: int, seconds: float, nthread: int, async_max_envs: int) -> dict:
    """One row of the table: every method at one (task, N), interleaved."""
    row: dict = {"env": env_id, "num_envs": num_envs}
    steppers: dict[str, Stepper] = {}
    if num_envs <= async_max_envs:  # first, so that its workers fork while this process is small
        vector = gym.vector.AsyncVectorEnv([functools.partial(gym.make, env_id)] * num_envs, shared_memory=True)
        steppers["gym_async"] = gymnasium_vector(vector, num_envs)
    else:
        row["gym_async"] = f"skipped: {num_envs} processes"
    steppers["ours"] = ours(env_id, num_envs, nthread)
    steppers["rollout"] = rollout(load_model(TASKS[env_id]), num_envs, nthread)
    steppers["batch"] = batch(TASKS[env_id], num_envs, nthread)
    sync = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")
    steppers["gym_sync"] = gymnasium_vector(sync, num_envs)
    return row | rates(steppers, num_envs, seconds)


def measure_group_in_child(env_id: str, num_envs: int, args: argparse.Namespace) -> dict:
    """``measure_group`` in a fresh interpreter. Each group then starts small and clean: at N = 1024 this process
    reserves many GB of (untouched) MjData arenas that the allocator keeps after the envs are gone, and a later
    AsyncVectorEnv's fork() of such a process fails for want of memory."""
    command = [sys.executable, __file__, "--group", env_id, str(num_envs), "--seconds", str(args.seconds)]
    command += ["--nthread", str(args.nthread), "--async-max-envs", str(args.async_max_envs)]
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout.splitlines()[-1])


def ratio(row: dict, numerator: str, denominator: str) -> float | None:
    top, bottom = row.get(numerator), row.get(denominator)
    return top / bottom if isinstance(top, float) and isinstance(bottom, float) else None


def goals(row: dict) -> tuple[str, str]:
    """``(sync goal, rollout goal)`` for the table: "met", "missed" or "-" where the goal does not apply."""
    over_sync, over_rollout = ratio(row, "ours", "gym_sync"), ratio(row, "ours", "rollout")
    sync = "-" if row["num_envs"] != SYNC_GOAL_N or over_sync is None else _met(over_sync >= SYNC_GOAL)
    return sync, "-" if over_rollout is None else _met(over_rollout >= ROLLOUT_GOAL)


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure (3 windows)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--nthread", type=int, default=os.cpu_count(), help="native threads: ours, rollout, batch")
    parser.add_argument(
        "--async-max-envs",
        type=int,
        default=256,
        help="largest N for AsyncVectorEnv, which starts one process per env",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 0.3 s per figure, N = 1 and 64, no files")
    parser.add_argument("--group", nargs=2, metavar=("ENV", "N"), help=argparse.SUPPRESS)  # one row, as JSON
    args = parser.parse_args()
    if args.group:
        row = measure_group(args.group[0], int(args.group[1]), args.seconds, args.nthread, args.async_max_envs)
        print(json.dumps(row))
        return
    if args.quick:
        args.seconds, args.num_envs, args.async_max_envs = 0.3, [1, 64], 64
    command = " ".join(["python benchmarks/mujoco_throughput.py", *sys.argv[1:]])
    started, cpu_before = time.perf_counter(), cpu_seconds()

    rows = []
    for env_id in args.tasks:
        for n in args.num_envs:
            row = measure_group_in_child(env_id, n, args)
            rows.append(row)
            figures = "  ".join(f"{k}={v:,.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            print(f"{figures}  ({time.perf_counter() - started:.0f} s)", flush=True)
    singles = rates({env_id: single_env(env_id) for env_id in ANCHORS if env_id in args.tasks}, 1, args.seconds)
    elapsed = time.perf_counter() - started
    others = others_share(cpu_before, cpu_seconds(), elapsed)

    ratios = {"ours_over_sync": "gym_sync", "ours_over_async": "gym_async", "ours_over_rollout": "rollout"}
    ratios["ours_over_batch"] = "batch"
    lines = [
        "# Env-steps per second on MuJoCo: rl-suite against gymnasium and raw MuJoCo physics",
        "",
        f"Machine: {machine(args.nthread)}.",
        f"Run: `{command}` on {datetime.date.today().isoformat()} ({elapsed / 60:.1f} min); uniformly random "
        f"actions drawn beforehand, best of {WINDOWS} windows of {args.seconds / WINDOWS:.2g} s per figure, the "
        f"methods interleaved. Other processes used {others} of the machine's CPU time during the run (each "
        "figure is lower for it).",
        "",
        "| env | N | " + " | ".join(METHODS.values()) + " | ours / Sync | ours / Async | ours / rollout | ours / batch "
        f"| goal ≥{SYNC_GOAL:g}x Sync at N={SYNC_GOAL_N} | goal ≥{ROLLOUT_GOAL:.0%} of rollout |",
        "|---|---:|" + "---:|" * (len(METHODS) + len(ratios)) + ":---:|:---:|",
    ]
    for row in rows:
        figures = " | ".join(f"{row[m]:,.0f}" if isinstance(row[m], float) else row[m] for m in METHODS)
        quotients = [ratio(row, "ours", peer) for peer in ratios.values()]
        shown = " | ".join("-" if q is None else f"{q:.2f}x" for q in quotients)
        lines.append(f"| {row['env']} | {row['num_envs']} | {figures} | {shown} | {' | '.join(goals(row))} |")

    summary = []
    at_goal_n = [row for row in rows if row["num_envs"] == SYNC_GOAL_N]
    if at_goal_n:
        summary.append(
            f"- Goal 1, ours ≥ {SYNC_GOAL:g}x SyncVectorEnv at N = {SYNC_GOAL_N}: "
            + ", ".join(
                f"{r['env']} {ratio(r, 'ours', 'gym_sync'):.1f}x ({goals(r)[0]}; physics alone, mujoco.rollout: "
                f"{ratio(r, 'rollout', 'gym_sync'):.1f}x)"
                for r in at_goal_n
            )
            + "."
        )
    missed = [
        f"{r['env']} N={r['num_envs']} ({ratio(r, 'ours', 'rollout'):.0%})" for r in rows if "missed" in goals(r)[1]
    ]
    summary.append(
        f"- Goal 2, ours ≥ {ROLLOUT_GOAL:.0%} of mujoco.rollout on the same {args.nthread} threads: "
        + (f"missed at {', '.join(missed)}; met elsewhere." if missed else "met everywhere.")
    )
    rollout_cheetah = [r["rollout"] for r in rows if r["env"] == "HalfCheetah-v5"]
    anchors = [f"one gymnasium {k} env {v:,.0f} steps/s (issue: {ANCHORS[k]:,})" for k, v in singles.items()]
    if rollout_cheetah:
        anchors.append(
            f"mujoco.rollout HalfCheetah best {max(rollout_cheetah):,.0f} steps/s over N (issue: {ROLLOUT_ANCHOR})"
        )
    lines += ["", "Goals (from the issue, for this machine):", "", *summary, ""]
    if anchors:
        lines += [f"This run against the issue's anchors for this machine: {'; '.join(anchors)}.", ""]
    lines += [
        "Notes:",
        "",
        "- Each row runs in its own interpreter; its methods are built first, then measured in turns.",
        "- ours is the whole `env.step` (action checks, physics, `mj_rnePostConstraint` for the tasks that read",
        "  `cfrc_ext`, observation, reward, time limits, same-step auto-reset, episode statistics); rollout and batch",
        "  are physics only and never reset, so a Humanoid that fell keeps simulating its (costlier) contacts there.",
        f"- AsyncVectorEnv starts one worker process per env (gymnasium's default, `shared_memory=True`); it is "
        f"measured up to N = {args.async_max_envs}",
        f"  and skipped above, where it would run that many processes on {os.cpu_count()} cores (see "
        "`--async-max-envs`).",
        "- mujoco.rollout: checks skipped, arrays preallocated, controls held over the substeps of an env-step; its",
        "  output carries every substep's state; no solver warm-start is passed between calls (`initial_warmstart`",
        "  is None), whereas ours and batch keep each env's.",
        "- mujoco.batch: a non-persistent `Batch` (ours uses a persistent one, one `MjData` per env), controls",
        "  written before each `step(nstep=5)`.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mujoco_throughput.md").write_text(report)
    with open(RESULTS / "mujoco_throughput.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["env", "num_envs", *METHODS, *ratios])
        writer.writeheader()
        for row in rows:
            record = {k: (f"{v:.0f}" if isinstance(v, float) else v) for k, v in row.items()}
            for name, peer in ratios.items():
                q = ratio(row, "ours", peer)
                record[name] = "" if q is None else f"{q:.3f}"
            writer.writerow(record)


if __name__ == "__main__":
    main()
