"""Measure environment steps per second: the figure the batched core lives by."""

from __future__ import annotations

import time
from collections.abc import Callable

import gymnasium as gym
import torch

from rl_suite.env import VecEnv


def random_actions(space: gym.Space, num_envs: int, device: torch.device, count: int, seed: int = 0) -> list:
    """``count`` batches of uniformly random actions for ``space``, drawn once so that timing excludes them."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        if isinstance(space, gym.spaces.Discrete):
            batch = torch.randint(int(space.start), int(space.start + space.n), (num_envs,), generator=generator)
        elif isinstance(space, gym.spaces.Box):
            low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
            batch = low + (high - low) * torch.rand((num_envs, *space.shape), generator=generator)
        else:
            raise ValueError(f"no random actions for {space}")
        batches.append(batch.to(device))
    return batches


def steps_per_second(
    step: Callable[[int], object],
    num_envs: int,
    seconds: float,
    sync: Callable = lambda: None,
    warmup: int = 5,
    windows: int = 5,
) -> float:
    """Call ``step(i)`` for about ``seconds`` after ``warmup`` calls; return env-steps per second (``num_envs`` per
    call). The time is split into ``windows`` and the fastest one counts, as ``timeit`` does: on a shared machine
    the slower windows measure the neighbours."""
    for i in range(warmup):
        step(i)
    sync()
    best, calls = 0.0, 0
    for _ in range(windows):
        window_calls, start = 0, time.perf_counter()
        while True:
            step(calls)
            calls += 1
            window_calls += 1
            # Read the clock every few calls only: small batches step in microseconds.
            if window_calls % 8 == 0:
                sync()
                elapsed = time.perf_counter() - start
                if elapsed >= seconds / windows:
                    break
        best = max(best, window_calls * num_envs / elapsed)
    return best


def env_steps_per_second(env: VecEnv, seconds: float = 1.0) -> float:
    """Env-steps per second of ``env`` under uniformly random actions."""
    actions = random_actions(env.action_space, env.num_envs, env.device, count=16)
    env.reset(seed=0)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    return steps_per_second(lambda i: env.step(actions[i % len(actions)]), env.num_envs, seconds, sync)
