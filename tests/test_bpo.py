"""BPO's loss against hand-computed values, its limiting cases (the hard target, PPO's one-sided version of it), the
median head's soft median, and its settings' bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

from rl_suite.agents.bpo import BPO, bpo_policy_loss, median_loss, target_ratio
from rl_suite.onpolicy import clipped_surrogate


def test_target_ratio_by_hand():
    # eps 0.3, lambda 1: sigmoid(ln 3) = 0.75, so rho* = 0.7 + 0.6 * 0.75 = 1.15; sigmoid(-ln 3) = 0.25 gives 0.85.
    advantage = torch.tensor([0.0, math.log(3.0), -math.log(3.0)])
    assert torch.allclose(target_ratio(advantage, 0.3, 1.0), torch.tensor([1.0, 1.15, 0.85]))
    # The identity 1 - eps + 2 eps sigmoid(x) = 1 + eps tanh(x / 2).
    x = torch.linspace(-5, 5, 11)
    assert torch.allclose(target_ratio(x, 0.2, 1.0), 1 + 0.2 * torch.tanh(x / 2))


def test_small_temperature_gives_the_hard_target_and_large_gives_no_move():
    advantage = torch.tensor([2.0, -0.5, 0.01])
    hard = target_ratio(advantage, 0.2, 1e-4)  # within 2 eps sigmoid(-10) = 1.8e-5 of 1 +- eps (the clamp at +-10)
    assert torch.allclose(hard, torch.tensor([1.2, 0.8, 1.2]), atol=2e-5)
    assert torch.allclose(target_ratio(advantage, 0.2, 1e6), torch.ones(3))


def test_policy_loss_by_hand():
    # w = 2, rho = 1, A~ = ln 3 (rho* = 1.15 at eps 0.3, lambda 1): |1 - 1.15| * 2 = 0.30. A second sample, w = -1,
    # rho = 0.7, A~ = -ln 3 (rho* = 0.85): |0.7 - 0.85| * 1 = 0.15. Mean 0.225.
    ratio = torch.tensor([1.0, 0.7])
    loss = bpo_policy_loss(ratio, torch.tensor([2.0, -1.0]), torch.tensor([math.log(3), -math.log(3)]), 0.3, 1.0)
    assert loss.item() == pytest.approx(0.225, abs=1e-6)


def test_hard_bpo_is_ppo_two_sided():
    # With the hard target and A~ = A, PPO's clipped loss is |A| [s (1 + eps s - rho)]_+ - A (1 + eps s): below the
    # target the two differ by a constant, so their gradients agree; past it PPO's gradient is zero and BPO's
    # pulls the ratio back.
    eps, advantage = 0.2, torch.tensor([2.0])

    def losses(rho: float):
        ratio = torch.tensor([rho], requires_grad=True)
        bpo = bpo_policy_loss(ratio, advantage, advantage, eps, 1e-6)
        ppo = clipped_surrogate(ratio, advantage, eps)
        (bpo_grad,) = torch.autograd.grad(bpo, ratio)
        (ppo_grad,) = torch.autograd.grad(ppo, ratio)
        return bpo.item(), ppo.item(), bpo_grad.item(), ppo_grad.item()

    for rho in (0.8, 0.95, 1.1, 1.19):
        bpo, ppo, bpo_grad, ppo_grad = losses(rho)
        assert bpo - ppo == pytest.approx(2.4, abs=1e-4)  # A (1 + eps) = 2.4, less the clamp's 4e-5
        assert bpo_grad == pytest.approx(ppo_grad) == pytest.approx(-2.0)
    bpo, ppo, bpo_grad, ppo_grad = losses(1.5)  # past the bound: PPO's loss is flat (-2.4), BPO's is 2 * 0.3
    assert (bpo, ppo, ppo_grad, bpo_grad) == pytest.approx((0.6, -2.4, 0.0, 2.0), abs=1e-4)


def test_median_loss_by_hand_and_its_soft_median():
    # log(2 cosh(x / 2)): ln 2 at x = 0, ln(2 cosh 1) = 1.126928 at x = 2.
    assert median_loss(torch.tensor([0.0]), torch.tensor([0.0])).item() == pytest.approx(math.log(2), abs=1e-6)
    assert median_loss(torch.tensor([2.0]), torch.tensor([0.0])).item() == pytest.approx(1.126928, abs=1e-6)
    # Minimised over u, it solves E[sigmoid(R - u)] = 1/2: for returns spread far against 1, the median (10), well
    # away from the mean (40).
    returns = torch.tensor([0.0, 10.0, 110.0])
    u = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.Adam([u], lr=0.5)
    for _ in range(400):
        optimizer.zero_grad()
        median_loss(returns, u.expand(3)).backward()
        optimizer.step()
    assert u.item() == pytest.approx(10.0, abs=0.05)


def test_updates_reach_the_analytic_optimum():
    # One state, four actions under a near-uniform pi_old; actions 0 and 1 return +1, actions 2 and 3 return -1, so
    # the median of the return is 0 and the bounded-ratio optimum (Theorem 4.1) is pi* = (1 +- eps) pi_old: ratios
    # 1.3 and 0.7 at eps 0.3, a policy the categorical head can represent exactly. Gradient steps on BPO's loss get
    # there and stay (PPO's clipped loss would only stop pushing once past the bounds).
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,))
    agent = BPO(obs_space, gym.spaces.Discrete(4), normalize_obs=False, lr=1e-2)
    obs = torch.ones(512, 3)
    with torch.no_grad():
        pi = agent.actor(obs)
        actions = pi.sample()
        log_prob = pi.log_prob(actions)
    returns = torch.where(actions < 2, 1.0, -1.0)
    samples = {"obs": obs, "actions": actions, "log_prob": log_prob, "returns": returns}
    for _ in range(300):
        agent.minibatch_step(agent.loss(samples))
    with torch.no_grad():
        ratio = agent.actor(obs[:1]).logits.exp()[0] / pi.logits.exp()[0]
        median = agent.median(obs[:1]).item()
    assert ratio.tolist() == pytest.approx([1.3, 1.3, 0.7, 0.7], abs=0.03)
    assert median == pytest.approx(0.0, abs=0.1)  # the soft median of +-1 in equal shares


def test_bad_settings_are_refused():
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match="normalize_advantages must be false"):
        BPO(box, box, normalize_advantages=True)
    with pytest.raises(ValueError, match=r"bpo: clip_range must be below 1, got 1.5"):
        BPO(box, box, clip_range=1.5)
    with pytest.raises(ValueError, match=r"bpo: temperature=0.0 is out of range \(> 0\)"):
        BPO(box, box, temperature=0.0)
