"""Sim-to-sim: train PPO in our MuJoCo env, export to ONNX, deploy the file to the same robot in PyBullet.

For each task: PPO with the settings shipped in ``agents/hyperparams/ppo.yaml`` trains for ``--minutes`` of
wall-clock on our batched MuJoCo env (one core, one torch thread); the final policy is exported with
``rl_suite.export.export_policy`` (ONNX, with its ``dt``). The exported file is then

- (a) evaluated deterministically in MuJoCo (our ``MujocoVecEnv``) over ``--episodes`` episodes of 1000 steps, and
- (b) loaded with ``rl_suite.deploy.load_policy`` and run by ``rl_suite.deploy.ControlLoop`` at ``1/dt`` Hz against
  ``PyBulletRobot`` (``rl_suite.envs.adapters.pybullet``) with a simulated clock (the loop never sleeps in real
  time) for the same number of episodes of 1000 cycles,

and the fraction of the MuJoCo return kept in PyBullet is reported (PyBullet / MuJoCo). Ant is trained with
``include_cfrc_ext_in_observation=False`` (27 observations), since PyBullet gives no ``cfrc_ext``.

    OMP_NUM_THREADS=1 python benchmarks/sim2sim.py [--tasks HalfCheetah-v5 Ant-v5] [--minutes 4] [--episodes 5]
        [--trainings plain obs-motor mass-friction rarl] [--variants default ...]

``--trainings`` picks how the policies train (``TRAININGS``): plain PPO; PPO with observation noise and motor
strength (``RandomizedVecEnv``), or with mass and friction randomisation (``MujocoVecEnv``'s model fields), all as
env keywords; or RARL (``agents/rarl.py``: PPO against an adversary pushing the robot, with the force set in
``agents/hyperparams/rarl.yaml``). Every policy is deployed the same way, and evaluated in a clean MuJoCo env.

Writes ``benchmarks/results/sim2sim.{md,csv}`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform
import shutil
import tempfile
import time

import numpy as np
import torch

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
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
    from rl_suite.checkpoint import seed_everything
    from rl_suite.cli import tuned_settings
    from rl_suite.config import split_overrides
    from rl_suite.registry import load_algorithm
    from rl_suite.runner import RunConfig, Runner

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


def evaluate_mujoco(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    """The exported policy in our MuJoCo env: one episode per environment, until its first end."""
    import rl_suite

    env = rl_suite.make(env_id, num_envs=episodes, seed=seed, nthread=1, **TASK_KWARGS[env_id])
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


class SimulatedClock:
    """A clock that moves only when the loop sleeps: the control loop runs as fast as the simulation."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def evaluate_pybullet(path: pathlib.Path, task: str, episodes: int, seed: int, **robot_kwargs) -> dict:
    from rl_suite.deploy import ControlLoop, load_policy
    from rl_suite.envs.adapters.pybullet import PyBulletRobot

    robot = PyBulletRobot(task, seed=seed, **robot_kwargs)
    policy = load_policy(path, expected_observation_dim=robot.observation_size, expected_action_dim=robot.action_size)
    returns, lengths, faults, seconds = [], [], 0, 0.0
    for episode in range(episodes):
        robot.reset(seed + episode)
        clock = SimulatedClock()
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

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{platform.platform()}, {cpu}, {os.cpu_count()} logical cores (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS')}); torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"Python {platform.python_version()}"
    )


def main() -> None:
    from rl_suite.export import export_policy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["HalfCheetah-v5"], choices=sorted(TASK_KWARGS))
    parser.add_argument("--minutes", type=float, default=4.0, help="training wall-clock per task")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
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
        help="keep the rows of results/sim2sim.csv whose (task, training) this run does not measure",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for env_id, preset in [(env_id, t) for env_id in args.tasks for t in args.trainings]:
            task = env_id.split("-")[0]
            training = TRAININGS[preset][2]
            print(f"{env_id} ({training}): training {TRAININGS[preset][0]} for {args.minutes} min", flush=True)
            run_dir = pathlib.Path(tmp) / f"{env_id}-{len(rows)}"
            if args.policy is not None:
                path, steps, training = args.policy, 0, f"given: {args.policy.name}"
            else:
                agent, dt, steps = train(env_id, args.minutes * 60, args.seed, run_dir, preset)
                path = run_dir / f"{task}.onnx"
                export_policy(agent, path, env_id=env_id, dt=dt)
                agent.close()
                if args.save_policy is not None:
                    args.save_policy.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, args.save_policy / f"{task}-{preset}.onnx")
            from rl_suite.deploy import load_policy

            mujoco_returns = evaluate_mujoco(load_policy(path), env_id, args.episodes, args.seed + 1000)
            mj = float(np.mean(mujoco_returns))
            print(f"  MuJoCo: {mj:.1f} {np.round(mujoco_returns, 1).tolist()}", flush=True)
            for variant in args.variants:
                pb = evaluate_pybullet(path, task, args.episodes, args.seed + 1000, **VARIANTS[variant])
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
                        "training": training,
                        "train_minutes": args.minutes,
                        "train_env_steps": steps,
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
    write(rows, args)


def command(args) -> str:
    return (
        f"OMP_NUM_THREADS=1 python benchmarks/sim2sim.py --tasks {' '.join(args.tasks)} --minutes {args.minutes} "
        f"--episodes {args.episodes} --seed {args.seed} --trainings {' '.join(args.trainings)} --variants "
        + " ".join(f'"{v}"' if " " in v else v for v in args.variants)
        + (" --append" if args.append else "")
        + f" ({datetime.date.today()})"
    )


def write(rows: list[dict], args) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "sim2sim.csv"
    if args.append and path.is_file():
        measured = {(r["task"], r["training"]) for r in rows}
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if (r["task"], r["training"]) not in measured]
        for r in kept:
            for key in ("train_env_steps", "control_loop_faults"):
                r[key] = int(r[key])
            r["fraction_kept"] = float(r["fraction_kept"])
        rows = kept + rows
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
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
        "mean return; the issue's goal is >= 0.70 on HalfCheetah. *PyBullet robot*: `default` is "
        "`PyBulletRobot`'s defaults (MuJoCo's compiled inertials, armature approximated, contact stiffness calibrated "
        "to MuJoCo's rest height, 4 PyBullet steps per MJCF timestep); each other row takes one of these away: "
        "`rigid contact` (Bullet's own), `no armature`, `loadMJCF inertia` (loadMJCF's inertial frames, masses "
        "scaled), `substeps=1` (exactly the MJCF timestep).",
        "",
        "| task | training | train steps | PyBullet robot | MuJoCo return | PyBullet return | kept | faults |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['training']} | {r['train_env_steps']:,} | {r['pybullet_robot']} | "
            f"{r['mujoco_return']} ± {r['mujoco_std']} | {r['pybullet_return']} ± {r['pybullet_std']} | "
            f"{r['fraction_kept']:.2f} | {r['control_loop_faults']} |"
        )
    lines += [
        "",
        "Mismatches between the two simulators are listed in `envs/adapters/pybullet.py` (contact model, solver, "
        "armature approximated, explicit joint damping and springs, inertial frames).",
        "",
    ]
    (RESULTS / "sim2sim.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
