"""The agent contract: every registered algorithm honours its base's signatures (``Agent``, or ``MultiAgentAgent`` for
the agents of a team), and an agent written to those signatures alone trains under the runner and is evaluated, through
the one collector loop that every mode and kind of agent shares."""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np
import pytest
import torch
from multiagent_toy import Rendezvous

import rl_suite
from rl_suite.agent import Agent, MultiAgentAgent
from rl_suite.buffers import RolloutBuffer, transition_spec
from rl_suite.collector import Collector
from rl_suite.deploy import load_policy
from rl_suite.deploy.export import export_policy
from rl_suite.registry import ALGORITHMS, load_algorithm
from rl_suite.runner import RunConfig, Runner, evaluate


def declared(base: type) -> dict[str, object]:
    """What ``base`` (and the bases above it, up to ``Agent``) declares to the rest of the suite: its constructor and
    its public methods and properties."""
    names = {}
    for cls in reversed(base.__mro__[: base.__mro__.index(Agent) + 1]):
        names.update({k: v for k, v in vars(cls).items() if k == "__init__" or not k.startswith("_")})
    return {k: v for k, v in names.items() if callable(v) or isinstance(v, (property, classmethod, staticmethod))}


def signature(member) -> inspect.Signature:
    """The signature without annotations (they are documentation; names, kinds and defaults are the contract)."""
    function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
    sig = inspect.signature(function)
    return sig.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )


def mismatches(algo: type, base: type) -> list[str]:
    found = []
    for name, member in declared(base).items():
        own = inspect.getattr_static(algo, name)
        if isinstance(member, property):
            if not isinstance(own, property):
                found.append(f"{name} is a property in {base.__name__}, not in {algo.__name__}")
            continue
        if type(own) is not type(member):
            found.append(f"{name} is a {type(member).__name__} in {base.__name__}, a {type(own).__name__} here")
        elif signature(own) != signature(member):
            found.append(f"{name}{signature(own)} differs from {base.__name__}.{name}{signature(member)}")
    return found


def implemented(algo: type, base: type) -> list[str]:
    """The verbs the base leaves to each algorithm that ``algo`` does not implement."""
    verbs = ["steps_per_iteration", "make_buffer", "act", "update", "inference_policy"]
    verbs += ["initial_memory"] if base is MultiAgentAgent else []
    return [verb for verb in verbs if inspect.getattr_static(algo, verb) is inspect.getattr_static(base, verb)]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_registered_algorithm_matches_its_base(name):
    algo = load_algorithm(name)
    base = MultiAgentAgent if issubclass(algo, MultiAgentAgent) else Agent
    assert mismatches(algo, base) == []
    assert implemented(algo, base) == []


def test_the_check_finds_a_signature_that_differs_and_a_verb_left_out():
    class Renamed(Agent):
        def act(self, observation, deterministic=False):  # renamed: the runner passes obs positionally, others not
            return observation, {}

        def update(self, buffer):  # no progress: the runner passes it
            return {}

        @staticmethod
        def counters():
            return {}

    found = mismatches(Renamed, Agent)
    assert len(found) == 3 and found[0].startswith("act(self, observation, deterministic=False) differs")
    assert "update(self, buffer) differs from Agent.update(self, buffer, progress=0.0)" in found[1]
    assert found[2] == "counters is a function in Agent, a staticmethod here"
    assert implemented(Renamed, Agent) == ["steps_per_iteration", "make_buffer", "inference_policy"]


# -- agents written to the base's signatures alone --------------------------------------------------------------


class ConstantAgent(Agent):
    """Always action 0; its update counts the calls and records what the runner passed."""

    name = "constant"
    Config = RunConfig  # any frozen dataclass: this agent has no hyperparameters of its own

    def __init__(self, observation_space, action_space, config=None, device="cpu", **overrides):
        super().__init__(observation_space, action_space, config, device, **overrides)
        self.calls: list[tuple] = []

    @property
    def steps_per_iteration(self) -> int:
        return 4

    def make_buffer(self, num_envs, max_episode_steps=None):
        self.calls.append(("make_buffer", num_envs, max_episode_steps))
        spec = transition_spec(self.observation_space.shape, self.action_space.shape, torch.int64, {})
        return RolloutBuffer(self.steps_per_iteration, num_envs, spec, self.device)

    def act(self, obs, deterministic=False):
        return torch.zeros(obs.shape[:1] + self.action_space.shape, dtype=torch.int64, device=obs.device), {}

    def update(self, buffer, progress=0.0):
        self.calls.append(("update", buffer.step, progress))
        buffer.clear()
        return {"progress": torch.tensor(progress)}


class ConstantTeam(ConstantAgent, MultiAgentAgent):
    """``ConstantAgent`` as a team: each agent's first available action, and a step counter as memory, which it
    checks against the episode step that Rendezvous's global state shows (step / 10): a memory not zeroed at an
    episode's end, or inputs not moved on, count as mismatches."""

    name = "constant-team"
    action_space_types = (gym.spaces.MultiDiscrete,)

    def __init__(
        self, observation_space, action_space, config=None, device="cpu", global_state_space=None, **overrides
    ):
        MultiAgentAgent.__init__(self, observation_space, action_space, config, device, global_state_space, **overrides)
        self.calls = []
        self.steps_seen, self.mismatches = [], 0

    def initial_memory(self, num_envs):
        return {"steps": torch.zeros(num_envs, device=self.device)}

    def act(self, inputs, memory, deterministic=False):
        episode_step = (inputs["global_state"][:, -1] * 10).round()
        self.mismatches += int((memory["steps"] != episode_step).sum())
        self.steps_seen.append(int(episode_step.max()))
        actions = inputs["avail_actions"].int().argmax(-1)
        return actions, {}, {"steps": memory["steps"] + 1}


@pytest.mark.parametrize("kind", ["single", "team"])
def test_an_agent_written_to_the_base_signatures_trains_under_the_runner(kind, tmp_path):
    env = Rendezvous(num_envs=3, seed=0) if kind == "team" else rl_suite.make("CartPole-v1", num_envs=3, seed=0)
    algo = ConstantTeam if kind == "team" else ConstantAgent
    agent = algo.for_env(env)
    assert mismatches(algo, MultiAgentAgent if kind == "team" else Agent) == []
    config = RunConfig(total_steps=48, eval_episodes=0, progress=False, checkpoint_every_steps=10**9)
    Runner(agent, env, config, run_dir=tmp_path).run()
    assert agent.calls[0] == ("make_buffer", 3, env.max_episode_steps)
    assert agent.calls[1:] == [("update", 4, 0.0), ("update", 4, 0.25), ("update", 4, 0.5), ("update", 4, 0.75)]
    if kind == "team":  # 16 steps of 8-step episodes: the memory restarts with each episode
        assert agent.steps_seen == [*range(8), *range(8)] and agent.mismatches == 0
        evaluate(agent, Rendezvous(num_envs=5, seed=1), seed=1)  # the deterministic policy, from a fresh memory
        assert agent.steps_seen[16:] == list(range(8)) and agent.mismatches == 0


def test_single_agent_and_team_agents_refuse_the_other_kind_of_env_by_class():
    box = gym.spaces.Box(-np.inf, np.inf, (3, 2), np.float32)
    with pytest.raises(ValueError, match=r"constant-team needs a multi-agent env .* got observations of shape \(3,\)"):
        ConstantTeam(gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([2, 2]), global_state_space=box)
    with pytest.raises(ValueError, match=r"constant needs flat observations, got shape \(3, 2\)"):
        ConstantAgent(box, gym.spaces.Discrete(2))
    with pytest.raises(ValueError, match="is a multi-agent env, and constant trains single-agent envs"):
        ConstantAgent.for_env(Rendezvous(num_envs=2))


def test_every_collector_runs_the_one_loop_of_collector_py():
    from rl_suite.compiled import CompiledCollector, GraphCollector
    from rl_suite.multiagent import MultiAgentCollector

    for kind in (CompiledCollector, GraphCollector, MultiAgentCollector):
        assert "_collect" not in vars(kind), f"{kind.__name__} writes its own collect loop"
    assert CompiledCollector.collect is Collector.collect and MultiAgentCollector.collect is Collector.collect


SQUASHED_AGENTS = {  # the agents whose tanh actions are scaled onto the space; settings small enough to build fast
    "sac": dict(hidden=(16, 16), batch_size=32, buffer_size=1024),
    "flashsac": dict(actor_width=16, critic_width=16, batch_size=32, buffer_size=1024, atoms=11),
    "pql": dict(hidden=(16, 16), batch_size=32, buffer_size=1024),
}


@pytest.mark.parametrize("name", list(SQUASHED_AGENTS))
def test_squashed_actions_span_each_dimensions_bounds_in_warm_up_acting_and_export(name, tmp_path):
    """SAC, FlashSAC and PQL map their [-1, 1] actions onto each dimension's own bounds, asymmetric ones included (a
    legged robot's joint ranges in action units), in the warm-up, acting and the exported policy."""
    algo = load_algorithm(name)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    joint_offsets = gym.spaces.Box(np.array([-3.0, -6.0]), np.array([4.0, 14.0]), dtype=np.float32)
    settings = {**SQUASHED_AGENTS[name], "learning_starts": 10_000}
    torch.manual_seed(0)
    agent = algo(obs_space, joint_offsets, **settings)
    warm_up, _ = agent.act(torch.randn(2048, 5))  # uniform over the bounds
    low, high = warm_up.amin(0), warm_up.amax(0)
    assert (low >= torch.tensor([-3.0, -6.0])).all() and (high <= torch.tensor([4.0, 14.0])).all()
    assert (low < torch.tensor([-2.9, -5.8])).all() and (high > torch.tensor([3.9, 13.8])).all()
    obs = torch.randn(64, 5)
    expected, _ = agent.act(obs, deterministic=True)
    squashed = agent.scaler.unscale(expected)  # back in [-1, 1]: the affine map of the bounds
    torch.testing.assert_close(agent.scaler(squashed), expected)
    assert squashed.abs().max() <= 1.0
    torch.testing.assert_close(agent.inference_policy().eval()(obs), expected)  # eval: FlashSAC's batch norms
    path = export_policy(agent, tmp_path / "agent.onnx", "onnx", env_id="Toy-v0", dt=0.02).path
    np.testing.assert_allclose(load_policy(path)(obs.numpy()), expected.numpy(), atol=1e-5, rtol=1e-4)
