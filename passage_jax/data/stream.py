"""The tasks of a split held compactly, their grids re-read from the shards in chunks.

A run or a score at the paper's scale (40,000 scenes at 256 x 256) cannot keep every
scene's grids in memory (about 1 MB a scene). :class:`TaskStream` keeps, per task,
only what identifies it and what the records need without the grids (id, shard file
and row, objective, variant, weight, start, goal, the released route, the tile and
the input hash: a few kB) and reads the grids back in chunks (:data:`CHUNK_CELLS`
grid cells: 64 scenes at 256 x 256) when they are needed.

It is a :class:`collections.abc.Sequence` of :class:`~passage_jax.data.scene.Task`:
``len(stream)``, ``stream[i]`` (loads the chunk holding ``i`` and keeps that one chunk)
and iteration (chunk by chunk). Reading goes forward through the shards; asking for
a task before the chunk held restarts the reader at the first shard. Every re-read
task is checked against the input hash taken when the stream was opened: a shard
changed under a run is an error naming the scene, never a silent substitution.

**Read-ahead.** A sequential pass (the opening read of :func:`open_tasks` with its
``on_chunk``, :meth:`TaskStream.chunks` and iteration) reads the next chunk on a
background thread (:class:`~passage_jax.data.read_ahead.ReadAhead`: Parquet, zstd decoding
on the reader's ``workers`` pool, validation, the input hash) while the caller works on
the current one; the thread starts the next chunk only once the caller has taken the
one before, so at most one chunk waits. A data error of a chunk read ahead is raised
unchanged when that chunk is asked for, never earlier; the same tasks come out in the
same order as without read-ahead. Random access (``stream[i]``) reads on the calling
thread and starts no read-ahead (the run loop's timed requests never share the CPU with
a background read), but takes a chunk already read ahead. Leaving a pass early,
:meth:`TaskStream.release` and dropping the stream stop the thread. ``prefetch=False``
reads every chunk on the calling thread, as before (comparisons and debugging).

**Kept grids.** With ``keep_grids`` (a run's admission) the opening read also keeps
every task's decoded grids (:class:`~passage_jax.data.grid_store.GridStore`), and every
later pass takes its chunks from there: views of a read-only memory map, nothing read
from the shards, decoded or hashed again (:attr:`TaskStream.reads` stays 0). A store
that could not be kept whole (a full disk; :attr:`GridStore.problem` says why) leaves
the stream re-reading the shards as without it.

Each task's input hash is computed once per read of it: on the opening read for the
stub, on a re-read for its check against the stub, and kept on the task
(:func:`~passage_jax.data.scene.task_input_hash`), so a caller asking for it again
(the score's check against the run's hashes) gets the kept value.

Peak memory is two chunks of decoded scenes (the one handed out and the next one read
ahead; one with ``prefetch=False``) plus the reader's decode window (at most ``2 *
workers`` rows in flight) and the compact stubs (linear in the number of tasks, a few kB
each).
"""
from __future__ import annotations

import atexit
import collections.abc
import dataclasses
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from passage_jax.checks import is_int
from passage_jax.data.grid_store import GridStore
from passage_jax.data.layout import _check_n_samples
from passage_jax.data.read_ahead import ReadAhead, close_read_aheads
from passage_jax.data.reader import DECODE_WORKERS, DEFAULT_N_SAMPLES, check_weight, iter_scenes
from passage_jax.data.scene import Task, task_input_hash
from passage_jax.data.validate import DataError
from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.memory import trim_heap

__all__ = ["CHUNK_CELLS", "chunk_scenes", "ReadOptions", "TaskSource", "TaskStub", "TaskStream",
           "open_tasks"]

#: Grid cells held at a time: a chunk holds ``CHUNK_CELLS // N**2`` scenes (at least
#: one): 64 scenes at 256 x 256, 1,024 at 64 x 64. The bound covers the decoded grids
#: (about 14 bytes a cell) and the batched exact solves over the chunk (value
#: iteration holds its edge costs and values: about 100 bytes a cell in float64).
CHUNK_CELLS = 1 << 22


def chunk_scenes(resolution: int, cells: int = CHUNK_CELLS) -> int:
    """Scenes per chunk at ``resolution`` for a budget of ``cells`` grid cells."""
    return max(1, int(cells) // (int(resolution) ** 2))


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How :func:`open_tasks` reads a split: the first ``n_samples`` scenes (None: the
    whole split), the ``weight`` a caller states (it only confirms the released one),
    ``chunk`` scenes decoded at a time (None: :func:`chunk_scenes` of the resolution),
    ``workers`` decode threads, whether sequential passes read ahead (``prefetch``), and
    whether the released routes are read (``released_routes``; False: see
    :func:`~passage_jax.data.reader.iter_scenes`; the tasks' ``route`` is then None), and
    ``on_read(index, task)``, called on the reading thread as each task is read, and
    ``on_shard(path)``, called there before each shard is opened, on every read of the
    shards (what it raises ends the read: ``score`` checks each shard's sha256 there, so
    the hashing overlaps with the decoding of the shard before).
    """

    n_samples: int | None = DEFAULT_N_SAMPLES
    weight: float | None = None
    chunk: int | None = None
    workers: int = DECODE_WORKERS
    prefetch: bool = True
    released_routes: bool = True
    on_read: Callable[[int, Task], None] | None = None
    on_shard: Callable[[Path], None] | None = None
    #: whether the opening read takes each task's input hash (kept on its stub; a re-read
    #: is checked against it). False: the stream is read once only (a second pass is
    #: refused), for a caller that vouches for the tasks otherwise (``score``'s
    #: provenance check: :func:`passage_jax.evaluate.score._scenes.input_check`).
    hash_inputs: bool = True
    #: whether the opening read keeps every task's decoded grids
    #: (:class:`~passage_jax.data.grid_store.GridStore`) and later passes take the tasks from
    #: there rather than re-reading the shards (a run's seeds).
    keep_grids: bool = False

    def __post_init__(self):
        _check_n_samples(self.n_samples)
        if self.keep_grids and not self.hash_inputs:
            raise DataError("keep_grids needs hash_inputs: the kept tasks carry the input hashes "
                            "the opening read took")
        if self.chunk is not None and (not is_int(self.chunk) or self.chunk < 1):
            raise DataError(f"chunk must be a positive integer, got {self.chunk!r}")

    @classmethod
    def of(cls, options: ReadOptions | None = None, **overrides) -> ReadOptions:
        """``options`` (default: the defaults) with ``overrides`` set; a name that is not a
        field is a TypeError naming it."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise TypeError(f"open_tasks() got unexpected keyword argument(s): "
                            f"{', '.join(map(repr, unknown))}")
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a ReadOptions, got {type(options).__name__}")
        base = cls() if options is None else options
        return dataclasses.replace(base, **overrides) if overrides else base


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """Where a stream's tasks are read from and how: the split of a dataset root, the
    objective and variant, the stated weight and the decode workers."""

    root: object
    resolution: int
    split: str
    objective: str
    variant: str
    weight: float | None = None
    workers: int = DECODE_WORKERS
    released_routes: bool = True
    on_shard: Callable[[Path], None] | None = None  #: :attr:`ReadOptions.on_shard`

    def tasks(self, n_samples, check_ids: bool = True) -> Iterator[Task]:
        """The first ``n_samples`` tasks, each scene's weight confirmed; ``check_ids``:
        ids checked unique across the resolution's split folders."""
        for scene in iter_scenes(self.root, self.resolution, self.split, n_samples, self.workers,
                                 check_unique_ids=check_ids, released_routes=self.released_routes,
                                 on_shard=self.on_shard):
            check_weight(scene, self.objective, self.weight)
            yield scene.task(self.objective, self.variant)


@dataclasses.dataclass(frozen=True)
class TaskStub:
    """What identifies a task without its grids."""

    index: int
    id: str
    file: str
    row: int
    objective: str
    variant: str
    weight: float
    start: tuple
    goal: tuple
    route: np.ndarray | None  # released route (L, 2) int32; None when not read
    tile: dict | None
    input_sha256: str | None  # None: the stream was opened without input hashes

    @property
    def where(self) -> str:
        return f"{self.file} row {self.row} scene {self.id}"


def _stub(i: int, task: Task, hashed: bool = True) -> TaskStub:
    s = task.scene
    return TaskStub(index=i, id=s.id, file=s.file, row=s.row, objective=task.objective,
                    variant=task.variant, weight=float(task.weight),
                    start=tuple(int(v) for v in s.start), goal=tuple(int(v) for v in s.goal),
                    route=None if task.route is None else np.asarray(task.route, np.int32),
                    tile=s.metadata.get("tile"),
                    input_sha256=task_input_hash(task) if hashed else None)


class _Rereader:
    """The forward reader over a split's shards, its position (the task it yields next),
    and the check of each re-read task against its stub. Used by one thread at a time:
    the caller's, or a read-ahead thread's while it runs."""

    def __init__(self, source: TaskSource, stubs: list[TaskStub]):
        self.source, self.stubs = source, stubs
        self.it: Iterator[Task] | None = None
        self.next = 0
        _OPEN.add(self)

    def restart(self) -> None:
        if self.stubs and self.stubs[0].input_sha256 is None:
            raise DataError(f"{self.stubs[0].where}: these tasks were opened without their input "
                            f"hashes (hash_inputs=False), which a re-read is checked against: "
                            f"they are read once only; open them again to read them again")
        self.close()
        # the ids were checked across the split folders when the stream was opened; a re-read
        # checks each task against its stub (id, file, row, input hash) instead, and takes
        # the released route from the stub rather than decoding the six route columns again
        lean = dataclasses.replace(self.source, released_routes=False)
        self.it = lean.tasks(len(self.stubs), check_ids=False)
        self.next = 0

    def close(self) -> None:
        it, self.it = self.it, None
        if it is not None:
            it.close()  # the decode pool shuts down now, not when the generator is collected

    def chunk(self, first: int, size: int, stop: threading.Event | None = None) -> list[Task] | None:
        """Tasks ``[first, first + size)``, checked; None when ``stop`` was set first. The
        reader must be open at or before ``first``. On an error the reader is dropped."""
        try:
            while self.next < first:  # skip forward (the reader only goes forward)
                if stop is not None and stop.is_set():
                    return None
                next(self.it)
                self.next += 1
            tasks = []
            for _ in range(size):
                if stop is not None and stop.is_set():
                    return None
                tasks.append(self._take())
        except BaseException:
            self.close()
            raise
        if self.next >= len(self.stubs):
            self.close()  # nothing more to read: let the reader's pool go
        return tasks

    def _take(self) -> Task:
        i = self.next
        stub = self.stubs[i]
        try:
            task = next(self.it)
        except StopIteration:
            raise DataError(f"{stub.where}: the shards end before task {i}; the data changed "
                            f"since the tasks were opened") from None
        self.next += 1
        if task.id != stub.id or task.scene.file != stub.file or task.scene.row != stub.row:
            raise DataError(f"{task.scene.where}: task {i} was {stub.where} when the tasks were "
                            f"opened; the data changed")
        got = task_input_hash(task)  # kept on the task: later callers get this value
        if got != stub.input_sha256:
            raise DataError(f"{stub.where}: input hash {got} differs from {stub.input_sha256} "
                            f"taken when the tasks were opened; the shard changed")
        if task.route is None and stub.route is not None:
            # as the opening read gave it; the re-read scene holds this task's route only
            task.route = stub.route
            task.scene.routes = {(task.objective, task.variant): stub.route}
        return task


#: the rereaders alive; those still open at interpreter exit are closed then, while the
#: modules their decode pools need are still there
_OPEN: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_readers() -> None:
    close_read_aheads()  # first the threads that may be using a reader
    for rr in list(_OPEN):
        try:
            rr.close()
        except Exception:  # noqa: S110 - exiting; a reader in use on a thread is left to it
            pass


def _chunks_ahead(rr: _Rereader, first: int, end: int, size: int, n: int, stop: threading.Event):
    """``(first, tasks)`` of the chunks from ``first`` up to ``end`` (on the read-ahead
    thread); ends early when ``stop`` is set."""
    while first < end:
        tasks = rr.chunk(first, min(size, n - first), stop)
        if tasks is None:
            return
        yield first, tasks
        first += size


class _Ahead:
    """The read-ahead of a stream: the thread, the rereader it uses, and the first index
    of the chunk it hands out next."""

    def __init__(self, rr: _Rereader, first: int, end: int, size: int, owner):
        self.rr, self.first, self.end, self.owner = rr, first, end, owner
        n = len(rr.stubs)
        self.reader = ReadAhead(lambda stop: _chunks_ahead(rr, first, end, size, n, stop),
                                name="passage-task-stream")

    def close(self) -> bool:
        return self.reader.close()


class TaskStream(collections.abc.Sequence):
    """Tasks of ``<root>/<N>x<N>/<split>`` under one objective and variant, read in chunks.

    Made by :func:`open_tasks` (which reads the split once). ``chunk`` scenes are
    decoded at a time; ``stubs`` holds the compact per-task facts. ``prefetch``: read
    the next chunk ahead on a background thread during sequential passes (see the
    module's docstring); may be changed between passes.
    """

    def __init__(self, source: TaskSource, stubs: list[TaskStub], chunk: int, prefetch: bool = True,
                 store: GridStore | None = None):
        self._source = source
        self.store = store  # the kept grids (None: every pass re-reads the shards)
        self.stubs = stubs
        self.chunk = int(chunk)
        self.prefetch = bool(prefetch)
        self._held: tuple[int, list[Task]] | None = None  # (first index, tasks)
        self._rr = _Rereader(self._source, stubs)  # the caller's, while no read-ahead runs
        self._ahead: _Ahead | None = None
        self.reads = 0  # passes started over the shards (the opening pass excluded)
        # a stream dropped mid-pass stops its read-ahead: the thread holds the reader, never
        # the stream, and a ReadAhead that is collected halts its thread

    # -- the Sequence protocol ------------------------------------------------
    def __len__(self) -> int:
        return len(self.stubs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"task index {i} outside [0, {n})")
        start, tasks = self._chunk_of(i)
        return tasks[i - start]

    def __iter__(self) -> Iterator[Task]:
        for _, tasks in self.chunks():
            yield from tasks

    # -- chunks ---------------------------------------------------------------
    def chunks(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, list[Task]]]:
        """``(first index, tasks)`` for the chunks covering ``[start, stop)``, in order.

        With :attr:`prefetch`, the next chunk (up to ``stop``) is read ahead while the
        caller works on the current one; when the pass ends, also early (a loop left, the
        generator closed or dropped), its thread is stopped and the reader closed (its
        decode pool shut down)."""
        stop = len(self) if stop is None else min(stop, len(self))
        prefetch = self.prefetch
        owner = object()  # this pass: it ends only its own read-ahead, not another pass's
        i = start
        try:
            while i < stop:
                first, tasks = self._chunk_of(i, stop if prefetch else None, owner)
                lo, hi = i - first, min(stop, first + len(tasks)) - first
                yield i, tasks[lo:hi]
                i = first + hi
        finally:
            if prefetch and (self._ahead is None or self._ahead.owner is owner):
                self._stop_ahead()
                self._rr.close()

    def _chunk_of(self, i: int, ahead_to: int | None = None, owner=None) -> tuple[int, list[Task]]:
        """The chunk holding ``i``; with ``ahead_to``, read the chunks after it up to that
        index ahead (a sequential pass)."""
        first = (i // self.chunk) * self.chunk
        if self._held is not None and self._held[0] == first:
            return self._held
        self._held = None  # drop the chunk held before reading the next
        trim_heap()
        if self.store is not None and self.store.usable:
            self._held = (first, self.store.tasks(first, self.stubs[first:first + self.chunk],
                                                  self._source.split))
            return self._held
        if self._ahead is not None and self._ahead.first == first:
            if owner is not None:
                self._ahead.owner = owner
            return self._take_ahead()
        self._stop_ahead()
        rr = self._rr
        if rr.it is None or rr.next > first:
            rr.restart()
            self.reads += 1
        if ahead_to is not None:
            end = -(-max(ahead_to, first + 1) // self.chunk) * self.chunk
            self._ahead = _Ahead(rr, first, end, self.chunk, owner)
            return self._take_ahead()
        tasks = rr.chunk(first, min(self.chunk, len(self) - first))
        self._held = (first, tasks)
        return self._held

    def _take_ahead(self) -> tuple[int, list[Task]]:
        ahead = self._ahead
        try:
            first, tasks = ahead.reader.take()
        except BaseException:
            self._stop_ahead()  # the reader ended with the error; it is raised unchanged
            raise
        ahead.first = first + self.chunk
        if ahead.first >= ahead.end:
            self._stop_ahead()  # the last chunk of the pass: the thread has ended
        self._held = (first, tasks)
        return self._held

    def _stop_ahead(self) -> None:
        """Stop the read-ahead thread; the reader comes back to the caller's thread (a
        fresh one if the thread could not be stopped in time)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not ahead.close():
            self._rr = _Rereader(self._source, self.stubs)  # the old one is still in use there

    def release(self) -> None:
        """Drop the chunk held, stop the read-ahead and close the reader (the stubs stay)."""
        self._held = None
        self._stop_ahead()
        self._rr.close()

    # -- compact facts --------------------------------------------------------
    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.stubs]

    @property
    def input_hashes(self) -> list[str]:
        if self.stubs and self.stubs[0].input_sha256 is None:
            raise DataError(f"{self.stubs[0].where}: these tasks were opened without their "
                            f"input hashes (hash_inputs=False)")
        return [s.input_sha256 for s in self.stubs]

    def shard_rows(self) -> list[tuple[str, int]]:
        """``(file, rows used)`` per shard, in reading order."""
        out: dict[str, int] = {}
        for s in self.stubs:
            out[s.file] = out.get(s.file, 0) + 1
        return list(out.items())


def _opening_chunks(source: TaskSource, n_samples, chunk: int, stop: threading.Event, on_read=None,
                    hashed: bool = True, store: GridStore | None = None):
    """The opening read in chunks of ``chunk`` tasks, each task's input hash taken (and kept
    on it; not with ``hashed`` False), its grids kept in ``store`` and ``on_read(index,
    task)`` called; ends early when ``stop`` is set."""
    pending: list[Task] = []
    for i, task in enumerate(source.tasks(n_samples)):
        if hashed:
            task_input_hash(task)
        if store is not None:
            store.add(task)
        if on_read is not None:
            on_read(i, task)
        pending.append(task)
        if len(pending) == chunk:
            yield pending
            pending = []
        if stop.is_set():
            return
    if pending:
        yield pending


def _read_stubs(source: TaskSource, opts: ReadOptions, chunk: int, on_chunk,
                store: GridStore | None = None) -> list[TaskStub]:
    """The opening read: every task's stub, ``on_chunk(first, tasks)`` per chunk, the
    grids kept in ``store`` (dropped if the read fails)."""
    stubs: list[TaskStub] = []

    def chunks(stop):
        return _opening_chunks(source, opts.n_samples, chunk, stop, opts.on_read, opts.hash_inputs,
                               store)

    try:
        with ReadAhead(chunks, ahead=1 if opts.prefetch else 0, name="passage-open-tasks") as reader:
            for tasks in reader:
                first = len(stubs)
                stubs.extend(_stub(first + k, t, opts.hash_inputs) for k, t in enumerate(tasks))
                if on_chunk is not None:
                    on_chunk(first, tasks)
                del tasks
                trim_heap()
    except BaseException:
        if store is not None:
            store.close()
        raise
    if store is not None:
        store.finish(len(stubs))
    return stubs


def open_tasks(root, resolution: int, split: str, objective: str, variant: str = "obstacles", *,
               options: ReadOptions | None = None,
               on_chunk: Callable[[int, list[Task]], None] | None = None,
               **overrides) -> TaskStream:
    """Read the split once (validating every scene, as :func:`load_tasks` does) and return
    its :class:`TaskStream`, which decodes ``chunk`` scenes at a time (default
    :func:`chunk_scenes` of the resolution).

    ``options`` (:class:`ReadOptions`) and keyword overrides of its fields (``n_samples``,
    ``weight``, ``chunk``, ``workers``, ``prefetch``) say how the split is read.
    ``on_chunk(first index, tasks)`` is called for each chunk of ``chunk`` tasks during
    that read (admission qualifies the references there), so one pass over the shards
    serves both. The grids of a chunk are dropped after its call. With ``prefetch``
    (the default) the next chunk is read, decoded and hashed on a background thread
    while ``on_chunk`` works on the current one, and the stream reads ahead in its
    sequential passes; ``prefetch=False`` reads on the calling thread only.
    The option ``on_read(index, task)`` is called on the reading thread for each task as
    it is read (before its chunk reaches ``on_chunk``): per-task host work that overlaps
    with ``on_chunk``'s work on the previous chunk.
    """
    if objective not in OBJECTIVES:
        raise DataError(f"unknown objective {objective!r}; known: {list(OBJECTIVES)}")
    if variant not in VARIANTS:
        raise DataError(f"unknown task variant {variant!r}; known: {list(VARIANTS)}")
    opts = ReadOptions.of(options, **overrides)
    chunk = chunk_scenes(resolution) if opts.chunk is None else opts.chunk
    source = TaskSource(root, resolution, split, objective, variant, opts.weight, opts.workers,
                        opts.released_routes, opts.on_shard)
    store = GridStore(resolution, chunk) if opts.keep_grids else None
    stubs = _read_stubs(source, opts, chunk, on_chunk, store)
    return TaskStream(source, stubs, chunk, prefetch=opts.prefetch, store=store)
