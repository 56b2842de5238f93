"""The SB3 adapter: our VecEnvs under stable-baselines3's VecEnv API, its wrappers and its PPO."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecCheckNan, VecEnv, VecMonitor, VecNormalize

import rl_suite
from rl_suite.envs.adapters.sb3 import SB3VecEnv
from rl_suite.throughput import random_actions


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_steps_match_our_env_with_terminal_observation_and_truncation(env_id):
    n, seed = 4, 3
    ours = rl_suite.make(env_id, num_envs=n, seed=seed, max_episode_steps=40)
    sb3 = SB3VecEnv(rl_suite.make(env_id, num_envs=n, seed=seed, max_episode_steps=40))
    assert isinstance(sb3, VecEnv) and sb3.num_envs == n
    assert sb3.observation_space == ours.observation_space and sb3.action_space == ours.action_space
    obs = sb3.reset()
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (n, *ours.observation_space.shape)
    np.testing.assert_array_equal(obs, ours.reset().numpy())
    counts = {"terminated": 0, "truncated": 0}
    for action in random_actions(ours.action_space, n, ours.device, count=150, seed=5):
        ref_obs, ref_reward, terminated, truncated, info = ours.step(action)
        obs, rewards, dones, infos = sb3.step(action.numpy())
        np.testing.assert_array_equal(obs, ref_obs.numpy())
        np.testing.assert_array_equal(rewards, ref_reward.numpy())
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_ and len(infos) == n
        np.testing.assert_array_equal(dones, (terminated | truncated).numpy())
        for i in range(n):
            if not dones[i]:
                assert infos[i] == {}
                continue
            np.testing.assert_array_equal(infos[i]["terminal_observation"], info["final_obs"][i].numpy())
            assert infos[i]["TimeLimit.truncated"] == bool(truncated[i] and not terminated[i])
            assert infos[i]["episode"]["l"] == int(info["episode_length"][i])
            assert infos[i]["episode"]["r"] == pytest.approx(float(info["episode_return"][i]), rel=1e-6)
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
    assert counts["truncated"] > 0 and (env_id == "Pendulum-v1" or counts["terminated"] > 0)


def test_the_returned_arrays_are_copies():
    sb3 = SB3VecEnv(rl_suite.make("CartPole-v1", num_envs=2, seed=0))
    first = sb3.reset()
    kept = first.copy()
    sb3.step(np.array([0, 1]))
    np.testing.assert_array_equal(first, kept)


def test_vec_env_api_seed_attributes_methods_and_wrappers():
    sb3 = SB3VecEnv(rl_suite.make("CartPole-v1", num_envs=3))
    assert sb3.seed(7) == [7, 8, 9]
    first = sb3.reset()
    sb3.seed(7)
    np.testing.assert_array_equal(sb3.reset(), first)
    assert sb3.get_attr("num_envs") == [3, 3, 3] and sb3.get_attr("max_episode_steps", indices=1) == [500]
    assert sb3.render_mode is None and sb3.env_is_wrapped(VecMonitor) == [False] * 3
    sb3.set_attr("check_values", True)
    assert sb3.env.check_values is True
    assert sb3.env_method("__repr__") == [repr(sb3.env)] * 3
    with pytest.raises(ValueError, match=r"set_attr acts on the whole batch of 3 environments at once"):
        sb3.set_attr("check_values", False, indices=[0])
    with pytest.raises(AttributeError):
        sb3.get_attr("no_such_attribute")
    # our contract's checks reach SB3 users: a wrong action shape is a clear error
    with pytest.raises(ValueError, match=r"expects actions of shape \(3,\)"):
        sb3.step(np.zeros(2, dtype=np.int64))
    wrapped = VecNormalize(VecMonitor(VecCheckNan(sb3, raise_exception=True)))
    wrapped.reset()
    episodes = 0
    for _ in range(120):
        _, _, dones, infos = wrapped.step(np.array([sb3.action_space.sample() for _ in range(3)]))
        episodes += sum("episode" in infos[i] for i in np.flatnonzero(dones))
    assert episodes > 0
    wrapped.close()


def test_multiagent_envs_are_refused():
    with pytest.raises(ValueError, match=r"is a multi-agent env; SB3VecEnv exposes single-agent envs only"):
        SB3VecEnv(rl_suite.make("Spread-v0", num_envs=2))


def test_sb3_ppo_learns_cartpole_through_the_adapter():
    torch.set_num_threads(1)
    env = VecMonitor(SB3VecEnv(rl_suite.make("CartPole-v1", num_envs=8, seed=0)))
    # rl-zoo3's CartPole-v1 settings, with the linear schedules made constant
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        seed=0,
        device="cpu",
    )
    model.learn(total_timesteps=25_000)
    eval_env = VecMonitor(SB3VecEnv(rl_suite.make("CartPole-v1", num_envs=4, seed=123)))
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    assert mean_return > 150  # random play averages about 22
