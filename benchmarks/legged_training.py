"""PPO learning to follow velocity commands on the quadruped (or, with ``--env HumanoidVelocity-Flat-v0``, the
humanoid), on this machine's CPU, against what standing and random play score on the same evaluation.

Each seed (``--seeds``, default 0 1 2; the quadruped's goal is stated for 0-4) trains ``rl-suite train ppo
QuadrupedVelocity-Flat-v0`` with its shipped settings (``agents/hyperparams/ppo.yaml``) for ``--minutes`` (default 30)
of wall-clock (evaluations included), one run after another with the whole machine. Every evaluation (32 episodes of
20 s, commands drawn from the training ranges) reports the task's metrics: the RMS planar tracking error over commands
of at most 1 m/s (m/s), the RMS yaw-rate error, the fall rate, and the diagnostics of a failing gait (the base's
height, the joints' excess beyond their soft limits, the fraction of actions beyond the bounds).

The goal, from the "every seed walks" issue: **every** seed reaches an RMS planar tracking error of at most 0.20 m/s
with at most 5% falls within 30 minutes, and its final policy still meets it on a final check of 512 episodes (the
exported file, evaluated after training on seeds the evaluations during training do not use: 32 episodes resolve a fall
rate only to about 4 percentage points, 512 to about 1); the report gives the minute each seed first met 0.25 and 0.20
m/s (with at most 5% falls in the evaluation of 32 episodes). The humanoid is held to the same line. Two policies that
learned nothing, on the same evaluation: standing (zero action: the default pose held by PD, which tracks a command no
better than its own speed; the humanoid falls) and random (actions N(0, 1), an untrained Gaussian policy's).

    python benchmarks/legged_training.py [--env ID] [--minutes 30] [--seeds 0 1 2 3 4] [--results-dir DIR]

Writes into ``--results-dir``: ``legged_training.md`` (final metrics as mean ± std over seeds, the best seed, the time
each seed first met 0.25 and 0.20, the final checks, the baselines, the goal's verdict), ``legged_training.csv`` (every
evaluation of every seed: wall-clock, env steps, metrics, diagnostics), ``legged_training.png`` (tracking error against
wall-clock) and each seed's final policy, exported with its robot entry, as
``legged_policies/quadruped_flat_seed<k>.onnx`` (what ``benchmarks/legged_sim2sim.py`` deploys); for the humanoid,
``humanoid_training.*`` and ``legged_policies/humanoid_flat_seed<k>.onnx``, with each file's final check beside it
(``<file>.final_check.json``, reused while the file is the same).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import sys

import common
import numpy as np
import torch

from rl_suite.envs.robots.velocity import DIAGNOSTICS

TASKS = {  # env id: (the report's file stem, the exported policies' stem)
    "QuadrupedVelocity-Flat-v0": ("legged_training", "quadruped_flat"),
    "HumanoidVelocity-Flat-v0": ("humanoid_training", "humanoid_flat"),
}
EVAL_EPISODES = 32
FINAL_CHECK_EPISODES = 512
FINAL_CHECK_SEED_OFFSET = 2_000_003  # seed + this: commands and starts that no evaluation during training drew
GOAL_ERROR, GOAL_FALLS, GOAL_MINUTES = 0.20, 0.05, 30.0
MILESTONES = (0.25, GOAL_ERROR)  # the tracking errors whose first minute the report gives per seed
METRICS = ("tracking_error_lin", "tracking_error_yaw", "fell")


def first_minutes(evaluations: list[dict], error: float = GOAL_ERROR) -> float | None:
    """The wall-clock minute of the first evaluation tracking within ``error`` m/s with at most GOAL_FALLS falls."""
    for row in evaluations:
        if row["tracking_error_lin"] <= error and row["fell"] <= GOAL_FALLS:
            return row["wall_time_s"] / 60
    return None


def seed_meets_goal(summary: dict, check: dict) -> bool:
    """The seed reached the goal within GOAL_MINUTES and its final policy still meets it on the final ``check``."""
    reached = first_minutes(summary["evaluations"])
    holds = check["tracking_error_lin"] <= GOAL_ERROR and check["fell"] <= GOAL_FALLS
    return reached is not None and reached <= GOAL_MINUTES and holds


def final_check(env_id: str, seed: int, folder, env_kwargs: dict) -> dict:
    """The seed's exported final policy evaluated on FINAL_CHECK_EPISODES episodes: kept beside the file, and
    reused while the file and the check's settings are the same."""
    path = folder / "legged_policies" / f"{TASKS[env_id][1]}_seed{seed}.onnx"
    if not path.is_file():
        raise SystemExit(
            f"{path}: seed {seed}'s final policy is missing (it is exported when the seed trains); restore it, or "
            f"train the seed again with --fresh"
        )
    kept = path.with_suffix(".final_check.json")
    check_seed = seed + FINAL_CHECK_SEED_OFFSET
    if kept.is_file():
        result = json.loads(kept.read_text())
        same = result.get("episodes") == FINAL_CHECK_EPISODES and result.get("seed") == check_seed
        if same and result.get("policy_sha256") == hashlib.sha256(path.read_bytes()).hexdigest():
            return result
    result = common.exported_policy_evaluation(env_id, path, check_seed, FINAL_CHECK_EPISODES, env_kwargs)
    kept.write_text(json.dumps(result, indent=2) + "\n")
    return result


def machine() -> str:
    return f"{common.cpu_name()}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    args = common.legged_arguments(__doc__, tuple(TASKS), minutes=GOAL_MINUTES)
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
    checks = {seed: final_check(args.env, seed, args.results_dir, runs[seed]["env_kwargs"]) for seed in runs}
    for seed, check in checks.items():
        print(f"seed {seed}, final check ({FINAL_CHECK_EPISODES} episodes): tracking error "
              f"{check['tracking_error_lin']:.3f} m/s, falls {check['fell']:.1%}", flush=True)  # fmt: skip
    baselines = {
        kind: common.fixed_policy_evaluation(args.env, kind, args.seeds[0], EVAL_EPISODES, env_kwargs)
        for kind in ("standing", "random")
    }
    write(runs, checks, baselines, args)


def export(env_id: str, agent, seed: int, folder, env_kwargs: dict) -> None:
    """The seed's final policy as ONNX, with the robot entry (what ``rl-suite export`` writes from a run) of the
    task as it trained (``env_kwargs`` from its settings)."""
    import rl_suite
    from rl_suite.deploy.export import export_policy

    with rl_suite.make(env_id, **env_kwargs) as env:
        robot, dt = env.robot_metadata(), env.dt
    path = folder / "legged_policies" / f"{TASKS[env_id][1]}_seed{seed}.onnx"
    export_policy(agent, path, "onnx", env_id=env_id, dt=dt, robot=robot)


def write(runs: dict[int, dict], checks: dict[int, dict], baselines: dict[str, dict], args) -> None:
    folder, stem = args.results_dir, TASKS[args.env][0]
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "seed": seed,
            "env_steps": row["env_steps"],
            "wall_time_s": row["wall_time_s"],
            **{m: row[m] for m in METRICS},
            **{m: row.get(m, math.nan) for m in DIAGNOSTICS},  # runs from before the diagnostics lack them
        }
        for seed, summary in runs.items()
        for row in summary["evaluations"]
    ]
    common.write_csv(folder / f"{stem}.csv", rows)

    finals = {m: common.lower_is_better({s: runs[s]["final_eval"][m] for s in runs}) for m in METRICS}
    fmt = "{:.3f}"
    met = {seed: seed_meets_goal(summary, checks[seed]) for seed, summary in runs.items()}
    checked = {m: common.lower_is_better({s: checks[s][m] for s in runs}) for m in METRICS}
    env_flag = "" if args.env == next(iter(TASKS)) else f" --env {args.env}"
    lines = [
        f"# PPO on {args.env}: velocity tracking on this CPU",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/legged_training.py{env_flag} --minutes {args.minutes:g}` on "
        f"{datetime.date.today()}, one run at a time with the whole machine; shipped settings "
        "(`agents/hyperparams/ppo.yaml`); evaluation: 32 episodes of 20 s, commands from the training ranges; "
        f"final check: the exported final policy on {FINAL_CHECK_EPISODES} more episodes. "
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
        f"| PPO, final check of {FINAL_CHECK_EPISODES} episodes (mean ± std) | "
        + " | ".join(common.mean_std(checked[m], fmt) for m in METRICS)
        + " | |",
    ]
    for kind, result in baselines.items():
        lines.append(f"| {common.FIXED_PLAYS[kind]} | " + " | ".join(fmt.format(result[m]) for m in METRICS) + " | |")
    lines += [
        "",
        f"Per seed (the final evaluation of {EVAL_EPISODES} episodes; the final check of {FINAL_CHECK_EPISODES}; the "
        "minute each first tracked within 0.25 and 0.20 m/s with ≤ 5% falls):",
        "",
        "| seed | tracking error | falls | check: tracking error | check: falls | base height (m) | joint-limit excess "
        "(rad) | 0.25 by | 0.20 by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for seed, summary in runs.items():
        final, check = summary["final_eval"], checks[seed]
        firsts = [first_minutes(summary["evaluations"], error) for error in MILESTONES]
        lines.append(
            f"| {seed} | {final['tracking_error_lin']:.3f} | {final['fell']:.1%} | {check['tracking_error_lin']:.3f} | "
            f"{check['fell']:.1%} | {final.get('base_height', math.nan):.3f} | "
            f"{final.get('joint_limit_excess', math.nan):.3f} | "
            + " | ".join("not reached" if m is None else f"{m:.0f} min" for m in firsts)
            + " |"
        )
    count = sum(met.values())
    goal = "met" if count == len(met) else "**missed**"
    lines += [
        "",
        f"Goal (every seed tracks within {GOAL_ERROR} m/s with at most {GOAL_FALLS:.0%} falls within "
        f"{GOAL_MINUTES:.0f} minutes, and its final policy still does on the final check of {FINAL_CHECK_EPISODES} "
        f"episodes): {goal}, {count} of {len(met)} seeds.",
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
