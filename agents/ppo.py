"""PPO: proximal policy optimisation with a clipped surrogate objective (Schulman et al., 2017).

Each iteration, for a rollout of T steps from N environments:

    1. collect (s_t, a_t, r_t, s'_t) with the current policy pi_old;
    2. in batched passes, log pi_old(a_t|s_t), V(s_t) and V(s'_t) (the policy has not changed since it acted, so
       these equal what acting would have stored), then advantages A_t by GAE(gamma, lambda), bootstrapping
       truncated episodes from their final observation s'_t;
    3. for each epoch and minibatch, maximise
           L = E[min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t)] - c_v (V(s_t) - R_t)^2 + c_e H[pi(.|s_t)],
       with rho_t = pi(a_t|s_t) / pi_old(a_t|s_t), optionally with a clipped value loss, gradient clipping, and an
       early stop or an adaptive learning rate on the approximate KL divergence;
    4. merge the rollout's observations into the running observation normaliser (part of the policy).
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import torch
from torch import nn

from rl_suite import distributed
from rl_suite.agent import Agent
from rl_suite.buffers import RolloutBuffer, transition_spec
from rl_suite.networks import ActionScaler, RunningNorm, mlp, policy_head
from rl_suite.onpolicy import (
    RewardScaler,
    adapt_lr,
    advantages_and_returns,
    clipped_surrogate,
    finite_or_warn,
    gradient_step,
    normalized,
    train_epochs,
)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    n_steps: int = 32
    """Rollout length T: steps per environment collected each iteration."""
    epochs: int = 10
    """Passes over each rollout."""
    minibatches: int = 4
    """Minibatches per epoch (the rollout's T * N samples are shuffled and split)."""
    lr: float = 3e-4
    """Adam learning rate (the start value when a schedule decays it)."""
    lr_schedule: str = "constant"
    """``constant``, or ``linear`` decay to zero over the run's step budget."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_range: float = 0.2
    """epsilon of the clipped surrogate."""
    clip_schedule: str = "constant"
    """``constant``, or ``linear`` decay of the clip range to zero over the step budget."""
    clip_value: float | None = None
    """Clip the value function's change around its old predictions by this much; ``None`` to not clip."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    target_kl: float | None = None
    """Stop the epochs of an iteration early once the approximate KL exceeds 1.5 times this."""
    adaptive_kl: float | None = None
    """If set, adapt the learning rate towards this KL per minibatch (x1.5 or /1.5), as rsl_rl does."""
    hidden: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and the critic (separate networks)."""
    activation: str = "tanh"
    """Activation of the hidden layers: tanh, relu, elu or silu."""
    init_log_std: float = 0.0
    """Initial log standard deviation of a Gaussian policy (continuous actions)."""
    normalize_obs: bool = True
    """Normalise observations with running statistics kept in the policy."""
    scale_rewards: bool = False
    """Divide rewards by a running standard deviation of the discounted return (as CleanRL's and SB3's reward
    normalisation do); helps tasks whose rewards are large or all negative, such as Pendulum."""


class PPO(Agent):
    name = "ppo"
    Config = PPOConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)

    def __init__(self, observation_space, action_space, config: PPOConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c, obs_dim = self.config, observation_space.shape[0]
        self.continuous = isinstance(action_space, gym.spaces.Box)
        self.normalizer = RunningNorm(observation_space.shape) if c.normalize_obs else nn.Identity()
        self.actor = policy_head(action_space, obs_dim, c.hidden, c.activation, c.init_log_std)
        self.critic = mlp(obs_dim, c.hidden, 1, c.activation, out_gain=1.0)
        self.scaler = ActionScaler(action_space) if self.continuous else nn.Identity()
        self.return_norm = RunningNorm(())  # statistics of the discounted return, for reward scaling
        self.modules = {
            "normalizer": self.normalizer,
            "actor": self.actor,
            "critic": self.critic,
            "scaler": self.scaler,
            "return_norm": self.return_norm,
        }
        for module in self.modules.values():
            module.to(self.device)
        self.parameters = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.parameters, lr=c.lr, eps=1e-5, fused=True)
        self.optimizers = {"optimizer": self.optimizer}
        self.lr = c.lr  # the current learning rate (schedules and the adaptive KL rule move it)
        self.skipped_updates = 0
        self.reward_scaler = RewardScaler(self.return_norm, c.gamma)

    @property
    def steps_per_iteration(self) -> int:
        return self.config.n_steps

    def make_buffer(self, num_envs: int) -> RolloutBuffer:
        extras = {"policy_action": (self.action_space.shape, torch.float32)} if self.continuous else {}  # unclipped
        action_dtype = torch.float32 if self.continuous else torch.int64
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, action_dtype, extras)
        return RolloutBuffer(self.config.n_steps, num_envs, spec, self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        pi = self.actor(self.normalizer(obs))
        if deterministic:
            return self.scaler(pi.mode()), {}
        action = pi.sample()
        return self.scaler(action), ({"policy_action": action} if self.continuous else {})

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, d = self.config, buffer.data
        # 2. The behaviour policy's log-probabilities and values, and GAE, in batched passes over the rollout.
        actions = d["policy_action"] if self.continuous else d["actions"]
        rewards = self.reward_scaler(d) if c.scale_rewards else d["rewards"]
        with torch.no_grad():
            obs = self.normalizer(d["obs"])
            log_prob = self.actor(obs).log_prob(actions)
            values, advantages, returns = advantages_and_returns(
                d, self.critic, obs, self.normalizer, rewards, c.gamma, c.gae_lambda
            )
        samples = {
            "obs": obs.flatten(0, 1),
            "actions": actions.flatten(0, 1),
            "log_prob": log_prob.flatten(),
            "value": values.flatten(),
            "advantages": advantages.flatten(),
            "returns": returns.flatten(),
        }
        if c.lr_schedule == "linear":
            self.lr = c.lr * max(1.0 - progress, 0.0)
        clip = c.clip_range * (max(1.0 - progress, 0.0) if c.clip_schedule == "linear" else 1.0)

        # 3. Epochs of minibatch gradient steps on the clipped surrogate, stopped early past the target KL (averaged
        #    over the ranks under torchrun, so that all stop together).
        def kl_too_high(totals, steps) -> bool:
            return c.target_kl is not None and distributed.mean(totals["approx_kl"] / steps) > 1.5 * c.target_kl

        metrics = train_epochs(
            samples, c.epochs, c.minibatches, self.device, lambda mb: self._step(mb, clip), stop=kl_too_high
        )

        # 4. The normaliser learns from this rollout only now, so that log-probabilities stayed consistent.
        if c.normalize_obs:
            self.normalizer.update(d["obs"])
        buffer.clear()
        variance = samples["returns"].var()
        metrics["explained_variance"] = 1 - (samples["returns"] - samples["value"]).var() / variance.clamp_min(1e-8)
        metrics["lr"] = torch.tensor(self.lr)
        metrics["clip_range"] = torch.tensor(clip)
        return metrics

    def _step(self, mb: dict[str, torch.Tensor], clip: float) -> dict[str, torch.Tensor] | None:
        losses = self._loss(mb, clip)
        if not finite_or_warn(losses["loss"], "PPO"):
            self.skipped_updates += 1
            return None
        gradient_step(self.optimizer, losses["loss"], self.parameters, self.config.max_grad_norm, lr=self.lr)
        if self.config.adaptive_kl is not None:
            self.lr = adapt_lr(self.lr, distributed.mean(losses["approx_kl"]), self.config.adaptive_kl)
        return {key: value.detach() for key, value in losses.items()}

    def _loss(self, mb: dict[str, torch.Tensor], clip: float) -> dict[str, torch.Tensor]:
        c = self.config
        pi = self.actor(mb["obs"])
        log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
        ratio = log_ratio.exp()
        advantages = normalized(mb["advantages"]) if c.normalize_advantages else mb["advantages"]
        policy_loss = clipped_surrogate(ratio, advantages, clip)
        value = self.critic(mb["obs"]).squeeze(-1)
        value_loss = (value - mb["returns"]).square()
        if c.clip_value is not None:
            clipped = mb["value"] + (value - mb["value"]).clamp(-c.clip_value, c.clip_value)
            value_loss = torch.max(value_loss, (clipped - mb["returns"]).square())
        value_loss = 0.5 * value_loss.mean()
        entropy = pi.entropy().mean()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's low-variance estimator of KL(old || new)
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return {
            "loss": policy_loss + c.vf_coef * value_loss - c.ent_coef * entropy,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }

    def counters(self):
        return {
            "lr": self.lr,
            "skipped_updates": self.skipped_updates,
            "discounted_return": self.reward_scaler.discounted_return,
        }

    def load_counters(self, counters) -> None:
        self.lr, self.skipped_updates = counters["lr"], counters["skipped_updates"]
        self.reward_scaler.discounted_return = counters["discounted_return"]
