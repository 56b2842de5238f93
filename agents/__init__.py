"""The algorithms, one file each, installed as ``rl_suite.agents``."""

from rl_suite.agents.fpo import FPO
from rl_suite.agents.mappo import MAPPO
from rl_suite.agents.policyflow import PolicyFlow
from rl_suite.agents.ppo import PPO
from rl_suite.agents.pql import PQL
from rl_suite.agents.qmix import QMIX
from rl_suite.agents.sac import SAC

__all__ = ["FPO", "MAPPO", "PPO", "PQL", "QMIX", "PolicyFlow", "SAC"]
