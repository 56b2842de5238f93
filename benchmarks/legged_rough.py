"""PPO on rough terrain on this machine's CPU: the terrain level the curriculum reaches against wall-clock, and how
often the trained policy climbs 5 cm steps and 15-degree slopes, against standing and random play.

Each seed (``--seeds``, default 0 1 2) first trains PPO on flat ground (``QuadrupedVelocity-Flat-v0``, its shipped
settings) for ``--start-minutes``, then ``rl-suite train ppo QuadrupedVelocity-Rough-v0`` from that run's agent
(``init_from``; the height scan's inputs start with zero weights) with its shipped settings
(``agents/hyperparams/ppo.yaml``: the perceptive policy) for ``--minutes`` of wall-clock, evaluations included, one
run after another with the whole machine (``--start-minutes 0`` trains on rough terrain from scratch, which did not
learn here: docs/reference/tasks.md, Legged robots). At every evaluation the run records the training episodes' mean
terrain level (``rollout_terrain_level``: legged_gym's curriculum, levels 0 to 9) beside the evaluation's tracking
error and falls.

Then each seed's final policy walks two test courses, one tile each (``COURSES``), 32 robots per course, each
commanded straight ahead at 0.5 m/s for 15 s from within 1 m of the tile's centre: stairs up of 5 cm steps (0.31 m
deep) and a 15-degree slope up. A robot succeeds when it gets 3 m from the tile's centre (1.5 m past the platform's
edge) before it falls. Standing (zero action) and random (N(0, 1) actions) play walk the same courses.

    python benchmarks/legged_rough.py [--start-minutes 30] [--minutes 30] [--seeds 0 1 2]
        [--results-dir benchmarks/results]

Writes ``legged_rough.md`` (final terrain level and course success as mean ± std over seeds with the best seed, the
baselines; each seed's two stages beside standing play's tracking error on flat ground; the machine),
``legged_rough.csv`` (every evaluation of every seed) and ``legged_rough.png`` (terrain level against wall-clock) into
``--results-dir``. Finished seeds are kept in ``benchmarks/runs/legged_rough/`` (a stopped run resumes with the seeds it
lacks; ``--fresh`` ignores them).
"""

from __future__ import annotations

import datetime
import math

import common
import torch

ENV_ID = "QuadrupedVelocity-Rough-v0"
START_FROM = "QuadrupedVelocity-Flat-v0"
EVAL_EPISODES = 32
COURSE_ROBOTS, COURSE_SPEED, COURSE_S, COURSE_DISTANCE = 32, 0.5, 15.0, 3.0
COURSES = {  # name: (terrain kind, difficulty); terrain.py: step height 0.05 + 0.18 d, slope 0.4 d
    "5 cm steps": ("stairs_up", 0.0),
    "15-degree slope": ("slope_up", math.tan(math.radians(15.0)) / 0.4),
}
CURVE = ("rollout_terrain_level", "tracking_error_lin", "fell")


def course_kwargs(env_kwargs: dict, kind: str, difficulty: float) -> dict:
    """The trained task's keywords (its observation, rewards, noise) on one tile of ``kind``, the command fixed."""
    terrain = dict(levels=1, columns=1, proportions={kind: 1.0}, difficulty_range=[difficulty, difficulty])
    return {
        **env_kwargs,
        "terrain": terrain,
        "terrain_curriculum": False,
        "max_init_terrain_level": 0,
        "lin_vel_x_range": (COURSE_SPEED, COURSE_SPEED),
        "lin_vel_y_range": (0.0, 0.0),
        "ang_vel_yaw_range": (0.0, 0.0),
        "heading_command": False,
        "standing_probability": 0.0,
        "min_command_speed": 0.0,
        "episode_length_s": COURSE_S,
        "push_velocity": 0.0,
    }


def course_success(act, env_kwargs: dict, course: str, seed: int) -> dict:
    """The share of robots that got ``COURSE_DISTANCE`` m from the course tile's centre before falling, and the
    share that fell; ``act(obs)`` gives the actions."""
    import rl_suite

    kind, difficulty = COURSES[course]
    env = rl_suite.make(ENV_ID, num_envs=COURSE_ROBOTS, seed=seed, **course_kwargs(env_kwargs, kind, difficulty))
    obs = env.reset(seed=seed)
    centre = torch.as_tensor(env.terrain.origins[0, 0, :2], dtype=torch.float32)
    reached = torch.zeros(COURSE_ROBOTS, dtype=torch.bool)
    fell, over = torch.zeros_like(reached), torch.zeros_like(reached)
    for _ in range(env.max_episode_steps):
        with torch.no_grad():
            obs, _, terminated, truncated, _ = env.step(act(obs))
        ended = terminated | truncated  # an ended robot has been reset already: its position is the next start's
        position = env.get_state()[0][:, :2].float()
        reached |= ~over & ~ended & ((position - centre).norm(dim=1) >= COURSE_DISTANCE)
        fell |= ~over & ~reached & terminated
        over |= ended
    env.close()
    return {"success": reached.float().mean().item(), "fell": fell.float().mean().item()}


def baseline_act(kind: str, seed: int):
    """Standing or random play's ``act(obs)`` (``common.fixed_policy``), for the courses."""
    policy = common.fixed_policy(kind, seed, 12)
    return lambda obs: policy.act(obs)[0]


def start_line(args) -> str:
    if args.start_minutes == 0:
        return f"trained on rough terrain from scratch for {args.minutes:g} minutes"
    return (
        f"trained {args.start_minutes:g} minutes on flat ground ({START_FROM}), then {args.minutes:g} on rough "
        "terrain from that agent"
    )


def seed_table(runs: dict[int, dict], final_level: dict[int, float], flat_standing: dict | None) -> list[str]:
    """Each seed's two stages: how far its flat-ground stage got (a rough stage that starts from a policy that only
    stands has nothing to climb with) and where its rough stage ended."""
    lines = [
        "Each seed: the flat-ground stage's env steps and final tracking error (m/s), then the rough stage's.",
        "",
        "| seed | flat ground: env steps | flat ground: tracking error | rough: env steps | terrain level | "
        + " | ".join(COURSES)
        + " |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(COURSES),
    ]
    for seed, result in runs.items():
        start = result.get("start_evaluations") or [{}]
        flat_steps = f"{result['start_env_steps']:,}" if "start_env_steps" in result else ""
        flat_error = f"{start[-1]['tracking_error_lin']:.2f}" if "tracking_error_lin" in start[-1] else ""
        lines.append(
            f"| {seed} | {flat_steps} | {flat_error} | {result['env_steps']:,} | {final_level[seed]:.2f} | "
            + " | ".join(f"{result['courses'][name]['success']:.0%}" for name in COURSES)
            + " |"
        )
    if flat_standing is not None:
        lines += [
            "",
            f"Standing play's tracking error on flat ground (seed 0's evaluation): "
            f"{flat_standing['tracking_error_lin']:.2f} m/s; a flat-ground stage that ends near it never learned to "
            "walk.",
        ]
    return lines


def machine() -> str:
    return f"{common.cpu_name()}; torch {torch.__version__} ({torch.get_num_threads()} threads)"


def main() -> None:
    args = common.legged_arguments(__doc__, minutes=30.0, start_minutes=30.0)
    finished = common.FinishedRuns(args, "legged_rough")
    runs = {}
    for seed in args.seeds:

        def finish(agent, config, seed=seed):
            act = lambda obs: agent.act(obs, deterministic=True)[0]  # noqa: E731
            return {"courses": {name: course_success(act, config.env_kwargs, name, seed) for name in COURSES}}

        result = common.ppo_seed(finished, args, ENV_ID, seed, EVAL_EPISODES, finish, start_from=START_FROM)
        runs[seed] = result
        levels = [row.get("rollout_terrain_level", math.nan) for row in result["evaluations"]]
        print(
            f"seed {seed}: {result['env_steps']:,} env steps; terrain level {levels[-1] if levels else math.nan:.2f}; "
            + "; ".join(f"{name}: {c['success']:.0%} succeed" for name, c in result["courses"].items()),
            flush=True,
        )
    env_kwargs = runs[args.seeds[0]]["env_kwargs"]
    baselines = {
        kind: {name: course_success(baseline_act(kind, 0), env_kwargs, name, 0) for name in COURSES}
        for kind in ("standing", "random")
    }
    flat_standing = None  # what a flat-ground stage that never learned to walk ends at
    if args.start_minutes > 0:
        flat_kwargs = common.shipped_settings("ppo", START_FROM).get("env_kwargs", {})
        flat_standing = common.fixed_policy_evaluation(START_FROM, "standing", 0, EVAL_EPISODES, flat_kwargs)
    write(runs, baselines, args, flat_standing)


def write(runs: dict[int, dict], baselines: dict[str, dict], args, flat_standing: dict | None) -> None:
    folder = args.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "seed": seed,
            "env_steps": row["env_steps"],
            "wall_time_s": row["wall_time_s"],
            **{k: row.get(k) for k in CURVE},
        }
        for seed, result in runs.items()
        for row in result["evaluations"]
    ]
    if rows:
        common.write_csv(folder / "legged_rough.csv", rows)
    final_level = {
        seed: (result["evaluations"][-1].get("rollout_terrain_level", math.nan) if result["evaluations"] else math.nan)
        for seed, result in runs.items()
    }
    level = common.over_seeds(final_level)
    success = {name: common.over_seeds({s: r["courses"][name]["success"] for s, r in runs.items()}) for name in COURSES}
    percent = "{:.0%}"
    lines = [
        f"# PPO on {ENV_ID}: the terrain curriculum and two test courses, on this CPU",
        "",
        f"Machine: {machine()}. Run: `python benchmarks/legged_rough.py --start-minutes {args.start_minutes:g} "
        f"--minutes {args.minutes:g}` on {datetime.date.today()}, one run at a time with the whole machine; shipped "
        f"settings (`agents/hyperparams/ppo.yaml`); each seed {start_line(args)}. "
        + common.commits_line(list(runs.values())),
        "",
        common.seeds_line(list(runs)),
        "",
        "Terrain level: the training episodes' mean level at the last evaluation (0 to 9; robots start on 0 to 5); "
        "wall-clock counts the flat-ground stage. "
        f"Courses: {COURSE_ROBOTS} robots commanded ahead at {COURSE_SPEED} m/s for {COURSE_S:g} s; success: "
        f"{COURSE_DISTANCE:g} m from the tile's centre before falling.",
        "",
        "| | terrain level | " + " | ".join(f"{name}: success" for name in COURSES) + " |",
        "|---|---:|" + "---:|" * len(COURSES),
        "| PPO, final (mean ± std) | "
        + common.mean_std(level, "{:.2f}")
        + " | "
        + " | ".join(common.mean_std(success[name], percent) for name in COURSES)
        + " |",
        "| PPO, best (seed k) | "
        + common.best_of(level, "{:.2f}")
        + " | "
        + " | ".join(common.best_of(success[name], percent) for name in COURSES)
        + " |",
    ]
    for kind, courses in baselines.items():
        successes = " | ".join(percent.format(courses[n]["success"]) for n in COURSES)
        lines.append(f"| {common.FIXED_PLAYS[kind]} | | {successes} |")
    lines += ["", *seed_table(runs, final_level, flat_standing)]
    lines += ["", "![terrain level against wall-clock](legged_rough.png)"]
    common.write_report(folder / "legged_rough.md", lines)
    plt = common.pyplot()
    if plt is None:
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for seed, result in runs.items():
        curve = [r for r in result["evaluations"] if "rollout_terrain_level" in r]
        minutes = [args.start_minutes + r["wall_time_s"] / 60 for r in curve]  # after the flat-ground stage
        axis.plot(minutes, [r["rollout_terrain_level"] for r in curve], label=f"seed {seed}")
    axis.set(xlabel="wall-clock (min), the flat-ground stage included", ylabel="mean terrain level (training episodes)",
             title=ENV_ID)  # fmt: skip
    axis.set_ylim(0, 9)
    axis.legend()
    figure.tight_layout()
    figure.savefig(folder / "legged_rough.png", dpi=120)


if __name__ == "__main__":
    main()
