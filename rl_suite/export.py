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
        raise ExportError(f"no export for algorithm {name!r}; exportable: ppo, sac, pql, fpo, policyflow, mappo")
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
    if exported.shape != expected.shape:
        raise ExportError(f"the exported policy returns shape {exported.shape}, the agent {expected.shape}")
    if metadata["output"]["dtype"] == "int64":
        mismatched = int((exported != expected).sum())
        if mismatched:
            raise ExportError(f"the exported policy picks other actions than the agent on {mismatched} observations")
        max_error = 0.0
    else:
        max_error = float(np.abs(exported.astype(np.float64) - expected).max())
        if not np.allclose(exported, expected, atol=ATOL, rtol=RTOL):
            raise ExportError(
                f"the exported policy disagrees with the agent: max abs error {max_error:.3g} "
                f"(tolerance atol={ATOL}, rtol={RTOL})"
            )
    return ExportReport(path, format, metadata, max_error, int(obs.shape[0]))


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
) -> ExportReport:
    """Export the newest readable checkpoint of a training run; the control period comes from the arguments, else
    from the env's ``dt`` where its simulator has one."""
    import yaml

    from rl_suite.agent import agent_from_description
    from rl_suite.checkpoint import load_latest

    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")
    run_dir = pathlib.Path(run_dir)
    _, state = load_latest(run_dir)
    if "agent" not in state or "algo" not in state:
        raise ExportError(f"the newest checkpoint of {run_dir} holds no agent")
    agent = agent_from_description(state, state["agent"], "cpu")
    env_id = state.get("env_id")
    if dt is None and control_hz is None and env_id:
        config = run_dir / "config.yaml"
        saved = yaml.safe_load(config.read_text()) if config.is_file() else {}
        dt = _env_dt(env_id, (saved.get("run") or {}).get("env_kwargs") or {})
    try:
        return export_policy(agent, path, format, example_obs, env_id=env_id, dt=dt, control_hz=control_hz)
    finally:
        agent.close()
