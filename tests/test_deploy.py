"""The deployment runtime: load-time validation of exported files, and the control loop's watchdog (non-finite
observations, slow policies, raising robots), limits and log, on a fake clock so that the tests are fast and
deterministic."""

from __future__ import annotations

import csv
import json
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.deploy import ControlLoop, Robot, load_policy
from rl_suite.deploy.export import export_policy
from rl_suite.registry import load_algorithm

pytest.importorskip("onnxruntime")

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("policies")
    agent = load_algorithm("ppo")(OBS, ACT, hidden=(16,))
    agent.normalizer.update(torch.randn(100, 4) + 2.0)
    paths = {
        fmt: export_policy(agent, folder / f"p.{fmt}", fmt, control_hz=100).path for fmt in ("onnx", "torchscript")
    }
    return agent, paths


# -- loading ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["onnx", "torchscript"])
def test_load_checks_sizes_and_runs(exported, format):
    agent, paths = exported
    policy = load_policy(paths[format], expected_observation_dim=4, expected_action_dim=2)
    assert policy.backend == format and policy.dt == pytest.approx(0.01)
    obs = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    np.testing.assert_allclose(policy(obs), agent.predict(obs), atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match=r"takes observations of size 4, but the robot gives 5"):
        load_policy(paths[format], expected_observation_dim=5)
    with pytest.raises(ValueError, match=r"gives actions of size 2, but the robot takes 3"):
        load_policy(paths[format], expected_action_dim=3)
    with pytest.raises(ValueError, match=r"observation of shape \(3,\); the policy takes \(4,\)"):
        policy(np.zeros(3, np.float32))


def test_malformed_files_are_refused_at_load(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a model at all" * 10)
    with pytest.raises(ValueError, match="is not a loadable ONNX model"):
        load_policy(garbage)
    archive = tmp_path / "archive.pt"
    with zipfile.ZipFile(archive, "w") as f:
        f.writestr("hello.txt", "not TorchScript")
    with pytest.raises(ValueError, match="is not a loadable TorchScript module"):
        load_policy(archive)
    with pytest.raises(ValueError, match="no policy file at"):
        load_policy(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="unknown backend 'tflite'"):
        load_policy(garbage, backend="tflite")


def test_files_without_metadata_are_refused(tmp_path):
    import warnings

    module = torch.nn.Linear(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(1, 4),), str(tmp_path / "bare.onnx"), dynamo=False)
        torch.jit.save(torch.jit.trace(module, torch.zeros(1, 4)), str(tmp_path / "bare.pt"))
    for name in ("bare.onnx", "bare.pt"):
        with pytest.raises(ValueError, match="carries no rl_suite metadata"):
            load_policy(tmp_path / name)


# -- the control loop -------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


class ScriptedRobot:
    """Returns the scripted observations in turn (an exception instance is raised), and records what it is sent."""

    def __init__(self, observations):
        self.observations, self.sent, self.reads = list(observations), [], 0

    def read_observation(self):
        item = self.observations[self.reads % len(self.observations)]
        self.reads += 1
        if isinstance(item, Exception):
            raise item
        return item

    def apply_action(self, action):
        self.sent.append(np.array(action))


SAFE = np.zeros(2, np.float32)
GOOD = np.ones(4, np.float32)


def constant_policy(value):
    def policy(obs):
        return np.full(2, value, np.float32)

    policy.observation_shape = (4,)
    return policy


def test_a_clean_run_keeps_the_rate_and_logs_every_cycle(exported, tmp_path):
    _, paths = exported
    clock, robot = FakeClock(), ScriptedRobot([GOOD])
    policy = load_policy(paths["onnx"])
    loop = ControlLoop(policy, robot, 50.0, SAFE, clock=clock, sleep=clock.sleep, log_path=tmp_path / "log.csv")
    result = loop.run(10)
    assert (result.cycles, result.faults, result.stopped) == (10, 0, "completed")
    assert clock.now == pytest.approx(10 / 50.0)  # the fake policy call takes no fake time: the loop slept the rest
    assert [r.time for r in result.records] == pytest.approx([k / 50.0 for k in range(10)])
    np.testing.assert_allclose(robot.sent[-1], policy(GOOD))
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert len(rows) == 10 and rows[0]["fault"] == "" and json.loads(rows[0]["observation"]) == [1.0] * 4
    assert isinstance(robot, Robot)


def test_non_finite_observation_sends_the_safe_action_and_stops_after_k_faults(tmp_path):
    clock = FakeClock()
    bad = np.array([1.0, np.nan, 1.0, 1.0], np.float32)
    robot = ScriptedRobot([GOOD, bad, GOOD, bad, bad, GOOD])
    loop = ControlLoop(
        constant_policy(0.5),
        robot,
        100.0,
        SAFE,
        max_faults=3,
        clock=clock,
        sleep=clock.sleep,
        log_path=tmp_path / "log.jsonl",
    )
    result = loop.run(100)
    assert (result.cycles, result.faults, result.stopped) == (5, 3, "max_faults")
    assert [r.fault for r in result.records] == [None, "non-finite observation", None] + ["non-finite observation"] * 2
    np.testing.assert_array_equal(np.array(robot.sent), [[0.5, 0.5], SAFE, [0.5, 0.5], SAFE, SAFE])
    assert [r.cycle for r in result.fault_events] == [1, 3, 4]
    lines = [json.loads(line) for line in open(tmp_path / "log.jsonl")]
    assert lines[1]["fault"] == "non-finite observation" and lines[1]["action"] == [0.0, 0.0]


def test_a_slow_policy_misses_its_deadline():
    clock = FakeClock()
    calls = []

    def slow_policy(obs):
        calls.append(obs)
        clock.now += 0.015 if len(calls) % 2 == 0 else 0.001  # every other call takes 15 ms of a 10 ms period
        return np.full(2, 0.25, np.float32)

    robot = ScriptedRobot([GOOD])
    loop = ControlLoop(slow_policy, robot, 100.0, SAFE, max_faults=2, clock=clock, sleep=clock.sleep)
    result = loop.run(50)
    assert (result.cycles, result.faults, result.stopped) == (4, 2, "max_faults")
    assert result.records[1].fault == "missed deadline: 15.000 ms > 10.000 ms"
    np.testing.assert_array_equal(np.array(robot.sent), [[0.25, 0.25], SAFE, [0.25, 0.25], SAFE])
    assert result.records[1].latency_s == pytest.approx(0.015)

    # A tighter explicit deadline faults on the fast calls as well.
    clock.now, calls[:] = 0.0, []
    tight = ControlLoop(slow_policy, ScriptedRobot([GOOD]), 100.0, SAFE, deadline_s=0.0005, max_faults=1, clock=clock)
    assert tight.run(5).records[0].fault.startswith("missed deadline: 1.000 ms")


def test_exceptions_from_the_robot_and_the_policy_are_faults():
    clock = FakeClock()

    def flaky_policy(obs):
        if obs[0] > 5:
            raise RuntimeError("inference failed")
        return np.full(2, 0.5, np.float32)

    robot = ScriptedRobot([GOOD, OSError("sensor bus timeout"), GOOD * 10, GOOD])
    loop = ControlLoop(flaky_policy, robot, 100.0, SAFE, max_faults=2, clock=clock, sleep=clock.sleep)
    result = loop.run(10)
    assert result.stopped == "max_faults" and result.cycles == 3
    assert result.records[1].fault == "read_observation raised OSError: sensor bus timeout"
    assert result.records[2].fault == "policy raised RuntimeError: inference failed"
    np.testing.assert_array_equal(np.array(robot.sent), [[0.5, 0.5], SAFE, SAFE])

    class BrokenActuator(ScriptedRobot):
        def apply_action(self, action):
            if not np.array_equal(action, SAFE):
                raise OSError("actuator fault")
            super().apply_action(action)

    robot = BrokenActuator([GOOD])
    result = ControlLoop(constant_policy(0.5), robot, 100.0, SAFE, max_faults=1, clock=clock, sleep=clock.sleep).run(9)
    assert result.records[0].fault == "apply_action raised OSError: actuator fault"
    np.testing.assert_array_equal(np.array(robot.sent), [SAFE])  # the safe action went out instead


def test_no_fault_limit_runs_every_cycle():
    clock = FakeClock()
    robot = ScriptedRobot([np.full(4, np.inf, np.float32)])
    result = ControlLoop(constant_policy(1.0), robot, 10.0, SAFE, clock=clock, sleep=clock.sleep).run(7)
    assert (result.cycles, result.faults, result.stopped) == (7, 7, "completed")
    assert all(np.array_equal(sent, SAFE) for sent in robot.sent)


def test_magnitude_and_rate_limits():
    clock = FakeClock()
    robot = ScriptedRobot([GOOD])
    # Policy wants 2.0 everywhere; the clamp allows 0.8 and 0.3; the rate limit 10 units/s at 100 Hz allows 0.1 a
    # cycle, starting from the safe action.
    loop = ControlLoop(
        constant_policy(2.0),
        robot,
        100.0,
        SAFE,
        action_limit=[0.8, 0.3],
        action_rate_limit=10.0,
        clock=clock,
        sleep=clock.sleep,
    )
    loop.run(10)
    sent = np.array(robot.sent)
    np.testing.assert_allclose(sent[:3], [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]], atol=1e-6)
    np.testing.assert_allclose(sent[-1], [0.8, 0.3], atol=1e-6)
    assert (np.abs(np.diff(sent, axis=0)) <= 0.1 + 1e-6).all()

    # After a fault the safe action resets the ramp.
    robot = ScriptedRobot([GOOD, GOOD, GOOD, np.full(4, np.nan, np.float32), GOOD])
    loop = ControlLoop(constant_policy(2.0), robot, 100.0, SAFE, action_rate_limit=10.0, clock=clock, sleep=clock.sleep)
    loop.run(5)
    np.testing.assert_allclose(np.array(robot.sent)[:, 0], [0.1, 0.2, 0.3, 0.0, 0.1], atol=1e-6)


def test_bad_loop_arguments():
    clock = FakeClock()
    with pytest.raises(ValueError, match="rate_hz must be positive"):
        ControlLoop(constant_policy(0.0), ScriptedRobot([GOOD]), 0.0, SAFE)
    with pytest.raises(ValueError, match="max_faults must be at least 1"):
        ControlLoop(constant_policy(0.0), ScriptedRobot([GOOD]), 10.0, SAFE, max_faults=0)
    with pytest.raises(TypeError, match="is not a Robot"):
        ControlLoop(constant_policy(0.0), object(), 10.0, SAFE, clock=clock)


def test_the_runtime_imports_no_agent_and_no_simulator():
    import subprocess
    import sys

    code = (
        "import sys, rl_suite.deploy; "
        "prefixes = ('rl_suite.agents', 'rl_suite.envs', 'rl_suite.deploy.export', 'rl_suite.deploy.sb3', "
        "'rl_suite.deploy.inference'); "
        "bad = sorted(m for m in sys.modules if m.startswith(prefixes)); "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
