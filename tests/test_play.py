"""``rl-suite play RUN_DIR``: a trained run played headless into a video with one frame per step of its episodes, the
classic tasks drawn by gymnasium's renderers and the MuJoCo tasks off-screen, and the errors a user sees (a
directory without checkpoints, a video format that cannot be written, a task that does not render, flags of the
other kind of source)."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import rl_suite
from rl_suite.cli import main


@pytest.fixture(autouse=True)
def _headless(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)


def train(run_dir, env_id: str, *flags: str) -> str:
    assert main(["train", "ppo", env_id, "--run-dir", str(run_dir), "--set", "eval_episodes=2", *flags]) == 0
    return str(run_dir)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return train(tmp_path_factory.mktemp("runs") / "cartpole", "CartPole-v1", "--total-steps", "2048")


def played(capsys) -> tuple[list[float], list[int], str]:
    """The returns, lengths and video path that ``rl-suite play`` printed."""
    out = capsys.readouterr().out
    episodes = re.findall(r"episode \d+: return (\S+), length (\d+)", out)
    video = re.search(r"^video (\S+) \((\d+) frames\)$", out, re.MULTILINE)
    assert episodes and video, out
    lengths = [int(length) for _, length in episodes]
    assert int(video.group(2)) == sum(lengths)
    return [float(ret) for ret, _ in episodes], lengths, video.group(1)


def gif_frames(path) -> tuple[np.ndarray, list[int]]:
    """A GIF's stored frames and each one's delay in milliseconds (Pillow stores a run of identical frames as one,
    shown for their total time)."""
    from PIL import Image, ImageSequence

    with Image.open(path) as gif:
        delays = [frame.info["duration"] for frame in ImageSequence.Iterator(gif)]
    import imageio.v3 as iio

    return iio.imread(path, index=None), delays


def test_a_run_plays_headless_into_a_gif_with_a_frame_per_step_of_its_episodes(cartpole_run, tmp_path, capsys):
    capsys.readouterr()
    video = tmp_path / "x.gif"
    assert main(["play", cartpole_run, "--episodes", "2", "--video", str(video)]) == 0
    returns, lengths, printed = played(capsys)
    assert printed == str(video) and len(lengths) == 2
    assert returns == [float(length) for length in lengths]  # CartPole: 1 per step
    frames, delays = gif_frames(video)
    # 50 frames per second (gymnasium's CartPole): 20 ms a frame, and one frame per step of the two episodes
    assert sum(delays) == 20 * sum(lengths) and set(delays) <= {20 * k for k in range(1, sum(lengths) + 1)}
    assert frames.shape[1:] == (400, 600, 3)  # gymnasium's CartPole picture
    assert 1 < len(frames) <= sum(lengths)
    assert np.abs(frames.astype(int) - frames[0]).max() > 0  # the pole moves
    # the same seed plays the same episodes
    assert main(["play", cartpole_run, "--episodes", "2", "--video", str(tmp_path / "y.gif")]) == 0
    assert played(capsys)[1] == lengths


def test_without_a_video_or_a_display_a_run_writes_its_videos_play_file_frame_by_frame(cartpole_run, capsys):
    from rl_suite.video import can_write_mp4

    if not can_write_mp4():
        pytest.skip("imageio-ffmpeg is not installed: play writes a GIF, checked above")
    import imageio.v3 as iio

    capsys.readouterr()
    assert main(["play", cartpole_run, "--episodes", "2", "--size", "160", "120"]) == 0
    _, lengths, video = played(capsys)
    assert video.endswith("videos/play.mp4") and video.startswith(cartpole_run)
    frames = iio.imread(video, index=None)
    assert frames.shape == (sum(lengths), 120, 160, 3)  # an MP4 keeps every frame


def test_env_kwargs_override_the_runs_and_the_policy_may_sample(cartpole_run, tmp_path, capsys):
    capsys.readouterr()
    gif = str(tmp_path / "short.gif")
    assert main(["play", cartpole_run, "--episodes", "3", "--video", gif, "--env-kwargs", "max_episode_steps=5"]) == 0
    assert played(capsys)[1] == [5, 5, 5]
    flags = ["--episodes", "2", "--video", gif, "--no-deterministic", "--seed", "3"]
    assert main(["play", cartpole_run, *flags, "--env-kwargs", '{"max_episode_steps": 4}']) == 0
    assert played(capsys)[1] == [4, 4]
    assert main(["play", cartpole_run, "--video", gif, "--env-kwargs", "length"]) == 2
    assert "--env-kwargs expects KEY=VALUE pairs or one JSON object, got 'length'" in capsys.readouterr().err
    assert main(["play", cartpole_run, "--video", gif, "--env-kwargs", "gravity_of_mars=3.7"]) == 2
    assert "cannot make CartPole-v1 with the keywords" in capsys.readouterr().err


def test_headless_never_opens_the_viewer_and_classic_tasks_write_a_video_even_with_a_display(
    cartpole_run, capsys, monkeypatch
):
    from rl_suite import play

    def never(env):
        raise AssertionError("opened the viewer")

    monkeypatch.setattr(play, "_Viewer", never)
    assert main(["play", cartpole_run]) == 0  # no display: a video
    assert "videos/play." in played(capsys)[2]
    monkeypatch.setenv("DISPLAY", ":99")
    assert main(["play", cartpole_run]) == 0  # CartPole has no MuJoCo model: a video, not the viewer
    assert "videos/play." in played(capsys)[2]


def test_a_directory_without_checkpoints_says_to_train_first(tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    assert main(["play", str(tmp_path), "--video", str(tmp_path / "x.gif")]) == 2
    err = capsys.readouterr().err
    assert f"no checkpoint found in {tmp_path}" in err and "train first" in err
    assert not (tmp_path / "x.gif").exists()
    assert main(["play", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such run directory or exported policy file" in capsys.readouterr().err


def test_a_bad_video_suffix_is_refused_before_anything_plays(cartpole_run, tmp_path, capsys, monkeypatch):
    from rl_suite import checkpoint, play

    def never(*args, **kwargs):
        raise AssertionError("loaded or played")

    monkeypatch.setattr(checkpoint, "load_latest", never)
    monkeypatch.setattr(play, "_play", never)
    out = tmp_path / "out"
    for name, message in [("x.avi", r"cannot write a .avi video"), ("x", "cannot write a suffixless video")]:
        assert main(["play", cartpole_run, "--video", str(out / name)]) == 2
        assert re.search(message + r" .*: give a \.gif or an \.mp4 file", capsys.readouterr().err)
    assert not out.exists()


def test_flags_of_the_other_kind_of_source_are_refused(cartpole_run, tmp_path, capsys):
    assert main(["play", cartpole_run, "--seconds", "3"]) == 2
    assert "--seconds: only for an exported policy FILE, not a run directory" in capsys.readouterr().err
    exported = tmp_path / "policy.onnx"
    exported.write_bytes(b"")
    assert main(["play", str(exported), "--episodes", "2", "--env-kwargs", "g=9.81"]) == 2
    assert "--episodes, --env-kwargs: only for a RUN_DIR" in capsys.readouterr().err


def test_a_task_that_does_not_render_says_so(tmp_path, capsys):
    tiny = ["--total-steps", "64", "--num-envs", "4", "--set", "n_steps=16", "epochs=1", "minibatches=1"]
    run = train(tmp_path / "multigoal", "MultiGoal-v0", *tiny)
    capsys.readouterr()
    assert main(["play", run]) == 2
    assert "MultiGoal-v0 does not render; play shows the classic-control and MuJoCo tasks" in capsys.readouterr().err
    assert not (tmp_path / "multigoal" / "videos").exists()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"])
def test_classic_tasks_render_their_state_through_gymnasiums_renderer(env_id):
    env = rl_suite.make(env_id, num_envs=2, seed=0)
    env.reset()
    state = env.get_state()
    state[1, 0] = state[0, 0] + 0.5  # the second environment's first coordinate (x, theta, theta1, position)
    env.set_state(state)
    first, second = env.render(0, width=160, height=120), env.render(1, width=160, height=120)
    assert first.shape == second.shape == (120, 160, 3) and first.dtype == np.uint8
    assert not np.array_equal(first, second)  # the picture is of the environment asked for
    assert np.array_equal(env.render(0, width=160, height=120), first)
    assert env.render(0).shape[:2] in [(400, 600), (500, 500)]  # gymnasium's own size
    with pytest.raises(ValueError, match=r"env_id must be in \[0, 2\)"):
        env.render(2)
    env.close()


def test_evaluation_videos_record_classic_tasks(cartpole_run):
    from rl_suite.agent import agent_from_checkpoint
    from rl_suite.checkpoint import load_latest
    from rl_suite.video import record_episode

    path, state = load_latest(pathlib.Path(cartpole_run))
    agent = agent_from_checkpoint(state, str(path), "cpu")
    frames = record_episode(agent, rl_suite.make("CartPole-v1", num_envs=1, seed=0), width=64, height=48)
    assert frames.shape[1:] == (48, 64, 3) and len(frames) >= 8  # a pole needs 8 steps to fall 12 degrees


def test_a_mujoco_run_plays_headless_into_a_video_and_in_the_viewer_with_a_display(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mujoco")
    env = rl_suite.make("InvertedPendulum-v5", num_envs=1, seed=0)
    env.reset()
    try:
        env.render(0, width=32, height=32)
    except Exception as error:  # no OpenGL on this machine
        pytest.skip(f"no OpenGL context (set MUJOCO_GL=egl or osmesa): {error}")
    finally:
        env.close()
    run = train(tmp_path / "ip", "InvertedPendulum-v5", "--total-steps", "256", "--num-envs", "4")
    capsys.readouterr()
    video = tmp_path / "ip.gif"
    assert main(["play", run, "--episodes", "2", "--video", str(video), "--size", "64", "48"]) == 0
    _, lengths, _ = played(capsys)
    frames, delays = gif_frames(video)
    assert sum(delays) == 40 * sum(lengths)  # dt 0.04 s: 25 frames per second
    assert frames.shape[1:] == (48, 64, 3) and np.abs(frames.astype(int) - frames[0]).max() > 0
    # with a display and no video, MuJoCo's viewer shows each step (here a stand-in: this machine has no display)
    from rl_suite import play

    class Viewer:
        shown = 0

        def __init__(self, env):
            assert env.num_envs == 1 and env.model is not None

        def show(self):
            Viewer.shown += 1
            return True

        def close(self):
            pass

    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setattr(play, "_Viewer", Viewer)
    monkeypatch.setattr(play.time, "sleep", lambda seconds: None)  # real time, in the viewer
    result = play.play_run(run, episodes=2)
    assert result["lengths"] == lengths and Viewer.shown == sum(lengths)
    assert result["video"] is None and not (tmp_path / "ip" / "videos").exists()
