"""rl-suite against stable-baselines3, like with like, side by side in one invocation, over several seeds.

    (a) PPO, wall-clock and env steps to a CartPole-v1 mean evaluation return of 475.
    (b) PPO training throughput on CartPole-v1: env-steps per second with the updates included.
    (c) SAC, wall-clock and env steps to a Pendulum-v1 mean evaluation return of -200.

Every comparison has a row in which rl-suite runs exactly the settings SB3 runs ("matched": the same network sizes
and activations, the same number of environments and the same gradient steps per sample). Where rl-suite's shipped
settings (agents/hyperparams/{ppo,sac}.yaml) differ, they get a second row ("tuned") that lists how they differ.
SB3 is the same in both rows (run once per seed):

    (a) SB3 runs rl-zoo3's CartPole-v1 PPO (8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, gae_lambda 0.8,
        linear lr 1e-3 and clip 0.2, ent_coef 0) with SB3's defaults for the rest (vf_coef 0.5, max_grad_norm 0.5,
        separate 64x64 tanh actor and critic with orthogonal init, Adam eps 1e-5, no observation normaliser).
    (b) SB3 as in (a). Ours at the same gradient steps per sample on 4,096 envs; ours with SB3's settings exactly;
        and ours as tuned for throughput (16 gradient steps per 65,536 samples), each row with its ratio.
    (c) SB3 runs SAC with lr 1e-3 and its defaults (1 env, 256x256 ReLU, batch 256, buffer 1e6, learning_starts
        100, one gradient step per env step, gamma 0.99, tau 0.005, automatic entropy from alpha 1 towards -dim(A)).

What still differs inside the implementations, under matched settings: SB3's SAC steps the temperature, then the
critics, then the actor (through the critics just stepped) with three Adam optimisers, from PyTorch's default
initialisation, with log-std clamped to [-20, 2]; ours takes one Adam step on the summed losses, from orthogonal
initialisation, with log-std in [-5, 2]. The networks have the same shapes and parameter counts on both sides.

Protocol, the same on both sides: the deterministic policy is evaluated over the same number of episodes every so
many env steps, after that step's update, and at the end of a run. SB3 evaluates with ``evaluate_policy`` (episodes
one after another); rl-suite on a batched env (episodes at once); evaluation time counts on both sides. Seconds run
from building the env and the agent to the start of the evaluation that first reaches the threshold. A seed that
misses counts as slower than any that reached for the median; mean ± std (sample std over seeds) covers the seeds
that reached. (a) and (c) also measure a uniformly random policy under the same evaluation, so that the thresholds
are seen to be out of random play's reach.

    python benchmarks/vs_sb3.py [--seeds 0 1 2] [--parts a b c] [--throughput-seconds 10] [--results-dir DIR]
    python benchmarks/vs_sb3.py --quick --seeds 0 --results-dir /tmp/vs_sb3   # every path in minutes; not a result

Writes ``vs_sb3.{md,csv}`` (by default to benchmarks/results/) with the machine and the exact command. The lines
under "Verdicts" in the .md, one per row and each saying met or missed, are what the README and docs/benchmarks.md
quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import pathlib
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import stable_baselines3
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from torch import nn

import rl_suite
from rl_suite.agents.ppo import PPO
from rl_suite.agents.sac import SAC
from rl_suite.config import split_overrides
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner
from rl_suite.settings import tuned_settings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS,
    add_seed_arguments,
    best_of,
    check_seed_arguments,
    mean_std,
    over_seeds,
    random_policy_evaluation,
    verdict,
    write_csv,
)
from env_throughput import machine  # noqa: E402

SB3 = "SB3"
MATCHED, TUNED = "rl-suite matched", "rl-suite tuned"


# -- the settings, side by side ---------------------------------------------------------------------------------


def linear(start: float) -> Callable[[float], float]:
    """SB3's linear schedule: from ``start`` down to 0 as the remaining progress goes from 1 to 0."""
    return lambda remaining: remaining * start


SB3_PPO_ENVS = 8


def sb3_ppo(env, seed: int):
    return stable_baselines3.PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.8,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": nn.Tanh, "ortho_init": True},
        seed=seed,
        device="cpu",
    )


# sb3_ppo in our names: 8 * 32 samples per rollout in 1 minibatch of 256. PPOConfig's defaults already agree on
# Adam eps 1e-5, orthogonal init, per-minibatch advantage standardisation and no value clipping; stated anyway.
PPO_MATCHED = {
    "num_envs": SB3_PPO_ENVS,
    "n_steps": 32,
    "minibatches": 1,
    "epochs": 20,
    "gamma": 0.98,
    "gae_lambda": 0.8,
    "lr": 1e-3,
    "lr_schedule": "linear",
    "clip_range": 0.2,
    "clip_schedule": "linear",
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "hidden": (64, 64),
    "activation": "tanh",
    "normalize_obs": False,
    "normalize_advantages": True,
    "clip_value": None,
    "target_kl": None,
    "scale_rewards": False,
}

SB3_SAC_ENVS = 1


def sb3_sac(env, seed: int):
    return stable_baselines3.SAC(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_entropy="auto",
        policy_kwargs={"net_arch": [256, 256], "activation_fn": nn.ReLU},
        seed=seed,
        device="cpu",
    )


SAC_MATCHED = {
    "num_envs": SB3_SAC_ENVS,
    "hidden": (256, 256),
    "activation": "relu",
    "lr": 1e-3,
    "batch_size": 256,
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "steps_per_iteration": 1,
    "updates_per_transition": 1.0,
    "n_step": 1,
    "gamma": 0.99,
    "tau": 0.005,
    "init_alpha": 1.0,
    "autotune_alpha": True,
    "target_entropy": None,
    "normalize_obs": False,
}

# (b): 4,096 envs x 16 steps = 65,536 samples a rollout; 20 epochs of 256 minibatches of 256 samples make 5,120
# gradient steps, 78.1 per 1,000 samples, as SB3's 20 epochs of one 256-sample minibatch per 256 samples.
PPO_SAME_RATIO = {**PPO_MATCHED, "num_envs": 4096, "n_steps": 16, "minibatches": 4096 * 16 // 256}
# ReLU rather than tanh: with torch's CPU build, tanh costs about 15x as much per element.
PPO_FOR_THROUGHPUT = {"num_envs": 4096, "n_steps": 16, "epochs": 4, "minibatches": 4, "lr": 1e-3, "activation": "relu"}
THROUGHPUT_ROWS = {
    "rl-suite, same update-to-data ratio": PPO_SAME_RATIO,
    "rl-suite, same settings": PPO_MATCHED,
    "rl-suite tuned for throughput": PPO_FOR_THROUGHPUT,
}


@dataclasses.dataclass(frozen=True)
class Race:
    """(a) or (c): both sides train until an evaluation reaches ``threshold`` or ``limit_steps`` run out."""

    part: str
    title: str
    algo: type
    env_id: str
    threshold: float
    eval_episodes: int
    eval_every: int
    limit_steps: int
    goal: float
    """rl-suite's median seconds should be at most this fraction of SB3's."""
    matched: dict
    sb3_envs: int
    make_sb3: Callable
    sb3_settings: str


RACES = {
    "a": Race(
        "a",
        "(a) PPO, CartPole-v1 to a mean evaluation return of 475",
        PPO,
        "CartPole-v1",
        475.0,
        eval_episodes=20,
        eval_every=4096,
        limit_steps=100_000,  # rl-zoo3's budget, over which both sides' linear schedules decay
        goal=1 / 3,
        matched=PPO_MATCHED,
        sb3_envs=SB3_PPO_ENVS,
        make_sb3=sb3_ppo,
        sb3_settings="rl-zoo3's CartPole-v1 PPO: 8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, gae_lambda "
        "0.8, linear lr 1e-3 and clip 0.2, ent_coef 0, vf_coef 0.5, max_grad_norm 0.5, separate 64x64 tanh actor "
        "and critic, no observation normaliser",
    ),
    "c": Race(
        "c",
        "(c) SAC, Pendulum-v1 to a mean evaluation return of -200",
        SAC,
        "Pendulum-v1",
        -200.0,
        eval_episodes=10,
        eval_every=1000,
        limit_steps=20_000,
        goal=1 / 5,
        matched=SAC_MATCHED,
        sb3_envs=SB3_SAC_ENVS,
        make_sb3=sb3_sac,
        sb3_settings="SAC with lr 1e-3 and SB3's defaults: 1 env, 256x256 ReLU, batch 256, buffer 1e6, "
        "learning_starts 100, 1 gradient step per env step, 1-step returns, gamma 0.99, tau 0.005, automatic "
        "entropy (alpha from 1.0, target -dim(A)), no observation normaliser",
    ),
}
THROUGHPUT_GOAL = 50.0


# -- running ours -----------------------------------------------------------------------------------------------


def build_configs(algo, settings: dict) -> tuple[RunConfig, object]:
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    return RunConfig(algo=algo.name, **run_values), algo.Config(**agent_values)


def run_ours(algo, env_id: str, settings: dict, seed: int, run_dir: pathlib.Path) -> tuple[dict, float]:
    """Train with ``settings``; returns the Runner's summary and the seconds spent building env, agent and Runner."""
    quiet = {"progress": False, "checkpoint_every_steps": 10**15, "checkpoint_buffer": False, "log_every_steps": 10**15}
    config, agent_config = build_configs(algo, {**settings, **quiet, "env_id": env_id, "seed": seed})
    start = time.perf_counter()
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=config.num_envs, seed=seed)
    agent = algo(env.observation_space, env.action_space, agent_config)
    runner = Runner(agent, env, config, run_dir=tempfile.mkdtemp(prefix=f"{algo.name}-{seed}-", dir=run_dir))
    setup_s = time.perf_counter() - start
    return runner.run(), setup_s


def race_settings(race: Race, settings: dict) -> dict:
    protocol = {
        "total_steps": race.limit_steps,
        "stop_at_return": race.threshold,
        "eval_every_steps": race.eval_every,
        "eval_episodes": race.eval_episodes,
        "time_budget_s": None,
    }
    return {**settings, **protocol}


def ours_race(race: Race, settings: dict, seed: int, run_dir: pathlib.Path) -> dict:
    summary, setup_s = run_ours(race.algo, race.env_id, race_settings(race, settings), seed, run_dir)
    threshold = summary["threshold"]
    return race_result(
        reached=threshold["reached"],
        seconds=setup_s + (threshold["wall_time_s"] or 0.0),
        env_steps=threshold["env_steps"],
        final_return=summary["final_eval"]["mean_return"],
    )


def race_result(reached: bool, seconds: float, env_steps: int | None, final_return: float) -> dict:
    return {
        "reached": reached,
        "seconds": seconds if reached else math.nan,
        "env_steps": env_steps if reached else None,
        "final_return": final_return,
    }


def differences(algo, matched: dict, tuned: dict) -> list[str]:
    """The settings in which ``tuned`` differs from ``matched``, as ``name value (matched: value)``."""
    pairs = [build_configs(algo, settings) for settings in (matched, tuned)]
    listed = []
    for matched_config, tuned_config in zip(*pairs, strict=True):
        for field in dataclasses.fields(matched_config):
            ours, theirs = getattr(tuned_config, field.name), getattr(matched_config, field.name)
            if ours != theirs and field.name not in ("algo", "env_id"):
                listed.append(f"{field.name} {ours} (matched: {theirs})")
    return listed or ["nothing (the shipped settings are the matched ones)"]


def ppo_gradient_steps_per_1k(settings: dict) -> float:
    config, agent_config = build_configs(PPO, settings)
    return 1000 * agent_config.epochs * agent_config.minibatches / (config.num_envs * agent_config.n_steps)


# -- running SB3 under the same protocol ------------------------------------------------------------------------


class RunnerProtocol(BaseCallback):
    """Drives an SB3 model as our Runner drives ours. After each update (at the start of the next rollout) it stops
    once ``budget_s`` seconds of training have passed, or evaluates every ``eval_every`` env steps, stopping once the
    mean return reaches ``threshold``; it also evaluates at the end of the run."""

    def __init__(
        self, clock_start: float, budget_s=math.inf, eval_env=None, eval_every=0, episodes=0, threshold=math.inf
    ):
        super().__init__()
        self.clock_start, self.budget_s = clock_start, budget_s
        self.eval_env, self.eval_every, self.episodes, self.threshold = eval_env, eval_every, episodes, threshold
        self.next_eval, self.evaluated_at, self.stop = eval_every, -1, False
        self.final_return, self.reached = math.nan, None  # reached: (seconds, env steps)
        self.training_s, self.training_steps = math.nan, 0  # where the time budget ran out

    def _on_training_start(self) -> None:
        self.training_start = time.perf_counter()

    def _on_step(self) -> bool:
        return not self.stop

    def _on_rollout_start(self) -> None:
        if self.stop:
            return
        elapsed = time.perf_counter() - self.training_start
        if elapsed >= self.budget_s:
            self.stop, self.training_s, self.training_steps = True, elapsed, self.model.num_timesteps
        elif self.eval_env is not None and self.model.num_timesteps >= self.next_eval:
            self.next_eval = (self.model.num_timesteps // self.eval_every + 1) * self.eval_every
            self._evaluate()

    def _on_training_end(self) -> None:
        if not self.stop and self.eval_env is not None and self.evaluated_at != self.model.num_timesteps:
            self._evaluate()

    def _evaluate(self) -> None:
        seconds = time.perf_counter() - self.clock_start  # the evaluation's own time counts from the next one on
        self.final_return, _ = evaluate_policy(self.model, self.eval_env, self.episodes, deterministic=True)
        self.evaluated_at = self.model.num_timesteps
        if self.final_return >= self.threshold:
            self.reached, self.stop = (seconds, self.model.num_timesteps), True


def sb3_race(race: Race, seed: int) -> dict:
    start = time.perf_counter()
    model = race.make_sb3(make_vec_env(race.env_id, n_envs=race.sb3_envs, seed=seed), seed)
    eval_env = make_vec_env(race.env_id, n_envs=1, seed=seed + 1000)
    protocol = RunnerProtocol(
        start, eval_env=eval_env, eval_every=race.eval_every, episodes=race.eval_episodes, threshold=race.threshold
    )
    model.learn(total_timesteps=race.limit_steps, callback=protocol)
    seconds, env_steps = protocol.reached or (math.nan, None)
    return race_result(protocol.reached is not None, seconds, env_steps, float(protocol.final_return))


def sb3_throughput(seed: int, seconds: float) -> float:
    model = sb3_ppo(make_vec_env("CartPole-v1", n_envs=SB3_PPO_ENVS, seed=seed), seed)
    protocol = RunnerProtocol(time.perf_counter(), budget_s=seconds)
    model.learn(total_timesteps=10**12, callback=protocol)
    return protocol.training_steps / protocol.training_s


def ours_throughput(settings: dict, seed: int, seconds: float, run_dir: pathlib.Path) -> float:
    budget = {"total_steps": 10**15, "time_budget_s": seconds, "eval_episodes": 0}
    summary, _ = run_ours(PPO, "CartPole-v1", {**settings, **budget}, seed, run_dir)
    return summary["env_steps"] / summary["wall_time_s"]


# -- statistics and tables --------------------------------------------------------------------------------------


def median_with_misses(values: list[float]) -> float:
    """The median with a miss (NaN) counted as slower than any run that reached: ``inf`` if half or more missed."""
    return statistics.median([math.inf if math.isnan(v) else v for v in values])


def spread(by_seed: dict[int, float], fmt: str) -> str:
    """Mean ± sample std over the seeds that have a value (NaN: the threshold was not reached)."""
    reached = {seed: v for seed, v in by_seed.items() if not math.isnan(v)}
    return mean_std(over_seeds(reached), fmt) if reached else "none reached"


def fastest(by_seed: dict[int, float]) -> str:
    """The best (lowest) time and its seed: ``2.2 (seed 2)``."""
    reached = [(v, seed) for seed, v in by_seed.items() if not math.isnan(v)]
    return "{:,.1f} (seed {})".format(*min(reached)) if reached else "none reached"


def number(value, digits: int = 1) -> str:
    if value is None or math.isnan(value) or value == math.inf:
        return "not reached"
    return f"{value:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def seeds_text(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


# -- the parts --------------------------------------------------------------------------------------------------


def race_part(race: Race, seeds: list[int], run_dir: pathlib.Path) -> tuple[list[dict], list[str], list[str]]:
    """Runs (a) or (c); returns the CSV rows, the Markdown section and its verdict lines."""
    tuned = tuned_settings(race.algo, race.env_id)
    sides = (SB3, MATCHED, TUNED)
    results = {side: [] for side in sides}
    for seed in seeds:
        results[SB3].append(sb3_race(race, seed))
        results[MATCHED].append(ours_race(race, race.matched, seed, run_dir))
        results[TUNED].append(ours_race(race, tuned, seed, run_dir))
        print(race.part, seed, {side: rows[-1] for side, rows in results.items()}, flush=True)
    csv_rows = [
        {"part": race.part, "row": side, "seed": seed, **result}
        for side, rows in results.items()
        for seed, result in zip(seeds, rows, strict=True)
    ]

    tuned_differs = differences(race.algo, race_settings(race, race.matched), race_settings(race, tuned))
    lines = [
        f"## {race.title}",
        "",
        f"Evaluation: the deterministic policy over {race.eval_episodes} episodes every {race.eval_every:,} env "
        f"steps and at the end, on both sides; at most {race.limit_steps:,} env steps a run; {seeds_text(seeds)}.",
        "",
        f"- {SB3}: {race.sb3_settings}.",
        f"- {MATCHED}: the same settings (`{race.algo.name.upper()}_MATCHED` in this script).",
        f"- {TUNED}: agents/hyperparams/{race.algo.name}.yaml; differs from matched in: {'; '.join(tuned_differs)}.",
        "",
    ]
    per_seed = [[str(seed), *map(race_cell, column)] for seed, *column in zip(seeds, *results.values(), strict=True)]
    lines += table(["seed", *(f"{side}: seconds, env steps to {race.threshold:g}" for side in sides)], per_seed)

    seconds = {
        side: {seed: r["seconds"] for seed, r in zip(seeds, rows, strict=True)} for side, rows in results.items()
    }
    medians = {side: median_with_misses(list(by_seed.values())) for side, by_seed in seconds.items()}
    summary = [
        ["seconds, median", *(number(medians[side]) for side in sides)],
        ["seconds, mean ± std (seeds that reached)", *(spread(v, "{:,.1f}") for v in seconds.values())],
        ["seconds, best (seed k)", *(fastest(v) for v in seconds.values())],
        ["seeds that reached", *(f"{sum(r['reached'] for r in rows)} of {len(seeds)}" for rows in results.values())],
        [
            "env steps, median",
            *(number(median_with_misses([r["env_steps"] or math.nan for r in rows]), 0) for rows in results.values()),
        ],
        [
            "final evaluation return, mean ± std",
            *(
                spread({seed: r["final_return"] for seed, r in zip(seeds, rows, strict=True)}, "{:,.1f}")
                for rows in results.values()
            ),
        ],
    ]
    lines += table(["", *sides], summary)

    verdicts = []
    for side in (MATCHED, TUNED):
        ratio, verdict = race_verdict(medians[side], medians[SB3], race.goal)
        verdicts.append(
            f"{race.title}, {side} against {SB3}, {seeds_text(seeds)}: median seconds {number(medians[side])} "
            f"against {number(medians[SB3])}, ratio {ratio} (goal: at most {race.goal:.2f}x): {verdict}."
        )
    return csv_rows, lines, verdicts


def race_cell(result: dict) -> str:
    if not result["reached"]:
        return f"not reached (final evaluation {result['final_return']:,.1f})"
    return f"{result['seconds']:,.1f} s, {result['env_steps']:,} steps"


def race_verdict(ours: float, theirs: float, goal: float) -> tuple[str, str]:
    if ours == math.inf:
        return "n/a", "missed (rl-suite's median run did not reach the threshold)"
    if theirs == math.inf:
        return "n/a", "not decided (SB3's median run did not reach the threshold)"
    ratio = ours / theirs
    return f"{ratio:.2f}x", verdict(ratio <= goal)


def throughput_part(seeds: list[int], seconds: float, run_dir: pathlib.Path) -> tuple[list[dict], list[str], list[str]]:
    """Runs (b); returns the CSV rows, the Markdown section and its verdict lines."""
    rates = {SB3: [], **{row: [] for row in THROUGHPUT_ROWS}}
    for seed in seeds:
        rates[SB3].append(sb3_throughput(seed, seconds))
        for row, settings in THROUGHPUT_ROWS.items():
            rates[row].append(ours_throughput(settings, seed, seconds, run_dir))
        print("b", seed, {row: round(values[-1]) for row, values in rates.items()}, flush=True)
    sb3_ratio = 1000 * 20 / 256  # n_epochs x one minibatch per n_envs * n_steps = 256 samples
    gradient_steps = {SB3: sb3_ratio, **{row: ppo_gradient_steps_per_1k(s) for row, s in THROUGHPUT_ROWS.items()}}
    csv_rows = [
        {"part": "b", "row": row, "seed": seed, "steps_per_s": rate, "grad_steps_per_1k": gradient_steps[row]}
        for row, values in rates.items()
        for seed, rate in zip(seeds, values, strict=True)
    ]

    lines = [
        "## (b) PPO training throughput on CartPole-v1, updates included",
        "",
        f"Each side trains for about {seconds:g} s a seed without evaluation; env-steps/s is env steps over the "
        f"wall-clock of training, counted at the end of an update; {seeds_text(seeds)}. {SB3} runs its settings "
        f"from (a) once a seed, and every row compares against that.",
        "",
        "- rl-suite, same update-to-data ratio: 4,096 envs x n_steps 16, 20 epochs of minibatches of 256 samples "
        "(5,120 gradient steps per 65,536 samples), separate 64x64 tanh networks, no observation normaliser.",
        f"- rl-suite, same settings: exactly {SB3}'s (8 envs, n_steps 32, 20 epochs of one 256-sample minibatch).",
        f"- rl-suite tuned for throughput: 4,096 envs x n_steps 16, 4 epochs of 4 minibatches (16 gradient steps "
        f"per 65,536 samples), ReLU, observation normaliser: far fewer gradient steps per sample than {SB3}'s.",
        "",
    ]
    per_seed = [
        [str(seed)] + [number(v, 0) for v in column] for seed, *column in zip(seeds, *rates.values(), strict=True)
    ]
    lines += table(["seed", *(f"{row}: env-steps/s" for row in rates)], per_seed)
    medians = {row: statistics.median(values) for row, values in rates.items()}
    stats = {row: over_seeds(dict(zip(seeds, values, strict=True))) for row, values in rates.items()}
    summary = [
        ["env-steps/s, median", *(number(m, 0) for m in medians.values())],
        ["env-steps/s, mean ± std", *(mean_std(row_stats) for row_stats in stats.values())],
        ["env-steps/s, best (seed k)", *(best_of(row_stats) for row_stats in stats.values())],
        ["gradient steps per 1,000 samples", *(f"{g:.2f}" for g in gradient_steps.values())],
    ]
    lines += table(["", *rates], summary)
    verdicts = []
    for row in THROUGHPUT_ROWS:
        ratio = medians[row] / medians[SB3]
        verdicts.append(
            f"(b) PPO throughput, {row} ({gradient_steps[row]:.2f} gradient steps per 1,000 samples) against {SB3} "
            f"({sb3_ratio:.2f}), {seeds_text(seeds)}: median env-steps/s {medians[row]:,.0f} against "
            f"{medians[SB3]:,.0f}, ratio {ratio:.1f}x (goal: at least {THROUGHPUT_GOAL:.0f}x): "
            f"{verdict(ratio >= THROUGHPUT_GOAL)}."
        )
    return csv_rows, lines, verdicts


def random_part(races: list[Race], seeds: list[int]) -> tuple[list[dict], list[str]]:
    """What a uniformly random policy gets under each race's evaluation."""
    csv_rows, rows = [], []
    for race in races:
        returns = {
            seed: random_policy_evaluation(race.env_id, race.eval_episodes, seed)["mean_return"] for seed in seeds
        }
        csv_rows += [
            {"part": race.part, "row": "random policy", "seed": seed, "final_return": value}
            for seed, value in returns.items()
        ]
        stats = over_seeds(returns)
        rows.append(
            [
                race.env_id,
                f"{race.eval_episodes} episodes",
                mean_std(stats, "{:,.1f}"),
                best_of(stats, "{:,.1f}"),
                f"{race.threshold:g}",
            ]
        )
    lines = [
        "## Random play, for reference",
        "",
        f"A uniformly random policy under each race's evaluation (mean return over the episodes), {seeds_text(seeds)}:",
        "",
    ]
    header = ["task", "evaluation", "mean return, mean ± std over seeds", "best (seed k)", "threshold"]
    return csv_rows, lines + table(header, rows)


def warm_up(races: list[Race], throughput: bool, run_dir: pathlib.Path) -> None:
    """Pay one-time costs (imports, first kernels, allocator growth) for both sides before any clock starts."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True)
    for race in races:
        short = dataclasses.replace(race, limit_steps=2 * race.matched["num_envs"] * 128, eval_every=10**9)
        sb3_race(short, seed=10**4)
        ours_race(short, race.matched, seed=10**4, run_dir=run_dir)
    if throughput:
        sb3_throughput(seed=10**4, seconds=0.1)
        ours_throughput(PPO_FOR_THROUGHPUT, seed=10**4, seconds=0.1, run_dir=run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_seed_arguments(parser)
    parser.add_argument("--parts", nargs="+", default=["a", "b", "c"], choices=["a", "b", "c"])
    parser.add_argument("--throughput-seconds", type=float, default=None, help="per side, row and seed; default 10")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test of every path: short step limits and 2 s of throughput (give --seeds 0 and --results-dir)",
    )
    args = parser.parse_args()
    check_seed_arguments(parser, args)
    if args.quick and args.results_dir.resolve() == RESULTS.resolve():
        parser.error("--quick is a smoke test, not a result: give a --results-dir other than benchmarks/results")
    seeds, results_dir = args.seeds, args.results_dir
    seconds = args.throughput_seconds or (2.0 if args.quick else 10.0)
    races = [RACES[part] for part in ("a", "c") if part in args.parts]
    if args.quick:
        quick_limits = {"a": 16_384, "c": 1500}
        races = [dataclasses.replace(race, limit_steps=quick_limits[race.part]) for race in races]
    gym.logger.min_level = 40
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="vs_sb3-runs-"))
    warm_up(races, "b" in args.parts, run_dir)

    csv_rows, random_lines = random_part(races, seeds)
    sections, verdicts = [], []
    for race in races:
        rows, lines, race_verdicts = race_part(race, seeds, run_dir)
        csv_rows, sections, verdicts = csv_rows + rows, sections + lines, verdicts + race_verdicts
    if "b" in args.parts:
        rows, lines, throughput_verdicts = throughput_part(seeds, seconds, run_dir)
        csv_rows, sections, verdicts = csv_rows + rows, sections + lines, verdicts + throughput_verdicts

    results_dir.mkdir(parents=True, exist_ok=True)
    fields = [
        "part",
        "row",
        "seed",
        "reached",
        "seconds",
        "env_steps",
        "final_return",
        "steps_per_s",
        "grad_steps_per_1k",
    ]
    write_csv(results_dir / "vs_sb3.csv", csv_rows, fields)
    command = shlex.join(["python", "benchmarks/vs_sb3.py", *sys.argv[1:]])
    lines = [
        "# rl-suite against stable-baselines3",
        "",
        f"Machine: {machine()}, stable-baselines3 {stable_baselines3.__version__}.",
        f"Run: `{command}` on {datetime.date.today().isoformat()}.",
        "",
    ]
    if args.quick:
        lines += ["**Quick smoke run: step limits and time budgets cut short; these numbers are not a result.**", ""]
    lines += ["## Verdicts", "", *(f"- {line}" for line in verdicts), "", *random_lines, *sections]
    (results_dir / "vs_sb3.md").write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {results_dir / 'vs_sb3.md'} and {results_dir / 'vs_sb3.csv'}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
