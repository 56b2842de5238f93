"""The multi-agent tasks and learners, side by side in one invocation.

``--part throughput``: env-steps per second of our batched ``Spread`` (discrete actions, CPU) against mpe2's
``simple_spread_v3`` through PettingZoo's parallel API, ``N`` copies stepped in a Python loop (what any PettingZoo
user does without a batched simulator). Both run uniformly random actions drawn beforehand; an env-step is one
step of one environment (all of its agents). The table reports the ratios, which carry across machines.

``--part training``: MAPPO, IPPO (MAPPO with a critic on each agent's own observation), QMIX, VDN (QMIX's
``mixer=vdn``) and MADDPG, each with its shipped settings (``agents/hyperparams/{mappo,qmix,maddpg}.yaml``; MADDPG's
Spread settings use continuous actions), on Spread-v0 and the 3m, 8m and 2s3z skirmishes, under the same wall-clock
budget per run (``--minutes``, evaluations included), one run at a time in its own process with the whole machine,
for every seed (``--seeds``, default 0 1 2). Each evaluation is 100 episodes of the deterministic (greedy) policies.
The table gives each method's final evaluation as mean ± std over seeds beside its best seed, and what uniformly
random play gets on the same evaluation. Training takes tasks x methods x seeds x ``--minutes`` (printed first): 4 x 5
x 3 x 3 min = 180 min with ``--minutes 3``; finished runs are kept in ``<--runs-dir>/multiagent/``, so a stopped
invocation resumes with the runs it lacks (``--fresh`` ignores them).

    python benchmarks/multiagent.py [--part throughput|training|all] [--seconds 2] [--num-envs 1 64 1024 4096]
    python benchmarks/multiagent.py --part training [--minutes 2] [--seeds 0 1 2] [--tasks Spread-v0 ...]
    python benchmarks/multiagent.py --quick   # a smoke run with tiny durations; writes into a temporary folder

Writes ``multiagent_throughput.{csv,md}`` and ``multiagent_training.{csv,md,png}`` (learning curves against env steps
and wall-clock) into ``--results-dir`` (default ``benchmarks/results``), with the machine they ran on.
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

import common
import numpy as np
import torch

from rl_suite.envs.multiagent.mpe import Spread
from rl_suite.throughput import steps_per_second

NUM_ENVS = (1, 64, 1024, 4096)
MPE2_MAX_ENVS = 1024  # mpe2 steps one Python environment at a time; beyond this a figure takes minutes


def machine() -> str:
    """The machine line of env_throughput.py, with the versions of the multi-agent peer."""
    import mpe2
    import pettingzoo
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


def write_throughput(rows: list[dict], command: str, directory: pathlib.Path = common.RESULTS) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    common.write_csv(directory / "multiagent_throughput.csv", rows)

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
METHODS = {
    "MAPPO": ("mappo", {}),
    "IPPO": ("mappo", {"centralized_critic": False}),
    "QMIX": ("qmix", {}),
    "VDN": ("qmix", {"mixer": "vdn"}),
    "MADDPG": ("maddpg", {}),
}
EVAL_EVERY = {"mappo": 10_000, "qmix": 5_000, "maddpg": 5_000}  # env steps; Spread (25-step episodes): 5 times less
EVAL_EPISODES = 100


def train_one(algo_name: str, env_id: str, seed: int, seconds: float, overrides: dict) -> dict:
    """One run with the shipped settings for ``seconds`` of wall-clock; its learning curve."""
    eval_every = EVAL_EVERY[algo_name] * (5 if env_id == "Spread-v0" else 1)
    summary, config, _ = common.timed_run(
        algo_name,
        env_id,
        seed,
        seconds,
        overrides,
        stop_at_win_rate=None,
        eval_every_steps=eval_every,
        eval_episodes=EVAL_EPISODES,
        log_every_steps=10**12,
    )
    return {"env_steps": summary["env_steps"], "num_envs": config.num_envs, "curve": summary["evaluations"]}


def first(curve: list[dict], key: str, target: float, field: str) -> float | None:
    return next((p[field] for p in curve if p.get(key) is not None and p[key] >= target), None)


def metric_of(task: str) -> tuple[str, str, str]:
    """What a task's table reports: (curve field, its name, its format)."""
    return ("mean_return", "return", "{:.2f}") if task == "Spread-v0" else ("win_rate", "win rate", "{:.0%}")


def reached_90(curve: list[dict]) -> tuple[int | None, float | None]:
    """Env steps and seconds at the first evaluation that won at least 90% of the battles."""
    return first(curve, "win_rate", 0.9, "env_steps"), first(curve, "win_rate", 0.9, "wall_time_s")


def plot_training(rows: list[dict], tasks, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(tasks), figsize=(4.2 * len(tasks), 7), squeeze=False)
    for column, task in enumerate(tasks):
        metric = metric_of(task)[0]
        for row in (r for r in rows if r["task"] == task):
            values = [p[metric] for p in row["curve"]]
            style = dict(marker=".", color=f"C{list(METHODS).index(row['method'])}")
            label = f"{row['method']} (seed {row['seed']})"
            axes[0, column].plot([p["env_steps"] / 1e3 for p in row["curve"]], values, label=label, **style)
            axes[1, column].plot([p["wall_time_s"] for p in row["curve"]], values, label=label, **style)
        axes[0, column].set_title(task)
        axes[0, column].set_xlabel("env steps (thousands)")
        axes[1, column].set_xlabel("wall-clock (s)")
        for axis in axes[:, column]:
            axis.set_ylabel("mean evaluation return" if metric == "mean_return" else "evaluation win rate")
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def training(args) -> list[dict]:
    """Every method on every task, one at a time, each in a fresh process; writes the curves and the table."""
    runs = len(args.tasks) * len(args.methods) * len(args.seeds)
    parts = common.grid((args.tasks, "task"), (args.methods, "method"), (args.seeds, "seed"))
    estimate = common.wall_clock_estimate(
        runs, args.minutes, f"{parts}, one at a time", "start-up and final evaluations"
    )
    print(estimate, flush=True)
    rows: list[dict] = []
    seconds = args.minutes * 60
    finished = common.FinishedRuns(args, "multiagent")
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            for method in args.methods:
                algo, overrides = METHODS[method]
                for seed in args.seeds:
                    job = dict(algo=algo, task=task, seed=seed, seconds=seconds, overrides=overrides)
                    job["threads"] = args.threads
                    result = None if args.quick else finished.get(job)
                    if result is None:
                        out = pathlib.Path(scratch) / "run.json"
                        worker = [sys.executable, __file__, "--threads", str(args.threads), "--worker"]
                        subprocess.run([*worker, json.dumps({**job, "out": str(out)})], check=True)  # its own process
                        result = json.loads(out.read_text())
                        if not args.quick:
                            result = finished.put(job, result)
                    row = {**result, "task": task, "method": method, "seed": seed}
                    rows.append(row)
                    last = row["curve"][-1]
                    print(
                        f"{task} {method} seed {seed}: {row['env_steps']:,} env steps, last evaluation {last}",
                        flush=True,
                    )
    if not args.quick:
        write_training(rows, args, args.results_dir)
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


def references(tasks, seed: int, methods=tuple(METHODS)) -> list[str]:
    """What play that learned nothing gets: one line per task, and one more where a method's shipped settings
    choose continuous actions there (MADDPG's Spread: uniform forces, not uniform moves)."""
    lines = []
    for task in tasks:
        random_play = common.random_policy_evaluation(task, EVAL_EPISODES, seed)
        line = f"- {task}: random play, return {random_play['mean_return']:.2f}"
        if "win_rate" in random_play:
            rates = scripted_win_rates(task)
            line += (
                f", win rate {random_play['win_rate']:.0%}; over 1000 battles: random {rates['random']:.1%}, "
                f"focus fire {rates['focus fire']:.1%}"
            )
        lines.append(line)
        continuous = [
            method
            for method in methods
            if (common.shipped_settings(METHODS[method][0], task).get("env_kwargs") or {}).get("continuous_actions")
        ]
        if continuous:
            random_forces = common.random_policy_evaluation(task, EVAL_EPISODES, seed, continuous_actions=True)
            lines.append(
                f"- {task} with continuous actions ({', '.join(continuous)}): random play, return "
                f"{random_forces['mean_return']:.2f}"
            )
    return lines


def write_training(rows: list[dict], args, directory: pathlib.Path = common.RESULTS) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "multiagent_training.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["task", "method", "seed", "env_steps", "wall_time_s", "mean_return", "win_rate"])
        for row in rows:
            for p in row["curve"]:
                writer.writerow([row["task"], row["method"], row["seed"], p["env_steps"], round(p["wall_time_s"], 1),
                                 round(p["mean_return"], 3), p.get("win_rate", "")])  # fmt: skip
    plot_training(rows, args.tasks, directory / "multiagent_training.png")
    command = "python benchmarks/multiagent.py " + " ".join(sys.argv[1:])
    lines = [
        f"# {', '.join(args.methods)} on the batched multi-agent tasks, equal wall-clock per run",
        "",
        f"Machine: {machine()}.",
        f"Run: `{command}` on {datetime.date.today()}: {args.minutes:g} minutes of wall-clock per run (evaluations "
        f"included), {common.count(torch.get_num_threads(), 'torch thread')} per run, shipped settings, one run at a "
        f"time. Evaluations: {EVAL_EPISODES} episodes of the greedy policies; final: the last evaluation; peak: the "
        "best evaluation during training.",
        "",
        common.seeds_line(args.seeds),
        "",
        f"For reference, uniformly random available actions on the same evaluation ({EVAL_EPISODES} episodes, the "
        f"evaluation seed of seed {args.seeds[0]}), and on the skirmishes the win rates over 1000 battles of random "
        "play and of a scripted focus-fire policy (every living ally attacks the weakest enemy in range, else walks "
        "toward the nearest):",
        "",
        *references(args.tasks, args.seeds[0], args.methods),
        "",
        "| task | method | env steps (mean) | final (mean ± std) | best (seed k) | peak (mean ± std) "
        "| 90% wins reached |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for task in args.tasks:
        field, name, fmt = metric_of(task)
        for method in args.methods:
            runs = [r for r in rows if (r["task"], r["method"]) == (task, method)]
            final = common.over_seeds({r["seed"]: r["curve"][-1][field] for r in runs})
            peak = common.over_seeds({r["seed"]: max(p[field] for p in r["curve"]) for r in runs})
            steps = sum(r["env_steps"] for r in runs) // len(runs)
            reached = "-"
            if field == "win_rate":
                hits = [hit for hit in (reached_90(r["curve"]) for r in runs) if hit[0] is not None]
                reached = f"on {len(hits)} of {len(runs)} seeds"
                if hits:
                    mean_steps, mean_wall = (sum(h[i] for h in hits) / len(hits) for i in (0, 1))
                    reached += f", after {mean_steps:,.0f} env steps, {mean_wall:.0f} s (mean of those)"
            lines.append(
                f"| {task} | {method} | {steps:,} | {name} {common.mean_std(final, fmt)} | "
                f"{common.best_of(final, fmt)} | {common.mean_std(peak, fmt)} | {reached} |"
            )
    lines += [
        "",
        "## Every run",
        "",
        "| task | method | seed | env steps | final | peak | env steps to 90% wins | seconds to 90% wins |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        field, name, fmt = metric_of(row["task"])
        curve = row["curve"]
        final, peak = fmt.format(curve[-1][field]), fmt.format(max(p[field] for p in curve))
        steps = wall = "-"
        if field == "win_rate":
            reached_steps, reached_wall = reached_90(curve)
            steps = "not reached" if reached_steps is None else f"{reached_steps:,}"
            wall = "not reached" if reached_wall is None else f"{reached_wall:.0f}"
        lines.append(
            f"| {row['task']} | {row['method']} | {row['seed']} | {row['env_steps']:,} | {name} {final} | {peak} | "
            f"{steps} | {wall} |"
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
    common.add_seed_arguments(parser)
    common.add_resume_arguments(parser)
    parser.add_argument("--quick", action="store_true", help="tiny durations, 2 seeds, a smoke test; writes no results")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: one training run, in this process
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        job = json.loads(args.worker)
        result = train_one(job["algo"], job["task"], job["seed"], job["seconds"], job["overrides"])
        pathlib.Path(job["out"]).write_text(json.dumps(result))
        return
    common.check_seed_arguments(parser, args)
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
            write_throughput(rows, command, args.results_dir)
    if args.part in ("training", "all"):
        if args.quick:
            args.minutes, args.tasks, args.seeds = 0.1, ["Spread-v0", "Skirmish-3m-v0"], args.seeds[:2]
        rows = training(args)
        if args.quick:
            with tempfile.TemporaryDirectory() as folder:
                write_training(rows, args, pathlib.Path(folder))
                print((pathlib.Path(folder) / "multiagent_training.md").read_text())


if __name__ == "__main__":
    main()
