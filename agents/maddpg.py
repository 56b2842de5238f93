"""MADDPG: multi-agent deep deterministic policy gradient (Lowe et al., 2017, "Multi-Agent Actor-Critic for Mixed
Cooperative-Competitive Environments", arXiv:1706.02275): decentralised actors, centralised critics.

Each agent i has a deterministic actor mu_i(o_i) that sees only its own observation, and a critic
Q_i(x, a_1, ..., a_A) on every agent's observation x = (o_1, ..., o_A) and every agent's action. Agents may have
their own rewards r_i (``agent_rewards``: predators and prey are different teams), which is what lets MADDPG train
competitive settings where a single team value cannot. Each update, on B joint transitions from the replay ring:

    1. targets  y_i = r_i + gamma (1 - done) Q'_i(x', a'_1, ..., a'_A),  a'_j = mu'_j(o'_j)     (paper, eq. 6)
    2. critics  minimise  (Q_i(x, a_1, ..., a_A) - y_i)^2  over the stored joint actions, one gradient step
    3. actors   minimise  -Q_i(x, a_1, ..., mu_i(o_i), ..., a_A)  under the updated critics (eq. 5: agent i's
                action from its current actor, the others' from the replay), plus ``action_reg`` times the mean
                square of the actor's raw output, as the authors' code does (openai/maddpg: ``p_reg``)
    4. targets  theta' <- (1 - tau) theta' + tau theta for actors and critics

Actions: on a ``Box`` the actor's output is tanh-squashed to [-1, 1] and scaled to the bounds; exploration adds
N(0, ``exploration_noise``^2) in the [-1, 1] units. On discrete actions the actor outputs logits and acts with the
Gumbel-softmax relaxation (Jang et al., 2017; the paper's section 4.2 and appendix): the action is a hard one-hot
sample, argmax(logits + g) with g ~ Gumbel(0, 1), whose gradient is that of the softmax at ``gumbel_temperature``
(straight-through), so that the critic, which sees one-hot actions, can pass gradients to the actor. Deterministic
actions (evaluation, export) are the greedy ones; unavailable actions (``avail_actions``) are masked out throughout.

The A actors, and the A critics, are evaluated together as ensembles (one batched matmul per layer). With
``shared_critic`` a single critic takes the agent's one-hot id as an extra input instead (the paper's critics are
separate; sharing is the common variant for homogeneous teams). Observations are not normalised: the particle
tasks' are of order one. Hyperparameters default to the paper's (appendix: Adam at 0.01, tau 0.01, gamma 0.95,
batches of 1,024, two hidden layers of 64, a buffer of 10^6, gradient norms clipped at 0.5 in the authors' code).
"""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import torch
from torch.nn import functional as F

from rl_suite.agent import MultiAgentAgent
from rl_suite.buffers import ReplayBuffer, owed_updates, transition_spec
from rl_suite.config import setting
from rl_suite.deploy.inference import FrozenNorm, FrozenScale, InferencePolicy, random_availability, tensor_spec
from rl_suite.multiagent import random_available_action
from rl_suite.networks import ACTIVATIONS, ActionScaler, EnsembleMLP
from rl_suite.optim import finite_or_warn, gradient_step, polyak_update


@dataclasses.dataclass(frozen=True)
class MADDPGConfig:
    buffer_size: int = setting(1_000_000, at_least=1)
    """Joint transitions (one per environment step) the replay ring holds."""
    batch_size: int = setting(1024, at_least=1)
    """Joint transitions per gradient step."""
    learning_starts: int = setting(25_600, at_least=0)
    """Env steps (summed over environments) of uniformly random actions before learning starts."""
    steps_per_iteration: int = setting(1, at_least=1)
    """Batched env steps collected between learning iterations."""
    utd_ratio: float = setting(0.01, above=0)
    """Gradient steps per joint transition collected (the paper's code: one per 100); fractions carry over."""
    lr_actor: float = setting(0.01, at_least=0)
    """Adam learning rate of the actors."""
    lr_critic: float = setting(0.01, at_least=0)
    """Adam learning rate of the critics."""
    gamma: float = setting(0.95, at_least=0, at_most=1)
    """Discount factor."""
    tau: float = setting(0.01, above=0, at_most=1)
    """Soft target update rate."""
    hidden: tuple[int, ...] = setting((64, 64), at_least=1)
    """Hidden layer widths of every actor and critic."""
    activation: str = setting("relu", choices=tuple(ACTIVATIONS))
    """Activation of the hidden layers."""
    max_grad_norm: float = setting(0.5, at_least=0)
    """Clip the global gradient norm of the actors', and of the critics', loss to this (0: no clipping)."""
    exploration_noise: float = setting(0.1, at_least=0)
    """Standard deviation of the Gaussian noise added to continuous actions while training, in [-1, 1] units."""
    gumbel_temperature: float = setting(1.0, above=0)
    """Temperature of the Gumbel-softmax relaxation of discrete actions."""
    action_reg: float = setting(0.001, at_least=0)
    """Weight of the mean square of the actors' raw outputs (pre-tanh means or logits) in the actor loss."""
    shared_critic: bool = False
    """One critic for all agents, with the agent's one-hot id as input, instead of one critic per agent."""
    agent_rewards: bool = False
    """Critic i learns agent i's own reward (``info["agent_reward"]``: teams that compete); else the team reward."""


class MADDPG(MultiAgentAgent):
    name = "maddpg"
    Config = MADDPGConfig
    action_space_types = (gym.spaces.Box, gym.spaces.MultiDiscrete)

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", global_state_space=None, **overrides
    ):
        super().__init__(observation_space, action_space, config, device, global_state_space, **overrides)
        c = self.config
        if c.batch_size > c.buffer_size:  # each setting's own range is checked (rl_suite.config.setting)
            raise ValueError(f"batch_size ({c.batch_size}) must not exceed buffer_size ({c.buffer_size})")
        self.num_agents, obs_dim = observation_space.shape
        a = self.num_agents
        self.discrete = isinstance(action_space, gym.spaces.MultiDiscrete)
        # k: what one agent's action is for the actor and the critic: logits / a one-hot, or a Box's dimensions
        self.act_dim = int(action_space.nvec.max()) if self.discrete else action_space.shape[1]
        self.actor = EnsembleMLP(a, obs_dim, c.hidden, self.act_dim, c.activation)
        critic_in = a * (obs_dim + self.act_dim) + (a if c.shared_critic else 0)
        self.critic = EnsembleMLP(1 if c.shared_critic else a, critic_in, c.hidden, 1, c.activation)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.modules = {
            "actor": self.actor,
            "critic": self.critic,
            "actor_target": self.actor_target,
            "critic_target": self.critic_target,
        }
        if not self.discrete:  # scales the actors' [-1, 1] to one agent's bounds
            agent_space = gym.spaces.Box(action_space.low[0], action_space.high[0], dtype=action_space.dtype)
            self.scaler = ActionScaler(agent_space)
            self.modules["scaler"] = self.scaler
        for module in self.modules.values():
            module.to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=c.lr_actor)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=c.lr_critic)
        self.optimizers = {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
        self.ids = torch.eye(a, device=self.device)
        self.env_steps_seen = 0  # counts the random warm-up
        self.update_credit = 0.0  # fractional updates carried over between iterations
        self.updates = 0
        self.skipped_updates = 0

    @property
    def steps_per_iteration(self) -> int:
        return self.config.steps_per_iteration

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> ReplayBuffer:
        a = self.num_agents
        actions = ((a,), torch.int64) if self.discrete else ((a, self.act_dim), torch.float32)
        extras = {}
        if self.discrete:
            extras["avail_actions"] = ((a, self.act_dim), torch.bool)
            extras["next_avail_actions"] = ((a, self.act_dim), torch.bool)
        if self.config.agent_rewards:
            extras["agent_reward"] = ((a,), torch.float32)
        spec = transition_spec(self.observation_space.shape, *actions, extras)
        return ReplayBuffer(self.config.buffer_size, num_envs, spec, self.device, gamma=self.config.gamma)

    # -- acting -----------------------------------------------------------------------------------------------

    def initial_memory(self, num_envs: int) -> dict[str, torch.Tensor]:
        return {}

    def _actor_out(self, actor: EnsembleMLP, obs: torch.Tensor) -> torch.Tensor:
        """Each agent's actor on its own observation: ``[B, A, d] -> [B, A, k]``."""
        return actor(obs.transpose(0, 1)).transpose(0, 1)

    @torch.no_grad()
    def act(self, inputs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor], deterministic: bool = False):
        obs = inputs["obs"]
        n = obs.shape[0]
        warm_up = not deterministic and self.env_steps_seen < self.config.learning_starts
        if not deterministic:
            self.env_steps_seen += n
        if self.discrete:
            avail = inputs["avail_actions"]
            if warm_up:  # uniform among the available actions
                return random_available_action(avail), {}, memory
            logits = self._actor_out(self.actor, obs).masked_fill(~avail, -1e9)
            if not deterministic:  # a Gumbel-max sample: a draw from softmax(logits)
                logits = logits - torch.empty_like(logits).exponential_().log()
            return logits.argmax(-1), {}, memory
        if warm_up:
            uniform = torch.rand(n, self.num_agents, self.act_dim, device=self.device) * 2 - 1
            return self.scaler(uniform), {}, memory
        action = torch.tanh(self._actor_out(self.actor, obs))
        if not deterministic:
            action = (action + self.config.exploration_noise * torch.randn_like(action)).clamp(-1.0, 1.0)
        return self.scaler(action), {}, memory

    def inference_policy(self) -> MADDPGInference:
        return MADDPGInference(self)

    # -- learning ---------------------------------------------------------------------------------------------

    def update(self, buffer: ReplayBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        if self.env_steps_seen < c.learning_starts or len(buffer) < c.batch_size:
            return {}
        earned = c.utd_ratio * buffer.num_envs * c.steps_per_iteration  # fractional updates carry over
        updates, self.update_credit = owed_updates(self.update_credit, earned)
        totals = {}
        for _ in range(updates):
            for key, value in self._update_once(buffer.sample(c.batch_size)).items():
                totals[key] = totals.get(key, 0.0) + value
        return {key: value / max(updates, 1) for key, value in totals.items()}

    def _policy_actions(self, actor: EnsembleMLP, obs: torch.Tensor, avail: torch.Tensor | None):
        """The actors' actions for the critic, ``[B, A, k]`` (differentiable), and their raw outputs: the tanh of the
        mean, or a straight-through Gumbel-softmax one-hot among the available actions."""
        out = self._actor_out(actor, obs)
        if not self.discrete:
            return torch.tanh(out), out
        logits = out.masked_fill(~avail, -1e9)
        return F.gumbel_softmax(logits, tau=self.config.gumbel_temperature, hard=True), out

    def _stored_actions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The replay's joint actions in the critic's units, ``[B, A, k]``."""
        if self.discrete:
            return F.one_hot(batch["actions"], self.act_dim).float()
        return self.scaler.unscale(batch["actions"])

    def _q(self, critic: EnsembleMLP, obs: torch.Tensor, actions: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """Q_i for every agent i, ``[A, B]``: ``obs [B, A, d]``, and ``actions`` ``[B, A, k]`` (one joint action for
        all critics) or ``[A, B, A, k]`` (critic i's own joint action)."""
        a, b = self.num_agents, obs.shape[0]
        x = obs.flatten(1)
        if actions.dim() == 3:
            joint = torch.cat((x, actions.flatten(1)), -1).expand(a, b, -1)
        else:
            joint = torch.cat((x.expand(a, b, -1), actions.flatten(2)), -1)
        if self.config.shared_critic:  # one critic, told which agent's value it gives
            joint = torch.cat((joint, self.ids.unsqueeze(1).expand(a, b, a)), -1).reshape(1, a * b, -1)
        return critic(joint, frozen).view(a, b)

    @torch.no_grad()
    def td_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Every critic's target ``y_i``, ``[A, B]``: agent i's (or the team's) reward plus the discounted target
        critic at the next observations and the target actors' joint action there. ``discount`` is gamma, or 0 after
        a termination; a truncated episode's ``next_obs`` is its final observation, so time limits bootstrap."""
        if self.config.agent_rewards:
            rewards = batch["agent_reward"].T
        else:
            rewards = batch["rewards"].expand(self.num_agents, -1)
        next_obs = batch["next_obs"]
        next_actions, _ = self._policy_actions(self.actor_target, next_obs, batch.get("next_avail_actions"))
        return rewards + batch["discount"] * self._q(self.critic_target, next_obs, next_actions)

    def _update_once(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c, a = self.config, self.num_agents
        obs = batch["obs"]
        target = self.td_targets(batch)  # 1.
        # 2. the critics on the stored joint action
        stored = self._stored_actions(batch)
        q = self._q(self.critic, obs, stored)
        critic_loss = (q - target).square().mean(1).sum()
        if not finite_or_warn(critic_loss, "MADDPG", "critic loss", skipped="this update"):
            self.skipped_updates += 1
            return {}
        gradient_step(self.critic_optimizer, critic_loss, list(self.critic.parameters()), c.max_grad_norm)
        # 3. critic i (just updated) values agent i's current action with the others' stored ones; the critics are
        # frozen, so the gradient reaches the actors only
        new_actions, raw = self._policy_actions(self.actor, obs, batch.get("avail_actions"))
        own = self.ids.view(a, 1, a, 1).bool()  # critic i replaces agent i's action
        joint = torch.where(own, new_actions.unsqueeze(0), stored.unsqueeze(0))
        actor_q = self._q(self.critic, obs, joint, frozen=True)
        actor_loss = -actor_q.mean(1).sum() + c.action_reg * raw.square().mean(-1).mean(0).sum()
        if finite_or_warn(actor_loss, "MADDPG", "actor loss", skipped="the actors' step"):
            gradient_step(self.actor_optimizer, actor_loss, list(self.actor.parameters()), c.max_grad_norm)
        else:
            self.skipped_updates += 1
        polyak_update(self.actor_target, self.actor, c.tau)  # 4.
        polyak_update(self.critic_target, self.critic, c.tau)
        self.updates += 1
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "q": q.detach().mean(),
            "target": target.mean(),
        }

    def counters(self):
        return {
            "env_steps_seen": self.env_steps_seen,
            "update_credit": self.update_credit,
            "updates": self.updates,
            "skipped_updates": self.skipped_updates,
        }


class MADDPGInference(InferencePolicy):
    """The team's actors in one file, over ``[B, A, obs_dim]``: row i of the observations goes through agent i's own
    actor only (decentralised execution: a robot that is agent i feeds its observation in row i and reads row i).
    Out: the scaled tanh of the mean (continuous), or the argmax over available actions (discrete:
    ``avail_actions [B, A, n_actions]``, bool, is a second input)."""

    multiagent = True

    def __init__(self, agent: MADDPG):
        super().__init__(agent.observation_space, agent.action_space, FrozenNorm())
        self.actor, self.discrete = agent.actor, agent.discrete
        self.scale = None if self.discrete else FrozenScale(agent.scaler)
        if self.discrete:
            self.inputs.append(tensor_spec("avail_actions", (agent.num_agents, agent.act_dim), "bool"))

    def forward(self, obs: torch.Tensor, avail_actions: torch.Tensor | None = None) -> torch.Tensor:
        out = self.actor(obs.transpose(0, 1)).transpose(0, 1)
        if self.discrete:
            return out.masked_fill(~avail_actions, -1e9).argmax(-1)
        return self.scale(torch.tanh(out))

    def parity_inputs(self, count: int, seed: int) -> list[torch.Tensor]:
        """Random availability masks with at least one available action per agent (and only actions an agent has)."""
        return [random_availability(self.action_space, count, seed)] if self.discrete else []
