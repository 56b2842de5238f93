"""rl-suite: batched reinforcement learning for classic control and robotics, in PyTorch."""

__version__ = "0.1.0"

from rl_suite.env import Selection, VecEnv
from rl_suite.registry import EnvSpec, UnknownEnvError, make, register, registered

__all__ = ["EnvSpec", "Selection", "UnknownEnvError", "VecEnv", "make", "register", "registered", "__version__"]
