"""Data-parallel training under ``torchrun``: one batched env and one copy of the agent per rank, gradients averaged.

Launched by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``),
``init`` joins the process group: ``gloo`` on the CPU, ``nccl`` on CUDA with each rank on ``cuda:LOCAL_RANK``. Without
``torchrun`` (or with a world size of 1) nothing is initialised and every function here is a no-op that costs nothing,
so single-process runs are unchanged.

What keeps the ranks' agents bitwise identical:

- At the start the agent's parameters and buffers (normalisers included) are broadcast from rank 0
  (``broadcast_modules``); ranks draw from different random streams (``rank_seed``), so their inits differ otherwise.
- Before every optimiser step the gradients are averaged with one flattened all-reduce (``average_gradients``), so
  every rank takes the same step.
- ``RunningNorm.update`` merges the moments of every rank's batch (``merge_moments``): all ranks hold the statistics
  that one process would have from the concatenated data.
- Decisions taken from local numbers agree: the finiteness of a loss (``all_true``), the KL that stops PPO's epochs
  or moves its learning rate (``mean``), and the runner's stop decision (``broadcast_flag``: rank 0's time budget and
  evaluation threshold).

What stays local, as in every data-parallel PPO: each rank's rollout, advantages (standardised per minibatch on that
rank; MAPPO standardises over its rank's rollout), minibatch shuffling, replay buffer and exploration noise. A rank's
minibatch is ``1 / world_size`` of the samples its gradient step averages over.

The runner (rl_suite/runner.py) counts env steps over all ranks; rank 0 alone logs (its own metrics and episodes),
evaluates and writes the run directory; its checkpoints gather every rank's env, collector, buffer and random state.
A run resumed with the same world size continues exactly on every rank; with another world size the agent resumes
exactly and the envs restart their episodes (with a warning).

From Python (instead of ``rl-suite train``), call ``init`` before building the env and the agent, on
``init``'s device, and seed each rank with ``rank_seed``; the runner broadcasts rank 0's agent at the start.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

SEED_STRIDE = 1_000_000_007
"""Rank ``r`` seeds its generators and envs with ``seed + SEED_STRIDE * r`` (a prime far above any seed offset the
suite uses, such as the evaluation env's 1_000_003), so that rank 0 runs with the user's seed and the ranks' streams
never coincide."""

_world_size, _rank, _device = 1, 0, torch.device("cpu")  # the communication device: cuda:LOCAL_RANK under nccl


def launched() -> bool:
    """Whether this process was started by ``torchrun`` (or another launcher that sets the same variables) with a
    world size above 1."""
    return "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def init(device: str | torch.device = "cpu", timeout_s: float = 1800.0) -> torch.device:
    """Join the process group if launched by ``torchrun``; return the device this rank trains on (``cuda`` becomes
    ``cuda:LOCAL_RANK``). Idempotent, and a no-op (returning ``device``) in a single process.

    ``timeout_s`` bounds how long a collective waits for a rank that stopped answering (a rank that dies is
    noticed sooner: ``torchrun`` tears down the other workers, and gloo's connections to it close)."""
    global _world_size, _rank, _device
    if not launched():
        return device
    device = torch.device(device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(seconds=timeout_s),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    _world_size, _rank = dist.get_world_size(), dist.get_rank()
    _device = device if device.type == "cuda" else torch.device("cpu")
    return device


def shutdown(finished: bool = True) -> None:
    """Leave the process group. After a run that ``finished`` on every rank, the ranks first meet at a barrier: a
    rank that tears down its gloo connections while another still sends to it or receives from it (the last
    checkpoint's gather) can abort the process ("terminate called without an active exception"). After an error
    there is no barrier, since the other ranks may never reach it."""
    global _world_size, _rank
    if dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()
    _world_size, _rank = 1, 0


def world_size() -> int:
    return _world_size


def rank() -> int:
    return _rank


def is_main() -> bool:
    """Whether this is rank 0, the one that logs, evaluates and writes checkpoints."""
    return _rank == 0


def rank_seed(seed: int) -> int:
    """This rank's seed, derived from the run's ``seed`` (see ``SEED_STRIDE``); ``seed`` itself on rank 0."""
    return seed + SEED_STRIDE * _rank


# -- keeping the agents identical -------------------------------------------------------------------------------


@torch.no_grad()
def broadcast_modules(modules: Iterable[torch.nn.Module]) -> None:
    """Copy rank 0's parameters and buffers into every rank's modules (once, at the start of a run)."""
    if _world_size == 1:
        return
    for module in modules:
        for tensor in module.state_dict().values():
            if isinstance(tensor, torch.Tensor):
                dist.broadcast(tensor, src=0)


@torch.no_grad()
def average_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Replace every parameter's gradient by its mean over the ranks: one all-reduce of all the gradients flattened
    into one buffer (per dtype). A parameter that has no gradient on a rank counts as a zero gradient there."""
    if _world_size == 1:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in parameters:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
    for grads in by_dtype.values():
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat.div_(_world_size)
        torch._foreach_copy_(grads, _unflatten_dense_tensors(flat, grads))


@torch.no_grad()
def merge_moments(count: int, mean: torch.Tensor, var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The count, mean and (biased) variance of the union of every rank's batch, from each batch's own: one
    all-gather of ``(count, mean, count * var)``, merged with the parallel formula in float64. Every rank merges the
    same numbers in the same order, so all get the same bits. Every rank must call it, an empty batch too (count 0,
    finite moments such as zeros); when all are empty the merged count is 0 and the moments are zeros."""
    local = torch.cat(
        (
            torch.tensor([float(count)], dtype=torch.float64, device=mean.device),
            mean.reshape(-1).double(),
            (var * count).reshape(-1).double(),
        )
    )
    gathered = [torch.empty_like(local, device=_device) for _ in range(_world_size)]
    dist.all_gather(gathered, local.to(_device))
    table = torch.stack(gathered).to(mean.device)  # [world, 1 + 2 D]
    counts, means, m2s = table[:, :1], table[:, 1 : 1 + mean.numel()], table[:, 1 + mean.numel() :]
    total = counts.sum()
    divisor = total.clamp(min=1.0)  # counts are whole numbers: this changes only 0 / 0
    merged_mean = (counts * means).sum(0) / divisor
    merged_m2 = (m2s + counts * (means - merged_mean).square()).sum(0)
    return total, merged_mean.view_as(mean), (merged_m2 / divisor).view_as(var)


def all_true(flag: torch.Tensor | bool) -> bool:
    """Whether ``flag`` holds on every rank (e.g. a finite loss), so that all ranks skip or step together."""
    if _world_size == 1:
        return bool(flag)
    value = torch.as_tensor(flag, dtype=torch.int32, device=_device).reshape(1).clone()
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def mean(value: torch.Tensor | float) -> float:
    """The mean over the ranks of a scalar (e.g. an approximate KL that decides an early stop)."""
    if _world_size == 1:
        return float(value)
    tensor = torch.as_tensor(value, dtype=torch.float64, device=_device).reshape(1).clone()
    dist.all_reduce(tensor)
    return float(tensor.item()) / _world_size


def broadcast_flag(flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank (the runner's stop decision: time budget, evaluation threshold)."""
    if _world_size == 1:
        return flag
    tensor = torch.tensor([int(flag)], dtype=torch.int32, device=_device)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` (picklable) on every rank, e.g. the run directory's name."""
    if _world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# -- checkpoints --------------------------------------------------------------------------------------------------


def gather_to_main(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` (tensors moved to the CPU first) as a list on rank 0; ``None`` on the others. A
    collective: every rank must call it."""
    if _world_size == 1:
        return [obj]
    obj = _to_cpu(obj)
    gathered = [None] * _world_size if is_main() else None
    dist.gather_object(obj, gathered, dst=0)
    return gathered


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {key: _to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(value) for value in obj)
    return obj
