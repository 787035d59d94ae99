"""Read-ahead of the task stream: the next chunk is read, decoded and hashed on a background
thread while the caller works on the current one.

With and without read-ahead the same tasks come out in the same order; a data error of a
chunk read ahead surfaces unchanged when that chunk is asked for; the thread is gone after
a release, a close, an abandoned pass and a dropped stream; at most one chunk is read
beyond the caller's; each task's input hash is computed once per read.
"""
from __future__ import annotations

import dataclasses
import gc
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from passage_jax.data import DataError, ReadAhead, load_tasks, open_tasks, shipped_cohort_root
from passage_jax.data import reader as reader_mod
from passage_jax.data import scene as scene_mod
from passage_jax.data.codec import decode_tensor, encode_tensor
from passage_jax.data.scene import task_input_hash
from passage_jax.protocol.records import input_hash as records_input_hash

ROOT = shipped_cohort_root()
N = 64
CHUNK = 4
BAD_ROW = 9  # in the third chunk of four


# --------------------------------------------------------------------------- helpers

def _ours() -> set:
    """The threads this module's readers start (the read-ahead and the decode pools)."""
    return {t for t in threading.enumerate()
            if t.name.startswith(("passage-task-stream", "passage-open-tasks", "passage-decode"))}


def _gone(before: set, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (_ours() - before):
            return True
        time.sleep(0.02)
    return False


def _facts(tasks) -> list:
    return [(t.id, t.objective, t.variant, t.scene.file, t.scene.row, t.scene.start, t.scene.goal,
             t.elevation_m, t.obstacles, t.route, t.weight, task_input_hash(t)) for t in tasks]


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert len(x) == len(y)
        for u, v in zip(x, y):
            if isinstance(u, np.ndarray):
                assert u.dtype == v.dtype and np.array_equal(u, v)
            else:
                assert u == v


@pytest.fixture()
def root(tmp_path):
    r = tmp_path / "root"
    shutil.copytree(ROOT / f"{N}x{N}", r / f"{N}x{N}")
    return r


def _shard(root):
    (shard,) = sorted((root / f"{N}x{N}" / "test").glob("*.parquet"))
    return shard


def _tamper(root, row: int, how: str) -> None:
    """Rewrite the shard with ``row``'s tensor changed: ``hash`` (a valid grid, one elevation
    value moved: only the input hash tells) or ``garbage`` (not a tensor frame)."""
    shard = _shard(root)
    table = pq.read_table(shard)
    blobs = table.column("tensor").to_pylist()
    if how == "hash":
        x = decode_tensor(blobs[row], N).copy()
        x[5, 7, 0] = np.float32(x[5, 7, 0] * 0.5 + 0.25)
        blobs[row] = encode_tensor(x)
    else:
        blobs[row] = b"this is not a zstd frame"
    table = table.set_column(table.schema.get_field_index("tensor"), "tensor",
                             pa.array(blobs, pa.binary()))
    pq.write_table(table, shard)


def _open(root=ROOT, prefetch=True, **kw):
    kw.setdefault("chunk", CHUNK)
    return open_tasks(root, N, "test", "energy", "obstacles", n_samples=None, prefetch=prefetch, **kw)


# --------------------------------------------------------------------------- same tasks

def test_the_same_tasks_with_and_without_read_ahead():
    whole = _facts(load_tasks(ROOT, N, "test", "energy", "obstacles", n_samples=None))
    got = {}
    for prefetch in (False, True):
        opened = []
        stream = _open(prefetch=prefetch, chunk=5,
                       on_chunk=lambda first, ts, opened=opened: opened.append((first, _facts(ts))))
        assert [f for f, _ in opened] == [0, 5, 10, 15, 20]
        _same([x for _, fs in opened for x in fs], whole)
        passes = [[(f, _facts(ts)) for f, ts in stream.chunks()],
                  _facts(stream),  # iteration
                  [(f, _facts(ts)) for f, ts in stream.chunks(7, 18)]]
        _same([x for _, fs in passes[0] for x in fs], whole)
        _same(passes[1], whole)
        assert [f for f, _ in passes[2]] == [7, 10, 15]
        _same([x for _, fs in passes[2] for x in fs], whole[7:18])
        # random access in any order, also behind a pass in progress (restarts the reader)
        it = stream.chunks()
        next(it), next(it)
        _same(_facts([stream[i] for i in (23, 3, 17, 2, 0, 9, 11)]),
              [whole[i] for i in (23, 3, 17, 2, 0, 9, 11)])
        _same([x for _, fs in ((f, _facts(ts)) for f, ts in it) for x in fs], whole[10:])
        assert stream.input_hashes == [w[-1] for w in whole]
        got[prefetch] = (opened, passes, stream.input_hashes)
        stream.release()
    _same([x for _, fs in got[False][0] for x in fs], [x for _, fs in got[True][0] for x in fs])
    assert got[False][2] == got[True][2]


def test_task_input_hash_is_the_records_identity():
    tasks = load_tasks(ROOT, N, "test", "slope_uphill", "free", n_samples=6)
    for t in tasks:
        fresh = records_input_hash(t)  # planner_input_sha256 of elevation, obstacles, start, goal
        assert task_input_hash(t) == fresh == t.input_sha256
    t = tasks[0]
    changed = dataclasses.replace(t, obstacles=np.ones_like(t.obstacles))
    assert task_input_hash(changed) == records_input_hash(changed) != task_input_hash(t)
    t.obstacles = np.ones_like(t.obstacles)  # a replaced array is hashed again
    assert task_input_hash(t) == records_input_hash(t) == task_input_hash(changed)


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("how, words", [("hash", "input hash"), ("garbage", f"row {BAD_ROW} scene")])
def test_an_error_of_a_later_chunk_surfaces_at_that_chunk(root, how, words):
    clean = _shard(root).read_bytes()
    outcome = {}
    for prefetch in (False, True):
        _shard(root).write_bytes(clean)
        stream = _open(root, prefetch=prefetch)
        _tamper(root, BAD_ROW, how)  # after opening: the re-read meets it
        seen = []
        with pytest.raises(DataError) as ei:
            for first, _ts in stream.chunks():
                seen.append(first)
                time.sleep(0.05)  # the read-ahead reaches the bad chunk meanwhile
        outcome[prefetch] = (seen, str(ei.value))
        stream.release()
    assert outcome[True] == outcome[False]
    assert outcome[True][0] == [0, 4]  # chunks 0 and 4 handed out, the error at chunk 8
    msg = outcome[True][1]
    assert words in msg and f"{_shard(root)} row {BAD_ROW}" in msg, msg


def test_an_error_of_a_later_chunk_of_the_opening_read(root):
    _tamper(root, BAD_ROW, "garbage")
    outcome = {}
    for prefetch in (False, True):
        seen = []
        with pytest.raises(DataError) as ei:
            _open(root, prefetch=prefetch,
                  on_chunk=lambda first, ts, seen=seen: (seen.append(first), time.sleep(0.05)))
        outcome[prefetch] = (seen, str(ei.value))
    assert outcome[True] == outcome[False]
    assert outcome[True][0] == [0, 4]
    assert f"{_shard(root)} row {BAD_ROW} scene" in outcome[True][1]


def test_an_error_raised_unchanged_in_its_turn():
    boom = ValueError("item 3 is bad")

    def items(stop):
        for i in range(10):
            if i == 3:
                raise boom
            yield i

    with ReadAhead(items) as r:
        assert [r.take() for _ in range(3)] == [0, 1, 2]
        with pytest.raises(ValueError) as ei:
            r.take()
        assert ei.value is boom
        with pytest.raises(StopIteration):
            r.take()


# --------------------------------------------------------------------------- threads

def test_the_thread_is_gone_after_release_close_and_abandoned_passes():
    before = _ours()
    stream = _open(workers=2)
    assert _gone(before)  # the opening read's thread and pool ended with it
    # release in the middle of a pass
    it = stream.chunks()
    next(it)
    assert _ours() - before  # reading ahead now
    stream.release()
    assert _gone(before)
    # an abandoned loop (the pass's generator is dropped)
    for _first, _ts in stream.chunks():
        break
    assert _gone(before)
    it = iter(stream)
    next(it)
    del it
    assert _gone(before)
    # a pass run to its end leaves no thread behind, a pass cut at a stop neither
    assert len(list(stream)) == 24
    assert [f for f, _ in stream.chunks(2, 9)] == [2, 4, 8]
    assert _gone(before)
    # a stream dropped in the middle of a pass
    it = stream.chunks()
    next(it)
    del it, stream
    gc.collect()
    assert _gone(before)
    # the opening read left by an error in on_chunk
    def fail(first, ts):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        _open(workers=2, on_chunk=fail)
    assert _gone(before)
    # a closed ReadAhead blocked on its bound
    r = ReadAhead(lambda stop: iter(range(100)))
    assert r.take() == 0
    assert r.close() and not r.running
    with pytest.raises(ValueError, match="closed"):
        r.take()


def test_interpreter_exit_with_a_pass_abandoned_mid_way():
    code = textwrap.dedent("""
        from passage_jax.data import open_tasks
        s = open_tasks("shipped", 256, "test", "energy", n_samples=None, chunk=2)
        held = s.chunks()
        next(held)
        s2 = open_tasks("shipped", 64, "test", "energy", n_samples=None, chunk=3)
        s2[4]  # a random-access reader left open
        print("ok")
    """)
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
    assert "Exception ignored" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert time.monotonic() - t < 60


# --------------------------------------------------------------------------- the bound

class _Decodes:
    """Counts rows decoded (``validate_row`` calls) and records the count at each chunk."""

    def __init__(self, monkeypatch):
        self.n = 0
        self.lock = threading.Lock()
        real = reader_mod.validate_row

        def counted(*a, **k):
            with self.lock:
                self.n += 1
            return real(*a, **k)

        monkeypatch.setattr(reader_mod, "validate_row", counted)

    def settle(self, want: int, timeout: float = 5.0) -> int:
        """The count once it reaches ``want`` (or the timeout), and a moment later."""
        deadline = time.monotonic() + timeout
        while self.n < want and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        return self.n


@pytest.mark.parametrize("workers", [0, 2])
def test_at_most_one_chunk_is_read_ahead(monkeypatch, workers):
    dec = _Decodes(monkeypatch)
    window = 2 * workers  # rows the decode pool may have in flight beyond the reader
    for prefetch in (False, True):
        # the opening read
        dec.n = 0
        at = []
        stream = _open(prefetch=prefetch, workers=workers,
                       on_chunk=lambda first, ts, at=at, k=2 if prefetch else 1: at.append(
                           (first, dec.settle(min(first + k * CHUNK, 24)))))
        # a re-read pass
        dec.n = 0
        again = [(first, dec.settle(min(first + (2 if prefetch else 1) * CHUNK, 24)))
                 for first, _ts in stream.chunks()]
        stream.release()
        for first, n in at + again:
            have = first + CHUNK  # the chunk handed out
            ahead = CHUNK if prefetch else 0
            assert min(have + ahead, 24) <= n <= min(have + ahead + window, 24), (prefetch, first, n)


# --------------------------------------------------------------------------- the hash

def test_each_task_is_hashed_once_per_read(monkeypatch):
    calls = []
    real = scene_mod.planner_input_sha256

    def counted(*a):
        calls.append(threading.current_thread().name)
        return real(*a)

    monkeypatch.setattr(scene_mod, "planner_input_sha256", counted)
    for prefetch in (False, True):
        del calls[:]

        def check(first, ts):  # what the score does with each task of the opening read
            for t in ts:
                assert task_input_hash(t) == t.input_sha256

        stream = _open(prefetch=prefetch, chunk=5, on_chunk=check)
        assert len(calls) == 24
        for i, t in enumerate(stream):  # a re-read: checked against the stubs, and asked again
            assert task_input_hash(t) == t.input_sha256 == stream.stubs[i].input_sha256
        assert stream[23].input_sha256 == stream.input_hashes[23]  # the chunk held
        assert len(calls) == 48
        if prefetch:  # hashed on the read-ahead threads, not the caller's
            assert all(name != threading.main_thread().name for name in calls)
        stream.release()
