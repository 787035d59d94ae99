"""Real-terrain fixture cohorts (SPEC §8): crops, markers, obstacles, exact labels.

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

#: Objective weights used when writing fixture cohorts (SPEC §2 defaults).
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
    "GEO_SPLIT_ROOTS",
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


def place_scene(rng: np.random.Generator, n: int, min_sep: int, coverage_max: float):
    """One try at a scene's start, goal and obstacles on an N x N crop: markers at least
    ``min_sep`` apart, a coverage target in ``[coverage_max / 3, coverage_max]`` and
    superellipse obstacles keeping the goal reachable (up to ``_MAX_OBSTACLE_TRIES``
    draws). Returns ``(start, goal, obstacles, facts)`` (facts: target, n_shapes,
    superellipse_exponents), or None when this try found no acceptable placement."""
    start, goal = _place_markers(rng, n, min_sep)
    if goal is None:
        return None
    target = float(rng.uniform(coverage_max / 3.0, coverage_max)) if coverage_max > 0 else 0.0
    for _ in range(_MAX_OBSTACLE_TRIES):
        exponents: list = []
        obst, n_shapes = _draw_obstacles(rng, n, start, goal, target, coverage_max, exponents)
        if connected(obst, start, goal):
            return start, goal, obst, {"target": target, "n_shapes": n_shapes,
                                       "superellipse_exponents": exponents}
    return None


def make_scene(rng: np.random.Generator, key: str, z_raster: np.ndarray, info: dict, n: int,
               split: str, *, index: int, seed: int, coverage_max: float, min_sep: int) -> dict:
    """One scene row (``writer.write_split`` format) cut from raster ``key``: scene
    number ``index`` of the split, obstacles up to ``coverage_max``, start and goal at
    least ``min_sep`` cells apart (Chebyshev); ``seed`` is recorded in the metadata."""
    i = index
    h, w = z_raster.shape
    for _ in range(_MAX_SCENE_TRIES):
        row0, col0 = int(rng.integers(h - n + 1)), int(rng.integers(w - n + 1))
        e = normalise_elevation(z_raster[row0:row0 + n, col0:col0 + n], PASSAGE_CALIBRATION)
        if not (e.min() >= 0.0 and e.max() <= 1.0):
            raise CohortError(f"{key}: crop at ({row0}, {col0}) leaves the calibration range")
        z = elevation_metres(e, PASSAGE_CALIBRATION)  # what a reader reconstructs
        if not z.max() > z.min():
            continue  # flat crop: no terrain to plan over
        placed = place_scene(rng, n, min_sep, coverage_max)
        if placed is not None:
            break
    else:
        raise CohortError(f"{key}: no acceptable {n}x{n} scene after {_MAX_SCENE_TRIES} tries")

    start, goal, obst, obstacles = placed
    routes, c_star = {}, {}
    free = np.zeros_like(obst)
    for obj in OBJECTIVES:
        for var in VARIANTS:
            c, route = solve_label(z, obst if var == "obstacles" else free, start, goal, obj,
                                   DEFAULT_WEIGHTS[obj])
            routes[(obj, var)] = route
            c_star[f"{obj}/{var}"] = c

    return scene_row(e, obst, start, goal, routes, c_star, split=split, index=i, key=key,
                     info=info, crop=(row0, col0), obstacles=obstacles, seed=seed)


def scene_row(e, obst, start, goal, routes: dict, c_star: dict, *, split: str, index: int,
              key: str, info: dict, crop: tuple, obstacles: dict, seed: int,
              generator: str = GENERATOR) -> dict:
    """One scene row (``writer.write_split`` format): the input tensor from the normalised
    elevation ``e``, the obstacles and the markers, the six labelled ``routes`` and the
    metadata (``crop`` = (row0, col0) on raster ``key``; ``obstacles`` holds the coverage
    target, the number of shapes and their super-ellipse exponents)."""
    n = e.shape[0]
    row0, col0 = crop
    markers = np.zeros((n, n), np.float32)
    markers[start] = DEFAULT_MARKERS["start"]
    markers[goal] = DEFAULT_MARKERS["goal"]
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
        "tile": crop_tile(info, row0, col0, n, n),
        "crop": {"row0": row0, "col0": col0, "rows": n, "cols": n, "cell_size_m": CELL_SIZE_M},
        "obstacles": {"coverage": float(obst.mean()), "target": round(obstacles["target"], 6),
                      "n_shapes": obstacles["n_shapes"],
                      "superellipse_exponents": obstacles["superellipse_exponents"]},
        "source": {"raster": key, "package": info["package"], "version": info["version"],
                   "member": info["member"], "native_cell_m": info["native_cell_m"],
                   "native_cell_yx_m": info["native_cell_yx_m"],
                   "bundle_sha256": info["bundle_sha256"], "fixture": True,
                   "generator": generator, "seed": seed},
        "c_star": c_star,
        "tensor_channels": ["elevation_normalised", "markers", "obstacles"],
    }
    return {"id": sid, "tensor": tensor, "routes": routes, "metadata": metadata}


def _split_folder(out, resolution, split) -> Path:
    return Path(out) / f"{resolution}x{resolution}" / split


def make_cohort(out, resolution: int, split: str, n_scenes: int, *, seed: int = 0,
                coverage_max: float = 0.3, rasters=None, rows_per_shard: int = 64,
                progress: ProgressCallback | None = None, min_separation: int | None = None) -> dict:
    """Cut ``n_scenes`` labelled scenes and write them as ``<out>/<N>x<N>/<split>/``.

    Rasters are cycled in a seeded order so each eligible one appears once
    ``n_scenes`` reaches their number; rasters smaller than N are skipped (listed
    in the returned summary under ``skipped``). Refuses a split folder that
    already holds shards. ``progress`` (optional) is called as
    ``progress("<N>x<N> <split>", done, n_scenes)``. Returns a summary dict.
    """
    split = canonical_split(split)
    if int(resolution) != resolution or resolution < 8:
        raise CohortError(f"resolution must be an integer >= 8, got {resolution!r}")
    resolution = int(resolution)
    if int(n_scenes) != n_scenes or n_scenes < 1:
        raise CohortError(f"n_scenes must be a positive integer, got {n_scenes!r}")
    if n_scenes >= 100_000_000:
        raise CohortError("n_scenes must be below 1e8 (scene ids are 10 digits)")
    if int(seed) != seed or seed < 0:
        raise CohortError(f"seed must be a non-negative integer, got {seed!r}")
    if not (0.0 <= coverage_max <= 0.3):
        raise CohortError(f"coverage_max must lie in [0, 0.3], got {coverage_max!r}")
    min_sep = math.ceil(resolution / 3) if min_separation is None else int(min_separation)
    if not (1 <= min_sep <= resolution - 1):
        raise CohortError(f"min_separation must lie in [1, {resolution - 1}], got {min_sep}")
    folder = _split_folder(out, resolution, split)
    if folder.exists() and any(folder.glob("*.parquet")):
        raise CohortError(f"{folder} already holds shards; refusing to overwrite")
    keys, skipped = eligible_rasters(resolution, rasters)
    if not keys:
        raise CohortError(f"no raster can serve {resolution}x{resolution} crops ({skipped})")

    rng = np.random.default_rng([int(seed), resolution, SPLITS.index(split)])
    order = [keys[j] for j in rng.permutation(len(keys))]
    loaded = {k: load_raster(k) for k in keys}

    label = f"{resolution}x{resolution} {split}"
    if progress:
        progress(label, 0, n_scenes)
    rows = []
    for i in range(n_scenes):
        key = order[i % len(order)]
        z_raster, info = loaded[key]
        rows.append(make_scene(rng, key, z_raster, info, resolution, split, index=i, seed=int(seed),
                               coverage_max=coverage_max, min_sep=min_sep))
        if progress:
            progress(label, i + 1, n_scenes)
    paths = write_split(out, resolution, split, rows, rows_per_shard=rows_per_shard)
    used = {}
    for r in rows:
        k = r["metadata"]["source"]["raster"]
        used[k] = used.get(k, 0) + 1
    return {"root": str(out), "resolution": resolution, "split": split, "n_scenes": n_scenes,
            "seed": int(seed), "coverage_max": coverage_max, "rasters": used, "skipped": skipped,
            "shards": [str(p) for p in paths]}


GEO_SPLIT_ROOTS = ("holdout", "matched_random")


def make_geo_splits(out, resolution: int, n_scenes: int, holdout_rasters, *, seed: int = 0,
                    split: str = "test", coverage_max: float = 0.3,
                    progress: ProgressCallback | None = None) -> dict:
    """The two cohorts of the geographic trust axis (seed 000 §5): ``<out>/holdout/`` cut only
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

