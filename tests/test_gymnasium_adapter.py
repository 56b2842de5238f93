"""The gymnasium adapter: any gymnasium id behind the same contract, with gymnasium's auto-reset translated into a
same-step reset with final_obs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

import rl_suite
from rl_suite.envs.adapters.gymnasium import GymnasiumVecEnv
from rl_suite.throughput import random_actions


def test_matches_gymnasium_vector_env_with_final_obs_and_statistics():
    n, seed = 6, 3
    env = rl_suite.make("gym:CartPole-v1", num_envs=n, seed=seed)
    reference = gym.make_vec(
        "CartPole-v1", num_envs=n, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
    )
    ref_obs, _ = reference.reset(seed=seed)
    np.testing.assert_array_equal(env.reset().numpy(), ref_obs)
    returns, lengths, ended = np.zeros(n), np.zeros(n, dtype=np.int64), 0
    for action in random_actions(env.action_space, n, env.device, count=300, seed=4):
        ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = reference.step(action.numpy())
        obs, reward, terminated, truncated, info = env.step(action)
        np.testing.assert_array_equal(obs.numpy(), ref_obs)
        np.testing.assert_array_equal(reward.numpy(), ref_reward)
        np.testing.assert_array_equal(terminated.numpy(), ref_terminated)
        np.testing.assert_array_equal(truncated.numpy(), ref_truncated)
        returns += ref_reward
        lengths += 1
        done = ref_terminated | ref_truncated
        expected_final = ref_obs.copy()
        for i in np.flatnonzero(done):
            expected_final[i] = ref_info["final_obs"][i]
        np.testing.assert_array_equal(info["final_obs"].numpy(), expected_final)
        np.testing.assert_array_equal(info["done"].numpy(), done)
        np.testing.assert_array_equal(info["episode_return"].numpy(), np.where(done, returns, 0))
        np.testing.assert_array_equal(info["episode_length"].numpy(), np.where(done, lengths, 0))
        returns[done], lengths[done] = 0, 0
        ended += int(done.sum())
    assert ended > 20


def test_continuous_actions_and_metadata():
    env = rl_suite.make("gym:Pendulum-v1", num_envs=3, seed=0)
    assert env.max_episode_steps == 200 and env.env_id == "gym:Pendulum-v1"
    assert env.observation_space.shape == (3,) and env.action_space.shape == (1,)
    env.reset()
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(3, 1))
    assert truncated.all() and not terminated.any()
    assert (info["episode_length"] == 200).all()
    assert not torch.equal(obs, info["final_obs"])


def test_a_task_with_no_native_version_runs():
    env = rl_suite.make("gym:FrozenLake-v1", num_envs=2, seed=0, is_slippery=False)
    obs = env.reset()  # a Discrete observation becomes one-hot
    assert obs.shape == (2, 16) and torch.equal(obs.sum(1), torch.ones(2)) and obs[0, 0] == 1
    right, down = torch.tensor([2, 2]), torch.tensor([1, 1])
    for action in (right, right, down, down, down, right):
        obs, reward, terminated, *_ = env.step(action)
    assert terminated.all() and (reward == 1).all()


def test_a_single_gymnasium_env_and_a_vector_env_instance():
    single = GymnasiumVecEnv(gym.make("MountainCar-v0"), seed=0)
    assert single.num_envs == 1 and single.reset().shape == (1, 2)
    single.step(torch.tensor([2]))
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("Acrobot-v1")] * 3, autoreset_mode=AutoresetMode.SAME_STEP)
    env = GymnasiumVecEnv(vector, seed=1)
    assert env.num_envs == 3 and env.reset().shape == (3, 6)
    with pytest.raises(ValueError, match=r"num_envs=5, but the given vector env holds 3"):
        GymnasiumVecEnv(vector, num_envs=5)


def test_async_vectorization_gives_the_same_trajectories():
    sync = rl_suite.make("gym:CartPole-v1", num_envs=2, seed=9)
    with rl_suite.make("gym:CartPole-v1", num_envs=2, seed=9, vectorization="async") as asynchronous:
        assert torch.equal(sync.reset(), asynchronous.reset())
        for action in random_actions(sync.action_space, 2, sync.device, count=50):
            assert torch.equal(sync.step(action)[0], asynchronous.step(action)[0])


def test_the_construction_seed_seeds_the_first_reset_only():
    env = rl_suite.make("gym:CartPole-v1", num_envs=2, seed=5)
    first = env.reset().clone()
    assert not torch.equal(env.reset(), first)
    assert torch.equal(env.reset(seed=5), first)
