"""Getting up: PPO on the quadruped with and without a reset bank of fallen poses (OmniReset's diverse resets), at
equal wall-clock on this machine's CPU, measured from fallen poses neither training saw.

Per seed (``--seeds``, default 0 1 2), two trainings of ``rl-suite train ppo QuadrupedVelocity-Flat-v0`` with its
shipped settings for ``--minutes`` each (default 30), one run after another with the whole machine, both with
``fall_grace_s`` = ``GRACE_S`` (trunk contact and tilt end no episode in its first seconds):

- "task resets": the task's own resets (standing, the default pose);
- "with the fallen bank": the same, and ``BANK_FRACTION`` of the episodes start from a bank of ``BANK_SIZE`` fallen
  and tumbling poses (``rl_suite.envs.robots.recovery.fallen_bank``: dropped from random orientations with random
  joint angles; the bank's seed is 1000 + the seed).

Each final policy then runs two evaluations:

- recovery: ``RECOVERY_EPISODES`` episodes, each from a pose drawn from a held-out bank of ``HELD_OUT_SIZE`` (seed
  2000, the same for every policy), commanded to stand still for ``GRACE_S`` + ``HOLD_S`` s; an episode succeeds
  when the robot is up by the end of the grace and stays up to the time limit (the task's termination: trunk
  contact, roll or pitch over 1 rad);
- walking: the task's usual evaluation (32 episodes of 20 s from its own resets: tracking error, falls), to show
  what the bank costs at walking.

Standing (zero action) and random (N(0, 1) actions) play are measured the same way: a robot that landed on its
feet when it was dropped is up already, and counts for them too.

    python benchmarks/legged_recovery.py [--minutes 30] [--seeds 0 1 2] [--results-dir benchmarks/results]

Writes ``legged_recovery.md`` (recovery success and walking metrics as mean ± std over seeds with the best seed, the
baselines, the verdict: does the bank raise recovery success on the mean) and ``legged_recovery.csv`` (every
evaluation during training) into ``--results-dir``. Finished runs are kept in ``benchmarks/runs/legged_recovery/``.
"""

from __future__ import annotations

import datetime

import common
import torch

ENV_ID = "QuadrupedVelocity-Flat-v0"
GRACE_S, HOLD_S = 3.0, 2.0
BANK_SIZE, BANK_FRACTION = 1024, 0.3
RECOVERY_EPISODES, WALK_EPISODES = 64, 32
HELD_OUT_SEED, HELD_OUT_SIZE = 2000, 256
VARIANTS = ("task resets", "with the fallen bank")


def bank_file(finished: common.FinishedRuns, seed: int):
    """The fallen-pose bank of ``seed`` (made once, kept beside the runs)."""
    from rl_suite.envs.robots.recovery import fallen_bank

    path = finished.directory / f"fallen_bank_seed{seed}.pt"
    if not path.exists():
        fallen_bank("quadruped", BANK_SIZE, seed=seed).save(path)
    return path


def without_bank(env_kwargs: dict) -> dict:
    """The trained task's keywords (observation, rewards, grace) less its training bank."""
    return {k: v for k, v in env_kwargs.items() if k not in ("reset_bank", "reset_bank_fraction")}


def recovery_kwargs(env_kwargs: dict) -> dict:
    """The trained task's keywords for the recovery evaluation: standing still, a short episode, no bank of its own
    (the held-out one is attached)."""
    return {**without_bank(env_kwargs), "standing_probability": 1.0, "episode_length_s": GRACE_S + HOLD_S,
            "fall_grace_s": GRACE_S}  # fmt: skip


def evaluations(agent, env_kwargs: dict, seed: int) -> dict:
    """``{"recovery": share of held-out fallen poses got up from, "walking": the usual evaluation}``."""
    import rl_suite
    from rl_suite.envs.robots.recovery import fallen_bank
    from rl_suite.runner import evaluate

    eval_seed = seed + common.EVAL_SEED_OFFSET
    held_out = fallen_bank("quadruped", HELD_OUT_SIZE, seed=HELD_OUT_SEED)
    with rl_suite.make(ENV_ID, num_envs=RECOVERY_EPISODES, seed=eval_seed, **recovery_kwargs(env_kwargs)) as env:
        env.use_reset_bank(held_out, fraction=1.0)
        recovery = evaluate(agent, env, seed=eval_seed)
    with rl_suite.make(ENV_ID, num_envs=WALK_EPISODES, seed=eval_seed, **without_bank(env_kwargs)) as env:
        walking = evaluate(agent, env, seed=eval_seed)
    return {
        "recovery": 1.0 - recovery["fell"],
        "walking": {m: walking[m] for m in ("tracking_error_lin", "tracking_error_yaw", "fell")},
    }


def train(finished, args, seed: int, variant: str) -> dict:
    """One training of ``variant`` (kept, or run now) and its final policy's evaluations."""
    env_kwargs = {"fall_grace_s": GRACE_S}
    if variant == "with the fallen bank":
        env_kwargs.update(reset_bank=str(bank_file(finished, 1000 + seed)), reset_bank_fraction=BANK_FRACTION)
    job = dict(
        task=ENV_ID,
        label=variant,
        seed=seed,
        minutes=args.minutes,
        eval_every_steps=args.eval_every_steps,
        settings=common.shipped_settings("ppo", ENV_ID),
        grace_s=GRACE_S,
        bank=dict(size=BANK_SIZE, fraction=BANK_FRACTION, seed=1000 + seed) if "bank" in variant else None,
        # the evaluations are part of the result kept, so what shapes them is part of the job
        recovery=dict(episodes=RECOVERY_EPISODES, held_out=HELD_OUT_SIZE, seed=HELD_OUT_SEED, hold_s=HOLD_S),
        walking_episodes=WALK_EPISODES,
    )
    result = finished.get(job)
    if result is None:
        summary, config, agent = common.timed_run(
            "ppo", ENV_ID, seed, args.minutes * 60, {"env_kwargs": env_kwargs}, eval_every_steps=args.eval_every_steps,
            eval_episodes=WALK_EPISODES,
        )  # fmt: skip
        result = finished.put(job, {**summary, **evaluations(agent, config.env_kwargs, seed)})
    return result


def machine() -> str:
    return f"{common.cpu_name()}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    args = common.legged_arguments(__doc__, minutes=30.0, runs_per_seed=len(VARIANTS))
    finished = common.FinishedRuns(args, "legged_recovery")
    runs = {}
    for seed in args.seeds:
        for variant in VARIANTS:
            runs[variant, seed] = result = train(finished, args, seed, variant)
            walking = result["walking"]
            print(
                f"seed {seed}, {variant}: {result['env_steps']:,} env steps; recovery {result['recovery']:.0%}; "
                f"walking: tracking error {walking['tracking_error_lin']:.3f} m/s, falls {walking['fell']:.0%}",
                flush=True,
            )
    shipped = common.shipped_settings("ppo", ENV_ID).get("env_kwargs", {})
    baseline_kwargs = {**shipped, "fall_grace_s": GRACE_S}
    baselines = {
        kind: evaluations(common.fixed_policy(kind, 0, 12), baseline_kwargs, 0) for kind in ("standing", "random")
    }
    write(runs, baselines, args)


def write(runs: dict, baselines: dict, args) -> None:
    folder = args.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {"variant": variant, "seed": seed, "env_steps": row["env_steps"], "wall_time_s": row["wall_time_s"],
         "tracking_error_lin": row.get("tracking_error_lin"), "fell": row.get("fell")}
        for (variant, seed), result in runs.items()
        for row in result["evaluations"]
    ]  # fmt: skip
    if rows:
        common.write_csv(folder / "legged_recovery.csv", rows)
    percent, fmt = "{:.0%}", "{:.3f}"
    lines = [
        f"# Getting up on {ENV_ID}: PPO with and without a reset bank of fallen poses, on this CPU",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/legged_recovery.py --minutes {args.minutes:g}` on "
        f"{datetime.date.today()}, one run at a time with the whole machine; shipped settings with fall_grace_s "
        f"{GRACE_S:g} s; the bank: {BANK_SIZE:,} fallen poses, {BANK_FRACTION:.0%} of the episodes. "
        + common.commits_line(list(runs.values())),
        "",
        common.seeds_line(sorted({seed for _, seed in runs})),
        "",
        f"Recovery: {RECOVERY_EPISODES} episodes from a held-out bank of {HELD_OUT_SIZE} fallen poses, standing "
        f"command, up by {GRACE_S:g} s and still up at {GRACE_S + HOLD_S:g} s. Walking: the task's evaluation "
        f"({WALK_EPISODES} episodes of 20 s, its own resets).",
        "",
        "| | recovery success | walking: tracking error (m/s) | walking: falls | env steps |",
        "|---|---:|---:|---:|---:|",
    ]
    recovery = {}
    for variant in VARIANTS:
        chosen = {seed: result for (v, seed), result in runs.items() if v == variant}
        recovery[variant] = success = common.over_seeds({s: r["recovery"] for s, r in chosen.items()})
        error = common.lower_is_better({s: r["walking"]["tracking_error_lin"] for s, r in chosen.items()})
        falls = common.lower_is_better({s: r["walking"]["fell"] for s, r in chosen.items()})
        steps = sum(r["env_steps"] for r in chosen.values()) / len(chosen)
        lines.append(
            f"| PPO, {variant} (mean ± std) | {common.mean_std(success, percent)} | {common.mean_std(error, fmt)} | "
            f"{common.mean_std(falls, percent)} | {steps:,.0f} |"
        )
        lines.append(f"| PPO, {variant}, best (seed k) | {common.best_of(success, percent)} | | | |")
    for kind, result in baselines.items():
        walking = result["walking"]
        lines.append(
            f"| {common.FIXED_PLAYS[kind]} | {percent.format(result['recovery'])} | "
            f"{fmt.format(walking['tracking_error_lin'])} | {percent.format(walking['fell'])} | |"
        )
    # per seed, because a run whose walking never left the standing optimum behaves unlike one that walks
    standing_error = baselines["standing"]["walking"]["tracking_error_lin"]
    lines += [
        "",
        f"Per seed (a walking tracking error near standing play's {fmt.format(standing_error)} m/s means that run "
        "never learned to walk):",
        "",
        "| seed | " + " | ".join(f"{v}: recovery | {v}: walking error (m/s)" for v in VARIANTS) + " |",
        "|---:|" + "---:|---:|" * len(VARIANTS),
    ]
    for seed in sorted({seed for _, seed in runs}):
        cells = [f"{percent.format(runs[v, seed]['recovery'])} | "
                 f"{fmt.format(runs[v, seed]['walking']['tracking_error_lin'])}" for v in VARIANTS]  # fmt: skip
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    plain, banked = recovery[VARIANTS[0]], recovery[VARIANTS[1]]
    raised = banked.mean > plain.mean
    lines += [
        "",
        f"Verdict: the fallen bank {'raises' if raised else '**does not raise**'} recovery success on the mean over "
        f"seeds at equal wall-clock: {common.mean_std(banked, percent)} against {common.mean_std(plain, percent)} "
        f"(standing play: {percent.format(baselines['standing']['recovery'])}).",
    ]
    common.write_report(folder / "legged_recovery.md", lines)


if __name__ == "__main__":
    main()
