"""Export an agent's deterministic policy as a self-contained ONNX or TorchScript file for deployment.

Each agent builds its own exportable module (``Agent.inference_policy()``, see rl_suite/deploy/inference.py): it
takes raw float32 observations ``[B, *observation_shape]`` (and, for a discrete MAPPO actor, an availability mask
``[B, A, n_actions]``), with a dynamic batch axis, and returns ready actions: observation normalisation, the
deterministic policy, action scaling to the env's bounds and clipping to them are all inside. This module only
writes it, describes it and checks it, the same way for every agent.

Metadata (spaces, control period, algorithm, env id, rl_suite version) travels inside the file: ONNX
``metadata_props["rl_suite"]``, TorchScript ``_extra_files["rl_suite.json"]``, both a JSON object. Every export ends
with a parity check of the file against the agent's own ``act(..., deterministic=True)``; a mismatch raises.

A policy trained on a legged robot task carries a ``robot`` entry too (the env's ``robot_metadata()``: joint names in
action order, default pose, action scale, gains, torque limits, physics step and control rate, the model file, and
the observation's terms in order with their sizes and scales), and its file returns the joint position offsets
(``JointOffsets``): a robot programmer needs nothing else.
"""

from __future__ import annotations

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
from rl_suite.agent import MultiAgentAgent, agent_from_checkpoint
from rl_suite.deploy.inference import ExportError, InferencePolicy, JointOffsets, frozen
from rl_suite.deploy.runtime import METADATA_KEY, TORCHSCRIPT_METADATA_FILE
from rl_suite.spaces import space_to_dict

FORMATS = ("onnx", "torchscript")
ATOL, RTOL = 1e-5, 1e-4


@dataclasses.dataclass
class ExportReport:
    path: pathlib.Path
    format: str
    metadata: dict[str, Any]
    max_abs_error: float
    """Largest absolute difference between the file's actions and the agent's over the parity observations."""
    observations_checked: int


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")


def deterministic_policy(agent) -> InferencePolicy:
    """``agent``'s deterministic policy (its ``inference_policy()``), as a copy on the CPU, in eval mode."""
    return frozen(agent.inference_policy())


# -- metadata and parity inputs -----------------------------------------------------------------------------------


def build_metadata(
    algorithm: str,
    policy: InferencePolicy,
    env_id: str | None = None,
    dt: float | None = None,
    control_hz: float | None = None,
    robot: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if dt is not None and control_hz is not None and abs(dt * control_hz - 1.0) > 1e-6:
        raise ExportError(f"dt={dt} and control_hz={control_hz} disagree; give one of them")
    if control_hz is not None:
        if control_hz <= 0:
            raise ExportError(f"control_hz must be positive, got {control_hz}")
        dt = 1.0 / control_hz
    if dt is not None and dt <= 0:
        raise ExportError(f"dt must be positive, got {dt}")
    metadata = {
        "format_version": 1,
        "algorithm": algorithm,
        "env_id": env_id,
        "rl_suite_version": rl_suite.__version__,
        "observation_space": space_to_dict(policy.observation_space),
        "action_space": space_to_dict(policy.action_space),
        "dt": dt,
        "control_hz": None if dt is None else 1.0 / dt,
        "normalized_observations": policy.norm.enabled,
        "multiagent": policy.multiagent,
        "inputs": [dict(spec) for spec in policy.inputs],
        "output": dict(policy.output),
    }
    if robot is not None:
        metadata["robot"] = dict(robot)
    return metadata


def parity_observations(policy: InferencePolicy, count: int = 1000, seed: int = 0) -> torch.Tensor:
    """``count`` observations around the normaliser's statistics (a quarter of them far out, where its clip acts),
    or inside the observation space's finite bounds when the policy does not normalise."""
    generator = torch.Generator().manual_seed(seed)
    space = policy.observation_space
    shape = tuple(space.shape)
    noise = torch.randn((count, *shape), generator=generator)
    noise[: count // 4] *= 8.0
    if policy.norm.enabled:
        return policy.norm.mean + policy.norm.std * noise
    low = torch.as_tensor(space.low, dtype=torch.float32)
    high = torch.as_tensor(space.high, dtype=torch.float32)
    bounded = torch.isfinite(low) & torch.isfinite(high)
    uniform = torch.rand((count, *shape), generator=generator)
    inside = torch.where(bounded, low + (high - low) * uniform, 0.0)
    return torch.where(bounded, inside, noise)


def _reference_actions(agent, inputs: list[torch.Tensor], names: list[str]) -> np.ndarray:
    """The agent's own deterministic actions (its ``act`` path), on its device. A multi-agent agent takes its inputs
    by name, with an empty memory (rl_suite/multiagent.py)."""
    on_device = [x.to(agent.device) for x in inputs]
    with torch.no_grad():
        if isinstance(agent, MultiAgentAgent):
            actions = agent.act(dict(zip(names, on_device, strict=True)), {}, deterministic=True)[0]
        else:
            actions = agent.act(on_device[0], deterministic=True)[0]
    return actions.cpu().numpy()


# -- the files ----------------------------------------------------------------------------------------------------


def _write_onnx(module: nn.Module, example: list[torch.Tensor], path: pathlib.Path, metadata: dict) -> None:
    import onnx

    names, output = [spec["name"] for spec in metadata["inputs"]], metadata["output"]["name"]
    dynamic = {name: {0: "batch"} for name in [*names, output]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            tuple(example),
            str(path),
            input_names=names,
            output_names=[output],
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


def write_file(format: str, module: nn.Module, example: list[torch.Tensor], path: pathlib.Path, metadata: dict):
    """Trace ``module`` on ``example`` (one tensor per input) into ``path``, ``metadata`` inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    (_write_onnx if format == "onnx" else _write_torchscript)(module, example, path, metadata)


def run_file(path: pathlib.Path, format: str, inputs: list[torch.Tensor], names: list[str]) -> np.ndarray:
    """The written file's actions on ``inputs``, run by onnxruntime or torch."""
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


# -- exporting agents and runs ------------------------------------------------------------------------------------


def export_policy(
    agent,
    path: str | os.PathLike,
    format: str = "onnx",
    example_obs=None,
    *,
    env_id: str | None = None,
    dt: float | None = None,
    control_hz: float | None = None,
    robot: dict[str, Any] | None = None,
    parity_samples: int = 1000,
) -> ExportReport:
    """Write ``agent``'s deterministic policy to ``path`` and check the file against the agent.

    ``example_obs`` (``[obs_dim]`` or ``[K, obs_dim]``, e.g. recorded observations) joins the random parity
    observations. ``dt`` or ``control_hz`` gives the control period stored in the metadata (default: the
    agent's env's ``dt`` is unknown here; ``export_run`` looks it up). ``robot``, a legged task's
    ``robot_metadata()``, goes into the metadata, and the file then returns joint position offsets (``JointOffsets``).
    """
    check_format(format)
    path = pathlib.Path(path)
    policy = deterministic_policy(agent)
    if robot is not None:
        policy = JointOffsets(policy, robot["action_scale"], robot["clip_actions"])
    metadata = build_metadata(agent.name, policy, env_id, dt, control_hz, robot)

    obs = parity_observations(policy, parity_samples)
    if example_obs is not None:
        shape = policy.observation_space.shape
        given = torch.as_tensor(np.asarray(example_obs, dtype=np.float32))
        if given.shape == shape:
            given = given.unsqueeze(0)
        if given.shape[1:] != shape:
            raise ExportError(
                f"example_obs has shape {tuple(given.shape)}; expected [K, {', '.join(map(str, obs.shape[1:]))}]"
            )
        obs = torch.cat((given, obs))
    inputs = [obs, *policy.parity_inputs(obs.shape[0], 0)]
    write_file(format, policy, [x[:2] for x in inputs], path, metadata)

    names = [spec["name"] for spec in metadata["inputs"]]
    exported = run_file(path, format, inputs, names)
    expected = _reference_actions(agent, inputs, names)
    if robot is not None:  # the task's own arithmetic (velocity.py), in float32
        clip, scale = np.float32(robot["clip_actions"]), np.asarray(robot["action_scale"], dtype=np.float32)
        expected = np.clip(expected, -clip, clip) * scale
    max_error = compare_actions(exported, expected, metadata["output"]["dtype"] == "int64", "the agent")
    return ExportReport(path, format, metadata, max_error, int(obs.shape[0]))


def env_facts(env_id: str, env_kwargs: dict) -> tuple[float | None, dict[str, Any] | None]:
    """The control period of ``env_id``'s simulator, if it has one (``dt``), and a legged task's robot entry
    (``robot_metadata()``), if it has one."""
    from rl_suite.registry import make

    try:
        env = make(env_id, num_envs=1, **env_kwargs)
    except Exception:  # an unavailable simulator only costs the metadata its dt
        return None, None
    try:
        dt = getattr(env, "dt", None)
        robot = env.robot_metadata() if callable(getattr(env, "robot_metadata", None)) else None
        return (float(dt) if isinstance(dt, int | float) and dt > 0 else None), robot
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
    from rl_suite.checkpoint import load_latest
    from rl_suite.registry import UnknownEnvError, run_env_spec

    check_format(format)
    run_dir = pathlib.Path(run_dir)
    _, state = load_latest(run_dir)
    try:
        env_id, env_kwargs = run_env_spec(run_dir, state, confirmed_id=env_id)
    except UnknownEnvError:  # an env that is not registered (Agent.learn's "custom"): no dt to look up
        env_id, env_kwargs = state.get("env_id"), None
    agent = agent_from_checkpoint(state, f"the newest checkpoint of {run_dir}", "cpu")
    env_period, robot = env_facts(env_id, env_kwargs) if env_kwargs is not None else (None, None)
    if dt is None and control_hz is None:
        dt = env_period
    try:
        return export_policy(agent, path, format, example_obs, env_id=env_id, dt=dt, control_hz=control_hz, robot=robot)
    finally:
        agent.close()
