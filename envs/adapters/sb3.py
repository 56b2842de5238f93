"""A ``VecEnv`` of ours exposed to stable-baselines3 as its ``VecEnv``: the other way round from the other adapters.

SB3 works with numpy on the host, so every step copies the outputs to the host once (the copies are SB3's to keep:
our tensors are buffers that the next step overwrites). The semantics map one to one:

- ``dones = terminated | truncated``; an ended environment's ``infos[i]`` holds ``"terminal_observation"`` (our
  ``info["final_obs"]``) and ``"TimeLimit.truncated"`` (``truncated and not terminated``, SB3's rule for
  bootstrapping), and the returned observation is already the first of the new episode, as SB3 expects.
- ``infos[i]["episode"] = {"r", "l", "t"}`` for ended episodes, from our episode statistics, as SB3's ``Monitor``
  writes it, so SB3 logs returns without a monitor wrapper (``VecMonitor`` still works on top and overwrites it).
- ``seed(seed)`` seeds the next ``reset``: our environments draw per-environment streams from one seed, so the
  first of SB3's ``seed + i`` is used.

All environments are one batched object, so ``set_attr`` and ``env_method`` act on it once and apply to every
index: they refuse a strict subset of indices. ``get_attr`` returns the batch's attribute for each index.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv as SB3BaseVecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from rl_suite.env import VecEnv
from rl_suite.multiagent import MultiAgentVecEnv


class SB3VecEnv(SB3BaseVecEnv):
    """Run a single-agent rl-suite ``VecEnv`` under stable-baselines3 (see the module docstring)."""

    def __init__(self, env: VecEnv):
        if isinstance(env, MultiAgentVecEnv):
            raise ValueError(f"{env!r} is a multi-agent env; SB3VecEnv exposes single-agent envs only")
        self.env = env
        super().__init__(env.num_envs, env.observation_space, env.action_space)
        self._discrete = isinstance(env.action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
        self._actions: torch.Tensor | None = None
        self._start = time.time()

    # -- SB3's VecEnv API -----------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        seed = self._seeds[0]
        obs = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return _to_numpy(obs)

    def step_async(self, actions: np.ndarray) -> None:
        dtype = torch.long if self._discrete else torch.float32
        actions = torch.as_tensor(np.asarray(actions), dtype=dtype, device=self.env.device)
        if isinstance(self.action_space, gym.spaces.Discrete) and actions.shape == (self.num_envs, 1):
            actions = actions.squeeze(1)  # SB3 may hand over [N, 1]; other shapes meet our checks
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        if self._actions is None:
            raise RuntimeError("step_wait() was called without step_async(actions)")
        actions, self._actions = self._actions, None
        obs, reward, terminated, truncated, info = self.env.step(actions)
        # one transfer for the flags and statistics that the infos need
        flags = torch.stack((terminated, truncated)).cpu().numpy()
        stats = torch.stack((info["episode_return"], info["episode_length"].float())).cpu().numpy()
        terminated_np, truncated_np = flags[0], flags[1]
        dones = terminated_np | truncated_np
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(dones)
        if ended.size:
            final_obs = _to_numpy(info["final_obs"])
            elapsed = round(time.time() - self._start, 6)
            for i in ended:
                infos[i]["terminal_observation"] = final_obs[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated_np[i] and not terminated_np[i])
                infos[i]["episode"] = {"r": float(stats[0, i]), "l": int(stats[1, i]), "t": elapsed}
        return _to_numpy(obs), _to_numpy(reward), dones, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name == "render_mode":
            value = getattr(self.env, "render_mode", None)
        else:
            value = getattr(self.env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._whole_batch(indices, "set_attr")
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        selected = self._whole_batch(indices, "env_method")
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in selected]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]  # no gymnasium wrappers: one batched simulator

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]

    # -- helpers --------------------------------------------------------------------------------------------

    def _whole_batch(self, indices: VecEnvIndices, what: str) -> list[int]:
        selected = list(self._get_indices(indices))
        if sorted(selected) != list(range(self.num_envs)):
            raise ValueError(
                f"{what} acts on the whole batch of {self.num_envs} environments at once; got indices {selected}"
            )
        return selected


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A host copy that the next step does not overwrite."""
    return tensor.detach().to("cpu", copy=True).numpy()
