"""Checkpoints: written atomically (a temporary file, then a rename) and read with ``weights_only=True``, so that a
checkpoint from a stranger cannot run code. A crash while saving leaves the previous checkpoint intact."""

from __future__ import annotations

import os
import pathlib
import pickle
import warnings
import zipfile
from typing import Any

import torch


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or for another algorithm or environment."""


def atomic_save(obj: Any, path: pathlib.Path) -> None:
    """Write ``obj`` to ``path`` so that a crash at any moment leaves either the old file or the new one: the data
    goes to a temporary file, synced to disk, then renamed over ``path``; syncing the directory makes the rename
    itself durable (otherwise a power loss can bring back the old directory entry)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_directory(path.parent)


def _fsync_directory(directory: pathlib.Path) -> None:
    """Sync a directory's entries to disk, where the platform can open a directory (POSIX; not Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse to sync a directory; the rename has still happened
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: pathlib.Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable checkpoint ({type(error).__name__}: {error})") from None


def checkpoint_path(run_dir: pathlib.Path, env_steps: int) -> pathlib.Path:
    return run_dir / "checkpoints" / f"step_{env_steps:012d}.pt"


def checkpoints(run_dir: pathlib.Path) -> list[pathlib.Path]:
    """The run's checkpoints, newest first."""
    return sorted((run_dir / "checkpoints").glob("step_*.pt"), reverse=True)


def load_latest(run_dir: pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]]:
    """The newest checkpoint of ``run_dir`` that loads; unreadable newer ones are skipped with a warning."""
    found = checkpoints(run_dir)
    if not found:
        raise CheckpointError(f"no checkpoints in {run_dir / 'checkpoints'}")
    for path in found:
        try:
            return path, load_checkpoint(path)
        except CheckpointError as error:
            warnings.warn(f"skipping {error}", stacklevel=2)
    raise CheckpointError(f"none of the {len(found)} checkpoints in {run_dir / 'checkpoints'} is readable")


def prune(run_dir: pathlib.Path, keep: int) -> None:
    for path in checkpoints(run_dir)[keep:]:
        path.unlink(missing_ok=True)


def rng_state() -> dict[str, Any]:
    """The state of torch's generators, which the training loop draws from (actions, minibatches, replay samples)."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
