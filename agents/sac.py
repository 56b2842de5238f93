"""SAC: soft actor-critic with automatic entropy tuning (Haarnoja et al., 2018), for continuous actions, with two
seed papers' critics as options: DSAC-T's Gaussian return distributions (``critic="dsac"``) and annealed
Q-learning's expectile loss (``expectile``).

Each iteration collects ``steps_per_iteration`` batched steps from N environments into a replay ring buffer (uniform
random actions during the first ``learning_starts`` env steps), then makes ``updates_per_transition`` gradient
updates per collected transition (or ``updates_per_env_step`` per batched step). Each update, on a minibatch of
n-step transitions (s, a, R, s', d) with d = gamma^m (1 - done):

    critics:  y = R + d (min_j Q'_j(s', a') - alpha log pi(a'|s')),  a' ~ pi(.|s');  minimise sum_j (Q_j(s, a) - y)^2
    actor:    minimise alpha log pi(a|s) - min_j Q_j(s, a),  a ~ pi(.|s) reparameterised through tanh
    alpha:    minimise -log alpha (log pi(a|s) + H_target)
    targets:  Q'_j <- (1 - tau) Q'_j + tau Q_j

For robots (``critic_observation``), the critics take the env's privileged observation where s stands above (and at
s'), while the actor keeps the policy's; ``critic_layer_norm`` layer-normalises the critics' hidden layers.

DSAC-T (Duan et al., "DSAC-T: Distributional Soft Actor-Critic with Three Refinements", arXiv 2310.05858; the
constants from its authors' code, github.com/Jingliang-Duan/DSAC-v2, dsac.py): each critic is a Gaussian return,
mean Q_j and standard deviation sigma_j = softplus(.). With y_q = R + d (min_j Q'_j(s', a') - alpha log pi(a'|s'))
(the expected target), y_z the same with a sampled return Z' ~ N(Q'_k, sigma'_k), k the twin of lower mean, the
sample's noise clipped to +-3, and y_b = Q_j + clip(y_z - Q_j, +-dsac_clip * m_j) (m_j a running mean of sigma_j: the
bound that keeps the variance in range), each critic's gradients are the Gaussian log-likelihood's, scaled by
(m_j^2 + 0.1): dQ_j = -(y_q - Q_j) / (sigma_j^2 + 0.1), dsigma_j = -((Q_j - y_b)^2 - sigma_j^2) / (sigma_j^3 + 0.1).
The actor maximises min_j Q_j. (DSAC-T also keeps a target policy and updates the actor every second step; here the
target actions come from the current policy, as SAC's do.)

Annealed Q-learning (Omura et al., ICML 2025, arXiv 2506.05968): the critics' squared error becomes an expectile
loss |tau - 1(y < Q_j)| (y - Q_j)^2 (IQL's), tau annealed linearly from ``expectile`` (the paper's: 0.9) to 0.5 (SAC's
own loss), so that learning starts near the Bellman optimality operator and ends at the Bellman operator.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl_suite.buffers import ReplayBuffer
from rl_suite.config import setting
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ACTIVATIONS, ActionScaler, RunningNorm, TanhGaussianPolicy, TwinCritic
from rl_suite.offpolicy import OffPolicyAgent, OffPolicyConfig
from rl_suite.optim import (
    annealed_expectile,
    expectile_weights,
    finite_or_warn,
    gradient_step,
    polyak_update,
)

CRITICS = ("twin", "dsac")
DSAC_EPS = 0.1  # DSAC-T's constant in the gradients' denominators and the scale (its code's "bias")
DSAC_NOISE_CLIP = 3.0  # the sampled target return's noise, in standard deviations


@dataclasses.dataclass(frozen=True)
class SACConfig(OffPolicyConfig):  # the replay settings: rl_suite/offpolicy.py
    lr: float = setting(3e-4, above=0)
    """Adam learning rate of the actor, the critics and the temperature."""
    hidden: tuple[int, ...] = setting((256, 256), at_least=1)
    """Hidden layer widths of the actor and of each critic."""
    activation: str = setting("relu", choices=tuple(ACTIVATIONS))
    """Activation of the hidden layers."""
    init_alpha: float = setting(1.0, above=0)
    """Initial entropy temperature."""
    autotune_alpha: bool = True
    """Tune the temperature towards ``target_entropy``; if false, alpha stays at ``init_alpha``."""
    target_entropy: float | None = None
    """Entropy target; ``None`` for -dim(A)."""
    normalize_obs: bool = False
    """Normalise observations with running statistics kept in the policy (and the critic's own, with
    ``critic_observation``)."""
    critic_observation: bool = False
    """Asymmetric actor-critic: the critics see the env's privileged observation (``info["critic_obs"]``, stored in
    the replay buffer beside the policy's) instead of the policy's. Needs an env that offers one
    (``critic_observation_space``); the exported policy is unchanged."""
    critic_layer_norm: bool = False
    """Layer normalisation after each hidden layer of the critics (FastTD3's and DroQ's), for many updates per
    transition."""
    critic: str = setting("twin", choices=CRITICS)
    """``"twin"``: SAC's twin Q-values. ``"dsac"``: DSAC-T's twin Gaussian return distributions (this file's
    docstring)."""
    dsac_clip: float = setting(3.0, above=0)
    """DSAC-T's bound on the sampled target's distance from the current mean, in running mean standard deviations."""
    expectile: float = setting(0.5, at_least=0.5, below=1)
    """Annealed Q-learning: the critics' expectile at the start, annealed linearly to 0.5; 0.5 is SAC's squared loss
    throughout. The paper's: 0.9."""
    expectile_anneal_steps: int = setting(0, at_least=0)
    """Env steps over which the expectile reaches 0.5; 0 for the run's whole step budget."""


class SAC(OffPolicyAgent):
    name = "sac"
    Config = SACConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config: SACConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        self.normalizer = RunningNorm(observation_space.shape) if c.normalize_obs else nn.Identity()
        self.critic_observation_space = self.privileged_critic_space()
        self.critic_normalizer = self.normalizer  # the critics' input: the policy's observation, or its own
        if self.critic_observation_space is not None:
            shape = self.critic_observation_space.shape
            self.critic_normalizer = RunningNorm(shape) if c.normalize_obs else nn.Identity()
        self.actor = TanhGaussianPolicy(obs_dim, act_dim, c.hidden, c.activation)
        if c.critic == "dsac" and c.expectile != 0.5:  # each setting's own range is checked (rl_suite.config.setting)
            raise ValueError("the expectile loss applies to the twin critics' squared error, not to critic='dsac'")
        critic_dim = (self.critic_observation_space or observation_space).shape[0]
        atoms = 2 if c.critic == "dsac" else 1  # DSAC's critics output a mean and a raw standard deviation each
        self.critic = TwinCritic(critic_dim, act_dim, c.hidden, c.activation, atoms, c.critic_layer_norm)
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
        if self.critic_observation_space is not None:
            self.modules["critic_normalizer"] = self.critic_normalizer
        if c.critic == "dsac":  # each twin's running mean standard deviation m_j; -1 until the first batch sets it
            self.dsac_sigma = nn.Module()
            self.dsac_sigma.register_buffer("running", torch.full((2,), -1.0))
            self.modules["dsac_sigma"] = self.dsac_sigma
        self.expectile = c.expectile
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

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if deterministic:
            return self.scaler(self.actor(self.normalizer(obs)).mode()), {}
        if self.warming_up():
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
        if self.warming_up() or not buffer.can_sample():
            return {}
        if c.normalize_obs:  # learn the statistics from the newest observations
            self.normalizer.update(buffer.recent("obs", c.steps_per_iteration))
            if self.critic_observation_space is not None:
                self.critic_normalizer.update(buffer.recent("critic_obs", c.steps_per_iteration))
        updates = self.updates_owed(buffer)
        if c.expectile != 0.5:  # annealed Q-learning's schedule, in TensorBoard as expectile
            self.expectile = annealed_expectile(c.expectile, c.expectile_anneal_steps, progress, self.env_steps_seen)
        totals = {}
        for _ in range(updates):
            losses = self._update_once(buffer.sample(c.batch_size))
            for key, value in losses.items():
                totals[key] = totals.get(key, 0.0) + value
        metrics = {key: value / max(updates, 1) for key, value in totals.items()}
        return {**metrics, "expectile": torch.tensor(self.expectile)} if metrics and c.expectile != 0.5 else metrics

    def _update_once(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        alpha = self.temperature.log_alpha.exp().detach()
        obs, next_obs = self.normalizer(batch["obs"]), self.normalizer(batch["next_obs"])
        if self.critic_observation_space is None:
            critic_obs, next_critic_obs = obs, next_obs
        else:
            critic_obs = self.critic_normalizer(batch["critic_obs"])
            next_critic_obs = self.critic_normalizer(batch["next_critic_obs"])
        action = self.scaler.unscale(batch["actions"])

        # One actor pass samples both the next actions (for the targets) and fresh actions at s (for the actor).
        both_actions, both_log_probs = self.actor(torch.cat((next_obs, obs))).rsample_with_log_prob()
        next_action, new_action = both_actions.detach().chunk(2)[0], both_actions.chunk(2)[1]
        next_log_prob, log_prob = both_log_probs.detach().chunk(2)[0], both_log_probs.chunk(2)[1]

        # Critics: soft Bellman targets from the target critics.
        dsac = c.critic == "dsac"
        with torch.no_grad():
            next_out = self.critic_target(next_critic_obs, next_action)
            next_q = (next_out[..., 0] if dsac else next_out).min(0).values
            target = batch["rewards"] + batch["discount"] * (next_q - alpha * next_log_prob)
        out = self.critic(critic_obs, action)
        if dsac:
            critic_loss = self._dsac_loss(out, target, self._sampled_target(next_out, batch, alpha * next_log_prob))
        else:
            error = target - out
            critic_loss = 0.5 * (expectile_weights(error, self.expectile) * error.square()).sum(0).mean()

        # Actor: maximise the soft value of its own reparameterised actions, through frozen critics, so that one
        # backward pass serves all three losses.
        new_q = self.critic(critic_obs, new_action, frozen=True)
        actor_loss = (alpha * log_prob - (new_q[..., 0] if dsac else new_q).min(0).values).mean()
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
            **({"return_std": self.dsac_sigma.running.mean()} if dsac else {}),  # DSAC's running mean sigma
        }

    @torch.no_grad()
    def _sampled_target(self, next_out: torch.Tensor, batch: dict, alpha_log_prob: torch.Tensor) -> torch.Tensor:
        """DSAC-T's y_z: a return sampled from the target twin of lower mean, its noise clipped, made a soft target."""
        mean, std = next_out[..., 0], F.softplus(next_out[..., 1])
        lower = mean.argmin(0, keepdim=True)
        noise = torch.randn_like(alpha_log_prob).clamp(-DSAC_NOISE_CLIP, DSAC_NOISE_CLIP)
        sampled = (mean.gather(0, lower) + std.gather(0, lower) * noise).squeeze(0)
        return batch["rewards"] + batch["discount"] * (sampled - alpha_log_prob)

    def _dsac_loss(self, out: torch.Tensor, target: torch.Tensor, sampled_target: torch.Tensor) -> torch.Tensor:
        """A loss whose gradients are DSAC-T's (this file's docstring), for both twins: ``out`` ``[2, B, 2]``, the
        expected target y_q and the sampled y_z ``[B]``."""
        mean, std = out[..., 0], F.softplus(out[..., 1])
        mean_d, std_d = mean.detach(), std.detach()
        running = self.dsac_sigma.running
        batch_std = std_d.mean(1)
        running.copy_(torch.where(running < 0, batch_std, torch.lerp(running, batch_std, self.config.tau)))
        bound = (self.config.dsac_clip * running).unsqueeze(1)
        clipped = mean_d + (sampled_target - mean_d).clamp(-bound, bound)
        mean_term = -(target - mean_d) / (std_d.square() + DSAC_EPS) * mean
        std_term = -((mean_d - clipped).square() - std_d.square()) / (std_d.pow(3) + DSAC_EPS) * std
        return ((running.square() + DSAC_EPS).unsqueeze(1) * (mean_term + std_term)).mean(1).sum(0)
