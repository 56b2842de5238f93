"""What a run prints when nobody watches: plain summary lines instead of a redrawn bar, and never a NaN return."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys

import rl_suite
from rl_suite.agents.ppo import PPO
from rl_suite.logger import RunLogger
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_progress_is_one_plain_line_per_interval(tmp_path):
    stream = io.StringIO()
    logger = RunLogger(tmp_path, total_steps=3000, stream=stream, line_interval_s=0.0)
    logger.progress(1000, **{"steps/s": 5123})
    logger.progress(2000, **{"steps/s": 5000, "return": 21.5, "eval": 180.25})
    logger.close()
    lines = stream.getvalue().splitlines()
    assert lines == [
        "train 1,000/3,000 steps | steps/s 5,123",
        "train 2,000/3,000 steps | steps/s 5,000 | return 21.5 | eval 180.2",
    ]
    assert "\r" not in stream.getvalue()


def test_lines_closer_than_the_interval_are_held_back_and_the_last_one_is_printed_at_close(tmp_path):
    stream = io.StringIO()
    logger = RunLogger(tmp_path, total_steps=3000, stream=stream, line_interval_s=3600.0)
    for steps in (1000, 2000, 3000):
        logger.progress(steps, **{"steps/s": 1})
    logger.close()
    assert stream.getvalue().splitlines() == [
        "train 1,000/3,000 steps | steps/s 1",
        "train 3,000/3,000 steps | steps/s 1",
    ]


def test_on_a_terminal_progress_is_a_bar(tmp_path):
    stream = FakeTerminal()
    logger = RunLogger(tmp_path, total_steps=3000, stream=stream, line_interval_s=0.0)
    logger.progress(1000, **{"steps/s": 5123})
    logger.close()
    assert not logger.lines and "\r" in stream.getvalue() and "train:" in stream.getvalue()


def test_progress_never_shows_a_nan_return(tmp_path, monkeypatch):
    """Pendulum's episodes last 200 steps: windows before the first end show no return, later ones the last known."""
    shown: list[dict] = []
    monkeypatch.setattr(RunLogger, "progress", lambda self, steps, **postfix: shown.append(postfix))
    seed_everything(0)
    env = rl_suite.make("Pendulum-v1", num_envs=2, seed=0)
    agent = PPO(env.observation_space, env.action_space, n_steps=16, epochs=1, minibatches=1, hidden=(8,))
    config = RunConfig(env_id="Pendulum-v1", num_envs=2, total_steps=512, log_every_steps=32, eval_episodes=0)
    Runner(agent, env, config, run_dir=tmp_path).run()
    assert len(shown) == 16
    # Both environments' first episodes end at 400 env steps (200 each), in the 13th window (384 to 416).
    assert all("return" not in postfix for postfix in shown[:12])
    returns = [postfix["return"] for postfix in shown[12:]]
    assert all(math.isfinite(value) for value in returns)
    assert returns == [returns[0]] * len(returns)  # no episode ended in the last three windows: the last known value


def test_a_minute_of_training_redirected_to_a_file_writes_under_5_kb(tmp_path):
    log = tmp_path / "train.log"
    command = [sys.executable, "-m", "rl_suite", "train", "ppo", "CartPole-v1", "--time-budget", "60"]
    command += ["--total-steps", "1000000000", "--run-dir", str(tmp_path / "run")]
    command += ["--set", "stop_at_return=none"]
    with open(log, "w") as out:
        subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=True, timeout=300, env=os.environ)
    text = log.read_text()
    assert len(text.encode()) < 5000, text
    assert "nan" not in text and "\r" not in text
    assert text.count("train ") >= 5  # summary lines did come, about one every 5 s
