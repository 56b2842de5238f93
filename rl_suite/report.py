"""The statistics of a benchmark report: normalised scores, rliable's aggregates with stratified-bootstrap confidence
intervals, and learning curves as a mean with a bootstrap band over seeds.

Scores are normalised per task as ``(score - random) / (reference - random)``: 0 is a uniformly random policy, 1 the
task's published reference. Aggregates follow Agarwal et al., "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS 2021), through their library ``rliable``: the interquartile mean (IQM), the median
of the tasks' mean scores, the mean and the optimality gap (how far below 1 the scores fall, on average), each with
a 95% stratified-bootstrap confidence interval (runs resampled within each task).
"""

from __future__ import annotations

import csv
import os
import pathlib
import tempfile

import numpy as np
import yaml

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

    rng = np.random.default_rng(seed)
    estimates = {name: stratified_bootstrap(table, all_four, reps, rng) for name, table in scores.items()}
    return {
        name: {aggregate: (float(point[i]), float(lower[i]), float(upper[i])) for i, aggregate in enumerate(AGGREGATES)}
        for name, (point, lower, upper) in estimates.items()
    }


def stratified_bootstrap(table, statistic, reps: int, rng: np.random.Generator) -> tuple:
    """``statistic`` of the ``[runs, tasks]`` ``table``, and its 95% stratified-bootstrap interval: runs resampled
    with replacement within each task, as rliable's StratifiedBootstrap does, drawn here from a numpy Generator
    (rliable's own goes through arch, whose RandomState path does not give the same draws twice). Returns
    ``(point, lower, upper)``."""
    table = np.asarray(table, dtype=float)
    runs, tasks = table.shape
    rows = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.array([statistic(table[rows[r], np.arange(tasks)]) for r in range(reps)])
    lower, upper = np.percentile(resampled, [2.5, 97.5], axis=0)
    return statistic(table), lower, upper


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
    """Curves measured at different x (evaluations at different wall-clock times) on one grid over the x that all of
    them cover, from the latest first point to the earliest last one, by linear interpolation (nothing is drawn
    where a curve was not measured): ``(grid, [curves, points])``."""
    if not xs or any(len(x) == 0 for x in xs):
        raise ValueError("every curve needs at least one point")
    start = max(float(np.min(x)) for x in xs)
    end = max(start, min(float(np.max(x)) for x in xs))
    grid = np.linspace(start, end, points)
    curves = [np.interp(grid, np.asarray(x, float), np.asarray(y, float)) for x, y in zip(xs, ys, strict=True)]
    return grid, np.stack(curves)


def performance_profile(table: np.ndarray, taus: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple:
    """rliable's score distribution (Agarwal et al., section 4): at each threshold ``tau``, the fraction of runs whose
    normalised score exceeds it, averaged over tasks; ``table`` is ``[runs, tasks]``. Returns the profile and its
    95% stratified-bootstrap band, ``(profile, lower, upper)``, each ``[len(taus)]``."""

    def profile(scores: np.ndarray) -> np.ndarray:
        return (scores[None, :, :] > np.asarray(taus)[:, None, None]).mean(axis=(1, 2))

    return stratified_bootstrap(table, profile, reps, np.random.default_rng(seed))


# -- the report of a benchmark directory (rl-suite benchmark) ----------------------------------------------------


def load_references(path: str | pathlib.Path | None = None) -> dict[str, dict]:
    """The reference scores (``rl_suite/reference_scores.yaml``, written by benchmarks/random_scores.py, or a file of
    the same layout): task id -> ``random``, ``reference`` and their sources."""
    path = pathlib.Path(path) if path is not None else pathlib.Path(__file__).with_name("reference_scores.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"cannot read the reference scores {path}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must map task ids to their random and reference scores")
    for env_id, entry in data.items():
        numbers = isinstance(entry, dict) and all(
            isinstance(entry.get(key), int | float) and not isinstance(entry.get(key), bool)
            for key in ("random", "reference")
        )
        if not numbers or entry["random"] == entry["reference"]:
            raise ValueError(f"{path}: {env_id} needs two different numbers, random and reference, got {entry!r}")
    return data


def write_report(folder: pathlib.Path, runs: list[dict], expected: int, references: dict[str, dict],
                 title: str, notes: list[str] = (), spec=None, fixed: dict | None = None) -> pathlib.Path:  # fmt: skip
    """``report.md``, ``report.csv``, ``report_curves.png`` and ``report_profiles.png`` in ``folder`` over the finished
    ``runs`` (each: ``algo``, ``env_id``, ``seed`` and the run's summary.json as ``summary``) of the ``expected``
    runs; with ``spec`` (a ``rl_suite.benchmark.ReportSpec``), its task metrics, the play that learned nothing
    (``fixed``: ``(play, task) -> final evaluation``) and its goal's verdict too. Returns the markdown file's path.
    The files are made in a scratch folder and moved into place only once all of them are written, so that a failure
    leaves the previous report whole, never half of a new one."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".report-") as scratch:
        extra = (spec, fixed or {})
        made = _write_report_files(pathlib.Path(scratch), runs, expected, references, title, notes, extra)
        for old in REPORT_FILES:  # a picture the new report has not (no finished run yet) must not stay behind
            if old not in made:
                (folder / old).unlink(missing_ok=True)
        for name in made:
            os.replace(pathlib.Path(scratch) / name, folder / name)
    return folder / "report.md"


REPORT_FILES = ("report.csv", "report_curves.png", "report_profiles.png", "report.md")


def _write_report_files(folder: pathlib.Path, runs, expected, references, title, notes, extra=(None, {})) -> list[str]:
    unevaluated = [run for run in runs if not run["summary"].get("final_eval")]
    if unevaluated:
        names = ", ".join(f"{run['algo']} on {run['env_id']} seed {run['seed']}" for run in unevaluated)
        notes = [*notes, f"Finished without an evaluation (eval_episodes 0), so left out: {names}.", ""]
        runs = [run for run in runs if run not in unevaluated]
    algos = list(dict.fromkeys(run["algo"] for run in runs))
    tasks = list(dict.fromkeys(run["env_id"] for run in runs))
    final = {(run["algo"], run["env_id"], run["seed"]): _final_return(run["summary"]) for run in runs}
    lines = [f"# {title}", "", *notes]
    machines = sorted({run["summary"].get("machine", "not recorded") for run in runs})
    lines += [
        f"{len(runs)} of {expected} runs finished; only finished runs are reported (a run is finished once its "
        "summary.json is written, at its end).",
        f"Runs made on: {'; '.join(machines) or 'none'}.",
        "",
    ]
    lines += _returns_table(algos, tasks, final, references)
    spec, fixed = extra
    if spec is not None:
        lines += _fixed_play_section(tasks, spec, fixed)
        lines += _metrics_section(algos, tasks, runs, spec.metrics)
        if spec.goal is not None:
            lines += _goal_section(algos, tasks, runs, spec.goal, fixed, expected)
    lines += _aggregates_section(folder, algos, tasks, final, references)
    _write_csv(folder / "report.csv", runs, final, references, spec.metrics if spec is not None else ())
    if runs and _plot_curves(folder / "report_curves.png", algos, tasks, runs):
        lines += ["", "Learning curves: `report_curves.png` (evaluation return, mean over seeds with a 95% bootstrap "
                  "band, against env steps and against wall-clock)."]  # fmt: skip
    lines += ["One row per finished run: `report.csv`."]
    (folder / "report.md").write_text("\n".join(lines) + "\n")
    return [name for name in REPORT_FILES if (folder / name).exists()]


def _final_return(summary: dict) -> float:
    return float(summary["final_eval"]["mean_return"])


def _returns_table(algos, tasks, final, references) -> list[str]:
    lines = [
        "## Final evaluation return",
        "",
        "Mean ± standard deviation over seeds (n seeds), and the best seed.",
        "",
        "| task | random | reference | " + " | ".join(algos) + " |",
        "|---|---:|---:|" + "---:|" * len(algos),
    ]
    for task in tasks:
        reference = references.get(task)
        cells = [f"{reference['random']:,.1f}", f"{reference['reference']:,.1f}"] if reference else ["-", "-"]
        for algo in algos:
            scores = [score for (a, t, _), score in final.items() if a == algo and t == task]
            if not scores:
                cells.append("no finished run")
                continue
            cells.append(f"{np.mean(scores):,.1f} ± {np.std(scores):,.1f} (n={len(scores)}; best {max(scores):,.1f})")
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


def _final(run: dict, metric: str) -> float | None:
    value = run["summary"]["final_eval"].get(metric)
    return None if value is None else float(value)


def _fixed_play_section(tasks, spec, fixed) -> list[str]:
    rows = [(play, task) for task in tasks for play in spec.fixed_plays if (play, task) in fixed]
    if not rows:
        return []
    from rl_suite.benchmark import FIXED_PLAYS

    columns = ["mean_return", *spec.metrics]
    lines = ["", "## Play that learned nothing", "",
             "Evaluated as the runs' final evaluations are (the same episodes, env keywords and evaluation seed).", "",
             "| task | play | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]  # fmt: skip
    for play, task in rows:
        cells = [f"{fixed[(play, task)][c]:,.3f}" if c in fixed[(play, task)] else "-" for c in columns]
        lines.append(f"| {task} | {FIXED_PLAYS[play]} | " + " | ".join(cells) + " |")
    return lines


def _metrics_section(algos, tasks, runs, metrics) -> list[str]:
    if not metrics:
        return []
    lines = ["", "## Final task metrics", "", "Mean ± standard deviation over seeds (n seeds; the lowest and highest).",
             "", "| task | metric | " + " | ".join(algos) + " |", "|---|---|" + "---:|" * len(algos)]  # fmt: skip
    for task in tasks:
        for metric in metrics:
            cells = []
            for algo in algos:
                values = [v for run in runs if run["algo"] == algo and run["env_id"] == task
                          if (v := _final(run, metric)) is not None]  # fmt: skip
                cells.append(f"{np.mean(values):,.3f} ± {np.std(values):,.3f} (n={len(values)}; {min(values):,.3f}-"
                             f"{max(values):,.3f})" if values else "-")  # fmt: skip
            lines.append(f"| {task} | {metric} | " + " | ".join(cells) + " |")
    return lines


def _goal_section(algos, tasks, runs, goal, fixed, expected: int) -> list[str]:
    """Each (algorithm, task) the goal holds to, met or missed, with the values that decide it; what each play that
    learned nothing gets; and the verdict line (a verdict over fewer runs than the grid's says so)."""
    from rl_suite.benchmark import FIXED_PLAYS

    held = [algo for algo in algos if not goal.algos or algo in goal.algos]
    lines, verdicts = ["", "## Goal", "", f"Goal: {goal.words()}, for {', '.join(held)} on every task.", ""], []
    for task in tasks:
        for algo in held:
            values = [v for run in sorted(runs, key=lambda r: r["seed"]) if run["algo"] == algo and
                      run["env_id"] == task if (v := _final(run, goal.metric)) is not None]  # fmt: skip
            if not values:
                lines.append(f"- {algo} on {task}: no finished run reports {goal.metric}")
                verdicts.append(False)
                continue
            met = all(goal.holds(v, task) for v in values) if goal.every_seed else goal.holds(np.mean(values), task)
            verdicts.append(met)
            shown = ", ".join(f"{v:,.3f}" for v in values)
            verdict = f"{'met' if met else 'missed'} against {goal.line(task):g}"
            lines.append(f"- {algo} on {task}: {verdict} ({shown}; mean {np.mean(values):,.3f})")
        for play in FIXED_PLAYS:
            if (play, task) in fixed and goal.metric in fixed[(play, task)]:
                value = fixed[(play, task)][goal.metric]
                meets = "meets it: this line does not tell learning from none" if goal.holds(value, task) else ""
                lines.append(f"- {FIXED_PLAYS[play]} on {task}: {value:,.3f}, {meets or 'misses it'}")
    count = sum(verdicts)
    word = "met" if verdicts and all(verdicts) else "**missed**"
    so_far = f" so far, over {len(runs)} of the grid's {expected} runs" if len(runs) < expected else ""
    lines += ["", f"Goal ({goal.words()}): {word}{so_far}, {count} of {len(verdicts)} (algorithm, task) pairs."]
    return lines


def _score_tables(algos, tasks, final, references) -> tuple[list[str], dict[str, np.ndarray]]:
    """The tasks every algorithm finished and that have reference scores, and per algorithm its normalised final
    scores ``[runs, tasks]``: the first ``k`` seeds of each task, ``k`` the fewest any task has (the stratified
    bootstrap needs as many runs per task)."""
    common = [t for t in tasks if t in references and all(any(a == al and tk == t for a, tk, _ in final)
                                                          for al in algos)]  # fmt: skip
    tables = {}
    for algo in algos:
        per_task = [sorted((s, v) for (a, t, s), v in final.items() if a == algo and t == task) for task in common]
        k = min((len(seeds) for seeds in per_task), default=0)
        if k == 0:
            continue
        ref = [references[task] for task in common]
        tables[algo] = np.array([[normalized(per_task[j][i][1], ref[j]["random"], ref[j]["reference"])
                                  for j in range(len(common))] for i in range(k)])  # fmt: skip
    return common, tables


def _aggregates_section(folder, algos, tasks, final, references) -> list[str]:
    common, tables = _score_tables(algos, tasks, final, references)
    lines = ["", "## Aggregates of normalised scores", ""]
    left_out = [task for task in tasks if task not in common]
    if not tables:
        return lines + ["No task has reference scores and a finished run of every algorithm: no aggregates."]
    lines += [f"Final scores normalised per task, random 0 and reference 1 (rl_suite/reference_scores.yaml), over "
              f"{len(common)} task(s): {', '.join(common)}; runs per task: "
              + ", ".join(f"{algo} {table.shape[0]}" for algo, table in tables.items())
              + ". Point estimates with 95% stratified-bootstrap confidence intervals (rliable's IQM, median, mean "
              "and optimality gap; lower is better for the gap).", ""]  # fmt: skip
    if left_out:
        lines += [f"Left out (no reference score, or not finished by every algorithm): {', '.join(left_out)}.", ""]
    results = aggregates(tables)
    lines += ["| algorithm | " + " | ".join(AGGREGATES) + " |", "|---|" + "---:|" * len(AGGREGATES)]
    for algo, values in results.items():
        cells = [f"{point:.3f} [{lower:.3f}, {upper:.3f}]" for point, lower, upper in values.values()]
        lines.append(f"| {algo} | " + " | ".join(cells) + " |")
    if _plot_profiles(folder / "report_profiles.png", tables):
        lines += ["", "Performance profiles: `report_profiles.png` (the fraction of runs above each normalised score, "
                  "with 95% stratified-bootstrap bands)."]  # fmt: skip
    return lines


def _write_csv(path: pathlib.Path, runs, final, references, metrics=()) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["algo", "env_id", "seed", "env_steps", "wall_time_s", "final_return", "best_return",
                         "normalized_final", "machine", *metrics])  # fmt: skip
        for run in runs:
            summary, key = run["summary"], (run["algo"], run["env_id"], run["seed"])
            returns = [row["mean_return"] for row in summary.get("evaluations", [])]
            reference = references.get(run["env_id"])
            score = normalized(final[key], reference["random"], reference["reference"]) if reference else ""
            writer.writerow([*key, summary.get("env_steps"), summary.get("wall_time_s"), final[key],
                             max(returns, default=""), score, summary.get("machine", "not recorded"),
                             *(summary["final_eval"].get(metric, "") for metric in metrics)])  # fmt: skip


def pyplot():
    """matplotlib's pyplot on the Agg backend, or ``None`` where the bench extra is not installed (a report then has
    its tables, without pictures)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _plot_curves(path: pathlib.Path, algos, tasks, runs) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    figure, axes = plt.subplots(2, len(tasks), figsize=(4.5 * len(tasks), 7), squeeze=False)
    for column, task in enumerate(tasks):
        for row, (x_key, x_label) in enumerate((("env_steps", "env steps"), ("wall_time_s", "wall-clock (s)"))):
            axis = axes[row][column]
            for algo in algos:
                curves = [run["summary"].get("evaluations") or [] for run in runs
                          if run["algo"] == algo and run["env_id"] == task]  # fmt: skip
                curves = [curve for curve in curves if curve]
                if not curves:
                    continue
                xs = [np.array([point[x_key] for point in curve], float) for curve in curves]
                ys = [np.array([point["mean_return"] for point in curve], float) for curve in curves]
                grid, values = on_grid(xs, ys)
                mean, lower, upper = curve_band(values)
                axis.plot(grid, mean, label=f"{algo} (n={len(curves)})")
                axis.fill_between(grid, lower, upper, alpha=0.25)
            axis.set(xlabel=x_label, ylabel="evaluation return", title=task)
            axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def _plot_profiles(path: pathlib.Path, tables: dict[str, np.ndarray]) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    every = np.concatenate([table.ravel() for table in tables.values()])
    taus = np.linspace(min(0.0, every.min()), max(1.0, every.max()), 101)
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for algo, table in tables.items():
        profile, lower, upper = performance_profile(table, taus)
        axis.plot(taus, profile, label=algo)
        axis.fill_between(taus, lower, upper, alpha=0.25)
    axis.set(xlabel="normalised score τ", ylabel="fraction of runs with score > τ", ylim=(0, 1.02))
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
