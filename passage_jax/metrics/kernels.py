"""Per-task decoded-path metric kernels on padded routes (contract §4).

A route is a :class:`~passage_jax.metrics.types.Route` (``cells`` (L, 2) int32
and a scalar ``length``); rows at or beyond ``length`` are padding and never
read as cells. A task is a :class:`~passage_jax.metrics.types.TaskArrays` (full
grids) or a :class:`~passage_jax.metrics.types.TaskAtCandidate` (grids read at
the candidate's cells). Every function here is pure, jittable and vmappable and
takes its floating dtype from its inputs (the task's elevation for costs,
regret and geometry; ``dtype`` or the default JAX float for standalone
geometry). Nothing is rounded or clipped: a cell outside the grid makes the
route invalid and is masked wherever the grid is read.

:func:`score_task` is written for one task and vmapped once, in
:data:`score_tasks` (per-task metrics of a batch, as a
:class:`~passage_jax.metrics.types.RouteMetrics` with a leading axis) and
:data:`score_tasks_packed` (the same, packed into two arrays for the host).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from passage_jax.compilation import ExportedKernel
from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET
from passage_jax.graph import MODEL_NAMES, crop_stats, get_cost_model
from passage_jax.metrics.types import Route, RouteMetrics, gather_cells, in_bounds
from passage_jax.precision import pairwise_sum
from passage_jax.reduce import percentile_of_sorted

__all__ = [
    "GEOMETRY_SPAN", "connected_path", "obstacle_traversals", "route_validity",
    "padded_route_cost", "censored_cost", "regret", "route_length_pixels", "route_geometry",
    "score_task", "score_tasks", "score_tasks_packed",
]

_BIG_D2 = jnp.iinfo(jnp.int32).max


def _float_dtype(dtype=None):
    return jnp.dtype(dtype) if dtype is not None else jnp.zeros((), float).dtype


def _sum(x):
    """Sum of a 1-D array: XLA's reduction in float64, a pairwise sum in a narrower
    float (float32 without x64: rounding error ~log2(n) eps instead of up to n eps)."""
    if x.dtype == jnp.float64:
        return jnp.sum(x)
    return pairwise_sum(x)


# --------------------------------------------------------------------------- #
# Validity: the one device implementation of route legality
# --------------------------------------------------------------------------- #

def connected_path(route: Route, task, *, well_formed=True):
    """contract §4 ``connected_path`` of one padded route on ``task``'s grid.

    True iff the route is well formed, has at least 2 cells, all in bounds, every
    step is one of the 8 moves (a repeated consecutive cell is not; a later
    revisit is fine), the first cell is ``task.start`` and the last is
    ``task.goal``.
    """
    cells = jnp.asarray(route.cells)
    length = route.length
    n = cells.shape[0]
    all_in = jnp.all(in_bounds(cells, task.grid_shape()) | ~route.live())
    if n >= 2:
        step = jnp.max(jnp.abs(cells[1:] - cells[:-1]), axis=-1)
        step_live = jnp.arange(n - 1) < length - 1
        steps_ok = jnp.all((step == 1) | ~step_live)
    else:
        steps_ok = jnp.asarray(True)
    last = cells[jnp.clip(length - 1, 0, max(n - 1, 0))]
    ends = jnp.all(cells[0] == jnp.asarray(task.start)) & jnp.all(last == jnp.asarray(task.goal))
    return jnp.asarray(well_formed) & (length >= 2) & all_in & steps_ok & ends


def obstacle_traversals(route: Route, task, *, well_formed=True):
    """Number of route cells (each visit counted) that lie on an obstacle of
    ``task``. Out-of-bounds cells are not on the grid and are not counted; a
    malformed route (``well_formed`` False) has no cells to count."""
    ok = task.cells_in_grid(route)
    on = task.obstacle_at(route, ok)
    return jnp.where(jnp.asarray(well_formed), jnp.sum(on, dtype=jnp.int32), 0)


def route_validity(route: Route, task, *, request_ok=True, well_formed=True):
    """(connected_path, obstacle_traversals, obstacle_violation, valid_path) of
    one padded route on ``task``: valid = connected, no traversal, request ok."""
    conn = connected_path(route, task, well_formed=well_formed)
    trav = obstacle_traversals(route, task, well_formed=well_formed)
    viol = trav > 0
    valid = conn & ~viol & jnp.asarray(request_ok)
    return conn, trav, viol, valid


# --------------------------------------------------------------------------- #
# Cost, censoring, regret
# --------------------------------------------------------------------------- #

def _cost_of_values(route: Route, zc, ok, model: str, weight, stats, pixel_size_m):
    """Route cost from the elevations ``zc`` at the route cells (valid where ``ok``)."""
    cells = route.cells
    n = cells.shape[0]
    if n < 2:
        return jnp.zeros((), zc.dtype)
    dr = cells[1:] - cells[:-1]
    diag = (jnp.abs(dr[:, 0]) + jnp.abs(dr[:, 1])) == 2
    d = jnp.where(diag, math.sqrt(2.0), 1.0).astype(zc.dtype) * jnp.asarray(pixel_size_m, zc.dtype)
    w = jnp.asarray(weight, zc.dtype)
    cost = get_cost_model(model).step_cost(d, zc[:-1], zc[1:], w, stats, jnp)
    step_live = (jnp.arange(n - 1) < route.length - 1) & ok[:-1] & ok[1:]
    return _sum(jnp.where(step_live, cost, 0.0).astype(zc.dtype)).astype(zc.dtype)


def _cost_switch(route: Route, zc, ok, model, weight, stats, pixel_size_m):
    """:func:`_cost_of_values` for a static model name, or by ``lax.switch`` over
    the registry for a (traced) ``MODEL_INDEX`` id."""
    if isinstance(model, str):
        return _cost_of_values(route, zc, ok, model, weight, stats, pixel_size_m)
    def branch(name):
        return lambda r, z, o, w, s: _cost_of_values(r, z, o, name, w, s, pixel_size_m)

    return jax.lax.switch(jnp.asarray(model, jnp.int32), [branch(m) for m in MODEL_NAMES],
                          route, zc, ok, weight, stats)


def padded_route_cost(route: Route, elevation, model, weight, *, pixel_size_m: float = 30.0,
                      stats=None):
    """Recomputed cost of a padded route on the full grid ``elevation``: the
    registry's step costs, summed over the ``length - 1`` steps, in
    ``elevation``'s dtype (float64 needs x64 enabled).

    ``model`` is a cost-model name (static) or an integer id of ``MODEL_INDEX``
    (may be traced, so one batch can mix models). ``stats`` defaults to
    ``crop_stats(elevation)``. Only meaningful for a connected route; steps
    touching an out-of-bounds cell contribute 0. (The host NumPy recosting of a
    ragged route is :func:`passage_jax.graph.route_cost`.)
    """
    z = jnp.asarray(elevation)
    route = Route(jnp.asarray(route.cells), route.length)
    ok = route.live() & in_bounds(route.cells, z.shape)
    zc = gather_cells(z, route.cells, ok)
    if stats is None:
        stats = crop_stats(z, jnp)
    return _cost_switch(route, zc, ok, model, weight, stats, pixel_size_m)


def censored_cost(cost, valid, c_star, *, k_factor=CENSOR_FACTOR):
    """``cost`` where ``valid``, else the censored penalty ``K = k_factor * c*``.

    ``k_factor`` defaults to the contract's :data:`~passage_jax.contract.CENSOR_FACTOR`
    (1e6); a Python number must be finite and positive (a traced one is used as given). A
    failure's entry with a non-finite c* stays non-finite. The regret of a failure is the
    contract's ``FAILURE_REGRET`` whatever ``k_factor`` is (:func:`regret`).
    """
    if isinstance(k_factor, bool) or (isinstance(k_factor, (int, float))
                                      and not (math.isfinite(k_factor) and k_factor > 0)):
        raise ValueError(f"k_factor must be a finite positive number, got {k_factor!r}")
    c_star = jnp.asarray(c_star)
    return jnp.where(valid, cost, k_factor * c_star)


def regret(predicted_cost, valid, c_star):
    """``(predicted - c*) / c*``; exactly ``FAILURE_REGRET`` for a failure; NaN
    where c* is not a finite positive number (this takes precedence)."""
    c_star = jnp.asarray(c_star)
    good = jnp.isfinite(c_star) & (c_star > 0)
    safe = jnp.where(good, c_star, 1.0)
    r = jnp.where(valid, (predicted_cost - safe) / safe, FAILURE_REGRET)
    return jnp.where(good, r, jnp.nan).astype(jnp.result_type(predicted_cost, c_star))


# --------------------------------------------------------------------------- #
# Geometry
# --------------------------------------------------------------------------- #

def route_length_pixels(route: Route, dtype=None):
    """Length in pixels of a padded route (1 per cardinal, sqrt(2) per diagonal)."""
    dt = _float_dtype(dtype)
    cells = jnp.asarray(route.cells)
    n = cells.shape[0]
    if n < 2:
        return jnp.zeros((), dt)
    dr = jnp.abs(cells[1:] - cells[:-1])
    diag = (dr[:, 0] + dr[:, 1]) == 2
    step = jnp.where(diag, jnp.sqrt(jnp.asarray(2.0, dt)), jnp.asarray(1.0, dt))
    return _sum(jnp.where(jnp.arange(n - 1) < route.length - 1, step, 0.0).astype(dt)).astype(dt)


#: Geometry is defined when all cells of both routes fit in a window this wide
#: (so squared distances and cell keys fit in int32); NaN otherwise.
GEOMETRY_SPAN = 1 << 15


def _span_ok(x, live):
    """All live entries of int32 ``x`` lie within ``GEOMETRY_SPAN`` of each other
    (unsigned difference: exact even where an int32 difference would wrap)."""
    big = jnp.iinfo(jnp.int32).max
    lo = jnp.min(jnp.where(live, x, big))
    hi = jnp.max(jnp.where(live, x, -big - 1))
    return (hi.astype(jnp.uint32) - lo.astype(jnp.uint32)) < GEOMETRY_SPAN, lo


def route_geometry(candidate: Route, reference: Route, dtype=None):
    """(assd, h95, path_iou) between the candidate's cells and the reference's.

    Distances in pixels between the two padded cell sets, by masked pairwise
    squared distances (exact int32; one pair matrix gives both directed
    minima; square roots of the two order statistics and of the minima only).
    A revisited cell counts once per visit for ASSD and H95; IoU uses the cell
    sets (one sort of both routes' cell keys). ASSD is normalised by the
    reference length in pixels. Computed in ``dtype`` (default: JAX's default
    float, float64 under x64); in float32 the sums are pairwise. NaN when either route is empty (and ASSD also
    when the reference has length 0), and when the live cells of the two
    routes do not fit in a ``GEOMETRY_SPAN``-wide square window.
    """
    dt = _float_dtype(dtype)
    a = jnp.asarray(candidate.cells, jnp.int32)
    b = jnp.asarray(reference.cells, jnp.int32)
    la = jnp.asarray(candidate.length, jnp.int32)
    lb = jnp.asarray(reference.length, jnp.int32)
    a_live = jnp.arange(a.shape[0]) < la
    b_live = jnp.arange(b.shape[0]) < lb
    dr = a[:, None, 0] - b[None, :, 0]
    dc = a[:, None, 1] - b[None, :, 1]
    d2 = jnp.where(a_live[:, None] & b_live[None, :], dr * dr + dc * dc, _BIG_D2)
    min_a = jnp.min(d2, axis=1)  # _BIG_D2 on padding rows
    min_b = jnp.min(d2, axis=0)
    da = jnp.sqrt(min_a.astype(dt))
    db = jnp.sqrt(min_b.astype(dt))
    total = _sum(jnp.where(a_live, da, 0)) + _sum(jnp.where(b_live, db, 0))
    count = (la + lb).astype(dt)
    l_star = route_length_pixels(Route(b, lb), dt)
    # P95 of the minima: sort the exact integers, take roots of two order statistics
    root = lambda v: jnp.sqrt(v.astype(dt))  # noqa: E731
    h95 = jnp.maximum(percentile_of_sorted(jnp.sort(min_a), la, 95.0, root),
                      percentile_of_sorted(jnp.sort(min_b), lb, 95.0, root))
    # IoU of the cell sets: key = 2 * cell + (0 for A, 1 for B); in the sorted
    # keys a cell of both routes shows exactly one 0 -> 1 step inside its run
    cells = jnp.concatenate([a, b])
    live = jnp.concatenate([a_live, b_live])
    r_ok, r0 = _span_ok(cells[:, 0], live)
    c_ok, c0 = _span_ok(cells[:, 1], live)
    cell = (cells[:, 0] - r0) * GEOMETRY_SPAN + (cells[:, 1] - c0)
    src = jnp.concatenate([jnp.zeros(a.shape[0], jnp.int32), jnp.ones(b.shape[0], jnp.int32)])
    keys = jnp.sort(jnp.where(live, cell * 2 + src, jnp.iinfo(jnp.int32).max))
    n = la + lb  # the first n sorted keys are exactly the live ones
    m = keys.shape[0]
    if m:
        kc, kf = keys >> 1, keys & 1
        first = jnp.concatenate([jnp.ones((1,), bool), kc[1:] != kc[:-1]])
        union = jnp.sum(first & (jnp.arange(m) < n), dtype=jnp.int32)
        both = (kc[1:] == kc[:-1]) & (kf[:-1] == 0) & (kf[1:] == 1) & (jnp.arange(1, m) < n)
        inter = jnp.sum(both, dtype=jnp.int32)
    else:
        union = inter = jnp.zeros((), jnp.int32)
    iou = inter.astype(dt) / jnp.maximum(union, 1).astype(dt)
    defined = (la > 0) & (lb > 0) & r_ok & c_ok
    assd = jnp.where(defined, total / jnp.where(count > 0, count, 1) / l_star, jnp.nan)
    h95 = jnp.where(defined, h95, jnp.nan)
    iou = jnp.where(defined, iou, jnp.nan)
    return assd.astype(dt), h95.astype(dt), iou.astype(dt)


# --------------------------------------------------------------------------- #
# Everything for one task, then for a batch
# --------------------------------------------------------------------------- #

def score_task(candidate: Route, reference: Route | None, task, *, request_ok=True,
               well_formed=True, pixel_size_m: float = 30.0, geometry: bool = True
               ) -> RouteMetrics:
    """All contract §4 per-task metrics of one padded candidate route.

    ``task`` is a :class:`~passage_jax.metrics.types.TaskArrays` or a
    :class:`~passage_jax.metrics.types.TaskAtCandidate` read at ``candidate``'s
    cells; its ``cost_model`` is a ``MODEL_INDEX`` id (traceable). Costs, regret
    and geometry are in the task's floating dtype (``c_star`` is cast to it).
    ``request_ok``: the request ended with status ok before its deadline;
    ``well_formed``: the candidate was a well-formed route (a malformed one is
    passed as an empty route). Geometry is NaN unless the route is valid.
    ``geometry`` (static): False leaves out the pairwise geometry (ASSD, H95
    and IoU are NaN, ``reference`` is not read and may be None), so the work
    and memory are O(L): validity, cost and regret of a long route.
    """
    dtype = task.dtype
    conn, trav, viol, valid = route_validity(candidate, task, request_ok=request_ok,
                                             well_formed=well_formed)
    ok = task.cells_in_grid(candidate)
    cost = _cost_switch(candidate, task.elevation_at(candidate, ok), ok, task.cost_model,
                        task.weight, task.crop_stats(), pixel_size_m)
    c_star = jnp.asarray(task.c_star, dtype)
    pred = censored_cost(cost, valid, c_star)
    reg = regret(pred, valid, c_star)
    nan = jnp.asarray(jnp.nan, dtype)
    if geometry:
        assd, h95, iou = route_geometry(candidate, reference, dtype)
    else:
        assd = h95 = iou = nan
    return RouteMetrics(
        connected_path=conn, obstacle_traversals=trav, obstacle_violation=viol,
        valid_path=valid, success=valid, predicted_cost=pred, regret=reg,
        assd=jnp.where(valid, assd, nan), h95=jnp.where(valid, h95, nan),
        path_iou=jnp.where(valid, iou, nan),
    )


def _score_tasks(candidates: Route, references: Route | None, tasks, request_ok=None,
                 well_formed=None, *, pixel_size_m: float = 30.0,
                 geometry: bool = True) -> RouteMetrics:
    n = jnp.shape(candidates.length)[0]
    request_ok = jnp.ones(n, bool) if request_ok is None else request_ok
    well_formed = jnp.ones(n, bool) if well_formed is None else well_formed

    def one(cand, ref, task, ok, wf):
        return score_task(cand, ref, task, request_ok=ok, well_formed=wf,
                          pixel_size_m=pixel_size_m, geometry=geometry)

    return jax.vmap(one)(candidates, references, tasks, request_ok, well_formed)


#: Jitted, batched :func:`score_task` -> :class:`RouteMetrics` of (B,) arrays.
#: ``score_tasks(candidates, references, tasks, request_ok=None, well_formed=None,
#: *, pixel_size_m=30.0)``: every leaf of ``candidates``/``references`` (Route),
#: ``tasks`` (TaskArrays or TaskAtCandidate) and the (B,) bool ``request_ok`` /
#: ``well_formed`` (None: all True) carries a leading task axis; ``pixel_size_m``
#: is static. With :class:`TaskAtCandidate` the grid size is data, so tasks on
#: grids of any size share one compilation. ``geometry=False`` (static) leaves
#: the pairwise geometry out (NaN; ``references`` may be None).
score_tasks = jax.jit(_score_tasks, static_argnames=("pixel_size_m", "geometry"))


def _score_tasks_packed(candidates: Route, references: Route | None, tasks, request_ok=None,
                        well_formed=None, *, pixel_size_m: float = 30.0, geometry: bool = True):
    return _score_tasks(candidates, references, tasks, request_ok, well_formed,
                        pixel_size_m=pixel_size_m, geometry=geometry).packed()


#: :data:`score_tasks` with its outputs packed by :meth:`RouteMetrics.packed`
#: into (B, 4) int32 and (B, 5) floats: what the host entry point fetches, two
#: transfers per call instead of ten. Compiled without LLVM's most expensive
#: passes: a third less compile time per shape, same run time.
score_tasks_packed = jax.jit(_score_tasks_packed, static_argnames=("pixel_size_m", "geometry"),
                             compiler_options={"xla_llvm_disable_expensive_passes": True})

#: :data:`score_tasks_packed` called through its exported modules where the persistent
#: compilation cache is on (:class:`~passage_jax.compilation.ExportedKernel`: a later
#: process neither traces nor lowers it); the same results, bit for bit.
score_tasks_packed_exported = ExportedKernel(
    _score_tasks_packed, score_tasks_packed, "score_tasks_packed",
    compiler_options={"xla_llvm_disable_expensive_passes": True})
