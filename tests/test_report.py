"""The benchmark report's statistics (rl_suite/report.py) on hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from rl_suite.report import aggregates, curve_band, normalized, on_grid


def test_normalised_scores_put_random_at_0_and_the_reference_at_1():
    assert normalized(22.0, random=22.0, reference=500.0) == 0.0
    assert normalized(500.0, random=22.0, reference=500.0) == 1.0
    assert normalized(-150.0, random=-1200.0, reference=-150.0) == 1.0  # returns below zero too
    assert normalized(261.0, random=22.0, reference=500.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="reference score 5.0 equals the random score"):
        normalized(1.0, random=5.0, reference=5.0)


def test_aggregates_on_hand_computed_numbers():
    pytest.importorskip("rliable")
    # 4 runs x 2 tasks. IQM: the mean of the middle 50% of the 8 scores (0.2, 0.4, 0.6, 0.8 after sorting
    # 0, 0.2, 0.2, 0.4, 0.6, 0.8, 1.0, 1.4) = 0.5; median (rliable's: of the tasks' mean scores, 0.45 and 0.7) 0.575;
    # mean 4.6 / 8 = 0.575; optimality gap: the mean of max(1 - x, 0) = (1 + 0.8 + 0.8 + 0.6 + 0.4 + 0.2) / 8 = 0.475.
    table = np.array([[0.0, 0.2], [0.2, 0.4], [0.6, 0.8], [1.0, 1.4]])
    result = aggregates({"ppo": table, "random": np.zeros((4, 2))}, reps=500)
    points = {name: point for name, (point, _, _) in result["ppo"].items()}
    assert points == pytest.approx({"IQM": 0.5, "median": 0.575, "mean": 0.575, "optimality gap": 0.475})
    for point, lower, upper in result["ppo"].values():
        assert lower <= point <= upper and lower < upper
    assert result["random"]["mean"] == (0.0, 0.0, 0.0) and result["random"]["optimality gap"][0] == 1.0
    assert aggregates({"ppo": table}, reps=500) == aggregates({"ppo": table}, reps=500)  # seeded
    with pytest.raises(ValueError, match=r"ppo's scores must be a \[runs, tasks\] table"):
        aggregates({"ppo": np.zeros(3)})


def test_the_curve_band_is_the_mean_over_seeds_with_a_bootstrap_interval():
    curves = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 4.0], [0.0, 2.0, 6.0]])
    mean, lower, upper = curve_band(curves, reps=4000)
    np.testing.assert_allclose(mean, [0.0, 2.0, 4.0])
    assert lower[0] == upper[0] == 0.0  # no spread, no band
    # the resampled means of three seeds lie between the smallest and the largest seed's value
    assert 1.0 <= lower[1] < 2.0 < upper[1] <= 3.0 and 2.0 <= lower[2] < 4.0 < upper[2] <= 6.0
    with pytest.raises(ValueError, match=r"curves must be \[seeds, points\]"):
        curve_band(np.zeros(3))


def test_curves_at_different_times_go_onto_one_grid_where_all_were_measured():
    grid, curves = on_grid([np.array([0.0, 10.0, 20.0]), np.array([5.0, 15.0])], [np.array([0, 1, 2]),
                           np.array([10, 20])], points=4)  # fmt: skip
    np.testing.assert_allclose(grid, [5.0, 25 / 3, 35 / 3, 15.0])  # where both curves were measured
    np.testing.assert_allclose(curves, [[0.5, 5 / 6, 7 / 6, 1.5], [10.0, 10 + 10 / 3, 10 + 20 / 3, 20.0]])
    with pytest.raises(ValueError, match="every curve needs at least one point"):
        on_grid([np.array([])], [np.array([])])
