"""The multi-agent tasks and learners, side by side in one invocation.

``--part throughput``: env-steps per second of our batched ``Spread`` (discrete actions, CPU) against mpe2's
``simple_spread_v3`` through PettingZoo's parallel API, ``N`` copies stepped in a Python loop (what any PettingZoo
user does without a batched simulator). Both run uniformly random actions drawn beforehand; an env-step is one
step of one environment (all of its agents). The table reports the ratios, which carry across machines.

``--part training``: MAPPO, IPPO (MAPPO with a critic on each agent's own observation) and QMIX, each with its
shipped settings (``agents/hyperparams/{mappo,qmix}.yaml``), on Spread-v0 and the 3m, 8m and 2s3z skirmishes, under
the same wall-clock budget per run (``--minutes``, evaluations included), one run at a time in its own process with
the whole machine. Each evaluation is 100 episodes of the deterministic (greedy) policies.

    python benchmarks/multiagent.py [--part throughput|training|all] [--seconds 2] [--num-envs 1 64 1024 4096]
    python benchmarks/multiagent.py --part training [--minutes 2] [--tasks Spread-v0 Skirmish-3m-v0 ...]
    python benchmarks/multiagent.py --quick   # a smoke run with tiny durations; writes into a temporary folder

Writes ``benchmarks/results/multiagent_throughput.{csv,md}`` and ``multiagent_training.{csv,md,png}`` (learning
curves against env steps and wall-clock) with the machine they ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import pathlib
import subprocess
import sys
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
    """The machine line of env_throughput.py, with the versions of the multi-agent peer."""
    import mpe2
    import pettingzoo

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from env_throughput import machine as base_machine

    return f"{base_machine()}, mpe2 {getattr(mpe2, '__version__', '?')}, pettingzoo {pettingzoo.__version__}"


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


TASKS = ("Spread-v0", "Skirmish-3m-v0", "Skirmish-8m-v0", "Skirmish-2s3z-v0")
METHODS = {"MAPPO": ("mappo", {}), "IPPO": ("mappo", {"centralized_critic": False}), "QMIX": ("qmix", {})}
EVAL_EVERY = {"mappo": 10_000, "qmix": 5_000}  # env steps; Spread (25-step episodes) is evaluated less often
EVAL_EPISODES = 100


def train_one(algo_name: str, env_id: str, seed: int, seconds: float, overrides: dict) -> dict:
    """One run with the shipped settings for ``seconds`` of wall-clock; its learning curve."""
    import rl_suite
    from rl_suite.checkpoint import seed_everything
    from rl_suite.cli import tuned_settings
    from rl_suite.config import split_overrides
    from rl_suite.registry import load_algorithm
    from rl_suite.runner import RunConfig, Runner

    algo = load_algorithm(algo_name)
    eval_every = EVAL_EVERY[algo_name] * (5 if env_id == "Spread-v0" else 1)
    settings = {**tuned_settings(algo, env_id), **overrides}
    settings.update(
        total_steps=10**12,
        time_budget_s=seconds,
        stop_at_win_rate=None,
        eval_every_steps=eval_every,
        eval_episodes=EVAL_EPISODES,
        checkpoint_every_steps=10**12,
        log_every_steps=10**12,
        progress=False,
        seed=seed,
    )
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo.name, env_id=env_id, **run_values)
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed)
    agent = algo.for_env(env, algo.Config(**agent_values))
    with tempfile.TemporaryDirectory() as run_dir:
        summary = Runner(agent, env, config, run_dir=run_dir).run()
    return {"env_steps": summary["env_steps"], "num_envs": config.num_envs, "curve": summary["evaluations"]}


def first(curve: list[dict], key: str, target: float, field: str) -> float | None:
    return next((p[field] for p in curve if p.get(key) is not None and p[key] >= target), None)


def plot_training(rows: list[dict], tasks, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7), squeeze=False)
    for column, task in enumerate(tasks):
        metric = "mean_return" if task == "Spread-v0" else "win_rate"
        for row in (r for r in rows if r["task"] == task):
            values = [p[metric] for p in row["curve"]]
            axes[0, column].plot([p["env_steps"] / 1e3 for p in row["curve"]], values, marker=".", label=row["method"])
            axes[1, column].plot([p["wall_time_s"] for p in row["curve"]], values, marker=".", label=row["method"])
        axes[0, column].set_title(task)
        axes[0, column].set_xlabel("env steps (thousands)")
        axes[1, column].set_xlabel("wall-clock (s)")
        for axis in axes[:, column]:
            axis.set_ylabel("mean evaluation return" if metric == "mean_return" else "evaluation win rate")
            axis.grid(alpha=0.3)
            axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def training(args) -> list[dict]:
    """Every method on every task, one at a time, each in a fresh process; writes the curves and the table."""
    rows: list[dict] = []
    seconds = args.minutes * 60
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            for method in args.methods:
                algo, overrides = METHODS[method]
                out = pathlib.Path(scratch) / "run.json"
                job = dict(algo=algo, task=task, seed=args.seed, seconds=seconds, overrides=overrides, out=str(out))
                subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], check=True)
                row = {**json.loads(out.read_text()), "task": task, "method": method}
                rows.append(row)
                last = row["curve"][-1]
                print(f"{task} {method}: {row['env_steps']:,} env steps, last evaluation {last}", flush=True)
    if not args.quick:
        write_training(rows, args)
    return rows


def scripted_win_rates(task: str, episodes: int = 1000) -> dict[str, float]:
    """Win rates of uniformly random available actions and of the focus-fire script, for reference."""
    import rl_suite
    from rl_suite.envs.multiagent.skirmish import focus_fire_actions, random_actions, win_rate

    env = rl_suite.make(task, num_envs=episodes, seed=0)
    generator = torch.Generator().manual_seed(0)
    return {
        "random": win_rate(env, lambda e: random_actions(e, generator), seed=0),
        "focus fire": win_rate(env, focus_fire_actions, seed=0),
    }


def write_training(rows: list[dict], args, directory: pathlib.Path = RESULTS) -> None:
    directory.mkdir(exist_ok=True)
    with open(directory / "multiagent_training.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["task", "method", "env_steps", "wall_time_s", "mean_return", "win_rate"])
        for row in rows:
            for p in row["curve"]:
                writer.writerow([row["task"], row["method"], p["env_steps"], round(p["wall_time_s"], 1),
                                 round(p["mean_return"], 3), p.get("win_rate", "")])  # fmt: skip
    plot_training(rows, args.tasks, directory / "multiagent_training.png")
    command = "python benchmarks/multiagent.py " + " ".join(sys.argv[1:])
    lines = [
        "# MAPPO, IPPO and QMIX on the batched multi-agent tasks, equal wall-clock per run",
        "",
        f"Machine: {machine()}.",
        f"Run: `{command}` on {datetime.date.today()}: {args.minutes:g} minutes of wall-clock per run (evaluations "
        f"included), seed {args.seed}, shipped settings, one run at a time. Evaluations: {EVAL_EPISODES} episodes of "
        "the greedy policies.",
        "",
        "For reference, win rates over 1000 battles of uniformly random available actions and of a scripted focus-fire "
        "policy (every living ally attacks the weakest enemy in range, else walks toward the nearest):",
        "",
    ]
    for task in (t for t in args.tasks if t.startswith("Skirmish")):
        rates = scripted_win_rates(task)
        lines.append(f"- {task}: random {rates['random']:.1%}, focus fire {rates['focus fire']:.1%}")
    lines += [
        "",
        "| task | method | env steps | final | best | env steps to 90% wins | seconds to 90% wins |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        curve = row["curve"]
        if row["task"] == "Spread-v0":
            final, best = f"return {curve[-1]['mean_return']:.2f}", f"{max(p['mean_return'] for p in curve):.2f}"
            steps = wall = "-"
        else:
            final = f"win rate {curve[-1]['win_rate']:.0%}"
            best = f"{max(p['win_rate'] for p in curve):.0%}"
            reached_steps = first(curve, "win_rate", 0.9, "env_steps")
            reached_wall = first(curve, "win_rate", 0.9, "wall_time_s")
            steps = "not reached" if reached_steps is None else f"{reached_steps:,}"
            wall = "not reached" if reached_wall is None else f"{reached_wall:.0f}"
        lines.append(
            f"| {row['task']} | {row['method']} | {row['env_steps']:,} | {final} | {best} | {steps} | {wall} |"
        )
    lines += ["", "Curves: `multiagent_training.csv`, `multiagent_training.png`."]
    (directory / "multiagent_training.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("throughput", "training", "all"), default="all")
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per throughput figure")
    parser.add_argument("--num-envs", type=int, nargs="+", default=list(NUM_ENVS))
    parser.add_argument("--mpe2-max-calls", type=int, default=25, help="at most this many steps of the mpe2 loop")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--minutes", type=float, default=2.0, help="wall-clock budget of each training run")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny durations, a smoke test; writes no results")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: one training run, in this process
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        job = json.loads(args.worker)
        result = train_one(job["algo"], job["task"], job["seed"], job["seconds"], job["overrides"])
        pathlib.Path(job["out"]).write_text(json.dumps(result))
        return
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
        if args.quick:
            args.minutes, args.tasks = 0.1, ["Spread-v0", "Skirmish-3m-v0"]
        rows = training(args)
        if args.quick:
            with tempfile.TemporaryDirectory() as folder:
                write_training(rows, args, pathlib.Path(folder))
                print((pathlib.Path(folder) / "multiagent_training.md").read_text())


if __name__ == "__main__":
    main()
