"""Convert a stable-baselines3 model (and its VecNormalize) to an exported policy, through the same writers and check.

A zip saved by stable-baselines3 goes through the writers, metadata and parity check of rl_suite/deploy/export.py:
the graph is the SB3 policy's deterministic action with its post-processing (what ``model.predict(obs,
deterministic=True)`` returns), and a VecNormalize's observation normalisation in front when its pickle is given.
stable-baselines3 is imported only when a model is converted. Loading an SB3 zip or a VecNormalize pickle unpickles
Python objects, as SB3 itself does: export only files you trust.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np
import torch
from torch import nn

from rl_suite.deploy.export import (
    ExportReport,
    build_metadata,
    check_format,
    compare_actions,
    env_facts,
    run_file,
    write_file,
)
from rl_suite.deploy.inference import ExportError, FrozenNorm, InferencePolicy, frozen

SB3_ALGORITHMS = ("ppo", "a2c", "sac", "td3", "dqn")
_SB3_POLICY_MODULES = {
    "stable_baselines3.sac.policies": "sac",
    "stable_baselines3.td3.policies": "td3",
    "stable_baselines3.dqn.policies": "dqn",
}


class _SB3Policy(InferencePolicy):
    """normalise -> features -> actor -> head, where the head is SB3's deterministic post-processing:
    ``argmax`` (Discrete), ``clip`` to the bounds (Box, unsquashed Gaussian mean), or ``unscale`` ([-1, 1] to the
    bounds, squashed policies; ``tanh`` first when the actor returns the pre-squash mean, and a clip after it that
    only removes float rounding past the bounds)."""

    def __init__(self, model, norm: FrozenNorm, features, actor, head: str, tanh: bool = False):
        super().__init__(model.observation_space, model.action_space, norm)
        self.features, self.actor = features, actor
        self.head, self.tanh = head, tanh
        if head in ("clip", "unscale"):
            self.register_buffer("low", torch.as_tensor(model.action_space.low, dtype=torch.float32).clone())
            self.register_buffer("high", torch.as_tensor(model.action_space.high, dtype=torch.float32).clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.actor(self.features(self.norm(obs).float()))
        if self.head == "argmax":
            return out.argmax(-1)
        if self.tanh:
            out = torch.tanh(out)
        if self.head == "unscale":  # BasePolicy.unscale_action, then clipped against float rounding past the bounds
            out = self.low + 0.5 * (out + 1.0) * (self.high - self.low)
        return torch.maximum(torch.minimum(out, self.high), self.low)


def _sb3_zip_data(zip_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]]:
    """The zip's path (SB3 adds a missing ``.zip``) and its JSON ``data`` entry, read without unpickling anything."""
    import zipfile

    if not zip_path.is_file() and zip_path.with_name(zip_path.name + ".zip").is_file():
        zip_path = zip_path.with_name(zip_path.name + ".zip")
    if not zip_path.is_file():
        raise ExportError(f"no stable-baselines3 model at {zip_path}")
    try:
        with zipfile.ZipFile(zip_path) as archive:
            return zip_path, json.loads(archive.read("data"))
    except (zipfile.BadZipFile, KeyError, ValueError) as error:
        raise ExportError(
            f"{zip_path} is not a model saved by stable-baselines3 (a zip with a 'data' entry): {error}"
        ) from None


def _sb3_algorithm(data: dict[str, Any], algo: str | None) -> list[str]:
    """The algorithm(s) to load the zip with: the one given, the one its policy class names, or all to try."""
    policy_class = data.get("policy_class") if isinstance(data.get("policy_class"), dict) else {}
    module = str(policy_class.get("__module__", ""))
    constructor = str(policy_class.get("__init__", ""))
    if "recurrent" in module.lower() or "Recurrent" in constructor or "_last_lstm_states" in data:
        raise ExportError(
            "recurrent SB3 policies (sb3-contrib RecurrentPPO) cannot be exported: their action needs the LSTM "
            "state carried from one step to the next, and the exported policy is stateless"
        )
    if algo is not None:
        name = algo.lower().removeprefix("sb3-")
        if name not in SB3_ALGORITHMS:
            raise ExportError(f"unknown SB3 algorithm {algo!r}; exportable: {', '.join(SB3_ALGORITHMS)}")
        return [name]
    if module.startswith("sb3_contrib"):
        raise ExportError(
            f"the policy class comes from {module} (sb3-contrib); exportable SB3 algorithms: "
            f"{', '.join(SB3_ALGORITHMS)} (pass algo= to force one)"
        )
    if module in _SB3_POLICY_MODULES:
        return [_SB3_POLICY_MODULES[module]]
    if module == "stable_baselines3.common.policies":
        return ["ppo" if "clip_range" in data else "a2c"]
    return list(SB3_ALGORITHMS)


def _sb3_load(zip_path: pathlib.Path, candidates: list[str]):
    import stable_baselines3 as sb3
    from stable_baselines3.common.policies import ActorCriticPolicy
    from stable_baselines3.dqn.policies import DQNPolicy
    from stable_baselines3.sac.policies import SACPolicy
    from stable_baselines3.td3.policies import TD3Policy

    policies = {
        "ppo": ActorCriticPolicy,
        "a2c": ActorCriticPolicy,
        "sac": SACPolicy,
        "td3": TD3Policy,
        "dqn": DQNPolicy,
    }
    # Schedules are cloudpickled functions that may not load in another Python; inference does not need them.
    schedules = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": 0.2}
    schedules["exploration_schedule"] = lambda _: 0.0
    errors = []
    for name in candidates:
        try:
            model = getattr(sb3, name.upper()).load(str(zip_path), device="cpu", custom_objects=schedules)
        except Exception as error:  # SB3 raises many types for a zip of another algorithm
            errors.append(f"{name}: {type(error).__name__}: {error}")
            continue
        if isinstance(model.policy, policies[name]):
            return name, model
        errors.append(f"{name}: its policy is a {type(model.policy).__name__}")
    raise ExportError(f"could not load {zip_path} as any of {', '.join(candidates)} ({'; '.join(errors)})")


def _sb3_check_spaces(observation_space, action_space) -> None:
    from gymnasium import spaces

    if isinstance(observation_space, spaces.Dict | spaces.Tuple):
        raise ExportError(
            f"flat Box observations only: this policy observes a {type(observation_space).__name__} space"
        )
    if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
        raise ExportError(
            f"flat Box observations only: this policy observes {observation_space} (images and other "
            "multi-dimensional observations are not exportable)"
        )
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.start) != 0:
            raise ExportError(f"Discrete action spaces starting at {action_space.start} are not supported")
        return
    if not isinstance(action_space, spaces.Box):
        raise ExportError(f"only Box and Discrete action spaces are exportable, not {action_space}")


def _sb3_module(name: str, model, norm: FrozenNorm) -> InferencePolicy:
    """The SB3 policy's deterministic action as a plain module (copies, on the CPU, in eval mode)."""
    from gymnasium import spaces
    from stable_baselines3.common.torch_layers import MlpExtractor

    policy = model.policy
    if hasattr(policy, "lstm_actor"):
        raise ExportError("recurrent SB3 policies (sb3-contrib RecurrentPPO) cannot be exported")
    discrete = isinstance(model.action_space, spaces.Discrete)
    box_head = "unscale" if getattr(policy, "squash_output", False) else "clip"
    if name in ("ppo", "a2c"):
        extractor = policy.pi_features_extractor
        mlp = policy.mlp_extractor
        latent = mlp.policy_net if type(mlp) is MlpExtractor else _ForwardActor(mlp)
        actor = nn.Sequential(latent, policy.action_net)
        # A squashed PPO/A2C policy is a gSDE one: its mode is tanh of the mean, then unscaled.
        head = "argmax" if discrete else box_head
        module = _SB3Policy(model, norm, extractor, actor, head, tanh=head == "unscale")
    elif name == "sac":
        sac_actor = policy.actor
        actor = nn.Sequential(sac_actor.latent_pi, sac_actor.mu)
        module = _SB3Policy(model, norm, sac_actor.features_extractor, actor, "unscale", tanh=True)
    elif name == "td3":
        td3_actor = policy.actor  # mu ends in tanh
        module = _SB3Policy(model, norm, td3_actor.features_extractor, td3_actor.mu, "unscale")
    else:  # dqn
        q_net = policy.q_net
        module = _SB3Policy(model, norm, q_net.features_extractor, q_net.q_net, "argmax")
    return frozen(module)


class _ForwardActor(nn.Module):
    """A custom ``mlp_extractor``'s ``forward_actor`` as a module's forward."""

    def __init__(self, mlp_extractor: nn.Module):
        super().__init__()
        self.mlp_extractor = mlp_extractor

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp_extractor.forward_actor(features)


def _sb3_vecnormalize(path: str | os.PathLike, observation_space):
    """The observation statistics of a VecNormalize pickle: (mean, var, epsilon, clip_obs), or None when it does
    not normalise observations."""
    import pickle

    path = pathlib.Path(path)
    if not path.is_file():
        raise ExportError(f"no VecNormalize pickle at {path}")
    with path.open("rb") as file:
        try:
            vecnorm = pickle.load(file)  # what VecNormalize.load does
        except Exception as error:
            raise ExportError(
                f"{path} is not a readable VecNormalize pickle ({type(error).__name__}: {error})"
            ) from None
    obs_rms = getattr(vecnorm, "obs_rms", None)
    if obs_rms is None or not hasattr(vecnorm, "clip_obs"):
        raise ExportError(f"{path} holds a {type(vecnorm).__name__}, not a VecNormalize")
    if isinstance(obs_rms, dict):
        raise ExportError("flat Box observations only: this VecNormalize normalises a Dict observation space")
    if not getattr(vecnorm, "norm_obs", True):
        return None
    mean, var = np.asarray(obs_rms.mean), np.asarray(obs_rms.var)
    if mean.shape != tuple(observation_space.shape):
        raise ExportError(
            f"the VecNormalize statistics have shape {mean.shape}, the policy observes {tuple(observation_space.shape)}"
        )
    return mean, var, float(vecnorm.epsilon), float(vecnorm.clip_obs)


def _sb3_parity_observations(observation_space, stats, count: int, seed: int = 0) -> np.ndarray:
    """Uniform inside the finite bounds; a Gaussian elsewhere (around the VecNormalize statistics when given, a
    quarter of it far out, where its clip acts)."""
    rng = np.random.default_rng(seed)
    shape = (count, *observation_space.shape)
    low = np.asarray(observation_space.low, np.float64)
    high = np.asarray(observation_space.high, np.float64)
    bounded = np.isfinite(low) & np.isfinite(high)
    noise = rng.standard_normal(shape)
    noise[: count // 4] *= 8.0
    if stats is not None:
        mean, var, epsilon, _ = stats
        noise = mean + np.sqrt(var + epsilon) * noise
    low, high = np.where(bounded, low, 0.0), np.where(bounded, high, 0.0)
    inside = low + (high - low) * rng.random(shape)
    return np.where(bounded, inside, noise).astype(np.float32)


def export_sb3(
    zip_path: str | os.PathLike,
    out_path: str | os.PathLike,
    format: str = "onnx",
    algo: str | None = None,
    vecnormalize_path: str | os.PathLike | None = None,
    env_id: str | None = None,
    dt: float | None = None,
    *,
    control_hz: float | None = None,
    parity_samples: int = 1000,
) -> ExportReport:
    """Export a stable-baselines3 model (a zip from ``model.save``) as an ONNX or TorchScript policy.

    ``algo``: ppo, a2c, sac, td3 or dqn; by default read from the zip's policy class (PPO and A2C told apart by
    PPO's ``clip_range``), else each is tried. ``vecnormalize_path``: a pickle from ``VecNormalize.save``, whose
    observation normalisation goes inside the graph. ``env_id`` and ``dt`` (or ``control_hz``) go to the metadata;
    ``dt`` defaults to our simulator's for ``env_id`` where it has one. The file is checked against
    ``model.predict(obs, deterministic=True)`` (on the VecNormalize-normalised observations) on ``parity_samples``
    observations. Refused: recurrent policies, action spaces other than Box and Discrete, and observations other
    than a flat Box (images, Dict).
    """
    try:
        import stable_baselines3
    except ImportError:
        raise ExportError("exporting an SB3 model needs stable-baselines3: pip install stable-baselines3") from None
    check_format(format)
    zip_path, path = pathlib.Path(zip_path), pathlib.Path(out_path)
    zip_path, data = _sb3_zip_data(zip_path)
    candidates = _sb3_algorithm(data, algo)
    name, model = _sb3_load(zip_path, candidates)
    observation_space, action_space = model.observation_space, model.action_space
    _sb3_check_spaces(observation_space, action_space)

    stats = None if vecnormalize_path is None else _sb3_vecnormalize(vecnormalize_path, observation_space)
    module = _sb3_module(name, model, FrozenNorm(stats))

    if dt is None and control_hz is None and env_id:
        dt = env_facts(env_id, {})[0]
    metadata = build_metadata(f"sb3-{name}", module, env_id, dt, control_hz)
    metadata["source"] = {"library": "stable-baselines3", "version": stable_baselines3.__version__}

    obs = _sb3_parity_observations(observation_space, stats, parity_samples)
    inputs = [torch.from_numpy(obs)]
    write_file(format, module, [inputs[0][:2]], path, metadata)

    exported = run_file(path, format, inputs, ["obs"])
    seen = obs.astype(np.float64)
    if stats is not None:  # VecNormalize._normalize_obs
        mean, var, epsilon, clip_obs = stats
        seen = np.clip((seen - mean) / np.sqrt(var + epsilon), -clip_obs, clip_obs)
    expected, _ = model.predict(seen.astype(np.float32), deterministic=True)
    expected = np.asarray(expected)
    discrete = metadata["output"]["dtype"] == "int64"
    max_error = compare_actions(exported, expected, discrete, "SB3's predict")
    return ExportReport(path, format, metadata, max_error, int(obs.shape[0]))
