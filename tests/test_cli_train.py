"""The training command line: a real short run, evaluation with --json, resume, and bad arguments answered with clear
messages rather than tracebacks."""

from __future__ import annotations

import json

import pytest
import yaml

from rl_suite.cli import main
from rl_suite.registry import load_algorithm
from rl_suite.settings import tuned_settings

QUICK = [
    "--total-steps",
    "512",
    "--set",
    "progress=false",
    "eval_episodes=4",
    "eval_every_steps=256",
    "--set",  # a second --set adds to the first
    "n_steps=16",
    "epochs=2",
    "hidden=[16, 16]",
]


def error_of(args, capsys) -> str:
    assert main(args) == 2
    return capsys.readouterr().err.strip()


def test_train_then_eval_json_then_resume(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        main(["train", "ppo", "CartPole-v1", "--num-envs", "4", "--seed", "3", "--run-dir", str(run_dir), *QUICK]) == 0
    )
    out = capsys.readouterr().out
    assert "512 env steps" in out and "evaluation over 4 episodes" in out
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["run"]["seed"] == 3 and config["agent"]["n_steps"] == 16 and config["agent"]["hidden"] == [16, 16]
    assert config["agent"]["lr"] == 0.001  # from the shipped CartPole settings

    assert main(["eval", str(run_dir), "--episodes", "7", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 7 and result["env_id"] == "CartPole-v1" and result["algo"] == "ppo"
    assert {"mean_return", "std_return"} <= set(result) and 0 < result["mean_return"] <= 500

    assert main(["train", "ppo", "CartPole-v1", "--resume", str(run_dir), "--total-steps", "1024"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1024


def test_train_pql_on_a_mujoco_task(tmp_path, capsys):
    pytest.importorskip("mujoco")
    run_dir = tmp_path / "run"
    settings = ["learning_starts=256", "batch_size=64", "hidden=[32, 32]", "eval_every_steps=512"]
    args = ["train", "pql", "HalfCheetah-v5", "--num-envs", "8", "--run-dir", str(run_dir), "--total-steps", "768"]
    assert main([*args, "--set", "progress=false", "eval_episodes=2", *settings]) == 0
    assert "768 env steps" in capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == "pql" and summary["final_eval"]["episodes"] == 2
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["agent"]["activation"] == "relu"  # from the shipped HalfCheetah settings


def test_train_mappo_and_qmix_then_eval_reports_the_win_rate(tmp_path, capsys):
    quick = ["--num-envs", "4", "--set", "progress=false", "eval_episodes=8", "hidden=[16]"]
    spread = tmp_path / "spread"
    assert main(["train", "mappo", "Spread-v0", "--total-steps", "400", "--run-dir", str(spread), *quick]) == 0
    out = capsys.readouterr().out
    assert "400 env steps" in out and "evaluation over 8 episodes" in out and "win rate" not in out
    assert yaml.safe_load((spread / "config.yaml").read_text())["agent"]["n_steps"] == 25  # shipped Spread settings

    skirmish = tmp_path / "skirmish"
    settings = ["batch_episodes=4", "learning_starts_episodes=4", "gru_size=16"]
    args = ["train", "qmix", "Skirmish-3m-v0", "--total-steps", "640", "--run-dir", str(skirmish)]
    assert main([*args, *quick, *settings]) == 0
    assert "640 env steps" in capsys.readouterr().out
    summary = json.loads((skirmish / "summary.json").read_text())
    assert summary["evaluations"][-1]["win_rate"] == summary["final_eval"]["win_rate"]
    assert main(["eval", str(skirmish), "--episodes", "6", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["algo"] == "qmix" and result["episodes"] == 6 and 0 <= result["win_rate"] <= 1

    err = error_of(["train", "ppo", "Skirmish-3m-v0", "--total-steps", "64"], capsys)
    expected = (
        "ppo cannot train on Skirmish-3m-v0: Skirmish-3m-v0 is a multi-agent env, and ppo trains single-agent envs"
    )
    assert err == f"rl-suite: error: {expected}"
    continuous = "env_kwargs={continuous_actions: true}"
    err = error_of(["train", "qmix", "Spread-v0", "--total-steps", "64", "--set", continuous], capsys)
    assert err.endswith(
        "qmix cannot train on Spread-v0: qmix needs a MultiDiscrete action space, got Box(0.0, 1.0, (3, 5), float32)"
    )


def test_tuned_settings_ship_for_the_learning_tasks():
    assert tuned_settings(load_algorithm("ppo"), "CartPole-v1")["stop_at_return"] == 475
    assert tuned_settings(load_algorithm("ppo"), "Pendulum-v1")["scale_rewards"] is True
    assert tuned_settings(load_algorithm("sac"), "Pendulum-v1")["stop_at_return"] == -200
    assert tuned_settings(load_algorithm("pql"), "Pendulum-v1")["stop_at_return"] == -200
    assert tuned_settings(load_algorithm("ppo"), "Acrobot-v1")["num_envs"] == 16  # the default section


def test_a_users_env_kwargs_add_to_the_tuned_ones_key_by_key():
    from rl_suite.settings import layered, new_run_settings

    rarl = load_algorithm("rarl")
    assert tuned_settings(rarl, "Ant-v5")["env_kwargs"] == {"adversary_force": 1.0}
    run_values, _ = new_run_settings(rarl, "Ant-v5", {"env_kwargs": {"nthread": 1}, "seed": 3})
    assert run_values["env_kwargs"] == {"adversary_force": 1.0, "nthread": 1} and run_values["seed"] == 3
    run_values, _ = new_run_settings(rarl, "Ant-v5", {"env_kwargs": {"adversary_force": 2.0}})
    assert run_values["env_kwargs"] == {"adversary_force": 2.0}
    assert layered({"lr": 1.0}, {"lr": 2.0}, {}) == {"lr": 2.0}  # other settings: the last layer wins


def test_algos_lists_the_algorithms(capsys):
    assert main(["algos"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ppo") and "sac" in out and "Discrete, Box" in out


def test_unknown_algorithm(capsys):
    err = error_of(["train", "ppp", "CartPole-v1"], capsys)
    algorithms = "ppo, sac, pql, fpo, policyflow, rarl, mappo, qmix, maddpg, bpo, fixpo, flashsac, props"
    expected = f"unknown algorithm 'ppp'. Did you mean 'ppo' or 'props' or 'mappo'? Algorithms: {algorithms}"
    assert err == f"rl-suite: error: {expected}"


def test_unknown_env(capsys):
    err = error_of(["train", "ppo", "CartPol-v1", *QUICK], capsys)
    assert "unknown environment id 'CartPol-v1'. Did you mean 'CartPole-v1'?" in err


def test_algorithm_that_does_not_fit_the_action_space(capsys):
    err = error_of(["train", "sac", "CartPole-v1"], capsys)
    assert err == "rl-suite: error: sac cannot train on CartPole-v1: sac needs a Box action space, got Discrete(2)"


def test_unknown_set_key(capsys):
    err = error_of(["train", "ppo", "CartPole-v1", "--set", "learning_rate=1e-3"], capsys)
    assert err.startswith("rl-suite: error: unknown setting 'learning_rate'.")
    err = error_of(["train", "ppo", "CartPole-v1", "--set", "n_step=3"], capsys)
    assert "Did you mean 'n_steps'?" in err


def test_badly_typed_set_value(capsys):
    err = error_of(["train", "ppo", "CartPole-v1", "--set", "epochs=many"], capsys)
    assert err == "rl-suite: error: setting 'epochs' expects int, got 'many'"


def test_missing_and_corrupted_checkpoints(tmp_path, capsys):
    err = error_of(["eval", str(tmp_path)], capsys)
    assert err == f"rl-suite: error: no checkpoints in {tmp_path / 'checkpoints'}"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_000000000100.pt").write_bytes(b"garbage")
    with pytest.warns(UserWarning):
        err = error_of(["eval", str(tmp_path)], capsys)
    assert err == f"rl-suite: error: none of the 1 checkpoints in {tmp_path / 'checkpoints'} is readable"
    err = error_of(["train", "ppo", "CartPole-v1", "--resume", str(tmp_path / "nowhere")], capsys)
    assert err == f"rl-suite: error: {tmp_path / 'nowhere'} is not a run directory: it has no config.yaml"


def test_resume_with_another_algorithm_or_env_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--num-envs", "2", "--run-dir", str(run_dir), *QUICK]) == 0
    capsys.readouterr()
    err = error_of(["train", "ppo", "Acrobot-v1", "--resume", str(run_dir)], capsys)
    assert err == f"rl-suite: error: {run_dir} is a run of ppo on CartPole-v1, not of ppo on Acrobot-v1"
    err = error_of(["train", "ppo", "CartPole-v1", "--resume", str(run_dir), "--set", "lr=0.1"], capsys)
    assert "a resumed run keeps its settings" in err


def test_a_settings_profile_goes_over_the_tasks_settings_and_under_the_users():
    from rl_suite.settings import new_run_settings

    flashsac = load_algorithm("flashsac")
    run_values, agent_values = new_run_settings(flashsac, "Pendulum-v1", {"batch_size": 512}, profile="gpu")
    assert run_values["num_envs"] == 1024 and run_values["stop_at_return"] == -200  # the profile's, the task's
    assert agent_values["updates_per_env_step"] == 2 and agent_values["n_step"] == 3
    assert agent_values["actor_width"] == 64 and agent_values["batch_size"] == 512  # the task's, the user's
    assert new_run_settings(flashsac, "Pendulum-v1", {})[0]["num_envs"] == 4  # no profile: the task's alone


def test_an_unknown_profile_or_a_profile_on_resume_is_refused(tmp_path, capsys):
    err = error_of(["train", "flashsac", "Pendulum-v1", "--profile", "fast"], capsys)
    assert err == "rl-suite: error: flashsac has no settings profile 'fast' (its profiles: gpu)"
    err = error_of(["train", "ppo", "CartPole-v1", "--profile", "gpu"], capsys)
    assert err == "rl-suite: error: ppo has no settings profile 'gpu' (its profiles: none)"
    err = error_of(["train", "ppo", "CartPole-v1", "--resume", str(tmp_path), "--profile", "gpu"], capsys)
    assert err == (
        "rl-suite: error: --profile chooses a new run's settings; a resumed run keeps those its config.yaml holds"
    )
