"""The Control Suite env's own behaviour: action repeat, time limits, seeding, resume, set_state, bad input, and the
backend features it needs (stepping chosen simulations, a forward with actuation disabled). Parity with dm_control
is tests/test_dmc_parity.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.envs.dmc.env import DMCVecEnv  # noqa: E402


def make(name: str = "cartpole-swingup", num_envs: int = 4, **kwargs):
    return rl_suite.make(f"dm_control/{name}-v0", num_envs=num_envs, nthread=1, **kwargs)


def random_actions(env, steps: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    low, high = (torch.as_tensor(bound) for bound in (env.action_space.low, env.action_space.high))
    shape = (env.num_envs, *env.action_space.shape)
    return [low + (high - low) * torch.rand(shape, generator=generator) for _ in range(steps)]


def test_action_repeat_holds_the_action_sums_the_rewards_and_shortens_the_episode():
    once, twice = make(seed=3), make(seed=3, action_repeat=2)
    once.reset(), twice.reset()
    assert (once.max_episode_steps, twice.max_episode_steps) == (1000, 500)
    assert twice.dt == pytest.approx(2 * once.dt)
    for action in random_actions(once, 5):
        first = once.step(action)[1].clone()  # the env's buffers: the next step overwrites them
        second = once.step(action)[1].clone()
        obs, summed, *_ = twice.step(action)
        torch.testing.assert_close(summed, first + second, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(obs, once._obs)


def test_episodes_end_by_truncation_only_at_the_time_limit():
    env = make("pendulum-swingup", 2, seed=0, action_repeat=4)
    env.reset()
    action = torch.zeros(2, 1)
    for step in range(1, 251):
        _, _, terminated, truncated, info = env.step(action)
        assert not terminated.any()
        assert bool(truncated.all()) == (step == 250)
    assert info["episode_length"].tolist() == [250, 250]


def test_same_seed_same_starts_and_another_seed_differs():
    a, b, c = make(seed=7), make(seed=7), make(seed=8)
    np.testing.assert_array_equal(a.reset().numpy(), b.reset().numpy())
    assert not np.allclose(a._obs.numpy(), c.reset().numpy())


@pytest.mark.parametrize("name", ["pendulum-swingup", "reacher-easy", "quadruped-walk"])  # targets, activations
def test_state_dict_resumes_exactly(name):
    env = make(name, 3, seed=1)
    env.reset()
    actions = random_actions(env, 20)
    for action in actions[:10]:
        env.step(action)
    saved = {key: value.clone() for key, value in env.state_dict().items()}
    expected = [torch.cat([obs, reward[:, None]], 1).clone() for obs, reward, *_ in map(env.step, actions[10:])]
    resumed = make(name, 3, seed=99)
    resumed.load_state_dict(saved)
    got = [torch.cat([obs, reward[:, None]], 1).clone() for obs, reward, *_ in map(resumed.step, actions[10:])]
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_set_state_of_chosen_environments_leaves_the_others():
    env = make("cartpole-balance", 3, seed=0)
    env.reset()
    qpos, qvel, task_state = env.get_state()
    before = env._obs.clone()
    obs = env.set_state(qpos[:1] + 0.1, qvel[:1], env_ids=torch.tensor([2]))
    torch.testing.assert_close(obs[:2], before[:2])
    assert obs[2, 0].item() == pytest.approx(qpos[0, 0].item() + 0.1, abs=1e-6)  # the cart's position


def test_set_state_with_a_task_state_moves_the_target_of_the_chosen_environments_only():
    env = make("reacher-easy", 3, seed=0)
    env.reset()
    qpos, qvel, task_state = env.get_state()
    moved = task_state[:1] + torch.tensor([[0.05, -0.05]], dtype=task_state.dtype)  # the target's x, y
    env.set_state(qpos[:1], qvel[:1], moved, env_ids=torch.tensor([1]))
    after = env.get_state()[2]
    torch.testing.assert_close(after[1], moved[0])
    torch.testing.assert_close(after[[0, 2]], task_state[[0, 2]])
    with pytest.raises(ValueError, match=r"task_state \(\[rows, 2\]\)"):
        env.set_state(qpos, qvel, task_state[:, :1])


def test_unknown_domain_or_task_is_refused_with_close_matches():
    with pytest.raises(ValueError, match=r"unknown Control Suite domain 'chetah'\. Did you mean 'cheetah'\?"):
        DMCVecEnv(domain="chetah", task="run")
    with pytest.raises(ValueError, match=r"unknown cartpole task 'swingupp'\. Did you mean 'swingup'"):
        DMCVecEnv(domain="cartpole", task="swingupp")
    with pytest.raises(rl_suite.registry.UnknownEnvError, match=r"Did you mean 'dm_control/cartpole-swingup-v0'"):
        rl_suite.make("dm_control/cartpole-swingupp-v0")


@pytest.mark.parametrize("action_repeat", [0, -2, 1.5, True])
def test_an_action_repeat_below_one_or_not_an_integer_is_refused(action_repeat):
    with pytest.raises(ValueError, match="action_repeat must be an integer of 1 or more"):
        make(action_repeat=action_repeat)


def test_without_dm_control_the_error_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "dm_control", None)  # as if it were not installed: find_spec gives None
    with pytest.raises(ModuleNotFoundError, match=r"the dm_control package: pip install 'rl-suite\[dmc\]'"):
        make()


def test_a_wrong_action_shape_is_refused():
    env = make(num_envs=2)
    env.reset()
    with pytest.raises(ValueError, match="actions"):
        env.step(torch.zeros(2, 3))


# -- the backend features the suite needs ---------------------------------------------------------------------------


def test_cpu_step_of_chosen_simulations_leaves_the_others_exactly():
    from rl_suite.envs.dmc.base import compile_model, read_model
    from rl_suite.envs.mujoco.physics import CPUPhysics

    model = compile_model(read_model("cheetah.xml"))
    stepped, reference = CPUPhysics(model, 3, ("xpos",), nthread=1), CPUPhysics(model, 3, ("xpos",), nthread=1)
    for physics in (stepped, reference):
        physics.reset()
        physics.ctrl.fill_(0.5)
        physics.step(3)
    before = stepped.state.clone(), stepped.derived["xpos"].clone()
    stepped.step(7, env_ids=torch.tensor([1]))
    reference.step(7)
    torch.testing.assert_close(stepped.state[[0, 2]], before[0][[0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(stepped.derived["xpos"][[0, 2]], before[1][[0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(stepped.state[1], reference.state[1], rtol=0, atol=0)


def test_cpu_forward_without_actuation_is_mujocos_with_actuation_disabled():
    import mujoco

    from rl_suite.envs.dmc.base import suite_dir
    from rl_suite.envs.mujoco.physics import CPUPhysics

    path = str(suite_dir() / "quadruped.xml")  # position actuators: bias forces that actuation adds
    model, disabled = mujoco.MjModel.from_xml_path(path), mujoco.MjModel.from_xml_path(path)
    disabled.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
    qpos = model.qpos0.copy()
    qpos[2] += 0.5
    qpos[7:] += 0.2  # joints away from the servos' zero, where the bias forces act
    physics = CPUPhysics(model, 2, ("sensordata",), nthread=1)
    physics.qpos.copy_(torch.as_tensor(qpos))
    for actuation, mujoco_model in ((True, model), (False, disabled)):
        physics.forward(actuation=actuation)
        data = mujoco.MjData(mujoco_model)
        data.qpos[:] = qpos
        mujoco.mj_forward(mujoco_model, data)
        np.testing.assert_array_equal(physics.derived["sensordata"][1].numpy(), data.sensordata)
    physics.forward()  # back to the batch's own model
    assert not np.array_equal(physics.derived["sensordata"][1].numpy(), data.sensordata)
    physics.model_field("geom_friction")
    with pytest.raises(RuntimeError, match="simulations with their own geom_friction cannot use it"):
        physics.forward(actuation=False)


def test_cheetah_on_warp_follows_the_cpu_backend_from_the_same_starts():
    """MuJoCo Warp (float32, here on warp's CPU device) against MuJoCo (float64) on the same seeded episode starts
    (the 200 settling steps run on the resetting worlds only) and actions: observations and rewards within what
    float32 and the earlier-stopping float32 solver allow over five control steps (tests/test_mujoco_warp.py measures
    those per field)."""
    pytest.importorskip("mujoco_warp")
    cpu, warp = make("cheetah-run", 4, seed=5), make("cheetah-run", 4, seed=5, backend="warp")
    torch.testing.assert_close(warp.reset(), cpu.reset(), rtol=0, atol=5e-3)
    for action in random_actions(cpu, 5):
        obs_cpu, reward_cpu, *_ = cpu.step(action)
        obs_warp, reward_warp, *_ = warp.step(action)
        torch.testing.assert_close(obs_warp, obs_cpu, rtol=0, atol=5e-2)
        torch.testing.assert_close(reward_warp, reward_cpu, rtol=0, atol=5e-3)


def test_warp_keeps_the_acceleration_stage_sensors_after_a_step():
    """Hopper's touch sensors are acceleration-stage: after the step they carry the last physics step's contact
    forces (mjw.step1 alone would zero them), as on the CPU backend, from the same state on the floor."""
    pytest.importorskip("mujoco_warp")
    cpu, warp = make("hopper-stand", 4, seed=2), make("hopper-stand", 4, seed=2, backend="warp")
    cpu.reset()
    still = torch.zeros(4, 4)
    for _ in range(60):  # let the hoppers fall onto the floor
        obs, *_ = cpu.step(still)
    qpos, qvel, _ = cpu.get_state()
    cpu.set_state(qpos, qvel)
    warp.reset()
    warp.set_state(qpos, qvel)
    obs_cpu, obs_warp = cpu.step(still)[0], warp.step(still)[0]
    touch_cpu, touch_warp = obs_cpu[:, -2:], obs_warp[:, -2:]  # log1p of the toe's and heel's touch sensors
    assert (touch_cpu > 0.5).any(), "no hopper stands on the floor: the check would compare zeros"
    torch.testing.assert_close(touch_warp, touch_cpu, rtol=0, atol=0.1)


def test_warp_forward_without_actuation_leaves_out_the_actuator_forces():
    pytest.importorskip("mujoco_warp")
    from rl_suite.envs.dmc.base import compile_model, read_model
    from rl_suite.envs.mujoco.warp_physics import WarpPhysics

    physics = WarpPhysics(compile_model(read_model("cheetah.xml")), 2, ("qfrc_actuator",))
    physics.ctrl.fill_(0.5)
    physics.forward()
    assert physics.derived["qfrc_actuator"].abs().amax() > 1.0
    physics.forward(actuation=False)
    assert physics.derived["qfrc_actuator"].abs().amax() == 0.0
    physics.forward()  # and the flag is restored
    assert physics.derived["qfrc_actuator"].abs().amax() > 1.0


@pytest.mark.parametrize(
    "name",
    [
        "cartpole-swingup",  # plain draws
        "cheetah-run",  # settling steps on the resetting simulations
        "finger-turn_easy",  # a target in a model field, then a redraw-until-apart loop
        "ball_in_cup-catch",  # redraw-until-apart
        "humanoid-stand",  # redraw-until-apart, every joint
        "quadruped-walk",  # one draw, then the height raised until apart; activations
        "reacher-easy",  # a target in a model field
    ],
)
def test_masked_and_indexed_resets_give_identical_trajectories(name):
    """A partial reset by mask (full-width draws, filler rows) and by index (only the chosen rows) draw the same
    starts from the same streams: the same seed gives bit-identical states, task states, observations, rewards and
    streams, through two resets of environments 1 and 4 mid-run (forced as ``VecEnv._reset_ended`` does them)."""
    from rl_suite.env import Selection

    num_envs, ids = 6, torch.tensor([1, 4])
    mask = torch.zeros(num_envs, dtype=torch.bool).index_fill_(0, ids, True)
    envs = {masked: make(name, num_envs, seed=11, masked_resets=masked) for masked in (True, False)}
    for env in envs.values():
        env.reset()
    for step, action in enumerate(random_actions(envs[True], 30, seed=4)):
        got = {}
        for masked, env in envs.items():
            reward = env.step(action)[1].clone()
            if step in (9, 19):
                before = env.physics.qpos.clone()
                if masked:
                    env._reset_envs(Selection(mask=mask))
                    env._observe_current()
                else:
                    env._reset_envs(Selection(ids=ids))
                    env._observe_current(ids)
                changed = (env.physics.qpos != before).any(dim=1)
                assert changed.tolist() == mask.tolist(), "the reset must change envs 1 and 4, and only them"
            got[masked] = (*env.get_state(), env._obs.clone(), reward, env.rng.get_state())
        for what, m, i in zip(("qpos", "qvel", "task_state", "obs", "reward", "streams"), *got.values(), strict=True):
            assert torch.equal(m, i), f"{name}, step {step}: masked and indexed resets differ in {what}"
