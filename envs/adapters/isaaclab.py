"""Isaac Lab's batched RL environments (``ManagerBasedRLEnv``, ``DirectRLEnv``) behind the ``VecEnv`` contract.

What the adapter assumes of an Isaac Lab env (the gymnasium-style API both classes share):

- ``reset(seed=None) -> (obs_dict, extras)`` and
  ``step(actions) -> (obs_dict, reward, terminated, truncated, extras)``, all tensors on ``env.device``, where
  ``obs_dict`` maps observation groups to ``[N, ...]`` tensors: ``"policy"`` for the actor and, in asymmetric
  tasks, ``"critic"`` for the critic.
- Environments that end reset inside ``step`` (after rewards and terminations are computed, before the
  observations are), so the returned observations of ended environments are already the first observations of
  their new episodes: the same-step reset of our contract. ``truncated`` is the time limit (``episode_length_buf
  >= max_episode_length``), ``terminated`` the task's termination terms.
- ``unwrapped`` gives ``num_envs``, ``device``, ``max_episode_length``, ``single_observation_space["policy"]``
  (and ``["critic"]``) and ``single_action_space``.

``info["final_obs"]``: Isaac Lab computes the last observation of an ended episode only when its config asks for
it (``cfg.compute_final_obs``, Isaac Lab PR #6219), and then returns it as ``extras["final_obs"]`` (an
observation dict, or a tensor of the policy group). The adapter turns that flag on where the config has it
(``final_obs=True``, the default) and copies ``extras["final_obs"]`` into ``info["final_obs"]`` (and the critic
group into ``info["final_critic_obs"]``). Older Isaac Lab versions do not have it and give no way to observe an
environment before its reset; there ``info["final_obs"]`` falls back to the returned observation, i.e. the first
observation of the new episode, so a learner bootstraps truncated episodes from the reset state. The adapter warns
once at construction when that happens, and ``exact_final_obs`` says which case holds.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import VecEnv

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from isaaclab.envs import DirectRLEnv, ManagerBasedRLEnv


class IsaacLabVecEnv(VecEnv):
    """Run an Isaac Lab RL env as a ``VecEnv`` (see the module docstring for ``final_obs``).

    Args:
        env: the env, as ``gymnasium.make("Isaac-...", cfg=...)`` returns it or unwrapped.
        policy_group, critic_group: observation groups of the actor and of the critic. The critic group, where the
            env has it, becomes ``critic_observation_space`` and ``info["critic_obs"]``.
        clip_actions: clip actions to ``[-clip_actions, clip_actions]`` (and report that ``Box``), as Isaac Lab's
            RL-library wrappers do; ``None`` keeps the env's action space and does not clip.
        final_obs: turn on ``cfg.compute_final_obs`` where the env's config has that flag.
        check_values: check action values (see ``VecEnv``).
    """

    def __init__(
        self,
        env: ManagerBasedRLEnv | DirectRLEnv | Any,
        policy_group: str = "policy",
        critic_group: str = "critic",
        clip_actions: float | None = None,
        final_obs: bool = True,
        check_values: bool | None = None,
    ):
        self.env = env
        base = getattr(env, "unwrapped", env)
        self.policy_group, self.critic_group = policy_group, critic_group
        spaces = base.single_observation_space
        spaces = spaces.spaces if isinstance(spaces, gym.spaces.Dict) else spaces  # `in` on a Dict tests samples
        if policy_group not in spaces:
            raise ValueError(f"the env has no observation group {policy_group!r}; its groups: {list(spaces)}")
        observation_space = _float_box(spaces[policy_group], f"observation group {policy_group!r}")
        action_space = base.single_action_space
        if clip_actions is not None:
            if not clip_actions > 0:
                raise ValueError(f"clip_actions must be positive or None, got {clip_actions!r}")
            action_space = gym.spaces.Box(-clip_actions, clip_actions, shape=action_space.shape, dtype=np.float32)
        self.clip_actions = clip_actions
        max_length = getattr(base, "max_episode_length", None)
        super().__init__(
            int(base.num_envs),
            base.device,
            observation_space,
            action_space,
            max_episode_steps=int(max_length) if max_length is not None else None,
            check_values=check_values,
        )
        if critic_group in spaces:
            self.offer_critic_observation(_float_box(spaces[critic_group], f"observation group {critic_group!r}"))
        self._clipped_actions = torch.zeros(self.num_envs, *self.action_space.shape, device=self.device)

        cfg = getattr(base, "cfg", None)
        if final_obs and cfg is not None and hasattr(cfg, "compute_final_obs"):
            cfg.compute_final_obs = True
        self.exact_final_obs = bool(getattr(cfg, "compute_final_obs", False))
        if not self.exact_final_obs:
            warnings.warn(
                f"{type(base).__name__} does not compute final observations (cfg.compute_final_obs); "
                f"info['final_obs'] falls back to the first observation of the new episode, so truncated episodes "
                f"are bootstrapped from the reset state",
                stacklevel=2,
            )

    # -- the contract -------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs_dict, _ = self.env.reset(seed=seed)
        return self.start_episodes(*self._groups(obs_dict))

    def step(self, actions: torch.Tensor):
        actions = self.check_actions(actions)
        if self.clip_actions is not None:
            actions = torch.clamp(actions, -self.clip_actions, self.clip_actions, out=self._clipped_actions)
        obs_dict, reward, terminated, truncated, extras = self.env.step(actions)
        n = self.num_envs
        terminated, truncated = terminated.reshape(n), truncated.reshape(n)
        obs, critic_obs = self._groups(obs_dict)
        # Older Isaac Lab has no final observations: they are gone, and default to the current ones (see the module
        # docstring).
        final = extras.get("final_obs") if isinstance(extras, dict) else None
        final_obs = final_critic_obs = None
        if final is not None:
            done = torch.logical_or(terminated, truncated)
            final_obs = self._select_final(final, self.policy_group, obs, done)
            if critic_obs is not None and isinstance(final, dict) and self.critic_group in final:
                final_critic_obs = self._select_final(final, self.critic_group, critic_obs, done)
        return self.finish_step(obs, reward.reshape(n), terminated, truncated, final_obs, critic_obs, final_critic_obs)

    def close(self) -> None:
        self.env.close()

    # -- helpers --------------------------------------------------------------------------------------------

    def _groups(self, obs_dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The actor's and, where the env offers one, the critic's observations in ``obs_dict``."""
        critic = self.critic_observation_space is not None
        return self._group(obs_dict, self.policy_group), self._group(obs_dict, self.critic_group) if critic else None

    def _group(self, obs_dict, group: str) -> torch.Tensor:
        if isinstance(obs_dict, torch.Tensor) and group == self.policy_group:
            return obs_dict
        obs = obs_dict[group]
        if not isinstance(obs, torch.Tensor):
            raise TypeError(
                f"observation group {group!r} is a {type(obs).__name__}; the adapter needs one tensor per group: "
                f"set concatenate_terms=True in the group's config"
            )
        return obs

    def _select_final(self, final, group: str, current: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """The final observations of ``group`` where ``done``, the current ones elsewhere (full width, no sync)."""
        final = self._group(final, group)
        mask = done.view(-1, *([1] * (current.dim() - 1)))
        return torch.where(mask, final.to(current.dtype), current)


def _float_box(space: gym.Space, what: str) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f"the adapter needs a Box {what}, got {space}")
    return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
