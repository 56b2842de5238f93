"""FixPO: the analytic KLs against torch.distributions', beta's rule by hand, the trust region held at every state
after every update (where the primary phase alone broke it), the fixup's cap, and its settings' bad input."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import pytest
import torch

import rl_suite
from rl_suite.agents.fixpo import FixPO
from rl_suite.networks import Categorical, DiagGaussian, NoisyFlowPolicy


def test_kls_match_torch_distributions():
    torch.manual_seed(0)
    mean_p, mean_q, log_std_p, log_std_q = torch.randn(4, 8, 3).unbind(0)
    ours = DiagGaussian(mean_p, log_std_p).kl(DiagGaussian(mean_q, log_std_q))
    p = torch.distributions.Independent(torch.distributions.Normal(mean_p, log_std_p.exp()), 1)
    q = torch.distributions.Independent(torch.distributions.Normal(mean_q, log_std_q.exp()), 1)
    assert torch.allclose(ours, torch.distributions.kl_divergence(p, q), atol=1e-5)
    logits_p, logits_q = torch.randn(2, 8, 5).unbind(0)
    ours = Categorical(logits_p).kl(Categorical(logits_q))
    reference = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits_p), torch.distributions.Categorical(logits=logits_q)
    )
    assert torch.allclose(ours, reference, atol=1e-6)


def test_beta_rises_above_the_target_falls_below_and_stays_non_negative():
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    agent = FixPO(box, box, kl_bound=0.5, kl_target_coef=3.0, init_beta=1.0, beta_lr=0.1)
    agent._step_beta(torch.tensor(0.4))  # gradient 0.5 - 3 * 0.4 = -0.7 < 0: Adam's first step is +lr
    assert agent.penalty.beta.item() == pytest.approx(1.1)
    agent = FixPO(box, box, kl_bound=0.5, kl_target_coef=3.0, init_beta=0.05, beta_lr=0.1)
    agent._step_beta(torch.tensor(0.1))  # gradient +0.2: beta falls by lr, to -0.05, and is held at 0
    assert agent.penalty.beta.item() == 0.0


def rollout_agent(**settings) -> tuple[FixPO, rl_suite.VecEnv]:
    torch.manual_seed(0)
    env = rl_suite.make("Pendulum-v1", num_envs=8, seed=0)
    return FixPO.for_env(env, n_steps=64, epochs=10, minibatches=4, **settings), env


def collect(agent, env, buffer):
    obs = env.reset(seed=0)
    for _ in range(agent.config.n_steps):
        actions, extras = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(actions)
        buffer.add(obs, actions, reward, terminated, truncated, info.get("final_obs", next_obs), **extras)
        obs = next_obs


@pytest.mark.parametrize("fixup_minibatches", [4, 7])  # 7 slices of 512 states leave a remainder, checked too
def test_every_state_keeps_the_kl_bound_after_each_update(fixup_minibatches):
    # A learning rate far too high for the bound: the primary phase's minibatches overshoot it, and the fixup brings
    # every state of the rollout back inside. (At 0.02 the third update stayed inside on an AMD EPYC.)
    agent, env = rollout_agent(lr=0.05, kl_bound=0.01, fixup_minibatches=fixup_minibatches)
    buffer = agent.make_buffer(env.num_envs)
    for _ in range(3):
        collect(agent, env, buffer)
        obs = agent.normalizer(buffer.data["obs"]).flatten(0, 1)
        before = copy.deepcopy(agent.actor)  # not its distribution: the Gaussian's log_std is a view of a parameter
        metrics = agent.update(buffer)
        with torch.no_grad():
            kl = before(obs).kl(agent.actor(obs))
        assert metrics["minibatch_kl_max"] > 0.01 and metrics["fixup_steps"] > 0
        for chunk in kl.split(64):  # every minibatch of 64 states, and so every state
            assert chunk.max() <= 0.01
        assert metrics["kl_max"] == pytest.approx(kl.max().item(), rel=1e-4)
    assert 0 < agent.fixup_steps and metrics["run_fixup_fraction"] < 1
    env.close()


def test_a_capped_fixup_warns_and_is_counted():
    agent, env = rollout_agent(lr=0.05, kl_bound=1e-4, max_fixup_steps=1)
    buffer = agent.make_buffer(env.num_envs)
    collect(agent, env, buffer)
    with pytest.warns(UserWarning, match=r"fixpo: the fixup phase reached max_fixup_steps \(1\) with a KL of"):
        metrics = agent.update(buffer)
    assert agent.fixup_capped == 10 and metrics["fixup_capped"] == 10  # one per epoch's fixup
    assert metrics["kl_max"] > 1e-4
    env.close()


def test_bad_settings_are_refused():
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match=r"fixpo: kl_bound=0.0 is out of range \(> 0\)"):
        FixPO(box, box, kl_bound=0.0)
    with pytest.raises(ValueError, match=r"fixpo: kl_target_coef=0.5 is out of range \(>= 1\)"):
        FixPO(box, box, kl_target_coef=0.5)
    with pytest.raises(ValueError, match=r"fixpo: policy 'flow' needs init_log_std in \[-5, 2\], got 3.0"):
        FixPO(box, box, policy="flow", init_log_std=3.0)


# -- on a flow policy (policy: flow) ------------------------------------------------------------------------------


def test_a_flow_policy_keeps_the_bound_at_every_state_and_noise_after_each_update():
    agent, env = rollout_agent(lr=0.02, kl_bound=0.01, policy="flow", activation="silu", hidden=(32, 32))
    assert isinstance(agent.actor, NoisyFlowPolicy)
    buffer = agent.make_buffer(env.num_envs)
    for _ in range(2):
        collect(agent, env, buffer)
        inputs = {
            "obs": agent.normalizer(buffer.data["obs"]).flatten(0, 1),
            "flow_noise": buffer.data["flow_noise"].flatten(0, 1),  # z, as each action drew it
        }
        before = copy.deepcopy(agent.actor)
        metrics = agent.update(buffer)
        with torch.no_grad():
            kl = agent.policy(inputs, before).kl(agent.policy(inputs))
        assert metrics["fixup_steps"] > 0  # the primary phase overshot the bound somewhere
        assert kl.max() <= 0.01 and metrics["kl_max"] == pytest.approx(kl.max().item(), rel=1e-4)
    obs = env.reset(seed=1)
    deterministic, _ = agent.act(obs, deterministic=True)
    assert torch.allclose(agent.inference_policy()(obs), deterministic, atol=1e-6)  # the export acts alike
    env.close()


def test_the_kl_given_the_flow_noise_bounds_the_kl_of_the_actions():
    # Two flow policies at one state, 1-D actions: the action densities are mixtures over z, estimated with many z.
    torch.manual_seed(0)
    p, q = (NoisyFlowPolicy(3, 1, (16,), "silu", init_log_std, output_scale=1.0) for init_log_std in (-0.5, -0.2))
    obs = torch.randn(1, 3)
    with torch.no_grad():
        z = torch.randn(20_000, 1)
        conditional = p(obs.expand(20_000, 3), z).kl(q(obs.expand(20_000, 3), z)).mean()
        actions = p(obs.expand(4_000, 3), z[:4_000]).sample()  # a ~ pi_p
        mixture_z = torch.randn(4_000, 1)
        log_density = {}
        for name, policy in (("p", p), ("q", q)):
            components = policy(obs.expand(4_000, 3), mixture_z)  # N(phi(z_j), sigma^2), j = 1..4000
            mixture = DiagGaussian(components.mean.unsqueeze(0), components.log_std.unsqueeze(0))
            log_prob = mixture.log_prob(actions.unsqueeze(1))  # [action i, component j]
            log_density[name] = torch.logsumexp(log_prob, dim=1) - math.log(4_000)
        marginal = (log_density["p"] - log_density["q"]).mean()
    assert 0 < marginal < conditional


def test_a_flow_policy_needs_continuous_actions_and_a_known_policy_name():
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(ValueError, match=r"fixpo: policy 'flow' needs continuous actions \(a Box\), got Discrete"):
        FixPO(box, gym.spaces.Discrete(4), policy="flow")
    with pytest.raises(ValueError, match=r"fixpo: policy='diffusion' is out of range \(one of 'gaussian', 'flow'\)"):
        FixPO(box, box, policy="diffusion")
