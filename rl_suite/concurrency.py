"""Running an agent's pieces at the same time: worker threads, weight hand-offs and speed balancing.

PQL runs its actor (the runner's own thread, driving the collector), its value learner and its policy learner
concurrently. They share tensors in one process rather than serialising them: torch releases the GIL inside its
kernels, so on the CPU the workers' numeric work overlaps, and on CUDA their kernel launches do.

- ``Worker``: a thread that repeats one unit of work until stopped, records when each unit ran, parks when asked
  to pause (so that a checkpoint sees a consistent state) and keeps the first exception for the runner to re-raise.
- ``Mailbox``: the newest published copy of a module's tensors; a reader copies it out only when it has changed.
- ``RateBalancer``: keeps the workers' counts near set ratios by making whichever runs ahead wait.

On CUDA every worker launches into the device's current stream, so the device executes their kernels in the
order the locks below admit them: a write that one worker launched before another worker's read is complete
before that read, without cross-stream events.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable

import torch
from torch import nn

_WAIT_S = 0.05  # longest sleep between checks of the stop and pause flags


class WorkerError(RuntimeError):
    """A worker thread raised; the message names the worker and repeats the original error."""


class Worker:
    """Calls ``step()`` in a thread until ``stop()``, each time after ``wait()`` (if given) allowed it: ``wait``
    blocks while the worker must not go on, and returns ``False`` if it gave up because the worker is stopping or
    pausing. ``step`` returns whether it did a unit of work (``False``: nothing to do yet, so back off briefly).
    The units' start and end times go to ``intervals`` (the newest ``keep_intervals``), from which tests and logs
    measure how the workers overlapped."""

    def __init__(
        self,
        name: str,
        step: Callable[[], bool],
        wait: Callable[[], bool] | None = None,
        keep_intervals: int = 4096,
    ):
        self.name, self._step, self._wait = name, step, wait
        self.intervals: collections.deque[tuple[float, float]] = collections.deque(maxlen=keep_intervals)
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._pause_requested = threading.Event()
        self._parked = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start a fresh thread (a stopped worker can start again)."""
        self.error = None
        for flag in (self._stop, self._pause_requested, self._parked):
            flag.clear()
        self._thread = threading.Thread(target=self._run, name=f"rl-suite-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self._pause_requested.is_set():
                    self._parked.set()
                    self._stop.wait(_WAIT_S)
                    continue
                self._parked.clear()
                if self._wait is not None and not self._wait():
                    continue
                began = time.perf_counter()
                if self._step():
                    self.intervals.append((began, time.perf_counter()))
                else:
                    time.sleep(1e-4)
        except BaseException as error:  # noqa: BLE001 - kept for the runner's thread, which re-raises it
            self.error = error
        finally:
            self._parked.set()

    @property
    def stopping(self) -> bool:
        """True once the worker should return from whatever it waits on."""
        return self._stop.is_set() or self._pause_requested.is_set()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def pause(self) -> None:
        self._pause_requested.set()

    def resume(self) -> None:
        self._parked.clear()
        self._pause_requested.clear()

    def wait_parked(self, timeout: float) -> bool:
        return self._thread is None or self._parked.wait(timeout)


class WorkerGroup:
    """Workers started, checked, paused and stopped together."""

    def __init__(self, workers: list[Worker], join_timeout_s: float = 30.0):
        self.workers, self.join_timeout_s = workers, join_timeout_s
        self.started = False

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        self.started = True

    def check(self) -> None:
        """Re-raise, in the calling thread, the first error of any worker (after stopping all of them)."""
        for worker in self.workers:
            if worker.error is not None:
                self.stop()
                raise WorkerError(f"the {worker.name} worker failed: {worker.error!r}") from worker.error

    @contextlib.contextmanager
    def paused(self):
        """Every worker parked between units of work for the duration: their shared state is consistent."""
        if not self.started:
            yield
            return
        for worker in self.workers:
            worker.pause()
        try:
            for worker in self.workers:
                if not worker.wait_parked(self.join_timeout_s):
                    raise WorkerError(f"the {worker.name} worker did not pause within {self.join_timeout_s} s")
            yield
        finally:
            for worker in self.workers:
                worker.resume()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        hung = [w.name for w in self.workers if not w.join(self.join_timeout_s)]
        self.started = False
        if hung:
            raise WorkerError(f"worker(s) {', '.join(hung)} did not stop within {self.join_timeout_s} s")


def overlap_seconds(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total time during which an interval of ``a`` and one of ``b`` both ran (each list sorted, non-overlapping)."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


class Mailbox:
    """The newest published state of a module, for readers in other threads.

    ``publish`` copies the writer's parameters and buffers in; ``fetch`` copies them out into a reader's module if a
    newer version exists. Both copy under one lock, so a reader never sees half of an update.
    """

    def __init__(self, module: nn.Module):
        self._tensors = [t.detach().clone() for t in _tensors(module)]
        self._lock = threading.Lock()
        self.version = 0

    @torch.no_grad()
    def publish(self, module: nn.Module) -> None:
        with self._lock:
            torch._foreach_copy_(self._tensors, [t.detach() for t in _tensors(module)])
            self.version += 1

    @torch.no_grad()
    def fetch(self, module: nn.Module, seen: int) -> int:
        """Copy the newest state into ``module`` unless version ``seen`` is already the newest; returns the version
        now in ``module``."""
        if self.version == seen:
            return seen
        with self._lock:
            torch._foreach_copy_([t.detach() for t in _tensors(module)], self._tensors)
            return self.version


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *module.buffers()]


class RateBalancer:
    """Keeps counts of work near set ratios: worker ``name``'s count times ``weights[name]`` is its progress, and a
    worker whose progress leads the slowest by more than ``slack`` waits (``wait_turn``) until the others catch up.
    The slowest never waits, so the group cannot deadlock.

    With PQL's weights (actor: critic updates per env step, critic: 1, policy: critic updates per policy update),
    equal progress means the ratios hold exactly.
    """

    def __init__(self, weights: dict[str, float], slack: float):
        self.weights, self.slack = dict(weights), slack
        self.counts = dict.fromkeys(weights, 0)
        self._changed = threading.Condition()

    def progress(self, name: str) -> float:
        return self.counts[name] * self.weights[name]

    def add(self, name: str, count: int = 1) -> None:
        with self._changed:
            self.counts[name] += count
            self._changed.notify_all()

    def ahead(self, name: str) -> bool:
        slowest = min(self.progress(other) for other in self.counts if other != name)
        return self.progress(name) > slowest + self.slack

    def wait_turn(self, name: str, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Block while ``name`` is ahead; returns ``False`` if ``give_up()`` became true first."""
        with self._changed:
            while self.ahead(name):
                if give_up():
                    return False
                self._changed.wait(_WAIT_S)
        return True

    def ratio(self, numerator: str, denominator: str) -> float:
        return self.counts[numerator] / max(self.counts[denominator], 1)

    def state_dict(self) -> dict[str, int]:
        return dict(self.counts)

    def load_state_dict(self, counts: dict[str, int]) -> None:
        with self._changed:
            self.counts.update(counts)
            self._changed.notify_all()
