"""FlashSAC, SAC (plain, with DSAC-T's critics, with annealed Q-learning), PQL and PPO at equal wall-clock on this
CPU: the benchmark that decides whether the off-policy side catches up.

Each run trains one training (``--trainings``) with its shipped settings for the task (``agents/hyperparams/``; a
training whose algorithm has no section for the task is refused, as it would train with the agent's bare defaults),
plus the option that names it, for the task's budget (``TASK_MINUTES``: 15 minutes on HalfCheetah-v5, Ant-v5 and
Humanoid-v5, 60 on QuadrupedVelocity-Flat-v0; ``--minutes`` overrides), evaluations included. Runs go ``--jobs`` at
a time (default 2), each in its own process pinned to its own core with one torch thread, as the MuJoCo suite against
stable-baselines3 runs (so PQL's actor and learners share their one core), for every seed (``--seeds``, default 0 1
2). The script prints its estimate first: the full suite is 6 trainings x 3 seeds x (3 x 15 + 60) minutes, about 31
core-hours, so it is meant to be run in parts, with ``--runs-dir benchmarks/results/finished`` (committed) keeping
what each part finished.

The score is the evaluation return on the MuJoCo tasks (10 deterministic episodes) and the RMS planar tracking error
on the quadruped (32 episodes; lower is better). The goals, from the issue:

- FlashSAC reaches PPO's final score sooner than PPO does, on Humanoid-v5 and on the quadruped: on each seed, the
  first evaluation at least as good as that seed's final PPO evaluation comes earlier in FlashSAC's run than in PPO's;
- FlashSAC's final score beats SAC's (mean over seeds) on all three MuJoCo tasks;
- DSAC and annealing each improve SAC's final score on at least two of the three MuJoCo tasks, or are reported as not
  helping here.

Annealed Q-learning anneals its expectile over ``ANNEAL_STEPS`` env steps, about what SAC collects in the budget here:
a time budget has no step budget for the schedule to follow.

    python benchmarks/offpolicy.py [--tasks HalfCheetah-v5 ...] [--trainings flashsac sac ...] [--seeds 0 1 2]
        [--minutes M] [--jobs 2] [--runs-dir DIR] [--results-dir benchmarks/results]

Writes into ``--results-dir``: ``offpolicy.md`` (per task and training: env steps, final and best score as mean ± std
over seeds with the best seed; the goals' verdicts; a uniformly random policy's score, and on the quadruped random and
standing play's over the seeds), ``offpolicy.csv`` (one row per run), ``offpolicy_curves.csv`` (every evaluation) and
``offpolicy_<task>.png`` (score against wall-clock), with the machine they ran on.
"""

from __future__ import annotations

import csv
import datetime
import pathlib

import common
import numpy as np

TASK_MINUTES = {"HalfCheetah-v5": 15.0, "Ant-v5": 15.0, "Humanoid-v5": 15.0, "QuadrupedVelocity-Flat-v0": 60.0}
MUJOCO_TASKS = ("HalfCheetah-v5", "Ant-v5", "Humanoid-v5")
# SAC collects 80-90k env steps in 15 minutes on HalfCheetah-v5 here (benchmarks/results/mujoco_suite.csv); the
# quadruped's is a guess to be replaced by a measurement.
ANNEAL_STEPS = {"HalfCheetah-v5": 80_000, "Ant-v5": 80_000, "Humanoid-v5": 60_000, "QuadrupedVelocity-Flat-v0": 300_000}
TRAININGS = {  # label: (algorithm, the option that makes it this training)
    "FlashSAC": ("flashsac", {}),
    "SAC": ("sac", {}),
    "SAC + DSAC": ("sac", {"critic": "dsac"}),
    "SAC + annealed Q": ("sac", {"expectile": 0.9}),
    "PQL": ("pql", {}),
    "PPO": ("ppo", {}),
}
EVAL_EVERY = {"ppo": 100_000, "sac": 10_000, "flashsac": 10_000, "pql": 20_000}  # env steps, on the MuJoCo tasks
LEGGED_EVAL_EVERY = 1_000_000
EVAL_EPISODES = {"mujoco": 10, "legged": 32}


def legged(task: str) -> bool:
    return task not in MUJOCO_TASKS


def score_of(task: str) -> tuple[str, bool]:
    """The evaluation field each task is scored by, and whether higher is better."""
    return ("tracking_error_lin", False) if legged(task) else ("mean_return", True)


def overrides_for(label: str, task: str) -> dict:
    overrides = dict(TRAININGS[label][1])
    if "expectile" in overrides:
        overrides["expectile_anneal_steps"] = ANNEAL_STEPS[task]
    return overrides


# -- one run, in its own process ---------------------------------------------------------------------------------


def run(job: dict) -> dict:
    algo, task = job["algo"], job["task"]
    kind = "legged" if legged(task) else "mujoco"
    summary, config, _ = common.timed_run(
        algo,
        task,
        job["seed"],
        job["minutes"] * 60,
        job["overrides"],
        eval_every_steps=LEGGED_EVAL_EVERY if kind == "legged" else EVAL_EVERY[algo],
        eval_episodes=EVAL_EPISODES[kind],
        log_every_steps=100_000,
    )
    metric, _ = score_of(task)
    curve = [
        {"env_steps": e["env_steps"], "wall_time_s": e["wall_time_s"], "score": e[metric]}
        for e in summary["evaluations"]
    ]
    return {"env_steps": summary["env_steps"], "num_envs": config.num_envs, "curve": curve}


def run_all(args) -> list[dict]:
    """Every (task, training, seed), ``--jobs`` at a time, each on its own core; finished runs are kept
    (``common.FinishedRuns``) and not run again."""
    jobs = [
        dict(
            task=task,
            label=label,
            algo=TRAININGS[label][0],
            seed=seed,
            minutes=args.minutes or TASK_MINUTES[task],
            overrides=overrides_for(label, task),
            settings=common.shipped_settings(TRAININGS[label][0], task),
        )
        for task in args.tasks
        for label in args.trainings
        for seed in args.seeds
    ]

    def describe(result: dict) -> str:
        return (
            f"{result['task']} {result['label']} seed {result['seed']}: final {result['curve'][-1]['score']:.3f}, "
            f"{result['env_steps']:,} steps"
        )

    rows = []
    for job, result in zip(jobs, common.run_pinned(common.FinishedRuns(args, "offpolicy"), jobs, __file__, args.jobs,
                                                   describe), strict=True):  # fmt: skip
        row = {**result, "task": job["task"], "label": job["label"], "seed": job["seed"]}
        row["final"] = row["curve"][-1]["score"]
        row["best"] = best_score(job["task"], [p["score"] for p in row["curve"]])
        rows.append(row)
    return rows


# -- the goals -------------------------------------------------------------------------------------------------


def best_score(task: str, scores: list[float]) -> float:
    return max(scores) if score_of(task)[1] else min(scores)


def at_least_as_good(task: str, score: float, target: float) -> bool:
    return score >= target if score_of(task)[1] else score <= target


def first_reach(task: str, curve: list[dict], target: float) -> float | None:
    """The wall-clock of the first evaluation at least as good as ``target``, or ``None``."""
    return next((p["wall_time_s"] for p in curve if at_least_as_good(task, p["score"], target)), None)


def sooner_than_ppo(task: str, flash: dict, ppo: dict) -> tuple[bool, str]:
    """One seed: whether FlashSAC reached PPO's final score earlier in its run than PPO did in its own."""
    target = ppo["final"]
    ppo_time, flash_time = first_reach(task, ppo["curve"], target), first_reach(task, flash["curve"], target)
    met = flash_time is not None and flash_time < ppo_time
    reached = f"after {flash_time:.0f} s" if flash_time is not None else "never"
    value = f"{target:,.0f}" if score_of(task)[1] else f"{target:.3f} m/s"
    return met, f"PPO's final {value} first reached by PPO after {ppo_time:.0f} s, by FlashSAC {reached}"


def mean_final(rows: list[dict], task: str, label: str) -> float | None:
    finals = [r["final"] for r in rows if r["task"] == task and r["label"] == label]
    return float(np.mean(finals)) if finals else None


def goals(rows: list[dict], args) -> list[str]:
    lines = []
    for task in ("Humanoid-v5", "QuadrupedVelocity-Flat-v0"):
        pairs = [
            (next((r for r in rows if r["task"] == task and r["label"] == "FlashSAC" and r["seed"] == s), None),
             next((r for r in rows if r["task"] == task and r["label"] == "PPO" and r["seed"] == s), None))
            for s in args.seeds
        ]  # fmt: skip
        if not all(flash and ppo for flash, ppo in pairs):
            lines.append(f"- FlashSAC reaches PPO's final score sooner on {task}: not run.")
            continue
        verdicts = [sooner_than_ppo(task, flash, ppo) for flash, ppo in pairs]
        met = sum(v[0] for v in verdicts)
        details = "; ".join(f"seed {s}: {how}" for s, (_, how) in zip(args.seeds, verdicts, strict=True))
        lines.append(
            f"- FlashSAC reaches PPO's final score sooner on {task}: {common.verdict(met == len(pairs))} (on {met} of "
            f"{len(pairs)} seeds; {details})."
        )
    comparisons = [("FlashSAC", "beats SAC on all three MuJoCo tasks", 3)]
    comparisons += [
        (label, "improves SAC on at least two of the three", 2) for label in ("SAC + DSAC", "SAC + annealed Q")
    ]
    for label, goal, needed in comparisons:
        better = []
        for task in MUJOCO_TASKS:
            ours, sac = mean_final(rows, task, label), mean_final(rows, task, "SAC")
            if ours is not None and sac is not None:
                better.append((task, ours > sac, ours, sac))
        wins = sum(b[1] for b in better)
        each = ", ".join(f"{t} {o:,.0f} vs {s:,.0f}" for t, _, o, s in better)
        if len(better) < len(MUJOCO_TASKS):
            # A suite run in parts: say whether the tasks run so far already decide the goal either way.
            still_possible = wins + len(MUJOCO_TASKS) - len(better) >= needed
            state = "already met" if wins >= needed else "open" if still_possible else "already missed"
            ran = f"{wins} of the {len(better)} tasks run: {each}" if better else "no task run"
            lines.append(f"- {label} {goal}: not run on every task; {state} ({ran}).")
            continue
        verdict = common.verdict(wins >= needed)
        if label != "FlashSAC" and wins < needed:
            verdict += ", not helping here"
        lines.append(f"- {label} {goal}: {verdict} ({wins} of 3: {each}).")
    return lines


# -- the report ----------------------------------------------------------------------------------------------------


def write_results(rows: list[dict], randoms: dict[str, float], fixed_plays: dict[str, dict], args) -> None:
    """``randoms``: the uniformly random policy's return per MuJoCo task (seed 0's); ``fixed_plays``: per legged task,
    random and standing play's errors per seed (``fixed_play_scores``)."""
    folder = args.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "offpolicy.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "training", "seed", "num_envs", "env_steps", "final", "best", "commit"])
        for r in rows:
            writer.writerow([r["task"], r["label"], r["seed"], r["num_envs"], r["env_steps"], r["final"], r["best"],
                             r.get("commit", "")])  # fmt: skip
    with open(folder / "offpolicy_curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "training", "seed", "env_steps", "wall_time_s", "score"])
        for r in rows:
            for p in r["curve"]:
                writer.writerow(
                    [r["task"], r["label"], r["seed"], p["env_steps"], round(p["wall_time_s"], 1), p["score"]]
                )
    lines = [
        "# FlashSAC, SAC (+DSAC, +annealed Q), PQL and PPO at equal wall-clock",
        "",
        f"Machine: {common.cpu_name()}. Run: `python benchmarks/offpolicy.py` on {datetime.date.today()}, each run on "
        "its own core with one torch thread; shipped settings (agents/hyperparams/*.yaml) plus each training's option. "
        + common.commits_line(rows),
        "",
        common.seeds_line(list(args.seeds)),
        "",
        "Score: the mean evaluation return (MuJoCo, higher is better) or the RMS planar tracking error in m/s (the "
        "quadruped, lower is better). Best: the best evaluation during training.",
        "",
        "| task | training | envs | env steps (mean) | final (mean ± std) | best seed | best evaluation (mean ± std) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for task in args.tasks:
        higher = score_of(task)[1]
        fmt = "{:,.0f}" if higher else "{:.3f}"
        for label in args.trainings:
            runs = [r for r in rows if r["task"] == task and r["label"] == label]
            stats = common.over_seeds if higher else common.lower_is_better
            final = stats({r["seed"]: r["final"] for r in runs})
            best = stats({r["seed"]: r["best"] for r in runs})
            steps = int(np.mean([r["env_steps"] for r in runs]))
            lines.append(
                f"| {task} | {label} | {runs[0]['num_envs']} | {steps:,} | {common.mean_std(final, fmt)} | "
                f"{common.best_of(final, fmt)} | {common.mean_std(best, fmt)} |"
            )
        if task in randoms:
            lines.append(f"| {task} | uniformly random | | | {fmt.format(randoms[task])} | | |")
        for kind, per_seed in fixed_plays.get(task, {}).items():
            scores = common.lower_is_better(per_seed)
            mean, best = common.mean_std(scores, fmt), common.best_of(scores, fmt)
            lines.append(f"| {task} | {common.FIXED_PLAYS[kind]} | | | {mean} | {best} | |")
        plot(rows, task, folder / f"offpolicy_{task.split('-')[0]}.png")
    lines += ["", "Goals:", "", *goals(rows, args)]
    common.write_report(folder / "offpolicy.md", lines)


def plot(rows: list[dict], task: str, path: pathlib.Path) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    colours = {}
    for r in rows:
        if r["task"] == task:
            colour = colours.setdefault(r["label"], f"C{len(colours)}")
            label = r["label"] if r["seed"] == min(x["seed"] for x in rows if x["label"] == r["label"]) else None
            axis.plot([p["wall_time_s"] / 60 for p in r["curve"]], [p["score"] for p in r["curve"]], ".-",
                      color=colour, label=label, alpha=0.8)  # fmt: skip
    metric, higher = score_of(task)
    axis.set(xlabel="wall-clock (minutes)", ylabel=metric.replace("_", " "), title=f"{task}, equal wall-clock")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def random_score(task: str, seed: int) -> float:
    """A uniformly random policy's return on a MuJoCo task."""
    return common.random_policy_evaluation(task, EVAL_EPISODES["mujoco"], seed)["mean_return"]


def fixed_play_scores(task: str, kind: str, seeds: list[int]) -> dict[int, float]:
    """A legged task's tracking error for ``common.fixed_policy`` play on each seed's evaluation episodes, on PPO's task
    keywords (the benchmark's reward for every training). ``kind`` "standing" (zero actions) is the level a policy that
    learned nothing but to stand reaches; "random" plays N(0, 1) actions, as the actions are unbounded. Both differ
    between seeds (standing 0.565-0.605 m/s on the quadruped's seeds 0-2), so they are given over the runs' seeds."""
    env_kwargs = common.shipped_settings("ppo", task).get("env_kwargs") or {}
    episodes = EVAL_EPISODES["legged"]
    return {
        seed: common.fixed_policy_evaluation(task, kind, seed, episodes, env_kwargs)["tracking_error_lin"]
        for seed in seeds
    }


def unshipped(tasks: list[str], trainings: list[str]) -> list[str]:
    """The (training, task) pairs whose algorithm ships no settings section for the task: run anyway, they would
    train with the agent's bare defaults (on the quadruped, also another reward than PPO's), not a measured setting."""
    from rl_suite.registry import load_algorithm
    from rl_suite.settings import tuned_table

    sections = {algo: tuned_table(load_algorithm(algo)) for algo, _ in TRAININGS.values()}
    return [
        f"{label} on {task} (agents/hyperparams/{TRAININGS[label][0]}.yaml has no {task} section)"
        for task in tasks
        for label in trainings
        if task not in sections[TRAININGS[label][0]]
    ]


def main() -> None:
    parser = common.pool_parser(__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(TASK_MINUTES), choices=list(TASK_MINUTES))
    parser.add_argument("--trainings", nargs="+", default=list(TRAININGS), choices=list(TRAININGS), metavar="TRAINING")
    parser.add_argument("--minutes", type=float, default=None, help="every run's budget (default: the task's)")
    args = common.parse_pool_arguments(parser, run)
    if args is None:  # a worker process, its job done
        return
    if missing := unshipped(args.tasks, args.trainings):
        parser.error("no shipped settings for " + "; ".join(missing))
    minutes = sum(args.minutes or TASK_MINUTES[t] for t in args.tasks) * len(args.trainings) * len(args.seeds)
    parts = common.grid((args.tasks, "task"), (args.trainings, "training"), (args.seeds, "seed"))
    print(
        f"Estimated wall-clock: {parts}, {args.jobs} at a time: {common.duration(minutes / args.jobs)}, less the runs "
        "kept.",
        flush=True,
    )
    randoms = {task: random_score(task, args.seeds[0]) for task in args.tasks if not legged(task)}
    fixed_plays = {
        task: {kind: fixed_play_scores(task, kind, list(args.seeds)) for kind in common.FIXED_PLAYS}
        for task in args.tasks
        if legged(task)
    }
    write_results(run_all(args), randoms, fixed_plays, args)


if __name__ == "__main__":
    main()
