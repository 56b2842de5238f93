"""Run an exported policy on a robot: load the file, then drive the robot at a fixed rate under a watchdog.

A small runtime for the files written by ``rl_suite.deploy.export`` and ``rl_suite.deploy.sb3``. This module
imports neither the agents, nor any simulator, nor the exporters, and torch only to load a TorchScript file: an ONNX
policy needs nothing but numpy and onnxruntime on the robot's computer.

- ``load_policy(path)`` -> ``ExportedPolicy``: ``policy(obs)`` maps one observation (or a batch) to the action(s).
  The file is checked when it is loaded: its format, its metadata, and optionally the observation and action sizes
  the robot expects.
- ``ControlLoop(policy, robot, rate_hz, safe_action, ...)``: each cycle reads an observation, checks that it is
  finite and of the right shape, runs the policy, limits the action (magnitude, then rate of change relative to the
  last action sent) and sends it. On a non-finite or misshapen observation, an exception from the robot or the
  policy, a non-finite action, or a missed deadline, it sends ``safe_action`` instead and logs a fault; after
  ``max_faults`` faults it stops. Every cycle is logged (in memory; as CSV or JSONL on request).

The watchdog does not depend on the cycle returning. Each cycle runs on a daemon thread of the loop, and the thread
that called ``run`` watches it:

- At the deadline (``deadline_s``), a cycle that has not chosen its action yet is taken over: the watchdog sends
  ``safe_action`` through ``apply_action`` itself, and the cycle's own action, when it comes, is dropped (the fault
  is a missed deadline; the loop goes on, up to ``max_faults``). Sends hold one lock and the take-over is checked
  under it, so a late cycle can never send its stale action after the safe action.
- At ``hang_timeout_s`` (default: the deadline plus one period) without the cycle finishing, the cycle is hung: the
  watchdog calls the robot's ``safe_stop(safe_action)`` (``apply_action(safe_action)`` for robots without one), logs
  the fault naming the call that hung, and ``run`` returns at once with ``stopped="hang"``, whatever ``max_faults``.
  If the call that hangs is ``apply_action``, it holds the send lock: the watchdog does not wait for it and calls
  ``safe_stop`` from its own thread, concurrently. The action that hung ``apply_action`` was given may still reach
  the robot if the call ever completes; a robot whose actuator link can block should give ``safe_stop`` a path that
  does not depend on that link (a brake, a torque-off line).
- The hung thread cannot be interrupted: it is abandoned, still blocked in the call. If the call returns, the thread
  sends no action of its own (its cycle was taken over) and ends; being a daemon, it never keeps the process from
  exiting. Until it returns the robot object is still in use: ``run`` on the same loop raises ``RuntimeError``, and
  ``wait_for_hung_call(timeout)`` says when the robot may be used again. Do not hand the robot to another loop
  before then.
- Ctrl-C during ``run`` sends the safe action the same way (``safe_stop``), and the cycle in flight sends nothing
  more, before the ``KeyboardInterrupt`` propagates.

Deadlines are measured on the loop's clock (injectable, for simulation); hangs on real time, since a hung call
advances no simulated clock (and as a simulation may run slower than real time, a loop on an injected clock waits at
least ``SIMULATED_CLOCK_HANG_TIMEOUT_S`` by default).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import pathlib
import queue
import threading
import time
import zipfile
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

METADATA_KEY = "rl_suite"
TORCHSCRIPT_METADATA_FILE = "rl_suite.json"
REQUIRED_METADATA = ("algorithm", "observation_space", "action_space", "inputs", "output")
# What a policy for a legged robot carries besides (rl_suite/envs/robots/velocity.py, robot_metadata).
REQUIRED_ROBOT_METADATA = (
    "joint_names",
    "default_joint_pos",
    "action_scale",
    "kp",
    "kd",
    "torque_limit",
    "physics_dt",
    "control_hz",
    "mjcf",
    "observation",
)


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
        self.robot: dict[str, Any] | None = metadata.get("robot")
        """A legged robot's entry (joint order, default pose, gains, observation layout), where the file has one."""
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
        raise ValueError(f"{path} carries no rl_suite metadata: was it written by rl_suite.deploy.export?")
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
    robot: bool = False,
) -> ExportedPolicy:
    """Load an exported policy. ``backend``: ``onnx`` (onnxruntime), ``torchscript`` (torch), or ``auto`` (by the
    file's content: TorchScript files are zip archives). ``expected_observation_dim`` and ``expected_action_dim``
    are what the robot reads and takes (per agent, for a multi-agent policy); a mismatch is an error here, before
    any control cycle runs.

    ``threads``: intra-op threads. ONNX: the session's own (default 1, best for single-observation latency).
    TorchScript: ``torch.set_num_threads(threads)``, which is process-wide, so only when given.

    ``robot=True`` loads the file for a legged robot: its metadata must carry the ``robot`` entry (joint order,
    default pose, gains, observation layout: ``REQUIRED_ROBOT_METADATA``), which ``policy.robot`` then holds.

    What a file may decide: its metadata is JSON, read as plain data (shapes, names, ``dt``); nothing in it is imported
    or called, and its ``env_id`` is a label only, never built. An ONNX file is a graph of standard operators that
    onnxruntime runs. A TorchScript file is a program for torch's interpreter (PyTorch's SECURITY.md, "TorchScript
    models": treat it as executable code), so load TorchScript only from a source you trust."""
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
    if robot:
        entry = metadata.get("robot")
        missing = (
            REQUIRED_ROBOT_METADATA
            if not isinstance(entry, dict)
            else [key for key in REQUIRED_ROBOT_METADATA if key not in entry]
        )
        if missing:
            what = "no robot entry" if not isinstance(entry, dict) else f"a robot entry without {', '.join(missing)}"
            raise ValueError(
                f"{path} has {what} in its metadata, so it cannot drive a robot: export it from a run on a legged "
                "task (rl-suite export RUN_DIR), whose metadata carries the joint order, gains and observation layout"
            )
        if len(entry["joint_names"]) != policy.action_dim:
            raise ValueError(
                f"{path}'s robot entry names {len(entry['joint_names'])} joints, but the policy gives "
                f"{policy.action_dim} actions"
            )
    if expected_observation_dim is not None and expected_observation_dim != policy.observation_dim:
        raise ValueError(
            f"{path} takes observations of size {policy.observation_dim}, but the robot gives "
            f"{expected_observation_dim}"
        )
    if expected_action_dim is not None and expected_action_dim != policy.action_dim:
        raise ValueError(f"{path} gives actions of size {policy.action_dim}, but the robot takes {expected_action_dim}")
    return policy


# -- the control loop -------------------------------------------------------------------------------------------

SIMULATED_CLOCK_HANG_TIMEOUT_S = 10.0
"""The least default hang timeout (real seconds) of a loop on an injected clock, whose time says nothing of how long
a call has really been running."""


@runtime_checkable
class Robot(Protocol):
    """What the control loop drives: real hardware, or a simulator standing in for it.

    ``read_observation`` and ``apply_action`` are required. A robot with a separate emergency path (a brake, a
    torque-off line, its motor controllers' own watchdog) may also define ``safe_stop(safe_action)``, which the loop
    calls when a cycle hangs; robots without one get ``apply_action(safe_action)`` instead (``send_safe_stop``). It
    is not part of the ``isinstance`` check, so any object with the two required methods is a ``Robot``.

    Threads: the loop calls ``read_observation`` and ``apply_action`` from its cycle thread, and its watchdog calls
    ``apply_action(safe_action)`` (at a missed deadline) or ``safe_stop`` (at a hang) from the thread that called
    ``run``, possibly while a ``read_observation`` of the cycle thread is still blocked. Two ``apply_action`` calls
    never overlap, with one exception: an ``apply_action`` that hangs, where a robot without ``safe_stop`` gets the
    safe action through a second ``apply_action`` call from the watchdog's thread.
    """

    def read_observation(self) -> np.ndarray: ...

    def apply_action(self, action: np.ndarray) -> None: ...


def send_safe_stop(robot: Robot, safe_action: np.ndarray) -> str:
    """The watchdog's emergency path: ``robot.safe_stop(safe_action)`` where the robot defines it, otherwise
    ``robot.apply_action(safe_action)``. Returns the name of the method called."""
    safe_stop = getattr(robot, "safe_stop", None)
    if callable(safe_stop):
        safe_stop(safe_action)
        return "safe_stop"
    robot.apply_action(safe_action)
    return "apply_action"


@dataclasses.dataclass
class CycleRecord:
    cycle: int
    time: float
    """Clock time at the start of the cycle, in seconds from the start of ``run``."""
    observation: np.ndarray | None
    action: np.ndarray | None
    """The action sent (the safe action after a fault, whether the cycle or the watchdog sent it; ``None`` if sending
    failed)."""
    latency_s: float
    """From the start of the cycle to the action being ready, on the loop's clock. For a hang, the real time
    (``time.monotonic``) the watchdog waited before it gave up on the cycle."""
    fault: str | None


@dataclasses.dataclass
class LoopResult:
    cycles: int
    faults: int
    stopped: str
    """``completed`` (all cycles ran), ``max_faults`` (the watchdog stopped the loop after ``max_faults`` faults) or
    ``hang`` (a cycle did not finish within ``hang_timeout_s``; the last record says which call hung)."""
    records: list[CycleRecord]

    @property
    def fault_events(self) -> list[CycleRecord]:
        return [record for record in self.records if record.fault is not None]


class _Cycle:
    """One control cycle, shared by the cycle thread that runs it and the watchdog that supervises it. ``ready`` and
    ``taken_over``, which decide who may send, change only under the loop's send lock (``taken_over`` also, without
    it, when a hung ``apply_action`` holds the lock)."""

    def __init__(self, number: int, began: float):
        self.number, self.began, self.began_real = number, began, time.monotonic()
        self.call = "read_observation"
        """The robot or policy call in progress, named in the fault of a hang."""
        self.observation: np.ndarray | None = None
        self.sent: np.ndarray | None = None
        self.latency = 0.0
        self.fault: str | None = None
        self.watchdog_fault: str | None = None
        self.error: Exception | None = None
        """An exception from the loop's own code (not the robot's or the policy's), raised again by ``run``."""
        self.ready = False
        """The cycle thread has chosen what to send, and sends it holding the lock."""
        self.taken_over = False
        """The watchdog has sent the safe action in the cycle's place: nothing more of this cycle may go out."""
        self.done = threading.Event()


class ControlLoop:
    """Runs ``policy`` against ``robot`` at ``rate_hz`` with a watchdog (see the module docstring).

    - ``safe_action``: sent whenever a cycle faults; it is not limited.
    - ``deadline_s``: the longest a cycle may take from its start to a ready action (default: the period). The
      watchdog sends the safe action in place of a cycle that has no action ready at its deadline.
    - ``hang_timeout_s``: a cycle that has not finished this many seconds of real time after its start is hung: the
      watchdog sends the safe action through the robot's ``safe_stop`` and ``run`` returns with ``stopped="hang"``.
      Default: ``deadline_s`` plus one period (two periods with the default deadline), so that ``run`` returns
      within about two periods of the hang; with an injected clock, at least ``SIMULATED_CLOCK_HANG_TIMEOUT_S``
      (10 s), as a simulation may run slower than real time. It must be at least ``deadline_s``. At high rates on an
      operating system that is not real-time, scheduling stalls of a few milliseconds happen: set it above them.
    - ``max_faults``: stop after this many faults in total (``None``: never stop for faults; a hang stops anyway).
    - ``action_limit``: clamp actions to ``[-limit, limit]`` (a scalar or one value per component).
    - ``action_rate_limit``: the largest change per second of each component, relative to the last action sent
      (the safe action before the first cycle), i.e. at most ``action_rate_limit / rate_hz`` per cycle.
    Limits apply to continuous actions only. ``clock`` and ``sleep`` are injectable for tests and simulation: the
    schedule, the latencies and the deadline are in ``clock``'s time, the hang timeout always in real time.

    Each cycle (read, policy, send) runs on a daemon thread of the loop while the thread that called ``run`` watches
    it. After a hang that thread is abandoned, still blocked in the hung call: when (if) the call returns, the thread
    sends no action of its own (the cycle was taken over; checked under the send lock) and ends. Until then the robot
    is still in use: ``run`` refuses to start again, and ``wait_for_hung_call`` says when the robot is free.
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
        hang_timeout_s: float | None = None,
    ):
        if rate_hz <= 0:
            raise ValueError(f"rate_hz must be positive, got {rate_hz}")
        if max_faults is not None and max_faults < 1:
            raise ValueError(f"max_faults must be at least 1 (or None), got {max_faults}")
        self.policy, self.robot, self.rate_hz, self.period = policy, robot, float(rate_hz), 1.0 / rate_hz
        self.safe_action = np.asarray(safe_action)
        self.deadline_s = self.period if deadline_s is None else float(deadline_s)
        if self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {deadline_s}")
        if hang_timeout_s is None:
            real_time = clock in (time.perf_counter, time.monotonic)
            hang_timeout_s = self.deadline_s + self.period
            hang_timeout_s = hang_timeout_s if real_time else max(hang_timeout_s, SIMULATED_CLOCK_HANG_TIMEOUT_S)
        self.hang_timeout_s = float(hang_timeout_s)
        if self.hang_timeout_s < self.deadline_s:
            raise ValueError(
                f"hang_timeout_s must be at least deadline_s ({self.deadline_s} s), got {hang_timeout_s}: a cycle is "
                "late before it is hung"
            )
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
        self._send_lock = threading.Lock()  # held by whoever calls apply_action for a cycle, so sends never interleave
        self._hung: tuple[threading.Thread, _Cycle] | None = None

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

    def wait_for_hung_call(self, timeout: float | None = None) -> bool:
        """After ``run`` stopped for a hang: wait (at most ``timeout`` seconds) for the hung call to return and the
        abandoned cycle thread to end. True once it has (or if nothing hung): only then may the robot be used again."""
        if self._hung is None:
            return True
        thread, _ = self._hung
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._hung = None
        return True

    # -- the cycle thread ---------------------------------------------------------------------------------------

    def _serve(self, cycles: queue.SimpleQueue) -> None:
        """Runs the cycles it is handed, one at a time, until it is handed ``None``."""
        while (cycle := cycles.get()) is not None:
            try:
                self._run_cycle(cycle)
            except Exception as error:  # a bug of the loop's own, not a robot or policy fault: run() raises it
                cycle.error = error
            finally:
                cycle.done.set()

    def _compute(self, cycle: _Cycle) -> tuple[np.ndarray | None, str | None]:
        """One cycle's action and fault (``None`` when all went well); the observation goes to ``cycle``."""
        try:
            obs = np.asarray(self.robot.read_observation(), dtype=np.float32)
        except Exception as error:
            return None, f"read_observation raised {type(error).__name__}: {error}"
        cycle.observation = obs
        if self.observation_shape is not None and obs.shape != tuple(self.observation_shape):
            return None, f"observation of shape {obs.shape}, expected {tuple(self.observation_shape)}"
        if not np.isfinite(obs).all():
            return None, "non-finite observation"
        cycle.call = "policy"
        try:
            action = np.asarray(self.policy(obs))
        except Exception as error:
            return None, f"policy raised {type(error).__name__}: {error}"
        if np.issubdtype(action.dtype, np.floating) and not np.isfinite(action).all():
            return None, "non-finite action"
        return self.limit(action), None

    def _run_cycle(self, cycle: _Cycle) -> None:
        action, fault = self._compute(cycle)
        with self._send_lock:
            cycle.latency = self.clock() - cycle.began  # under the lock: after any take-over, so past the deadline
            cycle.ready = True
            missed = f"missed deadline: {cycle.latency * 1e3:.3f} ms > {self.deadline_s * 1e3:.3f} ms"
            if cycle.taken_over:  # the watchdog has sent the safe action: this cycle's action is stale
                cycle.fault = fault or missed
                return
            if fault is None and cycle.latency > self.deadline_s:
                fault = missed
            cycle.call = "apply_action"
            cycle.sent, cycle.fault = self._apply(self.safe_action if fault is not None else action, fault)

    def _apply(self, action: np.ndarray, fault: str | None) -> tuple[np.ndarray | None, str | None]:
        """Send ``action`` (and the safe action if that raises); returns what went out and the fault. The caller holds
        the send lock."""
        try:
            self.robot.apply_action(action)
            sent = action
        except Exception as error:
            message = f"apply_action raised {type(error).__name__}: {error}"
            fault = message if fault is None else f"{fault}; {message}"
            sent = None
            if action is not self.safe_action:  # one more try, with the safe action
                try:
                    self.robot.apply_action(self.safe_action)
                    sent = self.safe_action
                except Exception:
                    pass
        if sent is not None:
            sent = self.last_action = np.array(sent)  # a copy: the log keeps what went out this cycle
        return sent, fault

    # -- the watchdog (the thread that called run) --------------------------------------------------------------

    def _supervise(self, cycle: _Cycle) -> bool:
        """Wait for the cycle, taking it over at its deadline if it is still running; False if it hangs."""
        hang_at = cycle.began_real + self.hang_timeout_s
        deadline_passed = False
        while not cycle.done.is_set():
            if not deadline_passed and self.clock() - cycle.began > self.deadline_s:
                deadline_passed = True
                self._take_over(cycle)
                continue
            timeout = hang_at - time.monotonic()
            if timeout <= 0:
                return False
            if not deadline_passed:  # the deadline is on the loop's clock, which may be simulated: look again then
                timeout = min(timeout, max(self.deadline_s - (self.clock() - cycle.began), 1e-4))
            cycle.done.wait(timeout)
        return True

    def _take_over(self, cycle: _Cycle) -> None:
        """Send the safe action in place of a cycle that has not chosen its action yet. A send lock held by the cycle
        thread means it has chosen (the safe action itself if it found itself late) and is sending: nothing may go out
        between or behind that; if that ``apply_action`` hangs, ``_hang`` deals with it."""
        if not self._send_lock.acquire(blocking=False):
            return
        try:
            if not cycle.ready:
                cycle.taken_over = True
                cycle.sent, cycle.watchdog_fault = self._apply(self.safe_action, None)
        finally:
            self._send_lock.release()

    def _hang(self, cycle: _Cycle) -> tuple[str, float]:
        """Send the safe action through the emergency path for a hung cycle; returns the fault and the time waited."""
        call = cycle.call
        stuck_sending = call == "apply_action"  # then the cycle thread holds the send lock, and keeps it
        locked = self._send_lock.acquire(timeout=0.0 if stuck_sending else self.period)
        cycle.taken_over = True  # when the hung call returns, the cycle thread sends nothing more
        try:
            method = send_safe_stop(self.robot, self.safe_action)
            cycle.sent = self.last_action = np.array(self.safe_action)
            outcome = f"sent the safe action through {method}"
        except Exception as error:
            cycle.sent, outcome = None, f"the safe action failed ({type(error).__name__}: {error})"
        finally:
            if locked:
                self._send_lock.release()
        waited = time.monotonic() - cycle.began_real
        return f"hang: {call} had not returned after {waited * 1e3:.1f} ms; {outcome} and stopped the loop", waited

    def _stop_on_interrupt(self, cycle: _Cycle | None) -> None:
        """Ctrl-C in ``run``: the cycle in flight sends nothing more, and the robot gets the safe action through its
        emergency path, as for a hang. Waits at most a period for a send in progress, so that none goes out after."""
        locked = self._send_lock.acquire(timeout=self.period)
        try:
            if cycle is not None:
                cycle.taken_over = True
            send_safe_stop(self.robot, self.safe_action)
            self.last_action = np.array(self.safe_action)
        finally:
            if locked:
                self._send_lock.release()

    def _record(self, cycle: _Cycle, start: float, fault: str | None, latency: float) -> CycleRecord:
        observation = cycle.observation if self.keep_observations else None
        record = CycleRecord(cycle.number, cycle.began - start, observation, cycle.sent, latency, fault)
        self.records.append(record)
        return record

    def run(self, cycles: int) -> LoopResult:
        """Run ``cycles`` control cycles (or until ``max_faults`` faults, or a hang); returns what happened."""
        if not self.wait_for_hung_call(timeout=0.0):
            raise RuntimeError(
                f"the robot is still blocked in {self._hung[1].call} from the cycle that hung: "
                "wait_for_hung_call() says when it is free"
            )
        queued: queue.SimpleQueue = queue.SimpleQueue()
        worker = threading.Thread(target=self._serve, args=(queued,), name="rl_suite control cycle", daemon=True)
        worker.start()
        start = next_tick = self.clock()
        faults, stopped, done = 0, "completed", 0
        first = len(self.records)
        cycle: _Cycle | None = None
        try:
            for number in range(cycles):
                cycle = _Cycle(number, self.clock())
                queued.put(cycle)
                if not self._supervise(cycle):
                    self._hung = (worker, cycle)
                    self._record(cycle, start, *self._hang(cycle))
                    done, faults, stopped = done + 1, faults + 1, "hang"
                    break
                if cycle.error is not None:
                    self._take_over(cycle)
                    raise cycle.error
                fault = "; ".join(f for f in (cycle.fault, cycle.watchdog_fault) if f) or None
                self._record(cycle, start, fault, cycle.latency)
                done += 1
                if fault is not None:
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
        except KeyboardInterrupt:
            self._stop_on_interrupt(cycle)
            raise
        finally:
            queued.put(None)  # the cycle thread ends when idle, or when its hung call returns
        if stopped != "hang":
            worker.join()
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
