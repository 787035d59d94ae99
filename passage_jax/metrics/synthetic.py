"""Scored-route test material on real terrain: scenes cut from the shipped
rasters (``passage_jax.data.terrain``; smooth random terrain only if the bundle
is absent), superellipse-like obstacles, exact routes from SciPy's Dijkstra on
the graph stage's float64 edge-cost field, and candidate routes derived from
them (exact, detoured, other objective, broken). Used by the metric tests, the
metric benchmark and the training-loop example; not a cohort maker.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, elevation_metres, normalise_elevation
from passage_jax.graph.costs import COST_MODELS, edge_cost_field_np
from passage_jax.graph.spec import MOVES, OBJECTIVES


def terrain_crop(rng: np.random.Generator, n: int) -> tuple[np.ndarray, str]:
    """An (n, n) float64 crop in metres from a random shipped raster, and its
    source key ('synthetic' when the bundle is unavailable)."""
    try:
        from passage_jax.data.terrain import RASTERS, load_raster
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
    from scipy.ndimage import gaussian_filter
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


def _graph(cost):
    """Sparse directed graph of the finite entries of an (8, n, n) cost field."""
    _, h, w = cost.shape
    src = np.arange(h * w).reshape(h, w)
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES):
        ok = np.isfinite(cost[k])
        r, c = np.nonzero(ok)
        rows.append(src[r, c])
        cols.append((r + dr) * w + (c + dc))
        vals.append(cost[k][r, c])
    return scipy.sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(h * w, h * w))


def exact_route(z, obstacles, start, goal, model, weight):
    """(c*, route (L, 2) int32) by Dijkstra on the float64 edge-cost field;
    (inf, None) when the goal is unreachable."""
    n = z.shape[1]
    g = _graph(edge_cost_field_np(z, obstacles, model, weight))
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
