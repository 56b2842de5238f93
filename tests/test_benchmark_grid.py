"""``rl-suite benchmark``: a grid of ordinary runs, checked before anything is written, run in parallel processes,
resumed exactly where a run was cut off, and reported from finished runs only with rliable's aggregates."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from rl_suite.benchmark import is_finished
from rl_suite.checkpoint import checkpoints
from rl_suite.cli import main
from rl_suite.report import load_references

QUICK = ["--total-steps", "2048", "--set", "progress=false", "eval_episodes=8", "eval_every_steps=1024",
         "checkpoint_every_steps=1024", "n_steps=16", "epochs=2", "hidden=[16, 16]"]  # fmt: skip


def error_of(args, capsys) -> str:
    assert main(args) == 2
    return capsys.readouterr().err.strip()


def test_a_bad_grid_is_refused_before_anything_is_written(tmp_path, capsys):
    bench = tmp_path / "bench"
    where = ["--dir", str(bench), "--seeds", "2"]
    assert "unknown algorithm 'ppp'. Did you mean 'ppo'" in error_of(
        ["benchmark", "--algos", "ppo", "ppp", "--envs", "CartPole-v1", *where], capsys
    )
    assert "CartPole-v2" in error_of(["benchmark", "--algos", "ppo", "--envs", "CartPole-v2", *where], capsys)
    assert "sac cannot train on CartPole-v1" in error_of(
        ["benchmark", "--algos", "ppo", "sac", "--envs", "Pendulum-v1", "CartPole-v1", *where], capsys
    )
    assert "at least one of --algos" in error_of(["benchmark", "--envs", "CartPole-v1", *where], capsys)
    assert "needs --seeds" in error_of(["benchmark", "--algos", "ppo", "--envs", "CartPole-v1", "--dir", str(bench)],
                                       capsys)  # fmt: skip
    assert "no_such_setting" in error_of(
        ["benchmark", "--algos", "ppo", "--envs", "CartPole-v1", *where, "--set", "no_such_setting=1"], capsys
    )
    grid = tmp_path / "grid.yaml"
    grid.write_text("algos: [ppo]\nenvs: ['gym:CartPole-v1']\nseeds: 1\n")
    assert "give those with --envs on the command line" in error_of(["benchmark", str(grid), "--dir", str(bench)],
                                                                    capsys)  # fmt: skip
    grid.write_text("algos: [ppo]\nenvs: [CartPole-v1]\nseed: 1\n")
    assert "unknown keys ['seed']" in error_of(["benchmark", str(grid), "--dir", str(bench)], capsys)
    assert "no grid.yaml" in error_of(["benchmark", "--report-only", "--dir", str(bench)], capsys)
    good = ["benchmark", "--algos", "ppo", "--envs", "CartPole-v1", *where]
    assert "threads must be between 1 and" in error_of([*good, "--threads", "0"], capsys)
    assert "jobs must be at least 1, got 0" in error_of([*good, "--jobs", "0"], capsys)
    assert not bench.exists()


def test_a_grid_runs_in_parallel_resumes_a_cut_off_run_exactly_and_reports_finished_runs_only(tmp_path, capsys):
    bench = tmp_path / "bench"
    grid = tmp_path / "grid.yaml"
    grid.write_text("algos: [ppo]\nenvs: [CartPole-v1]\nseeds: [0, 1]\n")
    command = ["benchmark", str(grid), "--dir", str(bench), "--jobs", "2", *QUICK]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "0 of 2 runs finished before; 2 to run, 2 at a time with 1 thread(s) each" in out
    first = {seed: bench / "runs" / f"ppo__CartPole-v1__s{seed}" for seed in (0, 1)}
    whole = {seed: json.loads((first[seed] / "summary.json").read_text()) for seed in first}
    assert all(summary["env_steps"] == 2048 for summary in whole.values())
    assert [row["env_steps"] for row in whole[0]["evaluations"]] == [1024, 2048]
    # Cut seed 0 off as a kill between its two checkpoints would: no summary, and only the 1,024-step checkpoint.
    (first[0] / "summary.json").unlink()
    checkpoints(first[0])[0].unlink()
    assert [path.name for path in checkpoints(first[0])] == ["step_000000001024.pt"]
    assert main(["benchmark", "--report-only", "--dir", str(bench)]) == 0
    assert "1 of 2 runs finished" in (bench / "report.md").read_text()  # the cut-off run is not reported
    with (bench / "report.csv").open() as f:
        assert [row["seed"] for row in csv.DictReader(f)] == ["1"]
    kept = (first[1] / "summary.json").stat().st_mtime_ns
    capsys.readouterr()

    assert main(command) == 0
    out = capsys.readouterr().out
    assert "1 of 2 runs finished before; 1 to run" in out and "resuming ppo__CartPole-v1__s0" in out
    assert "--resume" in (bench / "logs" / "ppo__CartPole-v1__s0.log").read_text()
    assert (first[1] / "summary.json").stat().st_mtime_ns == kept  # the finished run was not run again
    resumed = json.loads((first[0] / "summary.json").read_text())
    # Exact resume (CPU): the same evaluations as the run that was never cut off.
    assert resumed["final_eval"] == whole[0]["final_eval"]
    assert [row["mean_return"] for row in resumed["evaluations"]] == [
        row["mean_return"] for row in whole[0]["evaluations"]
    ]

    report = (bench / "report.md").read_text()
    finals = [whole[seed]["final_eval"]["mean_return"] for seed in (0, 1)]
    assert "2 of 2 runs finished" in report
    assert f"{np.mean(finals):,.1f} ± {np.std(finals):,.1f} (n=2; best {max(finals):,.1f})" in report
    reference = load_references()["CartPole-v1"]
    scores = [(score - reference["random"]) / (reference["reference"] - reference["random"]) for score in finals]
    mean_row = next(line for line in report.splitlines() if line.startswith("| ppo |"))
    assert mean_row.split(" | ")[3].startswith(f"{np.mean(scores):.3f} [")  # the mean aggregate
    with (bench / "report.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [float(row["final_return"]) for row in rows] == finals
    assert all(row["machine"] != "not recorded" for row in rows)
    assert (bench / "report_curves.png").stat().st_size > 0 and (bench / "report_profiles.png").stat().st_size > 0

    # Another budget in the same directory would mix runs that do not compare.
    assert "holds a benchmark with total_steps 2048, not 4096" in error_of(
        ["benchmark", str(grid), "--dir", str(bench), "--total-steps", "4096", *QUICK[2:]], capsys
    )


@pytest.mark.parametrize("text", ["", '{"env_steps": 10', "[1, 2]"])
def test_a_run_without_a_whole_summary_is_not_finished(tmp_path, text):
    if text:
        (tmp_path / "summary.json").write_text(text)
    assert not is_finished(tmp_path)
    (tmp_path / "summary.json").write_text('{"env_steps": 10}')
    assert is_finished(tmp_path)


def test_the_reference_scores_are_sourced_and_random_play_scores_zero():
    references = load_references()
    assert {"CartPole-v1", "HalfCheetah-v5", "dm_control/cheetah-run-v0"} <= set(references)
    for env_id, entry in references.items():
        assert entry["reference_source"] and entry["random_episodes"] >= 10, env_id
        assert entry["random"] < entry["reference"], env_id  # random play is below every reference


def test_a_variant_runs_its_algorithm_with_its_own_settings_after_the_grids(tmp_path, capsys):
    from rl_suite.benchmark import BenchmarkRun, check_grid, load_grid, make_grid, train_command

    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text("algos: [ppo, ppo-wide]\nenvs: [CartPole-v1]\nseeds: 1\nset: [eval_episodes=5]\n"
                         "variants:\n  ppo-wide: {algo: ppo, set: ['hidden=[128, 128]']}\n")  # fmt: skip
    grid = make_grid(load_grid(grid_file), settings=["progress=false"])
    check_grid(grid)
    run = BenchmarkRun("ppo-wide", "CartPole-v1", 0)
    command = train_command(grid, run, tmp_path / "runs" / run.name)
    assert command[3:6] == ["train", "ppo", "CartPole-v1"]
    assert command[command.index("--set") + 1 :] == ["eval_episodes=5", "progress=false", "hidden=[128, 128]"]
    plain = train_command(grid, BenchmarkRun("ppo", "CartPole-v1", 0), tmp_path / "runs" / "p")
    assert plain[plain.index("--set") + 1 :] == ["eval_episodes=5", "progress=false"]
    bench = tmp_path / "bench"
    for variant, message in [
        ("ppo: {algo: ppo}", "not an algorithm's name"),
        ("wide/x: {algo: ppo}", "it names run directories"),
        ("wide: {algo: ppo, sets: []}", "must be {algo: NAME, set: [KEY=VALUE, ...]}"),
        ("wide: {algo: pppo}", "unknown algorithm 'pppo'"),
        ("wide: {algo: ppo, set: [no_such_setting=1]}", "no_such_setting"),
    ]:
        grid_file.write_text(f"algos: [wide]\nenvs: [CartPole-v1]\nseeds: 1\nvariants:\n  {variant}\n")
        assert message in error_of(["benchmark", str(grid_file), "--dir", str(bench)], capsys), variant
    assert not bench.exists()


def test_a_benchmark_killed_mid_run_loses_nothing_and_its_rerun_finishes_the_run(tmp_path):
    """SIGKILL the benchmark while its run trains: the kernel interrupts the run (PR_SET_PDEATHSIG), which writes a
    checkpoint and stops without a summary; the rerun resumes it to the end."""
    import fcntl
    import os
    import signal
    import subprocess
    import sys
    import time

    bench = tmp_path / "bench"
    command = [sys.executable, "-m", "rl_suite", "benchmark", "--algos", "ppo", "--envs", "CartPole-v1", "--seeds",
               "1", "--dir", str(bench), "--total-steps", "60000", "--set", "log_every_steps=1000", "eval_episodes=4",
               "eval_every_steps=1000000", "checkpoint_every_steps=1000000", "n_steps=16", "epochs=1"]  # fmt: skip
    log = bench / "logs" / "ppo__CartPole-v1__s0.log"
    benchmark = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    # A progress line ("train N/60,000 steps | steps/s ...", printed at log intervals when the output is not a
    # terminal) comes from inside the training loop, so the run's interrupt handler is in place: "training ppo on" is
    # printed before it is, and a signal in between stops the run at once, with no checkpoint (nor anything to lose).
    while not (log.is_file() and "/60,000 steps | steps/s" in log.read_text()):
        assert time.monotonic() < deadline and benchmark.poll() is None, "the run did not start"
        time.sleep(0.05)
    os.kill(benchmark.pid, signal.SIGKILL)
    benchmark.wait()
    run = bench / "runs" / "ppo__CartPole-v1__s0"
    deadline = time.monotonic() + 120
    while not checkpoints(run):  # written by the interrupted run on its way out
        assert time.monotonic() < deadline, "the orphaned run wrote no checkpoint"
        time.sleep(0.2)
    assert not is_finished(run)
    cut_at = int(checkpoints(run)[0].stem.removeprefix("step_"))
    assert 0 < cut_at < 60_000
    # Until the orphaned run has stopped, it holds the directory: a rerun would train it twice at once.
    with open(bench / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for it
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "0 of 1 runs finished before" in rerun.stdout and "resuming ppo__CartPole-v1__s0" in rerun.stdout
    assert 60_000 <= json.loads((run / "summary.json").read_text())["env_steps"] < 60_000 + 8 * 16


def test_seeds_are_a_count_or_a_list():
    from rl_suite.benchmark import seeds_from

    assert seeds_from(3) == (0, 1, 2) and seeds_from([3]) == (3,) and seeds_from([4, 1]) == (4, 1)
    for bad in (0, [], [1, 1], [-1], "3", [True]):
        with pytest.raises(ValueError, match="seeds must"):
            seeds_from(bad)


def test_a_report_that_fails_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    from rl_suite import report

    def run(seed, final):
        curve = [{"env_steps": 1000, "wall_time_s": 1.0, "mean_return": final / 2},
                 {"env_steps": 2000, "wall_time_s": 2.0, "mean_return": final}]  # fmt: skip
        summary = {"env_steps": 2000, "wall_time_s": 2.0, "final_eval": {"mean_return": final}, "evaluations": curve}
        return {"algo": "ppo", "env_id": "CartPole-v1", "seed": seed, "summary": summary}

    references = load_references()
    report.write_report(tmp_path, [run(0, 100.0), run(1, 200.0)], 2, references, "first")
    before = {name: (tmp_path / name).read_bytes() for name in report.REPORT_FILES}
    assert "150.0 ± 50.0 (n=2; best 200.0)" in before["report.md"].decode()

    def broken(*args):
        raise RuntimeError("the plot failed")

    monkeypatch.setattr(report, "_plot_profiles", broken)
    with pytest.raises(RuntimeError, match="the plot failed"):
        report.write_report(tmp_path, [run(0, 300.0), run(1, 400.0), run(2, 500.0)], 3, references, "second")
    assert {name: (tmp_path / name).read_bytes() for name in report.REPORT_FILES} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(report.REPORT_FILES)  # no scratch left


def test_a_finished_run_without_an_evaluation_is_named_and_left_out(tmp_path):
    from rl_suite import report

    evaluated = {"algo": "ppo", "env_id": "CartPole-v1", "seed": 0, "summary": {
        "final_eval": {"mean_return": 120.0, "episodes": 10}, "evaluations": [
            {"env_steps": 100, "wall_time_s": 1.0, "mean_return": 120.0}]}}  # fmt: skip
    blind = {"algo": "ppo", "env_id": "CartPole-v1", "seed": 1, "summary": {"final_eval": None, "evaluations": []}}
    text = report.write_report(tmp_path, [evaluated, blind], 2, load_references(), "t").read_text()
    assert "without an evaluation (eval_episodes 0), so left out: ppo on CartPole-v1 seed 1" in text
    assert "120.0 ± 0.0 (n=1; best 120.0)" in text and "nan" not in text.lower()


# -- the report's task metrics, play that learned nothing and goal (a benchmark is a grid and a goal) ------------


def test_a_bad_report_section_is_refused_naming_what_is_wrong(tmp_path, capsys):
    from rl_suite.benchmark import make_grid

    base = {"algos": ["ppo"], "envs": ["CartPole-v1"], "seeds": 1}
    for report, message in [
        ({"metric": ["fell"]}, "report must be a mapping of metrics, fixed_plays, goal"),
        ({"fixed_plays": ["standing"]}, "unknown fixed play 'standing'; the plays are zero, random"),
        ({"goal": {"at_least": 1, "at_most": 2}}, "needs one bound, at_least or at_most"),
        ({"goal": {"metric": "fell"}}, "needs one bound, at_least or at_most"),
        ({"goal": {"at_least": "high"}}, "needs one bound, at_least or at_most"),
        ({"goal": {"at_least": {"CartPole-v1": True}}}, "a number, or one per task"),
        ({"goal": {"at_least": 1, "every": True}}, "report goal must be a mapping of algos, metric"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            make_grid({**base, "report": report})
    bench = tmp_path / "bench"
    grid = tmp_path / "grid.yaml"
    grid.write_text("algos: [ppo]\nenvs: [CartPole-v1]\nseeds: 1\nreport: {goal: {algos: [sac], at_least: 400}}\n")
    assert "the report's goal names ['sac'], not in algos" in error_of(["benchmark", str(grid), "--dir", str(bench)],
                                                                       capsys)  # fmt: skip
    grid.write_text("algos: [ppo]\nenvs: [CartPole-v1, Acrobot-v1]\nseeds: 1\n"
                    "report: {goal: {at_least: {CartPole-v1: 475}}}\n")  # fmt: skip
    assert "needs one number for each task of the grid (CartPole-v1, Acrobot-v1)" in error_of(
        ["benchmark", str(grid), "--dir", str(bench)], capsys
    )
    grid.write_text("algos: [mappo]\nenvs: [Spread-v0]\nseeds: 1\nreport: {fixed_plays: [random]}\n")
    assert "fixed plays are for single-agent tasks, not Spread-v0" in error_of(
        ["benchmark", str(grid), "--dir", str(bench)], capsys
    )
    assert not bench.exists()


def summary_with(**final) -> dict:
    return {"final_eval": {"mean_return": 0.0, **final}, "evaluations": [], "env_steps": 100, "wall_time_s": 1.0}


def test_the_report_gives_task_metrics_fixed_play_and_the_goals_verdict_per_seed(tmp_path):
    from rl_suite.benchmark import Goal, ReportSpec, make_grid
    from rl_suite.report import write_report

    errors = {("ppo", 0): 0.12, ("ppo", 1): 0.30, ("sac", 0): 0.20, ("sac", 1): 0.22}
    task = "QuadrupedVelocity-Flat-v0"
    runs = [
        {"algo": algo, "env_id": task, "seed": seed, "summary": summary_with(tracking_error_lin=error, fell=0.0)}
        for (algo, seed), error in errors.items()
    ]
    fixed = {("zero", "QuadrupedVelocity-Flat-v0"): {"mean_return": 1.0, "tracking_error_lin": 0.6, "fell": 0.0}}
    goal = Goal(metric="tracking_error_lin", at_most=0.25)
    spec = ReportSpec(metrics=("tracking_error_lin", "fell"), fixed_plays=("zero",), goal=goal)
    write_report(tmp_path, runs, 4, {}, "t", spec=spec, fixed=fixed)
    report = (tmp_path / "report.md").read_text()
    # ppo's seed 1 misses (0.30 > 0.25), so ppo misses on every seed; sac's two seeds both meet it.
    assert "- ppo on QuadrupedVelocity-Flat-v0: missed against 0.25 (0.120, 0.300; mean 0.210)" in report
    assert "- sac on QuadrupedVelocity-Flat-v0: met against 0.25 (0.200, 0.220; mean 0.210)" in report
    assert "- zero actions on QuadrupedVelocity-Flat-v0: 0.600, misses it" in report
    verdict = "Goal (final tracking_error_lin <= 0.25 on every seed): **missed**, 1 of 2 (algorithm, task) pairs."
    assert verdict in report
    assert "| QuadrupedVelocity-Flat-v0 | tracking_error_lin | 0.210 ± 0.090 (n=2; 0.120-0.300) |" in report
    assert "| QuadrupedVelocity-Flat-v0 | zero actions | 1.000 | 0.600 | 0.000 |" in report
    # On the mean over seeds both meet it; a line that standing still meets is called out.
    loose = ReportSpec(goal=Goal(metric="tracking_error_lin", at_most=0.7, every_seed=False, algos=("ppo",)))
    write_report(tmp_path, runs, 6, {}, "t", spec=loose, fixed=fixed)
    report = (tmp_path / "report.md").read_text()
    verdict = "Goal (final tracking_error_lin <= 0.7 on the mean over seeds): met so far, over 4 of the grid's 6 runs, "
    verdict += "1 of 1 (algorithm, task) pairs."
    assert verdict in report
    assert "0.600, meets it: this line does not tell learning from none" in report
    with open(tmp_path / "report.csv") as f:
        assert "tracking_error_lin" not in f.readline()  # the loose spec names no metrics
    # One number per task, as a grid file gives it: {task: number}.
    per_task = make_grid({"algos": ["ppo", "sac"], "envs": [task], "seeds": 2,
                          "report": {"goal": {"metric": "tracking_error_lin", "at_most": {task: 0.31}}}})  # fmt: skip
    write_report(tmp_path, runs, 4, {}, "t", spec=per_task.report, fixed=fixed)
    report = (tmp_path / "report.md").read_text()
    assert f"Goal: final tracking_error_lin <= the task's number ({task} 0.31) on every seed" in report
    assert "**missed**" not in report and "met, 2 of 2 (algorithm, task) pairs." in report
    assert per_task.to_plain()["report"]["goal"]["at_most"] == {task: 0.31}  # recorded in grid.yaml as given


def test_fixed_play_is_evaluated_as_the_runs_were_and_kept(tmp_path, monkeypatch):
    from rl_suite import benchmark as bench_module
    from rl_suite.benchmark import BenchmarkRun, FixedPlay, fixed_play_results, make_grid
    from rl_suite.registry import make
    from rl_suite.runner import EVAL_SEED_OFFSET, evaluate

    grid = make_grid({"algos": ["ppo"], "envs": ["CartPole-v1"], "seeds": [3],
                      "report": {"fixed_plays": ["zero", "random"]}})  # fmt: skip
    run = BenchmarkRun("ppo", "CartPole-v1", 3)
    directory = tmp_path / "runs" / run.name
    directory.mkdir(parents=True)
    run_section = "run:\n  seed: 3\n  eval_episodes: 6\n  env_kwargs: {max_episode_steps: 50}\n"
    (directory / "config.yaml").write_text(run_section)
    results = fixed_play_results(tmp_path, grid, {run: summary_with()})
    seed = 3 + EVAL_SEED_OFFSET
    with make("CartPole-v1", num_envs=6, seed=seed, max_episode_steps=50) as env:
        expected = evaluate(FixedPlay("random", env.action_space, seed), env, seed=seed)
    assert results[("random", "CartPole-v1")] == expected
    # Pushing left every step topples the pole within a few steps; random play holds it longer, but not for 475.
    assert results[("zero", "CartPole-v1")]["mean_return"] < 12 < results[("random", "CartPole-v1")]["mean_return"]
    assert expected["mean_return"] < 50

    def not_again(*args, **kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr("rl_suite.runner.evaluate", not_again)
    assert fixed_play_results(tmp_path, grid, {run: summary_with()}) == results  # kept in fixed_plays.json
    assert bench_module.FIXED_PLAYS["zero"] == "zero actions"
