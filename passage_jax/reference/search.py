"""CPU exact search: heap-based Dijkstra and A* in float64 (SPEC §3.2).

Independent of the JAX code path: step costs come from the NumPy edge-cost
field (``passage_jax.graph.edge_cost_field_np``, the same registry formulas),
and costs are accumulated start to goal, ``g(v) = g(u) + c(u, v)``, exactly as
a route's cost is defined (SPEC §2).

A* uses the Euclidean distance in metres (pixel distance x pixel size) as its
heuristic; every step costs at least its length, so it is admissible and
consistent. A node whose ``g`` improves after it was expanded is reopened, so a
last-ulp inconsistency of the floating-point heuristic cannot cost optimality.
:func:`search` also takes any (H, W) heuristic field (``heuristic=array``, e.g. a
learned cost-to-go estimate): the same machinery and counters, optimal only when
that field is admissible.

Tie-break: the open set is ordered by ``(f, flat cell index)``; among equal
``g`` offers for a cell the first one (in expansion order, neighbours in
``MOVES`` order) is kept. Results are therefore deterministic.
"""
from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import numpy as np

from passage_jax.graph import MOVES, edge_cost_field_np

__all__ = ["SearchResult", "search", "dijkstra", "astar"]


class SearchResult(NamedTuple):
    """cost: float64 optimal cost (``inf`` when unreachable, NaN when the budget
    ran out); route: (L, 2) int32 or None; status: "ok" | "unreachable" |
    "budget_exhausted"; expansions: cells expanded; queue_operations: heap pushes
    plus pops; live_states: peak open-set (heap) size."""

    cost: float
    route: np.ndarray | None
    status: str
    expansions: int
    queue_operations: int
    live_states: int


def _check(z, obstacles, start, goal):
    z = np.asarray(z, np.float64)
    if z.ndim != 2:
        raise ValueError(f"elevation must be (H, W), got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("elevation has non-finite values")
    obst = np.asarray(obstacles).astype(bool)
    if obst.shape != z.shape:
        raise ValueError(f"obstacles shape {obst.shape} != elevation shape {z.shape}")
    h, w = z.shape
    out = []
    for name, p in (("start", start), ("goal", goal)):
        r, c = (int(v) for v in p)
        if not (0 <= r < h and 0 <= c < w):
            raise ValueError(f"{name} {(r, c)} is outside the {h}x{w} grid")
        if obst[r, c]:
            raise ValueError(f"{name} {(r, c)} is on an obstacle")
        out.append((r, c))
    return z, obst, out[0], out[1]


def search(z, obstacles, start, goal, model: str, weight: float, *,
           heuristic: bool | np.ndarray = True, max_expansions: int | None = None,
           pixel_size_m: float = 30.0, cost_field: np.ndarray | None = None) -> SearchResult:
    """A* (``heuristic=True``) or Dijkstra from ``start`` to ``goal``.

    ``heuristic`` may also be an (H, W) float array of estimated costs to ``goal``
    (no NaN or -inf; +inf is searched last). ``cost_field`` (8, H, W) may be passed
    to reuse a precomputed NumPy field.
    """
    z, obst, (sr, sc), (gr, gc) = _check(z, obstacles, start, goal)
    h, w = z.shape
    if cost_field is None:
        cost_field = edge_cost_field_np(z, obst, model, float(weight), pixel_size_m)
    n = h * w
    # per-cell step costs of the 8 moves (MOVES order), one row per cell; a row is
    # turned into Python floats only when its cell is expanded, so a search that
    # stops early (goal or budget) does no per-cell Python work for the rest
    offs = (MOVES[:, 0] * w + MOVES[:, 1]).tolist()
    cost_row = np.ascontiguousarray(cost_field.reshape(8, n).T).__getitem__
    src, dst = sr * w + sc, gr * w + gc
    if isinstance(heuristic, np.ndarray):
        hf = np.asarray(heuristic, np.float64)
        if hf.shape != (h, w) or np.any(np.isnan(hf) | (hf == -math.inf)):
            raise ValueError(f"heuristic field must be an ({h}, {w}) array without NaN or -inf, "
                             f"got shape {hf.shape}")
        hfield = np.ascontiguousarray(hf.ravel())
    elif heuristic:
        rr, cc = np.divmod(np.arange(n), w)
        hfield = np.hypot(rr - gr, cc - gc) * float(pixel_size_m)
    else:
        hfield = np.zeros(n)
    hval = hfield.item  # one cell's heuristic as a Python float
    inf = math.inf
    g = [inf] * n
    parent = [-1] * n
    g[src] = 0.0
    heap = [(hval(src), src)]
    push, pop = heapq.heappush, heapq.heappop
    qops = 1
    live = 1
    expansions = 0
    budget = math.inf if max_expansions is None else int(max_expansions)
    found = False
    exhausted = False
    rng = range(8)
    while heap:
        f, u = pop(heap)
        qops += 1
        gu = g[u]
        if f > gu + hval(u):  # stale entry
            continue
        if u == dst:
            found = True
            break
        if expansions >= budget:
            exhausted = True
            break
        expansions += 1
        cu = cost_row(u).tolist()
        for k in rng:
            c = cu[k]
            if c == inf:
                continue
            v = u + offs[k]
            nv = gu + c
            if nv < g[v]:
                g[v] = nv
                parent[v] = u
                push(heap, (nv + hval(v), v))
                qops += 1
        if len(heap) > live:
            live = len(heap)
    if exhausted:
        return SearchResult(math.nan, None, "budget_exhausted", expansions, qops, live)
    if not found:
        return SearchResult(inf, None, "unreachable", expansions, qops, live)
    path = [dst]
    while path[-1] != src:
        path.append(parent[path[-1]])
    path.reverse()
    route = np.stack(np.divmod(np.asarray(path, np.int64), w), axis=1).astype(np.int32)
    return SearchResult(float(g[dst]), route, "ok", expansions, qops, live)


def dijkstra(z, obstacles, start, goal, model: str, weight: float, max_expansions=None,
             **kw) -> SearchResult:
    """Heap Dijkstra from start to goal (float64, costs accumulated start to goal)."""
    return search(z, obstacles, start, goal, model, weight, heuristic=False,
                  max_expansions=max_expansions, **kw)


def astar(z, obstacles, start, goal, model: str, weight: float, max_expansions=None,
          **kw) -> SearchResult:
    """A* with the Euclidean heuristic in metres (admissible: every step costs at
    least its length)."""
    return search(z, obstacles, start, goal, model, weight, heuristic=True,
                  max_expansions=max_expansions, **kw)
