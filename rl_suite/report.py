"""The statistics of a benchmark report: normalised scores, rliable's aggregates with stratified-bootstrap confidence
intervals, and learning curves as a mean with a bootstrap band over seeds.

Scores are normalised per task as ``(score - random) / (reference - random)``: 0 is a uniformly random policy, 1 the
task's published reference. Aggregates follow Agarwal et al., "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS 2021), through their library ``rliable``: the interquartile mean (IQM), the median
of the tasks' mean scores, the mean and the optimality gap (how far below 1 the scores fall, on average), each with
a 95% stratified-bootstrap confidence interval (runs resampled within each task).
"""

from __future__ import annotations

import numpy as np

AGGREGATES = ("IQM", "median", "mean", "optimality gap")


def normalized(score: float, random: float, reference: float) -> float:
    """``score`` on the scale where a random policy gets 0 and the reference gets 1."""
    if reference == random:
        raise ValueError(f"the reference score {reference} equals the random score: nothing to normalise by")
    return (score - random) / (reference - random)


def aggregates(scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict[str, dict[str, tuple]]:
    """``scores``: algorithm -> normalised final scores ``[runs, tasks]`` (runs are seeds). Returns algorithm ->
    aggregate name (``AGGREGATES``) -> ``(point estimate, lower, upper)`` of its 95% stratified-bootstrap interval."""
    from rliable import metrics

    for name, table in scores.items():
        if np.ndim(table) != 2 or 0 in np.shape(table):
            raise ValueError(f"{name}'s scores must be a [runs, tasks] table with at least one of each")

    def all_four(table: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(table), metrics.aggregate_median(table),
                         metrics.aggregate_mean(table), metrics.aggregate_optimality_gap(table)])  # fmt: skip

    # The stratified bootstrap (runs resampled with replacement within each task, as rliable's
    # StratifiedBootstrap does), drawn here from a numpy Generator: rliable's own goes through arch, whose
    # RandomState path does not give the same draws twice.
    rng = np.random.default_rng(seed)
    points, intervals = {}, {}
    for name, table in scores.items():
        table = np.asarray(table, dtype=float)
        runs, tasks = table.shape
        rows = rng.integers(0, runs, size=(reps, runs, tasks))
        resampled = np.array([all_four(table[rows[r], np.arange(tasks)]) for r in range(reps)])
        points[name] = all_four(table)
        intervals[name] = np.percentile(resampled, [2.5, 97.5], axis=0)
    return {
        name: {aggregate: (float(points[name][i]), float(intervals[name][0, i]), float(intervals[name][1, i]))
               for i, aggregate in enumerate(AGGREGATES)}  # fmt: skip
        for name in scores
    }


def curve_band(values: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values`` ``[seeds, points]`` (each seed's curve on a common grid): the mean over seeds at each point and its
    95% percentile-bootstrap interval (seeds resampled with replacement)."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or 0 in values.shape:
        raise ValueError(f"curves must be [seeds, points] with at least one of each, got shape {values.shape}")
    rng = np.random.default_rng(seed)
    resampled = values[rng.integers(0, values.shape[0], size=(reps, values.shape[0]))].mean(axis=1)
    lower, upper = np.percentile(resampled, [2.5, 97.5], axis=0)
    return values.mean(axis=0), lower, upper


def on_grid(xs: list[np.ndarray], ys: list[np.ndarray], points: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Curves measured at different x (evaluations at different wall-clock times) on one grid from 0 to the shortest
    curve's end, by linear interpolation (each curve held at its first value before it):
    ``(grid, [curves, points])``."""
    if not xs or any(len(x) == 0 for x in xs):
        raise ValueError("every curve needs at least one point")
    grid = np.linspace(0.0, min(float(np.max(x)) for x in xs), points)
    curves = [np.interp(grid, np.asarray(x, float), np.asarray(y, float)) for x, y in zip(xs, ys, strict=True)]
    return grid, np.stack(curves)
