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

**Layout.** :func:`score_routes` runs named steps over small frozen dataclasses:
:mod:`~passage_jax.metrics.host_inputs` (distinct tasks and grids as a
:class:`~passage_jax.metrics.host_inputs.TaskTable` of named columns, references checked,
candidates normalised), :mod:`~passage_jax.metrics.host_batch` (records into blocks of one
rung, grids read at the cells, padded kernel arguments), the kernel calls and the
collection into per-task columns here, and :mod:`~passage_jax.metrics.host_numpy` (the
geometry of long routes, the float64 recosting).
"""
from __future__ import annotations

import jax
import numpy as np

# ``X as X``: private names re-exported for bench/compile_counts.py and the tests
from passage_jax.metrics.host_batch import _CELL_BUDGET as _CELL_BUDGET
from passage_jax.metrics.host_batch import _MAX_BATCH as _MAX_BATCH
from passage_jax.metrics.host_batch import _PAIR_BUDGET as _PAIR_BUDGET
from passage_jax.metrics.host_batch import (
    LONG_ROUTE,
    MIN_BUCKET,
    Batch,
    CallInputs,
    _call_plan,
    kernel_args,
    plan_batch,
    read_grids,
)
from passage_jax.metrics.host_batch import _bucket as _bucket
from passage_jax.metrics.host_batch import _call_rows as _call_rows
from passage_jax.metrics.host_inputs import (
    Candidates,
    References,
    candidate_routes,
    normalise_candidate,
    reference_routes,
    task_table,
)
from passage_jax.metrics.host_numpy import RouteCostModels, host_cost_regret, route_geometry_host
from passage_jax.metrics.kernels import score_tasks_packed
from passage_jax.metrics.sharding import resolve_sharding
from passage_jax.metrics.types import METRIC_KEYS, PACKED_FLOAT_KEYS, PACKED_INT_KEYS
from passage_jax.precision import kernel_dtype, kernel_x64

__all__ = ["MIN_BUCKET", "LONG_ROUTE", "normalise_candidate", "route_geometry_host",
           "host_cost_regret", "score_routes"]

_DTYPES = {
    "connected_path": bool, "obstacle_traversals": np.int64, "obstacle_violation": bool,
    "valid_path": bool, "success": bool,
}


def score_routes(candidates, tasks, c_star, request_ok, references=None,
                 pixel_size_m: float = 30.0, sharding=None, *,
                 long_route: int = LONG_ROUTE) -> dict:
    """Score candidate routes against their tasks (contract §4).

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
    c_star, request_ok = _checked_inputs(candidates, tasks, c_star, request_ok, references)
    sharding = resolve_sharding(sharding)
    table = task_table(tasks)
    refs = reference_routes(tasks, references, table)
    cands = candidate_routes(candidates)
    inputs = CallInputs(table, refs, c_star, request_ok, cands.well_formed, kernel_dtype())
    batch = plan_batch(cands, refs, table, long_route)
    with kernel_x64():
        pending, z = _dispatch(batch, inputs, pixel_size_m, sharding)
        out = _collect(pending, len(tasks))
    if z is not None:  # float32 kernels: cost and regret recomputed on the host
        _recost_on_host(out, batch, inputs, z, pixel_size_m)
    _long_route_geometry(out, batch, cands, refs)
    out["success"] = out["valid_path"].copy()
    out["malformed"] = ~cands.well_formed
    out["problem"] = np.array(cands.problems, dtype=object)
    return out


def _checked_inputs(candidates, tasks, c_star, request_ok, references):
    """(c_star (N,) float64, request_ok (N,) bool), or ValueError naming what does not fit."""
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
    return c_star, request_ok


def _dispatch(batch: Batch, inputs: CallInputs, pixel_size_m, sharding):
    """Every kernel call of the batch, each dispatched before any is waited for (the host
    prepares the next block while the previous one computes): ([(records, result)],
    the elevation at every cell of ``batch.cells`` for host recosting, None with float64
    kernels). Each block runs in calls of :func:`_call_plan` rows (the last one padded)."""
    n_dev = sharding.num_devices if sharding is not None else 1
    z = None if inputs.dtype == np.float64 else np.zeros(len(batch.cells), np.float64)
    pending = []
    for block in batch.blocks:
        read = read_grids(block, inputs.table)
        if z is not None:
            z[block.cell_slice] = read.elevation
        size, calls = _call_plan(block.length, len(block.records), n_dev, block.pairwise)
        args = kernel_args(block, read, inputs, size * calls)
        for k in range(0, len(block.records), size):
            rows = slice(k, k + size)
            chunk = jax.tree_util.tree_map(lambda x, rows=rows: x[rows], args)
            if sharding is not None:
                chunk = jax.device_put(chunk, sharding)
            res = score_tasks_packed(*chunk, pixel_size_m=float(pixel_size_m),
                                     geometry=block.pairwise)
            pending.append((block.records[rows], res))
    return pending, z


def _collect(pending, n: int) -> dict:
    """The kernels' packed results scattered into (n,) per-task columns (``METRIC_KEYS``;
    ``success`` is set by the caller), padding rows dropped."""
    out = {k: np.empty(n, _DTYPES.get(k, np.float64)) for k in METRIC_KEYS}
    for part, res in pending:
        flags, values = jax.device_get(res)
        for c, k in enumerate(PACKED_INT_KEYS):
            out[k][part] = flags[:len(part), c]
        for c, k in enumerate(PACKED_FLOAT_KEYS):
            out[k][part] = values[:len(part), c]
    return out


def _recost_on_host(out: dict, batch: Batch, inputs: CallInputs, z, pixel_size_m) -> None:
    """``predicted_cost`` and ``regret`` of ``out`` recomputed in float64 on the host
    (:func:`host_cost_regret`) from the elevations ``z`` the kernels read."""
    t, order, tj = inputs.table, batch.order, batch.tasks
    models = RouteCostModels(t.model[tj], t.weight[tj], t.grids.stats[t.elevation_grid[tj]])
    pred, reg = host_cost_regret(batch.cells, batch.lens, z, out["valid_path"][order], models,
                                 inputs.c_star[order], pixel_size_m=pixel_size_m)
    out["predicted_cost"][order] = pred
    out["regret"][order] = reg


def _long_route_geometry(out: dict, batch: Batch, cands: Candidates, refs: References) -> None:
    """``assd``, ``h95`` and ``path_iou`` of long tasks with a valid route, by
    :func:`route_geometry_host` (the kernel ran without the pairwise geometry)."""
    for i in np.flatnonzero(batch.long & out["valid_path"]):
        out["assd"][i], out["h95"][i], out["path_iou"][i] = route_geometry_host(
            cands.routes[i], refs.route(refs.of_record[i]))
