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


def warm_start(agent, source: str | os.PathLike) -> tuple[pathlib.Path, list[str]]:
    """Start ``agent`` from the weights and observation statistics of another run's checkpoint (a ``.pt`` file, or a
    run directory's newest): fine-tuning, such as rough terrain from a flat-ground policy. Its optimisers, counters
    and the run's step count start afresh.

    A tensor that grew along one dimension takes the checkpoint's values in its leading part, which fits observation
    terms added at the end (a first layer's inputs, a normaliser's statistics) and wider hidden layers. A linear
    layer's weights for its new inputs are zeroed (``nn.Linear``'s, and those of the layers that name their weights'
    ``input_axis``: the ensembles' and FlashSAC's), so that the network starts computing what the checkpoint's did;
    the rest of a grown tensor keeps the new agent's initialisation. Any other difference is refused, and so is any
    growth inside a network whose inputs end with the action (``inputs_end_with_action``: the off-policy critics on
    ``cat(s, a)``), where new observation terms sit between the old ones and the action. Returns the
    checkpoint read and a line per grown tensor."""
    path = pathlib.Path(source)
    if path.is_dir():
        path, state = load_latest(path)
    else:
        state = load_checkpoint(path)
    if state.get("algo") != agent.name:
        raise CheckpointError(f"{path} is a checkpoint of {state.get('algo')}; init_from needs one of {agent.name}")
    saved = state["agent"]["modules"]
    plan = []  # (the agent's tensor, the checkpoint's, the dimension that grew or None): all checked before any copy
    inputs = {}  # each linear layer's weight and the axis of its inputs
    fixed = []  # the networks that nothing may grow in
    for name, module in agent.modules.items():
        for prefix, layer in module.named_modules(prefix=name):
            axis = 1 if isinstance(layer, torch.nn.Linear) else getattr(layer, "input_axis", None)
            if axis is not None:
                inputs[f"{prefix}.weight"] = axis
            if getattr(layer, "inputs_end_with_action", False):
                fixed.append(prefix + ".")
        for key, target in module.state_dict().items():  # tensors sharing the module's storage
            where = f"{path}: {name}.{key}"
            if key not in saved.get(name, {}):
                raise CheckpointError(f"{where} is missing: the checkpoint's agent has other networks")
            old = saved[name][key]
            grew = [d for d in range(target.dim()) if old.dim() == target.dim() and old.shape[d] != target.shape[d]]
            if old.shape != target.shape and (len(grew) != 1 or old.shape[grew[0]] > target.shape[grew[0]]):
                raise CheckpointError(
                    f"{where} has shape {tuple(old.shape)} and this agent's {tuple(target.shape)}: only a tensor that "
                    "grew along one dimension (observation terms added at the end) can start from it"
                )
            if grew and any(f"{name}.{key}".startswith(network) for network in fixed):
                raise CheckpointError(
                    f"{where} has shape {tuple(old.shape)} and this agent's {tuple(target.shape)}: this network's "
                    "inputs end with the action, so it starts from a checkpoint only where the observation and the "
                    "widths are unchanged"
                )
            plan.append((f"{name}.{key}", target, old, grew[0] if grew else None))
    grown = []
    with torch.no_grad():
        for name, target, old, dim in plan:
            if dim is None:
                target.copy_(old)
                continue
            if inputs.get(name) == dim:
                target.zero_()  # new inputs contribute nothing at first
            target.narrow(dim, 0, old.shape[dim]).copy_(old)
            grown.append(f"{name} {tuple(old.shape)} -> {tuple(target.shape)}")
    return path, grown
