"""Cooperative navigation (``Spread``) and predator-prey (``Tag``) as batched torch, with the semantics of mpe2's
``simple_spread_v3`` and ``simple_tag_v3`` (the Multi Particle Environments).

The world, as in mpe2: point masses of mass 1 in the plane, stepped with ``dt = 0.1`` and ``damping = 0.25``::

    force  = action force + contact forces
    pos   += vel * dt                      (with the velocity before this step)
    vel    = vel * (1 - damping) + force * dt
    vel    = vel / |vel| * max_speed       where an entity has a max_speed and |vel| exceeds it

The action force is ``u * sensitivity`` (``sensitivity`` is the agent's ``accel``, else 5). Discrete actions are
``0`` no-op, ``1`` ``u = (-1, 0)``, ``2`` ``(+1, 0)``, ``3`` ``(0, -1)``, ``4`` ``(0, +1)``; continuous actions
``a`` in ``Box(0, 1, (5,))`` (clipped to it, as mpe2's wrapper does) give ``u = (a2 - a1, a4 - a3)``. Two colliding
entities ``a``, ``b`` at distance ``d`` push each other with ``100 * (p_a - p_b) / d * k * softplus((r_a + r_b - d)
/ k)``, ``k = 1e-3`` (a soft contact that is ~0 when they do not touch). Landmarks never move.

Rewards are computed on the state after the step; observations are mpe2's, in mpe2's order. Episodes never
terminate; they are truncated after ``max_episode_steps`` (mpe2's ``max_cycles``, 25).

The physical state (``get_state``/``set_state``/``state_dict``) is ``[N, E, 4]`` float32: ``(pos_x, pos_y, vel_x,
vel_y)`` per entity, entities in mpe2's order (agents, then landmarks), so a state copied from mpe2's
``world.entities`` reproduces mpe2's steps. Internally it is a view of struct-of-arrays rows ``[4E + 1, N]`` (see
``_ParticleWorld``). Observations and the global state are gathered from the rows with two index reads and one
subtraction (every observation entry is ``a - b`` of two state entries, or of a zero).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rl_suite.env import Selection
from rl_suite.multiagent import MultiAgentVecEnv

DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 1e2
CONTACT_MARGIN = 1e-3
DEFAULT_SENSITIVITY = 5.0
# Unit force of each discrete action: no-op, -x, +x, -y, +y.
MOVES = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))


class _ObsLayout:
    """Observations written as index pairs into the state rows ``[4E + 1, N]`` (``pos_x``, ``pos_y``, ``vel_x``,
    ``vel_y`` of every entity, then a row of zeros): each observation entry is ``rows[plus] - rows[minus]``."""

    def __init__(self, num_entities: int):
        self.e = num_entities
        self.zero = 4 * num_entities

    def vel(self, e: int) -> list[tuple[int, int]]:
        return [(2 * self.e + e, self.zero), (3 * self.e + e, self.zero)]

    def pos(self, e: int) -> list[tuple[int, int]]:
        return [(e, self.zero), (self.e + e, self.zero)]

    def rel(self, e: int, origin: int) -> list[tuple[int, int]]:
        return [(e, origin), (self.e + e, self.e + origin)]

    def zeros(self, k: int) -> list[tuple[int, int]]:
        return [(self.zero, self.zero)] * k


class _ParticleWorld(MultiAgentVecEnv):
    """The physics shared by Spread and Tag. Entities are ordered movable agents first (``num_movable`` of them,
    learned ones first, then scripted ones), then landmarks; the first ``num_colliders`` entities collide.

    The state is struct-of-arrays with the environments innermost: ``self._rows`` ``[4E + 1, N]`` holds the rows
    ``pos_x``, ``pos_y``, ``vel_x``, ``vel_y`` of every entity and a row of zeros; ``self._pos`` and ``self._vel`` are
    its ``[2, E, N]`` views. Every operation of a step then runs over contiguous rows of ``N`` values.

    Options Spread and Tag take besides their own: ``max_episode_steps`` (25), ``continuous_actions`` (mpe2's
    continuous mode), ``device``, ``seed``, and the contract's ``check_values`` and ``masked_resets``.
    """

    def __init__(
        self,
        num_envs: int,
        num_learned: int,
        sizes: list[float],
        num_movable: int,
        num_colliders: int,
        sensitivity: list[float],
        max_speed: list[float] | None,
        reset_high: list[float],
        agent_obs: list[list[tuple[int, int]]],
        *,
        max_episode_steps: int | None = 25,
        continuous_actions: bool = False,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        **contract_options,
    ):
        self.continuous_actions = bool(continuous_actions)
        obs_dim = max(len(obs) for obs in agent_obs[:num_learned])
        state_dim = sum(len(obs) for obs in agent_obs)
        agent_action_space = (
            gym.spaces.Box(0.0, 1.0, (5,), np.float32) if self.continuous_actions else gym.spaces.Discrete(5)
        )
        super().__init__(
            num_envs,
            device,
            num_agents=num_learned,
            agent_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            agent_action_space=agent_action_space,
            global_state_dim=state_dim,
            max_episode_steps=max_episode_steps,
            seed=seed,
            agent_rewards=True,
            **contract_options,
        )
        n, device, e = self.num_envs, self.device, len(sizes)
        self.num_entities, self.num_movable, self.num_colliders = e, num_movable, num_colliders
        self.sizes = tuple(sizes)
        self._rows = torch.zeros(4 * e + 1, n, device=device)
        self._pos, self._vel = self._rows[: 2 * e].view(2, e, n), self._rows[2 * e : 4 * e].view(2, e, n)
        # The public [N, E, 4] layout: (pos_x, pos_y, vel_x, vel_y) of each entity.
        self._state = self._rows[: 4 * e].view(4, e, n).permute(2, 1, 0)

        layout = _ObsLayout(e)
        padded = [obs + layout.zeros(obs_dim - len(obs)) for obs in agent_obs[:num_learned]]

        def index(pairs):
            pairs = torch.tensor(pairs, dtype=torch.long, device=device).reshape(-1, 2)
            return pairs[:, 0].contiguous(), pairs[:, 1].contiguous()

        self._obs_plus, self._obs_minus = index(padded)
        self._state_plus, self._state_minus = index([pair for obs in agent_obs for pair in obs])
        # Where every agent acts, the global state is the observations unpadded: it is read from them.
        self._state_from_obs = None
        if num_learned == len(agent_obs):
            entries = [i * obs_dim + k for i, obs in enumerate(agent_obs) for k in range(len(obs))]
            if entries != list(range(num_learned * obs_dim)):
                self._state_from_obs = torch.tensor(entries, dtype=torch.long, device=device)
            else:
                self._state_from_obs = slice(None)

        m, c, a = num_movable, num_colliders, num_learned
        size = torch.tensor(sizes, device=device)
        self._contact_dist = (size[:m, None] + size[None, :c])[..., None]  # [M, C, 1]
        sens = torch.tensor(sensitivity, device=device)
        moves = torch.tensor(MOVES, device=device).T  # [2, 5]
        self._moves = moves
        # Force of each discrete action: [2, agents, 5], learned agents and scripted ones.
        self._move_force = (moves[:, None, :] * sens[None, :a, None]).contiguous()
        self._scripted_force = (moves[:, None, :] * sens[None, a:m, None]).contiguous()
        self._learned_sens = sens[:a, None].clone()  # [A, 1]
        self._max_speed = None if max_speed is None else torch.tensor(max_speed, device=device)[:, None]
        self._force = torch.zeros(2, m, n, device=device)
        high = torch.tensor(reset_high, device=device)[:, None].expand(e, 2).reshape(-1)
        self._reset_low, self._reset_high = -high, high

    # -- physics --------------------------------------------------------------------------------------------

    def _advance(self, actions):
        m, c, a, n = self.num_movable, self.num_colliders, self.num_agents, self.num_envs
        pos = self._pos
        moving_pos, moving_vel = pos[:, :m], self._vel[:, :m]
        delta = moving_pos.unsqueeze(2) - pos[:, None, :c]  # [2, M, C, N]: agent minus collider
        # Entities that coincide (an agent and itself included) have delta = 0 and so no contact force.
        dist = torch.hypot(delta[0], delta[1]).clamp_(min=1e-12)  # [M, C, N]
        force = self._force
        if self.continuous_actions:
            pairs = actions.clamp(0.0, 1.0)[..., 1:5].unflatten(-1, (2, 2))  # ((a1, a2), (a3, a4))
            u = torch.sub(pairs[..., 1], pairs[..., 0])  # [N, A, 2]
            torch.mul(u.permute(2, 1, 0), self._learned_sens, out=force[:, :a])
        else:
            index = actions.long().T.unsqueeze(0).expand(2, a, n)
            torch.gather(self._move_force, 2, index, out=force[:, :a])
        if m > a:
            force[:, a:] = self._script(delta, dist)
        # Soft contacts: k * softplus((r_a + r_b - d) / k) is softplus(r_a + r_b - d) with beta = 1 / k.
        coef = F.softplus(self._contact_dist - dist, beta=1.0 / CONTACT_MARGIN).div_(dist).mul_(CONTACT_FORCE)
        force.add_(delta.mul_(coef).sum(2))
        moving_pos.add_(moving_vel, alpha=DT)
        moving_vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)
        if self._max_speed is not None:
            speed = torch.hypot(moving_vel[0], moving_vel[1])
            moving_vel.mul_(torch.div(self._max_speed, speed).clamp_(max=1.0))
        self._rewards()
        return self._reward, self._terminated  # never terminates

    def _script(self, delta: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _rewards(self) -> None:
        raise NotImplementedError

    # -- observations and resets ------------------------------------------------------------------------------

    def _gather(self, out: torch.Tensor, plus, minus, env_ids) -> None:
        rows = self._rows if env_ids is None else self._rows.index_select(1, env_ids)
        values = torch.sub(rows.index_select(0, plus), rows.index_select(0, minus))  # [entries, N]
        if env_ids is None:
            out.view(len(out), -1).copy_(values.T)
        else:
            out.index_copy_(0, env_ids, values.T.reshape(-1, *out.shape[1:]))

    def _observe(self, out, env_ids=None):
        self._gather(out, self._obs_plus, self._obs_minus, env_ids)

    def _observe_global_state(self, out, env_ids=None):
        if self._state_from_obs is None:
            self._gather(out, self._state_plus, self._state_minus, env_ids)
            return
        # The contract observes the observations first, then the global state of the same moment (_observe_final,
        # _observe_current); the state is read from the matching observation buffer.
        obs = (self._final_obs if out is self._final_global_state else self._obs).view(self.num_envs, -1)
        index = self._state_from_obs
        if env_ids is not None:
            obs = obs.index_select(0, env_ids)
        state = obs if isinstance(index, slice) else obs.index_select(1, index)
        if env_ids is None:
            out.copy_(state)
        else:
            out.index_copy_(0, env_ids, state)

    def _reset_envs(self, selection: Selection):
        # Uniform positions; zero velocities.
        size = self._reset_low.numel()
        positions = selection.uniform(self.rng, self._reset_low, self._reset_high, size, torch.float32)
        values = torch.zeros(positions.shape[0], self.num_entities, 4, device=self.device)
        values[..., 0:2] = positions.view(-1, self.num_entities, 2)
        selection.write(self._state, values)

    def _state_view(self):
        return self._state


class Spread(_ParticleWorld):
    """Cooperative navigation (mpe2's ``simple_spread_v3``): ``num_agents`` agents cover as many landmarks.

    Entities: the agents (size 0.15, colliding, sensitivity 5, no max speed), then ``num_agents`` landmarks (not
    colliding). Resets: every position uniform in ``[-1, 1]^2``, velocities zero.

    Observation of agent ``i`` (``d = 6 N``, 18 for 3 agents): own velocity, own position, the landmarks'
    positions relative to it, the other agents' positions relative to it (in agent order), and the other agents'
    communication, which is always zero (the agents are silent): 2 zeros per other agent, as in mpe2.

    Rewards: ``global = -sum over landmarks of the distance to the nearest agent``; agent ``i`` gets ``(1 -
    local_ratio) * global - local_ratio * (number of other agents it collides with)`` (``info["agent_reward"]``);
    the team reward is the mean over agents. The global state is the agents' observations concatenated (mpe2's
    ``state()``).
    """

    def __init__(self, num_envs: int = 1, *, num_agents: int = 3, local_ratio: float = 0.5, **options):
        if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
            raise ValueError(f"num_agents must be a positive integer, got {num_agents!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio must lie in [0, 1], got {local_ratio!r}")
        a = num_agents
        self.local_ratio = float(local_ratio)
        layout = _ObsLayout(2 * a)
        agent_obs = []
        for i in range(a):
            others = [k for k in range(a) if k != i]
            obs = layout.vel(i) + layout.pos(i)
            obs += [pair for lm in range(a, 2 * a) for pair in layout.rel(lm, i)]
            obs += [pair for k in others for pair in layout.rel(k, i)]
            obs += layout.zeros(2 * len(others))
            agent_obs.append(obs)
        super().__init__(
            num_envs,
            num_learned=a,
            sizes=[0.15] * a + [0.05] * a,
            num_movable=a,
            num_colliders=a,
            sensitivity=[DEFAULT_SENSITIVITY] * a,
            max_speed=None,
            reset_high=[1.0] * (2 * a),
            agent_obs=agent_obs,
            **options,
        )
        size = torch.tensor(self.sizes[:a], device=self.device)
        # Collision distances [A, A, 1]; an agent never collides with itself.
        self._collision_dist = (size[:, None] + size[None, :]).fill_diagonal_(-1.0)[..., None]

    def _rewards(self):
        a, pos = self.num_agents, self._pos
        delta = pos[:, :a, None] - pos[:, None, :]  # [2, A, E, N]
        dist = torch.hypot(delta[0], delta[1])
        collisions = torch.lt(dist[:, :a], self._collision_dist).sum(1, dtype=torch.float32)  # [A, N]
        coverage = dist[:, a:].amin(0).sum(0)  # [N]: sum over landmarks of the distance to the nearest agent
        reward = collisions.mul_(-self.local_ratio).sub_(coverage, alpha=1.0 - self.local_ratio)
        self._agent_reward.copy_(reward.T)
        torch.mean(reward, 0, out=self._reward)


class Tag(_ParticleWorld):
    """Predator-prey (mpe2's ``simple_tag_v3``): ``num_adversaries`` slow predators chase ``num_good`` fast prey
    among ``num_obstacles`` obstacles.

    Entities, in mpe2's order: adversaries (size 0.075, sensitivity 3, max speed 1.0), good agents (size 0.05,
    sensitivity 4, max speed 1.3), obstacles (size 0.2, fixed); all collide. Resets: agents uniform in ``[-1, 1]^2``,
    obstacles uniform in ``[-0.9, 0.9]^2``, velocities zero.

    Observation of an agent: own velocity, own position, the obstacles' positions relative to it, the other agents'
    positions relative to it (in mpe2's order), then the velocities of the other good agents. An adversary sees
    ``4 + 2 * num_obstacles + 2 * (agents - 1) + 2 * num_good`` values (16 by default), a good agent ``2`` fewer
    per good agent it does not count itself as (14 by default).

    Rewards (after the step): every adversary gets ``+10`` for each (adversary, good agent) pair in collision, all
    adversaries the same shared sum; a good agent gets ``-10`` for each adversary it collides with, minus
    ``bound(|x|) + bound(|y|)`` of its position, with ``bound(v) = 0`` below 0.9, ``10 (v - 0.9)`` below 1 and
    ``min(exp(2 v - 2), 10)`` beyond. The team reward is the adversaries' reward.

    ``prey``:
        - ``"learned"``: every agent acts; ``A = num_adversaries + num_good``, adversaries first (mpe2's order). The
          good agents' observations are zero-padded at the end to the adversaries' length, so that ``obs`` is one
          ``[N, A, d]`` tensor; ``info["agent_reward"]`` holds every agent's reward.
        - ``"scripted"``: only the adversaries act (``A = num_adversaries``); each good agent follows a fixed,
          deterministic rule. Its flee vector is ``sum over adversaries j of (p - q_j) / |p - q_j|^2`` (away from
          every predator, the near ones weighted most); along each axis where ``|p| > 0.9`` (where the boundary
          penalty starts) it is replaced by ``-1000 sign(p)``, steering back into the arena. The prey takes the
          discrete move (of the five) whose direction has the largest dot product with it (ties: the first move,
          so the no-op for a zero vector), with or without ``continuous_actions``.

    The global state is every agent's (unpadded) observation concatenated, scripted good agents included, which is
    mpe2's ``state()`` (62 values by default).
    """

    def __init__(
        self,
        num_envs: int = 1,
        *,
        num_good: int = 1,
        num_adversaries: int = 3,
        num_obstacles: int = 2,
        prey: str = "scripted",
        **options,
    ):
        for name, value, least in (
            ("num_good", num_good, 1),
            ("num_adversaries", num_adversaries, 1),
            ("num_obstacles", num_obstacles, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if prey not in ("scripted", "learned"):
            raise ValueError(f"prey must be 'scripted' or 'learned', got {prey!r}")
        self.prey = prey
        self.num_good, self.num_adversaries, self.num_obstacles = num_good, num_adversaries, num_obstacles
        agents = num_adversaries + num_good
        e = agents + num_obstacles
        layout = _ObsLayout(e)
        agent_obs = []
        for i in range(agents):
            others = [k for k in range(agents) if k != i]
            obs = layout.vel(i) + layout.pos(i)
            obs += [pair for lm in range(agents, e) for pair in layout.rel(lm, i)]
            obs += [pair for k in others for pair in layout.rel(k, i)]
            obs += [pair for k in others if k >= num_adversaries for pair in layout.vel(k)]
            agent_obs.append(obs)
        adversary, good = range(num_adversaries), range(num_good)
        super().__init__(
            num_envs,
            num_learned=agents if prey == "learned" else num_adversaries,
            sizes=[0.075 for _ in adversary] + [0.05 for _ in good] + [0.2] * num_obstacles,
            num_movable=agents,
            num_colliders=e,
            sensitivity=[3.0 for _ in adversary] + [4.0 for _ in good],
            max_speed=[1.0 for _ in adversary] + [1.3 for _ in good],
            reset_high=[1.0] * agents + [0.9] * num_obstacles,
            agent_obs=agent_obs,
            **options,
        )
        self._catch_dist = 0.075 + 0.05

    def _script(self, delta, dist):
        nadv, m = self.num_adversaries, self.num_movable
        away = delta[:, nadv:, :nadv]  # [2, G, adversaries, N]: prey minus predator, before the step
        weight = dist[nadv:, :nadv].square().clamp_(min=1e-6).reciprocal_()
        flee = (away * weight).sum(2)  # [2, G, N]
        prey_pos = self._pos[:, nadv:m]
        flee = torch.where(prey_pos.abs() > 0.9, prey_pos.sign() * -1000.0, flee)
        scores = flee[0] * self._moves[0, :, None, None] + flee[1] * self._moves[1, :, None, None]  # [5, G, N]
        move = scores.argmax(0)  # the first of equal scores
        return torch.gather(self._scripted_force, 2, move.unsqueeze(0).expand(2, *move.shape))

    def _rewards(self):
        nadv, pos = self.num_adversaries, self._pos
        prey_pos = pos[:, nadv : self.num_movable]
        delta = prey_pos[:, :, None] - pos[:, None, :nadv]  # [2, G, adversaries, N]
        caught = torch.lt(torch.hypot(delta[0], delta[1]), self._catch_dist)
        torch.sum(caught, (0, 1), dtype=torch.float32, out=self._reward)
        self._reward.mul_(10.0)
        self._agent_reward[:, :nadv] = self._reward.unsqueeze(1)
        if self.prey == "learned":
            x = prey_pos.abs()
            bound = torch.where(
                x < 1.0, (x - 0.9).mul_(10.0).clamp_(min=0.0), torch.exp(2.0 * x - 2.0).clamp_(max=10.0)
            )
            prey = caught.sum(1, dtype=torch.float32).mul_(-10.0).sub_(bound.sum(0))  # [G, N]
            self._agent_reward[:, nadv:] = prey.T
