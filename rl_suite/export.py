"""Export an agent's deterministic policy as a self-contained ONNX or TorchScript file for deployment.

The exported graph takes raw float32 observations ``[B, obs_dim]`` (``[B, A, obs_dim]`` for a MAPPO actor, with a
dynamic batch axis) and returns ready actions: observation normalisation, the deterministic policy, action scaling
to the env's bounds and clipping to them are all inside. What the graph is, per algorithm (dispatched on
``agent.name``; the core never imports the agents):

- ``ppo``: the Gaussian mean through the ``ActionScaler`` (``Box``), or the argmax of the logits (``Discrete``).
- ``sac``: ``tanh`` of the Gaussian's mean (the tanh-Gaussian's mode), then scaling.
- ``pql``: its ``TanhPolicy``, then scaling.
- ``fpo`` and ``policyflow``: the flow sampler unrolled, a fixed number of Euler steps from zero noise, then scaling.
- ``mappo`` (feed-forward actors only): the shared actor with each agent's one-hot id; discrete actors take an
  availability mask ``[B, A, n_actions]`` (bool) as a second input and return the best available action per agent.

Metadata (spaces, control period, algorithm, env id, rl_suite version) travels inside the file: ONNX
``metadata_props["rl_suite"]``, TorchScript ``_extra_files["rl_suite.json"]``, both a JSON object. Every export ends
with a parity check of the file against the agent's own ``act(..., deterministic=True)``; a mismatch raises.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pathlib
import warnings
from typing import Any

import numpy as np
import torch
from torch import nn

import rl_suite
from rl_suite.spaces import space_to_dict

FORMATS = ("onnx", "torchscript")
METADATA_KEY = "rl_suite"
TORCHSCRIPT_METADATA_FILE = "rl_suite.json"
ATOL, RTOL = 1e-5, 1e-4


class ExportError(ValueError):
    """An agent that cannot be exported, or an exported file that disagrees with the agent."""


@dataclasses.dataclass
class ExportReport:
    path: pathlib.Path
    format: str
    metadata: dict[str, Any]
    max_abs_error: float
    """Largest absolute difference between the file's actions and the agent's over the parity observations."""
    observations_checked: int


# -- the deterministic policies as plain modules ----------------------------------------------------------------


class _Normalize(nn.Module):
    """``RunningNorm``'s forward in float32 constants (the same arithmetic as the agent's), or the identity."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.enabled = hasattr(norm, "mean")
        if self.enabled:
            self.clip = float(norm.clip)
            self.register_buffer("mean", norm.mean.detach().float().cpu().clone())
            self.register_buffer("std", torch.sqrt(norm.var.detach().cpu() + norm.eps).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return ((x - self.mean) / self.std).clamp(-self.clip, self.clip)


class _Scale(nn.Module):
    """``ActionScaler``'s forward: clip to [-1, 1] where the env's bounds are finite, then map to the bounds."""

    def __init__(self, scaler: nn.Module):
        super().__init__()
        for name in ("center", "half_range", "bounded"):
            self.register_buffer(name, getattr(scaler, name).detach().cpu().clone())

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        clipped = torch.where(self.bounded, action.clamp(-1.0, 1.0), action)
        return self.center + self.half_range * clipped


class _MLPPolicy(nn.Module):
    """normalise -> net -> head: ``argmax``, ``mean`` (first half for SAC's mean/log-std output), optional tanh,
    then scaling."""

    def __init__(self, norm, net, scaler=None, split: bool = False, tanh: bool = False, argmax: bool = False):
        super().__init__()
        self.norm, self.net = _Normalize(norm), net
        self.scale = _Scale(scaler) if scaler is not None else None
        self.split, self.tanh, self.argmax = split, tanh, argmax

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(self.norm(obs))
        if self.argmax:
            return out.argmax(-1)
        if self.split:
            out = out.chunk(2, dim=-1)[0]
        if self.tanh:
            out = torch.tanh(out)
        return self.scale(out) if self.scale is not None else out


class _FlowPolicy(nn.Module):
    """A ``FlowPolicy``'s sampler unrolled: ``steps`` Euler steps from zero noise, then scaling."""

    def __init__(self, norm, flow, scaler):
        super().__init__()
        self.norm, self.flow, self.scale = _Normalize(norm), flow, _Scale(scaler)
        self.times = [float(t) for t in flow.schedule().cpu()]  # the sampler's grid, 1 down to 0
        self.act_dim = int(flow.act_dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = self.norm(obs)
        zeros = torch.zeros_like(obs[..., :1])  # [B, 1], batch size followed dynamically
        x = zeros + torch.zeros(self.act_dim, dtype=obs.dtype)  # [B, act_dim]: the zero noise
        times = torch.tensor(self.times, dtype=obs.dtype)
        for k in range(len(self.times) - 1):
            t = zeros + times[k]
            x = x + (times[k + 1] - times[k]) * self.flow.velocity(obs, x, t)
        return self.scale(x)


class _MAPPOActor(nn.Module):
    """MAPPO's shared feed-forward actor over ``[B, A, obs_dim]``: normalise, append the one-hot ids, body and head;
    the argmax over available actions (discrete) or the scaled Gaussian mean (continuous)."""

    def __init__(self, agent):
        super().__init__()
        self.norm = _Normalize(agent.obs_norm)
        self.body, self.head = agent.actor.body, agent.actor.head
        self.discrete = bool(agent.discrete)
        self.agent_id = bool(agent.config.agent_id)
        self.register_buffer("ids", torch.eye(agent.num_agents))
        self.scale = None if self.discrete else _Scale(agent.scaler)

    def forward(self, obs: torch.Tensor, avail_actions: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm(obs)
        if self.agent_id:
            x = torch.cat((x, torch.zeros_like(x[..., :1]) + self.ids), -1)
        out = self.head(self.body(x))
        if self.discrete:
            return out.masked_fill(~avail_actions, -1e9).argmax(-1)
        return self.scale(out)


def deterministic_policy(agent) -> nn.Module:
    """A module computing ``agent``'s deterministic action from raw observations, on the CPU, in eval mode."""
    name = getattr(agent, "name", type(agent).__name__)
    if name == "qmix":
        raise ExportError(
            "qmix cannot be exported: its agents are recurrent Q-networks whose greedy action needs the GRU hidden "
            "state and the last action carried between steps, which a stateless exported policy does not have"
        )
    if name == "rarl":
        agent = agent.protagonist  # the adversary exists only in training: deployment is the protagonist alone
        name = "ppo"
    if name == "ppo":
        if agent.continuous:
            module = _MLPPolicy(agent.normalizer, agent.actor.net, agent.scaler)
        else:
            module = _MLPPolicy(agent.normalizer, agent.actor.net, argmax=True)
    elif name == "sac":
        module = _MLPPolicy(agent.normalizer, agent.actor.net, agent.scaler, split=True, tanh=True)
    elif name == "pql":
        module = _MLPPolicy(agent.normalizer, agent.acting_policy.net, agent.scaler, tanh=True)
    elif name in ("fpo", "policyflow"):
        module = _FlowPolicy(agent.normalizer, agent.actor, agent.scaler)
    elif name == "mappo":
        if agent.config.recurrent:
            raise ExportError(
                "a recurrent MAPPO policy cannot be exported: it needs its hidden state (the GRU's) carried from "
                "one step to the next, and the exported policy is stateless; train with recurrent=false to deploy"
            )
        module = _MAPPOActor(agent)
    else:
        raise ExportError(f"no export for algorithm {name!r}; exportable: ppo, sac, pql, fpo, policyflow, rarl, mappo")
    return copy.deepcopy(module).cpu().eval().requires_grad_(False)


# -- inputs, metadata and the files -----------------------------------------------------------------------------


def _input_specs(agent) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    obs_shape = list(agent.observation_space.shape)
    inputs = [{"name": "obs", "shape": ["batch", *obs_shape], "dtype": "float32"}]
    if agent.name == "mappo":
        num_agents = agent.num_agents
        if agent.discrete:
            n_actions = int(agent.action_space.nvec.max())
            inputs.append({"name": "avail_actions", "shape": ["batch", num_agents, n_actions], "dtype": "bool"})
            output = {"name": "action", "shape": ["batch", num_agents], "dtype": "int64"}
        else:
            output = {"name": "action", "shape": ["batch", *agent.action_space.shape], "dtype": "float32"}
    elif agent.name == "ppo" and not agent.continuous:
        output = {"name": "action", "shape": ["batch"], "dtype": "int64"}
    else:
        output = {"name": "action", "shape": ["batch", *agent.action_space.shape], "dtype": "float32"}
    return inputs, output


def build_metadata(agent, env_id: str | None = None, dt: float | None = None, control_hz: float | None = None):
    if dt is not None and control_hz is not None and abs(dt * control_hz - 1.0) > 1e-6:
        raise ExportError(f"dt={dt} and control_hz={control_hz} disagree; give one of them")
    if control_hz is not None:
        if control_hz <= 0:
            raise ExportError(f"control_hz must be positive, got {control_hz}")
        dt = 1.0 / control_hz
    if dt is not None and dt <= 0:
        raise ExportError(f"dt must be positive, got {dt}")
    inputs, output = _input_specs(agent)
    normalizer = agent.obs_norm if agent.name == "mappo" else agent.normalizer
    return {
        "format_version": 1,
        "algorithm": agent.name,
        "env_id": env_id,
        "rl_suite_version": rl_suite.__version__,
        "observation_space": space_to_dict(agent.observation_space),
        "action_space": space_to_dict(agent.action_space),
        "dt": dt,
        "control_hz": None if dt is None else 1.0 / dt,
        "normalized_observations": hasattr(normalizer, "mean"),
        "multiagent": bool(agent.multiagent),
        "inputs": inputs,
        "output": output,
    }


def parity_observations(agent, count: int = 1000, seed: int = 0) -> torch.Tensor:
    """``count`` observations around the normaliser's statistics (a quarter of them far out, where its clip acts),
    or inside the observation space's finite bounds when the agent does not normalise."""
    generator = torch.Generator().manual_seed(seed)
    shape = tuple(agent.observation_space.shape)
    normalizer = agent.obs_norm if agent.name == "mappo" else agent.normalizer
    noise = torch.randn((count, *shape), generator=generator)
    noise[: count // 4] *= 8.0
    if hasattr(normalizer, "mean"):
        mean = normalizer.mean.float().cpu()
        std = torch.sqrt(normalizer.var.float().cpu() + normalizer.eps)
        return mean + std * noise
    low = torch.as_tensor(agent.observation_space.low, dtype=torch.float32)
    high = torch.as_tensor(agent.observation_space.high, dtype=torch.float32)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    uniform = torch.rand((count, *shape), generator=generator)
    inside = torch.where(bounded, low + (high - low) * uniform, 0.0)
    return torch.where(bounded, inside, noise)


def _availability(agent, count: int, seed: int) -> torch.Tensor:
    """Random masks with at least one available action per agent (and only actions an agent has)."""
    generator = torch.Generator().manual_seed(seed + 1)
    nvec = torch.as_tensor(agent.action_space.nvec)
    n_actions = int(nvec.max())
    exists = torch.arange(n_actions) < nvec.unsqueeze(-1)  # [A, n]
    avail = (torch.rand(count, agent.num_agents, n_actions, generator=generator) < 0.6) & exists
    first = torch.randint(0, 1 << 30, (count, agent.num_agents), generator=generator) % nvec
    avail.scatter_(-1, first.unsqueeze(-1), True)
    return avail


def _reference_actions(agent, inputs: list[torch.Tensor]) -> np.ndarray:
    """The agent's own deterministic actions (its ``act`` path), on its device."""
    device = agent.device
    with torch.no_grad():
        if agent.name == "mappo":
            given = {"obs": inputs[0].to(device)}
            if len(inputs) > 1:
                given["avail_actions"] = inputs[1].to(device)
            actions = agent.act(given, {}, deterministic=True)[0]
        else:
            actions = agent.act(inputs[0].to(device), deterministic=True)[0]
    return actions.cpu().numpy()


def _write_onnx(module: nn.Module, example: list[torch.Tensor], path: pathlib.Path, metadata: dict) -> None:
    import onnx

    names = [spec["name"] for spec in metadata["inputs"]]
    dynamic = {name: {0: "batch"} for name in [*names, "action"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(example),
            str(path),
            input_names=names,
            output_names=["action"],
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    model = onnx.load(str(path))
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(metadata)
    model.producer_name, model.producer_version = "rl_suite", rl_suite.__version__
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _write_torchscript(module: nn.Module, example: list[torch.Tensor], path: pathlib.Path, metadata: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, tuple(example), check_trace=False)
        torch.jit.save(traced, str(path), _extra_files={TORCHSCRIPT_METADATA_FILE: json.dumps(metadata)})


def _run_file(path: pathlib.Path, format: str, inputs: list[torch.Tensor], names: list[str]) -> np.ndarray:
    if format == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return session.run(None, {name: x.numpy() for name, x in zip(names, inputs, strict=True)})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = torch.jit.load(str(path), map_location="cpu")
    with torch.inference_mode():
        return loaded(*inputs).numpy()


def export_policy(
    agent,
    path: str | os.PathLike,
    format: str = "onnx",
    example_obs=None,
    *,
    env_id: str | None = None,
    dt: float | None = None,
    control_hz: float | None = None,
    parity_samples: int = 1000,
) -> ExportReport:
    """Write ``agent``'s deterministic policy to ``path`` and check the file against the agent.

    ``example_obs`` (``[obs_dim]`` or ``[K, obs_dim]``, e.g. recorded observations) joins the random parity
    observations. ``dt`` or ``control_hz`` gives the control period stored in the metadata (default: the
    agent's env's ``dt`` is unknown here; ``export_run`` looks it up).
    """
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    path = pathlib.Path(path)
    module = deterministic_policy(agent)
    metadata = build_metadata(agent, env_id, dt, control_hz)

    obs = parity_observations(agent, parity_samples)
    if example_obs is not None:
        given = torch.as_tensor(np.asarray(example_obs, dtype=np.float32))
        if given.shape == agent.observation_space.shape:
            given = given.unsqueeze(0)
        if given.shape[1:] != agent.observation_space.shape:
            raise ExportError(
                f"example_obs has shape {tuple(given.shape)}; expected [K, {', '.join(map(str, obs.shape[1:]))}]"
            )
        obs = torch.cat((given, obs))
    inputs = [obs]
    if agent.name == "mappo" and agent.discrete:
        inputs.append(_availability(agent, obs.shape[0], 0))
    example = [x[:2] for x in inputs]

    path.parent.mkdir(parents=True, exist_ok=True)
    (_write_onnx if format == "onnx" else _write_torchscript)(module, example, path, metadata)

    names = [spec["name"] for spec in metadata["inputs"]]
    exported = _run_file(path, format, inputs, names)
    expected = _reference_actions(agent, inputs)
    max_error = compare_actions(exported, expected, metadata["output"]["dtype"] == "int64", "the agent")
    return ExportReport(path, format, metadata, max_error, int(obs.shape[0]))


def compare_actions(exported: np.ndarray, expected: np.ndarray, discrete: bool, reference: str) -> float:
    """The parity check: equal discrete actions, or continuous ones within float32 tolerance; returns the largest
    absolute error and raises ``ExportError`` on a mismatch."""
    if exported.shape != expected.shape:
        raise ExportError(f"the exported policy returns shape {exported.shape}, {reference} {expected.shape}")
    if discrete:
        mismatched = int((exported != expected).sum())
        if mismatched:
            raise ExportError(f"the exported policy picks other actions than {reference} on {mismatched} observations")
        return 0.0
    max_error = float(np.abs(exported.astype(np.float64) - expected).max())
    if not np.allclose(exported, expected, atol=ATOL, rtol=RTOL):
        raise ExportError(
            f"the exported policy disagrees with {reference}: max abs error {max_error:.3g} "
            f"(tolerance atol={ATOL}, rtol={RTOL})"
        )
    return max_error


def _env_dt(env_id: str, env_kwargs: dict) -> float | None:
    """The control period of ``env_id``'s simulator, if it has one (``dt``)."""
    from rl_suite.registry import make

    try:
        env = make(env_id, num_envs=1, **env_kwargs)
    except Exception:  # an unavailable simulator only costs the metadata its dt
        return None
    try:
        dt = getattr(env, "dt", None)
        return float(dt) if isinstance(dt, int | float) and dt > 0 else None
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def export_run(
    run_dir: str | os.PathLike,
    path: str | os.PathLike,
    format: str = "onnx",
    control_hz: float | None = None,
    dt: float | None = None,
    example_obs=None,
    env_id: str | None = None,
) -> ExportReport:
    """Export the newest readable checkpoint of a training run; the control period comes from the arguments, else
    from the env's ``dt`` where its simulator has one.

    The run's environment is checked by ``rl_suite.registry.run_env_spec`` before anything is built from it: a run
    on an adapter id (``gym:...``) exports only when ``env_id`` repeats that id (the CLI's ``--env``)."""
    from rl_suite.agent import agent_from_checkpoint
    from rl_suite.checkpoint import load_latest
    from rl_suite.registry import UnknownEnvError, run_env_spec

    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    run_dir = pathlib.Path(run_dir)
    _, state = load_latest(run_dir)
    try:
        env_id, env_kwargs = run_env_spec(run_dir, state, confirmed_id=env_id)
    except UnknownEnvError:  # an env that is not registered (Agent.learn's "custom"): no dt to look up
        env_id, env_kwargs = state.get("env_id"), None
    agent = agent_from_checkpoint(state, f"the newest checkpoint of {run_dir}", "cpu")
    if dt is None and control_hz is None and env_kwargs is not None:
        dt = _env_dt(env_id, env_kwargs)
    try:
        return export_policy(agent, path, format, example_obs, env_id=env_id, dt=dt, control_hz=control_hz)
    finally:
        agent.close()


# -- stable-baselines3 policies -----------------------------------------------------------------------------------
#
# A zip saved by stable-baselines3 goes through the same writers, metadata and parity check: the graph is the SB3
# policy's deterministic action with its post-processing (what ``model.predict(obs, deterministic=True)`` returns),
# and a VecNormalize's observation normalisation in front when its pickle is given. SB3 is imported only here.
# Loading an SB3 zip or a VecNormalize pickle unpickles Python objects, as SB3 itself does: export only files you
# trust.

SB3_ALGORITHMS = ("ppo", "a2c", "sac", "td3", "dqn")
_SB3_POLICY_MODULES = {
    "stable_baselines3.sac.policies": "sac",
    "stable_baselines3.td3.policies": "td3",
    "stable_baselines3.dqn.policies": "dqn",
}


class _SB3ObsNorm(nn.Module):
    """VecNormalize's ``_normalize_obs`` in float32 constants: ``clip((x - mean) / sqrt(var + eps), -c, c)``."""

    def __init__(self, mean: np.ndarray, var: np.ndarray, epsilon: float, clip_obs: float):
        super().__init__()
        self.clip = float(clip_obs)
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float32)).clone())
        self.register_buffer(
            "std", torch.as_tensor(np.sqrt(np.asarray(var, np.float64) + epsilon), dtype=torch.float32)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.mean) / self.std).clamp(-self.clip, self.clip)


class _SB3Policy(nn.Module):
    """normalise (optional) -> features -> actor -> head, where the head is SB3's deterministic post-processing:
    ``argmax`` (Discrete), ``clip`` to the bounds (Box, unsquashed Gaussian mean), or ``unscale`` ([-1, 1] to the
    bounds, squashed policies; ``tanh`` first when the actor returns the pre-squash mean, and a clip after it that
    only removes float rounding past the bounds)."""

    def __init__(self, norm, features, actor, head: str, action_space=None, tanh: bool = False):
        super().__init__()
        self.norm, self.features, self.actor = norm, features, actor
        self.head, self.tanh = head, tanh
        if action_space is not None and head in ("clip", "unscale"):
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32).clone())
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32).clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            obs = self.norm(obs)
        out = self.actor(self.features(obs.float()))
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


def _sb3_module(name: str, model, norm: nn.Module | None) -> nn.Module:
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
        module = _SB3Policy(norm, extractor, actor, head, model.action_space, tanh=head == "unscale")
    elif name == "sac":
        sac_actor = policy.actor
        actor = nn.Sequential(sac_actor.latent_pi, sac_actor.mu)
        module = _SB3Policy(norm, sac_actor.features_extractor, actor, "unscale", model.action_space, tanh=True)
    elif name == "td3":
        td3_actor = policy.actor  # mu ends in tanh
        module = _SB3Policy(norm, td3_actor.features_extractor, td3_actor.mu, "unscale", model.action_space)
    else:  # dqn
        q_net = policy.q_net
        module = _SB3Policy(norm, q_net.features_extractor, q_net.q_net, "argmax")
    return copy.deepcopy(module).cpu().eval().requires_grad_(False)


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
    from types import SimpleNamespace

    try:
        import stable_baselines3
    except ImportError:
        raise ExportError("exporting an SB3 model needs stable-baselines3: pip install stable-baselines3") from None
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    zip_path, path = pathlib.Path(zip_path), pathlib.Path(out_path)
    zip_path, data = _sb3_zip_data(zip_path)
    candidates = _sb3_algorithm(data, algo)
    name, model = _sb3_load(zip_path, candidates)
    observation_space, action_space = model.observation_space, model.action_space
    _sb3_check_spaces(observation_space, action_space)

    stats = None if vecnormalize_path is None else _sb3_vecnormalize(vecnormalize_path, observation_space)
    norm = None if stats is None else _SB3ObsNorm(*stats)
    module = _sb3_module(name, model, norm)

    if dt is None and control_hz is None and env_id:
        dt = _env_dt(env_id, {})
    discrete = not hasattr(action_space, "low")
    described = SimpleNamespace(
        name=f"sb3-{name}",
        observation_space=observation_space,
        action_space=action_space,
        normalizer=SimpleNamespace(mean=stats[0]) if stats is not None else SimpleNamespace(),
        multiagent=False,
        continuous=not discrete,
    )
    metadata = build_metadata(described, env_id, dt, control_hz)
    if discrete:
        metadata["output"] = {"name": "action", "shape": ["batch"], "dtype": "int64"}
    metadata["source"] = {"library": "stable-baselines3", "version": stable_baselines3.__version__}

    obs = _sb3_parity_observations(observation_space, stats, parity_samples)
    inputs = [torch.from_numpy(obs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    (_write_onnx if format == "onnx" else _write_torchscript)(module, [inputs[0][:2]], path, metadata)

    exported = _run_file(path, format, inputs, ["obs"])
    seen = obs.astype(np.float64)
    if stats is not None:  # VecNormalize._normalize_obs
        mean, var, epsilon, clip_obs = stats
        seen = np.clip((seen - mean) / np.sqrt(var + epsilon), -clip_obs, clip_obs)
    expected, _ = model.predict(seen.astype(np.float32), deterministic=True)
    expected = np.asarray(expected)
    max_error = compare_actions(exported, expected, discrete, "SB3's predict")
    return ExportReport(path, format, metadata, max_error, int(obs.shape[0]))
