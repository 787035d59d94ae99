"""Host entry point: ragged, possibly malformed routes -> per-task metric arrays.

The shell normalises each candidate (without rounding or clipping anything),
checks each distinct reference once, reads the grids at the candidates' cells
with vectorised NumPy (grouped by grid, never per cell in Python), buckets the
tasks by route length on the one ladder of :mod:`passage_jax.shapes`, pads
them into the kernel-boundary pytrees (:class:`~passage_jax.metrics.types.Route`
and :class:`~passage_jax.metrics.types.TaskAtCandidate`), runs the jitted
:data:`~passage_jax.metrics.kernels.score_tasks_packed` under scoped float64
(dispatching every chunk before waiting for any, so the host prepares the next
chunk while the previous one computes), and scatters the results back into
task order. A task whose candidate or reference is longer than ``long_route``
cells (a decoder looping on a plateau returns 100,000 cells) is scored apart,
in memory that does not grow with the square of its length: the kernel runs
without its pairwise geometry on the candidate alone (bucketed by the
candidate's own length, so it never pads other tasks), and only when that
finds the route valid is its geometry computed on the host by
:func:`route_geometry_host` (nearest cells through a k-d tree over the
distinct cells, exact integer squared distances). With a ``sharding`` over the batch axis each
chunk is placed on the devices with ``jax.device_put`` and the kernel runs SPMD;
the results are the same on any number of devices.

**Stable shapes.** A task's padded length is the rung of the longer of its two routes
(32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, ...; a long task: its
candidate's), and every kernel call of a rung holds the same number of rows,
:func:`_call_rows` (``_PAIR_BUDGET`` = 2**21 pairwise distances, at most ``_MAX_BATCH``
= 1,024 tasks, per device; the last call of a rung padded with empty rows, which are
masked and dropped). A call's shape is thus a function of its rung alone, never of how
many tasks a call, a chunk or a run holds, so scoring compiles **at most one kernel
per length rung**: at most 12 with the pairwise geometry for any number of tasks,
scenes, chunks and grid sizes (the rungs 32 ... 2,048 up to ``long_route``; the grid
size is data, not shape), plus one geometry-free kernel per rung of the candidates of
long tasks (none unless a route passes ``long_route``), per pixel size, kernel precision
and device count. A run at one resolution meets only a few rungs (shipped scenes with
exact, detoured and broken candidates, ``bench/compile_counts.py``: 5 at 64² and 128², 6
at 256²), and a repeated call compiles nothing. The price is padding: a rung's last call
computes up to one call of empty rows (at most 2**21 pairwise distances, a few
milliseconds on a CPU core; one compile is about a second). A task's metrics then do not
depend on how the tasks are chunked (on a given device count).

Without float64 (:func:`passage_jax.precision.kernel_precision` is ``"float32"``: a TPU,
or ``PASSAGE_JAX_NO_X64=1``) the kernel runs in float32 and decides validity (integer
work, exact) and the geometry (float32, pairwise sums); the predicted cost and the
regret are then recomputed in float64 on the host from the same elevations
(:func:`host_cost_regret`, the registry's step costs with NumPy), so they agree with
the float64 path to the order of float64 additions (docs/metrics.md, "Without float64").
"""
from __future__ import annotations

import functools
import math

import jax
import numpy as np
from scipy.spatial import cKDTree

from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET
from passage_jax.graph import MODEL_INDEX, MODEL_NAMES, CropStats, get_cost_model, route_problem
from passage_jax.metrics.kernels import GEOMETRY_SPAN, score_tasks_packed
from passage_jax.metrics.sharding import resolve_sharding
from passage_jax.metrics.types import (
    METRIC_KEYS,
    PACKED_FLOAT_KEYS,
    PACKED_INT_KEYS,
    Route,
    TaskAtCandidate,
)
from passage_jax.precision import kernel_dtype, kernel_x64
from passage_jax.shapes import rung, rungs_of

__all__ = ["MIN_BUCKET", "LONG_ROUTE", "normalise_candidate", "route_geometry_host",
           "host_cost_regret", "score_routes"]

#: Smallest padded route length (shorter routes share this bucket).
MIN_BUCKET = 32
#: Pairwise squared distances per kernel call (tasks * L * L): sets the batch size
#: of each length bucket, so every bucket compiles once.
_PAIR_BUDGET = 1 << 21
#: Route cells per kernel call of the geometry-free (long-route) kernel.
_CELL_BUDGET = 1 << 20
#: Routes (candidate or reference) longer than this many cells are scored by the
#: long-route path: O(L) kernel, geometry on the host, only for valid routes.
LONG_ROUTE = 2048
_MAX_BATCH = 1024
_INT32 = np.iinfo(np.int32)
_I32 = np.dtype(np.int32)

_DTYPES = {
    "connected_path": bool, "obstacle_traversals": np.int64, "obstacle_violation": bool,
    "valid_path": bool, "success": bool,
}


def normalise_candidate(route):
    """(cells (L, 2) int32, reason) for a candidate route.

    ``reason`` is None for a well-formed route (possibly empty, possibly out of
    bounds or disconnected: those are judged by the kernels) and a string
    otherwise; a malformed route is returned as an empty array. Malformed means:
    None, not convertible to an array, not of shape (L, 2), a non-integer dtype
    (floats, even integral ones such as 3.0, bools, objects), or a coordinate
    outside the int32 range. Nothing is rounded or clipped.
    """
    empty = np.zeros((0, 2), np.int32)
    if route is None:
        return empty, "route is None"
    try:
        a = np.asarray(route)
    except (ValueError, TypeError) as e:  # ragged nested lists and the like
        return empty, f"route is not an array: {e}"
    if a.size == 0:
        return empty, None
    if a.ndim != 2 or a.shape[1] != 2:
        return empty, f"route must have shape (L, 2), got {a.shape}"
    if a.dtype.kind not in "iu":
        return empty, f"route coordinates must be integers, got dtype {a.dtype}"
    if a.dtype.kind == "u":
        if int(a.max()) > _INT32.max:
            return empty, "route coordinate beyond the int32 range"
    elif int(a.min()) < _INT32.min or int(a.max()) > _INT32.max:
        return empty, "route coordinate beyond the int32 range"
    return np.ascontiguousarray(a, dtype=np.int32), None


def _bucket(n: int) -> int:
    """Padded length of a route of ``n`` cells: its rung on the ladder of
    :mod:`passage_jax.shapes` from ``MIN_BUCKET`` (32, 64, 96, 128, 192, 256, 384, ...)."""
    return rung(n, MIN_BUCKET)


def _call_rows(length: int, n_dev: int = 1, pairwise: bool = True) -> int:
    """Rows (tasks) of every kernel call of the length rung ``length``: at most
    ``_PAIR_BUDGET`` pairwise distances (``_CELL_BUDGET`` route cells without the
    pairwise geometry) and ``_MAX_BATCH`` tasks per device, times ``n_dev`` devices.
    A function of the rung alone, never of how many tasks a call holds: every call of
    a rung has one shape, so a rung compiles once whatever the number of tasks,
    scenes or chunks (the last call of a rung is padded with empty rows)."""
    per_task = length * length if pairwise else length
    most = max(1, min(_MAX_BATCH, (_PAIR_BUDGET if pairwise else _CELL_BUDGET) // per_task))
    return most * max(1, int(n_dev))


def _call_plan(length: int, n: int, n_dev: int = 1, pairwise: bool = True) -> tuple[int, int]:
    """(rows per call, calls) for ``n`` tasks of the length rung ``length``."""
    size = _call_rows(length, n_dev, pairwise)
    return size, -(-int(n) // size)


def _is_int32_route(a) -> bool:
    return type(a) is np.ndarray and a.dtype == np.int32 and a.ndim == 2 and a.shape[1] == 2


def _concat(arrays, dtype):
    """Concatenated (M, 2) cells and (K + 1,) offsets of a list of (L, 2) arrays."""
    lens = np.fromiter((len(a) for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    cells = (np.concatenate(arrays).astype(dtype, copy=False) if arrays
             else np.zeros((0, 2), dtype))
    return cells.reshape(-1, 2), lens, offsets


def _cell_owner(lens):
    """(M,) index of the route each concatenated cell belongs to."""
    return np.repeat(np.arange(len(lens)), lens)


class _Grids:
    """The distinct grids of a batch of tasks (by identity, within one call).

    Obstacle grids without any obstacle are never read; the others are
    concatenated once (bool) so obstacle flags at any set of cells are one
    gather. Elevation grids are read run by run (cells sorted by grid), and
    their crop statistics are computed once each.
    """

    def __init__(self):
        self.obst_index = {}
        self.obst_offset = []  # flat offset, -1 for a grid without obstacles
        self._obst_parts = []
        self._obst_size = 0
        self.elev_index = {}
        self.elev = []  # (original, flat float64)
        self.stats = []

    def obstacle_id(self, obstacles) -> int:
        k = self.obst_index.get(id(obstacles))
        if k is None:
            k = self.obst_index[id(obstacles)] = len(self.obst_offset)
            a = np.asarray(obstacles, bool)
            if a.any():
                self.obst_offset.append(self._obst_size)
                self._obst_parts.append(a.ravel())
                self._obst_size += a.size
            else:
                self.obst_offset.append(-1)
        return k

    def elevation_id(self, z) -> int:
        k = self.elev_index.get(id(z))
        if k is None:
            k = self.elev_index[id(z)] = len(self.elev)
            z64 = np.asarray(z, np.float64)
            self.elev.append((z, z64.ravel()))
            # crop_stats' max |z| is max(|min z|, |max z|): two passes instead of three
            lo, hi = z64.min(), z64.max()
            self.stats.append((lo, hi - lo, np.maximum(abs(lo), abs(hi))))
        return k

    def finish(self):
        self.obst_offset = np.asarray(self.obst_offset, np.int64)
        self.obst_flat = (np.concatenate(self._obst_parts) if self._obst_parts
                          else np.zeros(0, bool))
        self.stats = np.asarray(self.stats, np.float64).reshape(-1, 3)

    def on_obstacle(self, flat, grid_offset, inb):
        """Obstacle flag at cells with in-grid flat index ``flat`` (valid where
        ``inb``) of grids with flat offset ``grid_offset`` (-1: no obstacle)."""
        use = inb & (grid_offset >= 0)
        out = np.zeros(len(flat), bool)
        out[use] = self.obst_flat[grid_offset[use] + flat[use]]
        return out


def _cells_in_grid(cells, h, w):
    """(in bounds, flat index r * w + c; 0 where out of bounds) of int32
    ``cells`` (M, 2) on grids of per-cell height ``h`` and width ``w``."""
    u = cells.view(np.uint32)  # negative coordinates become huge: one compare each
    inb = (u[:, 0] < h) & (u[:, 1] < w)
    flat = cells[:, 0].astype(np.int64) * w + cells[:, 1]
    flat[~inb] = 0
    return inb, flat


def score_routes(candidates, tasks, c_star, request_ok, references=None,
                 pixel_size_m: float = 30.0, sharding=None, *,
                 long_route: int = LONG_ROUTE) -> dict:
    """Score candidate routes against their tasks (SPEC §4).

    Parameters
    ----------
    candidates : sequence of length N; each a ragged route (anything: malformed
        input makes that route invalid, see :func:`normalise_candidate`).
    tasks : sequence of N :class:`passage_jax.data.scene.Task`; the cost model
        is ``task.objective`` with ``task.weight``; obstacles are
        ``task.obstacles`` (cleared for the free variant).
    c_star : (N,) float64 exact optimal costs.
    request_ok : (N,) bool, True iff the request ended with status ``ok``
        before its deadline.
    references : optional N reference routes for the geometry (default
        ``task.route``); a reference that is not a legal route raises
        ValueError naming the task.
    sharding : None (default: the default device, unsharded), a
        ``jax.sharding.Sharding`` that splits the leading (batch) axis of
        arrays of rank 1 to 3, e.g. ``NamedSharding(Mesh(devices, ("batch",)),
        PartitionSpec("batch"))``, or ``"auto"`` (see :func:`resolve_sharding`).
        Each kernel call's batch is then padded to a multiple of the sharding's
        device count and placed with ``jax.device_put``; padding rows are
        dropped, and the results equal the unsharded ones.
    long_route : tasks whose candidate or reference has more cells than this
        are scored in memory linear in their length (see the module notes);
        the metrics are the same as the fused kernel's (geometry to a few ulp).

    Returns a dict of (N,) NumPy arrays keyed by ``METRIC_KEYS`` plus
    ``malformed`` (bool) and ``problem`` (object array of str/None: why a
    candidate was malformed). The kernels run in
    :func:`passage_jax.precision.kernel_precision` (float64, or float32 where float64
    is missing: then the predicted cost and regret are recomputed in float64 on the
    host, see the module notes); the float arrays are float64 either way.
    """
    n = len(tasks)
    if len(candidates) != n:
        raise ValueError(f"{len(candidates)} candidates for {n} tasks")
    c_star = np.asarray(c_star, np.float64).reshape(-1)
    request_ok = np.asarray(request_ok).reshape(-1)
    if c_star.shape[0] != n:
        raise ValueError(f"c_star has {c_star.shape[0]} entries for {n} tasks")
    if request_ok.shape[0] != n:
        raise ValueError(f"request_ok has {request_ok.shape[0]} entries for {n} tasks")
    if request_ok.dtype != bool:
        raise ValueError(f"request_ok must be bool, got dtype {request_ok.dtype}")
    if references is not None and len(references) != n:
        raise ValueError(f"{len(references)} references for {n} tasks")
    sharding = resolve_sharding(sharding)
    n_dev = sharding.num_devices if sharding is not None else 1

    # ---- distinct tasks (a batch usually scores many candidates per task) ----
    # identities are stable for this call: ``tasks`` holds every object looked up
    grids = _Grids()
    task_of = {}
    utask = []  # (task, first index)
    tix = np.empty(n, np.int64)
    for i, t in enumerate(tasks):
        j = task_of.get(id(t))
        if j is None:
            j = task_of[id(t)] = len(utask)
            utask.append((t, i))
        tix[i] = j
    rows = []
    bad_objective = None
    for t, i in utask:
        if t.objective not in MODEL_INDEX:
            bad_objective = i if bad_objective is None else min(bad_objective, i)
            rows.append((0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0))
            continue
        h, w = np.shape(t.obstacles)
        (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
        rows.append((MODEL_INDEX[t.objective], t.weight, r0, c0, r1, c1, h, w,
                     grids.obstacle_id(t.obstacles), grids.elevation_id(t.elevation_m)))
    grids.finish()
    table = np.array(rows, np.float64).reshape(-1, 10)
    t_model = table[:, 0].astype(np.int32)
    t_weight = np.array([r[1] for r in rows], np.float64)  # exact, whatever its type
    t_start = table[:, 2:4].astype(np.int64)
    t_goal = table[:, 4:6].astype(np.int64)
    t_hw = table[:, 6:8].astype(np.int64)
    t_obst = table[:, 8].astype(np.int64)
    t_elev = table[:, 9].astype(np.int64)

    # ---- references: each distinct (route, task) pair checked once ----------
    if references is None:
        rix = tix
        uref = [(t.route, j, i) for j, (t, i) in enumerate(utask)]
    else:
        ref_of = {}
        uref = []
        rix = np.empty(n, np.int64)
        for i, r in enumerate(references):
            key = (id(r), tix[i])
            k = ref_of.get(key)
            if k is None:
                k = ref_of[key] = len(uref)
                uref.append((r, tix[i], i))
            rix[i] = k
    bad_ref = _check_references(uref, utask, t_start, t_goal, t_hw, t_obst, grids,
                                skip=bad_objective)
    if bad_objective is not None and (bad_ref is None or bad_objective <= bad_ref[0]):
        t = tasks[bad_objective]
        raise ValueError(f"task {bad_objective} (scene {t.id}): unknown cost model "
                         f"{t.objective!r}")
    if bad_ref is not None:
        i, problem = bad_ref
        task = tasks[i]
        raise ValueError(f"task {i} (scene {task.id}, {task.objective}/{task.variant}): "
                         f"reference route is not a legal route: {problem}")
    ref_cells, ref_len, ref_off = _concat(
        [r if _is_int32_route(r) else np.asarray(r, np.int32) for r, _, _ in uref], np.int32)

    # ---- candidates ----------------------------------------------------------
    cands = [None] * n
    problems = [None] * n
    nd, i32 = np.ndarray, _I32
    for i, c in enumerate(candidates):
        if type(c) is nd and c.dtype is i32 and c.ndim == 2 and c.shape[1] == 2:
            cands[i] = c
        else:
            cands[i], problems[i] = normalise_candidate(c)
    well_formed = np.fromiter((p is None for p in problems), bool, n)
    cand_len = np.fromiter(map(len, cands), np.int64, n)

    # ---- buckets: one padded length for both routes of a task ----------------
    # (a long task: the candidate's own length, its geometry is not padded at all)
    long = (cand_len > long_route) | (ref_len[rix] > long_route)
    bucket = rungs_of(np.where(long, cand_len, np.maximum(cand_len, ref_len[rix])), MIN_BUCKET)
    # routes ordered long tasks first, then by bucket (longest first: the costliest
    # calls are dispatched first and the host prepares the rest meanwhile), then by
    # elevation grid, so each bucket's cells are one block and each grid in it is
    # read in one gather
    order = np.lexsort((t_elev[tix], -bucket, ~long))
    cells, lens_o, off_o = _concat([cands[i] for i in order], np.int32)
    task_o = tix[order]
    bucket_o = bucket[order]
    long_o = long[order]
    elev_o = t_elev[task_o]
    t_start32, t_goal32, t_hw32 = (a.astype(np.int32) for a in (t_start, t_goal, t_hw))
    t_hwu = t_hw.astype(np.uint32)
    edges = (np.flatnonzero(np.r_[True, (bucket_o[1:] != bucket_o[:-1])
                                  | (long_o[1:] != long_o[:-1])]) if n else [])
    pending = []
    fdt = kernel_dtype()
    host_cost = fdt != np.float64  # float32 kernels: cost and regret recomputed on the host
    z_o = np.zeros(len(cells), np.float64) if host_cost else None
    with kernel_x64():
        for s, e in zip(edges, np.r_[edges[1:], n].astype(np.int64)):
            length = int(bucket_o[s])
            pairwise = not long_o[s]
            idx = order[s:e]
            tj = task_o[s:e]
            ln = lens_o[s:e]
            cs, ce = off_o[s], off_o[e]
            block = cells[cs:ce]
            # the grid read at the candidate's in-bounds cells only
            inb, flat = _cells_in_grid(block, np.repeat(t_hwu[tj, 0], ln),
                                       np.repeat(t_hwu[tj, 1], ln))
            on = grids.on_obstacle(flat, np.repeat(grids.obst_offset[t_obst[tj]], ln), inb)
            zc = np.zeros(ce - cs, np.float64)
            ev = elev_o[s:e]
            runs = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
            for a, b in zip(runs, np.r_[runs[1:], e - s]):
                ra, rb = off_o[s + a] - cs, off_o[s + b] - cs
                zc[ra:rb] = grids.elev[ev[a]][1][flat[ra:rb]]
            zc[~inb] = 0.0
            if host_cost:
                z_o[cs:ce] = zc

            size, calls = _call_plan(length, e - s, n_dev, pairwise)
            padded = size * calls
            live = np.arange(length) < ln[:, None]
            st = grids.stats[t_elev[tj]]
            pad = functools.partial(_pad_tail, rows=padded)

            args = (
                Route(_pad_rows(padded, live, block, (2,), np.int32), pad(ln.astype(np.int32))),
                Route(_ref_rows(rix[idx], padded, length, ref_cells, ref_len, ref_off),
                      pad(ref_len[rix[idx]].astype(np.int32))) if pairwise else None,
                TaskAtCandidate(
                    grid_shape_hw=pad(t_hw32[tj]),
                    obstacle_cells=_pad_rows(padded, live, on, (), bool),
                    elevation_cells=_pad_rows(padded, live, zc, (), fdt),
                    crop=CropStats(*(pad(st[:, j].astype(fdt)) for j in range(3))),
                    start=pad(t_start32[tj]), goal=pad(t_goal32[tj]), cost_model=pad(t_model[tj]),
                    weight=pad(t_weight[tj].astype(fdt)), c_star=pad(c_star[idx].astype(fdt), 1.0)),
                pad(request_ok[idx]), pad(well_formed[idx]))
            for k in range(0, e - s, size):
                rows = slice(k, k + size)
                chunk = jax.tree_util.tree_map(lambda x, rows=rows: x[rows], args)
                if sharding is not None:
                    chunk = jax.device_put(chunk, sharding)
                res = score_tasks_packed(*chunk, pixel_size_m=float(pixel_size_m),
                                         geometry=pairwise)
                pending.append((idx[k:k + size], res))
        out = {k: np.empty(n, _DTYPES.get(k, np.float64)) for k in METRIC_KEYS}
        for part, res in pending:
            flags, values = jax.device_get(res)
            for c, k in enumerate(PACKED_INT_KEYS):
                out[k][part] = flags[:len(part), c]
            for c, k in enumerate(PACKED_FLOAT_KEYS):
                out[k][part] = values[:len(part), c]
    if host_cost:
        pred, reg = host_cost_regret(cells, lens_o, z_o, out["valid_path"][order], t_model[task_o],
                                     t_weight[task_o], grids.stats[elev_o], c_star[order],
                                     pixel_size_m=pixel_size_m)
        out["predicted_cost"][order] = pred
        out["regret"][order] = reg
    # ---- long tasks: geometry on the host, for valid routes only -------------
    for i in np.flatnonzero(long & out["valid_path"]):
        r = rix[i]
        out["assd"][i], out["h95"][i], out["path_iou"][i] = route_geometry_host(
            cands[i], ref_cells[ref_off[r]:ref_off[r + 1]])
    out["success"] = out["valid_path"].copy()
    out["malformed"] = ~well_formed
    out["problem"] = np.array(problems, dtype=object)
    return out


def host_cost_regret(cells, lens, z, valid, model, weight, stats, c_star, *,
                     pixel_size_m: float = 30.0):
    """(predicted_cost, regret) in float64 with NumPy, as the kernels define them.

    ``cells`` (M, 2) int32 are the routes concatenated (``lens`` (n,) cells each), ``z``
    (M,) float64 the elevation at each cell (anything at cells of invalid routes);
    ``valid`` (n,) bool, ``model`` (n,) ``MODEL_INDEX`` ids, ``weight`` (n,), ``stats``
    (n, 3) crop statistics (min, range, max |z|), ``c_star`` (n,). A valid route's cost
    is the registry's step costs summed in route order (as
    :func:`passage_jax.graph.route_cost`); a failure's predicted cost is
    ``CENSOR_FACTOR * c*`` and its regret ``FAILURE_REGRET``; the regret is NaN where c*
    is not a finite positive number.
    """
    lens = np.asarray(lens, np.int64)
    n = len(lens)
    valid = np.asarray(valid, bool)
    c_star = np.asarray(c_star, np.float64)
    cost = np.zeros(n, np.float64)
    if len(cells) > 1:
        owner = _cell_owner(lens)
        so = owner[:-1]
        idx = np.flatnonzero((owner[1:] == so) & valid[so])
        so = so[idx]
        step = np.abs(cells[idx + 1].astype(np.int64) - cells[idx])
        d = np.where(step.sum(axis=1) == 2, math.sqrt(2.0), 1.0) * np.float64(pixel_size_m)
        z = np.asarray(z, np.float64)
        z0, z1 = z[idx], z[idx + 1]
        m = np.asarray(model)[so]
        w = np.asarray(weight, np.float64)[so]
        st = np.asarray(stats, np.float64).reshape(-1, 3)[so]
        c = np.zeros(len(idx), np.float64)
        for k, name in enumerate(MODEL_NAMES):
            sel = m == k
            if sel.any():
                c[sel] = get_cost_model(name).step_cost(
                    d[sel], z0[sel], z1[sel], w[sel],
                    CropStats(st[sel, 0], st[sel, 1], st[sel, 2]), np)
        cost = np.bincount(so, weights=c, minlength=n)  # in route order, as route_cost
    good = np.isfinite(c_star) & (c_star > 0)
    safe = np.where(good, c_star, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        pred = np.where(valid, cost, CENSOR_FACTOR * c_star)
        reg = np.where(good, np.where(valid, (pred - safe) / safe, FAILURE_REGRET), np.nan)
    return pred, reg


def route_geometry_host(candidate, reference) -> tuple[float, float, float]:
    """(assd, h95, path_iou) of two int32 (L, 2) routes, as
    :func:`~passage_jax.metrics.kernels.route_geometry` defines them (a revisited
    cell counts once per visit for ASSD and H95; IoU of the cell sets; NaN when
    a route is empty or the cells do not fit a ``GEOMETRY_SPAN``-wide window),
    in float64 and in memory O(L_candidate + L_reference): the directed minimum
    squared distances are found for the distinct cells of each route through a
    k-d tree over the other route's distinct cells and made exact integers from
    the nearest cell's coordinates (every squared distance inside the window is
    below 2**31, so the tree's float64 comparisons are exact), then spread to
    every visit. Equal to the kernel's values up to the order of float sums.
    """
    a = np.asarray(candidate, np.int64).reshape(-1, 2)
    b = np.asarray(reference, np.int64).reshape(-1, 2)
    nan = (math.nan, math.nan, math.nan)
    if len(a) == 0 or len(b) == 0:
        return nan
    both = np.concatenate([a, b])
    lo = both.min(axis=0)
    if np.any(both.max(axis=0) - lo >= GEOMETRY_SPAN):
        return nan
    ka = (a[:, 0] - lo[0]) * GEOMETRY_SPAN + (a[:, 1] - lo[1])
    kb = (b[:, 0] - lo[0]) * GEOMETRY_SPAN + (b[:, 1] - lo[1])
    ua, ia = np.unique(ka, return_inverse=True)
    ub, ib = np.unique(kb, return_inverse=True)
    ca = np.stack([ua // GEOMETRY_SPAN, ua % GEOMETRY_SPAN], axis=1)
    cb = np.stack([ub // GEOMETRY_SPAN, ub % GEOMETRY_SPAN], axis=1)

    def nearest_d2(q, pts):
        _, j = cKDTree(pts.astype(np.float64)).query(q.astype(np.float64), k=1)
        d = q - pts[j]
        return d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]

    da = np.sqrt(nearest_d2(ca, cb).astype(np.float64))[ia.reshape(-1)]
    db = np.sqrt(nearest_d2(cb, ca).astype(np.float64))[ib.reshape(-1)]
    steps = np.abs(np.diff(b, axis=0)).sum(axis=1)
    l_star = float(np.where(steps == 2, math.sqrt(2.0), 1.0).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        assd = float((da.sum() + db.sum()) / (len(a) + len(b)) / np.float64(l_star))
    h95 = float(max(np.percentile(da, 95.0), np.percentile(db, 95.0)))
    inter = len(np.intersect1d(ua, ub, assume_unique=True))
    iou = inter / (len(ua) + len(ub) - inter)
    return assd, h95, iou


def _pad_tail(x, fill=0, *, rows):
    """``x`` extended along its first axis to ``rows`` rows of ``fill``."""
    o = np.full((rows,) + x.shape[1:], fill, x.dtype)
    o[:len(x)] = x
    return o


def _pad_rows(padded, live, values, tail, dtype):
    """(padded, L) + tail array holding ``values`` (the rows' cells, concatenated
    in row order) where ``live`` (nb, L) is True, zeros elsewhere."""
    o = np.zeros((padded, live.shape[1]) + tail, dtype)
    if tail == (2,) and dtype == np.int32:  # move (row, col) pairs as one 8-byte item
        o.view(np.int64)[:live.shape[0]][..., 0][live] = np.ascontiguousarray(
            values, np.int32).view(np.int64)[:, 0]
    else:
        o[:live.shape[0]][live] = values
    return o


def _ref_rows(ridx, padded, length, ref_cells, ref_len, ref_off):
    """Padded reference rows for the routes whose distinct references are ``ridx``:
    each distinct reference is padded once, then rows are copied."""
    u, inv = np.unique(ridx, return_inverse=True)
    ln = ref_len[u]
    src = np.repeat(ref_off[u] - np.cumsum(ln) + ln, ln) + np.arange(int(ln.sum()))
    table = _pad_rows(len(u), np.arange(length) < ln[:, None], ref_cells[src], (2,), np.int32)
    o = np.zeros((padded, length, 2), np.int32)
    o[:len(ridx)] = table[inv.reshape(-1)]
    return o


def _check_references(uref, utask, t_start, t_goal, t_hw, t_obst, grids, *, skip=None):
    """(first task index, problem) of the first illegal reference, or None.

    Every distinct reference is checked by vectorised NumPy over all of them
    at once (a fast filter over the whole batch, not a second rule: the rule
    is :func:`passage_jax.graph.route_problem`, which runs on every reference
    the filter flags and decides, and names the problem). References of tasks with an
    unknown cost model (``skip``) are not checked.
    """
    arrays, keep = [], np.ones(len(uref), bool)
    for k, (r, j, _) in enumerate(uref):
        if skip is not None and utask[j][0].objective not in MODEL_INDEX:
            arrays.append(np.zeros((0, 2), np.int64))
            keep[k] = False
            continue
        if _is_int32_route(r):
            arrays.append(r)
            continue
        try:
            a = np.asarray(r)
        except (ValueError, TypeError):
            a = None
        if a is None or a.ndim != 2 or a.shape[1] != 2 or a.dtype.kind not in "iu":
            a = np.zeros((0, 2), np.int64)  # fails below (too short); the message comes
        arrays.append(a)                    # from route_problem
    cells, lens, offsets = _concat(arrays, np.int64)
    tj = np.array([j for _, j, _ in uref], np.int64).reshape(-1)
    owner = _cell_owner(lens)
    hw = t_hw[tj][owner]
    inb = ((cells[:, 0] >= 0) & (cells[:, 0] < hw[:, 0])
           & (cells[:, 1] >= 0) & (cells[:, 1] < hw[:, 1]))
    flat = np.where(inb, cells[:, 0] * hw[:, 1] + cells[:, 1], 0)
    bad_cell = ~inb | grids.on_obstacle(flat, grids.obst_offset[t_obst[tj]][owner], inb)
    if len(cells) > 1:
        step = np.abs(np.diff(cells, axis=0)).max(axis=1)
        same_route = owner[1:] == owner[:-1]
        bad_cell[1:] |= same_route & (step != 1)
    bad = np.bincount(owner, weights=bad_cell, minlength=len(uref)) > 0
    bad |= lens < 2
    has = lens > 0
    first = cells[np.minimum(offsets[:-1], max(len(cells) - 1, 0))] if len(cells) else None
    last = cells[np.maximum(offsets[1:] - 1, 0)] if len(cells) else None
    if len(cells):
        bad |= has & np.any(first != t_start[tj], axis=1)
        bad |= has & np.any(last != t_goal[tj], axis=1)
    worst = None
    for k in np.flatnonzero(bad & keep):
        r, j, i = uref[k]
        if worst is not None and i >= worst[0]:
            continue
        t = utask[j][0]
        problem = route_problem(r, t.scene.start, t.scene.goal, t.obstacles)
        if problem is not None:
            worst = (i, problem)
    return worst
