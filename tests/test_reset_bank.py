"""Reset banks (``rl_suite/envs/mujoco/reset_bank.py``): episodes start from the bank's states in the asked share,
from the environment's own seeded streams, and resume exactly; banks of another model, or of the wrong shapes, are
refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

mujoco = pytest.importorskip("mujoco")

import rl_suite  # noqa: E402
from rl_suite.envs.mujoco.env import MujocoVecEnv  # noqa: E402
from rl_suite.envs.mujoco.reset_bank import ResetBank  # noqa: E402


def cheetah(num_envs=4, **kwargs):
    return MujocoVecEnv(num_envs, seed=0, task="HalfCheetah", nthread=1, **kwargs)


def flipped_states(generator: torch.Generator, count: int):
    """HalfCheetah upside down (root angle pi plus noise), 1 m up, with random joint velocities: states its own reset
    (noise of 0.1 around the standing pose) never gives."""
    qpos = torch.zeros(count, 9, dtype=torch.float64)
    qpos[:, 1] = 1.0
    qpos[:, 2] = torch.pi + 0.1 * torch.randn(count, generator=generator, dtype=torch.float64)
    qvel = torch.randn(count, 9, generator=generator, dtype=torch.float64)
    return qpos, qvel


def test_episodes_start_from_the_bank_in_the_asked_share_and_otherwise_as_before():
    env = cheetah(64)
    bank = ResetBank.generate(env.model, flipped_states, count=16, seed=0)
    plain = cheetah(64)
    plain.reset(seed=1)
    env.use_reset_bank(bank, fraction=0.0)
    env.reset(seed=1)
    torch.testing.assert_close(env.get_state(), plain.get_state(), rtol=0, atol=0)  # fraction 0: no change
    env.use_reset_bank(bank, fraction=1.0)
    env.reset(seed=1)
    qpos, qvel = env.get_state()
    matches = (qpos[:, None, :] == bank.qpos[None]).all(2) & (qvel[:, None, :] == bank.qvel[None]).all(2)
    assert matches.any(1).all()  # every start is one of the bank's states ...
    assert len(set(matches.int().argmax(1).tolist())) > 8  # ... drawn across the bank
    env.use_reset_bank(bank, fraction=0.25)
    starts = []
    for seed in range(8):
        env.reset(seed=seed)
        starts.append(env.get_state()[0][:, 2] > 2.0)  # flipped: from the bank
    share = torch.cat(starts).float().mean().item()
    assert 0.18 < share < 0.32, share  # 512 starts at 0.25


def test_the_bank_draws_are_seeded_and_independent_of_how_many_environments_there_are():
    small, large = cheetah(3), cheetah(7)
    for env in (small, large):
        env.use_reset_bank(ResetBank.generate(env.model, flipped_states, count=32, seed=5), fraction=0.5)
        env.reset(seed=2)
    torch.testing.assert_close(small.get_state()[0], large.get_state()[0][:3], rtol=0, atol=0)
    again = ResetBank.generate(small.model, flipped_states, count=32, seed=5)
    torch.testing.assert_close(again.qpos, small.reset_bank.qpos, rtol=0, atol=0)


def test_recorded_states_keep_the_newest_within_the_capacity():
    env = cheetah(2)
    bank = ResetBank(torch.zeros(0, 9), torch.zeros(0, 9), env.model, capacity=5)
    for k in range(4):  # 8 states, one batch of 2 at a time
        qpos, qvel = torch.full((2, 9), float(2 * k)), torch.zeros(2, 9)
        qpos[1] += 1
        bank.record(qpos, qvel)
    assert len(bank) == 5
    assert sorted(bank.qpos[:, 0].tolist()) == [3.0, 4.0, 5.0, 6.0, 7.0]
    bank.record(torch.arange(7.0)[:, None].expand(7, 9), torch.zeros(7, 9))  # more than the capacity at once
    assert sorted(bank.qpos[:, 0].tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_a_saved_bank_loads_through_make_and_a_resumed_env_continues_exactly(tmp_path):
    env = cheetah(4, max_episode_steps=5)
    bank = ResetBank.generate(env.model, flipped_states, count=8, seed=0, capacity=20)
    bank.save(tmp_path / "bank.pt")
    made = rl_suite.make("HalfCheetah-v5", num_envs=4, seed=0, reset_bank=str(tmp_path / "bank.pt"))
    torch.testing.assert_close(made.reset_bank.qpos[:8], bank.qpos[:8])
    assert made.reset_bank_fraction == 0.5

    def run(env, steps, seed):
        g, out = torch.Generator().manual_seed(seed), []
        for _ in range(steps):
            obs, reward, *_ = env.step(torch.rand(4, 6, generator=g) * 2 - 1)
            env.reset_bank.record(*env.get_state())  # the bank grows as the run goes
            out.append(torch.cat([obs.flatten(), reward]))
        return torch.stack(out)

    env.use_reset_bank(bank, fraction=0.5)
    env.reset(seed=3)
    run(env, 7, seed=1)
    state = env.state_dict()
    expected = run(env, 20, seed=9)
    resumed = cheetah(4, max_episode_steps=5)
    resumed.use_reset_bank(ResetBank.generate(env.model, flipped_states, count=8, seed=0, capacity=20), 0.5)
    resumed.reset(seed=11)
    resumed.load_state_dict(state)
    torch.testing.assert_close(run(resumed, 20, seed=9), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match="the checkpoint and this env disagree on a reset bank"):
        cheetah(4).load_state_dict(state)


def test_banks_of_another_model_or_of_the_wrong_shapes_are_refused(tmp_path):
    env = cheetah(2)
    hopper = MujocoVecEnv(1, task="Hopper", nthread=1)
    with pytest.raises(ValueError, match=r"qpos \[B, nq=9\] and qvel \[B, nv=9\] of the model, got qpos \[3, 6\]"):
        ResetBank(torch.zeros(3, 6), torch.zeros(3, 9), env.model)
    with pytest.raises(ValueError, match="must be finite"):
        ResetBank(torch.full((1, 9), np.nan), torch.zeros(1, 9), env.model)
    other = ResetBank(torch.zeros(2, hopper.model.nq), torch.zeros(2, hopper.model.nv), hopper.model)
    with pytest.raises(ValueError, match="made for another model"):
        env.use_reset_bank(other)
    other.save(tmp_path / "hopper.pt")
    with pytest.raises(ValueError, match="made for another model"):
        ResetBank.load(tmp_path / "hopper.pt", env.model)
    torch.save({"qpos": torch.zeros(1, 9)}, tmp_path / "not_a_bank.pt")
    with pytest.raises(ValueError, match="is not a reset bank"):
        ResetBank.load(tmp_path / "not_a_bank.pt", env.model)
    with pytest.raises(ValueError, match=r"reset_bank_fraction must be in \[0, 1\]"):
        env.use_reset_bank(ResetBank(torch.zeros(1, 9), torch.zeros(1, 9), env.model), fraction=1.5)


def test_the_legged_task_starts_from_bank_states_placed_at_each_episodes_start_point():
    from rl_suite.envs.robots.velocity import LeggedVelocityEnv

    terrain = dict(levels=2, columns=7, tile_size=4.0, border=1.0, platform_size=1.0)
    for ground in (None, terrain):
        env = LeggedVelocityEnv(6, seed=0, nthread=1, terrain=ground, max_init_terrain_level=1)
        lying = torch.as_tensor(env.model.qpos0, dtype=torch.float64).repeat(3, 1)
        lying[:, :3] = torch.tensor([[0.2, -0.1, 0.15], [0.0, 0.3, 0.16], [-0.2, 0.0, 0.17]], dtype=torch.float64)
        lying[:, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # rolled over: upside down
        spin = torch.zeros(3, env.model.nv, dtype=torch.float64)
        spin[:, 5] = torch.tensor([1.0, 2.0, 3.0])  # yaw rates tell the states apart
        env.use_reset_bank(ResetBank(lying, spin, env.model), fraction=1.0)
        env.reset(seed=0)
        qpos, qvel = env.physics.qpos, env.physics.qvel
        chosen = (qvel[:, 5].round() - 1).long()
        assert set(chosen.tolist()) <= {0, 1, 2} and torch.equal(qvel, spin[chosen])
        assert torch.equal(qpos[:, 3:], lying[chosen, 3:])  # upside down, joints as the bank has them
        if ground is None:  # flat: the start point is the origin, so the base is where the bank puts it
            assert torch.equal(qpos[:, :3], lying[chosen, :3])
        else:  # rough: moved to the episode's start, within 1 m of its tile's centre, the bank's height above it
            placement = env._placement
            origin = placement.origins[placement.levels, placement.columns].double()
            torch.testing.assert_close(qpos[:, 2] - origin[:, 2], lying[chosen, 2], rtol=0, atol=1e-6)
            assert ((qpos[:, :2] - origin[:, :2] - lying[chosen, :2]).abs() <= 1.0 + 1e-6).all()
    with pytest.raises(ValueError, match="made for another model"):
        env.use_reset_bank(ResetBank(torch.zeros(1, 9), torch.zeros(1, 9), cheetah(1).model))


# -- recovery: a bank of fallen poses (rl_suite/envs/robots/recovery.py) ------------------------------------------


def test_dropped_robots_lie_in_varied_fallen_poses_seeded():
    from rl_suite.envs.robots.recovery import fallen_bank
    from rl_suite.envs.robots.velocity import quat_rotate_inverse

    bank = fallen_bank("quadruped", count=24, seed=0)
    again = fallen_bank("quadruped", count=24, seed=0)
    torch.testing.assert_close(bank.qpos, again.qpos, rtol=0, atol=0)
    qpos = bank.qpos[: len(bank)]
    assert (qpos[:, :2] == 0).all() and (qpos[:, 2] > 0.0).all() and (qpos[:, 2] < 0.45).all()  # down, not buried
    gravity = quat_rotate_inverse(qpos[:, 3:7].float(), torch.tensor([[0.0, 0.0, -1.0]]).expand(24, 3))
    upright = gravity[:, 2] < -0.9
    assert upright.float().mean() < 0.5  # most lie tilted, on a side or on the back ...
    assert (gravity[:, 2] > 0.5).any() and (gravity[:, 2].abs() < 0.5).any()  # ... both occur


def test_fallen_starts_get_their_grace_before_a_fall_ends_the_episode():
    from rl_suite.envs.robots.recovery import fallen_bank
    from rl_suite.envs.robots.velocity import LeggedVelocityEnv

    bank = fallen_bank("quadruped", count=16, seed=1)
    ended_at = {}
    for grace in (0.0, 0.5):
        env = LeggedVelocityEnv(8, seed=0, nthread=1, fall_grace_s=grace)
        env.use_reset_bank(bank, fraction=1.0)
        env.reset(seed=0)
        first = torch.full((8,), -1)
        for step in range(1, 41):
            _, _, terminated, _, _ = env.step(torch.zeros(8, 12))  # standing offsets: nobody gets up
            first = torch.where((first < 0) & terminated, step, first)
        ended_at[grace] = first
    # lying robots end at once without grace, and at the first step after 0.5 s (25 steps) with it
    assert (ended_at[0.0] == 1).float().mean() > 0.5, ended_at
    assert ((ended_at[0.5] == -1) | (ended_at[0.5] >= 26)).all() and (ended_at[0.5] == 26).any(), ended_at
    with pytest.raises(ValueError, match="fall_grace_s must be at least 0"):
        LeggedVelocityEnv(1, fall_grace_s=-1.0)
