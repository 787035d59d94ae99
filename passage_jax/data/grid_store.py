"""The decoded grids of a stream's tasks, kept once for every later pass of a run.

A run reads its split once at admission (decoding, validating and hashing every scene)
and then once per seed: at 256 x 256 a re-read costs about 1.5 ms a scene (Parquet,
zstd, the plane checks, the input hash), several times what a fast planner takes.
:class:`GridStore` keeps what a task is rebuilt from, written during the opening read:
each scene's elevation in metres (float64), obstacle plane (bool) and the task's
normalised input tensor (float32, three channels: its channel 0 is the elevation
plane), 21 bytes a cell (1.4 MB a scene at 256 x 256; 2.8 GB for 2,000 scenes), and its
metadata as JSON text and its elevation extremes in memory. The grids go in parts of a
stream's chunk of scenes, three files a part, each part in a private folder
(``tempfile.mkdtemp``, mode 0700) in RAM (:data:`SHM`, a RAM-backed file system: the
fastest to write) while the machine's available memory keeps :data:`MEMORY_MARGIN`,
else on disk (``TMPDIR``) while its file system keeps :data:`FREE_MARGIN`; a part that
fits in neither gives the store up. A later pass maps a chunk's planes read-only
(``mmap`` with ``PROT_READ``, its page tables filled at once; a part in RAM is mapped
whole on its first use and kept mapped for every later pass, so the process's resident
size counts the store's parts in RAM; a part on disk is read ahead by the kernel while
the chunk before it is served) and rebuilds its tasks
around views of them: no shard is read, nothing is decoded, computed or hashed again,
and the planner's request takes the elevation, obstacle and tensor views without a copy
(a read-only memory map cannot be made writable:
:class:`~passage_jax.protocol.contracts.PlanRequest` copies every other array).

The task a pass gets is the task the opening read hashed, bit for bit: the planes are
the decoded grids' bytes, and the stub's input hash is kept on the task. A shard that
changes after admission no longer reaches the planner (the re-read's check named it);
the run's ``data`` block records the shards' hashes taken at admission.

The files are written with ordinary writes (a full disk is an ``OSError``, never a fault
in a memory map); a store that cannot be written is given up (its folders removed) and
the stream re-reads the shards as before, saying why in :attr:`GridStore.problem`. The
folders are removed when the store is dropped or collected, and at interpreter exit. A
process killed outright leaves them (``passage-grids-<pid>@<host>-*``); the next store
made on the machine removes those of its host whose process is gone
(:func:`remove_orphans`).
"""
from __future__ import annotations

import json
import mmap
import os
import shutil
import socket
import tempfile
import weakref
from pathlib import Path

import numpy as np

from passage_jax.data.scene import Scene, Task

__all__ = ["GridStore", "remove_orphans", "PREFIX", "FREE_MARGIN", "MEMORY_MARGIN", "CELL_BYTES",
           "MODE_VARIABLE", "MODES", "store_mode"]

#: the files of a part: name, dtype, values a cell
_PLANES = (("elevation_m.f64", np.float64, 1), ("obstacles.bool", np.bool_, 1),
           ("input_tensor.f32", np.float32, 3))
#: the free space (bytes) a store leaves a disk's file system: 2 GiB, or a tenth of the
#: file system when that is more
FREE_MARGIN = 2 << 30
#: the memory (bytes) a store in RAM leaves available (``MemAvailable``): 4 GiB, or a
#: quarter of the machine's memory when that is more
MEMORY_MARGIN = 4 << 30
#: the RAM-backed file system tried first (Linux)
SHM = "/dev/shm"
#: the environment variable that says where a run keeps the grids: ``auto`` (the
#: default: in RAM while memory allows, then on disk), ``disk`` (on disk only) or ``off``
#: (no store: the seeds re-read the shards)
MODE_VARIABLE = "PASSAGE_JAX_GRID_STORE"
MODES = ("auto", "disk", "off")


def store_mode() -> str:
    """The store's mode from :data:`MODE_VARIABLE` (``auto`` when unset); ValueError
    naming the variable for anything else than :data:`MODES`."""
    mode = os.environ.get(MODE_VARIABLE, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{MODE_VARIABLE}={os.environ[MODE_VARIABLE]!r}: expected one of "
                         f"{', '.join(MODES)}")
    return mode
#: fill a map's page tables when it is made (Linux); elsewhere the pages fault in on use
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: bytes a cell
CELL_BYTES = sum(np.dtype(t).itemsize * k for _, t, k in _PLANES)


#: a store folder's name: this prefix, the writing process's id, ``@``, the host's name,
#: a dash and a random part
PREFIX = "passage-grids-"
_HOST = socket.gethostname().replace("/", "_")


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, but is another user's
        return True
    return True


def remove_orphans(root: str) -> list[str]:
    """Remove the store folders under ``root`` whose writing process is gone (a run killed
    outright leaves its folder: in RAM, its memory stays taken until someone removes it);
    the folders removed. Only this user's folders are touched."""
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not name.startswith(PREFIX):
            continue
        pid, _, rest = name[len(PREFIX):].partition("@")
        if not rest.startswith(f"{_HOST}-"):  # another machine's, on a shared file system
            continue
        try:
            mine = entry.stat(follow_symlinks=False).st_uid == os.getuid()
            if not pid.isdigit() or not mine or _alive(int(pid)):
                continue
        except OSError:
            continue
        if entry.is_dir(follow_symlinks=False):
            _remove(entry.path)
            removed.append(entry.path)
    return removed


def _memory() -> tuple[int, int] | None:
    """(MemAvailable, MemTotal) in bytes, or None where ``/proc/meminfo`` says nothing."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemAvailable", "MemTotal"):
            found[key] = int(rest.split()[0]) * 1024
    return (found["MemAvailable"], found["MemTotal"]) if len(found) == 2 else None


class GridStore:
    """The grids of a stream's tasks at ``resolution``, appended in task order by
    :meth:`add` (on the opening read's thread) and read back a chunk at a time by
    :meth:`tasks`. They are written in parts of ``part`` scenes (the stream's chunk), each
    part in RAM (:data:`SHM`) while the machine's available memory keeps
    :data:`MEMORY_MARGIN`, else on disk (``directory``, default the temporary directory)
    while its file system keeps :data:`FREE_MARGIN`."""

    def __init__(self, resolution: int, part: int, directory: str | None = None,
                 shm: str | None = None):
        """``directory``: the disk's folder (None: the temporary directory); ``shm``: the
        RAM-backed folder (None: :data:`SHM`, none under the ``disk`` mode; ``""``: none)."""
        self.resolution = int(resolution)
        self.cells = self.resolution * self.resolution
        self.part = max(1, int(part))
        self.mode = store_mode()
        shm = ("" if self.mode == "disk" else SHM) if shm is None else shm
        self._roots = {"ram": shm if shm and os.path.isdir(shm) and os.access(shm, os.W_OK) else None,
                       "disk": directory or tempfile.gettempdir()}
        self._folders: dict[str, str] = {}  # kind -> this store's folder there
        self._cleanups: list = []
        self.parts: list[str] = []  # the folder of each part
        self._maps: dict[int, list] = {}  # part -> the maps of its files, kept (parts in RAM)
        self._files: list = []
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

    @property
    def folders(self) -> list[str]:
        return list(self._folders.values())

    def add(self, task: Task) -> None:
        """Append ``task``'s scene (the next in task order); a write that fails, or a part
        that fits neither in memory nor on disk, drops the store."""
        if self.problem is not None:
            return
        scene = task.scene
        try:
            planes = [np.ascontiguousarray(a, t) for a, (_, t, _) in
                      zip((scene.elevation_m, scene.obstacles, scene.input_tensor(task.variant)), _PLANES)]
            if any(a.size != self.cells * k for a, (_, _, k) in zip(planes, _PLANES)):
                raise ValueError(f"scene {scene.id}: grids of shapes {[a.shape for a in planes]}")
            text = json.dumps(scene.metadata, allow_nan=False)
            if self.count % self.part == 0:
                self._next_part()
            for f, a in zip(self._files, planes):
                f.write(a.reshape(-1).view(np.uint8).data)  # the array's own bytes, no copy
        except (OSError, ValueError, TypeError) as err:
            self.drop(f"the decoded grids could not be kept: {err}")
            return
        self.metadata.append(text)
        self.bounds.append(scene.kept_elevation_bounds(scene.elevation_m))

    def _next_part(self) -> None:
        """Close the part written so far and open the next where it fits."""
        self._close_files()
        kind = self._place(self.part * self.cells * CELL_BYTES)
        folder = self._folders.get(kind)
        if folder is None:
            remove_orphans(self._roots[kind])
            folder = self._folders[kind] = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}@{_HOST}-",
                                                            dir=self._roots[kind])
            self._cleanups.append(weakref.finalize(self, _remove, folder))
        k = len(self.parts)
        self.parts.append(folder)
        self._files = [open(Path(folder) / f"{k:06d}.{name}", "wb") for name, _, _ in _PLANES]

    def _place(self, need: int) -> str:
        """Where the next part goes: ``ram`` while the memory and the RAM file system keep
        their margins, else ``disk`` while its file system keeps its margin; OSError when
        neither does."""
        why = []
        if self._roots["ram"] is not None:
            mem = _memory()
            fs = shutil.disk_usage(self._roots["ram"])
            if mem is None:
                why.append("the machine's available memory is unknown")
            elif mem[0] - need < max(MEMORY_MARGIN, mem[1] // 4):
                why.append(f"{mem[0] >> 20} MiB of memory available")
            elif fs.free - need < max(FREE_MARGIN, fs.total // 10):
                why.append(f"{fs.free >> 20} MiB free in {self._roots['ram']}")
            else:
                return "ram"
        usage = shutil.disk_usage(self._roots["disk"])
        margin = max(FREE_MARGIN, usage.total // 10)
        if usage.free - need >= margin:
            return "disk"
        why.append(f"{usage.free >> 20} MiB free on {self._roots['disk']}'s file system, and a "
                   f"store leaves {margin >> 20} MiB free")
        raise OSError("; ".join(why))

    def _close_files(self) -> None:
        files, self._files = self._files, []
        for f in files:
            f.close()

    def finish(self, expected: int) -> None:
        """The opening read has ended with ``expected`` tasks: close the files (a store
        holding fewer tasks is dropped)."""
        if self.problem is None and self.count != expected:
            self.drop(f"the kept grids hold {self.count} of {expected} tasks")
        try:
            self._close_files()
        except OSError as err:
            self.drop(f"the decoded grids could not be kept: {err}")

    def drop(self, why: str) -> None:
        """Give the store up (its folders removed); later passes re-read the shards."""
        if self.problem is None:
            self.problem = why
        try:
            self._close_files()
        except OSError:
            pass
        self.metadata, self.bounds, self.parts, self._maps = [], [], [], {}
        for cleanup in self._cleanups:
            cleanup()

    def record(self) -> dict:
        """What a run's manifest says of it: the scenes and bytes kept, how many parts in
        memory and on disk, or why it was given up (``problem``)."""
        ram = self._folders.get("ram")
        in_ram = sum(1 for f in self.parts if f == ram)
        return {"mode": self.mode, "scenes": self.count, "bytes": self.nbytes, "parts_in_memory": in_ram,
                "parts_on_disk": len(self.parts) - in_ram, "problem": self.problem}

    def close(self) -> None:
        self.drop("closed")

    def _planes(self, first: int, size: int) -> list[np.ndarray]:
        """The planes of tasks ``first .. first + size - 1`` (within one part): read-only
        views of a memory map of each of its files, their page tables filled when it is
        made (``MAP_POPULATE``), so that a planner reading them takes no page fault inside
        its timed call.

        A part in RAM is mapped whole, once, and its maps kept for every later pass (the
        seeds after the first map nothing: mapping and unmapping a 256² scene costs about
        0.2 ms); its pages stay resident (:data:`SHM` is RAM), so its page tables stay
        filled. A part on disk is mapped a chunk at a time and unmapped with it (the page
        cache may give its pages back; each mapping fills them again)."""
        k, at = divmod(first, self.part)
        if at + size > self.part:
            raise ValueError(f"tasks {first}..{first + size - 1} cross a part of {self.part}")
        kept = self._maps.get(k)
        if kept is None and self.parts[k] == self._folders.get("ram"):
            kept = self._maps[k] = [self._map(k, name, 0, 0) for name, _, _ in _PLANES]
        out = []
        for j, (name, t, n) in enumerate(_PLANES):
            shape = (size, self.resolution, self.resolution) + ((n,) if n > 1 else ())
            itemsize = np.dtype(t).itemsize * n
            start = at * self.cells * itemsize
            if kept is not None:
                m, offset = kept[j], start
            else:
                aligned = start - start % mmap.ALLOCATIONGRANULARITY
                offset = start - aligned
                m = self._map(k, name, aligned, offset + size * self.cells * itemsize)
            out.append(np.frombuffer(m, t, count=size * self.cells * n, offset=offset).reshape(shape))
        self._read_ahead(k + 1)
        return out

    def _read_ahead(self, k: int) -> None:
        """Ask the kernel to start reading part ``k``'s files into the page cache when the
        part is on disk (``POSIX_FADV_WILLNEED``: asynchronous, no work of this process),
        so that mapping it, a chunk later, finds its pages in memory."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or k >= len(self.parts) or self.parts[k] == self._folders.get("ram"):
            return
        for name, _, _ in _PLANES:
            try:
                fd = os.open(Path(self.parts[k]) / f"{k:06d}.{name}", os.O_RDONLY)
            except OSError:
                return
            try:
                advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def _map(self, k: int, name: str, offset: int, length: int) -> mmap.mmap:
        """A read-only map of ``length`` bytes (0: all) of part ``k``'s file ``name`` from
        ``offset``, its page tables filled (:data:`_POPULATE`)."""
        fd = os.open(Path(self.parts[k]) / f"{k:06d}.{name}", os.O_RDONLY)
        try:
            return mmap.mmap(fd, length, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ,
                             offset=offset)
        finally:
            os.close(fd)

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
