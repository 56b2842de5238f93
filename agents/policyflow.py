"""PolicyFlow (Yang, Liu and Chen, ICLR 2026): PPO with a continuous-normalising-flow policy, without likelihoods
along the flow.

The policy acts with a = phi(z; s) + n: the flow carries noise z ~ N(0, I) to phi(z; s) (Euler steps of the shared
``FlowPolicy``), and a Gaussian n ~ N(0, diag sigma^2) with a learned, state-independent sigma explores around it.
Given z, the action is Gaussian around phi(z; s), so the importance ratio of a new policy to the behaviour policy
(hats) is a ratio of Gaussians in the displacement delta = phi(z; s) - phi^(z; s) of the flow's end point:

    rho = N(a - phi^; delta, sigma^2) / N(a - phi^; 0, sigma^^2)

PolicyFlow approximates delta by the change of the velocity field at one point of the straight path between z and
phi^, drawn per transition and minibatch from the sampler's grid (``ratio="interpolation"``):

    x = tau z + (1 - tau) phi^,   delta ~ -(v(s, x, tau) - v^(s, x, tau))

(the shared flow runs from tau = 1, noise, to tau = 0, action, so its velocity points from action to noise, hence
the sign). ``ratio="full_path"`` instead integrates the current flow from the stored z, for the exact delta, with
backpropagation through every step: what PolicyFlow avoids, kept to compare against.

The Brownian regulariser (weight ``brownian_coef``; 0 turns it off) pulls the velocity towards the negative score of
the behaviour flow, an implicit entropy bonus: in this direction of time, mean((tau v + x + (1 - tau) v^)^2). An
explicit Gaussian entropy bonus on sigma (``entropy_coef``) completes the objective:

    maximise E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)] - brownian_coef R_B + entropy_coef H[N(0, sigma^2)]
             - c_v (V(s) - R)^2

Advantages, reward scaling and the epoch loop are shared with PPO and FPO; the learning rate adapts to a target KL
of the Gaussian part (rsl_rl's rule; the paper's text, as far as it could be read, does not say how its rate moves).
``zero_init`` initialises the velocity network as the paper does (Sec. 5.4): Glorot weights, the last layer zeroed.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import gymnasium as gym
import torch
from torch import nn

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
class PolicyFlowConfig(OnPolicyConfig):
    """PolicyFlow's settings: those of every on-policy agent (``OnPolicyConfig``: rollout, epochs, GAE,
    ``clip_range``, networks, normalisers), some defaults changed, and its own."""

    epochs: int = 5
    """Passes over each rollout."""
    lr: float = 2e-4
    """Initial AdamW learning rate."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this; 0 for none."""
    activation: str = "silu"
    """Activation of the hidden layers."""
    target_kl: float | None = setting(0.01, above=0)
    """Adapt the learning rate towards this KL of the Gaussian part per minibatch; ``None`` keeps it fixed."""
    ratio: str = setting("interpolation", choices=("interpolation", "full_path"))
    """``interpolation`` (PolicyFlow's velocity change along the straight path) or ``full_path`` (the exact end-point
    displacement, integrating the flow with backpropagation)."""
    brownian_coef: float = setting(0.25, at_least=0)
    """Weight of the Brownian regulariser; 0 turns it off."""
    entropy_coef: float = setting(0.001, at_least=0)
    """Weight of the Gaussian exploration noise's entropy bonus."""
    init_log_std: float = setting(0.0, at_least=-5, at_most=2)
    """Initial log standard deviation of the exploration noise (in the [-1, 1] action space), within the [-5, 2] that
    it is clamped to."""
    flow_steps: int = setting(10, at_least=1)
    """Euler steps of the sampler."""
    time_embed_dim: int = setting(8, at_least=0)
    """Width of the sinusoidal time embedding (even; 0 for none)."""
    output_scale: float = setting(0.25, above=0)
    """Scale of the velocity network's output."""
    zero_init: bool = False
    """Initialise the velocity network as the paper does (Glorot weights, last layer zeroed: the first flow is the
    identity) rather than orthogonally (``FlowPolicy``)."""


class PolicyFlow(OnPolicyAgent):
    name = "policyflow"
    Config = PolicyFlowConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config=None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)  # normalisers (OnPolicyAgent)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        if c.ratio not in ("interpolation", "full_path"):
            raise ValueError(f"unknown ratio {c.ratio!r}; choose 'interpolation' or 'full_path'")
        self.actor = FlowPolicy(
            obs_dim, act_dim, c.hidden, c.activation, c.flow_steps, c.time_embed_dim, c.output_scale, c.zero_init
        )
        self.noise = nn.Module()
        self.noise.log_std = nn.Parameter(torch.full((act_dim,), float(c.init_log_std)))
        self.critic = mlp(self.critic_obs_dim, c.hidden, 1, c.activation, out_gain=1.0)
        self.scaler = ActionScaler(action_space, c.action_bounds)
        self.register({"actor": self.actor, "noise": self.noise}, torch.optim.AdamW, lr=c.lr, weight_decay=1e-5)
        self.behaviour = copy.deepcopy(self.actor).requires_grad_(False)  # v^: the flow that collected the rollout

    def log_std(self) -> torch.Tensor:
        return self.noise.log_std.clamp(-5.0, 2.0)

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> RolloutBuffer:
        check_minibatches(self.name, self.config.minibatches, self.config.n_steps, num_envs)
        a = self.action_space.shape
        extras = {
            "policy_action": (a, torch.float32),  # phi(z) + n, before clipping to the bounds
            "flow_noise": (a, torch.float32),  # z
            "flow_action": (a, torch.float32),  # phi^(z)
            "log_prob": ((), torch.float32),  # log N(n; 0, sigma^^2)
            **self.critic_fields(),
        }
        spec = transition_spec(self.observation_space.shape, a, torch.float32, extras)
        return RolloutBuffer(self.config.n_steps, num_envs, spec, self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        obs = self.normalizer(obs)
        shape = (obs.shape[0], self.action_space.shape[0])
        if deterministic:
            return self.scaler(self.actor.sample(obs, torch.zeros(shape, device=self.device))), {}
        z = torch.randn(shape, device=self.device)
        flow_action = self.actor.sample(obs, z)
        n = torch.randn_like(flow_action) * self.log_std().exp()
        extras = {
            "policy_action": flow_action + n,
            "flow_noise": z,
            "flow_action": flow_action,
            "log_prob": gaussian_log_prob(n, torch.zeros_like(n), self.log_std()),
        }
        return self.scaler(flow_action + n), extras

    def inference_policy(self) -> FlowInference:
        """The flow sampler unrolled: its Euler steps from zero noise (no exploration noise), then scaling."""
        return FlowInference(self.observation_space, self.action_space, self.normalizer, self.actor, self.scaler)

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, d = self.config, buffer.data
        self.behaviour.load_state_dict(self.actor.state_dict())
        obs, _, advantages, returns, critic_samples = self.rollout_targets(d)
        names = ("policy_action", "flow_noise", "flow_action", "log_prob")
        samples = {"obs": obs, "advantages": advantages, "returns": returns, **{k: d[k] for k in names}}
        samples = {key: value.flatten(0, 1) for key, value in samples.items()} | critic_samples
        metrics = train_epochs(
            samples, c.epochs, c.minibatches, self.device, lambda mb: self.minibatch_step(self.loss(mb), c.target_kl)
        )
        self.finish_update(buffer)
        metrics["lr"] = torch.tensor(self.lr)
        return metrics

    def displacement(self, mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The estimated change ``delta`` of the flow's end point for the stored noise, and the Brownian
        regulariser (zero for ``full_path``)."""
        obs, z, behaviour_action = mb["obs"], mb["flow_noise"], mb["flow_action"]
        if self.config.ratio == "full_path":
            return self.actor.sample(obs, z) - behaviour_action, torch.zeros((), device=self.device)
        # One time per transition, from the sampler's grid (the paper's default): the times at which it evaluates the
        # velocity, 1 down to 1 / flow_steps. Not tau = 0, where x is the behaviour action and the Brownian term
        # (tau v + ...)^2 does not depend on v.
        grid = self.actor.schedule()[:-1]
        tau = grid[torch.randint(0, grid.shape[0], (z.shape[0], 1), device=self.device)]
        x = tau * z + (1.0 - tau) * behaviour_action
        v = self.actor.velocity(obs, x, tau)
        with torch.no_grad():
            v_behaviour = self.behaviour.velocity(obs, x, tau)
        brownian = (tau * v + x + (1.0 - tau) * v_behaviour).square().mean()
        return -(v - v_behaviour), brownian

    def loss(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        delta, brownian = self.displacement(mb)
        n = mb["policy_action"] - mb["flow_action"]
        log_std = self.log_std()
        log_ratio = gaussian_log_prob(n, delta, log_std) - mb["log_prob"]
        ratio = log_ratio.exp()
        advantages = normalized(mb["advantages"]) if c.normalize_advantages else mb["advantages"]
        policy_loss = clipped_surrogate(ratio, advantages, c.clip_range)
        entropy = (log_std + 0.5 * math.log(2 * math.pi * math.e)).sum()
        value_loss = 0.5 * (self.value(mb) - mb["returns"]).square().mean()
        loss = policy_loss + c.brownian_coef * brownian - c.entropy_coef * entropy + c.vf_coef * value_loss
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).mean()
        return {
            "loss": loss,
            "policy_loss": policy_loss,
            "brownian": brownian,
            "entropy": entropy,
            "value_loss": value_loss,
            "approx_kl": approx_kl,
            "ratio": ratio.mean(),
        }


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    z = (x - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
