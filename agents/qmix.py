"""QMIX: monotonic value-function factorisation for cooperative multi-agent Q-learning (Rashid et al., 2018), and VDN
(value decomposition networks, Sunehag et al., 2018) as its ``mixer="vdn"``.

Each agent a has a utility Q_a(tau^a, u^a) from a GRU over its history (observation, last action, agent id), shared
by all agents. A mixing network combines them into

    Q_tot(tau, u, s) = w_2(s)^T elu(W_1(s)^T Q(tau, u) + b_1(s)) + V(s),

whose weights W_1, w_2 come from hypernetworks of the global state s, made non-negative (absolute values), so that
dQ_tot / dQ_a >= 0: each agent's greedy action is then part of the greedy joint action, and execution stays
decentralised. VDN is the special case with no state input and unit weights, Q_tot = sum_a Q_a(tau^a, u^a)
(Sunehag et al., eq. 1); everything else (agents, replay, targets) is shared. Each iteration:

    1. act epsilon-greedily (epsilon annealed linearly over env steps) among the available actions, writing whole
       episodes into the episode buffer on the device;
    2. sample B episodes and unroll the agents' GRUs over them, with the online and the target networks;
    3. targets: double Q-learning (the online agents pick argmax over the available actions of step t + 1, the target
       agents and mixer value it), then one-step or TD(lambda) returns over the episode, bootstrapping truncated
       episodes from their final state;
    4. minimise the masked squared TD error of Q_tot; copy the online networks into the targets every
       ``target_update_interval`` updates.
"""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rl_suite.agent import MultiAgentAgent
from rl_suite.buffers import EpisodeBuffer, lambda_returns
from rl_suite.config import setting
from rl_suite.deploy.inference import ExportError
from rl_suite.multiagent import random_available_action
from rl_suite.networks import RecurrentMLP
from rl_suite.optim import finite_or_warn, gradient_step

MIXERS = ("qmix", "vdn")


@dataclasses.dataclass(frozen=True)
class QMIXConfig:
    buffer_episodes: int = setting(5000, at_least=1)
    """Episodes the replay holds."""
    batch_episodes: int = setting(32, at_least=1)
    """Episodes per gradient step."""
    steps_per_iteration: int = setting(8, at_least=1)
    """Batched env steps collected between learning iterations."""
    updates_per_iteration: int = setting(1, at_least=1)
    """Gradient steps per learning iteration."""
    learning_starts_episodes: int = setting(32, at_least=0)
    """Completed episodes in the replay before learning starts."""
    lr: float = setting(5e-4, at_least=0)
    """Adam learning rate."""
    gamma: float = setting(0.99, at_least=0, at_most=1)
    """Discount factor."""
    td_lambda: float = setting(0.0, at_least=0, at_most=1)
    """lambda of the TD(lambda) targets; 0 gives one-step targets."""
    double_q: bool = True
    """The online agents choose the next actions and the target networks value them."""
    target_update_interval: int = setting(200, at_least=1)
    """Gradient steps between hard copies of the online networks into the targets."""
    eps_start: float = setting(1.0, at_least=0, at_most=1)
    """Exploration rate at the start."""
    eps_end: float = setting(0.05, at_least=0, at_most=1)
    """Exploration rate after annealing."""
    eps_anneal_steps: int = setting(50_000, at_least=0)
    """Env steps (summed over environments) over which epsilon falls linearly from start to end (0: end at once)."""
    hidden: tuple[int, ...] = setting((64,), at_least=1)
    """Layers of the agent network before its GRU."""
    gru_size: int = setting(64, at_least=1)
    """Hidden state size of the agents' GRU."""
    mixing_embed: int = setting(32, at_least=1)
    """Width of the mixing network's hidden layer."""
    hypernet_hidden: int = setting(64, at_least=1)
    """Hidden width of the hypernetworks that produce the mixing weights."""
    max_grad_norm: float = setting(10.0, at_least=0)
    """Clip the global gradient norm to this (0: no clipping)."""
    last_action: bool = True
    """Give each agent its previous action (one-hot) as input."""
    agent_id: bool = True
    """Give each agent its one-hot id as input."""
    mixer: str = setting("qmix", choices=MIXERS)
    """How the agents' utilities make Q_tot: "qmix" (the monotonic hypernetwork mixer) or "vdn" (their sum)."""


class QMixer(nn.Module):
    """Q_tot from the agents' chosen utilities ``q [..., A]`` and the global state ``s [..., S]``, monotonic in each
    utility: the mixing weights are absolute values of hypernetwork outputs."""

    def __init__(self, num_agents: int, state_dim: int, embed: int, hypernet_hidden: int):
        super().__init__()
        self.num_agents, self.embed = num_agents, embed
        self.w1 = nn.Sequential(
            nn.Linear(state_dim, hypernet_hidden), nn.ReLU(), nn.Linear(hypernet_hidden, num_agents * embed)
        )
        self.b1 = nn.Linear(state_dim, embed)
        self.w2 = nn.Sequential(nn.Linear(state_dim, hypernet_hidden), nn.ReLU(), nn.Linear(hypernet_hidden, embed))
        self.v = nn.Sequential(nn.Linear(state_dim, embed), nn.ReLU(), nn.Linear(embed, 1))

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        w1 = self.w1(state).abs().view(*q.shape[:-1], self.num_agents, self.embed)
        hidden = F.elu((q.unsqueeze(-2) @ w1).squeeze(-2) + self.b1(state))
        return (hidden * self.w2(state).abs()).sum(-1) + self.v(state).squeeze(-1)


class VDNMixer(nn.Module):
    """Q_tot as the sum of the agents' chosen utilities ``q [..., A]``; the state is not used."""

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return q.sum(-1)


class QMIX(MultiAgentAgent):
    name = "qmix"
    Config = QMIXConfig
    action_space_types = (gym.spaces.MultiDiscrete,)

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", global_state_space=None, **overrides
    ):
        super().__init__(observation_space, action_space, config, device, global_state_space, **overrides)
        c = self.config
        self.num_agents, obs_dim = observation_space.shape
        self.n_actions = int(action_space.nvec.max())
        in_dim = obs_dim + (self.n_actions if c.last_action else 0) + (self.num_agents if c.agent_id else 0)
        self.agents = RecurrentMLP(in_dim, c.hidden, self.n_actions, "relu", c.gru_size)
        if c.mixer == "vdn":
            self.mixer = VDNMixer()
        else:
            self.mixer = QMixer(self.num_agents, global_state_space.shape[0], c.mixing_embed, c.hypernet_hidden)
        self.target_agents, self.target_mixer = copy.deepcopy(self.agents), copy.deepcopy(self.mixer)
        self.modules = {
            "agents": self.agents,
            "mixer": self.mixer,
            "target_agents": self.target_agents,
            "target_mixer": self.target_mixer,
        }
        for module in self.modules.values():
            module.to(self.device)
        self.target_agents.requires_grad_(False)
        self.target_mixer.requires_grad_(False)
        self.parameters = [*self.agents.parameters(), *self.mixer.parameters()]
        self.optimizer = torch.optim.Adam(self.parameters, lr=c.lr)
        self.optimizers = {"optimizer": self.optimizer}
        self.ids = torch.eye(self.num_agents, device=self.device)
        self.env_steps = 0  # for the exploration schedule
        self.updates = 0
        self.skipped_updates = 0

    @property
    def steps_per_iteration(self) -> int:
        return self.config.steps_per_iteration

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None) -> EpisodeBuffer:
        if max_episode_steps is None:
            raise ValueError("QMIX stores whole episodes and needs an env with a time limit (max_episode_steps)")
        a, obs_dim = self.observation_space.shape
        spec = {
            "obs": ((a, obs_dim), torch.float32),
            "actions": ((a,), torch.int64),
            "rewards": ((), torch.float32),
            "terminated": ((), torch.bool),
            "global_state": (self.global_state_space.shape, torch.float32),
            "avail_actions": ((a, self.n_actions), torch.bool),
        }
        return EpisodeBuffer(self.config.buffer_episodes, num_envs, max_episode_steps, spec, self.device)

    def epsilon(self) -> float:
        c = self.config
        fraction = min(self.env_steps / max(c.eps_anneal_steps, 1), 1.0)
        return c.eps_start + fraction * (c.eps_end - c.eps_start)

    def _inputs(self, obs: torch.Tensor, last_action: torch.Tensor) -> torch.Tensor:
        """Agent inputs ``[..., A, in]``: observation, last action (one-hot) and agent id."""
        parts = [obs]
        if self.config.last_action:
            parts.append(last_action)
        if self.config.agent_id:
            parts.append(self.ids.expand(*obs.shape[:-2], *self.ids.shape))
        return torch.cat(parts, -1)

    # -- acting -----------------------------------------------------------------------------------------------

    def initial_memory(self, num_envs: int) -> dict[str, torch.Tensor]:
        a = self.num_agents
        return {
            "hidden": torch.zeros(num_envs, a, self.config.gru_size, device=self.device),
            "last_action": torch.zeros(num_envs, a, self.n_actions, device=self.device),
        }

    @torch.no_grad()
    def act(self, inputs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor], deterministic: bool = False):
        obs, avail = inputs["obs"], inputs["avail_actions"]
        n, a = obs.shape[:2]
        x = self._inputs(obs, memory["last_action"]).flatten(0, 1)
        q, hidden = self.agents(x, memory["hidden"].reshape(n * a, -1))
        action = q.view(n, a, -1).masked_fill(~avail, -torch.inf).argmax(-1)
        if not deterministic:  # epsilon-greedy, the random action uniform among the available ones
            random_action = random_available_action(avail)
            explore = torch.rand(n, a, device=self.device) < self.epsilon()
            action = torch.where(explore, random_action, action)
            self.env_steps += n
        last_action = F.one_hot(action, self.n_actions).float()
        return action, {}, {"hidden": hidden.view(n, a, -1), "last_action": last_action}

    def inference_policy(self):
        raise ExportError(
            "qmix cannot be exported: its agents are recurrent Q-networks whose greedy action needs the GRU hidden "
            "state and the last action carried between steps, which a stateless exported policy does not have"
        )

    # -- learning ---------------------------------------------------------------------------------------------

    def update(self, buffer: EpisodeBuffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        c = self.config
        if buffer.episodes < max(c.learning_starts_episodes, 1):
            return {"epsilon": torch.tensor(self.epsilon())}
        totals: dict[str, torch.Tensor] = {}
        for _ in range(c.updates_per_iteration):
            metrics = self._step(buffer.sample(c.batch_episodes))
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value / c.updates_per_iteration
        totals["epsilon"] = torch.tensor(self.epsilon())
        return totals

    def _utilities(self, agents: RecurrentMLP, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Every agent's Q-values at every step of the episodes, ``[B, L + 1, A, n]``, from a zero hidden state."""
        obs, actions = batch["obs"], batch["actions"]
        b, steps, a = actions.shape
        last_action = F.one_hot(actions, self.n_actions).float().roll(1, dims=1)
        last_action[:, 0] = 0.0  # no action before the first step
        x = self._inputs(obs, last_action).transpose(0, 1).reshape(steps, b * a, -1)
        q, _ = agents.unroll(x, torch.zeros(b * a, self.config.gru_size, device=self.device))
        return q.view(steps, b, a, -1).transpose(0, 1)

    def _step(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        c = self.config
        actions, avail, state = batch["actions"], batch["avail_actions"], batch["global_state"]
        q = self._utilities(self.agents, batch)
        chosen = q[:, :-1].gather(-1, actions[:, :-1].unsqueeze(-1)).squeeze(-1)  # [B, L, A]
        q_tot = self.mixer(chosen, state[:, :-1])
        with torch.no_grad():
            target_q = self._utilities(self.target_agents, batch)[:, 1:]
            next_avail = avail[:, 1:]
            # A large finite penalty, not -inf: rows past an episode's end may have no available action.
            chooser = q[:, 1:] if c.double_q else target_q
            best = chooser.masked_fill(~next_avail, -1e9).argmax(-1, keepdim=True)
            next_q_tot = self.target_mixer(target_q.gather(-1, best).squeeze(-1), state[:, 1:])
            filled = batch["filled"]
            targets = lambda_returns(
                batch["rewards"][:, :-1], batch["terminated"][:, :-1], next_q_tot, filled[:, 1:], c.gamma, c.td_lambda
            )
        mask = filled[:, :-1].float()
        td_error = (q_tot - targets) * mask
        loss = td_error.square().sum() / mask.sum()
        if not finite_or_warn(loss, "QMIX"):
            self.skipped_updates += 1
            return {}
        gradient_step(self.optimizer, loss, self.parameters, c.max_grad_norm)
        self.updates += 1
        if self.updates % c.target_update_interval == 0:
            self.target_agents.load_state_dict(self.agents.state_dict())
            self.target_mixer.load_state_dict(self.mixer.state_dict())
        with torch.no_grad():
            count = mask.sum()
            return {
                "loss": loss.detach(),
                "q_tot": (q_tot * mask).sum() / count,
                "target": (targets * mask).sum() / count,
                "td_error_abs": td_error.abs().sum() / count,
            }

    def counters(self):
        return {"env_steps": self.env_steps, "updates": self.updates, "skipped_updates": self.skipped_updates}
