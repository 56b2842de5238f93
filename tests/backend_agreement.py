"""A check shared by the legged tasks' backend tests (tests/test_legged.py, tests/test_terrain.py)."""

from __future__ import annotations

import torch


def worst_one_step_differences(cpu, warp, steps: int, seed: int = 0) -> dict[str, float]:
    """The largest differences between the CPU backend's and MuJoCo Warp's observations, critic observations and
    rewards over ``steps`` of N(0, 0.5) actions, each step started on Warp from the CPU env's state (so that the
    errors compared are one step's, not chaos compounded). Terminations and truncations must agree exactly."""
    g = torch.Generator().manual_seed(seed)
    worst = {"obs": 0.0, "critic_obs": 0.0, "reward": 0.0}
    actions_shape = (cpu.num_envs, *cpu.action_space.shape)
    for _ in range(steps):
        warp.load_state_dict(cpu.state_dict())
        actions = 0.5 * torch.randn(actions_shape, generator=g)
        expected, got = cpu.step(actions), warp.step(actions)
        worst["obs"] = max(worst["obs"], (expected[0] - got[0]).abs().max().item())
        worst["critic_obs"] = max(
            worst["critic_obs"], (expected[4]["critic_obs"] - got[4]["critic_obs"]).abs().max().item()
        )
        worst["reward"] = max(worst["reward"], (expected[1] - got[1]).abs().max().item())
        assert torch.equal(expected[2], got[2]) and torch.equal(expected[3], got[3])
    return worst
