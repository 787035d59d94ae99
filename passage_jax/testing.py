"""Test material: scenes, exact routes and candidate routes on real terrain.

For users testing their own planners or metrics and for the project's tests,
benchmarks and examples; not a cohort maker (``passage_jax.data.cohort`` is).

* :func:`terrain_crop` — a square crop of a shipped raster
  (``passage_jax.data.terrain``; smooth random terrain only if the bundle is
  absent);
* :func:`make_scene` — a :class:`~passage_jax.data.scene.Scene` on such a crop
  with superellipse-like obstacles and all six exact routes, each from SciPy's
  Dijkstra on the graph stage's float64 edge-cost field, plus their c*;
* :func:`exact_route`, :func:`cost_to_go` — that Dijkstra (on the graph of
  :func:`passage_jax.reference.csgraph.scipy_graph`), for one task or on any
  (8, H, W) edge-cost field;
* :func:`candidate_set`, :func:`detour`, :func:`king_line` — candidate routes
  derived from exact ones (exact, other objective, detoured, broken).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse.csgraph
from scipy.ndimage import gaussian_filter

from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, elevation_metres, normalise_elevation
from passage_jax.graph import COST_MODELS, OBJECTIVES
from passage_jax.reference.csgraph import scipy_graph, scipy_task_graph

__all__ = ["terrain_crop", "make_scene", "exact_route", "cost_to_go",
           "candidate_set", "detour", "king_line", "kernel_tol", "FLOAT32_TOL"]

#: tolerance of results computed by float32 kernels (no float64 on the backend, or
#: ``PASSAGE_JAX_NO_X64``): relative for statistics, absolute in pixels for geometry
FLOAT32_TOL = 1e-5


def kernel_tol(float64_tol: float) -> float:
    """``float64_tol`` when the kernels run in float64, else :data:`FLOAT32_TOL` (at least):
    the tolerance a check against an independent float64 computation can hold."""
    from passage_jax.precision import kernel_precision  # noqa: PLC0415 (testing helper only)

    return float64_tol if kernel_precision() == "float64" else max(float64_tol, FLOAT32_TOL)


def terrain_crop(rng: np.random.Generator, n: int) -> tuple[np.ndarray, str]:
    """An (n, n) float64 crop in metres from a random shipped raster, and its
    source key ('synthetic' when the bundle is unavailable)."""
    try:
        # the terrain bundle is optional here: importing it reads its provenance file
        from passage_jax.data.terrain import RASTERS, load_raster  # noqa: PLC0415 (optional: the terrain bundle may be absent)
        keys = [k for k in RASTERS]
        rng.shuffle(keys)
        for key in keys:
            z, _ = load_raster(key)
            if z.shape[0] >= n and z.shape[1] >= n:
                r = int(rng.integers(0, z.shape[0] - n + 1))
                c = int(rng.integers(0, z.shape[1] - n + 1))
                return np.array(z[r:r + n, c:c + n], np.float64), key
    except Exception:  # noqa: BLE001 - the bundle is optional here
        pass
    z = gaussian_filter(rng.normal(size=(n, n)), sigma=n / 8) * 4000.0 + 1000.0
    return z, "synthetic"


def _obstacles(rng, n, start, goal, coverage):
    obst = np.zeros((n, n), bool)
    rr, cc = np.mgrid[0:n, 0:n]
    while obst.mean() < coverage:
        cr, cc0 = rng.uniform(0, n, 2)
        a, b = rng.uniform(n / 24, n / 8, 2)
        p = rng.uniform(1.5, 4.0)
        obst |= (np.abs((rr - cr) / a) ** p + np.abs((cc - cc0) / b) ** p) <= 1
    obst[start] = False
    obst[goal] = False
    return obst


def exact_route(z, obstacles, start, goal, model, weight):
    """(c*, route (L, 2) int32) by Dijkstra on the float64 edge-cost field;
    (inf, None) when the goal is unreachable."""
    n = z.shape[1]
    g = scipy_task_graph(z, obstacles, model, weight)
    s = start[0] * n + start[1]
    t = goal[0] * n + goal[1]
    dist, pred = scipy.sparse.csgraph.dijkstra(g, indices=s, return_predecessors=True)
    if not np.isfinite(dist[t]):
        return np.inf, None
    path = [t]
    while path[-1] != s:
        path.append(pred[path[-1]])
    path = np.array(path[::-1])
    return float(dist[t]), np.stack([path // n, path % n], axis=1).astype(np.int32)


def cost_to_go(cost, goal):
    """(h, w) exact cost-to-go to ``goal`` of an (8, h, w) edge-cost field, by
    Dijkstra from the goal on the reversed graph; inf where the goal is unreachable."""
    _, h, w = cost.shape
    v = scipy.sparse.csgraph.dijkstra(scipy_graph(cost).T.tocsr(),
                                      indices=goal[0] * w + goal[1])
    return v.reshape(h, w)


def make_scene(rng: np.random.Generator, n: int, sid: str, coverage: float = 0.15):
    """A Scene with all six exact routes, plus {(objective, variant): c*}."""
    z, key = terrain_crop(rng, n)
    # round trip through the released float32 normalisation, as a loaded scene would be
    e = normalise_elevation(z, PASSAGE_CALIBRATION)
    z = elevation_metres(e, PASSAGE_CALIBRATION)
    while True:
        start = tuple(int(v) for v in rng.integers(0, n, 2))
        goal = tuple(int(v) for v in rng.integers(0, n, 2))
        if np.hypot(start[0] - goal[0], start[1] - goal[1]) >= 0.5 * n:
            break
    obst = _obstacles(rng, n, start, goal, coverage)
    routes, c_star = {}, {}
    for variant, o in (("free", np.zeros_like(obst)), ("obstacles", obst)):
        for obj in OBJECTIVES:
            c, r = exact_route(z, o, start, goal, obj, COST_MODELS[obj].default_weight)
            if r is None:
                return make_scene(rng, n, sid, coverage)
            routes[(obj, variant)] = r
            c_star[(obj, variant)] = c
    meta = {"solvers": {o: {"weight": COST_MODELS[o].default_weight} for o in OBJECTIVES},
            "terrain": key, "fixture": True}
    scene = Scene(id=sid, resolution=n, split="test", elevation_norm=e, elevation_m=z,
                  obstacles=obst, start=start, goal=goal, routes=routes, metadata=meta)
    return scene, c_star


def king_line(a, b):
    """8-connected cells from ``a`` to ``b`` (both included), diagonal first."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    out = [a.copy()]
    cur = a.copy()
    while np.any(cur != b):
        cur = cur + np.sign(b - cur)
        out.append(cur.copy())
    return np.array(out)


def detour(route, rng, n, max_offset=None):
    """A connected route with a detour through a random waypoint near the route."""
    route = np.asarray(route, np.int64)
    if len(route) < 3:
        return route.astype(np.int32)
    i, j = sorted(rng.choice(len(route), 2, replace=False))
    max_offset = max_offset or max(2, n // 8)
    mid = route[(i + j) // 2] + rng.integers(-max_offset, max_offset + 1, 2)
    mid = np.clip(mid, 0, n - 1)  # the waypoint is chosen in the grid, by construction
    a = king_line(route[i], mid)
    b = king_line(mid, route[j])
    out = np.concatenate([route[:i], a, b[1:], route[j + 1:]])
    keep = np.concatenate([[True], np.any(out[1:] != out[:-1], axis=1)])
    return out[keep].astype(np.int32)


def candidate_set(scene, objective, variant, rng, n_variants: int):
    """Candidate routes for one task: the exact route, other objectives' routes,
    detours and a few broken ones (truncated, gap)."""
    own = scene.routes[(objective, variant)]
    pool = [own] + [scene.routes[(o, variant)] for o in OBJECTIVES if o != objective]
    out = []
    for k in range(n_variants):
        kind = k % 8
        if kind < 2:
            out.append(pool[k % len(pool)])
        elif kind < 3:
            out.append(pool[(k // 8) % len(pool)])
        elif kind < 7:
            out.append(detour(pool[k % len(pool)], rng, scene.resolution))
        else:
            r = detour(own, rng, scene.resolution)
            out.append(r[: max(1, len(r) - 1 - int(rng.integers(0, 3)))] if k % 16 == 7
                       else np.delete(r, len(r) // 2, axis=0))
    return out
