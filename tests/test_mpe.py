"""Spread and Tag against mpe2's simple_spread_v3 and simple_tag_v3 on the same states and actions, and the
multi-agent contract: shapes, time limits, seeding, state round trips, the scripted prey and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rl_suite
from rl_suite.envs.multiagent.mpe import Spread, Tag

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
simple_tag_v3 = pytest.importorskip("mpe2.simple_tag_v3")

ATOL = 1e-4


def mpe_state(pz_env) -> torch.Tensor:
    """mpe2's world as our ``[1, E, 4]`` state: (pos, vel) of every entity, agents then landmarks."""
    entities = pz_env.unwrapped.world.entities
    return torch.tensor(np.array([[*e.state.p_pos, *e.state.p_vel] for e in entities]), dtype=torch.float32)[None]


def crowd(pz_env, scale: float) -> None:
    """Pull every entity towards the origin, so that collisions and contacts happen often."""
    for entity in pz_env.unwrapped.world.entities:
        entity.state.p_pos = entity.state.p_pos * scale


def random_actions(rng, pz_env, continuous: bool) -> dict:
    if continuous:
        return {name: rng.uniform(0, 1, 5).astype(np.float32) for name in pz_env.possible_agents}
    return {name: int(rng.integers(5)) for name in pz_env.possible_agents}


def run_parity(ours, pz_env, names, continuous, obs_lengths, seeds=(0, 1, 2, 3)):
    """Step both from mpe2's state (copied into ours every step) with identical actions; compare everything."""
    rng = np.random.default_rng(0)
    for seed in seeds:
        pz_obs, _ = pz_env.reset(seed=seed)
        if seed % 2:
            crowd(pz_env, 0.3)
            pz_obs = {name: pz_env.unwrapped.observe(name) for name in pz_env.possible_agents}
        ours.reset()
        for t in range(25):
            obs = ours.set_state(mpe_state(pz_env))
            for i, name in enumerate(names):
                k = obs_lengths[i]
                np.testing.assert_allclose(obs[0, i, :k].numpy(), pz_obs[name], atol=ATOL)
                assert not obs[0, i, k:].any()  # zero padding
            np.testing.assert_allclose(ours.global_state[0].numpy(), pz_env.state(), atol=ATOL)
            actions = random_actions(rng, pz_env, continuous)
            ours_actions = torch.tensor(np.array([actions[name] for name in names]))[None]
            _, reward, terminated, truncated, info = ours.step(ours_actions)
            pz_obs, pz_rew, pz_term, pz_trunc, _ = pz_env.step(actions)
            final = info["final_obs"]
            for i, name in enumerate(names):
                np.testing.assert_allclose(final[0, i, : obs_lengths[i]].numpy(), pz_obs[name], atol=ATOL)
            expected = np.array([pz_rew[name] for name in names], dtype=np.float32)
            np.testing.assert_allclose(info["agent_reward"][0].numpy(), expected, atol=ATOL)
            np.testing.assert_allclose(
                info["final_global_state"][0].numpy(),
                np.concatenate([pz_obs[n] for n in pz_env.possible_agents]),
                atol=ATOL,
            )
            assert not bool(terminated[0])
            assert bool(truncated[0]) == (t == 24) == all(pz_trunc.values())
            assert not any(pz_term.values())
            if t < 24:  # positions and velocities after the step (after a truncation ours has reset)
                np.testing.assert_allclose(ours.get_state()[0].numpy(), mpe_state(pz_env)[0].numpy(), atol=ATOL)
            yield reward, expected


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_spread_parity_with_mpe2(continuous):
    pz_env = simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=continuous)
    ours = Spread(1, seed=0, continuous_actions=continuous)
    names = pz_env.possible_agents
    collisions = 0
    for reward, expected in run_parity(ours, pz_env, names, continuous, [18] * 3):
        assert reward[0].item() == pytest.approx(expected.mean(), abs=ATOL)  # team reward: the mean
        collisions += int(np.ptp(expected) > 0 or expected[0] < -10)  # the local (collision) term differs
    assert collisions > 0  # the collision penalty was exercised
    pz_env.close()


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_tag_learned_prey_parity_with_mpe2(continuous):
    pz_env = simple_tag_v3.parallel_env(max_cycles=25, continuous_actions=continuous)
    ours = Tag(1, seed=0, continuous_actions=continuous, prey="learned")
    assert ours.num_agents == 4 and ours.observation_space.shape == (4, 16)
    names = pz_env.possible_agents  # adversary_0..2, agent_0
    catches = 0
    for reward, expected in run_parity(ours, pz_env, names, continuous, [16, 16, 16, 14]):
        assert reward[0].item() == pytest.approx(expected[0], abs=ATOL)  # team reward: the adversaries'
        catches += int(expected[0] > 0)
    assert catches > 0
    pz_env.close()


def test_tag_scripted_observations_and_state_match_mpe2():
    pz_env = simple_tag_v3.parallel_env(max_cycles=25)
    pz_obs, _ = pz_env.reset(seed=5)
    ours = Tag(1, seed=0)
    assert ours.num_agents == 3
    obs = ours.set_state(mpe_state(pz_env))
    for i in range(3):
        np.testing.assert_allclose(obs[0, i].numpy(), pz_obs[f"adversary_{i}"], atol=ATOL)
    np.testing.assert_allclose(ours.global_state[0].numpy(), pz_env.state(), atol=ATOL)


@pytest.mark.parametrize(
    "make, obs_shape, state_dim, action_shape",
    [
        (lambda: Spread(5, seed=0), (3, 18), 54, (5, 3)),
        (lambda: Spread(5, seed=0, num_agents=4, continuous_actions=True), (4, 24), 96, (5, 4, 5)),
        (lambda: Tag(5, seed=0), (3, 16), 62, (5, 3)),
        (lambda: Tag(5, seed=0, prey="learned"), (4, 16), 62, (5, 4)),
        (lambda: rl_suite.make("Spread-v0", num_envs=5, seed=0), (3, 18), 54, (5, 3)),
        (lambda: rl_suite.make("Tag-v0", num_envs=5, seed=0, prey="learned"), (4, 16), 62, (5, 4)),
    ],
)
def test_shapes_and_dtypes(make, obs_shape, state_dim, action_shape):
    env = make()
    obs = env.reset()
    assert obs.shape == (5, *obs_shape) and obs.dtype == torch.float32
    assert env.observation_space.shape == obs_shape and env.global_state_space.shape == (state_dim,)
    assert env.max_episode_steps == 25
    if env.discrete:
        assert env.agent_action_space.n == 5 and env.avail_actions.shape == (5, obs_shape[0], 5)
        assert bool(env.avail_actions.all())
        actions = torch.randint(0, 5, action_shape)
    else:
        assert env.agent_action_space.shape == (5,) and env.avail_actions is None
        actions = torch.rand(action_shape)
    obs, reward, terminated, truncated, info = env.step(actions)
    assert obs.shape == (5, *obs_shape) and obs.dtype == torch.float32
    assert reward.shape == (5,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == torch.bool and terminated.shape == (5,)
    assert info["agent_reward"].shape == (5, obs_shape[0])
    assert info["global_state"].shape == info["final_global_state"].shape == (5, state_dim)
    assert info["alive"].shape == (5, obs_shape[0]) and bool(info["alive"].all())


def test_truncation_final_obs_and_auto_reset():
    env = Spread(4, seed=3)
    env.reset()
    actions = torch.full((4, 3), 2)
    for _ in range(24):
        obs, _, terminated, truncated, info = env.step(actions)
        assert not truncated.any() and not terminated.any() and not info["done"].any()
    before = env.get_state()
    obs, reward, terminated, truncated, info = env.step(actions)
    assert truncated.all() and not terminated.any() and info["done"].all()
    assert (info["episode_length"] == 25).all()
    assert info["episode_return"].shape == (4,) and (info["episode_return"] < 0).all()
    # final_obs is the observation the step reached; obs is the first one of the new episode.
    assert not torch.equal(info["final_obs"], obs)
    assert (info["final_obs"][:, :, 0:2] != 0).any()  # moving at the end
    assert (obs[:, :, 0:2] == 0).all()  # at rest after the reset
    assert not torch.equal(env.get_state(), before)
    assert torch.equal(info["global_state"], obs.reshape(4, -1))
    assert torch.equal(info["final_global_state"], info["final_obs"].reshape(4, -1))
    _, _, _, truncated, info = env.step(actions)
    assert not truncated.any() and (info["episode_length"] == 0).all()


@pytest.mark.parametrize("cls", [Spread, Tag])
def test_seeding_gives_identical_trajectories(cls):
    def rollout(env, steps=30):
        torch.manual_seed(0)
        out = [env.reset().clone()]
        for _ in range(steps):
            out.append(env.step(torch.randint(0, 5, (env.num_envs, env.num_agents)))[0].clone())
        return torch.stack(out)

    a, b = rollout(cls(3, seed=11)), rollout(cls(3, seed=11))
    assert torch.equal(a, b)
    assert not torch.equal(a, rollout(cls(3, seed=12)))
    # Masked resets (the GPU default) draw the same values as resets by index.
    assert torch.equal(a, rollout(cls(3, seed=11, masked_resets=True)))
    # Each environment has its own stream: its episodes do not depend on how many environments there are.
    assert torch.equal(cls(2, seed=4).reset()[1], cls(6, seed=4).reset()[1])
    # Different environments start differently.
    first = cls(2, seed=4).reset()
    assert not torch.equal(first[0], first[1])


def test_reset_distribution():
    tag = Tag(2000, seed=0, num_obstacles=2)
    tag.reset()
    state = tag.get_state()
    agents, obstacles = state[:, :4, :2], state[:, 4:, :2]
    assert agents.abs().max() <= 1.0 and agents.abs().max() > 0.99
    assert obstacles.abs().max() <= 0.9 and obstacles.abs().max() > 0.89
    assert (state[..., 2:] == 0).all()
    assert abs(agents.mean().item()) < 0.02


def test_get_state_set_state_round_trip_and_state_dict():
    env = Tag(4, seed=0, prey="learned")
    env.reset()
    actions = torch.randint(0, 5, (4, 4))
    for _ in range(5):
        env.step(actions)
    state, saved, obs = env.get_state(), env.state_dict(), env.step(actions)[0].clone()
    env.step(actions)
    env.set_state(state)
    assert torch.equal(env.get_state(), state)
    assert torch.equal(env.step(actions)[0], obs)
    env.load_state_dict(saved)
    assert torch.equal(env.step(actions)[0], obs)
    # set_state of some environments only.
    other = Tag(4, seed=9, prey="learned")
    other.reset()
    other.set_state(state[[1, 3]], env_ids=torch.tensor([1, 3]))
    assert torch.equal(other.get_state()[[1, 3]], state[[1, 3]])
    assert not torch.equal(other.get_state()[0], state[0])
    with pytest.raises(ValueError, match=r"expects state of shape \(4, 6, 4\)"):
        env.set_state(torch.zeros(4, 5, 4))


def _prey_state(prey_xy, predator_xy) -> torch.Tensor:
    """A Tag state: 3 predators, the prey at ``prey_xy`` and 2 obstacles far away, everything at rest."""
    state = torch.zeros(1, 6, 4)
    state[0, :3, :2] = torch.tensor(predator_xy)
    state[0, 3, :2] = torch.tensor(prey_xy)
    state[0, 4:, :2] = torch.tensor([[-0.9, 0.9], [0.9, 0.9]])
    return state


def test_scripted_prey_flees_deterministically():
    no_op = torch.zeros(1, 3, dtype=torch.long)
    cases = [
        # predators to the right (the nearest at +0.3): flee towards -x
        ((0.0, 0.0), [[0.3, 0.0], [0.6, 0.1], [0.6, -0.1]], (-1, 0)),
        # predators below: flee towards +y
        ((0.0, 0.0), [[0.05, -0.3], [-0.1, -0.5], [0.2, -0.6]], (0, 1)),
        # predators to the left but the prey is beyond the boundary at x = 0.95: steer back towards -x
        ((0.95, 0.0), [[0.5, 0.0], [0.4, 0.2], [0.4, -0.2]], (-1, 0)),
    ]
    for prey_xy, predators, direction in cases:
        velocities = []
        for _ in range(2):
            env = Tag(1, seed=0)
            env.reset()
            env.set_state(_prey_state(prey_xy, predators))
            env.step(no_op)
            velocities.append(env.get_state()[0, 3, 2:])
        assert torch.equal(velocities[0], velocities[1])
        # The prey accelerates with its full force (4) along one axis: v = 4 * dt.
        torch.testing.assert_close(velocities[0], 0.4 * torch.tensor(direction, dtype=torch.float32))
    # Over an episode of fixed predator moves, the prey keeps away from a chasing predator more than a still prey.
    env = Tag(1, seed=0)
    env.reset()
    env.set_state(_prey_state((0.0, 0.0), [[0.4, 0.0], [0.8, 0.8], [-0.8, -0.8]]))
    for _ in range(10):
        env.step(torch.tensor([[1, 0, 0]]))  # the first predator moves towards -x, at the prey
    state = env.get_state()[0]
    assert (state[3, :2] - state[0, :2]).norm() > 0.3


def test_coinciding_entities_stay_finite():
    env = Tag(1, seed=0)
    env.reset()
    # A predator exactly on an obstacle (mpe2 divides 0 by 0 there): no contact force, no NaN.
    env.set_state(_prey_state((0.0, 0.0), [[0.9, 0.9], [0.5, 0.5], [-0.5, -0.5]]))
    env.step(torch.zeros(1, 3, dtype=torch.long))
    assert torch.isfinite(env.get_state()).all()


def test_bad_input():
    env = Spread(2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"Spread.step expects actions for 3 agents, shape \(2, 3\)"):
        env.step(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got actions outside MultiDiscrete\(\[5 5 5\]\)"):
        env.step(torch.tensor([[0, 1, 5], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"got actions outside"):
        env.step(torch.tensor([[0, -1, 0], [0, 0, 0]]))
    with pytest.raises(TypeError, match="expects integer actions"):
        env.step(torch.zeros(2, 3))
    env = Tag(2, seed=0, prey="learned", continuous_actions=True)
    env.reset()
    with pytest.raises(ValueError, match=r"Tag.step expects actions for 4 agents, shape \(2, 4, 5\)"):
        env.step(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="non-finite actions"):
        env.step(torch.full((2, 4, 5), float("nan")))
    with pytest.raises(ValueError, match="prey must be 'scripted' or 'learned'"):
        Tag(prey="random")
    with pytest.raises(ValueError, match="local_ratio"):
        Spread(local_ratio=2.0)


def test_continuous_actions_are_clipped_to_the_box():
    a, b = Spread(1, seed=0, continuous_actions=True), Spread(1, seed=0, continuous_actions=True)
    a.reset(), b.reset()
    actions = torch.tensor([[[0.0, 3.0, -2.0, 0.5, 0.25]] * 3])
    torch.testing.assert_close(a.step(actions)[0], b.step(actions.clamp(0, 1))[0])


@pytest.mark.parametrize("make", [Spread, lambda **kw: Tag(prey="learned", **kw), Tag])
def test_partial_resets_by_index_and_by_mask_agree(make):
    """Environments whose episodes end at different steps reset alone; by index (CPU) or by mask, the same."""
    envs = [make(num_envs=4, seed=2, masked_resets=masked) for masked in (False, True)]
    for env in envs:
        env.reset()
        saved = env.state_dict()
        saved["running"][1] = torch.tensor([0.0, 5, 11, 24])  # episodes at different lengths
        env.load_state_dict(saved)
    generator = torch.Generator().manual_seed(1)
    ended = torch.zeros(4)
    for _ in range(30):
        actions = torch.randint(0, 5, (4, envs[0].num_agents), generator=generator)
        (obs, _, _, truncated, info), (obs2, _, _, _, info2) = (env.step(actions) for env in envs)
        ended += truncated
        assert torch.equal(obs, obs2) and torch.equal(info["final_obs"], info2["final_obs"])
        for key in ("global_state", "final_global_state", "agent_reward"):
            assert torch.equal(info[key], info2[key])
        if isinstance(envs[0], Spread):
            assert torch.equal(info["global_state"], obs.reshape(4, -1))
    assert ended.tolist() == [1, 1, 1, 2]
