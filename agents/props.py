"""PROPS: proximal robust on-policy sampling (Corrado and Hanna, "On-Policy Policy Gradient Reinforcement Learning
Without On-Policy Sampling", arXiv 2311.08290), with PPO as the target's learner.

On-policy learning needs on-policy data, not on-policy sampling: PROPS keeps the last b target batches and collects
with a behaviour policy pi_phi adapted to raise the probability of actions that the kept data under-samples with
respect to the current target policy pi_theta, so that the aggregate stays close to pi_theta. Every m steps of
collection (``props_steps`` per environment), and every n (``n_steps``, a multiple of m):

    1. collect m steps with pi_phi into the history, which keeps the last b n steps (``buffer_batches`` = b);
    2. every n steps, the target's update: PPO (agents/ppo.py's loss and settings) on the whole history, with
       log pi_theta, values and GAE recomputed by the current target and critic (the ratio is to pi_theta at the
       start of the update: PROPS makes the data near enough to pi_theta's that no correction is made);
    3. the behaviour's update: phi <- theta, then minibatch steps on the history less its oldest m steps (they
       leave before the next target update) minimising
           E[max(r, clip(r, 1 - eps_P, 1 + eps_P))] + lambda KL(pi_phi || pi_theta),   r = pi_phi(a|s) / pi_theta(a|s)
       PPO's clipped objective with every advantage -1: lower the probability of the actions already held, at most
       to 1 - eps_P of theirs, and no further from pi_theta than the KL term allows; stopped once the approximate KL
       passes ``props_target_kl``.

Sampling error, as the paper measures it, every ``sampling_error_every`` target updates: a copy of pi_theta whose
hidden layers are frozen is fitted by maximum likelihood to the history's (s, a) (pi_D, the empirical policy), and
the error is the mean over the history of log pi_D(a|s) - log pi_theta(a|s), an estimate of KL(pi_D || pi_theta).

The paper's text could not be read; the updates and defaults follow the authors' original code
(github.com/NicholasCorrado/PPOROS, ``PROPS/ppo_props_continuous.py``; tuned values in ``PROPS/commands/rl_props.txt``:
b 2, eps_P 0.3, 16 epochs, lambda 0.1-0.3, target KL 0.03-0.1). Their KL term averages the Gaussian's per-dimension
KL; so does ``lambda`` here. Acting deterministically (evaluation, export) is the target's mean or argmax.
"""

from __future__ import annotations

import copy
import dataclasses

import torch

from rl_suite.agent import Agent
from rl_suite.agents.ppo import PPO, PPOConfig
from rl_suite.buffers import RolloutBuffer
from rl_suite.config import setting
from rl_suite.onpolicy import minibatches, train_epochs
from rl_suite.optim import gradient_step


@dataclasses.dataclass(frozen=True)
class PROPSConfig(PPOConfig):
    """The target's PPO settings (every PPO field; ``n_steps`` is the target batch n per environment) and the
    behaviour's."""

    buffer_batches: int = setting(2, at_least=1)
    """b: target batches of n steps kept in the history (the authors' 2)."""
    props_steps: int = setting(8, at_least=1)
    """m per environment: steps collected between behaviour updates; divides ``n_steps``."""
    props_clip: float = setting(0.3, above=0)
    """eps_P: the behaviour's ratio to the target is clipped at 1 - eps_P (the authors' 0.3)."""
    props_kl_coef: float = setting(0.3, at_least=0)
    """lambda: weight of KL(pi_phi || pi_theta) in the behaviour's loss (the authors' 0.1-0.3)."""
    props_target_kl: float = setting(0.05, above=0)
    """Stop the behaviour's update once its approximate KL to the target exceeds this (the authors' 0.03-0.1)."""
    props_lr: float = setting(1e-3, above=0)
    """Adam's learning rate for the behaviour policy."""
    props_epochs: int = setting(16, at_least=0)
    """Passes of the behaviour's update over the history; 0 samples on-policy (the paper's PPO-Buffer)."""
    props_minibatches: int = setting(16, at_least=1)
    """Minibatches per pass of the behaviour's update."""
    props_max_grad_norm: float = setting(0.5, at_least=0)
    """Clip the behaviour's gradient norm to this; 0 for none."""
    sampling_error_every: int = setting(10, at_least=0)
    """Measure the sampling error every this many target updates; 0 never."""
    sampling_error_steps: int = setting(100, at_least=1)
    """Full-batch Adam steps (learning rate 1e-3) that fit the empirical policy pi_D."""


class History(RolloutBuffer):
    """The last ``steps`` rows of collection as a ring: ``add`` overwrites the oldest row once full; ``ordered``
    gives the rows oldest first (each environment's transitions in time order, for GAE). Never cleared by the
    agent; its rows are checkpointed with the run, so a resumed run sees the same history."""

    def __init__(self, steps: int, num_envs: int, spec, device):
        super().__init__(steps, num_envs, spec, device)
        self.filled = 0

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> None:
        self.step %= self.steps
        super().add(obs, actions, reward, terminated, truncated, next_obs, **extras)
        self.filled = min(self.filled + 1, self.steps)

    def ordered(self, skip_oldest: int = 0) -> dict[str, torch.Tensor]:
        """The filled rows, oldest first, less the ``skip_oldest`` oldest."""
        start = (self.step - self.filled) % self.steps if self.filled == self.steps else 0
        order = (torch.arange(self.filled, device=self.device) + start) % self.steps
        return {name: value[order[skip_oldest:]] for name, value in self.data.items()}

    def newest(self, rows: int) -> dict[str, torch.Tensor]:
        order = (torch.arange(rows, device=self.device) + self.step - rows) % self.steps
        return {name: value[order] for name, value in self.data.items()}

    def state_dict(self) -> dict:
        return {"step": self.step, "filled": self.filled, "data": {k: v.clone() for k, v in self.data.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.filled = state["step"], state["filled"]
        for name, value in state["data"].items():
            self.data[name].copy_(value)


class PROPS(Agent):
    name = "props"
    Config = PROPSConfig

    def __init__(self, observation_space, action_space, config: PROPSConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c = self.config
        if c.props_steps < 1 or c.n_steps % c.props_steps or c.buffer_batches < 1:
            raise ValueError(
                f"props: props_steps must divide n_steps and buffer_batches be >= 1; got props_steps {c.props_steps}, "
                f"n_steps {c.n_steps} and buffer_batches {c.buffer_batches}"
            )
        if c.critic_observation:
            raise ValueError("props: critic_observation is not supported (its history keeps the policy's observation)")
        ppo = {field.name: getattr(c, field.name) for field in dataclasses.fields(PPOConfig)}
        self.target = PPO(observation_space, action_space, PPOConfig(**ppo), device)
        self.behaviour = copy.deepcopy(self.target.actor)  # pi_phi, reset to pi_theta before each of its updates
        self.behaviour_optimizer = torch.optim.Adam(self.behaviour.parameters(), lr=c.props_lr)
        self.modules = {**self.target.modules, "behaviour": self.behaviour}
        self.optimizers = {**self.target.optimizers, "behaviour_optimizer": self.behaviour_optimizer}
        self.iterations = self.target_updates = 0
        self.latest: dict[str, torch.Tensor] = {}  # the newest target update's metrics

    @property
    def steps_per_iteration(self) -> int:
        return self.config.props_steps

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> History:
        spec = self.target.rollout_spec()  # the target's fields: the Gaussian's unclipped actions
        return History(self.config.buffer_batches * self.config.n_steps, num_envs, spec, self.device)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if deterministic:
            return self.target.act(obs, deterministic=True)
        pi = self.behaviour(self.target.normalizer(obs))
        action = pi.sample()
        return self.target.scaler(action), ({"policy_action": action} if self.target.continuous else {})

    def inference_policy(self):
        return self.target.inference_policy()

    def update(self, buffer: History, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, target = self.config, self.target
        self.iterations += 1
        newest = buffer.newest(c.props_steps)
        if c.scale_rewards:
            target.return_scale.observe(newest["rewards"], newest["terminated"] | newest["truncated"])
        if self.iterations % (c.n_steps // c.props_steps) == 0:  # 2.
            data = buffer.ordered()
            rewards = data["rewards"] / target.return_scale() if c.scale_rewards else None
            samples = target.policy_samples(data, rewards)
            if c.sampling_error_every and self.target_updates % c.sampling_error_every == 0:
                self.latest["sampling_error"] = self.sampling_error(samples)
            self.latest.update(self._target_update(samples, progress))
            self.target_updates += 1
        full = buffer.filled == buffer.steps
        metrics = self._behaviour_update(buffer.ordered(skip_oldest=c.props_steps if full else 0))  # 3.
        metrics.update(self.latest)  # the newest target update's and sampling error's, whichever iteration is logged
        if c.normalize_obs:  # each observation joins the statistics once, when new
            target.normalizer.update(newest["obs"])
        return metrics

    def _target_update(self, samples: dict[str, torch.Tensor], progress: float) -> dict[str, torch.Tensor]:
        """PPO's epochs on the history's samples, as agents/ppo.py's update runs them on one rollout."""
        c, target = self.config, self.target
        if c.lr_schedule == "linear":
            target.lr = c.lr * max(1.0 - progress, 0.0)
        clip = c.clip_range * (max(1.0 - progress, 0.0) if c.clip_schedule == "linear" else 1.0)

        def kl_too_high(totals, steps) -> bool:
            return c.target_kl is not None and (totals["approx_kl"] / steps).item() > 1.5 * c.target_kl

        def step(mb):
            return target.minibatch_step(target.loss(mb, clip), adapt_to_kl=c.adaptive_kl)

        metrics = train_epochs(samples, c.epochs, c.minibatches, self.device, step, stop=kl_too_high)
        metrics["lr"] = torch.tensor(target.lr)
        return metrics

    def _behaviour_update(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """phi <- theta, then the clipped push away from the held actions with the KL leash, until the epochs end or
        the approximate KL passes ``props_target_kl``."""
        c, target = self.config, self.target
        self.behaviour.load_state_dict(target.actor.state_dict())
        obs = target.normalizer(data["obs"]).flatten(0, 1)
        actions = (data["policy_action"] if target.continuous else data["actions"]).flatten(0, 1)
        with torch.no_grad():
            log_prob_target = target.actor(obs).log_prob(actions)
        dims = self.action_space.shape[0] if target.continuous else 1
        held = {"obs": obs, "actions": actions, "log_prob": log_prob_target}
        params = list(self.behaviour.parameters())
        steps, kl = 0, torch.zeros(())
        for _ in range(c.props_epochs):
            for mb in minibatches(held, c.props_minibatches, self.device):
                pi = self.behaviour(mb["obs"])
                log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
                ratio = log_ratio.exp()
                approx_kl = ((ratio - 1) - log_ratio).mean().detach()
                if approx_kl.item() > c.props_target_kl:  # a host sync per step, as the test decides whether to step
                    return {"behaviour_steps": torch.tensor(float(steps)), "behaviour_kl": approx_kl}
                with torch.no_grad():
                    pi_target = target.actor(mb["obs"])
                kl = pi.kl(pi_target).mean() / dims
                loss = torch.max(ratio, ratio.clamp(1 - c.props_clip, 1 + c.props_clip)).mean() + c.props_kl_coef * kl
                gradient_step(self.behaviour_optimizer, loss, params, c.props_max_grad_norm)
                steps += 1
        return {"behaviour_steps": torch.tensor(float(steps)), "behaviour_kl": kl.detach()}

    def sampling_error(self, samples: dict[str, torch.Tensor]) -> torch.Tensor:
        """Fit pi_D, a copy of pi_theta with its hidden layers frozen, to the samples' (s, a) by maximum likelihood;
        return the mean of log pi_D(a|s) - log pi_theta(a|s) over them."""
        target = self.target
        empirical = copy.deepcopy(target.actor)
        for layer in list(empirical.net)[:-1]:
            layer.requires_grad_(False)
        trainable = [p for p in empirical.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(trainable, lr=1e-3)
        obs, actions = samples["obs"], samples["actions"]
        for _ in range(self.config.sampling_error_steps):
            gradient_step(optimizer, -empirical(obs).log_prob(actions).mean(), trainable, 1.0)
        with torch.no_grad():
            return (empirical(obs).log_prob(actions) - target.actor(obs).log_prob(actions)).mean()

    def counters(self):
        return {**self.target.counters(), "iterations": self.iterations, "target_updates": self.target_updates}

    def load_counters(self, counters) -> None:
        self.target.load_counters(counters)
        self.iterations, self.target_updates = counters["iterations"], counters["target_updates"]
