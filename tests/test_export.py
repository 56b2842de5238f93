"""Exported policies: parity with each agent's deterministic act in ONNX and TorchScript, metadata that round-trips,
clear refusals, and ``rl-suite export`` on a real run."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.agent import Agent, MultiAgentAgent
from rl_suite.cli import main
from rl_suite.deploy import load_policy
from rl_suite.deploy.export import ExportError, export_policy
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ActionScaler
from rl_suite.registry import load_algorithm
from rl_suite.spaces import space_to_dict

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

FORMATS = ["onnx", "torchscript"]
OBS = gym.spaces.Box(-np.inf, np.inf, (7,), np.float32)
BOX = gym.spaces.Box(np.array([-2.0, -1.0, 0.0], np.float32), np.array([3.0, 1.0, 0.5], np.float32))
MA_OBS = gym.spaces.Box(-np.inf, np.inf, (3, 6), np.float32)
MA_STATE = gym.spaces.Box(-np.inf, np.inf, (10,), np.float32)


def perturbed(agent):
    """Shift the observation statistics far from (0, 1) and make the weights large enough that actions reach the
    bounds, so that normalisation, scaling and clipping all matter to the comparison."""
    torch.manual_seed(0)
    norm = agent.obs_norm if agent.name == "mappo" else agent.normalizer
    norm.update(torch.randn(256, *agent.observation_space.shape) * 4.0 + 3.0)
    with torch.no_grad():
        for module in agent.modules.values():
            for parameter in module.parameters():
                parameter.mul_(3.0)
            linears = [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]
            if linears:  # the output layers start tiny (gain 0.01): make them large enough to saturate
                linears[-1].weight.mul_(100.0)
    return agent


def make(algo: str, action_space=BOX, **overrides):
    cls = load_algorithm(algo)
    if issubclass(cls, MultiAgentAgent):
        return perturbed(cls(MA_OBS, action_space, global_state_space=MA_STATE, hidden=(32, 32), **overrides))
    return perturbed(cls(OBS, action_space, hidden=(32, 32), **overrides))


CASES = {
    "ppo-box": lambda: make("ppo"),
    "ppo-discrete": lambda: make("ppo", gym.spaces.Discrete(4)),
    "sac": lambda: make("sac", normalize_obs=True),
    "pql": lambda: make("pql"),
    "fpo": lambda: make("fpo", flow_steps=6),
    "policyflow": lambda: make("policyflow"),
    "fixpo-flow": lambda: make("fixpo", policy="flow", activation="silu", flow_steps=6),
    "mappo-discrete": lambda: make("mappo", gym.spaces.MultiDiscrete([5, 5, 4])),
    "mappo-box": lambda: make("mappo", gym.spaces.Box(-2.0, 2.0, (3, 2), np.float32)),
}


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_exported_policy_matches_the_agent(case, format, tmp_path):
    agent = CASES[case]()
    path = tmp_path / f"policy.{format}"
    report = export_policy(agent, path, format, env_id="Toy-v0", dt=0.02)
    # export_policy itself raised unless every action was within atol 1e-5 + rtol 1e-4 (actions reach 3 here)
    assert report.max_abs_error <= 1e-5 + 1e-4 * 3 and report.observations_checked == 1000

    # The loaded runtime gives the agent's actions on fresh observations, one at a time and batched.
    policy = load_policy(path)
    assert policy.backend == format and policy.observation_dim == agent.observation_space.shape[-1]
    norm = agent.obs_norm if agent.name == "mappo" else agent.normalizer
    obs = (norm.mean + torch.sqrt(norm.var) * torch.randn(64, *agent.observation_space.shape)).float()
    if isinstance(agent, MultiAgentAgent):
        expected = agent.act({"obs": obs}, {}, deterministic=True)[0].numpy()
    else:
        expected = agent.act(obs, deterministic=True)[0].numpy()
    batched, single = policy(obs.numpy()), policy(obs[0].numpy())
    assert batched.shape == expected.shape and single.shape == expected.shape[1:]
    np.testing.assert_allclose(batched, expected, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(single, expected[0], atol=1e-5, rtol=1e-4)
    if isinstance(agent.action_space, gym.spaces.Box):  # the scaled actions stay inside the bounds
        assert (batched >= agent.action_space.low - 1e-6).all() and (batched <= agent.action_space.high + 1e-6).all()
        assert np.isclose(batched, agent.action_space.high).any(), "perturbation should drive some actions to a bound"
    agent.close()


def test_mappo_export_respects_the_availability_mask(tmp_path):
    agent = make("mappo", gym.spaces.MultiDiscrete([5, 5, 5]))
    policy = load_policy(export_policy(agent, tmp_path / "p.onnx").path)
    obs = torch.randn(32, 3, 6) * 4 + 3
    avail = torch.zeros(32, 3, 5, dtype=torch.bool)
    avail[..., 2] = True
    assert (policy(obs.numpy(), avail.numpy()) == 2).all()
    avail[..., 4] = True
    expected = agent.act({"obs": obs, "avail_actions": avail}, {}, deterministic=True)[0].numpy()
    np.testing.assert_array_equal(policy(obs.numpy(), avail.numpy()), expected)


@pytest.mark.parametrize("format", FORMATS)
def test_metadata_round_trips(format, tmp_path):
    agent = make("ppo")
    example = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    report = export_policy(agent, tmp_path / "p", format, example_obs=example, env_id="Toy-v0", control_hz=50.0)
    assert report.observations_checked == 1005
    policy = load_policy(report.path)
    assert policy.metadata == report.metadata == json.loads(json.dumps(report.metadata))
    meta = policy.metadata
    assert meta["algorithm"] == "ppo" and meta["env_id"] == "Toy-v0" and meta["rl_suite_version"] == "0.1.0"
    assert meta["observation_space"] == space_to_dict(OBS) and meta["action_space"] == space_to_dict(BOX)
    assert meta["dt"] == pytest.approx(0.02) and meta["control_hz"] == pytest.approx(50.0) and policy.dt == meta["dt"]
    assert meta["normalized_observations"] is True
    assert (policy.observation_dim, policy.action_dim) == (7, 3)


def test_unnormalised_agent_and_unknown_control_rate(tmp_path):
    agent = load_algorithm("ppo")(OBS, BOX, hidden=(16,), normalize_obs=False)
    report = export_policy(agent, tmp_path / "p.onnx")
    assert report.metadata["dt"] is None and report.metadata["normalized_observations"] is False


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    pass


class Toy(Agent):
    """An agent written outside the suite: a linear map to the Gaussian's mean, without a normaliser."""

    name, Config = "toy", ToyConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.net, self.scaler = torch.nn.Linear(7, 3), ActionScaler(self.action_space)

    def act(self, obs, deterministic=False):
        return self.scaler(self.net(obs)), {}


class ExportableToy(Toy):
    def inference_policy(self):
        return MLPInference(self.observation_space, self.action_space, torch.nn.Identity(), self.net, self.scaler)


def test_a_new_agent_becomes_exportable_by_one_method(tmp_path):
    with pytest.raises(NotImplementedError, match=r"toy cannot be exported: it does not implement Agent.inference_po"):
        export_policy(Toy(OBS, BOX), tmp_path / "p.onnx")
    assert not (tmp_path / "p.onnx").exists()

    agent = ExportableToy(OBS, BOX)
    report = export_policy(agent, tmp_path / "p.onnx")
    assert report.metadata["algorithm"] == "toy" and report.metadata["normalized_observations"] is False
    obs = torch.randn(16, 7) * 3
    np.testing.assert_allclose(load_policy(report.path)(obs.numpy()), agent.act(obs)[0].detach(), atol=1e-5)


def test_refusals(tmp_path):
    recurrent = make("mappo", gym.spaces.MultiDiscrete([5, 5, 5]), recurrent=True)
    with pytest.raises(ExportError, match="needs its hidden state"):
        export_policy(recurrent, tmp_path / "p.onnx")
    qmix = load_algorithm("qmix")(MA_OBS, gym.spaces.MultiDiscrete([5, 5, 5]), global_state_space=MA_STATE)
    with pytest.raises(ExportError, match="qmix cannot be exported"):
        export_policy(qmix, tmp_path / "p.onnx")
    with pytest.raises(ExportError, match="unknown export format 'tflite'"):
        export_policy(make("ppo"), tmp_path / "p.tflite", "tflite")
    with pytest.raises(ExportError, match="example_obs has shape"):
        export_policy(make("ppo"), tmp_path / "p.onnx", example_obs=np.zeros((2, 5)))
    with pytest.raises(ExportError, match="disagree"):
        export_policy(make("ppo"), tmp_path / "p.onnx", dt=0.1, control_hz=50)
    assert not (tmp_path / "p.onnx").exists()


def test_parity_failure_raises(tmp_path, monkeypatch):
    """A graph that drifts from the agent is caught by the check at the end of the export."""
    import rl_suite.deploy.export as export

    agent = make("ppo")
    original = export.deterministic_policy

    def drifting(agent):
        module = original(agent)
        module.scale.center += 1e-3
        return module

    monkeypatch.setattr(export, "deterministic_policy", drifting)
    with pytest.raises(ExportError, match="disagrees with the agent: max abs error"):
        export_policy(agent, tmp_path / "p.onnx")


@pytest.mark.parametrize("format", FORMATS)
def test_cli_exports_a_real_run(format, tmp_path, capsys):
    run_dir = tmp_path / "run"
    train = ["train", "ppo", "Pendulum-v1", "--num-envs", "4", "--run-dir", str(run_dir), "--total-steps", "256"]
    assert main([*train, "--set", "progress=false", "eval_episodes=2", "n_steps=16", "hidden=[16, 16]"]) == 0
    capsys.readouterr()
    out_file = tmp_path / f"pendulum.{format}"
    assert main(["export", str(run_dir), "--format", format, "-o", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {format} policy {out_file}" in out and "max abs error" in out and '"Pendulum-v1"' in out
    policy = load_policy(out_file, expected_observation_dim=3, expected_action_dim=1)
    assert policy.metadata["dt"] == pytest.approx(0.05)  # Pendulum's own control period
    action = policy(np.array([1.0, 0.0, 0.0], dtype=np.float32))
    assert action.shape == (1,) and -2.0 <= action[0] <= 2.0

    assert main(["export", str(run_dir), "-o", str(tmp_path / "p.onnx"), "--control-hz", "100"]) == 0
    assert load_policy(tmp_path / "p.onnx").metadata["dt"] == pytest.approx(0.01)
    assert main(["export", str(tmp_path / "nowhere"), "-o", str(tmp_path / "x.onnx")]) == 2
    assert "no checkpoints" in capsys.readouterr().err
