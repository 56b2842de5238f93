"""Pursuit at scale: ``P`` pursuers with a limited sensing range chase ``E`` scripted evaders in a square arena, as
batched torch whose cost per agent does not grow with ``P``.

The task, after the multi-agent target-tracking setting of the seed papers (many pursuers, local sensing, evaders that
flee), written for this project:

- **Arena:** a square of side ``L = sqrt(P / density)`` (``density`` pursuers per unit area, default 0.1), so that
  every size has the same crowding; positions are clamped to it. Every position starts uniform in the arena.
- **Pursuers** move at ``pursuer_speed`` (1.0) for ``dt = 0.1`` per step: discrete actions are mpe2's five moves
  (0 no-op, 1 -x, 2 +x, 3 -y, 4 +y); with ``continuous_actions`` an action in ``Box(-1, 1, (2,))`` is a velocity
  command, scaled back onto the unit disk where it leaves it.
- **Evaders** (``num_evaders``, default ``max(1, P // 4)``) follow a fixed rule at ``evader_speed`` (0.7): away from
  the ``neighbours`` nearest pursuers they sense, along ``sum_j (e - p_j) / |e - p_j|^2`` (the near ones weigh most),
  without the component that would push them through a wall within ``sensing_range / 2`` of it (they slide along it);
  an evader that senses no pursuer stands still. The rule sees the positions before the step.
- **Capture:** an evader within ``capture_radius`` (0.5) of a pursuer after the step is captured and reappears
  uniformly in the arena (its draws come from the environment's own random stream, one pair per evader per step).
- **Rewards:** pursuer i gets ``capture_reward`` (10) for each evader it captured this step (the evader's 4 nearest
  pursuers within the radius get it), minus ``distance_penalty`` (0.1) times the distance to its nearest sensed
  evader after the reappearances, over ``sensing_range`` (1 where it senses none). The team reward is the mean over
  pursuers; ``info["agent_reward"]`` holds each one's.
- **Observation** of pursuer i (``2 + 3 (neighbours + targets)`` values, 26 by default, whatever ``P``): its position
  scaled to [-1, 1], then for each of its ``neighbours`` (4) nearest other pursuers and of its ``targets`` (4) nearest
  evaders within ``sensing_range`` (3.0), nearest first: the relative position over ``sensing_range`` and a 1 (zeros
  for a slot with nothing sensed).
- **Global state** (5 values, whatever ``P``): the mean pursuer and evader positions scaled to [-1, 1], and the
  captures so far in the episode per evader.
- Episodes never terminate; they are truncated after ``max_episode_steps`` (100). ``info["episode_metrics"]``
  reports ``captures_per_evader`` for each ended episode.

**The neighbour search** is a uniform grid of cells of side ``sensing_range``, built twice a step (the pursuers after
they move, the evaders after they reappear): the points are sorted by cell, and a query reads at most
``cell_capacity`` (4) points from each of the 3 x 3 cells around it, so a step costs ``O(N (P + E) * 9 *
cell_capacity)`` instead of the ``O(N P (P + E))`` of all pairs. A cell holds about ``0.9`` pursuers at the default
density; where one holds more than ``cell_capacity`` points, the surplus (in sorted order, not the farthest) is not
seen from that cell. ``tests/test_pursuit.py`` checks the search against all pairs.

The physical state (``get_state``/``set_state``) is ``[N, P + E, 2]``: pursuer then evader positions, in arena
coordinates ``[0, L]^2``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection
from rl_suite.multiagent import MultiAgentVecEnv

DT = 0.1
MOVES = ((0.0, 0.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0))  # mpe2's: no-op, -x, +x, -y, +y
METRICS = ("captures_per_evader",)
CAPTURERS = 4  # pursuers rewarded for one capture at most: the evader's nearest within the capture radius


class CellGrid:
    """Fixed-radius nearest neighbours of ``[N, Q, 2]`` queries among ``[N, M, 2]`` points in ``[0, L]^2``, per
    environment, through a grid of ``cells`` x ``cells`` square cells of side ``cell_size`` (at least the radius).

    ``build`` sorts the points by cell into three tables (x, y and the point's index; empty slots at infinity) of
    ``capacity`` slots per cell, padded with a ring of empty cells. Three neighbouring cells of a row lie next to each
    other in a table, so a strided view of it (no copy) holds every such window of 3 cells as one row, and a query's
    candidates are 3 windows (the rows above, at and below its cell): three row gathers of the x and of the y table,
    kept apart so that the distance arithmetic runs on contiguous memory; the index table is read for the chosen
    points only. Where the 9 cells' slots would outnumber the points (``9 * capacity >= M``), every point is a
    candidate instead: all pairs are then both exact and cheaper."""

    def __init__(self, num_envs: int, side: float, cell_size: float, capacity: int, device: torch.device):
        self.cells = g = max(1, math.ceil(side / cell_size))
        self.cell_size, self.capacity = cell_size, capacity
        self.env_row = torch.arange(num_envs, device=device).view(-1, 1, 1) * (g + 2)  # first padded row of each env
        self.rows = torch.arange(3, device=device)
        self._padded = torch.empty(3, num_envs, g + 2, g + 2, capacity, device=device)  # x, y, point index
        # window w of a table holds its cells w, w + 1 and w + 2 (in row-major order over every environment)
        cells, plane = num_envs * (g + 2) ** 2, self._padded[0].numel()
        self._windows = [
            self._padded.as_strided((cells - 2, 3 * capacity), (capacity, 1), table * plane) for table in range(3)
        ]

    def _cell_xy(self, positions: torch.Tensor) -> torch.Tensor:
        return positions.div(self.cell_size).floor_().long().clamp_(0, self.cells - 1)

    def build(self, points: torch.Tensor) -> None:
        n, m = points.shape[:2]
        g, c = self.cells, self.capacity
        self.points, self.per_env = points, m
        self.all_pairs = 9 * c >= m
        if self.all_pairs:
            return
        xy = self._cell_xy(points).view(-1, 2)
        env = torch.arange(n, device=points.device).repeat_interleave(m)
        key = (env * g + xy[:, 0]) * g + xy[:, 1]
        order = key.argsort()
        sorted_key = key.index_select(0, order)
        counts = torch.bincount(key, minlength=n * g * g)
        rank = torch.arange(n * m, device=points.device) - (counts.cumsum(0) - counts).index_select(0, sorted_key)
        kept = order[rank < c]  # beyond a cell's capacity a point is not written
        slot = (env[kept], xy[kept, 0] + 1, xy[kept, 1] + 1, rank[rank < c])
        self._padded[:2].fill_(torch.inf)
        for table, values in enumerate((*points.reshape(-1, 2).index_select(0, kept).t(), kept.remainder(m).float())):
            self._padded[table].index_put_(slot, values)

    def _candidates(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Each query's candidates' x and y ``[N, Q, K]`` (``inf`` for an empty slot), and the 3 windows they come
        from ``[N, Q, 3]`` (``None`` for all pairs, where candidate j is point j)."""
        n, q = queries.shape[:2]
        if self.all_pairs:
            x, y = (self.points[..., axis].unsqueeze(1).expand(n, q, -1) for axis in range(2))
            return x, y, None
        xy = self._cell_xy(queries)
        # the query's cell is padded (row + 1, column + 1): the windows of rows row .. row + 2 starting at column
        window = (self.env_row + xy[..., :1] + self.rows) * (self.cells + 2) + xy[..., 1:]
        flat = window.flatten()
        x, y = (self._windows[table].index_select(0, flat).view(n, q, -1) for table in range(2))
        return x, y, window

    def _points(self, window: torch.Tensor | None, slot: torch.Tensor) -> torch.Tensor:
        """The point indices of the candidates ``slot`` ``[N, Q, j]`` among those of ``window`` (``_candidates``)."""
        if window is None:
            return slot
        width = 3 * self.capacity  # slots per window; window w's slots start at table element w * capacity
        start = window.gather(2, torch.div(slot, width, rounding_mode="floor")) * self.capacity
        return self._padded[2].take(start + slot.remainder(width)).long()

    def query(self, queries: torch.Tensor, k: int, radius: float, exclude_self: bool = False):
        """The ``k`` nearest built points within ``radius`` of each query, nearest first: their positions relative to
        the query ``[N, Q, k, 2]`` (zeros for an empty slot), whether each slot holds one ``[N, Q, k]`` (bool), its
        squared distance (``inf`` for an empty slot) and its index among its environment's points (meaningless for an
        empty slot).
        ``exclude_self``: query q is point q of the same environment, not its own neighbour."""
        x, y, window = self._candidates(queries)
        dx, dy = x - queries[..., :1], y - queries[..., 1:]
        dist2 = torch.addcmul(dx * dx, dy, dy)  # empty slots at infinity
        if exclude_self:  # every candidate's index: a third row gather
            own = torch.arange(queries.shape[1], device=queries.device, dtype=dx.dtype).view(1, -1, 1)
            if window is None:
                every = torch.arange(dist2.shape[-1], device=queries.device, dtype=dx.dtype)
            else:
                every = self._windows[2].index_select(0, window.flatten()).view_as(dist2)
            dist2.masked_fill_(every == own, torch.inf)
        # The k smallest of all candidates: those within the radius come before every one outside it, so that
        # cutting at the radius after the selection leaves the k nearest within it.
        k_found = min(k, dist2.shape[-1])
        nearest, index = dist2.topk(k_found, dim=-1, largest=False, sorted=True)
        sensed = nearest <= radius * radius
        nearest.masked_fill_(~sensed, torch.inf)
        relative = torch.stack((dx.gather(2, index), dy.gather(2, index)), -1).masked_fill_(~sensed.unsqueeze(-1), 0.0)
        point = self._points(window, index)
        if k_found < k:  # fewer points than slots: the rest are empty
            pad = k - k_found
            nearest = torch.nn.functional.pad(nearest, (0, pad), value=torch.inf)
            relative = torch.nn.functional.pad(relative, (0, 0, 0, pad))
            point = torch.nn.functional.pad(point, (0, pad))
            sensed = nearest.isfinite()
        return relative, sensed, nearest, point


class Pursuit(MultiAgentVecEnv):
    """``num_pursuers`` learned pursuers and ``num_evaders`` scripted evaders per environment; see the module
    docstring. Options: ``num_pursuers`` (10), ``num_evaders``, ``density``, ``sensing_range``, ``capture_radius``,
    ``pursuer_speed``, ``evader_speed``, ``neighbours``, ``targets``, ``capture_reward``, ``distance_penalty``,
    ``cell_capacity``, ``continuous_actions``, ``max_episode_steps`` (100), ``device``, ``seed``, and the contract's
    ``check_values`` and ``masked_resets``."""

    episode_metric_names = METRICS

    def __init__(
        self,
        num_envs: int = 1,
        *,
        num_pursuers: int = 10,
        num_evaders: int | None = None,
        density: float = 0.1,
        sensing_range: float = 3.0,
        capture_radius: float = 0.5,
        pursuer_speed: float = 1.0,
        evader_speed: float = 0.7,
        neighbours: int = 4,
        targets: int = 4,
        capture_reward: float = 10.0,
        distance_penalty: float = 0.1,
        cell_capacity: int = 4,
        continuous_actions: bool = False,
        max_episode_steps: int | None = 100,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        **contract_options,
    ):
        if num_evaders is None and isinstance(num_pursuers, int) and not isinstance(num_pursuers, bool):
            num_evaders = max(1, num_pursuers // 4)
        for name, value, least in (
            ("num_pursuers", num_pursuers, 1),
            ("num_evaders", num_evaders, 1),
            ("neighbours", neighbours, 0),
            ("targets", targets, 1),
            ("cell_capacity", cell_capacity, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        for name, value in (
            ("density", density),
            ("sensing_range", sensing_range),
            ("capture_radius", capture_radius),
            ("pursuer_speed", pursuer_speed),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if not evader_speed >= 0:
            raise ValueError(f"evader_speed must be non-negative, got {evader_speed!r}")
        self.num_pursuers, self.num_evaders = p, e = num_pursuers, num_evaders
        self.side = math.sqrt(p / density)
        self.sensing_range, self.capture_radius = float(sensing_range), float(capture_radius)
        self.pursuer_step, self.evader_step = pursuer_speed * DT, evader_speed * DT
        self.neighbours, self.targets = neighbours, targets
        self.capture_reward, self.distance_penalty = float(capture_reward), float(distance_penalty)
        self.continuous_actions = bool(continuous_actions)
        agent_action_space = (
            gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if self.continuous_actions else gym.spaces.Discrete(5)
        )
        obs_dim = 2 + 3 * (neighbours + targets)
        super().__init__(
            num_envs,
            device,
            num_agents=p,
            agent_observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            agent_action_space=agent_action_space,
            global_state_dim=5,
            max_episode_steps=max_episode_steps,
            seed=seed,
            agent_rewards=True,
            **contract_options,
        )
        n, device = self.num_envs, self.device
        self._positions = torch.zeros(n, p + e, 2, device=device)
        self._pursuers, self._evaders = self._positions[:, :p], self._positions[:, p:]
        self._moves = torch.tensor(MOVES, device=device) * self.pursuer_step
        self._pursuer_grid = CellGrid(n, self.side, self.sensing_range, cell_capacity, device)
        self._evader_grid = CellGrid(n, self.side, self.sensing_range, cell_capacity, device)
        self._captures = torch.zeros(n, device=device)  # in the running episode
        self._seen = None  # what the pursuers sensed in the step just taken, for its observation
        self._final_metrics = {"captures_per_evader": torch.zeros(n, device=device)}

    # -- physics --------------------------------------------------------------------------------------------

    def _flee(self) -> torch.Tensor:
        """Each evader's step ``[N, E, 2]`` by the documented rule, from the positions before the step (the pursuer
        grid holds them: the last observation, reset or state load built it)."""
        away, sensed, dist2, _ = self._pursuer_grid.query(self._evaders, self.neighbours or 1, self.sensing_range)
        weight = torch.where(sensed, dist2.clamp(min=1e-6).reciprocal(), 0.0)
        flee = -(away * weight.unsqueeze(-1)).sum(2)  # away holds pursuer minus evader
        margin = self.sensing_range / 2
        outward = ((self._evaders < margin) & (flee < 0)) | ((self._evaders > self.side - margin) & (flee > 0))
        flee = torch.where(outward, 0.0, flee)
        norm = flee.norm(dim=-1, keepdim=True)
        return torch.where(norm > 0, flee / norm.clamp(min=1e-12), 0.0) * self.evader_step

    def _advance(self, actions):
        flee = self._flee()
        if self.continuous_actions:
            command = actions.clamp(-1.0, 1.0)
            command = command / command.norm(dim=-1, keepdim=True).clamp(min=1.0)
            self._pursuers.add_(command, alpha=self.pursuer_step)
        else:
            self._pursuers.add_(self._moves[actions.long()])
        self._evaders.add_(flee)
        self._positions.clamp_(0.0, self.side)
        # Captures, from the evaders' side: each evader's nearest pursuers within the capture radius (up to
        # CAPTURERS of them get the reward). This grid of the moved pursuers also serves the observation and the
        # next step's fleeing.
        self._pursuer_grid.build(self._pursuers)
        _, close, _, capturer = self._pursuer_grid.query(self._evaders, CAPTURERS, self.capture_radius)
        captured = close[..., 0]  # [N, E]
        p = self.num_pursuers
        credit = torch.zeros(self.num_envs, p + 1, device=self.device)  # last column: nobody
        credit.scatter_add_(1, torch.where(close, capturer, p).flatten(1), close.flatten(1).float())
        self._captures.add_(captured.sum(1))
        # Captured evaders reappear uniformly in the arena; every evader draws its pair so that streams do not
        # depend on captures.
        fresh = self._uniform(self._all_envs, self.num_evaders)
        self._evaders.copy_(torch.where(captured.unsqueeze(-1), fresh, self._evaders))
        self._sense()
        sensed, dist2 = self._seen[3], self._seen[4]
        nearest = torch.where(sensed[..., 0], dist2[..., 0].sqrt() / self.sensing_range, 1.0)
        reward = credit[:, :p].mul_(self.capture_reward).sub_(nearest, alpha=self.distance_penalty)
        self._agent_reward.copy_(reward)
        torch.mean(reward, 1, out=self._reward)
        return self._reward, self._terminated  # never terminates

    def _sense(self) -> None:
        """What every pursuer senses now (its nearest pursuers on the pursuer grid, which must hold the current
        positions, and its nearest evaders), kept for the observation that follows."""
        if self.neighbours:
            rel, sensed, _, _ = self._pursuer_grid.query(self._pursuers, self.neighbours, self.sensing_range, True)
        else:
            rel = sensed = None
        self._evader_grid.build(self._evaders)
        target_rel, target_sensed, dist2, _ = self._evader_grid.query(self._pursuers, self.targets, self.sensing_range)
        self._seen = (rel, sensed, target_rel, target_sensed, dist2)

    def _uniform(self, selection: Selection, count: int) -> torch.Tensor:
        """``count`` positions uniform in the arena for the selected environments, ``[rows, count, 2]``."""
        return selection.uniform(self.rng, 0.0, self.side, 2 * count, torch.float32).view(-1, count, 2)

    def _observe(self, out, env_ids=None):
        if self._seen is None:  # after a reset or a new state, not a step: index the pursuers where they are now
            self._pursuer_grid.build(self._pursuers)
            self._sense()
        rel, sensed, target_rel, target_sensed, _ = self._seen
        self._seen = None  # what the step sensed serves its final observation only
        obs = torch.empty(self.num_envs, self.num_pursuers, out.shape[-1], device=self.device)
        torch.mul(self._pursuers, 2.0 / self.side, out=obs[..., :2]).sub_(1.0)
        column = 2 if rel is None else self._write_slots(obs, 2, rel, sensed)
        self._write_slots(obs, column, target_rel, target_sensed)
        if env_ids is None:
            out.copy_(obs)
        else:
            out.index_copy_(0, env_ids, obs.index_select(0, env_ids))

    def _write_slots(self, obs, column, rel, sensed) -> int:
        k = rel.shape[2]
        slots = obs[..., column : column + 3 * k].view(*obs.shape[:2], k, 3)
        slots[..., :2] = torch.where(sensed.unsqueeze(-1), rel / self.sensing_range, 0.0)
        slots[..., 2] = sensed
        return column + 3 * k

    def _observe_global_state(self, out, env_ids=None):
        scale = 2.0 / self.side
        state = torch.cat(
            (
                self._pursuers.mean(1) * scale - 1.0,
                self._evaders.mean(1) * scale - 1.0,
                (self._captures / self.num_evaders).unsqueeze(1),
            ),
            1,
        )
        if env_ids is None:
            out.copy_(state)
        else:
            out.index_copy_(0, env_ids, state.index_select(0, env_ids))

    def _close_episodes(self, done):
        super()._close_episodes(done)
        metric = self._final_metrics["captures_per_evader"]
        torch.mul(self._captures, done, out=metric).div_(self.num_evaders)
        self._captures.masked_fill_(done, 0.0)

    def _step_info(self):
        info = super()._step_info()
        info["episode_metrics"] = self._final_metrics
        return info

    def _reset_envs(self, selection: Selection):
        selection.write(self._positions, self._uniform(selection, self.num_pursuers + self.num_evaders))

    def _state_view(self):
        return self._positions

    def _episode_state_dict(self):
        return {**super()._episode_state_dict(), "captures": self._captures.clone()}

    def _load_episode_state_dict(self, state):
        super()._load_episode_state_dict(state)
        self._captures.copy_(state["captures"])
        self._pursuer_grid.build(self._pursuers)  # the next step's fleeing reads it
