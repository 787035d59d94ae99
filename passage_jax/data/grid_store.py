"""The decoded grids of a stream's tasks, kept once for every later pass of a run.

A run reads its split once at admission (decoding, validating and hashing every scene)
and then once per seed: at 256 x 256 a re-read costs about 1.5 ms a scene (Parquet,
zstd, the plane checks, the input hash), several times what a fast planner takes.
:class:`GridStore` keeps what a task is rebuilt from, written during the opening read:
each scene's elevation in metres (float64), obstacle plane (bool) and the task's
normalised input tensor (float32, three channels: its channel 0 is the elevation
plane), 21 bytes a cell (1.4 MB a scene at 256 x 256; 2.8 GB for 2,000 scenes), in
three files of a private temporary folder (``tempfile.mkdtemp`` under ``TMPDIR``, mode
0700), and its metadata as JSON text and its elevation extremes in memory. A later pass
maps a chunk's planes read-only (``mmap`` with ``PROT_READ``, its page tables filled at
once) and rebuilds its tasks around views of them: no shard is read, nothing is decoded,
computed or hashed again, and the planner's request takes the elevation, obstacle and
tensor views without a copy (a read-only memory map cannot be made writable:
:class:`~passage_jax.protocol.contracts.PlanRequest` copies every other array).

The task a pass gets is the task the opening read hashed, bit for bit: the planes are
the decoded grids' bytes, and the stub's input hash is kept on the task. A shard that
changes after admission no longer reaches the planner (the re-read's check named it);
the run's ``data`` block records the shards' hashes taken at admission.

The store keeps its file system's free space: it is dropped as soon as writing the next
64 scenes would leave less than :data:`FREE_MARGIN` of it free (2 GiB, or a tenth of the
file system when that is more).

The files are written with ordinary writes (a full disk is an ``OSError``, never a fault
in a memory map); a store that cannot be written is dropped (its folder removed) and the
stream re-reads the shards as before, saying why in :attr:`GridStore.problem`. The
folder is removed when the store is closed or collected, and at interpreter exit.
"""
from __future__ import annotations

import json
import mmap
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

from passage_jax.data.scene import Scene, Task

__all__ = ["GridStore"]

#: the files: name, dtype, values a cell
_PLANES = (("elevation_m.f64", np.float64, 1), ("obstacles.bool", np.bool_, 1),
           ("input_tensor.f32", np.float32, 3))
#: the free space (bytes) a store leaves its file system: 2 GiB, or a tenth of the file
#: system when that is more
FREE_MARGIN = 2 << 30
#: fill a map's page tables when it is made (Linux); elsewhere the pages fault in on use
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: bytes a cell
CELL_BYTES = sum(np.dtype(t).itemsize * k for _, t, k in _PLANES)


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


class GridStore:
    """The grids of a stream's tasks at ``resolution``, appended in task order by
    :meth:`add` (on the opening read's thread) and read back a chunk at a time by
    :meth:`tasks`."""

    def __init__(self, resolution: int, directory: str | None = None):
        self.resolution = int(resolution)
        self.cells = self.resolution * self.resolution
        self.folder = tempfile.mkdtemp(prefix="passage-grids-", dir=directory)
        self._cleanup = weakref.finalize(self, _remove, self.folder)
        self._files = [open(Path(self.folder) / name, "wb") for name, _, _ in _PLANES]
        self.metadata: list[str] = []
        self.bounds: list[tuple[float, float] | None] = []
        self.problem: str | None = None

    @property
    def count(self) -> int:
        return len(self.metadata)

    @property
    def usable(self) -> bool:
        return self.problem is None

    @property
    def nbytes(self) -> int:
        return CELL_BYTES * self.cells * self.count

    def add(self, task: Task) -> None:
        """Append ``task``'s scene (the next in task order); a write that fails drops the
        store."""
        if self.problem is not None:
            return
        scene = task.scene
        try:
            planes = [np.ascontiguousarray(a, t) for a, (_, t, _) in
                      zip((scene.elevation_m, scene.obstacles, scene.input_tensor(task.variant)), _PLANES)]
            if any(a.size != self.cells * k for a, (_, _, k) in zip(planes, _PLANES)):
                raise ValueError(f"scene {scene.id}: grids of shapes {[a.shape for a in planes]}")
            text = json.dumps(scene.metadata, allow_nan=False)
            if self.count % 64 == 0:
                self._keep_free_space()
            for f, a in zip(self._files, planes):
                f.write(a.tobytes())
        except (OSError, ValueError, TypeError) as err:
            self.drop(f"the decoded grids could not be kept in {self.folder}: {err}")
            return
        self.metadata.append(text)
        self.bounds.append(scene.kept_elevation_bounds(scene.elevation_m))

    def _keep_free_space(self) -> None:
        """OSError when 64 more scenes would leave the file system less than its margin."""
        usage = shutil.disk_usage(self.folder)
        margin = max(FREE_MARGIN, usage.total // 10)
        if usage.free - 64 * CELL_BYTES * self.cells < margin:
            raise OSError(f"{usage.free >> 20} MiB free on its file system, and a store leaves "
                          f"{margin >> 20} MiB free")

    def finish(self, expected: int) -> None:
        """The opening read has ended with ``expected`` tasks: flush the files (the store
        holding fewer tasks is dropped)."""
        if self.problem is None and self.count != expected:
            self.drop(f"the kept grids hold {self.count} of {expected} tasks")
        for f in self._files:
            try:
                f.close()
            except OSError as err:
                self.drop(f"the decoded grids could not be kept in {self.folder}: {err}")
        self._files = []

    def drop(self, why: str) -> None:
        """Give the store up (its folder removed); later passes re-read the shards."""
        if self.problem is None:
            self.problem = why
        for f in self._files:
            try:
                f.close()
            except OSError:
                pass
        self._files = []
        self.metadata, self.bounds = [], []
        self._cleanup()

    def record(self) -> dict:
        """What a run's manifest says of it: the scenes and bytes kept, or why it was
        given up (``problem``)."""
        return {"scenes": self.count, "bytes": self.nbytes, "problem": self.problem}

    def close(self) -> None:
        self.drop("closed")

    def _planes(self, first: int, size: int) -> list[np.ndarray]:
        """The planes of tasks ``first .. first + size - 1``: read-only views of a memory
        map of each file, its page tables filled when it is made (``MAP_POPULATE``), so
        that a planner reading them takes no page fault inside its timed call."""
        out = []
        for name, t, k in _PLANES:
            shape = (size, self.resolution, self.resolution) + ((k,) if k > 1 else ())
            itemsize = np.dtype(t).itemsize * k
            start = first * self.cells * itemsize
            aligned = start - start % mmap.ALLOCATIONGRANULARITY
            length = start - aligned + size * self.cells * itemsize
            fd = os.open(Path(self.folder) / name, os.O_RDONLY)
            try:
                m = mmap.mmap(fd, length, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ,
                              offset=aligned)
            finally:
                os.close(fd)
            out.append(np.frombuffer(m, t, count=size * self.cells * k,
                                     offset=start - aligned).reshape(shape))
        return out

    def tasks(self, first: int, stubs: list, split: str) -> list[Task]:
        """The tasks of ``stubs`` (those of indices ``first, first + 1, ...``), rebuilt from
        the kept grids: read-only views of the planes, the released route and the input
        hash taken from each stub."""
        em, o, tensor = self._planes(first, len(stubs))
        out = []
        for k, stub in enumerate(stubs):
            md = json.loads(self.metadata[first + k])
            scene = Scene(id=stub.id, resolution=self.resolution, split=split,
                          elevation_norm=tensor[k, :, :, 0],
                          elevation_m=em[k], obstacles=o[k], start=stub.start, goal=stub.goal,
                          routes={} if stub.route is None else {(stub.objective, stub.variant): stub.route},
                          metadata=md, file=stub.file, row=stub.row)
            bounds = self.bounds[first + k]
            if bounds is not None:
                scene._elevation_bounds = (scene.elevation_m, *bounds)
            task = scene.task(stub.objective, stub.variant)
            task.input_tensor = tensor[k]
            if stub.input_sha256 is not None:
                task._input_sha256 = (task.elevation_m, task.obstacles, scene.start, scene.goal,
                                      stub.input_sha256)
            out.append(task)
        return out
