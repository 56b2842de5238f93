"""FlashSAC (agents/flashsac.py): the bounded norms hold after every update, each switch changes what it says, the
distributional target and the reward scale agree with hand-computed numbers, bad settings are refused, and the
exported policy is the agent's deterministic one. Learning on Pendulum is in test_learning.py, exact resume in
test_runner.py."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_suite.agents import flashsac
from rl_suite.agents.flashsac import FlashSAC
from rl_suite.bounded_networks import BatchNorm, RMSNorm, UnitLinear
from rl_suite.buffers import ReplayBuffer
from rl_suite.categorical import distributional_target
from rl_suite.deploy import load_policy
from rl_suite.deploy.export import export_policy
from rl_suite.networks import ReturnScale

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACTIONS = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
SMALL = dict(actor_width=16, critic_width=16, batch_size=32, learning_starts=0, buffer_size=1024, atoms=11)


def agent_with_data(num_envs=4, rows=40, seed=0, observe=False, **overrides) -> tuple[FlashSAC, ReplayBuffer]:
    """An agent and a buffer of ``rows`` batched random transitions, rewards of about -3; with ``observe``, the agent's
    ``update`` runs after each row, as the runner calls it (set ``learning_starts`` to keep it from learning)."""
    torch.manual_seed(seed)
    agent = FlashSAC(OBS, ACTIONS, **{**SMALL, **overrides})
    buffer = agent.make_buffer(num_envs)
    for _ in range(rows):
        obs = torch.randn(num_envs, 5) * 3 + 1
        actions, _ = agent.act(obs)
        reward = -3 + torch.randn(num_envs)
        done = torch.rand(num_envs) < 0.05
        buffer.add(obs, actions, reward, done, torch.zeros(num_envs, dtype=torch.bool), obs + 0.1)
        if observe:
            agent.update(buffer)
    return agent, buffer


def norms(agent: FlashSAC) -> dict[str, list[float]]:
    """The largest distance of each bounded norm from its bound, by kind, over the actor and the critics."""
    found = {"rows": [], "batch_norm": [], "rms_norm": []}
    for net in (agent.actor, agent.critic):
        for layer in net.modules():
            if isinstance(layer, UnitLinear):
                found["rows"].append(float((layer.weight.detach().norm(dim=-1) - 1).abs().max()))
            elif isinstance(layer, BatchNorm):
                joint = torch.cat((layer.weight, layer.bias), -1).detach().norm(dim=-1)
                found["batch_norm"].append(float((joint - math.sqrt(layer.weight.shape[-1])).abs().max()))
            elif isinstance(layer, RMSNorm):
                found["rms_norm"].append(
                    float((layer.weight.detach().norm(dim=-1) - math.sqrt(layer.weight.shape[-1])).abs().max())
                )
    return found


def test_the_weight_projection_holds_after_each_update_and_without_it_the_norms_drift():
    agent, buffer = agent_with_data()
    for _ in range(3):
        metrics = agent.update(buffer)
        assert "critic_loss" in metrics
        for kind, distances in norms(agent).items():
            assert distances and max(distances) < 1e-5, kind
    assert agent.updates == 3 * 4  # utd 1: an update per transition of the iteration's one batched step of 4

    unprojected, buffer = agent_with_data(weight_projection=False)
    for _ in range(3):
        unprojected.update(buffer)
    drift = norms(unprojected)
    assert max(drift["rows"]) > 1e-3 and max(drift["batch_norm"]) > 1e-3


def test_batch_norm_matches_torch_batch_norm_member_by_member():
    """The ensemble batch norm against torch's ``F.batch_norm`` on each member alone: outputs, input gradients and
    running statistics in training; outputs on the running statistics in evaluation."""
    torch.manual_seed(0)
    norm = BatchNorm(2, 3, momentum=0.1)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(2, 1, 3) + 0.5)
        norm.bias.copy_(torch.randn(2, 1, 3))
    x = (torch.randn(2, 7, 3) * 4 + 2).requires_grad_()
    ours = norm(x, training=True)
    ours.square().sum().backward()
    for member in range(2):
        reference_x = x.detach()[member].clone().requires_grad_()
        running_mean, running_var = torch.zeros(3), torch.ones(3)
        weight, bias = norm.weight.detach()[member, 0], norm.bias.detach()[member, 0]
        reference = torch.nn.functional.batch_norm(
            reference_x, running_mean, running_var, weight, bias, training=True, momentum=0.1, eps=norm.eps
        )
        reference.square().sum().backward()
        torch.testing.assert_close(ours[member], reference)
        torch.testing.assert_close(x.grad[member], reference_x.grad)
        torch.testing.assert_close(norm.running_mean[member, 0], running_mean)
        torch.testing.assert_close(norm.running_var[member, 0], running_var)
        evaluated = torch.nn.functional.batch_norm(x.detach()[member], running_mean, running_var, weight, bias)
        torch.testing.assert_close(norm(x.detach(), training=False)[member], evaluated)


def test_each_architecture_switch_changes_what_it_says():
    full = FlashSAC(OBS, ACTIONS, **SMALL)
    blocks = full.critic.net.blocks
    assert len(blocks) == 2 and all(block.norms is not None and block.residual for block in blocks)
    assert full.critic.net.output_norm is not None

    plain = FlashSAC(OBS, ACTIONS, **SMALL, batch_norm=False, rms_norm=False, residual=False, critic_blocks=1)
    (block,) = plain.critic.net.blocks
    assert block.norms is None and plain.critic.net.output_norm is None
    assert isinstance(plain.critic.net.input_norm, BatchNorm)  # the input's BN stays: it normalises observations
    x = torch.randn(2, 8, 16)
    expected = torch.relu(block.narrow(torch.relu(block.widen(x))))
    torch.testing.assert_close(block(x, training=True), expected)  # no skip: the block's own output
    with_skip = FlashSAC(OBS, ACTIONS, **SMALL, batch_norm=False, critic_blocks=1).critic.net.blocks[0]
    with_skip.load_state_dict(block.state_dict())
    torch.testing.assert_close(with_skip(x, training=True), x + expected)

    obs, action = torch.randn(8, 5), torch.rand(8, 2) * 2 - 1
    assert full.critic(obs, action).shape == (2, 8, 11)
    scalar = FlashSAC(OBS, ACTIONS, **SMALL, distributional=False)
    assert scalar.critic(obs, action).shape == (2, 8)
    agent, buffer = agent_with_data(distributional=False)
    assert torch.isfinite(agent.update(buffer)["critic_loss"])


def test_reward_scaling_and_gradient_clipping_switches(monkeypatch):
    scaled, _ = agent_with_data(observe=True, learning_starts=10**9)
    # Every collected transition's return counted; 40 steps of rewards near -3 make returns near -100 (the episodes
    # that end at random restart theirs), so the scale is well above 1.
    assert scaled.reward_scale.stats.count == 160 and float(scaled.reward_scale()) > 5.0
    unscaled, _ = agent_with_data(observe=True, learning_starts=10**9, reward_scaling=False)
    assert unscaled.reward_scale.stats.count == 0 and float(unscaled.reward_scale()) == 1.0

    clips = []

    def recording(optimizer, loss, parameters, max_grad_norm=0.0, lr=None):
        clips.append(max_grad_norm)
        return real(optimizer, loss, parameters, max_grad_norm, lr)

    real = flashsac.gradient_step
    monkeypatch.setattr(flashsac, "gradient_step", recording)
    clipped, buffer = agent_with_data(max_grad_norm=1.5, rows=2)
    clipped.update(buffer)
    assert clips and set(clips) == {1.5, 0.0}  # actor and critics clipped; the temperature's single scalar is not


def test_noise_is_held_for_zeta_distributed_steps_or_drawn_each_step():
    agent = FlashSAC(OBS, ACTIONS, **SMALL)
    agent.make_buffer(256)
    torch.manual_seed(0)
    draws = torch.stack([agent._exploration_noise(256).clone() for _ in range(200)])  # [T, N, A]
    changed = (draws[1:] != draws[:-1]).any(-1)  # [T - 1, N]: the steps where an environment drew afresh
    redraw_rate = changed.float().mean()
    # The mean holding time of the zeta(2) distribution truncated at 16: sum k^-1 / sum k^-2 over k = 1..16.
    k = torch.arange(1, 17, dtype=torch.float64)
    mean_hold = float(k.pow(-1).sum() / k.pow(-2).sum())
    assert abs(1 / redraw_rate - mean_hold) < 0.15 * mean_hold
    assert bool(changed.any(0).all()) and not bool(changed.all())  # every env redraws sometimes, not always

    fresh = FlashSAC(OBS, ACTIONS, **SMALL, noise_repeat=False)
    fresh.make_buffer(256)
    first = fresh._exploration_noise(256).clone()  # the draws land in one buffer, valid until the next step's
    assert not torch.equal(first, fresh._exploration_noise(256))
    assert abs(agent.target_entropy - 0.5 * 2 * math.log(2 * math.pi * math.e * 0.15**2)) < 1e-12
    assert abs(agent.target_entropy / 2 - (-0.4782)) < 1e-3  # per action dimension


def test_the_soft_distributional_target_on_hand_computed_numbers():
    """FlashSAC's target atoms R + d (z - alpha log pi(a'|s')) under the lower-valued target twin, projected: the
    core's C51 target with the entropy term folded into the reward, R - d alpha log pi'."""
    support = torch.tensor([-1.0, 0.0, 1.0])
    twins = torch.tensor([[[0.2, 0.5, 0.3]], [[0.0, 0.2, 0.8]]])  # expected values 0.1 and 0.8: the first is lower
    rewards, discount, alpha_log_prob = torch.tensor([0.25]), torch.tensor([0.5]), torch.tensor([-0.5])
    target = distributional_target(twins, rewards - discount * alpha_log_prob, discount, support, "lower_mean")
    # Atoms 0.25 + 0.5 (z + 0.5) = 0, 0.5, 1: the first on the middle point, the second halfway, the third on the end.
    torch.testing.assert_close(target, torch.tensor([[0.0, 0.2 + 0.25, 0.25 + 0.3]]))


def test_the_reward_scale_on_hand_computed_numbers():
    scale = ReturnScale(gamma=0.5, v_max=5.0)
    scale.observe(torch.ones(2, 2), torch.tensor([[False, True], [False, False]]))
    # G: step 0: [1, 1]; env 1's episode ends there, so step 1: [1 + 0.5, 1] = [1.5, 1].
    torch.testing.assert_close(scale.running, torch.tensor([1.5, 1.0]))
    seen = torch.tensor([1.0, 1.0, 1.5, 1.0], dtype=torch.float64)
    assert abs(float(scale.stats.var) - float(seen.var(unbiased=False))) < 1e-12 and float(scale.largest) == 1.5
    assert abs(float(scale()) - max(math.sqrt(float(seen.var(unbiased=False)) + 1e-8), 1.5 / 5.0)) < 1e-6

    # Returns all alike have no spread: the largest return, over v_max, bounds the scale from below.
    alike = ReturnScale(gamma=0.99, v_max=5.0)
    alike.observe(torch.full((1, 3), 100.0), torch.zeros(1, 3, dtype=torch.bool))
    assert float(alike.stats.var) == 0.0 and abs(float(alike()) - 100.0 / 5.0) < 1e-4
    # Without v_max (the on-policy agents' scale_rewards) the scale is the standard deviation alone.
    spread = ReturnScale(gamma=0.99)
    spread.observe(torch.full((1, 3), 100.0), torch.zeros(1, 3, dtype=torch.bool))
    assert abs(float(spread()) - math.sqrt(1e-8)) < 1e-6


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(batch_size=2048, buffer_size=1024), "batch_size=2048 is larger than buffer_size=1024"),
        (dict(updates_per_transition=0.0), r"flashsac: updates_per_transition=0.0 is out of range \(> 0\)"),
        (dict(updates_per_env_step=-1.0), r"flashsac: updates_per_env_step=-1.0 is out of range \(>= 0\)"),
        (dict(expansion=0), r"flashsac: expansion=0 is out of range \(>= 1\)"),
        (dict(v_min=1.0, v_max=1.0), "flashsac: a distributional critic needs v_min < v_max, got 1.0 and 1.0"),
    ],
)
def test_settings_that_make_no_sense_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        FlashSAC(OBS, ACTIONS, **{**SMALL, **settings})


def test_a_discrete_action_space_is_told_which_agents_handle_it():
    with pytest.raises(ValueError, match="for discrete actions use ppo"):
        FlashSAC(OBS, gym.spaces.Discrete(3))


def test_the_exported_policy_is_the_deterministic_actor_with_its_input_normalisation(tmp_path):
    agent, buffer = agent_with_data()
    for _ in range(4):
        agent.update(buffer)  # running BN statistics away from their start
    assert float(agent.actor.body.net.input_norm.running_mean.abs().max()) > 0.01
    path = export_policy(agent, tmp_path / "flashsac.onnx", "onnx", env_id="Toy-v0", dt=0.02).path
    obs = torch.randn(64, 5) * 3 + 1
    expected, _ = agent.act(obs, deterministic=True)
    np.testing.assert_allclose(load_policy(path)(obs.numpy()), expected.numpy(), atol=1e-5, rtol=1e-4)


def test_the_update_ratio_counts_per_transition_or_per_batched_step_as_named():
    """``updates_per_transition`` scales with the environments a batched step brings; ``updates_per_env_step`` does
    not: FlashSAC's GPU regime is 2 updates per step of 1,024 environments, the CPU regime 1 per transition."""
    from rl_suite.agents.sac import SACConfig as SAC  # both agents read the same two fields
    from rl_suite.offpolicy import updates_per_step

    for config in (FlashSAC.Config(), SAC()):
        assert updates_per_step(config, 1) == 1.0 and updates_per_step(config, 1024) == 1024.0
    gpu = FlashSAC.Config(updates_per_env_step=2.0)
    assert updates_per_step(gpu, 1) == 2.0 and updates_per_step(gpu, 1024) == 2.0
    half = SAC(updates_per_transition=0.5)
    assert updates_per_step(half, 1) == 0.5 and updates_per_step(half, 64) == 32.0
