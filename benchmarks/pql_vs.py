"""PQL against SAC and PPO on batched MuJoCo tasks, under the same wall-clock budget on the same machine.

Each run trains one algorithm with its shipped settings (``agents/hyperparams/<algo>.yaml``) for ``--minutes`` of
wall-clock, evaluations included, with the whole machine to itself: runs go one after another, each in its own
process, for every seed (``--seeds``, default 0 1 2). PQL runs its actor, V-learner and P-learner concurrently
(threads); ``--pql-sequential`` adds a run of the same PQL with the three in turn, which shows what the concurrency
buys on this machine. A full run takes tasks x algorithms x seeds x ``--minutes`` (printed first): 2 x 4 x 3 x 4 min
= 96 min for the command below with ``--minutes 4 --pql-sequential``.

    python benchmarks/pql_vs.py [--tasks HalfCheetah-v5 Ant-v5] [--minutes 5] [--seeds 0 1 2] [--pql-sequential]
        [--results-dir benchmarks/results]

Writes into ``--results-dir``: ``pql_vs.md`` (per algorithm, the final return as mean ± std over seeds and the best
seed, and the peak return during training; the goal's verdict per seed and per row: whether PQL reached the best
return of SAC and PPO sooner than they did; PQL's achieved update ratios and worker overlap; a uniformly random
policy's return on the same evaluation; every run), ``pql_vs_curves.csv`` (every evaluation: env steps, wall-clock,
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

import common

EVAL_EVERY = {"ppo": 50_000, "sac": 10_000, "pql": 20_000}  # env steps
EVAL_EPISODES = 10


def run(algo_name: str, env_id: str, seed: int, seconds: float, overrides: dict) -> dict:
    summary, config, agent = common.timed_run(
        algo_name,
        env_id,
        seed,
        seconds,
        overrides,
        eval_every_steps=EVAL_EVERY[algo_name],
        eval_episodes=EVAL_EPISODES,
        log_every_steps=50_000,
    )
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
    colours = {}
    for row in rows:
        if row["task"] == task:
            colour = colours.setdefault(row["label"], f"C{len(colours)}")
            wall = [p["wall_time_s"] / 60 for p in row["curve"]]
            label = f"{row['label']} (seed {row['seed']})"
            axis.plot(wall, [p["mean_return"] for p in row["curve"]], marker=".", color=colour, label=label)
    axis.set_xlabel("wall-clock (minutes)")
    axis.set_ylabel("mean evaluation return")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(f"{task}: PQL vs SAC vs PPO, equal wall-clock, one run at a time")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def first_reach(curve: list[dict], target: float) -> float | None:
    return next((p["wall_time_s"] for p in curve if p["mean_return"] >= target), None)


def run_all(args, variants) -> list[dict]:
    """Every (task, variant, seed), one at a time. Finished runs are kept (``common.FinishedRuns``): started again
    with the same arguments, the suite runs only the ones it lacks."""
    finished = common.FinishedRuns(args, f"pql_vs{args.suffix}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:
            for label, algo, overrides in variants:
                for seed in args.seeds:
                    job = dict(
                        algo=algo, task=task, seed=seed, seconds=args.minutes * 60, overrides=overrides, label=label
                    )
                    started = time.perf_counter()
                    result = finished.get(job)
                    how = "kept from an earlier invocation"
                    if result is None:
                        out = pathlib.Path(scratch) / "run.json"
                        worker = [sys.executable, __file__, "--worker", json.dumps({**job, "out": str(out)})]
                        subprocess.run(worker, check=True)
                        result = finished.put(job, json.loads(out.read_text()))
                        how = f"{time.perf_counter() - started:.0f} s"
                    row = {**result, "task": task, "label": label, "algo": algo, "seed": seed}
                    row["final"] = row["curve"][-1]["mean_return"]
                    row["peak"] = max(p["mean_return"] for p in row["curve"])
                    rows.append(row)
                    print(
                        f"{task} {label} seed {seed}: final return {row['final']:.0f} (peak {row['peak']:.0f}), "
                        f"{row['env_steps']:,} env steps, {how}",
                        flush=True,
                    )
    return rows


def goal_on_seed(pql: dict, peers: list[dict], minutes: float) -> tuple[bool, str]:
    """Whether one PQL run reached the best peak return of SAC and PPO (same task and seed) before they did."""
    peer = max(peers, key=lambda r: r["peak"])
    target = peer["peak"]
    peer_time, reached = first_reach(peer["curve"], target), first_reach(pql["curve"], target)
    met = reached is not None and reached < peer_time
    how = (
        f"reached it after {reached:.0f} s against {peer['label']}'s {peer_time:.0f} s "
        f"({reached / peer_time:.2f}x the time)"
        if reached is not None
        else f"did not reach it in {minutes:g} minutes (peak {pql['peak']:.0f})"
    )
    return met, f"the best of SAC and PPO is {target:.0f} ({peer['label']}); PQL {how}: {common.verdict(met)}"


def write_results(rows: list[dict], args, random_returns: dict[str, float]) -> None:
    from env_throughput import machine

    directory, suffix = args.results_dir, args.suffix
    directory.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/pql_vs.py " + " ".join(sys.argv[1:])
    with open(directory / f"pql_vs_curves{suffix}.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["task", "variant", "seed", "env_steps", "wall_time_s", "mean_return"])
        for row in rows:
            for p in row["curve"]:
                writer.writerow([row["task"], row["label"], row["seed"], p["env_steps"], round(p["wall_time_s"], 1),
                                 round(p["mean_return"], 1)])  # fmt: skip
    lines = [
        "# PQL vs SAC vs PPO at equal wall-clock",
        "",
        f"{datetime.date.today()}, `{command}`",
        "",
        f"Machine: {machine()}. One run at a time, each with the whole machine; shipped settings",
        f"(agents/hyperparams/*.yaml); budget {args.minutes:g} minutes of wall-clock per run, evaluations included",
        f"({EVAL_EPISODES} deterministic episodes each). Final return: the last evaluation; peak: the highest",
        f"evaluation during training. Curves: pql_vs_curves{suffix}.csv, pql_vs_<task>{suffix}.png.",
        common.commits_line(rows),
        "",
        common.seeds_line(args.seeds),
        "",
        "| task | algorithm | envs | env steps (mean) | final return (mean ± std) | best (seed k) "
        "| peak return (mean ± std) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    goals, notes = [], []
    for task in args.tasks:
        task_rows = [r for r in rows if r["task"] == task]
        for label in dict.fromkeys(r["label"] for r in task_rows):
            runs = [r for r in task_rows if r["label"] == label]
            final = common.over_seeds({r["seed"]: r["final"] for r in runs})
            peak = common.over_seeds({r["seed"]: r["peak"] for r in runs})
            steps = sum(r["env_steps"] for r in runs) // len(runs)
            lines.append(
                f"| {task} | {label} | {runs[0]['num_envs']} | {steps:,} | {common.mean_std(final)} | "
                f"{common.best_of(final)} | {common.mean_std(peak)} |"
            )
        for label in dict.fromkeys(r["label"] for r in task_rows if r["algo"] == "pql"):
            met_on = 0
            for seed in args.seeds:
                same_seed = [r for r in task_rows if r["seed"] == seed]
                pql = next(r for r in same_seed if r["label"] == label)
                met, how = goal_on_seed(pql, [r for r in same_seed if r["algo"] != "pql"], args.minutes)
                met_on += met
                notes.append(f"- {task}, {label}, seed {seed}: {how}.")
                if pql["report"]:
                    notes.append(
                        f"  Achieved at the end: {', '.join(f'{k} {v:.2f}' for k, v in pql['report'].items())}."
                    )
            goals.append(
                f"- {task}, {label}: {common.verdict(met_on == len(args.seeds))} "
                f"(met on {met_on} of {len(args.seeds)} seeds)."
            )
        goals.append(
            f"- {task}: a uniformly random policy gets {random_returns[task]:,.0f} on the same {EVAL_EPISODES} "
            "evaluation episodes."
        )
        plot(rows, task, directory / f"pql_vs_{task.split('-')[0]}{suffix}.png")
    lines += [
        "",
        "Goal: PQL reaches the best (peak) return of SAC and PPO in less wall-clock time than they took, on every "
        "seed.",
        "",
        *goals,
        "",
        "Per seed:",
        "",
        *notes,
        "",
        "## Every run",
        "",
        "| task | algorithm | seed | envs | env steps | final return | peak return | peak at (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        at = first_reach(r["curve"], r["peak"])
        lines.append(
            f"| {r['task']} | {r['label']} | {r['seed']} | {r['num_envs']} | {r['env_steps']:,} | {r['final']:.0f} | "
            f"{r['peak']:.0f} | {at:.0f} |"
        )
    common.write_report(directory / f"pql_vs{suffix}.md", lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5", "Ant-v5"])
    parser.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of each run")
    common.add_seed_arguments(parser)
    common.add_resume_arguments(parser)
    parser.add_argument("--pql-sequential", action="store_true", help="also run PQL with concurrent=False")
    parser.add_argument("--suffix", default="", help="appended to the result files' names (e.g. _smoke)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # JSON: one run, in this process
    args = parser.parse_args()
    if args.worker:
        job = json.loads(args.worker)
        result = run(job["algo"], job["task"], job["seed"], job["seconds"], job["overrides"])
        pathlib.Path(job["out"]).write_text(json.dumps(result))
        return
    common.check_seed_arguments(parser, args)

    variants = [("PQL", "pql", {}), ("SAC", "sac", {}), ("PPO", "ppo", {})]
    if args.pql_sequential:
        variants.insert(1, ("PQL, in turn", "pql", {"concurrent": False}))
    runs = len(args.tasks) * len(variants) * len(args.seeds)
    parts = common.grid((args.tasks, "task"), (variants, "algorithm"), (args.seeds, "seed")) + ", one at a time"
    print(common.wall_clock_estimate(runs, args.minutes, parts, "start-up and final evaluations"), flush=True)
    random_returns = {
        task: common.random_policy_evaluation(task, EVAL_EPISODES, args.seeds[0])["mean_return"] for task in args.tasks
    }
    write_results(run_all(args, variants), args, random_returns)


if __name__ == "__main__":
    main()
