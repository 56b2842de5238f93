"""An adversary's destabilising forces on a MuJoCo task, as in RARL (Pinto et al., 2017, "Robust Adversarial
Reinforcement Learning"): a second player pushes chosen bodies, and is rewarded with the negative of the task's
reward (zero-sum). ``agents/rarl.py`` trains the pair.

``AdversarialVecEnv(env, max_force, bodies=None, axes=None)``:

- ``action_space`` stays the task's (the protagonist's); ``adversary_action_space`` is ``Box(-1, 1, (k,))`` with
  one component per (body, axis), scaled by ``max_force`` newtons.
- ``step(actions)`` takes ``[N, a + k]``: the protagonist's ``a`` action components, then the adversary's ``k``. The
  forces go into MuJoCo's ``xfrc_applied`` (world frame, at the body's centre of mass) and act throughout the
  step; they are part of the simulation's state, so checkpoints keep them and a reset clears them.
- ``step`` also takes the protagonist's ``[N, a]`` alone: no force. That is how evaluation and deployment run.

Defaults follow RARL's choices where it had the task: 2D (x, z) forces on HalfCheetah's torso and feet, Hopper's
foot and Walker2d's feet; Ant, which RARL did not use, gets a 3D force on its torso. Other tasks must name
``bodies``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

DEFAULTS: dict[str, tuple[tuple[str, ...], str]] = {
    "HalfCheetah": (("torso", "bfoot", "ffoot"), "xz"),
    "Hopper": (("foot",), "xz"),
    "Walker2d": (("foot", "foot_left"), "xz"),
    "Ant": (("torso",), "xyz"),
}


class AdversarialVecEnv:
    """``env`` (a ``MujocoVecEnv``, possibly inside a ``RandomizedVecEnv``) with an adversary's forces; see the
    module docstring. Everything else is the wrapped env's."""

    def __init__(self, env, max_force: float, bodies: tuple[str, ...] | None = None, axes: str | None = None):
        task = type(env.task).__name__
        if bodies is None:
            if task not in DEFAULTS:
                raise ValueError(f"{task} has no default adversary bodies; name them (adversary_bodies=[...])")
            bodies, default_axes = DEFAULTS[task]
            axes = default_axes if axes is None else axes
        axes = "xyz" if axes is None else axes
        if not max_force > 0:
            raise ValueError(f"the adversary's max_force must be positive (newtons), got {max_force!r}")
        if not axes or set(axes) - set("xyz") or len(set(axes)) != len(axes):
            raise ValueError(f"axes must be distinct letters of 'xyz', got {axes!r}")
        model = env.model
        names = [model.body(i).name for i in range(model.nbody)]
        unknown = [body for body in bodies if body not in names]
        if unknown:
            raise ValueError(f"{task} has no body {unknown[0]!r}; its bodies: {', '.join(n for n in names if n)}")
        self.env, self.max_force, self.bodies, self.axes = env, float(max_force), tuple(bodies), axes
        self.protagonist_dim = int(np.prod(env.action_space.shape))
        k = len(bodies) * len(axes)
        self.adversary_action_space = gym.spaces.Box(-1.0, 1.0, (k,), np.float32)
        physics = env.physics
        # xfrc_applied [N, nbody, 6] (force, then torque) as a view of the state rows: written in place each step
        self._xfrc = physics.xfrc_applied
        sim = physics.device
        body_ids = torch.tensor([names.index(body) for body in bodies], device=sim)
        axis_ids = torch.tensor(["xyz".index(axis) for axis in axes], device=sim)
        # flat indices into one environment's [nbody * 6] row, in the adversary's action order (body-major)
        self._slots = (body_ids[:, None] * 6 + axis_ids[None, :]).flatten()

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions: torch.Tensor):
        actions = torch.as_tensor(actions, device=self.env.device)
        a, k = self.protagonist_dim, self.adversary_action_space.shape[0]
        if actions.dim() != 2 or actions.shape[1] not in (a, a + k):
            raise ValueError(
                f"actions must be [num_envs, {a}] (the protagonist's) or [num_envs, {a + k}] (the protagonist's "
                f"{a}, then the adversary's {k}), got shape {tuple(actions.shape)}"
            )
        rows = self._xfrc.view(self._xfrc.shape[0], -1)
        if actions.shape[1] == a + k:
            forces = actions[:, a:].clamp(-1.0, 1.0).to(self._xfrc.dtype) * self.max_force
            rows[:, self._slots] = forces.to(self._xfrc.device)
            actions = actions[:, :a]
        else:
            rows[:, self._slots] = 0.0  # the protagonist alone: no push left over from an earlier step
        return self.env.step(actions)

    def __repr__(self) -> str:
        return f"AdversarialVecEnv({self.env!r}, max_force={self.max_force}, bodies={self.bodies}, axes={self.axes!r})"
