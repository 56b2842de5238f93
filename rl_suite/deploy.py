"""A small runtime for exported policies: load a file written by ``rl_suite.export`` and run it against a robot at a
fixed control rate, with a watchdog.

This module imports neither the agents nor any simulator, and torch only to load a TorchScript file: an ONNX policy
needs nothing but numpy and onnxruntime on the robot's computer.

- ``load_policy(path)`` -> ``ExportedPolicy``: ``policy(obs)`` maps one observation (or a batch) to the action(s).
  The file is checked when it is loaded: its format, its metadata, and optionally the observation and action sizes
  the robot expects.
- ``ControlLoop(policy, robot, rate_hz, safe_action, ...)``: each cycle reads an observation, checks that it is
  finite and of the right shape, runs the policy, limits the action (magnitude, then rate of change relative to the
  last action sent) and sends it. On a non-finite or misshapen observation, an exception from the robot or the
  policy, a non-finite action, or a missed deadline, it sends ``safe_action`` instead and logs a fault; after
  ``max_faults`` faults it stops. Every cycle is logged (in memory; as CSV or JSONL on request).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import time
import zipfile
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

METADATA_KEY = "rl_suite"
TORCHSCRIPT_METADATA_FILE = "rl_suite.json"
REQUIRED_METADATA = ("algorithm", "observation_space", "action_space", "inputs", "output")


def _space_shape(space: dict[str, Any]) -> tuple[int, ...]:
    kind = space.get("type")
    if kind == "Box":
        return tuple(np.shape(space["low"]))
    if kind == "Discrete":
        return ()
    if kind == "MultiDiscrete":
        return tuple(np.shape(space["nvec"]))
    raise ValueError(f"unknown space type {kind!r} in the policy's metadata")


class ExportedPolicy:
    """A deterministic policy loaded from an exported file.

    ``policy(obs)`` takes one observation (``observation_shape``) or a batch (``[B, *observation_shape]``) and
    returns the action(s) in the env's units, already scaled and clipped. A discrete multi-agent policy also takes
    ``avail_actions`` (``[A, n_actions]`` booleans, or a batch of them); all actions are available by default.
    """

    def __init__(self, path: pathlib.Path, backend: str, metadata: dict[str, Any], run: Callable, input_names):
        self.path, self.backend, self.metadata = path, backend, metadata
        self._run, self._input_names = run, list(input_names)
        self.observation_shape = _space_shape(metadata["observation_space"])
        self.action_shape = _space_shape(metadata["action_space"])
        self.observation_dim = int(self.observation_shape[-1])
        box = metadata["action_space"]["type"] == "Box"
        self.discrete = not box
        self.action_dim = int(self.action_shape[-1]) if box else 1
        """Components per agent's action: the ``Box``'s last dimension, or 1 (an index) for discrete actions."""
        self.dt = metadata.get("dt")
        avail = [spec for spec in metadata["inputs"] if spec["name"] == "avail_actions"]
        self._avail_shape = tuple(avail[0]["shape"][1:]) if avail else None

    def __call__(self, obs, avail_actions=None) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        single = obs.shape == self.observation_shape
        if single:
            obs = obs[None]
        if obs.shape[1:] != self.observation_shape:
            raise ValueError(
                f"observation of shape {obs.shape if not single else obs.shape[1:]}; the policy takes "
                f"{self.observation_shape} or a batch [B, {', '.join(map(str, self.observation_shape))}]"
            )
        inputs = [np.ascontiguousarray(obs)]
        if self._avail_shape is not None:
            if avail_actions is None:
                avail = np.ones((obs.shape[0], *self._avail_shape), dtype=bool)
            else:
                avail = np.asarray(avail_actions, dtype=bool)
                avail = avail[None] if single else avail
                if avail.shape != (obs.shape[0], *self._avail_shape):
                    raise ValueError(f"avail_actions of shape {avail.shape[1:]}; the policy takes {self._avail_shape}")
            inputs.append(np.ascontiguousarray(avail))
        elif avail_actions is not None:
            raise ValueError("this policy takes no availability mask")
        action = self._run(inputs)
        return action[0] if single else action

    def __repr__(self) -> str:
        m = self.metadata
        return (
            f"ExportedPolicy({m['algorithm']} on {m.get('env_id')}, {self.backend}, observation "
            f"{self.observation_shape}, action {self.action_shape}, dt={self.dt})"
        )


def _check_metadata(raw: str | bytes | None, path: pathlib.Path) -> dict[str, Any]:
    if not raw:
        raise ValueError(f"{path} carries no rl_suite metadata: was it written by rl_suite.export?")
    try:
        metadata = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"{path} has unreadable rl_suite metadata ({error})") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{path} has rl_suite metadata that is not a JSON object")
    missing = [key for key in REQUIRED_METADATA if key not in metadata]
    if missing:
        raise ValueError(f"{path}'s rl_suite metadata lacks {', '.join(missing)}")
    return metadata


def _load_onnx(path: pathlib.Path, threads: int | None):
    try:
        import onnxruntime as ort
    except ImportError:
        raise ImportError("loading an ONNX policy needs onnxruntime: pip install 'rl-suite[export]'") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-waiting next to the robot
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own exception types for malformed models
        raise ValueError(f"{path} is not a loadable ONNX model ({type(error).__name__}: {error})") from None
    metadata = _check_metadata(session.get_modelmeta().custom_metadata_map.get(METADATA_KEY), path)
    names = [node.name for node in session.get_inputs()]
    expected = [spec["name"] for spec in metadata["inputs"]]
    if names != expected:
        raise ValueError(f"{path}'s graph takes inputs {names}, its metadata says {expected}")
    output = [session.get_outputs()[0].name]

    def run(inputs):
        return session.run(output, dict(zip(names, inputs, strict=True)))[0]

    return metadata, run, names


def _load_torchscript(path: pathlib.Path, threads: int | None):
    import warnings

    import torch

    extra = {TORCHSCRIPT_METADATA_FILE: ""}
    with warnings.catch_warnings():  # torch 2.9+ deprecates TorchScript; it still loads and runs
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            module = torch.jit.load(str(path), map_location="cpu", _extra_files=extra)
        except Exception as error:  # torch raises RuntimeError (and others) for files that are not TorchScript
            raise ValueError(f"{path} is not a loadable TorchScript module ({type(error).__name__}: {error})") from None
        metadata = _check_metadata(extra[TORCHSCRIPT_METADATA_FILE], path)
        if threads:  # process-wide: torch has one intra-op thread pool
            torch.set_num_threads(threads)
        module = torch.jit.freeze(module.eval())  # weights become constants: fewer ops per call
        try:
            module = torch.jit.optimize_for_inference(module)
        except Exception:  # an optimisation, never a requirement
            pass

    def run(inputs):
        with torch.inference_mode():
            return module(*(torch.from_numpy(x) for x in inputs)).numpy()

    return metadata, run, [spec["name"] for spec in metadata["inputs"]]


def load_policy(
    path: str | os.PathLike,
    backend: str = "auto",
    expected_observation_dim: int | None = None,
    expected_action_dim: int | None = None,
    threads: int | None = None,
) -> ExportedPolicy:
    """Load an exported policy. ``backend``: ``onnx`` (onnxruntime), ``torchscript`` (torch), or ``auto`` (by the
    file's content: TorchScript files are zip archives). ``expected_observation_dim`` and ``expected_action_dim``
    are what the robot reads and takes (per agent, for a multi-agent policy); a mismatch is an error here, before
    any control cycle runs.

    ``threads``: intra-op threads. ONNX: the session's own (default 1, best for single-observation latency).
    TorchScript: ``torch.set_num_threads(threads)``, which is process-wide, so only when given."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"no policy file at {path}")
    if backend == "auto":
        backend = "torchscript" if zipfile.is_zipfile(path) else "onnx"
    if backend == "onnx":
        metadata, run, names = _load_onnx(path, threads)
    elif backend == "torchscript":
        metadata, run, names = _load_torchscript(path, threads)
    else:
        raise ValueError(f"unknown backend {backend!r}; choose auto, onnx or torchscript")
    policy = ExportedPolicy(path, backend, metadata, run, names)
    if expected_observation_dim is not None and expected_observation_dim != policy.observation_dim:
        raise ValueError(
            f"{path} takes observations of size {policy.observation_dim}, but the robot gives "
            f"{expected_observation_dim}"
        )
    if expected_action_dim is not None and expected_action_dim != policy.action_dim:
        raise ValueError(f"{path} gives actions of size {policy.action_dim}, but the robot takes {expected_action_dim}")
    return policy


# -- the control loop -------------------------------------------------------------------------------------------


@runtime_checkable
class Robot(Protocol):
    """What the control loop drives: real hardware, or a simulator standing in for it."""

    def read_observation(self) -> np.ndarray: ...

    def apply_action(self, action: np.ndarray) -> None: ...


@dataclasses.dataclass
class CycleRecord:
    cycle: int
    time: float
    """Clock time at the start of the cycle, in seconds from the start of ``run``."""
    observation: np.ndarray | None
    action: np.ndarray | None
    """The action sent (the safe action after a fault; ``None`` if sending failed)."""
    latency_s: float
    """From reading the observation to the action being ready."""
    fault: str | None


@dataclasses.dataclass
class LoopResult:
    cycles: int
    faults: int
    stopped: str
    """``completed`` (all cycles ran) or ``max_faults`` (the watchdog stopped the loop)."""
    records: list[CycleRecord]

    @property
    def fault_events(self) -> list[CycleRecord]:
        return [record for record in self.records if record.fault is not None]


class ControlLoop:
    """Runs ``policy`` against ``robot`` at ``rate_hz`` with a watchdog (see the module docstring).

    - ``safe_action``: sent whenever a cycle faults; it is not limited.
    - ``deadline_s``: the longest a cycle may take from reading to a ready action (default: the period).
    - ``max_faults``: stop after this many faults in total (``None``: never stop for faults).
    - ``action_limit``: clamp actions to ``[-limit, limit]`` (a scalar or one value per component).
    - ``action_rate_limit``: the largest change per second of each component, relative to the last action sent
      (the safe action before the first cycle), i.e. at most ``action_rate_limit / rate_hz`` per cycle.
    Limits apply to continuous actions only. ``clock`` and ``sleep`` are injectable for tests and simulation.
    """

    def __init__(
        self,
        policy: Callable[[np.ndarray], np.ndarray],
        robot: Robot,
        rate_hz: float,
        safe_action,
        deadline_s: float | None = None,
        max_faults: int | None = None,
        action_rate_limit=None,
        action_limit=None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
        log_path: str | os.PathLike | None = None,
        keep_observations: bool = True,
    ):
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be positive, got {rate_hz}")
        if max_faults is not None and max_faults < 1:
            raise ValueError(f"max_faults must be at least 1 (or None), got {max_faults}")
        self.policy, self.robot, self.rate_hz, self.period = policy, robot, float(rate_hz), 1.0 / rate_hz
        self.safe_action = np.asarray(safe_action)
        self.deadline_s = self.period if deadline_s is None else float(deadline_s)
        self.max_faults = max_faults
        self.action_limit = None if action_limit is None else np.abs(np.asarray(action_limit, dtype=np.float64))
        self.max_step = None if action_rate_limit is None else np.asarray(action_rate_limit, dtype=np.float64) / rate_hz
        self.clock, self.sleep = clock, sleep
        self.log_path = None if log_path is None else pathlib.Path(log_path)
        self.keep_observations = keep_observations
        self.observation_shape = getattr(policy, "observation_shape", None)
        if not isinstance(robot, Robot):
            raise TypeError(f"{type(robot).__name__} is not a Robot: it needs read_observation() and apply_action()")
        self.last_action = self.safe_action.copy()
        self.records: list[CycleRecord] = []

    def limit(self, action: np.ndarray) -> np.ndarray:
        """Magnitude clamp, then rate limit relative to the last action sent."""
        if not np.issubdtype(action.dtype, np.floating):
            return action
        limited = action.astype(np.float64)
        if self.action_limit is not None:
            limited = np.clip(limited, -self.action_limit, self.action_limit)
        if self.max_step is not None:
            last = self.last_action.astype(np.float64)
            limited = np.clip(limited, last - self.max_step, last + self.max_step)
        return limited.astype(action.dtype)

    def _compute(self) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
        """One cycle's observation, action and fault (``None`` when all went well)."""
        try:
            obs = np.asarray(self.robot.read_observation(), dtype=np.float32)
        except Exception as error:
            return None, None, f"read_observation raised {type(error).__name__}: {error}"
        if self.observation_shape is not None and obs.shape != tuple(self.observation_shape):
            return obs, None, f"observation of shape {obs.shape}, expected {tuple(self.observation_shape)}"
        if not np.isfinite(obs).all():
            return obs, None, "non-finite observation"
        try:
            action = np.asarray(self.policy(obs))
        except Exception as error:
            return obs, None, f"policy raised {type(error).__name__}: {error}"
        if np.issubdtype(action.dtype, np.floating) and not np.isfinite(action).all():
            return obs, action, "non-finite action"
        return obs, self.limit(action), None

    def step(self, cycle: int, start: float) -> CycleRecord:
        began = self.clock()
        obs, action, fault = self._compute()
        latency = self.clock() - began
        if fault is None and latency > self.deadline_s:
            fault = f"missed deadline: {latency * 1e3:.3f} ms > {self.deadline_s * 1e3:.3f} ms"
        sent = self.safe_action if fault is not None else action
        try:
            self.robot.apply_action(sent)
        except Exception as error:
            message = f"apply_action raised {type(error).__name__}: {error}"
            fault = message if fault is None else f"{fault}; {message}"
            retry, sent = sent is not self.safe_action, None
            if retry:  # one more try, with the safe action
                try:
                    self.robot.apply_action(self.safe_action)
                    sent = self.safe_action
                except Exception:
                    pass
        if sent is not None:
            sent = self.last_action = np.array(sent)  # a copy: the log keeps what went out this cycle
        record = CycleRecord(cycle, began - start, obs if self.keep_observations else None, sent, latency, fault)
        self.records.append(record)
        return record

    def run(self, cycles: int) -> LoopResult:
        """Run ``cycles`` control cycles (or until ``max_faults`` faults); returns what happened."""
        start = next_tick = self.clock()
        faults, stopped, done = 0, "completed", 0
        first = len(self.records)
        for cycle in range(cycles):
            record = self.step(cycle, start)
            done += 1
            if record.fault is not None:
                faults += 1
                if self.max_faults is not None and faults >= self.max_faults:
                    stopped = "max_faults"
                    break
            next_tick += self.period
            wait = next_tick - self.clock()
            if wait > 0:
                self.sleep(wait)
            else:  # overran: start the next cycle now, and keep the schedule from here
                next_tick = self.clock()
        result = LoopResult(done, faults, stopped, self.records[first:])
        if self.log_path is not None:
            write_log(result.records, self.log_path)
        return result


def _plain(value):
    return None if value is None else np.asarray(value).tolist()


def write_log(records: list[CycleRecord], path: str | os.PathLike) -> None:
    """Write the per-cycle log: JSON lines for a ``.jsonl`` path, CSV (arrays as JSON) otherwise."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "cycle": r.cycle,
            "time": r.time,
            "observation": _plain(r.observation),
            "action": _plain(r.action),
            "latency_s": r.latency_s,
            "fault": r.fault,
        }
        for r in records
    ]
    with open(path, "w", newline="") as f:
        if path.suffix == ".jsonl":
            for row in rows:
                f.write(json.dumps(row) + "\n")
            return
        writer = csv.DictWriter(f, fieldnames=["cycle", "time", "observation", "action", "latency_s", "fault"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "observation": json.dumps(row["observation"]), "action": json.dumps(row["action"])})
