"""The MuJoCo tasks honour the env contract: auto-reset and final_obs, time limits, seeding, exact state,
resumable state dicts, clear errors on bad input, and rendering."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rl_suite

pytest.importorskip("mujoco")


def random_actions(env, steps: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    low = torch.as_tensor(env.action_space.low)
    high = torch.as_tensor(env.action_space.high)
    unit = torch.rand(steps, env.num_envs, *env.action_space.shape, generator=generator)
    return (low + unit * (high - low)) * scale


def rollout(env, steps: int, seed: int = 0):
    obs = [env.reset().clone()]
    for actions in random_actions(env, steps, seed):
        step_obs, reward, terminated, truncated, _ = env.step(actions)
        obs.append(torch.cat([step_obs, reward[:, None], terminated[:, None], truncated[:, None]], 1).clone())
    return torch.stack(obs[1:])


def test_termination_resets_in_the_same_step_and_reports_the_final_observation():
    env = rl_suite.make("InvertedPendulum-v5", num_envs=8, seed=0)
    env.reset()
    push = torch.full((8, 1), 3.0)  # full force one way: the pole falls within a few steps
    returns, step = torch.zeros(8), 0
    while step < 40:
        step += 1
        obs, reward, terminated, truncated, info = env.step(push)
        returns += reward
        if terminated.any():
            break
    assert terminated.any() and not truncated.any()
    ended = terminated.nonzero().squeeze(1)
    final = info["final_obs"][ended]
    assert (final[:, 1].abs() > 0.2).all()  # the pole angle that ended the episode
    assert (obs[ended].abs() <= 0.01 + 1e-6).all()  # a fresh initial state: gymnasium's noise of 0.01
    assert torch.equal(info["episode_length"][ended], torch.full((len(ended),), step, dtype=torch.int32))
    # reward is 1 while alive and 0 on the terminating step
    assert torch.allclose(info["episode_return"][ended], returns[ended])
    assert (info["episode_return"][ended] == step - 1).all()


def test_time_limit_truncates_and_restarts():
    env = rl_suite.make("HalfCheetah-v5", num_envs=3, seed=0, max_episode_steps=5)
    env.reset()
    for step in range(1, 6):
        obs, _, terminated, truncated, info = env.step(torch.zeros(3, 6))
        assert bool(truncated.all()) == (step == 5) and not terminated.any()
    assert not torch.equal(obs, info["final_obs"])
    assert torch.equal(info["episode_length"], torch.full((3,), 5, dtype=torch.int32))
    assert env.get_state()[0][:, 0].abs().max() <= 0.1  # x back near the origin
    default = rl_suite.make("HalfCheetah-v5", num_envs=1)
    assert default.max_episode_steps == 1000


@pytest.mark.parametrize("env_id", ["Hopper-v5", "Ant-v5", "Reacher-v5", "Pusher-v5"])
def test_same_seed_same_trajectories_and_different_seed_differs(env_id):
    first = rollout(rl_suite.make(env_id, num_envs=4, seed=3), steps=30)
    again = rollout(rl_suite.make(env_id, num_envs=4, seed=3), steps=30)
    other = rollout(rl_suite.make(env_id, num_envs=4, seed=4), steps=30)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_each_environment_has_its_own_stream():
    small = rl_suite.make("Walker2d-v5", num_envs=2, seed=7).reset().clone()
    large = rl_suite.make("Walker2d-v5", num_envs=5, seed=7).reset()
    assert torch.equal(small, large[:2])


def test_masked_and_indexed_resets_give_identical_trajectories():
    indexed = rollout(rl_suite.make("Hopper-v5", num_envs=6, seed=1, masked_resets=False), steps=60)
    masked = rollout(rl_suite.make("Hopper-v5", num_envs=6, seed=1, masked_resets=True), steps=60)
    assert indexed[..., -2].any()  # some episodes terminated and were reset
    assert torch.equal(indexed, masked)


def test_initial_states_follow_gymnasiums_distributions():
    n = 512
    cheetah = rl_suite.make("HalfCheetah-v5", num_envs=n, seed=0)
    cheetah.reset()
    qpos, qvel = cheetah.get_state()
    qpos0 = torch.as_tensor(cheetah.model.qpos0)
    assert (qpos - qpos0).abs().max() <= 0.1 and (qpos - qpos0).abs().max() > 0.09  # uniform(-0.1, 0.1)
    assert abs(qvel.std().item() - 0.1) < 0.01 and abs(qvel.mean().item()) < 0.01  # 0.1 * standard normal

    reacher = rl_suite.make("Reacher-v5", num_envs=n, seed=0)
    reacher.reset()
    qpos, qvel = reacher.get_state()
    goal = qpos[:, -2:]
    assert goal.norm(dim=1).max() < 0.2 and goal.norm(dim=1).max() > 0.19
    assert (qvel[:, -2:] == 0).all() and qvel[:, :2].abs().max() <= 0.005

    pusher = rl_suite.make("Pusher-v5", num_envs=n, seed=0)
    pusher.reset()
    qpos, qvel = pusher.get_state()
    cylinder = qpos[:, -4:-2]
    assert (cylinder.norm(dim=1) > 0.17).all()
    assert (cylinder[:, 0] >= -0.3).all() and (cylinder[:, 0] < 0).all() and (cylinder[:, 1].abs() <= 0.2).all()
    assert (qpos[:, -2:] == 0).all() and (qvel[:, -4:] == 0).all()


def test_set_state_keeps_float64_and_makes_the_next_step_depend_on_the_state_alone():
    env = rl_suite.make("Ant-v5", num_envs=2, seed=0)
    env.reset()
    qpos, qvel = env.get_state()
    assert qpos.dtype == torch.float64
    qpos = qpos + 1e-12  # below float32 resolution
    env.set_state(qpos, qvel)
    assert torch.equal(env.get_state()[0], qpos)
    action = random_actions(env, 1)[0]
    first = env.step(action)[0].clone()
    for actions in random_actions(env, 10, seed=1):  # build up a different solver warm-start
        env.step(actions)
    env.set_state(qpos, qvel)
    assert torch.equal(env.step(action)[0], first)


def test_set_state_of_chosen_environments_leaves_the_others():
    env = rl_suite.make("Swimmer-v5", num_envs=4, seed=0)
    env.reset()
    qpos, qvel = env.get_state()
    chosen = torch.tensor([1, 3])
    new_qpos = torch.zeros(2, env.model.nq, dtype=torch.float64)
    obs = env.set_state(new_qpos, torch.zeros(2, env.model.nv, dtype=torch.float64), env_ids=chosen)
    after, _ = env.get_state()
    assert torch.equal(after[chosen], new_qpos)
    assert torch.equal(after[[0, 2]], qpos[[0, 2]])
    assert (obs[chosen] == 0).all()


def test_state_dict_resumes_exactly():
    env = rl_suite.make("Humanoid-v5", num_envs=3, seed=0)
    env.reset()
    actions = random_actions(env, 30, scale=1.0)
    for a in actions[:10]:
        env.step(a)
    saved = {k: v.clone() for k, v in env.state_dict().items()}
    expected = [torch.cat([o, r[:, None]], 1).clone() for o, r, *_ in (env.step(a) for a in actions[10:])]
    resumed = rl_suite.make("Humanoid-v5", num_envs=3, seed=99)
    resumed.load_state_dict(saved)
    got = [torch.cat([o, r[:, None]], 1).clone() for o, r, *_ in (resumed.step(a) for a in actions[10:])]
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


# -- bad input --------------------------------------------------------------------------------------------


def test_an_action_of_the_wrong_dimension_is_refused():
    env = rl_suite.make("HalfCheetah-v5", num_envs=2)
    env.reset()
    with pytest.raises(ValueError, match=r"expects actions of shape \(2, 6\).*got \(2, 5\)"):
        env.step(torch.zeros(2, 5))


def test_a_non_finite_action_is_refused_and_nothing_changes():
    env = rl_suite.make("Hopper-v5", num_envs=3, seed=0)
    env.reset()
    before = env.get_state()
    actions = torch.zeros(3, 3)
    actions[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite actions in 1 of 3 environments \(first: env 1"):
        env.step(actions)
    after = env.get_state()
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])


def test_set_state_with_wrong_shapes_is_refused():
    env = rl_suite.make("Ant-v5", num_envs=2)
    env.reset()
    qpos, qvel = env.get_state()
    with pytest.raises(ValueError, match=r"expects qpos \(\[rows, nq=15\]\) of shape \(2, 15\), got \(2, 14\)"):
        env.set_state(qpos[:, :14], qvel)
    with pytest.raises(ValueError, match=r"expects qvel \(\[rows, nv=14\]\) of shape \(2, 14\), got \(1, 14\)"):
        env.set_state(qpos, qvel[:1])
    with pytest.raises(ValueError, match="non-finite"):
        env.set_state(qpos * float("inf"), qvel)


def test_a_keyword_gymnasium_does_not_have_is_refused_with_a_suggestion():
    with pytest.raises(TypeError, match=r"HalfCheetah-v5 has no keyword argument 'ctrl_cost'.*'ctrl_cost_weight'"):
        rl_suite.make("HalfCheetah-v5", ctrl_cost=0.2)
    with pytest.raises(TypeError, match=r"Hopper-v5 has no keyword argument 'include_cfrc_ext_in_observation'"):
        rl_suite.make("Hopper-v5", include_cfrc_ext_in_observation=True)
    with pytest.raises(ValueError, match="backend must be one of"):
        rl_suite.make("Hopper-v5", backend="mjx")


def test_render_gives_an_rgb_array():
    env = rl_suite.make("HalfCheetah-v5", num_envs=2, seed=0)
    env.reset()
    try:
        frame = env.render(env_id=1, width=96, height=64)
    except Exception as error:  # no OpenGL on this machine
        pytest.skip(f"no OpenGL context: {error}")
    assert frame.shape == (64, 96, 3) and frame.dtype == np.uint8 and frame.std() > 0
    with pytest.raises(ValueError, match=r"env_id must be in \[0, 2\)"):
        env.render(env_id=2)


@pytest.mark.parametrize("source", ["gymnasium half_cheetah.xml", "dm_control cheetah.xml"])
def test_models_that_set_their_total_mass_compile_to_the_compilers_model_without_its_deprecated_attribute(
    source, capfd
):
    """``settotalmass`` (14 kg on both cheetahs) is deprecated in MuJoCo 4; our loaders scale the masses after
    compiling instead, and must still give the compiler's model bit for bit, its solver statistics included."""
    import mujoco

    from rl_suite.envs.dmc.base import COMMON_ASSETS, compile_model, read_model, suite_dir
    from rl_suite.envs.mujoco.env import model_path

    if source.startswith("gymnasium"):
        text = model_path("half_cheetah.xml").read_text()
        compiler = lambda: mujoco.MjModel.from_xml_string(text)  # noqa: E731
        ours = lambda: rl_suite.make("HalfCheetah-v5").model  # noqa: E731
    else:
        text = read_model("cheetah.xml")
        assets = {name: (suite_dir() / name).read_bytes() for name in COMMON_ASSETS}
        compiler = lambda: mujoco.MjModel.from_xml_string(text, assets)  # noqa: E731
        ours = lambda: compile_model(text)  # noqa: E731
    assert 'settotalmass="14"' in text
    capfd.readouterr()
    reference = compiler()
    assert "settotalmass" in capfd.readouterr().err  # the compiler warns, so the check below can fail
    model = ours()
    assert "settotalmass" not in "".join(capfd.readouterr())
    assert model.body_mass.sum() == pytest.approx(14.0)

    arrays = [name for name in dir(model) if isinstance(getattr(model, name, None), np.ndarray)]
    assert len(arrays) > 100
    different = [name for name in arrays if not np.array_equal(getattr(model, name), getattr(reference, name))]
    assert different == []
    for name in ("meanmass", "meaninertia", "meansize", "extent", "center"):
        assert np.array_equal(getattr(model.stat, name), getattr(reference.stat, name)), name
