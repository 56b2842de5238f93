"""BPO: bounded policy optimisation (Ao et al., 2026, "Bounded Ratio Reinforcement Learning", arXiv 2604.18578).

The bounded-ratio problem, maximise E_{pi_old}[rho A] subject to 1 - eps <= rho = pi / pi_old <= 1 + eps at every
(s, a), has an analytic optimum (the paper's Theorem 4.1): pi*(a|s) = (1 + eps sign(Q(s, a) - mu(s))) pi_old(a|s),
where mu(s) is the median of Q(s, .) under pi_old (half of pi_old's mass must move up for pi* to stay normalised).
Regularised by an entropy term of temperature lambda, the optimal ratio is smooth in the median advantage:

    rho*(s, a) = 1 - eps + 2 eps sigmoid(A~ / lambda),   A~ = R - u(s)

(lambda -> 0 gives the hard 1 +- eps). BPO fits the policy to pi* by an advantage-weighted total variation, one term
per sample, with rho* held constant:

    L_BPO = E[ |rho - rho*| |R - V(s)| ]

Each iteration, for a rollout of T steps from N environments:

    1. collect (s_t, a_t, r_t, s'_t) with pi_old;
    2. in batched passes, log pi_old(a_t|s_t), V(s_t) and the GAE returns R_t (truncated episodes bootstrapped from
       their final observation s'_t), shared with PPO;
    3. for each epoch and minibatch, minimise
           L_BPO + c_v (V(s) - R)^2 + c_u log(2 cosh((R - u(s)) / 2)) - c_e H[pi(.|s)],
       where u is a median head beside the critic: the log-cosh loss is minimised where E[sigmoid(R - u)] = 1/2, a
       soft median of the return (``use_median=False`` uses V instead, the paper's mean-baseline ablation);
    4. merge the rollout's observations into the running observation normaliser.

Where the paper's text could not be read, the loss and the defaults follow the authors' released code
(github.com/bounded-ratio-rl/bounded_ratio_rl, ``src/sb3/BPO.py``, ``cfgs/algo/bpo/mujoco.yaml``): the weight uses the
current critic, detached; neither signal is standardised, so lambda is in the return's units (reward scaling sets
those units where it is on).

Against PPO: with the hard target and A~ = A, PPO's clipped loss is |A| [sign(A) (1 + eps sign(A) - rho)]_+ plus a
constant, a one-sided hinge towards the same target; BPO's is two-sided, so a ratio pushed past its bound is pulled
back rather than left alone (``tests/test_bpo.py`` checks both).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from rl_suite.buffers import RolloutBuffer
from rl_suite.config import setting
from rl_suite.networks import mlp
from rl_suite.onpolicy import OnPolicyAgent, OnPolicyConfig, train_epochs


@dataclasses.dataclass(frozen=True)
class BPOConfig(OnPolicyConfig):
    """BPO's settings: those of every on-policy agent (``OnPolicyConfig``: rollout, epochs, Adam's ``lr``, GAE,
    networks, normalisers), with the authors' MuJoCo defaults where theirs differ, and these."""

    clip_range: float = 0.3
    """eps: the ratio's bound, 1 - eps <= pi / pi_old <= 1 + eps (the authors' 0.3)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (the authors' 1.0)."""
    normalize_advantages: bool = False
    """Must stay false: BPO's target and weight are in the return's units, as its temperature is."""
    temperature: float = setting(1e-3, above=0)
    """lambda: how sharply the target ratio switches from 1 - eps to 1 + eps around A~ = 0 (the authors' 1e-3:
    effectively the hard 1 +- eps)."""
    use_median: bool = True
    """The target's baseline: the median head u(s) (the paper's median advantage), or the critic V(s)."""
    median_coef: float = setting(0.5, at_least=0)
    """c_u: weight of the median head's log-cosh loss (the authors' 0.5)."""
    ent_coef: float = setting(0.0, at_least=0)
    """c_e: weight of the entropy bonus (the authors' 0)."""
    lr_schedule: str = setting("constant", choices=("constant", "linear"))
    """``constant``, or ``linear`` decay of the learning rate to zero over the run's step budget."""
    adaptive_kl: float | None = setting(None, above=0)
    """If set, adapt the learning rate towards this KL per minibatch (x1.5 or /1.5), as rsl_rl does (the authors'
    Isaac Lab settings: 0.01)."""
    init_log_std: float = 0.0
    """Initial log standard deviation of a Gaussian policy (continuous actions)."""


def target_ratio(target_advantage: torch.Tensor, eps: float, temperature: float) -> torch.Tensor:
    """rho* = 1 - eps + 2 eps sigmoid(A~ / lambda), equal to 1 + eps tanh(A~ / (2 lambda)); the argument is clamped to
    +-10 (where the sigmoid is within 5e-5 of its limit), as the authors' rsl_rl version clamps it."""
    return 1.0 - eps + 2.0 * eps * torch.sigmoid((target_advantage / temperature).clamp(-10.0, 10.0))


def bpo_policy_loss(
    ratio: torch.Tensor, weight: torch.Tensor, target_advantage: torch.Tensor, eps: float, temperature: float
) -> torch.Tensor:
    """E[|rho - rho*| |w|], with rho* from ``target_advantage`` (A~) and held constant, and w the advantage that
    weighs each sample (R - V)."""
    with torch.no_grad():
        target = target_ratio(target_advantage, eps, temperature)
    return ((ratio - target).abs() * weight.abs()).mean()


def median_loss(returns: torch.Tensor, median: torch.Tensor) -> torch.Tensor:
    """E[log(2 cosh((R - u) / 2))], written as softplus(x) - x / 2 with x = R - u: its minimum over u is where
    E[sigmoid(R - u)] = 1/2, the return's median when its spread is large against 1, its mean when small."""
    x = returns - median
    return (F.softplus(x) - 0.5 * x).mean()


class BPO(OnPolicyAgent):
    name = "bpo"
    Config = BPOConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py), as PPO does

    def __init__(self, observation_space, action_space, config: BPOConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)  # normalisers (OnPolicyAgent)
        c = self.config
        if c.normalize_advantages:
            raise ValueError(
                "bpo: normalize_advantages must be false: BPO's target ratio and weights are in the return's units, "
                "as its temperature is (use scale_rewards to rescale the rewards instead)"
            )
        if c.clip_range >= 1.0:  # above 0 as every clip range (rl_suite.config.setting); BPO's target ratio needs < 1
            raise ValueError(f"bpo: clip_range must be below 1, got {c.clip_range}")
        self.build_policy(c.init_log_std)  # actor, critic, scaler; make_buffer, act, export (OnPolicyAgent)
        self.median = mlp(self.critic_obs_dim, c.hidden, 1, c.activation, out_gain=1.0)  # u(s), beside the critic
        self.register({"actor": self.actor, "median": self.median}, torch.optim.Adam, lr=c.lr, eps=1e-5, fused=True)

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        samples = self.policy_samples(buffer.data)  # 2. log pi_old, V, GAE returns
        if c.lr_schedule == "linear":
            self.lr = c.lr * max(1.0 - progress, 0.0)
        metrics = train_epochs(  # 3.
            samples,
            c.epochs,
            c.minibatches,
            self.device,
            lambda mb: self.minibatch_step(self.loss(mb), adapt_to_kl=c.adaptive_kl),
        )
        self.finish_update(buffer)  # 4.
        metrics["lr"] = torch.tensor(self.lr)
        return metrics

    def loss(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        pi = self.actor(mb["obs"])
        log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
        ratio = log_ratio.exp()
        value = self.value(mb)
        median = self.median(mb["critic_obs"] if "critic_obs" in mb else mb["obs"]).squeeze(-1)
        returns = mb["returns"]
        baseline = median if c.use_median else value
        policy_loss = bpo_policy_loss(
            ratio, returns - value.detach(), returns - baseline.detach(), c.clip_range, c.temperature
        )
        value_loss = 0.5 * (value - returns).square().mean()
        u_loss = median_loss(returns, median)
        entropy = pi.entropy().mean()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()  # Schulman's low-variance estimator of KL(old || new)
            out_of_bounds = ((ratio - 1).abs() > c.clip_range).float().mean()
        return {
            "loss": policy_loss + c.vf_coef * value_loss + c.median_coef * u_loss - c.ent_coef * entropy,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "median_loss": u_loss,
            "entropy": entropy,
            "approx_kl": approx_kl,
            "out_of_bounds": out_of_bounds,
        }
