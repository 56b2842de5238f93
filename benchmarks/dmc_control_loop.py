"""One dm_control environment stepped in a Python loop: the peer of ``benchmarks/dmc_throughput.py``, which runs
this script in dm_control's own virtual environment (dm_control 1.0.50 needs MuJoCo 3.17; see
``tests/dmc_reference/record.py`` for how to make it). No torch and no rl_suite here.

    .venv-dmc/bin/python benchmarks/dmc_control_loop.py DOMAIN-TASK [--seconds 2]

Prints one JSON line: ``{"task": ..., "steps_per_s": ...}``, the best of 3 windows after a warm-up, uniformly random
actions drawn beforehand, the env reset when its episode ends (as the batched env's same-step reset).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from dm_control import suite

WINDOWS, ACTION_BATCHES = 3, 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="domain-task, e.g. cheetah-run")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    domain, task = args.task.split("-", 1)
    env = suite.load(domain, task, task_kwargs={"random": 0})
    spec = env.action_spec()
    generator = np.random.default_rng(0)
    actions = [generator.uniform(spec.minimum, spec.maximum) for _ in range(ACTION_BATCHES)]
    env.reset()
    calls = 0

    def step() -> None:
        nonlocal calls
        if env.step(actions[calls % ACTION_BATCHES]).last():
            env.reset()
        calls += 1

    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds / 4:
        step()
    best = 0.0
    for _ in range(WINDOWS):
        done, start = calls, time.perf_counter()
        while time.perf_counter() - start < args.seconds / WINDOWS:
            step()
        best = max(best, (calls - done) / (time.perf_counter() - start))
    print(json.dumps({"task": args.task, "steps_per_s": best}))


if __name__ == "__main__":
    main()
