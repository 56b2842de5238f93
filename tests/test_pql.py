"""PQL: the distributional projection, the actor's n-step transitions, mixed exploration, speed balancing, workers
that really run at the same time, and faults that stop a run cleanly."""

from __future__ import annotations

import signal
import threading

import pytest
import torch

import rl_suite
from rl_suite.agents import pql
from rl_suite.agents.pql import PQL
from rl_suite.buffers import NStepWindow, ReplayBuffer, transition_spec
from rl_suite.categorical import distributional_target, project_distribution
from rl_suite.checkpoint import load_latest
from rl_suite.concurrency import RateBalancer, WorkerError, overlap_seconds
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner

TINY_PQL = dict(
    hidden=(32, 32),
    activation="relu",
    batch_size=64,
    learning_starts=256,
    buffer_size=8192,
    critic_updates_per_env_step=2.0,
)


def build(num_envs=8, seed=0, **settings):
    seed_everything(seed)
    env = rl_suite.make("Pendulum-v1", num_envs=num_envs, seed=seed)
    return PQL(env.observation_space, env.action_space, **{**TINY_PQL, **settings}), env


def run_config(**overrides):
    base = dict(
        algo="pql",
        env_id="Pendulum-v1",
        num_envs=8,
        total_steps=4096,
        eval_every_steps=2048,
        eval_episodes=4,
        log_every_steps=512,
        checkpoint_every_steps=1024,
        keep_checkpoints=10,
        progress=False,
    )
    return RunConfig(**{**base, **overrides})


def rl_suite_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rl-suite-") and t.is_alive()]


# -- the distributional target ------------------------------------------------------------------------------------


def test_projection_matches_a_hand_computed_case():
    support = torch.tensor([0.0, 1.0, 2.0, 3.0])
    next_probs = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    # r + 0.5 z = 0.5 + [0, 0.5, 1, 1.5] = [0.5, 1, 1.5, 2]: 0.5 splits 0.05/0.05 between atoms 0 and 1; 1 lands
    # on atom 1 whole (0.2); 1.5 splits 0.15/0.15 between atoms 1 and 2; 2 lands on atom 2 whole (0.4).
    projected = project_distribution(next_probs, torch.tensor([0.5]), torch.tensor([0.5]), support)
    torch.testing.assert_close(projected, torch.tensor([[0.05, 0.40, 0.55, 0.0]]))


def test_projection_sends_mass_beyond_the_support_to_its_ends_and_a_terminal_to_the_reward():
    support = torch.linspace(-1.0, 1.0, 5)
    next_probs = torch.full((2, 5), 0.2)
    projected = project_distribution(next_probs, torch.tensor([5.0, 0.25]), torch.tensor([1.0, 0.0]), support)
    torch.testing.assert_close(projected[0], torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0]))  # all beyond v_max
    torch.testing.assert_close(projected[1], torch.tensor([0.0, 0.0, 0.5, 0.5, 0.0]))  # terminal: the reward only


def test_projection_conserves_probability_mass():
    generator = torch.Generator().manual_seed(0)
    support = torch.linspace(-10.0, 10.0, 51)
    next_probs = torch.rand(1000, 51, generator=generator).softmax(-1)
    rewards = torch.randn(1000, generator=generator) * 5
    discount = torch.rand(1000, generator=generator) * (torch.rand(1000, generator=generator) > 0.1)
    projected = project_distribution(next_probs, rewards, discount, support)
    torch.testing.assert_close(projected.sum(-1), torch.ones(1000))
    assert (projected >= 0).all()
    # Inside the support the projection keeps the mean: E[r + d Z], clipped to the support.
    shifted_mean = rewards + discount * (next_probs @ support)
    inside = ((rewards + discount * support.min()) >= -10) & ((rewards + discount * support.max()) <= 10)
    torch.testing.assert_close((projected @ support)[inside], shifted_mean[inside], atol=1e-4, rtol=0)


def test_the_two_distributional_targets_compute_what_they_say():
    """Support 0..3, r = 1, d = 0.5, so an atom z goes to 1 + z / 2. Twin distributions p = [.5, .5, 0, 0] (mean 0.5)
    and q = [0, .5, .5, 0] (mean 1.5), in one order for the first sample and swapped for the second.
    Phi p: atom 0 -> 1 whole (.5), atom 1 -> 1.5, split .25 / .25 between 1 and 2: [0, .75, .25, 0] (mean 1.25).
    Phi q: atom 1 -> 1.5 (.25 / .25), atom 2 -> 2 whole (.5): [0, .25, .75, 0] (mean 1.75)."""
    support = torch.tensor([0.0, 1.0, 2.0, 3.0])
    p, q = torch.tensor([0.5, 0.5, 0.0, 0.0]), torch.tensor([0.0, 0.5, 0.5, 0.0])
    next_probs = torch.stack((torch.stack((p, q)), torch.stack((q, p))))  # [twin, sample, atom]
    rewards, discount = torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.5])

    lower_mean = distributional_target(next_probs, rewards, discount, support, "lower_mean")
    # the twin with the lower mean is p in both samples, whichever critic holds it
    torch.testing.assert_close(lower_mean, torch.tensor([[0.0, 0.75, 0.25, 0.0]] * 2))

    elementwise = distributional_target(next_probs, rewards, discount, support, "elementwise_min")
    # min([0, .75, .25, 0], [0, .25, .75, 0]) atom by atom, unnormalised (mass 0.5, as in the reference code)
    torch.testing.assert_close(elementwise, torch.tensor([[0.0, 0.25, 0.25, 0.0]] * 2))
    # renormalised, its mean (1.5) lies halfway between the twins' (1.25 and 1.75), not at the lower one
    torch.testing.assert_close(elementwise @ support / elementwise.sum(-1), torch.tensor([1.5, 1.5]))


def test_unknown_distributional_target_is_refused():
    with pytest.raises(ValueError, match=r"pql: distributional_target='min' is out of range \(one of 'lower_mean', "):
        build(distributional=True, distributional_target="min")


# -- the actor's n-step transitions -------------------------------------------------------------------------------


def test_n_step_window_forms_the_transitions_the_replay_buffer_samples(monkeypatch):
    """Both ways of forming n-step returns agree on a stream with terminations and truncations, an asymmetric critic's
    observations included."""
    n, gamma, num_envs, steps = 3, 0.9, 5, 40
    critic_fields = {"critic_obs": ((3,), torch.float32), "next_critic_obs": ((3,), torch.float32)}
    spec = transition_spec((2,), (1,), torch.float32, critic_fields)
    window = NStepWindow(n, gamma, num_envs, spec, torch.device("cpu"))
    replay = ReplayBuffer(steps * num_envs, num_envs, spec, torch.device("cpu"), n_step=n, gamma=gamma)
    generator = torch.Generator().manual_seed(1)
    formed = []
    for _ in range(steps):
        step = dict(
            obs=torch.randn(num_envs, 2, generator=generator),
            actions=torch.randn(num_envs, 1, generator=generator),
            reward=torch.randn(num_envs, generator=generator),
            terminated=torch.rand(num_envs, generator=generator) < 0.15,
            truncated=torch.rand(num_envs, generator=generator) < 0.1,
            next_obs=torch.randn(num_envs, 2, generator=generator),
            critic_obs=torch.randn(num_envs, 3, generator=generator),
            next_critic_obs=torch.randn(num_envs, 3, generator=generator),
        )
        replay.add(**step)
        out = window.push(**step)
        if out is not None:
            formed.append({name: value.clone() for name, value in out.items()})
    assert len(formed) == steps - n + 1
    # Sample every window start of the replay buffer for every env, in order, and compare.
    rows = torch.arange(steps - n + 1).repeat_interleave(num_envs)
    envs = torch.arange(num_envs).repeat(steps - n + 1)
    draws = iter([rows, envs])
    monkeypatch.setattr(torch, "randint", lambda *args, **kwargs: next(draws))
    expected = replay.sample(len(rows))
    monkeypatch.undo()
    for name in ("obs", "actions", "rewards", "next_obs", "discount", "critic_obs", "next_critic_obs"):
        got = torch.stack([f[name] for f in formed]).flatten(0, 1)
        torch.testing.assert_close(got, expected[name], msg=name)


# -- exploration ---------------------------------------------------------------------------------------------------


def test_each_environment_keeps_its_own_noise_scale_spread_over_the_range():
    agent, env = build(num_envs=16, learning_starts=0, noise_std_min=0.05, noise_std_max=0.8)
    agent.make_buffer(env.num_envs)
    torch.testing.assert_close(agent.noise_std.squeeze(-1), torch.linspace(0.05, 0.8, 16))
    obs = torch.zeros(16, 3)
    deterministic = agent.act(obs, deterministic=True)[0]
    actions = torch.stack([agent.act(obs)[0] for _ in range(2000)])  # [2000, 16, 1]; bounds are +-2
    spread = (actions - deterministic).std(0).squeeze(-1) / 2  # in the policy's [-1, 1] units
    assert spread[0] < 0.07 and spread[-1] > 0.5  # clipping to [-1, 1] shrinks the widest a little
    assert (spread[1:] >= spread[:-1] - 0.03).all()


def test_bad_noise_range_is_refused():
    with pytest.raises(ValueError, match="noise_std_min <= noise_std_max"):
        build(noise_std_min=0.9, noise_std_max=0.1)


# -- speed balancing and concurrency ------------------------------------------------------------------------------


def test_the_slowest_worker_never_waits_and_a_leader_waits_for_it():
    balancer = RateBalancer({"actor": 8.0, "critic": 1.0, "policy": 2.0}, slack=4.0)
    balancer.add("actor")  # progress: actor 8, critic 0, policy 0
    assert balancer.ahead("actor") and not balancer.ahead("critic") and not balancer.ahead("policy")
    for _ in range(4):
        balancer.add("critic")
    balancer.add("policy")
    assert balancer.ahead("actor")  # 8 > min(4, 2) + 4
    balancer.add("policy")
    assert not balancer.ahead("actor")  # 8 <= min(4, 4) + 4
    released = threading.Event()
    balancer.add("policy", 3)  # policy 10 > min(8, 4) + 4: waits until the critic catches up
    waiter = threading.Thread(target=lambda: (balancer.wait_turn("policy"), released.set()))
    waiter.start()
    assert not released.wait(0.2)
    for _ in range(2):
        balancer.add("critic")
    assert released.wait(2.0)
    waiter.join()


def test_overlap_of_interval_lists():
    assert overlap_seconds([(0, 2), (3, 5)], [(1, 4)]) == pytest.approx(2.0)
    assert overlap_seconds([(0, 1)], [(1, 2)]) == 0.0


def test_workers_run_at_the_same_time_and_keep_the_set_ratios(tmp_path):
    agent, env = build(critic_updates_per_env_step=4.0, critic_updates_per_policy_update=2.0, balance_slack=8.0)
    summary = Runner(agent, env, run_config(total_steps=6144, eval_episodes=0), run_dir=tmp_path).run()
    assert summary["env_steps"] == 6144
    counts = agent.balancer.counts
    # The actor counts its batched steps from the one that completes the warm-up.
    assert counts["actor"] == 6144 // 8 - TINY_PQL["learning_starts"] // 8 + 1
    # The ratios hold within the slack (8 critic updates) and a little more for the final in-flight updates.
    assert abs(counts["critic"] - 4.0 * counts["actor"]) <= 12
    assert abs(counts["critic"] - 2.0 * counts["policy"]) <= 12
    # Each pair of workers computed at the same time: their work intervals overlap.
    timelines = {
        "actor": sorted(agent.actor_intervals),
        "critic": list(agent.critic_worker.intervals),
        "policy": list(agent.policy_worker.intervals),
    }
    for a, b in (("actor", "critic"), ("actor", "policy"), ("critic", "policy")):
        assert overlap_seconds(timelines[a], timelines[b]) > 0, (a, b)
    assert agent.report["critic_updates_per_env_step"] == pytest.approx(4.0, rel=0.1)
    assert rl_suite_threads() == []  # the run stopped its workers


def test_a_sequential_run_keeps_the_ratios_exactly(tmp_path):
    agent, env = build(concurrent=False, critic_updates_per_env_step=3.0, critic_updates_per_policy_update=2.0)
    Runner(agent, env, run_config(total_steps=2048, eval_episodes=0), run_dir=tmp_path).run()
    counts = agent.balancer.counts
    assert counts["critic"] == 3 * counts["actor"] and counts["policy"] == counts["critic"] // 2
    assert rl_suite_threads() == []


# -- faults --------------------------------------------------------------------------------------------------------


def test_a_failing_worker_stops_the_run_with_its_message_and_the_run_resumes(tmp_path):
    agent, env = build()
    original, calls = agent._policy_step, [0]

    def fails_after_a_while():
        calls[0] += 1
        if calls[0] == 150:
            raise RuntimeError("P-learner exploded")
        return original()

    agent._policy_step = fails_after_a_while
    agent.policy_worker._step = fails_after_a_while
    with pytest.raises(WorkerError, match="P-learner worker failed: RuntimeError\\('P-learner exploded'\\)"):
        Runner(agent, env, run_config(total_steps=10**6, eval_every_steps=10**6), run_dir=tmp_path).run()
    assert rl_suite_threads() == []  # no worker left behind
    path, state = load_latest(tmp_path)  # the checkpoints written before the fault load
    written = state["runner"]["env_steps"]
    assert written >= 1024

    agent, env = build(seed=7)
    summary = Runner(agent, env, run_config(total_steps=written + 1024), run_dir=tmp_path, resume=True).run()
    assert summary["env_steps"] == written + 1024
    assert agent.balancer.counts["actor"] > state["agent"]["counters"]["balancer"]["actor"]
    assert rl_suite_threads() == []


def test_an_interrupted_run_parks_its_workers_for_a_last_checkpoint_and_stops_them(tmp_path):
    agent, env = build()
    step, calls = env.step, [0]

    def interrupted_at_step_300(actions):
        calls[0] += 1
        if calls[0] == 300:  # Ctrl-C while the learners are busy: the iteration (one step) finishes first
            signal.raise_signal(signal.SIGINT)
        return step(actions)

    env.step = interrupted_at_step_300
    with pytest.raises(KeyboardInterrupt):
        Runner(agent, env, run_config(total_steps=10**6, checkpoint_every_steps=10**6), run_dir=tmp_path).run()
    assert rl_suite_threads() == []
    path, state = load_latest(tmp_path)
    assert state["runner"]["env_steps"] == 300 * 8
    counts = state["agent"]["counters"]["balancer"]
    assert counts["critic"] > 0 and counts["policy"] > 0
    resumed, env = build(seed=3)
    Runner(resumed, env, run_config(total_steps=300 * 8), run_dir=tmp_path, resume=True)  # it loads
    assert resumed.balancer.counts == counts


@pytest.mark.parametrize("target", ["lower_mean", "elementwise_min"])
def test_distributional_critics_learn_finite_values(tmp_path, monkeypatch, target):
    used = []

    def recording_target(*args):
        used.append(args[-1])
        return distributional_target(*args)

    monkeypatch.setattr(pql, "distributional_target", recording_target)
    agent, env = build(
        distributional=True, distributional_target=target, v_min=-200.0, v_max=0.0, num_atoms=21, concurrent=False
    )
    Runner(agent, env, run_config(total_steps=1024, eval_episodes=0), run_dir=tmp_path).run()
    assert agent.balancer.counts["critic"] > 0
    assert set(used) == {target} and len(used) == agent.balancer.counts["critic"]
    obs = torch.randn(32, 3)
    logits = agent.critic(obs, agent.policy(obs))
    assert logits.shape == (2, 32, 21) and torch.isfinite(logits).all()
    assert torch.isfinite(agent.last_losses["critic"]) and torch.isfinite(agent.last_losses["policy"])
