"""Learning targets against hand-computed values: GAE with termination and truncation inside a rollout, the on-policy
agents' values and advantages from a rollout's observations, and n-step returns from the replay ring buffer."""

from __future__ import annotations

import pytest
import torch

from rl_suite.buffers import ReplayBuffer, RolloutBuffer, gae, running_returns, transition_spec
from rl_suite.onpolicy import advantages_and_returns

F, T = False, True


def test_gae_cuts_at_termination_and_bootstraps_at_truncation():
    gamma, lam = 0.9, 0.8
    # Two environments, four steps, columns are environments.
    rewards = torch.tensor([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    values = torch.tensor([[0.5, 1.0], [0.6, 1.0], [0.7, 1.0], [0.8, 1.0]])
    # Env 0 terminates at t=2 (its next value must be ignored); env 1 is truncated at t=1 and its final
    # observation is worth 5 (it must be bootstrapped from).
    next_values = torch.tensor([[0.6, 1.0], [0.7, 5.0], [99.0, 1.0], [0.9, 1.0]])
    terminated = torch.tensor([[F, F], [F, F], [T, F], [F, F]])
    truncated = torch.tensor([[F, F], [F, T], [F, F], [F, F]])
    advantages, returns = gae(rewards, values, next_values, terminated, terminated | truncated, gamma, lam)
    # By hand: delta_t = r_t + gamma V' (1 - term_t) - V_t; A_t = delta_t + gamma lam (1 - done_t) A_{t+1}.
    expected = torch.tensor(
        [
            [1.04 + 0.72 * (2.03 + 0.72 * 2.3), 0.9 + 0.72 * 4.5],
            [2.03 + 0.72 * 2.3, 4.5],
            [2.3, 0.9 + 0.72 * 0.9],
            [4.01, 0.9],
        ]
    )
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + values)


def test_gae_with_lambda_one_is_the_discounted_return_minus_the_value():
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([[0.3], [0.2], [0.1]])
    next_values = torch.tensor([[0.2], [0.1], [10.0]])  # bootstraps from 10 after the last step
    no = torch.zeros(3, 1, dtype=torch.bool)
    advantages, returns = gae(rewards, values, next_values, no, no, gamma=0.5, lam=1.0)
    torch.testing.assert_close(returns, torch.tensor([[1 + 0.5 + 0.25 + 0.125 * 10], [1 + 0.5 + 0.25 * 10], [1 + 5.0]]))


def test_advantages_and_returns_value_the_final_observation_at_truncation_and_rollout_end():
    """T = 3 steps, N = 3 environments, gamma = 0.9, lambda = 0.8 (gamma lambda = 0.72). The critic is V(o) = o, on
    one-number observations; the normaliser halves the raw ``next_obs`` (the rollout's ``obs`` come normalised).
    env 0: truncated at t=1 (mid-rollout), its final observation raw 20 -> 10, where the next row's 3 is already a new
           episode; terminated at t=2 (final observation raw 30, never valued).
    env 1: truncated at t=2, the rollout's last row: bootstraps from its final observation, raw 14 -> 7.
    env 2: terminated at t=0 (final observation raw 40, never valued); t=2 is the last row and the episode goes on:
           bootstraps from next_obs, raw 8 -> 4."""
    obs = torch.tensor([[1.0, 4.0, 2.0], [2.0, 5.0, 1.0], [3.0, 6.0, 3.0]], dtype=torch.float64)  # V(s_t), [T, N]
    rewards = torch.tensor([[1.0, 0.5, 1.0], [0.0, 1.0, 1.0], [2.0, -1.0, 1.0]], dtype=torch.float64)
    next_obs_raw = torch.tensor([[4.0, 10.0, 40.0], [20.0, 12.0, 6.0], [30.0, 14.0, 8.0]], dtype=torch.float64)
    d = {
        "next_obs": next_obs_raw.unsqueeze(-1),
        "terminated": torch.tensor([[F, F, T], [F, F, F], [T, F, F]]),
        "truncated": torch.tensor([[F, F, F], [T, F, F], [F, T, F]]),
    }
    values, advantages, returns = advantages_and_returns(
        d, torch.nn.Identity(), obs.unsqueeze(-1), lambda x: x / 2, rewards, gamma=0.9, gae_lambda=0.8
    )
    # delta_t = r_t + 0.9 V(s'_t) (1 - terminated_t) - V(s_t), with V(s'_t) = V(s_{t+1}) inside an episode:
    #   env 0: 1 + 0.9 * 2 - 1 = 1.8;   0 + 0.9 * 10 - 2 = 7.0;   2 - 3 = -1.0
    #   env 1: 0.5 + 0.9 * 5 - 4 = 1.0; 1 + 0.9 * 6 - 5 = 1.4;   -1 + 0.9 * 7 - 6 = -0.7
    #   env 2: 1 - 2 = -1.0;            1 + 0.9 * 3 - 1 = 2.7;   1 + 0.9 * 4 - 3 = 1.6
    # A_t = delta_t + 0.72 (1 - done_t) A_{t+1}, from the last row up:
    #   env 0: A_2 = -1.0; A_1 = 7.0 (truncated: cut); A_0 = 1.8 + 0.72 * 7.0 = 6.84
    #   env 1: A_2 = -0.7; A_1 = 1.4 + 0.72 * -0.7 = 0.896; A_0 = 1.0 + 0.72 * 0.896 = 1.64512
    #   env 2: A_2 = 1.6;  A_1 = 2.7 + 0.72 * 1.6 = 3.852;  A_0 = -1.0 (terminated: cut)
    expected = torch.tensor([[6.84, 1.64512, -1.0], [7.0, 0.896, 3.852], [-1.0, -0.7, 1.6]], dtype=torch.float64)
    torch.testing.assert_close(values, obs)
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + obs)


def filled_replay(
    rows: int, steps: int, terminated_at=(), truncated_at=(), n_step=3, gamma=0.5, critic_obs=False
) -> ReplayBuffer:
    """One environment; step t has obs t, reward t + 1 and next_obs t + 0.5 (with ``critic_obs``, an asymmetric
    critic's observations too: 10 t and 10 t + 5)."""
    extras = {"critic_obs": ((1,), torch.float32), "next_critic_obs": ((1,), torch.float32)} if critic_obs else {}
    spec = transition_spec((1,), (1,), torch.float32, extras)
    buffer = ReplayBuffer(rows, 1, spec, torch.device("cpu"), n_step, gamma)
    for t in range(steps):
        critic = {"critic_obs": torch.tensor([[10.0 * t]]), "next_critic_obs": torch.tensor([[10.0 * t + 5]])}
        buffer.add(
            torch.tensor([[float(t)]]),
            torch.zeros(1, 1),
            torch.tensor([t + 1.0]),
            torch.tensor([t in terminated_at]),
            torch.tensor([t in truncated_at]),
            torch.tensor([[t + 0.5]]),
            **(critic if critic_obs else {}),
        )
    return buffer


def sampled_by_start(buffer: ReplayBuffer, draws: int = 400) -> dict[int, tuple[float, float, float]]:
    torch.manual_seed(0)
    batch = buffer.sample(draws)
    found = {}
    for obs, reward, next_obs, discount in zip(
        batch["obs"][:, 0].tolist(),
        batch["rewards"].tolist(),
        batch["next_obs"][:, 0].tolist(),
        batch["discount"].tolist(),
        strict=True,
    ):
        found[int(obs)] = (reward, next_obs, discount)
    return found


def test_running_returns_restart_after_an_episode_ends_and_carry_over_between_calls():
    # Two environments, gamma 0.5; env 0's episode ends at step 1, env 1 runs on from a return of 4 carried in.
    rewards = torch.tensor([[1.0, 2.0], [2.0, 0.0], [4.0, 1.0]])
    done = torch.tensor([[False, False], [True, False], [False, False]])
    seen, running = running_returns(torch.tensor([0.0, 4.0]), rewards, done, gamma=0.5)
    # env 0: 1, 0.5 + 2 = 2.5 (ends), then 4 afresh; env 1: 2 + 2 = 4, 2 + 0 = 2, 1 + 1 = 2
    torch.testing.assert_close(seen, torch.tensor([[1.0, 4.0], [2.5, 2.0], [4.0, 2.0]]))
    torch.testing.assert_close(running, torch.tensor([4.0, 2.0]))
    after, _ = running_returns(running, torch.ones(1, 2), torch.zeros(1, 2, dtype=torch.bool), gamma=0.5)
    torch.testing.assert_close(after, torch.tensor([[3.0, 2.0]]))


def test_n_step_returns_stop_at_episode_ends():
    buffer = filled_replay(rows=8, steps=6, terminated_at=(2,), truncated_at=(4,))
    found = sampled_by_start(buffer)
    # Only windows that fit in what was written: starts 0..3 (a start at 4 would need step 6).
    assert sorted(found) == [0, 1, 2, 3]
    expected = {
        0: (1 + 0.5 * 2 + 0.25 * 3, 2.5, 0.0),  # r0 + g r1 + g^2 r2, ends by termination at step 2: no bootstrap
        1: (2 + 0.5 * 3, 2.5, 0.0),
        2: (3.0, 2.5, 0.0),
        3: (4 + 0.5 * 5, 4.5, 0.25),  # truncated at step 4: bootstrap from its final observation with g^2
    }
    for start, values in expected.items():
        assert found[start] == pytest.approx(values)


def test_n_step_windows_do_not_cross_the_write_head_after_wrapping():
    buffer = filled_replay(rows=4, steps=6, n_step=2)  # holds steps 2..5; the next write replaces step 2
    found = sampled_by_start(buffer)
    assert sorted(found) == [2, 3, 4]
    assert found[4] == pytest.approx((5 + 0.5 * 6, 5.5, 0.25))


@pytest.mark.parametrize("n_step", [1, 3])
def test_every_next_field_is_read_where_the_window_ends_and_the_others_where_it_starts(n_step):
    """An asymmetric critic's ``next_critic_obs`` follows ``next_obs`` to the end of the n-step window (the episode's
    end where it comes first); its ``critic_obs`` stays with ``obs`` at the start."""
    buffer = filled_replay(rows=8, steps=6, terminated_at=(2,), n_step=n_step, critic_obs=True)
    torch.manual_seed(0)
    batch = buffer.sample(200)
    torch.testing.assert_close(batch["critic_obs"], 10 * batch["obs"])
    torch.testing.assert_close(batch["next_critic_obs"], 10 * batch["next_obs"])
    if n_step > 1:  # the windows do reach past their first step
        assert (batch["next_obs"] - batch["obs"] > 1).any()


def test_one_step_transitions_are_the_stored_ones():
    buffer = filled_replay(rows=8, steps=5, terminated_at=(3,), n_step=1, gamma=0.9)
    found = sampled_by_start(buffer)
    assert found == {t: pytest.approx((t + 1.0, t + 0.5, 0.0 if t == 3 else 0.9)) for t in range(5)}


def test_replay_buffer_that_cannot_fit_is_refused_clearly():
    spec = transition_spec((100,), (6,), torch.float32)
    with pytest.raises(
        MemoryError,
        match=r"a replay buffer of 1,000,000,000,000 transitions needs .* GiB on cpu, "
        r"but only .* GiB is available; lower buffer_size",
    ):
        ReplayBuffer(10**12, 4, spec, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"buffer_size=3 must hold at least n_step \* num_envs = 8 transitions"):
        ReplayBuffer(3, 4, spec, torch.device("cpu"), n_step=2)


def test_rollout_buffer_fills_in_place_and_is_reused():
    spec = transition_spec((2,), (), torch.int64, {"log_prob": ((), torch.float32)})
    buffer = RolloutBuffer(3, 2, spec, torch.device("cpu"))
    storage = buffer["obs"].data_ptr()
    for t in range(3):
        buffer.add(
            torch.full((2, 2), float(t)),
            torch.tensor([t, t]),
            torch.ones(2),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, 2),
            log_prob=torch.full((2,), -t * 1.0),
        )
    assert buffer.full and buffer["obs"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    assert buffer["log_prob"][2].tolist() == [-2.0, -2.0]
    buffer.clear()
    buffer.add(
        torch.full((2, 2), 7.0),
        torch.tensor([1, 1]),
        torch.ones(2),
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, 2),
        log_prob=torch.zeros(2),
    )
    assert buffer["obs"][0, 0, 0] == 7.0 and buffer["obs"].data_ptr() == storage


def test_owed_updates_carry_the_fraction_over():
    from rl_suite.buffers import owed_updates

    updates, credit = owed_updates(0.0, 0.75)
    assert (updates, credit) == (0, 0.75)
    updates, credit = owed_updates(credit, 0.75)
    assert updates == 1 and credit == pytest.approx(0.5)
    assert owed_updates(0.5, 2.5) == (3, 0.0)
