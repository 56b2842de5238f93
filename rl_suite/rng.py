"""Counter-based random streams, one per environment.

Draw ``k`` of environment ``i`` is a hash of ``(k, key_i)``, where ``key_i`` is derived from the seed and ``i``.
So each environment has its own stream: what it draws does not depend on ``num_envs``, on other
environments, or on whether the draws are made for a few chosen environments (by index) or for all of them
under a mask. Nothing is drawn for environments that are not selected, and no generator state lives on the
host. Each stream yields 2**32 draws.
"""

from __future__ import annotations

import numpy as np
import torch

_MASK32 = 0xFFFFFFFF
# Weyl increment (2**32 / golden ratio, reduced below 2**31) and the multipliers of a 32-bit avalanche hash
# (the "lowbias32" family). All are below 2**31, so products with 32-bit values stay below 2**63 in int64.
_WEYL = 0x61C88647
_M1 = 0x21F0AAAD
_M2 = 0x735A2D97


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Avalanche hash of 32-bit values held in int64: every input bit flips about half of the output bits."""
    x = x ^ (x >> 16)
    x = (x * _M1) & _MASK32
    x = x ^ (x >> 15)
    x = (x * _M2) & _MASK32
    return x ^ (x >> 15)


class EnvStreams:
    """Independent uniform random streams for ``num_envs`` environments on ``device``."""

    def __init__(self, num_envs: int, device: torch.device, seed: int | None = None):
        self.num_envs = num_envs
        self.device = device
        # Column 0: draws made by each stream so far; column 1: the stream's key. One gather reads both.
        self._streams = torch.zeros(num_envs, 2, device=device, dtype=torch.int64)
        self.seed(seed)

    @property
    def counter(self) -> torch.Tensor:
        """How many values each stream has drawn, ``[num_envs]``."""
        return self._streams[:, 0]

    def seed(self, seed: int | None) -> None:
        """Restart every stream from ``seed``; ``None`` draws a seed from the operating system."""
        # SeedSequence spreads any non-negative integer over the key bits.
        s0, s1 = np.random.SeedSequence(seed).generate_state(2, dtype=np.uint32).tolist()
        env_index = torch.arange(self.num_envs, device=self.device, dtype=torch.int64)
        self._streams[:, 1] = mix32(mix32(env_index ^ s0) ^ s1)
        self._streams[:, 0] = 0

    def uniform(
        self,
        low: torch.Tensor | float,
        high: torch.Tensor | float,
        size: int,
        env_ids: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The next ``size`` values of the selected streams, uniform in ``[low, high)``.

        Select environments by ``env_ids`` (returns ``[len(env_ids), size]``) or by a boolean ``mask``
        (returns ``[num_envs, size]``; rows outside the mask are filler and their streams do not move).
        """
        if (env_ids is None) == (mask is None):
            raise ValueError("pass exactly one of env_ids and mask")
        streams = self._streams if env_ids is None else self._streams.index_select(0, env_ids)
        # Each op costs about the same at these sizes, so the count of ops is what to keep small.
        draw = streams[:, :1] + torch.arange(size, device=self.device)  # [M, size] draw numbers
        bits = mix32(((draw * _WEYL) & _MASK32) ^ streams[:, 1:])
        # The 24 high bits give a value in [0, 1) that float32 holds exactly.
        unit = (bits >> 8).to(dtype)
        if env_ids is not None:
            self.counter.index_add_(0, env_ids, torch.full_like(env_ids, size))
        else:
            self.counter.add_(mask.to(torch.int64) * size)
        scale = (torch.as_tensor(high, dtype=dtype, device=self.device) - low) * (1.0 / (1 << 24))
        return torch.addcmul(torch.as_tensor(low, dtype=dtype, device=self.device), unit, scale)
