"""The registry (make, register, listing) and the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import rl_suite
from rl_suite.cli import main
from rl_suite.env import VecEnv

CLASSIC = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0"]


def test_the_five_classic_tasks_are_registered_natively():
    specs = {spec.id: spec for spec in rl_suite.registered()}
    for env_id in CLASSIC:
        assert specs[env_id].entry_point.startswith("rl_suite.envs.classic.")
        env = rl_suite.make(env_id, num_envs=2)
        assert isinstance(env, VecEnv) and env.env_id == env_id and env.num_envs == 2


def test_make_passes_task_settings_and_the_time_limit():
    env = rl_suite.make("Pendulum-v1", g=9.81, max_episode_steps=50)
    assert env.g == 9.81 and env.max_episode_steps == 50
    assert rl_suite.make("CartPole-v1", max_episode_steps=None).max_episode_steps is None
    assert rl_suite.make("CartPole-v1", sutton_barto_reward=True).sutton_barto_reward


def test_sutton_barto_reward():
    env = rl_suite.make("CartPole-v1", num_envs=2, sutton_barto_reward=True)
    env.reset()
    env.set_state(torch.tensor([[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    _, reward, terminated, _, _ = env.step(torch.tensor([1, 1]))
    assert terminated.tolist() == [True, False] and reward.tolist() == [-1.0, 0.0]


class Tiny(VecEnv):
    """A user's own simulator: one number that counts up."""

    def __init__(self, num_envs=1, device="cpu", seed=None, limit=3):
        import gymnasium as gym

        super().__init__(num_envs, device, gym.spaces.Box(-10, 10, (1,)), gym.spaces.Discrete(2), limit, seed)
        self.count = torch.zeros(self.num_envs, device=self.device)

    def _advance(self, actions):
        self.count += actions
        return self._reward.copy_(self.count), self._terminated

    def _observe(self, out, env_ids=None):
        if env_ids is None:
            out.copy_(self.count.unsqueeze(1))
        else:
            out.index_copy_(0, env_ids, self.count[env_ids].unsqueeze(1))

    def _reset_envs(self, selection):
        start = selection.uniform(self.rng, 0.0, 0.0, 1, torch.float32)  # zeros, one row per selected env
        selection.write(self.count.unsqueeze(1), start)


def test_register_a_users_simulator_by_entry_point():
    rl_suite.register("Tiny-v0", f"{__name__}:Tiny", limit=2)
    env = rl_suite.make("Tiny-v0", num_envs=3)
    env.reset()
    env.step(torch.tensor([1, 0, 1]))
    obs, reward, _, truncated, info = env.step(torch.tensor([1, 1, 1]))
    assert truncated.all() and info["episode_return"].tolist() == [3.0, 1.0, 3.0]
    assert torch.equal(obs, torch.zeros(3, 1))


def test_adapter_prefix_cannot_be_registered():
    with pytest.raises(ValueError, match="starts with an adapter prefix"):
        rl_suite.register("gym:Mine-v0", "x:y")


def test_cli_lists_environments(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for env_id in CLASSIC:
        assert env_id in out
    assert "gym:<id>" in out


def test_cli_throughput_prints_rates(capsys):
    assert main(["throughput", "CartPole-v1", "--num-envs", "1", "16", "--seconds", "0.05"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("CartPole-v1")][0]
    rates = [float(x.replace(",", "")) for x in row.split()[1:]]
    assert len(rates) == 2 and all(rate > 0 for rate in rates)


def test_cli_reports_bad_input_without_a_traceback(capsys):
    assert main(["throughput", "CartPol-v1", "--seconds", "0.05"]) == 2
    err = capsys.readouterr().err
    assert "rl-suite: error: unknown environment id 'CartPol-v1'. Did you mean 'CartPole-v1'?" in err


def test_python_dash_m_runs_the_same_cli():
    result = subprocess.run([sys.executable, "-m", "rl_suite", "envs"], capture_output=True, text=True, check=True)
    assert "CartPole-v1" in result.stdout


def test_the_shipped_algorithms_are_the_modules_of_the_agents_package_found_by_name():
    import pathlib

    from rl_suite import registry

    files = {p.stem for p in (pathlib.Path(__file__).parents[1] / "agents").glob("*.py") if not p.stem.startswith("_")}
    shipped = {name for name, entry in registry.ALGORITHMS.items() if entry.startswith("rl_suite.agents.")}
    assert shipped == files and {"ppo", "sac", "mappo", "qmix"} <= shipped
    for name in shipped:
        algo = registry.load_algorithm(name)
        assert algo.name == name and algo.__module__ == f"rl_suite.agents.{name}"


def test_a_module_entry_point_must_hold_exactly_one_class_of_that_name(monkeypatch):
    from rl_suite import registry

    monkeypatch.setitem(registry.ALGORITHMS, "ppo2", "rl_suite.agents.ppo")
    with pytest.raises(registry.UnknownAlgorithmError, match=r"rl_suite.agents.ppo defines 0 classes named 'ppo2'"):
        registry.load_algorithm("ppo2")
