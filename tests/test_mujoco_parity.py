"""Parity of the MuJoCo tasks (CPU backend) with gymnasium's v5 environments on the same states and actions.

gymnasium steps one ``MjData`` with ``mj_step`` and ``mj_rnePostConstraint``; our CPU backend steps one ``mjData``
per environment with the same calls on native threads, so the physics agree bit for bit and observations and
rewards agree to float32 rounding (ours are float32, gymnasium's float64).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rl_suite
from rl_suite.registry import MUJOCO_TASKS

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

NUM_ENVS, STEPS = 4, 8


def reference(name: str, **kwargs):
    return gym.make(f"{name}-v5", **kwargs).unwrapped


def assert_close(ours, expected, what: str):
    np.testing.assert_allclose(np.asarray(ours, dtype=np.float64), expected, rtol=2e-5, atol=2e-5, err_msg=what)


def start_states(ref, num: int, rng: np.random.Generator):
    """gymnasium's own initial states, advanced by a few random steps each so that contacts, joint limits and
    unhealthy states appear."""
    qpos, qvel = [], []
    for i in range(num):
        ref.reset(seed=i)
        for _ in range(7 * i):
            ref.do_simulation(rng.uniform(ref.action_space.low, ref.action_space.high), ref.frame_skip)
        qpos.append(ref.data.qpos.copy())
        qvel.append(ref.data.qvel.copy())
    return np.stack(qpos), np.stack(qvel)


@pytest.mark.parametrize("name", MUJOCO_TASKS)
def test_steps_match_gymnasium_from_the_same_states(name):
    rng = np.random.default_rng(0)
    ref = reference(name)
    env = rl_suite.make(f"{name}-v5", num_envs=NUM_ENVS, seed=0)
    env.reset()
    qpos, qvel = start_states(ref, NUM_ENVS, rng)
    obs = env.set_state(torch.from_numpy(qpos), torch.from_numpy(qvel)).clone()
    # slightly beyond the control range: MuJoCo clamps the control, while the control cost sees the raw action
    low, high = ref.action_space.low * 1.1, ref.action_space.high * 1.1
    actions = rng.uniform(low, high, size=(STEPS, NUM_ENVS, len(low))).astype(np.float32)

    ours = []
    for t in range(STEPS):
        step_obs, reward, terminated, truncated, info = env.step(torch.from_numpy(actions[t]))
        ours.append((info["final_obs"].clone(), reward.clone(), terminated.clone(), truncated.clone()))

    compared_steps = 0
    for i in range(NUM_ENVS):
        ref.reset(seed=0)  # mj_resetData first, as our reset does: it zeroes cfrc_ext
        ref.set_state(qpos[i], qvel[i])
        assert_close(obs[i], ref._get_obs(), f"{name} env {i}: observation after set_state")
        for t in range(STEPS):
            expected_obs, expected_reward, expected_terminated, _, _ = ref.step(actions[t, i])
            final_obs, reward, terminated, truncated = (x[i] for x in ours[t])
            assert_close(final_obs, expected_obs, f"{name} env {i} step {t}: observation")
            assert_close(reward, expected_reward, f"{name} env {i} step {t}: reward")
            assert bool(terminated) == expected_terminated, f"{name} env {i} step {t}: terminated"
            assert not bool(truncated)
            compared_steps += 1
            if expected_terminated:  # ours has reset this environment; gymnasium's has not
                break
    assert compared_steps >= NUM_ENVS * 2


@pytest.mark.parametrize("name", MUJOCO_TASKS)
def test_initial_observations_match_gymnasium_for_our_initial_states(name):
    ref = reference(name)
    env = rl_suite.make(f"{name}-v5", num_envs=3, seed=1)
    obs = env.reset()
    qpos, qvel = (x.numpy() for x in env.get_state())
    for i in range(3):
        ref.reset(seed=0)
        ref.set_state(qpos[i], qvel[i])
        assert_close(obs[i], ref._get_obs(), f"{name} env {i}: initial observation")


def test_spaces_frame_skip_and_time_limits_match_gymnasium():
    for name in MUJOCO_TASKS:
        spec = gym.spec(f"{name}-v5")
        ref = reference(name)
        env = rl_suite.make(f"{name}-v5", num_envs=1)
        assert env.observation_space.shape == ref.observation_space.shape, name
        np.testing.assert_array_equal(env.action_space.low, ref.action_space.low)
        np.testing.assert_array_equal(env.action_space.high, ref.action_space.high)
        assert env.frame_skip == ref.frame_skip and env.dt == pytest.approx(ref.dt), name
        assert env.max_episode_steps == spec.max_episode_steps, name
        assert env.reward_threshold == spec.reward_threshold, name


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("HalfCheetah", {"forward_reward_weight": 2.0, "ctrl_cost_weight": 0.3}),
        ("Ant", {"include_cfrc_ext_in_observation": False, "contact_cost_weight": 1e-3, "main_body": "torso"}),
        ("Humanoid", {"include_cinert_in_observation": False, "include_cvel_in_observation": False}),
        ("Hopper", {"exclude_current_positions_from_observation": False, "healthy_angle_range": (-0.1, 0.1)}),
    ],
)
def test_task_keywords_mean_what_they_mean_in_gymnasium(name, kwargs):
    rng = np.random.default_rng(1)
    ref = reference(name, **kwargs)
    env = rl_suite.make(f"{name}-v5", num_envs=2, seed=0, **kwargs)
    assert env.observation_space.shape == ref.observation_space.shape
    env.reset()
    qpos, qvel = start_states(ref, 2, rng)
    env.set_state(torch.from_numpy(qpos), torch.from_numpy(qvel))
    action = rng.uniform(ref.action_space.low, ref.action_space.high, (2, len(ref.action_space.low)))
    _, reward, terminated, _, info = env.step(torch.from_numpy(action.astype(np.float32)))
    for i in range(2):
        ref.reset(seed=0)
        ref.set_state(qpos[i], qvel[i])
        expected_obs, expected_reward, expected_terminated, _, _ = ref.step(action[i].astype(np.float32))
        assert_close(info["final_obs"][i], expected_obs, f"{name} {kwargs}: observation")
        assert_close(reward[i], expected_reward, f"{name} {kwargs}: reward")
        assert bool(terminated[i]) == expected_terminated
