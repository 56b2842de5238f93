"""A StarCraft-style micromanagement skirmish as batched torch, in the spirit of SMAC (no StarCraft involved).

These rules are the reference for ``Skirmish-3m-v0``, ``Skirmish-8m-v0`` and ``Skirmish-2s3z-v0``.

**Map and units.** A 32 x 32 plane, coordinates in ``[0, 32]``, ``x`` east and ``y`` north. Units are points and do
not collide. Each side has the same units; the allies are the agents, the enemies are scripted. Unit types:

============  ======  ======  ======  ========  ======
type          health  damage  range   cooldown  speed
============  ======  ======  ======  ========  ======
marine        45      6       6       1         1
stalker       160     14      6       2         1
zealot        150     16      1.5     2         1
============  ======  ======  ======  ========  ======

Health counts shields (which do not regenerate). A unit with cooldown ``c`` can fire every ``c``-th step. Every unit
sees 9. All distances are Euclidean and ranges are inclusive (a target at distance 6 is in range 6).

**Scenarios** (each side's units; the time limit in steps):

- ``3m``: 3 marines; 60.
- ``8m``: 8 marines; 120.
- ``2s3z``: 2 stalkers and 3 zealots; 120.

**Spawn.** Unit ``i`` of a side of ``K`` units starts at ``x = 16 -/+ 7`` (allies west, enemies east) and
``y = 16 + (i - (K - 1) / 2)``, each coordinate jittered uniformly in ``[-1, 1)`` from the environment's random
stream, at full health with cooldown 0.

**Actions** (per agent, ``Discrete(6 + E)`` for ``E`` enemies):

- 0 no-op: available to dead agents, and only to them;
- 1 stop: hold position (available to living agents);
- 2-5 move north (+y), south (-y), east (+x), west (-x) by the unit's speed: available to living agents whose move
  stays on the map;
- ``6 + j`` attack enemy ``j``: available iff the agent and enemy ``j`` are alive and ``j`` is within the agent's
  attack range. The unit fires only if its cooldown is 0, and otherwise holds position.

Where value checks are off (on GPUs), an unavailable action acts as stop and moves are clamped to the map; dead
agents never act.

**Scripted enemies.** Each living enemy attacks, among the living allies within its attack range, the one with the
most health (ties: the nearest, then the lowest index), firing when its cooldown is 0 and otherwise holding
position. So the enemies spread their fire, as SC2's built-in AI does not focus it. With no ally in range, it moves
by its speed straight toward the nearest living ally (ties: the lowest index), clamped to the map.

**A step** is simultaneous and resolved from the positions at its start:

1. Every firing unit (allies with an available attack action, enemies as scripted; cooldown 0) deals its damage to
   its target; all damage lands at once, so a unit killed in this step still fires in it. A firing unit's cooldown
   restarts at its type's cooldown.
2. Units at health <= 0 die (health 0). Dead units neither act, move, nor can be targeted or seen.
3. Living units that chose a move (allies) or were scripted to move (enemies) move.
4. Cooldowns count down by 1 (to at least 0).

**Reward** (SMAC's shaped, positive-only form; a team reward): the damage dealt to enemies in the step (health
actually removed, so overkill does not count), plus 10 per enemy killed, plus 200 on a win, all scaled by
``20 / (total enemy health + 10 E + 200)`` so that the most an episode can earn is 20.

**End of an episode.**

- All enemies dead while an ally lives: terminated, a win (``info["won"]`` true, win bonus paid).
- All allies dead (also when the last units of both sides die in the same step): terminated, a loss.
- The time limit with both sides still standing: truncated (time limits are truncation), and a loss: a draw is not
  a win, as in SMAC. An episode whose last enemy dies on the limit step is terminated and truncated, and a win.

**Observation** of agent ``i`` (zeros while ``i`` is dead), with ``T`` the number of unit types in the scenario and a
type one-hot only where ``T > 1`` (``t = T`` if ``T > 1`` else 0), in order:

- move feasibility (4): which of the moves north, south, east, west are available;
- per enemy ``j`` (``5 + t``): attackable, distance / 9, dx / 9, dy / 9 (enemy minus agent), health fraction, type
  one-hot; zeros if the enemy is dead or farther than the sight range 9;
- per other ally, in index order (``5 + t``): visible (1), distance / 9, dx / 9, dy / 9, health fraction, type
  one-hot; zeros if dead or out of sight;
- own (``2 + t``): health fraction, cooldown / the type's cooldown, type one-hot.

**Global state** (for centralised critics and mixers): per ally ``[health fraction, cooldown / type cooldown,
x / 32 - 0.5, y / 32 - 0.5, type one-hot]``, then per enemy ``[health fraction, x / 32 - 0.5, y / 32 - 0.5, type
one-hot]``; zeros for dead units.

**Physical state** (``get_state`` / ``set_state`` / ``state_dict``): ``[N, A + E, 4]`` float32, one row per unit
(allies first) of ``[x, y, health, cooldown]``; a unit is alive iff its health is above 0.

``focus_fire_actions(env)`` is a scripted reference policy: each living ally attacks, among the enemies it may
attack, the one with the least health, and otherwise moves toward the nearest living enemy. Over 1000 episodes
(seeded) it wins 98.5% of 3m, 95.4% of 8m and 100% of 2s3z, where uniformly random available actions win none.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.multiagent import MultiAgentVecEnv


class UnitType(NamedTuple):
    health: float
    damage: float
    range: float
    cooldown: int  # steps between shots
    speed: float  # distance moved by one move action (allies) or scripted move (enemies)


UNIT_TYPES = {
    "marine": UnitType(health=45.0, damage=6.0, range=6.0, cooldown=1, speed=1.0),
    "stalker": UnitType(health=160.0, damage=14.0, range=6.0, cooldown=2, speed=1.0),
    "zealot": UnitType(health=150.0, damage=16.0, range=1.5, cooldown=2, speed=1.0),
}


class Scenario(NamedTuple):
    units: tuple[str, ...]  # each side's units, in index order
    max_episode_steps: int


SCENARIOS = {
    "3m": Scenario(("marine",) * 3, 60),
    "8m": Scenario(("marine",) * 8, 120),
    "2s3z": Scenario(("stalker",) * 2 + ("zealot",) * 3, 120),
}

NOOP, STOP, NORTH, SOUTH, EAST, WEST = range(6)
N_FIXED_ACTIONS = 6  # attack enemy j is action N_FIXED_ACTIONS + j
MOVES = ((0.0, 1.0), (0.0, -1.0), (1.0, 0.0), (-1.0, 0.0))  # north, south, east, west


class Skirmish(MultiAgentVecEnv):
    """Allied agents against scripted enemies on a 32 x 32 plane; the rules are in the module docstring."""

    map_size = 32.0
    sight_range = 9.0
    spawn_offset = 7.0  # allies start at x = 16 - 7, enemies at x = 16 + 7
    spawn_spacing = 1.0  # between neighbours in a side's column
    spawn_jitter = 1.0  # uniform in [-jitter, jitter) per coordinate
    kill_bonus = 10.0
    win_bonus = 200.0
    reward_scale = 20.0  # the most an episode can earn

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        scenario: str = "3m",
        max_episode_steps: int | None = None,
        **contract_options,
    ):
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown Skirmish scenario {scenario!r}; scenarios: {', '.join(SCENARIOS)}")
        self.scenario = scenario
        spec = SCENARIOS[scenario]
        kinds = list(dict.fromkeys(spec.units))  # the scenario's types, in order of first appearance
        self.num_types = t = len(kinds) if len(kinds) > 1 else 0  # one-hot width (none for one type)
        self.num_enemies = e = a = len(spec.units)
        self._unit_feats = 5 + t
        obs_dim = 4 + e * (5 + t) + (a - 1) * (5 + t) + 2 + t
        state_dim = a * (4 + t) + e * (3 + t)
        super().__init__(
            num_envs,
            device,
            num_agents=a,
            agent_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            agent_action_space=gym.spaces.Discrete(N_FIXED_ACTIONS + e),
            global_state_dim=state_dim,
            max_episode_steps=spec.max_episode_steps if max_episode_steps is None else max_episode_steps,
            seed=seed,
            reports_outcome=True,
            **contract_options,
        )
        dev = self.device

        # Per-unit constants over all U = A + E units (allies first; both sides field the same units).
        types = [UNIT_TYPES[k] for k in spec.units] * 2

        def per_unit(field: str) -> torch.Tensor:
            return torch.tensor([getattr(u, field) for u in types], dtype=torch.float32, device=dev)

        self._max_health, self._damage = per_unit("health"), per_unit("damage")
        self._range, self._cooldown, self._speed = per_unit("range"), per_unit("cooldown"), per_unit("speed")
        self._type_onehot = torch.zeros(2 * a, t, device=dev)
        if t:
            index = torch.tensor([kinds.index(k) for k in spec.units] * 2, device=dev)
            self._type_onehot[torch.arange(2 * a, device=dev), index] = 1.0
        self._reward_scale = self.reward_scale / (
            float(self._max_health[a:].sum()) + self.kill_bonus * e + self.win_bonus
        )
        # Spawn centres [U, 2].
        column = torch.arange(a, dtype=torch.float32, device=dev).sub_((a - 1) / 2).mul_(self.spawn_spacing)
        centre = self.map_size / 2
        self._spawn = torch.stack(
            (
                torch.cat(
                    (torch.full((a,), centre - self.spawn_offset), torch.full((a,), centre + self.spawn_offset))
                ).to(dev),
                column.repeat(2).add_(centre),
            ),
            dim=1,
        )
        # Move displacement of each action, per unit of speed: [n_actions, 2] (zeros for the non-moves).
        self._action_moves = torch.zeros(self.n_actions, 2, device=dev)
        self._action_moves[NORTH : WEST + 1] = torch.tensor(MOVES, device=dev)
        self._unit_moves = torch.tensor(MOVES, device=dev)  # [4, 2]
        self._enemy_index, self._ally_index = torch.arange(e, device=dev), torch.arange(a, device=dev)
        # others[i] = the allies other than i, in index order: [A, A - 1].
        ids = torch.arange(a, device=dev)
        self._others = ids.repeat(a, 1)[ids.view(-1, 1) != ids].view(a, a - 1)
        self._agent_rows = ids.view(-1, 1)

        # The physical state: [N, U, (x, y, health, cooldown)].
        self._units = torch.zeros(self.num_envs, 2 * a, 4, device=dev)

    # -- the rules ---------------------------------------------------------------------------------------------

    def _pairs(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Offsets ``[M, A, U, 2]`` (unit minus agent) and distances ``[M, A, U]`` from each ally to every unit."""
        rel = pos.unsqueeze(1) - pos[:, : self.num_agents].unsqueeze(2)
        return rel, torch.linalg.vector_norm(rel, dim=-1)

    def _move_feasible(self, pos: torch.Tensor) -> torch.Tensor:
        """``[M, A, 4]``: which of the four moves keep each ally on the map (alive or not)."""
        a = self.num_agents
        target = pos[:, :a].unsqueeze(2) + self._unit_moves * self._speed[:a].view(-1, 1, 1)
        return ((target >= 0) & (target <= self.map_size)).all(-1)

    def _advance(self, actions):
        a = self.num_agents
        units = self._units
        pos, health, cooldown = units[..., :2], units[..., 2], units[..., 3]
        alive = health > 0
        ally_alive, enemy_alive = alive[:, :a], alive[:, a:]
        ready = cooldown <= 0
        rel, dist = self._pairs(pos)
        rel, dist = rel[:, :, a:], dist[:, :, a:]  # [N, A, E(, 2)]: enemy minus ally
        actions = actions.long()

        # Allies' attacks: action 6 + j on a living enemy j in range (the availability rule).
        chosen = (actions.unsqueeze(-1) - N_FIXED_ACTIONS) == self._enemy_index  # [N, A, E]
        valid = chosen & (dist <= self._range[:a].view(-1, 1)) & enemy_alive.unsqueeze(1) & ally_alive.unsqueeze(-1)
        ally_attacks = valid.any(-1)
        ally_fires = ally_attacks & ready[:, :a]
        damage_to_enemies = ((valid & ally_fires.unsqueeze(-1)).float() * self._damage[:a].view(-1, 1)).sum(1)

        # Scripted enemies: attack the healthiest living ally in range (ties: the nearest, then the lowest index);
        # with none in range, move toward the nearest living ally (ties: the lowest index).
        enemy_dist = dist.transpose(1, 2).masked_fill(~ally_alive.unsqueeze(1), torch.inf)  # [N, E, A]
        nearest_dist, nearest = enemy_dist.min(-1)  # [N, E]
        has_target = enemy_alive & torch.isfinite(nearest_dist)
        in_range = enemy_dist <= self._range[a:].view(-1, 1)  # only living allies: dead ones are at inf
        in_range_health = torch.where(in_range, health[:, :a].unsqueeze(1), -1.0)
        healthiest = in_range & (in_range_health == in_range_health.amax(-1, keepdim=True))
        target = torch.where(healthiest, enemy_dist, torch.inf).argmin(-1)
        enemy_attacks = has_target & in_range.any(-1)
        enemy_fires = enemy_attacks & ready[:, a:]
        hits = (target.unsqueeze(-1) == self._ally_index) & enemy_fires.unsqueeze(-1)  # [N, E, A]
        damage_to_allies = (hits.float() * self._damage[a:].view(-1, 1)).sum(1)  # [N, A]
        enemy_moves = has_target & ~enemy_attacks
        toward = rel.transpose(1, 2).gather(2, nearest.view(*nearest.shape, 1, 1).expand(-1, -1, 1, 2)).squeeze(2)
        step_size = torch.where(enemy_moves, self._speed[a:] / nearest_dist.clamp_min(1e-6), 0.0)
        enemy_step = toward.neg_().mul_(step_size.unsqueeze(-1))  # toward the ally: ally minus enemy

        # Allies' moves (actions 2-5; a dead agent does not move).
        ally_step = self._action_moves[actions] * (self._speed[:a] * ally_alive).unsqueeze(-1)

        # 1. Damage lands at once; 2. the dead drop to health 0.
        enemy_health = health[:, a:]
        dealt = torch.minimum(damage_to_enemies, enemy_health)  # health actually removed
        health[:, a:] -= damage_to_enemies
        health[:, :a] -= damage_to_allies
        health.clamp_(min=0.0)
        now_alive = health > 0
        kills = (enemy_alive & ~now_alive[:, a:]).sum(-1)
        # 3. Moves of the living.
        pos[:, :a] += ally_step * now_alive[:, :a].unsqueeze(-1)
        pos[:, a:] += enemy_step * now_alive[:, a:].unsqueeze(-1)
        pos.clamp_(0.0, self.map_size)
        # 4. Cooldowns: firing units restart theirs, then all count down; the dead keep 0.
        fires = torch.cat((ally_fires, enemy_fires), dim=1)
        cooldown.copy_(torch.where(fires, self._cooldown, cooldown)).sub_(1.0).clamp_(min=0.0).mul_(now_alive)

        enemies_left = now_alive[:, a:].any(-1)
        allies_left = now_alive[:, :a].any(-1)
        torch.logical_and(~enemies_left, allies_left, out=self._won)
        torch.logical_or(~enemies_left, ~allies_left, out=self._terminated)
        reward = dealt.sum(-1) + self.kill_bonus * kills + self.win_bonus * self._won
        torch.mul(reward, self._reward_scale, out=self._reward)
        return self._reward, self._terminated

    def _reset_envs(self, selection: Selection):
        u = 2 * self.num_agents
        jitter = selection.uniform(self.rng, -self.spawn_jitter, self.spawn_jitter, 2 * u, torch.float32)
        pos = jitter.view(-1, u, 2).add_(self._spawn)
        fresh = torch.cat(
            (pos, self._max_health.expand(pos.shape[0], u).unsqueeze(-1), torch.zeros_like(pos[..., :1])), -1
        )
        selection.write(self._units, fresh)

    def _state_view(self):
        return self._units

    # -- observations ------------------------------------------------------------------------------------------

    def _rows(self, env_ids):
        return self._units if env_ids is None else self._units.index_select(0, env_ids)

    @staticmethod
    def _write(out: torch.Tensor, value: torch.Tensor, env_ids) -> None:
        if env_ids is None:
            out.copy_(value)
        else:
            out.index_copy_(0, env_ids, value.to(out.dtype))

    def _observe(self, out, env_ids=None):
        a = self.num_agents
        units = self._rows(env_ids)
        pos, health, cooldown = units[..., :2], units[..., 2], units[..., 3]
        alive = health > 0
        agent_alive = alive[:, :a]
        m = units.shape[0]
        rel, dist = self._pairs(pos)  # [M, A, U(, 2)]
        visible = (dist <= self.sight_range) & alive.unsqueeze(1) & agent_alive.unsqueeze(-1)
        # First feature: attackable for enemies, visible for allies.
        first = visible.clone()
        first[:, :, a:] &= dist[:, :, a:] <= self._range[:a].view(-1, 1)
        health_fraction = health / self._max_health
        per_unit = torch.cat(
            (
                first.unsqueeze(-1).float(),
                (dist / self.sight_range).unsqueeze(-1),
                rel / self.sight_range,
                health_fraction.unsqueeze(1).expand(-1, a, -1).unsqueeze(-1),
                self._type_onehot.expand(m, a, -1, -1),
            ),
            dim=-1,
        ).mul_(visible.unsqueeze(-1))  # [M, A, U, 5 + t]
        own = torch.cat(
            (
                health_fraction[:, :a].unsqueeze(-1),
                (cooldown[:, :a] / self._cooldown[:a]).unsqueeze(-1),
                self._type_onehot[:a].expand(m, -1, -1),
            ),
            dim=-1,
        )
        obs = torch.cat(
            (
                self._move_feasible(pos).float(),
                per_unit[:, :, a:].flatten(2),
                per_unit[:, self._agent_rows, self._others].flatten(2),
                own,
            ),
            dim=-1,
        ).mul_(agent_alive.unsqueeze(-1))
        self._write(out, obs, env_ids)

    def _observe_global_state(self, out, env_ids=None):
        a = self.num_agents
        units = self._rows(env_ids)
        m = units.shape[0]
        pos, health, cooldown = units[..., :2], units[..., 2], units[..., 3]
        health_fraction = (health / self._max_health).unsqueeze(-1)
        place = pos / self.map_size - 0.5
        onehot = self._type_onehot.expand(m, -1, -1)
        allies = torch.cat(
            (health_fraction[:, :a], (cooldown[:, :a] / self._cooldown[:a]).unsqueeze(-1), place[:, :a], onehot[:, :a]),
            dim=-1,
        )
        enemies = torch.cat((health_fraction[:, a:], place[:, a:], onehot[:, a:]), dim=-1)
        alive = (health > 0).unsqueeze(-1)
        state = torch.cat(((allies * alive[:, :a]).flatten(1), (enemies * alive[:, a:]).flatten(1)), dim=1)
        self._write(out, state, env_ids)

    def _observe_available_actions(self, out, env_ids=None):
        a = self.num_agents
        units = self._rows(env_ids)
        pos, health = units[..., :2], units[..., 2]
        alive = health > 0
        agent_alive = alive[:, :a].unsqueeze(-1)
        _, dist = self._pairs(pos)
        attack = (dist[:, :, a:] <= self._range[:a].view(-1, 1)) & alive[:, a:].unsqueeze(1)
        avail = torch.cat((~agent_alive, agent_alive, self._move_feasible(pos), attack), dim=-1)
        avail[..., STOP:] &= agent_alive
        self._write(out, avail, env_ids)

    def _observe_alive(self, out, env_ids=None):
        self._write(out, self._rows(env_ids)[:, : self.num_agents, 2] > 0, env_ids)


def focus_fire_actions(env: Skirmish) -> torch.Tensor:
    """A scripted reference policy, ``[N, A]`` int64 actions for the env's current state.

    Each living ally attacks, among the enemies its mask lets it attack, the one with the least health (ties: the
    lowest index); with none, it moves toward the nearest living enemy along the axis of the larger offset (the
    other axis, or stop, where the mask forbids it). Dead agents take the no-op.
    """
    a, avail = env.num_agents, env.avail_actions
    units = env._units
    pos, health = units[..., :2], units[..., 2]
    can_attack = avail[..., N_FIXED_ACTIONS:]  # [N, A, E]
    target = torch.where(can_attack, health[:, a:].unsqueeze(1), torch.inf).argmin(-1)
    rel, dist = env._pairs(pos)
    rel, dist = rel[:, :, a:], dist[:, :, a:].masked_fill(health[:, a:].unsqueeze(1) <= 0, torch.inf)
    nearest = dist.argmin(-1)
    dx, dy = rel.gather(2, nearest.view(*nearest.shape, 1, 1).expand(-1, -1, 1, 2)).squeeze(2).unbind(-1)
    along_x = torch.where(dx > 0, EAST, WEST)
    along_y = torch.where(dy > 0, NORTH, SOUTH)
    x_first = dx.abs() >= dy.abs()
    first, second = torch.where(x_first, along_x, along_y), torch.where(x_first, along_y, along_x)

    def ok(action: torch.Tensor) -> torch.Tensor:
        return avail.gather(2, action.unsqueeze(-1)).squeeze(-1)

    move = torch.where(ok(first), first, torch.where(ok(second), second, STOP))
    actions = torch.where(can_attack.any(-1), N_FIXED_ACTIONS + target, move)
    return torch.where(health[:, :a] > 0, actions, NOOP)


def random_actions(env: Skirmish, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniformly random available actions, ``[N, A]`` int64."""
    probs = env.avail_actions.flatten(0, 1).float()
    return torch.multinomial(probs, 1, generator=generator).view(env.num_envs, env.num_agents)


@torch.no_grad()
def win_rate(env: Skirmish, policy, seed: int = 0) -> float:
    """The fraction of the first episodes of ``env.num_envs`` environments that ``policy(env) -> actions`` wins."""
    env.reset(seed=seed)
    wins = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    finished = torch.zeros_like(wins)
    for _ in range(env.max_episode_steps):
        _, _, _, _, info = env.step(policy(env))
        wins |= info["won"] & ~finished
        finished |= info["done"]
    return wins.double().mean().item()
