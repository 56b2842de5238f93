"""Rough terrain (``rl_suite/envs/robots/terrain.py``): the generated tiles have the shapes and sizes the docstring
promises, checked against numbers computed here, and the surface the task reads (``heights_at``) is the one MuJoCo
collides with, checked by casting MuJoCo's own rays."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from backend_agreement import worst_one_step_differences

mujoco = pytest.importorskip("mujoco")

from rl_suite.envs.robots.terrain import KINDS, Terrain, TerrainSettings  # noqa: E402

SMALL = dict(levels=5, columns=7, tile_size=4.0, border=1.0, platform_size=1.0)


def one_kind(kind: str, **settings) -> Terrain:
    return Terrain(TerrainSettings(**{**SMALL, "columns": 1, "proportions": {kind: 1.0}, **settings}))


def tile(terrain: Terrain, level: int, column: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The heights of one tile, with each sample's offsets (m) from the tile's centre."""
    s = terrain.settings
    n, pad = round(s.tile_size / s.horizontal_scale), round(s.border / s.horizontal_scale)
    heights = terrain.heights[pad + level * n : pad + (level + 1) * n, pad + column * n : pad + (column + 1) * n]
    local = np.arange(n) * s.horizontal_scale - s.tile_size / 2
    x, y = np.meshgrid(local, local, indexing="ij")
    return heights, x, y


def mujoco_heights(terrain: Terrain, points: np.ndarray) -> np.ndarray:
    spec = mujoco.MjSpec()
    terrain.add_to(spec)
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    geom = np.zeros(1, np.int32)
    top = terrain.heights.max() + 1.0
    down = np.array([0.0, 0.0, -1.0])
    return np.array(
        [top - mujoco.mj_ray(model, data, np.array([x, y, top]), down, None, 1, -1, geom) for x, y in points]
    )


def test_the_heights_the_task_reads_are_the_surface_mujoco_collides_with():
    terrain = Terrain(TerrainSettings(**SMALL, seed=3))
    s, rng = terrain.settings, np.random.default_rng(0)
    samples = rng.integers(0, np.array(terrain.heights.shape), size=(200, 2))
    at_samples = samples * s.horizontal_scale - s.border
    ours = terrain.heights_at(torch.tensor(at_samples, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours, terrain.heights[samples[:, 0], samples[:, 1]], atol=1e-5)  # float32
    np.testing.assert_allclose(mujoco_heights(terrain, at_samples), ours, atol=1e-4)
    # between the samples too: the same two triangles per cell
    anywhere = rng.uniform(0, np.array(terrain.size), size=(400, 2)) - s.border
    between = terrain.heights_at(torch.tensor(anywhere, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(mujoco_heights(terrain, anywhere), between, atol=1e-4)
    # beyond the heightfield, the border's height
    outside = torch.tensor([[-50.0, 3.0], [3.0, 1e4]])
    np.testing.assert_allclose(terrain.heights_at(outside).numpy(), [0.0, 0.0])


def test_slopes_rise_or_fall_at_0_4_times_the_difficulty_from_a_flat_platform():
    for kind, sign in (("slope_up", 1), ("slope_down", -1)):
        terrain = one_kind(kind)
        for level in range(terrain.settings.levels):
            heights, x, y = tile(terrain, level)
            outside = np.maximum(np.maximum(np.abs(x), np.abs(y)) - 0.5, 0.0)
            np.testing.assert_allclose(heights, sign * 0.4 * (level / 5) * outside, atol=1e-12)
            assert np.all(heights[outside == 0] == 0)


def test_a_difficulty_range_makes_a_test_course_of_15_degree_slopes():
    terrain = one_kind("slope_up", levels=1, difficulty_range=[0.6699, 0.6699])  # tan(15 deg) / 0.4
    heights, x, y = tile(terrain, level=0)
    rise = np.diff(heights[:, heights.shape[1] // 2])[-5:] / terrain.settings.horizontal_scale
    np.testing.assert_allclose(np.degrees(np.arctan(rise)), 15.0, atol=0.01)


def test_stairs_have_steps_of_0_31_m_and_0_05_plus_0_18_d_in_height():
    for kind, sign in (("stairs_up", 1), ("stairs_down", -1)):
        terrain = one_kind(kind)
        heights, x, _ = tile(terrain, level=2)  # d = 0.4: steps of 0.122 m
        row = heights[:, heights.shape[1] // 2]  # along x through the centre
        rises = np.diff(row[x[:, 0] >= 0])
        assert set(np.round(rises[rises != 0], 6)) == {round(sign * (0.05 + 0.18 * 0.4), 6)}
        # one step every 0.31 m: the 1.4 m from the platform's edge (0.5 m) to the tile's last sample (1.9 m) hold
        # ceil(1.4 / 0.31) = 5
        assert np.count_nonzero(rises) == 5 and abs(row.max() - row.min()) == pytest.approx(5 * 0.122)


def test_rough_ground_stays_within_its_amplitude_and_grows_with_the_level():
    terrain = one_kind("rough")
    spreads = []
    for level in range(terrain.settings.levels):
        heights, _, _ = tile(terrain, level)
        amplitude = 0.02 + 0.08 * level / 5
        assert np.abs(heights).max() <= amplitude + 1e-9
        spreads.append(heights.std())
    assert all(a < b for a, b in zip(spreads, spreads[1:], strict=False)), spreads


def test_obstacles_are_raised_or_sunk_by_h_or_half_h_around_a_flat_platform():
    terrain = one_kind("obstacles")
    heights, x, y = tile(terrain, level=3)
    h = 0.05 + 0.2 * 3 / 5
    assert set(np.round(np.unique(heights), 9)) <= {round(v, 9) for v in (-h, -h / 2, 0.0, h / 2, h)}
    assert np.all(heights[np.maximum(np.abs(x), np.abs(y)) <= 0.5] == 0)
    assert (heights != 0).mean() > 0.3  # 20 rectangles of 1-2 m on a 4 m tile cover most of it


def test_the_columns_share_the_kinds_in_their_proportions_and_origins_sit_on_the_platform():
    s = TerrainSettings(
        **{**SMALL, "columns": 10, "proportions": (("rough", 0.5), ("stairs_up", 0.3), ("obstacles", 0.2))}
    )
    assert s.column_kinds() == ["rough"] * 5 + ["stairs_up"] * 3 + ["obstacles"] * 2
    terrain = Terrain(s)
    np.testing.assert_allclose(terrain.origins[2, 7, :2], [2.5 * 4.0, 7.5 * 4.0])
    centres = torch.tensor(terrain.origins[..., :2].reshape(-1, 2), dtype=torch.float32)
    # the start point is the highest ground within 1 m of the centre, so a robot placed there is not buried
    assert np.all(terrain.origins[..., 2].ravel() >= terrain.heights_at(centres).numpy() - 1e-6)
    assert set(TerrainSettings().column_kinds()) == set(KINDS)


def test_the_terrain_is_a_function_of_its_seed():
    a, b, c = (Terrain(TerrainSettings(**SMALL, seed=seed)) for seed in (1, 1, 2))
    np.testing.assert_array_equal(a.heights, b.heights)
    assert not np.array_equal(a.heights, c.heights)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(levels=0), "levels must be a positive integer"),
        (dict(tile_size=4.05), "whole number of horizontal_scale"),
        (dict(platform_size=5.0), "platform_size (5.0 m) must be smaller than tile_size"),
        (dict(proportions=(("lava", 1.0),)), "unknown terrain kinds ['lava']"),
        (dict(proportions=(("rough", -1.0), ("stairs_up", 2.0))), "non-negative with a positive sum"),
        (dict(columns=1, proportions=(("rough", 1.0), ("stairs_up", 1.0))), "columns (1) must be at least"),
        (dict(border=-1.0), "border must be at least 0"),
        (dict(difficulty_range=(0.5, 0.2)), "difficulty_range must be 0 <= low <= high"),
    ],
)
def test_bad_terrain_settings_get_errors_that_name_them(settings, message):
    with pytest.raises(ValueError) as error:
        TerrainSettings(**{**SMALL, **settings})
    assert message in str(error.value)


# -- the velocity task on rough terrain ----------------------------------------------------------------------------

ROUGH = dict(terrain=dict(SMALL, levels=4, seed=1), max_init_terrain_level=2)


def rough(num_envs=8, **settings):
    from rl_suite.envs.robots.velocity import LeggedVelocityEnv

    return LeggedVelocityEnv(num_envs, seed=0, nthread=1, **{**ROUGH, **settings})


def test_robots_start_on_their_tiles_a_base_height_above_the_start_point():
    env = rough(14)
    env.reset(seed=0)
    placement = env._placement
    assert placement.columns.tolist() == [i % 7 for i in range(14)]
    assert set(placement.levels.tolist()) <= {0, 1, 2} and len(set(placement.levels.tolist())) > 1
    origin = placement.origins[placement.levels, placement.columns].double()
    base = env.physics.qpos[:, :3]
    assert ((base[:, :2] - origin[:, :2]).abs() <= 1.0).all()
    torch.testing.assert_close(base[:, 2], origin[:, 2] + env.robot.init_base_height)


def test_the_curriculum_moves_robots_up_after_half_a_tile_down_after_half_the_commanded_distance():
    env = rough(8, episode_length_s=0.04)  # episodes of 2 steps
    env.reset(seed=0)
    placement = env._placement
    placement.levels.copy_(torch.tensor([1, 1, 1, 0, 3, 3, 3, 3]))
    origin = placement.origins[placement.levels, placement.columns].double()
    env.step(torch.zeros(8, 12))
    qpos, commands = env.physics.qpos, env._commands
    qpos[:, :2] = origin[:, :2]  # back on the tile's centre: walked 0 ...
    qpos[0, 0] += 2.5  # ... but 0 (level 1) walked 2.5 m, more than half of the 4 m tile: up
    # the commanded distance is the command's speed over a full episode (0.04 s)
    qpos[1, 0] += 1.0
    commands.zero_()
    commands[1, 0] = 40.0  # 1 walked 1 m of 1.6 m, more than half: stays
    commands[2, 1] = 10.0  # 2 walked nothing of 0.4 m: down
    commands[3, 0] = 10.0  # 3 too, but from level 0: stays at 0
    qpos[4:, 0] += 2.5  # 4-7 walked off the last level (3): to random levels
    _, _, _, truncated, info = env.step(torch.zeros(8, 12))
    assert truncated.all()
    # the level each episode ended on, then the level the next starts on
    assert info["episode_metrics"]["terrain_level"].tolist() == [1, 1, 1, 0, 3, 3, 3, 3]
    levels = placement.levels.tolist()
    assert levels[:4] == [2, 1, 0, 0]
    assert all(0 <= level <= 3 for level in levels[4:]) and levels[4:] != [3, 3, 3, 3], levels


def test_the_height_scan_reads_the_ground_mujoco_collides_with_turned_with_the_base():
    env = rough(4, observe_height_scan=True, reset_base_vel_noise=0.5)
    obs = env.reset(seed=4)
    for _ in range(10):
        obs, *_ = env.step(0.3 * torch.randn(4, 12, generator=torch.Generator().manual_seed(0)))
    assert env.observation_space.shape == (48 + 187,) and env.critic_observation_space.shape == (48 + 187 + 28,)
    state = env._read_state()
    from rl_suite.envs.robots.terrain import HEIGHT_SCAN_X, HEIGHT_SCAN_Y

    for k in range(4):
        (x, y, z), yaw = state["position"][k].tolist(), state["yaw"][k].item()
        dx, dy = (a.ravel() for a in np.meshgrid(HEIGHT_SCAN_X, HEIGHT_SCAN_Y, indexing="ij"))
        points = np.stack([x + np.cos(yaw) * dx - np.sin(yaw) * dy, y + np.sin(yaw) * dx + np.cos(yaw) * dy], 1)
        expected = np.clip(z - 0.5 - mujoco_heights(env.terrain, points), -1.0, 1.0) * 5.0
        np.testing.assert_allclose(obs[k, -187:].numpy(), expected, atol=1e-3)
    # the metadata says where the points are
    scan = env.robot_metadata()["height_scan"]
    assert len(scan["x"]) * len(scan["y"]) == 187 and scan["x"][0] == -0.8 and scan["y"][-1] == 0.5
    assert env.robot_metadata()["observation"][-1] == {"name": "height_scan", "size": 187, "scale": [5.0] * 187}


def test_the_critic_sees_the_scan_last_so_flat_ground_inputs_come_first():
    perceptive, blind = rough(4, observe_height_scan=True, obs_noise_level=0.0), rough(4, obs_noise_level=0.0)
    actions = 0.3 * torch.randn(4, 12, generator=torch.Generator().manual_seed(0))
    (obs, *_, info), (blind_obs, *_, blind_info) = perceptive.step(actions), blind.step(actions)
    critic, blind_critic = info["critic_obs"], blind_info["critic_obs"]
    torch.testing.assert_close(critic, blind_critic)  # the same privileged view, whatever the policy sees
    torch.testing.assert_close(critic[:, :48], blind_obs)  # the policy's terms (flat ground's) first
    torch.testing.assert_close(critic[:, -187:], obs[:, -187:])  # the scan last
    from rl_suite.envs.robots.velocity import LeggedVelocityEnv

    flat = LeggedVelocityEnv(4, seed=0, nthread=1, **{key: value for key, value in ROUGH.items() if key != "terrain"})
    # a flat-ground run's inputs are the first columns of a rough-terrain one's (RunConfig.init_from)
    assert flat.observation_space.shape == blind.observation_space.shape
    assert flat.critic_observation_space.shape[0] + 187 == blind.critic_observation_space.shape[0]


def test_rough_terrain_resumes_exactly_and_resets_alike_by_mask_and_by_index():
    def run(env, steps, seed):
        g, out = torch.Generator().manual_seed(seed), []
        for _ in range(steps):
            obs, reward, *_ = env.step(torch.randn(4, 12, generator=g))
            out.append(torch.cat([obs.flatten(), reward, env._placement.levels.float()]))
        return torch.stack(out)

    settings = dict(episode_length_s=0.2, push_velocity=0.5, push_interval_s=0.1)
    env = rough(4, **settings)
    env.reset(seed=2)
    run(env, 7, seed=1)
    state = {name: value.clone() for name, value in env.state_dict().items()}
    expected = run(env, 30, seed=9)
    resumed = rough(4, **settings)
    resumed.reset(seed=5)
    resumed.load_state_dict(state)
    torch.testing.assert_close(run(resumed, 30, seed=9), expected, rtol=0, atol=0)
    by_mask = rough(4, masked_resets=True, **settings)
    by_mask.reset(seed=2)
    run(by_mask, 7, seed=1)
    torch.testing.assert_close(run(by_mask, 30, seed=9), expected, rtol=0, atol=0)


def test_the_rough_id_trains_the_perceptive_policy_with_its_shipped_settings():
    import rl_suite
    from rl_suite.registry import load_algorithm
    from rl_suite.settings import tuned_settings

    kwargs = tuned_settings(load_algorithm("ppo"), "QuadrupedVelocity-Rough-v0")["env_kwargs"]
    assert kwargs["observe_height_scan"]
    with rl_suite.make("QuadrupedVelocity-Rough-v0", num_envs=2, **kwargs) as env:
        assert env.terrain is not None and env.terrain.settings == TerrainSettings()
        assert env.settings.observe_base_lin_vel  # the task's default
        assert env.observation_space.shape == (48 + 187,)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(terrain=None, observe_height_scan=True), "observe_height_scan needs rough terrain"),
        (dict(max_init_terrain_level=4), r"max_init_terrain_level must be in \[0, 3\]"),
        (dict(terrain=dict(tiles=3)), r"terrain has unknown settings \['tiles'\]"),
        (dict(terrain="stairs"), "terrain must be a dict of TerrainSettings fields or None"),
    ],
)
def test_bad_rough_terrain_settings_get_errors_that_name_them(settings, message):
    with pytest.raises(ValueError, match=message):
        rough(1, **settings)


def test_rough_terrain_on_mujoco_warp_agrees_with_the_cpu_backend_step_by_step():
    """As the flat task's check (tests/test_legged.py): each step starts MuJoCo Warp (float32, on warp's CPU device)
    from the CPU backend's state, here on rough ground, slopes and stairs. The heightfield's contacts are not
    MuJoCo's: Warp collides a geom with the heightfield's prisms by its own convex collision, so the contact sets
    differ and one step's observations differ by up to 0.015 (0.3 rad/s of joint velocity, in the rough tiles; no
    contact buffer overflowed) and rewards by 3.3e-4 over these 30 steps, against 8e-6 and 1.3e-7 on flat ground.
    The tolerances are about 3x those; terminations and truncations agree exactly."""
    pytest.importorskip("mujoco_warp")
    cpu, warp = rough(4, backend="cpu"), rough(4, backend="warp")
    cpu.reset(seed=0)
    worst = worst_one_step_differences(cpu, warp, steps=30)
    assert not warp.physics.overflow.any()
    assert worst["obs"] <= 0.05 and worst["critic_obs"] <= 0.05 and worst["reward"] <= 1e-3, worst


def test_a_robot_geom_the_backend_cannot_collide_with_a_heightfield_is_refused(monkeypatch):
    from rl_suite.envs.robots import terrain

    monkeypatch.setitem(terrain.HFIELD_COLLIDERS, "warp", frozenset({"capsule", "box"}))  # a Warp without spheres
    with pytest.raises(ValueError) as error:
        rough(1, backend="warp")
    assert str(error.value).startswith(
        "MuJoCo Warp cannot collide these geoms with the terrain's heightfield: sphere (FR_foot, FL_foot, RR_foot, "
        "RL_foot). It collides box, capsule geoms with one"
    )
    rough(1, backend="cpu")  # the CPU backend's table still has spheres


def test_a_training_run_reports_the_curriculums_level_beside_the_evaluations(tmp_path):
    """The evaluation envs start on their own levels, so the summary's rows also carry the training episodes' level
    (``rollout_terrain_level``, from the last log window): the terrain level reached, against wall-clock."""
    import json

    import rl_suite
    from rl_suite.agents import PPO

    env = rl_suite.make("QuadrupedVelocity-Rough-v0", num_envs=4, seed=0, episode_length_s=0.1, **ROUGH)
    agent = PPO.for_env(env, PPO.Config(n_steps=8, epochs=1, minibatches=1, hidden=(16,)))
    agent.learn(
        env,
        total_steps=96,
        run_dir=tmp_path / "run",
        log_every_steps=32,
        eval_every_steps=64,
        eval_episodes=2,
        progress=False,
        env_kwargs=dict(episode_length_s=0.1, **ROUGH),
    )
    rows = json.loads((tmp_path / "run" / "summary.json").read_text())["evaluations"]
    assert rows and all(0 <= row["rollout_terrain_level"] <= 3 and "terrain_level" in row for row in rows), rows
