"""The multi-agent form of the env contract, and the collector that drives it.

A ``MultiAgentVecEnv`` is a ``VecEnv`` with an agent axis. With ``N = num_envs`` and ``A = num_agents``:

- ``reset(seed=None) -> obs``: float32 ``[N, A, d]``, one row of observations per agent (``observation_space`` is
  ``Box((A, d))``; ``agent_observation_space`` is one agent's ``Box((d,))``).
- ``step(actions)``: integers ``[N, A]`` (``action_space`` is ``MultiDiscrete([n] * A)``, ``agent_action_space``
  is ``Discrete(n)``) or floats ``[N, A, k]`` (``Box((A, k))``, one agent's ``Box((k,))``).
  Returns ``(obs, reward, terminated, truncated, info)`` as every ``VecEnv`` does, with the team reward ``[N]`` and
  per-environment ``terminated``/``truncated``; ended environments reset inside the step. ``info`` adds:
    - ``global_state`` ``[N, S]`` (the current one, after resets) and ``final_global_state`` (before resets), for
      centralised critics and mixers; ``global_state_space`` is ``Box((S,))``.
    - ``avail_actions`` and ``final_avail_actions``, bool ``[N, A, n]`` (discrete actions only): which actions
      each agent may take. A dead agent may take only its no-op.
    - ``alive`` bool ``[N, A]``: agents that still act, and ``final_alive`` (before resets); see MAPPO's death
      masking for how learners treat the others.
    - ``agent_reward`` ``[N, A]``, where the task rewards agents separately (predator and prey, say).
    - ``won`` bool ``[N]``, where the task has a winner: true for episodes that ended in this step with a win.
- The current ``global_state``, ``avail_actions`` and ``alive`` are also properties of the env (buffers that the
  next ``reset`` or ``step`` overwrites), so a policy can act right after ``reset``.
- Bad input gets a clear error: actions for the wrong number of agents, and (where value checks are on, the CPU
  default) an action that the mask marks unavailable.

Multi-agent agents (MAPPO, QMIX) derive from ``rl_suite.agent.MultiAgentAgent``: they act on a dict of inputs
(``obs``, ``global_state``, ``alive`` and, for discrete actions, ``avail_actions``) and carry a memory between steps
(recurrent hidden states, the last action):

    memory = agent.initial_memory(num_envs)                       # dict of [N, ...] tensors; {} for none
    actions, extras, memory = agent.act(inputs, memory, deterministic=False)

The collector zeroes the memory of environments whose episode ended, and writes every transition, with the
inputs and ``next_global_state`` / ``next_alive`` / ``next_avail_actions``, into the agent's buffer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rl_suite.collector import Collector, EpisodeStats
from rl_suite.env import VecEnv


class MultiAgentVecEnv(VecEnv):
    """``num_envs`` environments of ``num_agents`` agents each; see the module docstring.

    Native simulators implement the ``VecEnv`` hooks (``_advance`` writes ``self._reward`` and, where the task has
    them, ``self._agent_reward`` and ``self._won``; ``_observe`` writes ``[N, A, d]`` rows) and two more:
    ``_observe_global_state(out, env_ids)`` and, for tasks with masks or deaths, ``_observe_available_actions`` and
    ``_observe_alive`` (all available and all alive by default).
    """

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device,
        num_agents: int,
        agent_observation_space: gym.spaces.Box,
        agent_action_space: gym.spaces.Discrete | gym.spaces.Box,
        global_state_dim: int,
        max_episode_steps: int | None = None,
        seed: int | None = None,
        check_values: bool | None = None,
        masked_resets: bool | None = None,
        agent_rewards: bool = False,
        reports_outcome: bool = False,
    ):
        self.num_agents = a = int(num_agents)
        self.agent_observation_space, self.agent_action_space = agent_observation_space, agent_action_space
        self.discrete = isinstance(agent_action_space, gym.spaces.Discrete)
        (obs_dim,) = agent_observation_space.shape
        observation_space = gym.spaces.Box(-np.inf, np.inf, (a, obs_dim), np.float32)
        if self.discrete:
            self.n_actions = int(agent_action_space.n)
            action_space = gym.spaces.MultiDiscrete([self.n_actions] * a)
        else:
            low, high = agent_action_space.low, agent_action_space.high
            action_space = gym.spaces.Box(np.tile(low, (a, 1)), np.tile(high, (a, 1)), dtype=np.float32)
        super().__init__(
            num_envs, device, observation_space, action_space, max_episode_steps, seed, check_values, masked_resets
        )
        self.global_state_space = gym.spaces.Box(-np.inf, np.inf, (int(global_state_dim),), np.float32)
        n, device = self.num_envs, self.device
        # (current, final) pairs, like _obs and _final_obs.
        self._global_state = torch.zeros(n, global_state_dim, device=device)
        self._final_global_state = torch.zeros_like(self._global_state)
        self._alive = torch.ones(n, a, dtype=torch.bool, device=device)
        self._final_alive = torch.ones_like(self._alive)
        self._avail = self._final_avail = None
        if self.discrete:
            self._avail = torch.ones(n, a, self.n_actions, dtype=torch.bool, device=device)
            self._final_avail = torch.ones_like(self._avail)
        self._agent_reward = torch.zeros(n, a, device=device) if agent_rewards else None
        self._won = torch.zeros(n, dtype=torch.bool, device=device) if reports_outcome else None

    # -- the multi-agent parts of the contract ----------------------------------------------------------------

    @property
    def global_state(self) -> torch.Tensor:
        return self._global_state

    @property
    def avail_actions(self) -> torch.Tensor | None:
        return self._avail

    @property
    def alive(self) -> torch.Tensor:
        return self._alive

    @property
    def has_agent_rewards(self) -> bool:
        """Whether ``info`` carries per-agent rewards."""
        return self._agent_reward is not None

    @property
    def has_winner(self) -> bool:
        """Whether episodes end in a win or not (``info["won"]``)."""
        return self._won is not None

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        super().load_state_dict(state)
        self._observe_extras(self._global_state, self._avail, self._alive, None)

    # -- hooks for native simulators --------------------------------------------------------------------------

    def _observe_global_state(self, out: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        raise NotImplementedError

    def _observe_available_actions(self, out: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        _fill_rows(out, env_ids, True)

    def _observe_alive(self, out: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        _fill_rows(out, env_ids, True)

    # -- the VecEnv machinery, extended with state, masks and deaths -----------------------------------------

    def _observe_extras(self, state, avail, alive, env_ids) -> None:
        self._observe_global_state(state, env_ids)
        if avail is not None:
            self._observe_available_actions(avail, env_ids)
        self._observe_alive(alive, env_ids)

    def _observe_final(self) -> None:
        super()._observe_final()
        self._observe_extras(self._final_global_state, self._final_avail, self._final_alive, None)

    def _observe_current(self, env_ids: torch.Tensor | None = None) -> None:
        super()._observe_current(env_ids)
        if env_ids is not None:
            self._global_state.copy_(self._final_global_state)
            self._alive.copy_(self._final_alive)
            if self._avail is not None:
                self._avail.copy_(self._final_avail)
            if not env_ids.numel():
                return
        self._observe_extras(self._global_state, self._avail, self._alive, env_ids)

    def _step_info(self) -> dict[str, torch.Tensor]:
        info = super()._step_info()
        info.update(global_state=self._global_state, final_global_state=self._final_global_state)
        info.update(alive=self._alive, final_alive=self._final_alive)
        if self._avail is not None:
            info.update(avail_actions=self._avail, final_avail_actions=self._final_avail)
        if self._agent_reward is not None:
            info["agent_reward"] = self._agent_reward
        if self._won is not None:
            info["won"] = self._won
        return info

    def check_actions(self, actions) -> torch.Tensor:
        name, a = type(self).__name__, self.num_agents
        if isinstance(actions, torch.Tensor) and actions.dim() >= 2 and actions.shape[1] != a:
            raise ValueError(
                f"{name}.step expects actions for {a} agents, shape {self._action_shape} ([num_envs, num_agents"
                f"{'' if self.discrete else ', act_dim'}]), got {tuple(actions.shape)}"
            )
        actions = super().check_actions(actions)
        if self.discrete and self.check_values:
            available = self._avail.gather(2, actions.long().unsqueeze(-1)).squeeze(-1)
            if not bool(available.all()):
                bad = (~available).nonzero()
                env, agent = bad[0].tolist()
                allowed = self._avail[env, agent].nonzero().squeeze(1).tolist()
                raise ValueError(
                    f"{name}.step got unavailable actions for {bad.shape[0]} agents (first: env {env}, agent {agent}, "
                    f"action {int(actions[env, agent])}; available: {allowed}); mask with info['avail_actions']"
                )
        return actions


def _fill_rows(out: torch.Tensor, env_ids: torch.Tensor | None, value) -> None:
    if env_ids is None:
        out.fill_(value)
    else:
        out[env_ids] = value


def env_inputs(env: MultiAgentVecEnv) -> dict[str, torch.Tensor]:
    """What a multi-agent policy acts on besides the observations, as views of the env's current buffers."""
    inputs = {"global_state": env.global_state, "alive": env.alive}
    if env.avail_actions is not None:
        inputs["avail_actions"] = env.avail_actions
    return inputs


def random_available_action(avail: torch.Tensor) -> torch.Tensor:
    """An action drawn uniformly among the available ones (``avail``: ``[..., n_actions]`` booleans): the argmax of
    uniform draws, with the unavailable actions below every draw. ``[...]`` indices."""
    return torch.where(avail, torch.rand(avail.shape, device=avail.device), -1.0).argmax(-1)


def reset_memory(memory: dict[str, torch.Tensor], done: torch.Tensor) -> None:
    """Zero, in place, the memory (hidden states, last actions) of environments whose episode ended."""
    keep = (~done).to(torch.float32)
    for value in memory.values():
        value.mul_(keep.view(-1, *[1] * (value.dim() - 1)))


class MultiAgentCollector(Collector):
    """The ``Collector`` for teams: the agent acts on the global state and masks too and carries a memory, which is
    zeroed where episodes end; the buffer gets the inputs and, of the next step, the global state, masks and the
    per-agent rewards that it stores."""

    def __init__(
        self,
        env: MultiAgentVecEnv,
        agent,
        buffer=None,
        act: Callable | None = None,
        step: Callable | None = None,
        seed: int | None = None,
    ):
        if buffer is not None and "agent_reward" in buffer.fields and not env.has_agent_rewards:
            raise ValueError(f"{agent.name} was set to learn per-agent rewards, but {env} reports none")
        super().__init__(env, agent, buffer, act, step, seed=seed)
        self.stats = EpisodeStats(env.device, wins=env.has_winner, metrics=env.episode_metric_names)
        # Collector-owned copies: the env overwrites its buffers on every step.
        self.inputs = {"obs": self.obs, **{key: value.clone() for key, value in env_inputs(env).items()}}
        self.memory = agent.initial_memory(env.num_envs)

    def act(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actions, extras, self.memory = self.act_fn(self.inputs, self.memory)
        return actions, extras

    def fields(self, info: dict[str, torch.Tensor]) -> dict[str, Any]:
        fields = {key: value for key, value in self.inputs.items() if key != "obs"}
        fields["next_global_state"], fields["next_alive"] = info["final_global_state"], info["final_alive"]
        if "final_avail_actions" in info:
            fields["next_avail_actions"] = info["final_avail_actions"]
        if "agent_reward" in info:
            fields["agent_reward"] = info["agent_reward"]
        return {key: value for key, value in fields.items() if key in self.buffer.fields}  # what it stores

    def advance(self, next_obs: torch.Tensor, info: dict[str, torch.Tensor]) -> None:
        super().advance(next_obs, info)
        for key, value in env_inputs(self.env).items():
            self.inputs[key].copy_(value)
        reset_memory(self.memory, info["done"])

    def state_dict(self) -> dict[str, Any]:
        return {"inputs": self.inputs, "memory": self.memory, "stats": self.stats.totals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state["inputs"].items():
            self.inputs[key].copy_(value)
        for key, value in state["memory"].items():
            self.memory[key].copy_(value)
        self.stats.totals.copy_(state["stats"])
