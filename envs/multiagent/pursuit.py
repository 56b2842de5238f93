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
density; where one holds more than ``cell_capacity`` points, the surplus (the points of higher index, not the
farthest) is not seen from that cell. The ``k`` nearest of a query's 36 candidates are chosen by a selection network of
elementwise minima and maxima over all queries at once (``smallest_rows``), not ``topk`` one query at a time, and
every shape is fixed, so the step compiles as one graph: ``rl_suite.compiled.compile_env_step`` (the runner's
``compile="compile"``) takes it from about 0.7M to 0.9M-1.5M agent-steps per second at P = 1,000 on one core of a
2-core AMD EPYC, and to 2.3M-2.5M with a thread on each core (``benchmarks/results/pursuit_throughput.md``).
``tests/test_pursuit.py`` checks the search against all pairs.

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


CELL_BITS, CELL_MASK = 4, 15  # a candidate's code holds its cell among the 9 around the query in its low 4 bits


def rows_for(k: int) -> int:
    """The multiple of rows ``smallest_rows`` needs for ``k``: ``k`` rounded up to a power of two."""
    return 1 << (k - 1).bit_length()


def _compare_exchange(rows: list[torch.Tensor], i: int, j: int) -> None:
    low = torch.minimum(rows[i], rows[j])
    rows[j] = torch.maximum(rows[i], rows[j])
    rows[i] = low


def _sort_bitonic(rows: list[torch.Tensor]) -> list[torch.Tensor]:
    """Sort a bitonic sequence of rows (a power of two of them) elementwise, in place: Batcher's half-cleaners."""
    distance = len(rows) // 2
    while distance:
        for start in range(0, len(rows), 2 * distance):
            for i in range(start, start + distance):
                _compare_exchange(rows, i, i + distance)
        distance //= 2
    return rows


def smallest_rows(rows: list[torch.Tensor], k: int) -> list[torch.Tensor]:
    """The ``k`` smallest of ``rows`` (equal-shaped integer tensors) at every element, ascending, through a selection
    network of elementwise minima and maxima (Batcher's bitonic merges): runs of ``w`` sorted rows (``k`` rounded up
    to a power of two) are built by full merges, then merged in pairs keeping only the ``w`` smallest (the minimum of
    one run and the other reversed is a bitonic sequence that holds them) until one run is left. For 36 rows and
    ``k = 4`` that is about 200 elementwise operations. Torch's CPU ``topk`` takes the rows of a ``[Q, K]`` table one
    at a time; these take all ``Q`` at once in each operation: on 36 x 16,000 keys, 1.7 ms eagerly against topk's
    5.4 ms, and 0.1 ms under ``torch.compile``, where they fuse into one loop (2-core AMD EPYC, one thread)."""
    width = rows_for(k)
    if len(rows) % width:
        raise ValueError(f"smallest_rows needs a multiple of {width} rows for k = {k}, got {len(rows)}")
    runs = [[row] for row in rows]
    while len(runs) > 1 and len(runs[0]) < width:  # full merges: runs of 1, 2, 4, ... sorted rows
        runs = [_sort_bitonic(a + b[::-1]) for a, b in _pairs(runs)]  # (no run is left out: a multiple of the width)
    while len(runs) > 1:  # keep the `width` smallest of each pair of runs; an odd run out waits for the next round
        merged = [
            _sort_bitonic([torch.minimum(x, y) for x, y in zip(a, b[::-1], strict=True)]) for a, b in _pairs(runs)
        ]
        runs = merged + runs[len(merged) * 2 :]
    return runs[0][:k]


def _pairs(runs: list) -> zip:
    return zip(runs[0::2], runs[1::2], strict=False)


class CellGrid:
    """Fixed-radius nearest neighbours of ``[N, Q, 2]`` queries among ``[N, M, 2]`` points in ``[0, L]^2``, per
    environment, through a grid of ``cells`` x ``cells`` square cells of side ``cell_size`` (at least the radius).

    ``build`` sorts the points by cell (stably: a cell's points in index order) into three tables (x, y and the
    point's index; empty slots at infinity) of ``capacity`` slots per cell, padded with a ring of empty cells. The
    tables are slot-major, ``[capacity, cells]``, so that one gather of the 9 cells around every query gives the
    candidates as ``[9 * capacity, Q]``: each candidate of every query in one contiguous row, which the distance
    arithmetic and the selection of the nearest (``smallest_rows``) take whole. Where the 9 cells' slots would
    outnumber the points (``9 * capacity >= M``), every point is a candidate instead: all pairs are then both exact
    and cheaper. Every shape is fixed by the sizes, so the search compiles as one graph (``compile_env_step``)."""

    def __init__(self, num_envs: int, side: float, cell_size: float, capacity: int, device: torch.device):
        self.cells = g = max(1, math.ceil(side / cell_size))
        self.cell_size, self.capacity = cell_size, capacity
        self.width = g + 2  # cells per padded row
        self.spill = num_envs * self.width**2  # the column that points beyond a cell's capacity are written to
        self._tables = torch.empty(3, capacity, self.spill + 1, device=device)  # x, y, point index
        self._env_first = torch.arange(num_envs, device=device).view(-1, 1) * self.width**2  # env's first cell
        # the 3 x 3 cells around a query, from the padded top-left one: in the padding ring every slot is empty
        self._code_cache: dict[tuple[int, bool], tuple] = {}  # _codes
        self._around = torch.tensor([r * self.width + c for r in range(3) for c in range(3)], device=device)

    def _cell_xy(self, positions: torch.Tensor) -> torch.Tensor:
        return positions.div(self.cell_size).floor_().long().clamp_(0, self.cells - 1)

    def _cell(self, positions: torch.Tensor, shift: int) -> torch.Tensor:
        """The padded cell index ``[N, Q]`` of each position's cell moved by ``shift`` rows and columns (1: its
        own cell; 0: the top-left one of the 3 x 3 around it)."""
        xy = self._cell_xy(positions) + shift
        return self._env_first + xy[..., 0] * self.width + xy[..., 1]

    def build(self, points: torch.Tensor) -> None:
        m = points.shape[1]
        self.points, self.per_env = points, m
        self.all_pairs = 9 * self.capacity >= m
        if self.all_pairs:
            return
        cell = self._cell(points, 1).flatten()
        order = cell.argsort(stable=True)
        sorted_cell = cell.index_select(0, order)
        rank = torch.arange(cell.numel(), device=cell.device) - torch.searchsorted(sorted_cell, sorted_cell)
        column = torch.where(rank < self.capacity, sorted_cell, self.spill)  # beyond a cell's capacity: not seen
        slot = (rank.clamp_(max=self.capacity - 1), column)
        self._tables.fill_(torch.inf)
        for table, values in enumerate((*points.reshape(-1, 2).index_select(0, order).t(), order.remainder(m))):
            self._tables[table].index_put_(slot, values.float())

    def _candidates(self, queries: torch.Tensor, table: int, around: torch.Tensor | None) -> torch.Tensor:
        """Table ``table`` (0: x, 1: y, 2: point index) of every candidate of every query: ``[9 * capacity, N, Q]``
        through the 9 cells ``around`` each query, or ``[M, N, 1]`` for all pairs (candidate j is point j)."""
        if around is None:
            n = queries.shape[0]
            return (
                self.points[..., table].t().view(-1, n, 1)
                if table < 2
                else torch.arange(self.per_env, device=queries.device).view(-1, 1, 1)
            )
        if torch.compiler.is_compiling():  # inductor vectorises this form; eagerly index_select is twice as fast
            return self._tables[table][:, around].flatten(0, 1)
        return self._tables[table].index_select(1, around.flatten()).view(-1, *around.shape[1:])

    def _chosen(self, table: int, around: torch.Tensor | None, code: torch.Tensor) -> torch.Tensor:
        """Table ``table`` (as ``_candidates``) of the candidates that the selection chose, by their codes ``[k, N,
        Q]`` (``query``)."""
        if around is None:  # the code is the point
            if table == 2:
                return code
            k, n, q = code.shape
            return self.points[..., table].t().unsqueeze(-1).expand(-1, n, q).gather(0, code)
        cell = around.gather(0, code.bitwise_and(CELL_MASK))
        return self._tables[table][code.bitwise_right_shift(CELL_BITS), cell]

    def _codes(self, candidates: int, all_pairs: bool, device: torch.device) -> tuple:
        """The candidates' codes ``[candidates]`` (int32: the point for all pairs, else slot * 16 + cell), the
        largest, the bits that hold them and the padding's larger code (all ones), and the mask of those bits as a
        0-d int32 tensor (a Python integer makes bitwise_and 3 to 20 times slower eagerly). Made once per shape: no
        tensor is built from Python values in a step."""
        cached = self._code_cache.get((candidates, all_pairs))
        if cached is None:
            if all_pairs:
                code, largest = torch.arange(candidates, device=device, dtype=torch.int32), candidates - 1
            else:
                slot, cell = torch.arange(self.capacity, device=device), torch.arange(9, device=device)
                code = (slot.view(-1, 1).bitwise_left_shift(CELL_BITS) + cell).flatten().int()
                largest = ((self.capacity - 1) << CELL_BITS) + 8
            bits = (largest + 1).bit_length()
            mask = torch.tensor((1 << bits) - 1, dtype=torch.int32, device=device)
            cached = self._code_cache[candidates, all_pairs] = (code, largest, bits, mask)
        return cached

    def query(self, queries: torch.Tensor, k: int, radius: float, exclude_self: bool = False):
        """The ``k`` nearest built points within ``radius`` of each query, nearest first (squared distances within
        ``radius^2 / 2^24`` of each other may come in either order): their positions relative to the query ``[N, Q,
        k, 2]`` (zeros for an empty slot), whether each slot holds one ``[N, Q, k]`` (bool), its squared distance
        (``inf`` for an empty slot) and its index among its environment's points (meaningless for an empty slot).
        ``exclude_self``: query q is point q of the same environment, not its own neighbour.

        Candidates are ``[rows, N, Q]``, each row one candidate of every query: the selection takes rows whole, and
        compiled code needs no integer division per element to find a query's environment. Only the candidates' keys
        are kept at that size; the chosen ones' positions are read again from the tables."""
        n, q = queries.shape[:2]
        device = queries.device
        qx, qy = queries[..., 0].contiguous(), queries[..., 1].contiguous()
        # candidate (s, c) is slot s of the query's cell c of the 9 around it; its code is s * 16 + c
        around = None if self.all_pairs else self._around.view(-1, 1, 1) + self._cell(queries, 0)  # [9, N, Q]
        x, y = (self._candidates(queries, table, around) for table in range(2))
        dx, dy = x - qx, y - qy
        dist2 = torch.addcmul(dx * dx, dy, dy)  # empty slots at infinity
        if exclude_self:
            own = torch.arange(q, device=device, dtype=dist2.dtype)
            dist2 = dist2.masked_fill(self._candidates(queries, 2, around) == own, torch.inf)
        candidates = dist2.shape[0]
        code, largest_code, code_bits, code_mask = self._codes(candidates, around is None, device)
        padding = -candidates % rows_for(k)  # empty candidates: the selection takes a multiple of rows_for(k)
        # The key of a candidate: its squared distance over the radius's, in 2^-D steps up to 1 (farther ones are
        # never reported), times 2^R, plus its code (R bits hold the codes and a larger one for padding, D = 30 - R),
        # so that the selection carries the code along. Integer keys, not the floats' bits: under torch.compile a
        # bitcast costs 10 times a multiply; shifts and masks, not divisions, for the same reason.
        steps = float(1 << (30 - code_bits))
        key = (dist2 * (steps / (radius * radius))).clamp_(max=steps).int().bitwise_left_shift_(code_bits)
        key = key.expand(candidates, n, q).reshape(candidates, n * q).add_(code.view(-1, 1))
        if padding:
            key = torch.nn.functional.pad(key, (0, 0, 0, padding), value=torch.iinfo(torch.int32).max)
        chosen_code = torch.stack(smallest_rows(list(key.unbind(0)), k)).bitwise_and_(code_mask).long().view(k, n, q)
        if padding:  # fewer candidates than k: a padded row was chosen for an empty slot
            padded, chosen_code = chosen_code == code_mask, chosen_code.clamp(max=largest_code)
        chosen = [self._chosen(table, around, chosen_code) for table in range(3)]
        dx, dy = chosen[0] - qx, chosen[1] - qy
        nearest = torch.addcmul(dx * dx, dy, dy)  # [k, N, Q], as dist2 computed it
        sensed = nearest <= radius * radius  # (a point excluded as the query itself is farther than any radius)
        if exclude_self:
            sensed &= chosen[2] != own
        if padding:
            sensed &= ~padded
        nearest = nearest.masked_fill(~sensed, torch.inf)
        relative = torch.stack((dx, dy), -1).masked_fill(~sensed.unsqueeze(-1), 0.0)
        return (
            relative.permute(1, 2, 0, 3),
            sensed.permute(1, 2, 0),
            nearest.permute(1, 2, 0),
            chosen[2].long().permute(1, 2, 0),
        )


class Pursuit(MultiAgentVecEnv):
    """``num_pursuers`` learned pursuers and ``num_evaders`` scripted evaders per environment; see the module
    docstring. Options: ``num_pursuers`` (10), ``num_evaders``, ``density``, ``sensing_range``, ``capture_radius``,
    ``pursuer_speed``, ``evader_speed``, ``neighbours``, ``targets``, ``capture_reward``, ``distance_penalty``,
    ``cell_capacity``, ``continuous_actions``, ``max_episode_steps`` (100), ``device``, ``seed``, and the contract's
    ``check_values`` and ``masked_resets``."""

    episode_metric_names = METRICS
    # Inductor's vectorised code: the compiled step at P = 1,000, N = 16 takes 13.2 ms with it and 15.2 ms as scalar
    # C++ (2-core AMD EPYC, torch 2.13; the default, rl_suite.env.VecEnv.compile_options, suits tasks of few ops).
    compile_options = {}

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
        obs[..., :2] = self._pursuers * (2.0 / self.side) - 1.0
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
