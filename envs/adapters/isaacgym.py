"""IsaacGymEnvs-style ``VecTask`` objects behind the ``VecEnv`` contract.

What the adapter assumes of a task (IsaacGymEnvs' ``VecTask`` conventions, Preview 3/4):

- ``task.step(actions) -> (obs_dict, rew_buf, reset_buf, extras)``, with ``obs_dict["obs"]`` (and
  ``obs_dict["states"]`` for asymmetric actor-critic tasks, ``num_states > 0``) and ``extras["time_outs"]``.
  ``VecTask.step`` clamps the actions to ``clip_actions``, simulates, then runs the task's
  ``post_physics_step``, which increments ``progress_buf``, computes the observations into ``obs_buf`` and the
  rewards and reset flags into ``rew_buf`` and ``reset_buf``. ``time_outs`` is
  ``(progress_buf >= max_episode_length - 1) & reset_buf``.
- Resets are *deferred*: the environments flagged in ``reset_buf`` are not reset in the step that flagged them.
  The task resets them (``reset_idx(env_ids)``) at the start of its next step, in ``pre_physics_step`` or
  ``post_physics_step``, so the observation returned with the flag is the last observation of the ended episode,
  and the next step, whose action the task ignores for those environments, returns the first observation of the
  new one (IsaacGymEnvs issues #32 and #70).
- ``reset_idx(env_ids)`` draws new initial states, and sets ``progress_buf`` and ``reset_buf`` of ``env_ids`` to
  zero; ``compute_observations()`` writes ``obs_buf`` (and ``states_buf``) from the current state.

What the adapter does: the same-step reset of the contract. After ``task.step``, the observation it returned is
copied to ``info["final_obs"]`` (it is the true last observation of the episodes that ended), then the adapter
resets the flagged environments itself, calling ``reset_idx`` on them and ``compute_observations()``, and returns
the observations it recomputed: the first observations of the new episodes. ``reset_idx`` clears the flags, so the
task does not reset them again at its next step, and no action is wasted on a reset step.

Caveat of Isaac Gym itself: state setters (``set_dof_state_tensor_indexed`` and the like) take full effect at the
next ``simulate``. Observations that a task computes from the tensors its ``reset_idx`` writes (joint positions
and velocities, root states) are exact; those that only the physics updates (force sensors, contact forces,
rigid-body states of links) can be stale in the first observation of an episode, as they are in Isaac Gym's own
same-step tasks (legged_gym). Pass ``observe=`` to recompute observations differently.

Finding the environments to reset takes one host sync per step on the GPU (``reset_buf.nonzero()``); VecTask's
own ``post_physics_step`` does the same every step. Episode statistics need none.

``isaacgym`` and ``isaacgymenvs`` are not needed at runtime: they are named only for type checkers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import VecEnv

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from isaacgymenvs.tasks.base.vec_task import VecTask


class IsaacGymVecEnv(VecEnv):
    """Run an IsaacGymEnvs ``VecTask`` as a ``VecEnv`` with same-step resets (see the module docstring).

    Args:
        task: the task, already created (``isaacgymenvs.make(...)`` or a ``VecTask`` subclass).
        reset_envs: resets the environments whose indices it is given (a 1-D ``long`` tensor on the task's
            device); defaults to ``task.reset_idx``. Tasks whose ``reset_idx`` takes more arguments (ShadowHand's
            goal ids) pass a function here.
        observe: recomputes ``task.obs_buf`` (and ``states_buf``) from the current state; defaults to
            ``task.compute_observations``.
        check_values: check action values (see ``VecEnv``).

    ``observation_space`` is a float32 ``Box`` of ``num_obs``; asymmetric tasks (``num_states > 0``) report
    ``critic_observation_space`` and return ``info["critic_obs"]`` (and ``info["final_critic_obs"]``).
    ``max_episode_steps`` is ``max_episode_length - 1``: with VecTask's ``time_outs`` rule that is how many actions
    an episode that times out has taken. The adapter does not cut episodes itself; the task does.
    Actions are clipped to ``task.clip_actions`` where it is finite, as ``VecTask.step`` does.
    """

    def __init__(
        self,
        task: VecTask | Any,
        reset_envs: Callable[[torch.Tensor], Any] | None = None,
        observe: Callable[[], Any] | None = None,
        check_values: bool | None = None,
    ):
        self.task = task
        self._reset_envs_fn = reset_envs if reset_envs is not None else getattr(task, "reset_idx", None)
        self._observe_fn = observe if observe is not None else getattr(task, "compute_observations", None)
        missing = [
            what
            for what, fn in (
                ("reset_idx(env_ids) (or reset_envs=)", self._reset_envs_fn),
                ("compute_observations() (or observe=)", self._observe_fn),
            )
            if not callable(fn)
        ]
        if missing:
            raise TypeError(
                f"{type(task).__name__} lacks {' and '.join(missing)}: the adapter resets ended environments "
                f"within the step and needs to reset them and recompute their observations"
            )
        num_obs = int(task.num_obs)
        observation_space = _float_box(_space(task, "obs_space", "observation_space"), (num_obs,), "observation")
        action_space = _action_space(_space(task, "act_space", "action_space"), int(task.num_actions))
        max_length = getattr(task, "max_episode_length", None)
        max_steps = int(max_length) - 1 if max_length is not None and int(max_length) > 1 else None
        device = getattr(task, "rl_device", None) or task.device
        super().__init__(
            int(task.num_envs),
            device,
            observation_space,
            action_space,
            max_episode_steps=max_steps,
            check_values=check_values,
        )
        self.clip_obs = float(getattr(task, "clip_obs", math.inf))
        clip_actions = float(getattr(task, "clip_actions", math.inf))
        self.clip_actions = clip_actions if math.isfinite(clip_actions) else None
        self._clipped_actions = torch.zeros(self.num_envs, *self.action_space.shape, device=self.device)

        num_states = int(getattr(task, "num_states", 0) or 0)
        if num_states > 0:
            self.offer_critic_observation(_float_box(getattr(task, "state_space", None), (num_states,), "state"))

    # -- the contract -------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every environment (``reset_idx`` on all of them) and return the first observations.

        VecTask tasks draw their initial states from torch's global generator, so ``seed`` reseeds it.
        """
        if seed is not None:
            torch.manual_seed(seed)
        self._reset_envs_fn(torch.arange(self.num_envs, device=self.task.device))
        self._observe_fn()
        return self.start_episodes(*self._task_observations())

    def step(self, actions: torch.Tensor):
        actions = self.check_actions(actions)
        if self.clip_actions is not None and actions.dtype.is_floating_point:
            actions = torch.clamp(actions, -self.clip_actions, self.clip_actions, out=self._clipped_actions)
        obs_dict, reward, reset_buf, extras = self.task.step(actions)
        done = reset_buf != 0
        time_outs = extras.get("time_outs") if isinstance(extras, dict) else None
        truncated = torch.zeros_like(done) if time_outs is None else time_outs.bool() & done
        # What the task returned is the last observation of the episodes that ended (its resets are deferred):
        # recorded as the final and, until the resets below overwrite the ended rows, the current observation.
        critic_obs = obs_dict["states"] if self.critic_observation_space is not None else None
        step = self.finish_step(obs_dict["obs"], reward, done & ~truncated, truncated, critic_obs=critic_obs)
        ids = done.nonzero().squeeze(1)  # the one host sync; VecTask makes it too
        if ids.numel():
            self._reset_envs_fn(ids)
            self._observe_fn()
            self.start_episodes(*self._task_observations(), env_ids=ids.to(self.device))
        return step

    def close(self) -> None:
        close = getattr(self.task, "close", None)
        if callable(close):
            close()

    # -- helpers --------------------------------------------------------------------------------------------

    def _task_observations(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The task's (clamped) observations, and its states where it offers them, on our device."""
        task = self.task
        obs = torch.clamp(task.obs_buf, -self.clip_obs, self.clip_obs).to(self.device)
        if self.critic_observation_space is None:
            return obs, None
        get_state = getattr(task, "get_state", None)
        states = get_state() if callable(get_state) else task.states_buf
        return obs, torch.clamp(states, -self.clip_obs, self.clip_obs).to(self.device)


def _space(task, *names: str):
    for name in names:
        space = getattr(task, name, None)
        if space is not None:
            return space
    return None


def _float_box(space, shape: tuple[int, ...], what: str) -> gym.spaces.Box:
    """A float32 gymnasium ``Box`` from a gym/gymnasium ``Box`` (or from ``shape`` where there is none)."""
    if space is None:
        return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)
    if not hasattr(space, "low") or not hasattr(space, "high"):
        raise ValueError(f"the adapter needs a Box {what} space, got {space}")
    low = np.broadcast_to(np.asarray(space.low, dtype=np.float32), shape)
    high = np.broadcast_to(np.asarray(space.high, dtype=np.float32), shape)
    return gym.spaces.Box(low, high, dtype=np.float32)


def _action_space(space, num_actions: int) -> gym.Space:
    if space is not None and hasattr(space, "n") and not hasattr(space, "nvec"):
        return gym.spaces.Discrete(int(space.n))
    if space is not None and hasattr(space, "nvec"):
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    return _float_box(space, (num_actions,), "action")
