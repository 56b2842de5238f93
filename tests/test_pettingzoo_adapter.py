"""PettingZoo parallel environments behind the multi-agent contract: mpe2's simple_spread through the adapter
matches our native Spread, and the adapter's resets, padding, masks, deaths and errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite
from rl_suite.envs.multiagent.mpe import Spread

pytest.importorskip("mpe2")
ParallelEnv = pytest.importorskip("pettingzoo.utils.env").ParallelEnv
from rl_suite.envs.adapters.pettingzoo import PettingZooVecEnv  # noqa: E402


def world_state(pz_env) -> torch.Tensor:
    entities = pz_env.unwrapped.world.entities
    return torch.tensor(np.array([[*e.state.p_pos, *e.state.p_vel] for e in entities]), dtype=torch.float32)


def test_simple_spread_through_the_adapter_matches_native_spread():
    env = rl_suite.make("pz:mpe2.simple_spread_v3", num_envs=3, seed=0)
    assert isinstance(env, PettingZooVecEnv) and env.env_id == "pz:mpe2.simple_spread_v3"
    assert env.num_agents == 3 and env.observation_space.shape == (3, 18) and env.max_episode_steps == 25
    assert env.global_state_space.shape == (54,) and env.agent_action_space == gym.spaces.Discrete(5)
    native = Spread(3, seed=0)
    obs = env.reset()
    native.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(10):
        native_obs = native.set_state(torch.stack([world_state(e) for e in env.envs]))
        torch.testing.assert_close(obs, native_obs, atol=1e-4, rtol=0)
        torch.testing.assert_close(env.global_state, native.global_state, atol=1e-4, rtol=0)
        actions = torch.randint(0, 5, (3, 3), generator=generator)
        obs, reward, terminated, truncated, info = env.step(actions)
        native_obs, native_reward, _, _, native_info = native.step(actions)
        torch.testing.assert_close(obs, native_obs, atol=1e-4, rtol=0)
        torch.testing.assert_close(reward, native_reward, atol=1e-4, rtol=0)
        torch.testing.assert_close(info["agent_reward"], native_info["agent_reward"], atol=1e-4, rtol=0)
        assert not terminated.any() and not truncated.any()
        assert info["avail_actions"].all() and info["alive"].all()
    # Seeded resets are reproducible; environment i is seeded with seed + i.
    first = env.reset(seed=7).clone()
    assert torch.equal(env.reset(seed=7), first) and not torch.equal(first[0], first[1])
    env.close()


def test_continuous_spread_and_heterogeneous_tag():
    env = PettingZooVecEnv("mpe2.simple_spread_v3:parallel_env", num_envs=2, seed=0, continuous_actions=True)
    assert env.agent_action_space.shape == (5,) and env.avail_actions is None
    env.reset()
    obs, reward, *_ = env.step(torch.rand(2, 3, 5))
    assert obs.shape == (2, 3, 18) and reward.dtype == torch.float32
    # simple_tag: the prey observes 14 values, padded to the adversaries' 16; its state() is 62 values.
    env = rl_suite.make("pz:mpe2.simple_tag_v3", num_envs=2, seed=1, team_reward="sum")
    obs = env.reset()
    assert obs.shape == (2, 4, 16) and env.global_state.shape == (2, 62)
    assert (obs[:, 3, 14:] == 0).all() and (obs[:, 3, :4] != 0).any()
    torch.testing.assert_close(env.global_state[0], torch.from_numpy(env.envs[0].state()))
    _, reward, _, _, info = env.step(torch.randint(0, 5, (2, 4)))
    torch.testing.assert_close(reward, info["agent_reward"].sum(1))


def test_auto_reset_and_final_obs():
    env = rl_suite.make("pz:mpe2.simple_spread_v3", num_envs=2, seed=0, max_cycles=3)
    assert env.max_episode_steps == 3
    env.reset()
    actions = torch.full((2, 3), 2)
    for _ in range(2):
        _, _, terminated, truncated, info = env.step(actions)
        assert not (terminated | truncated).any() and torch.equal(info["final_obs"], env._obs)
    obs, _, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any() and info["done"].all()
    assert (info["episode_length"] == 3).all() and (info["episode_return"] < 0).all()
    assert (info["final_obs"][:, :, 0] > 0).all()  # moving right at the end of the episode
    assert (obs[:, :, 0:2] == 0).all()  # at rest in the new one
    for i, pz_env in enumerate(env.envs):  # the new episode's observations and state
        assert pz_env.agents == pz_env.possible_agents
        torch.testing.assert_close(info["global_state"][i], torch.from_numpy(pz_env.state()))
        torch.testing.assert_close(obs[i, 0], torch.from_numpy(pz_env.unwrapped.observe("agent_0")))
    assert not torch.equal(info["final_global_state"], info["global_state"])
    _, _, _, truncated, info = env.step(actions)
    assert not truncated.any() and (info["episode_length"] == 0).all()


class Countdown(ParallelEnv):
    """Two agents: "a" observes 3 values, "b" a dict of 2 values and an action mask; "b" terminates after 2 steps,
    "a" is truncated after 4. The reward is the action taken. No global state."""

    metadata = {"name": "countdown"}

    def __init__(self, b_actions: int = 3):
        self.possible_agents = ["a", "b"]
        self.b_actions = b_actions

    def observation_space(self, agent):
        if agent == "a":
            return gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        return gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                "action_mask": gym.spaces.MultiBinary(3),
            }
        )

    def action_space(self, agent):
        return gym.spaces.Discrete(3 if agent == "a" else self.b_actions)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), {agent: {} for agent in self.agents}

    def _observe(self):
        obs = {}
        if "a" in self.agents:
            obs["a"] = np.array([self.t, 1, 2], np.float32)
        if "b" in self.agents:
            obs["b"] = {"observation": np.array([self.t, -1], np.float32), "action_mask": np.array([1, 0, 1], np.int8)}
        return obs

    def step(self, actions):
        self.t += 1
        rewards = {agent: float(actions[agent]) for agent in self.agents}
        terminations = {agent: agent == "b" and self.t >= 2 for agent in self.agents}
        truncations = {agent: self.t >= 4 for agent in self.agents}
        obs, infos = self._observe(), {agent: {} for agent in self.agents}
        self.agents = [agent for agent in self.agents if not (terminations[agent] or truncations[agent])]
        return obs, rewards, terminations, truncations, infos


def test_padding_masks_deaths_and_episode_ends():
    env = PettingZooVecEnv(Countdown, num_envs=2)
    assert env.max_episode_steps is None and env.global_state_space.shape == (6,)
    obs = env.reset()
    assert obs.shape == (2, 2, 3)
    torch.testing.assert_close(obs[0], torch.tensor([[0.0, 1, 2], [0, -1, 0]]))
    assert torch.equal(env.global_state, obs.reshape(2, 6))
    assert env.avail_actions[0].tolist() == [[True, True, True], [True, False, True]]
    with pytest.raises(ValueError, match=r"unavailable actions for 2 agents \(first: env 0, agent 1, action 1"):
        env.step(torch.tensor([[0, 1], [0, 1]]))
    obs, reward, _, _, info = env.step(torch.tensor([[2, 2], [1, 0]]))
    assert reward.tolist() == [2.0, 0.5] and info["agent_reward"].tolist() == [[2.0, 2.0], [1.0, 0.0]]
    # Step 2: "b" terminates. It observed and acted in this step, and is gone from the next one.
    obs, reward, terminated, truncated, info = env.step(torch.tensor([[1, 2], [1, 2]]))
    assert not (terminated | truncated).any()
    assert env._final_alive.all()  # the final row counts every agent that acted
    assert env.alive.tolist() == [[True, False], [True, False]]
    assert (obs[:, 1] == 0).all() and info["final_obs"][0, 1].tolist() == [2.0, -1, 0]
    assert env.avail_actions[0, 1].tolist() == [True, False, False]  # a dead agent takes only action 0
    with pytest.raises(ValueError, match="unavailable actions"):
        env.step(torch.tensor([[1, 2], [1, 0]]))
    _, reward, _, _, info = env.step(torch.tensor([[1, 0], [2, 0]]))
    assert reward.tolist() == [1.0, 2.0]  # the mean over the agents that acted
    assert info["agent_reward"][:, 1].tolist() == [0.0, 0.0]
    # Step 4: "a" is truncated, so every agent is done: the episode ends (as a truncation) and restarts.
    obs, _, terminated, truncated, info = env.step(torch.tensor([[0, 0], [0, 0]]))
    assert truncated.all() and not terminated.any() and (info["episode_length"] == 4).all()
    assert env.alive.all() and obs[0, 0].tolist() == [0.0, 1, 2] and info["final_obs"][0, 0].tolist() == [4.0, 1, 2]


def test_bad_input_and_refusals():
    env = rl_suite.make("pz:mpe2.simple_spread_v3", num_envs=2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"PettingZooVecEnv.step expects actions for 3 agents, shape \(2, 3\)"):
        env.step(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="outside"):
        env.step(torch.full((2, 3), 5))
    with pytest.raises(NotImplementedError, match="cannot be saved"):
        env.state_dict()
    with pytest.raises(NotImplementedError, match="does not expose its physical state"):
        env.get_state()
    with pytest.raises(ValueError, match="every agent must share one action space"):
        PettingZooVecEnv(Countdown, b_actions=4)
    with pytest.raises(TypeError, match="built an AECEnv"):
        PettingZooVecEnv("mpe2.simple_spread_v3:env")
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        rl_suite.make("pz:no_such_module")
    with pytest.raises(ValueError, match="team_reward must be one of"):
        PettingZooVecEnv(Countdown, team_reward="max")
