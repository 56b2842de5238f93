"""FixPO: fixup policy optimisation (Zentner et al., 2023, "Guaranteed Trust Region Optimization via Two-Phase KL
Penalization", arXiv 2312.05405): a KL penalty whose coefficient adapts, then a fixup phase that enforces the trust
region exactly.

Each iteration, for a rollout of T steps from N environments:

    1. collect (s_t, a_t, r_t, s'_t) with pi_old;
    2. in batched passes, log pi_old(a_t|s_t), V(s_t) and GAE advantages A_t, bootstrapping truncated episodes from
       their final observation s'_t (shared with PPO);
    3. primary phase: for each epoch and minibatch, minimise the unclipped surrogate with a KL penalty
           L = -E[rho A] + c_v (V(s) - R)^2 - c_e H[pi(.|s)] + sg(beta) E[KL(pi_old(.|s) || pi(.|s))],
       then take one Adam step on beta's own loss, beta (eps_KL - C_beta sg(max_s KL)), keeping beta >= 0: beta
       rises while the largest per-state KL of the minibatch exceeds eps_KL / C_beta and falls below it;
    4. fixup phase, after every epoch (``fixup_every_epoch``; else after the last): pass over the rollout in
       ``fixup_minibatches`` slices, and on each slice where any state's KL exceeds eps_KL take one gradient step
       on sg(beta) E[KL] alone (then beta's step, which raises it), until a whole pass finds no state over eps_KL.
       After the update, every state of the rollout satisfies KL(pi_old || pi) <= eps_KL;
    5. merge the rollout's observations into the running observation normaliser.

The KL is analytic (Gaussian or categorical), per state. FixPO asks of the policy class only an exact KL, which a flow
policy does not have; ``policy: flow`` trains PolicyFlow's policy instead (``NoisyFlowPolicy``: a = phi(z; s) + n,
Gaussian n), whose KL given the flow's noise z is analytic and, averaged over z, bounds the KL of its actions from
above. The bound is then enforced at every (s, z) of the rollout: a sampled version of the guarantee, since the action
KL at s is bounded by the mean over all z, of which the rollout holds one. The paper's text could not be read; the loss,
beta's rule, the fixup's stopping test and the defaults follow the authors' released code
(github.com/uscresl/stabilized-rl, ``src/fixpo_tianshou.py``; MuJoCo settings in ``exps_tianshou.py``: eps_KL 0.5,
C_beta 3, beta from 1 by Adam at 0.01). Their loop has no cap; here ``max_fixup_steps`` bounds each update's fixup,
warns when reached and counts it (``fixup_capped``), so that a run never hangs. The share of gradient steps spent in the
fixup (the paper: under 5%) is logged per update (``fixup_fraction``) and over the run (``run_fixup_fraction``).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import gymnasium as gym
import torch
from torch import nn

from rl_suite.buffers import RolloutBuffer
from rl_suite.config import setting
from rl_suite.deploy.inference import FlowInference
from rl_suite.networks import NoisyFlowPolicy
from rl_suite.onpolicy import OnPolicyAgent, OnPolicyConfig, normalized, train_epochs, value_loss
from rl_suite.optim import gradient_step


@dataclasses.dataclass(frozen=True)
class FixPOConfig(OnPolicyConfig):
    """FixPO's settings: those of every on-policy agent (``OnPolicyConfig``: rollout, epochs, Adam's ``lr``, GAE,
    networks, normalisers; ``clip_range`` is not used, the surrogate is unclipped) and these."""

    kl_bound: float = setting(0.5, above=0)
    """eps_KL: the trust region, KL(pi_old(.|s) || pi(.|s)) <= eps_KL at every state of the rollout (the authors'
    MuJoCo 0.5)."""
    kl_target_coef: float = setting(3.0, at_least=1)
    """C_beta: beta's rule steers the primary phase's largest KL towards eps_KL / C_beta, inside the bound, so that
    the fixup has little to do (the authors' 3)."""
    init_beta: float = setting(1.0, at_least=0)
    """beta at the start of training."""
    beta_lr: float = setting(0.01, above=0)
    """Adam's learning rate for beta."""
    fixup_minibatches: int = setting(4, at_least=1)
    """Slices of the rollout that the fixup phase checks and steps on (the authors': 8 slices of 1024 samples)."""
    fixup_every_epoch: bool = True
    """Run the fixup after every epoch (the authors' default), or only after the last."""
    max_fixup_steps: int = setting(10_000, at_least=1)
    """The most fixup gradient steps in one update; reaching it warns and leaves that update's bound unenforced."""
    lr_schedule: str = setting("constant", choices=("constant", "linear"))
    """``constant``, or ``linear`` decay of the learning rate to zero over the run's step budget (the authors')."""
    clip_value: float | None = setting(None, above=0)
    """Clip the value function's change around its old predictions by this much; ``None`` to not clip."""
    ent_coef: float = setting(0.0, at_least=0)
    """Weight of the entropy bonus."""
    init_log_std: float = 0.0
    """Initial log standard deviation of a Gaussian policy (continuous actions)."""
    policy: str = setting("gaussian", choices=("gaussian", "flow"))
    """``gaussian``: PPO's actor (a Gaussian; a categorical on discrete actions). ``flow``: a flow policy with
    Gaussian exploration around its end point (``NoisyFlowPolicy``, PolicyFlow's), whose KL is taken given the
    flow's noise, an upper bound of its actions' KL."""
    flow_steps: int = setting(10, at_least=1)
    """Euler steps of the flow policy's sampler (``policy: flow``)."""


class KLPenalty(nn.Module):
    """beta, the KL penalty's coefficient: a parameter of its own, stepped by its own Adam."""

    def __init__(self, init_beta: float):
        super().__init__()
        self.beta = nn.Parameter(torch.tensor(float(init_beta)))


class FixPO(OnPolicyAgent):
    name = "fixpo"
    Config = FixPOConfig

    def __init__(self, observation_space, action_space, config: FixPOConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)  # normalisers (OnPolicyAgent)
        c = self.config  # its settings' ranges are checked (rl_suite.config.setting)
        self.flow = c.policy == "flow"
        actor = None
        if self.flow:
            if not isinstance(action_space, gym.spaces.Box):
                raise ValueError(f"fixpo: policy 'flow' needs continuous actions (a Box), got {action_space}")
            if not -5.0 <= c.init_log_std <= 2.0:  # the noisy flow clamps its log-std there: outside, it never moves
                raise ValueError(f"fixpo: policy 'flow' needs init_log_std in [-5, 2], got {c.init_log_std}")
            obs_dim, act_dim = observation_space.shape[0], action_space.shape[0]
            actor = NoisyFlowPolicy(obs_dim, act_dim, c.hidden, c.activation, c.init_log_std, c.flow_steps)
            self.policy_conditions = ("flow_noise",)  # z, drawn when acting and kept in the rollout
        self.build_policy(c.init_log_std, actor)  # actor, critic, scaler; make_buffer, act, export (OnPolicyAgent)
        self.register({"actor": self.actor}, torch.optim.Adam, lr=c.lr, eps=1e-5, fused=True)
        self.penalty = KLPenalty(c.init_beta).to(self.device)
        self.modules["penalty"] = self.penalty
        self.beta_optimizer = torch.optim.Adam(self.penalty.parameters(), lr=c.beta_lr)
        self.optimizers["beta_optimizer"] = self.beta_optimizer
        self.behaviour = copy.deepcopy(self.actor).requires_grad_(False)  # pi_old, the policy that collected
        self.primary_steps = self.fixup_steps = self.fixup_capped = 0  # over the run, for run_fixup_fraction

    def rollout_spec(self) -> dict:
        spec = super().rollout_spec()
        if self.flow:
            spec["flow_noise"] = (tuple(self.action_space.shape), torch.float32)
        return spec

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if not self.flow:
            return super().act(obs, deterministic)
        obs = self.normalizer(obs)
        shape = (obs.shape[0], self.action_space.shape[0])
        if deterministic:  # the flow from zero noise, without the exploration noise, as PolicyFlow evaluates
            return self.scaler(self.actor.flow.sample(obs, torch.zeros(shape, device=self.device))), {}
        z = torch.randn(shape, device=self.device)
        action = self.actor(obs, z).sample()
        return self.scaler(action), {"policy_action": action, "flow_noise": z}

    def inference_policy(self):
        if not self.flow:
            return super().inference_policy()
        return FlowInference(self.observation_space, self.action_space, self.normalizer, self.actor.flow, self.scaler)

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        samples = self.policy_samples(buffer.data)  # 2.
        self.behaviour.load_state_dict(self.actor.state_dict())
        if c.lr_schedule == "linear":
            self.lr = c.lr * max(1.0 - progress, 0.0)
        totals: dict[str, torch.Tensor] = {}
        primary = fixup = 0
        for epoch in range(c.epochs):
            metrics = train_epochs(samples, 1, c.minibatches, self.device, self._primary_step)  # 3.
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value / c.epochs
            primary += c.minibatches
            if c.fixup_every_epoch or epoch == c.epochs - 1:
                fixup += self._fixup(samples)  # 4.
        self.primary_steps += primary
        self.fixup_steps += fixup
        with torch.no_grad():
            totals["kl_max"] = self._kl(samples).max()  # <= kl_bound unless the fixup was capped
        self.finish_update(buffer)  # 5.
        totals["beta"] = self.penalty.beta.detach().clone()
        totals["fixup_steps"] = torch.tensor(float(fixup))
        totals["fixup_fraction"] = torch.tensor(fixup / (fixup + primary))
        totals["fixup_capped"] = torch.tensor(float(self.fixup_capped))  # updates whose fixup hit the cap, so far
        totals["run_fixup_fraction"] = torch.tensor(self.fixup_steps / (self.fixup_steps + self.primary_steps))
        totals["lr"] = torch.tensor(self.lr)
        return totals

    def _kl(self, samples: dict[str, torch.Tensor], pi=None) -> torch.Tensor:
        """KL(pi_old(.|s) || pi(.|s)) per sample (a flow policy's given its noise z), differentiable in the current
        policy (``pi``, its distributions at the samples, if already computed)."""
        with torch.no_grad():
            old = self.policy(samples, self.behaviour)
        return old.kl(self.policy(samples) if pi is None else pi)

    def _step_beta(self, kl_max: torch.Tensor) -> None:
        """One Adam step on beta (eps_KL - C_beta sg(max KL)), whose gradient in beta is its bracket; then beta >= 0."""
        c = self.config
        self.penalty.beta.grad = (c.kl_bound - c.kl_target_coef * kl_max.detach()).reshape(())
        self.beta_optimizer.step()
        with torch.no_grad():
            self.penalty.beta.clamp_(min=0.0)

    def _primary_step(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        losses = self.loss(mb)
        metrics = self.minibatch_step(losses)
        if metrics is not None:
            self._step_beta(losses["minibatch_kl_max"])
        return metrics

    def _fixup(self, samples: dict[str, torch.Tensor]) -> int:
        """Gradient steps on sg(beta) E[KL] over the slices with a state past the bound, until a whole pass has none.
        The slices cover every sample, however the rollout divides. A host sync per slice: whether to step on a slice
        is decided by its KL just before, as the authors' fixup phase does (deciding a whole pass from one read at its
        start took 3-9% more steps on Pendulum, and no fewer passes). Returns the steps taken."""
        c, steps = self.config, 0
        inputs = {name: samples[name] for name in ("obs", *self.policy_conditions)}
        size = inputs["obs"].shape[0]
        while True:
            satisfied = True
            for ids in torch.randperm(size, device=self.device).tensor_split(c.fixup_minibatches):
                kl = self._kl({name: value[ids] for name, value in inputs.items()})
                if kl.max().item() <= c.kl_bound:
                    continue
                satisfied = False
                if steps >= c.max_fixup_steps:
                    self.fixup_capped += 1
                    warnings.warn(
                        f"fixpo: the fixup phase reached max_fixup_steps ({c.max_fixup_steps}) with a KL of "
                        f"{kl.max().item():.3g} > kl_bound {c.kl_bound}; this update's trust region is not enforced",
                        stacklevel=2,
                    )
                    return steps
                loss = self.penalty.beta.detach() * kl.mean()
                gradient_step(self.optimizer, loss, self.parameters, c.max_grad_norm, lr=self.lr)
                self._step_beta(kl.max())
                steps += 1
            if satisfied:
                return steps

    def loss(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        pi = self.policy(mb)
        log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
        ratio = log_ratio.exp()
        advantages = normalized(mb["advantages"]) if c.normalize_advantages else mb["advantages"]
        policy_loss = -(ratio * advantages).mean()
        kl = self._kl(mb, pi)
        kl_penalty = self.penalty.beta.detach() * kl.mean()
        v_loss = value_loss(self.value(mb), mb["returns"], mb["value"], c.clip_value)
        entropy = pi.entropy().mean()
        return {
            "loss": policy_loss + kl_penalty + c.vf_coef * v_loss - c.ent_coef * entropy,
            "policy_loss": policy_loss,
            "kl_penalty": kl_penalty,
            "value_loss": v_loss,
            "entropy": entropy,
            "kl": kl.mean().detach(),
            "minibatch_kl_max": kl.max().detach(),
        }

    def counters(self):
        counts = {"primary_steps": self.primary_steps, "fixup_steps": self.fixup_steps}
        return {**super().counters(), **counts, "fixup_capped": self.fixup_capped}

    def load_counters(self, counters) -> None:
        super().load_counters(counters)
        self.primary_steps, self.fixup_steps = counters["primary_steps"], counters["fixup_steps"]
        self.fixup_capped = counters["fixup_capped"]
