"""Networks: the distributions against torch.distributions, the running normaliser against numpy, action scaling and
the critic ensemble against separate layers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import distributions as D

from rl_suite.networks import (
    ActionScaler,
    Categorical,
    DiagGaussian,
    EnsembleMLP,
    RunningNorm,
    TanhGaussian,
)


def test_categorical_matches_torch():
    torch.manual_seed(0)
    logits = torch.randn(5, 4)
    ours, ref = Categorical(logits), D.Categorical(logits=logits)
    actions = torch.tensor([0, 3, 1, 2, 3])
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert torch.equal(ours.mode(), logits.argmax(-1))
    samples = Categorical(torch.log(torch.tensor([[0.1, 0.6, 0.3]]).expand(20000, 3))).sample()
    frequencies = torch.bincount(samples, minlength=3) / 20000
    torch.testing.assert_close(frequencies, torch.tensor([0.1, 0.6, 0.3]), atol=0.015, rtol=0)


def test_diagonal_gaussian_matches_torch():
    torch.manual_seed(1)
    mean, log_std = torch.randn(6, 3), torch.randn(3) * 0.3
    ours, ref = DiagGaussian(mean, log_std), D.Independent(D.Normal(mean, log_std.exp()), 1)
    action = torch.randn(6, 3)
    torch.testing.assert_close(ours.log_prob(action), ref.log_prob(action))
    torch.testing.assert_close(ours.entropy(), ref.entropy())


def test_tanh_gaussian_log_prob_matches_the_transformed_distribution():
    torch.manual_seed(2)
    mean, log_std = torch.randn(1000, 2), torch.randn(1000, 2) * 0.5
    torch.manual_seed(3)
    action, log_prob = TanhGaussian(mean, log_std).rsample_with_log_prob()
    reference = D.Independent(D.TransformedDistribution(D.Normal(mean, log_std.exp()), [D.TanhTransform()]), 1)
    keep = action.abs().max(-1).values < 0.999  # away from +-1, where atanh in the reference loses precision
    torch.testing.assert_close(log_prob[keep], reference.log_prob(action)[keep], atol=1e-3, rtol=1e-4)
    assert action.abs().max() < 1


def test_running_norm_matches_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (5, 100, 37)]
    norm = RunningNorm((4,))
    for batch in batches:
        norm.update(torch.as_tensor(batch, dtype=torch.float32))
    data = np.concatenate(batches)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-5)
    assert norm.count.item() == len(data)
    x = torch.as_tensor(data[:3], dtype=torch.float32)
    expected = (data[:3] - data.mean(0)) / np.sqrt(data.var(0) + 1e-8)
    np.testing.assert_allclose(norm(x).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert set(norm.state_dict()) == {"mean", "var", "count"}  # saved with the policy


def test_running_norm_ignores_an_empty_batch():
    """MAPPO updates its normalisers with the alive agents only, which may be none: the statistics must not change
    (dividing by a zero count would make them NaN for good), whether or not the normaliser has seen data."""
    fresh = RunningNorm((4,))
    fresh.update(torch.zeros(0, 4))
    assert fresh.count.item() == 0
    torch.testing.assert_close(fresh.mean, torch.zeros(4, dtype=torch.float64))
    torch.testing.assert_close(fresh.var, torch.ones(4, dtype=torch.float64))

    data = torch.as_tensor(np.random.default_rng(1).normal(2.0, 3.0, size=(50, 4)), dtype=torch.float32)
    norm = RunningNorm((4,))
    norm.update(data[:20])
    alive = torch.zeros(3, 5, dtype=torch.bool)  # [envs, agents]: nobody alive
    norm.update(torch.zeros(3, 5, 4)[alive])
    norm.update(data[20:])
    norm.update(torch.zeros(0, 2, 4))
    torch.testing.assert_close(norm.mean, data.double().mean(0))
    torch.testing.assert_close(norm.var, data.double().var(0, unbiased=False))
    assert norm.count.item() == 50

    scalar = RunningNorm(())  # the return normaliser's shape
    scalar.update(torch.tensor([1.0, 3.0]))
    scalar.update(torch.zeros(0))
    assert (scalar.mean.item(), scalar.var.item(), scalar.count.item()) == (2.0, 1.0, 2.0)


def test_action_scaler_maps_to_the_bounds_and_clips():
    low, high = np.array([-2.0, 0.0], dtype=np.float32), np.array([2.0, 10.0], dtype=np.float32)
    scaler = ActionScaler(gym.spaces.Box(low, high, dtype=np.float32))
    out = scaler(torch.tensor([[-1.0, 1.0], [0.0, 0.0], [3.0, -7.0]]))
    torch.testing.assert_close(out, torch.tensor([[-2.0, 10.0], [0.0, 5.0], [2.0, 0.0]]))
    torch.testing.assert_close(scaler.unscale(out[:2]), torch.tensor([[-1.0, 1.0], [0.0, 0.0]]))
    unbounded = ActionScaler(gym.spaces.Box(-np.inf, np.inf, (1,), dtype=np.float32))
    torch.testing.assert_close(unbounded(torch.tensor([[5.0]])), torch.tensor([[5.0]]))


def test_action_scaler_in_clip_mode_passes_actions_through_within_bounds_and_clips_beyond():
    """``clip``: the policy's action is the env's own (a legged robot's offsets from its default pose), clipped to
    asymmetric bounds per dimension; an unbounded dimension passes unchanged. ``scale`` would map 0 to the middle."""
    space = gym.spaces.Box(np.array([-np.inf, -2.0]), np.array([np.inf, 6.0]), dtype=np.float32)
    scaler = ActionScaler(space, "clip")
    out = scaler(torch.tensor([[-9.0, 0.0], [0.5, -3.0], [2.0, 7.5]]))
    torch.testing.assert_close(out, torch.tensor([[-9.0, 0.0], [0.5, -2.0], [2.0, 6.0]]))
    torch.testing.assert_close(scaler.unscale(out), out)
    torch.testing.assert_close(ActionScaler(space, "scale")(torch.zeros(1, 2)), torch.tensor([[0.0, 2.0]]))
    with pytest.raises(ValueError, match=r"action_bounds must be one of \('scale', 'clip'\), got 'squash'"):
        ActionScaler(space, "squash")


@pytest.mark.parametrize("mode", ActionScaler.MODES)
def test_the_exported_scale_acts_as_the_action_scaler_in_either_mode(mode):
    """Exported policies carry a frozen copy of the scaler (rl_suite/deploy/inference.py): it must clip, or scale,
    as the agent's does, beyond the bounds too."""
    from rl_suite.deploy.inference import FrozenScale

    space = gym.spaces.Box(np.array([-np.inf, -2.0, -3.0]), np.array([np.inf, 6.0, 1.0]), dtype=np.float32)
    scaler = ActionScaler(space, mode)
    actions = torch.tensor([[-9.0, 0.0, 0.5], [0.5, -3.0, -0.7], [2.0, 7.5, 4.0]])
    torch.testing.assert_close(FrozenScale(scaler)(actions), scaler(actions))


def test_ensemble_mlp_equals_its_members_run_separately():
    torch.manual_seed(4)
    ensemble = EnsembleMLP(2, 5, (8, 8), 1)
    x = torch.randn(7, 5)
    out = ensemble(x)
    assert out.shape == (2, 7, 1)
    for member in range(2):
        h = x
        for layer in ensemble.hidden:
            h = torch.relu(h @ layer.weight[member] + layer.bias[member])
        torch.testing.assert_close(out[member], h @ ensemble.out.weight[member] + ensemble.out.bias[member])
    assert not torch.allclose(out[0], out[1])  # independently initialised


def test_ensemble_layer_norm_normalises_each_members_hidden_layers_with_its_own_gain_and_shift():
    torch.manual_seed(5)
    ensemble = EnsembleMLP(2, 5, (8, 8), 1, layer_norm=True)
    with torch.no_grad():
        for norm in ensemble.norms:
            norm.weight.uniform_(0.5, 2.0)
            norm.bias.uniform_(-1.0, 1.0)
    x = torch.randn(7, 5)
    out = ensemble(x)
    for member in range(2):
        h = x
        for layer, norm in zip(ensemble.hidden, ensemble.norms, strict=True):
            pre = h @ layer.weight[member] + layer.bias[member]
            variance = pre.var(-1, unbiased=False, keepdim=True)
            standardised = (pre - pre.mean(-1, keepdim=True)) / torch.sqrt(variance + 1e-5)
            h = torch.relu(standardised * norm.weight[member] + norm.bias[member])
        torch.testing.assert_close(out[member], h @ ensemble.out.weight[member] + ensemble.out.bias[member])
    # frozen (SAC's actor loss through the critics): gradients reach the input, not the norms
    x.requires_grad_(True)
    ensemble(x, frozen=True).sum().backward()
    assert x.grad is not None and all(p.grad is None for p in ensemble.parameters())
    plain = EnsembleMLP(2, 5, (8, 8), 1)
    assert plain.norms is None and len(list(plain.parameters())) == len(list(ensemble.parameters())) - 4
