"""Pictures of the classic-control tasks, drawn by gymnasium's own renderer of the same task (pygame: gymnasium's
``classic-control`` extra) with one environment's state set into it."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from rl_suite.video import has_display


class GymnasiumRendering:
    """``render`` for a classic task whose ``get_state()`` rows are gymnasium's ``env.unwrapped.state`` of
    ``gymnasium_id`` (the parity tests check that they are). Mixed into the task's class before ``FlatStateEnv``."""

    gymnasium_id: str

    def render(self, env_id: int = 0, width: int | None = None, height: int | None = None) -> np.ndarray:
        """Environment ``env_id`` as an RGB array ``[height, width, 3]`` (uint8); without a size, at gymnasium's
        (CartPole and the cars 600 x 400, Pendulum and Acrobot 500 x 500). The renderers that draw a square
        (Pendulum, Acrobot) draw one of the smaller side, centred on a white background."""
        if not 0 <= env_id < self.num_envs:
            raise ValueError(f"env_id must be in [0, {self.num_envs}), got {env_id}")
        size = None if width is None and height is None else (width or height, height or width)
        reference = self._reference(size)
        reference.state = self._state_view()[env_id].double().cpu().numpy()
        frame = reference.render()
        if size is None or frame.shape[:2] == (size[1], size[0]):
            return frame
        canvas = np.full((size[1], size[0], 3), 255, dtype=np.uint8)
        top, left = (size[1] - frame.shape[0]) // 2, (size[0] - frame.shape[1]) // 2
        canvas[top : top + frame.shape[0], left : left + frame.shape[1]] = frame
        return canvas

    @property
    def render_fps(self) -> float:
        """The frame rate gymnasium shows the task at (CartPole 50, Pendulum 30, Acrobot 15, the cars 30)."""
        return float(load_env_creator(gym.spec(self.gymnasium_id).entry_point).metadata["render_fps"])

    def _reference(self, size: tuple[int, int] | None):
        """Gymnasium's environment (unwrapped), drawing at ``size`` (width, height; ``None``: its own); a new one
        for a new size, since its renderer keeps the surface it made first."""
        reference = getattr(self, "_gymnasium_reference", None)
        if reference is not None and self._gymnasium_size == size:
            return reference
        self.close_renderer()
        if not has_display():
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # off-screen surfaces need no video driver: no probing
        reference = gym.make(self.gymnasium_id, render_mode="rgb_array").unwrapped
        reference.reset(seed=0)  # some renderers read attributes that reset sets (Pendulum's last_u)
        if size is not None and hasattr(reference, "screen_width"):  # CartPole, the cars
            reference.screen_width, reference.screen_height = size
        elif size is not None and hasattr(reference, "screen_dim"):  # Pendulum
            reference.screen_dim = min(size)
        elif size is not None:  # Acrobot's class constant
            reference.SCREEN_DIM = min(size)
        self._gymnasium_reference, self._gymnasium_size = reference, size
        return reference

    def close_renderer(self) -> None:
        reference = getattr(self, "_gymnasium_reference", None)
        if reference is not None:
            reference.close()
            self._gymnasium_reference = None

    def close(self) -> None:
        self.close_renderer()
        super().close()
