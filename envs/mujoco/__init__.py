"""gymnasium's v5 MuJoCo tasks on batched physics: ``MujocoVecEnv`` over the CPU backend (MuJoCo's batch API) or
the Warp backend (``mujoco_warp``)."""

import os
import sys

# Rendering without a display needs an off-screen OpenGL context; MuJoCo picks the platform when it is imported.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

try:
    import mujoco  # noqa: F401
except ImportError as error:  # pragma: no cover - the dev install has it
    message = "the MuJoCo tasks need the mujoco package (4.0 or newer): pip install 'rl-suite[mujoco]'"
    raise ImportError(message) from error

from rl_suite.envs.mujoco.env import MujocoVecEnv  # noqa: E402
from rl_suite.envs.mujoco.tasks import TASKS  # noqa: E402

__all__ = ["MujocoVecEnv", "TASKS"]
