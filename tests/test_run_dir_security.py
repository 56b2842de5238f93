"""A run directory from a stranger cannot run code (DESIGN.md, "Run directory"): `rl-suite eval`, `play`, `export`
and `train --resume` build environments only from registered native ids and plain keyword arguments that the task takes;
an adapter id read from a file needs the user to repeat it on the command line."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

import rl_suite
from rl_suite.agent import Agent
from rl_suite.agents import PPO
from rl_suite.checkpoint import checkpoints
from rl_suite.cli import main
from rl_suite.registry import UntrustedEnvError, trusted_env_spec

QUICK = ["--total-steps", "256", "--set", "progress=false", "eval_episodes=2", "n_steps=16", "epochs=1", "hidden=[8]"]
CRAFTED_IDS = ["pz:os:system", "os:system", "gym:CartPole-v1"]


def train(env_id: str, run_dir) -> None:
    assert main(["train", "ppo", env_id, "--num-envs", "2", "--run-dir", str(run_dir), *QUICK]) == 0


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("native") / "run"
    train("CartPole-v1", run_dir)
    return run_dir


@pytest.fixture(scope="module")
def gym_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("gym") / "run"
    train("gym:CartPole-v1", run_dir)
    return run_dir


def crafted(source, tmp_path, env_id=None, env_kwargs=None, config_text=None):
    """A copy of the run ``source`` whose checkpoints and config.yaml say what a stranger wrote into them."""
    run_dir = tmp_path / "crafted"
    shutil.copytree(source, run_dir)
    if env_id is not None:
        for path in checkpoints(run_dir):
            state = torch.load(path, weights_only=True)
            state["env_id"] = env_id
            torch.save(state, path)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["run"]["env_id"] = env_id or config["run"]["env_id"]
    config["run"]["env_kwargs"] = env_kwargs or {}
    (run_dir / "config.yaml").write_text(config_text or yaml.safe_dump(config, sort_keys=False))
    return run_dir


def commands(run_dir, tmp_path, env_id="CartPole-v1") -> dict[str, list[str]]:
    """The four ways into a run directory, as a user types them (``env_id``: the id typed for the resume)."""
    return {
        "eval": ["eval", str(run_dir), "--episodes", "2"],
        "play": ["play", str(run_dir), "--video", str(tmp_path / "play.gif")],
        "export": ["export", str(run_dir), "-o", str(tmp_path / "policy.onnx")],
        "resume": ["train", "ppo", env_id, "--resume", str(run_dir), "--total-steps", "512"],
    }


def error_of(argv, capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize("env_id", CRAFTED_IDS)
def test_an_adapter_id_from_a_run_directory_is_refused(env_id, native_run, tmp_path, capsys):
    marker = tmp_path / "marker"
    run_dir = crafted(native_run, tmp_path, env_id, {"command": f"touch {marker}"})
    argv = commands(run_dir, tmp_path)
    for command in ("eval", "export", "play"):
        err = error_of(argv[command], capsys)
        assert f"the run {run_dir} names the environment {env_id!r}, an adapter id" in err
        assert f"confirm the id on the command line: --env {env_id}" in err
    # train --resume: the positional id is the user's, and it must be the run's.
    err = error_of(argv["resume"], capsys)
    assert err == f"rl-suite: error: {run_dir} is a run of ppo on {env_id}, not of ppo on CartPole-v1"
    assert not marker.exists()
    assert not (tmp_path / "policy.onnx").exists() and not (tmp_path / "play.gif").exists()


def test_a_gym_run_needs_its_id_repeated_on_the_command_line(gym_run, tmp_path, capsys):
    argv = commands(gym_run, tmp_path, "gym:CartPole-v1")
    err = error_of(argv["eval"], capsys)
    assert "confirm the id on the command line: --env gym:CartPole-v1" in err
    assert main([*argv["eval"], "--env", "gym:CartPole-v1", "--json"]) == 0
    assert '"env_id": "gym:CartPole-v1"' in capsys.readouterr().out

    err = error_of(argv["export"], capsys)
    assert "confirm the id on the command line: --env gym:CartPole-v1" in err
    assert main([*argv["export"], "--env", "gym:CartPole-v1"]) == 0
    assert '"gym:CartPole-v1"' in capsys.readouterr().out and (tmp_path / "policy.onnx").is_file()

    err = error_of(argv["eval"][:2] + ["--env", "CartPole-v1"], capsys)
    assert err == f"rl-suite: error: the run {gym_run} was trained on 'gym:CartPole-v1', but --env says 'CartPole-v1'"
    err = error_of(commands(gym_run, tmp_path)["resume"], capsys)
    assert err == f"rl-suite: error: {gym_run} is a run of ppo on gym:CartPole-v1, not of ppo on CartPole-v1"
    with pytest.warns(UserWarning, match="no environment state"):  # an adapter's episodes restart
        assert main(argv["resume"]) == 0
    assert "512 env steps" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env_kwargs", "message"),
    [
        ({"gravity": 1.0}, "'gravity' is not a keyword argument of CartPole-v1; it takes max_episode_steps,"),
        ({"contract_options": {}}, "'contract_options' is not a keyword argument of CartPole-v1"),
        ({"num_envs": 3}, "env_kwargs sets 'num_envs', which is make's own argument, not the environment's"),
    ],
)
def test_keyword_arguments_the_task_does_not_take_are_refused(env_kwargs, message, native_run, tmp_path, capsys):
    run_dir = crafted(native_run, tmp_path, env_kwargs=env_kwargs)
    for argv in commands(run_dir, tmp_path).values():
        assert message in error_of(argv, capsys)


def test_keyword_arguments_that_are_not_plain_data_are_refused(native_run, tmp_path, capsys):
    run_dir = crafted(native_run, tmp_path)
    config = (run_dir / "config.yaml").read_text()
    # safe_load builds a date (and sets, bytes) from YAML tags: plain to YAML, not to an environment's constructor.
    (run_dir / "config.yaml").write_text(
        config.replace("env_kwargs: {}", "env_kwargs: {max_episode_steps: 2024-01-01}")
    )
    for argv in commands(run_dir, tmp_path).values():
        err = error_of(argv, capsys)
        assert "env_kwargs['max_episode_steps'] is a date; env_kwargs read from a file must be plain data" in err


def test_a_python_tag_in_config_yaml_is_refused(native_run, tmp_path, capsys):
    marker = tmp_path / "marker"
    run_dir = crafted(native_run, tmp_path)
    config = (run_dir / "config.yaml").read_text()
    tagged = f"env_kwargs: {{g: !!python/object/apply:os.system ['touch {marker}']}}"
    (run_dir / "config.yaml").write_text(config.replace("env_kwargs: {}", tagged))
    for argv in commands(run_dir, tmp_path).values():
        err = error_of(argv, capsys)
        assert f"{run_dir / 'config.yaml'} is not plain YAML" in err and "python/object/apply:os.system" in err
    assert not marker.exists()


def test_config_yaml_and_checkpoint_that_disagree_are_refused(native_run, tmp_path, capsys):
    run_dir = crafted(native_run, tmp_path)
    for path in checkpoints(run_dir):
        state = torch.load(path, weights_only=True)
        state["env_id"] = "Acrobot-v1"
        torch.save(state, path)
    err = error_of(commands(run_dir, tmp_path)["eval"], capsys)
    assert err.endswith(
        f"{run_dir / 'config.yaml'} names the environment 'CartPole-v1' and the checkpoint 'Acrobot-v1'"
    )


def test_the_mujoco_factory_takes_its_own_the_simulators_and_the_tasks_keywords():
    pytest.importorskip("mujoco")
    settings = {"obs_noise_std": 0.01, "randomize_mass": 0.1, "forward_reward_weight": 2.0, "frame_skip": 5}
    assert trusted_env_spec("HalfCheetah-v5", settings, "a file") == ("HalfCheetah-v5", settings)
    with pytest.raises(UntrustedEnvError, match="'healthy_reward' is not a keyword argument of HalfCheetah-v5"):
        trusted_env_spec("HalfCheetah-v5", {"healthy_reward": 1.0}, "a file")  # Hopper's, not HalfCheetah's
    with pytest.raises(UntrustedEnvError, match="'task' is not a keyword argument of HalfCheetah-v5"):
        trusted_env_spec("HalfCheetah-v5", {"task": "Ant"}, "a file")  # the id fixes the task


def test_agent_load_resolves_the_algorithm_only_by_its_registered_name(tmp_path):
    agent = PPO.for_env(rl_suite.make("CartPole-v1"), hidden=(8,))
    agent.save(tmp_path / "agent.pt")
    for algo, message in (
        ("rl_suite.agents.ppo:PPO", "unknown algorithm 'rl_suite.agents.ppo:PPO'"),
        (7, "unknown algorithm 7: an algorithm is named by a string"),
    ):
        data = torch.load(tmp_path / "agent.pt", weights_only=True)
        data["algo"] = algo
        torch.save(data, tmp_path / "crafted.pt")
        with pytest.raises(ValueError, match=message):
            Agent.load(tmp_path / "crafted.pt")
