"""``rl-suite play RUN_DIR``: a training run's newest policy, played for a few episodes on one environment of the
run's task, and shown: in MuJoCo's passive viewer where a display exists and the task is MuJoCo-backed, otherwise as
a video (MP4 through imageio-ffmpeg where it is installed, else GIF) of frames the task renders itself (the MuJoCo
tasks off-screen, the classic tasks through gymnasium's own renderers: envs/classic/render.py).

The run is loaded as ``rl-suite eval`` loads it: the checkpoint with ``weights_only=True``, the environment id only
if it names a native task (an adapter id must be repeated, ``env_id``), the agent rebuilt from plain data.
"""

from __future__ import annotations

import functools
import pathlib
import time
from typing import Any

import numpy as np
import torch

from rl_suite.video import can_write_mp4, check_video_path, frame_rate, has_display, write_video


def play_run(
    run_dir: str | pathlib.Path,
    episodes: int = 1,
    video: str | pathlib.Path | None = None,
    env_kwargs: dict[str, Any] | None = None,
    env_id: str | None = None,
    seed: int = 0,
    deterministic: bool = True,
    device: str = "cpu",
    viewer: bool | None = None,
    width: int | None = None,
    height: int | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` episodes of the run in ``run_dir`` on one environment (``make(..., num_envs=1, seed=seed)``,
    with the run's env keywords updated by ``env_kwargs``), acting with the policy's deterministic action (or sampled
    ones: ``deterministic=False``).

    ``viewer``: show the episodes in MuJoCo's passive viewer, in real time (``None``: when a display exists, no
    ``video`` is asked for and the task is MuJoCo-backed). Otherwise they are written to ``video`` (default
    ``RUN_DIR/videos/play.mp4``, or ``play.gif`` without imageio-ffmpeg), ``width`` x ``height`` pixels (default: the
    task's own size: gymnasium's for the classic tasks, 480 x 480 for the MuJoCo ones), at the task's frame rate
    (``write_video``: a GIF plays at most 50 frames per second).

    An episode of length L gives L frames: the reset state first, then the state after each of its steps but the
    last (the environment resets inside its last step, so the state it ended in is not shown). The episodes follow
    one another, so the video has as many frames as the episodes have steps in all (a GIF may store a run of
    identical frames as one, shown for their total time: ``write_video``).

    Returns ``env_id``, ``algo``, ``env_steps`` (of training), ``returns`` and ``lengths`` (one per episode),
    ``frames`` (the number written; 0 in the viewer) and ``video`` (its path, or ``None``)."""
    from rl_suite.agent import agent_from_checkpoint
    from rl_suite.checkpoint import checkpoints, load_latest
    from rl_suite.registry import make, run_env_spec

    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}")
    if video is not None:
        video = pathlib.Path(video)
        check_video_path(video)  # before anything is loaded or played
    run_dir = pathlib.Path(run_dir)
    if not checkpoints(run_dir):
        raise ValueError(
            f"no checkpoint found in {run_dir} (nothing in {run_dir / 'checkpoints'}): train first "
            f"(rl-suite train ALGO ENV_ID --run-dir {run_dir}), or give the directory of a run that wrote one"
        )
    path, state = load_latest(run_dir)
    env_id, run_kwargs = run_env_spec(run_dir, state, confirmed_id=env_id)
    agent = agent_from_checkpoint(state, str(path), device)
    env_kwargs = {**run_kwargs, **(env_kwargs or {})}
    try:
        env = make(env_id, num_envs=1, device=device, seed=seed, **env_kwargs)
    except TypeError as error:  # a keyword the task does not take
        raise ValueError(f"cannot make {env_id} with the keywords {env_kwargs}: {error}") from None
    try:
        if viewer is None:
            viewer = video is None and has_display() and _mujoco_backed(env)
        if viewer and not _mujoco_backed(env):
            raise ValueError(f"{env_id} is not MuJoCo-backed, so MuJoCo's viewer cannot show it: write a video")
        if not viewer:
            if not hasattr(env, "render"):
                raise ValueError(f"{env_id} does not render; play shows the classic-control and MuJoCo tasks")
            if video is None:
                video = run_dir / "videos" / ("play.mp4" if can_write_mp4() else "play.gif")
        returns, lengths, frames = _play(agent, env, episodes, seed, deterministic, viewer, width, height)
        fps = frame_rate(env)
    finally:
        env.close()
    if frames:
        write_video(video, np.stack(frames), fps=fps)
    return {
        "env_id": env_id,
        "algo": state["algo"],
        "env_steps": state["runner"]["env_steps"],
        "returns": returns,
        "lengths": lengths,
        "frames": len(frames),
        "video": None if viewer else str(video),
    }


@torch.no_grad()
def _play(agent, env, episodes: int, seed: int, deterministic: bool, viewer: bool, width, height):
    from rl_suite.collector import Collector
    from rl_suite.multiagent import MultiAgentCollector, MultiAgentVecEnv

    # The collector's policy side (its act and advance, and a team's memory), as evaluation uses it.
    kind = MultiAgentCollector if isinstance(env, MultiAgentVecEnv) else Collector
    player = kind(env, agent, act=functools.partial(agent.act, deterministic=deterministic), seed=seed)
    returns, lengths, frames = [], [], []
    size = {key: value for key, value in (("width", width), ("height", height)) if value is not None}
    window = _Viewer(env) if viewer else None
    try:
        while len(returns) < episodes:
            started = time.perf_counter()
            if window is None:
                frames.append(env.render(0, **size))
            elif not window.show():
                break  # the viewer's window was closed
            actions, _ = player.act()
            obs, _, _, _, info = env.step(actions)
            if bool(info["done"][0]):
                returns.append(float(info["episode_return"][0]))
                lengths.append(int(info["episode_length"][0]))
            player.advance(obs, info)
            if window is not None:  # real time
                time.sleep(max(0.0, 1.0 / frame_rate(env) - (time.perf_counter() - started)))
    finally:
        if window is not None:
            window.close()
    return returns, lengths, frames


def _mujoco_backed(env) -> bool:
    """Whether ``env`` has a MuJoCo model and a physics backend that hands out one simulation's ``MjData``."""
    return hasattr(env, "model") and callable(getattr(getattr(env, "physics", None), "data", None))


class _Viewer:
    """MuJoCo's passive viewer on environment 0 of a MuJoCo-backed env: its state is copied in at every ``show``."""

    def __init__(self, env):
        import mujoco
        import mujoco.viewer

        self.env, self.mujoco = env, mujoco
        self.data = env.physics.data(0)
        self.window = mujoco.viewer.launch_passive(env.model, self.data)

    def show(self) -> bool:
        """Show the current state; ``False`` once the window is closed."""
        if not self.window.is_running():
            return False
        with self.window.lock():
            self.mujoco.mj_copyData(self.data, self.env.model, self.env.physics.data(0))
        self.window.sync()
        return True

    def close(self) -> None:
        self.window.close()
