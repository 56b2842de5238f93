"""SAC: soft actor-critic with automatic entropy tuning (Haarnoja et al., 2018), for continuous actions.

Each iteration collects ``steps_per_iteration`` batched steps from N environments into a replay ring buffer (uniform
random actions during the first ``learning_starts`` env steps), then makes ``utd_ratio`` gradient updates per
collected transition. Each update, on a minibatch of n-step transitions (s, a, R, s', d) with d = gamma^m (1 - done):

    critics:  y = R + d (min_j Q'_j(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s');  minimise sum_j (Q_j(s, a) - y)^2
    actor:    minimise alpha log pi(a|s) - min_j Q_j(s, a),  a ~ pi(.|s) reparameterised through tanh
    alpha:    minimise -log alpha (log pi(a|s) + H_target)
    targets:  Q'_j <- (1 - tau) Q'_j + tau Q_j
"""

from __future__ import annotations

import copy
import dataclasses
import math

import gymnasium as gym
import torch
from torch import nn

from rl_suite.agent import Agent
from rl_suite.buffers import ReplayBuffer, transition_spec
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ActionScaler, RunningNorm, TanhGaussianPolicy, TwinCritic
from rl_suite.optim import finite_or_warn, gradient_step, polyak_update


@dataclasses.dataclass(frozen=True)
class SACConfig:
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (all environments together)."""
    batch_size: int = 256
    """Transitions per gradient update."""
    lr: float = 3e-4
    """Adam learning rate of the actor, the critics and the temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Soft target update rate."""
    n_step: int = 1
    """Length of the n-step returns sampled from the replay buffer."""
    learning_starts: int = 5_000
    """Env steps (all environments together) of uniformly random actions before learning starts."""
    steps_per_iteration: int = 1
    """Batched env steps collected between rounds of updates."""
    utd_ratio: float = 1.0
    """Gradient updates per collected transition (with N environments, each batched step brings N transitions)."""
    hidden: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic."""
    activation: str = "relu"
    """Activation of the hidden layers."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune_alpha: bool = True
    """Tune the temperature towards ``target_entropy``; if false, alpha stays at ``init_alpha``."""
    target_entropy: float | None = None
    """Entropy target; ``None`` for -dim(A)."""
    normalize_obs: bool = False
    """Normalise observations with running statistics kept in the policy."""


class SAC(Agent):
    name = "sac"
    Config = SACConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config: SACConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        self.normalizer = RunningNorm(observation_space.shape) if c.normalize_obs else nn.Identity()
        self.actor = TanhGaussianPolicy(obs_dim, act_dim, c.hidden, c.activation)
        self.critic = TwinCritic(obs_dim, act_dim, c.hidden, c.activation)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = nn.Module()
        self.temperature.log_alpha = nn.Parameter(torch.tensor(math.log(c.init_alpha)))
        self.scaler = ActionScaler(action_space)
        self.modules = {
            "normalizer": self.normalizer,
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "temperature": self.temperature,
            "scaler": self.scaler,
        }
        for module in self.modules.values():
            module.to(self.device)
        # One optimiser for the three losses, which one backward pass differentiates: their parameters are disjoint.
        parameters = [*self.actor.parameters(), *self.critic.parameters()]
        if c.autotune_alpha:
            parameters.append(self.temperature.log_alpha)
        else:
            self.temperature.requires_grad_(False)
        self.learned = parameters
        self.optimizer = torch.optim.Adam(parameters, lr=c.lr, fused=True)
        self.optimizers = {"optimizer": self.optimizer}
        self.target_entropy = -float(act_dim) if c.target_entropy is None else c.target_entropy
        self.env_steps_seen = 0  # counts the random warm-up
        self.update_credit = 0.0  # fractional updates carried over between iterations
        self.updates = 0
        self.skipped_updates = 0

    @property
    def steps_per_iteration(self) -> int:
        return self.config.steps_per_iteration

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> ReplayBuffer:
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, torch.float32)
        c = self.config
        return ReplayBuffer(c.buffer_size, num_envs, spec, self.device, n_step=c.n_step, gamma=c.gamma)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if deterministic:
            return self.scaler(self.actor(self.normalizer(obs)).mode()), {}
        if self.env_steps_seen < self.config.learning_starts:
            action = torch.rand(obs.shape[0], *self.action_space.shape, device=self.device) * 2 - 1
        else:
            action, _ = self.actor(self.normalizer(obs)).rsample_with_log_prob()
        self.env_steps_seen += obs.shape[0]
        return self.scaler(action), {}

    def inference_policy(self) -> MLPInference:
        """``tanh`` of the Gaussian's mean (the tanh-Gaussian's mode), then scaling."""
        spaces = self.observation_space, self.action_space
        return MLPInference(*spaces, self.normalizer, self.actor.net, self.scaler, split=True, tanh=True)

    def update(self, buffer: ReplayBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        if self.env_steps_seen < c.learning_starts or not buffer.can_sample():
            return {}
        if c.normalize_obs:  # learn the statistics from the newest observations
            self.normalizer.update(buffer.recent("obs", c.steps_per_iteration))
        self.update_credit += c.utd_ratio * buffer.num_envs * c.steps_per_iteration
        updates, self.update_credit = int(self.update_credit), self.update_credit - int(self.update_credit)
        totals = {}
        for _ in range(updates):
            losses = self._update_once(buffer.sample(c.batch_size))
            for key, value in losses.items():
                totals[key] = totals.get(key, 0.0) + value
        return {key: value / max(updates, 1) for key, value in totals.items()}

    def _update_once(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        alpha = self.temperature.log_alpha.exp().detach()
        obs, next_obs = self.normalizer(batch["obs"]), self.normalizer(batch["next_obs"])
        action = self.scaler.unscale(batch["actions"])

        # One actor pass samples both the next actions (for the targets) and fresh actions at s (for the actor).
        both_actions, both_log_probs = self.actor(torch.cat((next_obs, obs))).rsample_with_log_prob()
        next_action, new_action = both_actions.detach().chunk(2)[0], both_actions.chunk(2)[1]
        next_log_prob, log_prob = both_log_probs.detach().chunk(2)[0], both_log_probs.chunk(2)[1]

        # Critics: soft Bellman targets from the target critics.
        with torch.no_grad():
            next_q = self.critic_target(next_obs, next_action).min(0).values
            target = batch["rewards"] + batch["discount"] * (next_q - alpha * next_log_prob)
        critic_loss = 0.5 * (self.critic(obs, action) - target).square().sum(0).mean()

        # Actor: maximise the soft value of its own reparameterised actions, through frozen critics, so that one
        # backward pass serves all three losses.
        actor_loss = (alpha * log_prob - self.critic(obs, new_action, frozen=True).min(0).values).mean()
        alpha_loss = -(self.temperature.log_alpha * (log_prob.detach() + self.target_entropy)).mean()

        if not finite_or_warn(critic_loss + actor_loss + alpha_loss, "SAC", skipped="this update"):  # all ranks agree
            self.skipped_updates += 1
            return {}
        loss = critic_loss + actor_loss + (alpha_loss if c.autotune_alpha else 0.0)
        gradient_step(self.optimizer, loss, self.learned)  # unclipped, averaged over the ranks under torchrun
        polyak_update(self.critic_target, self.critic, c.tau)
        self.updates += 1
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
        }

    def counters(self):
        return {
            "env_steps_seen": self.env_steps_seen,
            "update_credit": self.update_credit,
            "updates": self.updates,
            "skipped_updates": self.skipped_updates,
        }
