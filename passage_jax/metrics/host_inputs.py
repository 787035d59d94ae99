"""The inputs of :func:`passage_jax.metrics.host.score_routes` as host arrays.

Three steps, each returning a small frozen dataclass of NumPy arrays with named fields:

* :func:`task_table` — the distinct tasks of a call (by identity) as a
  :class:`TaskTable`: cost-model id, weight, start, goal, grid size and the index of
  each task's obstacle and elevation grid in one :class:`Grids` (each distinct grid
  read once: obstacle grids without an obstacle never, elevation grids with their crop
  statistics);
* :func:`reference_routes` — the distinct references, each checked once (a vectorised
  filter over all of them, the rule :func:`passage_jax.graph.route_problem`) and
  concatenated, as :class:`ReferenceRoutes`; an illegal reference or an unknown cost model
  raises ValueError naming the task;
* :func:`candidate_routes` — every candidate normalised (:func:`normalise_candidate`:
  nothing rounded or clipped, a malformed route becomes an empty one with its problem)
  as :class:`Candidates`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from passage_jax.graph import MODEL_INDEX, route_problem
from passage_jax.graph.costs import crop_stats_from_bounds

__all__ = ["Grids", "TaskTable", "ReferenceRoutes", "Candidates", "normalise_candidate", "task_table",
           "reference_routes", "candidate_routes", "concat_routes", "cell_owner"]

_INT32 = np.iinfo(np.int32)
_I32 = np.dtype(np.int32)


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


def is_int32_route(a) -> bool:
    """``a`` is already an (L, 2) int32 NumPy array (used as it is)."""
    return type(a) is np.ndarray and a.dtype == np.int32 and a.ndim == 2 and a.shape[1] == 2


def concat_routes(arrays, dtype):
    """Concatenated (M, 2) cells, (K,) lengths and (K + 1,) offsets of a list of (L, 2) arrays."""
    lens = np.fromiter((len(a) for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    cells = (np.concatenate(arrays).astype(dtype, copy=False) if arrays
             else np.zeros((0, 2), dtype))
    return cells.reshape(-1, 2), lens, offsets


def cell_owner(lens):
    """(M,) index of the route each concatenated cell belongs to."""
    return np.repeat(np.arange(len(lens)), lens)


# ----------------------------------------------------------------------------- grids and tasks

@dataclass(frozen=True, eq=False)
class Grids:
    """The distinct grids of a call's tasks (by identity, within one call)."""

    #: (G,) int64: each obstacle grid's flat offset in ``obstacle_flat``; -1 for a grid
    #: without any obstacle (never read).
    obstacle_offset: np.ndarray
    #: the obstacle grids that have an obstacle, raveled (bool) and concatenated, so the
    #: obstacle flags at any set of cells are one gather.
    obstacle_flat: np.ndarray
    #: each elevation grid raveled, float64 (read run by run, cells sorted by grid).
    elevation: tuple
    #: (E, 3) float64 crop statistics of each elevation grid: min, range, max |z|.
    stats: np.ndarray

    def on_obstacle(self, flat, grid_offset, inb):
        """Obstacle flag at cells with in-grid flat index ``flat`` (valid where
        ``inb``) of grids with flat offset ``grid_offset`` (-1: no obstacle)."""
        use = inb & (grid_offset >= 0)
        out = np.zeros(len(flat), bool)
        out[use] = self.obstacle_flat[grid_offset[use] + flat[use]]
        return out


class _GridIndex:
    """Builds :class:`Grids`: each grid object seen gets an index, once."""

    def __init__(self):
        self.obst_index, self.obst_offset, self.obst_parts, self.obst_size = {}, [], [], 0
        self.elev_index, self.elev, self.stats = {}, [], []

    def obstacle_id(self, obstacles) -> int:
        k = self.obst_index.get(id(obstacles))
        if k is None:
            k = self.obst_index[id(obstacles)] = len(self.obst_offset)
            a = np.asarray(obstacles, bool)
            if a.any():
                self.obst_offset.append(self.obst_size)
                self.obst_parts.append(a.ravel())
                self.obst_size += a.size
            else:
                self.obst_offset.append(-1)
        return k

    def elevation_id(self, z, bounds=None) -> int:
        """The index of elevation grid ``z``; ``bounds``: its (min, max) when the reader
        took them (:meth:`passage_jax.data.Scene.kept_elevation_bounds`), else computed."""
        k = self.elev_index.get(id(z))
        if k is None:
            k = self.elev_index[id(z)] = len(self.elev)
            z64 = np.asarray(z, np.float64)
            self.elev.append((z, z64.ravel()))  # the grid kept alive: its id stays its own
            # crop_stats' max |z| is max(|min z|, |max z|): two passes instead of three
            lo, hi = bounds if bounds is not None else (z64.min(), z64.max())
            self.stats.append(tuple(crop_stats_from_bounds(lo, hi)))
        return k

    def finish(self) -> Grids:
        return Grids(
            obstacle_offset=np.asarray(self.obst_offset, np.int64),
            obstacle_flat=(np.concatenate(self.obst_parts) if self.obst_parts else np.zeros(0, bool)),
            elevation=tuple(flat for _, flat in self.elev),
            stats=np.asarray(self.stats, np.float64).reshape(-1, 3))


@dataclass(frozen=True, eq=False)
class TaskTable:
    """The distinct tasks of a call (by identity), one row each (K rows), for N records."""

    tasks: tuple               #: K (task, index of its first record)
    of_record: np.ndarray      #: (N,) int64: the row of each record's task
    model: np.ndarray          #: (K,) int32 ``MODEL_INDEX`` id (0 for an unknown cost model)
    weight: np.ndarray         #: (K,) float64 cost-model weight
    start: np.ndarray          #: (K, 2) int64 start cell
    goal: np.ndarray           #: (K, 2) int64 goal cell
    hw: np.ndarray             #: (K, 2) int64 grid height and width
    obstacle_grid: np.ndarray  #: (K,) int64 index of the obstacle grid in ``grids``
    elevation_grid: np.ndarray  #: (K,) int64 index of the elevation grid in ``grids``
    grids: Grids
    bad_objective: int | None  #: first record whose task has an unknown cost model


class _TaskRow(NamedTuple):
    model: int
    weight: float
    start: tuple
    goal: tuple
    hw: tuple
    obstacle_grid: int
    elevation_grid: int


_UNKNOWN_MODEL = _TaskRow(0, 0.0, (0, 0), (0, 0), (0, 0), 0, 0)  # its grids are never read


def _distinct_tasks(tasks):
    """((N,) row of each record's task, [(task, first record)] per distinct task)."""
    # identities are stable for this call: ``tasks`` holds every object looked up
    row_of, distinct = {}, []
    of_record = np.empty(len(tasks), np.int64)
    for i, t in enumerate(tasks):
        j = row_of.get(id(t))
        if j is None:
            j = row_of[id(t)] = len(distinct)
            distinct.append((t, i))
        of_record[i] = j
    return of_record, distinct


def _bounds(task, z):
    """The (min, max) the reader took of the elevation grid ``z`` of ``task``'s scene
    (:meth:`passage_jax.data.Scene.kept_elevation_bounds`), or None (not kept, or a
    task-like object whose scene keeps none)."""
    kept = getattr(getattr(task, "scene", None), "kept_elevation_bounds", None)
    return None if kept is None else kept(z)


def task_table(tasks) -> TaskTable:
    """The :class:`TaskTable` of a sequence of N tasks (a batch usually scores many
    candidates per task: each distinct task and grid is read once)."""
    of_record, distinct = _distinct_tasks(tasks)
    index = _GridIndex()
    rows, bad = [], None
    for t, i in distinct:
        if t.objective not in MODEL_INDEX:
            bad = i if bad is None else min(bad, i)
            rows.append(_UNKNOWN_MODEL)
            continue
        h, w = np.shape(t.obstacles)
        (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
        z = t.elevation_m
        rows.append(_TaskRow(MODEL_INDEX[t.objective], t.weight, (r0, c0), (r1, c1), (h, w),
                             index.obstacle_id(t.obstacles), index.elevation_id(z, _bounds(t, z))))

    def column(name, dtype):
        return np.array([getattr(r, name) for r in rows], dtype)

    def pairs(name):
        return column(name, np.int64).reshape(-1, 2)

    return TaskTable(tasks=tuple(distinct), of_record=of_record, model=column("model", np.int32),
                     weight=column("weight", np.float64),  # exact, whatever its type
                     start=pairs("start"), goal=pairs("goal"), hw=pairs("hw"),
                     obstacle_grid=column("obstacle_grid", np.int64),
                     elevation_grid=column("elevation_grid", np.int64),
                     grids=index.finish(), bad_objective=bad)


# ----------------------------------------------------------------------------- references

@dataclass(frozen=True, eq=False)
class ReferenceRoutes:
    """The distinct (reference, task) pairs of a call (R of them), checked, concatenated."""

    of_record: np.ndarray  #: (N,) int64: the distinct reference of each record
    cells: np.ndarray      #: (M, 2) int32, the references concatenated
    lens: np.ndarray       #: (R,) int64 cells of each
    offsets: np.ndarray    #: (R + 1,) int64 where each starts in ``cells``

    def route(self, r) -> np.ndarray:
        """(L, 2) int32 cells of the distinct reference ``r``."""
        return self.cells[self.offsets[r]:self.offsets[r + 1]]


def reference_routes(tasks, references, table: TaskTable) -> ReferenceRoutes:
    """The :class:`ReferenceRoutes` of N records (``references`` None: each task's released
    route). Raises ValueError for the first record (in record order) whose task has an
    unknown cost model or whose reference is not a legal route."""
    of_record, uref = _distinct_references(references, table)
    bad_ref = _check_references(uref, table)
    bad_objective = table.bad_objective
    if bad_objective is not None and (bad_ref is None or bad_objective <= bad_ref[0]):
        t = tasks[bad_objective]
        raise ValueError(f"task {bad_objective} (scene {t.id}): unknown cost model "
                         f"{t.objective!r}")
    if bad_ref is not None:
        i, problem = bad_ref
        task = tasks[i]
        raise ValueError(f"task {i} (scene {task.id}, {task.objective}/{task.variant}): "
                         f"reference route is not a legal route: {problem}")
    cells, lens, offsets = concat_routes(
        [r if is_int32_route(r) else np.asarray(r, np.int32) for r, _, _ in uref], np.int32)
    return ReferenceRoutes(of_record, cells, lens, offsets)


def _distinct_references(references, table: TaskTable):
    """((N,) distinct reference of each record, [(route, task row, first record)]): each
    distinct (route, task) pair once."""
    if references is None:
        return table.of_record, [(t.route, j, i) for j, (t, i) in enumerate(table.tasks)]
    ref_of, uref = {}, []
    of_record = np.empty(len(references), np.int64)
    for i, r in enumerate(references):
        key = (id(r), table.of_record[i])
        k = ref_of.get(key)
        if k is None:
            k = ref_of[key] = len(uref)
            uref.append((r, table.of_record[i], i))
        of_record[i] = k
    return of_record, uref


def _reference_arrays(uref, table: TaskTable):
    """(arrays, keep): each distinct reference as an integer (L, 2) array for the filter
    (an empty one where it is no such array: it fails the filter and
    :func:`~passage_jax.graph.route_problem` names its problem), and whether it is
    checked at all (not for a task with an unknown cost model)."""
    skip = table.bad_objective is not None
    arrays, keep = [], np.ones(len(uref), bool)
    for k, (r, j, _) in enumerate(uref):
        if skip and table.tasks[j][0].objective not in MODEL_INDEX:
            arrays.append(np.zeros((0, 2), np.int64))
            keep[k] = False
            continue
        if is_int32_route(r):
            arrays.append(r)
            continue
        try:
            a = np.asarray(r)
        except (ValueError, TypeError):
            a = None
        if a is None or a.ndim != 2 or a.shape[1] != 2 or a.dtype.kind not in "iu":
            a = np.zeros((0, 2), np.int64)  # fails below (too short); the message comes
        arrays.append(a)                    # from route_problem
    return arrays, keep


def _check_references(uref, table: TaskTable):
    """(first record index, problem) of the first illegal reference, or None.

    Every distinct reference is checked by vectorised NumPy over all of them
    at once (a fast filter over the whole batch, not a second rule: the rule
    is :func:`passage_jax.graph.route_problem`, which runs on every reference
    the filter flags and decides, and names the problem). ReferenceRoutes of tasks with an
    unknown cost model are not checked.
    """
    arrays, keep = _reference_arrays(uref, table)
    cells, lens, offsets = concat_routes(arrays, np.int64)
    tj = np.array([j for _, j, _ in uref], np.int64).reshape(-1)
    owner = cell_owner(lens)
    hw = table.hw[tj][owner]
    inb = ((cells[:, 0] >= 0) & (cells[:, 0] < hw[:, 0])
           & (cells[:, 1] >= 0) & (cells[:, 1] < hw[:, 1]))
    flat = np.where(inb, cells[:, 0] * hw[:, 1] + cells[:, 1], 0)
    grid_offset = table.grids.obstacle_offset[table.obstacle_grid[tj]][owner]
    bad_cell = ~inb | table.grids.on_obstacle(flat, grid_offset, inb)
    if len(cells) > 1:
        step = np.abs(np.diff(cells, axis=0)).max(axis=1)
        same_route = owner[1:] == owner[:-1]
        bad_cell[1:] |= same_route & (step != 1)
    bad = np.bincount(owner, weights=bad_cell, minlength=len(uref)) > 0
    bad |= lens < 2
    if len(cells):
        has = lens > 0
        first = cells[np.minimum(offsets[:-1], max(len(cells) - 1, 0))]
        last = cells[np.maximum(offsets[1:] - 1, 0)]
        bad |= has & np.any(first != table.start[tj], axis=1)
        bad |= has & np.any(last != table.goal[tj], axis=1)
    worst = None
    for k in np.flatnonzero(bad & keep):
        r, j, i = uref[k]
        if worst is not None and i >= worst[0]:
            continue
        t = table.tasks[j][0]
        problem = route_problem(r, t.scene.start, t.scene.goal, t.obstacles)
        if problem is not None:
            worst = (i, problem)
    return worst


# ----------------------------------------------------------------------------- candidates

@dataclass(frozen=True, eq=False)
class Candidates:
    """N candidate routes, normalised."""

    routes: tuple            #: N (L, 2) int32 arrays (empty for a malformed candidate)
    problems: tuple          #: N str | None: why a candidate is malformed
    well_formed: np.ndarray  #: (N,) bool
    lens: np.ndarray         #: (N,) int64 cells of each route


def candidate_routes(candidates) -> Candidates:
    """The :class:`Candidates` of a sequence of N routes (anything: see
    :func:`normalise_candidate`; an (L, 2) int32 array is used as it is)."""
    n = len(candidates)
    routes, problems = [None] * n, [None] * n
    nd, i32 = np.ndarray, _I32
    for i, c in enumerate(candidates):
        if type(c) is nd and c.dtype is i32 and c.ndim == 2 and c.shape[1] == 2:
            routes[i] = c
        else:
            routes[i], problems[i] = normalise_candidate(c)
    well_formed = np.fromiter((p is None for p in problems), bool, n)
    return Candidates(tuple(routes), tuple(problems), well_formed,
                      np.fromiter(map(len, routes), np.int64, n))
