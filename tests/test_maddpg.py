"""MADDPG's maths on hand-computed numbers, its settings, and its runs (resume, export) on the particle tasks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.agents.maddpg import MADDPG
from rl_suite.runner import RunConfig, Runner

OBS = gym.spaces.Box(-np.inf, np.inf, (2, 1), np.float32)  # two agents, one observation value each
STATE = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


def linear_agent(action_space, **settings) -> MADDPG:
    """MADDPG with linear actors and critics (no hidden layers), so that its networks can be written by hand."""
    return MADDPG(OBS, action_space, global_state_space=STATE, hidden=(), **settings)


def set_linear(ensemble, weights, biases) -> None:
    """Member i computes ``x @ weights[i] + biases[i]``."""
    with torch.no_grad():
        ensemble.out.weight.copy_(torch.tensor(weights, dtype=torch.float32))
        ensemble.out.bias.copy_(torch.tensor(biases, dtype=torch.float32).unsqueeze(1))


def test_continuous_targets_by_hand():
    """y_i = r + gamma (1 - done) Q'_i(o'_1, o'_2, a'_1, a'_2) with a'_j = tanh(w_j o'_j + b_j) in [-1, 1] (the
    actions the critics see, before scaling to the env's bounds)."""
    agent = linear_agent(gym.spaces.Box(0.0, 1.0, (2, 1), np.float32), gamma=0.9)
    set_linear(agent.actor_target, [[[0.5]], [[-1.0]]], [[0.0], [0.2]])
    # critic i's weights over (o'_1, o'_2, a'_1, a'_2)
    set_linear(agent.critic_target, [[[1.0], [0.0], [2.0], [0.0]], [[0.0], [-1.0], [0.0], [3.0]]], [[0.1], [0.0]])
    batch = {
        "next_obs": torch.tensor([[[0.4], [1.0]], [[-2.0], [0.5]]]),  # [B=2, A=2, 1]
        "rewards": torch.tensor([1.0, -0.5]),
        "discount": torch.tensor([0.9, 0.0]),  # the second transition ended in a termination
    }
    a1, a2 = np.tanh(0.5 * 0.4), np.tanh(-1.0 * 1.0 + 0.2)
    q1 = 1.0 * 0.4 + 2.0 * a1 + 0.1
    q2 = -1.0 * 1.0 + 3.0 * a2
    expected = torch.tensor([[1.0 + 0.9 * q1, -0.5], [1.0 + 0.9 * q2, -0.5]], dtype=torch.float32)
    torch.testing.assert_close(agent.td_targets(batch), expected)
    # with agent rewards each critic learns its own agent's reward
    agent = linear_agent(gym.spaces.Box(0.0, 1.0, (2, 1), np.float32), gamma=0.9, agent_rewards=True)
    batch["agent_reward"] = torch.tensor([[1.0, 10.0], [2.0, 20.0]])
    batch["discount"] = torch.zeros(2)
    torch.testing.assert_close(agent.td_targets(batch), torch.tensor([[1.0, 2.0], [10.0, 20.0]]))


def test_discrete_targets_use_one_hot_actions_among_the_available_ones():
    """The target actors' actions enter the critics one-hot; a masked action is never taken, even where its logit is
    the largest, and a logit margin of 50 makes the Gumbel sample the argmax."""
    agent = linear_agent(gym.spaces.MultiDiscrete([3, 3]), gamma=0.5)
    # agent 1's actor prefers action 2 (logit 100), which is masked: it takes action 1 (50) instead of 0 (0).
    # agent 2's actor prefers action 0.
    set_linear(agent.actor_target, [[[0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]]], [[0.0, 50.0, 100.0], [50.0, 0.0, 0.0]])
    # critic i: o'_1, o'_2, then the one-hot actions of agent 1 (3) and agent 2 (3)
    weights = [[[0.0], [0.0], [1.0], [2.0], [4.0], [8.0], [16.0], [32.0]]] * 2
    set_linear(agent.critic_target, weights, [[0.0], [1.0]])
    batch = {
        "next_obs": torch.zeros(1, 2, 1),
        "next_avail_actions": torch.tensor([[[True, True, False], [True, True, True]]]),
        "rewards": torch.tensor([3.0]),
        "discount": torch.tensor([0.5]),
    }
    q = 2.0 + 8.0  # agent 1 takes action 1, agent 2 action 0
    torch.testing.assert_close(agent.td_targets(batch), torch.tensor([[3.0 + 0.5 * q], [3.0 + 0.5 * (q + 1.0)]]))


def test_actor_i_follows_critic_i_only():
    """Critic i values agent i's fresh action with the others' stored ones: with critic 1 rewarding agent 1's action
    and critic 2 indifferent to everything, one actor step moves agent 1's actor towards larger actions and leaves
    agent 2's as it was."""
    agent = linear_agent(gym.spaces.Box(-1.0, 1.0, (2, 1), np.float32), lr_actor=0.1, lr_critic=0.0, action_reg=0.0)
    set_linear(agent.critic, [[[0.0], [0.0], [1.0], [0.0]], [[0.0], [0.0], [0.0], [0.0]]], [[0.0], [0.0]])
    agent.critic_target.load_state_dict(agent.critic.state_dict())
    before = agent.actor.out.bias.detach().clone()
    batch = {
        "obs": torch.ones(8, 2, 1),
        "actions": torch.zeros(8, 2, 1),
        "next_obs": torch.ones(8, 2, 1),
        "rewards": torch.zeros(8),
        "discount": torch.zeros(8),
    }
    agent._update_once(batch)
    change = agent.actor.out.bias.detach() - before
    assert change[0, 0, 0] > 0.05 and change[1, 0, 0] == 0.0, change


def test_the_shared_critic_tells_agents_apart_by_id():
    agent = MADDPG(OBS, gym.spaces.Box(0.0, 1.0, (2, 1), np.float32), global_state_space=STATE, shared_critic=True)
    assert agent.critic.members == 1 and agent.critic.hidden[0].weight.shape[1] == 2 * (1 + 1) + 2
    obs, actions = torch.randn(5, 2, 1), torch.rand(5, 2, 1)
    q = agent._q(agent.critic, obs, actions)
    assert q.shape == (2, 5) and not torch.allclose(q[0], q[1])  # the same joint input, told apart by the id


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"batch_size": 2048, "buffer_size": 1000}, r"batch_size \(2048\) must not exceed buffer_size \(1000\)"),
        ({"utd_ratio": 0.0}, r"maddpg: utd_ratio=0.0 is out of range \(> 0\)"),
        ({"gumbel_temperature": -1.0}, r"maddpg: gumbel_temperature=-1.0 is out of range \(> 0\)"),
        ({"batch_size": 0}, r"maddpg: batch_size=0 is out of range \(>= 1\)"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        MADDPG(OBS, gym.spaces.MultiDiscrete([3, 3]), global_state_space=STATE, **settings)


def test_single_agent_envs_are_refused():
    from rl_suite import make

    with pytest.raises(ValueError, match="is a single-agent env, and maddpg trains multi-agent envs"):
        MADDPG.for_env(make("Pendulum-v1", num_envs=2))


def run(run_dir, env_id, total, resume=False, env_kwargs=None, **settings):
    from rl_suite import make

    torch.manual_seed(0)
    env = make(env_id, num_envs=4, seed=3, **(env_kwargs or {}))
    agent = MADDPG.for_env(env, learning_starts=64, batch_size=32, utd_ratio=0.25, **settings)
    config = RunConfig(
        algo="maddpg",
        env_id=env_id,
        env_kwargs=env_kwargs or {},
        num_envs=4,
        total_steps=total,
        eval_episodes=0,
        checkpoint_every_steps=200,
        progress=False,
        log_every_steps=10**9,
    )
    Runner(agent, env, config, run_dir=run_dir, resume=resume).run()
    return agent


@pytest.mark.parametrize(
    "env_id, env_kwargs, settings",
    [
        ("Spread-v0", {"continuous_actions": True}, {}),
        ("Tag-v0", {"prey": "learned"}, {"agent_rewards": True, "shared_critic": True}),
    ],
    ids=["continuous-spread", "discrete-tag"],
)
def test_resumed_run_ends_bitwise_equal(tmp_path, env_id, env_kwargs, settings):
    straight = run(tmp_path / "straight", env_id, 400, env_kwargs=env_kwargs, **settings)
    run(tmp_path / "split", env_id, 200, env_kwargs=env_kwargs, **settings)
    resumed = run(tmp_path / "split", env_id, 400, resume=True, env_kwargs=env_kwargs, **settings)
    assert straight.updates == resumed.updates > 0
    for name, module in straight.modules.items():
        for key, value in module.state_dict().items():
            assert torch.equal(value, resumed.modules[name].state_dict()[key]), (name, key)
