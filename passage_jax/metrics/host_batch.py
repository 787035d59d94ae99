"""Batching for :func:`passage_jax.metrics.host.score_routes`: records into length rungs,
grids read at the cells, padded kernel arguments.

* :func:`plan_batch` — each record's padded length, the rung of the longer of its two
  routes on the ladder of :mod:`passage_jax.shapes` from ``MIN_BUCKET`` (a long task:
  its candidate's own length), and the records ordered long tasks first, then by rung
  (longest first: the costliest calls are dispatched first and the host prepares the
  rest meanwhile), then by elevation grid, and cut into :class:`Block` s of one rung
  (a :class:`Batch`);
* :func:`read_grids` — a block's obstacle flags and elevations at its candidates'
  in-bounds cells (vectorised NumPy, each grid of the block read in one gather) as
  :class:`GridCells`;
* :func:`kernel_args` — a block as the kernel-boundary pytrees
  (:class:`~passage_jax.metrics.types.Route`,
  :class:`~passage_jax.metrics.types.TaskAtCandidate`), one row per record, and
  :func:`pad_args` — such rows padded to a call's number of rows (a multiple of
  :func:`_call_rows`) with empty, masked rows.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import numpy as np

from passage_jax.graph import CropStats
from passage_jax.metrics.host_inputs import Candidates, ReferenceRoutes, TaskTable, concat_routes
from passage_jax.metrics.types import Route, TaskAtCandidate
from passage_jax.shapes import rung, rungs_of

__all__ = ["MIN_BUCKET", "LONG_ROUTE", "Block", "Batch", "GridCells", "CallInputs", "plan_batch",
           "read_grids", "kernel_args", "pad_args", "empty_args", "kernel_keys"]

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


# ----------------------------------------------------------------------------- the plan

@dataclass(frozen=True, eq=False)
class Block:
    """Consecutive records of a :class:`Batch` of one length rung, all long or none."""

    length: int           #: the rung: padded length of both routes (a long task: the candidate)
    pairwise: bool        #: with the pairwise geometry (False for long tasks)
    records: np.ndarray   #: (b,) index of each row's record
    tasks: np.ndarray     #: (b,) each row's task in the :class:`TaskTable`
    lens: np.ndarray      #: (b,) int64 cells of each row's candidate
    cells: np.ndarray     #: (sum lens, 2) int32 the rows' candidates concatenated
    offsets: np.ndarray   #: (b + 1,) where each row starts in ``cells``
    cell_slice: slice     #: where ``cells`` lies in the batch's cells


@dataclass(frozen=True, eq=False)
class Batch:
    """N records ordered into blocks of one rung each (see the module notes)."""

    order: np.ndarray     #: (N,) record of each position
    cells: np.ndarray     #: (M, 2) int32 the candidates concatenated in ``order``
    lens: np.ndarray      #: (N,) int64 cells of each, in ``order``
    tasks: np.ndarray     #: (N,) each position's task in the :class:`TaskTable`
    long: np.ndarray      #: (N,) bool per record (record order): scored by the long-route path
    blocks: tuple         #: :class:`Block` s, covering ``order`` in turn


def kernel_keys(cand_lens, ref_lens, long_route: int = LONG_ROUTE) -> set:
    """The (rung, pairwise) kernels that records whose candidates and references have
    ``cand_lens`` and ``ref_lens`` cells call (the rule of :func:`plan_batch`)."""
    cl, rl = np.asarray(cand_lens, np.int64), np.asarray(ref_lens, np.int64)
    long = (cl > long_route) | (rl > long_route)
    pairwise = rungs_of(np.maximum(cl, rl)[~long], MIN_BUCKET)
    return ({(int(r), True) for r in np.unique(pairwise)}
            | {(int(r), False) for r in np.unique(rungs_of(cl[long], MIN_BUCKET))})


def plan_batch(cands: Candidates, refs: ReferenceRoutes, table: TaskTable, long_route: int) -> Batch:
    """The :class:`Batch` of N records: one padded length for both routes of a task
    (a task whose candidate or reference has more than ``long_route`` cells: the
    candidate's own length, its geometry is not padded at all)."""
    ref_len = refs.lens[refs.of_record]
    long = (cands.lens > long_route) | (ref_len > long_route)
    bucket = rungs_of(np.where(long, cands.lens, np.maximum(cands.lens, ref_len)), MIN_BUCKET)
    # long first, then longest rung first, then by elevation grid, so each rung's cells
    # are one block and each grid in it is read in one gather
    order = np.lexsort((table.elevation_grid[table.of_record], -bucket, ~long))
    cells, lens, offsets = concat_routes([cands.routes[i] for i in order], np.int32)
    tasks = table.of_record[order]
    n = len(order)
    bucket_o, long_o = bucket[order], long[order]
    edges = (np.flatnonzero(np.r_[True, (bucket_o[1:] != bucket_o[:-1])
                                  | (long_o[1:] != long_o[:-1])]) if n else [])
    blocks = []
    for s, e in zip(edges, np.r_[edges[1:], n].astype(np.int64)):
        cs, ce = offsets[s], offsets[e]
        blocks.append(Block(length=int(bucket_o[s]), pairwise=not long_o[s], records=order[s:e],
                            tasks=tasks[s:e], lens=lens[s:e], cells=cells[cs:ce],
                            offsets=offsets[s:e + 1] - cs, cell_slice=slice(cs, ce)))
    return Batch(order, cells, lens, tasks, long, tuple(blocks))


# ----------------------------------------------------------------------------- grids at cells

@dataclass(frozen=True, eq=False)
class GridCells:
    """The grids read at a block's candidate cells (0 / False out of bounds)."""

    on_obstacle: np.ndarray  #: (M_b,) bool
    elevation: np.ndarray    #: (M_b,) float64


def _cells_in_grid(cells, h, w):
    """(in bounds, flat index r * w + c; 0 where out of bounds) of int32
    ``cells`` (M, 2) on grids of per-cell height ``h`` and width ``w``."""
    u = cells.view(np.uint32)  # negative coordinates become huge: one compare each
    inb = (u[:, 0] < h) & (u[:, 1] < w)
    flat = cells[:, 0].astype(np.int64) * w + cells[:, 1]
    flat[~inb] = 0
    return inb, flat


def read_grids(block: Block, table: TaskTable) -> GridCells:
    """The grids of each row's task at the row's candidate's in-bounds cells only
    (the rows of one elevation grid are consecutive: one gather per grid)."""
    grids, tj, ln = table.grids, block.tasks, block.lens
    hwu = table.hw[tj].astype(np.uint32)
    inb, flat = _cells_in_grid(block.cells, np.repeat(hwu[:, 0], ln), np.repeat(hwu[:, 1], ln))
    on = grids.on_obstacle(flat, np.repeat(grids.obstacle_offset[table.obstacle_grid[tj]], ln), inb)
    z = np.zeros(len(block.cells), np.float64)
    ev = table.elevation_grid[tj]
    runs = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
    for a, b in zip(runs, np.r_[runs[1:], len(tj)]):
        ra, rb = block.offsets[a], block.offsets[b]
        z[ra:rb] = grids.elevation[ev[a]][flat[ra:rb]]
    z[~inb] = 0.0
    return GridCells(on, z)


# ----------------------------------------------------------------------------- kernel arguments

@dataclass(frozen=True, eq=False)
class CallInputs:
    """What every kernel call of one ``score_routes`` call reads besides its block."""

    table: TaskTable
    refs: ReferenceRoutes
    c_star: np.ndarray       #: (N,) float64
    request_ok: np.ndarray   #: (N,) bool
    well_formed: np.ndarray  #: (N,) bool
    dtype: np.dtype          #: the kernels' float dtype (:func:`passage_jax.precision.kernel_dtype`)


def kernel_args(block: Block, read: GridCells, inputs: CallInputs, rows: int | None = None) -> tuple:
    """(candidate :class:`Route`, reference :class:`Route` or None without the pairwise
    geometry, :class:`TaskAtCandidate`, request_ok, well_formed) of a block, every leaf
    padded to ``rows`` rows (None: the block's own; :func:`pad_args`)."""
    t, tj, idx, fdt = inputs.table, block.tasks, block.records, inputs.dtype
    b = len(idx)
    live = np.arange(block.length) < block.lens[:, None]
    st = t.grids.stats[t.elevation_grid[tj]]
    candidate = Route(_pad_rows(b, live, block.cells, (2,), np.int32), block.lens.astype(np.int32))
    reference = None
    if block.pairwise:
        ridx = inputs.refs.of_record[idx]
        reference = Route(_ref_rows(ridx, b, block.length, inputs.refs),
                          inputs.refs.lens[ridx].astype(np.int32))
    task = TaskAtCandidate(
        grid_shape_hw=t.hw[tj].astype(np.int32),
        obstacle_cells=_pad_rows(b, live, read.on_obstacle, (), bool),
        elevation_cells=_pad_rows(b, live, read.elevation, (), fdt),
        crop=CropStats(*(st[:, j].astype(fdt) for j in range(3))),
        start=t.start[tj].astype(np.int32), goal=t.goal[tj].astype(np.int32),
        cost_model=t.model[tj].copy(), weight=t.weight[tj].astype(fdt),
        c_star=inputs.c_star[idx].astype(fdt))
    args = (candidate, reference, task, inputs.request_ok[idx], inputs.well_formed[idx])
    return args if rows is None else pad_args(args, rows)


def empty_args(length: int, pairwise: bool, dtype) -> tuple:
    """:func:`kernel_args` of a block of no records of the rung ``length`` (the same leaves,
    shapes and dtypes, zero rows): :func:`pad_args` of it is a call of padding only, which
    compiles the rung's kernel before any record needs it."""
    def route():
        return Route(np.zeros((0, length, 2), np.int32), np.zeros(0, np.int32))

    def col(dt, *tail):
        return np.zeros((0, *tail), dt)

    task = TaskAtCandidate(
        grid_shape_hw=col(np.int32, 2), obstacle_cells=col(bool, length),
        elevation_cells=col(dtype, length), crop=CropStats(col(dtype), col(dtype), col(dtype)),
        start=col(np.int32, 2), goal=col(np.int32, 2), cost_model=col(np.int32),
        weight=col(dtype), c_star=col(dtype))
    return route(), route() if pairwise else None, task, col(bool), col(bool)


def pad_args(args: tuple, rows: int) -> tuple:
    """:func:`kernel_args` extended to ``rows`` rows: padding rows are empty routes (zero
    cells, masked by the kernels) with c* 1 and every other field 0."""
    candidate, reference, task, ok, wf = args
    pad = functools.partial(_pad_tail, rows=rows)
    zeros = functools.partial(jax.tree_util.tree_map, pad)
    task = dataclasses.replace(zeros(dataclasses.replace(task, c_star=None)),
                               c_star=pad(task.c_star, 1.0))
    return zeros(candidate), None if reference is None else zeros(reference), task, pad(ok), pad(wf)


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


def _ref_rows(ridx, padded, length, refs: ReferenceRoutes):
    """Padded reference rows for the routes whose distinct references are ``ridx``:
    each distinct reference is padded once, then rows are copied."""
    u, inv = np.unique(ridx, return_inverse=True)
    ln = refs.lens[u]
    src = np.repeat(refs.offsets[u] - np.cumsum(ln) + ln, ln) + np.arange(int(ln.sum()))
    table = _pad_rows(len(u), np.arange(length) < ln[:, None], refs.cells[src], (2,), np.int32)
    o = np.zeros((padded, length, 2), np.int32)
    o[:len(ridx)] = table[inv.reshape(-1)]
    return o
