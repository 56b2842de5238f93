"""gymnasium's v5 MuJoCo tasks on batched physics: ``MujocoVecEnv`` over the CPU (``mujoco.batch``) or Warp
(``mujoco_warp``) backend."""

from rl_suite.envs.mujoco.env import MujocoVecEnv
from rl_suite.envs.mujoco.tasks import TASKS

__all__ = ["MujocoVecEnv", "TASKS"]
