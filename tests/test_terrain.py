"""Rough terrain (``rl_suite/envs/robots/terrain.py``): the generated tiles have the shapes and sizes the docstring
promises, checked against numbers computed here, and the surface the task reads (``heights_at``) is the one MuJoCo
collides with, checked by casting MuJoCo's own rays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

from rl_suite.envs.robots.terrain import KINDS, Terrain, TerrainSettings  # noqa: E402

SMALL = dict(levels=5, columns=7, tile_size=4.0, border=1.0, platform_size=1.0)


def one_kind(kind: str, **settings) -> Terrain:
    return Terrain(TerrainSettings(**{**SMALL, "columns": 1, "proportions": ((kind, 1.0),), **settings}), seed=0)


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
    terrain = Terrain(TerrainSettings(**SMALL), seed=3)
    s, rng = terrain.settings, np.random.default_rng(0)
    samples = rng.integers(0, np.array(terrain.heights.shape), size=(200, 2))
    at_samples = samples * s.horizontal_scale - s.border
    ours = terrain.heights_at(torch.tensor(at_samples, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(ours, terrain.heights[samples[:, 0], samples[:, 1]], atol=1e-5)  # float32
    np.testing.assert_allclose(mujoco_heights(terrain, at_samples), ours, atol=1e-4)
    # between samples MuJoCo's triangles and our bilinear patches differ by at most a fraction of the local relief
    anywhere = rng.uniform(0, np.array(terrain.size), size=(200, 2)) - s.border
    between = terrain.heights_at(torch.tensor(anywhere, dtype=torch.float32)).numpy()
    assert np.median(np.abs(mujoco_heights(terrain, anywhere) - between)) < 1e-3
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
    terrain = Terrain(s, seed=0)
    np.testing.assert_allclose(terrain.origins[2, 7, :2], [2.5 * 4.0, 7.5 * 4.0])
    centres = torch.tensor(terrain.origins[..., :2].reshape(-1, 2), dtype=torch.float32)
    # the start point is the highest ground within 1 m of the centre, so a robot placed there is not buried
    assert np.all(terrain.origins[..., 2].ravel() >= terrain.heights_at(centres).numpy() - 1e-6)
    assert set(TerrainSettings().column_kinds()) == set(KINDS)


def test_the_terrain_is_a_function_of_its_seed():
    a, b, c = (Terrain(TerrainSettings(**SMALL), seed=seed) for seed in (1, 1, 2))
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
    ],
)
def test_bad_terrain_settings_get_errors_that_name_them(settings, message):
    with pytest.raises(ValueError) as error:
        TerrainSettings(**{**SMALL, **settings})
    assert message in str(error.value)
