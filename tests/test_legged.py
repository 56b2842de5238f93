"""The legged robots (``rl_suite/envs/robots``): the robot layer, our quadruped model, and the velocity-tracking task,
checked against MuJoCo itself (a plain ``MjData`` given the same parameters and controls) and against numbers
computed here by hand."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
from backend_agreement import worst_one_step_differences

mujoco = pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.envs.robots import config as robots  # noqa: E402
from rl_suite.envs.robots import velocity  # noqa: E402
from rl_suite.envs.robots.velocity import LeggedVelocityEnv, quat_rotate_inverse, yaw_of  # noqa: E402
from rl_suite.registry import UntrustedEnvError, trusted_env_spec  # noqa: E402

KIT = dict(  # every piece of the sim-to-real kit that changes the model or the control, on
    friction_range=(0.4, 1.2),
    added_mass_range=(-1.0, 2.0),
    com_offset_range=(-0.03, 0.03),
    motor_strength_range=(0.8, 1.1),
    kp_range=(0.7, 1.3),
    kd_range=(0.5, 1.5),
    max_latency_steps=3,
)


def make(num_envs=4, seed=0, robot="quadruped", **settings):
    settings.setdefault("observe_base_lin_vel", False)  # the tests index the blind policy's observation layout
    return LeggedVelocityEnv(num_envs, seed=seed, robot=robot, nthread=1, **settings)


# -- the quadruped model against its published figures (envs/robots/go1_sources.md) ------------------------------


def test_the_quadruped_model_has_the_published_figures():
    model = robots.build_model(robots.QUADRUPED)
    bound = robots.bind(robots.QUADRUPED, model)
    # 5.204 kg trunk + 4 legs of 0.591 + 0.92 + 0.135862 + 0.06 kg: Unitree's published 12 kg
    assert model.body_mass.sum() == pytest.approx(12.0314, abs=1e-4)
    assert model.body("trunk").mass[0] == pytest.approx(5.204)
    np.testing.assert_allclose(model.body("FR_hip").pos, [0.1881, -0.04675, 0.0])
    np.testing.assert_allclose(model.body("RL_hip").pos, [-0.1881, 0.04675, 0.0])
    np.testing.assert_allclose(model.body("FL_thigh").pos, [0.0, 0.08, 0.0])
    np.testing.assert_allclose(model.body("RR_calf").pos, [0.0, 0.0, -0.213])
    np.testing.assert_allclose(bound.joint_range[:3], [[-0.863, 0.863], [-0.686, 4.501], [-2.818, -0.888]])
    # one position actuator per joint, in action order, with the config's gains and torque limits
    assert model.nu == 12 and [model.actuator(i).name for i in range(3)] == [
        "FR_hip_joint_pd",
        "FR_thigh_joint_pd",
        "FR_calf_joint_pd",
    ]
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], 20.0)
    np.testing.assert_allclose(model.actuator_biasprm[:, 1:3], [[-20.0, -0.5]] * 12)
    np.testing.assert_allclose(model.actuator_forcerange[:3], [[-23.7, 23.7], [-23.7, 23.7], [-35.55, 35.55]])
    # the inertias, mirrored as unitree_ros mirrors them: the hips' ixy flips for the right legs and for the rear
    # ones, ixz for the rear ones, iyz for the right ones; the thighs' ixy and iyz flip for the right legs
    hip = np.array([0.000334008405, 0.000619101213, 0.00040057614, -0.000010826066, 0.000001290732, 0.000001643194])
    thigh = np.array([0.004431760472, 0.004485671726, 0.000740309489, 0.000057496807, -0.000218457134, 0.000572001265])
    for leg, front, left in (("FR", 1, -1), ("FL", 1, 1), ("RR", -1, -1), ("RL", -1, 1)):
        np.testing.assert_allclose(
            full_inertia(model, f"{leg}_hip"), hip * [1, 1, 1, left * front, front, left], atol=1e-12
        )
        np.testing.assert_allclose(full_inertia(model, f"{leg}_thigh"), thigh * [1, 1, 1, left, 1, left], atol=1e-12)
    assert model.opt.timestep == 0.005
    assert model.geom("terrain").type == mujoco.mjtGeom.mjGEOM_PLANE


def full_inertia(model: mujoco.MjModel, body: str) -> np.ndarray:
    """A body's inertia about its centre of mass in its own frame, as (xx, yy, zz, xy, xz, yz)."""
    rotation = np.zeros(9)
    mujoco.mju_quat2Mat(rotation, model.body(body).iquat)
    rotation = rotation.reshape(3, 3)
    matrix = rotation @ np.diag(model.body(body).inertia) @ rotation.T
    return matrix[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]


def test_a_model_files_floor_and_actuators_are_replaced_by_the_tasks():
    model = robots.build_model(robots.ANT)  # gymnasium's ant.xml has a floor and eight motors of gear 150
    names = [model.geom(i).name for i in range(model.ngeom) if model.geom_bodyid[i] == 0]
    assert names == ["terrain"]
    assert model.nu == 8 and model.actuator_gear[:, 0].tolist() == [1.0] * 8
    np.testing.assert_allclose(model.actuator_gainprm[:, 0], 40.0)


@pytest.mark.parametrize(("robot", "num_envs"), [("quadruped", 256), ("ant", 32)])
def test_each_robot_stands_for_20_seconds_at_the_default_pose_with_zero_action(robot, num_envs):
    env = make(num_envs, robot=robot, episode_length_s=20.0, standing_probability=1.0)
    env.reset()
    zeros = torch.zeros(num_envs, env.action_space.shape[0])
    for _ in range(env.max_episode_steps - 1):
        _, _, terminated, truncated, _ = env.step(zeros)
        assert not terminated.any() and not truncated.any()
    obs, _, terminated, truncated, info = env.step(zeros)
    assert truncated.all() and not terminated.any()
    gravity = info["final_obs"][:, 3:6]
    assert (gravity[:, 2] < -0.95).all()  # upright: the trunk tilted by less than 18 degrees
    assert (info["episode_metrics"]["fell"] == 0).all()


def test_a_limp_robot_falls_and_the_fall_is_reported():
    """The standing test can fail: with no stiffness the legs fold, and the trunk's contact ends the episode."""
    limp = dataclasses.replace(robots.QUADRUPED, kp=0.0, kd=0.1)
    env = make(8, robot=limp)
    env.reset()
    fell = torch.zeros(8, dtype=torch.bool)
    for _ in range(100):
        _, _, terminated, _, info = env.step(torch.zeros(8, 12))
        fell |= terminated
        assert torch.equal(info["episode_metrics"]["fell"].bool(), terminated)
    assert fell.all()


# -- the task against MuJoCo and against hand-computed numbers ---------------------------------------------------


def reference(env: LeggedVelocityEnv, i: int) -> tuple[mujoco.MjModel, mujoco.MjData]:
    """A plain MuJoCo simulation of environment ``i``: its model with the env's randomised parameters (constants
    recomputed by MuJoCo) and its current state."""
    model = copy.copy(env.model)
    for name, (field, _) in env._randomized.items():
        getattr(model, name)[:] = field[i].numpy()
    data = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)
    qpos, qvel = env.get_state()
    data.qpos[:], data.qvel[:] = qpos[i].numpy(), qvel[i].numpy()
    mujoco.mj_forward(model, data)
    return model, data


def test_the_sim_to_real_kit_steps_as_mujoco_with_the_same_parameters_and_latency():
    env = make(4, **KIT)
    env.reset()
    sims = [reference(env, i) for i in range(4)]
    robot = robots.QUADRUPED
    # the task computes targets in float32, then steps float64 physics with them
    default = torch.tensor(robot.per_joint("default_joint_pos"), dtype=torch.float32)
    scale = torch.tensor(robot.per_joint("action_scale"), dtype=torch.float32)
    previous = [default.double().numpy() for _ in range(4)]
    latency = env._latency.tolist()
    assert sorted(set(latency)) != [0]  # the kit drew delays
    g = torch.Generator().manual_seed(3)
    for _ in range(25):
        actions = 0.5 * torch.randn(4, 12, generator=g)
        env.step(actions)
        qpos, qvel = env.get_state()
        for i, (model, data) in enumerate(sims):
            target = (default + scale * actions[i]).double().numpy()
            for substep in range(4):
                data.ctrl[:] = previous[i] if substep < latency[i] else target
                mujoco.mj_step(model, data)
            previous[i] = target
            np.testing.assert_allclose(qpos[i].numpy(), data.qpos, rtol=0, atol=1e-10)
            np.testing.assert_allclose(qvel[i].numpy(), data.qvel, rtol=0, atol=1e-8)
    # the parameters mattered: the same actions took differently randomised robots apart
    params = env._params
    assert params[:, 0].unique().numel() == 4 and (params[:, 0] >= 0.4).all() and (params[:, 0] <= 1.2).all()
    assert (qpos[0] - qpos[1]).abs().max() > 1e-3


def rotate_inverse(quat: np.ndarray, vector: np.ndarray) -> np.ndarray:
    result = np.zeros(3)
    conjugate = quat * np.array([1.0, -1.0, -1.0, -1.0])
    mujoco.mju_rotVecQuat(result, vector, conjugate)
    return result


def test_quaternion_helpers_agree_with_mujoco():
    g = np.random.default_rng(0)
    quats = g.normal(size=(16, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    vectors = g.normal(size=(16, 3))
    ours = quat_rotate_inverse(torch.tensor(quats), torch.tensor(vectors)).numpy()
    expected = np.stack([rotate_inverse(q, v) for q, v in zip(quats, vectors, strict=True)])
    np.testing.assert_allclose(ours, expected, atol=1e-12)
    for q, yaw in zip(quats, yaw_of(torch.tensor(quats)).numpy(), strict=True):
        matrix = np.zeros(9)
        mujoco.mju_quat2Mat(matrix, q)
        np.testing.assert_allclose(yaw, math.atan2(matrix[3], matrix[0]), atol=1e-9)


def test_observation_and_reward_terms_match_numbers_computed_from_mujocos_state():
    env = make(3, standing_probability=0.0, min_command_speed=0.0)
    env.reset()
    g = torch.Generator().manual_seed(5)
    actions = 0.3 * torch.randn(3, 12, generator=g)
    env.step(actions)  # a first step, so that the last action and velocities are not zero
    last = actions.clone()
    before = env._last_joint_vel.clone()
    actions = 0.3 * torch.randn(3, 12, generator=g)
    obs, reward, _, _, info = env.step(actions)
    qpos, qvel = (x.numpy() for x in env.get_state())
    robot, dt = robots.QUADRUPED, 0.02
    default = robot.per_joint("default_joint_pos")
    data = mujoco.MjData(env.model)
    for i in range(3):
        quat = qpos[i, 3:7] / np.linalg.norm(qpos[i, 3:7])
        command = env._commands[i].double().numpy()
        lin_vel = rotate_inverse(quat, qvel[i, :3])
        ang_vel = qvel[i, 3:6]
        gravity = rotate_inverse(quat, np.array([0.0, 0.0, -1.0]))
        joint_pos, joint_vel = qpos[i, 7:] - default, qvel[i, 6:]
        expected_obs = np.concatenate(
            [0.25 * ang_vel, gravity, command * [2.0, 2.0, 0.25], joint_pos, 0.05 * joint_vel, actions[i].numpy()]
        )
        np.testing.assert_allclose(obs[i].numpy(), expected_obs, rtol=1e-5, atol=1e-5)
        # the critic's: the policy's terms, then the base's velocity (x 2) and height, the feet's contacts, the
        # nominal parameters (friction 1, no added mass or offset, strengths and gain factors 1, no latency)
        critic = info["critic_obs"][i].numpy()
        np.testing.assert_allclose(critic[:45], expected_obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(critic[45:49], [*(2 * lin_vel), qpos[i, 2]], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(critic[53:], [1.0, 0, 0, 0, 0, *[1.0] * 12, 1.0, 1.0, 0.0])
        # the reward terms, each weighted and multiplied by the control period
        data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
        torques = env.physics.derived["actuator_force"][i].numpy()
        terms = {  # the default weights: Isaac Lab's Go1 (tracking 1.5 and 0.75, orientation -2.5, torques -2e-4)
            "tracking_lin_vel": 1.5 * math.exp(-np.sum((command[:2] - lin_vel[:2]) ** 2) / 0.25),
            "tracking_ang_vel": 0.75 * math.exp(-((command[2] - ang_vel[2]) ** 2) / 0.25),
            "lin_vel_z": -2.0 * lin_vel[2] ** 2,
            "ang_vel_xy": -0.05 * np.sum(ang_vel[:2] ** 2),
            "orientation": -2.5 * np.sum(gravity[:2] ** 2),
            "torques": -2e-4 * np.sum(torques**2),
            "dof_acc": -2.5e-7 * np.sum(((joint_vel - before[i].numpy()) / dt) ** 2),
            "action_rate": -0.01 * np.sum((actions[i].numpy() - last[i].numpy()) ** 2),
        }
        # dof_pos_limits, feet_air_time and collision are zero here: joints within range, no touch-down after
        # flight, no thigh or calf contact; the total is not clipped at zero
        assert reward[i].item() == pytest.approx(sum(terms.values()) * dt, rel=1e-4, abs=1e-6)


def test_the_policy_sees_the_base_velocity_first_only_when_asked_and_the_critic_always():
    blind, sighted = make(2, seed=3), make(2, seed=3, observe_base_lin_vel=True)
    assert sighted.observation_space.shape == (48,) and blind.observation_space.shape == (45,)
    assert (
        sighted.observation_terms[0] == ("base_lin_vel", 3) and sighted.observation_terms[1:] == blind.observation_terms
    )
    blind.reset(), sighted.reset()
    actions = 0.3 * torch.randn(2, 12, generator=torch.Generator().manual_seed(1))
    obs, _, _, _, info = blind.step(actions)
    seen, _, _, _, seen_info = sighted.step(actions)
    torch.testing.assert_close(seen[:, 3:], obs)
    torch.testing.assert_close(seen[:, :3], info["critic_obs"][:, 45:48])  # the base velocity x 2, as the critic's
    assert seen[:, :3].abs().max() > 0.01
    torch.testing.assert_close(seen_info["critic_obs"], torch.cat([seen, info["critic_obs"][:, 45:]], dim=1))
    assert sighted.robot_metadata()["observation"][0] == {"name": "base_lin_vel", "size": 3, "scale": [2.0] * 3}
    with pytest.raises(ValueError, match="obs_noise_scales names unknown terms"):
        make(1, obs_noise_level=1.0, obs_noise_scales={"lin_vel": 0.1})


def test_the_termination_penalty_is_paid_on_the_step_that_ends_by_falling_only():
    # roll or pitch beyond 0.01 rad ends an episode at once; a time limit of 3 steps ends the others by truncation
    env = make(4, max_roll_pitch=0.01, episode_length_s=0.06, termination_weight=-200.0, only_positive_rewards=False)
    env.reset()
    actions = torch.zeros(4, 12)
    actions[:2] = 3.0  # two robots thrown off balance
    terminated = truncated = torch.zeros(4, dtype=torch.bool)
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(actions)
        if terminated.any():
            break
    assert terminated.any() and not terminated.all()
    metric = info["episode_metrics"]["reward_termination"]
    torch.testing.assert_close(metric[terminated], torch.full_like(metric[terminated], -200.0 * 0.02))
    assert (reward[terminated] < -3.0).all() and (reward[~terminated] > -3.0).all()
    assert not (terminated & truncated).any()


def test_commands_are_drawn_in_their_ranges_with_standing_and_small_speeds_zeroed():
    env = make(2000, lin_vel_x_range=(0.5, 1.0), lin_vel_y_range=(-0.3, 0.3), ang_vel_yaw_range=(-0.5, 0.0))
    env.reset()
    commands = env._commands
    standing = (commands == 0).all(1)
    assert 0.07 < standing.float().mean() < 0.13  # standing_probability 0.1
    moving = commands[~standing]
    assert (moving[:, 0] >= 0.5).all() and (moving[:, 0] <= 1.0).all()
    assert (moving[:, 1].abs() <= 0.3).all() and (moving[:, 2] >= -0.5).all() and (moving[:, 2] <= 0.0).all()
    slow = make(2000, lin_vel_x_range=(-0.15, 0.15), lin_vel_y_range=(-0.1, 0.1), standing_probability=0.0)
    slow.reset()
    assert (slow._commands[:, :2] == 0).all()  # slower than min_command_speed 0.2: zeroed, as legged_gym does
    assert (slow._commands[:, 2] != 0).any()


def test_heading_mode_commands_half_the_heading_error_as_yaw_rate():
    env = make(64, heading_command=True, standing_probability=0.0)
    env.reset()
    env.step(torch.zeros(64, 12))
    qpos, _ = env.get_state()
    yaw = yaw_of(qpos[:, 3:7].float())
    error = torch.remainder(env._heading - yaw + math.pi, 2 * math.pi) - math.pi
    torch.testing.assert_close(env._commands[:, 2], (0.5 * error).clamp(-1, 1))


def test_a_standing_policy_tracks_at_the_commands_own_speed():
    """What an untrained, standing policy scores: the tracking error is the command's own RMS speed, far above the
    0.25 m/s goal of the issue."""
    env = make(64, episode_length_s=2.0, standing_probability=0.0, lin_vel_x_range=(0.6, 0.6), lin_vel_y_range=(0, 0))
    env.reset()
    for _ in range(env.max_episode_steps):
        _, _, _, _, info = env.step(torch.zeros(64, 12))
    assert info["done"].all()
    torch.testing.assert_close(info["episode_metrics"]["tracking_error_lin"], torch.full((64,), 0.6), atol=0.06, rtol=0)


def test_pushes_kick_the_base_at_their_interval():
    kicked, calm = make(8, push_velocity=1.0, push_interval_s=0.1), make(8)
    for env in (kicked, calm):
        env.reset()
    differences = []
    for _ in range(10):
        for env in (kicked, calm):
            env.step(torch.zeros(8, 12))
        differences.append((kicked.get_state()[1][:, :2] - calm.get_state()[1][:, :2]).abs().max().item())
    assert max(differences[:4]) < 1e-9 and differences[4] > 0.1  # the first push: step 5 (0.1 s)


def test_the_command_curriculum_widens_forward_speeds_only_after_good_tracking():
    env = make(4, command_curriculum=True, max_command_curriculum=1.5)
    env.reset()
    best = env._weights[0] * env.max_episode_steps
    env._curriculum_sums.copy_(torch.stack([0.5 * best * 3, torch.tensor(3.0)]))  # 50% of perfect tracking
    env._update_curriculum()
    assert env._command_ranges[:, 0].tolist() == [-1.0, 1.0]
    for widened in ([-1.5, 1.5], [-1.5, 1.5]):  # 90%: widened by 0.5, then held at the maximum
        env._curriculum_sums.copy_(torch.stack([0.9 * best * 2, torch.tensor(2.0)]))
        env._update_curriculum()
        assert env._command_ranges[:, 0].tolist() == widened


# -- determinism, reset modes and resume ---------------------------------------------------------------------------


def rollout(env, steps=40, seed=7):
    g = torch.Generator().manual_seed(seed)
    outputs = []
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(0.8 * torch.randn(env.num_envs, 12, generator=g))
        outputs.append(torch.cat([obs, info["critic_obs"], reward[:, None], terminated[:, None].float()], 1).clone())
    return torch.stack(outputs)


NOISY = dict(KIT, obs_noise_level=1.0, push_velocity=0.5, push_interval_s=0.2, episode_length_s=0.3)


def test_masked_and_indexed_resets_give_identical_results():
    by_index, by_mask = make(6, masked_resets=False, **NOISY), make(6, masked_resets=True, **NOISY)
    for env in (by_index, by_mask):
        env.reset(seed=3)
    torch.testing.assert_close(rollout(by_index), rollout(by_mask), rtol=0, atol=0)


def test_an_environments_draws_do_not_depend_on_how_many_there_are():
    small, large = make(2, **NOISY), make(5, **NOISY)
    small.reset(seed=1), large.reset(seed=1)
    torch.testing.assert_close(small._params, large._params[:2], rtol=0, atol=0)
    torch.testing.assert_close(small._commands, large._commands[:2], rtol=0, atol=0)


def test_a_resumed_env_continues_exactly():
    env = make(4, **NOISY)
    env.reset(seed=2)
    rollout(env, steps=7)
    state = copy.deepcopy(env.state_dict())
    expected = rollout(env, steps=20, seed=9)
    resumed = make(4, **NOISY)
    resumed.reset(seed=123)
    resumed.load_state_dict(state)
    torch.testing.assert_close(rollout(resumed, steps=20, seed=9), expected, rtol=0, atol=0)


# -- registry, metadata and bad input ----------------------------------------------------------------------------


def test_the_registered_ids_take_the_task_settings_from_a_file_but_not_another_robot():
    env_id, kwargs = trusted_env_spec("QuadrupedVelocity-Flat-v0", {"push_velocity": 1.0}, "a run")
    assert kwargs == {"push_velocity": 1.0}
    with pytest.raises(UntrustedEnvError, match="'robot' is not a keyword argument of QuadrupedVelocity-Flat-v0"):
        trusted_env_spec("QuadrupedVelocity-Flat-v0", {"robot": "ant"}, "a run")
    with rl_suite.make("AntVelocity-Flat-v0", num_envs=2) as env:
        assert env.robot.name == "ant" and env.observation_space.shape == (36,)  # the base velocity observed


def test_bad_robot_configs_and_settings_get_errors_that_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match=r"joints \['FR_knee'\] are not in quadruped.xml"):
        robots.build_model(dataclasses.replace(robots.QUADRUPED, joints=("FR_knee", *robots.QUADRUPED.joints[1:])))
    with pytest.raises(ValueError, match="kp has 3 values for 12 joints"):
        dataclasses.replace(robots.QUADRUPED, kp=(20.0, 20.0, 20.0))
    with pytest.raises(ValueError, match="feet names 'paw', which is neither a body nor a geom"):
        make(1, robot=dataclasses.replace(robots.QUADRUPED, feet=("paw",)))
    fixed = tmp_path / "fixed.xml"
    xml = robots.mjcf_path("quadruped.xml").read_text().replace('<freejoint name="root"/>', "")
    fixed.write_text(xml)
    with pytest.raises(ValueError, match="has no free joint"):
        make(1, robot=dataclasses.replace(robots.QUADRUPED, mjcf=str(fixed)))
    with pytest.raises(ValueError, match=r"lin_vel_x_range is inverted: low 1.0 > high -1.0"):
        make(1, lin_vel_x_range=(1.0, -1.0))
    with pytest.raises(TypeError, match=r"unknown settings \['push_speed'\]"):
        make(1, push_speed=1.0)
    with pytest.raises(ValueError, match="unknown robot 'go2'"):
        make(1, robot="go2")
    with pytest.raises(FileNotFoundError, match="model file 'missing.xml' not found"):
        make(1, robot=dataclasses.replace(robots.QUADRUPED, mjcf="missing.xml"))
    env = make(2)
    env.reset()
    bad = torch.zeros(2, 12)
    bad[1, 4] = math.nan
    with pytest.raises(ValueError, match="non-finite actions in 1 of 2 environments"):
        env.step(bad)


# -- the asymmetric critic: on-policy agents that value the env's privileged observation ---------------------------


def test_ppo_with_critic_observation_values_the_privileged_observation_and_survives_save_and_load(tmp_path):
    from rl_suite.agent import Agent
    from rl_suite.agents import PPO
    from rl_suite.collector import Collector

    env = make(4, robot="ant")
    agent = PPO.for_env(env, PPO.Config(n_steps=6, epochs=1, minibatches=2, critic_observation=True))
    assert agent.critic[0].in_features == 57 and agent.normalizer.mean.shape == (33,)
    buffer = agent.make_buffer(4)
    collector = Collector(env, agent, buffer, seed=0)
    first = env.critic_obs.clone()
    collector.collect(6)
    d = buffer.data
    torch.testing.assert_close(d["critic_obs"][0], first)
    torch.testing.assert_close(d["critic_obs"][1:], d["next_critic_obs"][:-1])  # no episode ended in 6 steps
    torch.testing.assert_close(d["next_critic_obs"][-1], env.critic_obs)
    # the critic values the normalised privileged observations
    _, values, _, _, samples = agent.rollout_targets(d)
    torch.testing.assert_close(values, agent.critic(agent.critic_normalizer(d["critic_obs"])).squeeze(-1))
    assert samples["critic_obs"].shape == (24, 57)
    agent.update(buffer)
    assert agent.critic_normalizer.count > 0
    agent.save(tmp_path / "agent.pt")
    loaded = Agent.load(tmp_path / "agent.pt")
    assert loaded.critic_observation_space == env.critic_observation_space
    probe = torch.randn(5, 57)
    torch.testing.assert_close(
        loaded.critic(loaded.critic_normalizer(probe)), agent.critic(agent.critic_normalizer(probe))
    )


OFF_POLICY_CRITIC_OBSERVATION = {  # tiny settings; SAC's critics LayerNorm'd and its observations normalised
    "sac": dict(batch_size=8, buffer_size=64, n_step=2, hidden=(32, 32), critic_layer_norm=True, normalize_obs=True),
    "flashsac": dict(batch_size=8, buffer_size=64, n_step=2, actor_width=16, critic_width=16, expansion=1),
}


@pytest.mark.parametrize("algo", list(OFF_POLICY_CRITIC_OBSERVATION))
def test_off_policy_critics_learn_on_the_privileged_observation_and_the_policy_on_its_own(tmp_path, algo):
    """The replay buffer keeps the privileged observations beside the policy's; the critics and their targets see
    them (normalised by SAC's own statistics, by FlashSAC's input batch norm), and the policy sees only its own."""
    from rl_suite.agent import Agent
    from rl_suite.collector import Collector
    from rl_suite.registry import load_algorithm

    agent_class = load_algorithm(algo)
    env = make(4, robot="ant")
    settings = dict(critic_observation=True, learning_starts=0, **OFF_POLICY_CRITIC_OBSERVATION[algo])
    agent = agent_class.for_env(env, agent_class.Config(**settings))
    act_dim = env.action_space.shape[0]
    action = torch.rand(5, act_dim) * 2 - 1
    agent.critic(torch.randn(5, 57), action)  # the critics take the 57 privileged values
    with pytest.raises(RuntimeError):
        agent.critic(torch.randn(5, 33), action)
    buffer = agent.make_buffer(4)
    collector = Collector(env, agent, buffer, seed=0)
    collector.collect(6)
    d = buffer.data
    torch.testing.assert_close(d["critic_obs"][1:6], d["next_critic_obs"][:5])  # no episode ended in 6 steps
    torch.testing.assert_close(d["next_critic_obs"][5], env.critic_obs)
    agent.update(buffer)
    assert agent.updates == 4  # one per transition of the newest step
    if algo == "sac":
        assert agent.critic_normalizer.count == 4  # the newest step's critic observations
    seen = {}
    forward = agent.critic_target.forward

    def recording(obs, *args, **kwargs):
        seen["target_input"] = obs
        return forward(obs, *args, **kwargs)

    agent.critic_target.forward = recording
    batch = buffer.sample(8)
    if algo == "sac":
        agent._update_once(batch)
        expected = agent.critic_normalizer(batch["next_critic_obs"])
    else:  # FlashSAC passes (s, s') as one batch through the target critics, for their batch statistics
        agent._update_once(batch, lr=1e-4)
        expected = torch.cat((batch["critic_obs"], batch["next_critic_obs"]))
    torch.testing.assert_close(seen["target_input"], expected)
    agent.save(tmp_path / "agent.pt")
    loaded = Agent.load(tmp_path / "agent.pt")
    assert loaded.critic_observation_space == env.critic_observation_space
    probe = torch.randn(5, 57)
    if algo == "sac":  # the critic's own statistics travel with it
        assert loaded.critic_normalizer.count == agent.critic_normalizer.count > 0
        torch.testing.assert_close(loaded.critic_normalizer(probe), agent.critic_normalizer(probe))
        probe = agent.critic_normalizer(probe)
    for model in (agent, loaded):
        model.critic.eval()
    torch.testing.assert_close(loaded.critic(probe, action), agent.critic(probe, action))


@pytest.mark.parametrize("algo", ["ppo", "sac", "flashsac"])
def test_critic_observation_on_an_env_that_offers_none_is_refused(algo):
    from rl_suite.registry import load_algorithm

    agent_class = load_algorithm(algo)
    with rl_suite.make("Pendulum-v1", num_envs=2) as env, pytest.raises(ValueError, match="offers none"):
        agent_class.for_env(env, agent_class.Config(critic_observation=True))


# -- deployment from one file ----------------------------------------------------------------------------------


def test_an_exported_legged_policy_returns_joint_offsets_and_carries_the_robot_entry(tmp_path):
    pytest.importorskip("onnxruntime")
    from rl_suite.agents import PPO
    from rl_suite.deploy.export import export_run
    from rl_suite.deploy.runtime import load_policy
    from rl_suite.runner import RunConfig, Runner

    env = rl_suite.make("AntVelocity-Flat-v0", num_envs=4, seed=0, nthread=1)
    settings = PPO.Config(n_steps=4, epochs=1, minibatches=1, critic_observation=True, action_bounds="clip")
    agent = PPO.for_env(env, settings)  # the shipped settings' action bounds: the offset itself, clipped
    config = RunConfig(algo="ppo", env_id="AntVelocity-Flat-v0", total_steps=32, eval_episodes=0, progress=False)
    Runner(agent, env, config, run_dir=tmp_path / "run").run()
    report = export_run(tmp_path / "run", tmp_path / "ant.onnx")
    policy = load_policy(report.path, robot=True)
    entry = policy.robot
    assert entry["joint_names"] == list(robots.ANT.joints) and entry["control_hz"] == pytest.approx(50.0)
    assert entry["physics_dt"] == 0.005 and entry["kp"] == [40.0] * 8 and entry["mjcf"] == "gymnasium/ant.xml"
    assert robots.mjcf_path(entry["mjcf"]).is_file()
    assert [(t["name"], t["size"]) for t in entry["observation"]] == [
        ("base_lin_vel", 3),
        ("base_ang_vel", 3),
        ("projected_gravity", 3),
        ("command", 3),
        ("joint_pos", 8),
        ("joint_vel", 8),
        ("last_action", 8),
    ]
    assert entry["observation"][3]["scale"] == [2.0, 2.0, 0.25]
    np.testing.assert_allclose(entry["action_low"], env.action_space.low, rtol=1e-6)  # the joint ranges, action units
    np.testing.assert_allclose(entry["action_high"], env.action_space.high, rtol=1e-6)
    assert report.metadata["output"]["name"] == "joint_pos_offset"
    obs = env.reset().numpy()
    with torch.no_grad():
        actions, _ = agent.act(torch.as_tensor(obs), deterministic=True)
    np.testing.assert_allclose(policy(obs), 0.5 * actions.numpy(), atol=1e-5)  # offsets: actions x action_scale
    # and watched: `rl-suite play FILE` runs it on a plain MuJoCo robot built from the file alone
    from rl_suite.cli import main
    from rl_suite.envs.robots.deploy import play

    video = tmp_path / "ant.gif"
    result = play(str(report.path), (0.3, 0.0, 0.0), seconds=0.2, video=str(video), viewer=False, width=64, height=48)
    assert video.stat().st_size > 0 and result["seconds"] == pytest.approx(0.2)
    assert result["tracking_error_lin"] >= 0 and len(result["mean_velocity"]) == 3
    assert main(["play", str(report.path), "--seconds", "0.1", "--no-viewer"]) == 0
    # a video that cannot be written is refused before the episode runs, and nothing is written
    with pytest.raises(ValueError, match=r"cannot write a \.avi video .*: give a \.gif or an \.mp4 file"):
        play(str(report.path), seconds=0.1, video=str(tmp_path / "out" / "ant.avi"), viewer=False)
    assert not (tmp_path / "out").exists()


def test_a_file_without_the_robot_entry_is_refused_for_a_robot(tmp_path):
    pytest.importorskip("onnxruntime")
    from rl_suite.agents import PPO
    from rl_suite.deploy.export import export_policy
    from rl_suite.deploy.runtime import load_policy

    with rl_suite.make("Pendulum-v1", num_envs=1) as env:
        path = export_policy(PPO.for_env(env), tmp_path / "p.onnx", parity_samples=16).path
    assert load_policy(path).robot is None
    with pytest.raises(ValueError, match="has no robot entry in its metadata, so it cannot drive a robot"):
        load_policy(path, robot=True)


@pytest.mark.parametrize("observe_base_lin_vel", [False, True])
def test_the_mujoco_robot_built_from_the_robot_entry_sees_and_moves_as_the_task(observe_base_lin_vel):
    """A robot programmer's view: a plain MjData driven from the exported entry alone gives the task's observations
    for the same actions (the CPU backend steps as MuJoCo does)."""
    from rl_suite.envs.robots.deploy import MujocoRobot

    env = make(
        1,
        reset_joint_pos_noise=0.0,
        standing_probability=0.0,
        resampling_time_s=100.0,
        observe_base_lin_vel=observe_base_lin_vel,
    )
    obs = env.reset().clone()
    robot = MujocoRobot(env.robot_metadata(), command=env._commands[0].tolist())
    np.testing.assert_allclose(robot.read_observation(), obs[0].numpy(), rtol=1e-6, atol=1e-6)
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        actions = 0.5 * torch.randn(1, 12, generator=g)
        obs, *_ = env.step(actions)
        robot.apply_action((0.25 * actions[0]).double().numpy())
        np.testing.assert_allclose(robot.read_observation(), obs[0].numpy(), rtol=1e-5, atol=1e-5)
    assert not robot.fallen()
    with pytest.raises(ValueError, match=r"terms \['height_scan'\] that MujocoRobot cannot build"):
        entry = env.robot_metadata()
        MujocoRobot({**entry, "observation": [*entry["observation"], {"name": "height_scan", "size": 1, "scale": [1]}]})


def test_episode_metrics_are_averaged_over_the_episodes_that_define_them():
    from rl_suite.collector import EpisodeStats

    stats = EpisodeStats(torch.device("cpu"), metrics=("error", "fell"))
    done = torch.tensor([True, True, False, True])
    zeros = torch.zeros(4)
    info = {"done": done, "episode_return": zeros, "episode_length": zeros.int()}
    info["episode_metrics"] = {"error": torch.tensor([0.5, math.nan, 9.0, 0.1]), "fell": torch.tensor([1.0, 0, 1, 0])}
    stats.record(info)
    result = stats.read()
    assert result["episodes"] == 3 and result["error"] == pytest.approx(0.3) and result["fell"] == pytest.approx(1 / 3)


def test_the_bullet_robot_from_the_same_entry_starts_as_mujocos_and_stands():
    pytest.importorskip("pybullet")
    from rl_suite.envs.robots.bullet import BulletRobot
    from rl_suite.envs.robots.deploy import MujocoRobot

    entry = make(1).robot_metadata()
    bullet, sim = BulletRobot(entry, command=(0.5, 0.0, 0.0)), MujocoRobot(entry, command=(0.5, 0.0, 0.0))
    np.testing.assert_allclose(bullet.read_observation(), sim.read_observation(), atol=1e-6)  # the same pose
    for _ in range(500):  # 10 s at zero action
        bullet.apply_action(np.zeros(12))
        sim.apply_action(np.zeros(12))
    assert not bullet.fallen() and not sim.fallen()
    # standing heights: Bullet's rigid contact against MuJoCo's soft one (0.28 and 0.26 m)
    assert abs(bullet.height() - sim.data.qpos[2]) < 0.05
    np.testing.assert_allclose(bullet.read_observation()[3:6], [0, 0, -1], atol=0.05)
    bullet.close()


def test_the_task_on_mujoco_warp_agrees_with_the_cpu_backend_step_by_step():
    """Each step starts MuJoCo Warp (float32, on warp's CPU device) from the CPU backend's state and task state, so
    that the errors compared are one step's, not chaos compounded. Over 40 steps of N(0, 0.5) actions from seeds 0-3,
    the largest errors were 8.2e-6 on the observations (policy and critic: the foot contact flags never differed) and
    1.3e-7 on the rewards; the tolerances are about 3x those."""
    pytest.importorskip("mujoco_warp")
    cpu, warp = make(4, backend="cpu"), make(4, backend="warp")
    assert warp.physics.dtype == torch.float32
    cpu.reset(seed=0)
    worst = worst_one_step_differences(cpu, warp, steps=40)
    for name, tolerance in LEGGED_WARP_TOLERANCE.items():
        assert worst[name] <= tolerance, (name, worst)


LEGGED_WARP_TOLERANCE = {"obs": 3e-5, "critic_obs": 3e-5, "reward": 5e-7}


def test_play_without_a_file_where_none_is_shipped_says_so(capsys, tmp_path, monkeypatch):
    from rl_suite.cli import main
    from rl_suite.envs.robots import deploy

    monkeypatch.setattr(deploy, "SHIPPED_POLICIES", tmp_path)  # an installation without the shipped file
    assert main(["play", "--no-viewer"]) == 2
    assert "no trained policy is shipped yet" in capsys.readouterr().err


@pytest.mark.parametrize(
    "robot, command", [("quadruped", (0.5, 0.0, 0.0)), ("quadruped", (0.0, -0.5, 0.0)), ("humanoid", (0.5, 0.0, 0.0))]
)
def test_the_shipped_policies_walk_from_rest_where_standing_scores_the_commands_speed(robot, command):
    """The shipped files (docs/reference/tasks.md: a seed of benchmarks/legged_training.py each), run by ``rl-suite
    play`` on ``MujocoRobot`` from the default pose for 5 s, start included. Standing still scores 0.5 m/s on every
    command (and the humanoid, held by PD alone, falls)."""
    from rl_suite.envs.robots.deploy import SHIPPED_POLICIES, play

    assert (SHIPPED_POLICIES / f"{robot}_flat.onnx").is_file()
    result = play(command=command, seconds=5.0, viewer=False, robot=robot)
    assert not result["fell"] and result["tracking_error_lin"] < TRACKING_FROM_REST, result


def test_play_robot_picks_a_shipped_policy_and_only_without_a_file(capsys):
    from rl_suite.cli import main
    from rl_suite.envs.robots.deploy import SHIPPED_POLICIES, play

    shipped = str(SHIPPED_POLICIES / "quadruped_flat.onnx")
    assert main(["play", shipped, "--robot", "humanoid", "--no-viewer"]) == 2
    assert "--robot picks a shipped policy: give it without a RUN_DIR or FILE" in capsys.readouterr().err
    with pytest.raises(ValueError, match="robot must be one of quadruped, humanoid"):
        play(robot="cheetah", viewer=False)


TRACKING_FROM_REST = 0.25  # seeds 0 and 1 of legged_training: 0.08-0.11 m/s on these commands, standing 0.5


# -- the default reward, the action bounds and the diagnostics (the "every seed walks" issue) ---------------------


def forward_at_half_a_metre(**settings) -> LeggedVelocityEnv:
    """A quadruped commanded 0.5 m/s forward, whatever it draws, with the reward's defaults unless overridden."""
    fixed = dict(standing_probability=0.0, lin_vel_x_range=(0.5, 0.5), lin_vel_y_range=(0.0, 0.0), episode_length_s=3.0)
    return LeggedVelocityEnv(1, seed=0, nthread=1, ang_vel_yaw_range=(0.0, 0.0), **fixed, **settings)


def mean_reward(env: LeggedVelocityEnv, policy, steps: int = 150, settle: int = 50) -> tuple[float, dict]:
    """The per-step reward after ``settle`` steps, and the metrics of the episode, which the time limit (3 s) ends on
    the last step."""
    obs, rewards = env.reset(), []
    for step in range(steps):
        obs, reward, terminated, _, info = env.step(policy(obs, env))
        assert not terminated.any()
        rewards.append(float(reward)) if step >= settle else None
    return float(np.mean(rewards)), {name: float(value) for name, value in info["episode_metrics"].items()}


def sprawl(obs, env):
    """The limb sprawl of the unlucky seeds: hips splayed outward onto their limits, calves stretched onto theirs."""
    low, high = env.action_space.low, env.action_space.high
    action = np.zeros(12, dtype=np.float32)
    for leg, outward in enumerate((low, high, low, high)):  # FR, FL, RR, RL: right legs out at the low bound
        action[3 * leg] = outward[3 * leg]
        action[3 * leg + 2] = high[3 * leg + 2]
    return torch.from_numpy(action)[None]


def test_the_default_reward_ranks_walking_above_standing_above_a_sprawl_on_the_joint_limits():
    """On the same command (0.5 m/s forward): zero action (the default pose held), the sprawl, and the shipped policy
    walking. The joint-limit penalty (-1, the default) is what the sprawl pays and standing does not; the settled
    sprawl also sits low, which the diagnostics report."""
    pytest.importorskip("onnxruntime")
    from rl_suite.deploy.runtime import load_policy
    from rl_suite.envs.robots.deploy import SHIPPED_POLICIES

    walker = load_policy(SHIPPED_POLICIES / "quadruped_flat.onnx", robot=True)  # observes what the defaults give
    scale = torch.as_tensor(robots.QUADRUPED.per_joint("action_scale"), dtype=torch.float32)

    def walk(obs, env):
        return torch.as_tensor(walker(obs.numpy())) / scale  # the file returns offsets (rad); the task takes actions

    standing, standing_metrics = mean_reward(forward_at_half_a_metre(), lambda obs, env: torch.zeros(1, 12))
    sprawled, sprawl_metrics = mean_reward(forward_at_half_a_metre(), sprawl)
    walking, _ = mean_reward(forward_at_half_a_metre(), walk)
    assert sprawled < standing < walking, (sprawled, standing, walking)
    assert standing_metrics["reward_dof_pos_limits"] == 0.0 and sprawl_metrics["reward_dof_pos_limits"] < 0.0
    assert sprawl_metrics["joint_limit_excess"] > 0.1 and standing_metrics["joint_limit_excess"] == 0.0
    assert sprawl_metrics["base_height"] < standing_metrics["base_height"] - 0.1
    # legged_gym's clipped reward on the same states: a sprawl costs nothing below zero, so it cannot rank them
    clipped, _ = mean_reward(forward_at_half_a_metre(reward_preset="legged_gym"), sprawl)
    assert clipped >= 0.0


def test_the_action_bounds_are_the_joint_ranges_through_the_default_pose_and_the_scale():
    for name in ("quadruped", "humanoid", "ant"):
        robot = robots.robot_config(name)
        env = make(1, robot=robot)
        low, high = env.bound.joint_range.T
        default, scale = robot.per_joint("default_joint_pos"), robot.per_joint("action_scale")
        np.testing.assert_allclose(env.action_space.low, (low - default) / scale, rtol=1e-6)
        np.testing.assert_allclose(env.action_space.high, (high - default) / scale, rtol=1e-6)
        assert np.all(env.action_space.low < 0) and np.all(env.action_space.high > 0)
    # a robot of one's own gets them too; a joint without a range is bounded by clip_actions
    own = dataclasses.replace(robots.QUADRUPED, name="own", action_scale=0.5)
    np.testing.assert_allclose(make(1, robot=own).action_space.high, make(1).action_space.high / 2, rtol=1e-6)
    low, high = velocity.action_bounds(own, np.array([[-np.inf, np.inf]] * 12), clip_actions=100.0)
    assert np.all(low == -100.0) and np.all(high == 100.0)


def test_actions_beyond_the_bounds_are_clipped_to_them_and_counted():
    env = make(2, episode_length_s=0.04)  # two steps an episode
    env.reset()
    high = torch.as_tensor(env.action_space.high)
    beyond = high.expand(2, 12).clone()
    beyond[0, :3] += 5.0  # a quarter of robot 0's entries beyond the upper bound
    env.step(beyond)
    torch.testing.assert_close(env._last_actions, high.expand(2, 12))  # what acted: the bounds
    _, _, _, truncated, info = env.step(high.expand(2, 12))
    assert truncated.all()
    torch.testing.assert_close(info["episode_metrics"]["actions_beyond_bounds"], torch.tensor([0.125, 0.0]))


def test_the_diagnostics_are_per_step_means_over_each_episode():
    env = make(3, episode_length_s=0.2)  # ten steps an episode
    env.reset()
    heights = []
    for _ in range(env.max_episode_steps):
        _, _, _, truncated, info = env.step(0.5 * torch.randn(3, 12, generator=torch.Generator().manual_seed(3)))
        heights.append(env.get_state()[0][:, 2].float() if not truncated.any() else None)
    heights[-1] = info["final_obs"].new_tensor(env._step_state["height"])  # the last step's, before the reset
    torch.testing.assert_close(info["episode_metrics"]["base_height"], torch.stack(heights).mean(0), atol=1e-5, rtol=0)


def test_termination_is_penalised_after_the_clip_at_zero():
    """legged_gym adds the termination term after clipping the rest at zero: a fall costs its penalty even when the
    other terms sum below zero, where a clip over everything would make it free."""
    env = make(4, max_roll_pitch=0.01, termination_weight=-200.0, only_positive_rewards=True)
    env.reset()
    actions = torch.zeros(4, 12)
    actions[:2] = 3.0
    for _ in range(3):
        _, reward, terminated, _, info = env.step(actions)
        if terminated.any():
            break
    assert terminated.any()
    terms = torch.stack([info["episode_metrics"][f"reward_{t}"] for t in velocity.REWARD_TERMS], dim=1)
    rest = terms.sum(1) - terms[:, velocity.REWARD_TERMS.index("termination")]
    expected = rest.clamp_min(0.0) - 200.0 * 0.02
    assert terminated[:2].all()
    torch.testing.assert_close(reward[terminated], expected[terminated])
    assert (reward[terminated] <= -4.0).all()


def test_presets_and_weights_that_do_not_exist_are_refused_by_name():
    with pytest.raises(
        ValueError, match=r"reward_preset 'isaac' does not exist; the presets are \['suite', 'legged_gym'"
    ):
        make(1, reward_preset="isaac")
    with pytest.raises(TypeError, match=r"reward weights of terms that do not exist: \['feet_height_weight'\]"):
        make(1, feet_height_weight=-1.0)
    tucked = dataclasses.replace(robots.QUADRUPED, default_joint_pos=(0.0, 0.8, -3.0) * 4)
    with pytest.raises(ValueError, match=r"exclude the default pose of FR_calf_joint \(-3 rad, range \[-2.8"):
        make(1, robot=tucked)
    legged_gym = make(1, reward_preset="legged_gym")
    assert legged_gym.settings.only_positive_rewards and legged_gym.settings.dof_pos_limits_weight == -10.0
    assert make(1, reward_preset="legged_gym", dof_pos_limits_weight=-1.0).settings.dof_pos_limits_weight == -1.0


def test_a_legged_run_reports_its_diagnostics_in_tensorboard_and_summary_json(tmp_path):
    """A sprawl must show within minutes: the task's diagnostics (evaluation and training episodes) and PPO's policy
    std, learning rate and KL reach TensorBoard and every evaluation row of summary.json."""
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rl_suite.agents import PPO
    from rl_suite.runner import RunConfig, Runner

    settings = dict(episode_length_s=0.1, nthread=1)
    env = rl_suite.make("QuadrupedVelocity-Flat-v0", num_envs=4, seed=0, **settings)
    agent = PPO.for_env(env, PPO.Config(n_steps=5, epochs=1, minibatches=1, adaptive_kl=0.01, action_bounds="clip"))
    config = RunConfig(
        algo="ppo",
        env_id="QuadrupedVelocity-Flat-v0",
        total_steps=80,
        eval_every_steps=40,
        eval_episodes=2,
        log_every_steps=20,
        progress=False,
        env_kwargs=settings,
    )
    Runner(agent, env, config, run_dir=tmp_path / "run").run()
    rows = json.loads((tmp_path / "run" / "summary.json").read_text())["evaluations"]
    assert len(rows) == 2
    for row in rows:
        for name in velocity.DIAGNOSTICS:
            assert math.isfinite(row[name]) and math.isfinite(row[f"rollout_{name}"])
        assert 0.2 < row["base_height"] < 0.4 and row["train_lr"] > 0 and row["train_approx_kl"] >= 0
        assert row["train_action_std"] == pytest.approx(1.0, abs=0.05)  # exp(init_log_std = 0), barely trained
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for name in velocity.DIAGNOSTICS:
        assert {f"eval/{name}", f"rollout/{name}"} <= tags
    assert {"train/action_std", "train/lr", "train/approx_kl"} <= tags


def test_a_reset_mid_episode_starts_the_episode_metrics_afresh():
    """An evaluation env is reset while its later episodes run: their partial sums must not leak into the next
    evaluation's episodes (the yaw error, the reward sums and the diagnostics divide by the new episode's length)."""

    def metrics(env):
        for _ in range(env.max_episode_steps):
            *_, truncated, info = env.step(0.3 * torch.ones(2, 12))
        assert truncated.all()
        return {name: value.clone() for name, value in info["episode_metrics"].items()}

    used, fresh = make(2, episode_length_s=0.2), make(2, episode_length_s=0.2)
    used.reset(seed=1)
    for _ in range(7):
        used.step(torch.ones(2, 12))  # an unfinished episode
    used.reset(seed=5), fresh.reset(seed=5)
    got, expected = metrics(used), metrics(fresh)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], equal_nan=True, msg=name)
