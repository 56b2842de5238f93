"""The algorithms, one file each, installed as ``rl_suite.agents``."""

from rl_suite.agents.fpo import FPO
from rl_suite.agents.policyflow import PolicyFlow
from rl_suite.agents.ppo import PPO
from rl_suite.agents.pql import PQL
from rl_suite.agents.sac import SAC

__all__ = ["FPO", "PPO", "PQL", "PolicyFlow", "SAC"]
