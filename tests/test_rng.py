"""Per-environment counter-based random streams."""

from __future__ import annotations

import numpy as np
import torch

from rl_suite.rng import EnvStreams

CPU = torch.device("cpu")


def test_values_are_uniform_and_uncorrelated():
    streams = EnvStreams(1000, CPU, seed=0)
    values = torch.cat([streams.uniform(0.0, 1.0, 8, env_ids=torch.arange(1000)) for _ in range(25)], 1).double()
    assert values.min() >= 0 and values.max() < 1
    assert abs(values.mean() - 0.5) < 0.005 and abs(values.var() - 1 / 12) < 0.002
    counts = np.histogram(values.numpy(), bins=20, range=(0, 1))[0]
    expected = values.numel() / 20
    chi_square = ((counts - expected) ** 2 / expected).sum()
    assert chi_square < 43.8  # 19 degrees of freedom, p = 0.001
    # Successive draws of one stream, and the same draw of neighbouring streams, are uncorrelated.
    centred = values - 0.5
    assert abs((centred[:, 1:] * centred[:, :-1]).mean() / centred.var()) < 0.01
    assert abs((centred[1:] * centred[:-1]).mean() / centred.var()) < 0.01


def test_bounds_broadcast_per_dimension():
    streams = EnvStreams(5000, CPU, seed=1)
    values = streams.uniform(torch.tensor([-3.0, 10.0]), torch.tensor([-1.0, 10.5]), 2, env_ids=torch.arange(5000))
    assert values.shape == (5000, 2)
    assert (values[:, 0] >= -3).all() and (values[:, 0] < -1).all()
    assert (values[:, 1] >= 10).all() and (values[:, 1] < 10.5).all()


def test_a_stream_depends_on_the_seed_and_its_index_only():
    few, many = EnvStreams(3, CPU, seed=7), EnvStreams(100, CPU, seed=7)
    assert torch.equal(few.uniform(0, 1, 4, env_ids=torch.arange(3)), many.uniform(0, 1, 4, env_ids=torch.arange(3)))
    # Draws for other streams in between do not move stream 1.
    many.uniform(0, 1, 4, env_ids=torch.tensor([0, 5, 50]))
    assert torch.equal(
        few.uniform(0, 1, 4, env_ids=torch.tensor([1])), many.uniform(0, 1, 4, env_ids=torch.tensor([1]))
    )
    assert not torch.equal(
        EnvStreams(3, CPU, seed=8).uniform(0, 1, 4, env_ids=torch.arange(3)),
        EnvStreams(3, CPU, seed=7).uniform(0, 1, 4, env_ids=torch.arange(3)),
    )


def test_masked_and_indexed_draws_agree_and_only_selected_streams_move():
    by_index, by_mask = EnvStreams(10, CPU, seed=2), EnvStreams(10, CPU, seed=2)
    mask = torch.tensor([True, False, False, True, True, False, False, False, False, True])
    ids = mask.nonzero().squeeze(1)
    indexed = by_index.uniform(-1, 1, 3, env_ids=ids)
    masked = by_mask.uniform(-1, 1, 3, mask=mask)
    assert masked.shape == (10, 3) and torch.equal(masked[mask], indexed)
    assert torch.equal(by_index.counter, by_mask.counter)
    assert by_index.counter.tolist() == [3 if m else 0 for m in mask.tolist()]


def test_a_call_of_any_size_continues_the_streams():
    """128 draws by index once left the counter where it was (the offsets ran out at 127), so the next call repeated
    them; and one call of a + b values is a call of a then one of b, whatever the sizes."""
    streams = EnvStreams(2, CPU, seed=3)
    first = streams.uniform(0, 1, 128, env_ids=torch.arange(2))
    assert first.shape == (2, 128) and streams.counter.tolist() == [128, 128]
    assert not torch.equal(streams.uniform(0, 1, 128, env_ids=torch.arange(2)), first)
    streams.uniform(0, 1, 128, mask=torch.tensor([True, False]))
    assert streams.counter.tolist() == [384, 256]
    whole, parts = EnvStreams(2, CPU, seed=5), EnvStreams(2, CPU, seed=5)
    big = whole.uniform(-2.0, 3.0, 300, env_ids=torch.arange(2))
    pieces = [parts.uniform(-2.0, 3.0, k, mask=torch.ones(2, dtype=torch.bool)) for k in (128, 100, 72)]
    assert torch.equal(big, torch.cat(pieces, 1)) and torch.equal(whole.counter, parts.counter)


def test_reseeding_restarts_and_float64_draws_are_supported():
    streams = EnvStreams(4, CPU, seed=3)
    first = streams.uniform(0, 1, 2, env_ids=torch.arange(4), dtype=torch.float64)
    assert first.dtype == torch.float64
    streams.seed(3)
    assert torch.equal(streams.uniform(0, 1, 2, env_ids=torch.arange(4), dtype=torch.float64), first)
    assert not torch.equal(
        EnvStreams(4, CPU).uniform(0, 1, 2, env_ids=torch.arange(4)),
        EnvStreams(4, CPU).uniform(0, 1, 2, env_ids=torch.arange(4)),
    )  # None: fresh entropy


def _mix32_reference(x: np.ndarray) -> np.ndarray:
    """The same hash in numpy uint32, whose arithmetic wraps modulo 2**32 by definition."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x21F0AAAD)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x735A2D97)
    return x ^ (x >> np.uint32(15))


def test_int32_tensor_arithmetic_wraps_like_uint32():
    """The torch hash relies on int32 multiplication wrapping around; check it against well-defined uint32 maths."""
    seed, n, draws = 12345, 257, 5
    s0, s1 = np.random.SeedSequence(seed).generate_state(2, dtype=np.uint32)
    key = _mix32_reference(_mix32_reference(np.arange(n, dtype=np.uint32) ^ s0) ^ s1)
    draw = np.arange(draws, dtype=np.uint32)
    bits = _mix32_reference((draw[None, :] * np.uint32(0x61C88647)) ^ key[:, None])
    expected = (bits.view(np.int32) >> 8).astype(np.float64) / 2**24 + 0.5  # the signed high 24 bits
    values = EnvStreams(n, CPU, seed=seed).uniform(0.0, 1.0, draws, env_ids=torch.arange(n), dtype=torch.float64)
    np.testing.assert_array_equal(values.numpy(), expected)
