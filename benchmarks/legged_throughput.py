"""Policy steps per second of the legged velocity task against ``mujoco.rollout`` stepping the same model.

For ``QuadrupedVelocity-Flat-v0`` at each N (default 1, 64, 1,024 and 4,096), side by side in one invocation:

- ours: ``rl_suite.make("QuadrupedVelocity-Flat-v0", num_envs=N)`` on the CPU backend, the real ``env.step``: action
  checks, PD targets, 4 physics steps, observations (policy and critic), the reward terms, terminations, time limits,
  command resampling and same-step auto-reset.
- ours, kit on: the same with every piece of the sim-to-real kit switched on (friction, mass, centre of mass, motor
  strength and gains randomised at reset, a latency of up to 2 physics steps, which steps the physics one substep at
  a time, observation noise and pushes).
- ``mujoco.rollout.Rollout(nthread)``: physics only, the upper limit: the same compiled model (the task's, with its
  position actuators and ground) rolled forward 4 substeps per policy step from the default pose, each call
  continuing from the last state, with joint targets drawn around the default pose. No observation, reward or reset.

Actions are ``N(0, 0.5)`` (what an untrained Gaussian policy sends), drawn once before timing (16 batches used in
turn). Each figure is the best of 3 windows of ``--seconds / 3`` after a warm-up, the methods interleaved
(``mujoco_throughput.rates``); each N runs in a fresh interpreter. The goal, from the issue: ours at least 80% of
rollout's rate from N = 1,024 up, so that the task's rewards, randomisation and observations add at most a fifth.

    python benchmarks/legged_throughput.py [--seconds 3] [--num-envs 1 64 1024 4096] [--quick]

Writes ``benchmarks/results/legged_throughput.{csv,md}`` with the machine it ran on (``--quick``: a smoke run with
short windows and small N, printed only).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import common
import mujoco
import mujoco.rollout
import numpy as np
import torch
from mujoco_throughput import cpu_seconds, machine, others_share, rates

import rl_suite
from rl_suite.envs.robots import config as robots

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
ENV_ID = "QuadrupedVelocity-Flat-v0"
DECIMATION = 4
ACTION_BATCHES = 16
GOAL, GOAL_FROM_N = 0.8, 1024
KIT = dict(
    friction_range=(0.5, 1.25),
    added_mass_range=(-1.0, 1.0),
    com_offset_range=(-0.02, 0.02),
    motor_strength_range=(0.9, 1.1),
    kp_range=(0.8, 1.2),
    kd_range=(0.8, 1.2),
    max_latency_steps=2,
    obs_noise_level=1.0,
    push_velocity=1.0,
)
METHODS = {"ours": "rl-suite", "ours_kit": "rl-suite, kit on", "rollout": "mujoco.rollout"}


def policy_actions(num_envs: int, joints: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [0.5 * torch.randn(num_envs, joints, generator=generator) for _ in range(ACTION_BATCHES)]


def ours(num_envs: int, nthread: int, **settings):
    env = rl_suite.make(ENV_ID, num_envs=num_envs, seed=0, nthread=nthread, **settings)
    actions = policy_actions(num_envs, env.action_space.shape[0])
    env.reset(seed=0)
    return (lambda i: env.step(actions[i % ACTION_BATCHES])), env.close


def rollout(num_envs: int, nthread: int):
    robot = robots.QUADRUPED
    model = robots.build_model(robot)
    bound = robots.bind(robot, model)
    data = mujoco.MjData(model)
    default = robot.per_joint("default_joint_pos")
    data.qpos[2] = robot.init_base_height
    data.qpos[bound.joint_qpos] = default
    data.ctrl[:] = default
    mujoco.mj_forward(model, data)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.empty((num_envs, mujoco.mj_stateSize(model, spec)))
    mujoco.mj_getState(model, data, initial[0], spec)
    initial[1:] = initial[0]
    states = np.empty((num_envs, DECIMATION, initial.shape[1]))
    scale = robot.per_joint("action_scale")
    controls = [
        np.repeat((default + scale * a.double().numpy())[:, None], DECIMATION, axis=1)
        for a in policy_actions(num_envs, model.nu)
    ]
    models, datas = [model] * num_envs, [mujoco.MjData(model) for _ in range(nthread)]
    runner = mujoco.rollout.Rollout(nthread=nthread)

    def step(i: int) -> None:
        runner.rollout(
            models, datas, initial, controls[i % ACTION_BATCHES], nstep=DECIMATION, state=states, skip_checks=True
        )
        initial[:] = states[:, -1]

    return step, runner.close


def measure(num_envs: int, seconds: float, nthread: int) -> dict:
    steppers = {
        "ours": ours(num_envs, nthread),
        "ours_kit": ours(num_envs, nthread, **KIT),
        "rollout": rollout(num_envs, nthread),
    }
    return {"num_envs": num_envs} | rates(steppers, num_envs, seconds)


def measure_in_child(num_envs: int, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--group", str(num_envs), "--seconds", str(args.seconds)]
    command += ["--nthread", str(args.nthread)]
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(child.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per figure (3 windows)")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--nthread", type=int, default=os.cpu_count(), help="native threads: ours and rollout")
    parser.add_argument("--quick", action="store_true", help="short windows, N = 1 and 64, print only")
    parser.add_argument("--group", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.nthread)
    if args.group is not None:
        print(json.dumps(measure(args.group, args.seconds, args.nthread)))
        return
    if args.quick:
        args.seconds, args.num_envs = 0.3, [1, 64]

    started, before = time.perf_counter(), cpu_seconds()
    rows = []
    for num_envs in args.num_envs:
        row = measure_in_child(num_envs, args)
        row["ours_over_rollout"] = row["ours"] / row["rollout"]
        row["kit_over_rollout"] = row["ours_kit"] / row["rollout"]
        rows.append(row)
        print(
            f"N={num_envs}: ours {row['ours']:,.0f}, kit on {row['ours_kit']:,.0f}, rollout {row['rollout']:,.0f} "
            f"policy steps/s ({row['ours_over_rollout']:.0%} of rollout)",
            flush=True,
        )
    elapsed = time.perf_counter() - started
    share = others_share(before, cpu_seconds(), elapsed)
    if args.quick:
        return

    def verdict(row: dict, key: str) -> str:
        if row["num_envs"] < GOAL_FROM_N:
            return "-"
        return "met" if row[key] >= GOAL else "**missed**"

    RESULTS.mkdir(exist_ok=True)
    common.write_csv(RESULTS / "legged_throughput.csv", rows)
    lines = [
        "# Policy steps per second of the legged velocity task against mujoco.rollout",
        "",
        f"Machine: {machine(args.nthread)}.",
        f"Run: `python benchmarks/legged_throughput.py --seconds {args.seconds:g}` on {datetime.date.today()} "
        f"({elapsed / 60:.1f} min); `{ENV_ID}` (decimation {DECIMATION}, N(0, 0.5) actions drawn beforehand), best "
        f"of 3 windows per figure, the methods interleaved. Other processes used {share} of the machine's CPU time.",
        "",
        f"| N | {' | '.join(METHODS.values())} | ours / rollout | kit on / rollout | goal ≥{GOAL:.0%} of rollout "
        f"from N={GOAL_FROM_N:,} | goal, kit on |",
        "|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['num_envs']:,} | {row['ours']:,.0f} | {row['ours_kit']:,.0f} | {row['rollout']:,.0f} | "
            f"{row['ours_over_rollout']:.0%} | {row['kit_over_rollout']:.0%} | {verdict(row, 'ours_over_rollout')} "
            f"| {verdict(row, 'kit_over_rollout')} |"
        )
    common.write_report(RESULTS / "legged_throughput.md", lines)


if __name__ == "__main__":
    main()
