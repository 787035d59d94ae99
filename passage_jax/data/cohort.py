"""Real-terrain fixture cohorts (contract §8): crops, markers, obstacles, exact labels.

A scene is an N x N crop of a shipped raster (``passage_jax.data.terrain``) at its
native grid, stepped at PASSAGE's 30 m convention; a start and a goal far
apart; superellipse obstacles covering at most ``coverage_max`` of the cells
(markers kept free, start-goal connectivity required); and six exact routes (the
three objectives x the ``free`` and ``obstacles`` variants) solved with SciPy's
``csgraph.dijkstra`` on the elevation *as a reader reconstructs it* from the
stored float32 tensor. Everything random comes from one NumPy Generator seeded
with ``(seed, resolution, split)``, so a cohort is reproducible bit for bit.

The shipped cohort (``passage_jax/data/cohort/``) is :func:`build_shipped_cohort`;
``python -m cli make-cohort --shipped`` rebuilds it.

Long runs report progress through an optional callback ``progress(label, done,
total)`` (``label`` names the resolution and split); the library itself prints
nothing.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.ndimage
import scipy.sparse.csgraph

from passage_jax.data.scene import (
    DEFAULT_MARKERS,
    PASSAGE_CALIBRATION,
    SPLITS,
    canonical_split,
    elevation_metres,
    normalise_elevation,
)
from passage_jax.data.terrain import RASTERS, load_raster
from passage_jax.data.writer import write_split
from passage_jax.fileio import atomic_write_json
from passage_jax.graph import (
    COST_MODELS,
    OBJECTIVES,
    VARIANTS,
    route_cost,
    route_problem,
)
from passage_jax.reference.csgraph import scipy_task_graph

#: Objective weights used when writing fixture cohorts (contract §2 defaults).
DEFAULT_WEIGHTS = {obj: COST_MODELS[obj].default_weight for obj in OBJECTIVES}
CELL_SIZE_M = 30.0
SOLVER = "scipy.csgraph.dijkstra"
GENERATOR = "passage_jax make-cohort"
#: Relative agreement required between a label's recomputed cost and Dijkstra's distance.
LABEL_RTOL = 1e-9

#: The shipped cohort: seed and scenes per split at each resolution.
SHIPPED_ROOT = Path(__file__).resolve().parent / "cohort"
SHIPPED_SEED = 2026
SHIPPED_SPLITS = ("validation", "calibration", "test")
SHIPPED_SCENES = {64: 24, 128: 24, 256: 24}

#: ``progress(label, done, total)``: called once before the first scene and after each one.
ProgressCallback = Callable[[str, int, int], None]

__all__ = [
    "CohortError", "ProgressCallback", "DEFAULT_WEIGHTS", "CELL_SIZE_M", "SOLVER",
    "GENERATOR", "LABEL_RTOL", "SHIPPED_ROOT", "SHIPPED_SEED", "SHIPPED_SPLITS", "SHIPPED_SCENES",
    "eligible_rasters", "crop_tile", "superellipse_mask", "connected", "solve_label", "scene_id",
    "make_scene", "place_scene", "scene_row", "make_cohort", "build_shipped_cohort", "make_geo_splits",
    "GEO_SPLIT_ROOTS", "Crop", "Placement", "Labels", "SceneRecipe", "CohortOptions", "cut_scene",
    "solve_labels",
]

_MAX_SCENE_TRIES = 200
_MAX_OBSTACLE_TRIES = 30
_MAX_SHAPE_TRIES = 400


class CohortError(ValueError):
    """A cohort cannot be made as asked (bad argument, existing shards, failed label check)."""


# --------------------------------------------------------------------------- #
# Rasters and crops
# --------------------------------------------------------------------------- #

def eligible_rasters(resolution: int, rasters=None) -> tuple[list[str], dict[str, str]]:
    """Rasters that can serve an N x N crop, and the skipped ones with the reason."""
    keys = list(RASTERS) if rasters is None else list(rasters)
    unknown = [k for k in keys if k not in RASTERS]
    if unknown:
        raise CohortError(f"unknown raster(s) {unknown}; shipped rasters: {list(RASTERS)}")
    if len(set(keys)) != len(keys):
        raise CohortError(f"raster list {keys} repeats a key")
    ok, skipped = [], {}
    for key in keys:
        _, info = load_raster(key)
        h, w = info["shape"]
        if h < resolution or w < resolution:
            skipped[key] = f"{h}x{w} raster is smaller than {resolution}x{resolution}"
        else:
            ok.append(key)
    return ok, skipped


def _latlon_at(info: dict, r: float, c: float) -> tuple[float, float]:
    """Bilinear (linear georeference) lat/lon at fractional raster edge coordinates."""
    h, w = info["shape"]
    k = info["corners_lat_lon"]
    fr, fc = r / h, c / w
    vals = []
    for i in range(2):
        top = k["top_left"][i] * (1 - fc) + k["top_right"][i] * fc
        bot = k["bottom_left"][i] * (1 - fc) + k["bottom_right"][i] * fc
        vals.append(top * (1 - fr) + bot * fr)
    return vals[0], vals[1]


def crop_tile(info: dict, row0: int, col0: int, rows: int, cols: int, eps: float = 1e-9) -> dict:
    """``metadata.tile`` for a crop: every integer 1-degree tile its footprint touches
    (south-west corners) and the main tile (the one holding the crop centre)."""
    corners = [_latlon_at(info, r, c) for r in (row0, row0 + rows) for c in (col0, col0 + cols)]
    lats = [p[0] for p in corners]
    lons = [p[1] for p in corners]
    lat_c, lon_c = _latlon_at(info, row0 + rows / 2.0, col0 + cols / 2.0)
    lat_tiles = range(math.floor(min(lats) + eps), math.ceil(max(lats) - eps))
    lon_tiles = range(math.floor(min(lons) + eps), math.ceil(max(lons) - eps))
    return {
        "source": f"{info['key']}: {info['region']} ({info['package']} {info['version']})",
        "lat": math.floor(lat_c), "lon": math.floor(lon_c),
        "tiles": [[la, lo] for la in lat_tiles for lo in lon_tiles],
        "bounds": {"lat_min": round(min(lats), 7), "lat_max": round(max(lats), 7),
                   "lon_min": round(min(lons), 7), "lon_max": round(max(lons), 7)},
    }


# --------------------------------------------------------------------------- #
# Markers and obstacles
# --------------------------------------------------------------------------- #

def _place_markers(rng: np.random.Generator, n: int, min_sep: int):
    start = (int(rng.integers(n)), int(rng.integers(n)))
    rr, cc = np.indices((n, n))
    far = np.flatnonzero((np.maximum(abs(rr - start[0]), abs(cc - start[1])) >= min_sep).ravel())
    if far.size == 0:  # the start sits where nothing is far enough; let the caller redraw
        return start, None
    g = int(far[rng.integers(far.size)])
    return start, (g // n, g % n)


def superellipse_mask(n: int, cy: float, cx: float, a: float, b: float, p: float,
                      theta: float) -> np.ndarray:
    """Cells whose centres satisfy |u/a|^p + |v/b|^p <= 1 in the frame rotated by theta."""
    y, x = np.indices((n, n), dtype=np.float64)
    dy, dx = y - cy, x - cx
    u = dx * math.cos(theta) + dy * math.sin(theta)
    v = -dx * math.sin(theta) + dy * math.cos(theta)
    return np.abs(u / a) ** p + np.abs(v / b) ** p <= 1.0


def _draw_obstacles(rng, n, start, goal, target, coverage_max, exponents=None):
    """Add random superellipses until coverage reaches ``target`` (never above
    ``coverage_max``, never on a marker). Half of the shape centres are drawn
    uniformly over the crop, half near the straight start-goal segment. The exponent
    of each shape kept is appended to ``exponents`` when a list is given."""
    obst = np.zeros((n, n), bool)
    n_shapes = 0
    if target <= 0:
        return obst, 0
    lo, hi = max(1.0, n / 40.0), max(1.5, n / 7.0)
    s, g = np.asarray(start, np.float64), np.asarray(goal, np.float64)
    for _ in range(_MAX_SHAPE_TRIES):
        if rng.uniform() < 0.5:  # anywhere
            cy, cx = rng.uniform(0, n, size=2)
        else:  # near the start-goal segment, so obstacles matter to the routes
            cy, cx = s + rng.uniform() * (g - s) + rng.normal(0.0, n / 10.0, size=2)
        a, b = rng.uniform(lo, hi, size=2)
        p = math.exp(rng.uniform(math.log(0.8), math.log(5.0)))
        theta = rng.uniform(0.0, math.pi)
        m = superellipse_mask(n, cy, cx, a, b, p, theta)
        if m[start] or m[goal] or not (m & ~obst).any():
            continue
        new = obst | m
        if new.mean() > coverage_max:
            continue
        obst = new
        n_shapes += 1
        if exponents is not None:
            exponents.append(round(p, 6))
        if obst.mean() >= target:
            break
    return obst, n_shapes


_EIGHT = np.ones((3, 3), bool)


def connected(obstacles: np.ndarray, start, goal) -> bool:
    """Start and goal in the same 8-connected component of free cells (a move is
    legal when its destination is free, so this is exactly reachability)."""
    lab, _ = scipy.ndimage.label(~np.asarray(obstacles, bool), structure=_EIGHT)
    return lab[start] != 0 and lab[start] == lab[goal]


# --------------------------------------------------------------------------- #
# Exact labels
# --------------------------------------------------------------------------- #

def _graph(z: np.ndarray, obstacles: np.ndarray, model: str, weight: float):
    # Every legal step costs at least its length (>= 30 m), so no edge weight is
    # zero; scipy_task_graph refuses one (csgraph would read it as "no edge").
    try:
        return scipy_task_graph(z, obstacles, model, weight, CELL_SIZE_M)
    except ValueError as e:
        raise CohortError(f"{e} under {model}") from None


def solve_label(z: np.ndarray, obstacles: np.ndarray, start, goal, model: str, weight: float, *,
                graph=None):
    """Optimal (cost, route) from start to goal with ``scipy.sparse.csgraph.dijkstra``.

    The route is rebuilt from the predecessor array and recosted with
    ``passage_jax.graph.route_cost``; the two costs must agree to ``LABEL_RTOL``.
    ``graph``: the task's SciPy graph when the caller already has it (else it is built
    with :func:`passage_jax.reference.csgraph.scipy_task_graph`).
    """
    h, w = z.shape
    s, g = start[0] * w + start[1], goal[0] * w + goal[1]
    if graph is None:
        graph = _graph(z, obstacles, model, weight)
    dist, pred = scipy.sparse.csgraph.dijkstra(graph, directed=True, indices=s,
                                               return_predecessors=True)
    if not np.isfinite(dist[g]):
        raise CohortError(f"goal {goal} is unreachable from {start} under {model}")
    cells = [g]
    while cells[-1] != s:
        p = int(pred[cells[-1]])
        if p < 0 or len(cells) > h * w:
            raise CohortError("broken predecessor chain in the Dijkstra result")
        cells.append(p)
    cells.reverse()
    route = np.array([(c // w, c % w) for c in cells], dtype=np.int32)
    problem = route_problem(route, start, goal, obstacles)
    if problem:
        raise CohortError(f"Dijkstra route under {model} is not legal: {problem}")
    c_route = route_cost(route, z, model, weight, CELL_SIZE_M)
    c_star = float(dist[g])
    if abs(c_route - c_star) > LABEL_RTOL * c_star:
        raise CohortError(f"route cost {c_route!r} disagrees with Dijkstra distance {c_star!r} "
                          f"under {model}")
    return c_star, route


# --------------------------------------------------------------------------- #
# Scenes and cohorts
# --------------------------------------------------------------------------- #

def scene_id(split: str, i: int) -> str:
    """10-digit id, unique within a resolution: split number x 1e8 + position."""
    return f"{SPLITS.index(split) * 100_000_000 + i:010d}"


@dataclasses.dataclass(frozen=True)
class Crop:
    """An N x N crop of a shipped raster: the raster's ``key`` and ``info``, the crop's
    top-left cell (``row0``, ``col0``) on it and its normalised elevation ``e``."""

    key: str
    info: dict
    row0: int
    col0: int
    e: np.ndarray


@dataclasses.dataclass(frozen=True)
class Placement:
    """A scene's markers and obstacles on its crop: ``start``, ``goal``, the boolean
    ``obstacles`` and ``facts`` (coverage target, n_shapes, superellipse_exponents)."""

    start: tuple
    goal: tuple
    obstacles: np.ndarray
    facts: dict


@dataclasses.dataclass(frozen=True)
class Labels:
    """A scene's six exact ``routes`` ({(objective, variant): (L, 2) int32}) and their
    costs ``c_star`` ({"<objective>/<variant>": cost})."""

    routes: dict
    c_star: dict


@dataclasses.dataclass(frozen=True)
class SceneRecipe:
    """What every scene of a split is cut with: the resolution ``n``, the ``split``, the
    ``seed`` recorded in the metadata, the largest obstacle coverage ``coverage_max`` and
    the least start-goal separation ``min_sep`` (Chebyshev cells)."""

    n: int
    split: str
    seed: int
    coverage_max: float
    min_sep: int


def _fields_of(cls, given: dict, what: str) -> None:
    unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise TypeError(f"{what}() got unexpected keyword argument(s): "
                        f"{', '.join(map(repr, unknown))}")


@dataclasses.dataclass(frozen=True)
class CohortOptions:
    """How :func:`make_cohort` cuts a split: the ``seed``, the largest obstacle coverage
    ``coverage_max`` (in [0, 0.3]), the rasters to cut from (None: every shipped one), the
    rows of a shard, and the least start-goal separation (None: ceil(N / 3))."""

    seed: int = 0
    coverage_max: float = 0.3
    rasters: tuple | list | None = None
    rows_per_shard: int = 64
    min_separation: int | None = None

    def __post_init__(self):
        if int(self.seed) != self.seed or self.seed < 0:
            raise CohortError(f"seed must be a non-negative integer, got {self.seed!r}")
        if not (0.0 <= self.coverage_max <= 0.3):
            raise CohortError(f"coverage_max must lie in [0, 0.3], got {self.coverage_max!r}")

    @classmethod
    def of(cls, options: CohortOptions | None = None, **overrides) -> CohortOptions:
        """``options`` (default: the defaults) with ``overrides`` set; a name that is not a
        field is a TypeError naming it."""
        _fields_of(cls, overrides, "make_cohort")
        base = cls() if options is None else options
        return dataclasses.replace(base, **overrides) if overrides else base

    def min_sep(self, resolution: int) -> int:
        """The start-goal separation at ``resolution``; CohortError outside [1, N - 1]."""
        sep = math.ceil(resolution / 3) if self.min_separation is None else int(self.min_separation)
        if not (1 <= sep <= resolution - 1):
            raise CohortError(f"min_separation must lie in [1, {resolution - 1}], got {sep}")
        return sep


def place_scene(rng: np.random.Generator, n: int, min_sep: int, coverage_max: float):
    """One try at a scene's start, goal and obstacles on an N x N crop: markers at least
    ``min_sep`` apart, a coverage target in ``[coverage_max / 3, coverage_max]`` and
    superellipse obstacles keeping the goal reachable (up to ``_MAX_OBSTACLE_TRIES``
    draws). Returns a :class:`Placement` (facts: target, n_shapes,
    superellipse_exponents), or None when this try found no acceptable placement."""
    start, goal = _place_markers(rng, n, min_sep)
    if goal is None:
        return None
    target = float(rng.uniform(coverage_max / 3.0, coverage_max)) if coverage_max > 0 else 0.0
    for _ in range(_MAX_OBSTACLE_TRIES):
        exponents: list = []
        obst, n_shapes = _draw_obstacles(rng, n, start, goal, target, coverage_max, exponents)
        if connected(obst, start, goal):
            return Placement(start, goal, obst, {"target": target, "n_shapes": n_shapes,
                                                 "superellipse_exponents": exponents})
    return None


def _crop_and_place(rng: np.random.Generator, key: str, raster: tuple, recipe: SceneRecipe):
    """``(crop, z, placement)``: crops of ``raster`` (``(z_raster, info)``) drawn until one
    has relief and a placement (``z``: the crop's elevation as a reader reconstructs it)."""
    z_raster, info = raster
    n = recipe.n
    h, w = z_raster.shape
    for _ in range(_MAX_SCENE_TRIES):
        row0, col0 = int(rng.integers(h - n + 1)), int(rng.integers(w - n + 1))
        e = normalise_elevation(z_raster[row0:row0 + n, col0:col0 + n], PASSAGE_CALIBRATION)
        if not (e.min() >= 0.0 and e.max() <= 1.0):
            raise CohortError(f"{key}: crop at ({row0}, {col0}) leaves the calibration range")
        z = elevation_metres(e, PASSAGE_CALIBRATION)  # what a reader reconstructs
        if not z.max() > z.min():
            continue  # flat crop: no terrain to plan over
        placed = place_scene(rng, n, recipe.min_sep, recipe.coverage_max)
        if placed is not None:
            return Crop(key, info, row0, col0, e), z, placed
    raise CohortError(f"{key}: no acceptable {n}x{n} scene after {_MAX_SCENE_TRIES} tries")


def solve_labels(z: np.ndarray, placement: Placement) -> Labels:
    """The six exact routes of a placed scene (:func:`solve_label` per objective and variant,
    at the default weights)."""
    routes, c_star = {}, {}
    free = np.zeros_like(placement.obstacles)
    for obj in OBJECTIVES:
        for var in VARIANTS:
            blocked = placement.obstacles if var == "obstacles" else free
            c, route = solve_label(z, blocked, placement.start, placement.goal, obj,
                                   DEFAULT_WEIGHTS[obj])
            routes[(obj, var)] = route
            c_star[f"{obj}/{var}"] = c
    return Labels(routes, c_star)


def cut_scene(rng: np.random.Generator, key: str, raster: tuple, recipe: SceneRecipe,
              index: int) -> dict:
    """Scene number ``index`` of ``recipe``'s split (a ``writer.write_split`` row), cut from
    raster ``key`` (``raster``: ``(z_raster, info)``, as ``load_raster`` returns it)."""
    crop, z, placed = _crop_and_place(rng, key, raster, recipe)
    return scene_row(crop, placed, solve_labels(z, placed), split=recipe.split, index=index,
                     seed=recipe.seed)


def make_scene(rng: np.random.Generator, key: str, z_raster: np.ndarray, info: dict, n: int,
               split: str, *, index: int, **recipe) -> dict:
    """One scene row (``writer.write_split`` format) cut from raster ``key``: scene
    number ``index`` of the split; ``recipe``: ``seed`` (recorded in the metadata),
    ``coverage_max`` (obstacles up to it) and ``min_sep`` (start and goal at least that
    many cells apart, Chebyshev), the fields of :class:`SceneRecipe`."""
    _fields_of(SceneRecipe, recipe, "make_scene")
    return cut_scene(rng, key, (z_raster, info), SceneRecipe(n, split, **recipe), index)


def scene_row(crop: Crop, placement: Placement, labels: Labels, *, split: str, index: int,
              seed: int, generator: str = GENERATOR) -> dict:
    """One scene row (``writer.write_split`` format): the input tensor from the crop's
    normalised elevation, the placement's obstacles and markers, the six labelled routes
    and the metadata (the crop on its raster; the placement's coverage target, number of
    shapes and their super-ellipse exponents; ``seed`` and ``generator`` in the source)."""
    e, info, obst, facts = crop.e, crop.info, placement.obstacles, placement.facts
    n = e.shape[0]
    markers = np.zeros((n, n), np.float32)
    markers[placement.start] = DEFAULT_MARKERS["start"]
    markers[placement.goal] = DEFAULT_MARKERS["goal"]
    tensor = np.stack([e, markers, obst.astype(np.float32)], axis=-1)
    sid = scene_id(split, index)
    metadata = {
        "index": int(sid),
        "resolution": n,
        "split": split,
        "calibration": dict(PASSAGE_CALIBRATION),
        "solvers": {obj: {"weight": DEFAULT_WEIGHTS[obj], "solver": SOLVER, "heuristic": "none"}
                    for obj in OBJECTIVES},
        "markers": dict(DEFAULT_MARKERS),
        "tile": crop_tile(info, crop.row0, crop.col0, n, n),
        "crop": {"row0": crop.row0, "col0": crop.col0, "rows": n, "cols": n,
                 "cell_size_m": CELL_SIZE_M},
        "obstacles": {"coverage": float(obst.mean()), "target": round(facts["target"], 6),
                      "n_shapes": facts["n_shapes"],
                      "superellipse_exponents": facts["superellipse_exponents"]},
        "source": {"raster": crop.key, "package": info["package"], "version": info["version"],
                   "member": info["member"], "native_cell_m": info["native_cell_m"],
                   "native_cell_yx_m": info["native_cell_yx_m"],
                   "bundle_sha256": info["bundle_sha256"], "fixture": True,
                   "generator": generator, "seed": seed},
        "c_star": labels.c_star,
        "tensor_channels": ["elevation_normalised", "markers", "obstacles"],
    }
    return {"id": sid, "tensor": tensor, "routes": labels.routes, "metadata": metadata}


def _split_folder(out, resolution, split) -> Path:
    return Path(out) / f"{resolution}x{resolution}" / split


def _check_counts(resolution, n_scenes) -> int:
    """The resolution as an int; CohortError for a resolution below 8 or a scene count
    outside [1, 1e8)."""
    if int(resolution) != resolution or resolution < 8:
        raise CohortError(f"resolution must be an integer >= 8, got {resolution!r}")
    if int(n_scenes) != n_scenes or n_scenes < 1:
        raise CohortError(f"n_scenes must be a positive integer, got {n_scenes!r}")
    if n_scenes >= 100_000_000:
        raise CohortError("n_scenes must be below 1e8 (scene ids are 10 digits)")
    return int(resolution)


def _cut_rows(recipe: SceneRecipe, keys: list[str], n_scenes: int, progress) -> list[dict]:
    """The split's scene rows: rasters cycled in an order drawn from the split's generator,
    which then draws every scene."""
    rng = np.random.default_rng([recipe.seed, recipe.n, SPLITS.index(recipe.split)])
    order = [keys[j] for j in rng.permutation(len(keys))]
    loaded = {k: load_raster(k) for k in keys}
    label = f"{recipe.n}x{recipe.n} {recipe.split}"
    if progress:
        progress(label, 0, n_scenes)
    rows = []
    for i in range(n_scenes):
        key = order[i % len(order)]
        rows.append(cut_scene(rng, key, loaded[key], recipe, i))
        if progress:
            progress(label, i + 1, n_scenes)
    return rows


def make_cohort(out, resolution: int, split: str, n_scenes: int, *,
                options: CohortOptions | None = None, progress: ProgressCallback | None = None,
                **overrides) -> dict:
    """Cut ``n_scenes`` labelled scenes and write them as ``<out>/<N>x<N>/<split>/``.

    ``options`` (:class:`CohortOptions`) and keyword overrides of its fields (``seed``,
    ``coverage_max``, ``rasters``, ``rows_per_shard``, ``min_separation``) say how.
    Rasters are cycled in a seeded order so each eligible one appears once
    ``n_scenes`` reaches their number; rasters smaller than N are skipped (listed
    in the returned summary under ``skipped``). Refuses a split folder that
    already holds shards. ``progress`` (optional) is called as
    ``progress("<N>x<N> <split>", done, n_scenes)``. Returns a summary dict.
    """
    split = canonical_split(split)
    resolution = _check_counts(resolution, n_scenes)
    opts = CohortOptions.of(options, **overrides)
    min_sep = opts.min_sep(resolution)
    folder = _split_folder(out, resolution, split)
    if folder.exists() and any(folder.glob("*.parquet")):
        raise CohortError(f"{folder} already holds shards; refusing to overwrite")
    keys, skipped = eligible_rasters(resolution, opts.rasters)
    if not keys:
        raise CohortError(f"no raster can serve {resolution}x{resolution} crops ({skipped})")
    recipe = SceneRecipe(resolution, split, int(opts.seed), opts.coverage_max, min_sep)
    rows = _cut_rows(recipe, keys, n_scenes, progress)
    paths = write_split(out, resolution, split, rows, rows_per_shard=opts.rows_per_shard)
    used = {}
    for r in rows:
        k = r["metadata"]["source"]["raster"]
        used[k] = used.get(k, 0) + 1
    return {"root": str(out), "resolution": resolution, "split": split, "n_scenes": n_scenes,
            "seed": recipe.seed, "coverage_max": opts.coverage_max, "rasters": used,
            "skipped": skipped, "shards": [str(p) for p in paths]}


GEO_SPLIT_ROOTS = ("holdout", "matched_random")


def make_geo_splits(out, resolution: int, n_scenes: int, holdout_rasters, *, seed: int = 0,
                    split: str = "test", coverage_max: float = 0.3,
                    progress: ProgressCallback | None = None) -> dict:
    """The two cohorts of the geographic trust axis (docs/cohort.md): ``<out>/holdout/`` cut only
    from ``holdout_rasters`` (regions a planner never saw), and ``<out>/matched_random/`` cut
    from every other eligible raster. Both hold ``n_scenes`` scenes of ``split`` made by the
    same generator with the same seed, so their marginals match by construction: the same
    obstacle-coverage targets and shapes process, the same start-goal separation, the same
    resolution; only the terrain's region differs. Returns both summaries and, per root, the
    obstacle coverage and relief (min / median / max) so the match can be read."""
    holdout = list(dict.fromkeys(holdout_rasters or []))
    if not holdout:
        raise CohortError("name at least one raster to hold out")
    unknown = [k for k in holdout if k not in RASTERS]
    if unknown:
        raise CohortError(f"unknown raster(s) {unknown}; shipped: {list(RASTERS)}")
    eligible = list(eligible_rasters(int(resolution))[0])
    held = [k for k in holdout if k in eligible]
    rest = [k for k in eligible if k not in holdout]
    if not held:
        raise CohortError(f"none of {holdout} is eligible at {resolution}x{resolution}")
    if not rest:
        raise CohortError("every eligible raster is held out: nothing is left for the random split")
    out = Path(out)
    summaries = {}
    for name, keys in zip(GEO_SPLIT_ROOTS, (held, rest)):
        summaries[name] = make_cohort(out / name, resolution, split, n_scenes, seed=seed,
                                      coverage_max=coverage_max, rasters=keys, progress=progress)
        summaries[name]["root"] = str(out / name)
    return {"holdout_rasters": held, "random_rasters": rest, "splits": summaries}


def build_shipped_cohort(out=SHIPPED_ROOT, seed: int = SHIPPED_SEED,
                         progress: ProgressCallback | None = None,
                         command: str = "python -m cli make-cohort --shipped") -> dict:
    """(Re)make the shipped cohort into ``out`` (which must not hold its shards yet) and
    write its ``manifest.json``; ``command`` is recorded there as the way to rebuild."""
    summaries = []
    for n, k in SHIPPED_SCENES.items():
        for split in SHIPPED_SPLITS:
            summaries.append(make_cohort(out, n, split, k, seed=seed, progress=progress))
    manifest = {
        "generator": GENERATOR, "seed": seed, "coverage_max": 0.3,
        "command": command,
        "splits": [{k: s[k] for k in ("resolution", "split", "n_scenes", "rasters", "skipped")}
                   for s in summaries],
    }
    atomic_write_json(Path(out, "manifest.json"), manifest)
    return manifest

