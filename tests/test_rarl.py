"""RARL's adversary: the forces it applies (checked against MuJoCo with the same ``xfrc_applied``), the zero-sum
rollout, acting without the adversary, resume and export."""

from __future__ import annotations

import shutil

import pytest
import torch

mujoco = pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.agents import PPO  # noqa: E402
from rl_suite.agents.rarl import RARL  # noqa: E402
from rl_suite.envs.mujoco.adversary import AdversarialVecEnv  # noqa: E402
from rl_suite.runner import RunConfig, Runner  # noqa: E402

TINY = dict(n_steps=8, epochs=2, minibatches=2, hidden=(16, 16))


def make(task="HalfCheetah-v5", num_envs=3, seed=0, **kwargs):
    return rl_suite.make(task, num_envs=num_envs, seed=seed, nthread=1, adversary_force=30.0, **kwargs)


def test_forces_act_as_mujoco_xfrc_applied_on_the_chosen_bodies():
    env = make()
    assert isinstance(env, AdversarialVecEnv) and env.bodies == ("torso", "bfoot", "ffoot") and env.axes == "xz"
    assert env.adversary_action_space.shape == (6,) and env.action_space.shape == (6,)
    env.reset()
    qpos, qvel = env.get_state()
    model = env.model
    datas = [mujoco.MjData(model) for _ in range(3)]
    for i, d in enumerate(datas):
        d.qpos[:], d.qvel[:] = qpos[i].numpy(), qvel[i].numpy()
        mujoco.mj_forward(model, d)
    g = torch.Generator().manual_seed(0)
    torso, bfoot, ffoot = (model.body(name).id for name in ("torso", "bfoot", "ffoot"))
    for _ in range(20):
        actions = 2.4 * torch.rand(3, 12, generator=g) - 1.2  # beyond [-1, 1]: both parts are clipped
        env.step(actions)
        forces = actions[:, 6:].clamp(-1, 1).double() * 30.0
        for i, d in enumerate(datas):
            d.ctrl[:] = actions[i, :6].clamp(-1, 1).double().numpy()
            d.xfrc_applied[:] = 0.0
            for k, body in enumerate((torso, bfoot, ffoot)):
                d.xfrc_applied[body, 0] = forces[i, 2 * k]  # x
                d.xfrc_applied[body, 2] = forces[i, 2 * k + 1]  # z
            mujoco.mj_step(model, d, env.frame_skip)
        qpos, _ = env.get_state()
        for i, d in enumerate(datas):
            torch.testing.assert_close(qpos[i], torch.from_numpy(d.qpos), rtol=0, atol=1e-10)
    # the protagonist alone: the pushes stop
    env.step(torch.zeros(3, 6))
    assert env.physics.xfrc_applied.abs().sum() == 0


def test_bad_adversary_settings_and_actions_are_refused():
    env = make()
    env.reset()
    with pytest.raises(ValueError, match=r"actions must be \[num_envs, 6\] \(the protagonist's\) or \[num_envs, 12\]"):
        env.step(torch.zeros(3, 7))
    with pytest.raises(ValueError, match="HalfCheetah has no body 'tail'; its bodies: world, torso, bthigh"):
        make(adversary_bodies=["tail"])
    with pytest.raises(ValueError, match="Swimmer has no default adversary bodies; name them"):
        make("Swimmer-v5")
    with pytest.raises(ValueError, match="axes must be distinct letters of 'xyz', got 'xw'"):
        make(adversary_axes="xw", adversary_bodies=["torso"])
    with pytest.raises(ValueError, match=r"rarl needs an env with an adversary: make it with adversary_force"):
        RARL.for_env(rl_suite.make("HalfCheetah-v5", nthread=1))


def test_the_rollout_is_zero_sum_and_acting_deterministically_is_the_protagonist_alone():
    env = make(num_envs=4)
    agent = RARL.for_env(env, **TINY)
    assert agent.config.adversary_dim == 6
    buffer = agent.make_buffer(env.num_envs)
    obs = env.reset()
    for _ in range(8):
        actions, extras = agent.act(obs)
        assert actions.shape == (4, 12)
        obs, reward, terminated, truncated, info = env.step(actions)
        buffer.add(obs, actions, reward, terminated, truncated, info["final_obs"], **extras)
    mine, theirs = buffer.protagonist.data, buffer.adversary.data
    torch.testing.assert_close(theirs["rewards"], -mine["rewards"])
    assert mine["actions"].shape[-1] == 6 and theirs["actions"].shape[-1] == 6
    assert theirs["policy_action"].abs().max() > 0
    deterministic, _ = agent.act(obs, deterministic=True)
    protagonist, _ = agent.protagonist.act(obs, deterministic=True)
    assert torch.equal(deterministic, protagonist)
    before = [p.clone() for p in agent.adversary.parameters]
    metrics = agent.update(buffer)
    assert "policy_loss" in metrics and "adversary_policy_loss" in metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.adversary.parameters, strict=True))


def test_a_resumed_rarl_run_ends_bitwise_equal_to_the_straight_run(tmp_path):
    def run(run_dir, resume=False, seed=0):
        env = make(num_envs=4, seed=seed)
        torch.manual_seed(seed)
        agent = RARL.for_env(env, **TINY)
        config = RunConfig(
            algo="rarl",
            env_id="HalfCheetah-v5",
            num_envs=4,
            total_steps=64,
            checkpoint_every_steps=32,
            eval_every_steps=10**9,
            eval_episodes=0,
            log_every_steps=32,
            progress=False,
            env_kwargs={"adversary_force": 30.0, "nthread": 1},
        )
        Runner(agent, env, config, run_dir=run_dir, resume=resume).run()
        return torch.cat([p.flatten() for m in agent.modules.values() for p in m.state_dict().values()])

    straight = run(tmp_path / "straight")
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    (tmp_path / "resumed" / "checkpoints" / "step_000000000064.pt").unlink()
    assert torch.equal(run(tmp_path / "resumed", resume=True, seed=5), straight)


def test_export_is_the_protagonists_policy(tmp_path):
    from rl_suite.deploy import load_policy
    from rl_suite.deploy.export import export_policy

    env = make(num_envs=2)
    agent = RARL.for_env(env, **TINY)
    report = export_policy(agent, tmp_path / "policy.onnx", env_id="HalfCheetah-v5")
    policy = load_policy(report.path)
    assert policy.metadata["algorithm"] == "rarl" and policy.action_shape == (6,)
    obs = torch.randn(5, 17)
    expected, _ = agent.protagonist.act(obs, deterministic=True)
    torch.testing.assert_close(torch.as_tensor(policy(obs.numpy())), expected, rtol=1e-5, atol=1e-5)
    assert isinstance(agent.protagonist, PPO)
