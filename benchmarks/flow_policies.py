"""Gaussian PPO against the flow policies FPO and PolicyFlow, at equal env steps.

Each (task, algorithm, seed) trains with the shipped settings (``agents/hyperparams/<algo>.yaml``) for the task's step
budget, one run at a time, and reports the final deterministic evaluation return and the wall-clock. On MultiGoal-v0
it also samples 1000 episodes from each trained policy (stochastic actions, as the policy acts, with a fixed seed) and
applies the multimodality measure of ``rl_suite.envs.classic.multigoal.multimodality``: at least 90% of the episodes
reach a goal, and at least 3 goals each get at least 15% of those. A policy that learned nothing, actions N(0, 1)
clipped to [-1, 1], is measured the same way as the baseline row.

    python benchmarks/flow_policies.py [--tasks MultiGoal-v0 Pendulum-v1 HalfCheetah-v5] [--seeds 0 1 2]

Writes ``benchmarks/results/flow_policies.{md,csv}`` with the machine and the command of each task's rows. A run with
``--tasks`` replaces the rows of those tasks only and keeps the others as they were, with their own date and command.
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import add_seed_arguments, best_of, check_seed_arguments, mean_std, over_seeds, write_csv  # noqa: E402

BUDGETS = {"MultiGoal-v0": 200_000, "Pendulum-v1": 150_000, "HalfCheetah-v5": 100_000}  # env steps per run
ALGOS = ("ppo", "fpo", "policyflow")
RANDOM = "random (N(0,1) clipped)"  # MultiGoal's baseline: a policy that learned nothing
EPISODES = 1000  # sampled MultiGoal episodes per measure
FIELDS = [
    "task", "algo", "seed", "env_steps", "wall_time_s", "final_return", "success", "goal_shares", "goals_kept",
    "goal_entropy", "passes", "date", "command", "machine",
]  # fmt: skip


def measure(act, seed: int) -> dict:
    """The multimodality measure of ``act(obs) -> actions`` over ``EPISODES`` sampled MultiGoal episodes."""
    import torch

    from rl_suite.envs.classic.multigoal import goal_histogram, multimodality

    torch.manual_seed(seed)
    return multimodality(goal_histogram(act, EPISODES, seed=seed + 7))


def random_baseline(seed: int) -> dict:
    import torch

    def act(obs):
        return torch.randn(obs.shape[0], 2).clamp(-1.0, 1.0)

    return {"env_steps": 0, "wall_time_s": 0.0, "final_return": "", **measure(act, seed)}


def run(algo_name: str, env_id: str, seed: int, steps: int) -> dict:
    import rl_suite
    from rl_suite.config import split_overrides
    from rl_suite.registry import load_algorithm
    from rl_suite.rng import seed_everything
    from rl_suite.runner import RunConfig, Runner
    from rl_suite.settings import tuned_settings

    algo = load_algorithm(algo_name)
    settings = {**tuned_settings(algo, env_id), "stop_at_return": None}
    settings.update(total_steps=steps, progress=False, seed=seed, eval_every_steps=steps, eval_episodes=20)
    settings.update(checkpoint_every_steps=10**12, log_every_steps=10**12)
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo.name, env_id=env_id, **run_values)
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed)
    agent = algo(env.observation_space, env.action_space, algo.Config(**agent_values))
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        summary = Runner(agent, env, config, run_dir=run_dir).run()
    result = {
        "env_steps": summary["env_steps"],
        "wall_time_s": time.perf_counter() - started,
        "final_return": summary["final_eval"]["mean_return"],
    }
    if env_id == "MultiGoal-v0":
        result.update(measure(lambda obs: agent.act(obs)[0], seed))
    return result


def read_rows(path: pathlib.Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def number(value) -> float | None:
    return None if value in ("", None) else float(value)


def multigoal_section(rows: list[dict]) -> list[str]:
    first = rows[0]
    lines = [
        "## MultiGoal-v0: the multimodality measure",
        "",
        f"{first['date']}, `{first['command']}`. Machine: {first['machine']}.",
        "",
        f"{EPISODES} episodes of the stochastic policy per seed (sampling seeded). The measure passes when at least",
        "90% of the episodes reach a goal (success) and at least 3 goals each get at least 15% of the successful",
        "episodes (goal shares, in the order +x, -x, +y, -y). Final return: 20 deterministic episodes (flows integrate",
        f"from zero noise); the `{RANDOM}` row has no deterministic policy.",
        "",
        "| algorithm | seeds | final return | best (seed k) | success | goals with >= 15% (per seed) | seeds passing |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for algo in dict.fromkeys(r["algo"] for r in rows):
        runs = [r for r in rows if r["algo"] == algo]
        returns = {int(r["seed"]): number(r["final_return"]) for r in runs if number(r["final_return"]) is not None}
        success = over_seeds({int(r["seed"]): number(r["success"]) for r in runs})
        kept = ", ".join(r["goals_kept"] for r in runs)
        passing = sum(r["passes"] == "True" for r in runs)
        final, best = (
            (mean_std(over_seeds(returns), "{:,.1f}"), best_of(over_seeds(returns), "{:,.1f}"))
            if returns
            else ("—", "—")
        )
        cells = [algo, str(len(runs)), final, best, mean_std(success, "{:.3f}"), kept, f"{passing} of {len(runs)}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per seed:",
        "",
        "| algorithm | seed | env steps | final return | wall-clock (s) | success | goal shares | passes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        final = f"{float(r['final_return']):.1f}" if number(r["final_return"]) is not None else "—"
        cells = [r["algo"], r["seed"], f"{int(r['env_steps']):,}", final, f"{float(r['wall_time_s']):.0f}"]
        cells += [r["success"], r["goal_shares"], "pass" if r["passes"] == "True" else "fail"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def returns_section(task: str, rows: list[dict]) -> list[str]:
    first = rows[0]
    lines = [
        f"## {task}",
        "",
        f"{first['date']}, `{first['command']}`. Machine: {first['machine']}. Final return: 20 deterministic episodes.",
        "",
        "| algorithm | seeds | env steps | final return | best (seed k) | wall-clock (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for algo in dict.fromkeys(r["algo"] for r in rows):
        runs = [r for r in rows if r["algo"] == algo]
        final = over_seeds({int(r["seed"]): float(r["final_return"]) for r in runs})
        seconds = sum(float(r["wall_time_s"]) for r in runs) / len(runs)
        seeds = ", ".join(r["seed"] for r in runs)
        steps = f"{int(runs[0]['env_steps']):,}"
        cells = [algo, seeds, steps, mean_std(final, "{:,.1f}"), best_of(final, "{:,.1f}"), f"{seconds:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_markdown(path: pathlib.Path, rows: list[dict]) -> str:
    lines = [
        "# Gaussian PPO vs flow policies (FPO, PolicyFlow) at equal env steps",
        "",
        "One run at a time; shipped settings (agents/hyperparams/*.yaml). Each task's rows name the command and the",
        "date that produced them (a rerun of some tasks keeps the other tasks' rows).",
    ]
    for task in dict.fromkeys(r["task"] for r in rows):
        task_rows = [r for r in rows if r["task"] == task]
        section = multigoal_section(task_rows) if task == "MultiGoal-v0" else returns_section(task, task_rows)
        lines += ["", *section]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(BUDGETS))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--suffix", default="", help="appended to the result files' names (e.g. _smoke)")
    parser.add_argument("--steps", type=int, help="override every task's step budget")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    add_seed_arguments(parser)
    args = parser.parse_args()
    if args.worker:
        job = json.loads(args.worker)
        pathlib.Path(job["out"]).write_text(json.dumps(run(job["algo"], job["task"], job["seed"], job["steps"])))
        return
    check_seed_arguments(parser, args)
    from env_throughput import machine

    stamp = {
        "date": str(datetime.date.today()),
        "command": "python benchmarks/flow_policies.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
    }
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            if task == "MultiGoal-v0":
                rows += [{"task": task, "algo": RANDOM, "seed": s, **random_baseline(s), **stamp} for s in args.seeds]
            for algo in args.algos:
                for seed in args.seeds:
                    out = pathlib.Path(scratch) / "run.json"
                    steps = args.steps or BUDGETS.get(task, 200_000)
                    job = {"algo": algo, "task": task, "seed": seed, "steps": steps, "out": str(out)}
                    subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], check=True)
                    rows.append({"task": task, "algo": algo, "seed": seed, **json.loads(out.read_text()), **stamp})
                    print(json.dumps(rows[-1]), flush=True)

    args.results_dir.mkdir(exist_ok=True)
    csv_path = args.results_dir / f"flow_policies{args.suffix}.csv"
    kept = [r for r in read_rows(csv_path) if r["task"] not in args.tasks]
    write_csv(csv_path, kept + rows, FIELDS)
    merged = read_rows(csv_path)  # every row as text, as the kept ones are
    order = {task: k for k, task in enumerate(dict.fromkeys([*BUDGETS, *args.tasks]))}
    merged.sort(key=lambda r: order.get(r["task"], len(order)))
    print(write_markdown(args.results_dir / f"flow_policies{args.suffix}.md", merged))


if __name__ == "__main__":
    main()
