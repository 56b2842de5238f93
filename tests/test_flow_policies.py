"""Flow policies: the sampler, FPO's ratio and its gradient, PolicyFlow's ratio, the MultiGoal task and its
multimodality measure."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import rl_suite
from rl_suite.agents.fpo import FPO
from rl_suite.agents.policyflow import PolicyFlow
from rl_suite.collector import Collector
from rl_suite.envs.classic.multigoal import GOALS, goal_histogram, goal_index, multimodality
from rl_suite.networks import FlowPolicy
from rl_suite.onpolicy import clipped_surrogate
from rl_suite.rng import seed_everything


def rollout(agent_class, steps=8, num_envs=4, env_id="Pendulum-v1", **settings):
    seed_everything(0)
    env = rl_suite.make(env_id, num_envs=num_envs, seed=0)
    agent = agent_class(env.observation_space, env.action_space, n_steps=steps, hidden=(16, 16), **settings)
    buffer = agent.make_buffer(num_envs)
    Collector(env, agent, buffer).collect(steps)
    return agent, buffer


# -- the sampler ---------------------------------------------------------------------------------------------------


def test_the_sampler_is_deterministic_with_fixed_noise_and_takes_its_steps():
    torch.manual_seed(0)
    policy = FlowPolicy(3, 2, (16, 16), steps=10)
    obs, noise = torch.randn(5, 3), torch.randn(5, 2)
    assert torch.equal(policy.sample(obs, noise), policy.sample(obs, noise))
    assert not torch.equal(policy.sample(obs, noise), policy.sample(obs, noise + 0.1))

    calls = []
    original = policy.velocity
    policy.velocity = lambda *args: calls.append(args[2][0].item()) or original(*args)
    policy.sample(obs, noise)
    assert calls == pytest.approx([1.0 - k / 10 for k in range(10)])  # one evaluation per Euler step, t = 1 -> 0.1
    calls.clear()
    one_step = policy.sample(obs, noise, steps=1)
    assert calls == [1.0]
    torch.testing.assert_close(one_step, noise - original(obs, noise, torch.ones(5, 1)))


def test_the_cfm_loss_vanishes_for_the_true_velocity():
    policy = FlowPolicy(1, 2, (8,))
    action, eps, t = torch.randn(4, 2), torch.randn(4, 3, 2), torch.rand(4, 3)
    policy.velocity = lambda obs, x, t: (eps - action.unsqueeze(1)).expand_as(x)  # the straight path's velocity
    for mode in ("u", "eps"):
        assert policy.cfm_loss(torch.zeros(4, 1), action, eps, t, mode).abs().max() < 1e-6


# -- FPO's ratio ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per-pair"])
def test_fpo_ratio_is_exactly_one_before_the_first_update(average):
    agent, buffer = rollout(FPO, average_losses_before_exp=average)
    d = buffer.data
    for t in range(d["obs"].shape[0]):  # a minibatch of one step's transitions, as acting saw them
        mb = {
            "obs": agent.normalizer(d["obs"][t]),
            "actions": d["policy_action"][t],
            "eps": d["cfm_eps"][t],
            "t": d["cfm_t"][t],
            "old_loss": d["cfm_loss"][t],
            "advantages": torch.randn(4),
            "returns": torch.randn(4),
        }
        ratio = agent.ratio(mb["old_loss"], agent.actor.cfm_loss(mb["obs"], mb["actions"], mb["eps"], mb["t"]))
        assert torch.equal(ratio, torch.ones_like(ratio))
        assert agent.loss(mb)["ratio"] == 1.0


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per-pair"])
def test_fpo_surrogate_gradient_matches_finite_differences(average):
    torch.manual_seed(0)
    agent, _ = rollout(FPO, average_losses_before_exp=average, samples_per_action=3)
    actor = agent.actor.double()
    obs, action = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 1, dtype=torch.float64)
    eps, t = torch.randn(6, 3, 1, dtype=torch.float64), torch.rand(6, 3, dtype=torch.float64)
    advantages = torch.randn(6, dtype=torch.float64)
    with torch.no_grad():  # an old policy near the current one, so that ratios lie inside the clip range
        old_loss = actor.cfm_loss(obs, action, eps, t) + 0.01 * torch.randn(6, 3, dtype=torch.float64)
    weight = actor.net[0].weight

    def loss() -> torch.Tensor:
        return clipped_surrogate(agent.ratio(old_loss, actor.cfm_loss(obs, action, eps, t)), advantages, 0.5)

    (analytic,) = torch.autograd.grad(loss(), weight)
    h = 1e-6
    with torch.no_grad():
        for index in [(0, 0), (3, 2), (7, 5), (15, 11)]:
            weight[index] += h
            up = loss()
            weight[index] -= 2 * h
            down = loss()
            weight[index] += h
            assert analytic[index].item() == pytest.approx(((up - down) / (2 * h)).item(), rel=1e-5, abs=1e-9)
    assert analytic.abs().sum() > 0


def test_fpo_draws_no_pair_at_t_1_where_the_eps_loss_is_identically_zero():
    """At t = 1, x_t is the noise itself, so the eps-form CFM loss is 0 whatever the velocity: a wasted pair."""
    agent, _ = rollout(FPO, samples_per_action=8)
    obs, action = torch.randn(512, 3), torch.randn(512, 1)
    eps, t = agent.draw_pairs(512)
    loss = agent.actor.cfm_loss(obs, action, eps, t, "eps")
    (gradient,) = torch.autograd.grad(loss.sum(), agent.actor.net[0].weight, retain_graph=True)
    assert gradient.abs().sum() > 0
    assert t.max() < 1.0 and t.min() > 0.0
    assert (loss > 0).all(), "a pair whose loss does not depend on the policy"
    assert set(t.unique().tolist()) == set(agent.actor.schedule()[1:-1].tolist())  # the rest of the sampler's grid
    u_agent, _ = rollout(FPO, loss_mode="u")  # the velocity-error form does depend on v at t = 1
    assert 1.0 in u_agent.draw_pairs(512)[1].unique().tolist()


# -- PolicyFlow's ratio -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", ["interpolation", "full_path"])
def test_policyflow_ratio_is_one_before_the_first_update_and_gaussian_in_the_displacement(ratio):
    agent, buffer = rollout(PolicyFlow, ratio=ratio)
    agent.behaviour.load_state_dict(agent.actor.state_dict())
    d = buffer.data
    mb = {
        "obs": agent.normalizer(d["obs"]).flatten(0, 1),
        "advantages": torch.randn(32),
        "returns": torch.randn(32),
        **{k: d[k].flatten(0, 1) for k in ("policy_action", "flow_noise", "flow_action", "log_prob")},
    }
    delta, _ = agent.displacement(mb)
    torch.testing.assert_close(delta, torch.zeros_like(delta), atol=1e-6, rtol=0)
    torch.testing.assert_close(agent.loss(mb)["ratio"], torch.tensor(1.0))


def test_policyflow_interpolation_ratio_approximates_the_full_path_for_a_small_change():
    agent, buffer = rollout(PolicyFlow)
    agent.behaviour.load_state_dict(agent.actor.state_dict())
    with torch.no_grad():  # a small change of the velocity field: a constant shift of its output bias
        agent.actor.net[-1].bias.add_(torch.tensor([0.2]) / agent.actor.output_scale)
    mb = {"obs": agent.normalizer(buffer.data["obs"]).flatten(0, 1)}
    mb.update({k: buffer.data[k].flatten(0, 1) for k in ("flow_noise", "flow_action")})
    approximate, _ = agent.displacement(mb)
    exact = agent.actor.sample(mb["obs"], mb["flow_noise"]) - mb["flow_action"]
    # A constant shift c of the velocity changes v by c at every point, so the estimate is exactly -c; the exact
    # end point moves by about -c (the shifted path meets a slightly different field): first order in c.
    torch.testing.assert_close(approximate, torch.full_like(approximate, -0.2), atol=1e-5, rtol=0)
    assert (exact - approximate).abs().max() < 0.1 * 0.2


def test_policyflow_draws_no_tau_0_where_the_brownian_term_has_no_gradient():
    """At tau = 0, x is the behaviour action and (tau v + x + (1 - tau) v^)^2 does not depend on v: every drawn time
    must be one at which the sampler evaluates the velocity, 1 down to 1 / flow_steps."""
    agent, buffer = rollout(PolicyFlow, steps=64, num_envs=32)
    agent.behaviour.load_state_dict(agent.actor.state_dict())
    mb = {"obs": agent.normalizer(buffer.data["obs"]).flatten(0, 1)}
    mb.update({k: buffer.data[k].flatten(0, 1) for k in ("flow_noise", "flow_action")})
    times = []
    velocity = agent.actor.velocity
    agent.actor.velocity = lambda obs, x, t: times.append(t.detach().clone()) or velocity(obs, x, t)
    _, brownian = agent.displacement(mb)
    (tau,) = times  # one velocity evaluation per transition, at its drawn time
    assert tau.shape == (2048, 1)
    assert tau.min() > 0.0, "tau = 0 drawn: a Brownian term without gradient"
    assert set(tau.unique().tolist()) == set(agent.actor.schedule()[:-1].tolist())
    (gradient,) = torch.autograd.grad(brownian, agent.actor.net[-1].bias)
    assert gradient.abs().sum() > 0


# -- the multimodal task -------------------------------------------------------------------------------------------


def test_multigoal_rules():
    env = rl_suite.make("MultiGoal-v0", num_envs=4, seed=0)
    env.reset()
    env.set_state(torch.zeros(4, 2))
    actions = torch.tensor([[1.0, 0.0], [-3.0, 0.0], [0.0, 0.5], [0.0, 0.0]])
    _, reward, terminated, _, _ = env.step(actions)
    # At p' = (1, 0): action cost 30 * 1, distance cost (5 - 1)^2 = 16 to the nearest goal.
    torch.testing.assert_close(reward[0], torch.tensor(-46.0))
    torch.testing.assert_close(env.get_state()[1], torch.tensor([-1.0, 0.0]))  # the action is clipped to [-1, 1]
    torch.testing.assert_close(reward[3], torch.tensor(-25.0))
    env.set_state(torch.tensor([[4.5, 0.0], [0.0, -4.5], [0.0, 0.0], [6.9, 6.9]]))
    _, reward, terminated, _, info = env.step(torch.tensor([[0.5, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]))
    assert terminated.tolist() == [True, True, False, False]
    torch.testing.assert_close(reward[0], torch.tensor(-30 * 0.25 + 10.0))
    assert goal_index(info["final_obs"]).tolist() == [0, 3, -1, -1]
    torch.testing.assert_close(env.get_state()[3], torch.tensor([7.0, 7.0]))  # positions stay in the box
    assert len(GOALS) == 4


def test_the_multimodality_measure_needs_both_success_and_three_goals():
    four_goals = multimodality(torch.tensor([240, 230, 220, 230, 80]))  # 92% success, about a quarter each
    assert four_goals["passes"] and four_goals["goals_kept"] == 4 and four_goals["success"] == 0.92
    assert four_goals["goal_shares"] == [0.261, 0.25, 0.239, 0.25]
    one_goal = multimodality(torch.tensor([0, 961, 0, 39, 0]))  # Gaussian PPO's histogram in the old benchmark
    assert not one_goal["passes"] and one_goal["success"] == 1.0 and one_goal["goals_kept"] == 1
    aimless = multimodality(torch.tensor([133, 163, 156, 140, 408]))  # four goals, but 41% of episodes reach none
    assert not aimless["passes"] and aimless["goals_kept"] == 4
    # The thresholds themselves: 90% success, 15% of the successes for the third goal.
    assert multimodality(torch.tensor([300, 300, 150, 150, 100]))["passes"]
    assert not multimodality(torch.tensor([300, 300, 150, 150, 101]))["passes"]
    assert not multimodality(torch.tensor([400, 400, 134, 0, 66]))["passes"]  # the third goal has 14.3%
    with pytest.raises(ValueError, match="expected a goal_histogram of 5 counts with episodes"):
        multimodality(torch.tensor([1, 2, 3, 4]))
    with pytest.raises(ValueError, match="expected a goal_histogram of 5 counts with episodes"):
        multimodality(torch.zeros(5, dtype=torch.long))


def test_untrained_policies_fail_the_multimodality_measure():
    """Actions N(0, 1) clipped to [-1, 1] reach each goal in about 11% of the episodes and none in over half: many
    goals, no success. Untrained flow policies act much the same."""
    torch.manual_seed(0)
    random = multimodality(goal_histogram(lambda obs: torch.randn(obs.shape[0], 2).clamp(-1.0, 1.0), 1000, seed=1))
    assert not random["passes"] and random["success"] < 0.6 and random["goals_kept"] == 4, random
    env = rl_suite.make("MultiGoal-v0", num_envs=1)
    for agent_class in (PolicyFlow, FPO):
        torch.manual_seed(0)
        agent = agent_class(env.observation_space, env.action_space)
        untrained = multimodality(goal_histogram(lambda obs, agent=agent: agent.act(obs)[0], 1000, seed=1))
        assert not untrained["passes"] and untrained["success"] < 0.6, (agent_class.name, untrained)


@pytest.mark.parametrize("algo", ["fpo", "policyflow"])
@pytest.mark.parametrize("env_id", ["MountainCarContinuous-v0", "HalfCheetah-v5"])
def test_flow_agents_train_from_the_command_line_on_classic_and_mujoco_tasks(tmp_path, capsys, algo, env_id):
    from rl_suite.cli import main

    if env_id.endswith("-v5"):
        pytest.importorskip("mujoco")
    run_dir = tmp_path / "run"
    args = ["train", algo, env_id, "--num-envs", "4", "--total-steps", "128", "--run-dir", str(run_dir)]
    quick = ["progress=false", "eval_episodes=2", "n_steps=16", "epochs=1", "hidden=[16, 16]", "flow_steps=3"]
    assert main([*args, "--set", *quick]) == 0
    assert "128 env steps" in capsys.readouterr().out
    assert (run_dir / "summary.json").is_file()


def test_zero_init_starts_from_the_identity_flow_as_the_paper_does():
    """PolicyFlow's paper (Sec. 5.4) zeroes the velocity network's last layer: the first flow moves no sample, so the
    first actions are the noise itself; the default orthogonal initialisation moves them."""
    torch.manual_seed(0)
    obs, noise = torch.randn(5, 3), torch.randn(5, 2)
    paper = FlowPolicy(3, 2, (16, 16), zero_init=True)
    assert torch.equal(paper.sample(obs, noise), noise)
    assert all(layer.weight.abs().sum() > 0 for layer in list(paper.net)[:-1] if isinstance(layer, torch.nn.Linear))
    assert not torch.equal(FlowPolicy(3, 2, (16, 16)).sample(obs, noise), noise)
    agent = PolicyFlow(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), zero_init=True)
    assert torch.equal(agent.actor.net[-1].weight, torch.zeros_like(agent.actor.net[-1].weight))
