"""Env-steps per second: rl-suite's batched tasks against gymnasium, side by side in one invocation.

CartPole-v1 runs against gymnasium's own vectorised CartPole (``make_vec(..., "vector_entry_point")``) and against
``SyncVectorEnv``; the other four classic tasks run against ``SyncVectorEnv``. Every figure is env-steps per second
under uniformly random actions drawn beforehand; the table reports the ratios, which carry across machines.

    python benchmarks/env_throughput.py [--seconds 2] [--num-envs 1 64 1024 16384 65536]

Writes ``benchmarks/results/env_throughput.{csv,md}`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform

import gymnasium as gym
import numpy as np
import torch

import rl_suite
from rl_suite.throughput import env_steps_per_second, steps_per_second

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
TASKS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]
SYNC_MAX_ENVS = 16384  # SyncVectorEnv steps one Python env at a time; beyond this a figure takes minutes to build


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return (
        f"{cpu}, {os.cpu_count()} cores{gpu}; torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"gymnasium {gym.__version__}, numpy {np.__version__}, Python {platform.python_version()}"
    )


def gymnasium_rate(env: gym.vector.VectorEnv, num_envs: int, seconds: float) -> float:
    generator = np.random.default_rng(0)
    space = env.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        actions = [generator.integers(0, space.n, num_envs) for _ in range(16)]
    else:
        actions = [
            generator.uniform(space.low, space.high, (num_envs, *space.shape)).astype(np.float32) for _ in range(16)
        ]
    env.reset(seed=0)
    rate = steps_per_second(lambda i: env.step(actions[i % 16]), num_envs, seconds, warmup=2)
    env.close()
    return rate


def ours_rate(env_id: str, num_envs: int, device: str, seconds: float) -> float:
    env = rl_suite.make(env_id, num_envs=num_envs, device=device, seed=0)
    return env_steps_per_second(env, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 1024, 16384, 65536])
    parser.add_argument("--tasks", nargs="+", default=TASKS)
    args = parser.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

    rows = []
    for env_id in args.tasks:
        for n in args.num_envs:
            row = {"env": env_id, "num_envs": n}
            for device in devices:
                row[f"rl_suite_{device}"] = ours_rate(env_id, n, device, args.seconds)
            if env_id == "CartPole-v1":
                vector = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point")
                row["gym_vector"] = gymnasium_rate(vector, n, args.seconds)
            if n <= SYNC_MAX_ENVS:
                row["gym_sync"] = gymnasium_rate(
                    gym.make_vec(env_id, num_envs=n, vectorization_mode="sync"), n, args.seconds
                )
            rows.append(row)
            print(
                "  ".join(f"{k}={v:,.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True
            )

    RESULTS.mkdir(exist_ok=True)
    columns = ["env", "num_envs", *(f"rl_suite_{d}" for d in devices), "gym_vector", "gym_sync"]
    with open(RESULTS / "env_throughput.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: (f"{v:.0f}" if isinstance(v, float) else v) for k, v in row.items()} for row in rows)

    def ratio(row, peer, device="cpu"):
        return f"{row[f'rl_suite_{device}'] / row[peer]:.1f}x" if peer in row else "-"

    lines = [
        "# Env-steps per second: rl-suite against gymnasium",
        "",
        f"Machine: {machine()}.",
        f"Run: `python benchmarks/env_throughput.py --seconds {args.seconds:g}` on "
        f"{datetime.date.today().isoformat()}; uniformly random actions, action checks on (the default on CPU).",
        "",
        "| env | N | "
        + " | ".join(f"rl-suite {d}" for d in devices)
        + " | gymnasium vector | gymnasium sync | rl-suite cpu / vector | rl-suite cpu / sync |",
        "|---|---:|" + "---:|" * len(devices) + "---:|---:|---:|---:|",
    ]
    for row in rows:
        figures = " | ".join(f"{row[f'rl_suite_{d}']:,.0f}" for d in devices)
        peers = " | ".join(f"{row[p]:,.0f}" if p in row else "-" for p in ("gym_vector", "gym_sync"))
        lines.append(
            f"| {row['env']} | {row['num_envs']} | {figures} | {peers} | {ratio(row, 'gym_vector')} | "
            f"{ratio(row, 'gym_sync')} |"
        )
    lines += ["", f"SyncVectorEnv is measured up to N = {SYNC_MAX_ENVS}.", ""]
    (RESULTS / "env_throughput.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
