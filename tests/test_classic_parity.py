"""Parity with gymnasium: the same states (through set_state) and the same actions give the same observations,
rewards, terminations and truncations, step by step, including episode ends and the time limit."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite

N = 12  # environments stepped side by side


class GymReference:
    """``n`` gymnasium environments (with their TimeLimit) stepped one by one, as the reference."""

    def __init__(self, env_id: str, n: int, seed: int):
        self.envs = [gym.make(env_id, disable_env_checker=True) for _ in range(n)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])

    def states(self) -> np.ndarray:
        return np.stack([np.asarray(env.unwrapped.state, dtype=np.float64) for env in self.envs])

    def step(self, actions: np.ndarray):
        results = [env.step(a) for env, a in zip(self.envs, actions, strict=True)]
        obs, reward, terminated, truncated, _ = (np.array(column) for column in zip(*results, strict=True))
        return obs.astype(np.float32), reward.astype(np.float64), terminated, truncated

    def reset(self, index: int) -> np.ndarray:
        return self.envs[index].reset()[0]


# The share of random actions, by environment: controlled environments drive their episodes to an end (or balance
# until the time limit), random ones wander until the time limit (or fall).
NOISE = np.linspace(0.02, 1.0, N)


def with_noise(controlled_action, random_action):
    def policy(obs, rng):
        random = rng.random(len(obs)) < NOISE
        controlled, noise = controlled_action(obs), random_action(len(obs), rng)
        return np.where(random.reshape(-1, *[1] * (controlled.ndim - 1)), noise, controlled)

    return policy


def discrete(n):
    return lambda count, rng: rng.integers(0, n, count)


def continuous(low, high):  # beyond the action bounds on purpose: clipping is part of the dynamics
    return lambda count, rng: rng.uniform(low, high, size=(count, 1)).astype(np.float32)


TASKS = [  # id, policy, steps to run, expect terminations, expect truncations
    (
        "CartPole-v1",
        with_noise(lambda o: ((o[:, 2] + 0.5 * o[:, 3] + 0.05 * o[:, 1]) > 0).astype(np.int64), discrete(2)),
        1100,
        True,
        True,
    ),
    (
        "Pendulum-v1",
        with_noise(lambda o: np.clip(-3 * o[:, 1:2] - o[:, 2:3], -2.5, 2.5).astype(np.float32), continuous(-2.5, 2.5)),
        420,
        False,
        True,
    ),
    # Pumping energy in: torque along the elbow's velocity for Acrobot, force along the velocity for the cars.
    ("Acrobot-v1", with_noise(lambda o: np.where(o[:, 5] > 0, 2, 0), discrete(3)), 1100, True, True),
    ("MountainCar-v0", with_noise(lambda o: np.where(o[:, 1] >= 0, 2, 0), discrete(3)), 450, True, True),
    (
        "MountainCarContinuous-v0",
        with_noise(lambda o: np.where(o[:, 1:2] >= 0, 1.2, -1.2).astype(np.float32), continuous(-1.3, 1.3)),
        2100,
        True,
        True,
    ),
]

# Observations and rewards are float32 in the contract. With float64 physics they agree with gymnasium to within
# one float32 rounding; with float32 physics, one step from the same state differs by float32 arithmetic.
TOLERANCE = {torch.float64: dict(rtol=3e-7, atol=5e-8), torch.float32: dict(rtol=1e-5, atol=2e-5)}
# Float64 physics against gymnasium's state. Gymnasium itself rounds to float32 in places: Pendulum's torque term
# (a float32 action times a Python float stays float32 under numpy 2) and MountainCarContinuous's stored state.
STATE_TOLERANCE = {"Pendulum-v1": dict(rtol=1e-7, atol=1e-7), "MountainCarContinuous-v0": dict(rtol=1e-7, atol=1e-7)}
EXACT_STATE = dict(rtol=1e-9, atol=1e-9)


def as_gym_actions(actions: np.ndarray, env: rl_suite.VecEnv) -> np.ndarray:
    return actions if isinstance(env.action_space, gym.spaces.Discrete) else actions.astype(np.float32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("env_id, policy, steps, expect_terminated, expect_truncated", TASKS, ids=[t[0] for t in TASKS])
def test_step_by_step_parity(env_id, policy, steps, expect_terminated, expect_truncated, dtype):
    tolerance = TOLERANCE[dtype]
    rng = np.random.default_rng(0)
    reference = GymReference(env_id, N, seed=100)
    env = rl_suite.make(env_id, num_envs=N, seed=0, dtype=dtype)
    env.reset()
    obs = env.set_state(reference.states()).numpy()
    np.testing.assert_allclose(obs, reference.obs, **tolerance)
    seen_terminated = seen_truncated = 0

    for _ in range(steps):
        actions = policy(reference.obs, rng)
        ref_obs, ref_reward, ref_terminated, ref_truncated = reference.step(as_gym_actions(actions, env))
        obs, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))

        np.testing.assert_array_equal(terminated.numpy(), ref_terminated)
        np.testing.assert_array_equal(truncated.numpy(), ref_truncated)
        np.testing.assert_allclose(reward.numpy(), ref_reward, **tolerance)
        # gymnasium returns the last observation of an ended episode; we return it as final_obs.
        np.testing.assert_allclose(info["final_obs"].numpy(), ref_obs, **tolerance)
        done = ref_terminated | ref_truncated
        np.testing.assert_allclose(obs.numpy()[~done], ref_obs[~done], **tolerance)
        if dtype == torch.float64:
            live = env.get_state().numpy()[~done]
            state_tolerance = STATE_TOLERANCE.get(env_id, EXACT_STATE)
            np.testing.assert_allclose(live, reference.states()[~done], **state_tolerance)

        # Restart the ended reference episodes, and give ours the same initial states. Then re-align every
        # state exactly, so that each step is compared from identical states (float32 rounding must not pile up
        # in chaotic dynamics).
        for i in np.flatnonzero(done):
            ref_obs[i] = reference.reset(i)
        reference.obs = ref_obs
        obs = env.set_state(reference.states()).numpy()
        np.testing.assert_allclose(obs, ref_obs, **tolerance)
        seen_terminated += int(ref_terminated.sum())
        seen_truncated += int(ref_truncated.sum())

    # The run covered what it claims to: episodes that ended by termination and by the time limit.
    assert (seen_terminated > 0) == expect_terminated
    assert (seen_truncated > 0) == expect_truncated


@pytest.mark.parametrize("env_id, policy", [(t[0], t[1]) for t in TASKS], ids=[t[0] for t in TASKS])
def test_free_running_trajectory_matches_in_float64(env_id, policy):
    """Without re-aligning states, 40 float64 steps stay within round-off of gymnasium's trajectory."""
    rng = np.random.default_rng(1)
    reference = GymReference(env_id, N, seed=7)
    env = rl_suite.make(env_id, num_envs=N, seed=0, dtype=torch.float64)
    env.reset()
    env.set_state(reference.states())
    for _ in range(40):
        actions = policy(reference.obs, rng)
        ref_obs, ref_reward, ref_terminated, _ = reference.step(as_gym_actions(actions, env))
        _, reward, terminated, _, info = env.step(torch.as_tensor(actions))
        reference.obs = ref_obs
        if ref_terminated.any():
            break
        # Round-off may grow along a trajectory, but stays far below float32 resolution.
        state_tolerance = STATE_TOLERANCE.get(env_id, dict(rtol=1e-8, atol=1e-8))
        np.testing.assert_allclose(env.get_state().numpy(), reference.states(), **state_tolerance)
        np.testing.assert_allclose(reward.numpy(), ref_reward, **TOLERANCE[torch.float64])
        np.testing.assert_array_equal(terminated.numpy(), ref_terminated)


def states_on_both_sides(env_id):
    """States just inside and just outside each termination boundary, with actions that keep them there."""
    if env_id == "CartPole-v1":
        edge = [2.4 - 1e-4, 2.4 + 1e-4]
        theta = 12 * 2 * np.pi / 360
        states = [[x, 0, 0, 0] for x in edge] + [[-x, 0, 0, 0] for x in edge]
        states += [[0, 0, t, 0] for t in (theta - 1e-4, theta + 1e-4, -theta + 1e-4, -theta - 1e-4)]
        return np.array(states), np.zeros(len(states), dtype=np.int64)
    if env_id == "Acrobot-v1":
        # Terminates when the tip is above the line: -cos(t1) - cos(t1 + t2) > 1, which is 1 at t1 = 2 pi / 3, t2 = 0.
        # From rest the tip sinks during the step: ends below the line from t1 = 2.144, above it from t1 = 2.2.
        states = np.array([[2.144, 0, 0, 0], [2.2, 0, 0, 0], [-2.144, 0, 0, 0], [-2.2, 0, 0, 0], [2.044, 0, 1.0, 0]])
        return states, np.ones(len(states), dtype=np.int64)
    if env_id == "MountainCar-v0":
        states = np.array([[0.5 - 2e-3, 0.0], [0.5 - 1e-4, 0.003], [0.5, -0.001], [0.49, 0.02], [-1.2, -0.05]])
        return states, np.full(len(states), 2, dtype=np.int64)
    if env_id == "MountainCarContinuous-v0":
        states = np.array([[0.45 - 2e-3, 0.0], [0.45 - 1e-4, 0.003], [0.45, -0.001], [0.44, 0.02], [-1.2, -0.05]])
        return states, np.ones((len(states), 1), dtype=np.float32)
    raise KeyError(env_id)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_termination_boundaries(env_id, dtype):
    states, actions = states_on_both_sides(env_id)
    reference = GymReference(env_id, len(states), seed=0)
    for gym_env, state in zip(reference.envs, states, strict=True):
        gym_env.unwrapped.state = state.copy()
    ref_obs, ref_reward, ref_terminated, _ = reference.step(actions)
    env = rl_suite.make(env_id, num_envs=len(states), dtype=dtype)
    env.reset()
    env.set_state(states)
    _, reward, terminated, truncated, info = env.step(torch.as_tensor(actions))
    assert ref_terminated.any() and not ref_terminated.all()  # both sides of the boundary are exercised
    np.testing.assert_array_equal(terminated.numpy(), ref_terminated)
    np.testing.assert_allclose(reward.numpy(), ref_reward, **TOLERANCE[dtype])
    np.testing.assert_allclose(info["final_obs"].numpy(), ref_obs, **TOLERANCE[dtype])
    assert not truncated.any()


@pytest.mark.parametrize("env_id", [t[0] for t in TASKS])
def test_initial_states_follow_gymnasium_distribution(env_id):
    """Initial states are uniform over gymnasium's ranges: same bounds, and mean and spread of a uniform."""
    env = rl_suite.make(env_id, num_envs=20000, seed=3)
    env.reset()
    states = env.get_state().numpy()
    low, high = {  # gymnasium's reset ranges
        "CartPole-v1": ([-0.05] * 4, [0.05] * 4),
        "Pendulum-v1": ([-np.pi, -1.0], [np.pi, 1.0]),
        "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
        "MountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
        "MountainCarContinuous-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    }[env_id]
    low, high = np.array(low), np.array(high)
    assert (states >= low - 1e-7).all() and (states <= high + 1e-7).all()
    width = high - low
    random_dims = width > 0
    mean, std = states.mean(0), states.std(0)
    np.testing.assert_allclose(mean[random_dims], ((low + high) / 2)[random_dims], atol=0.02 * width.max())
    np.testing.assert_allclose(std[random_dims], (width / np.sqrt(12))[random_dims], rtol=0.03)
    fixed = states[:, ~random_dims]
    np.testing.assert_array_equal(fixed, np.broadcast_to(low[~random_dims], fixed.shape))
