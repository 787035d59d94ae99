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

Peak memory is one chunk of decoded scenes plus the reader's prefetch window
(``chunk + 2 * workers`` scenes) and the compact stubs (linear in the number of
tasks, a few kB each).
"""
from __future__ import annotations

import collections.abc
import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

from passage_jax.data.reader import DEFAULT_N_SAMPLES, check_weight, iter_scenes
from passage_jax.data.scene import Task, task_input_hash
from passage_jax.data.validate import DataError
from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.memory import trim_heap

__all__ = ["CHUNK_CELLS", "chunk_scenes", "TaskStub", "TaskStream", "open_tasks"]

#: Grid cells held at a time: a chunk holds ``CHUNK_CELLS // N**2`` scenes (at least
#: one): 64 scenes at 256 x 256, 1,024 at 64 x 64. The bound covers the decoded grids
#: (about 14 bytes a cell) and the batched exact solves over the chunk (value
#: iteration holds its edge costs and values: about 100 bytes a cell in float64).
CHUNK_CELLS = 1 << 22


def chunk_scenes(resolution: int, cells: int = CHUNK_CELLS) -> int:
    """Scenes per chunk at ``resolution`` for a budget of ``cells`` grid cells."""
    return max(1, int(cells) // (int(resolution) ** 2))


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
    route: np.ndarray  # released route (L, 2) int32
    tile: dict | None
    input_sha256: str

    @property
    def where(self) -> str:
        return f"{self.file} row {self.row} scene {self.id}"


def _stub(i: int, task: Task) -> TaskStub:
    s = task.scene
    return TaskStub(index=i, id=s.id, file=s.file, row=s.row, objective=task.objective,
                    variant=task.variant, weight=float(task.weight),
                    start=tuple(int(v) for v in s.start), goal=tuple(int(v) for v in s.goal),
                    route=np.asarray(task.route, np.int32), tile=s.metadata.get("tile"),
                    input_sha256=task_input_hash(task))


class TaskStream(collections.abc.Sequence):
    """Tasks of ``<root>/<N>x<N>/<split>`` under one objective and variant, read in chunks.

    Made by :func:`open_tasks` (which reads the split once). ``chunk`` scenes are
    decoded at a time; ``stubs`` holds the compact per-task facts.
    """

    def __init__(self, source: dict, stubs: list[TaskStub], chunk: int):
        self._source = dict(source)
        self.stubs = stubs
        self.chunk = int(chunk)
        self._held: tuple[int, list[Task]] | None = None  # (first index, tasks)
        self._reader: Iterator[Task] | None = None
        self._next = 0  # index of the task the reader yields next
        self.reads = 0  # passes started over the shards (the opening pass excluded)

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
        """``(first index, tasks)`` for the chunks covering ``[start, stop)``, in order."""
        stop = len(self) if stop is None else min(stop, len(self))
        i = start
        while i < stop:
            first, tasks = self._chunk_of(i)
            lo, hi = i - first, min(stop, first + len(tasks)) - first
            yield i, tasks[lo:hi]
            i = first + hi

    def _chunk_of(self, i: int) -> tuple[int, list[Task]]:
        first = (i // self.chunk) * self.chunk
        if self._held is not None and self._held[0] == first:
            return self._held
        self._held = None  # drop the chunk held before reading the next
        trim_heap()
        if self._reader is None or self._next > first:
            self._restart()
        while self._next < first:  # skip forward (the reader only goes forward)
            next(self._reader)
            self._next += 1
        tasks = []
        for _ in range(min(self.chunk, len(self) - first)):
            tasks.append(self._take())
        self._held = (first, tasks)
        return self._held

    def _restart(self) -> None:
        src = self._source
        # the ids were checked across the split folders when the stream was opened; a re-read
        # checks each task against its stub (id, file, row, input hash) instead
        self._reader = _task_iter(src["root"], src["resolution"], src["split"], src["objective"],
                                  src["variant"], n_samples=len(self), weight=src["weight"],
                                  workers=src["workers"], check_ids=False)
        self._next = 0
        self.reads += 1

    def _take(self) -> Task:
        i = self._next
        stub = self.stubs[i]
        try:
            task = next(self._reader)
        except StopIteration:
            raise DataError(f"{stub.where}: the shards end before task {i}; the data changed "
                            f"since the tasks were opened") from None
        self._next += 1
        if task.id != stub.id or task.scene.file != stub.file or task.scene.row != stub.row:
            raise DataError(f"{task.scene.where}: task {i} was {stub.where} when the tasks were "
                            f"opened; the data changed")
        got = task_input_hash(task)
        if got != stub.input_sha256:
            raise DataError(f"{stub.where}: input hash {got} differs from {stub.input_sha256} "
                            f"taken when the tasks were opened; the shard changed")
        return task

    def release(self) -> None:
        """Drop the chunk held and the open reader (the stubs stay)."""
        self._held = None
        self._reader = None

    # -- compact facts --------------------------------------------------------
    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.stubs]

    @property
    def input_hashes(self) -> list[str]:
        return [s.input_sha256 for s in self.stubs]

    def shard_rows(self) -> list[tuple[str, int]]:
        """``(file, rows used)`` per shard, in reading order."""
        out: dict[str, int] = {}
        for s in self.stubs:
            out[s.file] = out.get(s.file, 0) + 1
        return list(out.items())


def _task_iter(root, resolution, split, objective, variant, *, n_samples, weight, workers,
               check_ids: bool = True):
    for scene in iter_scenes(root, resolution, split, n_samples, workers,
                             check_unique_ids=check_ids):
        check_weight(scene, objective, weight)
        yield scene.task(objective, variant)


def open_tasks(root, resolution: int, split: str, objective: str, variant: str = "obstacles",
               n_samples=DEFAULT_N_SAMPLES, weight=None, *, chunk: int | None = None,
               workers: int = 4,
               on_chunk: Callable[[int, list[Task]], None] | None = None) -> TaskStream:
    """Read the split once (validating every scene, as :func:`load_tasks` does) and return
    its :class:`TaskStream`, which decodes ``chunk`` scenes at a time (default
    :func:`chunk_scenes` of the resolution).

    ``on_chunk(first index, tasks)`` is called for each chunk of ``chunk`` tasks during
    that read (admission qualifies the references there), so one pass over the shards
    serves both. The grids of a chunk are dropped after its call.
    """
    if objective not in OBJECTIVES:
        raise DataError(f"unknown objective {objective!r}; known: {list(OBJECTIVES)}")
    if variant not in VARIANTS:
        raise DataError(f"unknown task variant {variant!r}; known: {list(VARIANTS)}")
    if chunk is None:
        chunk = chunk_scenes(resolution)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise DataError(f"chunk must be a positive integer, got {chunk!r}")
    stubs: list[TaskStub] = []
    pending: list[Task] = []
    for task in _task_iter(root, resolution, split, objective, variant, n_samples=n_samples,
                           weight=weight, workers=workers):
        stubs.append(_stub(len(stubs), task))
        pending.append(task)
        if len(pending) == chunk:
            if on_chunk is not None:
                on_chunk(len(stubs) - chunk, pending)
            pending = []
            trim_heap()
    if pending and on_chunk is not None:
        on_chunk(len(stubs) - len(pending), pending)
    source = {"root": root, "resolution": resolution, "split": split, "objective": objective,
              "variant": variant, "weight": weight, "workers": workers}
    return TaskStream(source, stubs, chunk)
