"""PPO learning to follow velocity commands on the quadruped (or, with ``--env HumanoidVelocity-Flat-v0``, the
humanoid), on this machine's CPU, against what standing and random play score on the same evaluation.

Each seed (``--seeds``, default 0 1 2) trains ``rl-suite train ppo QuadrupedVelocity-Flat-v0`` with its shipped
settings (``agents/hyperparams/ppo.yaml``) for ``--minutes`` of wall-clock (evaluations included), one run after
another with the whole machine. Every evaluation (32 episodes of 20 s, commands drawn from the training ranges)
reports the task's metrics: the RMS planar tracking error over commands of at most 1 m/s (m/s), the RMS yaw-rate
error and the fall rate.

The goal, from the quadruped's issue: RMS planar tracking error at most 0.25 m/s with at most 5% falls within 60
minutes, on the mean over seeds. The humanoid's issue sets none (it asks what this CPU reaches in an hour), so its
report holds the humanoid to the same line. Two policies that learned nothing, on the same evaluation: standing (zero
action: the default pose held by PD, which tracks a command no better than its own speed; the humanoid falls) and
random (actions N(0, 1), an untrained Gaussian policy's).

    python benchmarks/legged_training.py [--env ID] [--minutes 60] [--seeds 0 1 2] [--results-dir benchmarks/results]

Writes into ``--results-dir``: ``legged_training.md`` (final metrics as mean ± std over seeds, the best seed, the time
each seed first met the goal, the baselines, the goal's verdict), ``legged_training.csv`` (every evaluation of every
seed: wall-clock, env steps, metrics), ``legged_training.png`` (tracking error against wall-clock) and each seed's
final policy, exported with its robot entry, as ``legged_policies/quadruped_flat_seed<k>.onnx`` (what
``benchmarks/legged_sim2sim.py`` deploys); for the humanoid, ``humanoid_training.*`` and
``legged_policies/humanoid_flat_seed<k>.onnx``.
"""

from __future__ import annotations

import csv
import datetime
import math
import sys

import common
import numpy as np
import torch

TASKS = {  # env id: (the report's file stem, the exported policies' stem)
    "QuadrupedVelocity-Flat-v0": ("legged_training", "quadruped_flat"),
    "HumanoidVelocity-Flat-v0": ("humanoid_training", "humanoid_flat"),
}
EVAL_EPISODES = 32
GOAL_ERROR, GOAL_FALLS, GOAL_MINUTES = 0.25, 0.05, 60.0
METRICS = ("tracking_error_lin", "tracking_error_yaw", "fell")


def first_goal_minutes(evaluations: list[dict]) -> float | None:
    for row in evaluations:
        if row["tracking_error_lin"] <= GOAL_ERROR and row["fell"] <= GOAL_FALLS:
            return row["wall_time_s"] / 60
    return None


def machine() -> str:
    return f"{common.cpu_name()}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    args = common.legged_arguments(__doc__, tuple(TASKS))
    finished = common.FinishedRuns(args, "legged_training")
    runs, env_kwargs = {}, {}
    for seed in args.seeds:

        def finish(agent, config, seed=seed):
            export(args.env, agent, seed, args.results_dir, config.env_kwargs)
            return {}

        runs[seed] = summary = common.ppo_seed(finished, args, args.env, seed, EVAL_EPISODES, finish)
        env_kwargs = summary["env_kwargs"]
        final = summary["final_eval"]
        print(
            f"seed {seed}: {summary['env_steps']:,} env steps; tracking error {final['tracking_error_lin']:.3f} m/s, "
            f"yaw {final['tracking_error_yaw']:.3f} rad/s, falls {final['fell']:.0%}",
            flush=True,
        )
    baselines = {
        kind: common.fixed_policy_evaluation(args.env, kind, args.seeds[0], EVAL_EPISODES, env_kwargs)
        for kind in ("standing", "random")
    }
    write(runs, baselines, args)


def export(env_id: str, agent, seed: int, folder, env_kwargs: dict) -> None:
    """The seed's final policy as ONNX, with the robot entry (what ``rl-suite export`` writes from a run) of the
    task as it trained (``env_kwargs`` from its settings)."""
    import rl_suite
    from rl_suite.deploy.export import export_policy

    with rl_suite.make(env_id, **env_kwargs) as env:
        robot, dt = env.robot_metadata(), env.dt
    path = folder / "legged_policies" / f"{TASKS[env_id][1]}_seed{seed}.onnx"
    export_policy(agent, path, "onnx", env_id=env_id, dt=dt, robot=robot)


def write(runs: dict[int, dict], baselines: dict[str, dict], args) -> None:
    folder, stem = args.results_dir, TASKS[args.env][0]
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"seed": seed, "env_steps": row["env_steps"], "wall_time_s": row["wall_time_s"], **{m: row[m] for m in METRICS}}
        for seed, summary in runs.items()
        for row in summary["evaluations"]
    ]
    with open(folder / f"{stem}.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    finals = {m: common.lower_is_better({s: runs[s]["final_eval"][m] for s in runs}) for m in METRICS}
    fmt = "{:.3f}"
    met = finals["tracking_error_lin"].mean <= GOAL_ERROR and finals["fell"].mean <= GOAL_FALLS
    within = args.minutes <= GOAL_MINUTES
    reached = {seed: first_goal_minutes(summary["evaluations"]) for seed, summary in runs.items()}
    env_flag = "" if args.env == next(iter(TASKS)) else f" --env {args.env}"
    lines = [
        f"# PPO on {args.env}: velocity tracking on this CPU",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/legged_training.py{env_flag} --minutes {args.minutes:g}` on "
        f"{datetime.date.today()}, one run at a time with the whole machine; shipped settings "
        "(`agents/hyperparams/ppo.yaml`); evaluation: 32 episodes of 20 s, commands from the training ranges. "
        + common.commits_line(list(runs.values())),
        "",
        common.seeds_line(list(runs)),
        "",
        "| | tracking error (m/s) | yaw-rate error (rad/s) | falls | env steps |",
        "|---|---:|---:|---:|---:|",
        "| PPO, final (mean ± std) | "
        + " | ".join(common.mean_std(finals[m], fmt) for m in METRICS)
        + f" | {np.mean([r['env_steps'] for r in runs.values()]):,.0f} |",
        "| PPO, best (seed k) | " + " | ".join(common.best_of(finals[m], fmt) for m in METRICS) + " | |",
    ]
    for kind, result in baselines.items():
        lines.append(f"| {common.FIXED_PLAYS[kind]} | " + " | ".join(fmt.format(result[m]) for m in METRICS) + " | |")
    goal = "met" if met and within else "**missed**"
    times = ", ".join(
        f"seed {seed}: {'not reached' if minutes is None else f'{minutes:.0f} min'}"
        for seed, minutes in reached.items()
    )
    lines += [
        "",
        f"Goal (tracking error ≤ {GOAL_ERROR} m/s and falls ≤ {GOAL_FALLS:.0%} on the mean over seeds, within "
        f"{GOAL_MINUTES:.0f} minutes): {goal}. First evaluation meeting it: {times}.",
        "",
        f"![tracking error against wall-clock]({stem}.png)",
    ]
    common.write_report(folder / f"{stem}.md", lines)
    plt = common.pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for seed, summary in runs.items():
        evaluations = summary["evaluations"]
        axis.plot(
            [r["wall_time_s"] / 60 for r in evaluations],
            [r["tracking_error_lin"] for r in evaluations],
            label=f"seed {seed}",
        )
    axis.axhline(baselines["standing"]["tracking_error_lin"], color="grey", linestyle=":", label="standing")
    axis.axhline(GOAL_ERROR, color="black", linestyle="--", label="goal")
    axis.set(xlabel="wall-clock (min)", ylabel="RMS planar tracking error (m/s)", title=args.env)
    axis.set_ylim(0, max(1.0, baselines["standing"]["tracking_error_lin"] * 1.1))
    axis.legend()
    figure.tight_layout()
    figure.savefig(folder / f"{stem}.png", dpi=120)
    if not math.isfinite(finals["tracking_error_lin"].mean):
        print("note: a final tracking error is NaN (no evaluation step counted)", file=sys.stderr)


if __name__ == "__main__":
    main()
