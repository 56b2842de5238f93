"""SAC's seed-paper critics (agents/sac.py): DSAC-T's Gaussian returns, whose gradients are checked on
hand-computed numbers (and whose clipping bounds the variance's), and annealed Q-learning's expectile loss and its
schedule, on SAC and on PQL's critic, down to TensorBoard. Learning on Pendulum is in test_learning.py."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite
from rl_suite.agents.pql import PQL
from rl_suite.agents.sac import SAC
from rl_suite.optim import annealed_expectile, expectile_weights
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


def dsac_gradients(sampled_target: float, steps_before: int = 0) -> tuple[float, float, float]:
    """The gradients of SAC(critic="dsac")'s critic loss with respect to one twin's mean and raw standard deviation
    (mean Q = 1, raw 0: sigma = ln 2) for an expected target of 2 and ``sampled_target``, and the running sigma."""
    agent = SAC(OBS, ACTIONS, critic="dsac", hidden=(8,))
    for _ in range(steps_before):  # move the running mean sigma away from its first value
        agent._dsac_loss(torch.tensor([[[0.0, 3.0]], [[0.0, 3.0]]]), torch.zeros(1), torch.zeros(1))
    out = torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]]], requires_grad=True)  # [2 twins, B = 1, (mean, raw std)]
    loss = agent._dsac_loss(out, torch.tensor([2.0]), torch.tensor([sampled_target]))
    loss.backward()
    return float(out.grad[0, 0, 0]), float(out.grad[0, 0, 1]), float(agent.dsac_sigma.running[0])


def test_dsac_gradients_on_hand_computed_numbers():
    sigma = math.log(2.0)  # softplus(0)
    d_mean, d_raw, running = dsac_gradients(sampled_target=1.5)
    # The first batch sets the running sigma m to sigma, so the scale (m^2 + 0.1) and the mean's denominator cancel.
    assert running == pytest.approx(sigma)
    assert d_mean == pytest.approx(-(2.0 - 1.0) * (sigma**2 + 0.1) / (sigma**2 + 0.1))
    # The sampled target 1.5 is within 3 m of the mean: y_b = 1.5. d sigma, then through softplus (sigmoid(0) = 0.5).
    d_sigma = (sigma**2 + 0.1) * -((1.0 - 1.5) ** 2 - sigma**2) / (sigma**3 + 0.1)
    assert d_raw == pytest.approx(d_sigma * 0.5)


def test_dsac_clips_the_sampled_target_so_the_variance_gradient_is_bounded():
    sigma = math.log(2.0)
    _, far, _ = dsac_gradients(sampled_target=100.0)
    _, at_bound, _ = dsac_gradients(sampled_target=1.0 + 3 * sigma)
    assert far == pytest.approx(at_bound)  # y_b = Q + 3 m either way
    assert far == pytest.approx(0.5 * (sigma**2 + 0.1) * -((3 * sigma) ** 2 - sigma**2) / (sigma**3 + 0.1))
    # The running sigma moves towards each batch's mean sigma at rate tau.
    _, _, running = dsac_gradients(1.5, steps_before=1)
    softplus3 = math.log1p(math.exp(3.0))
    assert running == pytest.approx(softplus3 + 0.005 * (sigma - softplus3))


def test_the_expectile_weights_and_their_schedule_on_hand_computed_numbers():
    error = torch.tensor([1.0, -1.0, 0.0])  # target above, below and at the prediction
    torch.testing.assert_close(expectile_weights(error, 0.9), torch.tensor([1.8, 0.2, 1.8]))
    torch.testing.assert_close(expectile_weights(error, 0.5), torch.ones(3))  # the plain squared error
    assert [annealed_expectile(0.9, 0, f, 0) for f in (0.0, 0.5, 1.0, 2.0)] == pytest.approx([0.9, 0.7, 0.5, 0.5])
    assert annealed_expectile(0.9, 1000, 0.0, 250) == pytest.approx(0.8)  # a set length: env steps, not progress


def test_settings_that_do_not_combine_are_refused():
    with pytest.raises(ValueError, match=r"sac: critic='quantile' is out of range \(one of 'twin', 'dsac'\)"):
        SAC(OBS, ACTIONS, critic="quantile")
    with pytest.raises(ValueError, match=r"sac: expectile=1.0 is out of range \(>= 0.5, < 1\)"):
        SAC(OBS, ACTIONS, expectile=1.0)
    with pytest.raises(ValueError, match="a distributional critic needs v_min < v_max, got 2.0 and -2.0"):
        PQL(OBS, ACTIONS, distributional=True, v_min=2.0, v_max=-2.0)
    with pytest.raises(ValueError, match="not to critic='dsac'"):
        SAC(OBS, ACTIONS, critic="dsac", expectile=0.9)
    with pytest.raises(ValueError, match="not to PQL-D"):
        PQL(OBS, ACTIONS, distributional=True, expectile=0.9)


def run(algo, settings: dict, tmp_path, total_steps=640):
    seed_everything(0)
    env = rl_suite.make("Pendulum-v1", num_envs=4, seed=0)
    agent = algo(env.observation_space, env.action_space, **settings)
    config = RunConfig(
        algo=algo.name, env_id="Pendulum-v1", num_envs=4, total_steps=total_steps, eval_every_steps=10**6,
        eval_episodes=2, log_every_steps=64, checkpoint_every_steps=10**6, progress=False,
    )  # fmt: skip
    Runner(agent, env, config, run_dir=tmp_path).run()
    return agent


@pytest.mark.parametrize(
    "algo, settings",
    [
        (SAC, dict(hidden=(16, 16), batch_size=32, learning_starts=64, buffer_size=4096, updates_per_transition=0.25)),
        (PQL, dict(hidden=(16, 16), batch_size=32, learning_starts=64, buffer_size=4096, concurrent=False)),
    ],
    ids=["sac", "pql"],
)
def test_the_expectile_anneals_over_the_budget_and_tensorboard_shows_it(tmp_path, algo, settings):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    agent = run(algo, {**settings, "expectile": 0.9}, tmp_path)
    assert agent.expectile == pytest.approx(0.5, abs=0.01)  # the budget spent: annealed to the plain loss
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    logged = [event.value for event in events.Scalars("train/expectile")]
    assert len(logged) >= 5 and logged[0] > 0.8 and logged == sorted(logged, reverse=True)

    by_steps = run(algo, {**settings, "expectile": 0.9, "expectile_anneal_steps": 10**6}, tmp_path / "steps")
    assert by_steps.expectile == pytest.approx(0.9 - 0.4 * 640 / 10**6, abs=1e-4)  # 640 of 10^6 steps annealed


def test_dsac_trains_under_the_runner_and_keeps_its_running_sigma(tmp_path):
    settings = dict(hidden=(16, 16), batch_size=32, learning_starts=64, buffer_size=4096, critic="dsac")
    agent = run(SAC, settings, tmp_path)
    running = agent.dsac_sigma.running
    assert bool((running > 0).all()) and bool(torch.isfinite(running).all())
    assert "dsac_sigma" in agent.state_dict()["modules"]
