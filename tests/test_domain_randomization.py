"""Mass and friction randomisation in ``MujocoVecEnv`` (``randomize_mass``, ``randomize_friction``), checked against
MuJoCo itself: a plain ``MjModel`` given the same parameters (and ``mj_setConst``) steps to the same states."""

from __future__ import annotations

import copy

import pytest
import torch

mujoco = pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.envs.mujoco.env import MujocoVecEnv  # noqa: E402
from rl_suite.envs.mujoco.randomization import RandomizedVecEnv  # noqa: E402


def make(task="Ant-v5", num_envs=4, seed=0, **kwargs):
    return rl_suite.make(task, num_envs=num_envs, seed=seed, nthread=1, **kwargs)


def reference_model(env: MujocoVecEnv, i: int) -> mujoco.MjModel:
    """A MuJoCo model with environment ``i``'s randomised parameters, its constants recomputed by MuJoCo."""
    model = copy.copy(env.model)
    for name, (field, _) in env._randomized.items():
        getattr(model, name)[:] = field[i].numpy()
    data = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)
    return model


@pytest.mark.parametrize("task", ["HalfCheetah-v5", "Ant-v5"])
def test_randomised_envs_step_as_mujoco_with_the_same_parameters(task):
    env = make(task, randomize_mass=0.3, randomize_friction=0.5, max_episode_steps=None)
    env.reset()
    g = torch.Generator().manual_seed(1)
    models = [reference_model(env, i) for i in range(env.num_envs)]
    datas = [mujoco.MjData(m) for m in models]
    qpos, qvel = env.get_state()
    for i, (m, d) in enumerate(zip(models, datas, strict=True)):
        d.qpos[:], d.qvel[:] = qpos[i].numpy(), qvel[i].numpy()
        mujoco.mj_forward(m, d)
    for _ in range(30):  # long enough for Ant's legs to touch the floor
        actions = 2 * torch.rand(env.num_envs, env.action_space.shape[0], generator=g) - 1
        env.step(actions)
        for i, (m, d) in enumerate(zip(models, datas, strict=True)):
            d.ctrl[:] = actions[i].double().numpy()
            mujoco.mj_step(m, d, env.frame_skip)
        qpos, qvel = env.get_state()
        for i, d in enumerate(datas):
            torch.testing.assert_close(qpos[i], torch.from_numpy(d.qpos), rtol=0, atol=1e-10)
            torch.testing.assert_close(qvel[i], torch.from_numpy(d.qvel), rtol=0, atol=1e-8)
    # the parameters did matter: environments with different masses went different ways
    assert (qpos[0] - qpos[1]).abs().max() > 1e-3


def test_parameters_are_drawn_in_range_and_redrawn_only_at_reset():
    env = make("Ant-v5", num_envs=6, randomize_mass=0.2, randomize_friction=0.4, max_episode_steps=5)
    env.reset()
    mass, nominal_mass = env._randomized["body_mass"]
    inertia, nominal_inertia = env._randomized["body_inertia"]
    friction, nominal_friction = env._randomized["geom_friction"]
    ratio = mass[:, 1:] / nominal_mass[1:]
    assert ((ratio >= 0.8) & (ratio <= 1.2)).all() and ratio.std() > 0.05
    # mass and inertia move together (density scaling); friction: sliding only, one factor per environment
    torch.testing.assert_close(inertia[:, 1:] / nominal_inertia[1:], ratio[..., None].expand(-1, -1, 3))
    sliding = friction[..., 0] / nominal_friction[:, 0]
    assert ((sliding >= 0.6) & (sliding <= 1.4)).all()
    assert torch.allclose(sliding, sliding[:, :1].expand_as(sliding))
    assert torch.equal(friction[..., 1:], nominal_friction[:, 1:].expand_as(friction[..., 1:]))
    before = mass.clone()
    for _ in range(4):
        env.step(torch.zeros(6, 8))
    assert torch.equal(mass, before)  # Ant's healthy range keeps these standing 4 steps: no reset yet
    _, _, terminated, truncated, _ = env.step(torch.zeros(6, 8))
    ended = terminated | truncated
    assert ended.all()  # the 5-step time limit
    assert (mass[:, 1:] != before[:, 1:]).all()


def test_zero_randomisation_is_the_plain_env_and_seeds_reproduce():
    plain, zero = make("HalfCheetah-v5", seed=3), make("HalfCheetah-v5", seed=3, randomize_mass=0.0)
    assert zero._randomized == {}
    torch.testing.assert_close(plain.reset(), zero.reset(), rtol=0, atol=0)
    a, b = make("HalfCheetah-v5", seed=3, randomize_mass=0.1), make("HalfCheetah-v5", seed=3, randomize_mass=0.1)
    a.reset(), b.reset()
    assert torch.equal(a._randomized["body_mass"][0], b._randomized["body_mass"][0])
    c = make("HalfCheetah-v5", seed=4, randomize_mass=0.1)
    c.reset()
    assert not torch.equal(a._randomized["body_mass"][0], c._randomized["body_mass"][0])


def test_a_restored_randomised_env_continues_exactly():
    kwargs = dict(randomize_mass=0.3, randomize_friction=0.3, max_episode_steps=7)
    env = make("Ant-v5", **kwargs)
    env.reset()
    g = torch.Generator().manual_seed(0)
    actions = [2 * torch.rand(4, 8, generator=g) - 1 for _ in range(20)]
    for a in actions[:5]:
        env.step(a)
    saved = env.state_dict()
    restored = make("Ant-v5", seed=99, **kwargs)
    restored.reset()
    restored.load_state_dict(saved)
    for a in actions[5:]:  # crosses a time-limit reset, which redraws the parameters from the restored streams
        expected, got = env.step(a), restored.step(a)
        torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)
    assert torch.equal(env._randomized["body_mass"][0], restored._randomized["body_mass"][0])


def test_env_keywords_reach_every_randomisation():
    env = make("HalfCheetah-v5", obs_noise_std=0.01, motor_strength=0.1, randomize_friction=0.2)
    assert isinstance(env, RandomizedVecEnv) and env.env_id == "HalfCheetah-v5"
    assert env.env.randomize_friction == 0.2 and env.motor_strength == 0.1
    assert isinstance(make("HalfCheetah-v5"), MujocoVecEnv)


@pytest.mark.parametrize("name", ["randomize_mass", "randomize_friction"])
def test_out_of_range_randomisation_is_refused(name):
    with pytest.raises(ValueError, match=rf"{name} must be in \[0, 1\) \(a fraction of the nominal value\), got 1.5"):
        make("HalfCheetah-v5", **{name: 1.5})
