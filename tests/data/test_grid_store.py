"""The grids a run keeps for its seeds (passage_jax.data.grid_store).

A stream opened with ``keep_grids`` gives on every later pass the very tasks a stream
without it re-reads from the shards (grids, routes, metadata, input hashes), without
reading a shard; its arrays cannot be made writable, and a request shares them. A store
that cannot be written, or would leave too little free space, is given up and the
stream re-reads the shards; its folder goes with the stream.
"""
from __future__ import annotations

import gc
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from passage_jax.data import DataError, open_tasks, shipped_cohort_root
from passage_jax.data import grid_store as store_mod
from passage_jax.data.scene import task_input_hash
from passage_jax.fileio import planner_input_sha256
from passage_jax.protocol.contracts import BudgetSpec
from passage_jax.protocol.requests import build_request

ROOT = shipped_cohort_root()
N = 64
CHUNK = 3


def _open(keep: bool, variant: str = "obstacles", **kw):
    return open_tasks(ROOT, N, "test", "energy", variant, n_samples=8, chunk=CHUNK, keep_grids=keep,
                      **kw)


def _sha(a) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()).hexdigest()


def _facts(t) -> tuple:
    s = t.scene
    return (t.id, t.objective, t.variant, s.file, s.row, s.start, s.goal, t.weight,
            _sha(t.elevation_m), _sha(t.obstacles), _sha(s.obstacles), _sha(s.elevation_norm),
            _sha(s.input_tensor(t.variant)), None if t.route is None else _sha(t.route),
            s.metadata, s.kept_elevation_bounds(s.elevation_m))


@pytest.mark.parametrize("variant", ["obstacles", "free"])
def test_kept_tasks_equal_the_tasks_re_read_from_the_shards(variant):
    kept, reread = _open(True, variant), _open(False, variant)
    assert kept.store is not None and kept.store.problem is None
    assert kept.store.count == len(kept) == 8
    a, b = list(kept), list(reread)  # a second pass of each
    assert [_facts(t) for t in a] == [_facts(t) for t in b]
    assert kept.reads == 0 and reread.reads == 1  # no shard read again
    for t in a:
        # the input hash kept on the task is the hash of what it holds
        assert task_input_hash(t) == planner_input_sha256(t.elevation_m, t.obstacles,
                                                          t.scene.start, t.scene.goal)
        # the kept tensor is the one the scene builds
        assert _sha(t.input_tensor) == _sha(t.scene.input_tensor(variant))
    assert kept.input_hashes == reread.input_hashes


def test_kept_arrays_cannot_be_made_writable_and_a_request_shares_them():
    tasks = _open(True)
    t = tasks[4]
    for a in (t.elevation_m, t.obstacles, t.input_tensor, t.scene.elevation_norm):
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a.setflags(write=True)
        base = a
        while base.base is not None and isinstance(base.base, np.ndarray):
            base = base.base
        with pytest.raises(ValueError):
            base.setflags(write=True)
    r = build_request(t, BudgetSpec())
    assert np.shares_memory(r.elevation, t.elevation_m)
    assert np.shares_memory(r.obstacles, t.obstacles)
    assert np.shares_memory(r.input_tensor, t.input_tensor)
    # a task re-read from the shards is copied into its request, as before
    u = _open(False)[4]
    r = build_request(u, BudgetSpec())
    assert not np.shares_memory(r.elevation, u.elevation_m)
    assert not np.shares_memory(r.obstacles, u.obstacles)
    assert r.input_tensor.flags.writeable is False


def test_a_store_that_cannot_be_written_is_given_up(monkeypatch):
    real = store_mod.GridStore.add
    calls = {"n": 0}

    def failing(self, task):
        calls["n"] += 1
        if calls["n"] == 5:
            self.drop("the decoded grids could not be kept: [Errno 28] No space left on device")
            return
        real(self, task)
    monkeypatch.setattr(store_mod.GridStore, "add", failing)
    tasks = _open(True)
    assert tasks.store.problem.endswith("No space left on device")
    assert tasks.store.record()["scenes"] == 0 and tasks.store.record()["problem"] == tasks.store.problem
    assert not any(Path(f).exists() for f in tasks.store.folders)
    assert [_facts(t) for t in tasks] == [_facts(t) for t in _open(False)]
    assert tasks.reads == 1  # the shards are read again


class _Usage:
    def __init__(self, free_gib, total_gib=100):
        self.total, self.used, self.free = total_gib << 30, 0, free_gib << 30


def test_parts_go_to_memory_while_it_lasts_then_to_disk(monkeypatch, tmp_path):
    ram, disk = tmp_path / "ram", tmp_path / "disk"
    ram.mkdir(), disk.mkdir()
    monkeypatch.setattr(store_mod, "SHM", str(ram))
    monkeypatch.setattr(store_mod.tempfile, "gettempdir", lambda: str(disk))
    # 64 GiB of memory, 20 available: the margin is 16 GiB; each part takes a little
    avail = iter([20 << 30, 20 << 30, 15 << 30])  # the third part finds too little
    monkeypatch.setattr(store_mod, "_memory", lambda: (next(avail, 15 << 30), 64 << 30))
    tasks = _open(True)  # 8 tasks in parts of 3: parts 0 and 1 in memory, part 2 on disk
    store = tasks.store
    assert store.problem is None
    assert store.record() == {"mode": "auto", "scenes": 8, "bytes": 8 * 21 * N * N, "parts_in_memory": 2,
                              "parts_on_disk": 1, "problem": None}
    assert [Path(f).parent for f in store.parts] == [ram, ram, disk]
    assert [_facts(t) for t in tasks] == [_facts(t) for t in _open(False)]
    assert tasks.reads == 0


def test_a_part_in_memory_is_mapped_once_for_every_pass_a_part_on_disk_per_chunk_and_read_ahead(
        monkeypatch, tmp_path):
    ram, disk = tmp_path / "ram", tmp_path / "disk"
    ram.mkdir(), disk.mkdir()
    monkeypatch.setattr(store_mod, "SHM", str(ram))
    monkeypatch.setattr(store_mod.tempfile, "gettempdir", lambda: str(disk))
    avail = iter([20 << 30, 20 << 30, 15 << 30])  # parts 0 and 1 in memory, part 2 on disk
    monkeypatch.setattr(store_mod, "_memory", lambda: (next(avail, 15 << 30), 64 << 30))
    tasks = _open(True)
    maps = []
    real = store_mod.GridStore._map
    monkeypatch.setattr(store_mod.GridStore, "_map",
                        lambda self, k, name, offset, length: maps.append((k, name, offset, length))
                        or real(self, k, name, offset, length))
    advised = []
    monkeypatch.setattr(store_mod.os, "posix_fadvise",
                        lambda fd, offset, length, advice: advised.append(
                            (os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice)))
    want = [_facts(t) for t in _open(False)]
    for npass in range(3):
        maps.clear(), advised.clear()
        assert [_facts(t) for t in tasks] == want  # the same tasks, bit for bit, every pass
        # taking part 1 (the last in memory) asks the kernel to read part 2's files ahead
        # (on disk, taken next); no part after part 2, and nothing for parts in memory
        assert sorted(Path(p).name for p, *_ in advised) == sorted(
            f"000002.{n}" for n in ("elevation_m.f64", "input_tensor.f32", "obstacles.bool"))
        assert all(Path(p).parent.parent == disk and (o, n, a) == (0, 0, os.POSIX_FADV_WILLNEED)
                   for p, o, n, a in advised)
        parts = sorted({k for k, *_ in maps})
        # the first pass maps each part in memory whole (length 0: the whole file), once;
        # the part on disk is mapped on every pass, its chunk only
        assert parts == ([0, 1, 2] if npass == 0 else [2])
        assert all(length == 0 and offset == 0 for k, _, offset, length in maps if k < 2)
        assert all(length > 0 for k, *_, length in maps if k == 2)
        assert len(maps) == (3 * 3 if npass == 0 else 3)  # three files a part
    assert sorted(tasks.store._maps) == [0, 1]
    tasks.store.close()
    assert tasks.store._maps == {}


def test_a_part_that_fits_nowhere_gives_the_store_up(monkeypatch):
    monkeypatch.setattr(store_mod, "_memory", lambda: (1 << 30, 64 << 30))
    monkeypatch.setattr(store_mod.shutil, "disk_usage", lambda path: _Usage(3))
    tasks = _open(True)
    assert "MiB of memory available" in tasks.store.problem
    assert "a store leaves 10240 MiB free" in tasks.store.problem
    assert tasks.store.count == 0
    assert [_facts(t) for t in tasks] == [_facts(t) for t in _open(False)]


def test_a_real_write_error_gives_the_store_up():
    tasks = _open(True)
    store = store_mod.GridStore(N, 4)
    store.add(tasks[0])
    store._files[0].close()
    store._files[0] = open(os.devnull, "rb")  # a write raises io.UnsupportedOperation (an OSError)
    store.add(tasks[1])
    assert store.problem is not None and "could not be kept" in store.problem
    assert store.folders and not any(Path(f).exists() for f in store.folders)


def test_the_folders_go_with_the_stream_and_keep_grids_needs_hashes():
    tasks = _open(True)
    folders = [Path(f) for f in tasks.store.folders]
    assert folders and all(f.is_dir() and (f.stat().st_mode & 0o777) == 0o700 for f in folders)
    names = sorted(p.name for f in folders for p in f.iterdir())
    assert names == sorted(f"{k:06d}.{n}" for k in range(3)
                           for n in ("elevation_m.f64", "input_tensor.f32", "obstacles.bool"))
    assert sum(p.stat().st_size for f in folders for p in f.iterdir()) == tasks.store.nbytes \
        == 8 * 21 * N * N
    del tasks
    gc.collect()
    assert not any(f.exists() for f in folders)
    with pytest.raises(DataError, match="keep_grids needs hash_inputs"):
        _open(True, hash_inputs=False)


def test_a_shard_changed_after_admission_no_longer_reaches_the_tasks(tmp_path):
    import shutil

    import pyarrow.parquet as pq
    root = tmp_path / "root"
    shutil.copytree(ROOT / f"{N}x{N}", root / f"{N}x{N}")
    kept = open_tasks(root, N, "test", "energy", n_samples=None, chunk=4, keep_grids=True)
    before = [_facts(t) for t in kept]
    (shard,) = sorted((root / f"{N}x{N}" / "test").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), shard)
    assert [_facts(t) for t in kept] == before  # the tasks admission read and hashed


def test_crop_stats_from_bounds_equal_the_grids_own():
    from passage_jax.graph.costs import crop_stats, crop_stats_from_bounds
    rng = np.random.default_rng(5)
    grids = [rng.normal(0, 500, (16, 16)), -rng.random((8, 8)) * 40, np.full((4, 4), 7.25),
             rng.random((32, 32)) * 9000 - 430]
    grids += [t.elevation_m for t in _open(True)]
    for z in grids:
        want = crop_stats(z)
        got = crop_stats_from_bounds(float(z.min()), float(z.max()))
        assert all(np.float64(a).tobytes() == np.float64(b).tobytes() for a, b in zip(got, want))


def test_the_mode_variable(monkeypatch, tmp_path):
    from passage_jax.run.admission.checks import AdmissionError, open_admitted_tasks
    from passage_jax.run.specification import parse_spec
    ram = tmp_path / "ram"
    ram.mkdir()
    monkeypatch.setattr(store_mod, "SHM", str(ram))
    monkeypatch.setattr(store_mod, "_memory", lambda: (60 << 30, 64 << 30))
    monkeypatch.setenv(store_mod.MODE_VARIABLE, "disk")
    tasks = _open(True)
    assert tasks.store.record()["mode"] == "disk" and tasks.store.record()["parts_in_memory"] == 0
    monkeypatch.setenv(store_mod.MODE_VARIABLE, "auto")
    tasks = _open(True)
    assert tasks.store.record()["parts_in_memory"] == 3 and tasks.store.record()["parts_on_disk"] == 0
    spec = parse_spec({"method_name": "m", "inference": "passage_jax.planners.bfs:make_planner",
                       "dataset_path": "shipped", "resolution": N, "split": "test",
                       "cost_model": "energy", "n_samples": 4, "seeds": [0]})
    monkeypatch.setenv(store_mod.MODE_VARIABLE, "off")
    assert open_admitted_tasks(spec, ROOT, keep_grids=True).store is None
    monkeypatch.setenv(store_mod.MODE_VARIABLE, "memory")
    with pytest.raises(AdmissionError, match="PASSAGE_JAX_GRID_STORE='memory': expected one of "
                                             "auto, disk, off"):
        open_admitted_tasks(spec, ROOT, keep_grids=True)


def test_folders_of_a_killed_run_are_removed_by_the_next_store(tmp_path, monkeypatch):
    import subprocess
    import sys
    monkeypatch.setattr(store_mod, "_memory", lambda: (60 << 30, 64 << 30))
    monkeypatch.setattr(store_mod.shutil, "disk_usage", lambda path: _Usage(90))
    root = tmp_path / "ram"
    root.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    host = store_mod._HOST
    dead = root / f"{store_mod.PREFIX}{int(gone.stdout)}@{host}-abc"  # its process has ended
    live = root / f"{store_mod.PREFIX}{os.getpid()}@{host}-def"  # this process: alive
    elsewhere = root / f"{store_mod.PREFIX}{int(gone.stdout)}@another-host-ghi"  # not this host's
    other = root / "passage-grids-notapid-x"
    for f in (dead, live, elsewhere, other):
        f.mkdir()
        (f / "000000.obstacles.bool").write_bytes(b"\\0" * 16)
    tasks = _open(False)
    store = store_mod.GridStore(N, 4, shm=str(root))
    store.add(tasks[0])
    assert not dead.exists() and live.exists() and elsewhere.exists() and other.exists()
    (made,) = store.folders
    assert Path(made).name.startswith(f"{store_mod.PREFIX}{os.getpid()}@{host}-")
