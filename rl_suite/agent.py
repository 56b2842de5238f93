"""What every algorithm is to the rest of the suite: a policy (``act``) plus a learner (``update``).

The runner drives any agent through the same few verbs:

- ``make_buffer(num_envs, max_episode_steps=None)``: the storage its collector writes (a rollout, a replay buffer,
  or whole episodes, which are sized by the env's time limit).
- ``steps_per_iteration``: how many batched env steps to collect before each ``update``.
- ``act(obs) -> (actions, extras)``: actions for the env, and what the learner needs stored per step (log-probs and
  values for PPO; noise and times for flow policies; hidden states for recurrent agents).
- ``update(buffer, progress=0.0) -> metrics``: one learning iteration; metrics are a dict of tensors, read only when
  logged.

Multi-agent agents derive from ``MultiAgentAgent`` (below), which adds a global state and a memory carried between
steps, and train on ``MultiAgentVecEnv``s. Which kind an agent or an env is, is its class: ``isinstance``.

Subclasses build their networks and optimisers and register them in ``self.modules`` and ``self.optimizers``, so
that checkpoints, ``save`` and ``load`` cover them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
from typing import TYPE_CHECKING, Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_suite.config import check_settings, from_plain, split_overrides, to_plain
from rl_suite.device import resolve_device
from rl_suite.multiagent import MultiAgentVecEnv
from rl_suite.registry import not_plain_data
from rl_suite.spaces import space_from_dict, space_to_dict

if TYPE_CHECKING:
    from rl_suite.deploy.inference import InferencePolicy


class Agent:
    name: ClassVar[str]
    Config: ClassVar[type]  # a frozen dataclass of documented hyperparameters
    action_space_types: ClassVar[tuple[type, ...]] = (gym.spaces.Discrete, gym.spaces.Box)
    supports_distributed: ClassVar[bool] = False
    """Whether the agent trains under torchrun: its optimiser steps average gradients over the ranks and its
    normalisers merge them (rl_suite/distributed.py). Agents without it are refused in a multi-rank run."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config=None,
        device: str | torch.device = "cpu",
        **overrides,
    ):
        if not isinstance(action_space, self.action_space_types):
            kinds = " or ".join(t.__name__ for t in self.action_space_types)
            raise ValueError(f"{self.name} needs a {kinds} action space, got {action_space}")
        self._check_observation_space(observation_space)
        # for_env's, where the config has critic_observation: privileged_critic_space decides whether the critic sees it
        self.offered_critic_space = overrides.pop("critic_observation_space", None)
        config = config if config is not None else self.Config()
        if overrides:
            (values,) = split_overrides(overrides, self.Config)
            config = type(config)(**{**to_plain(config), **values})
        check_settings(config, self.name)  # before anything is built
        self.config = config
        self.observation_space, self.action_space = observation_space, action_space
        self.device = resolve_device(device)
        self.modules: dict[str, nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}

    def _check_observation_space(self, observation_space: gym.Space) -> None:
        if len(observation_space.shape) != 1:
            raise ValueError(f"{self.name} needs flat observations, got shape {observation_space.shape}")

    @classmethod
    def for_env(cls, env, config=None, device: str | torch.device = "cpu", **overrides) -> Agent:
        """An agent for ``env``'s spaces, and its privileged critic observation's (``None`` where it offers none) if
        the agent's config has a ``critic_observation`` setting."""
        _check_env_kind(cls, env)
        if "critic_observation" in {field.name for field in dataclasses.fields(cls.Config)}:
            overrides["critic_observation_space"] = getattr(env, "critic_observation_space", None)
        return cls(env.observation_space, env.action_space, config, device, **overrides)

    def privileged_critic_space(self) -> gym.Space | None:
        """The space of what the critic sees instead of the policy's observation: the env's ``critic_observation_space``
        (passed by ``for_env``) where the config asks for it (``critic_observation``), else ``None``. Asking with none
        offered is refused. Kept as ``self.critic_observation_space``, which ``describe`` records."""
        offered = self.offered_critic_space
        if not getattr(self.config, "critic_observation", False):  # a config of its own may lack the field
            return None
        if offered is None:
            raise ValueError(
                f"{self.name}: critic_observation=True needs an env that offers a privileged critic observation "
                "(critic_observation_space); this one offers none"
            )
        return offered

    # -- what the runner calls; each algorithm implements these ----------------------------------------------

    @property
    def steps_per_iteration(self) -> int:
        raise NotImplementedError

    def make_buffer(self, num_envs: int, max_episode_steps: int | None = None):
        """The storage for ``num_envs`` environments whose episodes last at most ``max_episode_steps`` steps (``None``:
        no time limit). Only buffers of whole episodes need the limit; the others ignore it."""
        raise NotImplementedError

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def update(self, buffer, progress: float = 0.0) -> dict[str, torch.Tensor]:
        """One learning iteration on ``buffer``; ``progress`` is the fraction of the step budget spent (for
        schedules)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def paused(self):
        """For the duration, no background work changes the agent or its buffer (a checkpoint is being taken).
        Agents that learn in worker threads (PQL) park them here."""
        yield

    def close(self) -> None:
        """Stop any background work; the runner calls this when a run ends, however it ends."""

    def counters(self) -> dict[str, Any]:
        """Plain values that a checkpoint must restore besides weights and optimisers (update counts, ...)."""
        return {}

    def load_counters(self, counters: dict[str, Any]) -> None:
        for key, value in counters.items():
            setattr(self, key, value)

    # -- state ------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "modules": {name: module.state_dict() for name, module in self.modules.items()},
            "optimizers": {name: opt.state_dict() for name, opt in self.optimizers.items()},
            "counters": self.counters(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, module in self.modules.items():
            module.load_state_dict(state["modules"][name])
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state["optimizers"][name])
        self.load_counters(state["counters"])

    def describe(self) -> dict[str, Any]:
        """What rebuilds this agent: algorithm, hyperparameters and spaces, as plain data."""
        description = {
            "algo": self.name,
            "config": to_plain(self.config),
            "observation_space": space_to_dict(self.observation_space),
            "action_space": space_to_dict(self.action_space),
        }
        if getattr(self, "critic_observation_space", None) is not None:
            description["critic_observation_space"] = space_to_dict(self.critic_observation_space)
        return description

    @classmethod
    def spaces_from_description(cls, description: dict[str, Any]) -> dict[str, gym.Space]:
        """The spaces that ``describe()`` wrote, as the constructor's keyword arguments."""
        names = ("observation_space", "action_space", "critic_observation_space")
        return {name: space_from_dict(description[name]) for name in names if name in description}

    # -- deployment -------------------------------------------------------------------------------------------

    def inference_policy(self) -> InferencePolicy:
        """The deterministic policy as a stateless module for export (rl_suite/deploy/export.py): raw observations in,
        the actions of ``act(..., deterministic=True)`` out, with normalisation, scaling and clipping inside, and a
        description of its inputs and output. Agents compose it from rl_suite/deploy/inference.py's pieces; one that
        cannot be exported (it needs state carried between steps) raises ``ExportError`` with the reason."""
        raise NotImplementedError(
            f"{self.name} cannot be exported: it does not implement Agent.inference_policy(); return an "
            "InferencePolicy from it (rl_suite/deploy/inference.py: MLPInference, FlowInference, or a subclass)"
        )

    # -- stable-baselines3-style conveniences -----------------------------------------------------------------

    @torch.no_grad()
    def predict(self, obs, deterministic: bool = True):
        """Actions for ``obs`` (one observation or a batch, numpy or torch); returns the same kind and batching."""
        is_numpy = not isinstance(obs, torch.Tensor)
        tensor = torch.as_tensor(np.asarray(obs) if is_numpy else obs, dtype=torch.float32, device=self.device)
        single = tensor.shape == self.observation_space.shape
        actions, _ = self.act(tensor.unsqueeze(0) if single else tensor, deterministic=deterministic)
        actions = actions[0] if single else actions
        return actions.cpu().numpy() if is_numpy else actions

    def learn(
        self,
        env,
        total_steps: int,
        run_dir: str | os.PathLike | None = None,
        resume: str | os.PathLike | None = None,
        **run_settings,
    ) -> dict:
        """Train on ``env`` (a ``VecEnv``) for ``total_steps`` env steps with the shared runner; returns the summary.

        ``resume=RUN_DIR`` continues the run in RUN_DIR from its newest checkpoint, as ``rl-suite train --resume
        RUN_DIR`` does (rl_suite/settings.py): the run must be one of this algorithm on ``env.env_id``, with this
        agent's settings and ``env.num_envs`` environments; it keeps its run settings, of which only ``total_steps``
        and the ``RESUMABLE`` ones may change; and the agent, the env, the buffer and the random state continue from
        the checkpoint (on the CPU, bitwise as if the run had never stopped)."""
        from rl_suite.runner import RunConfig, Runner

        if resume is not None:
            from rl_suite.settings import check_built_as_saved, resumed_settings

            if run_dir is not None:
                raise ValueError("a resumed run continues in its own directory: pass resume=RUN_DIR without run_dir")
            if env.env_id is None:
                raise ValueError("resume needs an env made by rl_suite.make: the run's env_id is checked against it")
            overrides = {"total_steps": total_steps, **run_settings}
            run_values, agent_values = resumed_settings(type(self), env.env_id, resume, overrides)
            config = RunConfig(**run_values)
            check_built_as_saved(resume, config, agent_values, self, env)
            return Runner(self, env, config, run_dir=resume, resume=True).run()
        settings = dict(
            algo=self.name,
            env_id=env.env_id or "custom",
            num_envs=env.num_envs,
            device=str(self.device),
            total_steps=total_steps,
        )
        if env.env_id is None:  # an unregistered env: no evaluation env can be built from its id
            settings["eval_episodes"] = 0
        elif env.env_kwargs and "env_kwargs" not in run_settings:  # evaluate on the env trained on, not the default
            problem = not_plain_data(env.env_kwargs, "env_kwargs")
            if problem:
                raise ValueError(
                    f"learn: the env was made with keywords that are not plain data ({problem}), and the run keeps "
                    "the keywords its evaluation env is built with in config.yaml: make the env with plain values "
                    "(a RobotConfig as robot=config.as_dict()), or pass env_kwargs= to learn"
                )
            settings["env_kwargs"] = env.env_kwargs
        settings.update(run_settings)
        (values,) = split_overrides(settings, RunConfig)
        return Runner(self, env, RunConfig(**values), run_dir=run_dir).run()

    def save(self, path: str | os.PathLike) -> None:
        """Write the agent (weights, normalisers, optimisers, hyperparameters, spaces) to ``path``."""
        from rl_suite.checkpoint import atomic_save

        atomic_save({**self.describe(), "agent": self.state_dict()}, pathlib.Path(path))

    @classmethod
    def load(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> Agent:
        """Rebuild an agent written by ``save`` (or taken from a run's checkpoint); loads tensors only, and builds no
        environment (see ``agent_from_checkpoint``)."""
        from rl_suite.checkpoint import load_checkpoint

        return agent_from_checkpoint(load_checkpoint(pathlib.Path(path)), str(path), device, expected=cls)


class MultiAgentAgent(Agent):
    """An agent of a team (MAPPO, QMIX), trained on a ``MultiAgentVecEnv`` (rl_suite/multiagent.py): observations
    ``[A, d]`` per environment, a global state ``global_state_space`` for centralised critics and mixers, and a memory
    (recurrent hidden states, the last action) that the agent carries from step to step:

        memory = agent.initial_memory(num_envs)
        actions, extras, memory = agent.act(inputs, memory, deterministic=False)

    ``inputs`` holds ``obs`` ``[N, A, d]``, ``global_state`` ``[N, S]``, ``alive`` ``[N, A]`` and, for discrete
    actions, ``avail_actions`` ``[N, A, n]``. The collector zeroes the memory of environments whose episode ended.
    Everything else (``make_buffer``, ``update``, checkpoints, export) is as for every ``Agent``."""

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", global_state_space=None, **overrides
    ):
        self.global_state_space: gym.spaces.Box | None = global_state_space
        super().__init__(observation_space, action_space, config, device, **overrides)

    def _check_observation_space(self, observation_space: gym.Space) -> None:
        if len(observation_space.shape) != 2 or self.global_state_space is None:
            raise ValueError(
                f"{self.name} needs a multi-agent env ([num_agents, obs_dim] observations and a global state), "
                f"got observations of shape {observation_space.shape}"
            )

    @classmethod
    def for_env(cls, env, config=None, device: str | torch.device = "cpu", **overrides) -> MultiAgentAgent:
        """An agent for ``env``'s spaces and global state."""
        _check_env_kind(cls, env)
        return cls(env.observation_space, env.action_space, config, device, env.global_state_space, **overrides)

    def initial_memory(self, num_envs: int) -> dict[str, torch.Tensor]:
        """The memory at the start of an episode: a dict of ``[num_envs, ...]`` tensors (``{}`` for none)."""
        raise NotImplementedError

    def act(
        self, inputs: dict[str, torch.Tensor], memory: dict[str, torch.Tensor], deterministic: bool = False
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """``(actions, extras, next_memory)`` for the team's ``inputs`` and the ``memory`` of the step before."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "global_state_space": space_to_dict(self.global_state_space)}

    @classmethod
    def spaces_from_description(cls, description: dict[str, Any]) -> dict[str, gym.Space]:
        spaces = super().spaces_from_description(description)
        return {**spaces, "global_state_space": space_from_dict(description["global_state_space"])}

    def predict(self, obs, deterministic: bool = True):
        raise TypeError(
            f"{self.name} acts on a dict of inputs with a memory: act(inputs, memory), see rl_suite/agent.py's "
            "MultiAgentAgent"
        )


def _check_env_kind(cls: type[Agent], env) -> None:
    """Refuse a multi-agent env for a single-agent agent, and the other way round."""
    env_is_multiagent = isinstance(env, MultiAgentVecEnv)
    if env_is_multiagent != issubclass(cls, MultiAgentAgent):
        kind = "a multi-agent" if env_is_multiagent else "a single-agent"
        want = "single-agent" if env_is_multiagent else "multi-agent"
        raise ValueError(f"{env.env_id or type(env).__name__} is {kind} env, and {cls.name} trains {want} envs")


def agent_from_checkpoint(data: Any, source: str, device, expected: type | None = None) -> Agent:
    """The agent in ``data``, a checkpoint or ``save`` file read with ``weights_only=True`` from ``source``. Its
    algorithm name resolves only as a key of the registry's ``ALGORITHMS`` (``load_algorithm``), never as an entry
    point; hyperparameters and spaces are rebuilt from plain data. Its ``env_id`` is not used here: eval and export
    check it with ``rl_suite.registry.run_env_spec``."""
    if type(data) is not dict or type(data.get("agent")) is not dict:
        raise ValueError(f"{source} holds no agent")
    return agent_from_description(data, data["agent"], device, expected)


def agent_from_description(
    description: dict[str, Any], state: dict[str, Any] | None, device, expected: type | None = None
) -> Agent:
    """An ``algo`` agent built from ``describe()``'s plain data, with ``state`` (``state_dict()``) loaded if given."""
    from rl_suite.registry import load_algorithm

    algo = load_algorithm(description["algo"])
    if expected is not None and expected is not Agent and algo is not expected:
        raise ValueError(f"the file holds a {description['algo']} agent, not {expected.name}")
    agent = algo(
        **algo.spaces_from_description(description),
        config=from_plain(algo.Config, description["config"]),
        device=device,
    )
    if state is not None:
        agent.load_state_dict(state)
    return agent
