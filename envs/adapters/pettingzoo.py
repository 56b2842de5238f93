"""Any PettingZoo ``ParallelEnv`` behind the multi-agent contract (``MultiAgentVecEnv``).

PettingZoo steps one environment at a time on the host, so the adapter holds ``num_envs`` copies and steps them in a
Python loop, converting at the boundary: actions go to numpy, observations, rewards and flags come back as tensors
on ``device``. ``rl_suite.make("pz:mpe2.simple_spread_v3", num_envs=4, N=3)`` builds one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pettingzoo.utils.env import AECEnv, ParallelEnv

from rl_suite.env import check_num_envs
from rl_suite.multiagent import MultiAgentVecEnv

TEAM_REWARDS = ("mean", "sum")


class PettingZooVecEnv(MultiAgentVecEnv):
    """Run ``num_envs`` copies of a PettingZoo parallel environment as a ``MultiAgentVecEnv``.

    Args:
        env_id_or_factory: ``"module.path:attr"`` (``attr(**env_kwargs)`` builds one environment), a module path
            such as ``"mpe2.simple_spread_v3"`` (its ``parallel_env(**env_kwargs)``), a callable that returns a
            ``ParallelEnv``, or a ``ParallelEnv`` (then ``num_envs`` must be 1).
        num_envs: how many copies.
        device: where the returned tensors live.
        seed: seeds the first ``reset`` (environment ``i`` gets ``seed + i``); later episodes continue the
            environments' own generators.
        team_reward: ``"mean"`` or ``"sum"`` of the rewards of the agents that acted in the step.
        check_values: check action values (see ``VecEnv``).
        **env_kwargs: passed to the environment's constructor.

    The agents are the environment's ``possible_agents``, in order. Every agent must have the same action space,
    ``Discrete`` or ``Box``. Observations are ``Box`` (flattened) or a dict with ``"observation"`` and
    ``"action_mask"``; agents with shorter observations are zero-padded at the end to the longest. The global state
    is ``env.state()`` where the environment implements it, else the padded observations concatenated. Discrete
    availability masks come from an ``"action_mask"`` in the observation dict or in the agent's info, else every
    action is available. An agent that has left the episode is not ``alive``, observes zeros, may take only action 0
    (its actions are not passed on) and gets no reward.

    An episode ends when every agent is done (terminated or truncated); it is reported as truncated if any agent
    was truncated in its last step, else as terminated. ``max_episode_steps`` is the environment's ``max_cycles``
    where it has one, else ``None``. The environments are outside simulators: there is no ``get_state``,
    ``set_state`` or ``state_dict``.
    """

    def __init__(
        self,
        env_id_or_factory: str | Callable[..., ParallelEnv] | ParallelEnv,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        team_reward: str = "mean",
        check_values: bool | None = None,
        **env_kwargs,
    ):
        num_envs = check_num_envs(num_envs)
        if team_reward not in TEAM_REWARDS:
            raise ValueError(f"team_reward must be one of {TEAM_REWARDS}, got {team_reward!r}")
        self.team_reward = team_reward
        self.envs = _build_envs(env_id_or_factory, num_envs, env_kwargs)
        env = self.envs[0]
        self.agent_names = list(env.possible_agents)
        if not self.agent_names:
            raise ValueError(f"{_name(env)} has no possible_agents")
        self._obs_dims = [_observation_dim(env, name) for name in self.agent_names]
        obs_dim = max(self._obs_dims)
        action_space = _shared_action_space(env, self.agent_names)
        # Whether the environment has a global state shows only when it is asked for one.
        env.reset(seed=seed)
        try:
            state_dim = int(np.asarray(env.state()).size)
            self._has_state = True
        except (NotImplementedError, AttributeError):
            state_dim, self._has_state = len(self.agent_names) * obs_dim, False
        if isinstance(action_space, gym.spaces.Box):
            agent_action_space = gym.spaces.Box(
                action_space.low.astype(np.float32), action_space.high.astype(np.float32), dtype=np.float32
            )
        else:
            agent_action_space = action_space
        self._env_action_space = action_space
        max_cycles = getattr(env.unwrapped, "max_cycles", getattr(env, "max_cycles", None))
        super().__init__(
            num_envs,
            device,
            num_agents=len(self.agent_names),
            agent_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            agent_action_space=agent_action_space,
            global_state_dim=state_dim,
            max_episode_steps=max_cycles if isinstance(max_cycles, int) and max_cycles > 0 else None,
            seed=seed,
            check_values=check_values,
            agent_rewards=True,
        )
        self._first_seed = seed
        n, a = self.num_envs, self.num_agents
        # Host-side staging: (current, final) pairs, filled in the loop and copied to the device once per step.
        self._np = {
            "obs": np.zeros((n, a, obs_dim), np.float32),
            "final_obs": np.zeros((n, a, obs_dim), np.float32),
            "state": np.zeros((n, state_dim), np.float32),
            "final_state": np.zeros((n, state_dim), np.float32),
            "alive": np.ones((n, a), bool),
            "final_alive": np.ones((n, a), bool),
            "agent_reward": np.zeros((n, a), np.float32),
            "reward": np.zeros(n, np.float32),
            "terminated": np.zeros(n, bool),
            "truncated": np.zeros(n, bool),
        }
        if self.discrete:
            self._np["avail"] = np.ones((n, a, self.n_actions), bool)
            self._np["final_avail"] = np.ones((n, a, self.n_actions), bool)

    # -- the contract -----------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is None:  # the seed given at construction seeds the first reset only
            seed, self._first_seed = self._first_seed, None
        for i, env in enumerate(self.envs):
            obs, infos = env.reset(seed=None if seed is None else seed + i)
            self._record(i, env, obs, infos, "")
        self._upload("state", "alive", "avail")
        return self.start_episodes(torch.from_numpy(self._np["obs"]))

    def step(self, actions: torch.Tensor):
        actions = self.check_actions(actions)
        host = actions.cpu().numpy()
        if not self.discrete:
            host = host.astype(self._env_action_space.dtype, copy=False)
        staged, names = self._np, self.agent_names
        for i, env in enumerate(self.envs):
            acting = [j for j, name in enumerate(names) if name in env.agents]
            obs, rewards, terminations, truncations, infos = env.step({names[j]: host[i, j] for j in acting})
            row = staged["agent_reward"][i]
            row[:] = [float(rewards.get(name, 0.0)) for name in names]
            acted = [row[j] for j in acting]
            staged["reward"][i] = (np.mean(acted) if self.team_reward == "mean" else np.sum(acted)) if acted else 0.0
            self._record(i, env, obs, infos, "final_")
            ended = not env.agents or all(
                terminations.get(names[j], False) or truncations.get(names[j], False) for j in acting
            )
            truncated = ended and any(truncations.get(names[j], False) for j in acting)
            staged["truncated"][i], staged["terminated"][i] = truncated, ended and not truncated
            if ended:
                obs, infos = env.reset()
                self._record(i, env, obs, infos, "")
            else:
                self._copy_row(i, env)
        # The multi-agent parts first: finish_step's info holds them.
        self._upload("state", "alive", "avail", "final_state", "final_alive", "final_avail")
        self._agent_reward.copy_(torch.from_numpy(staged["agent_reward"]))
        obs, reward, terminated, truncated, final_obs = (
            torch.from_numpy(staged[key]) for key in ("obs", "reward", "terminated", "truncated", "final_obs")
        )
        return self.finish_step(obs, reward, terminated, truncated, final_obs=final_obs)

    def state_dict(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError(
            f"{type(self).__name__} runs outside simulators whose state cannot be saved; checkpoints of runs on it "
            f"hold no environment state"
        )

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.state_dict()

    def close(self) -> None:
        for env in self.envs:
            env.close()

    # -- conversion ----------------------------------------------------------------------------------------------

    def _record(self, i: int, env, obs: dict, infos: dict, prefix: str) -> None:
        """Write environment ``i``'s observations, masks, alive flags and state into the staged row ``prefix``."""
        staged = self._np
        obs_row, alive_row = staged[prefix + "obs"][i], staged[prefix + "alive"][i]
        avail_row = staged.get(prefix + "avail")
        avail_row = None if avail_row is None else avail_row[i]
        obs_row[:] = 0.0
        for j, name in enumerate(self.agent_names):
            value = obs.get(name)
            # In the final row, every agent observed in the step counts (it acted); in the current one, those
            # that act next.
            alive_row[j] = value is not None and (prefix == "final_" or name in env.agents)
            if not alive_row[j]:
                value = None
            mask = None
            if isinstance(value, dict):
                mask = value.get("action_mask")
                value = value.get("observation")
            if value is not None:
                obs_row[j, : self._obs_dims[j]] = np.asarray(value, np.float32).reshape(-1)
            if avail_row is not None:
                info = infos.get(name) if isinstance(infos, dict) else None
                if mask is None and isinstance(info, dict):
                    mask = info.get("action_mask")
                if not alive_row[j]:
                    avail_row[j] = False
                    avail_row[j, 0] = True  # a dead agent may take only action 0
                else:
                    avail_row[j] = True if mask is None else np.asarray(mask, bool).reshape(-1)
        state_row = staged[prefix + "state"][i]
        if self._has_state:
            state_row[:] = np.asarray(env.state(), np.float32).reshape(-1)
        else:
            state_row[:] = obs_row.reshape(-1)

    def _copy_row(self, i: int, env) -> None:
        """Environment ``i`` did not reset: its current row is the final one, less the agents that left."""
        staged = self._np
        for key in ("obs", "state", "alive", "avail"):
            if key in staged:
                staged[key][i] = staged["final_" + key][i]
        for j, name in enumerate(self.agent_names):
            if staged["alive"][i, j] and name not in env.agents:
                staged["alive"][i, j] = False
                staged["obs"][i, j] = 0.0
                if "avail" in staged:
                    staged["avail"][i, j] = False
                    staged["avail"][i, j, 0] = True
                if not self._has_state:
                    staged["state"][i] = staged["obs"][i].reshape(-1)

    def _upload(self, *keys: str) -> None:
        targets = {
            "state": self._global_state,
            "final_state": self._final_global_state,
            "alive": self._alive,
            "final_alive": self._final_alive,
            "avail": self._avail,
            "final_avail": self._final_avail,
        }
        for key in keys:
            if targets[key] is not None:
                targets[key].copy_(torch.from_numpy(self._np[key]))


def _name(env) -> str:
    return type(getattr(env, "unwrapped", env)).__module__ or type(env).__name__


def _resolve_factory(env_id: str) -> Callable[..., Any]:
    module_name, colon, attribute = env_id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"cannot import {module_name!r} for the PettingZoo id {env_id!r} ({error}); ids are 'module.path:attr' or "
            f"a module with a parallel_env, such as 'mpe2.simple_spread_v3'"
        ) from error
    attribute = attribute or "parallel_env"
    factory = getattr(module, attribute, None)
    if factory is None:
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r} (from the PettingZoo id {env_id!r})")
    return factory


def _build_envs(env_id_or_factory, num_envs: int, env_kwargs: dict) -> list[ParallelEnv]:
    if isinstance(env_id_or_factory, ParallelEnv):
        if num_envs != 1 or env_kwargs:
            raise ValueError("a ParallelEnv instance runs as one environment: pass a factory or an id for num_envs > 1")
        envs = [env_id_or_factory]
    else:
        factory = _resolve_factory(env_id_or_factory) if isinstance(env_id_or_factory, str) else env_id_or_factory
        if not callable(factory):
            raise TypeError(f"expected a PettingZoo id, factory or ParallelEnv, got {type(env_id_or_factory).__name__}")
        envs = [factory(**env_kwargs) for _ in range(num_envs)]
    for env in envs:
        if isinstance(env, AECEnv):
            raise TypeError(
                f"{_name(env)} built an AECEnv; the adapter needs the parallel API (use the module's parallel_env, "
                f"or pettingzoo.utils.conversions.aec_to_parallel)"
            )
        if not isinstance(env, ParallelEnv):
            raise TypeError(f"expected a PettingZoo ParallelEnv, got {type(env).__name__}")
    return envs


def _observation_dim(env, name: str) -> int:
    space = env.observation_space(name)
    if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:
        space = space["observation"]
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(
            f"the adapter needs Box observations (or a dict with a Box 'observation'), agent {name!r} of {_name(env)} "
            f"has {space}"
        )
    return int(np.prod(space.shape))


def _shared_action_space(env, names: list[str]) -> gym.spaces.Space:
    spaces = [env.action_space(name) for name in names]
    first = spaces[0]
    for name, space in zip(names, spaces, strict=True):
        if space != first:
            raise ValueError(
                f"every agent must share one action space, but {names[0]!r} has {first} and {name!r} has {space}; "
                f"the multi-agent contract stacks the agents' actions into one tensor"
            )
    if not isinstance(first, (gym.spaces.Discrete, gym.spaces.Box)):
        raise ValueError(f"the adapter supports Discrete and Box action spaces, {_name(env)} has {first}")
    if isinstance(first, gym.spaces.Discrete) and first.start != 0:
        raise ValueError(f"the adapter needs Discrete action spaces that start at 0, got {first}")
    return first
