"""Legged robots: the robot description layer (``config.py``: ``RobotConfig``, the built-in robots, the simulated
model) and the tasks written against it (``velocity.py``: velocity tracking on flat ground)."""

from rl_suite.envs.robots.config import ROBOTS, RobotConfig, build_model, mjcf_path, robot_config

__all__ = ["ROBOTS", "RobotConfig", "build_model", "mjcf_path", "robot_config"]
