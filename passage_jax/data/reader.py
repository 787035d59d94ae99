"""The row reader for the PASSAGE v1.0 shard layout (contract §1).

Shards in sorted file-name order (:mod:`passage_jax.data.layout`), rows in file order, a
cap of ``n_samples`` takes that deterministic prefix. Parquet record batches are read
lazily (only the required columns); each row is decoded and validated on a small thread
pool, at most ``prefetch`` rows ahead of the consumer, and scenes come out in file
order. Memory therefore stays bounded by the window and one batch, whatever the split
size. :class:`~passage_jax.data.read_ahead.ReadAhead` runs such a reader one item (a
chunk of tasks, in :mod:`passage_jax.data.stream`) ahead of its consumer on a daemon
thread; :func:`scan_split` reads every row of a split and collects, rather than raises,
each failing row's first error (the audit's scan).
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from passage_jax.checks import is_int, is_number
from passage_jax.data.layout import (
    SHIPPED,
    _check_n_samples,
    _check_resolution,
    _split,
    _why,
    dataset_root,
    path_problem,
    present_splits,
    resolution_folder,
    shard_files,
    shipped_cohort_root,
    split_folder,
)
from passage_jax.data.read_ahead import ReadAhead, close_read_aheads
from passage_jax.data.scene import ROUTE_COLUMNS, Scene, Task
from passage_jax.data.validate import (
    REQUIRED_COLUMNS,
    SCENE_COLUMNS,
    DataError,
    RowRef,
    convention_problem,
    declares_markers,
    duplicate_id_problem,
    marker_convention,
    validate_row,
)
from passage_jax.graph import OBJECTIVES, VARIANTS

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    "DEFAULT_N_SAMPLES", "DECODE_WORKERS", "decode_workers", "READ_BATCH_ROWS", "SHIPPED", "RawRow",
    "RowReport", "dataset_root",
    "resolution_folder", "split_folder", "present_splits", "shard_files", "shipped_cohort_root",
    "iter_raw_rows", "id_places", "map_rows", "iter_scenes", "scenes_at", "iter_scene_batches", "load_scenes",
    "load_tasks", "check_weight", "scene_summary", "scan_split", "path_problem", "READ_ERRORS",
    "ReadAhead", "close_read_aheads",
]

DEFAULT_N_SAMPLES = 1024
#: The released route columns' names.
ROUTE_COLUMN_NAMES = frozenset(ROUTE_COLUMNS.values())
#: Rows per pyarrow record batch read from a shard.
READ_BATCH_ROWS = 16
#: What reading or converting a shard's Arrow data can raise on a damaged or foreign
#: file (a string column holding invalid UTF-8 raises UnicodeDecodeError on conversion).
READ_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, NotImplementedError,
                OverflowError, MemoryError)


@dataclasses.dataclass
class RawRow:
    """One undecoded shard row with its location; ``problem`` says why a column of it
    could not even be converted from Arrow (the row then fails, naming it)."""

    file: str
    row: int
    values: dict
    problem: str | None = None

    @property
    def ref(self) -> RowRef:
        return RowRef(self.file, self.row, self.values.get("id"))


# --------------------------------------------------------------------------- #
# raw rows
# --------------------------------------------------------------------------- #

def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except READ_ERRORS as e:
        raise DataError(f"{path}: not a readable Parquet file: {_why(e)}") from None


def _column_values(array) -> list:
    """An Arrow column as Python values; an element that does not convert is None."""
    try:
        return array.to_pylist()
    except READ_ERRORS:
        out = []
        for i in range(len(array)):
            try:
                out.append(array[i].as_py())
            except READ_ERRORS:
                out.append(None)
        return out


def _route_cells(column) -> list | None:
    """A route column of a record batch as one ``(L, 2)`` integer array per row, taken
    from Arrow's buffers without a Python value per coordinate; None (the column then goes
    through Python values and the full checks of
    :func:`~passage_jax.data.validate.route_array`) unless it is a list of lists of
    integers with no null anywhere and every cell of two coordinates."""
    t = column.type
    if not (pa.types.is_list(t) and pa.types.is_list(t.value_type)
            and pa.types.is_integer(t.value_type.value_type)):
        return None
    if column.null_count:
        return None
    cells = column.flatten()  # the rows' cells, the batch's slice respected
    if cells.null_count:
        return None
    coords = cells.flatten()
    if coords.null_count or len(coords) != 2 * len(cells):
        return None
    per_cell = pc.list_value_length(cells).to_numpy(zero_copy_only=False)
    if len(per_cell) and (per_cell.min() != 2 or per_cell.max() != 2):
        return None
    flat = coords.to_numpy(zero_copy_only=False).reshape(-1, 2)
    per_row = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    return np.split(flat, np.cumsum(per_row)[:-1]) if len(per_row) else []


def _batch_rows(batch, path, first: int) -> list[RawRow]:
    """The rows of one record batch; a row with a column that does not convert from
    Arrow carries the ``problem`` instead of failing the whole batch. A released route
    column comes as integer arrays (:func:`_route_cells`) where its Arrow type allows."""
    try:
        columns = {}
        for name in batch.schema.names:
            column = batch.column(name)
            routes = _route_cells(column) if name in ROUTE_COLUMN_NAMES else None
            columns[name] = column.to_pylist() if routes is None else routes
        return [RawRow(str(path), first + i, {k: v[i] for k, v in columns.items()})
                for i in range(batch.num_rows)]
    except READ_ERRORS:
        pass
    rows = []
    for i in range(batch.num_rows):
        values, problem = {}, None
        for name in batch.schema.names:
            try:
                values[name] = batch.column(name)[i].as_py()
            except READ_ERRORS as e:
                values[name] = None
                problem = problem or f"column {name} cannot be read: {type(e).__name__}: {_why(e)}"
        rows.append(RawRow(str(path), first + i, values, problem))
    return rows


def _shard_rows(pf: pq.ParquetFile, path, columns=REQUIRED_COLUMNS) -> Iterator[RawRow]:
    """The ``columns`` of an open shard, row by row in file order."""
    row = 0
    for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=list(columns)):
        for raw in _batch_rows(batch, path, row):
            yield raw
            row += 1


def _columns(pf: pq.ParquetFile, released_routes: bool) -> tuple:
    """The columns to read from a shard: all required ones, or without the released
    routes when they are not wanted and every row declares its marker convention (the
    routes are the only other source of it; such a shard is read in full)."""
    if released_routes:
        return REQUIRED_COLUMNS
    try:
        texts = _column_values(pf.read(columns=["metadata"]).column("metadata"))
    except READ_ERRORS:
        return REQUIRED_COLUMNS  # the full read reports what is wrong
    return SCENE_COLUMNS if all(declares_markers(t) for t in texts) else REQUIRED_COLUMNS


def iter_raw_rows(root, resolution: int, split: str, n_samples=None, *,
                  released_routes: bool = True, on_shard=None) -> Iterator[RawRow]:
    """Undecoded rows (required columns only) in file order, capped at ``n_samples``;
    ``released_routes=False``: without the route columns where :func:`_columns` allows.
    ``on_shard(path)`` is called before a shard is opened (what it raises ends the read
    there: e.g. a check of the shard's bytes against a recorded hash)."""
    n_samples = _check_n_samples(n_samples)
    files = shard_files(root, resolution, split)
    if n_samples == 0:
        return
    count = 0
    for path in files:
        if on_shard is not None:
            on_shard(path)
        pf = _open(path)
        names = pf.schema_arrow.names
        missing = [c for c in REQUIRED_COLUMNS if c not in names]
        if missing:
            raise DataError(f"{path}: every row: missing required column(s) {missing} "
                            f"(columns: {names})")
        row = 0  # the row being read
        try:
            for raw in _shard_rows(pf, path, _columns(pf, released_routes)):
                yield raw
                row = raw.row + 1
                count += 1
                if n_samples is not None and count >= n_samples:
                    return
        except READ_ERRORS as e:
            raise DataError(f"{path} row {row}: cannot read the shard: {_why(e)}") from None


def id_places(root, resolution: int, splits=None) -> dict[str, list[tuple[str, str, int]]]:
    """id -> every (split, file, row) holding it, over the resolution's split folders.

    Only the ``id`` column is read. Files without a string ``id`` column (and null
    ids) are left out of this index; they fail validation when their split is read.
    """
    places: dict[str, list] = collections.defaultdict(list)
    for s in (present_splits(root, resolution) if splits is None else splits):
        for path in shard_files(root, resolution, s):
            try:
                pf = pq.ParquetFile(path)
                if "id" not in pf.schema_arrow.names:
                    continue
                ids = _column_values(pf.read(columns=["id"]).column("id"))
            except READ_ERRORS:
                continue
            for i, sid in enumerate(ids):
                if isinstance(sid, str):
                    places[sid].append((s, str(path), i))
    return dict(places)


# --------------------------------------------------------------------------- #
# scenes
# --------------------------------------------------------------------------- #

class _ReadFailure:
    """A reading error kept in row order, so earlier rows report first."""

    def __init__(self, error: Exception):
        self.error = error


def _in_order(rows):
    try:
        yield from rows
    except DataError as e:
        yield _ReadFailure(e)


def _validate_raw(raw, resolution: int, split: str, released_routes: bool = True) -> Scene:
    """A raw row validated; ``released_routes=False``: its routes too when it was read with
    them (:func:`_columns`)."""
    if isinstance(raw, _ReadFailure):
        raise raw.error
    if raw.problem is not None:
        raise DataError(f"{raw.ref}: {raw.problem}")
    with_routes = released_routes or set(REQUIRED_COLUMNS) <= raw.values.keys()
    return validate_row(raw.values, resolution, split, raw.file, raw.row, released_routes=with_routes)


def scenes_at(root, resolution: int, split: str, indices, n_samples=None, *,
              released_routes: bool = True) -> dict[int, Scene]:
    """The scenes at ``indices`` (positions in the split's file order, as
    :func:`iter_scenes` yields them, within its first ``n_samples``), validated; the rows
    before the last of them are read but not decoded, the rows after it not read. An index
    past the split's end is a DataError."""
    want = sorted({int(i) for i in indices})
    if want and want[0] < 0:
        raise DataError(f"scene index {want[0]} is negative")
    out: dict[int, Scene] = {}
    if not want:
        return out
    rows = iter_raw_rows(root, resolution, split, n_samples, released_routes=released_routes)
    seen = 0
    try:
        for raw in rows:
            if seen == want[len(out)]:
                out[seen] = _validate_raw(raw, resolution, split, released_routes)
                if len(out) == len(want):
                    return out
            seen += 1
    finally:
        rows.close()
    within = "" if n_samples is None else f" within its first {n_samples}"
    raise DataError(f"{split_folder(root, resolution, split)}: scene {want[len(out)]} asked for; the "
                    f"split holds {seen} scenes{within}")


def decode_workers() -> int:
    """Decode threads by default: 4, or the CPUs this process may run on when fewer (on
    two cores, four decoding threads only take turns at Python's lock: measured on a
    score of 8,000 256² scenes, 2 threads 29 s against 31 s for 4, and a third of the
    context switches)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return max(1, min(4, usable))


#: the default number of decode threads (:func:`decode_workers`)
DECODE_WORKERS = decode_workers()


def map_rows(fn, rows, workers: int = DECODE_WORKERS, prefetch: int | None = None):
    """Apply ``fn`` to ``rows`` on a thread pool, yielding results in input order.

    At most ``prefetch`` rows are in flight (a bounded queue); an exception raised
    by ``fn`` surfaces when its row's turn comes. ``workers=0`` runs inline.
    """
    if workers <= 0:
        for r in rows:
            yield fn(r)
        return
    prefetch = max(1, prefetch if prefetch is not None else 2 * workers)
    pending: collections.deque = collections.deque()
    ex = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="passage-decode")
    try:
        for r in rows:
            pending.append(ex.submit(fn, r))
            if len(pending) >= prefetch:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        ex.shutdown(wait=True, cancel_futures=True)


def iter_scenes(root, resolution: int, split: str, n_samples=DEFAULT_N_SAMPLES,
                workers: int = DECODE_WORKERS, check_unique_ids: bool = True, *,
                released_routes: bool = True, on_shard=None) -> Iterator[Scene]:
    """Validated scenes in file order (the first ``n_samples``; None = whole split).

    ``released_routes=False`` leaves the six released route columns unread (and their
    checks undone) in every shard whose rows all declare their marker convention in
    ``metadata.markers``; those scenes' ``routes`` are empty. For a reader that does not
    use the routes and checked the shards' bytes against a full read before (``score``
    against the hashes its run recorded at admission). ``on_shard(path)``: as in
    :func:`iter_raw_rows`, on the thread that iterates.

    Layout problems (missing root, resolution or split folder, no shards) raise
    :class:`DataError` at the call; a row problem raises when its row is reached,
    naming file, row and id.
    """
    resolution = _check_resolution(resolution)
    split = _split(split)
    n_samples = _check_n_samples(n_samples)
    shard_files(root, resolution, split)  # layout errors now, not at first next()
    return _scenes(root, resolution, split, n_samples, workers, check_unique_ids, released_routes,
                   on_shard)


def _scenes(root, resolution, split, n_samples, workers, check_unique_ids, released_routes=True,
            on_shard=None):
    places = id_places(root, resolution) if check_unique_ids else None
    rows = _in_order(iter_raw_rows(root, resolution, split, n_samples, released_routes=released_routes,
                                   on_shard=on_shard))
    first = None  # (convention, where) of the first scene: the split's convention
    for scene in map_rows(lambda r: _validate_raw(r, resolution, split, released_routes), rows, workers):
        if places is not None:
            msg = duplicate_id_problem(scene.id, (split, scene.file, scene.row),
                                       places.get(scene.id, []))
            if msg:
                raise DataError(f"{scene.where}: {msg}")
        conv = marker_convention(scene)
        if first is None:
            first = (conv, scene.where)
        msg = convention_problem(conv, *first)
        if msg:
            raise DataError(f"{scene.where}: {msg}")
        yield scene


def iter_scene_batches(root, resolution: int, split: str, n_samples=DEFAULT_N_SAMPLES,
                       batch_size: int = 32, workers: int = DECODE_WORKERS) -> Iterator[list[Scene]]:
    """Lists of up to ``batch_size`` validated scenes, in file order."""
    if not is_int(batch_size) or batch_size < 1:
        raise DataError(f"batch_size must be a positive integer, got {batch_size!r}")
    return _batches(iter_scenes(root, resolution, split, n_samples, workers), batch_size)


def _batches(scenes, batch_size: int):
    batch: list[Scene] = []
    for scene in scenes:
        batch.append(scene)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def load_scenes(root, resolution: int, split: str, n_samples=DEFAULT_N_SAMPLES,
                workers: int = DECODE_WORKERS) -> list[Scene]:
    """All validated scenes of the capped split prefix, in file order."""
    return list(iter_scenes(root, resolution, split, n_samples, workers))


def check_weight(scene: Scene, objective: str, weight) -> float:
    """The released weight of ``objective``; a stated ``weight`` must equal it exactly."""
    released = scene.weight(objective)
    if weight is not None:
        if not is_number(weight):
            raise DataError(f"{scene.where}: weight must be a number, got {weight!r}")
        if not (math.isfinite(float(weight)) and float(weight) == released):
            raise DataError(
                f"{scene.where}: requested weight {weight!r} for objective {objective!r} differs "
                f"from the released weight {released!r}; the released route was solved with the "
                f"released weight, so a different weight is refused")
    return released


def load_tasks(root, resolution: int, split: str, objective: str, variant: str = "obstacles",
               n_samples=DEFAULT_N_SAMPLES, weight=None, workers: int = DECODE_WORKERS) -> list[Task]:
    """Tasks of the capped split for one objective and task variant.

    ``obstacles``: obstacle channel as stored, ``*_obstacles`` routes; ``free``:
    obstacles cleared to zeros, ``*_free`` routes. ``weight`` (optional) only
    confirms ``metadata.solvers[objective].weight``; any difference is an error.
    """
    if objective not in OBJECTIVES:
        raise DataError(f"unknown objective {objective!r}; known: {list(OBJECTIVES)}")
    if variant not in VARIANTS:
        raise DataError(f"unknown task variant {variant!r}; known: {list(VARIANTS)}")
    tasks = []
    for scene in iter_scenes(root, resolution, split, n_samples, workers):
        check_weight(scene, objective, weight)
        tasks.append(scene.task(objective, variant))
    return tasks


# --------------------------------------------------------------------------- #
# whole-split scan (audit): every row, the first error of each failing scene
# --------------------------------------------------------------------------- #

@dataclasses.dataclass
class RowReport:
    """Validation outcome of one shard row."""

    id: object
    resolution: int
    split: str
    file: str
    row: int
    valid: bool
    error: str | None
    info: dict | None = None  # ``on_scene(scene)`` for a valid scene
    convention: str | None = None  # marker convention of a valid scene


def scene_summary(scene: Scene) -> dict:
    """Small per-scene facts for audits: obstacle coverage, route lengths, tile."""
    return {
        "obstacle_coverage": float(scene.obstacles.mean()),
        "route_cells": {f"{o}/{v}": int(len(r)) for (o, v), r in scene.routes.items()},
        "tile": scene.metadata.get("tile"),
        "start": list(scene.start),
        "goal": list(scene.goal),
        "markers": scene.metadata.get("markers"),
    }


def _file_rows(path: Path, resolution: int, split: str):
    """RawRows of one shard, or RowReports for rows that cannot even be read."""
    try:
        pf = pq.ParquetFile(path)
    except READ_ERRORS as e:
        yield RowReport(None, resolution, split, str(path), -1, False,
                        f"{path}: not a readable Parquet file: {_why(e)}")
        return
    names = pf.schema_arrow.names
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        try:
            ids = (_column_values(pf.read(columns=["id"]).column("id")) if "id" in names
                   else [None] * pf.metadata.num_rows)
        except READ_ERRORS:
            ids = [None] * pf.metadata.num_rows
        for i, sid in enumerate(ids):
            ref = RowRef(str(path), i, sid)
            yield RowReport(sid, resolution, split, str(path), i, False,
                            f"{ref}: missing required column(s) {missing}")
        return
    row = 0  # the row being read
    try:
        for raw in _shard_rows(pf, path):
            yield raw
            row = raw.row + 1
    except READ_ERRORS as e:
        why = _why(e)
        try:  # name the scenes that could not be read, if the id column still reads
            ids = _column_values(pf.read(columns=["id"]).column("id"))[row:]
        except READ_ERRORS:
            ids = [None]
        for i, sid in enumerate(ids, start=row):
            yield RowReport(sid, resolution, split, str(path), i, False,
                            f"{RowRef(str(path), i, sid)}: cannot read the shard from row "
                            f"{row} on: {why}")


@dataclasses.dataclass(frozen=True)
class _RowCheck:
    """The check of one row in :func:`scan_split`: a :class:`RowReport` for every item, a
    valid scene's carrying ``on_scene(scene)`` and its marker convention."""

    resolution: int
    split: str
    places: dict
    on_scene: Callable | None

    def failed(self, sid, raw: RawRow, error: str) -> RowReport:
        return RowReport(sid, self.resolution, self.split, raw.file, raw.row, False, error)

    def __call__(self, item) -> RowReport:
        if isinstance(item, RowReport):
            return item
        ref = item.ref
        sid = item.values.get("id")
        if item.problem is not None:
            return self.failed(sid, item, f"{ref}: {item.problem}")
        try:
            scene = validate_row(item.values, self.resolution, self.split, item.file, item.row)
        except DataError as e:
            return self.failed(sid, item, str(e))
        msg = duplicate_id_problem(scene.id, (self.split, item.file, item.row),
                                   self.places.get(scene.id, []))
        if msg:
            return self.failed(sid, item, f"{ref}: {msg}")
        info = self.on_scene(scene) if self.on_scene is not None else None
        return RowReport(scene.id, self.resolution, self.split, item.file, item.row, True, None,
                         info, marker_convention(scene))


def _one_convention(reports: list[RowReport]) -> None:
    """One marker convention per split: the majority of the valid scenes (a tie goes to
    the first valid scene's); scenes using the other one fail, naming a scene that uses
    the majority convention."""
    valid = [r for r in reports if r.valid]
    if not valid:
        return
    counts = collections.Counter(r.convention for r in valid)
    major = max(counts, key=lambda c: (counts[c], c == valid[0].convention))
    witness = next(r for r in valid if r.convention == major)
    where = str(RowRef(witness.file, witness.row, witness.id))
    for r in valid:
        msg = convention_problem(r.convention, major, where)
        if msg:
            r.valid, r.info = False, None
            r.error = f"{RowRef(r.file, r.row, r.id)}: {msg}"


def scan_split(root, resolution: int, split: str, on_scene=scene_summary, workers: int = DECODE_WORKERS,
               id_index: dict | None = None) -> list[RowReport]:
    """Validate every row of a split; collect (rather than raise) the first error of
    each failing row. Duplicate ids within the resolution (``id_index``, default
    :func:`id_places` over all split folders) fail every row that holds them.
    """
    resolution = _check_resolution(resolution)
    split = _split(split)
    files = shard_files(root, resolution, split)
    places = id_places(root, resolution) if id_index is None else id_index

    def rows():
        for path in files:
            yield from _file_rows(path, resolution, split)

    reports = list(map_rows(_RowCheck(resolution, split, places, on_scene), rows(), workers))
    _one_convention(reports)
    return reports
