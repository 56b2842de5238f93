"""The multi-agent tasks against mpe2, side by side in one invocation.

``--part throughput``: env-steps per second of our batched ``Spread`` (discrete actions, CPU) against mpe2's
``simple_spread_v3`` through PettingZoo's parallel API, ``N`` copies stepped in a Python loop (what any PettingZoo
user does without a batched simulator). Both run uniformly random actions drawn beforehand; an env-step is one
step of one environment (all of its agents). The table reports the ratios, which carry across machines.
``--part training`` is reserved for the learning comparison (MAPPO/QMIX), added separately.

    python benchmarks/multiagent.py [--part throughput|training|all] [--seconds 2] [--num-envs 1 64 1024 4096]
    python benchmarks/multiagent.py --quick   # a smoke run with tiny durations; writes into a temporary folder

Writes ``benchmarks/results/multiagent_throughput.{csv,md}`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform
import tempfile
import time

import numpy as np
import torch

from rl_suite.envs.multiagent.mpe import Spread
from rl_suite.throughput import steps_per_second

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
NUM_ENVS = (1, 64, 1024, 4096)
MPE2_MAX_ENVS = 1024  # mpe2 steps one Python environment at a time; beyond this a figure takes minutes


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import mpe2
    import pettingzoo

    return (
        f"{cpu} (platform.processor: {platform.processor() or 'n/a'}), {os.cpu_count()} cores; torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), mpe2 {getattr(mpe2, '__version__', '?')}, "
        f"pettingzoo {pettingzoo.__version__}, numpy {np.__version__}, Python {platform.python_version()}"
    )


def ours_rate(num_envs: int, seconds: float, device: str = "cpu") -> float:
    """Env-steps per second of the batched Spread under uniformly random discrete actions."""
    env = Spread(num_envs, device=device, seed=0)
    generator = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 5, (num_envs, env.num_agents), generator=generator).to(env.device) for _ in range(16)]
    env.reset()
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    return steps_per_second(lambda i: env.step(actions[i % 16]), num_envs, seconds, sync)


def mpe2_rate(num_envs: int, seconds: float, max_calls: int | None = None) -> float:
    """Env-steps per second of ``num_envs`` copies of mpe2's simple_spread_v3 (parallel API) stepped in a loop.

    Each call steps every copy once (resetting the copies whose episode ended, as a vector env does); the rate is
    measured over ``seconds`` or ``max_calls`` calls, whichever comes first, after one warm-up call."""
    from mpe2 import simple_spread_v3

    envs = [simple_spread_v3.parallel_env(N=3, max_cycles=25) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    names = envs[0].possible_agents
    generator = np.random.default_rng(0)
    actions = [generator.integers(0, 5, (num_envs, len(names))) for _ in range(16)]

    def step(call: int) -> None:
        batch = actions[call % 16]
        for i, env in enumerate(envs):
            env.step({name: batch[i, j] for j, name in enumerate(names)})
            if not env.agents:
                env.reset()

    step(0)
    calls, start = 0, time.perf_counter()
    while True:
        step(calls)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds or (max_calls is not None and calls >= max_calls):
            break
    rate = calls * num_envs / elapsed
    for env in envs:
        env.close()
    return rate


def throughput(num_envs=NUM_ENVS, seconds: float = 2.0, mpe2_max_calls: int | None = 25) -> list[dict]:
    """One row per ``num_envs``: our Spread's and mpe2's env-steps per second and their ratio."""
    rows = []
    for n in num_envs:
        ours = ours_rate(n, seconds)
        theirs = mpe2_rate(n, seconds, mpe2_max_calls) if n <= MPE2_MAX_ENVS else None
        rows.append(
            {
                "task": "Spread-v0 / simple_spread_v3 (discrete)",
                "num_envs": n,
                "rl_suite_cpu": round(ours),
                "mpe2_parallel_loop": None if theirs is None else round(theirs),
                "ratio": None if theirs is None else round(ours / theirs, 1),
            }
        )
        print(rows[-1], flush=True)
    return rows


def write_throughput(rows: list[dict], command: str, directory: pathlib.Path = RESULTS) -> None:
    directory.mkdir(exist_ok=True)
    with open(directory / "multiagent_throughput.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    def cell(value) -> str:
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value}x"

    lines = [
        "# Env-steps per second: batched Spread against mpe2's simple_spread_v3",
        "",
        f"Machine: {machine()}.",
        f"Run: `{command}` on {datetime.date.today()}; uniformly random discrete actions, action checks on "
        f"(the default on CPU); mpe2 through PettingZoo's parallel API, N copies stepped in a Python loop.",
        "",
        "| task | N | rl-suite cpu | mpe2 (parallel, loop) | rl-suite / mpe2 |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['task']} | {row['num_envs']} | {cell(row['rl_suite_cpu'])} | {cell(row['mpe2_parallel_loop'])} "
            f"| {cell(row['ratio'])} |"
        )
    (directory / "multiagent_throughput.md").write_text("\n".join(lines) + "\n")


def training(args) -> list[dict]:
    """The learning comparison (MAPPO/QMIX on Spread against their peers); not written yet."""
    print("--part training: not implemented yet", flush=True)
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("throughput", "training", "all"), default="throughput")
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    parser.add_argument("--num-envs", type=int, nargs="+", default=list(NUM_ENVS))
    parser.add_argument("--mpe2-max-calls", type=int, default=25, help="at most this many steps of the mpe2 loop")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--quick", action="store_true", help="tiny durations, a smoke test; writes no results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.part in ("throughput", "all"):
        if args.quick:  # exercise every path, writing into a temporary folder
            rows = throughput(num_envs=(1, 64), seconds=0.05, mpe2_max_calls=2)
            with tempfile.TemporaryDirectory() as folder:
                write_throughput(rows, "python benchmarks/multiagent.py --quick", pathlib.Path(folder))
                print((pathlib.Path(folder) / "multiagent_throughput.md").read_text())
        else:
            rows = throughput(args.num_envs, args.seconds, args.mpe2_max_calls)
            command = "python benchmarks/multiagent.py --part throughput"
            if args.seconds != 2.0:
                command += f" --seconds {args.seconds:g}"
            write_throughput(rows, command)
    if args.part in ("training", "all"):
        training(args)


if __name__ == "__main__":
    main()
