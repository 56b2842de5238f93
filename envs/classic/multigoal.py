"""MultiGoal-v0: a 2-D point mass that can reach any of four goals, as batched torch.

The task of Haarnoja et al. (2017, soft Q-learning; also in the SAC paper's appendix) for showing multimodal
policies: every goal is worth the same, so a policy that can represent several modes should keep them all.

Rules (ours, after softqlearning's ``MultiGoalEnv``):
- state and observation: the position ``p`` in ``[-7, 7]^2``; episodes start at ``p ~ N(0, init_sigma^2 I)``;
- action: a velocity ``a``, clipped to ``[-1, 1]^2``; ``p' = clip(p + a, -7, 7)``;
- reward: ``-(action_cost |a|^2 + distance_cost min_g |p' - g|^2)``, plus ``goal_reward`` on reaching a goal;
- goals at ``(5, 0), (-5, 0), (0, 5), (0, -5)``; an episode terminates when ``min_g |p' - g| < 1`` (the goal
  reached is ``goal_index(final_obs)``), and is truncated after ``max_episode_steps`` (30).

Measuring multimodality: ``goal_histogram`` samples episodes from a policy and counts where they end;
``multimodality`` passes when at least 90% reach a goal and at least 3 goals each get 15% of those. Random play
(actions N(0, 1) clipped) fails on success, a policy settled on one goal fails on coverage.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.envs.classic.common import FlatStateEnv

GOALS = ((5.0, 0.0), (-5.0, 0.0), (0.0, 5.0), (0.0, -5.0))
GOAL_RADIUS = 1.0
BOUND = 7.0


def goal_index(positions: torch.Tensor) -> torch.Tensor:
    """The index of the goal that each position ``[..., 2]`` is within reach of, or -1 for none."""
    goals = torch.tensor(GOALS, device=positions.device, dtype=positions.dtype)
    distance, index = torch.cdist(positions.reshape(-1, 2), goals).min(-1)
    return torch.where(distance < GOAL_RADIUS, index, -1).reshape(positions.shape[:-1])


class MultiGoal(FlatStateEnv):
    state_dim = 2

    def __init__(
        self,
        num_envs: int = 1,
        *,
        max_episode_steps: int | None = 30,
        goal_reward: float = 10.0,
        action_cost: float = 30.0,
        distance_cost: float = 1.0,
        init_sigma: float = 0.1,
        **options,
    ):
        observation_space = gym.spaces.Box(-BOUND, BOUND, shape=(2,), dtype=np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        super().__init__(num_envs, observation_space, action_space, max_episode_steps=max_episode_steps, **options)
        self.goal_reward, self.action_cost, self.distance_cost = goal_reward, action_cost, distance_cost
        self.init_sigma = init_sigma
        self.goals = torch.tensor(GOALS, device=self.device, dtype=self.state.rows.dtype)

    def _advance(self, actions):
        position = self.state.rows.T  # [N, 2], a view: updates write the state
        velocity = actions.to(position.dtype).clamp(-1.0, 1.0)
        position.add_(velocity).clamp_(-BOUND, BOUND)
        squared = (position.unsqueeze(1) - self.goals).square().sum(-1).min(-1).values
        torch.lt(squared, GOAL_RADIUS**2, out=self._terminated)
        reward = self.action_cost * velocity.square().sum(-1) + self.distance_cost * squared
        self._reward.copy_(reward).neg_().add_(self._terminated, alpha=self.goal_reward)
        return self._reward, self._terminated

    def _reset_envs(self, selection: Selection):
        values = selection.normal(self.rng, 2, self.state.rows.dtype).mul_(self.init_sigma).clamp_(-BOUND, BOUND)
        selection.write(self.state.rows.T, values)


@torch.no_grad()
def goal_histogram(act, episodes: int = 1000, seed: int = 0, device="cpu") -> torch.Tensor:
    """Where ``episodes`` episodes of the policy ``act(obs) -> actions`` end: counts ``[len(GOALS) + 1]`` of each
    goal reached, the last entry counting episodes that reached none. Each environment runs one episode."""
    env = MultiGoal(episodes, device=device, seed=seed)
    obs = env.reset()
    reached = torch.full((episodes,), -2, dtype=torch.long, device=env.device)  # -2: still running
    for _ in range(env.max_episode_steps):
        obs, _, _, _, info = env.step(act(obs))
        reached = torch.where((reached == -2) & info["done"], goal_index(info["final_obs"]), reached)
    reached = torch.where(reached < 0, len(GOALS), reached)
    return torch.bincount(reached, minlength=len(GOALS) + 1)


# The multimodality measure. An untrained policy (actions N(0, 1) clipped to [-1, 1]) reaches each goal in about 11%
# of episodes and none in 56%, so coverage alone would pass it: success is required as well. A policy that settled on
# one goal has success but not coverage.
MIN_SUCCESS = 0.9
"""At least this fraction of the sampled episodes must reach a goal."""
MIN_GOALS = 3
"""At least this many goals must each get ``MIN_GOAL_SHARE`` of the successful episodes."""
MIN_GOAL_SHARE = 0.15
"""The share of the successful episodes that a goal needs to count as kept."""


def multimodality(histogram: torch.Tensor) -> dict:
    """Whether a ``goal_histogram`` shows a policy that both solves the task and keeps several goals.

    - ``success``: the fraction of episodes that reached a goal (at least ``MIN_SUCCESS`` to pass);
    - ``goal_shares``: each goal's share of the successful episodes (``MIN_GOALS`` goals need ``MIN_GOAL_SHARE``);
    - ``goals_kept``: how many goals have that share; ``goal_entropy``: the entropy (nats) of the shares (log 4 =
      1.39 for all four equally);
    - ``passes``: both conditions hold.
    """
    if histogram.shape != (len(GOALS) + 1,) or histogram.sum() <= 0:
        raise ValueError(f"expected a goal_histogram of {len(GOALS) + 1} counts with episodes, got {histogram}")
    histogram = histogram.double()
    at_goals = histogram[: len(GOALS)]
    success = float(at_goals.sum() / histogram.sum())
    shares = at_goals / at_goals.sum().clamp_min(1)
    entropy = -(shares * shares.clamp_min(1e-12).log()).sum()
    goals_kept = int((shares >= MIN_GOAL_SHARE).sum())
    return {
        "success": round(success, 3),
        "goal_shares": [round(share, 3) for share in shares.tolist()],
        "goals_kept": goals_kept,
        "goal_entropy": float(entropy) + 0.0,  # no "-0.0" for a single goal
        "passes": success >= MIN_SUCCESS and goals_kept >= MIN_GOALS,
    }
