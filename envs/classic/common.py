"""What the classic-control tasks share: a flat physical state kept as struct-of-arrays."""

from __future__ import annotations

import torch

from rl_suite.env import Selection
from rl_suite.rng import EnvStreams


def stack_into(out: torch.Tensor, rows: tuple[torch.Tensor, ...], env_ids: torch.Tensor | None = None) -> None:
    """``out[:, i] = rows[i]``; with ``env_ids``, the rows hold only those environments and fill ``out[env_ids]``."""
    if env_ids is not None:
        out.index_copy_(0, env_ids, torch.stack(rows, dim=1).to(out.dtype))
    elif all(row.dtype == out.dtype for row in rows):
        torch.stack(rows, dim=1, out=out)  # much faster than copying a transposed view
    else:
        out.copy_(torch.stack(rows, dim=1))


class FlatState:
    """A state of ``dim`` variables per environment, stored as rows ``[dim, N]``.

    Each variable is one contiguous row, so the dynamics run as whole-row tensor operations. The public
    layout (``get_state``, ``set_state``) is gymnasium's ``env.unwrapped.state`` batched: ``[N, dim]``.
    """

    def __init__(self, dim: int, num_envs: int, device: torch.device, dtype: torch.dtype):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.rows = torch.zeros(dim, num_envs, device=device, dtype=dtype)

    def of(self, env_ids: torch.Tensor | None) -> torch.Tensor:
        """The rows of every environment, or of ``env_ids`` only: ``[dim, N or len(env_ids)]``."""
        return self.rows if env_ids is None else self.rows.index_select(1, env_ids)

    def write_rows(self, out: torch.Tensor, env_ids: torch.Tensor | None = None) -> None:
        """Write the state as ``[N, dim]`` into ``out`` (or its rows ``env_ids``): the observation of tasks that
        observe their state."""
        if env_ids is None:
            stack_into(out, tuple(self.rows))
        else:
            out.index_copy_(0, env_ids, self.rows.index_select(1, env_ids).T.to(out.dtype))

    def reset_uniform(self, selection: Selection, rng: EnvStreams, low, high) -> None:
        """Draw the selected environments' state uniformly in ``[low, high)`` (scalars or ``[dim]``)."""
        values = selection.uniform(rng, low, high, self.rows.shape[0], self.rows.dtype)
        selection.write(self.rows.T, values)
