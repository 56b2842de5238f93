"""Videos of episodes: rendered frames of one environment, written (``write_video``) as the animated GIFs of a run's
evaluations, which its trackers log (rl_suite/logger.py), or as the GIF or MP4 of ``rl-suite play``."""

from __future__ import annotations

import os
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


VIDEO_FORMATS = (".gif", ".mp4")


def check_video_path(path: pathlib.Path) -> None:
    """Refuse a video file that cannot be written: another format, or an MP4 without imageio-ffmpeg."""
    suffix = path.suffix.lower()
    if suffix not in VIDEO_FORMATS:
        raise ValueError(f"cannot write a {suffix or 'suffixless'} video ({path}): give a .gif or an .mp4 file")
    if suffix == ".mp4" and not can_write_mp4():
        raise ValueError("writing .mp4 videos needs imageio-ffmpeg (pip install imageio-ffmpeg); .gif needs nothing")


def can_write_mp4() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        return False
    return True


def write_video(path: pathlib.Path, frames: np.ndarray, fps: float) -> pathlib.Path:
    """``frames`` ``[T, H, W, 3]`` (uint8) as a GIF, or as an MP4 through imageio-ffmpeg (``check_video_path``), at
    ``fps`` frames per second.

    A GIF counts its delays in hundredths of a second, and browsers show delays under two hundredths as a tenth, so
    a GIF plays at most 50 frames per second: slower than real time for faster tasks (an MP4 keeps ``fps``). Pillow
    also stores a run of identical frames as one frame shown for their total time."""
    import imageio.v3 as iio

    check_video_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        iio.imwrite(path, frames, extension=".gif", duration=max(1000.0 / fps, 20.0), loop=0)
    else:
        # H.264 in yuv420p needs even sides; imageio would otherwise stretch each side to a multiple of 16
        iio.imwrite(path, frames, fps=fps, codec="libx264", macro_block_size=2)
    return path


def has_display() -> bool:
    """Whether a window can open (an X11 or Wayland display): MuJoCo's viewer, pygame's video driver."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def frame_rate(env) -> float:
    """The rate a task is shown at: its ``render_fps`` where it has one, else one frame per step (``1 / dt``)."""
    fps = getattr(env, "render_fps", None)
    if fps is None:
        fps = 1.0 / getattr(env, "dt", 1.0 / 30)
    return float(fps)
