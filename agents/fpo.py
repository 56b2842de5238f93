"""FPO: flow policy optimisation (McAllister et al., 2025), PPO's clipped objective for flow-matching policies.

A flow policy has no tractable likelihood, but its conditional flow-matching (CFM) loss bounds one: lowering the
loss of an action raises its likelihood. FPO uses the change of that loss as the ratio. Each iteration, for a
rollout of T steps from N environments:

    1. act: a_t = flow sample from noise x_1 ~ N(0, I) (optionally perturbed by exploration noise), and draw S pairs
       (eps_i, tau_i), storing them with the behaviour policy's losses l_old_i = CFM(a_t; eps_i, tau_i);
    2. advantages by GAE(gamma, lambda) from a value network, truncated episodes bootstrapped (shared with PPO);
    3. for each epoch and minibatch, recompute l_i under the current parameters on the same pairs, and
           rho = exp(mean_i l_old_i - mean_i l_i)                      (average_losses_before_exp, the default)
           rho_i = exp(clip(l_old_i - l_i, -log_ratio_clip, +log_ratio_clip))    (otherwise, one ratio per pair)
       then maximise E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)] - c_v (V(s) - R)^2, with eps small (0.05);
    4. merge the rollout's observations into the running observation normaliser.

Evaluation integrates the flow from zero noise: a deterministic action.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import torch

from rl_suite.buffers import RolloutBuffer, transition_spec
from rl_suite.config import setting
from rl_suite.deploy.inference import FlowInference
from rl_suite.networks import ActionScaler, FlowPolicy, mlp
from rl_suite.onpolicy import (
    OnPolicyAgent,
    OnPolicyConfig,
    check_minibatches,
    clipped_surrogate,
    normalized,
    train_epochs,
)


@dataclasses.dataclass(frozen=True)
class FPOConfig(OnPolicyConfig):
    """FPO's settings: those of every on-policy agent (``OnPolicyConfig``: rollout, epochs, Adam's ``lr``, GAE,
    networks, normalisers), two defaults changed, and the flow policy's own."""

    clip_range: float = 0.05
    """epsilon of the clipped surrogate; the authors use 0.05 and smaller, not PPO's 0.2."""
    activation: str = "silu"
    """Activation of the hidden layers."""
    samples_per_action: int = setting(8, at_least=1)
    """(noise, time) pairs drawn per action for the CFM losses."""
    average_losses_before_exp: bool = True
    """One ratio per action from the pairs' mean losses; otherwise one clamped ratio per pair."""
    log_ratio_clip: float = setting(2.0, above=0)
    """Per-pair ratios clamp ``l_old - l`` to +- this before the exponential."""
    loss_mode: str = setting("eps", choices=("eps", "u"))
    """CFM loss form: ``eps`` (noise error, FPO's default) or ``u`` (velocity error)."""
    discrete_times: bool = True
    """Draw the pairs' times from the sampler's Euler grid (as the authors do) rather than uniformly."""
    flow_steps: int = setting(10, at_least=1)
    """Euler steps of the sampler."""
    exploration_std: float = setting(0.0, at_least=0)
    """Gaussian noise added to sampled actions while training (in the [-1, 1] action space); 0 for none."""
    time_embed_dim: int = setting(8, at_least=0)
    """Width of the sinusoidal time embedding (even; 0 for none)."""
    output_scale: float = setting(0.25, above=0)
    """Scale of the velocity network's output."""


class FPO(OnPolicyAgent):
    name = "fpo"
    Config = FPOConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config: FPOConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)  # normalisers (OnPolicyAgent)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        self.actor = FlowPolicy(
            obs_dim, act_dim, c.hidden, c.activation, c.flow_steps, c.time_embed_dim, c.output_scale
        )
        self.critic = mlp(self.critic_obs_dim, c.hidden, 1, c.activation, out_gain=1.0)
        self.scaler = ActionScaler(action_space, c.action_bounds)
        self.register({"actor": self.actor}, torch.optim.Adam, lr=c.lr, eps=1e-5, fused=True)

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> RolloutBuffer:
        check_minibatches(self.name, self.config.minibatches, self.config.n_steps, num_envs)
        s, a = self.config.samples_per_action, self.action_space.shape[0]
        extras = {
            "policy_action": ((a,), torch.float32),  # before clipping to the bounds
            "cfm_eps": ((s, a), torch.float32),
            "cfm_t": ((s,), torch.float32),
            "cfm_loss": ((s,), torch.float32),
            **self.critic_fields(),
        }
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, torch.float32, extras)
        return RolloutBuffer(self.config.n_steps, num_envs, spec, self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        c, obs = self.config, self.normalizer(obs)
        n, a = obs.shape[0], self.action_space.shape[0]
        if deterministic:
            return self.scaler(self.actor.sample(obs, torch.zeros(n, a, device=self.device))), {}
        action = self.actor.sample(obs, torch.randn(n, a, device=self.device))
        if c.exploration_std > 0:
            action = action + c.exploration_std * torch.randn_like(action)
        eps, t = self.draw_pairs(n)
        loss = self.actor.cfm_loss(obs, action, eps, t, c.loss_mode)
        return self.scaler(action), {"policy_action": action, "cfm_eps": eps, "cfm_t": t, "cfm_loss": loss}

    def inference_policy(self) -> FlowInference:
        """The flow sampler unrolled: its Euler steps from zero noise, then scaling."""
        return FlowInference(self.observation_space, self.action_space, self.normalizer, self.actor, self.scaler)

    def draw_pairs(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``samples_per_action`` (noise, time) pairs for each of ``n`` actions: ``[n, S, A]`` and ``[n, S]``."""
        c, a = self.config, self.action_space.shape[0]
        eps = torch.randn(n, c.samples_per_action, a, device=self.device)
        if c.discrete_times:
            grid = self.actor.schedule()[:-1]  # the times at which the sampler evaluates the velocity
            if c.loss_mode == "eps":
                grid = grid[1:]  # at t = 1 the eps loss is identically 0 (x_1 = eps whatever the velocity)
            t = grid[torch.randint(0, grid.shape[0], (n, c.samples_per_action), device=self.device)]
        else:
            t = torch.rand(n, c.samples_per_action, device=self.device)
        return eps, t

    def ratio(self, old_loss: torch.Tensor, new_loss: torch.Tensor) -> torch.Tensor:
        """FPO's likelihood-ratio surrogate from the pairs' CFM losses ``[B, S]``: ``[B]`` or ``[B, S]``."""
        c = self.config
        if c.average_losses_before_exp:
            return torch.exp(old_loss.mean(-1) - new_loss.mean(-1))
        return torch.exp((old_loss - new_loss).clamp(-c.log_ratio_clip, c.log_ratio_clip))

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, d = self.config, buffer.data
        obs, _, advantages, returns, critic_samples = self.rollout_targets(d)
        samples = {
            "obs": obs.flatten(0, 1),
            "actions": d["policy_action"].flatten(0, 1),
            "eps": d["cfm_eps"].flatten(0, 1),
            "t": d["cfm_t"].flatten(0, 1),
            "old_loss": d["cfm_loss"].flatten(0, 1),
            "advantages": advantages.flatten(),
            "returns": returns.flatten(),
            **critic_samples,
        }
        metrics = train_epochs(
            samples, c.epochs, c.minibatches, self.device, lambda mb: self.minibatch_step(self.loss(mb))
        )
        self.finish_update(buffer)
        return metrics

    def loss(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        new_loss = self.actor.cfm_loss(mb["obs"], mb["actions"], mb["eps"], mb["t"], c.loss_mode)
        ratio = self.ratio(mb["old_loss"], new_loss)
        advantages = normalized(mb["advantages"]) if c.normalize_advantages else mb["advantages"]
        policy_loss = clipped_surrogate(ratio, advantages, c.clip_range)
        value_loss = 0.5 * (self.value(mb) - mb["returns"]).square().mean()
        with torch.no_grad():
            clip_fraction = ((ratio - 1).abs() > c.clip_range).float().mean()
        return {
            "loss": policy_loss + c.vf_coef * value_loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "ratio": ratio.detach().mean(),
            "clip_fraction": clip_fraction,
            "cfm_loss": new_loss.detach().mean(),
        }
