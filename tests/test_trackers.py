"""Experiment trackers (``--logger tensorboard,wandb``): Weights & Biases in offline mode gets the same scalars as
TensorBoard, the config and the videos; a resumed run continues its W&B run; another tracker is one small class."""

from __future__ import annotations

import json
import pathlib
import struct
import time

import numpy as np
import pytest

import rl_suite
from rl_suite import logger as trackers
from rl_suite.agents.ppo import PPO
from rl_suite.cli import main
from rl_suite.logger import RunLogger, WandbTracker
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner
from rl_suite.video import write_video

TINY_PPO = dict(n_steps=8, epochs=1, minibatches=1, hidden=(16,))


@pytest.fixture
def offline_wandb(monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", "rl-suite-tests")


def train(run_dir: pathlib.Path, resume: bool = False, total_steps: int = 640, **run_settings):
    seed_everything(0)
    env = rl_suite.make("CartPole-v1", num_envs=4, seed=0)
    agent = PPO(env.observation_space, env.action_space, **TINY_PPO)
    config = RunConfig(env_id="CartPole-v1", algo="ppo", num_envs=4, total_steps=total_steps, eval_every_steps=320,
                       eval_episodes=4, log_every_steps=160, progress=False, **run_settings)  # fmt: skip
    return Runner(agent, env, config, run_dir=run_dir, resume=resume).run()


def tensorboard_scalars(run_dir: pathlib.Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def offline_runs(run_dir: pathlib.Path) -> list[pathlib.Path]:
    """The offline W&B runs of a run directory, each once its transaction log is complete: ``run.finish()`` only
    tells the W&B service that the run is over, and the service, which buffers the log, writes it out (ending with
    the final history row, then ``exit``) as it closes the run a moment later; on a loaded machine, after a test has
    begun to read."""
    runs = sorted((run_dir / "wandb").glob("offline-run-*"))
    for offline in runs:
        deadline = time.monotonic() + 60
        while not transaction_log_is_complete(offline):
            assert time.monotonic() < deadline, f"W&B did not finish writing {offline} in 60 s"
            time.sleep(0.05)
    return runs


def transaction_log_is_complete(offline: pathlib.Path) -> bool:
    from google.protobuf.message import DecodeError

    try:  # a log still being written may lack its header, or end inside a record
        return any(record.WhichOneof("record_type") == "exit" for record in offline_records(offline))
    except (AssertionError, DecodeError, ValueError):
        return False


def offline_records(offline: pathlib.Path):
    """The records of an offline W&B run's transaction log (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic,
    version), then LevelDB's log format (32 kB blocks of records, each CRC32, length, type 1 full, 2 first, 3 middle,
    4 last) around protobuf ``Record`` messages. The SDK no longer ships a reader."""
    from wandb.proto import wandb_internal_pb2

    [path] = offline.glob("run-*.wandb")
    data, offset, pieces = path.read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while offset + 7 <= len(data):
        if 32768 - offset % 32768 < 7:  # a block's tail too short for a record header is padding
            offset += 32768 - offset % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        pieces += data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


def offline_history(offline: pathlib.Path) -> dict[int, dict]:
    """Every ``log`` call of the run: step -> {name: value}."""
    history: dict[int, dict] = {}
    for record in offline_records(offline):
        if record.WhichOneof("record_type") != "history":
            continue
        row = history.setdefault(record.history.step.num, {})
        for item in record.history.item:
            *outer, name = list(item.nested_key) or [item.key]  # a logged object's fields come one by one
            if not (outer or [name])[0].startswith("_"):  # W&B's own _step, _runtime, _timestamp
                target = row
                for key in outer:
                    target = target.setdefault(key, {})
                target[name] = json.loads(item.value_json)
    return history


def offline_run_record(offline: pathlib.Path):
    [run] = [record.run for record in offline_records(offline) if record.WhichOneof("record_type") == "run"]
    return run


def offline_config(offline: pathlib.Path) -> dict:
    return {item.key: json.loads(item.value_json) for item in offline_run_record(offline).config.update}


def test_wandb_offline_gets_tensorboards_scalars_and_the_config(tmp_path, offline_wandb):
    summary = train(tmp_path, loggers="tensorboard,wandb")
    [offline] = offline_runs(tmp_path)
    assert offline_run_record(offline).run_id == (tmp_path / "wandb-run-id").read_text().strip()
    scalars = tensorboard_scalars(tmp_path)
    assert "eval/mean_return" in scalars and "train/policy_loss" in scalars
    history = offline_history(offline)
    assert sorted(history) == [160, 320, 480, 640]  # logged at env steps, as TensorBoard is
    from_wandb = {name: [(step, row[name]) for step, row in sorted(history.items()) if name in row] for name in scalars}
    assert set().union(*map(set, history.values())) == set(scalars)  # the same names
    for name, values in scalars.items():  # at the same steps, with the same values (TensorBoard keeps float32)
        assert [step for step, _ in from_wandb[name]] == [step for step, _ in values], name
        assert [value for _, value in from_wandb[name]] == pytest.approx([value for _, value in values], rel=1e-6)
    assert history[640]["eval/mean_return"] == pytest.approx(summary["final_eval"]["mean_return"])
    config = offline_config(offline)
    assert config["run"]["env_id"] == "CartPole-v1" and config["agent"]["hidden"] == [16]


def test_a_resumed_run_continues_its_wandb_run(tmp_path, offline_wandb):
    train(tmp_path, loggers="wandb", total_steps=320)
    assert not list(tmp_path.glob("events.out.tfevents*"))  # wandb alone: no TensorBoard files
    run_id = (tmp_path / "wandb-run-id").read_text().strip()
    train(tmp_path, resume=True, loggers="wandb")
    first, second = offline_runs(tmp_path)  # the second may be named <first>-1 when both start within a second
    assert offline_run_record(first).run_id == run_id and offline_run_record(second).run_id == run_id
    assert sorted(offline_history(first)) == [160, 320] and sorted(offline_history(second)) == [480, 640]


def test_wandb_gets_the_evaluation_videos(tmp_path, offline_wandb):
    frames = np.zeros((3, 8, 8, 3), dtype=np.uint8)
    frames[1, :, :, 0] = frames[2, :, :, 1] = 255
    gif = write_video(tmp_path / "videos" / "eval.gif", frames, fps=10)
    logger = RunLogger(tmp_path, total_steps=10, progress=False, loggers="tensorboard,wandb", config={"run": {}})
    logger.video("eval/video", gif, frames.shape[1:], step=5)
    logger.close()
    [offline] = offline_runs(tmp_path)
    video = offline_history(offline)[5]["eval/video"]
    assert video["_type"] == "video-file" and video["path"].endswith(".gif")
    assert (offline / "files" / video["path"]).read_bytes() == gif.read_bytes()


def test_another_tracker_is_one_small_class(tmp_path, monkeypatch):
    seen: list[tuple[int, dict]] = []

    class ListTracker:
        def __init__(self, run_dir, config):
            assert config["run"]["algo"] == "ppo"

        def scalars(self, step, values):
            seen.append((step, dict(values)))

        def video(self, tag, gif, frame_shape, step):
            pass

        def close(self):
            seen.append((-1, {}))

    monkeypatch.setitem(trackers.TRACKERS, "list", ListTracker)
    train(tmp_path, loggers="tensorboard,list")
    assert seen[-1] == (-1, {})  # closed at the end
    for name, values in tensorboard_scalars(tmp_path).items():
        assert [step for step, logged in seen[:-1] if name in logged] == [step for step, _ in values]
        logged = [logged[name] for _, logged in seen[:-1] if name in logged]
        assert logged == pytest.approx([value for _, value in values], rel=1e-6)


def test_an_unknown_tracker_is_refused_before_the_run_directory_is_made(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"loggers='tensorboard,mlflow': give one or more of tensorboard, wandb, "
                                         r"comma-separated, each once \('mlflow' unknown\)"):  # fmt: skip
        train(tmp_path / "run", loggers="tensorboard,mlflow")
    assert not (tmp_path / "run").exists()
    code = main(["train", "ppo", "CartPole-v1", "--logger", "wandb,wandb", "--run-dir", str(tmp_path / "cli")])
    assert code == 2 and "loggers='wandb,wandb'" in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


def test_a_wandb_run_id_file_that_is_not_an_id_is_refused(tmp_path, offline_wandb):
    (tmp_path / "wandb-run-id").write_text("../../etc\n")
    with pytest.raises(ValueError, match="does not hold a W&B run id"):
        WandbTracker(tmp_path, {})
