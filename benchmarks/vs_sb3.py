"""rl-suite against stable-baselines3, side by side in one invocation, over several seeds.

    (a) PPO wall-clock to a CartPole-v1 mean evaluation return of 475. SB3 runs rl-zoo3's tuned CartPole settings
        (8 envs, n_steps 32, batch 256, 20 epochs, gae_lambda 0.8, gamma 0.98, linear lr 1e-3 and clip 0.2).
    (b) PPO training throughput: env-steps per second with updates included, ours with thousands of envs against
        SB3 with 8.
    (c) SAC wall-clock to a Pendulum-v1 mean evaluation return of -200; SB3 runs SAC with lr 1e-3.

Evaluation time counts for both sides, each evaluating its own way (SB3's EvalCallback plays episodes one after
another; rl-suite plays them at once on a batched env), with the same number of episodes at the same cadence in env
steps. Wall-clock starts when the agent is built and stops when an evaluation reaches the threshold.

    python benchmarks/vs_sb3.py [--seeds 0 1 2] [--parts a b c]

Writes ``benchmarks/results/vs_sb3.{md,csv}`` with the machine it ran on.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import pathlib
import statistics
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch

import rl_suite
from rl_suite.agents.ppo import PPO
from rl_suite.agents.sac import SAC
from rl_suite.checkpoint import seed_everything
from rl_suite.cli import tuned_settings
from rl_suite.config import split_overrides
from rl_suite.runner import RunConfig, Runner

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from env_throughput import machine  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
EVAL_EPISODES = {"a": 20, "c": 10}
EVAL_EVERY = {"a": 4096, "c": 1000}  # env steps
LIMIT_STEPS = {"a": 200_000, "c": 60_000}


def ours_to_threshold(algo, env_id: str, threshold: float, part: str, seed: int, run_dir: pathlib.Path) -> dict:
    settings = tuned_settings(algo, env_id)
    settings.update(
        total_steps=LIMIT_STEPS[part],
        stop_at_return=threshold,
        eval_every_steps=EVAL_EVERY[part],
        eval_episodes=EVAL_EPISODES[part],
        progress=False,
        checkpoint_every_steps=10**9,
        seed=seed,
        log_every_steps=10**9,
    )
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo.name, env_id=env_id, **run_values)
    start = time.perf_counter()
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed)
    agent = algo(env.observation_space, env.action_space, algo.Config(**agent_values))
    summary = Runner(agent, env, config, run_dir=run_dir / f"{algo.name}-{seed}").run()
    elapsed = time.perf_counter() - start
    reached = summary["threshold"]["reached"]
    return {"seconds": elapsed if reached else float("nan"), "steps": summary["env_steps"], "reached": reached}


class StopAtThreshold:
    """An SB3 EvalCallback that records when the evaluation reached the threshold."""

    def __init__(self, eval_env, threshold: float, part: str, n_envs: int):
        from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

        stop = StopTrainingOnRewardThreshold(reward_threshold=threshold, verbose=0)
        self.callback = EvalCallback(
            eval_env,
            callback_on_new_best=stop,
            n_eval_episodes=EVAL_EPISODES[part],
            eval_freq=max(EVAL_EVERY[part] // n_envs, 1),
            deterministic=True,
            verbose=0,
        )


def sb3_to_threshold(part: str, seed: int) -> dict:
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.env_util import make_vec_env

    def linear(start):
        return lambda remaining: remaining * start

    start = time.perf_counter()
    if part == "a":
        env, threshold, n_envs = make_vec_env("CartPole-v1", n_envs=8, seed=seed), 475.0, 8
        model = SB3PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=linear(1e-3),
            clip_range=linear(0.2),
            seed=seed,
            device="cpu",
        )
    else:
        env, threshold, n_envs = make_vec_env("Pendulum-v1", n_envs=1, seed=seed), -200.0, 1
        model = SB3SAC("MlpPolicy", env, learning_rate=1e-3, seed=seed, device="cpu")
    eval_env = make_vec_env(env.envs[0].spec.id, n_envs=1, seed=seed + 1000)
    stopper = StopAtThreshold(eval_env, threshold, part, n_envs)
    model.learn(total_timesteps=LIMIT_STEPS[part], callback=stopper.callback)
    elapsed = time.perf_counter() - start
    reached = stopper.callback.best_mean_reward >= threshold
    return {"seconds": elapsed if reached else float("nan"), "steps": model.num_timesteps, "reached": reached}


def throughput(seed: int, seconds: float) -> dict:
    """(b): env-steps per second, updates included, over about ``seconds`` of training each."""
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env

    seed_everything(seed)
    env = rl_suite.make("CartPole-v1", num_envs=4096, seed=seed)
    # ReLU rather than tanh: with torch's CPU build, tanh costs about 15x as much per element.
    agent = PPO(
        env.observation_space, env.action_space, n_steps=16, epochs=4, minibatches=4, lr=1e-3, activation="relu"
    )
    config = RunConfig(
        num_envs=4096,
        total_steps=10**12,
        time_budget_s=seconds,
        eval_episodes=0,
        progress=False,
        checkpoint_every_steps=10**12,
        log_every_steps=10**12,
        seed=seed,
    )
    summary = Runner(agent, env, config, run_dir=tempfile.mkdtemp(prefix="throughput-")).run()
    ours = summary["env_steps"] / summary["wall_time_s"]

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = SB3PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, seed=seed, device="cpu"
    )
    steps = max(int(seconds * 3000) // 256 * 256, 2048)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    theirs = model.num_timesteps / (time.perf_counter() - start)
    return {"ours": ours, "sb3": theirs}


def median(values):
    values = [v for v in values if v == v]  # drop NaN (threshold not reached)
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parts", nargs="+", default=["a", "b", "c"], choices=["a", "b", "c"])
    parser.add_argument("--throughput-seconds", type=float, default=10.0)
    args = parser.parse_args()
    gym.logger.min_level = 40
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="vs_sb3-"))
    # Pay one-time import costs (torch.optim pulls in torch._dynamo, SB3 its modules) before any clock starts.
    torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)
    import stable_baselines3  # noqa: F401

    to_threshold = {"a": (PPO, "CartPole-v1", 475.0), "c": (SAC, "Pendulum-v1", -200.0)}
    rows = []
    for seed in args.seeds:
        for part, (algo, env_id, threshold) in to_threshold.items():
            if part in args.parts:
                rows.append({"part": part, "seed": seed, "lib": "sb3", **sb3_to_threshold(part, seed)})
                ours = ours_to_threshold(algo, env_id, threshold, part, seed, run_dir)
                rows.append({"part": part, "seed": seed, "lib": "rl-suite", **ours})
        if "b" in args.parts:
            result = throughput(seed, args.throughput_seconds)
            rows.append({"part": "b", "seed": seed, "lib": "sb3", "steps_per_s": result["sb3"]})
            rows.append({"part": "b", "seed": seed, "lib": "rl-suite", "steps_per_s": result["ours"]})
        for row in [r for r in rows if r["seed"] == seed]:
            print(row, flush=True)

    RESULTS.mkdir(exist_ok=True)
    fields = ["part", "seed", "lib", "seconds", "steps", "reached", "steps_per_s"]
    with open(RESULTS / "vs_sb3.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)

    def pick(part, lib, key):
        return [r[key] for r in rows if r["part"] == part and r["lib"] == lib]

    lines = [
        "# rl-suite against stable-baselines3",
        "",
        f"Machine: {machine()}.",
        f"Run: `python benchmarks/vs_sb3.py --seeds {' '.join(map(str, args.seeds))}` on "
        f"{datetime.date.today().isoformat()}. Medians over seeds; a run that missed its threshold counts as "
        f"not reached and is left out of the median.",
        "",
    ]
    titles = {
        "a": "(a) PPO, CartPole-v1 to a mean evaluation return of 475",
        "c": "(c) SAC, Pendulum-v1 to a mean evaluation return of -200",
    }
    goals = {"a": 1 / 3, "c": 1 / 5}
    for part in ("a", "c"):
        if part not in args.parts:
            continue
        ours_s, sb3_s = median(pick(part, "rl-suite", "seconds")), median(pick(part, "sb3", "seconds"))
        lines += [
            f"## {titles[part]}",
            "",
            f"Evaluation: {EVAL_EPISODES[part]} episodes every {EVAL_EVERY[part]:,} env steps, on both sides.",
            "",
            "| seed | SB3 s | SB3 steps | rl-suite s | rl-suite steps |",
            "|---:|---:|---:|---:|---:|",
        ]
        for seed in args.seeds:
            (s,) = [r for r in rows if r["part"] == part and r["lib"] == "sb3" and r["seed"] == seed]
            (o,) = [r for r in rows if r["part"] == part and r["lib"] == "rl-suite" and r["seed"] == seed]
            lines.append(f"| {seed} | {s['seconds']:.1f} | {s['steps']:,} | {o['seconds']:.1f} | {o['steps']:,} |")
        ratio = ours_s / sb3_s
        lines += [
            "",
            f"Median: SB3 {sb3_s:.1f} s, rl-suite {ours_s:.1f} s: rl-suite takes **{ratio:.2f}x** SB3's "
            f"time (goal: at most {goals[part]:.2f}x).",
            "",
        ]
    if "b" in args.parts:
        ours_b, sb3_b = median(pick("b", "rl-suite", "steps_per_s")), median(pick("b", "sb3", "steps_per_s"))
        lines += [
            "## (b) PPO training throughput on CartPole-v1, updates included",
            "",
            "rl-suite: 4,096 envs, n_steps 16, 4 epochs of 4 minibatches, ReLU. SB3: 8 envs, rl-zoo3's "
            "settings (tanh).",
            "",
            f"Median env-steps/s: SB3 {sb3_b:,.0f}, rl-suite {ours_b:,.0f}: **{ours_b / sb3_b:.0f}x** "
            f"(goal: at least 50x).",
            "",
        ]
    (RESULTS / "vs_sb3.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
