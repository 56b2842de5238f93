"""MAPPO's death masking (Yu et al., 2022): a dead agent's critic input is zeros plus its id, the critic learns that
value, and the last step an agent is alive bootstraps from it. Checked against values read off the critic on
hand-built inputs, on a toy task where the last of three agents dies after two steps (tests/multiagent_toy.py)."""

from __future__ import annotations

import pytest
import torch
from multiagent_toy import Rendezvous

from rl_suite.agents.mappo import MAPPO
from rl_suite.multiagent import MultiAgentCollector

GAMMA = 0.9
ENVS = 4
DEAD = 2  # the agent that dies: alive for steps 0 and 1, dead in the state step 1 reaches and after


def rollout_with_a_death(**settings):
    """One 4-step episode in each of ``ENVS`` envs, truncated at its end, collected by an untrained agent; raw states
    and values (no normalisers unless asked), so that the critic's inputs are the env's numbers."""
    torch.manual_seed(0)
    env = Rendezvous(num_envs=ENVS, seed=0, death_step=2, max_episode_steps=4)
    settings = {"n_steps": 4, "gamma": GAMMA, "value_norm": False, "normalize_obs": False, **settings}
    agent = MAPPO.for_env(env, **settings)
    with torch.no_grad():  # large random weights: the critic's values of different inputs lie far apart
        for parameter in agent.critic.parameters():
            torch.nn.init.normal_(parameter)
    buffer = agent.make_buffer(env.num_envs)
    MultiAgentCollector(env, agent, buffer).collect(4)
    d = buffer.data
    assert d["alive"][:2, :, DEAD].all() and not d["alive"][2:, :, DEAD].any()
    assert not d["next_alive"][1:, :, DEAD].any() and d["truncated"][3].all() and not d["truncated"][:3].any()
    return agent, d


@torch.no_grad()
def value(agent: MAPPO, features: torch.Tensor, agent_id: int) -> float:
    """The critic on one input built by hand: features, then the one-hot agent id."""
    x = torch.cat((features, torch.eye(3)[agent_id]))
    return agent.critic(x.unsqueeze(0))[0].item()


def test_the_last_alive_step_bootstraps_from_the_death_mask():
    agent, d = rollout_with_a_death(gae_lambda=0.0)  # lambda 0: the return is the one-step target r + gamma V(s')
    returns = agent.process_rollout(d)["returns"]
    v_dead = value(agent, torch.zeros(4), DEAD)
    for env in range(ENVS):
        # Step 1, in which the agent died, and the truncated step 3, whose final state has it dead (after the reset
        # it is alive again: the bootstrap must read the final state's alive mask, not the reset one).
        for t in (1, 3):
            v_real_next = value(agent, d["next_global_state"][t, env], DEAD)  # never trained for a dead agent
            assert abs(v_real_next - v_dead) > 0.5  # the two bootstraps differ, so the check tells them apart
            target = d["rewards"][t, env].item() + GAMMA * v_dead
            assert returns[t, env, DEAD].item() == pytest.approx(target, abs=1e-4)
        # a living agent bootstraps from the real next state
        target = d["rewards"][1, env].item() + GAMMA * value(agent, d["next_global_state"][1, env], 0)
        assert returns[1, env, 0].item() == pytest.approx(target, abs=1e-4)


def test_an_agent_death_does_not_end_its_returns():
    """lambda 1: the team's rewards after the death count, then V(death mask) of the truncated episode's end."""
    agent, d = rollout_with_a_death(gae_lambda=1.0)
    returns = agent.process_rollout(d)["returns"]
    v_dead = value(agent, torch.zeros(4), DEAD)
    for env in range(ENVS):
        r = d["rewards"][:, env].tolist()
        g1 = r[1] + GAMMA * r[2] + GAMMA**2 * r[3] + GAMMA**3 * v_dead
        assert returns[1, env, DEAD].item() == pytest.approx(g1, abs=1e-4)
        assert returns[0, env, DEAD].item() == pytest.approx(r[0] + GAMMA * g1, abs=1e-4)


@pytest.mark.parametrize("centralized_critic", [True, False])
def test_a_dead_agent_critic_input_is_zeros_and_its_id(centralized_critic):
    """Zeros after normalisation: the env's zero observation of a dead agent, normalised, is not zero."""
    agent, d = rollout_with_a_death(centralized_critic=centralized_critic, normalize_obs=True)
    agent.obs_norm.update(torch.rand(64, 3, 4) + 1.0)
    agent.state_norm.update(torch.rand(64, 4) + 1.0)
    critic_in = agent.process_rollout(d)["critic_in"]
    death_mask = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert torch.equal(critic_in[2:, :, DEAD], death_mask.expand(2, ENVS, -1))
    assert (critic_in[:2, :, DEAD, :4] != 0).any() and (critic_in[:, :, 0, :4] != 0).any()


def test_dead_samples_train_the_critic_but_not_the_policy():
    """A minibatch whose targets miss the critic's predictions by 5 on the dead agents' samples only, and whose
    advantages are zero: the Huber value loss (quadratic within delta = 10) is 0.5 * 5^2 times the dead fraction."""
    agent, d = rollout_with_a_death()
    rollout = agent.process_rollout(d)
    dead = ~d["alive"]
    with torch.no_grad():
        predicted = agent.critic(rollout["critic_in"])[0].squeeze(-1)
    minibatch = {
        "actor_in": rollout["actor_in"],
        "critic_in": rollout["critic_in"],
        "actions": rollout["actions"],
        "log_prob": rollout["log_prob"],
        "advantages": torch.zeros_like(predicted),
        "targets": predicted + 5.0 * dead,
        "weights": d["alive"].float(),
        "avail": d["avail_actions"],
    }
    metrics = agent._step({key: value.flatten(0, 2) for key, value in minibatch.items()})
    assert dead.sum() == 2 * ENVS  # steps 2 and 3 of agent 2, among the 4 steps x ENVS x 3 agents
    assert metrics["value_loss"].item() == pytest.approx(0.5 * 5.0**2 * 2 / (4 * 3), rel=1e-5)
    assert metrics["policy_loss"].item() == 0.0
