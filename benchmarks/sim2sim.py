"""Sim-to-sim: train PPO in our MuJoCo env, export to ONNX, deploy the file to the same robot in PyBullet.

For each task: PPO with the settings shipped in ``agents/hyperparams/ppo.yaml`` trains for ``--minutes`` of
wall-clock on our batched MuJoCo env (one core, one torch thread); the final policy is exported with
``rl_suite.deploy.export.export_policy`` (ONNX, with its ``dt``). The exported file is then

- (a) evaluated deterministically in MuJoCo (our ``MujocoVecEnv``) over ``--episodes`` episodes of 1000 steps, and
- (b) loaded with ``rl_suite.deploy.load_policy`` and run by ``rl_suite.deploy.ControlLoop`` at ``1/dt`` Hz against
  ``PyBulletRobot`` (``rl_suite.envs.adapters.pybullet``) with a simulated clock (the loop never sleeps in real
  time) for the same number of episodes of 1000 cycles,

and the fraction of the MuJoCo return kept in PyBullet is reported (PyBullet / MuJoCo). Ant is trained with
``include_cfrc_ext_in_observation=False`` (27 observations), since PyBullet gives no ``cfrc_ext``.

Every (task, training) trains once per seed (``--seeds``, default 0 1 2), one run after another; the table gives
each return and the fraction kept as mean ± std over seeds, beside the best seed, and the goal's verdict on the mean.
A uniformly random policy runs through the same two evaluations, for reference. A full run takes tasks x trainings x
seeds x (``--minutes`` + the PyBullet evaluation, about a minute with the five robots): the command in
docs/reference/deployment.md, 2 x 4 x 3 x (4 + 0.5) min, takes about 1 h 50 min.

    OMP_NUM_THREADS=1 python benchmarks/sim2sim.py [--tasks HalfCheetah-v5 Ant-v5] [--minutes 4] [--episodes 5]
        [--seeds 0 1 2] [--trainings plain obs-motor mass-friction rarl] [--variants default ...]
        [--results-dir benchmarks/results]

``--trainings`` picks how the policies train (``TRAININGS``): plain PPO; PPO with observation noise and motor
strength (``RandomizedVecEnv``), or with mass and friction randomisation (``MujocoVecEnv``'s model fields), all as
env keywords; or RARL (``agents/rarl.py``: PPO against an adversary pushing the robot, with the force set in
``agents/hyperparams/rarl.yaml``). Every policy is deployed the same way, and evaluated in a clean MuJoCo env.

Writes ``sim2sim.{md,csv}`` into ``--results-dir`` (default ``benchmarks/results``) with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform
import re
import shutil
import tempfile
import time
from collections.abc import Callable

import common
import numpy as np
import torch

GOAL_KEPT = {"HalfCheetah-v5": 0.70}  # the goal: keep 70% of the MuJoCo return in PyBullet
PYBULLET_S_PER_EPISODE = 2.5  # 1000 cycles of HalfCheetah took 2.3 s on the 2-core EPYC (results/sim2sim.csv)
RANDOM = "uniformly random policy"  # the training label of the random reference rows
# PyBulletRobot settings compared: the adapter's default, then one correction taken away at a time.
VARIANTS = {
    "default": {},
    "rigid contact": {"contact": None},
    "no armature": {"armature": False},
    "loadMJCF inertia": {"exact_inertia": False},
    "substeps=1": {"substeps": 1},
}
TASK_KWARGS = {"HalfCheetah-v5": {}, "Ant-v5": {"include_cfrc_ext_in_observation": False}}
# How a policy trains: (algorithm, env keywords added to the task's, a label for the tables).
TRAININGS = {
    "plain": ("ppo", {}, "plain"),
    "obs-motor": ("ppo", {"obs_noise_std": 0.01, "motor_strength": 0.1}, "obs noise 0.01, motor strength ±0.1"),
    "mass-friction": ("ppo", {"randomize_mass": 0.2, "randomize_friction": 0.3}, "mass ±0.2, friction ±0.3"),
    "rarl": ("rarl", {}, "RARL adversary"),
}


def train(env_id: str, seconds: float, seed: int, run_dir: pathlib.Path, training: str = "plain"):
    import rl_suite
    from rl_suite.config import split_overrides
    from rl_suite.registry import load_algorithm
    from rl_suite.rng import seed_everything
    from rl_suite.runner import RunConfig, Runner
    from rl_suite.settings import tuned_settings

    algo_name, randomization, _ = TRAININGS[training]
    algo = load_algorithm(algo_name)
    settings = tuned_settings(algo, env_id)
    env_kwargs = {**settings.get("env_kwargs", {}), "nthread": 1, **TASK_KWARGS[env_id], **randomization}
    settings.update(
        total_steps=10**12,
        time_budget_s=seconds,
        eval_every_steps=10**12,
        eval_episodes=5,
        checkpoint_every_steps=10**12,
        log_every_steps=100_000,
        progress=False,
        seed=seed,
        env_kwargs=env_kwargs,
    )
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo.name, env_id=env_id, **run_values)
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed, **env_kwargs)
    agent = algo.for_env(env, algo.Config(**agent_values))
    summary = Runner(agent, env, config, run_dir=run_dir).run()
    return agent, env.dt, int(summary["env_steps"])


class UniformPolicy:
    """Uniformly random actions in ``[low, high]``, for one observation or a batch: the random reference."""

    def __init__(self, low, high, seed: int):
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.generator = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        shape = (*np.shape(obs)[:-1], len(self.low))
        return self.generator.uniform(self.low, self.high, shape).astype(np.float32)


# policy_for(observation_size, action_low, action_high) -> policy: what each simulator deploys.
PolicyFor = Callable[[int, np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]


def exported(path: pathlib.Path) -> PolicyFor:
    """The exported file, checked against the simulator's observation and action sizes."""
    from rl_suite.deploy import load_policy

    return lambda size, low, high: load_policy(path, expected_observation_dim=size, expected_action_dim=len(low))


def uniformly_random(seed: int) -> PolicyFor:
    """The random reference: uniform actions in the simulator's action (control) range."""
    return lambda size, low, high: UniformPolicy(low, high, seed)


def evaluate_mujoco(policy_for: PolicyFor, env_id: str, episodes: int, seed: int) -> list[float]:
    """The policy in our MuJoCo env: one episode per environment, until its first end."""
    import rl_suite

    env = rl_suite.make(env_id, num_envs=episodes, seed=seed, nthread=1, **TASK_KWARGS[env_id])
    policy = policy_for(env.observation_space.shape[0], env.action_space.low, env.action_space.high)
    obs = env.reset()
    returns = torch.zeros(episodes, dtype=torch.float64)
    running = torch.ones(episodes, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        action = torch.as_tensor(policy(obs.numpy()))
        obs, reward, terminated, truncated, _ = env.step(action)
        returns += torch.where(running, reward.double(), 0.0)
        running &= ~(terminated | truncated)
        if not running.any():
            break
    env.close()
    return returns.tolist()


def evaluate_pybullet(policy_for: PolicyFor, task: str, episodes: int, seed: int, **robot_kwargs) -> dict:
    """The policy run by ``ControlLoop`` against ``PyBulletRobot`` for ``episodes`` episodes."""
    from rl_suite.deploy import ControlLoop
    from rl_suite.envs.adapters.pybullet import PyBulletRobot

    robot = PyBulletRobot(task, seed=seed, **robot_kwargs)
    policy = policy_for(robot.observation_size, robot.ctrl_low, robot.ctrl_high)
    returns, lengths, faults, seconds = [], [], 0, 0.0
    for episode in range(episodes):
        robot.reset(seed + episode)
        clock = common.SimulatedClock()
        loop = ControlLoop(
            policy,
            robot,
            rate_hz=1.0 / robot.dt,
            safe_action=np.zeros(robot.action_size, dtype=np.float32),
            action_limit=robot.ctrl_high,
            clock=clock,
            sleep=clock.sleep,
            keep_observations=False,
        )
        started = time.perf_counter()
        result = loop.run(1000)
        seconds += time.perf_counter() - started
        returns.append(robot.episode_return)
        lengths.append(robot.episode_length)
        faults += result.faults
    robot.close()
    return {"returns": returns, "lengths": lengths, "faults": faults, "seconds": seconds}


def machine() -> str:
    import onnxruntime
    import pybullet  # noqa: F401

    return (
        f"{platform.platform()}, {common.cpu_name()} (logical; OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}); torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"Python {platform.python_version()}"
    )


def deploy(policy_for: PolicyFor, env_id: str, args, seed: int, trained: dict) -> list[dict]:
    """One policy evaluated in MuJoCo and on every PyBullet robot of ``args.variants``: one row per robot."""
    task = env_id.split("-")[0]
    mujoco_returns = evaluate_mujoco(policy_for, env_id, args.episodes, seed + 1000)
    mj = float(np.mean(mujoco_returns))
    print(f"  MuJoCo: {mj:.1f} {np.round(mujoco_returns, 1).tolist()}", flush=True)
    rows = []
    for variant in args.variants:
        pb = evaluate_pybullet(policy_for, task, args.episodes, seed + 1000, **VARIANTS[variant])
        mean = float(np.mean(pb["returns"]))
        fraction = mean / mj if mj > 0 else float("nan")
        print(
            f"  PyBullet ({variant}): {mean:.1f} {np.round(pb['returns'], 1).tolist()}, "
            f"kept {fraction:.2f}, faults {pb['faults']}",
            flush=True,
        )
        rows.append(
            {
                "task": env_id,
                **trained,
                "seed": seed,
                "pybullet_robot": variant,
                "mujoco_return": round(mj, 1),
                "mujoco_std": round(float(np.std(mujoco_returns)), 1),
                "pybullet_return": round(mean, 1),
                "pybullet_std": round(float(np.std(pb["returns"])), 1),
                "fraction_kept": round(fraction, 3),
                "pybullet_mean_length": float(np.mean(pb["lengths"])),
                "control_loop_faults": pb["faults"],
                "pybullet_s_per_episode": round(pb["seconds"] / args.episodes, 2),
                "command": command(args),
                "note": args.note,
            }
        )
    return rows


def main() -> None:
    from rl_suite.deploy.export import export_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5"], choices=sorted(TASK_KWARGS))
    parser.add_argument("--minutes", type=float, default=4.0, help="training wall-clock per task")
    parser.add_argument("--episodes", type=int, default=5)
    common.add_seed_arguments(parser)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="PyBulletRobot settings to deploy to (the first is the adapter's default)",
    )
    parser.add_argument("--policy", type=pathlib.Path, help="deploy this exported file instead of training (one task)")
    parser.add_argument("--save-policy", type=pathlib.Path, help="keep the exported files in this folder")
    parser.add_argument(
        "--trainings", nargs="+", default=["plain"], choices=list(TRAININGS), help="how the deployed policies train"
    )
    parser.add_argument("--note", default="", help="a line about the machine's load, written with the results")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the rows of sim2sim.csv in --results-dir whose (task, training) this run does not measure",
    )
    args = parser.parse_args()
    common.check_seed_arguments(parser, args)
    torch.set_num_threads(1)
    train_minutes = 0.0 if args.policy is not None else args.minutes
    eval_minutes = len(args.variants) * args.episodes * PYBULLET_S_PER_EPISODE / 60
    runs = len(args.tasks) * len(args.trainings) * len(args.seeds)
    parts = (
        f"{common.grid((args.tasks, 'task'), (args.trainings, 'training'), (args.seeds, 'seed'))}; each "
        f"{train_minutes:g} min of training and about {common.duration(eval_minutes)} of PyBullet evaluation"
    )
    random_reference = f"the random reference (about {common.duration(len(args.tasks) * eval_minutes)}) and start-up"
    print(common.wall_clock_estimate(runs, train_minutes + eval_minutes, parts, random_reference), flush=True)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for env_id in args.tasks:
            print(f"{env_id}: a {RANDOM}", flush=True)
            trained = {"training": RANDOM, "train_minutes": 0, "train_env_steps": 0}
            rows += deploy(uniformly_random(args.seeds[0]), env_id, args, args.seeds[0], trained)
        for env_id, preset, seed in [(e, t, s) for e in args.tasks for t in args.trainings for s in args.seeds]:
            task = env_id.split("-")[0]
            training = TRAININGS[preset][2]
            print(f"{env_id} ({training}), seed {seed}: {TRAININGS[preset][0]} for {args.minutes} min", flush=True)
            run_dir = pathlib.Path(tmp) / f"{env_id}-{len(rows)}"
            if args.policy is not None:
                path, steps, training = args.policy, 0, f"given: {args.policy.name}"
            else:
                agent, dt, steps = train(env_id, args.minutes * 60, seed, run_dir, preset)
                path = run_dir / f"{task}.onnx"
                export_policy(agent, path, env_id=env_id, dt=dt)
                agent.close()
                if args.save_policy is not None:
                    args.save_policy.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, args.save_policy / f"{task}-{preset}-seed{seed}.onnx")
            trained = {"training": training, "train_minutes": args.minutes, "train_env_steps": steps}
            rows += deploy(exported(path), env_id, args, seed, trained)
    write(rows, args)


def command(args) -> str:
    return (
        f"OMP_NUM_THREADS=1 python benchmarks/sim2sim.py --tasks {' '.join(args.tasks)} --minutes {args.minutes} "
        f"--episodes {args.episodes} --seeds {' '.join(map(str, args.seeds))} --trainings {' '.join(args.trainings)} "
        "--variants "
        + " ".join(f'"{v}"' if " " in v else v for v in args.variants)
        + (" --append" if args.append else "")
        + f" ({datetime.date.today()})"
    )


INTEGER_FIELDS = ("seed", "train_env_steps", "control_loop_faults")
FLOAT_FIELDS = ("train_minutes", "mujoco_return", "mujoco_std", "pybullet_return", "pybullet_std", "fraction_kept")


def read_kept_rows(path: pathlib.Path, measured: set[tuple[str, str]]) -> list[dict]:
    """The rows of an earlier sim2sim.csv whose (task, training) this run does not measure, with their numbers."""
    with open(path, newline="") as f:
        kept = [r for r in csv.DictReader(f) if (r["task"], r["training"]) not in measured]
    for r in kept:
        if "seed" not in r:  # written before --seeds: the seed is in the command
            found = re.search(r"--seed (\d+)", r["command"])
            if found is None:
                raise ValueError(f"{path}: a row of {r['task']} ({r['training']}) names no seed")
            r["seed"] = found.group(1)
        r.update({key: int(r[key]) for key in INTEGER_FIELDS})
        r.update({key: float(r[key]) for key in FLOAT_FIELDS})
    return kept


def summary_lines(rows: list[dict]) -> list[str]:
    """Per (task, training, PyBullet robot): mean ± std over seeds, the best seed, and the goal's verdict."""
    lines = [
        "| task | training | PyBullet robot | train steps (mean) | MuJoCo return (mean ± std) | best (seed k) | "
        "PyBullet return (mean ± std) | best (seed k) | kept (mean ± std) | goal | faults |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for key in dict.fromkeys((r["task"], r["training"], r["pybullet_robot"]) for r in rows):
        runs = [r for r in rows if (r["task"], r["training"], r["pybullet_robot"]) == key]
        mujoco = common.over_seeds({r["seed"]: r["mujoco_return"] for r in runs})
        pybullet = common.over_seeds({r["seed"]: r["pybullet_return"] for r in runs})
        kept, goal = "-", "-"
        if key[1] != RANDOM:
            fraction = common.over_seeds({r["seed"]: r["fraction_kept"] for r in runs})
            kept = common.mean_std(fraction, "{:.2f}")
            if key[0] in GOAL_KEPT:
                goal = f"{common.verdict(fraction.mean >= GOAL_KEPT[key[0]])} (>= {GOAL_KEPT[key[0]]:.2f})"
        steps = sum(r["train_env_steps"] for r in runs) // len(runs)
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {steps:,} | {common.mean_std(mujoco)} | {common.best_of(mujoco)} | "
            f"{common.mean_std(pybullet)} | {common.best_of(pybullet)} | {kept} | {goal} | "
            f"{sum(r['control_loop_faults'] for r in runs)} |"
        )
    return lines


def write(rows: list[dict], args) -> None:
    directory = args.results_dir
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "sim2sim.csv"
    if args.append and path.is_file():
        rows = read_kept_rows(path, {(r["task"], r["training"]) for r in rows}) + rows
    common.write_csv(path, rows, list(rows[-1]))
    lines = ["# Sim-to-sim: MuJoCo-trained policies deployed to PyBullet", ""]
    for run in dict.fromkeys((r["command"], r["note"]) for r in rows):
        lines += [f"- `{run[0]}`" + (f": {run[1]}" if run[1] else "")]
    lines += ["", f"Machine: {machine()}."]
    lines += [
        "",
        "Each policy (PPO or RARL, shipped settings; `--trainings` above) trains in our MuJoCo env for the given "
        "wall-clock; its ONNX export is evaluated "
        f"deterministically over {args.episodes} episodes of 1000 steps in MuJoCo, then run by `ControlLoop` "
        "(simulated clock, rate 1/dt) against `PyBulletRobot` for as many episodes. *Kept* = PyBullet / MuJoCo "
        "mean return of one seed, then its mean ± std over seeds; the issue's goal is >= 0.70 on HalfCheetah, "
        f"judged on that mean. The *{RANDOM}* rows are the same two evaluations of uniformly random actions in "
        "the control range, for reference. *PyBullet robot*: `default` is "
        "`PyBulletRobot`'s defaults (MuJoCo's compiled inertials, armature approximated, contact stiffness calibrated "
        "to MuJoCo's rest height, 4 PyBullet steps per MJCF timestep); each other row takes one of these away: "
        "`rigid contact` (Bullet's own), `no armature`, `loadMJCF inertia` (loadMJCF's inertial frames, masses "
        "scaled), `substeps=1` (exactly the MJCF timestep).",
        "",
        common.seeds_line(args.seeds)
        + (" Rows kept by --append keep the seeds they ran with (*Every run* lists them)." if args.append else ""),
        "",
        *summary_lines(rows),
        "",
        "## Every run",
        "",
        "| task | training | seed | train steps | PyBullet robot | MuJoCo return | PyBullet return | kept | faults |",
        "|---|---|---:|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['training']} | {r['seed']} | {r['train_env_steps']:,} | {r['pybullet_robot']} | "
            f"{r['mujoco_return']} ± {r['mujoco_std']} | {r['pybullet_return']} ± {r['pybullet_std']} | "
            f"{r['fraction_kept']:.2f} | {r['control_loop_faults']} |"
        )
    lines += [
        "",
        "Mismatches between the two simulators are listed in `envs/adapters/pybullet.py` (contact model, solver, "
        "armature approximated, explicit joint damping and springs, inertial frames).",
        "",
    ]
    (directory / "sim2sim.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
