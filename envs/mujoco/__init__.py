"""gymnasium's v5 MuJoCo tasks on batched physics: ``MujocoVecEnv`` over the CPU (``mujoco.batch``) or Warp
(``mujoco_warp``) backend."""

import os
import sys

# Rendering without a display needs an off-screen OpenGL context; MuJoCo picks the platform when it is imported.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

from rl_suite.envs.mujoco.env import MujocoVecEnv  # noqa: E402
from rl_suite.envs.mujoco.tasks import TASKS  # noqa: E402

__all__ = ["MujocoVecEnv", "TASKS"]
