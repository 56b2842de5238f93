"""What the classic-control tasks share: a flat physical state kept as struct-of-arrays, and the env around it."""

from __future__ import annotations

import gymnasium as gym
import torch

from rl_suite.env import Selection, VecEnv
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


class FlatStateEnv(VecEnv):
    """A classic-control task whose physical state is one ``FlatState`` of ``state_dim`` variables, ``self.state``.

    The state is what ``get_state``/``set_state`` read and write, and by default also the observation. A task
    declares ``state_dim``, takes its own settings as keyword arguments and hands its spaces and everything else
    (``**options``) on to this constructor, and writes ``_advance`` and ``_reset_envs``.

    Options every classic task takes: ``max_episode_steps`` (the task's time limit by default; ``None`` for none),
    ``device``, ``seed``, ``dtype`` of the state (``torch.float32`` or ``torch.float64``; observations are always
    float32), and the contract's ``check_values`` and ``masked_resets`` (``VecEnv``).
    """

    state_dim: int

    def __init__(
        self,
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        max_episode_steps: int | None,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        dtype: torch.dtype = torch.float32,
        **contract_options,
    ):
        super().__init__(
            num_envs,
            device,
            observation_space=observation_space,
            action_space=action_space,
            max_episode_steps=max_episode_steps,
            seed=seed,
            **contract_options,
        )
        self.state = FlatState(self.state_dim, self.num_envs, self.device, dtype)

    def _observe(self, out, env_ids=None):
        self.state.write_rows(out, env_ids)

    def _state_view(self):
        return self.state.rows.T
