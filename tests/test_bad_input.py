"""Bad input gets an error that names what was expected and what came, and nothing is lost: the environment is
unchanged and keeps working."""

from __future__ import annotations

import re

import gymnasium as gym
import pytest
import torch

import rl_suite
from rl_suite.envs.adapters.gymnasium import GymnasiumVecEnv


def test_unknown_id_suggests_close_matches():
    with pytest.raises(
        rl_suite.UnknownEnvError, match=r"unknown environment id 'CartPol-v1'\. Did you mean 'CartPole-v1'\?"
    ):
        rl_suite.make("CartPol-v1")
    with pytest.raises(rl_suite.UnknownEnvError, match=r"Did you mean 'Pendulum-v1'"):
        rl_suite.make("pendulum-v1")


def test_unknown_id_that_gymnasium_has_points_to_the_adapter():
    with pytest.raises(rl_suite.UnknownEnvError, match=r"gymnasium has it: use 'gym:LunarLander-v3'"):
        rl_suite.make("LunarLander-v3")


def test_env_id_must_be_a_string():
    with pytest.raises(TypeError, match=r"env_id must be a string such as 'CartPole-v1', got int"):
        rl_suite.make(3)


@pytest.mark.parametrize("num_envs", [0, -4, 2.5, True, "8"])
def test_num_envs_must_be_positive(num_envs):
    with pytest.raises(ValueError, match=re.escape(f"num_envs must be a positive integer, got {num_envs!r}")):
        rl_suite.make("CartPole-v1", num_envs=num_envs)
    with pytest.raises(ValueError, match=re.escape(f"num_envs must be a positive integer, got {num_envs!r}")):
        rl_suite.make("gym:CartPole-v1", num_envs=num_envs)


def test_max_episode_steps_must_be_positive():
    with pytest.raises(ValueError, match=r"max_episode_steps must be a positive integer or None, got 0"):
        rl_suite.make("CartPole-v1", max_episode_steps=0)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match=r"dtype must be torch.float32 or torch.float64, got torch.float16"):
        rl_suite.make("CartPole-v1", dtype=torch.float16)


@pytest.fixture
def cartpole():
    env = rl_suite.make("CartPole-v1", num_envs=4, seed=0)
    env.reset()
    return env


@pytest.fixture
def pendulum():
    env = rl_suite.make("Pendulum-v1", num_envs=4, seed=0)
    env.reset()
    return env


def refused_without_loss(env, actions, error, message):
    """The step is refused with ``message``; the environment is exactly as before, and its next good step counts."""
    state, obs, lengths = env.get_state(), env._obs.clone(), env._running[1].clone()
    with pytest.raises(error, match=message):
        env.step(actions)
    assert torch.equal(env.get_state(), state) and torch.equal(env._obs, obs)
    assert torch.equal(env._running[1], lengths)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    good = torch.zeros(env.num_envs, *env.action_space.shape, dtype=torch.int64 if discrete else torch.float32)
    env.step(good)  # one step from a fresh episode ends none of them
    assert torch.equal(env._running[1], lengths + 1)


def test_actions_of_the_wrong_shape(cartpole, pendulum):
    refused_without_loss(
        cartpole,
        torch.zeros(4, 1, dtype=torch.int64),
        ValueError,
        re.escape(
            "CartPole.step expects actions of shape (4,) ([num_envs, *action_space.shape] for Discrete(2)), got (4, 1)"
        ),
    )
    refused_without_loss(cartpole, torch.zeros(3, dtype=torch.int64), ValueError, re.escape("got (3,)"))
    refused_without_loss(
        pendulum, torch.zeros(4), ValueError, re.escape("Pendulum.step expects actions of shape (4, 1)")
    )


def test_actions_of_the_wrong_dtype(cartpole, pendulum):
    refused_without_loss(
        cartpole,
        torch.zeros(4),
        TypeError,
        r"CartPole.step expects integer actions for Discrete\(2\), got dtype torch.float32",
    )
    refused_without_loss(cartpole, torch.zeros(4, dtype=torch.bool), TypeError, r"got dtype torch.bool")
    refused_without_loss(
        pendulum,
        torch.zeros(4, 1, dtype=torch.int64),
        TypeError,
        r"Pendulum.step expects floating-point actions for Box\(-2.0, 2.0, \(1,\), float32\), "
        r"got dtype torch.int64",
    )


def test_actions_that_are_not_tensors(cartpole):
    refused_without_loss(
        cartpole,
        [0, 1, 0, 1],
        TypeError,
        r"CartPole.step expects actions as a torch.Tensor on cpu, got list; convert with "
        r"torch.as_tensor\(actions, device=env.device\)",
    )


def test_actions_on_the_wrong_device(cartpole):
    on_meta = torch.zeros(4, dtype=torch.int64, device="meta")
    refused_without_loss(cartpole, on_meta, ValueError, r"CartPole.step expects actions on cpu, got actions on meta")


def test_out_of_range_discrete_actions(cartpole):
    refused_without_loss(
        cartpole,
        torch.tensor([0, 1, 2, 1]),
        ValueError,
        re.escape(
            "CartPole.step got actions outside Discrete(2) (valid: 0 to 1) in 1 of 4 "
            "environments (first: env 2, action 2)"
        ),
    )
    refused_without_loss(
        cartpole,
        torch.tensor([-1, 1, 0, -5]),
        ValueError,
        re.escape("in 2 of 4 environments (first: env 0, action -1)"),
    )


def test_non_finite_continuous_actions(pendulum):
    bad = torch.tensor([[0.0], [float("nan")], [1.0], [float("inf")]])
    refused_without_loss(
        pendulum,
        bad,
        ValueError,
        re.escape("Pendulum.step got non-finite actions in 2 of 4 environments (first: env 1, action [nan])"),
    )


def test_value_checks_can_be_turned_off():
    env = rl_suite.make("Pendulum-v1", num_envs=2, check_values=False)
    env.reset()
    obs, *_ = env.step(torch.tensor([[float("nan")], [0.0]]))  # the caller took responsibility
    assert torch.isnan(obs[0]).any() and torch.isfinite(obs[1]).all()


def test_set_state_with_bad_input(cartpole):
    with pytest.raises(ValueError, match=re.escape("CartPole.set_state expects state of shape (4, 4), got (4, 3)")):
        cartpole.set_state(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=re.escape("CartPole.set_state expects state of shape (2, 4), got (4, 4)")):
        cartpole.set_state(torch.zeros(4, 4), env_ids=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"CartPole.set_state got env_ids outside \[0, 4\)"):
        cartpole.set_state(torch.zeros(1, 4), env_ids=torch.tensor([4]))
    with pytest.raises(ValueError, match=r"CartPole.set_state got a non-finite state"):
        cartpole.set_state(torch.full((4, 4), float("nan")))


def test_adapter_refuses_what_it_cannot_translate():
    with pytest.raises(ValueError, match=r"vectorization must be one of \('sync', 'async'\), got 'vector_entry_point'"):
        GymnasiumVecEnv("CartPole-v1", num_envs=2, vectorization="vector_entry_point")
    next_step = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(
        ValueError,
        match=r"the adapter needs same-step auto-reset: build it with "
        r"autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP",
    ):
        GymnasiumVecEnv(next_step)
    with pytest.raises(ValueError, match=r"the adapter needs Box or Discrete observations, got Dict"):
        GymnasiumVecEnv(_dict_observation_env())


def _dict_observation_env():
    class DictObservation(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict({"state": env.observation_space})

        def observation(self, observation):
            return {"state": observation}

    return DictObservation(gym.make("CartPole-v1"))


def test_adapter_checks_actions_like_native_envs():
    env = rl_suite.make("gym:CartPole-v1", num_envs=2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=re.escape("GymnasiumVecEnv.step got actions outside Discrete(2)")):
        env.step(torch.tensor([0, 5]))
