"""The optimisation helpers every agent uses (rl_suite/optim.py), against hand-computed values."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rl_suite.optim import finite_or_warn, gradient_step, polyak_update


def test_polyak_update_moves_the_target_tau_of_the_way_to_the_source():
    target, source = nn.Linear(1, 1), nn.Linear(1, 1)
    with torch.no_grad():
        target.weight.fill_(1.0), target.bias.fill_(2.0), source.weight.fill_(3.0), source.bias.fill_(6.0)
    polyak_update(target, source, tau=0.25)
    assert target.weight.item() == 1.5 and target.bias.item() == 3.0  # 0.75 * 1 + 0.25 * 3, 0.75 * 2 + 0.25 * 6
    assert source.weight.item() == 3.0 and source.bias.item() == 6.0


@pytest.mark.parametrize(
    "max_grad_norm, lr, expected",
    [
        (0.0, None, [0.0, 0.0]),  # no clipping: p - 1.0 * p
        (1.0, None, [2.4, 3.2]),  # the gradient (3, 4) has norm 5, clipped to norm 1: (0.6, 0.8)
        (0.0, 0.5, [1.5, 2.0]),  # the learning rate set first: p - 0.5 * p
    ],
)
def test_gradient_step_clips_the_global_norm_and_sets_the_learning_rate(max_grad_norm, lr, expected):
    p = nn.Parameter(torch.tensor([3.0, 4.0]))
    optimizer = torch.optim.SGD([p], lr=1.0)
    gradient_step(optimizer, 0.5 * p.square().sum(), [p], max_grad_norm, lr=lr)  # the gradient is p itself
    torch.testing.assert_close(p.detach(), torch.tensor(expected))
    assert optimizer.param_groups[0]["lr"] == (1.0 if lr is None else lr)


def test_a_non_finite_loss_is_refused_with_a_warning():
    assert finite_or_warn(torch.tensor(1.0), "PPO")
    with pytest.warns(UserWarning, match=r"^PPO: non-finite loss; this minibatch's update is skipped$"):
        assert not finite_or_warn(torch.tensor(float("nan")), "PPO")
    with pytest.warns(UserWarning, match=r"^PQL: non-finite critic loss; this update is skipped$"):
        assert not finite_or_warn(torch.tensor(float("inf")), "PQL", loss_name="critic loss", skipped="this update")
