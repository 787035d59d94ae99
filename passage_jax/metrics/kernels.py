"""Per-task decoded-path metric kernels on padded routes (SPEC §4).

A route is an ``(L_max, 2)`` int32 array of ``(row, col)`` cells plus a scalar
``length``; rows at or beyond ``length`` are padding and never read as cells.
Every function here is pure, jittable and vmappable, and takes its floating
dtype from its inputs (the elevation ``z`` for costs; ``dtype`` or the default
JAX float for geometry). Nothing is rounded or clipped: a cell outside the grid
makes the route invalid and is masked wherever the grid is read.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from passage_jax.graph.costs import crop_stats, get_cost_model
from passage_jax.graph.spec import OBJECTIVES  # noqa: F401  (documentation)
from passage_jax.graph.costs import MODEL_NAMES

#: Censoring factor: a failed route costs ``K = CENSOR_FACTOR * c*``.
CENSOR_FACTOR = 1e6
#: Regret of a failed route, exactly.
FAILURE_REGRET = 999999.0
_BIG_D2 = jnp.iinfo(jnp.int32).max


def _float_dtype(dtype=None):
    return jnp.dtype(dtype) if dtype is not None else jnp.zeros((), float).dtype


def _live(length, n):
    return jnp.arange(n) < length


def in_bounds(route, shape):
    """(L,) bool: the cell lies inside a grid of ``shape`` (H, W)."""
    h, w = shape
    r, c = route[..., 0], route[..., 1]
    return (r >= 0) & (r < h) & (c >= 0) & (c < w)


def _gather(grid, route, ok):
    """grid[route] where ``ok``; the index is clamped only to keep the gather
    in range, and the result must be masked by ``ok`` by the caller."""
    h, w = grid.shape
    r = jnp.where(ok, route[:, 0], 0)
    c = jnp.where(ok, route[:, 1], 0)
    return grid[jnp.clip(r, 0, h - 1), jnp.clip(c, 0, w - 1)]


# --------------------------------------------------------------------------- #
# Validity
# --------------------------------------------------------------------------- #

def connected_path(route, length, start, goal, shape, well_formed=True):
    """SPEC §4 ``connected_path`` of one padded route.

    True iff the route is well formed, has at least 2 cells, all in bounds, every
    step is one of the 8 moves (a repeated consecutive cell is not; a later
    revisit is fine), the first cell is ``start`` and the last is ``goal``.
    ``shape`` is the static grid shape (H, W).
    """
    route = jnp.asarray(route)
    n = route.shape[0]
    live = _live(length, n)
    inb = in_bounds(route, shape)
    all_in = jnp.all(inb | ~live)
    if n >= 2:
        step = jnp.max(jnp.abs(route[1:] - route[:-1]), axis=-1)
        step_live = jnp.arange(n - 1) < length - 1
        steps_ok = jnp.all((step == 1) | ~step_live)
    else:
        steps_ok = jnp.asarray(True)
    last = route[jnp.clip(length - 1, 0, max(n - 1, 0))]
    ends = jnp.all(route[0] == jnp.asarray(start)) & jnp.all(last == jnp.asarray(goal))
    return jnp.asarray(well_formed) & (length >= 2) & all_in & steps_ok & ends


def obstacle_traversals(route, length, obstacles, well_formed=True):
    """Number of route cells (each visit counted) that lie on an obstacle.

    Out-of-bounds cells are not on the grid and are not counted; a malformed
    route (``well_formed`` False) has no cells to count.
    """
    route = jnp.asarray(route)
    ok = _live(length, route.shape[0]) & in_bounds(route, obstacles.shape)
    on = _gather(jnp.asarray(obstacles).astype(bool), route, ok) & ok
    return jnp.where(jnp.asarray(well_formed), jnp.sum(on, dtype=jnp.int32), 0)


def route_validity(route, length, start, goal, obstacles, request_ok=True, well_formed=True):
    """(connected_path, obstacle_traversals, obstacle_violation, valid_path)."""
    conn = connected_path(route, length, start, goal, obstacles.shape, well_formed)
    trav = obstacle_traversals(route, length, obstacles, well_formed)
    viol = trav > 0
    valid = conn & ~viol & jnp.asarray(request_ok)
    return conn, trav, viol, valid


# --------------------------------------------------------------------------- #
# Cost, censoring, regret
# --------------------------------------------------------------------------- #

def _cost_of_values(route, length, zc, ok, model: str, weight, stats, pixel_size_m):
    """Route cost from the elevations ``zc`` at the route cells (valid where ``ok``)."""
    n = route.shape[0]
    if n < 2:
        return jnp.zeros((), zc.dtype)
    dr = route[1:] - route[:-1]
    diag = (jnp.abs(dr[:, 0]) + jnp.abs(dr[:, 1])) == 2
    d = jnp.where(diag, math.sqrt(2.0), 1.0).astype(zc.dtype) * jnp.asarray(pixel_size_m, zc.dtype)
    w = jnp.asarray(weight, zc.dtype)
    cost = get_cost_model(model).step_cost(d, zc[:-1], zc[1:], w, stats, jnp)
    step_live = (jnp.arange(n - 1) < length - 1) & ok[:-1] & ok[1:]
    return jnp.sum(jnp.where(step_live, cost, 0.0)).astype(zc.dtype)


def _cost_switch(route, length, zc, ok, model, weight, stats, pixel_size_m):
    if isinstance(model, str):
        return _cost_of_values(route, length, zc, ok, model, weight, stats, pixel_size_m)
    branches = [
        (lambda name: (lambda r, l, zz, o, ww, st: _cost_of_values(r, l, zz, o, name, ww, st,
                                                                   pixel_size_m)))(m)
        for m in MODEL_NAMES
    ]
    return jax.lax.switch(jnp.asarray(model, jnp.int32), branches, route, length, zc, ok, weight,
                          stats)


def route_cost(route, length, z, model, weight, pixel_size_m: float = 30.0, stats=None):
    """Recomputed cost of a padded route: the registry's step costs, summed over
    the ``length - 1`` steps, in ``z``'s dtype (float64 needs x64 enabled).

    ``model`` is a cost-model name (static) or an integer id of ``MODEL_INDEX``
    (may be traced, so one batch can mix models). ``stats`` defaults to
    ``crop_stats(z)``. Only meaningful for a connected route; steps touching an
    out-of-bounds cell contribute 0.
    """
    route = jnp.asarray(route)
    z = jnp.asarray(z)
    ok = _live(length, route.shape[0]) & in_bounds(route, z.shape)
    zc = _gather(z, route, ok)
    if stats is None:
        stats = crop_stats(z, jnp)
    return _cost_switch(route, length, zc, ok, model, weight, stats, pixel_size_m)


def censored_cost(cost, valid, c_star):
    """``cost`` where ``valid``, else the censored ``K = 1e6 * c*``."""
    c_star = jnp.asarray(c_star)
    return jnp.where(valid, cost, CENSOR_FACTOR * c_star)


def regret(predicted_cost, valid, c_star):
    """``(predicted - c*) / c*``; exactly 999999 for a failure; NaN where c* is
    not a finite positive number (this takes precedence)."""
    c_star = jnp.asarray(c_star)
    good = jnp.isfinite(c_star) & (c_star > 0)
    safe = jnp.where(good, c_star, 1.0)
    r = jnp.where(valid, (predicted_cost - safe) / safe, FAILURE_REGRET)
    return jnp.where(good, r, jnp.nan).astype(jnp.result_type(predicted_cost, c_star))


# --------------------------------------------------------------------------- #
# Geometry
# --------------------------------------------------------------------------- #

def masked_percentile(x, mask, q):
    """Linear-interpolation percentile (NumPy's default method) of ``x[mask]``;
    NaN when the mask is empty. ``q`` in [0, 100]. NaNs must be masked out."""
    x = jnp.asarray(x)
    if x.shape[-1] == 0:
        return jnp.asarray(jnp.nan, x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else float)
    n = jnp.sum(mask)
    xs = jnp.sort(jnp.where(mask, x, jnp.inf))
    pos = (n - 1).astype(x.dtype) * (jnp.asarray(q, x.dtype) / 100)
    pos = jnp.maximum(pos, 0)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(n - 1, 0))
    t = pos - lo.astype(x.dtype)
    a, b = xs[lo], xs[hi]
    diff = b - a
    val = jnp.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    val = jnp.where(a == b, a, val)
    return jnp.where(n > 0, val, jnp.nan)


def route_length_pixels(route, length, dtype=None):
    """Length in pixels of a padded route (1 per cardinal, sqrt(2) per diagonal)."""
    dt = _float_dtype(dtype)
    route = jnp.asarray(route)
    n = route.shape[0]
    if n < 2:
        return jnp.zeros((), dt)
    dr = jnp.abs(route[1:] - route[:-1])
    diag = (dr[:, 0] + dr[:, 1]) == 2
    step = jnp.where(diag, jnp.sqrt(jnp.asarray(2.0, dt)), jnp.asarray(1.0, dt))
    return jnp.sum(jnp.where(jnp.arange(n - 1) < length - 1, step, 0.0)).astype(dt)


def _percentile_of_sorted(xs, n, q, value):
    """:func:`masked_percentile`'s interpolation on an ascending array ``xs``
    whose first ``n`` entries are the data; ``value`` maps an entry to the
    float it stands for (monotone non-decreasing), applied to the two order
    statistics only."""
    dt = value(xs[:1]).dtype
    pos = (n - 1).astype(dt) * (jnp.asarray(q, dt) / 100)
    pos = jnp.maximum(pos, 0)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(n - 1, 0))
    t = pos - lo.astype(dt)
    a, b = value(xs[lo]), value(xs[hi])
    diff = b - a
    val = jnp.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    val = jnp.where(a == b, a, val)
    return jnp.where(n > 0, val, jnp.nan)


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


def route_geometry(a, la, b, lb, dtype=None):
    """(assd, h95, path_iou) between candidate cells ``a`` and reference cells ``b``.

    Distances in pixels between the two padded cell sets, by masked pairwise
    squared distances (exact int32; one pair matrix gives both directed
    minima; square roots of the two order statistics and of the minima only).
    A revisited cell counts once per visit for ASSD and H95; IoU uses the cell
    sets (one sort of both routes' cell keys). ASSD is normalised by the
    reference length in pixels. NaN when either route is empty (and ASSD also
    when the reference has length 0), and when the live cells of the two
    routes do not fit in a ``GEOMETRY_SPAN``-wide square window.
    """
    dt = _float_dtype(dtype)
    a = jnp.asarray(a, jnp.int32)
    b = jnp.asarray(b, jnp.int32)
    la = jnp.asarray(la, jnp.int32)
    lb = jnp.asarray(lb, jnp.int32)
    a_live = _live(la, a.shape[0])
    b_live = _live(lb, b.shape[0])
    dr = a[:, None, 0] - b[None, :, 0]
    dc = a[:, None, 1] - b[None, :, 1]
    d2 = jnp.where(a_live[:, None] & b_live[None, :], dr * dr + dc * dc, _BIG_D2)
    min_a = jnp.min(d2, axis=1)  # _BIG_D2 on padding rows
    min_b = jnp.min(d2, axis=0)
    da = jnp.sqrt(min_a.astype(dt))
    db = jnp.sqrt(min_b.astype(dt))
    total = jnp.sum(jnp.where(a_live, da, 0)) + jnp.sum(jnp.where(b_live, db, 0))
    count = (la + lb).astype(dt)
    l_star = route_length_pixels(b, lb, dt)
    # P95 of the minima: sort the exact integers, take roots of two order statistics
    root = lambda v: jnp.sqrt(v.astype(dt))  # noqa: E731
    h95 = jnp.maximum(_percentile_of_sorted(jnp.sort(min_a), la, 95.0, root),
                      _percentile_of_sorted(jnp.sort(min_b), lb, 95.0, root))
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
# Everything for one task
# --------------------------------------------------------------------------- #

METRIC_KEYS = ("connected_path", "obstacle_traversals", "obstacle_violation", "valid_path",
               "success", "predicted_cost", "regret", "assd", "h95", "path_iou")


def _score_core(candidate, cand_length, reference, ref_length, start, goal, shape, z_at,
                obst_at, stats, dtype, model, weight, c_star, request_ok, well_formed,
                pixel_size_m):
    candidate = jnp.asarray(candidate)
    ok = _live(cand_length, candidate.shape[0]) & in_bounds(candidate, shape)
    conn = connected_path(candidate, cand_length, start, goal, shape, well_formed)
    on = obst_at(candidate, ok) & ok
    trav = jnp.where(jnp.asarray(well_formed), jnp.sum(on, dtype=jnp.int32), 0)
    viol = trav > 0
    valid = conn & ~viol & jnp.asarray(request_ok)
    cost = _cost_switch(candidate, cand_length, z_at(candidate, ok), ok, model, weight, stats,
                        pixel_size_m)
    c_star = jnp.asarray(c_star, dtype)
    pred = censored_cost(cost, valid, c_star)
    reg = regret(pred, valid, c_star)
    assd, h95, iou = route_geometry(candidate, cand_length, reference, ref_length, dtype)
    nan = jnp.asarray(jnp.nan, dtype)
    return {
        "connected_path": conn,
        "obstacle_traversals": trav,
        "obstacle_violation": viol,
        "valid_path": valid,
        "success": valid,
        "predicted_cost": pred,
        "regret": reg,
        "assd": jnp.where(valid, assd, nan),
        "h95": jnp.where(valid, h95, nan),
        "path_iou": jnp.where(valid, iou, nan),
    }


def score_task(candidate, cand_length, reference, ref_length, start, goal, obstacles, z,
               model, weight, c_star, request_ok=True, well_formed=True,
               pixel_size_m: float = 30.0):
    """All SPEC §4 per-task metrics of one padded candidate route.

    ``model``: cost-model name (static) or ``MODEL_INDEX`` id (traceable).
    ``c_star`` is cast to ``z``'s dtype. Returns a dict keyed by
    :data:`METRIC_KEYS`; geometry is NaN unless the route is valid.
    """
    z = jnp.asarray(z)
    obstacles = jnp.asarray(obstacles).astype(bool)
    return _score_core(candidate, cand_length, reference, ref_length, start, goal, z.shape,
                       lambda r, ok: _gather(z, r, ok), lambda r, ok: _gather(obstacles, r, ok),
                       crop_stats(z, jnp), z.dtype, model, weight, c_star, request_ok,
                       well_formed, pixel_size_m)


def _score_batch(candidates, cand_lengths, references, ref_lengths, starts, goals, obstacles, z,
                 model_index, weight, c_star, request_ok, well_formed, pixel_size_m=30.0):
    fn = lambda *args: score_task(*args, pixel_size_m=pixel_size_m)  # noqa: E731
    return jax.vmap(fn)(candidates, cand_lengths, references, ref_lengths, starts, goals,
                        obstacles, z, model_index, weight, c_star, request_ok, well_formed)


#: Batched, jitted :func:`score_task`: every argument carries a leading task axis
#: (candidates (B, La, 2) int32, cand_lengths (B,), references (B, Lb, 2),
#: ref_lengths (B,), starts/goals (B, 2), obstacles (B, H, W) bool, z (B, H, W),
#: model_index (B,) int32, weight (B,), c_star (B,), request_ok (B,) bool,
#: well_formed (B,) bool); ``pixel_size_m`` is static.
score_batch = jax.jit(_score_batch, static_argnames=("pixel_size_m",))


def _score_batch_gathered(candidates, cand_lengths, references, ref_lengths, starts, goals,
                          grid_shapes, on_obstacle, z_cells, crop_min, crop_range, crop_max_abs,
                          model_index, weight, c_star, request_ok, well_formed,
                          pixel_size_m=30.0):
    from passage_jax.graph.costs import CropStats

    def one(cand, cl, ref, rl, st, go, hw, ob, zc, cmin, crng, cmax, mi, wt, cs, ro, wf):
        return _score_core(cand, cl, ref, rl, st, go, (hw[0], hw[1]), lambda r, ok: zc,
                           lambda r, ok: ob, CropStats(cmin, crng, cmax), zc.dtype, mi, wt, cs,
                           ro, wf, pixel_size_m)

    return jax.vmap(one)(candidates, cand_lengths, references, ref_lengths, starts, goals,
                         grid_shapes, on_obstacle, z_cells, crop_min, crop_range, crop_max_abs,
                         model_index, weight, c_star, request_ok, well_formed)


#: Like :data:`score_batch`, with the grid already read at the candidate's cells:
#: ``grid_shapes`` (B, 2) int32 holds each task's grid (H, W), ``on_obstacle``
#: (B, La) bool and ``z_cells`` (B, La) are the obstacle flag and elevation at
#: each in-bounds live cell (anything elsewhere: masked), and the crop
#: statistics come as (B,) arrays. The grid size is data, not shape, so tasks on
#: grids of any size share one compilation. This is the host entry point's
#: form: host-to-device traffic is O(B * La), not O(B * H * W).
score_batch_gathered = jax.jit(_score_batch_gathered, static_argnames=("pixel_size_m",))


def _score_batch_packed(*args, pixel_size_m=30.0):
    res = _score_batch_gathered(*args, pixel_size_m=pixel_size_m)
    flags = jnp.stack([res[k].astype(jnp.int32) for k in PACKED_INT_KEYS], axis=-1)
    values = jnp.stack([res[k] for k in PACKED_FLOAT_KEYS], axis=-1)
    return flags, values


#: :data:`score_batch_gathered` with its outputs packed into two arrays, (B, 4)
#: int32 in the order of ``PACKED_INT_KEYS`` and (B, 5) floats in the order of
#: ``PACKED_FLOAT_KEYS`` (``success`` equals ``valid_path``): what the host
#: fetches, two transfers per call instead of ten. Compiled without LLVM's most
#: expensive passes: a third less compile time per shape, same run time.
score_batch_packed = jax.jit(_score_batch_packed, static_argnames=("pixel_size_m",),
                             compiler_options={"xla_llvm_disable_expensive_passes": True})
PACKED_INT_KEYS = ("connected_path", "obstacle_traversals", "obstacle_violation", "valid_path")
PACKED_FLOAT_KEYS = ("predicted_cost", "regret", "assd", "h95", "path_iou")
