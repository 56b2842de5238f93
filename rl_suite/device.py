"""Devices as the suite compares them."""

from __future__ import annotations

import os
import platform

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device`` with the index filled in, so that ``cuda`` and ``cuda:0`` compare equal."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {str(device)!r} was asked for, but torch.cuda.is_available() is False")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo), and its count of logical cores: the machine a result was measured
    on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def usable_cores() -> list[int]:
    """The CPU cores this process may run on: its affinity where the system keeps one (``taskset`` narrows it)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))
