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

import torch

from rl_suite import distributed
from rl_suite.buffers import RolloutBuffer
from rl_suite.config import setting
from rl_suite.onpolicy import OnPolicyAgent, OnPolicyConfig, clipped_surrogate, normalized, train_epochs, value_loss


@dataclasses.dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """PPO's settings: those of every on-policy agent (``OnPolicyConfig``: rollout, epochs, Adam's ``lr``, GAE,
    ``clip_range``, networks, normalisers) and these."""

    lr_schedule: str = setting("constant", choices=("constant", "linear"))
    """``constant``, or ``linear`` decay of the learning rate to zero over the run's step budget."""
    clip_schedule: str = setting("constant", choices=("constant", "linear"))
    """``constant``, or ``linear`` decay of the clip range to zero over the step budget."""
    clip_value: float | None = setting(None, above=0)
    """Clip the value function's change around its old predictions by this much; ``None`` to not clip."""
    ent_coef: float = setting(0.0, at_least=0)
    """Weight of the entropy bonus."""
    target_kl: float | None = setting(None, above=0)
    """Stop the epochs of an iteration early once the approximate KL exceeds 1.5 times this."""
    adaptive_kl: float | None = setting(None, above=0)
    """If set, adapt the learning rate towards this KL per minibatch (x1.5 or /1.5), as rsl_rl does."""
    init_log_std: float = 0.0
    """Initial log standard deviation of a Gaussian policy (continuous actions)."""


class PPO(OnPolicyAgent):
    name = "ppo"
    Config = PPOConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)

    def __init__(self, observation_space, action_space, config: PPOConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)  # normalisers (OnPolicyAgent)
        self.build_policy(self.config.init_log_std)  # actor, critic, scaler; make_buffer, act, export (OnPolicyAgent)
        self.register({"actor": self.actor}, torch.optim.Adam, lr=self.config.lr, eps=1e-5, fused=True)

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, d = self.config, buffer.data
        # 2. The behaviour policy's log-probabilities and values, and GAE, in batched passes over the rollout.
        samples = self.policy_samples(d)
        if c.lr_schedule == "linear":
            self.lr = c.lr * max(1.0 - progress, 0.0)
        clip = c.clip_range * (max(1.0 - progress, 0.0) if c.clip_schedule == "linear" else 1.0)

        # 3. Epochs of minibatch gradient steps on the clipped surrogate, stopped early past the target KL (averaged
        #    over the ranks under torchrun, so that all stop together).
        def kl_too_high(totals, steps) -> bool:
            return c.target_kl is not None and distributed.mean(totals["approx_kl"] / steps) > 1.5 * c.target_kl

        def step(mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
            return self.minibatch_step(self.loss(mb, clip), adapt_to_kl=c.adaptive_kl)

        metrics = train_epochs(samples, c.epochs, c.minibatches, self.device, step, stop=kl_too_high)

        # 4. The normaliser learns from this rollout only now, so that log-probabilities stayed consistent.
        self.finish_update(buffer)
        variance = samples["returns"].var()
        metrics["explained_variance"] = 1 - (samples["returns"] - samples["value"]).var() / variance.clamp_min(1e-8)
        metrics["lr"] = torch.tensor(self.lr)
        metrics["clip_range"] = torch.tensor(clip)
        if isinstance(getattr(self.actor, "log_std", None), torch.Tensor):  # the Gaussian's exploration, in env units
            metrics["action_std"] = self.actor.log_std.detach().exp().mean()
        return metrics

    def loss(self, mb: dict[str, torch.Tensor], clip: float) -> dict[str, torch.Tensor]:
        c = self.config
        pi = self.actor(mb["obs"])
        log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
        ratio = log_ratio.exp()
        advantages = normalized(mb["advantages"]) if c.normalize_advantages else mb["advantages"]
        policy_loss = clipped_surrogate(ratio, advantages, clip)
        v_loss = value_loss(self.value(mb), mb["returns"], mb["value"], c.clip_value)
        entropy = pi.entropy().mean()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's low-variance estimator of KL(old || new)
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
        return {
            "loss": policy_loss + c.vf_coef * v_loss - c.ent_coef * entropy,
            "policy_loss": policy_loss,
            "value_loss": v_loss,
            "entropy": entropy,
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }
