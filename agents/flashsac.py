"""FlashSAC: soft actor-critic made fast and stable for massively parallel simulation (Kim, Lee et al., 2026,
arXiv 2604.04539), for continuous actions.

Fast: many parallel environments feed a large replay buffer on the device, and large networks learn from large
batches with few gradient updates per env step (on a GPU simulator, 2 per batched step of 1,024 environments:
``updates_per_env_step``).

Stable: every norm in the networks is bounded, each piece a switch of the config (for ablations):

- ``residual``: inverted residual blocks, x + ReLU(BN(W2 ReLU(BN(W1 x)))), W1 widening ``expansion`` times;
- ``batch_norm``: batch normalisation before each nonlinearity of the blocks (the raw input is always batch
  normalised: that is the observation normaliser, saved with the policy);
- ``rms_norm``: RMS normalisation after the last block;
- ``weight_projection``: after every optimiser step each weight row is projected back to unit norm, and each
  normalisation's scale (with its shift, for BN) to norm sqrt(width);
- ``distributional``: categorical critics, ``atoms`` logits over a fixed support [v_min, v_max], trained by
  cross-entropy against the projected soft Bellman target, with ``reward_scaling`` dividing the rewards by a
  running scale of the return so that returns fit the support;
- ``max_grad_norm``: gradient-norm clipping (0, off, by default: the authors' code clips none).

Broad exploration: the entropy target of a Gaussian of standard deviation ``target_sigma`` in each action dimension,
H = |A| log(2 pi e sigma^2) / 2 (not SAC's -|A|), and each environment's exploration noise eps ~ N(0, I) held for k
steps, k drawn from a zeta distribution P(k) ~ k^-s truncated at ``noise_repeat_max``.

Each update, on a batch of n-step transitions (s, a, R, s', d), d = gamma^m (1 - terminated), R scaled:

    every actor_update_period updates:
      actor:    minimise alpha log pi(a|s) - min_j Q_j(s, a), a ~ pi(.|s) reparameterised; the critics frozen and
                with their running BN statistics
      alpha:    minimise alpha (H - H_target), H = -E log pi(a|s)
    critics:  the atoms R + d (z_i - alpha log pi(a'|s')), a' ~ pi(.|s'), weighted by the distribution of whichever
              target critic has the lower expected value, projected onto the support; minimise both critics'
              cross-entropy to it. (s, a) and (s', a') pass through the critics as one batch, so that the target's
              batch statistics are the online critics'
    targets:  Q'_j <- (1 - tau) Q'_j + tau Q_j, the parameters only

With ``critic_observation`` (robots), the critics take the env's privileged observation wherever s and s' enter them;
the actor keeps the policy's.

The paper's text beyond its abstract was not at hand: the layer order and the constants (widths 128 and 256, 2
blocks, expansion 4, 101 atoms on [-5, 5], BN momentum 0.01, alpha 0.01, sigma_target 0.15, zeta s = 2 up to 16,
tau 0.01, lr 3e-4 decayed by a cosine to 1.5e-4, actor updates every second critic update, the log-std map onto
[-10, 2], the reward scale max(std(G), max|G| / v_max)) come from its authors' project page and code
(github.com/Holiday-Robot/FlashSAC), read for facts, not copied. Their CPU-simulator settings are the defaults here.
Where this file differs from their code: each environment draws its own holding time for its noise (theirs: one for
all environments), and there is no torch.compile or mixed precision.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import gymnasium as gym
import torch
from torch import nn

from rl_suite.bounded_networks import OneMember, ResidualNet
from rl_suite.buffers import ReplayBuffer
from rl_suite.categorical import distributional_target
from rl_suite.config import setting
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ActionScaler, ReturnScale, TanhGaussian
from rl_suite.offpolicy import OffPolicyAgent, OffPolicyConfig
from rl_suite.optim import finite_or_warn, gradient_step, polyak_update

LOG_STD_MIN, LOG_STD_MAX = -10.0, 2.0


@dataclasses.dataclass(frozen=True)
class FlashSACConfig(OffPolicyConfig):  # the replay settings (rl_suite/offpolicy.py), with FlashSAC's defaults:
    batch_size: int = 512
    tau: float = 0.01
    learning_starts: int = 10_000
    # updates_per_transition 1 with one environment is the authors' CPU regime; their GPU regime, 2 updates per batched
    # step of 1,024 environments, is updates_per_env_step=2 (the gpu profile of agents/hyperparams/flashsac.yaml).
    lr: float = setting(3e-4, above=0)
    """Adam learning rate of the actor, the critics and the temperature at the start."""
    lr_final: float = setting(1.5e-4, at_least=0)
    """The learning rate at the end of the step budget, reached by a cosine decay."""
    actor_update_period: int = setting(2, at_least=1)
    """Critic updates per actor and temperature update."""
    actor_width: int = setting(128, at_least=1)
    """Width of the actor's residual stream."""
    actor_blocks: int = setting(2, at_least=0)
    """Inverted residual blocks of the actor."""
    critic_width: int = setting(256, at_least=1)
    """Width of each critic's residual stream."""
    critic_blocks: int = setting(2, at_least=0)
    """Inverted residual blocks of each critic."""
    expansion: int = setting(4, at_least=1)
    """How many times a block widens its stream inside."""
    residual: bool = True
    """Add each block's input to its output."""
    batch_norm: bool = True
    """Batch normalisation before each nonlinearity of the blocks."""
    rms_norm: bool = True
    """RMS normalisation after the last block."""
    weight_projection: bool = True
    """Project the weights (and the normalisations' scales) back to their norms after every optimiser step."""
    distributional: bool = True
    """Categorical critics over a fixed support; if false, scalar critics with a squared loss."""
    atoms: int = setting(101, at_least=2)
    """Atoms of the categorical critics' support."""
    v_min: float = -5.0
    """Lowest atom, in units of the scaled rewards' returns."""
    v_max: float = 5.0
    """Highest atom."""
    reward_scaling: bool = True
    """Divide the rewards by max(std(G), max|G| / v_max), G each environment's running discounted return."""
    max_grad_norm: float = setting(0.0, at_least=0)
    """Gradient-norm clip of each optimiser step; 0 for none."""
    init_alpha: float = setting(0.01, above=0)
    """Initial entropy temperature."""
    target_sigma: float = setting(0.15, above=0)
    """The entropy target is a Gaussian's of this standard deviation in each action dimension."""
    noise_repeat: bool = True
    """Hold each environment's exploration noise for a zeta-distributed number of steps; if false, fresh each step."""
    noise_repeat_zeta: float = setting(2.0, at_least=0)
    """Exponent s of the zeta distribution P(k) ~ k^-s of the holding times; 0 for uniform ones."""
    noise_repeat_max: int = setting(16, at_least=1)
    """Longest holding time."""
    critic_observation: bool = False
    """Asymmetric actor-critic: the critics see the env's privileged observation (``info["critic_obs"]``, stored in
    the replay buffer beside the policy's; their input batch normalisation normalises it) instead of the policy's.
    Needs an env that offers one (``critic_observation_space``); the exported policy is unchanged."""


def check_config(c: FlashSACConfig) -> None:
    """Refuse settings that make no sense together, naming them (each one's own range is checked on its own:
    ``rl_suite.config.setting``)."""
    problems = []
    if c.batch_size > c.buffer_size:
        problems.append(f"batch_size={c.batch_size} is larger than buffer_size={c.buffer_size}")
    if c.distributional and not c.v_min < c.v_max:
        problems.append(f"a distributional critic needs v_min < v_max, got {c.v_min} and {c.v_max}")
    if problems:
        raise ValueError("flashsac: " + "; ".join(problems))


# -- the networks (rl_suite/bounded_networks.py) and the reward scale ----------------------------------------------


def blocks(c: FlashSACConfig) -> dict:
    """The architecture switches, as ``ResidualNet`` takes them."""
    return dict(expansion=c.expansion, batch_norm=c.batch_norm, residual=c.residual, rms_norm=c.rms_norm)


class FlashActor(nn.Module):
    """The tanh-Gaussian policy: mean and log-std from one ``ResidualNet``, the log-std mapped softly onto [-10, 2]."""

    def __init__(self, obs_dim: int, act_dim: int, c: FlashSACConfig):
        super().__init__()
        self.body = OneMember(ResidualNet(1, obs_dim, 2 * act_dim, c.actor_width, c.actor_blocks, **blocks(c)))

    def forward(self, obs: torch.Tensor, training: bool | None = None) -> TanhGaussian:
        mean, raw = self.body(obs, training).chunk(2, dim=-1)
        return TanhGaussian(mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (1 + torch.tanh(raw)))

    def project(self) -> None:
        self.body.net.project()


class FlashCritics(nn.Module):
    """Two critics as one ensemble on ``cat(s, a)``: ``[2, B, atoms]`` logits, or ``[2, B]`` values when not
    distributional."""

    members = 2
    inputs_end_with_action = True  # so observation terms added at the end land mid-input (rl_suite.checkpoint)

    def __init__(self, obs_dim: int, act_dim: int, c: FlashSACConfig):
        super().__init__()
        self.distributional = c.distributional
        out = c.atoms if c.distributional else 1
        self.net = ResidualNet(self.members, obs_dim + act_dim, out, c.critic_width, c.critic_blocks, **blocks(c))

    def forward(self, obs, action, training: bool | None = None, frozen: bool = False) -> torch.Tensor:
        x = torch.cat((obs, action), -1)
        out = self.net(x.expand(self.members, *x.shape), training, frozen)
        return out if self.distributional else out.squeeze(-1)

    def project(self) -> None:
        self.net.project()


class FlashSAC(OffPolicyAgent):
    name = "flashsac"
    Config = FlashSACConfig
    action_space_types = (gym.spaces.Box,)

    def __init__(
        self, observation_space, action_space, config: FlashSACConfig | None = None, device="cpu", **overrides
    ):
        if isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            raise ValueError(
                f"flashsac acts in Box action spaces, got {action_space}: for discrete actions use ppo (or, for "
                "teams, mappo or qmix)"
            )
        super().__init__(observation_space, action_space, config, device, **overrides)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        check_config(c)
        self.critic_observation_space = self.privileged_critic_space()
        self.actor = FlashActor(obs_dim, act_dim, c)
        self.critic = FlashCritics((self.critic_observation_space or observation_space).shape[0], act_dim, c)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.temperature = nn.Module()
        self.temperature.log_alpha = nn.Parameter(torch.tensor(math.log(c.init_alpha)))
        self.reward_scale = ReturnScale(c.gamma, c.v_max)
        self.scaler = ActionScaler(action_space)
        self.modules = {
            "actor": self.actor,
            "critic": self.critic,
            "critic_target": self.critic_target,
            "temperature": self.temperature,
            "reward_scale": self.reward_scale,
            "scaler": self.scaler,
        }
        for module in self.modules.values():
            module.to(self.device)
        self.support = torch.linspace(c.v_min, c.v_max, c.atoms, device=self.device)
        self.optimizers = {
            "actor": torch.optim.Adam(self.actor.parameters(), lr=c.lr, fused=True),
            "critic": torch.optim.Adam(self.critic.parameters(), lr=c.lr, fused=True),
            "temperature": torch.optim.Adam([self.temperature.log_alpha], lr=c.lr, fused=True),
        }
        self.target_entropy = 0.5 * act_dim * math.log(2 * math.pi * math.e * c.target_sigma**2)
        # Holding times k = 1..noise_repeat_max of the exploration noise, P(k) ~ k^-s.
        holding = torch.arange(1, c.noise_repeat_max + 1, dtype=torch.float64, device=self.device)
        self.holding_probs = holding.pow(-c.noise_repeat_zeta).float()
        # Per-environment state, sized by make_buffer (or by the first act): checkpointed as counters.
        self.noise: torch.Tensor | None = None
        self.noise_steps_left: torch.Tensor | None = None
        self._draws: dict[str, torch.Tensor] | None = None  # exploration_noise's buffers, sized on the first step

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> ReplayBuffer:
        self._start_noise(num_envs)
        self.reward_scale.running = torch.zeros(num_envs, device=self.device)
        return super().make_buffer(num_envs, max_episode_steps)

    def _start_noise(self, num_envs: int) -> None:
        self.noise = torch.zeros(num_envs, *self.action_space.shape, device=self.device)
        self.noise_steps_left = torch.zeros(num_envs, dtype=torch.long, device=self.device)  # 0: draw afresh

    def _exploration_noise(self, num_envs: int) -> torch.Tensor:
        """Each environment's noise, redrawn (with a new holding time) where its holding time has run out, drawn
        into buffers kept between steps (the hot loop allocates nothing): the tensor returned is valid until the next
        call."""
        if self._draws is None or self._draws["fresh"].shape[0] != num_envs:
            self._draws = {
                "fresh": torch.empty(num_envs, *self.action_space.shape, device=self.device),
                "holding": torch.empty(num_envs, 1, dtype=torch.long, device=self.device),
                "expired": torch.empty(num_envs, 1, dtype=torch.bool, device=self.device),
            }
        fresh, holding, expired = self._draws["fresh"].normal_(), self._draws["holding"], self._draws["expired"]
        if not self.config.noise_repeat:
            return fresh
        if self.noise is None or self.noise.shape[0] != num_envs:
            self._start_noise(num_envs)
        torch.le(self.noise_steps_left.unsqueeze(-1), 0, out=expired)
        torch.multinomial(self.holding_probs.expand(num_envs, -1), 1, out=holding)  # a holding time of 1 + index
        torch.where(expired, fresh, self.noise, out=self.noise)
        # one step fewer left; where it expired, the new holding time less this step: the drawn index
        self.noise_steps_left.sub_(1)
        torch.where(expired.squeeze(-1), holding.squeeze(-1), self.noise_steps_left, out=self.noise_steps_left)
        return self.noise

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if deterministic:
            return self.scaler(self.actor(obs, training=False).mode()), {}
        if self.warming_up():
            action = torch.rand(obs.shape[0], *self.action_space.shape, device=self.device) * 2 - 1
        else:
            noise = self._exploration_noise(obs.shape[0])
            action, _ = self.actor(obs, training=False).rsample_with_log_prob(noise)
        self.env_steps_seen += obs.shape[0]
        return self.scaler(action), {}

    def inference_policy(self) -> MLPInference:
        """``tanh`` of the Gaussian's mean, then scaling; the input's batch normalisation, with its running
        statistics, is the observation normaliser inside the network."""
        spaces = self.observation_space, self.action_space
        return MLPInference(*spaces, nn.Identity(), self.actor.body, self.scaler, split=True, tanh=True)

    def update(self, buffer: ReplayBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        if c.reward_scaling and buffer.size > 0:  # every collected transition counts, the warm-up's too
            rows = {name: buffer.recent(name, c.steps_per_iteration).flip(0) for name in ("rewards", "terminated")}
            done = rows["terminated"] | buffer.recent("truncated", c.steps_per_iteration).flip(0)
            self.reward_scale.observe(rows["rewards"], done)
        if self.warming_up() or not buffer.can_sample():
            return {}
        lr = c.lr_final + (c.lr - c.lr_final) * 0.5 * (1 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))
        updates = self.updates_owed(buffer)
        totals, counts = {}, {}
        for _ in range(updates):
            for key, value in self._update_once(buffer.sample(c.batch_size), lr).items():
                totals[key], counts[key] = totals.get(key, 0.0) + value, counts.get(key, 0) + 1
        metrics = {key: value / counts[key] for key, value in totals.items()}  # the actor's over its own updates
        return {**metrics, "lr": torch.tensor(lr), "reward_scale": self.reward_scale()} if metrics else metrics

    def _update_once(self, batch: dict[str, torch.Tensor], lr: float) -> dict[str, torch.Tensor]:
        c = self.config
        obs, next_obs = batch["obs"], batch["next_obs"]
        critic_obs, next_critic_obs = batch.get("critic_obs", obs), batch.get("next_critic_obs", next_obs)
        action = self.scaler.unscale(batch["actions"])
        rewards = batch["rewards"] / self.reward_scale() if c.reward_scaling else batch["rewards"]
        size = obs.shape[0]
        metrics = {}

        if self.updates % c.actor_update_period == 0:
            # Actor and temperature first, the current and next observations in one batch (its BN statistics); the
            # critics frozen, with their running statistics.
            sampled, log_prob = self.actor(torch.cat((obs, next_obs)), training=True).rsample_with_log_prob()
            sampled, log_prob = sampled[:size], log_prob[:size]
            alpha = self.temperature.log_alpha.exp().detach()
            q = self._values(self.critic(critic_obs, sampled, training=False, frozen=True))
            actor_loss = (alpha * log_prob - q.min(0).values).mean()
            entropy = -log_prob.detach().mean()
            alpha_loss = self.temperature.log_alpha.exp() * (entropy - self.target_entropy)
            if not finite_or_warn(actor_loss + alpha_loss, "FlashSAC", skipped="this update"):
                self.skipped_updates += 1
                return {}
            gradient_step(self.optimizers["actor"], actor_loss, list(self.actor.parameters()), c.max_grad_norm, lr)
            gradient_step(self.optimizers["temperature"], alpha_loss, [self.temperature.log_alpha], 0.0, lr)
            if c.weight_projection:
                self.actor.project()
            metrics = {"actor_loss": actor_loss.detach(), "entropy": entropy, "alpha": alpha}

        # Critics: (s, a) and (s', a') as one batch through the online and the target critics alike.
        alpha = self.temperature.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = self.actor(next_obs, training=False).rsample_with_log_prob()
            both_obs, both_actions = torch.cat((critic_obs, next_critic_obs)), torch.cat((action, next_action))
            target_out = self.critic_target(both_obs, both_actions, training=True)[:, size:]
            if c.distributional:  # the atoms R + d (z - alpha log pi') = (R - d alpha log pi') + d z
                soft_rewards = rewards - batch["discount"] * alpha * next_log_prob
                target = distributional_target(
                    target_out.softmax(-1), soft_rewards, batch["discount"], self.support, "lower_mean"
                )
            else:
                target = rewards + batch["discount"] * (target_out.min(0).values - alpha * next_log_prob)
        out = self.critic(both_obs, both_actions, training=True)[:, :size]
        if c.distributional:
            critic_loss = -(target * out.log_softmax(-1)).sum(-1).mean()
        else:
            critic_loss = 0.5 * (out - target).square().mean()
        if not finite_or_warn(critic_loss, "FlashSAC", skipped="this update"):
            self.skipped_updates += 1
            return {}
        gradient_step(self.optimizers["critic"], critic_loss, list(self.critic.parameters()), c.max_grad_norm, lr)
        if c.weight_projection:
            self.critic.project()
        polyak_update(self.critic_target, self.critic, c.tau)
        self.updates += 1
        return {**metrics, "critic_loss": critic_loss.detach(), "q": self._values(out.detach()).mean()}

    def _values(self, out: torch.Tensor) -> torch.Tensor:
        """The critics' expected values ``[2, B]``: the mean of the support under each distribution."""
        return (out.softmax(-1) * self.support).sum(-1) if self.config.distributional else out

    def counters(self):
        return {
            **super().counters(),
            "noise": self.noise,
            "noise_steps_left": self.noise_steps_left,
            "discounted_return": self.reward_scale.running,
        }

    def load_counters(self, counters) -> None:
        counters = dict(counters)
        self.reward_scale.running = counters.pop("discounted_return")
        super().load_counters(counters)
