"""The VecEnv contract on the native simulators: auto-reset, final_obs, episode statistics, time limits, state access,
seeding and per-environment random streams."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import rl_suite
from rl_suite.throughput import random_actions

CLASSIC = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def rollout(env, steps, seed=0):
    """Observations, rewards and flags of ``steps`` steps under a fixed sequence of random actions."""
    actions = random_actions(env.action_space, env.num_envs, env.device, count=steps, seed=seed)
    out = [env.reset().clone()]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out += [obs.clone(), reward.clone(), terminated.clone(), truncated.clone(), info["final_obs"].clone()]
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", CLASSIC)
def test_shapes_dtypes_and_devices(env_id, device):
    env = rl_suite.make(env_id, num_envs=7, device=device, seed=0)
    obs = env.reset()
    assert obs.shape == (7, *env.observation_space.shape) and obs.dtype == torch.float32
    action = random_actions(env.action_space, 7, env.device, count=1)[0]
    obs, reward, terminated, truncated, info = env.step(action)
    assert obs.shape == (7, *env.observation_space.shape) and obs.dtype == torch.float32
    assert reward.shape == (7,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == info["done"].dtype == torch.bool
    assert info["final_obs"].shape == obs.shape
    assert info["episode_return"].dtype == torch.float32 and info["episode_length"].shape == (7,)
    for tensor in (obs, reward, terminated, truncated, *info.values()):
        assert tensor.device == env.device
    assert env.observation_space.contains(
        obs[0].cpu().numpy().clip(env.observation_space.low, env.observation_space.high)
    )


def test_auto_reset_reports_final_obs_and_episode_statistics():
    env = rl_suite.make("CartPole-v1", num_envs=64, seed=0)
    obs = env.reset()
    running_return, running_length = torch.zeros(64), torch.zeros(64, dtype=torch.int64)
    actions = random_actions(env.action_space, 64, env.device, count=200, seed=1)
    ended = 0
    for action in actions:
        previous = obs.clone()
        obs, reward, terminated, truncated, info = env.step(action)
        running_return += reward
        running_length += 1
        done = info["done"]
        assert torch.equal(done, terminated | truncated)
        # Where nothing ended, obs is the continuing episode's and final_obs equals it.
        assert torch.equal(info["final_obs"][~done], obs[~done])
        assert not torch.equal(obs[~done], previous[~done]) or not (~done).any()
        # Where an episode ended, final_obs is the terminal observation and obs a fresh start.
        final = info["final_obs"][done]
        fell = (final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * torch.pi / 360)
        assert torch.equal(fell, terminated[done])
        assert (obs[done].abs() <= 0.05).all()
        # Returns and lengths of ended episodes; zeros elsewhere.
        assert torch.equal(info["episode_return"][done], running_return[done])
        assert torch.equal(info["episode_length"][done].long(), running_length[done])
        assert (info["episode_return"][~done] == 0).all() and (info["episode_length"][~done] == 0).all()
        running_return[done], running_length[done] = 0, 0
        ended += int(done.sum())
    assert ended > 100  # random CartPole episodes are short: the path above ran many times


def test_time_limit_is_truncation_and_restarts_the_episode():
    env = rl_suite.make("Pendulum-v1", num_envs=3, seed=0, max_episode_steps=5)
    env.reset()
    zero = torch.zeros(3, 1)
    for step in range(1, 13):
        obs, _, terminated, truncated, info = env.step(zero)
        assert not terminated.any()
        assert truncated.all() == (step % 5 == 0) and truncated.any() == (step % 5 == 0)
        if step % 5 == 0:
            assert (info["episode_length"] == 5).all()
            assert not torch.equal(obs, info["final_obs"])


def test_terminated_and_truncated_can_both_be_true():
    """As in gymnasium's TimeLimit: an episode that terminates on its last allowed step is also truncated."""
    env = rl_suite.make("CartPole-v1", num_envs=2, seed=0, max_episode_steps=3)
    env.reset()
    push = torch.ones(2, dtype=torch.int64)
    env.step(push)
    env.step(push)
    env.set_state(torch.tensor([[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))  # env 0 will leave the track
    _, _, terminated, truncated, info = env.step(push)
    assert terminated.tolist() == [True, False]
    assert truncated.tolist() == [True, True]
    assert info["episode_length"].tolist() == [3, 3]


def test_set_state_keeps_the_step_counter_and_returns_observations():
    env = rl_suite.make("CartPole-v1", num_envs=4, seed=0, max_episode_steps=5)
    env.reset()
    still = torch.tensor([0, 1, 0, 1])
    for _ in range(3):
        env.step(still)
    state = torch.zeros(4, 4)
    obs = env.set_state(state)
    assert torch.equal(obs, state) and torch.equal(env.get_state(), state)
    _, _, _, truncated, _ = env.step(still)
    assert not truncated.any()
    _, _, _, truncated, info = env.step(still)
    assert truncated.all() and (info["episode_length"] == 5).all()


def test_set_state_of_chosen_environments_and_get_state_returns_a_copy():
    env = rl_suite.make("Acrobot-v1", num_envs=5, seed=0)
    env.reset()
    before = env.get_state()
    before[:] = 99.0  # a copy: the environment does not change
    assert not (env.get_state() == 99.0).any()
    original = env.get_state()
    chosen = torch.tensor([1, 3])
    new = torch.tensor([[0.1, 0.2, 0.3, 0.4], [-0.1, -0.2, -0.3, -0.4]])
    obs = env.set_state(new, env_ids=chosen)
    state = env.get_state()
    assert torch.equal(state[chosen], new)
    assert torch.equal(state[[0, 2, 4]], original[[0, 2, 4]])
    assert torch.allclose(
        obs[1],
        torch.tensor(
            [
                torch.cos(torch.tensor(0.1)),
                torch.sin(torch.tensor(0.1)),
                torch.cos(torch.tensor(0.2)),
                torch.sin(torch.tensor(0.2)),
                0.3,
                0.4,
            ]
        ),
    )


def test_float64_physics_still_observes_float32():
    env = rl_suite.make("Pendulum-v1", num_envs=2, seed=0, dtype=torch.float64)
    assert env.reset().dtype == torch.float32
    assert env.get_state().dtype == torch.float64
    obs, reward, *_ = env.step(torch.zeros(2, 1, dtype=torch.float64))
    assert obs.dtype == reward.dtype == torch.float32


@pytest.mark.parametrize("env_id", CLASSIC)
def test_same_seed_same_trajectories_and_different_seed_differs(env_id):
    first = rollout(rl_suite.make(env_id, num_envs=16, seed=5), steps=300)
    again = rollout(rl_suite.make(env_id, num_envs=16, seed=5), steps=300)
    other = rollout(rl_suite.make(env_id, num_envs=16, seed=6), steps=300)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], other[0])


def test_reset_with_a_seed_restarts_the_streams():
    env = rl_suite.make("CartPole-v1", num_envs=8)
    first = env.reset(seed=3).clone()
    second = env.reset().clone()  # streams continue: a new draw
    assert not torch.equal(first, second)
    assert torch.equal(env.reset(seed=3), first)
    assert torch.equal(rl_suite.make("CartPole-v1", num_envs=8, seed=3).reset(), first)


@pytest.mark.parametrize("env_id", CLASSIC)
def test_each_environment_has_its_own_stream(env_id):
    """Environment i's trajectory depends on the seed and i only: not on num_envs, and not on when others reset."""
    small = rl_suite.make(env_id, num_envs=3, seed=11)
    large = rl_suite.make(env_id, num_envs=40, seed=11)
    actions = random_actions(small.action_space, 40, small.device, count=400, seed=2)
    assert torch.equal(small.reset(), large.reset()[:3])
    for action in actions:
        small_out = small.step(action[:3])
        large_out = large.step(action)
        for a, b in zip(small_out[:4], large_out[:4], strict=True):
            assert torch.equal(a, b[:3])


@pytest.mark.parametrize("env_id", CLASSIC)
def test_masked_and_indexed_resets_give_identical_trajectories(env_id):
    """The GPU path (masked, no host sync) and the CPU path (by index) draw the same initial states."""
    options = dict(num_envs=32, seed=4, max_episode_steps=150)
    indexed = rollout(rl_suite.make(env_id, masked_resets=False, **options), steps=600)
    masked = rollout(rl_suite.make(env_id, masked_resets=True, **options), steps=600)
    assert all(torch.equal(a, b) for a, b in zip(indexed, masked, strict=True))
    ended = sum(int((t | u).sum()) for t, u in zip(indexed[3::5], indexed[4::5], strict=True))
    assert ended > 0  # resets happened, so both paths were exercised


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id", CLASSIC)
def test_cuda_matches_cpu(env_id):
    cpu = rl_suite.make(env_id, num_envs=64, seed=0, dtype=torch.float64)
    cuda = rl_suite.make(env_id, num_envs=64, device="cuda", seed=0, dtype=torch.float64)
    assert torch.equal(cpu.reset(), cuda.reset().cpu())
    for action in random_actions(cpu.action_space, 64, cpu.device, count=100):
        a, b = cpu.step(action), cuda.step(action.cuda())
        assert torch.allclose(a[0], b[0].cpu(), atol=1e-5)
        assert torch.equal(a[2], b[2].cpu()) and torch.equal(a[3], b[3].cpu())


def test_spaces_describe_one_environment():
    env = rl_suite.make("MountainCarContinuous-v0", num_envs=9)
    assert env.observation_space.shape == (2,)
    assert isinstance(env.action_space, gym.spaces.Box) and env.action_space.shape == (1,)
    assert env.max_episode_steps == 999 and env.reward_threshold == 90.0
    assert repr(env) == "MountainCarContinuous(MountainCarContinuous-v0, num_envs=9, device=cpu)"
