"""PQL: Parallel Q-Learning (Li et al., 2023), for continuous actions on batched simulators.

Three workers run at the same time and share tensors, not messages:

    actor      (the runner's thread)  a_i = clip(pi(s_i) + sigma_i eps, -1, 1) in every env i, sigma_i fixed per env and
                                      spread over [noise_std_min, noise_std_max]; forms n-step transitions on the device
                                      and writes them to the V-learner's replay ring and the observations to the
                                      P-learner's ring
    V-learner  (a thread)             twin critics on n-step transitions (s, a, R, s', d), d = gamma^m (1 - terminated):
                                      a' = clip(pi(s') + clip(eps * target_noise_std, +-target_noise_clip), -1, 1)
                                           (pi: the newest published policy; as in PQL, no target policy)
                                      y  = R + d min_j Q'_j(s', a');  minimise sum_j (Q_j(s, a) - y)^2
                                      Q'_j <- (1 - tau) Q'_j + tau Q_j
                                      (PQL-D: categorical returns over a fixed support, cross-entropy loss against a
                                      target built from both twins' projected distributions: ``distributional_target``;
                                      annealed Q-learning: the squared error weighted as an annealed expectile)
    P-learner  (a thread)             maximise min_j Q_j(s, pi(s)) over observations from its own ring

They exchange weights through mailboxes (the newest published copy): the actor and the V-learner read the
P-learner's policy, the P-learner reads the V-learner's critics, and both learners read the actor's observation
statistics. Speed balancing keeps ``critic_updates_per_env_step`` critic updates per batched env step and
``critic_updates_per_policy_update`` critic updates per policy update by making whichever worker runs ahead wait.

Before ``learning_starts`` env steps the actor acts uniformly at random and the learners have not started. With
``concurrent=False`` the same three steps run one after another in the runner's thread, in the set ratios: slower,
but deterministic.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl_suite.agent import Agent
from rl_suite.buffers import NStepWindow, ReplayBuffer, check_fits_in_memory, transition_spec
from rl_suite.categorical import DISTRIBUTIONAL_TARGETS, distributional_target
from rl_suite.concurrency import Mailbox, RateBalancer, Worker, WorkerGroup, overlap_seconds
from rl_suite.config import setting
from rl_suite.deploy.inference import MLPInference
from rl_suite.networks import ACTIVATIONS, ActionScaler, RunningNorm, TwinCritic, mlp
from rl_suite.optim import (
    annealed_expectile,
    expectile_weights,
    finite_or_warn,
    gradient_step,
    polyak_update,
)


@dataclasses.dataclass(frozen=True)
class PQLConfig:
    buffer_size: int = setting(1_000_000, at_least=1)
    """Replay capacity in transitions (all environments together), for each learner's ring."""
    batch_size: int = setting(8192, at_least=1)
    """Transitions (V-learner) or observations (P-learner) per gradient update."""
    critic_lr: float = setting(5e-4, above=0)
    """AdamW learning rate of the critics."""
    actor_lr: float = setting(5e-4, above=0)
    """AdamW learning rate of the policy."""
    max_grad_norm: float = setting(0.5, at_least=0)
    """Gradient-norm clip of both learners; 0 for none."""
    gamma: float = setting(0.99, at_least=0, at_most=1)
    """Discount factor."""
    tau: float = setting(0.05, above=0, at_most=1)
    """Soft target update rate of the critics."""
    n_step: int = setting(3, at_least=1)
    """Length of the n-step returns the actor forms."""
    learning_starts: int = setting(10_000, at_least=0)
    """Env steps (all environments together) of uniformly random actions before the learners start."""
    critic_updates_per_env_step: float = setting(8.0, above=0)
    """Critic updates per batched env step (PQL's beta_a:v)."""
    critic_updates_per_policy_update: float = setting(2.0, above=0)
    """Critic updates per policy update (PQL's beta_p:v)."""
    balance_slack: float = setting(32.0, at_least=0)
    """How far, in critic updates, a worker may run ahead of the slowest before it waits."""
    concurrent: bool = True
    """Run the V-learner and the P-learner in threads beside the actor; ``False`` runs all three in turn."""
    expectile: float = setting(0.5, at_least=0.5, below=1)
    """Annealed Q-learning (Omura et al., ICML 2025, arXiv 2506.05968), for the scalar critics: their squared error
    weighted as an expectile loss |tau - 1(y < Q)| (IQL's), tau annealed linearly from this value to 0.5 (the plain
    squared error); 0.5 is off. The paper's: 0.9."""
    expectile_anneal_steps: int = setting(0, at_least=0)
    """Env steps over which the expectile reaches 0.5; 0 for the run's whole step budget."""
    noise_std_min: float = setting(0.05, at_least=0)
    """Exploration noise scale of the least exploring environment."""
    noise_std_max: float = setting(0.8, at_least=0)
    """Exploration noise scale of the most exploring environment."""
    target_noise_std: float = setting(0.8, at_least=0)
    """Target-policy smoothing noise scale; 0 for none."""
    target_noise_clip: float = setting(0.2, at_least=0)
    """Target-policy smoothing noise is clipped to +- this."""
    hidden: tuple[int, ...] = setting((512, 256, 128), at_least=1)
    """Hidden layer widths of the policy and of each critic."""
    activation: str = setting("elu", choices=tuple(ACTIVATIONS))
    """Activation of the hidden layers."""
    normalize_obs: bool = True
    """Normalise observations with running statistics kept in the policy."""
    distributional: bool = False
    """PQL-D: categorical critics over ``num_atoms`` returns evenly spaced in ``[v_min, v_max]``."""
    v_min: float = -10.0
    """Smallest return of the distributional critics' support."""
    v_max: float = 10.0
    """Largest return of the distributional critics' support."""
    num_atoms: int = setting(51, at_least=2)
    """Size of the distributional critics' support."""
    distributional_target: str = setting("lower_mean", choices=DISTRIBUTIONAL_TARGETS)
    """How PQL-D's target combines the twin target critics' next-state distributions p_1, p_2 (Phi: the projection
    of ``r + d Z`` onto the support):

    - ``"lower_mean"`` (the default): Phi p_j for the twin j with the lower expected return, i.e. clipped double Q
      applied to whole distributions. The target is a distribution, and inside the support its mean is the scalar
      critics' target ``r + d min_j Q'_j``.
    - ``"elementwise_min"``: min(Phi p_1, Phi p_2) atom by atom, unnormalised, as the PQL authors' code does
      (Improbable-AI/pql, pql/algo/pql_v_learner.py, with ``projection`` in pql/utils/distl_util.py). Its mass is
      below 1 wherever the twins disagree (0 where they do not overlap at all), and under the cross-entropy loss the
      critics move towards the overlap of the two, renormalised, whose mean need not be the lower twin's (in
      tests/test_pql.py's hand-made case it lies halfway between the two).

    The default is ``"lower_mean"`` because its pessimism is the one clipped double Q is known for, and because it was
    this suite's only target before the option existed; both reach the threshold of the PQL-D learning test on
    Pendulum-v1 (tests/test_learning.py)."""


class TanhPolicy(nn.Module):
    """A deterministic policy with actions in [-1, 1]."""

    def __init__(self, obs_dim: int, act_dim: int, hidden, activation):
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim, activation, out_gain=0.01)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class PQLStorage:
    """What the actor writes and the learners read: an n-step window, the V-learner's replay ring of n-step
    transitions and the P-learner's ring of observations. Each ring has a lock, held while rows are written or
    gathered, so that no learner reads half of a transition."""

    def __init__(self, config: PQLConfig, num_envs: int, spec, device: torch.device):
        self.window = NStepWindow(config.n_step, config.gamma, num_envs, spec, device)
        self.transitions = ReplayBuffer(config.buffer_size, num_envs, {**spec, "discount": ((), torch.float32)}, device)
        self.num_envs, self.device = num_envs, device
        rows = self.transitions.rows
        obs_shape, obs_dtype = spec["obs"]
        ring_bytes = rows * num_envs * 4 * torch.Size(obs_shape).numel()
        check_fits_in_memory(ring_bytes, device, "the P-learner's observation ring", "buffer_size")
        self.observations = torch.zeros((rows, num_envs, *obs_shape), dtype=obs_dtype, device=device)
        self.obs_rows = 0  # rows of observations written (the ring position is obs_rows % rows)
        self.transitions_lock, self.observations_lock = threading.Lock(), threading.Lock()

    def add(self, obs, actions, reward, terminated, truncated, next_obs, **extras) -> None:
        completed = self.window.push(obs, actions, reward, terminated, truncated, next_obs, **extras)
        with self.observations_lock:
            self.observations[self.obs_rows % self.observations.shape[0]].copy_(obs)
            self.obs_rows += 1
        if completed is not None:
            names = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs")
            with self.transitions_lock:
                self.transitions.add(*(completed[name] for name in names), discount=completed["discount"])

    def recent_observations(self) -> torch.Tensor:
        return self.observations[(self.obs_rows - 1) % self.observations.shape[0]]

    def can_sample(self) -> bool:
        return self.transitions.can_sample()

    def sample_transitions(self, batch_size: int) -> dict[str, torch.Tensor]:
        with self.transitions_lock:
            return self.transitions.sample(batch_size)

    def sample_observations(self, batch_size: int) -> torch.Tensor:
        with self.observations_lock:
            rows = min(self.obs_rows, self.observations.shape[0])
            row = torch.randint(0, rows, (batch_size,), device=self.device)
            env = torch.randint(0, self.num_envs, (batch_size,), device=self.device)
            return self.observations[row, env]

    def state_dict(self) -> dict:
        rows = min(self.obs_rows, self.observations.shape[0])
        return {
            "window": self.window.state_dict(),
            "transitions": self.transitions.state_dict(),
            "obs_rows": self.obs_rows,
            "observations": self.observations[:rows].clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.window.load_state_dict(state["window"])
        self.transitions.load_state_dict(state["transitions"])
        self.obs_rows = state["obs_rows"]
        self.observations[: state["observations"].shape[0]].copy_(state["observations"])


class PQL(Agent):
    name = "pql"
    Config = PQLConfig
    action_space_types = (gym.spaces.Box,)

    def __init__(self, observation_space, action_space, config: PQLConfig | None = None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        c, obs_dim, act_dim = self.config, observation_space.shape[0], action_space.shape[0]
        # Each setting's own range is checked (rl_suite.config.setting); these are between settings.
        if c.noise_std_min > c.noise_std_max:
            raise ValueError(f"need noise_std_min <= noise_std_max, got {c.noise_std_min}, {c.noise_std_max}")
        if c.distributional and not c.v_min < c.v_max:
            raise ValueError(f"a distributional critic needs v_min < v_max, got {c.v_min} and {c.v_max}")
        if c.distributional and c.expectile != 0.5:
            raise ValueError("the expectile loss applies to the scalar critics' squared error, not to PQL-D")
        self.expectile = c.expectile  # the actor's thread sets it in update; the V-learner reads it
        atoms = c.num_atoms if c.distributional else 1
        # The actor's modules: the observation statistics it keeps, and its copy of the policy.
        self.normalizer = RunningNorm(observation_space.shape) if c.normalize_obs else nn.Identity()
        self.acting_policy = TanhPolicy(obs_dim, act_dim, c.hidden, c.activation)
        self.scaler = ActionScaler(action_space)
        # The P-learner's: the policy it trains, and its copies of the critics and of the statistics.
        self.policy = copy.deepcopy(self.acting_policy)
        self.p_critic = TwinCritic(obs_dim, act_dim, c.hidden, c.activation, atoms).requires_grad_(False)
        self.p_normalizer = copy.deepcopy(self.normalizer)
        # The V-learner's: the critics it trains, their targets, and its copies of the policy and the statistics.
        self.critic = copy.deepcopy(self.p_critic).requires_grad_(True)
        self.critic_target = copy.deepcopy(self.p_critic)
        self.v_policy = copy.deepcopy(self.acting_policy).requires_grad_(False)
        self.v_normalizer = copy.deepcopy(self.normalizer)
        self.modules = {
            "normalizer": self.normalizer,
            "acting_policy": self.acting_policy,
            "scaler": self.scaler,
            "policy": self.policy,
            "critic": self.critic,
            "critic_target": self.critic_target,
        }
        for module in (*self.modules.values(), self.p_critic, self.p_normalizer, self.v_policy, self.v_normalizer):
            module.to(self.device)
        self.support = torch.linspace(c.v_min, c.v_max, c.num_atoms, device=self.device)
        self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=c.critic_lr, fused=True)
        self.policy_optimizer = torch.optim.AdamW(self.policy.parameters(), lr=c.actor_lr, fused=True)
        self.optimizers = {"critic": self.critic_optimizer, "policy": self.policy_optimizer}
        # Hand-offs between the workers, and the versions each reader last copied.
        self.policy_box, self.critic_box = Mailbox(self.policy), Mailbox(self.critic)
        self.normalizer_box = Mailbox(self.normalizer)
        self.seen = {"acting_policy": 0, "v_policy": 0, "p_critic": 0, "v_normalizer": 0, "p_normalizer": 0}
        self.balancer = RateBalancer(
            {"actor": c.critic_updates_per_env_step, "critic": 1.0, "policy": c.critic_updates_per_policy_update},
            slack=c.balance_slack,
        )
        self.critic_worker = Worker("V-learner", self._critic_step, wait=self._critic_turn)
        self.policy_worker = Worker("P-learner", self._policy_step, wait=self._policy_turn)
        self.workers = WorkerGroup([self.critic_worker, self.policy_worker])
        self.actor_intervals: list[tuple[float, float]] = []
        self._collect_began: float | None = None
        self.storage: PQLStorage | None = None
        self.noise_std: torch.Tensor | None = None
        self.last_losses = {
            "critic": torch.zeros((), device=self.device),
            "policy": torch.zeros((), device=self.device),
        }
        self.env_steps_seen = 0
        self.update_credit = 0.0  # sequential mode: critic updates owed
        self.report: dict[str, float] = {}
        self._report_time = 0.0

    # -- the actor (runner's thread) ----------------------------------------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        return 1

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> PQLStorage:
        c = self.config
        # Mixed exploration: a fixed noise scale per environment, from the least to the most exploring.
        self.noise_std = torch.linspace(c.noise_std_min, c.noise_std_max, num_envs, device=self.device).unsqueeze(-1)
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, torch.float32)
        self.storage = PQLStorage(c, num_envs, spec, self.device)
        return self.storage

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False):
        if deterministic:
            return self.scaler(self.acting_policy(self.normalizer(obs))), {}
        if self._collect_began is None:
            self._collect_began = time.perf_counter()
        if self.env_steps_seen < self.config.learning_starts:
            action = torch.rand(obs.shape[0], *self.action_space.shape, device=self.device) * 2 - 1
        else:
            if self.noise_std is None or self.noise_std.shape[0] != obs.shape[0]:
                raise ValueError(f"PQL explores with the {obs.shape[0]} environments of make_buffer; call it first")
            action = self.acting_policy(self.normalizer(obs))
            action = (action + self.noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)
        self.env_steps_seen += obs.shape[0]
        return self.scaler(action), {}

    def inference_policy(self) -> MLPInference:
        """The acting ``TanhPolicy`` (the one ``act`` uses), then scaling."""
        net = self.acting_policy.net
        return MLPInference(self.observation_space, self.action_space, self.normalizer, net, self.scaler, tanh=True)

    def update(self, buffer: PQLStorage, progress: float = 0.0) -> dict[str, torch.Tensor]:
        """The actor's side of an iteration: publish the newest observation statistics, keep pace with the learners
        and pick up the newest policy. Learning itself happens in the learners."""
        c = self.config
        self.actor_intervals.append((self._collect_began or time.perf_counter(), time.perf_counter()))
        self._collect_began = None
        if c.normalize_obs:
            self.normalizer.update(buffer.recent_observations())
            self.normalizer_box.publish(self.normalizer)
        if self.env_steps_seen < c.learning_starts or not buffer.can_sample():
            return {}
        if c.expectile != 0.5:  # annealed Q-learning's schedule, in TensorBoard as expectile
            self.expectile = annealed_expectile(c.expectile, c.expectile_anneal_steps, progress, self.env_steps_seen)
        self.balancer.add("actor")
        if not c.concurrent:
            self._learn_in_turn()
        else:
            if not self.workers.started:
                self.workers.start()
            self.balancer.wait_turn("actor", give_up=self._worker_failed)
            self.workers.check()
        self.seen["acting_policy"] = self.policy_box.fetch(self.acting_policy, self.seen["acting_policy"])
        self._refresh_report()
        return {
            "critic_loss": self.last_losses["critic"],
            "actor_loss": self.last_losses["policy"],
            **({"expectile": torch.tensor(self.expectile)} if c.expectile != 0.5 else {}),
            **self.report,  # plain floats, refreshed every few seconds
        }

    def _learn_in_turn(self) -> None:
        """Sequential mode: the critic and policy updates that the ratios owe for one env step."""
        self.update_credit += self.config.critic_updates_per_env_step
        while self.update_credit >= 1.0:
            self.update_credit -= 1.0
            self._critic_step()
            counts = self.balancer.counts
            if (counts["policy"] + 1) * self.config.critic_updates_per_policy_update <= counts["critic"]:
                self._policy_step()

    def _worker_failed(self) -> bool:
        return any(worker.error is not None for worker in self.workers.workers)

    # -- the V-learner ------------------------------------------------------------------------------------------

    def _critic_turn(self) -> bool:
        return self.balancer.wait_turn("critic", give_up=lambda: self.critic_worker.stopping)

    def _critic_step(self) -> bool:
        c = self.config
        self.seen["v_policy"] = self.policy_box.fetch(self.v_policy, self.seen["v_policy"])
        self.seen["v_normalizer"] = self.normalizer_box.fetch(self.v_normalizer, self.seen["v_normalizer"])
        batch = self.storage.sample_transitions(c.batch_size)
        obs, next_obs = self.v_normalizer(batch["obs"]), self.v_normalizer(batch["next_obs"])
        action = self.scaler.unscale(batch["actions"])
        with torch.no_grad():
            next_action = self.v_policy(next_obs)
            smoothing = (torch.randn_like(next_action) * c.target_noise_std).clamp(
                -c.target_noise_clip, c.target_noise_clip
            )
            next_action = (next_action + smoothing).clamp(-1.0, 1.0)
            next_out = self.critic_target(next_obs, next_action)
            if c.distributional:
                target = distributional_target(
                    next_out.softmax(-1), batch["rewards"], batch["discount"], self.support, c.distributional_target
                )
            else:
                target = batch["rewards"] + batch["discount"] * next_out.min(0).values
        out = self.critic(obs, action)
        if c.distributional:
            loss = -(target * F.log_softmax(out, -1)).sum(-1).sum(0).mean()
        else:
            error = target - out
            loss = (expectile_weights(error, self.expectile) * error.square()).sum(0).mean()
        if self._step_optimizer(self.critic_optimizer, self.critic, loss, "critic"):
            polyak_update(self.critic_target, self.critic, c.tau)
            self.critic_box.publish(self.critic)
            self.last_losses["critic"] = loss.detach()
        self.balancer.add("critic")
        return True

    # -- the P-learner ------------------------------------------------------------------------------------------

    def _policy_turn(self) -> bool:
        return self.balancer.wait_turn("policy", give_up=lambda: self.policy_worker.stopping)

    def _policy_step(self) -> bool:
        self.seen["p_critic"] = self.critic_box.fetch(self.p_critic, self.seen["p_critic"])
        self.seen["p_normalizer"] = self.normalizer_box.fetch(self.p_normalizer, self.seen["p_normalizer"])
        obs = self.p_normalizer(self.storage.sample_observations(self.config.batch_size))
        out = self.p_critic(obs, self.policy(obs))
        q = (out.softmax(-1) @ self.support) if self.config.distributional else out
        loss = -q.min(0).values.mean()
        if self._step_optimizer(self.policy_optimizer, self.policy, loss, "policy"):
            self.policy_box.publish(self.policy)
            self.last_losses["policy"] = loss.detach()
        self.balancer.add("policy")
        return True

    def _step_optimizer(self, optimizer, module: nn.Module, loss: torch.Tensor, what: str) -> bool:
        # The finiteness check is a host sync, once per update, in the learner's own thread.
        if not finite_or_warn(loss, "PQL", loss_name=f"{what} loss", skipped="this update"):
            return False
        gradient_step(optimizer, loss, list(module.parameters()), self.config.max_grad_norm)
        return True

    # -- bookkeeping --------------------------------------------------------------------------------------------

    def _refresh_report(self, every_s: float = 2.0) -> None:
        """The achieved ratios and how much the workers overlapped, recomputed every ``every_s`` seconds."""
        now = time.perf_counter()
        if now - self._report_time < every_s:
            return
        self._report_time = now
        counts = self.balancer.counts
        self.report = {
            "critic_updates_per_env_step": self.balancer.ratio("critic", "actor"),
            "critic_updates_per_policy_update": self.balancer.ratio("critic", "policy"),
            "critic_updates": float(counts["critic"]),
            "policy_updates": float(counts["policy"]),
        }
        if self.config.concurrent:
            self.report.update(self.overlap())
        del self.actor_intervals[: -self.critic_worker.intervals.maxlen]

    def overlap(self) -> dict[str, float]:
        """Fractions of the span covered by the recorded intervals during which two workers computed together."""
        timelines = {
            "actor": list(self.actor_intervals),
            "critic": list(self.critic_worker.intervals),
            "policy": list(self.policy_worker.intervals),
        }
        if not all(timelines.values()):
            return {}
        begin = max(t[0][0] for t in timelines.values())
        end = min(t[-1][1] for t in timelines.values())
        span = max(end - begin, 1e-9)
        clip = {
            name: [(max(a, begin), min(b, end)) for a, b in t if b > begin and a < end] for name, t in timelines.items()
        }
        return {
            f"overlap_{x}_{y}": overlap_seconds(clip[x], clip[y]) / span
            for x, y in (("actor", "critic"), ("actor", "policy"), ("critic", "policy"))
        }

    def paused(self):
        return self.workers.paused()

    def close(self) -> None:
        if self.workers.started:
            self.workers.stop()
            self.seen["acting_policy"] = self.policy_box.fetch(self.acting_policy, self.seen["acting_policy"])
            self._refresh_report(every_s=0.0)

    def counters(self):
        return {
            "env_steps_seen": self.env_steps_seen,
            "update_credit": self.update_credit,
            "balancer": self.balancer.state_dict(),
        }

    def load_counters(self, counters) -> None:
        self.env_steps_seen, self.update_credit = counters["env_steps_seen"], counters["update_credit"]
        self.balancer.load_state_dict(counters["balancer"])

    def load_state_dict(self, state) -> None:
        super().load_state_dict(state)
        # The learners' copies start from the restored originals.
        for box, module in ((self.policy_box, self.policy), (self.critic_box, self.critic)):
            box.publish(module)
        self.normalizer_box.publish(self.normalizer)
        for name, box, module in (
            ("v_policy", self.policy_box, self.v_policy),
            ("p_critic", self.critic_box, self.p_critic),
            ("v_normalizer", self.normalizer_box, self.v_normalizer),
            ("p_normalizer", self.normalizer_box, self.p_normalizer),
        ):
            self.seen[name] = box.fetch(module, -1)
        self.seen["acting_policy"] = self.policy_box.version
