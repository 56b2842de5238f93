"""stable-baselines3 models through our export and runtime: parity of the exported file (ONNX and TorchScript, loaded
with ``rl_suite.deploy.load_policy``) with ``model.predict(deterministic=True)``, VecNormalize inside the graph, the
``rl-suite export --sb3`` path, and the refusals."""

from __future__ import annotations

import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.cli import main
from rl_suite.deploy import load_policy
from rl_suite.deploy.sb3 import ExportError, export_sb3

sb3 = pytest.importorskip("stable_baselines3")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.vec_env import VecNormalize  # noqa: E402

FORMATS = ["onnx", "torchscript"]


def tiny() -> dict:
    return {"net_arch": [16]}  # a fresh dict each time: SB3 writes into policy_kwargs


def observations(space: gym.spaces.Box, count: int = 2000, seed: int = 1) -> np.ndarray:
    """Inside the bounds and a half beyond them on each side, where the bounds are finite; a wide Gaussian elsewhere."""
    rng = np.random.default_rng(seed)
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    low, high = np.where(bounded, low, 0.0), np.where(bounded, high, 0.0)
    span = high - low
    inside = low - 0.5 * span + 2.0 * span * rng.random((count, *space.shape))
    return np.where(bounded, inside, 3.0 * rng.standard_normal((count, *space.shape))).astype(np.float32)


def saturate(layer: torch.nn.Linear, gain: float) -> None:
    """Make an output layer large enough that clipping (or tanh) is active on many observations."""
    with torch.no_grad():
        layer.weight.normal_(0.0, gain, generator=torch.Generator().manual_seed(0))
        layer.bias.fill_(0.3)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Tiny SB3 models trained a few steps and saved: ``{name: (zip, model, vecnormalize pickle or None)}``."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("sb3")
    models = {}

    ppo = sb3.PPO("MlpPolicy", "Pendulum-v1", n_steps=64, batch_size=64, n_epochs=1, policy_kwargs=tiny(), seed=0)
    ppo.learn(256)
    saturate(ppo.policy.action_net, 3.0)
    models["ppo-pendulum"] = ppo

    sac = sb3.SAC("MlpPolicy", "Pendulum-v1", learning_starts=16, buffer_size=1000, batch_size=16, policy_kwargs=tiny())
    sac.learn(40)
    saturate(sac.policy.actor.mu, 10.0)
    models["sac-pendulum"] = sac

    models["ppo-cartpole"] = sb3.PPO(
        "MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, policy_kwargs=tiny(), seed=0
    ).learn(128)

    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0), clip_obs=2.0)
    normalized = sb3.PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, policy_kwargs=tiny(), seed=0)
    normalized.learn(256)
    saturate(normalized.policy.action_net, 3.0)
    venv.save(root / "vecnormalize.pkl")
    models["ppo-vecnormalize"] = normalized

    models["a2c-pendulum"] = sb3.A2C("MlpPolicy", "Pendulum-v1", n_steps=8, policy_kwargs=tiny(), seed=0).learn(16)
    models["ppo-gsde"] = sb3.PPO(  # gSDE with squash_output: tanh of the mean, then unscaled to the bounds
        "MlpPolicy",
        "Pendulum-v1",
        n_steps=16,
        batch_size=16,
        use_sde=True,
        policy_kwargs={**tiny(), "squash_output": True},
    ).learn(16)
    models["td3-pendulum"] = sb3.TD3(
        "MlpPolicy", "Pendulum-v1", learning_starts=8, buffer_size=100, batch_size=8, policy_kwargs=tiny()
    ).learn(16)
    models["dqn-cartpole"] = sb3.DQN(
        "MlpPolicy", "CartPole-v1", learning_starts=8, buffer_size=100, batch_size=8, policy_kwargs=tiny()
    ).learn(16)

    out = {}
    for name, model in models.items():
        model.save(root / f"{name}.zip")
        vecnorm = root / "vecnormalize.pkl" if name == "ppo-vecnormalize" else None
        out[name] = (root / f"{name}.zip", model, vecnorm)
    return out


def reference(model, obs: np.ndarray, vecnorm_path=None) -> np.ndarray:
    if vecnorm_path is not None:
        vecnorm = VecNormalize.load(str(vecnorm_path), make_vec_env("Pendulum-v1", n_envs=1))
        vecnorm.training = False
        obs = vecnorm.normalize_obs(obs)
    return model.predict(obs, deterministic=True)[0]


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("name", ["ppo-pendulum", "sac-pendulum", "ppo-cartpole", "ppo-vecnormalize"])
def test_exported_sb3_policy_matches_predict(saved, tmp_path, name, format):
    zip_path, model, vecnorm = saved[name]
    out = tmp_path / f"policy.{format}"
    report = export_sb3(zip_path, out, format, vecnormalize_path=vecnorm, env_id=name.split("-")[1])
    algo = name.split("-")[0]
    assert report.metadata["algorithm"] == f"sb3-{algo}"
    assert report.metadata["normalized_observations"] == (vecnorm is not None)
    assert report.observations_checked == 1000

    policy = load_policy(out)
    assert policy.backend == format and policy.metadata == report.metadata
    obs = observations(model.observation_space)
    actions = policy(obs)
    expected = reference(model, obs, vecnorm)
    if isinstance(model.action_space, gym.spaces.Discrete):
        assert policy.discrete and actions.dtype == np.int64
        np.testing.assert_array_equal(actions, expected)
        assert 0 < expected.mean() < 1  # both actions occur
    else:
        np.testing.assert_allclose(actions, expected, atol=1e-5, rtol=0)
        low, high = model.action_space.low, model.action_space.high
        assert (actions <= high).all() and (actions >= low).all()
        assert ((actions == high) | (actions == low)).any() and ((actions > low) & (actions < high)).any()
    np.testing.assert_allclose(policy(obs[0]), expected[0], atol=1e-5)  # one observation, no batch axis


def test_vecnormalize_statistics_are_inside_the_graph(saved, tmp_path):
    zip_path, model, vecnorm = saved["ppo-vecnormalize"]
    with_norm = load_policy(export_sb3(zip_path, tmp_path / "a.onnx", vecnormalize_path=vecnorm).path)
    without = load_policy(export_sb3(zip_path, tmp_path / "b.onnx").path)
    obs = observations(model.observation_space, 200)
    assert not np.allclose(with_norm(obs), without(obs))
    np.testing.assert_allclose(without(obs), model.predict(obs, deterministic=True)[0], atol=1e-5)


@pytest.mark.parametrize("name", ["a2c-pendulum", "ppo-gsde", "td3-pendulum", "dqn-cartpole"])
def test_other_sb3_algorithms(saved, tmp_path, name):
    zip_path, model, _ = saved[name]
    report = export_sb3(zip_path, tmp_path / "policy.onnx")
    assert report.metadata["algorithm"] == f"sb3-{name.split('-')[0]}"
    obs = observations(model.observation_space, 500)
    np.testing.assert_allclose(load_policy(report.path)(obs), reference(model, obs), atol=1e-5)


def test_metadata_spaces_and_control_rate(saved, tmp_path):
    zip_path, model, _ = saved["ppo-pendulum"]
    metadata = export_sb3(zip_path, tmp_path / "p.onnx", env_id="Pendulum-v1").metadata
    assert metadata["env_id"] == "Pendulum-v1" and metadata["dt"] == pytest.approx(0.05)  # our simulator's dt
    assert metadata["observation_space"]["type"] == "Box" and metadata["action_space"]["high"] == [2.0]
    assert metadata["source"]["library"] == "stable-baselines3" and metadata["rl_suite_version"]
    metadata = export_sb3(zip_path, tmp_path / "p.onnx", algo="PPO", dt=0.01).metadata
    assert metadata["env_id"] is None and metadata["control_hz"] == pytest.approx(100.0)
    with pytest.raises(ExportError, match="disagree"):
        export_sb3(zip_path, tmp_path / "p.onnx", dt=0.01, control_hz=50.0)


def test_cli_exports_an_sb3_zip(saved, tmp_path, capsys):
    zip_path, model, vecnorm = saved["ppo-vecnormalize"]
    out = tmp_path / "cli.onnx"
    argv = ["export", "--sb3", str(zip_path), "-o", str(out), "--vecnormalize", str(vecnorm)]
    assert main([*argv, "--env-id", "Pendulum-v1", "--control-hz", "20"]) == 0
    printed = capsys.readouterr().out
    assert "sb3-ppo" in printed and "parity against SB3's predict" in printed
    policy = load_policy(out)
    assert policy.dt == pytest.approx(0.05) and policy.metadata["env_id"] == "Pendulum-v1"
    obs = observations(model.observation_space, 300)
    np.testing.assert_allclose(policy(obs), reference(model, obs, vecnorm), atol=1e-5)

    assert main(["export", "--sb3", str(zip_path), "--format", "torchscript", "-o", str(tmp_path / "p.pt")]) == 0
    assert load_policy(tmp_path / "p.pt").backend == "torchscript"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["export", "-o", "x.onnx"], "exactly one source"),
        (["export", "runs/x", "--sb3", "m.zip", "-o", "x.onnx"], "exactly one source"),
        (["export", "runs/x", "--vecnormalize", "v.pkl", "-o", "x.onnx"], "go with --sb3"),
        (["export", "--sb3", "missing.zip", "-o", "x.onnx"], "no stable-baselines3 model at"),
    ],
)
def test_cli_source_errors(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


class _SpacesEnv(gym.Env):
    def __init__(self, observation_space, action_space):
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


FLAT = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)


@pytest.mark.parametrize(
    "observation_space, action_space, policy, message",
    [
        (FLAT, gym.spaces.MultiDiscrete([3, 2]), "MlpPolicy", "only Box and Discrete action spaces"),
        (FLAT, gym.spaces.MultiBinary(3), "MlpPolicy", "only Box and Discrete action spaces"),
        (gym.spaces.Dict({"a": FLAT}), gym.spaces.Discrete(2), "MultiInputPolicy", "flat Box observations only"),
        (gym.spaces.Box(-1.0, 1.0, (3, 4), np.float32), gym.spaces.Discrete(2), "MlpPolicy", "flat Box observations"),
    ],
)
def test_refuses_unsupported_spaces(tmp_path, observation_space, action_space, policy, message):
    env = _SpacesEnv(observation_space, action_space)
    sb3.PPO(policy, env, n_steps=8, batch_size=8, policy_kwargs=tiny()).save(tmp_path / "m.zip")
    with pytest.raises(ExportError, match=message):
        export_sb3(tmp_path / "m.zip", tmp_path / "m.onnx")


def test_refuses_recurrent_policies(saved, tmp_path):
    """A RecurrentPPO zip (sb3-contrib) is recognised from its data, without sb3-contrib installed."""
    zip_path = saved["ppo-pendulum"][0]
    recurrent = tmp_path / "recurrent.zip"
    with zipfile.ZipFile(zip_path) as source, zipfile.ZipFile(recurrent, "w") as target:
        for item in source.infolist():
            content = source.read(item)
            if item.filename == "data":
                data = json.loads(content)
                data["policy_class"]["__module__"] = "sb3_contrib.common.recurrent.policies"
                data["_last_lstm_states"] = None
                content = json.dumps(data).encode()
            target.writestr(item, content)
    with pytest.raises(ExportError, match=r"recurrent SB3 policies \(sb3-contrib RecurrentPPO\) cannot be exported"):
        export_sb3(recurrent, tmp_path / "r.onnx")


def test_refuses_bad_inputs(saved, tmp_path):
    zip_path = saved["ppo-pendulum"][0]
    with pytest.raises(ExportError, match="unknown export format 'tflite'"):
        export_sb3(zip_path, tmp_path / "p", "tflite")
    with pytest.raises(ExportError, match="unknown SB3 algorithm 'trpo'"):
        export_sb3(zip_path, tmp_path / "p.onnx", algo="trpo")
    with pytest.raises(ExportError, match="could not load .* as any of sac"):
        export_sb3(zip_path, tmp_path / "p.onnx", algo="sac")
    not_a_zip = tmp_path / "x.zip"
    not_a_zip.write_text("hello")
    with pytest.raises(ExportError, match="is not a model saved by stable-baselines3"):
        export_sb3(not_a_zip, tmp_path / "p.onnx")
    with pytest.raises(ExportError, match="no VecNormalize pickle at"):
        export_sb3(zip_path, tmp_path / "p.onnx", vecnormalize_path=tmp_path / "missing.pkl")
    cartpole_stats = VecNormalize(make_vec_env("CartPole-v1", n_envs=1))
    cartpole_stats.save(tmp_path / "cartpole.pkl")
    with pytest.raises(ExportError, match=r"VecNormalize statistics have shape \(4,\), the policy observes \(3,\)"):
        export_sb3(zip_path, tmp_path / "p.onnx", vecnormalize_path=tmp_path / "cartpole.pkl")


def test_core_does_not_import_sb3():
    import subprocess
    import sys

    code = "import sys, rl_suite.deploy.sb3, rl_suite.cli, rl_suite.deploy; print('stable_baselines3' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
