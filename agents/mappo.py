"""MAPPO: multi-agent PPO with a shared policy and a centralised critic (Yu et al., 2022); IPPO is one flag away.

Each iteration, for a rollout of T steps from N environments of A agents:

    1. collect (o^a_t, s_t, u^a_t, r_t, avail^a_t, alive^a_t) with the shared policy pi(u | o^a, id_a), whose input
       carries the agent's one-hot id and whose logits exclude unavailable actions;
    2. in batched passes (unrolled from the stored hidden states when recurrent): log pi_old(u^a_t | .), and the
       critic's V(s_t, id_a) and V(s'_t, id_a) in return units (the critic predicts normalised values: value
       normalisation by running return statistics); advantages by GAE(gamma, lambda) per agent, bootstrapping
       truncated episodes from their final global state;
    3. for each epoch and minibatch (of samples; of chunks of L steps when recurrent), minimise
           L = -E[min(rho A, clip(rho, 1 - eps, 1 + eps) A)] - c_e H[pi] + c_v Huber(V(s, id), normalise(R)),
       where the samples of dead agents weigh nothing in the policy terms (see death masking below);
    4. merge the rollout into the observation and global-state normalisers.

The critic sees the global state plus the agent id (an agent-specific global state). With ``centralized_critic=False``
it sees the agent's own observation instead: IPPO, independent PPO learners that share parameters.

Death masking (Yu et al., 2022, arXiv:2103.01955, section "Death Masking": a dead agent's value input is a zero
state plus its agent id). A dead agent's critic input is zeros in place of its (normalised) state or observation,
followed by its one-hot id: one fixed input per agent for "dead", rather than real states whose value for a dead
agent the critic would never learn. As in the reference code (marlbenchmark/on-policy: ``get_state_agent`` with
``use_mustalive``; the SMAC runner cuts GAE only where the whole episode ends; its SMAC scripts pass
``--use_value_active_masks``, which turns the masking of the value loss off), the samples of dead agents keep their
value loss and lose only their policy loss, and an agent's death does not cut its GAE: the bootstrap at its last
alive step is the value of the death mask, which the critic is trained on. (Ending an agent's episode at its death
instead loses the team's rewards after it, the win among them: on Skirmish-8m-v0 and Skirmish-2s3z-v0, two seeds
each, that won 24-62% of the battles after 100k steps, where death masking won 90% within 20k.)
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl_suite.agent import MultiAgentAgent
from rl_suite.buffers import RolloutBuffer, gae, transition_spec
from rl_suite.config import setting
from rl_suite.deploy.inference import (
    ExportError,
    FrozenNorm,
    FrozenScale,
    InferencePolicy,
    random_availability,
    tensor_spec,
)
from rl_suite.networks import ACTIVATIONS, ActionScaler, Categorical, DiagGaussian, RecurrentMLP, RunningNorm
from rl_suite.onpolicy import clipped_surrogate, train_epochs, weighted_mean
from rl_suite.optim import finite_or_warn, gradient_step


@dataclasses.dataclass(frozen=True)
class MAPPOConfig:
    n_steps: int = setting(64, at_least=1)
    """Rollout length T: steps per environment collected each iteration."""
    epochs: int = setting(5, at_least=1)
    """Passes over each rollout."""
    minibatches: int = setting(2, at_least=1)
    """Minibatches per epoch."""
    lr: float = setting(5e-4, at_least=0)
    """Adam learning rate of the actor and the critic."""
    gamma: float = setting(0.99, at_least=0, at_most=1)
    """Discount factor."""
    gae_lambda: float = setting(0.95, at_least=0, at_most=1)
    """GAE's lambda."""
    clip_range: float = setting(0.2, above=0)
    """epsilon of the clipped surrogate."""
    ent_coef: float = setting(0.01, at_least=0)
    """Weight of the entropy bonus."""
    vf_coef: float = setting(1.0, at_least=0)
    """Weight of the value loss."""
    huber_delta: float = setting(10.0, above=0)
    """The Huber value loss is quadratic within this distance of the (normalised) target, linear beyond."""
    max_grad_norm: float = setting(10.0, at_least=0)
    """Clip the global gradient norm to this (0: no clipping)."""
    value_norm: bool = True
    """The critic predicts returns normalised by running statistics (MAPPO's value normalisation)."""
    hidden: tuple[int, ...] = setting((64, 64), at_least=1)
    """Hidden layer widths of the actor and the critic (separate networks)."""
    activation: str = setting("relu", choices=tuple(ACTIVATIONS))
    """Activation of the hidden layers."""
    recurrent: bool = False
    """Add a GRU to the actor and the critic; they are then trained on chunks of ``chunk_length`` steps."""
    gru_size: int = setting(64, at_least=1)
    """Hidden state size of the GRUs."""
    chunk_length: int = setting(16, at_least=1)
    """Length of the training chunks of a recurrent policy (it must divide ``n_steps``)."""
    centralized_critic: bool = True
    """Critic on the global state (MAPPO); ``False``: on the agent's own observation (IPPO)."""
    agent_id: bool = True
    """Append the agent's one-hot id to the actor's and the critic's inputs."""
    agent_rewards: bool = False
    """Learn each agent's own reward (``info["agent_reward"]``: predator and prey) instead of the team reward."""
    normalize_obs: bool = True
    """Normalise observations and global states with running statistics kept in the policy."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""


class MAPPO(MultiAgentAgent):
    name = "mappo"
    Config = MAPPOConfig
    supports_distributed = True  # trains under torchrun (rl_suite/distributed.py)
    action_space_types = (gym.spaces.MultiDiscrete, gym.spaces.Box)

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", global_state_space=None, **overrides
    ):
        super().__init__(observation_space, action_space, config, device, global_state_space, **overrides)
        c = self.config
        self.num_agents, obs_dim = observation_space.shape
        state_dim = global_state_space.shape[0]
        self.discrete = isinstance(action_space, gym.spaces.MultiDiscrete)
        if c.recurrent and c.n_steps % c.chunk_length:
            raise ValueError(f"chunk_length ({c.chunk_length}) must divide n_steps ({c.n_steps})")
        out_dim = int(action_space.nvec.max()) if self.discrete else action_space.shape[1]
        ids = self.num_agents if c.agent_id else 0
        gru = c.gru_size if c.recurrent else 0
        critic_in = (state_dim if c.centralized_critic else obs_dim) + ids
        self.actor = RecurrentMLP(obs_dim + ids, c.hidden, out_dim, c.activation, gru, gain=0.01)
        self.critic = RecurrentMLP(critic_in, c.hidden, 1, c.activation, gru, gain=1.0)
        if not self.discrete:  # a learned, state-independent log standard deviation, saved with the actor
            self.actor.log_std = nn.Parameter(torch.full((out_dim,), float(c.init_log_std)))
        self.obs_norm = RunningNorm((obs_dim,)) if c.normalize_obs else nn.Identity()
        self.state_norm = RunningNorm((state_dim,)) if c.normalize_obs else nn.Identity()
        self.value_norm = RunningNorm(())
        self.modules = {
            "actor": self.actor,
            "critic": self.critic,
            "obs_norm": self.obs_norm,
            "state_norm": self.state_norm,
            "value_norm": self.value_norm,
        }
        if not self.discrete:
            one_agent = gym.spaces.Box(action_space.low[0], action_space.high[0], dtype=action_space.dtype)
            self.scaler = self.modules["scaler"] = ActionScaler(one_agent)
        for module in self.modules.values():
            module.to(self.device)
        self.ids = torch.eye(self.num_agents, device=self.device)
        self.parameters = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.parameters, lr=c.lr, eps=1e-5)
        self.optimizers = {"optimizer": self.optimizer}
        self.skipped_updates = 0

    # -- inputs and outputs -------------------------------------------------------------------------------------

    def _with_id(self, x: torch.Tensor) -> torch.Tensor:
        """Append each agent's one-hot id to ``x [..., A, k]``."""
        if not self.config.agent_id:
            return x
        return torch.cat((x, self.ids.expand(*x.shape[:-2], *self.ids.shape)), -1)

    def _actor_input(self, obs: torch.Tensor) -> torch.Tensor:
        return self._with_id(self.obs_norm(obs))

    def _critic_input(self, obs: torch.Tensor, state: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        """``[..., A, in]``: the normalised global state (the observation for IPPO) and the agent id; dead agents
        see zeros and their id (the death mask)."""
        if self.config.centralized_critic:
            features = self.state_norm(state).unsqueeze(-2).expand(*obs.shape[:-1], state.shape[-1])
        else:
            features = self.obs_norm(obs)
        return self._with_id(features * alive.unsqueeze(-1))

    def _policy(self, out: torch.Tensor, avail: torch.Tensor | None):
        if self.discrete:
            return Categorical(out if avail is None else out.masked_fill(~avail, -1e9))
        return DiagGaussian(out, self.actor.log_std)

    def _value_in_return_units(self, value: torch.Tensor) -> torch.Tensor:
        if not self.config.value_norm:
            return value
        return value * torch.sqrt(self.value_norm.var + 1e-8).float() + self.value_norm.mean.float()

    def _normalized_return(self, returns: torch.Tensor) -> torch.Tensor:
        if not self.config.value_norm:
            return returns
        return (returns - self.value_norm.mean.float()) / torch.sqrt(self.value_norm.var + 1e-8).float()

    @staticmethod
    def _unroll(net: RecurrentMLP, x: torch.Tensor, h0: torch.Tensor | None, starts: torch.Tensor):
        """``net`` over a ``[T, N, A, in]`` sequence; ``starts [T, N]`` marks episode starts (hidden reset)."""
        t, n, a = x.shape[:3]
        h0 = None if h0 is None else h0.reshape(n * a, -1)
        out, hiddens = net.unroll(x.reshape(t, n * a, -1), h0, starts.repeat_interleave(a, dim=1))
        return out.view(t, n, a, -1), None if hiddens is None else hiddens.view(t, n, a, -1)

    # -- acting -----------------------------------------------------------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        return self.config.n_steps

    def initial_memory(self, num_envs: int) -> dict[str, torch.Tensor]:
        if not self.config.recurrent:
            return {}
        shape = (num_envs, self.num_agents, self.config.gru_size)
        return {"actor": torch.zeros(shape, device=self.device), "critic": torch.zeros(shape, device=self.device)}

    @torch.no_grad()
    def act(self, inputs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor], deterministic: bool = False):
        obs = inputs["obs"]
        n, a = obs.shape[:2]

        def flat(hidden: torch.Tensor | None) -> torch.Tensor | None:  # [N, A, H] -> [N * A, H]
            return None if hidden is None else hidden.reshape(n * a, -1)

        out, actor_hidden = self.actor(self._actor_input(obs).flatten(0, 1), flat(memory.get("actor")))
        pi = self._policy(out.view(n, a, -1), inputs.get("avail_actions"))
        action = pi.mode() if deterministic else pi.sample()
        extras, next_memory = {}, {}
        if self.config.recurrent:
            extras = {"actor_hidden": memory["actor"], "critic_hidden": memory["critic"]}  # the chunks' start states
            next_memory["actor"] = actor_hidden.view(n, a, -1)
            next_memory["critic"] = memory["critic"]
            if not deterministic:  # the critic's own recurrence, for the stored start states of training chunks
                critic_in = self._critic_input(obs, inputs["global_state"], inputs["alive"]).flatten(0, 1)
                next_memory["critic"] = self.critic(critic_in, flat(memory["critic"]))[1].view(n, a, -1)
        if self.discrete:
            return action, extras, next_memory
        if not deterministic:
            extras["policy_action"] = action  # unclipped, for the log-probability
        return self.scaler(action), extras, next_memory

    def inference_policy(self) -> MAPPOInference:
        if self.config.recurrent:
            raise ExportError(
                "a recurrent MAPPO policy cannot be exported: it needs its hidden state (the GRU's) carried from "
                "one step to the next, and the exported policy is stateless; train with recurrent=false to deploy"
            )
        return MAPPOInference(self)

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> RolloutBuffer:
        a, c = self.num_agents, self.config
        obs_shape, state_shape = self.observation_space.shape, self.global_state_space.shape
        extras = {
            "global_state": (state_shape, torch.float32),
            "next_global_state": (state_shape, torch.float32),
            "alive": ((a,), torch.bool),
            "next_alive": ((a,), torch.bool),
        }
        if self.discrete:
            n_actions = (a, int(self.action_space.nvec.max()))
            extras["avail_actions"] = (n_actions, torch.bool)
            action_shape, action_dtype = (a,), torch.int64
        else:
            action_shape, action_dtype = self.action_space.shape, torch.float32
            extras["policy_action"] = (action_shape, torch.float32)
        if c.agent_rewards:
            extras["agent_reward"] = ((a,), torch.float32)
        if c.recurrent:
            extras.update(actor_hidden=((a, c.gru_size), torch.float32), critic_hidden=((a, c.gru_size), torch.float32))
        spec = transition_spec(obs_shape, action_shape, action_dtype, extras)
        return RolloutBuffer(c.n_steps, num_envs, spec, self.device)

    # -- learning ---------------------------------------------------------------------------------------------

    def update(self, buffer: RolloutBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c, d = self.config, buffer.data
        rollout = self.process_rollout(d)  # 2.
        returns, values, alive = rollout["returns"], rollout["values"], d["alive"]
        if c.value_norm:
            self.value_norm.update(returns)
        live = rollout["advantages"][alive]
        fields = {
            "actor_in": rollout["actor_in"],
            "critic_in": rollout["critic_in"],
            "actions": rollout["actions"],
            "log_prob": rollout["log_prob"],
            "advantages": (rollout["advantages"] - live.mean()) / (live.std() + 1e-8),
            "targets": self._normalized_return(returns),
            "weights": alive.float(),  # of the policy terms; every sample trains the critic (death masking)
        }
        if "avail_actions" in d:
            fields["avail"] = d["avail_actions"]
        if c.recurrent:
            samples = self._chunks(fields, d, rollout["starts"])
        else:
            samples = {key: value.flatten(0, 2) for key, value in fields.items()}

        # 3. Epochs of minibatch gradient steps.
        metrics = train_epochs(samples, c.epochs, c.minibatches, self.device, self._step)

        # 4. The normalisers learn from this rollout only now, so that log-probabilities stayed consistent.
        if c.normalize_obs:
            self.obs_norm.update(d["obs"][alive])
            self.state_norm.update(d["global_state"])
        buffer.clear()
        metrics["explained_variance"] = 1 - (returns - values).var() / returns.var().clamp_min(1e-8)
        metrics["alive_fraction"] = fields["weights"].mean()
        return metrics

    @torch.no_grad()
    def process_rollout(self, d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Step 2 on a rollout's ``[T, N, A, ...]`` data: the networks' inputs, the behaviour policy's
        log-probabilities, V(s_t), and the GAE advantages and returns per agent, in return units."""
        c = self.config
        steps, num_envs, a = d["alive"].shape
        done = d["terminated"] | d["truncated"]
        starts = torch.cat((torch.zeros_like(done[:1]), done[:-1]))  # an episode starts after each ended one
        actions = d["actions"] if self.discrete else d["policy_action"]
        actor_in = self._actor_input(d["obs"])
        critic_in = self._critic_input(d["obs"], d["global_state"], d["alive"])
        # An agent that died in step t bootstraps from the death mask, V(0, id_a), and its GAE runs on through the
        # episode: only the episode's end cuts it.
        next_critic_in = self._critic_input(d["next_obs"], d["next_global_state"], d["next_alive"])
        actor_h0, critic_h0 = (d["actor_hidden"][0], d["critic_hidden"][0]) if c.recurrent else (None, None)
        out, _ = self._unroll(self.actor, actor_in, actor_h0, starts)
        log_prob = self._policy(out, d.get("avail_actions")).log_prob(actions)
        values, critic_hiddens = self._unroll(self.critic, critic_in, critic_h0, starts)
        # V(s'_t) continues each sequence by one step from the hidden state after step t.
        hidden_after = None if critic_hiddens is None else critic_hiddens.flatten(0, 2)
        next_values = self.critic(next_critic_in.flatten(0, 2), hidden_after)[0].view(steps, num_envs, a)
        values = self._value_in_return_units(values.squeeze(-1))
        next_values = self._value_in_return_units(next_values)
        rewards = d["agent_reward"] if c.agent_rewards else d["rewards"].unsqueeze(-1).expand(-1, -1, a)
        terminated, done = d["terminated"].unsqueeze(-1), done.unsqueeze(-1)
        advantages, returns = gae(rewards, values, next_values, terminated, done, c.gamma, c.gae_lambda)
        return {
            "starts": starts,
            "actor_in": actor_in,
            "critic_in": critic_in,
            "actions": actions,
            "log_prob": log_prob,
            "values": values,
            "advantages": advantages,
            "returns": returns,
        }

    def _chunks(self, fields: dict[str, torch.Tensor], d, starts) -> dict[str, torch.Tensor]:
        """Cut ``[T, N, A, ...]`` fields into chunks of L steps, ``[T / L * N * A, L, ...]``, each with the hidden
        states stored when its first step was acted and the episode starts inside it."""
        steps, num_envs, a = d["alive"].shape
        length = self.config.chunk_length

        def chunked(x: torch.Tensor) -> torch.Tensor:  # [T, N, A, ...] -> [T/L * N * A, L, ...]
            x = x.reshape(steps // length, length, num_envs * a, *x.shape[3:])
            return x.transpose(1, 2).flatten(0, 1)

        samples = {key: chunked(value) for key, value in fields.items()}
        samples["starts"] = chunked(starts.unsqueeze(-1).expand(-1, -1, a))
        for name in ("actor_hidden", "critic_hidden"):
            samples[name] = d[name][::length].flatten(0, 2)
        return samples

    def _step(self, mb: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        c = self.config
        if c.recurrent:  # chunks [B, L, ...] -> sequences [L, B, ...]
            starts = mb["starts"].T
            out, _ = self.actor.unroll(mb["actor_in"].transpose(0, 1), mb["actor_hidden"], starts)
            value, _ = self.critic.unroll(mb["critic_in"].transpose(0, 1), mb["critic_hidden"], starts)
            out, value = out.transpose(0, 1), value.transpose(0, 1)
        else:
            out, value = self.actor(mb["actor_in"])[0], self.critic(mb["critic_in"])[0]
        pi = self._policy(out, mb.get("avail"))
        weights = mb["weights"]
        log_ratio = pi.log_prob(mb["actions"]) - mb["log_prob"]
        ratio = log_ratio.exp()
        policy_loss = clipped_surrogate(ratio, mb["advantages"], c.clip_range, weights)
        entropy = weighted_mean(pi.entropy(), weights)
        value_error = F.huber_loss(value.squeeze(-1), mb["targets"], reduction="none", delta=c.huber_delta)
        value_loss = value_error.mean()
        loss = policy_loss - c.ent_coef * entropy + c.vf_coef * value_loss
        if not finite_or_warn(loss, "MAPPO"):
            self.skipped_updates += 1
            return None
        gradient_step(self.optimizer, loss, self.parameters, c.max_grad_norm)
        with torch.no_grad():
            approx_kl = weighted_mean((ratio - 1) - log_ratio, weights)
            clip_fraction = weighted_mean(((ratio - 1).abs() > c.clip_range).float(), weights)
        return {
            "loss": loss.detach(),
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy.detach(),
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }

    def counters(self):
        return {"skipped_updates": self.skipped_updates}


class MAPPOInference(InferencePolicy):
    """MAPPO's shared feed-forward actor over ``[B, A, obs_dim]``: normalise, append the one-hot ids, body and head;
    the argmax over available actions (discrete: ``avail_actions [B, A, n_actions]``, bool, is a second input) or the
    scaled Gaussian mean (continuous)."""

    multiagent = True

    def __init__(self, agent: MAPPO):
        super().__init__(agent.observation_space, agent.action_space, FrozenNorm.of(agent.obs_norm))
        self.body, self.head = agent.actor.body, agent.actor.head
        self.discrete = bool(agent.discrete)
        self.agent_id = bool(agent.config.agent_id)
        self.register_buffer("ids", torch.eye(agent.num_agents))
        self.scale = None if self.discrete else FrozenScale(agent.scaler)
        if self.discrete:
            n_actions = int(agent.action_space.nvec.max())
            self.inputs.append(tensor_spec("avail_actions", (agent.num_agents, n_actions), "bool"))

    def forward(self, obs: torch.Tensor, avail_actions: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm(obs)
        if self.agent_id:
            x = torch.cat((x, torch.zeros_like(x[..., :1]) + self.ids), -1)
        out = self.head(self.body(x))
        if self.discrete:
            return out.masked_fill(~avail_actions, -1e9).argmax(-1)
        return self.scale(out)

    def parity_inputs(self, count: int, seed: int) -> list[torch.Tensor]:
        """Random availability masks with at least one available action per agent (and only actions an agent has)."""
        return [random_availability(self.action_space, count, seed)] if self.discrete else []
