"""PyBulletRobot: the MuJoCo task's robot in PyBullet, as a deployment target (envs/adapters/pybullet.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pybullet")
pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.deploy import ControlLoop, Robot  # noqa: E402
from rl_suite.envs.adapters.pybullet import PyBulletRobot  # noqa: E402

TASKS = {"HalfCheetah": {}, "Ant": {"include_cfrc_ext_in_observation": False}}


@pytest.fixture(scope="module", params=sorted(TASKS))
def pair(request):
    task = request.param
    robot = PyBulletRobot(task, seed=0)
    env = rl_suite.make(f"{task}-v5", num_envs=1, seed=0, nthread=1, **TASKS[task])
    env.reset()
    yield task, robot, env
    robot.close()
    env.close()


def test_layout_matches_mujoco(pair):
    task, robot, env = pair
    assert robot.observation_size == env.observation_space.shape[0] == robot.read_observation().shape[0]
    assert robot.action_size == env.action_space.shape[0]
    assert robot.dt == pytest.approx(env.dt)
    np.testing.assert_allclose(robot.ctrl_high, env.action_space.high)
    assert robot.read_observation().dtype == np.float32


def test_same_state_same_observation(pair):
    """A nominal pose (the model's qpos0 with a few joint angles), at rest: the observations agree."""
    task, robot, env = pair
    qpos = robot.qpos0.copy()
    joints = slice(7, None) if task == "Ant" else slice(3, None)
    qpos[joints] = np.linspace(-0.3, 0.3, qpos[joints].size)
    if task == "Ant":
        qpos[3:7] = [np.cos(0.15), 0.0, 0.0, np.sin(0.15)]  # a yaw of 0.3 rad
    qvel = np.zeros(robot.model.nv)
    robot.set_state(qpos, qvel)
    expected = env.set_state(torch.tensor(qpos)[None], torch.tensor(qvel)[None])[0].numpy()
    observed = robot.read_observation()
    positions = robot.model.nq - robot.skip
    np.testing.assert_allclose(observed[:positions], expected[:positions], atol=1e-5)
    np.testing.assert_allclose(observed[positions:], 0.0, atol=1e-6)


def test_velocities_map_to_mujoco_coordinates(pair):
    """Joint and root velocities read back as MuJoCo's qvel (Ant: world linear, body-frame angular velocity)."""
    task, robot, env = pair
    rng = np.random.default_rng(3)
    qpos = robot.qpos0 + rng.uniform(-0.1, 0.1, robot.model.nq)
    if task == "Ant":
        qpos[3:7] /= np.linalg.norm(qpos[3:7])
    qvel = rng.normal(size=robot.model.nv)
    robot.set_state(qpos, qvel)
    expected = env.set_state(torch.tensor(qpos)[None], torch.tensor(qvel)[None])[0].numpy()
    np.testing.assert_allclose(robot.read_observation(), expected, atol=1e-5)


def test_zero_action_stays_finite(pair):
    task, robot, _ = pair
    robot.reset(seed=1)
    for _ in range(20):
        robot.apply_action(np.zeros(robot.action_size))
        assert np.isfinite(robot.read_observation()).all()
    terms = robot.reward_terms()
    assert np.isfinite(terms["reward"]) and np.isfinite(robot.episode_return)
    assert robot.episode_length == 20 or (task == "Ant" and robot.terminated)


def test_ant_starts_inside_its_joint_ranges_and_stands():
    """Ant's initial pose has its ankles outside their ranges; Bullet never pushes a joint back into range, so
    without the clipped start it lay on its torso (0.25). It must stand on its legs, as MuJoCo's does (0.49)."""
    heights = {}
    for limits in (True, False):
        robot = PyBulletRobot("Ant", seed=0, joint_limits=limits)
        robot.reset(seed=0)
        qpos, _ = robot.get_state()
        hinges = qpos[7:]
        inside = (hinges >= robot.model.jnt_range[1:, 0] - 1e-9) & (hinges <= robot.model.jnt_range[1:, 1] + 1e-9)
        assert inside.all() == limits
        for _ in range(200):
            robot.apply_action(np.zeros(8))
        heights[limits] = robot.get_state()[0][2]
        robot.close()
    assert heights[True] > 0.33 and heights[False] < 0.27, heights


def test_reward_terms_follow_gymnasium(pair):
    task, robot, _ = pair
    robot.reset(seed=2)
    action = np.full(robot.action_size, 0.5)
    robot.apply_action(action)
    terms = robot.reward_terms()
    weight = 0.1 if task == "HalfCheetah" else 0.5
    assert terms["reward_ctrl"] == pytest.approx(-weight * np.square(action).sum())
    parts = terms["reward_forward"] + terms["reward_ctrl"]
    if task == "Ant":
        parts += terms["reward_survive"] + terms["reward_contact"]
    assert terms["reward"] == pytest.approx(parts)
    assert robot.episode_return == pytest.approx(terms["reward"])


def test_reset_noise_is_seeded():
    robot = PyBulletRobot("HalfCheetah")
    first = robot.reset(seed=5)
    assert np.array_equal(first, robot.reset(seed=5))
    assert not np.array_equal(first, robot.reset(seed=6))
    assert np.abs(first[:8]).max() <= 0.1 + 1e-6  # uniform qpos noise of reset_noise_scale around qpos0 = 0
    robot.close()


def test_bad_input():
    with pytest.raises(ValueError, match="supports HalfCheetah, Ant"):
        PyBulletRobot("Humanoid")
    with pytest.raises(ValueError, match="no keyword argument"):
        PyBulletRobot("HalfCheetah", contact_cost_weight=1.0)
    with pytest.raises(ValueError, match="contact must be 'calibrated', None or"):
        PyBulletRobot("HalfCheetah", contact="soft")
    robot = PyBulletRobot("HalfCheetah")
    with pytest.raises(ValueError, match=r"takes \(6,\)"):
        robot.apply_action(np.zeros(5))
    robot.close()


def test_control_loop_with_exported_policy(tmp_path):
    from rl_suite.agents import PPO
    from rl_suite.deploy import load_policy
    from rl_suite.deploy.export import export_policy

    env = rl_suite.make("HalfCheetah-v5", num_envs=1, seed=0, nthread=1)
    agent = PPO.for_env(env, hidden=[16, 16])
    path = tmp_path / "cheetah.onnx"
    export_policy(agent, path, env_id="HalfCheetah-v5", dt=env.dt, parity_samples=64)
    robot = PyBulletRobot("HalfCheetah", seed=0)
    assert isinstance(robot, Robot)
    policy = load_policy(path, expected_observation_dim=robot.observation_size, expected_action_dim=robot.action_size)
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    loop = ControlLoop(
        policy, robot, rate_hz=1 / policy.dt, safe_action=np.zeros(6, np.float32), clock=lambda: now[0], sleep=sleep
    )
    result = loop.run(25)
    assert (result.cycles, result.faults, result.stopped) == (25, 0, "completed")
    assert robot.episode_length == 25 and np.isfinite(robot.episode_return)
    assert now[0] == pytest.approx(25 * env.dt)
    robot.close()
    env.close()


# -- the randomisation wrapper (envs/mujoco/randomization.py) ------------------------------------------------------


def _randomized(**kwargs):
    from rl_suite.envs.mujoco.randomization import RandomizedVecEnv

    env = rl_suite.make("HalfCheetah-v5", num_envs=64, seed=0, nthread=1)
    return RandomizedVecEnv(env, **kwargs)


def test_observation_noise_statistics_and_seeding():
    env = _randomized(obs_noise_std=0.05, seed=1)
    noisy = env.reset(seed=3)
    clean = env.env._obs
    noise = (noisy - clean).numpy()
    assert abs(noise.mean()) < 0.005 and abs(noise.std() - 0.05) < 0.005
    again = env.reset(seed=3)
    assert torch.equal(noisy, again)
    other = env.reset(seed=4)
    assert not torch.equal(noisy, other)
    # the wrapped env's own reset noise is untouched by the wrapper
    plain = rl_suite.make("HalfCheetah-v5", num_envs=64, seed=0, nthread=1)
    assert torch.equal(plain.reset(seed=3), env.env.reset(seed=3))
    obs, reward, *_ = env.step(torch.zeros(64, 6))
    assert obs.shape == (64, 17) and torch.isfinite(obs).all()


def test_motor_strength_draws_and_scaling():
    env = _randomized(motor_strength=0.2, seed=0)
    env.reset(seed=0)
    strength = env.strength.clone()
    assert strength.shape == (64, 1)
    assert (strength >= 0.8).all() and (strength <= 1.2).all() and strength.std() > 0.05
    env.reset(seed=0)
    assert torch.equal(env.strength, strength)
    # the scaled action is what the motors get: ctrl cost = 0.1 * |strength * a|^2
    action = torch.full((64, 6), 0.5)
    _, reward, *_ = env.step(action)
    ctrl = env.env.physics.ctrl.float()
    torch.testing.assert_close(ctrl, (0.5 * strength).expand(64, 6).clamp(-1, 1), atol=1e-6, rtol=0)
    per_motor = _randomized(motor_strength=0.1, per_motor=True, seed=0)
    per_motor.reset(seed=0)
    assert per_motor.strength.shape == (64, 6)


def test_motor_strength_redrawn_on_reset_only():
    from rl_suite.envs.mujoco.randomization import RandomizedVecEnv

    env = RandomizedVecEnv(
        rl_suite.make("HalfCheetah-v5", num_envs=4, seed=0, nthread=1, max_episode_steps=3), motor_strength=0.3, seed=0
    )
    env.reset(seed=0)
    first = env.strength.clone()
    env.step(torch.zeros(4, 6))
    env.step(torch.zeros(4, 6))
    assert torch.equal(env.strength, first)
    env.step(torch.zeros(4, 6))  # every episode truncates here, and each env draws again
    assert (env.strength != first).all()


def test_randomization_bad_input():
    with pytest.raises(ValueError, match=r"motor_strength must be in \[0, 1\)"):
        _randomized(motor_strength=1.5)
    with pytest.raises(ValueError, match="obs_noise_std must be a scalar or have 17 values"):
        _randomized(obs_noise_std=[0.1, 0.2])
