"""Learning tests: each agent, with the shipped settings, a fixed seed and a small budget, reaches an honest
threshold on its evaluation (the deterministic policy, over a batch of fresh episodes)."""

from __future__ import annotations

import pytest

from rl_suite.checkpoint import seed_everything
from rl_suite.cli import tuned_settings
from rl_suite.config import split_overrides
from rl_suite.registry import load_algorithm, make
from rl_suite.runner import RunConfig, Runner


def train(algo_name: str, env_id: str, tmp_path, **overrides) -> dict:
    algo = load_algorithm(algo_name)
    settings = {**tuned_settings(algo, env_id), "progress": False, **overrides}
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo_name, env_id=env_id, **run_values)
    seed_everything(config.seed)
    env = make(env_id, num_envs=config.num_envs, seed=config.seed)
    agent = algo(env.observation_space, env.action_space, algo.Config(**agent_values))
    return Runner(agent, env, config, run_dir=tmp_path).run()


@pytest.mark.parametrize(
    "algo, env_id, threshold, episodes, budget",
    [
        ("ppo", "CartPole-v1", 475.0, 100, 100_000),
        ("ppo", "Pendulum-v1", -300.0, 100, 150_000),
        ("sac", "Pendulum-v1", -200.0, 20, 40_000),
        ("pql", "Pendulum-v1", -200.0, 20, 40_000),  # concurrent workers: thread timing varies from run to run
    ],
    ids=["ppo-cartpole", "ppo-pendulum", "sac-pendulum", "pql-pendulum"],
)
def test_reaches_the_threshold(tmp_path, algo, env_id, threshold, episodes, budget):
    summary = train(
        algo, env_id, tmp_path, seed=0, stop_at_return=threshold, eval_episodes=episodes, total_steps=budget
    )
    final = summary["final_eval"]
    assert final["episodes"] == episodes
    assert final["mean_return"] >= threshold, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget
