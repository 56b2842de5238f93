"""The Isaac Gym and Isaac Lab adapters, on fake tasks that follow those APIs: a batched point mass in torch.

``FakeVecTask`` keeps IsaacGymEnvs' ``VecTask`` conventions: buffers (``obs_buf``, ``states_buf``, ``rew_buf``,
``reset_buf``, ``progress_buf``), a ``reset_buf`` of ones at creation, deferred resets (flagged environments are
reset in the ``post_physics_step`` of the next step), ``time_outs = (progress >= max_episode_length - 1) &
reset_buf`` and a ``reset()`` that steps once with zero actions. ``FakeLabEnv`` keeps Isaac Lab's: observation
groups, same-step resets inside ``step`` and, when its config asks for it, ``extras["final_obs"]``.
"""

from __future__ import annotations

import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.agents import PPO
from rl_suite.envs.adapters.isaacgym import IsaacGymVecEnv
from rl_suite.envs.adapters.isaaclab import IsaacLabVecEnv

SPEED, LIMIT = 0.25, 1.0  # the point moves by SPEED * action per step; it falls off at |pos| > LIMIT


class FakeVecTask:
    num_obs, num_states, num_actions = 2, 3, 1

    def __init__(self, num_envs=6, max_episode_length=12, clip_actions=1.0):
        self.num_envs, self.max_episode_length, self.clip_actions = num_envs, max_episode_length, clip_actions
        self.device = self.rl_device = "cpu"
        self.clip_obs = 50.0
        self.obs_space = gym.spaces.Box(-np.inf, np.inf, (self.num_obs,))
        self.state_space = gym.spaces.Box(-np.inf, np.inf, (self.num_states,))
        self.act_space = gym.spaces.Box(-1.0, 1.0, (1,))
        n = num_envs
        self.obs_buf = torch.zeros(n, self.num_obs)
        self.states_buf = torch.zeros(n, self.num_states)
        self.rew_buf = torch.zeros(n)
        self.reset_buf = torch.ones(n, dtype=torch.long)
        self.timeout_buf = torch.zeros(n, dtype=torch.long)
        self.progress_buf = torch.zeros(n, dtype=torch.long)
        self.extras, self.obs_dict = {}, {}
        self.pos, self.vel = torch.zeros(n), torch.zeros(n)
        self.received_actions = None

    def reset(self):  # IsaacGymEnvs Preview 4: one step with zero actions does the first reset
        self.step(torch.zeros(self.num_envs, self.num_actions))
        return self.obs_dict

    def step(self, actions):
        self.received_actions = actions.clone()
        actions = torch.clamp(actions, -self.clip_actions, self.clip_actions)
        self.vel[:] = actions[:, 0]  # pre_physics_step + simulate
        self.pos += SPEED * self.vel
        self.post_physics_step()
        self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.extras["time_outs"] = self.timeout_buf
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs)
        self.obs_dict["states"] = self.get_state()
        return self.obs_dict, self.rew_buf, self.reset_buf, self.extras

    def post_physics_step(self):
        self.progress_buf += 1
        env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.compute_observations()
        self.rew_buf[:] = 1.0 - self.pos**2
        fell = self.pos.abs() > LIMIT
        self.reset_buf = (fell | (self.progress_buf >= self.max_episode_length - 1)).long()

    def reset_idx(self, env_ids):
        self.pos[env_ids] = torch.rand(len(env_ids)) - 0.5
        self.vel[env_ids] = 0.0
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 0

    def compute_observations(self):
        self.obs_buf[:] = torch.stack([self.pos, self.vel], 1)
        self.states_buf[:] = torch.stack([self.pos, self.vel, self.progress_buf.float()], 1)

    def get_state(self):
        return torch.clamp(self.states_buf, -self.clip_obs, self.clip_obs)


class FakeLabEnv:
    def __init__(self, num_envs=6, max_episode_length=10, final_obs_flag: bool | None = False):
        self.num_envs, self.max_episode_length, self.device = num_envs, max_episode_length, "cpu"
        self.single_observation_space = gym.spaces.Dict(
            {"policy": gym.spaces.Box(-np.inf, np.inf, (2,)), "critic": gym.spaces.Box(-np.inf, np.inf, (3,))}
        )
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (1,))
        self.cfg = types.SimpleNamespace() if final_obs_flag is None else types.SimpleNamespace(compute_final_obs=False)
        if final_obs_flag:
            self.cfg.compute_final_obs = True
        self.pos, self.vel = torch.zeros(num_envs), torch.zeros(num_envs)
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)

    @property
    def unwrapped(self):
        return self

    def _observations(self):
        return {
            "policy": torch.stack([self.pos, self.vel], 1),
            "critic": torch.stack([self.pos, self.vel, self.episode_length_buf.float()], 1),
        }

    def _reset_idx(self, env_ids):
        self.pos[env_ids] = torch.rand(len(env_ids)) - 0.5
        self.vel[env_ids] = 0.0
        self.episode_length_buf[env_ids] = 0

    def reset(self, seed=None, options=None):
        if seed is not None:
            torch.manual_seed(seed)
        self._reset_idx(torch.arange(self.num_envs))
        return self._observations(), {}

    def step(self, actions):
        self.vel[:] = actions[:, 0]
        self.pos += SPEED * self.vel
        self.episode_length_buf += 1
        reward = 1.0 - self.pos**2
        terminated = self.pos.abs() > LIMIT
        truncated = self.episode_length_buf >= self.max_episode_length
        extras = {"time_outs": truncated}
        if getattr(self.cfg, "compute_final_obs", False):
            extras["final_obs"] = self._observations()
        ids = (terminated | truncated).nonzero().squeeze(-1)
        if len(ids) > 0:
            self._reset_idx(ids)
        return self._observations(), reward, terminated, truncated, extras

    def close(self):
        pass


def make_gym_env(**kwargs):
    return IsaacGymVecEnv(FakeVecTask(**kwargs))


def make_lab_env(**kwargs):
    return IsaacLabVecEnv(FakeLabEnv(final_obs_flag=False, **kwargs))


def check_rollout(env, max_steps: int, both_flags: bool, steps: int = 120, seed: int = 0):
    """Step with random actions and check every output against the point mass's own dynamics. ``both_flags``: an
    episode that falls at its time limit is terminated and truncated (Isaac Lab), else only truncated (VecTask)."""
    n = env.num_envs
    generator = torch.Generator().manual_seed(seed)
    obs = env.reset(seed=seed).clone()
    assert obs.shape == (n, 2) and obs.dtype == torch.float32
    assert (obs[:, 0].abs() <= 0.5).all() and (obs[:, 1] == 0).all()
    returns, lengths = torch.zeros(n), torch.zeros(n, dtype=torch.int32)
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        actions = torch.rand(n, 1, generator=generator) * 2.4 - 1.2
        clipped = actions.clamp(-1, 1)
        expected_pos = obs[:, 0] + SPEED * clipped[:, 0]
        new_obs, reward, terminated, truncated, info = env.step(actions)
        for tensor, dtype in ((new_obs, torch.float32), (reward, torch.float32), (terminated, torch.bool)):
            assert tensor.dtype == dtype and tensor.shape[0] == n
        assert truncated.dtype == torch.bool and info["done"].dtype == torch.bool
        final = info["final_obs"]
        torch.testing.assert_close(final, torch.stack([expected_pos, clipped[:, 0]], 1))
        torch.testing.assert_close(reward, 1.0 - expected_pos**2)
        lengths += 1
        returns += reward
        fell = expected_pos.abs() > LIMIT
        expected_truncated = lengths == max_steps
        assert torch.equal(truncated, expected_truncated)
        assert torch.equal(terminated, fell if both_flags else fell & ~expected_truncated)
        done = terminated | truncated
        assert torch.equal(info["done"], done)
        # ended episodes: the new episode's first observation; the others carry on from final_obs
        assert torch.equal(new_obs[~done], final[~done])
        assert (new_obs[done, 0].abs() <= 0.5).all() and (new_obs[done, 1] == 0).all()
        critic = info["critic_obs"]
        assert critic.shape == (n, 3) and torch.equal(critic[:, :2], new_obs)
        assert (critic[done, 2] == 0).all() and torch.equal(critic[~done, 2], lengths[~done].float())
        torch.testing.assert_close(info["episode_return"], torch.where(done, returns, 0.0))
        assert info["episode_length"].dtype == torch.int32
        assert torch.equal(info["episode_length"], torch.where(done, lengths, 0))
        returns[done], lengths[done] = 0, 0
        counts["terminated"] += int(terminated.sum())
        counts["truncated"] += int(truncated.sum())
        obs = new_obs.clone()
    assert counts["terminated"] > 5 and counts["truncated"] > 5, counts


def test_isaacgym_spaces_and_metadata():
    env = make_gym_env(max_episode_length=12)
    assert env.num_envs == 6 and env.device == torch.device("cpu")
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    assert env.critic_observation_space.shape == (3,)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert env.max_episode_steps == 11  # VecTask times out at progress >= max_episode_length - 1


def test_isaacgym_same_step_resets_final_obs_critic_obs_and_statistics():
    check_rollout(make_gym_env(max_episode_length=12), max_steps=11, both_flags=False)


def test_isaacgym_adapter_clips_actions_and_resets_without_a_wasted_step():
    env = make_gym_env()
    env.reset(seed=1)
    env.step(torch.full((6, 1), 7.0))
    assert torch.equal(env.task.received_actions, torch.ones(6, 1))
    # the adapter reset the flagged environments itself: the task has nothing left to reset at its next step
    for _ in range(5):
        env.step(torch.ones(6, 1))
        assert not env.task.reset_buf.bool().any()


def test_isaacgym_needs_reset_idx_and_compute_observations():
    task = FakeVecTask()
    task.compute_observations = None
    with pytest.raises(TypeError, match=r"lacks compute_observations\(\) \(or observe=\)"):
        IsaacGymVecEnv(task)
    IsaacGymVecEnv(task, observe=lambda: FakeVecTask.compute_observations(task))


def test_isaaclab_same_step_resets_with_final_obs_from_extras():
    lab = FakeLabEnv(max_episode_length=10)
    env = IsaacLabVecEnv(lab, clip_actions=1.0)
    assert lab.cfg.compute_final_obs and env.exact_final_obs  # the adapter turned the flag on
    assert env.observation_space.shape == (2,) and env.critic_observation_space.shape == (3,)
    assert env.max_episode_steps == 10
    check_rollout(env, max_steps=10, both_flags=True)


def test_isaaclab_without_final_obs_falls_back_to_the_reset_observation():
    with pytest.warns(UserWarning, match=r"falls back to the first observation of the new episode"):
        env = IsaacLabVecEnv(FakeLabEnv(final_obs_flag=None, max_episode_length=4))
    assert not env.exact_final_obs
    env.reset(seed=0)
    for _ in range(4):
        obs, _, _, truncated, info = env.step(torch.zeros(6, 1))
    assert truncated.all() and torch.equal(info["final_obs"], obs) and (info["episode_length"] == 4).all()


def test_isaaclab_clip_actions_and_groups():
    env = IsaacLabVecEnv(FakeLabEnv(), clip_actions=1.0)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    env.reset(seed=0)
    start = env._obs[:, 0].clone()
    obs = env.step(torch.full((6, 1), 3.0))[0]
    torch.testing.assert_close(obs[:, 0], start + SPEED)
    with pytest.raises(ValueError, match=r"no observation group 'actor'; its groups: \['critic', 'policy'\]"):
        IsaacLabVecEnv(FakeLabEnv(), policy_group="actor")


@pytest.mark.parametrize("make", [make_gym_env, make_lab_env], ids=["isaacgym", "isaaclab"])
def test_bad_actions_are_rejected(make):
    env = make()
    env.reset()
    name = type(env).__name__
    with pytest.raises(ValueError, match=rf"{name}.step expects actions of shape \(6, 1\)"):
        env.step(torch.zeros(6))
    with pytest.raises(TypeError, match=rf"{name}.step expects floating-point actions"):
        env.step(torch.zeros(6, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"{name}.step got non-finite actions in 1 of 6 environments"):
        env.step(torch.tensor([[0.0]] * 5 + [[float("nan")]]))
    with pytest.raises(TypeError, match=rf"{name}.step expects actions as a torch.Tensor"):
        env.step(np.zeros((6, 1)))
    with pytest.raises(NotImplementedError):
        env.state_dict()


@pytest.mark.parametrize("make", [make_gym_env, make_lab_env], ids=["isaacgym", "isaaclab"])
def test_ppo_trains_through_the_runner(make, tmp_path):
    env = make(num_envs=8)
    agent = PPO.for_env(env, n_steps=8)
    summary = agent.learn(env, total_steps=256, eval_episodes=0, progress=False, run_dir=tmp_path)
    assert summary["env_steps"] >= 256
