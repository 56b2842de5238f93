"""`rl-suite tune`: a small PPO study on CartPole with 2 worker processes sharing one SQLite file finishes its trials,
prunes some, leaves an ordinary run directory per trial and reports the best; bad storage URLs, bad search spaces
and `--best` without a finished trial are clear errors that write nothing."""

from __future__ import annotations

import json
import os

import optuna
import pytest
import yaml

from rl_suite.cli import main
from rl_suite.config import parse_assignments
from rl_suite.registry import load_algorithm
from rl_suite.runner import RunConfig
from rl_suite.settings import new_run_settings
from rl_suite.tune import Dimension, read_space, shipped_space_path

# A learning rate from far too small to too large, so that some trials learn nothing in 4,096 steps and fall below
# the median of the finished ones at the first or second evaluation (random play scores about 22 on CartPole).
SPACE = """
lr: {type: float, low: 1.0e-6, high: 3.0e-2, log: true}
epochs: {type: int, low: 1, high: 20}
"""
STUDY = ["--total-steps", "4096", "--set", "eval_every_steps=1024", "eval_episodes=10", "--startup-trials", "2"]


def error_of(args, capsys) -> str:
    assert main(args) == 2
    return capsys.readouterr().err.strip()


def test_a_cartpole_study_with_two_workers_sharing_one_sqlite_file_prunes_and_reports_the_best(tmp_path, capsys):
    (tmp_path / "space.yaml").write_text(SPACE)
    study_dir = tmp_path / "study"
    args = ["tune", "ppo", "CartPole-v1", "--study-dir", str(study_dir), "--space", str(tmp_path / "space.yaml")]
    assert main([*args, "--trials", "8", "--workers", "2", *STUDY]) == 0
    report = capsys.readouterr().out

    assert sorted(path.name for path in study_dir.iterdir()) == ["study.db", "trials"]  # one database, shared
    study = optuna.load_study(study_name="ppo-CartPole-v1", storage=f"sqlite:///{study_dir / 'study.db'}")
    states = [trial.state for trial in study.trials]
    assert len(states) == 8 and set(states) <= {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    complete = [trial for trial in study.trials if trial.state == optuna.trial.TrialState.COMPLETE]
    pruned = [trial for trial in study.trials if trial.state == optuna.trial.TrialState.PRUNED]
    assert pruned and len(complete) >= 2
    workers = {trial.user_attrs["worker"] for trial in study.trials}
    assert len(workers) == 2 and not any(worker.endswith(f":{os.getpid()}") for worker in workers)

    # Every trial is an ordinary run directory, trained with the settings the study sampled.
    assert sorted(path.name for path in (study_dir / "trials").iterdir()) == [f"trial-{n}" for n in range(8)]
    for trial in study.trials:
        run_dir = study_dir / "trials" / f"trial-{trial.number}"
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert config["run"]["env_id"] == "CartPole-v1" and config["run"]["total_steps"] == 4096
        assert config["agent"]["lr"] == trial.params["lr"] and config["agent"]["epochs"] == trial.params["epochs"]
        if trial in pruned:  # stopped at an evaluation before the budget: no summary
            assert not (run_dir / "summary.json").exists() and max(trial.intermediate_values) < 4096
        else:
            summary = json.loads((run_dir / "summary.json").read_text())
            assert summary["env_steps"] >= 4096 or summary["final_eval"]["mean_return"] >= 475  # the shipped stop
            assert summary["final_eval"]["mean_return"] == trial.value
            assert [row["mean_return"] for row in summary["evaluations"]] == list(trial.intermediate_values.values())

    # The best, reported at the end and by --best: YAML for agents/hyperparams with a ready --set line in a comment.
    best_value = max(trial.value for trial in complete)
    assert main([*args, "--best"]) == 0
    printed = capsys.readouterr().out
    assert report.strip().endswith(printed.strip())
    best = study.best_trial
    assert best.value == best_value
    assert yaml.safe_load(printed) == {"CartPole-v1": {"lr": best.params["lr"], "epochs": best.params["epochs"]}}
    assert f"best: trial {best.number}, mean return {best_value:.2f}" in printed
    (set_line,) = [line for line in printed.splitlines() if "--set " in line]
    assert set_line.startswith("# rl-suite train ppo CartPole-v1 --set ")
    assert parse_assignments(set_line.split("--set ", 1)[1].split()) == best.params
    assert f"8 trials, {len(complete)} complete, {len(pruned)} pruned\n" in printed


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nosuchdb://x", "names no database SQLAlchemy knows"),
        ("not a url", "is not a database URL"),
        ("sqlite://", "in-memory database, which workers cannot share"),
        ("sqlite:///{tmp}/missing/study.db", "missing does not exist"),
    ],
)
def test_a_bad_storage_url_is_an_error_that_names_it_and_writes_nothing(url, says, tmp_path, capsys):
    url = url.format(tmp=tmp_path)
    study_dir = tmp_path / "study"
    message = error_of(["tune", "ppo", "CartPole-v1", "--storage", url, "--study-dir", str(study_dir)], capsys)
    assert message.startswith(f"rl-suite: error: storage {url!r}") and says in message
    if url != f"sqlite:///{tmp_path}/missing/study.db":
        assert "expected a SQLAlchemy database URL such as sqlite:///" in message
    assert list(tmp_path.iterdir()) == []  # no study folder, no database file


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("lrr: {type: float, low: 1.0e-4, high: 1.0e-3}", "'lrr' is not a setting of the run or of ppo"),
        ("lr: {type: uniform, low: 1.0e-4, high: 1.0e-3}", "'lr' has type 'uniform'; expected a mapping with type"),
        ("lr: {type: float, low: 1.0e-2, high: 1.0e-3}", "'lr': low 0.01 is above high 0.001"),
        ("lr: {type: float, low: 0.0, high: 1.0e-3, log: true}", "true needs low > 0"),
        ("lr: {type: float, low: small, high: 1.0e-3}", "'lr': low 'small' is not a number"),
        ("epochs: {type: float, low: 1, high: 5}", "epochs is an integer setting; give it type int"),
        ("epochs: {type: int, low: 1.5, high: 5}", "'epochs': low 1.5 is not an integer"),
        ("hidden: {type: categorical, choices: [[64], fast]}", "'hidden': setting 'hidden' expects tuple, got 'fast'"),
        ("gamma: {type: categorical, choices: []}", "'gamma' needs a non-empty list of choices"),
        ("total_steps: {type: int, low: 1000, high: 5000}", "says how trials are measured; fix it with --set"),
        ("lr: !!python/name:os.system {type: float}", "is not plain YAML"),
    ],
)
def test_a_search_space_is_checked_before_the_study_starts(entry, says, tmp_path, capsys):
    (tmp_path / "space.yaml").write_text(entry + "\n")
    args = ["tune", "ppo", "CartPole-v1", "--space", str(tmp_path / "space.yaml"), "--study-dir", str(tmp_path / "s")]
    assert says in error_of(args, capsys)
    assert [path.name for path in tmp_path.iterdir()] == ["space.yaml"]


def test_best_of_a_missing_or_empty_study_is_a_clear_error(tmp_path, capsys):
    study_dir = tmp_path / "study"
    args = ["tune", "ppo", "CartPole-v1", "--best", "--study-dir", str(study_dir)]
    assert error_of(args, capsys) == (
        f"rl-suite: error: no study 'ppo-CartPole-v1': {study_dir / 'study.db'} does not exist (run `rl-suite tune` "
        "first)"
    )
    assert not study_dir.exists()

    study_dir.mkdir()
    url = f"sqlite:///{study_dir / 'study.db'}"
    study = optuna.create_study(study_name="ppo-CartPole-v1", storage=url, direction="maximize")
    study.set_user_attr("algo", "ppo")
    study.set_user_attr("env_id", "CartPole-v1")
    assert error_of(args, capsys) == "rl-suite: error: study 'ppo-CartPole-v1' has no complete trial yet (no trials)"
    study.tell(study.ask(), state=optuna.trial.TrialState.PRUNED)
    assert error_of(args, capsys).endswith("has no complete trial yet (1 pruned)")
    assert error_of([*args, "--study-name", "other"], capsys) == (
        f"rl-suite: error: no study 'other' in {url}; it holds ppo-CartPole-v1"
    )
    assert error_of(["tune", "sac", "CartPole-v1", "--best", "--storage", url, "--study-name", "ppo-CartPole-v1"],
                    capsys).endswith("searches ppo on CartPole-v1, not sac on CartPole-v1")  # fmt: skip


@pytest.mark.parametrize(("algo_name", "env_id"), [("ppo", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_the_shipped_search_spaces_sample_settings_the_agent_takes(algo_name, env_id):
    algo = load_algorithm(algo_name)
    space = read_space(shipped_space_path(algo), algo)
    assert {"lr", "gamma", "hidden"} <= set(space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        sampled = {name: dimension.suggest(trial) for name, dimension in space.items()}
        run_values, agent_values = new_run_settings(algo, env_id, sampled)
        RunConfig(**run_values)
        config = algo.Config(**agent_values)
        for name, value in sampled.items():
            assert getattr(config, name) == (tuple(value) if isinstance(value, list) else value)
        study.tell(trial, 0.0)


def test_a_list_choice_is_offered_to_optuna_as_a_label_and_comes_back_as_the_list():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    hidden = Dimension("hidden", "categorical", choices=([64], [64, 64]))
    values = [hidden.suggest(trial) for trial in (study.ask() for _ in range(10))]
    assert {tuple(value) for value in values} == {(64,), (64, 64)}
    assert {trial.params["hidden"] for trial in study.trials} == {"[64]", "[64, 64]"}
