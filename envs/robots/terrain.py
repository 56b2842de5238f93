"""Rough terrain for the legged tasks: a grid of tiles, generated from a seed, simulated as one MuJoCo heightfield.

Layout (legged_gym's curriculum terrain, ``Terrain.curiculum`` in legged_gym/utils/terrain.py): ``levels`` rows of
tiles along x, whose difficulty ``d = level / levels`` rises from 0 with the row (``difficulty_range`` maps it onto
another range: a test course of 15-degree slopes is one level at ``d = tan(15 deg) / 0.4``), and ``columns``
columns along y, each of one kind, the kinds taking the columns in the shares of ``proportions``. A tile is
``tile_size`` m square (legged_gym: 8 m) with a flat platform of ``platform_size`` m (3 m) at its centre, where
robots start; a flat ``border`` surrounds the grid. The grid's corner, tile (0, 0)'s, is the world's origin.

The kinds, named for what a robot meets walking away from its tile's centre, and how ``d`` shapes them (legged_gym's
``Terrain.make_terrain`` numbers unless noted):

    rough         uniform random heights in [-a, a], a = 0.02 + 0.08 d m, on a 0.2 m grid, interpolated (Isaac Lab's
                  ROUGH_TERRAINS_CFG random_rough: noise 0.02 to 0.10 m)
    slope_up      a slope of 0.4 d (rise over run) up from the platform to the tile's edge
    slope_down    the same slope down from the platform
    slope_rough   slope_down with legged_gym's roughness on top: uniform in [-0.05, 0.05] m on a 0.2 m grid
    stairs_up     steps of 0.31 m depth and 0.05 + 0.18 d m height, up from the platform
    stairs_down   the same steps down from the platform
    obstacles     20 rectangles of 1 to 2 m a side, raised or sunk by h or h / 2, h = 0.05 + 0.2 d m

Heights are sampled every ``horizontal_scale`` m (legged_gym: 0.1 m); MuJoCo joins the samples with triangles.
``Terrain.heights_at`` reads the same surface on the task's device, for height scans and for placing robots;
``Terrain.origins`` are the tiles' start points, at the height of the highest sample within 1 m of the centre
(legged_gym's ``env_origins``). ``TerrainPlacement`` keeps which tile each environment walks, moves it with the
terrain curriculum, and scans the ground around each base; ``check_collidable`` refuses a robot whose collision
geoms a backend cannot collide with a heightfield.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rl_suite.env import Selection

KINDS = ("rough", "slope_up", "slope_down", "slope_rough", "stairs_up", "stairs_down", "obstacles")

ROUGH_GRID = 0.2  # m between the random heights of rough ground (legged_gym's downsampled_scale)
STEP_DEPTH = 0.31  # m (legged_gym's step_width)
OBSTACLES, OBSTACLE_SIZE = 20, (1.0, 2.0)  # per tile; side length range (m)
FOUNDATION = 1.0  # m of solid ground under the lowest sample (the heightfield's base)
# legged_gym's height measurements: a 17 x 11 grid, 0.1 m apart, around the base and turned with its yaw; each the
# base's height less 0.5 m less the ground's, clipped to [-1, 1] m
HEIGHT_SCAN_X, HEIGHT_SCAN_Y = np.arange(-8, 9) * 0.1, np.arange(-5, 6) * 0.1
HEIGHT_SCAN_BASE_OFFSET = 0.5
HEIGHT_SCAN_SIZE = len(HEIGHT_SCAN_X) * len(HEIGHT_SCAN_Y)
SPAWN_SPREAD = 1.0  # m: robots start up to this far from their tile's centre in x and y (legged_gym's)


@dataclasses.dataclass(frozen=True)
class TerrainSettings:
    """The terrain's shape: the legged task's ``terrain`` keyword is a dict of these fields."""

    levels: int = 10
    """Rows of tiles along x, one per difficulty level (legged_gym: 10)."""
    columns: int = 20
    """Columns of tiles along y, shared out between the kinds (legged_gym: 20)."""
    tile_size: float = 8.0
    """Side of a tile (m)."""
    horizontal_scale: float = 0.1
    """Distance between height samples (m)."""
    border: float = 5.0
    """Flat ground around the grid (m); legged_gym has 25, which only the robots that walk off the grid reach."""
    platform_size: float = 3.0
    """Side of the flat square at each tile's centre (m)."""
    proportions: tuple[tuple[str, float], ...] = (
        ("rough", 0.2),
        ("slope_up", 0.1),
        ("slope_down", 0.1),
        ("slope_rough", 0.1),
        ("stairs_up", 0.2),
        ("stairs_down", 0.15),
        ("obstacles", 0.15),
    )
    """(kind, share) pairs, or a ``{kind: share}`` mapping: each kind's share of the columns. The default mixes Isaac
    Lab's rough-terrain shares (stairs up and down, boxes and random rough 0.2 each, slopes 0.2) with legged_gym's
    rough slopes."""
    difficulty_range: tuple[float, float] = (0.0, 1.0)
    """Level ``l`` has difficulty ``low + (high - low) * l / levels``: legged_gym's ``l / levels`` by default."""
    seed: int = 0
    """The random tiles' seed (rough ground and obstacles): the same seed, the same terrain, whatever the task's
    own seed."""

    def __post_init__(self):
        pairs = self.proportions.items() if isinstance(self.proportions, dict) else self.proportions
        object.__setattr__(self, "proportions", tuple((str(kind), float(share)) for kind, share in pairs))
        low, high = (float(v) for v in self.difficulty_range)
        object.__setattr__(self, "difficulty_range", (low, high))
        if not 0.0 <= low <= high:
            raise ValueError(f"terrain difficulty_range must be 0 <= low <= high, got {self.difficulty_range}")
        for name in ("levels", "columns"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"terrain {name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("tile_size", "horizontal_scale", "platform_size"):
            if not getattr(self, name) > 0:
                raise ValueError(f"terrain {name} must be positive, got {getattr(self, name)!r}")
        if self.border < 0:
            raise ValueError(f"terrain border must be at least 0, got {self.border!r}")
        if self.platform_size >= self.tile_size:
            raise ValueError(
                f"terrain platform_size ({self.platform_size} m) must be smaller than tile_size ({self.tile_size} m)"
            )
        samples = self.tile_size / self.horizontal_scale
        if abs(samples - round(samples)) > 1e-6:
            raise ValueError(
                f"terrain tile_size ({self.tile_size} m) must be a whole number of horizontal_scale "
                f"({self.horizontal_scale} m)"
            )
        unknown = [kind for kind, _ in self.proportions if kind not in KINDS]
        if unknown:
            raise ValueError(f"unknown terrain kinds {unknown}: the kinds are {list(KINDS)}")
        shares = [share for _, share in self.proportions]
        if any(share < 0 for share in shares) or not sum(shares) > 0:
            raise ValueError(f"terrain proportions must be non-negative with a positive sum, got {self.proportions}")
        if self.columns < sum(share > 0 for share in shares):
            raise ValueError(
                f"terrain columns ({self.columns}) must be at least the number of kinds with a share "
                f"({sum(share > 0 for share in shares)})"
            )

    def column_kinds(self) -> list[str]:
        """The kind of each column: column ``j`` takes the kind whose cumulative share first passes
        ``(j + 0.5) / columns``."""
        kinds = [kind for kind, share in self.proportions if share > 0]
        shares = np.array([share for _, share in self.proportions if share > 0], dtype=np.float64)
        bounds = np.cumsum(shares / shares.sum())
        return [
            kinds[min(int(np.searchsorted(bounds, (j + 0.5) / self.columns)), len(kinds) - 1)]
            for j in range(self.columns)
        ]


class Terrain:
    """The heights of every sample (``heights[ix, iy]``, m, at world ``(ix, iy) * horizontal_scale - border``), the
    tiles' start points (``origins[level, column]``, world xyz) and each column's kind, generated from the settings'
    ``seed``."""

    def __init__(self, settings: TerrainSettings):
        self.settings = s = settings
        self.kinds = s.column_kinds()
        rng = np.random.default_rng(s.seed)
        n = round(s.tile_size / s.horizontal_scale)
        pad = round(s.border / s.horizontal_scale)
        self.heights = np.zeros((s.levels * n + 2 * pad + 1, s.columns * n + 2 * pad + 1), dtype=np.float64)
        self.origins = np.zeros((s.levels, s.columns, 3), dtype=np.float64)
        # tile-local sample coordinates (m from the tile's centre); a tile owns n samples per side, and its far edge
        # is the next tile's first sample
        local = np.arange(n) * s.horizontal_scale - s.tile_size / 2
        x, y = np.meshgrid(local, local, indexing="ij")
        centre = np.maximum(np.abs(x), np.abs(y)) <= 1.0
        for level in range(s.levels):
            low, high = s.difficulty_range
            difficulty = low + (high - low) * level / s.levels
            for column, kind in enumerate(self.kinds):
                tile = _tile(kind, difficulty, x, y, s, rng)
                rows, cols = pad + level * n, pad + column * n
                self.heights[rows : rows + n, cols : cols + n] = tile
                self.origins[level, column] = (
                    (level + 0.5) * s.tile_size,
                    (column + 0.5) * s.tile_size,
                    tile[centre].max(),
                )
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # heights, last indices

    @property
    def size(self) -> tuple[float, float]:
        """The heightfield's extent (m) along x and y."""
        return tuple((np.array(self.heights.shape) - 1) * self.settings.horizontal_scale)

    def add_to(self, spec, friction: float = 1.0, name: str = "terrain") -> None:
        """Add the heightfield to a ``mujoco.MjSpec`` as the geom ``name`` (contype and conaffinity 1)."""
        import mujoco

        low, high = float(self.heights.min()), float(self.heights.max())
        span = max(high - low, 1e-6)
        half_x, half_y = (extent / 2 for extent in self.size)
        spec.add_hfield(
            name=name,
            nrow=self.heights.shape[1],  # MuJoCo's rows run along y, its columns along x
            ncol=self.heights.shape[0],
            size=[half_x, half_y, span, FOUNDATION],
            userdata=((self.heights.T - low) / span).ravel().tolist(),  # MuJoCo scales the data to [0, 1] anyway
        )
        border = self.settings.border
        spec.worldbody.add_geom(
            name=name,
            type=mujoco.mjtGeom.mjGEOM_HFIELD,
            hfieldname=name,
            pos=[half_x - border, half_y - border, low],
            contype=1,
            conaffinity=1,
            condim=3,
            friction=[friction, 0.005, 0.0001],
            rgba=[0.55, 0.6, 0.55, 1.0],
        )

    def heights_at(self, xy: torch.Tensor) -> torch.Tensor:
        """The terrain's height (m) under each world point ``xy[..., 2]``: MuJoCo's surface (the samples joined by
        two triangles per cell), the border's height beyond the heightfield. On ``xy``'s device, without a host
        sync."""
        if xy.device not in self._on_device:
            heights = torch.as_tensor(self.heights, dtype=torch.float32, device=xy.device)
            self._on_device[xy.device] = heights, torch.tensor(heights.shape, device=xy.device) - 1
        heights, upper = self._on_device[xy.device]
        s = self.settings
        grid = (xy + s.border) / s.horizontal_scale
        grid = torch.minimum(grid.clamp_min(0.0), upper.to(grid.dtype))
        low = torch.minimum(grid.floor().long(), upper - 1)
        t = grid - low
        ix, iy, tx, ty = low[..., 0], low[..., 1], t[..., 0], t[..., 1]
        h00, h10, h01, h11 = heights[ix, iy], heights[ix + 1, iy], heights[ix, iy + 1], heights[ix + 1, iy + 1]
        # MuJoCo splits each cell along its diagonal from (ix, iy) to (ix + 1, iy + 1): one plane on each side
        below = h00 + (h10 - h00) * tx + (h11 - h10) * ty
        above = h00 + (h11 - h01) * tx + (h01 - h00) * ty
        return torch.where(tx >= ty, below, above)


def _tile(kind: str, d: float, x: np.ndarray, y: np.ndarray, s: TerrainSettings, rng) -> np.ndarray:
    """One tile's heights (m), at the tile-local sample coordinates ``x``, ``y`` (m from its centre)."""
    half_platform = s.platform_size / 2
    # how far a sample lies outside the central platform, along the square rings that slopes and stairs follow
    outside = np.maximum(np.maximum(np.abs(x), np.abs(y)) - half_platform, 0.0)
    if kind == "rough":
        return _rough(0.02 + 0.08 * d, x, y, rng)
    if kind in ("slope_up", "slope_down", "slope_rough"):
        heights = 0.4 * d * outside * (1 if kind == "slope_up" else -1)
        return heights + (_rough(0.05, x, y, rng) if kind == "slope_rough" else 0.0)
    if kind in ("stairs_up", "stairs_down"):
        steps = np.ceil(outside / STEP_DEPTH)
        return (0.05 + 0.18 * d) * steps * (1 if kind == "stairs_up" else -1)
    height = 0.05 + 0.2 * d
    heights = np.zeros_like(x)
    for _ in range(OBSTACLES):
        width, depth = rng.uniform(*OBSTACLE_SIZE, size=2)
        cx, cy = rng.uniform(x.min(), x.max(), size=2)
        inside = (np.abs(x - cx) <= width / 2) & (np.abs(y - cy) <= depth / 2)
        heights[inside] = rng.choice([-height, -height / 2, height / 2, height])
    heights[outside == 0] = 0.0
    return heights


def _rough(amplitude: float, x: np.ndarray, y: np.ndarray, rng) -> np.ndarray:
    """Uniform heights in [-amplitude, amplitude], in steps of 5 mm towards zero (legged_gym's ``step``), on a
    ``ROUGH_GRID`` grid over the tile, linearly interpolated to the samples."""
    axis = x[:, 0]
    coarse = np.arange(axis.min(), axis.max() + ROUGH_GRID, ROUGH_GRID)
    values = np.trunc(rng.uniform(-amplitude, amplitude, size=(len(coarse), len(coarse))) / 0.005) * 0.005
    along_x = np.stack([np.interp(axis, coarse, values[:, k]) for k in range(len(coarse))], axis=1)
    return np.stack([np.interp(axis, coarse, along_x[i]) for i in range(len(axis))], axis=0)


# The geom types each physics backend collides with a heightfield: MuJoCo's collision table (engine_collision_driver.c,
# mjCOLLISIONFUNC: the convex primitives and meshes) and MuJoCo Warp's (collision_driver.MJ_COLLISION_TABLE, the same
# in mujoco_warp 4.0)
HFIELD_COLLIDERS = {
    backend: frozenset({"sphere", "capsule", "ellipsoid", "cylinder", "box", "mesh"}) for backend in ("cpu", "warp")
}
BACKEND_NAMES = {"cpu": "MuJoCo (the CPU backend)", "warp": "MuJoCo Warp"}


def check_collidable(model, backend: str, name: str = "terrain") -> None:
    """Refuse ``model`` where a geom that can touch the heightfield geom ``name`` is of a type ``backend`` cannot
    collide with a heightfield: it would fall through the ground unnoticed."""
    import mujoco

    terrain = model.geom(name).id
    kinds = {int(v): k.removeprefix("mjGEOM_").lower() for k, v in mujoco.mjtGeom.__members__.items()}
    blind: dict[str, list[str]] = {}
    for geom in range(model.ngeom):
        touches = (model.geom_contype[geom] & model.geom_conaffinity[terrain]) or (
            model.geom_conaffinity[geom] & model.geom_contype[terrain]
        )
        kind = kinds[int(model.geom_type[geom])]
        if geom != terrain and touches and kind not in HFIELD_COLLIDERS[backend]:
            blind.setdefault(kind, []).append(model.geom(geom).name or f"geom {geom}")
    if blind:
        listed = "; ".join(f"{kind} ({', '.join(names)})" for kind, names in blind.items())
        raise ValueError(
            f"{BACKEND_NAMES[backend]} cannot collide these geoms with the terrain's heightfield: {listed}. It "
            f"collides {', '.join(sorted(HFIELD_COLLIDERS[backend]))} geoms with one; change the robot's collision "
            "geoms, or use flat ground (terrain=None)"
        )


class TerrainPlacement:
    """Where each of ``num_envs`` environments walks, on ``device``: a column of the grid it keeps (environment ``i``
    walks column ``i % columns``), a level that the curriculum moves, the start point of its tile, and the height scan
    around its base.

    ``levels`` (long ``[N]``) is task state that the task checkpoints. ``place`` gives the start points of a reset's
    environments: at the first reset a level drawn uniformly from 0 to ``max_init_level``; after an episode, with
    ``curriculum``, legged_gym's rule (``_update_terrain_curriculum``): up a level when the robot got more than half
    a tile from its tile's centre, down when it walked less than half the distance its command asked for over a full
    episode, and a random level for a robot that walked off the last one.
    """

    def __init__(self, terrain: Terrain, num_envs: int, device, max_init_level: int, curriculum: bool):
        s = terrain.settings
        self.terrain, self.max_init_level, self.curriculum = terrain, max_init_level, curriculum
        self.origins = torch.as_tensor(terrain.origins, dtype=torch.float32, device=device)  # [levels, columns, 3]
        self.columns = torch.arange(num_envs, device=device) % s.columns
        self.levels = torch.zeros(num_envs, dtype=torch.long, device=device)
        x, y = np.meshgrid(HEIGHT_SCAN_X, HEIGHT_SCAN_Y, indexing="ij")
        self.scan_offsets = torch.tensor(np.stack([x.ravel(), y.ravel()], 1), dtype=torch.float32, device=device)

    def place(
        self, selection: Selection, unit: torch.Tensor, walked: torch.Tensor, commanded: torch.Tensor, starting: bool
    ) -> torch.Tensor:
        """The start points ``[rows, 3]`` of the selected environments (the rows that ``selection`` draws for), after
        moving their levels: ``unit`` is a uniform draw in [0, 1) per row, ``walked`` how far each robot got from its
        tile's centre (m), ``commanded`` how far its command would have taken it over a full episode (m);
        ``starting`` for the first reset."""
        count = self.origins.shape[0]
        if starting:
            level = (unit * (self.max_init_level + 1)).long().clamp_max(self.max_init_level)
        else:
            level = selection.read(self.levels)
            if self.curriculum:
                up = walked > self.terrain.settings.tile_size / 2
                down = (walked < 0.5 * commanded) & ~up
                level = level + up.long() - down.long()
                level = torch.where(level >= count, (unit * count).long().clamp_max(count - 1), level.clamp_min(0))
        selection.write(self.levels, level)
        return self.origins[level, selection.read(self.columns)]

    def scan(self, position: torch.Tensor, yaw: torch.Tensor) -> torch.Tensor:
        """The height scan ``[N, HEIGHT_SCAN_SIZE]`` (m) of bases at ``position [N, 3]`` with heading ``yaw [N]``."""
        cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
        dx, dy = self.scan_offsets[:, 0], self.scan_offsets[:, 1]
        points = torch.stack([position[:, :1] + cos * dx - sin * dy, position[:, 1:2] + sin * dx + cos * dy], dim=-1)
        ground = self.terrain.heights_at(points)
        return (position[:, 2:3] - HEIGHT_SCAN_BASE_OFFSET - ground).clamp(-1.0, 1.0)
