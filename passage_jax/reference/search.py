"""CPU exact search: heap-based Dijkstra and A* in float64 (contract §3.2).

Independent of the JAX code path: step costs come from the NumPy edge-cost
field (``passage_jax.graph.edge_cost_field_np``, the same registry formulas),
and costs are accumulated start to goal, ``g(v) = g(u) + c(u, v)``, exactly as
a route's cost is defined (contract §2).

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

import dataclasses
import heapq
import math
from typing import NamedTuple

import numpy as np

from passage_jax.graph import MOVES, edge_cost_field_np
from passage_jax.options import merge_options

__all__ = ["SearchResult", "SearchOptions", "search", "dijkstra", "astar"]


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


@dataclasses.dataclass(frozen=True, eq=False)
class SearchOptions:
    """Settings of :func:`search` (validated here, once).

    heuristic: True (A*, the Euclidean distance in metres), False (Dijkstra), or an
    (H, W) float array of estimated costs to the goal (no NaN or -inf; +inf is searched
    last; its shape is checked against the grid by :func:`search`); max_expansions:
    None (no budget) or the most cells expanded; pixel_size_m: the cell size of the
    step costs and the heuristic; cost_field: None, or a precomputed (8, H, W) NumPy
    edge-cost field to reuse.
    """

    heuristic: bool | np.ndarray = True
    max_expansions: int | None = None
    pixel_size_m: float = 30.0
    cost_field: np.ndarray | None = None

    def __post_init__(self):
        if self.max_expansions is not None:
            object.__setattr__(self, "max_expansions", int(self.max_expansions))
        object.__setattr__(self, "pixel_size_m", float(self.pixel_size_m))


def search(z, obstacles, start, goal, model: str, weight: float, *,
           options: SearchOptions | None = None, **overrides) -> SearchResult:
    """A* (``heuristic=True``) or Dijkstra from ``start`` to ``goal``.

    The settings are ``options`` (a :class:`SearchOptions`) with any of its fields as
    keywords on top (``heuristic``, ``max_expansions``, ``pixel_size_m``,
    ``cost_field``); an unknown keyword is a TypeError naming it. ``heuristic`` may
    also be an (H, W) float array of estimated costs to ``goal`` (no NaN or -inf; +inf
    is searched last). ``cost_field`` (8, H, W) may be passed to reuse a precomputed
    NumPy field.
    """
    opts = merge_options(SearchOptions, options, overrides, "search")
    z, obst, (sr, sc), (gr, gc) = _check(z, obstacles, start, goal)
    h, w = z.shape
    cost_field = opts.cost_field
    if cost_field is None:
        cost_field = edge_cost_field_np(z, obst, model, float(weight), opts.pixel_size_m)
    hfield = _heuristic_field(opts.heuristic, (h, w), (gr, gc), opts.pixel_size_m)
    budget = math.inf if opts.max_expansions is None else opts.max_expansions
    src, dst = sr * w + sc, gr * w + gc
    return _best_first(cost_field, hfield, src, dst, w, budget)


def _heuristic_field(heuristic, shape, goal, pixel_size_m: float) -> np.ndarray:
    """The (H*W,) float64 heuristic of every cell: the given field, the Euclidean
    distance to ``goal`` in metres (``heuristic`` true) or zeros (Dijkstra)."""
    h, w = shape
    if isinstance(heuristic, np.ndarray):
        hf = np.asarray(heuristic, np.float64)
        if hf.shape != (h, w) or np.any(np.isnan(hf) | (hf == -math.inf)):
            raise ValueError(f"heuristic field must be an ({h}, {w}) array without NaN or -inf, "
                             f"got shape {hf.shape}")
        return np.ascontiguousarray(hf.ravel())
    if heuristic:
        rr, cc = np.divmod(np.arange(h * w), w)
        return np.hypot(rr - goal[0], cc - goal[1]) * float(pixel_size_m)
    return np.zeros(h * w)


def _best_first(cost_field, hfield, src: int, dst: int, w: int, budget) -> SearchResult:
    """The heap search from cell ``src`` to ``dst`` (flat indices of a grid ``w`` wide)
    with the step costs ``cost_field`` (8, H, W), the flat heuristic ``hfield`` and at
    most ``budget`` expansions."""
    n = hfield.shape[0]
    # per-cell step costs of the 8 moves (MOVES order), one row per cell; a row is
    # turned into Python floats only when its cell is expanded, so a search that
    # stops early (goal or budget) does no per-cell Python work for the rest
    offs = (MOVES[:, 0] * w + MOVES[:, 1]).tolist()
    cost_row = np.ascontiguousarray(cost_field.reshape(8, n).T).__getitem__
    hval = hfield.item  # one cell's heuristic as a Python float
    inf = math.inf
    g = [inf] * n
    parent = [-1] * n
    g[src] = 0.0
    heap = [(hval(src), src)]
    push, pop = heapq.heappush, heapq.heappop
    qops, live, expansions = 1, 1, 0
    found = exhausted = False
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
    return SearchResult(float(g[dst]), _route(parent, src, dst, w), "ok", expansions, qops, live)


def _route(parent: list, src: int, dst: int, w: int) -> np.ndarray:
    """The (L, 2) int32 route from ``src`` to ``dst`` along the parent links."""
    path = [dst]
    while path[-1] != src:
        path.append(parent[path[-1]])
    path.reverse()
    return np.stack(np.divmod(np.asarray(path, np.int64), w), axis=1).astype(np.int32)


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
