"""The DeepMind Control Suite's tasks on batched physics: ``DMCVecEnv`` over the CPU backend (MuJoCo's batch API)
or the Warp backend (``mujoco_warp``), with dm_control's model files read from the installed dm_control package."""

from rl_suite.envs.dmc.env import DOMAINS, DMCVecEnv

__all__ = ["DMCVecEnv", "DOMAINS"]
