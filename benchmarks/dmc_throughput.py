"""Env-steps per second on the DeepMind Control Suite: rl-suite's batched tasks against one dm_control environment
in a loop and against raw MuJoCo physics.

For six representative tasks (``TASKS``) at each N, side by side in one invocation:

- ours: ``rl_suite.make("dm_control/<task>-v0", num_envs=N)`` on the CPU backend (MuJoCo's batch API on
  ``--nthread`` native threads), the whole ``env.step``: action checks, ``n_sub_steps`` physics steps and the
  position-velocity update after them, observation, reward, time limit and same-step auto-reset (which a window at
  large N seldom reaches: a window is shorter than an episode).
- ``mujoco.rollout.Rollout(nthread)`` on the same model: physics only, the upper limit, ``n_sub_steps`` substeps
  per env-step (``mujoco_throughput.rollout``).
- dm_control: one ``suite.load`` environment stepped in a Python loop (``benchmarks/dmc_control_loop.py``), run in
  dm_control's own virtual environment (``--dm-control-python``, default ``.venv-dmc/bin/python``: dm_control 1.0.50
  and MuJoCo 3.17, as ``tests/dmc_reference/record.py`` makes it), measured once per task on one core.

Each figure is the best of 3 windows after a warm-up, the methods of a row interleaved (``mujoco_throughput.rates``);
each row runs in a fresh interpreter.

    python benchmarks/dmc_throughput.py [--seconds 2] [--num-envs 1 64 1024] [--quick]

Goals (the issue's): from N = 64 up, ours per core at least 3x one dm_control environment (which runs on one core);
from N = 1,024 up, ours at least 80% of mujoco.rollout on the same threads. Writes
``benchmarks/results/dmc_throughput.{csv,md}`` with the machine it ran on (``--quick`` only prints).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import common
import mujoco
import mujoco_throughput as mt
import torch

import rl_suite

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
ROOT = pathlib.Path(__file__).resolve().parent.parent
TASKS = ("cartpole-swingup", "cheetah-run", "walker-walk", "humanoid-run", "quadruped-run", "dog-run")
PER_CORE_GOAL, PER_CORE_FROM = 3.0, 64
ROLLOUT_GOAL, ROLLOUT_FROM = 0.8, 1024


def measure_group(task: str, num_envs: int, seconds: float, nthread: int) -> dict:
    """One row: ours and mujoco.rollout at one (task, N), interleaved."""
    steppers = {"ours": mt.ours(f"dm_control/{task}-v0", num_envs, nthread)}
    with rl_suite.make(f"dm_control/{task}-v0", num_envs=1) as env:
        model, substeps = env.model, env.n_sub_steps
    steppers["rollout"] = mt.rollout(model, num_envs, nthread, substeps)
    return {"task": task, "num_envs": num_envs, "n_sub_steps": substeps} | mt.rates(steppers, num_envs, seconds)


def in_child(command: list[str]) -> dict:
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout.splitlines()[-1])


def dm_control_rate(python: str, task: str, seconds: float) -> float | str:
    """One dm_control env's steps/s, or why there is none."""
    if not pathlib.Path(python).is_file():
        return f"no {python}"
    script = str(pathlib.Path(__file__).resolve().parent / "dmc_control_loop.py")
    return in_child([python, script, task, "--seconds", str(seconds)])["steps_per_s"]


def fmt(value) -> str:
    return f"{value:,.0f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure (3 windows)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--nthread", type=int, default=os.cpu_count(), help="native threads: ours and rollout")
    parser.add_argument("--dm-control-python", default=str(ROOT / ".venv-dmc" / "bin" / "python"))
    parser.add_argument("--quick", action="store_true", help="smoke run: 0.3 s per figure, N = 1 and 64, no files")
    parser.add_argument("--group", nargs=2, metavar=("TASK", "N"), help=argparse.SUPPRESS)  # one row, as JSON
    args = parser.parse_args()
    if args.group:
        print(json.dumps(measure_group(args.group[0], int(args.group[1]), args.seconds, args.nthread)))
        return
    if args.quick:
        args.seconds, args.num_envs = 0.3, [1, 64]
    command = " ".join(["python benchmarks/dmc_throughput.py", *sys.argv[1:]])
    started, cpu_before = time.perf_counter(), mt.cpu_seconds()
    cores = os.cpu_count()

    rows = []
    for task in args.tasks:
        dm_control = dm_control_rate(args.dm_control_python, task, args.seconds)
        for n in args.num_envs:
            group = [sys.executable, __file__, "--group", task, str(n), "--seconds", str(args.seconds)]
            row = in_child([*group, "--nthread", str(args.nthread)]) | {"dm_control": dm_control}
            rows.append(row)
            print("  ".join(f"{k}={fmt(v)}" for k, v in row.items()), f"({time.perf_counter() - started:.0f} s)")
    elapsed = time.perf_counter() - started
    others = mt.others_share(cpu_before, mt.cpu_seconds(), elapsed)

    def per_core(row: dict, method: str = "ours") -> float | None:
        ok = isinstance(row["dm_control"], float)
        return row[method] / args.nthread / row["dm_control"] if ok else None

    def goal(value: float | None, target: float, applies: bool) -> str:
        return "-" if value is None or not applies else ("met" if value >= target else "**missed**")

    lines = [
        "# Env-steps per second on the DeepMind Control Suite: rl-suite against dm_control and raw MuJoCo physics",
        "",
        f"Machine: {common.cpu_name()}; MuJoCo {mujoco.__version__} ({args.nthread} threads for ours "
        f"and rollout), torch {torch.__version__}, Python {platform.python_version()}; dm_control from "
        f"`{args.dm_control_python}`.",
        f"Run: `{command}` on {datetime.date.today().isoformat()} ({elapsed / 60:.1f} min); uniformly random "
        f"actions drawn beforehand, best of {mt.WINDOWS} windows of {args.seconds / mt.WINDOWS:.2g} s per figure. "
        f"Other processes used {others} of the machine's CPU time during the run.",
        "",
        f"| task | N | substeps | rl-suite | mujoco.rollout | one dm_control env | ours per core / dm_control | "
        f"rollout per core / dm_control | ours / rollout | goal ≥{PER_CORE_GOAL:g}x per core (N ≥ {PER_CORE_FROM}) | "
        f"goal ≥{ROLLOUT_GOAL:.0%} of rollout (N ≥ {ROLLOUT_FROM:,}) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    verdicts = []
    for row in rows:
        core, ceiling, over_rollout = per_core(row), per_core(row, "rollout"), row["ours"] / row["rollout"]
        goals = (
            goal(core, PER_CORE_GOAL, row["num_envs"] >= PER_CORE_FROM),
            goal(over_rollout, ROLLOUT_GOAL, row["num_envs"] >= ROLLOUT_FROM),
        )
        verdicts += [g for g in goals if g != "-"]
        lines.append(
            f"| {row['task']} | {row['num_envs']:,} | {row['n_sub_steps']} | {fmt(row['ours'])} | "
            f"{fmt(row['rollout'])} | {fmt(row['dm_control'])} | {'-' if core is None else f'{core:.1f}x'} | "
            f"{'-' if ceiling is None else f'{ceiling:.1f}x'} | {over_rollout:.2f}x | {goals[0]} | "
            f"{goals[1]} |"
        )
    missed = sum(v != "met" for v in verdicts)
    lines += [
        "",
        f"Verdict: {len(verdicts) - missed} of {len(verdicts)} goal cells met"
        + (f", {missed} missed." if missed else "."),
        "",
        "Notes:",
        "",
        f"- Per core: ours divided by the {args.nthread} threads it ran on, against one dm_control environment, which "
        f"runs on one core; this machine has {cores}. The rollout column is the ceiling that physics alone sets: where",
        "  it is under the goal, no env on this MuJoCo can meet it.",
        "- dm_control runs MuJoCo 3.17 (the version it supports) and ours MuJoCo 4.0; rollout runs ours.",
        "- rollout is physics alone and never resets; ours also computes the observation and reward and keeps",
        "  positions and velocities current after every step, as dm_control does. rollout runs from the model's",
        "  initial pose, not from episode starts, so it is no strict ceiling.",
        "- A window at N = 1,024 is shorter than an episode, so ours seldom resets while measured; the one dm_control",
        "  env resets every 1,000 steps (cheetah's reset runs 200 physics steps): the per-core ratios lean ours' way.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.quick:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dmc_throughput.md").write_text(report)
    with open(RESULTS / "dmc_throughput.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["task", "num_envs", "n_sub_steps", "ours", "rollout", "dm_control"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.0f}" if isinstance(v, float) else v) for k, v in row.items()})


if __name__ == "__main__":
    main()
