"""PROPS: its history keeps the last b batches in time order, its behaviour policy lowers the sampling error below
on-policy sampling's on a small discrete task (the paper's claim), the behaviour update's pieces, and bad input."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch

from rl_suite.agents.props import PROPS

ONE_STATE = gym.spaces.Box(-1.0, 1.0, (2,))


def exact_kl(actions: torch.Tensor, log_probs: torch.Tensor) -> float:
    """KL(empirical || pi) in one state: the actions' frequencies against ``log_probs``."""
    counts = torch.bincount(actions, minlength=log_probs.numel()).double()
    empirical = counts / counts.sum()
    held = empirical > 0
    return float((empirical[held] * (empirical[held].log() - log_probs.double()[held])).sum())


def fixed_target_error(props_epochs: int, seed: int, target_updates: int = 8) -> float:
    """The history's sampling error at each target update of a fixed target policy (learning rate 0) over four
    actions in one state, as the paper's fixed-target experiment measures it, averaged once the history has filled;
    ``props_epochs=0`` samples on-policy (the paper's PPO-Buffer). 16 environments, m = 64 and n = 512 actions, b = 2:
    each behaviour batch is 1/16 of the history, as in the authors' Hopper settings (m 256, n 2048)."""
    torch.manual_seed(seed)
    agent = PROPS(
        ONE_STATE,
        gym.spaces.Discrete(4),
        n_steps=32,
        props_steps=4,
        lr=0.0,
        normalize_obs=False,
        props_epochs=props_epochs,
        props_minibatches=4,
        props_lr=0.01,
        sampling_error_every=0,
    )
    with torch.no_grad():
        agent.target.actor.net[-1].bias.copy_(torch.tensor([1.0, 0.5, 0.0, -0.5]))  # a skewed pi_theta
        log_probs = agent.target.actor(torch.zeros(1, 2)).logits[0]
    history = agent.make_buffer(num_envs=16)
    obs, zeros = torch.zeros(16, 2), torch.zeros(16)
    errors = []
    for iteration in range(target_updates * 8):
        for _ in range(agent.config.props_steps):
            actions, extras = agent.act(obs)
            history.add(obs, actions, zeros, zeros.bool(), zeros.bool(), obs, **extras)
        agent.update(history)
        if iteration % 8 == 7:
            errors.append(exact_kl(history.ordered()["actions"].flatten(), log_probs))
    return sum(errors[2:]) / len(errors[2:])


def test_props_samples_closer_to_the_target_than_on_policy_sampling():
    # On-policy, 1,024 actions stray from pi_theta by about (4 - 1) / (2 * 1024) = 0.0015 nats; PROPS's behaviour
    # steers each new batch towards the actions that the history lacks. Measured: 0.0018, 0.0015, 0.0020 on-policy
    # against 0.0006, 0.0006, 0.0008 (seeds 0-2).
    for seed in (0, 1):
        on_policy, props = fixed_target_error(0, seed), fixed_target_error(4, seed)
        assert 0.0005 < on_policy < 0.005
        assert props < 0.6 * on_policy, (seed, props, on_policy)


def test_the_sampling_error_is_the_kl_of_the_empirical_policy():
    # One state: the fitted pi_D is the history's action frequencies, so the estimate equals the exact KL.
    torch.manual_seed(1)
    agent = PROPS(ONE_STATE, gym.spaces.Discrete(3), normalize_obs=False, sampling_error_steps=3000)
    obs = torch.zeros(60, 2)
    actions = torch.tensor([0] * 30 + [1] * 20 + [2] * 10)
    with torch.no_grad():
        log_probs = agent.target.actor(obs[:1]).logits[0]
    estimate = agent.sampling_error({"obs": obs, "actions": actions}).item()
    assert estimate == pytest.approx(exact_kl(actions, log_probs), rel=0.02)
    assert estimate > 0.05  # near-uniform pi_theta against 1/2, 1/3, 1/6


def test_the_history_keeps_the_newest_rows_in_time_order():
    agent = PROPS(ONE_STATE, gym.spaces.Discrete(2), n_steps=4, props_steps=2, buffer_batches=2)
    history = agent.make_buffer(num_envs=3)
    zeros = torch.zeros(3)
    for t in range(11):  # 11 rows into a history of 8: rows 3 to 10 stay
        obs = torch.full((3, 2), float(t))
        history.add(obs, torch.zeros(3, dtype=torch.int64), zeros, zeros.bool(), zeros.bool(), obs)
    assert history.ordered()["obs"][:, 0, 0].tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert history.ordered(skip_oldest=2)["obs"][:, 0, 0].tolist() == [5, 6, 7, 8, 9, 10]
    assert history.newest(2)["obs"][:, 0, 0].tolist() == [9, 10]
    restored = agent.make_buffer(num_envs=3)
    restored.load_state_dict(history.state_dict())
    assert torch.equal(restored.ordered()["obs"], history.ordered()["obs"])


def test_the_behaviour_moves_away_from_held_actions_within_its_leash():
    # A history holding only action 0: the behaviour lowers its probability, by at most about eps_P (0.3) from pi_theta
    # at the clip, and acts with it while the target is unchanged.
    torch.manual_seed(0)
    agent = PROPS(ONE_STATE, gym.spaces.Discrete(2), normalize_obs=False, props_lr=0.05, props_target_kl=1.0)
    data = {"obs": torch.zeros(8, 4, 2), "actions": torch.zeros(8, 4, dtype=torch.int64)}
    agent._behaviour_update(data)
    with torch.no_grad():
        p_target = agent.target.actor(torch.zeros(1, 2)).logits.exp()[0, 0].item()
        p_behaviour = agent.behaviour(torch.zeros(1, 2)).logits.exp()[0, 0].item()
    assert p_behaviour < p_target and p_behaviour / p_target == pytest.approx(0.7, abs=0.05)
    assert p_target == pytest.approx(0.5, abs=0.01) and not math.isclose(p_behaviour, p_target)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"props: props_steps must divide n_steps .* got props_steps 3, n_steps 8"):
        PROPS(ONE_STATE, gym.spaces.Discrete(2), n_steps=8, props_steps=3)
    with pytest.raises(ValueError, match="props: critic_observation is not supported"):
        PROPS(ONE_STATE, gym.spaces.Discrete(2), critic_observation=True)
