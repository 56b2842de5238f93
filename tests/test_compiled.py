"""The compiled hot loop (rl_suite.compiled) in exact mode equals the eager one, bitwise, on the CPU; without exact mode
compiling changes nothing for the rest of the process; the CUDA graph path needs CUDA.

Compiling takes seconds per graph on a small CPU, so the tests compile few graphs on small shapes. N = 37 is odd on
purpose: the vectorised kernels then run their scalar tails too.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import rl_suite
from rl_suite.agents import PPO
from rl_suite.collector import Collector
from rl_suite.compiled import CompiledCollector, GraphCollector, WholeGraphOrEager, compile_env_step, make_collector
from rl_suite.envs.classic.cartpole import CartPole

N = 37
TASKS = ["CartPole-v1", "Pendulum-v1"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # no recompile limit carried over from other tests
    yield
    torch._dynamo.reset()


def random_actions(env, steps: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    space = env.action_space
    if hasattr(space, "n"):
        return [torch.randint(0, int(space.n), (env.num_envs,), generator=generator) for _ in range(steps)]
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    return [low + (high - low) * torch.rand((env.num_envs, *space.shape), generator=generator) for _ in range(steps)]


def flat(outputs) -> list[torch.Tensor]:
    obs, reward, terminated, truncated, info = outputs
    return [obs, reward, terminated, truncated, *(info[k] for k in sorted(info))]


@pytest.mark.parametrize("env_id", TASKS)
def test_compiled_step_equals_eager_under_random_actions(env_id):
    eager_env, compiled_env = (rl_suite.make(env_id, num_envs=N, seed=3) for _ in range(2))
    step = compile_env_step(compiled_env, exact=True)
    eager_env.reset(seed=3), compiled_env.reset(seed=3)
    ended = 0
    for t, actions in enumerate(random_actions(eager_env, 300)):
        outputs = eager_env.step(actions)
        ended += int(outputs[4]["done"].sum())
        for a, b in zip(flat(outputs), flat(step(actions)), strict=True):
            assert torch.equal(a, b), f"step {t} of {env_id}: compiled differs from eager"
    assert step.compiled.compiled is not None, step.compiled.fallback_reason  # it really ran compiled
    assert ended >= N  # auto-resets happened (Pendulum: every environment truncates at step 200)
    assert torch.equal(eager_env.get_state(), compiled_env.get_state())
    assert torch.equal(eager_env.rng.counter, compiled_env.rng.counter)


@pytest.mark.parametrize("env_id", TASKS)
def test_compiled_collector_equals_eager_with_ppo(env_id):
    """PPO's act and the env step compiled exactly: the same actions, rollouts and episode statistics, over 300
    steps."""

    def rollouts(collector_type):
        torch.manual_seed(0)
        env = rl_suite.make(env_id, num_envs=N, seed=5)
        agent = PPO.for_env(env, PPO.Config(n_steps=100))
        buffer = agent.make_buffer(N)
        collector = collector_type(env, agent, buffer)
        data = []
        for _ in range(3):
            collector.collect(100)
            data.append({name: value.clone() for name, value in buffer.data.items()})
            agent.normalizer.update(buffer.data["obs"])  # the policy moves between rollouts, as in training
            buffer.clear()
        return data, collector.stats.totals.clone(), collector

    expected, expected_stats, _ = rollouts(Collector)
    got, got_stats, collector = rollouts(lambda env, agent, buffer: CompiledCollector(env, agent, buffer, exact=True))
    assert collector.act_fn.compiled is not None, collector.act_fn.fallback_reason
    assert collector.step_fn.compiled.compiled is not None, collector.step_fn.compiled.fallback_reason
    for i, (a, b) in enumerate(zip(expected, got, strict=True)):
        for name in a:
            assert torch.equal(a[name], b[name]), f"rollout {i}, field {name}: compiled differs from eager"
    assert expected_stats[0] >= N  # episodes ended and were reset
    assert torch.equal(expected_stats, got_stats)


def test_a_graph_break_falls_back_to_eager_with_a_warning():
    def breaks(x):
        if x.sum() > 0:  # a branch on a tensor's value: the host must read it, a graph break
            return x * 3
        return x

    fn = WholeGraphOrEager(breaks, "breaks")
    x = torch.ones(3)
    with pytest.warns(UserWarning, match="could not compile breaks as one graph, so it runs eagerly"):
        assert torch.equal(fn(x), x * 3)
    assert fn.compiled is None and fn.fallback_reason


def test_envs_that_override_step_keep_their_eager_step():
    class Wrapped(CartPole):
        def step(self, actions):
            return super().step(actions)

    env = Wrapped(2)
    with pytest.warns(UserWarning, match="Wrapped overrides step, so compile mode runs it eagerly"):
        assert compile_env_step(env) == env.step


def test_modes_and_their_errors():
    env = CartPole(4)
    agent = PPO.for_env(env)
    assert type(make_collector(env, agent, agent.make_buffer(4), "none")) is Collector
    with pytest.raises(ValueError, match="unknown compile mode 'fast'; choose one of"):
        make_collector(env, agent, agent.make_buffer(4), "fast")
    with pytest.raises(
        ValueError, match="the cuda_graph mode captures CUDA graphs and needs a CUDA device; the env is on cpu"
    ):
        make_collector(env, agent, agent.make_buffer(4), "cuda_graph")
    with pytest.raises(
        ValueError,
        match="compile_exact makes compile='compile' round as eager does on the CPU; it does not apply to "
        "compile='none' on cpu",
    ):
        make_collector(env, agent, agent.make_buffer(4), "none", exact=True)


# Builds a compiled collector through the runner (exact or not, as argv[1] says), collects, and prints what changed
# in the process's compiler state: inductor's lowering table and dynamo's and inductor's configs.
COMPILER_STATE_CHANGES = """
import json, sys, tempfile, torch
from torch._inductor import config as inductor_config, lowering
import rl_suite
from rl_suite.agents import PPO
from rl_suite.runner import RunConfig, Runner

def state():
    return dict(lowering.lowerings), torch._dynamo.config.get_config_copy(), inductor_config.get_config_copy()

before = state()
env = rl_suite.make("Pendulum-v1", num_envs=4, seed=0)
config = RunConfig(compile="compile", compile_exact=sys.argv[1] == "exact", eval_episodes=0, progress=False)
collector = Runner(PPO.for_env(env), env, config, run_dir=tempfile.mkdtemp()).collector
collector.collect(2)
assert collector.act_fn.compiled is not None and collector.step_fn.compiled.compiled is not None  # it compiled
after = state()
changed = [str(op) for op in before[0] if after[0][op] is not before[0][op]]
changed += [f"dynamo.{key}" for key in before[1] if after[1][key] != before[1][key]]
changed += [f"inductor.{key}" for key in before[2] if after[2][key] != before[2][key]]
print(json.dumps(changed))
"""


@pytest.mark.parametrize("mode", ["default", "exact"])
def test_only_exact_mode_changes_how_the_process_compiles(mode):
    """Without compile_exact, compiling the hot loop leaves the lowerings and configs that other code compiles with
    as they were; with it, the documented ones change. In a fresh process: exact mode, once on, stays on."""
    result = subprocess.run(
        [sys.executable, "-c", COMPILER_STATE_CHANGES, mode], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    changed = json.loads(result.stdout.strip().splitlines()[-1])
    if mode == "default":
        assert changed == []
    else:
        assert {"aten.exp.default", "aten.remainder.Tensor", "aten.add.Tensor", "aten.addcmul.default"} <= set(changed)
        assert {"dynamo.enable_dynamo_decompositions", "inductor.fx_graph_cache"} <= set(changed)


def test_exact_mode_warns_once_on_a_torch_it_was_not_checked_on():
    code = (
        "import warnings, torch\n"
        "torch.__version__ = '2.99.0'\n"
        "from rl_suite.exact_compile import enable_exact_cpu_numerics\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    enable_exact_cpu_numerics(), enable_exact_cpu_numerics()\n"
        "print(len(caught), caught[0].message)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "1 compile_exact replaces private inductor internals and was checked on torch 2.13 only; with torch 2.99.0 "
        "compiled runs may not equal eager ones bitwise"
    )


def test_the_runner_and_the_cli_pick_the_collector_by_the_compile_setting(tmp_path):
    from rl_suite.cli import build_parser
    from rl_suite.runner import RunConfig, Runner

    env = CartPole(4)
    agent = PPO.for_env(env)
    runner = Runner(agent, env, RunConfig(compile="compile", eval_episodes=0, progress=False), run_dir=tmp_path)
    assert type(runner.collector) is CompiledCollector
    parse = build_parser().parse_args
    assert parse(["train", "ppo", "CartPole-v1", "--compile", "compile", "--compile-exact"]).compile_exact is True
    assert parse(["train", "ppo", "CartPole-v1"]).compile_exact is None  # unset: the YAML or --set decides
    skirmish = rl_suite.make("Skirmish-3m-v0", num_envs=2)
    from rl_suite.agents.mappo import MAPPO

    team = Runner(MAPPO.for_env(skirmish), skirmish, RunConfig(compile="compile", eval_episodes=0), run_dir=tmp_path)
    assert isinstance(team.collector.step_fn.compiled, WholeGraphOrEager)  # a team's env step compiles too
    assert isinstance(team.collector.act_fn, WholeGraphOrEager)
    with pytest.raises(ValueError, match="compile='cuda_graph' supports single-agent envs only"):
        Runner(MAPPO.for_env(skirmish), skirmish, RunConfig(compile="cuda_graph", eval_episodes=0), run_dir=tmp_path)


def test_categorical_sampling_draws_what_multinomial_draws():
    """``Categorical.sample`` avoids torch.multinomial's host sync; it must keep its samples and RNG use."""
    from rl_suite.networks import Categorical

    logits = torch.randn(4097, 6).log_softmax(-1)
    torch.manual_seed(3)
    expected = torch.multinomial(logits.exp(), 1).squeeze(-1)
    state = torch.get_rng_state()
    torch.manual_seed(3)
    assert torch.equal(Categorical(logits).sample(), expected)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("compiled", [False, True])
def test_cuda_graph_collect_equals_eager(compiled):
    """Replays of the captured rollout give what the eager collector gives on the same device (Pendulum: PPO's
    Gaussian policy samples without host syncs)."""

    def rollouts(make):
        torch.manual_seed(0)
        env = rl_suite.make("Pendulum-v1", num_envs=256, device="cuda", seed=5)
        agent = PPO.for_env(env, PPO.Config(n_steps=64), device="cuda")
        buffer = agent.make_buffer(256)
        collector = make(env, agent, buffer)
        data = []
        for _ in range(4):  # the first collect runs eagerly and captures; the others replay
            collector.collect(64)
            data.append({name: value.clone() for name, value in buffer.data.items()})
            agent.normalizer.update(buffer.data["obs"])
            buffer.clear()
        return data, collector.stats.totals.clone(), collector

    expected, expected_stats, _ = rollouts(Collector)
    got, got_stats, collector = rollouts(lambda env, agent, buffer: GraphCollector(env, agent, buffer, compiled))
    assert collector.graph is not None
    if compiled:
        # Inductor's CUDA kernels round differently from eager ones, so only what does not depend on rounding is
        # compared: every environment truncated once (at 200 steps) in the 256 collected.
        assert expected_stats[0] == got_stats[0] == 256
        assert all(torch.isfinite(rollout["obs"]).all() for rollout in got)
        return
    for i, (a, b) in enumerate(zip(expected, got, strict=True)):
        for name in a:
            assert torch.equal(a[name], b[name]), f"rollout {i}, field {name}: the CUDA graph differs from eager"
    assert torch.equal(expected_stats, got_stats)
