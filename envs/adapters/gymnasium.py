"""Any gymnasium environment behind the ``VecEnv`` contract.

Gymnasium steps on the host with numpy, so this adapter converts at the boundary: actions go to numpy, and
observations, rewards and flags come back as tensors on ``device``. Gymnasium's vector envs are built in
same-step auto-reset mode, whose ``final_obs`` maps directly onto ours.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from rl_suite.env import VecEnv, check_num_envs

VECTORIZATION_MODES = ("sync", "async")


class GymnasiumVecEnv(VecEnv):
    """Run gymnasium environments as a ``VecEnv``.

    Args:
        env: a gymnasium id (built with ``gymnasium.make_vec``), a ``gymnasium.Env`` (run as one
            environment), or a ``gymnasium.vector.VectorEnv`` built with ``autoreset_mode=SAME_STEP``.
        num_envs: how many copies of an id to build.
        device: where the returned tensors live.
        seed: seeds the first ``reset`` (environment ``i`` gets ``seed + i``, as in gymnasium).
        vectorization: ``"sync"`` (one process) or ``"async"`` (one subprocess per environment).
        check_values: check action values (see ``VecEnv``).
        **make_kwargs: passed to ``gymnasium.make`` for each environment (e.g. ``max_episode_steps``).

    Observations are float32: a ``Box`` keeps its shape, a ``Discrete`` becomes one-hot. The ``observation_space``
    reported is the float32 ``Box`` that the tensors follow.
    """

    def __init__(
        self,
        env: str | gym.Env | gym.vector.VectorEnv,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        vectorization: str = "sync",
        check_values: bool | None = None,
        **make_kwargs,
    ):
        num_envs = check_num_envs(num_envs)
        self.vector_env = _as_same_step_vector_env(env, num_envs, vectorization, make_kwargs)
        if num_envs not in (1, self.vector_env.num_envs):
            raise ValueError(f"num_envs={num_envs}, but the given vector env holds {self.vector_env.num_envs}")
        gym_space = self.vector_env.single_observation_space
        if isinstance(gym_space, gym.spaces.Box):
            observation_space = gym.spaces.Box(
                gym_space.low.astype(np.float32), gym_space.high.astype(np.float32), dtype=np.float32
            )
        elif isinstance(gym_space, gym.spaces.Discrete):
            observation_space = gym.spaces.Box(0.0, 1.0, shape=(int(gym_space.n),), dtype=np.float32)
        else:
            raise ValueError(
                f"the adapter needs Box or Discrete observations, got {gym_space}; "
                f"flatten them first, e.g. with gymnasium.wrappers.FlattenObservation"
            )
        self._gym_observation_space = gym_space
        env_spec = self.vector_env.spec
        super().__init__(
            self.vector_env.num_envs,
            device,
            observation_space,
            self.vector_env.single_action_space,
            max_episode_steps=getattr(env_spec, "max_episode_steps", None),
            seed=seed,
            check_values=check_values,
        )
        self.reward_threshold = getattr(env_spec, "reward_threshold", None)
        self._first_seed = seed

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is None:  # the seed given at construction seeds the first reset only
            seed, self._first_seed = self._first_seed, None
        obs, _ = self.vector_env.reset(seed=seed)
        return self.start_episodes(self._to_tensor(obs))

    def step(self, actions: torch.Tensor):
        actions = self.check_actions(actions)
        gym_actions = actions.cpu().numpy()
        if isinstance(self.action_space, gym.spaces.Box):
            gym_actions = gym_actions.astype(self.action_space.dtype, copy=False)
        obs, reward, terminated, truncated, info = self.vector_env.step(gym_actions)
        final_obs = None  # where no episode ended, the final observations are the current ones
        ended = info.get("_final_obs")
        if ended is not None and ended.any():
            final_obs = np.array(obs, copy=True)
            final_obs[ended] = np.stack(info["final_obs"][ended])
            final_obs = self._to_tensor(final_obs)
        return self.finish_step(
            self._to_tensor(obs),
            torch.from_numpy(np.asarray(reward, dtype=np.float32)),
            torch.from_numpy(np.asarray(terminated, dtype=bool)),
            torch.from_numpy(np.asarray(truncated, dtype=bool)),
            final_obs=final_obs,
        )

    def close(self) -> None:
        self.vector_env.close()

    def _to_tensor(self, obs: np.ndarray) -> torch.Tensor:
        if isinstance(self._gym_observation_space, gym.spaces.Discrete):
            obs = np.eye(int(self._gym_observation_space.n), dtype=np.float32)[
                np.asarray(obs) - self._gym_observation_space.start
            ]
        return torch.from_numpy(np.asarray(obs, dtype=np.float32))


def _as_same_step_vector_env(env, num_envs: int, vectorization: str, make_kwargs: dict) -> gym.vector.VectorEnv:
    if isinstance(env, str):
        if vectorization not in VECTORIZATION_MODES:
            raise ValueError(
                f"vectorization must be one of {VECTORIZATION_MODES}, got {vectorization!r} (gymnasium's own "
                f"vector envs reset on the next step, which cannot be turned into a same-step reset)"
            )
        return gym.make_vec(
            env,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            **make_kwargs,
        )
    if isinstance(env, gym.vector.VectorEnv):
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"{env} resets in mode {mode}; the adapter needs same-step auto-reset: build it with "
                f"autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP"
            )
        return env
    if isinstance(env, gym.Env):
        return gym.vector.SyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
    raise TypeError(f"expected a gymnasium id, Env or VectorEnv, got {type(env).__name__}")
