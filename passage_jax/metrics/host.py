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
rung, grids read at the cells, kernel arguments and their padding), the kernel calls and
the collection into per-task columns in :mod:`~passage_jax.metrics.host_stream`
(:class:`RouteStream`: one call of ``score_routes`` is one batch of a stream, which
:mod:`passage_jax.evaluate.score` feeds chunk after chunk so that the rows of every chunk
share full kernel calls), and :mod:`~passage_jax.metrics.host_numpy` (the geometry of long
routes, the float64 recosting).
"""
from __future__ import annotations

# ``X as X``: private names re-exported for bench/compile_counts.py and the tests
from passage_jax.metrics.host_batch import _CELL_BUDGET as _CELL_BUDGET
from passage_jax.metrics.host_batch import _MAX_BATCH as _MAX_BATCH
from passage_jax.metrics.host_batch import _PAIR_BUDGET as _PAIR_BUDGET
from passage_jax.metrics.host_batch import LONG_ROUTE
from passage_jax.metrics.host_batch import _bucket as _bucket
from passage_jax.metrics.host_batch import _call_plan as _call_plan
from passage_jax.metrics.host_batch import _call_rows as _call_rows
from passage_jax.metrics.host_stream import RouteStream

__all__ = ["score_routes"]


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
    stream = RouteStream(pixel_size_m, sharding, long_route=long_route)
    stream.add(candidates, tasks, c_star, request_ok, references)
    return stream.results()[0]
