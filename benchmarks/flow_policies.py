"""Gaussian PPO against the flow policies FPO and PolicyFlow, at equal env steps.

Each (task, algorithm) trains with the shipped settings (``agents/hyperparams/<algo>.yaml``) for the task's step
budget, one run at a time, and reports the final deterministic evaluation return and the wall-clock. On MultiGoal-v0
it also samples 1000 episodes from each trained policy (stochastic actions, as the policy acts) and reports where
they end: the fraction at each goal, how many goals got at least 10% of the episodes, and the entropy of the goal
histogram (log 4 = 1.39 when all four goals are equally likely).

    python benchmarks/flow_policies.py [--tasks MultiGoal-v0 Pendulum-v1 HalfCheetah-v5] [--seed 0]

Writes ``benchmarks/results/flow_policies.{md,csv}`` with the machine it ran on.
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

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
BUDGETS = {"MultiGoal-v0": 40_960, "Pendulum-v1": 150_000, "HalfCheetah-v5": 100_000}  # env steps per run
ALGOS = ("ppo", "fpo", "policyflow")


def run(algo_name: str, env_id: str, seed: int, steps: int) -> dict:
    import torch

    import rl_suite
    from rl_suite.checkpoint import seed_everything
    from rl_suite.cli import tuned_settings
    from rl_suite.config import split_overrides
    from rl_suite.envs.classic.multigoal import coverage, goal_histogram
    from rl_suite.registry import load_algorithm
    from rl_suite.runner import RunConfig, Runner

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
        torch.manual_seed(seed)
        result.update(coverage(goal_histogram(lambda obs: agent.act(obs)[0], 1000, seed=seed + 7)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(BUDGETS))
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--suffix", default="", help="appended to the result files' names (e.g. _smoke)")
    parser.add_argument("--steps", type=int, help="override every task's step budget")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        job = json.loads(args.worker)
        pathlib.Path(job["out"]).write_text(json.dumps(run(job["algo"], job["task"], job["seed"], job["steps"])))
        return

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from env_throughput import machine

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            for algo in args.algos:
                out = pathlib.Path(scratch) / "run.json"
                steps = args.steps or BUDGETS.get(task, 200_000)
                job = {"algo": algo, "task": task, "seed": args.seed, "steps": steps, "out": str(out)}
                subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], check=True)
                rows.append({"task": task, "algo": algo, **json.loads(out.read_text())})
                print(json.dumps(rows[-1]), flush=True)

    RESULTS.mkdir(exist_ok=True)
    command = "python benchmarks/flow_policies.py " + " ".join(sys.argv[1:])
    fields = ["task", "algo", "env_steps", "wall_time_s", "final_return", "goals_with_10_percent", "goal_entropy"]
    with open(RESULTS / f"flow_policies{args.suffix}.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=[*fields, "fractions"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "# Gaussian PPO vs flow policies (FPO, PolicyFlow) at equal env steps",
        "",
        f"{datetime.date.today()}, `{command}`",
        "",
        f"Machine: {machine()}. One run at a time; shipped settings (agents/hyperparams/*.yaml); final return: mean",
        "of 20 deterministic episodes (flows integrate from zero noise). MultiGoal coverage: 1000 episodes of the",
        "stochastic policy; fractions per goal (+x, -x, +y, -y, none).",
        "",
        "| task | algorithm | env steps | final return | wall-clock (s) | goals >= 10% | goal entropy | fractions |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        goals = r.get("goals_with_10_percent", "")
        entropy = f"{r['goal_entropy']:.2f}" if "goal_entropy" in r else ""
        cells = [r["task"], r["algo"], f"{r['env_steps']:,}", f"{r['final_return']:.1f}", f"{r['wall_time_s']:.0f}"]
        lines.append("| " + " | ".join([*cells, str(goals), entropy, str(r.get("fractions", ""))]) + " |")
    (RESULTS / f"flow_policies{args.suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
