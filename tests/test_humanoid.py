"""The biped reward terms of the velocity task and the G1-class humanoid (envs/robots: velocity.py, config.py,
models/humanoid.xml)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_suite.envs.robots import config as robots  # noqa: E402
from rl_suite.envs.robots.velocity import (  # noqa: E402
    HUMANOID_SETTINGS,
    REWARD_TERMS,
    LeggedVelocityEnv,
    single_stance_time,
)

BIPED_TERMS = dict(feet_slip_weight=-0.1, feet_clearance_weight=-2.0, feet_clearance_target=0.05)


def make(num_envs=3, seed=0, robot="quadruped", **settings):
    return LeggedVelocityEnv(num_envs, seed=seed, robot=robot, nthread=1, **settings)


# -- the terms' maths ------------------------------------------------------------------------------------------


def test_single_stance_time_follows_isaac_labs_biped_air_time_by_hand():
    """Two feet, three environments: single stance pays the shorter of the stance foot's contact time and the swing
    foot's air time, capped; double support and flight pay nothing."""
    contact = torch.tensor([[True, False], [True, True], [False, False], [False, True]])
    contact_time = torch.tensor([[0.30, 0.0], [0.1, 0.2], [0.0, 0.0], [0.0, 0.06]])
    air_time = torch.tensor([[0.0, 0.12], [0.0, 0.0], [0.3, 0.3], [0.55, 0.0]])
    reward = single_stance_time(contact, contact_time, air_time, cap=0.4)
    np.testing.assert_allclose(reward.numpy(), [0.12, 0.0, 0.0, 0.06], atol=1e-7)
    long_steps = single_stance_time(contact[:1], torch.tensor([[0.9, 0.0]]), torch.tensor([[0.0, 0.7]]), cap=0.4)
    assert long_steps.item() == pytest.approx(0.4)  # the cap


def test_the_feet_velocities_are_mujocos_object_velocities_at_the_foot_origins():
    env = make(3, **BIPED_TERMS)
    env.reset()
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        env.step(0.5 * torch.randn(3, 12, generator=g))
    env.physics.forward(torch.arange(3))  # derived fields of the current state, as mj_forward gives them
    state = env._read_state()
    qpos, qvel = (x.numpy() for x in env.get_state())
    data = mujoco.MjData(env.model)
    velocity = np.zeros(6)
    moved = 0.0
    for i in range(3):
        data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_forward(env.model, data)
        for f, body in enumerate(env.bound.feet):
            mujoco.mj_objectVelocity(env.model, data, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
            np.testing.assert_allclose(state["feet_pos"][i, f].numpy(), data.xpos[body], atol=1e-6)
            np.testing.assert_allclose(state["feet_vel"][i, f].numpy(), velocity[3:], atol=1e-4)
            moved += np.linalg.norm(velocity[3:])
    assert moved > 0.1  # the feet were moving: the check compared something


def test_slip_clearance_and_joint_deviation_are_the_documented_sums():
    deviation = ("FR_hip_joint", "RL_calf_joint")
    env = make(
        3, standing_probability=0.0, min_command_speed=0.0, **BIPED_TERMS,
        joint_deviation_weight=-0.1, joint_deviation_joints=deviation,
    )  # fmt: skip
    env.reset()
    g = torch.Generator().manual_seed(2)
    for _ in range(10):
        env.step(0.5 * torch.randn(3, 12, generator=g))
    before = env._term_sums.clone()
    env.step(0.5 * torch.randn(3, 12, generator=g))
    assert not env._running[1].eq(1).any()  # no episode restarted: the sums grew by this step's terms
    state = env._step_state
    weighted = (env._term_sums - before) / env.dt
    contact = state["forces"][:, env._feet_rows, 2] > 1.0
    speed = state["feet_vel"][..., :2].norm(dim=-1)
    expected_slip = (speed * contact).sum(1)
    command = env._commands
    active = command[:, :2].norm(dim=1) + command[:, 2].abs() > 0.05
    expected_clearance = ((state["feet_pos"][..., 2] - 0.05).abs() * speed).sum(1) * active
    columns = [robots.QUADRUPED.joints.index(name) for name in deviation]
    expected_deviation = state["joint_pos"][:, columns].abs().sum(1)
    term = {name: weighted[:, i] for i, name in enumerate(REWARD_TERMS)}
    torch.testing.assert_close(term["feet_slip"], -0.1 * expected_slip, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(term["feet_clearance"], -2.0 * expected_clearance, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(term["joint_deviation"], -0.1 * expected_deviation, rtol=1e-4, atol=1e-6)
    assert (expected_slip > 0).any() and (expected_clearance > 0).all() and (expected_deviation > 0).all()


def test_the_quadrupeds_step_reads_no_foot_kinematics_and_pays_no_biped_term():
    env = make(2)
    assert set(env.physics.derived) == {"cfrc_ext", "actuator_force"} and "contact_time" not in env._task_state
    env.reset()
    for _ in range(20):
        env.step(torch.randn(2, 12))
    biped = [REWARD_TERMS.index(name) for name in ("feet_air_time_biped", "feet_slip", "feet_clearance")]
    assert env._term_sums[:, biped].abs().sum() == 0


def test_biped_settings_outside_their_ranges_are_refused():
    with pytest.raises(ValueError, match="joint_deviation_joints names \\['knee'\\]"):
        make(1, joint_deviation_joints=("knee",))
    with pytest.raises(ValueError, match="feet_air_time_biped_threshold must be positive"):
        make(1, feet_air_time_biped_threshold=0.0)
    with pytest.raises(ValueError, match="feet_clearance_target must be a finite height"):
        make(1, feet_clearance_target=float("nan"))


def test_the_humanoid_settings_name_only_task_settings_and_the_humanoids_joints():
    env = make(1, robot="humanoid", **HUMANOID_SETTINGS)
    assert set(HUMANOID_SETTINGS["joint_deviation_joints"]) <= set(env.robot.joints)


# -- the humanoid: model, registered task ------------------------------------------------------------------------


def test_the_humanoid_model_weighs_what_unitrees_urdf_says_and_has_its_joint_ranges():
    """g1_sources.md: the 23-DoF G1's URDF links sum to 32.107 kg, of which the model leaves out 2 x 0.001 kg."""
    model = robots.build_model(robots.HUMANOID)
    bound = robots.bind(robots.HUMANOID, model)
    assert model.body_subtreemass[bound.base] == pytest.approx(32.105, abs=0.002)
    assert model.nu == 13 and model.njnt == 14  # the free joint and the 13 actuated hinges: nothing passive
    ranges = dict(zip(robots.HUMANOID.joints, bound.joint_range.tolist(), strict=True))
    assert ranges["left_knee_joint"] == pytest.approx([-0.087267, 2.8798])
    assert ranges["left_hip_roll_joint"] == pytest.approx([-0.5236, 2.9671])
    assert ranges["right_hip_roll_joint"] == pytest.approx([-2.9671, 0.5236])


def standing(robot, seconds=3.0, num_envs=4):
    env = make(num_envs, robot=robot, **{**HUMANOID_SETTINGS, "standing_probability": 1.0, "episode_length_s": 10.0})
    env.reset()
    zeros = torch.zeros(num_envs, 13)
    fell = torch.zeros(num_envs, dtype=torch.bool)
    for _ in range(round(seconds / env.dt)):
        _, _, terminated, _, _ = env.step(zeros)
        fell |= terminated
    return fell, env._read_state()["height"]


def test_the_humanoid_stands_on_stiff_ankles_and_needs_a_policy_on_unitrees_gains():
    """Its mass layout and feet hold it up: with the ankles stiffened to 2,000 N m/rad the default pose stands for
    3 s at the pelvis height Unitree's pose gives (0.78 m). On the published ankle gains (40) a PD-held body tips
    over within about 1.2 s, as a real G1 does without its balance controller: the task's policy must balance."""
    import dataclasses

    stiff = dataclasses.replace(robots.HUMANOID, kp=(100.0, 100.0, 100.0, 150.0, 2000.0, 2000.0) * 2 + (300.0,))
    fell, height = standing(stiff)
    assert not fell.any() and ((height - 0.783).abs() < 0.01).all()
    fell, _ = standing(robots.HUMANOID)
    assert fell.all()


def test_humanoid_velocity_flat_is_the_task_on_the_humanoid_with_the_biped_terms_on():
    import rl_suite

    env = rl_suite.make("HumanoidVelocity-Flat-v0", num_envs=4, seed=0, nthread=1)
    assert env.robot.name == "humanoid" and env.action_space.shape == (13,)
    assert env.observation_space.shape == (51,)  # 3 + 3 + 3 + 3 + 3 x 13: the base velocity observed
    assert env.critic_observation_space.shape == (51 + 3 + 1 + 2 + 21,)
    assert env.reward_preset == "isaaclab_g1"
    assert env.settings.termination_weight == -200.0 and not env.settings.only_positive_rewards
    entry = env.robot_metadata()
    assert entry["joint_names"][-1] == "waist_yaw_joint" and entry["kp"][3] == 150.0
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        env.step(0.3 * torch.randn(4, 13, generator=g))
    sums = dict(zip(REWARD_TERMS, env._term_sums.abs().sum(0).tolist(), strict=True))
    assert sums["feet_slip"] > 0 and sums["joint_deviation"] > 0
    override = rl_suite.make("HumanoidVelocity-Flat-v0", num_envs=1, nthread=1, feet_slip_weight=0.0)
    assert override.settings.feet_slip_weight == 0.0 and override.settings.termination_weight == -200.0


def test_the_humanoid_on_mujoco_warp_agrees_with_the_cpu_backend_step_by_step():
    """As the quadruped's test (tests/test_legged.py), with the biped terms' foot kinematics read from both backends.
    Over 30 steps from seed 0 the largest errors were 1.2e-5 (observations, which hold the base's velocity x 2),
    1.2e-5 (critic) and 1.1e-7 (rewards); the tolerances are about 2-4x those."""
    pytest.importorskip("mujoco_warp")
    from backend_agreement import worst_one_step_differences

    cpu, warp = (
        LeggedVelocityEnv(4, seed=0, robot="humanoid", nthread=1, backend=backend, **HUMANOID_SETTINGS)
        for backend in ("cpu", "warp")
    )
    cpu.reset(seed=0)
    worst = worst_one_step_differences(cpu, warp, steps=30)
    assert worst["obs"] <= 3e-5 and worst["critic_obs"] <= 3e-5 and worst["reward"] <= 4e-7, worst
