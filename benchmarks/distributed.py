"""PPO's training throughput with K torchrun ranks against one process, side by side in one invocation.

The same training problem each time: PPO with hidden (256, 256) networks on ``--env`` (default Pendulum-v1, a batched
torch task) with ``--num-envs`` environments in total (default 4096), ``n_steps`` 16, 5 epochs of 4 minibatches.
The comparison holds the total fixed (strong scaling): K ranks step ``num_envs / K`` envs each, so every iteration
collects and learns from the same number of samples as the single process, and the gradient step (averaged over
the ranks' minibatches) is the same size. Measured, each in its own fresh process(es):

- 1 rank with torch's default threads (``--threads``, default: torch's default, all cores), the baseline;
- 1 rank with 1 thread, to show how much torch's own threads give;
- K ranks (``--ranks``, default: all cores) under ``python -m torch.distributed.run``, gloo, 1 thread each.

A figure is env-steps per second of the whole loop (collect, update, the runner's bookkeeping; the ranks' steps
summed) over a timed run of ``--seconds`` after a 2-iteration warm-up in the same process; the configurations take
turns for ``--rounds`` rounds and each keeps its best round, so that a neighbour's burst of load does not land on one
configuration only. The report says how much CPU time other processes took during the run.

    python benchmarks/distributed.py [--seconds 20] [--rounds 2] [--num-envs 4096] [--ranks 2] [--env Pendulum-v1]
    python benchmarks/distributed.py --quick   # a smoke run (small, short, 1 thread); only prints

Writes ``benchmarks/results/distributed.{csv,md}`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import torch

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
GOAL = 1.6  # the goal on a 2-core machine: K ranks >= 1.6x one process
PPO_SETTINGS = {"hidden": (256, 256), "n_steps": 16, "epochs": 5, "minibatches": 4}
WARMUP_ITERATIONS = 2


def machine() -> str:
    """The machine line of env_throughput.py, with the communication backend."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from env_throughput import machine as base_machine

    return f"{base_machine()} (gloo)"


def cpu_seconds() -> tuple[float, float]:
    """mujoco_throughput.py's: busy CPU seconds of the machine, and of this process and its finished children."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from mujoco_throughput import cpu_seconds as machine_cpu_seconds

    return machine_cpu_seconds()


# -- one measurement (runs on every rank) -------------------------------------------------------------------------


def worker(args) -> None:
    from rl_suite import distributed
    from rl_suite.agents import PPO
    from rl_suite.registry import make
    from rl_suite.rng import seed_everything
    from rl_suite.runner import RunConfig, Runner

    torch.set_num_threads(args.threads)
    distributed.init("cpu")
    seed = distributed.rank_seed(0)
    seed_everything(seed)
    per_rank = args.num_envs // distributed.world_size()
    kwargs = {"nthread": args.threads} if args.env.endswith("-v5") else {}  # MuJoCo's native threads
    env = make(args.env, num_envs=per_rank, seed=seed, **kwargs)
    agent = PPO.for_env(env, **PPO_SETTINGS)
    quiet = {"eval_episodes": 0, "progress": False, "log_every_steps": 10**15, "checkpoint_every_steps": 10**15}
    iteration = PPO_SETTINGS["n_steps"] * args.num_envs
    with tempfile.TemporaryDirectory() as tmp:
        base = {"algo": "ppo", "env_id": args.env, "num_envs": per_rank, **quiet}
        warmup = RunConfig(**base, total_steps=WARMUP_ITERATIONS * iteration)
        Runner(agent, env, warmup, run_dir=pathlib.Path(tmp) / "warmup").run()
        timed = RunConfig(**base, total_steps=10**15, time_budget_s=args.seconds)
        summary = Runner(agent, env, timed, run_dir=pathlib.Path(tmp) / "timed").run()
    if distributed.is_main():
        print("RESULT " + json.dumps({"env_steps": summary["env_steps"], "wall_time_s": summary["wall_time_s"]}))
    distributed.shutdown()


def measure(args, ranks: int, threads: int) -> float:
    """Env-steps per second of one configuration, in fresh processes."""
    command = [__file__, "--worker", "--env", args.env, "--num-envs", str(args.num_envs)]
    command += ["--seconds", str(args.seconds), "--threads", str(threads)]
    if ranks > 1:
        with socket.socket() as s:  # a free port for the rendezvous
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port", str(port)]
        command = launcher + command
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    result = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{ranks} rank(s) x {threads} thread(s) failed:\n{result.stdout}\n{result.stderr}")
    found = json.loads(lines[-1][len("RESULT ") :])
    return found["env_steps"] / found["wall_time_s"]


# -- the report -----------------------------------------------------------------------------------------------


def write(rows: list[dict], args, minutes: float, others: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "distributed.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    ratio = rows[-1]["ratio"]
    lines = [
        f"# PPO training throughput: {args.ranks} torchrun ranks against one process",
        "",
        f"Machine: {machine()}.",
        f"Run: `python benchmarks/distributed.py {' '.join(sys.argv[1:])}` on {datetime.date.today()} "
        f"({minutes:.1f} min). PPO {PPO_SETTINGS} on {args.env}, {args.num_envs} envs in total (split evenly over "
        f"the ranks: the same samples per iteration); env-steps per second of the whole training loop over "
        f"{args.seconds:g} s after a {WARMUP_ITERATIONS}-iteration warm-up, best of {args.rounds} interleaved "
        f"rounds. Other processes used {others} of the machine's CPU time during the run.",
        "",
        "| configuration | ranks | threads per rank | envs per rank | env-steps/s | vs 1 rank |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['configuration']} | {row['ranks']} | {row['threads_per_rank']} | {row['envs_per_rank']} "
            f"| {row['env_steps_per_s']:,.0f} | {row['ratio']:.2f}x |"
        )
    verdict = "met" if ratio >= GOAL else "**missed**"
    lines += ["", f"Goal: {args.ranks} ranks >= {GOAL}x one process: {verdict} ({ratio:.2f}x)."]
    (RESULTS / "distributed.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--num-envs", type=int, default=4096, help="environments in total, split over the ranks")
    parser.add_argument("--ranks", type=int, default=os.cpu_count())
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="threads of the 1-rank baseline")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed training per figure and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 256 envs, 2 s, 1 round, 1 thread")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.num_envs, args.seconds, args.rounds, args.threads = 256, 2.0, 1, 1
    if args.num_envs % args.ranks:
        parser.error(f"--num-envs {args.num_envs} must split evenly over --ranks {args.ranks}")
    configurations = [
        (f"1 rank, {args.threads} thread{'s' if args.threads > 1 else ''}", 1, args.threads),
        ("1 rank, 1 thread", 1, 1),
        (f"{args.ranks} ranks (gloo), 1 thread each", args.ranks, 1),
    ]
    if args.threads == 1:
        configurations.pop(1)
    best = [0.0] * len(configurations)
    started, before = time.perf_counter(), cpu_seconds()
    for round_ in range(args.rounds):
        for i, (name, ranks, threads) in enumerate(configurations):
            rate = measure(args, ranks, threads)
            best[i] = max(best[i], rate)
            print(f"round {round_ + 1}: {name}: {rate:,.0f} env-steps/s", flush=True)
    elapsed, after = time.perf_counter() - started, cpu_seconds()
    other = (after[0] - before[0]) - (after[1] - before[1])
    others = f"{max(other, 0.0) / (elapsed * os.cpu_count()):.0%}"
    rows = [
        {
            "configuration": name,
            "ranks": ranks,
            "threads_per_rank": threads,
            "envs_per_rank": args.num_envs // ranks,
            "env_steps_per_s": rate,
            "ratio": rate / best[0],
        }
        for (name, ranks, threads), rate in zip(configurations, best, strict=True)
    ]
    for row in rows:
        print(f"{row['configuration']:<40} {row['env_steps_per_s']:>12,.0f} env-steps/s  {row['ratio']:.2f}x")
    print(f"other processes used {others} of the CPU time")
    if not args.quick:
        write(rows, args, elapsed / 60, others)


if __name__ == "__main__":
    main()
