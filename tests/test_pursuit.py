"""The batched pursuit task: its neighbour search against all pairs, its rules on hand-placed states, and bad input."""

from __future__ import annotations

import pytest
import torch

import rl_suite
from rl_suite.envs.multiagent.pursuit import CellGrid, Pursuit


def all_pairs_nearest(queries, points, k, radius, exclude_self=False):
    """The reference: every pair's distance, sorted."""
    delta = points.unsqueeze(1) - queries.unsqueeze(2)  # [N, Q, M, 2]
    dist2 = delta.square().sum(-1)
    dist2 = torch.where(dist2 <= radius * radius, dist2, torch.inf)
    if exclude_self:
        dist2 = dist2 + torch.diag(torch.full((queries.shape[1],), torch.inf))
    return dist2.sort(-1).values[..., :k]


@pytest.mark.parametrize("capacity", [4, 200])  # the grid path, and all pairs (9 * capacity >= points)
def test_the_grid_finds_the_nearest_points_within_range(capacity):
    torch.manual_seed(0)
    side, radius = 40.0, 3.0
    points = torch.rand(3, 100, 2) * side  # about 0.5 points per cell
    queries = torch.rand(3, 60, 2) * side
    grid = CellGrid(3, side, radius, capacity, torch.device("cpu"))
    grid.build(points)
    assert grid.all_pairs == (capacity == 200)
    if not grid.all_pairs:  # no cell overflows here, so the grid is exact
        cells = grid._cell_xy(points)
        key = (torch.arange(3).unsqueeze(1) * 100 + cells[..., 0]) * 100 + cells[..., 1]
        assert torch.bincount(key.flatten()).max() <= capacity
    relative, sensed, dist2, index = grid.query(queries, 4, radius)
    expected = all_pairs_nearest(queries, points, 4, radius)
    torch.testing.assert_close(dist2, expected)
    assert torch.equal(sensed, expected.isfinite()) and sensed.any() and not sensed.all()
    # the relative positions and indices name the points found
    index = torch.where(sensed, index, 0)  # an empty slot's index means nothing
    found = torch.gather(points, 1, index.flatten(1).unsqueeze(-1).expand(-1, -1, 2)).view_as(relative)
    torch.testing.assert_close(torch.where(sensed.unsqueeze(-1), found - queries.unsqueeze(2), 0.0), relative)
    # a point is not its own neighbour
    grid.build(queries)
    _, _, own, _ = grid.query(queries, 3, radius, exclude_self=True)
    torch.testing.assert_close(own, all_pairs_nearest(queries, queries, 3, radius, exclude_self=True))


def placed(num_pursuers=2, num_evaders=1, **options) -> Pursuit:
    density = num_pursuers / 100.0  # a 10 m arena
    env = Pursuit(1, num_pursuers=num_pursuers, num_evaders=num_evaders, density=density, seed=0, **options)
    env.reset(seed=0)
    assert env.side == pytest.approx(10.0)
    return env


def test_observation_layout_on_a_placed_state():
    env = placed(num_pursuers=2, num_evaders=2, neighbours=1, targets=2)
    # pursuer 0 at (5, 5); pursuer 1 at (6, 5); evaders at (5, 7) and (9.5, 9.5) (out of pursuer 0's 3 m range)
    obs = env.set_state(torch.tensor([[[5.0, 5.0], [6.0, 5.0], [5.0, 7.0], [9.5, 9.5]]]))
    r = env.sensing_range
    expected0 = [0.0, 0.0, 1 / r, 0.0, 1.0, 0.0, 2 / r, 1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(obs[0, 0], torch.tensor(expected0))
    # pursuer 1 sees both evaders: (5, 7) at distance sqrt(5), (9.5, 9.5) at sqrt(32.5) > 3: only the first
    expected1 = [0.2, 0.0, -1 / r, 0.0, 1.0, -1 / r, 2 / r, 1.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(obs[0, 1], torch.tensor(expected1))
    assert env.global_state.shape == (1, 5)
    torch.testing.assert_close(env.global_state[0, :4], torch.tensor([0.1, 0.0, 0.45, 0.65]))


def test_a_capture_rewards_the_capturers_and_the_evader_reappears():
    env = placed(num_pursuers=2, num_evaders=1)
    # the evader at (5, 5.3) is within 0.5 m of pursuer 0 after it moves +y (to 5, 5.1); pursuer 1 is far away
    env.set_state(torch.tensor([[[5.0, 5.0], [1.0, 1.0], [5.0, 5.3]]]))
    _, reward, _, _, info = env.step(torch.tensor([[4, 0]]))
    # the evader fled 0.07 m first, to (5, 5.37): still 0.27 m from the pursuer at (5, 5.1), so it is captured and
    # reappears elsewhere
    evader = env.get_state()[0, 2]
    assert (evader - torch.tensor([5.0, 5.37])).norm() > 1e-3
    agent_reward = info["agent_reward"][0]
    # the capture, minus 0.1 x the distance to the nearest evader sensed after it reappeared, over 3 m (1 if none)
    distance = (evader - torch.tensor([5.0, 5.1])).norm().item()
    assert agent_reward[0] == pytest.approx(10.0 - 0.1 * (distance / 3.0 if distance <= 3.0 else 1.0), abs=1e-4)
    assert agent_reward[1] == pytest.approx(-0.1)  # pursuer 1 captured nothing and senses nothing
    assert reward[0] == pytest.approx(agent_reward.mean())
    assert env.global_state[0, 4] == 1.0  # one capture so far, per evader


def test_every_pursuer_within_the_radius_shares_a_capture():
    env = placed(num_pursuers=3, num_evaders=1, capture_reward=10.0, distance_penalty=0.0)
    # pursuers at 0.3 m and 0.4 m of the evader (which flees 0.07 m first, away from both), the third 5 m away
    env.set_state(torch.tensor([[[5.0, 4.7], [5.4, 5.0], [1.0, 1.0], [5.0, 5.0]]]))
    _, _, _, _, info = env.step(torch.zeros(1, 3, dtype=torch.long))
    assert info["agent_reward"][0].tolist() == [10.0, 10.0, 0.0]
    assert env.global_state[0, 4] == 1.0  # one evader captured once, however many captured it


def test_evaders_flee_the_sensed_pursuers_and_slide_along_walls():
    env = placed(num_pursuers=1, num_evaders=2, targets=1)
    # evader 0 at (5, 5) with the pursuer 1 m to its left: it flees +x by 0.07 m; evader 1 by the left wall at
    # (0.5, 5), with the pursuer at ... is out of range, so it stands still
    env.set_state(torch.tensor([[[4.0, 5.0], [5.0, 5.0], [9.5, 1.0]]]))
    env.step(torch.tensor([[0]]))
    state = env.get_state()[0]
    torch.testing.assert_close(state[1], torch.tensor([5.07, 5.0]))
    torch.testing.assert_close(state[2], torch.tensor([9.5, 1.0]))
    # against the right wall, with the pursuer to its left and below: the outward (+x) part is dropped
    env.set_state(torch.tensor([[[8.0, 4.0], [9.5, 5.0], [1.0, 9.0]]]))
    env.step(torch.tensor([[0]]))
    torch.testing.assert_close(env.get_state()[0, 1], torch.tensor([9.5, 5.07]))


def test_episodes_report_captures_per_evader_and_the_state_round_trips():
    env = rl_suite.make("Pursuit-v0", num_envs=4, seed=1, num_pursuers=20, capture_radius=1.0, max_episode_steps=30)
    env.reset(seed=1)
    torch.manual_seed(0)
    for step in range(30):
        captures = env.global_state[:, 4].clone()  # so far, per evader
        _, _, _, truncated, info = env.step(torch.randint(0, 5, (4, 20)))
        assert truncated.all() == (step == 29)
    metric = info["episode_metrics"]["captures_per_evader"]
    assert info["done"].all() and (metric >= captures).all() and metric.sum() > 0
    assert (env.global_state[:, 4] == 0).all()  # the new episodes start counting from zero
    state = env.state_dict()
    a = [env.step(torch.ones(4, 20, dtype=torch.long))[0].clone() for _ in range(3)]
    env.load_state_dict(state)
    b = [env.step(torch.ones(4, 20, dtype=torch.long))[0].clone() for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_sizes_do_not_change_with_the_number_of_pursuers():
    for p in (1, 10, 1000):
        env = Pursuit(2, num_pursuers=p, seed=0)
        obs = env.reset()
        assert obs.shape == (2, p, 26) and env.global_state_space.shape == (5,)
        assert env.num_evaders == max(1, p // 4)
        obs, reward, _, _, info = env.step(torch.zeros(2, p, dtype=torch.long))
        assert obs.isfinite().all() and reward.shape == (2,) and info["agent_reward"].shape == (2, p)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"num_pursuers": 0}, "num_pursuers must be an integer >= 1, got 0"),
        ({"num_evaders": 0}, "num_evaders must be an integer >= 1, got 0"),
        ({"num_pursuers": 2.5}, "num_pursuers must be an integer >= 1, got 2.5"),
        ({"sensing_range": -1.0}, "sensing_range must be positive, got -1.0"),
        ({"evader_speed": -0.1}, "evader_speed must be non-negative, got -0.1"),
    ],
)
def test_bad_settings(options, message):
    with pytest.raises(ValueError, match=message):
        Pursuit(1, **options)


def test_wrong_actions_get_clear_errors():
    env = Pursuit(2, num_pursuers=5, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"expects actions for 5 agents, shape \(2, 5\)"):
        env.step(torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="expects integer actions for MultiDiscrete"):
        env.step(torch.zeros(2, 5))  # continuous actions for the discrete task
    continuous = Pursuit(2, num_pursuers=5, seed=0, continuous_actions=True)
    continuous.reset()
    with pytest.raises(TypeError, match="expects floating-point actions"):
        continuous.step(torch.zeros(2, 5, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"expects actions of shape \(2, 5, 2\)"):
        continuous.step(torch.zeros(2, 5))


def test_a_mappo_run_reports_captures_per_evader_from_training_and_evaluation(tmp_path):
    """The team collector sums the task's episode metric as the single-agent one does (it once ignored it, and the
    runner's log then failed with a KeyError at the first window in which an episode ended)."""
    import json

    from rl_suite.agents import MAPPO

    env = rl_suite.make("Pursuit-v0", num_envs=4, seed=0, num_pursuers=8, max_episode_steps=10)
    agent = MAPPO.for_env(env, MAPPO.Config(n_steps=10, epochs=1, minibatches=1, hidden=(16,)))
    agent.learn(
        env, total_steps=120, run_dir=tmp_path / "run", log_every_steps=40, eval_every_steps=80, eval_episodes=2,
        progress=False, env_kwargs=dict(num_pursuers=8, max_episode_steps=10),
    )  # fmt: skip
    rows = json.loads((tmp_path / "run" / "summary.json").read_text())["evaluations"]
    assert rows and all(row["rollout_captures_per_evader"] >= 0 and row["captures_per_evader"] >= 0 for row in rows)


@pytest.mark.parametrize("k", [1, 3, 4, 8])
def test_the_selection_network_returns_the_k_smallest_in_order(k):
    from rl_suite.envs.multiagent.pursuit import rows_for, smallest_rows

    generator = torch.Generator().manual_seed(k)
    for rows in (rows_for(k), 4 * rows_for(k), 40):
        keys = torch.randint(0, 50, (rows, 300), generator=generator, dtype=torch.int32)  # many ties
        if rows % rows_for(k):
            with pytest.raises(ValueError, match="multiple of"):
                smallest_rows(list(keys.unbind(0)), k)
            continue
        chosen = torch.stack(smallest_rows(list(keys.unbind(0)), k))
        assert torch.equal(chosen, keys.sort(0).values[:k])


@pytest.mark.parametrize("capacity", [3, 4])  # 27 candidates (the selection pads them to 28) and 36
def test_the_grid_pads_its_candidates_and_leaves_fewer_than_k_points_as_empty_slots(capacity):
    torch.manual_seed(1)
    side, radius = 30.0, 3.0
    points = torch.rand(2, 60, 2) * side  # 0.6 points per cell: no cell holds more than 3
    grid = CellGrid(2, side, radius, capacity, torch.device("cpu"))
    grid.build(points)
    assert not grid.all_pairs
    relative, sensed, dist2, _ = grid.query(points, 8, radius, exclude_self=True)  # often fewer than 8 within range
    expected = all_pairs_nearest(points, points, 8, radius, exclude_self=True)
    torch.testing.assert_close(dist2, expected)
    assert torch.equal(sensed, expected.isfinite()) and (~sensed).any()
    assert torch.equal(relative[~sensed], torch.zeros_like(relative[~sensed]))
    few = CellGrid(1, side, radius, capacity, torch.device("cpu"))  # all pairs with fewer points than k
    few.build(points[:1, :3])
    _, sensed, dist2, index = few.query(points[:1, :3], 4, 100.0, exclude_self=True)
    assert sensed[..., :2].all() and not sensed[..., 2:].any() and dist2[..., 2:].isinf().all()
    assert torch.equal(index[..., :2].sort(-1).values, torch.tensor([[[1, 2], [0, 2], [0, 1]]]))


def test_the_compiled_step_equals_the_eager_one():
    """The whole step compiles as one graph (static shapes: the grid's build writes a spill column rather than
    dropping points by mask), and gives eager's observations, rewards and states to rounding (not bit for bit even in
    exact mode: inductor's vectorised code sums the team's rewards in another order, for one)."""
    from rl_suite.compiled import compile_env_step

    torch._dynamo.reset()
    options = dict(num_envs=3, num_pursuers=48, seed=5)  # 9 * 4 slots < 48 + 12 points: the grid path
    eager, compiled = rl_suite.make("Pursuit-v0", **options), rl_suite.make("Pursuit-v0", **options)
    eager.reset(seed=5), compiled.reset(seed=5)
    step = compile_env_step(compiled)
    generator = torch.Generator().manual_seed(0)
    for t in range(110):  # past the 100-step time limit: the resets too
        actions = torch.randint(0, 5, (3, 48), generator=generator)
        expected, got = eager.step(actions), step(actions)
        for a, b in zip(expected[:4], got[:4], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m, t=t: f"step {t}: {m}")
        torch.testing.assert_close(expected[4]["agent_reward"], got[4]["agent_reward"], rtol=1e-5, atol=1e-5)
    assert step.compiled.compiled is not None, step.compiled.fallback_reason
    torch.testing.assert_close(eager.get_state(), compiled.get_state(), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
