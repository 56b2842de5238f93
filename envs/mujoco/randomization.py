"""Domain randomisation that needs no per-environment model: a ``VecEnv`` wrapper for our batched tasks.

``RandomizedVecEnv(env, obs_noise_std=0.0, motor_strength=0.0, per_motor=False, seed=None)``:

- observation noise: every observation returned (``obs`` and ``info["final_obs"]``) gets independent Gaussian noise
  of standard deviation ``obs_noise_std`` (a scalar, or one value per observation component). The env's own state
  and ``info["critic_obs"]`` (if any) stay clean, so an asymmetric critic can see the truth.
- motor strength: each environment draws a factor uniform in ``[1 - motor_strength, 1 + motor_strength]`` at every
  reset (one per environment, or one per actuator with ``per_motor=True``) and its actions are multiplied by it,
  then clipped to the action space, as the actuators' ``ctrlrange`` would clip them. The task's control cost is
  computed on the scaled action (what the motors received).

Random numbers come from the wrapper's own per-environment streams (``rl_suite.rng.EnvStreams``, selected with
``rl_suite.env.Selection``), seeded from ``seed`` and reseeded by ``reset(seed)``: the wrapped env's streams, so its
reset noise, are untouched, and a wrapper with both settings at zero is the env itself. The draws are counter
based, so one environment's randomisation does not depend on how many others reset.

Mass and friction randomisation change the model, so they live in ``MujocoVecEnv`` itself (``randomize_mass``,
``randomize_friction``; see ``env.py``). ``make_mujoco_env``, the registered MuJoCo ids' entry point, takes all four
as env keywords: ``rl_suite.make("HalfCheetah-v5", randomize_mass=0.1, obs_noise_std=0.01, motor_strength=0.1)``, or
``--set env_kwargs='{"randomize_friction": 0.3}'`` on the command line.
"""

from __future__ import annotations

import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.rng import EnvStreams

_CHUNK = 64  # normals drawn 64 at a time (two uniforms each), as since the start: it fixes which draws pair up


def make_mujoco_env(
    num_envs: int = 1,
    device="cpu",
    seed: int | None = None,
    obs_noise_std=0.0,
    motor_strength: float = 0.0,
    per_motor: bool = False,
    adversary_force: float = 0.0,
    adversary_bodies: tuple[str, ...] | None = None,
    adversary_axes: str | None = None,
    **kwargs,
):
    """A ``MujocoVecEnv`` (``kwargs`` are its own, mass and friction randomisation included), wrapped in a
    ``RandomizedVecEnv`` when observation noise or motor strength is asked for, and in an ``AdversarialVecEnv``
    (``adversary.py``, for RARL) when ``adversary_force`` is positive."""
    from rl_suite.envs.mujoco.env import MujocoVecEnv

    env = MujocoVecEnv(num_envs=num_envs, device=device, seed=seed, **kwargs)
    if np.any(np.asarray(obs_noise_std) != 0) or motor_strength:
        env = RandomizedVecEnv(env, obs_noise_std, motor_strength, per_motor, seed=seed)
    if adversary_force:
        from rl_suite.envs.mujoco.adversary import AdversarialVecEnv

        bodies = None if adversary_bodies is None else tuple(adversary_bodies)
        env = AdversarialVecEnv(env, adversary_force, bodies, adversary_axes)
    return env


def _accepted_keywords(task: str = "HalfCheetah") -> list[str]:
    """Every keyword ``make_mujoco_env`` takes for ``task``: its own, ``MujocoVecEnv``'s, and the task's (which
    ``MujocoVecEnv`` hands to ``make_task``). The registry checks keywords read from a run directory against these
    (``rl_suite.registry.accepted_keywords``)."""
    import inspect

    from rl_suite.envs.mujoco.env import MujocoVecEnv
    from rl_suite.envs.mujoco.tasks import TASKS

    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [
        name
        for builder in (make_mujoco_env, MujocoVecEnv, TASKS[task])
        for name, parameter in inspect.signature(builder).parameters.items()
        if parameter.kind in named
    ]


make_mujoco_env.accepted_keywords = _accepted_keywords


class RandomizedVecEnv:
    """``env`` with observation noise and motor-strength randomisation; see the module docstring. Everything else
    (spaces, ``dt``, ``set_state``, ...) is the wrapped env's."""

    def __init__(
        self, env, obs_noise_std=0.0, motor_strength: float = 0.0, per_motor: bool = False, seed: int | None = None
    ):
        if not 0.0 <= motor_strength < 1.0:
            raise ValueError(f"motor_strength must be in [0, 1), got {motor_strength}")
        std = np.asarray(obs_noise_std, dtype=np.float32)
        if (std < 0).any() or not np.isfinite(std).all():
            raise ValueError(f"obs_noise_std must be finite and non-negative, got {obs_noise_std}")
        obs_dim = int(np.prod(env.observation_space.shape))
        if std.ndim and std.shape != (obs_dim,):
            raise ValueError(f"obs_noise_std must be a scalar or have {obs_dim} values, got shape {std.shape}")
        self.env = env
        self.motor_strength, self.per_motor = float(motor_strength), bool(per_motor)
        device = env.device
        self.obs_noise_std = torch.as_tensor(std, device=device)
        self.noisy = bool((std > 0).any())
        self.rng = EnvStreams(env.num_envs, device, self._seed(seed))
        act_dim = int(np.prod(env.action_space.shape))
        self.strength = torch.ones(env.num_envs, act_dim if per_motor else 1, device=device)
        self._low = torch.as_tensor(env.action_space.low, device=device)
        self._high = torch.as_tensor(env.action_space.high, device=device)
        self._all = Selection(ids=torch.arange(env.num_envs, device=device))

    @staticmethod
    def _seed(seed):
        return None if seed is None else [int(seed), 0x52414E44]  # distinct from the env's streams for one seed

    def __getattr__(self, name):
        return getattr(self.env, name)

    def _noise(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.noisy:
            return obs
        flat = obs.reshape(obs.shape[0], -1)
        parts = [
            self._all.normal(self.rng, min(_CHUNK, flat.shape[1] - k), torch.float32)
            for k in range(0, flat.shape[1], _CHUNK)
        ]
        noise = torch.cat(parts, dim=1).to(obs.dtype).mul_(self.obs_noise_std)
        return (flat + noise).reshape(obs.shape)

    def _draw_strength(self, selection: Selection) -> None:
        if self.motor_strength == 0.0:
            return
        d = self.motor_strength
        values = selection.uniform(self.rng, 1.0 - d, 1.0 + d, self.strength.shape[1], torch.float32)
        selection.write(self.strength, values)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self.rng.seed(self._seed(seed))
        obs = self.env.reset(seed=seed)
        self._draw_strength(self._all)
        return self._noise(obs)

    def step(self, actions: torch.Tensor):
        actions = torch.as_tensor(actions, device=self.env.device)
        if self.motor_strength > 0.0:
            shape = actions.shape
            scaled = actions.reshape(shape[0], -1) * self.strength
            actions = torch.maximum(torch.minimum(scaled.reshape(shape), self._high), self._low).to(actions.dtype)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = terminated | truncated
        ids = done.nonzero().squeeze(1)
        if ids.numel():
            self._draw_strength(Selection(ids=ids))
        if self.noisy:
            info = dict(info)
            if "final_obs" in info:
                info["final_obs"] = self._noise(info["final_obs"])
            obs = self._noise(obs)
        return obs, reward, terminated, truncated, info

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {**self.env.state_dict(), "randomization_streams": self.rng.get_state(), "strength": self.strength}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        state = dict(state)
        self.rng.set_state(state.pop("randomization_streams"))
        self.strength.copy_(state.pop("strength"))
        self.env.load_state_dict(state)

    def close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return (
            f"RandomizedVecEnv({self.env!r}, obs_noise_std={self.obs_noise_std.tolist()}, "
            f"motor_strength={self.motor_strength}, per_motor={self.per_motor})"
        )
