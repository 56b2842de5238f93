"""PQL against SAC and PPO on batched MuJoCo tasks, under the same wall-clock budget on the same machine.

Each run trains one algorithm with its shipped settings (``agents/hyperparams/<algo>.yaml``) for ``--minutes`` of
wall-clock, evaluations included, with the whole machine to itself: runs go one after another, each in its own
process. PQL runs its actor, V-learner and P-learner concurrently (threads); ``--pql-sequential`` adds a run of
the same PQL with the three in turn, which shows what the concurrency buys on this machine.

    python benchmarks/pql_vs.py [--tasks HalfCheetah-v5 Ant-v5] [--minutes 5] [--seed 0] [--pql-sequential]

Writes ``benchmarks/results/pql_vs.md`` (best returns, the time PQL took to reach the best return of SAC and PPO,
its achieved update ratios and worker overlap), ``pql_vs_curves.csv`` (every evaluation: env steps, wall-clock,
mean return) and ``pql_vs_<task>.png`` (return against wall-clock), with the machine it ran on.
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
EVAL_EVERY = {"ppo": 50_000, "sac": 10_000, "pql": 20_000}  # env steps
EVAL_EPISODES = 10


def run(algo_name: str, env_id: str, seed: int, seconds: float, overrides: dict) -> dict:
    import rl_suite
    from rl_suite.checkpoint import seed_everything
    from rl_suite.cli import tuned_settings
    from rl_suite.config import split_overrides
    from rl_suite.registry import load_algorithm
    from rl_suite.runner import RunConfig, Runner

    algo = load_algorithm(algo_name)
    settings = {**tuned_settings(algo, env_id), **overrides}
    settings.update(
        total_steps=10**12,
        time_budget_s=seconds,
        eval_every_steps=EVAL_EVERY[algo_name],
        eval_episodes=EVAL_EPISODES,
        checkpoint_every_steps=10**12,
        log_every_steps=50_000,
        progress=False,
        seed=seed,
    )
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo.name, env_id=env_id, **run_values)
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed)
    agent = algo(env.observation_space, env.action_space, algo.Config(**agent_values))
    with tempfile.TemporaryDirectory() as run_dir:
        summary = Runner(agent, env, config, run_dir=run_dir).run()
    return {
        "env_steps": summary["env_steps"],
        "num_envs": config.num_envs,
        "curve": summary["evaluations"],
        "report": getattr(agent, "report", {}),
    }


def plot(rows: list[dict], task: str, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        if row["task"] == task:
            wall = [p["wall_time_s"] / 60 for p in row["curve"]]
            axis.plot(wall, [p["mean_return"] for p in row["curve"]], marker=".", label=row["label"])
    axis.set_xlabel("wall-clock (minutes)")
    axis.set_ylabel("mean evaluation return")
    axis.grid(alpha=0.3)
    axis.legend()
    axis.set_title(f"{task}: PQL vs SAC vs PPO, equal wall-clock, one run at a time")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def first_reach(curve: list[dict], target: float) -> float | None:
    return next((p["wall_time_s"] for p in curve if p["mean_return"] >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5", "Ant-v5"])
    parser.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of each run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pql-sequential", action="store_true", help="also run PQL with concurrent=False")
    parser.add_argument("--suffix", default="", help="appended to the result files' names (e.g. _smoke)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: one run, in this process
    args = parser.parse_args()
    if args.worker:
        job = json.loads(args.worker)
        result = run(job["algo"], job["task"], job["seed"], job["seconds"], job["overrides"])
        pathlib.Path(job["out"]).write_text(json.dumps(result))
        return

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from env_throughput import machine

    variants = [("PQL", "pql", {}), ("SAC", "sac", {}), ("PPO", "ppo", {})]
    if args.pql_sequential:
        variants.insert(1, ("PQL, in turn", "pql", {"concurrent": False}))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            for label, algo, overrides in variants:
                out = pathlib.Path(scratch) / "run.json"
                job = dict(algo=algo, task=task, seed=args.seed, seconds=args.minutes * 60, overrides=overrides)
                started = time.perf_counter()
                subprocess.run([sys.executable, __file__, "--worker", json.dumps({**job, "out": str(out)})], check=True)
                row = {**json.loads(out.read_text()), "task": task, "label": label, "algo": algo}
                row["best"] = max(p["mean_return"] for p in row["curve"])
                rows.append(row)
                print(f"{task} {label}: best return {row['best']:.0f}, {row['env_steps']:,} env steps, "
                      f"{time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip

    RESULTS.mkdir(exist_ok=True)
    suffix, command = args.suffix, "python benchmarks/pql_vs.py " + " ".join(sys.argv[1:])
    with open(RESULTS / f"pql_vs_curves{suffix}.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["task", "variant", "env_steps", "wall_time_s", "mean_return"])
        for row in rows:
            for p in row["curve"]:
                writer.writerow([row["task"], row["label"], p["env_steps"], round(p["wall_time_s"], 1),
                                 round(p["mean_return"], 1)])  # fmt: skip
    lines = [
        "# PQL vs SAC vs PPO at equal wall-clock",
        "",
        f"{datetime.date.today()}, `{command}`",
        "",
        f"Machine: {machine()}. One run at a time, each with the whole machine; shipped settings",
        f"(agents/hyperparams/*.yaml); budget {args.minutes:g} minutes of wall-clock per run, evaluations included",
        f"({EVAL_EPISODES} deterministic episodes each). Curves: pql_vs_curves{suffix}.csv, pql_vs_<task>{suffix}.png.",
        "",
        "| task | algorithm | envs | env steps | best return | at (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    notes = []
    for task in args.tasks:
        task_rows = [r for r in rows if r["task"] == task]
        for r in task_rows:
            at = first_reach(r["curve"], r["best"])
            lines.append(
                f"| {task} | {r['label']} | {r['num_envs']} | {r['env_steps']:,} | {r['best']:.0f} | {at:.0f} |"
            )
        peers = [r for r in task_rows if r["algo"] != "pql"]
        target = max(r["best"] for r in peers)
        peer = max(peers, key=lambda r: r["best"])
        for r in (r for r in task_rows if r["algo"] == "pql"):
            reached = first_reach(r["curve"], target)
            peer_time = first_reach(peer["curve"], target)
            verdict = (
                f"reached it after {reached:.0f} s against {peer['label']}'s {peer_time:.0f} s "
                f"(**{reached / peer_time:.2f}x** the time)"
                if reached is not None
                else f"did not reach it in {args.minutes:g} minutes (best {r['best']:.0f})"
            )
            notes.append(
                f"- {task}, {r['label']}: the best of SAC and PPO is {target:.0f} ({peer['label']}); PQL {verdict}."
            )
            report = r["report"]
            if report:
                ratios = ", ".join(f"{k} {v:.2f}" for k, v in report.items())
                notes.append(f"  Achieved at the end: {ratios}.")
        plot(rows, task, RESULTS / f"pql_vs_{task.split('-')[0]}{suffix}.png")
    lines += ["", "Goal: PQL reaches the best return of SAC and PPO in less wall-clock time.", "", *notes]
    (RESULTS / f"pql_vs{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
