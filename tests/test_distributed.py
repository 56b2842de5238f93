"""Data-parallel training under torchrun (rl_suite/distributed.py): two gloo ranks on the CPU.

Each multi-process test launches ``python -m torch.distributed.run --nproc_per_node 2`` as a subprocess, either on the
real command line (``-m rl_suite train ...``) or on a small worker script that wraps PPO's ``update`` to record what
each rank holds after every update.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch

from rl_suite import distributed
from rl_suite.networks import RunningNorm

TRAIN = ["train", "ppo", "CartPole-v1", "--num-envs", "8", "--seed", "3"]
RESUME = ["train", "ppo", "CartPole-v1", "--set", "progress=false", "--resume"]
SETTINGS = ["progress=false", "eval_episodes=8", "log_every_steps=512"]

# Records, after every PPO update, a digest of all the agent's tensors (weights and normalisers), the normaliser's
# statistics and the rollout's observations; with "die", rank 1 exits abruptly after its first update.
WORKER = """
import hashlib, os, sys
import torch
from rl_suite.agents import ppo

out, mode, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
rank = int(os.environ["RANK"])
records, original = [], ppo.PPO.update

def update(self, buffer, progress=0.0):
    obs = buffer.data["obs"].clone()
    metrics = original(self, buffer, progress)
    if mode == "die" and rank == 1:
        os._exit(1)
    tensors = [t for m in self.modules.values() for t in m.state_dict().values()]
    digest = hashlib.sha256(b"".join(t.cpu().numpy().tobytes() for t in tensors)).hexdigest()
    norm = self.normalizer
    records.append({"obs": obs, "digest": digest, "mean": norm.mean.clone(), "var": norm.var.clone(),
                    "count": norm.count.clone(), "return_count": self.return_scale.stats.count.clone(), "lr": self.lr})
    torch.save(records, os.path.join(out, f"rank{rank}.pt"))
    return metrics

ppo.PPO.update = update
from rl_suite.cli import main
sys.exit(main(argv))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args, cwd, timeout: float = 120) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    command += ["--master_addr", "127.0.0.1", "--master_port", str(free_port()), *map(str, args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None), env.pop("WORLD_SIZE", None)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def checkpoint(run_dir, steps: int) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step_{steps:012d}.pt", weights_only=True)


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """A 2-rank PPO run through the real command line: 4096 env steps (2 x 8 envs x 32 steps x 8 iterations),
    checkpointed at 2048 and at the end."""
    root = tmp_path_factory.mktemp("ddp")
    run_dir = root / "run"
    result = torchrun(
        "-m", "rl_suite", *TRAIN, "--total-steps", 4096, "--run-dir", run_dir,
        "--set", *SETTINGS, "checkpoint_every_steps=2048", "eval_every_steps=2048",
        cwd=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir, result


def test_torchrun_cli_rank_0_alone_logs_and_checkpoints(two_rank_run):
    run_dir, result = two_rank_run
    assert result.stdout.count("training ppo on CartPole-v1 with 8 envs on cpu on each of 2 ranks") == 1
    assert len(list(run_dir.glob("events.out.tfevents*"))) == 1
    names = sorted(p.name for p in run_dir.iterdir())
    assert [name for name in names if not name.startswith("events.out")] == [
        "checkpoints",
        "config.yaml",
        "summary.json",
    ]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "step_000000002048.pt",
        "step_000000004096.pt",
    ]
    summary = (run_dir / "summary.json").read_text()
    assert '"env_steps": 4096' in summary  # global steps: both ranks' envs
    assert "world_size: 2" in (run_dir / "config.yaml").read_text()
    state = checkpoint(run_dir, 4096)
    assert state["world_size"] == 2 and len(state["ranks"]) == 1
    # Rank 1's own envs were gathered into rank 0's checkpoint: a different random stream, other states.
    assert not torch.equal(state["collector"]["obs"], state["ranks"][0]["collector"]["obs"])
    assert not torch.equal(state["rng"]["torch"], state["ranks"][0]["rng"]["torch"])


def test_resume_on_the_same_world_size_is_exact(two_rank_run, tmp_path):
    run_dir, _ = two_rank_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    (resumed / "checkpoints" / "step_000000004096.pt").unlink()
    result = torchrun("-m", "rl_suite", *RESUME, resumed, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    a, b = checkpoint(run_dir, 4096), checkpoint(resumed, 4096)
    for name, module in a["agent"]["modules"].items():
        for key, tensor in module.items():
            assert torch.equal(tensor, b["agent"]["modules"][name][key]), (name, key)
    for rank_a, rank_b in zip([a, *a["ranks"]], [b, *b["ranks"]], strict=True):
        assert torch.equal(rank_a["collector"]["obs"], rank_b["collector"]["obs"])
        assert torch.equal(rank_a["rng"]["torch"], rank_b["rng"]["torch"])


def test_resume_on_another_world_size_restarts_the_envs_with_a_warning(two_rank_run, tmp_path):
    from rl_suite.cli import main

    run_dir, _ = two_rank_run
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    argv = [*RESUME, str(resumed), "--total-steps", "4352"]
    with pytest.warns(UserWarning, match=r"written by a run of 2 rank\(s\) and this one has 1.*environments restart"):
        assert main(argv) == 0
    state = checkpoint(resumed, 4352)
    assert state["world_size"] == 1 and state["ranks"] == []
    assert state["runner"]["env_steps"] == 4352  # 4096 from two ranks, then one iteration (8 x 32) of one rank


def test_parameters_stay_identical_and_normalisers_merge_all_ranks(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    result = torchrun(
        "worker.py", tmp_path, "record", *TRAIN, "--total-steps", 2048, "--run-dir", tmp_path / "run",
        "--set", *SETTINGS, "eval_every_steps=100000", "minibatches=4", "epochs=4",
        "target_kl=0.02", "adaptive_kl=0.01", "scale_rewards=true",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 4  # 2048 / (2 ranks x 8 envs x 32 steps)
    reference = RunningNorm((4,))
    for step, (zero, one) in enumerate(zip(*ranks, strict=True)):
        assert zero["digest"] == one["digest"], f"the ranks' agents differ after update {step}"
        assert zero["lr"] == one["lr"]
        assert not torch.equal(zero["obs"], one["obs"])  # each rank collected its own data
        reference.update(torch.cat((zero["obs"], one["obs"])))
        torch.testing.assert_close(zero["mean"], reference.mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(zero["var"], reference.var, rtol=1e-12, atol=1e-12)
        assert zero["count"].item() == reference.count.item() == (step + 1) * 2 * 8 * 32
        assert zero["return_count"].item() == (step + 1) * 2 * 8 * 32  # the return normaliser merges both ranks


# Updates a normaliser on two ranks with batches that are empty on one rank or on both (MAPPO's alive agents).
EMPTY_BATCH_WORKER = """
import sys
import torch
from rl_suite import distributed
from rl_suite.networks import RunningNorm

distributed.init("cpu", timeout_s=30)  # a rank that skipped the all-gather would leave the other waiting: an error
rank, data = distributed.rank(), torch.arange(24.0, dtype=torch.float64).reshape(12, 2) ** 1.5
sizes = [(0, 0), (0, 5), (3, 4), (0, 0), (0, 0)]  # rows per rank at each update; empty everywhere first and last
norm, start, states = RunningNorm((2,)), 0, []
for rows in sizes:
    mine = data[start + sum(rows[:rank]) : start + sum(rows[: rank + 1])]
    start += sum(rows)
    norm.update(mine)
    states.append((norm.mean.clone(), norm.var.clone(), norm.count.clone()))
torch.save(states, f"{sys.argv[1]}/rank{rank}.pt")
distributed.shutdown()
"""


def test_normalisers_merge_ranks_whose_batches_are_empty(tmp_path):
    (tmp_path / "worker.py").write_text(EMPTY_BATCH_WORKER)
    result = torchrun("worker.py", tmp_path, cwd=tmp_path, timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    data = torch.arange(24.0, dtype=torch.float64).reshape(12, 2) ** 1.5
    seen = [0, 5, 12, 12, 12]  # rows merged, over both ranks, after each update
    for step, ((mean, var, count), other) in enumerate(zip(*ranks, strict=True)):
        rows = data[: seen[step]]
        if len(rows):
            torch.testing.assert_close(mean, rows.mean(0), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(var, rows.var(0, unbiased=False), rtol=1e-12, atol=1e-12)
        else:  # nothing seen anywhere yet: the initial statistics, not 0 / 0
            torch.testing.assert_close(mean, torch.zeros(2, dtype=torch.float64))
            torch.testing.assert_close(var, torch.ones(2, dtype=torch.float64))
        assert count.item() == len(rows)
        assert all(torch.equal(a, b) for a, b in zip(other, (mean, var, count), strict=True)), f"update {step}"


def test_a_rank_that_dies_ends_the_run_with_an_error(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    started = time.monotonic()
    result = torchrun(
        "worker.py", tmp_path, "die", *TRAIN, "--total-steps", 100_000, "--run-dir", tmp_path / "run",
        "--set", *SETTINGS,
        cwd=tmp_path, timeout=90,
    )  # fmt: skip
    assert result.returncode != 0
    assert time.monotonic() - started < 60


def test_single_process_is_a_no_op():
    assert not distributed.launched() and distributed.world_size() == 1 and distributed.is_main()
    assert distributed.rank_seed(7) == 7
    layer = torch.nn.Linear(3, 2)
    layer(torch.ones(1, 3)).sum().backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    distributed.average_gradients(layer.parameters())
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, layer.parameters(), strict=True))
    assert distributed.broadcast_flag(True) and distributed.all_true(torch.tensor(True))
    assert distributed.mean(torch.tensor(0.25)) == 0.25
    assert distributed.gather_to_main({"a": 1}) == [{"a": 1}]


def test_agents_without_distributed_support_are_refused(monkeypatch, tmp_path):
    from rl_suite.agents import PQL
    from rl_suite.registry import make
    from rl_suite.runner import RunConfig, Runner

    env = make("Pendulum-v1", num_envs=2)
    agent = PQL.for_env(env)
    monkeypatch.setattr(distributed, "_world_size", 2)  # as if launched by torchrun with two ranks
    try:
        with pytest.raises(ValueError, match=r"pql does not train under torchrun \(world size 2\)"):
            Runner(agent, env, RunConfig(algo="pql", env_id="Pendulum-v1", num_envs=2), run_dir=tmp_path)
    finally:
        agent.close()
