"""Counter-based random streams, one per environment.

Draw ``k`` of environment ``i`` is a hash of ``(k, key_i)``, where ``key_i`` is derived from the seed and ``i``.
So each environment has its own stream: what it draws does not depend on ``num_envs``, on other
environments, or on whether the draws are made for a few chosen environments (by index) or for all of them
under a mask. Nothing is drawn for environments that are not selected, and no generator state lives on the
host. Each stream yields 2**32 draws.

The hash works on 32-bit integers held in int32 tensors, whose multiplications wrap around modulo 2**32 on every
torch backend; right shifts are made logical by masking off the copied sign bits.

The agents and the training loop draw from the process-wide generators instead (torch's, and numpy's and Python's for
user code); ``seed_everything`` seeds them.
"""

from __future__ import annotations

import random

import numpy as np
import torch

# Weyl increment (2**32 / golden ratio, reduced below 2**31) and the multipliers of a 32-bit avalanche hash
# (the "lowbias32" family), all odd and below 2**31 so that they fit int32 scalars.
WEYL = 0x61C88647
M1 = 0x21F0AAAD
M2 = 0x735A2D97


class _Constants:
    """The hash's integers as int32 tensors on one device: a Python int operand costs a dtype conversion per op."""

    def __init__(self, device: torch.device):
        def const(value: int) -> torch.Tensor:
            return torch.tensor(value, dtype=torch.int32, device=device)

        self.weyl, self.m1, self.m2 = const(WEYL), const(M1), const(M2)
        self.shift = {k: const(k) for k in (8, 15, 16)}
        self.low_bits = {k: const((1 << (32 - k)) - 1) for k in (15, 16)}  # masks that make a shift logical


def _xorshift_(x: torch.Tensor, shift: int, scratch: torch.Tensor, c: _Constants) -> torch.Tensor:
    """``x ^= x >> shift`` in place, with a logical shift."""
    torch.bitwise_right_shift(x, c.shift[shift], out=scratch).bitwise_and_(c.low_bits[shift])
    return x.bitwise_xor_(scratch)


def mix32_(x: torch.Tensor, c: _Constants) -> torch.Tensor:
    """Avalanche hash of the 32-bit values in the int32 tensor ``x``, in place: every input bit flips about half of
    the output bits."""
    scratch = torch.empty_like(x)
    _xorshift_(x, 16, scratch, c).mul_(c.m1)
    _xorshift_(x, 15, scratch, c).mul_(c.m2)
    return _xorshift_(x, 15, scratch, c)


class EnvStreams:
    """Independent uniform random streams for ``num_envs`` environments on ``device``."""

    def __init__(self, num_envs: int, device: torch.device, seed: int | None = None):
        self.num_envs = num_envs
        self.device = device
        # Column 0: draws made by each stream so far; column 1: the stream's key. One gather reads both.
        self._streams = torch.zeros(num_envs, 2, device=device, dtype=torch.int32)
        self._draw_offsets = torch.arange(129, device=device, dtype=torch.int32)  # grown for calls of more draws
        self._c = _Constants(device)
        self.seed(seed)

    @property
    def counter(self) -> torch.Tensor:
        """How many values each stream has drawn, ``[num_envs]`` (modulo 2**32)."""
        return self._streams[:, 0]

    def seed(self, seed: int | None) -> None:
        """Restart every stream from ``seed``; ``None`` draws a seed from the operating system."""
        # SeedSequence spreads any non-negative integer over 64 bits of key material.
        s0, s1 = np.random.SeedSequence(seed).generate_state(2, dtype=np.uint32).astype(np.int32).tolist()
        key = torch.arange(self.num_envs, device=self.device, dtype=torch.int32).bitwise_xor_(s0)
        self._streams[:, 1] = mix32_(mix32_(key, self._c).bitwise_xor_(s1), self._c)
        self._streams[:, 0] = 0

    def get_state(self) -> torch.Tensor:
        """A copy of every stream's position and key, int32 ``[num_envs, 2]``: what a checkpoint keeps, so that
        ``set_state`` continues each stream exactly where it was (as ``torch.Generator.get_state``)."""
        return self._streams.clone()

    def set_state(self, state: torch.Tensor) -> None:
        """Continue from a ``get_state`` of streams of as many environments."""
        expected = tuple(self._streams.shape)
        if not isinstance(state, torch.Tensor) or tuple(state.shape) != expected or state.dtype != torch.int32:
            got = f"{state.dtype} {tuple(state.shape)}" if isinstance(state, torch.Tensor) else type(state).__name__
            raise ValueError(
                f"EnvStreams.set_state expects an int32 tensor of shape {expected} (from get_state of {self.num_envs} "
                f"streams), got {got}"
            )
        self._streams.copy_(state)

    def uniform(
        self,
        low: torch.Tensor | float,
        high: torch.Tensor | float,
        size: int,
        env_ids: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The next ``size`` values of the selected streams, uniform in ``[low, high)``: draws k to k + size - 1 of
        each stream, so one call of ``a + b`` values gives what a call of ``a`` then one of ``b`` would.

        Select environments by ``env_ids`` (returns ``[len(env_ids), size]``) or by a boolean ``mask``
        (returns ``[num_envs, size]``; rows outside the mask are filler and their streams do not move).
        """
        if (env_ids is None) == (mask is None):
            raise ValueError("pass exactly one of env_ids and mask")
        if size >= len(self._draw_offsets):  # once per larger size: the offsets of the draws, and the count
            self._draw_offsets = torch.arange(size + 1, device=self.device, dtype=torch.int32)
        streams = self._streams if env_ids is None else self._streams.index_select(0, env_ids)
        # Each op costs about the same at the sizes met here, so the count of ops is what to keep small.
        bits = streams[:, :1] + self._draw_offsets[:size]  # [M, size] draw numbers
        bits.mul_(self._c.weyl).bitwise_xor_(streams[:, 1:])
        mix32_(bits, self._c)
        if env_ids is not None:
            self.counter.index_add_(0, env_ids, self._draw_offsets[size : size + 1].expand(len(env_ids)))
        else:
            self.counter.add_(mask.to(torch.int32) * size)
        # The 24 high bits, read as signed, give k / 2**24 in [-1/2, 1/2), which float32 holds exactly.
        unit = bits.bitwise_right_shift_(self._c.shift[8]).to(dtype)
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            return unit.mul_((high - low) / (1 << 24)).add_((low + high) / 2)
        low = torch.as_tensor(low, dtype=dtype, device=self.device)
        high = torch.as_tensor(high, dtype=dtype, device=self.device)
        return torch.addcmul(torch.lerp(low, high, 0.5), unit, (high - low).div_(1 << 24))

    def normal(
        self,
        size: int,
        env_ids: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """The next ``size`` standard normal values of the selected streams (Box-Muller over ``2 * size`` uniform
        draws); selection as for ``uniform``."""
        u = self.uniform(0.0, 1.0, 2 * size, env_ids=env_ids, mask=mask, dtype=dtype)
        radius = torch.log1p(-u[:, :size]).mul_(-2.0).sqrt_()  # 1 - u lies in (0, 1], so the log is finite
        return radius.mul_(torch.cos(u[:, size:].mul_(2 * torch.pi)))


def seed_everything(seed: int) -> None:
    """Seed torch, and numpy's and Python's global generators for code that uses them."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (the legacy global generator is what user code may draw from)
    torch.manual_seed(seed)
