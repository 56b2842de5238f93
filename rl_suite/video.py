"""Videos of evaluation episodes: rendered frames of one environment, written as an animated GIF into the run
directory, which the run's trackers log (rl_suite/logger.py)."""

from __future__ import annotations

import pathlib

import numpy as np
import torch


@torch.no_grad()
def record_episode(agent, env, max_frames: int = 300, width: int = 240, height: int = 240) -> np.ndarray:
    """Frames ``[T, height, width, 3]`` (uint8) of environment 0 playing the agent's deterministic policy until
    its first episode ends or ``max_frames`` are taken. ``env`` must offer ``render(env_id, width, height)``."""
    obs = env.reset()
    frames = [env.render(0, width=width, height=height)]
    while len(frames) < max_frames:
        actions, _ = agent.act(obs, deterministic=True)
        obs, _, _, _, info = env.step(actions)
        if bool(info["done"][0]):
            break
        frames.append(env.render(0, width=width, height=height))
    return np.stack(frames)


def gif_bytes(frames: np.ndarray, fps: float) -> bytes:
    """An animated GIF that loops, at ``fps`` frames per second (GIF counts in hundredths of a second)."""
    import imageio.v3 as iio

    return iio.imwrite("<bytes>", frames, extension=".gif", duration=1000.0 / fps, loop=0)


def write_gif(path: pathlib.Path, frames: np.ndarray, fps: float) -> pathlib.Path:
    """Save the frames as an animated GIF at ``path`` (the run's trackers then log that file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gif_bytes(frames, fps))
    return path
