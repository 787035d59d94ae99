"""Scoring many batches of routes with the kernel rows of every batch pooled per rung.

:class:`RouteStream` takes batches of records one at a time (:meth:`RouteStream.add`:
the host steps of :func:`passage_jax.metrics.host.score_routes` — tasks, references,
candidates, the grids read at the candidates' cells, the kernel arguments, one row per
record), and keeps each length rung's rows in a pool. A kernel call is dispatched as soon
as a pool holds one call's rows (:func:`~passage_jax.metrics.host_batch._call_rows`, the
rung's fixed call size), so the calls are full whatever the size of a batch; what is
left is padded once, when the results are asked for (:meth:`RouteStream.results`).
A call's shape is the same as ``score_routes``' (one kernel per rung), and every row's
metrics are the kernel's on that row alone: the results equal ``score_routes`` of each
batch, bit for bit.

Why: a batch of a streamed score (one chunk of scenes, 128 records at 256²) spreads
over about seven rungs, and scored on its own each rung's last call is mostly padding —
at 256² about five times the pairwise work of the records themselves. Pooled, a
score pads at most one call per rung in all.

The pools hold the kernel arguments only (the routes and the grid values at their
cells, never the grids), at most one call's rows per rung; the dispatched calls'
results (a few numbers per row) wait on the device until :meth:`RouteStream.results`.
"""
from __future__ import annotations

import dataclasses
import threading

import jax
import numpy as np

from passage_jax.metrics.host_batch import (
    LONG_ROUTE,
    CallInputs,
    _call_rows,
    empty_args,
    kernel_args,
    pad_args,
    plan_batch,
    read_grids,
)
from passage_jax.metrics.host_inputs import (
    Candidates,
    ReferenceRoutes,
    candidate_routes,
    reference_routes,
    task_table,
)
from passage_jax.metrics.host_numpy import RouteCostModels, host_cost_regret, route_geometry_host
from passage_jax.metrics.kernels import score_tasks_packed_exported
from passage_jax.metrics.sharding import resolve_sharding
from passage_jax.metrics.types import METRIC_KEYS, PACKED_FLOAT_KEYS, PACKED_INT_KEYS
from passage_jax.precision import kernel_dtype, kernel_x64

__all__ = ["RouteStream"]

_DTYPES = {
    "connected_path": bool, "obstacle_traversals": np.int64, "obstacle_violation": bool,
    "valid_path": bool, "success": bool,
}


@dataclasses.dataclass(frozen=True, eq=False)
class _Added:
    """What an added batch still needs once its rows are scored: its size, which records
    are long (geometry on the host), the candidates and references (routes only), and
    for float32 kernels the float64 recosting's inputs."""

    n: int
    long: np.ndarray
    cands: Candidates
    refs: ReferenceRoutes
    recost: tuple | None  # (cells, lens, z, order, models, c_star in order)


def _concat(parts: list):
    """The kernel-argument pytrees of ``parts`` concatenated row-wise."""
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *parts)


def _rows(args, sl: slice):
    return jax.tree_util.tree_map(lambda x: x[sl], args)


class _Pool:
    """The rows of one (rung, geometry) waiting for a full call: their kernel arguments,
    and per row the batch (ticket) and record it belongs to."""

    def __init__(self, size: int):
        self.size = size
        self.parts: list = []
        self.tickets: list = []
        self.records: list = []
        self.n = 0

    def put(self, args, ticket: int, records: np.ndarray) -> None:
        self.parts.append(args)
        self.tickets.append(np.full(len(records), ticket, np.int64))
        self.records.append(np.asarray(records, np.int64))
        self.n += len(records)

    def take(self, final: bool):
        """[(args of one call, tickets, records)] of the full calls (``final``: the rest
        too, padded); the rows left stay."""
        n = self.n
        if n == 0 or (n < self.size and not final):
            return []
        args, tickets, records = (_concat(self.parts), np.concatenate(self.tickets),
                                  np.concatenate(self.records))
        full = n // self.size * self.size
        out = [(_rows(args, slice(k, k + self.size)), tickets[k:k + self.size],
                records[k:k + self.size]) for k in range(0, full, self.size)]
        rest = slice(full, n)
        self.parts, self.tickets, self.records, self.n = [], [], [], 0
        if full < n:
            if final:
                out.append((pad_args(_rows(args, rest), self.size), tickets[rest], records[rest]))
            else:
                self.parts, self.tickets, self.records = [_rows(args, rest)], [tickets[rest]], [records[rest]]
                self.n = n - full
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


class RouteStream:
    """:func:`~passage_jax.metrics.host.score_routes` over many batches, the kernel rows of
    all of them pooled per rung (see the module notes). ``add`` a batch (the arguments
    of ``score_routes``; it returns the batch's ticket), then :meth:`results` once: each
    batch's dict, as ``score_routes`` returns it, in ticket order. An input that
    ``score_routes`` refuses is refused by ``add``, naming the task."""

    def __init__(self, pixel_size_m: float = 30.0, sharding=None, *, long_route: int = LONG_ROUTE):
        self.pixel_size_m = float(pixel_size_m)
        self.sharding = resolve_sharding(sharding)
        self.long_route = int(long_route)
        self._n_dev = self.sharding.num_devices if self.sharding is not None else 1
        self._pools: dict = {}
        self._calls: list = []  # (tickets, records, packed result)
        self._added: list = []
        self._ready: dict = {}  # (rung, pairwise) -> Event set once prepare() compiled it
        self._results: list | None = None

    def prepare(self, keys) -> threading.Thread | None:
        """Compile the kernels of ``keys`` ((rung, pairwise) pairs: the rungs the batches to
        come will fill) on a background thread, longest rung first (they fill first), each
        by one call of padding rows whose result is dropped; a call of a key waits for its
        compilation rather than compiling it a second time. The compilation overlaps
        with what the caller does meanwhile (reading and decoding scenes); a key that
        fails here is compiled, and fails, at its first real call. Returns the thread
        (None when there is nothing to compile)."""
        todo = sorted({(int(r), bool(g)) for r, g in keys} - set(self._ready), reverse=True)
        if not todo:
            return None
        for k in todo:
            self._ready[k] = threading.Event()
        dtype = kernel_dtype()

        def work():
            for length, pairwise in todo:
                try:
                    size = _call_rows(length, self._n_dev, pairwise)
                    self._run(pad_args(empty_args(length, pairwise, dtype), size), pairwise)
                except Exception:  # noqa: S110 - the first real call of the key reports it
                    pass
                finally:
                    self._ready[(length, pairwise)].set()

        thread = threading.Thread(target=work, name="passage-compile", daemon=True)
        thread.start()
        return thread

    def _run(self, args, pairwise: bool):
        """One kernel call (placed on the stream's devices first). Host arrays go through
        the kernel's exported modules (:class:`~passage_jax.compilation.ExportedKernel`),
        arrays placed on devices through the jitted kernel."""
        with kernel_x64():  # the placement too: without it float64 leaves would become float32
            if self.sharding is not None:
                args = jax.device_put(args, self.sharding)
            return score_tasks_packed_exported(*args, pixel_size_m=self.pixel_size_m, geometry=pairwise)

    def add(self, candidates, tasks, c_star, request_ok, references=None) -> int:
        """Take one batch (the arguments of ``score_routes``); full calls are dispatched."""
        if self._results is not None:
            raise RuntimeError("RouteStream.add after results(): the stream is finished")
        c_star, request_ok = _checked_inputs(candidates, tasks, c_star, request_ok, references)
        table = task_table(tasks)
        refs = reference_routes(tasks, references, table)
        cands = candidate_routes(candidates)
        inputs = CallInputs(table, refs, c_star, request_ok, cands.well_formed, kernel_dtype())
        batch = plan_batch(cands, refs, table, self.long_route)
        ticket = len(self._added)
        z = None if inputs.dtype == np.float64 else np.zeros(len(batch.cells), np.float64)
        for block in batch.blocks:
            read = read_grids(block, table)
            if z is not None:
                z[block.cell_slice] = read.elevation
            key = (block.length, block.pairwise)
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _Pool(_call_rows(block.length, self._n_dev, block.pairwise))
            pool.put(kernel_args(block, read, inputs), ticket, block.records)
            self._dispatch(key, final=False)
        recost = None
        if z is not None:  # float32 kernels: cost and regret recomputed on the host
            tj = batch.tasks
            models = RouteCostModels(table.model[tj], table.weight[tj],
                                     table.grids.stats[table.elevation_grid[tj]])
            recost = (batch.cells, batch.lens, z, batch.order, models, c_star[batch.order])
        self._added.append(_Added(len(tasks), batch.long, cands, refs, recost))
        return ticket

    def _dispatch(self, key, final: bool) -> None:
        calls = self._pools[key].take(final)
        if calls and key in self._ready:
            self._ready[key].wait()  # being compiled by prepare()
        for args, tickets, records in calls:
            self._calls.append((tickets, records, self._run(args, key[1])))

    def results(self) -> list[dict]:
        """Every added batch's results (the dict of ``score_routes``), in ticket order; the
        rows left in the pools are scored first (one padded call per pool). The stream is
        then finished: a second call returns the same list."""
        if self._results is not None:
            return self._results
        for key in list(self._pools):
            self._dispatch(key, final=True)
        outs = [{k: np.empty(a.n, _DTYPES.get(k, np.float64)) for k in METRIC_KEYS} for a in self._added]
        with kernel_x64():
            for tickets, records, res in self._calls:
                flags, values = jax.device_get(res)
                n = len(records)
                for t in np.unique(tickets):
                    mine = np.flatnonzero(tickets == t)
                    part, out = records[mine], outs[t]
                    for c, k in enumerate(PACKED_INT_KEYS):
                        out[k][part] = flags[:n][mine, c]
                    for c, k in enumerate(PACKED_FLOAT_KEYS):
                        out[k][part] = values[:n][mine, c]
        self._calls, self._pools = [], {}
        self._results = [self._finish(out, a) for out, a in zip(outs, self._added)]
        self._added = []
        return self._results

    def _finish(self, out: dict, a: _Added) -> dict:
        if a.recost is not None:
            cells, lens, z, order, models, c_star = a.recost
            pred, reg = host_cost_regret(cells, lens, z, out["valid_path"][order], models, c_star,
                                         pixel_size_m=self.pixel_size_m)
            out["predicted_cost"][order] = pred
            out["regret"][order] = reg
        for i in np.flatnonzero(a.long & out["valid_path"]):
            out["assd"][i], out["h95"][i], out["path_iou"][i] = route_geometry_host(
                a.cands.routes[i], a.refs.route(a.refs.of_record[i]))
        out["success"] = out["valid_path"].copy()
        out["malformed"] = ~a.cands.well_formed
        out["problem"] = np.array(a.cands.problems, dtype=object)
        return out
