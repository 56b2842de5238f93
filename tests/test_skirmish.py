"""The StarCraft-style skirmish: spaces, the rules on hand-set states, masks, determinism and a scripted baseline."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import rl_suite
from rl_suite.envs.multiagent.skirmish import (
    N_FIXED_ACTIONS,
    NOOP,
    STOP,
    Skirmish,
    focus_fire_actions,
    random_actions,
    win_rate,
)

SCENARIOS = {"3m": (3, 60, 31, 21), "8m": (8, 120, 81, 56), "2s3z": (5, 120, 71, 55)}  # A, limit, obs dim, state dim
EAST = 4


def attack(j: int) -> int:
    return N_FIXED_ACTIONS + j


def set_units(env: Skirmish, allies, enemies) -> torch.Tensor:
    """Set every environment to the same state from rows ``(x, y, health, cooldown)``; return the observations."""
    rows = torch.tensor(list(allies) + list(enemies), dtype=torch.float32)
    return env.set_state(rows.expand(env.num_envs, -1, -1).clone())


def far_allies(a: int, first=()):
    """Allies parked in the west corner column (out of everyone's sight), after the given leading rows."""
    rest = [(1.0, 1.0 + 3.0 * i, 45.0, 0.0) for i in range(len(first), a)]
    return list(first) + rest


def far_enemies(e: int, first=()):
    rest = [(31.0, 31.0 - 3.0 * i, 45.0, 0.0) for i in range(len(first), e)]
    return list(first) + rest


def act(env: Skirmish, *agent_actions: int) -> torch.Tensor:
    return torch.tensor([agent_actions] * env.num_envs)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spaces_and_shapes(scenario):
    a, limit, obs_dim, state_dim = SCENARIOS[scenario]
    env = rl_suite.make(f"Skirmish-{scenario}-v0", num_envs=4, seed=0)
    assert isinstance(env, Skirmish) and env.scenario == scenario
    assert env.num_agents == a and env.max_episode_steps == limit
    assert env.observation_space.shape == (a, obs_dim) and env.agent_observation_space.shape == (obs_dim,)
    assert env.agent_action_space == gym.spaces.Discrete(6 + a)
    assert isinstance(env.action_space, gym.spaces.MultiDiscrete) and env.action_space.shape == (a,)
    assert env.global_state_space.shape == (state_dim,)
    obs = env.reset()
    assert obs.shape == (4, a, obs_dim) and obs.dtype == torch.float32
    assert env.global_state.shape == (4, state_dim) and env.alive.all()
    assert env.avail_actions.shape == (4, a, 6 + a) and env.avail_actions.dtype == torch.bool
    assert env.get_state().shape == (4, 2 * a, 4)
    obs, reward, terminated, truncated, info = env.step(focus_fire_actions(env))
    assert obs.shape == (4, a, obs_dim) and reward.shape == (4,) and reward.dtype == torch.float32
    assert terminated.dtype == truncated.dtype == torch.bool and terminated.shape == (4,)
    assert info["won"].dtype == torch.bool and info["won"].shape == (4,)
    assert info["final_global_state"].shape == (4, state_dim) and info["final_avail_actions"].shape == (4, a, 6 + a)
    assert info["alive"].shape == (4, a)
    assert Skirmish(2, max_episode_steps=7).max_episode_steps == 7


def test_unknown_scenario_lists_the_scenarios():
    with pytest.raises(ValueError, match=r"unknown Skirmish scenario '5m'; scenarios: 3m, 8m, 2s3z"):
        Skirmish(scenario="5m")


def test_spawn_follows_the_documented_layout():
    env = Skirmish(64, seed=3)
    env.reset()
    state = env.get_state()
    y = 16.0 + torch.tensor([-1.0, 0.0, 1.0])
    assert (state[:, :3, 0] - 9.0).abs().max() <= 1 and (state[:, 3:, 0] - 23.0).abs().max() <= 1
    assert (state[:, :3, 1] - y).abs().max() <= 1 and (state[:, 3:, 1] - y).abs().max() <= 1
    assert (state[..., 2] == 45).all() and (state[..., 3] == 0).all()


def test_attack_in_range_deals_damage_and_respects_the_cooldown():
    env = Skirmish(1, scenario="2s3z", seed=0)
    env.reset()
    # Stalker ally 0 at distance 6 (the edge of its range) from stalker enemy 0; the enemy is out of ammunition
    # (cooldown 1) this step, everyone else is far away.
    set_units(env, far_allies(5, [(10.0, 16.0, 160.0, 0.0)]), far_enemies(5, [(16.0, 16.0, 160.0, 1.0)]))
    assert env.avail_actions[0, 0, attack(0)]
    _, reward, _, _, _ = env.step(act(env, attack(0), STOP, STOP, STOP, STOP))
    state = env.get_state()[0]
    assert state[5, 2] == 160 - 14  # enemy 0 hit
    assert state[0, 2] == 160  # the enemy's cooldown was running
    assert state[0, 3] == 1  # fired: cooldown 2, then counted down
    assert reward.item() == pytest.approx(14 * 20 / (2 * 160 + 3 * 150 + 10 * 5 + 200))
    # On cooldown: the attack stays available, but deals nothing; the enemy (ready now) fires back.
    assert env.avail_actions[0, 0, attack(0)]
    _, reward, _, _, _ = env.step(act(env, attack(0), STOP, STOP, STOP, STOP))
    state = env.get_state()[0]
    assert state[5, 2] == 160 - 14 and reward.item() == 0
    assert state[0, 2] == 160 - 14 and state[0, 3] == 0 and state[0, :2].tolist() == [10.0, 16.0]
    env.step(act(env, attack(0), STOP, STOP, STOP, STOP))
    assert env.get_state()[0, 5, 2] == 160 - 28


def test_marines_fire_every_step():
    env = Skirmish(1, seed=0)
    env.reset()
    set_units(env, far_allies(3, [(10.0, 16.0, 45.0, 0.0)]), far_enemies(3, [(14.0, 16.0, 45.0, 0.0)]))
    for k in range(1, 4):
        env.step(act(env, attack(0), STOP, STOP))
        assert env.get_state()[0, 3, 2] == 45 - 6 * k and env.get_state()[0, 0, 2] == 45 - 6 * k


def test_attack_out_of_range_is_unavailable():
    env = Skirmish(1, seed=0)
    env.reset()
    set_units(env, far_allies(3, [(10.0, 16.0, 45.0, 0.0)]), far_enemies(3, [(16.5, 16.0, 45.0, 0.0)]))
    avail = env.avail_actions[0, 0]
    assert not avail[N_FIXED_ACTIONS:].any() and avail[STOP] and not avail[NOOP]
    with pytest.raises(ValueError, match="unavailable actions"):
        env.step(act(env, attack(0), STOP, STOP))


def test_moves_are_masked_at_the_map_edge_and_move_by_the_speed():
    env = Skirmish(1, seed=0)
    env.reset()
    set_units(env, far_allies(3, [(0.5, 31.5, 45.0, 0.0)]), far_enemies(3))
    assert env.avail_actions[0, 0, 2:6].tolist() == [False, True, True, False]  # north, south, east, west
    assert env.avail_actions[0, 1, 2:6].tolist() == [True] * 4  # x = 1 can go west to 0: the edge is on the map
    env.step(act(env, EAST, STOP, STOP))
    assert env.get_state()[0, 0, :2].tolist() == [1.5, 31.5]


def test_dead_units_get_only_the_noop_and_cannot_be_targeted():
    env = Skirmish(2, seed=0)
    env.reset()
    allies = far_allies(3, [(10.0, 16.0, 45.0, 0.0), (10.0, 17.0, 0.0, 0.0)])
    obs = set_units(env, allies, far_enemies(3, [(14.0, 16.0, 0.0, 0.0), (14.0, 17.0, 45.0, 0.0)]))
    assert env.avail_actions[:, 1].tolist() == [[True] + [False] * 8] * 2
    assert env.alive[0].tolist() == [True, False, True]
    assert (obs[:, 1] == 0).all()
    assert not env.avail_actions[0, 0, attack(0)] and env.avail_actions[0, 0, attack(1)]
    # The dead ally's state block and the dead enemy's are zeros.
    state = env.global_state[0]
    assert (state[4:8] == 0).all() and (state[12:15] == 0).all() and (state[:4] != 0).any()
    with pytest.raises(ValueError, match=r"agent 1, action 1; available: \[0\]"):
        env.step(act(env, STOP, STOP, STOP))


def test_killing_the_last_enemy_wins():
    env = Skirmish(3, seed=0)
    env.reset()
    enemies = [(14.0, 16.0, 4.0, 0.0), (31.0, 28.0, 0.0, 0.0), (31.0, 25.0, 0.0, 0.0)]
    set_units(env, far_allies(3, [(10.0, 16.0, 45.0, 0.0)]), enemies)
    obs, reward, terminated, truncated, info = env.step(act(env, attack(0), STOP, STOP))
    assert terminated.all() and not truncated.any() and info["won"].all() and info["done"].all()
    assert reward[0].item() == pytest.approx((4 + 10 + 200) * 20 / (3 * 45 + 30 + 200))  # overkill does not count
    assert info["episode_length"].tolist() == [1, 1, 1]
    assert (info["final_global_state"][:, 12:] == 0).all()  # the enemies are dead in the final state
    assert env.alive.all() and (env.get_state()[:, :, 2] == 45).all()  # and the episode restarted
    # The next step reports no win.
    _, _, _, _, info = env.step(act(env, STOP, STOP, STOP))
    assert not info["won"].any()


def test_losing_every_ally_is_a_loss():
    env = Skirmish(2, seed=0)
    env.reset()
    allies = [(10.0, 16.0, 5.0, 0.0), (1.0, 4.0, 0.0, 0.0), (1.0, 7.0, 0.0, 0.0)]
    set_units(env, allies, far_enemies(3, [(14.0, 16.0, 45.0, 0.0)]))
    _, reward, terminated, truncated, info = env.step(act(env, STOP, NOOP, NOOP))
    assert terminated.all() and not truncated.any() and not info["won"].any()
    assert (reward == 0).all()


def test_mutual_destruction_is_a_loss():
    env = Skirmish(1, seed=0)
    env.reset()
    allies = [(10.0, 16.0, 5.0, 0.0), (1.0, 4.0, 0.0, 0.0), (1.0, 7.0, 0.0, 0.0)]
    enemies = [(14.0, 16.0, 6.0, 0.0), (31.0, 28.0, 0.0, 0.0), (31.0, 25.0, 0.0, 0.0)]
    set_units(env, allies, enemies)
    _, reward, terminated, _, info = env.step(act(env, attack(0), NOOP, NOOP))
    assert terminated.all() and not info["won"].any()
    assert reward.item() == pytest.approx((6 + 10) * 20 / 365)


def test_the_time_limit_truncates_as_a_loss():
    env = Skirmish(2, seed=0, max_episode_steps=3)
    env.reset()
    set_units(env, far_allies(3), far_enemies(3))
    for _ in range(2):
        _, _, terminated, truncated, info = env.step(act(env, STOP, STOP, STOP))
        assert not (terminated | truncated).any()
    _, _, terminated, truncated, info = env.step(act(env, STOP, STOP, STOP))
    assert truncated.all() and not terminated.any() and not info["won"].any()


def test_a_win_on_the_limit_step_counts():
    env = Skirmish(1, seed=0, max_episode_steps=1)
    env.reset()
    enemies = [(14.0, 16.0, 6.0, 0.0), (31.0, 28.0, 0.0, 0.0), (31.0, 25.0, 0.0, 0.0)]
    set_units(env, far_allies(3, [(10.0, 16.0, 45.0, 0.0)]), enemies)
    _, _, terminated, truncated, info = env.step(act(env, attack(0), STOP, STOP))
    assert terminated.all() and truncated.all() and info["won"].all()


def test_scripted_enemy_attacks_the_healthiest_ally_in_range_and_else_moves_to_the_nearest():
    env = Skirmish(1, seed=0)
    env.reset()
    # Enemy 0 has allies 0 (distance 6, health 45) and 1 (distance 3, health 30) in range: it shoots ally 0.
    allies = [(10.0, 16.0, 45.0, 0.0), (13.0, 16.0, 30.0, 0.0), (1.0, 1.0, 45.0, 0.0)]
    # Enemy 1 sees nobody in range: it walks one step toward its nearest ally (ally 1, distance 10).
    enemies = [(16.0, 16.0, 45.0, 0.0), (19.0, 24.0, 45.0, 0.0), (31.0, 31.0, 0.0, 0.0)]
    set_units(env, allies, enemies)
    env.step(act(env, STOP, STOP, STOP))
    state = env.get_state()[0]
    assert state[:3, 2].tolist() == [39.0, 30.0, 45.0]
    assert state[3, :2].tolist() == [16.0, 16.0]  # attacking: it holds position
    assert state[4, :2].tolist() == pytest.approx([19.0 - 0.6, 24.0 - 0.8])
    # Equal health: the nearest ally in range is shot.
    allies = [(10.0, 16.0, 45.0, 0.0), (13.0, 16.0, 45.0, 0.0), (1.0, 1.0, 45.0, 0.0)]
    set_units(env, allies, far_enemies(3, [(16.0, 16.0, 45.0, 0.0)]))
    env.step(act(env, STOP, STOP, STOP))
    assert env.get_state()[0, :3, 2].tolist() == [45.0, 39.0, 45.0]


def test_partial_observability():
    env = Skirmish(1, seed=0)
    env.reset()
    # Enemy 0 at distance 8 (seen, not attackable), enemy 1 at distance 10 (unseen); ally 1 at distance 9 (seen).
    allies = far_allies(3, [(10.0, 16.0, 45.0, 0.0), (10.0, 25.0, 45.0, 0.0)])
    enemies = far_enemies(3, [(18.0, 16.0, 45.0, 0.0), (10.0, 6.0, 18.0, 0.0)])
    obs = set_units(env, allies, enemies)[0, 0]
    moves, enemy0, enemy1, enemy2 = obs[:4], obs[4:9], obs[9:14], obs[14:19]
    ally1, ally2, own = obs[19:24], obs[24:29], obs[29:31]
    assert moves.tolist() == [1, 1, 1, 1]
    assert enemy0.tolist() == pytest.approx([0.0, 8 / 9, 8 / 9, 0.0, 1.0])
    assert (enemy1 == 0).all() and (enemy2 == 0).all() and (ally2 == 0).all()
    assert ally1.tolist() == pytest.approx([1.0, 1.0, 0.0, 1.0, 1.0])
    assert own.tolist() == [1.0, 0.0]
    # Ally 1 sees enemy 1? No (distance 19); nor does the global state hide anything.
    assert env.global_state[0, 12:15].tolist() == pytest.approx([1.0, 18 / 32 - 0.5, 16 / 32 - 0.5])
    assert env.global_state[0, 15:18].tolist() == pytest.approx([0.4, 10 / 32 - 0.5, 6 / 32 - 0.5])


def test_type_one_hot_in_2s3z():
    env = Skirmish(1, scenario="2s3z", seed=0)
    obs = env.reset()[0, 0]
    f = 7  # 5 + 2 type bits
    own = obs[4 + 5 * f + 4 * f :]
    assert own.tolist() == [1.0, 0.0, 1.0, 0.0]  # ally 0 is a stalker, full health, ready
    assert env.reset()[0, 4, -2:].tolist() == [0.0, 1.0]  # ally 4 is a zealot


def test_random_available_actions_never_trip_the_checks():
    env = Skirmish(64, scenario="2s3z", seed=1)
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        env.step(random_actions(env, g))


def test_bad_actions_raise():
    env = Skirmish(2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"expects actions for 3 agents, shape \(2, 3\)"):
        env.step(torch.ones(2, 4, dtype=torch.long))
    actions = focus_fire_actions(env)
    actions[1, 2] = NOOP  # a living agent may not take the no-op
    with pytest.raises(ValueError, match="got unavailable actions for 1 agents .*env 1, agent 2, action 0"):
        env.step(actions)


def test_unchecked_unavailable_actions_are_harmless():
    env = Skirmish(1, seed=0, check_values=False)
    env.reset()
    allies = [(10.0, 16.0, 45.0, 0.0), (1.0, 4.0, 45.0, 0.0), (0.5, 7.0, 45.0, 0.0)]
    set_units(env, allies, far_enemies(3, [(17.0, 16.0, 45.0, 0.0)]))
    env.step(act(env, attack(0), NOOP, 5))  # out of range; a no-op while alive; west off the map
    state = env.get_state()[0]
    assert state[3, 2] == 45 and state[1, :2].tolist() == [1.0, 4.0] and state[2, :2].tolist() == [0.0, 7.0]


def rollout(env: Skirmish, steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = [env.reset(seed=seed).clone()]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(random_actions(env, g))
        out += [t.clone() for t in (obs, reward, terminated, truncated, info["won"], info["final_obs"])]
        out += [env.global_state.clone(), env.avail_actions.clone(), env.alive.clone()]
    return out


def test_same_seed_same_trajectories():
    a, b = rollout(Skirmish(16, seed=5), 80), rollout(Skirmish(16, seed=5), 80)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = rollout(Skirmish(16, seed=5), 80, seed=1)
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize("scenario, limit", [("3m", 20), ("2s3z", 40)])  # limits that random play meets, or not
def test_masked_and_indexed_resets_agree(scenario, limit):
    a = rollout(Skirmish(16, scenario=scenario, max_episode_steps=limit, masked_resets=True), 150)
    b = rollout(Skirmish(16, scenario=scenario, max_episode_steps=limit, masked_resets=False), 150)
    assert torch.stack(a[3::9]).any() and torch.stack(a[4::9]).any()  # ends of both kinds
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_state_dict_resumes_exactly():
    env = Skirmish(8, seed=2)
    g = torch.Generator().manual_seed(0)
    env.reset()
    for _ in range(5):
        env.step(random_actions(env, g))
    saved = env.state_dict()
    actions = random_actions(env, g)
    first = [t.clone() for t in env.step(actions)[:4]]
    env.load_state_dict(saved)
    assert all(torch.equal(x, y) for x, y in zip(env.step(actions)[:4], first, strict=True))


def test_focus_fire_beats_random_and_a_win_earns_20():
    env = Skirmish(300, seed=0)
    assert win_rate(env, focus_fire_actions, seed=1) >= 0.85
    g = torch.Generator().manual_seed(0)
    assert win_rate(env, lambda e: random_actions(e, g), seed=2) <= 0.25
    # Every win removes all enemy health, kills every enemy and earns the bonus: a return of exactly 20.
    env.reset(seed=3)
    returns = []
    for _ in range(env.max_episode_steps):
        _, _, _, _, info = env.step(focus_fire_actions(env))
        returns.append(info["episode_return"][info["won"]])
    returns = torch.cat(returns)
    assert returns.numel() > 0 and returns.sub(20).abs().max() < 1e-4
