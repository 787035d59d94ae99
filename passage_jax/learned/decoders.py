"""Decoders: from an estimated cost-to-go field to a route (host, float64).

Each decoder takes a field ``(H, W)`` (an estimate of every cell's cost to the
request's goal, as a guide returns it) and a :class:`PlanRequest`, and returns a
:class:`DecodeResult` with a route (or ``None``), a protocol status, contract §6
counters and a message on failure. A field must have the request's shape and no
NaN or -inf; +inf means "predicted unreachable". Decoding never changes the
graph: step costs are the request's own (``edge_cost_field_np``), so every route
returned is legal on it.

* :func:`direct` — greedy descent: from the start, step to the legal neighbour
  ``v`` minimising ``c(u, v) + field[v]`` (the Bellman choice, first move of
  ``MOVES`` on ties, as the reference descent), until the goal. With the exact
  cost-to-go this is an optimal route. When the chosen neighbour was visited before
  (a local minimum, a plateau or a cycle of the field) the descent may *escape*: step
  to the best legal neighbour it has not visited (same choice among those), at most
  ``max_escapes`` times (default 0, the strict descent; ``None``: no limit). It stops,
  status ``no_path``, at a revisit with no escape left or no unvisited legal neighbour
  (``descent revisited (r, c)``) or when no legal move has a finite value (``descent
  stuck at (r, c)``), and with ``budget_exhausted`` after ``max_steps`` steps: never
  an endless route, never a repeated cell. Counters: ``expansions`` = cells whose
  neighbours were evaluated, ``queue_operations`` = 0, ``live_states`` = 1.
* :func:`bounded_repair` — A* (``passage_jax.reference.search``, weight 1:
  ``f = g + field``) with the field as its heuristic and an expansion budget;
  ``budget_exhausted`` when it runs out. ``start_from="replace"`` (default)
  searches from the start and replaces the failed direct route;
  ``start_from="failed_direct"`` searches from the last cell of the failed
  descent and keeps the walked prefix, joined where the repaired tail last
  meets it (so no cell repeats).
* :func:`prediction_free` — the same :func:`bounded_repair` with
  :func:`octile_field` as the guide: the octile distance to the goal times the
  smallest step cost per metre of the request's graph (admissible and consistent),
  so it differs from ``bounded_repair`` only in the guide.
* :func:`corridor_refine` — the exact best route inside a corridor around a given
  route: A* (the admissible, consistent :func:`octile_field` heuristic, the request's
  own step costs) on the cells within Chebyshev distance ``radius`` of the route. The
  route itself lies in the corridor, so the refined route never costs more; the
  counters are the corridor search's. A planner stage that refines its route charges
  this work to itself.
* :func:`bellman_backups` — ``k`` Bellman backups of a field on the request's own graph
  (``T^k field``, ``(T V)(u) = min_v c(u, v) + V(v)``, 0 at the goal): a fixed
  value-iteration head after the guide, each backup reaching one cell further (a jitted
  kernel; the planner's ``backups`` option).
* :func:`acceptance` — the acceptance test of a route: its cost against ``ratio``
  times the octile bound at the start (a message when it fails, else ``None``);
  :func:`accepted` applies it to a stage's result (a rejected route: ``no_path``).
* :func:`exact_fallback` — an exact reference solver on the request's own graph:
  unbounded A* with the Euclidean heuristic (``solver="astar"``, default: it
  reports its counters, so a fallback is charged like any stage and an
  expansion budget still applies to the whole request) or float64 value
  iteration (``solver="value_iteration"``, ``reference.solve_batch`` as the exact
  baseline planner; it has no search counters, so its work is reported empty).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import ndimage

from passage_jax.checks import is_int
from passage_jax.graph.costs import edge_cost_field_np
from passage_jax.graph.grid import bellman_backup
from passage_jax.graph.moves import MOVES, STEP_PIXELS
from passage_jax.learned.model import octile_grid
from passage_jax.precision import kernel_dtype, kernel_x64
from passage_jax.protocol.contracts import SEARCH_STATUS, PlanRequest, work_counters
from passage_jax.reference.search import search
from passage_jax.reference.vi import solve_batch

__all__ = ["DecodeResult", "START_FROM", "FALLBACK_SOLVERS", "check_field", "request_cost_field",
           "octile_field", "octile_scale", "bellman_backups", "route_cost_on", "acceptance", "accepted",
           "corridor_refine", "direct", "bounded_repair", "prediction_free", "exact_fallback"]

#: Where :func:`bounded_repair` starts its search.
START_FROM = ("replace", "failed_direct")
#: Exact solvers :func:`exact_fallback` can run.
FALLBACK_SOLVERS = ("astar", "value_iteration")


class DecodeResult(NamedTuple):
    """path: (L, 2) int32 start→goal route or None; status: "ok" | "no_path" |
    "budget_exhausted"; work: contract §6 counters of this decoder; message: why it
    failed (None when ok); walked: the cells a descent visited, in order (the
    partial route of a failed :func:`direct`; None for the searches)."""

    path: np.ndarray | None
    status: str
    work: dict
    message: str | None = None
    walked: np.ndarray | None = None


def check_field(field, request: PlanRequest) -> np.ndarray:
    """The field as a float64 (H, W) array; ValueError naming ``field`` when its
    shape differs from the request's or it holds NaN or -inf."""
    f = np.asarray(field, dtype=np.float64)
    if f.shape != tuple(request.shape):
        raise ValueError(f"field shape {f.shape} != request shape {tuple(request.shape)} "
                         f"(a guide must return one (H, W) cost-to-go per request)")
    bad = np.isnan(f) | (f == -math.inf)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"field has {int(bad.sum())} NaN or -inf value(s), first at {(r, c)}")
    return f


def request_cost_field(request: PlanRequest) -> np.ndarray:
    """(8, H, W) float64 edge costs of the request's own graph."""
    return edge_cost_field_np(request.elevation, request.obstacles, request.cost_model,
                              request.cost_weight, request.graph.pixel_size_m)


def _costs(request, cost_field):
    return request_cost_field(request) if cost_field is None else cost_field


def octile_field(request: PlanRequest, *, cost_field: np.ndarray | None = None) -> np.ndarray:
    """Prediction-free guide: octile distance to the goal in metres times the smallest
    step cost per metre over the request's legal moves (1 for every registered cost
    model with a non-negative weight). Admissible and consistent on the 8-grid."""
    cost_field = _costs(request, cost_field)
    h, w = request.shape
    scale = octile_scale(cost_field, request.graph.pixel_size_m)
    octile = octile_grid((h, w), request.goal, np.float64, xp=np)
    return octile * request.graph.pixel_size_m * scale


def octile_scale(cost_field: np.ndarray, pixel_size_m: float) -> float:
    """The smallest step cost per metre over the legal moves of edge costs (8, H, W), at
    least 0 (1.0 when no move is legal): :func:`octile_field`'s factor."""
    lengths = (STEP_PIXELS * pixel_size_m)[:, None, None]
    per_metre = cost_field / lengths
    finite = np.isfinite(per_metre)
    return max(0.0, float(per_metre[finite].min())) if finite.any() else 1.0


@functools.partial(jax.jit, static_argnames="backups")
def _backups_kernel(values, edge_costs, goal_mask, backups: int):
    """``backups`` Jacobi applications of the Bellman operator (0 at the goal)."""
    def body(_, v):
        return jnp.where(goal_mask, jnp.zeros_like(v), bellman_backup(v, edge_costs))
    return jax.lax.fori_loop(0, backups, body, values)


def bellman_backups(field, request: PlanRequest, *, backups: int,
                    cost_field: np.ndarray | None = None) -> np.ndarray:
    """``T^k field`` for ``k = backups`` (a non-negative integer) on the request's own edge
    costs, as a float64 (H, W) array: ``(T V)(u) = min over legal moves u -> v of
    c(u, v) + V(v)``, 0 at the goal, +inf where no legal move leads to a finite value
    (obstacles included). Jacobi backups (every cell from the previous field), so after k
    of them a cell's value is the cheapest k-step walk plus the field where the walk ends:
    a field that never underestimates becomes exact on every cell whose optimal route to
    the goal has at most k steps, and a local minimum of the field is raised by one step's
    cost per backup. Runs as one jitted kernel in the kernels' precision
    (:func:`passage_jax.precision.kernel_x64`); 16·k·H·W floating operations."""
    if not (is_int(backups) and backups >= 0):
        raise ValueError(f"backups={backups!r} must be a non-negative integer")
    f = check_field(field, request)
    if backups == 0:
        return f
    cost_field = _costs(request, cost_field)
    goal = np.zeros(f.shape, bool)
    goal[tuple(request.goal)] = True
    with kernel_x64():
        dt = kernel_dtype()
        out = _backups_kernel(jnp.asarray(f, dt), jnp.asarray(cost_field, dt), jnp.asarray(goal),
                              int(backups))
        return np.asarray(out, np.float64)


#: index into MOVES of the step (dr, dc), at [dr + 1, dc + 1]
_MOVE_INDEX = np.zeros((3, 3), np.int64)
_MOVE_INDEX[MOVES[:, 0] + 1, MOVES[:, 1] + 1] = np.arange(len(MOVES))


def route_cost_on(cells: np.ndarray, cost_field: np.ndarray) -> float:
    """Cost of a route of 8-adjacent ``cells`` (L, 2) on edge costs (8, H, W): the sum
    of its moves' costs (0 for a single cell)."""
    cells = np.asarray(cells, np.int64)
    if len(cells) < 2:
        return 0.0
    steps = cells[1:] - cells[:-1]
    k = _MOVE_INDEX[steps[:, 0] + 1, steps[:, 1] + 1]
    return float(cost_field[k, cells[:-1, 0], cells[:-1, 1]].sum())


def acceptance(route: np.ndarray, request: PlanRequest, ratio: float,
               cost_field: np.ndarray | None = None, *, what: str = "route") -> str | None:
    """``None`` when ``route`` costs at most ``ratio`` times the admissible octile bound
    at the start (:func:`octile_field`), else the rejection message."""
    cost_field = _costs(request, cost_field)
    cost = route_cost_on(route, cost_field)
    bound = float(octile_field(request, cost_field=cost_field)[tuple(request.start)])
    if cost > ratio * bound:
        return (f"{what} reached the goal at cost {cost:.6g}, over accept_ratio {ratio:g} x the "
                f"octile bound {bound:.6g}: rejected")
    return None


def accepted(out: DecodeResult, request: PlanRequest, ratio: float | None,
             cost_field: np.ndarray | None = None, *, what: str = "route") -> DecodeResult:
    """``out`` when it failed, ``ratio`` is None or its route passes :func:`acceptance`;
    else the rejection: status ``no_path``, the same work, no prefix kept (``walked`` is
    the start). The one acceptance test of every guided stage."""
    if out.status != "ok" or ratio is None:
        return out
    rejected = acceptance(out.path, request, ratio, cost_field, what=what)
    if rejected:
        return DecodeResult(None, "no_path", out.work, rejected, np.asarray([request.start], np.int32))
    return out


def corridor_refine(route, request: PlanRequest, *, radius: int, max_expansions: int | None = None,
                    cost_field: np.ndarray | None = None) -> DecodeResult:
    """The cheapest route between the request's start and goal through the cells within
    Chebyshev distance ``radius`` (a positive integer) of ``route`` (an (L, 2) start→goal
    route of legal moves), found by A* with the octile heuristic under ``max_expansions``.
    Never costlier than ``route``: when the corridor search cannot finish (its budget
    spent) or finds nothing cheaper, ``route`` itself is returned; either way the work
    is the search's. ``message`` says which when the route is unchanged."""
    if not is_int(radius) or radius <= 0:
        raise ValueError(f"radius={radius!r} must be a positive integer")
    route = np.asarray(route, np.int32).reshape(-1, 2)
    if len(route) == 0 or tuple(route[0].tolist()) != tuple(request.start) \
            or tuple(route[-1].tolist()) != tuple(request.goal):
        raise ValueError("corridor_refine needs a route from the request's start to its goal")
    cost_field = _costs(request, cost_field)
    h, w = request.shape
    corridor = np.zeros((h, w), bool)
    corridor[route[:, 0], route[:, 1]] = True
    corridor = ndimage.binary_dilation(corridor, np.ones((2 * radius + 1,) * 2, bool))
    # a move is kept when both of its cells are in the corridor
    inside = np.pad(corridor, 1)
    masked = cost_field.copy()
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        masked[k][~(corridor & inside[1 + dr:1 + dr + h, 1 + dc:1 + dc + w])] = math.inf
    res = search(request.elevation, request.obstacles, request.start, request.goal, request.cost_model,
                 request.cost_weight, heuristic=octile_field(request, cost_field=cost_field),
                 max_expansions=max_expansions, pixel_size_m=request.graph.pixel_size_m,
                 cost_field=masked)
    work = work_counters(res.expansions, res.queue_operations, res.live_states)
    if res.status != "ok":  # the route lies in the corridor, so only the budget can stop it
        return DecodeResult(route, "ok", work, f"corridor search of radius {radius}: "
                                               f"{res.status}, route kept")
    if route_cost_on(res.route, cost_field) < route_cost_on(route, cost_field):
        return DecodeResult(np.asarray(res.route, np.int32), "ok", work)
    return DecodeResult(route, "ok", work, f"corridor search of radius {radius}: no cheaper route")


def _descent_choice(f, cost_field, cur, moves, exclude=()):
    """The Bellman choice at ``cur``: the legal neighbour not in ``exclude`` minimising
    step + field (first of ``MOVES`` on ties); None when no such move has a finite value."""
    r, c = cur
    best, best_q = None, math.inf
    for k, (dr, dc) in enumerate(moves):
        step = cost_field[k, r, c]
        if step == math.inf:
            continue
        q = step + f[r + dr, c + dc]
        if q < best_q and (r + dr, c + dc) not in exclude:
            best, best_q = (r + dr, c + dc), q
    return best


def _step_limit(shape, max_steps, request) -> int:
    limit = shape[0] * shape[1] if max_steps is None else int(max_steps)
    if limit <= 0:
        raise ValueError(f"max_steps={max_steps!r} must be a positive integer")
    if request.budget.max_expansions is not None:
        limit = min(limit, request.budget.max_expansions)
    return limit


def direct(field, request: PlanRequest, *, max_steps: int | None = None,
           cost_field: np.ndarray | None = None, accept_ratio: float | None = None,
           max_escapes: int | None = 0) -> DecodeResult:
    """Greedy descent on ``field`` (see the module text). ``max_steps`` defaults to
    H·W; it and the request's ``budget.max_expansions`` (the tighter) bound the walk.
    ``max_escapes`` (a non-negative integer, or None: no limit) is how many times the
    walk may step to the best unvisited neighbour when its Bellman choice was visited.
    ``accept_ratio`` r (None: every descent that reaches the goal is accepted) rejects a
    route whose cost exceeds r times the admissible octile bound at the start
    (:func:`octile_field`): status ``no_path``, no prefix kept (``walked`` is the start)."""
    if max_escapes is not None and not (is_int(max_escapes) and max_escapes >= 0):
        raise ValueError(f"max_escapes={max_escapes!r} must be a non-negative integer or None")
    f = check_field(field, request)
    cost_field = _costs(request, cost_field)
    limit = _step_limit(f.shape, max_steps, request)
    escapes_left = math.inf if max_escapes is None else int(max_escapes)
    moves = MOVES.tolist()
    goal = tuple(request.goal)
    cur = tuple(request.start)
    cells = [cur]
    seen = {cur}
    expansions = 0

    def fail(status, message):
        work = work_counters(expansions, 0, 1)
        return DecodeResult(None, status, work, message, np.asarray(cells, np.int32))

    while cur != goal:
        if expansions >= limit:
            return fail("budget_exhausted", f"descent reached its step limit {limit} at {cur}")
        expansions += 1
        best = _descent_choice(f, cost_field, cur, moves)
        if best is None:
            return fail("no_path", f"descent stuck at {cur}: no legal move has a finite value")
        if best in seen:  # a local minimum: escape to the best unvisited neighbour, if allowed
            fresh = _descent_choice(f, cost_field, cur, moves, seen) if escapes_left > 0 else None
            if fresh is None:
                why = "" if max_escapes == 0 else "; no unvisited neighbour" if escapes_left > 0 \
                    else f"; its {max_escapes} escape(s) spent"
                return fail("no_path", f"descent revisited {best} from {cur} after {expansions} "
                                       f"step(s) (a local minimum or plateau of the field{why})")
            escapes_left -= 1
            best = fresh
        cur = best
        cells.append(cur)
        seen.add(cur)
    route = np.asarray(cells, np.int32)
    out = DecodeResult(route, "ok", work_counters(expansions, 0, 1), None, route)
    return accepted(out, request, accept_ratio, cost_field, what="descent")


def _join(prefix: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """prefix + tail (tail[0] == prefix[-1]) joined at the last cell of the tail that
    the prefix holds, so no cell repeats (both parts are free of repeats)."""
    index = {tuple(p): i for i, p in enumerate(prefix.tolist())}
    cells = tail.tolist()
    for j in range(len(cells) - 1, -1, -1):
        i = index.get(tuple(cells[j]))
        if i is not None:
            return np.concatenate([prefix[:i], tail[j:]]).astype(np.int32)
    raise AssertionError("unreachable: the tail starts at the prefix's last cell")


def bounded_repair(field, request: PlanRequest, *, max_expansions: int | None,
                   start_from: str = "replace", prefix=None,
                   cost_field: np.ndarray | None = None) -> DecodeResult:
    """A* guided by ``field`` under ``max_expansions`` (``None``: no limit of its own;
    0 is allowed and exhausts at once). ``start_from="failed_direct"`` needs
    ``prefix``, the walked cells of the failed descent (``DecodeResult.walked``)."""
    f = check_field(field, request)
    if start_from not in START_FROM:
        raise ValueError(f"start_from={start_from!r} is not one of {list(START_FROM)}")
    if max_expansions is not None and (not is_int(max_expansions) or max_expansions < 0):
        raise ValueError(f"max_expansions={max_expansions!r} must be a non-negative integer or None")
    source = tuple(request.start)
    if start_from == "failed_direct":
        if prefix is None or len(prefix) == 0:
            raise ValueError("start_from='failed_direct' needs prefix (the failed descent's cells)")
        prefix = np.asarray(prefix, np.int32).reshape(-1, 2)
        if tuple(prefix[0].tolist()) != source:
            raise ValueError(f"prefix starts at {tuple(prefix[0].tolist())}, not at the start {source}")
        source = tuple(prefix[-1].tolist())
    cost_field = _costs(request, cost_field)
    res = search(request.elevation, request.obstacles, source, request.goal, request.cost_model,
                 request.cost_weight, heuristic=f, max_expansions=max_expansions,
                 pixel_size_m=request.graph.pixel_size_m, cost_field=cost_field)
    work = work_counters(res.expansions, res.queue_operations, res.live_states)
    status = SEARCH_STATUS[res.status]
    if status != "ok":
        what = (f"expansion budget of {max_expansions} spent" if status == "budget_exhausted"
                else "the goal cannot be reached")
        return DecodeResult(None, status, work, f"repair from {source}: {what}")
    path = res.route if start_from == "replace" else _join(prefix, res.route)
    return DecodeResult(path, "ok", work)


def prediction_free(request: PlanRequest, *, max_expansions: int | None, start_from: str = "replace",
                    prefix=None, cost_field: np.ndarray | None = None) -> DecodeResult:
    """:func:`bounded_repair` with :func:`octile_field` as the guide (the control)."""
    cost_field = _costs(request, cost_field)
    return bounded_repair(octile_field(request, cost_field=cost_field), request,
                          max_expansions=max_expansions, start_from=start_from, prefix=prefix,
                          cost_field=cost_field)


def exact_fallback(request: PlanRequest, *, solver: str = "astar",
                   cost_field: np.ndarray | None = None) -> DecodeResult:
    """The exact route from the start on the request's own graph (no budget of its own)."""
    if solver == "astar":
        res = search(request.elevation, request.obstacles, request.start, request.goal,
                     request.cost_model, request.cost_weight, heuristic=True,
                     pixel_size_m=request.graph.pixel_size_m, cost_field=_costs(request, cost_field))
        work = work_counters(res.expansions, res.queue_operations, res.live_states)
        if res.status == "ok":
            return DecodeResult(res.route, "ok", work)
        return DecodeResult(None, "no_path", work, "exact fallback: the goal cannot be reached")
    if solver == "value_iteration":
        res = solve_batch(request.elevation[None], request.obstacles[None], [request.start],
                          [request.goal], [request.cost_model], [request.cost_weight], routes=True,
                          pixel_size_m=request.graph.pixel_size_m)
        status, route = res.status[0], res.routes[0]
        if status == "ok" and route is not None:
            return DecodeResult(route, "ok", {})
        if status == "unreachable":
            return DecodeResult(None, "no_path", {}, "exact fallback: the goal cannot be reached")
        return DecodeResult(None, "budget_exhausted", {}, f"exact fallback: value iteration {status}")
    raise ValueError(f"solver={solver!r} is not one of {list(FALLBACK_SOLVERS)}")
