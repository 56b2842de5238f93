"""Deployment: trained policies as self-contained files, and a runtime that runs them on a robot.

- ``inference``: the deterministic policy modules each agent provides for export (``Agent.inference_policy``).
- ``export``: writes an agent's policy as an ONNX or TorchScript file with its metadata, checked against the agent.
- ``sb3``: converts a stable-baselines3 model (and its VecNormalize) through the same writers and check.
- ``runtime``: loads an exported file and runs it against a ``Robot`` at a fixed rate, under a watchdog.

Importing the package loads the runtime alone (no agent, no simulator, no exporter), and re-exports its names:
``from rl_suite.deploy import load_policy, ControlLoop``.
"""

from rl_suite.deploy.runtime import (
    SIMULATED_CLOCK_HANG_TIMEOUT_S,
    ControlLoop,
    CycleRecord,
    ExportedPolicy,
    LoopResult,
    Robot,
    load_policy,
    send_safe_stop,
    write_log,
)

__all__ = [
    "SIMULATED_CLOCK_HANG_TIMEOUT_S",
    "ControlLoop",
    "CycleRecord",
    "ExportedPolicy",
    "LoopResult",
    "Robot",
    "load_policy",
    "send_safe_stop",
    "write_log",
]
