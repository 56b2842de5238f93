"""The control loop's watchdog against calls that hang or are late: ``read_observation``, the policy or
``apply_action`` blocking on an event that is set only at teardown. Hangs are real-time events, so these tests run real
threads; periods are 40 ms and the timing bounds allow half a second of scheduling noise, so that a loaded 2-core
machine holds them. Deadlines on a simulated clock are tested on the fake clock."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from rl_suite.deploy import SIMULATED_CLOCK_HANG_TIMEOUT_S, ControlLoop, Robot

SAFE = np.zeros(2, np.float32)
GOOD = np.ones(4, np.float32)
ACTION = np.full(2, 0.5, np.float32)
RATE_HZ, PERIOD = 25.0, 0.04
SLACK_S = 0.5  # scheduling noise allowed on a loaded machine


@pytest.fixture
def release():
    """The event hung calls wait for; set at teardown so that their threads end."""
    event = threading.Event()
    yield event
    event.set()


class HangingRobot:
    """Reads ``GOOD`` and records every action it is sent, with the time and the method. On cycle ``hang_at``, the call
    ``hang_in`` (``read_observation``, ``policy`` or ``apply_action``; the latter only for a non-safe action) blocks
    until ``release`` is set. ``policy`` is its policy: ``ACTION`` for any observation."""

    def __init__(self, release: threading.Event, hang_in: str, hang_at: int = 2):
        self.release, self.hang_in, self.hang_at = release, hang_in, hang_at
        self.reads = 0
        self.sent: list[tuple[float, str, np.ndarray]] = []
        self.hang_started: float | None = None
        self.hung_call_returned = False

    def _maybe_hang(self, call: str) -> None:
        if call == self.hang_in and self.reads - 1 == self.hang_at:
            self.hang_started = time.monotonic()
            self.release.wait()
            self.hung_call_returned = True

    def read_observation(self):
        self.reads += 1
        self._maybe_hang("read_observation")
        return GOOD

    def policy(self, obs):
        self._maybe_hang("policy")
        return ACTION

    def apply_action(self, action):
        if not np.array_equal(action, SAFE):
            self._maybe_hang("apply_action")
        self.sent.append((time.monotonic(), "apply_action", np.array(action)))

    def sent_since_hang(self) -> list[tuple[str, list[float]]]:
        return [(method, action.tolist()) for t, method, action in self.sent if t >= self.hang_started]


class HangingRobotWithSafeStop(HangingRobot):
    def safe_stop(self, safe_action):
        self.sent.append((time.monotonic(), "safe_stop", np.array(safe_action)))


def run_until_hang(robot: HangingRobot) -> tuple[ControlLoop, object, float]:
    loop = ControlLoop(robot.policy, robot, RATE_HZ, SAFE)
    result = loop.run(50)
    returned = time.monotonic()
    assert result.stopped == "hang" and result.cycles == robot.hang_at + 1
    assert robot.hang_started is not None and not robot.hung_call_returned
    return loop, result, returned


@pytest.mark.parametrize("hang_in", ["read_observation", "policy"])
def test_a_hung_read_or_policy_gets_the_safe_action_at_its_deadline(release, hang_in):
    robot = HangingRobotWithSafeStop(release, hang_in)
    loop, result, returned = run_until_hang(robot)
    assert (loop.deadline_s, loop.hang_timeout_s) == pytest.approx((PERIOD, 2 * PERIOD))

    # At the deadline the watchdog sends the safe action; at the hang timeout it calls the emergency path.
    assert robot.sent_since_hang() == [("apply_action", SAFE.tolist()), ("safe_stop", SAFE.tolist())]
    safe_sent_at = robot.sent[-2][0]
    assert safe_sent_at - robot.hang_started <= loop.deadline_s + loop.period + SLACK_S
    assert returned - robot.hang_started <= 2 * loop.period + SLACK_S

    hang = result.records[-1]
    assert hang.fault.startswith(f"hang: {hang_in} had not returned after ")
    assert hang.fault.endswith("; sent the safe action through safe_stop and stopped the loop")
    assert hang.latency_s >= loop.hang_timeout_s
    np.testing.assert_array_equal(hang.action, SAFE)
    assert hang.observation is None if hang_in == "read_observation" else np.array_equal(hang.observation, GOOD)
    assert result.faults == len(result.fault_events) >= 1

    # The robot is still in use by the abandoned cycle thread: the loop refuses to drive it.
    assert not loop.wait_for_hung_call(timeout=0.01)
    with pytest.raises(RuntimeError, match=f"the robot is still blocked in {hang_in} from the cycle that hung"):
        loop.run(1)

    # When the hung call returns, its cycle's action is stale: it never reaches the robot.
    sent_before = len(robot.sent)
    release.set()
    assert loop.wait_for_hung_call(timeout=5.0) and robot.hung_call_returned
    assert len(robot.sent) == sent_before
    assert loop.run(2).stopped == "completed"  # and the robot may be driven again


@pytest.mark.parametrize("robot_type", [HangingRobot, HangingRobotWithSafeStop])
def test_a_hung_apply_action_gets_the_emergency_path(release, robot_type):
    robot = robot_type(release, "apply_action")
    cycle_thread = []
    original_policy = robot.policy
    robot.policy = lambda obs: cycle_thread.append(threading.current_thread()) or original_policy(obs)
    loop, result, returned = run_until_hang(robot)

    # apply_action holds the send lock, so nothing can go out behind it at the deadline; at the hang timeout the
    # watchdog uses safe_stop, or (without one) a second apply_action from its own thread.
    method = "safe_stop" if robot_type is HangingRobotWithSafeStop else "apply_action"
    assert robot.sent_since_hang() == [(method, SAFE.tolist())]
    assert robot.sent[-1][0] - robot.hang_started <= loop.deadline_s + loop.period + SLACK_S
    assert returned - robot.hang_started <= 2 * loop.period + SLACK_S
    assert result.records[-1].fault.startswith("hang: apply_action had not returned after ")
    assert result.records[-1].fault.endswith(f"sent the safe action through {method} and stopped the loop")
    assert threading.current_thread() not in cycle_thread  # the watchdog did not run the cycle

    release.set()
    assert loop.wait_for_hung_call(timeout=5.0) and robot.hung_call_returned


def test_a_call_that_is_only_sometimes_slow_is_a_fault_and_the_loop_goes_on():
    """On the fake clock: every third read takes two periods and returns only once the safe action has arrived, so
    the test fails unless the watchdog sends it while the read is still blocked."""

    class FakeClock:
        now = 0.0

        def __call__(self):
            return self.now

        def sleep(self, seconds):
            self.now += seconds

    clock, safe_arrived, waits = FakeClock(), threading.Event(), []

    class SometimesSlowRobot:
        reads, sent = 0, []

        def read_observation(self):
            self.reads += 1
            if self.reads % 3 == 0:
                clock.now += 0.02
                waits.append(safe_arrived.wait(timeout=5.0))
                safe_arrived.clear()
            return GOOD

        def apply_action(self, action):
            self.sent.append(np.array(action))
            if np.array_equal(action, SAFE):
                safe_arrived.set()

    robot = SometimesSlowRobot()
    loop = ControlLoop(
        lambda obs: ACTION, robot, 100.0, SAFE, max_faults=2, clock=clock, sleep=clock.sleep, hang_timeout_s=10.0
    )
    result = loop.run(50)
    assert waits == [True, True]  # the safe action came while the read was blocked
    assert (result.cycles, result.faults, result.stopped) == (6, 2, "max_faults")
    assert [r.fault for r in result.records] == [None, None, "missed deadline: 20.000 ms > 10.000 ms"] * 2
    # Exactly one safe action per late cycle, and the late cycle's own action never went out after it.
    np.testing.assert_array_equal(np.array(robot.sent), [ACTION, ACTION, SAFE] * 2)
    np.testing.assert_array_equal(result.records[2].action, SAFE)


def test_an_error_in_the_loop_itself_sends_the_safe_action_then_propagates():
    class PlainRobot:
        sent = []

        def read_observation(self):
            return GOOD

        def apply_action(self, action):
            self.sent.append(np.array(action))

    robot = PlainRobot()
    # A 3-component action cannot be rate-limited against a 2-component last action: numpy raises in the loop.
    loop = ControlLoop(lambda obs: np.ones(3, np.float32), robot, 100.0, SAFE, action_rate_limit=1.0)
    with pytest.raises(ValueError, match="broadcast"):
        loop.run(3)
    np.testing.assert_array_equal(np.array(robot.sent), [SAFE])
    assert isinstance(robot, Robot)


def test_watchdog_defaults_and_bad_arguments():
    robot = HangingRobot(threading.Event(), "nothing")
    real_time = ControlLoop(robot.policy, robot, RATE_HZ, SAFE, deadline_s=0.03)
    assert real_time.hang_timeout_s == pytest.approx(0.03 + PERIOD)
    simulated = ControlLoop(robot.policy, robot, RATE_HZ, SAFE, clock=lambda: 0.0)
    assert (
        simulated.hang_timeout_s == SIMULATED_CLOCK_HANG_TIMEOUT_S == 10.0
    )  # a simulation may be slower than real time
    with pytest.raises(ValueError, match=r"hang_timeout_s must be at least deadline_s \(0.04 s\), got 0.01"):
        ControlLoop(robot.policy, robot, RATE_HZ, SAFE, hang_timeout_s=0.01)
    with pytest.raises(ValueError, match="deadline_s must be positive, got 0"):
        ControlLoop(robot.policy, robot, RATE_HZ, SAFE, deadline_s=0)


def test_ctrl_c_sends_the_safe_action_before_run_leaves(release):
    """Ctrl-C reaches the thread that called ``run`` (here: while it sleeps between cycles): the robot gets the safe
    action through its emergency path, and nothing of the interrupted cycle goes out after it."""
    robot = HangingRobot(release, hang_in="none")
    stops: list[np.ndarray] = []
    robot.safe_stop = lambda action: stops.append(np.array(action))
    sleeps = 0

    def sleep(seconds):
        nonlocal sleeps
        sleeps += 1
        if sleeps == 3:
            raise KeyboardInterrupt
        time.sleep(seconds)

    loop = ControlLoop(robot.policy, robot, rate_hz=RATE_HZ, safe_action=SAFE, sleep=sleep)
    with pytest.raises(KeyboardInterrupt):
        loop.run(cycles=100)
    assert len(stops) == 1 and np.array_equal(stops[0], SAFE)
    sent_before = len(robot.sent)
    time.sleep(3 * PERIOD)  # the cycle thread, if still running, must send nothing more
    assert len(robot.sent) == sent_before == 3
