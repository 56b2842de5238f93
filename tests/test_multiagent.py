"""The multi-agent contract, the shared pieces of MAPPO and QMIX (recurrent unrolls, the mixer, TD(lambda), the
episode buffer), masks, and exact resumes, on a small task (tests/multiagent_toy.py)."""

from __future__ import annotations

import pytest
import torch
from multiagent_toy import Rendezvous

from rl_suite.agents.mappo import MAPPO
from rl_suite.agents.qmix import QMIX, QMixer, VDNMixer
from rl_suite.buffers import EpisodeBuffer, lambda_returns
from rl_suite.networks import RecurrentMLP
from rl_suite.runner import RunConfig, Runner, evaluate


def random_available(avail: torch.Tensor) -> torch.Tensor:
    return torch.where(avail, torch.rand(avail.shape), -1.0).argmax(-1)


# -- the contract ----------------------------------------------------------------------------------------------


def test_shapes_and_the_multiagent_info():
    env = Rendezvous(num_envs=5, seed=0, agents=3, targets=3, max_episode_steps=6)
    obs = env.reset()
    assert obs.shape == (5, 3, 4) and obs.dtype == torch.float32
    assert env.observation_space.shape == (3, 4) and env.agent_observation_space.shape == (4,)
    assert env.global_state.shape == (5, 4) and env.global_state_space.shape == (4,)
    assert env.avail_actions.shape == (5, 3, 5) and env.alive.shape == (5, 3)
    for step in range(6):
        before, alive = env.global_state.clone(), env.alive.clone()
        obs, reward, terminated, truncated, info = env.step(random_available(env.avail_actions))
        assert reward.shape == (5,) and info["agent_reward"].shape == (5, 3)
        # the team reward is the mean of the rewards of the agents that were alive to act
        torch.testing.assert_close(reward, (info["agent_reward"] * alive).sum(1) / alive.sum(1))
        if step < 5:
            assert not truncated.any()
            assert torch.equal(info["final_global_state"], info["global_state"])
            # the target moves on by one each step
            assert torch.equal(env.global_state[:, :3], before[:, :3].roll(1, dims=1))
    assert truncated.all() and not terminated.any()
    # auto-reset: the step counter restarted, and the final state is the ended episode's
    assert (info["global_state"][:, 3] == 0).all() and (info["final_global_state"][:, 3] == 0.6).all()
    assert info["alive"].all() and not info["final_avail_actions"][:, -1, 1:].any()
    assert info["episode_length"].tolist() == [6] * 5


def test_dead_agents_have_only_the_noop_and_zero_observations():
    env = Rendezvous(num_envs=2, seed=0, death_step=2)
    env.reset()
    for _ in range(2):
        obs, *_ = env.step(random_available(env.avail_actions))
    assert not env.alive[:, -1].any() and env.alive[:, :-1].all()
    assert env.avail_actions[:, -1].tolist() == [[True, False, False, False, False]] * 2
    assert (obs[:, -1] == 0).all() and (obs[:, 0] != 0).any()


def test_bad_actions_get_clear_errors():
    env = Rendezvous(num_envs=4, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"expects actions for 3 agents, shape \(4, 3\).*got \(4, 2\)"):
        env.step(torch.zeros(4, 2, dtype=torch.int64))
    unavailable = random_available(env.avail_actions)
    unavailable[2, 1] = 4  # never available
    with pytest.raises(ValueError, match=r"unavailable actions for 1 agents \(first: env 2, agent 1, action 4; avail"):
        env.step(unavailable)
    with pytest.raises(ValueError, match="outside MultiDiscrete"):
        env.step(torch.full((4, 3), 7))
    # nothing moved: a valid step still starts from step 0
    env.step(random_available(env.avail_actions))
    assert (env.global_state[:, 3] == 0.1).all()


def test_single_and_multi_agent_learners_refuse_the_other_kind():
    from rl_suite.agents.ppo import PPO
    from rl_suite.registry import make

    with pytest.raises(ValueError, match="is a multi-agent env, and ppo trains single-agent envs"):
        PPO.for_env(Rendezvous(num_envs=2))
    with pytest.raises(ValueError, match="is a single-agent env, and qmix trains multi-agent envs"):
        QMIX.for_env(make("CartPole-v1"))
    env = Rendezvous(num_envs=2)
    with pytest.raises(TypeError, match=r"mappo acts on a dict of inputs with a memory: act\(inputs, memory\)"):
        MAPPO.for_env(env).predict(env.reset())


# -- the pieces of the learners ---------------------------------------------------------------------------------


def test_recurrent_unroll_equals_stepping_with_resets():
    torch.manual_seed(0)
    net = RecurrentMLP(5, (16,), 3, "relu", gru_size=8)
    x, h0 = torch.randn(7, 4, 5), torch.randn(4, 8)
    starts = torch.rand(7, 4) < 0.3
    out, hiddens = net.unroll(x, h0, starts)
    h = h0
    for t in range(7):
        step_out, h = net(x[t], h * (~starts[t]).float().unsqueeze(-1))
        torch.testing.assert_close(out[t], step_out)
        torch.testing.assert_close(hiddens[t], h)
    fused, _ = net.unroll(x, h0)  # no starts: one fused call
    looped, _ = net.unroll(x, h0, torch.zeros(7, 4, dtype=torch.bool))
    torch.testing.assert_close(fused, looped)


def test_the_mixer_is_monotonic_in_every_agent_utility():
    torch.manual_seed(0)
    mixer = QMixer(num_agents=5, state_dim=7, embed=16, hypernet_hidden=32)
    for module in mixer.modules():  # large random weights of both signs, far from a lucky initialisation
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.normal_(module.weight, std=2.0)
    q = torch.randn(2000, 5, requires_grad=True)
    state = torch.randn(2000, 7) * 3
    (grad,) = torch.autograd.grad(mixer(q, state).sum(), q)
    assert (grad >= 0).all() and (grad > 0).float().mean() > 0.9
    # the state-dependent bias V(s) moves Q_tot without any utility
    assert not torch.allclose(mixer(torch.zeros(2, 5), state[:2]), torch.zeros(2))


def test_vdn_sums_the_utilities_and_trains_only_the_agents():
    q = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 0.25]])
    torch.testing.assert_close(VDNMixer()(q, torch.randn(2, 7)), torch.tensor([-0.5, 3.25]))
    env = Rendezvous(num_envs=2)
    vdn = QMIX.for_env(env, mixer="vdn")
    assert isinstance(vdn.mixer, VDNMixer) and not list(vdn.mixer.parameters())
    qmix_parameters = sum(p.numel() for p in QMIX.for_env(env).parameters)
    assert sum(p.numel() for p in vdn.parameters) == sum(p.numel() for p in vdn.agents.parameters()) < qmix_parameters
    with pytest.raises(ValueError, match=r"qmix: mixer='sum' is out of range \(one of 'qmix', 'vdn'\)"):
        QMIX.for_env(env, mixer="sum")


def test_vdn_one_step_target_by_hand():
    """One update of VDN on a two-step episode: Q_tot(t) = sum of the chosen utilities, the target
    r_t + gamma * sum_a max Q_a(t + 1) (the online argmax valued by the target agents, which start equal), and 0 after
    the terminal step."""
    env = Rendezvous(num_envs=1)
    vdn = QMIX.for_env(env, mixer="vdn", gamma=0.5, lr=0.0, td_lambda=0.0)
    a, n = vdn.num_agents, vdn.n_actions
    obs_dim, state_dim = env.observation_space.shape[1], vdn.global_state_space.shape[0]
    torch.manual_seed(1)
    batch = {
        "obs": torch.randn(1, 3, a, obs_dim),
        "actions": torch.randint(0, n, (1, 3, a)),
        "rewards": torch.tensor([[1.0, 2.0, 0.0]]),
        "terminated": torch.tensor([[False, True, False]]),
        "global_state": torch.randn(1, 3, state_dim),
        "avail_actions": torch.ones(1, 3, a, n, dtype=torch.bool),
        "filled": torch.tensor([[True, True, False]]),
    }
    q = vdn._utilities(vdn.agents, batch)[0]  # [3, A, n]
    chosen = q[:2].gather(-1, batch["actions"][0, :2].unsqueeze(-1)).squeeze(-1).sum(-1)
    targets = torch.stack([1.0 + 0.5 * q[1].max(-1).values.sum(), torch.tensor(2.0)])
    metrics = vdn._step(batch)
    torch.testing.assert_close(metrics["q_tot"], chosen.mean())
    torch.testing.assert_close(metrics["target"], targets.mean())
    torch.testing.assert_close(metrics["loss"], (chosen - targets).square().mean())


def test_lambda_returns_by_hand():
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    next_values = torch.tensor([[10.0, 20.0, 30.0, 99.0]])
    terminated = torch.tensor([[False, False, False, False]])
    next_valid = torch.tensor([[True, True, False, False]])  # a 3-step episode truncated after step 2
    g2 = 3 + 0.9 * 30  # the last step bootstraps from V of its final state
    g1 = 2 + 0.9 * (0.5 * 20 + 0.5 * g2)
    g0 = 1 + 0.9 * (0.5 * 10 + 0.5 * g1)
    out = lambda_returns(rewards, terminated, next_values, next_valid, gamma, lam)
    torch.testing.assert_close(out[0, :3], torch.tensor([g0, g1, g2]))
    terminated[0, 2] = True  # terminated: no bootstrap
    out = lambda_returns(rewards, terminated, next_values, next_valid, gamma, lam)
    assert out[0, 2] == 3.0
    # lambda = 0: one-step targets; lambda = 1: the discounted return to the end
    one_step = lambda_returns(rewards, terminated, next_values, next_valid, gamma, 0.0)
    torch.testing.assert_close(one_step[0, :2], torch.tensor([1 + 0.9 * 10, 2 + 0.9 * 20]))
    monte_carlo = lambda_returns(rewards, terminated, next_values, next_valid, gamma, 1.0)
    assert monte_carlo[0, 0] == pytest.approx(1 + 0.9 * 2 + 0.81 * 3)


def test_episode_buffer_keeps_whole_episodes_with_their_final_observation():
    num_envs, limit = 3, 4
    spec = {
        "obs": ((1,), torch.float32),
        "actions": ((), torch.int64),
        "rewards": ((), torch.float32),
        "terminated": ((), torch.bool),
    }
    buffer = EpisodeBuffer(capacity=9, num_envs=num_envs, max_steps=limit, spec=spec, device=torch.device("cpu"))
    # env e's episodes last e + 2 steps (env 2's are truncated at the limit); obs counts steps, ids the episode
    lengths = [2, 3, 4]
    step = [0] * num_envs
    episode = [0] * num_envs
    for _ in range(20):
        obs = torch.tensor([[100.0 * episode[e] + step[e]] for e in range(num_envs)])
        ended = torch.tensor([step[e] + 1 == lengths[e] for e in range(num_envs)])
        terminated, truncated = ended & torch.tensor([True, True, False]), ended & torch.tensor([False, False, True])
        actions = torch.tensor([episode[e] for e in range(num_envs)])
        buffer.add(obs, actions, torch.ones(num_envs), terminated, truncated, obs + 0.5)
        for e in range(num_envs):
            step[e], episode[e] = (0, episode[e] + 1) if ended[e] else (step[e] + 1, episode[e])
    assert buffer.episodes == 6  # 3 slots per env: the running episode and the newest 2 completed
    torch.manual_seed(0)
    batch = buffer.sample(200)
    for row in range(200):
        length = int(batch["filled"][row].sum())
        assert batch["filled"][row, :length].all() and length in lengths
        ep = int(batch["actions"][row, 0])
        expected = torch.arange(length) + 100.0 * ep
        assert torch.equal(batch["obs"][row, :length, 0], expected)
        assert batch["obs"][row, length, 0] == expected[-1] + 0.5  # the final observation follows the last step
        assert (batch["actions"][row, :length] == ep).all()
    # only completed episodes are sampled, the newest two of each env
    episodes_of = {2: {8, 9}, 3: {4, 5}, 4: {3, 4}}  # envs 0, 1, 2 completed 10, 6 and 5
    for row in range(200):
        length = int(batch["filled"][row].sum())
        assert int(batch["actions"][row, 0]) in episodes_of[length]


# -- masks, learning and resuming -------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", [MAPPO, QMIX])
def test_unavailable_actions_are_never_chosen(algo):
    env = Rendezvous(num_envs=64, seed=1, death_step=3)
    agent = algo.for_env(env) if algo is MAPPO else algo.for_env(env, eps_start=1.0, eps_end=1.0)
    inputs = {"obs": env.reset(), "global_state": env.global_state, "alive": env.alive}
    memory = agent.initial_memory(env.num_envs)
    # make the network prefer the unavailable action strongly, so that masking, not luck, keeps it out
    head = agent.actor.head if algo is MAPPO else agent.agents.head
    with torch.no_grad():
        head.bias[4] = 50.0
    for step in range(16):
        avail = env.avail_actions.clone()
        inputs = {"obs": env._obs, "global_state": env.global_state, "alive": env.alive, "avail_actions": avail}
        actions, _, memory = agent.act(inputs, memory, deterministic=step % 2 == 0)
        assert avail.gather(2, actions.unsqueeze(-1)).all()
        env.step(actions)  # the env checks too


def test_mappo_and_qmix_learn_the_toy_task(tmp_path):
    results = {}
    for algo, settings in ((MAPPO, {}), (QMIX, {"eps_anneal_steps": 2000, "learning_starts_episodes": 8})):
        torch.manual_seed(0)
        env = Rendezvous(num_envs=16, seed=0)
        agent = algo.for_env(env, **settings)
        agent.learn(env, total_steps=6144, run_dir=tmp_path / algo.name, eval_episodes=0, progress=False)
        results[algo.name] = evaluate(agent, Rendezvous(num_envs=64, seed=1), seed=1)["mean_return"]
    # random play earns 1/3 per step, 8/3 per episode; perfect play 8
    assert results["mappo"] >= 7.5 and results["qmix"] >= 4.5, results


@pytest.mark.parametrize(
    "algo, settings",
    [
        (MAPPO, {"n_steps": 16}),
        (MAPPO, {"n_steps": 16, "recurrent": True, "chunk_length": 8, "gru_size": 8}),
        (MAPPO, {"n_steps": 16, "centralized_critic": False, "agent_rewards": True}),
        (QMIX, {"learning_starts_episodes": 4, "batch_episodes": 8, "target_update_interval": 3, "td_lambda": 0.6}),
    ],
)
def test_resumed_run_ends_bitwise_equal(tmp_path, algo, settings):
    def run(run_dir, total, resume=False):
        torch.manual_seed(0)
        env = Rendezvous(num_envs=4, seed=3)
        agent = algo.for_env(env, **settings)
        config = RunConfig(
            algo=algo.name,
            env_id="custom",
            num_envs=4,
            total_steps=total,
            eval_episodes=0,
            checkpoint_every_steps=256,
            progress=False,
            log_every_steps=10**9,
        )
        Runner(agent, env, config, run_dir=run_dir, resume=resume).run()
        return agent

    straight = run(tmp_path / "straight", 512)
    run(tmp_path / "split", 256)
    resumed = run(tmp_path / "split", 512, resume=True)
    for name, module in straight.modules.items():
        for key, value in module.state_dict().items():
            assert torch.equal(value, resumed.modules[name].state_dict()[key]), (name, key)


def test_stop_at_win_rate_needs_a_task_with_winners(tmp_path):
    env = Rendezvous(num_envs=2)
    config = RunConfig(algo="mappo", env_id="custom", num_envs=2, stop_at_win_rate=0.9, eval_episodes=0)
    with pytest.raises(ValueError, match="stop_at_win_rate needs a task with winners"):
        Runner(MAPPO.for_env(env), env, config, run_dir=tmp_path)
