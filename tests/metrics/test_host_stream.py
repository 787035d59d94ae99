"""RouteStream: many batches scored with every rung's kernel rows pooled. Each batch's
results equal ``score_routes`` of that batch alone, bit for bit; the calls are full but
for one padded call per rung; the kernels prepared on a background thread are the ones
the batches call, compiled once."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import passage_jax.data as data
import passage_jax.metrics.host_stream as host_stream
from passage_jax.compilation import CompileCounter
from passage_jax.metrics import RouteStream, score_routes
from passage_jax.metrics.host_batch import (
    _call_rows,
    empty_args,
    kernel_args,
    kernel_keys,
    pad_args,
    plan_batch,
    read_grids,
)
from passage_jax.metrics.host_inputs import candidate_routes, reference_routes, task_table
from passage_jax.metrics.host_stream import CallInputs
from passage_jax.precision import kernel_dtype
from passage_jax.testing import candidate_set


@pytest.fixture(scope="module")
def batches():
    """Five batches of candidates (exact, other objectives', detoured, broken, and a few
    malformed) on the shipped 64² test scenes, of uneven sizes."""
    scenes = data.load_scenes(data.shipped_cohort_root(), 64, "test")[:5]
    rng = np.random.default_rng(3)
    out = []
    for k, scene in enumerate(scenes):
        tasks, cands, cstar = [], [], []
        for obj, var in sorted(scene.routes)[: 1 + k % 3]:
            task = scene.task(obj, var)
            for c in candidate_set(scene, obj, var, rng, 4 + 3 * k):
                tasks.append(task)
                cands.append(c)
                cstar.append(scene.metadata["c_star"][f"{obj}/{var}"])
        cands[-1] = None if k % 2 else np.array([[0.5, 1.0]])
        ok = np.ones(len(tasks), bool)
        ok[0] = k % 2 == 0
        out.append((cands, tasks, np.array(cstar, np.float64), ok))
    return out


def _same(a: dict, b: dict):
    assert set(a) == set(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype, k
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), k  # bit for bit, NaN where NaN
        else:
            assert list(x) == list(y), k


def test_each_batch_equals_score_routes_alone_with_fewer_calls(batches, monkeypatch):
    alone = [score_routes(*b) for b in batches]
    calls = []
    packed = host_stream.score_tasks_packed_exported

    def spy(cand, *a, geometry=True, **kw):
        calls.append((cand.cells.shape[1], geometry, cand.cells.shape[0]))
        return packed(cand, *a, geometry=geometry, **kw)

    monkeypatch.setattr(host_stream, "score_tasks_packed_exported", spy)
    stream = RouteStream()
    tickets = [stream.add(*b) for b in batches]
    assert tickets == list(range(len(batches)))
    got = stream.results()
    for a, g in zip(alone, got):
        _same(a, g)
    assert stream.results() is got  # finished: the same list again
    with pytest.raises(RuntimeError, match="finished"):
        stream.add(*batches[0])
    # every call is full but for at most one per rung, each of the rung's one shape
    by_key: dict = {}
    for length, geometry, rows in calls:
        assert rows == _call_rows(length, 1, geometry)
        by_key[(length, geometry)] = by_key.get((length, geometry), 0) + 1
    rows_of = {}
    for cands, tasks, _, _ in batches:
        refs = reference_routes(tasks, None, task_table(tasks))
        lens = [len(c) if isinstance(c, np.ndarray) and c.dtype.kind == "i" else 0 for c in cands]
        for key, n in _rows_by_key(lens, refs.lens[refs.of_record]).items():
            rows_of[key] = rows_of.get(key, 0) + n
    assert set(by_key) == set(rows_of)
    for key, n in rows_of.items():
        assert by_key[key] == -(-n // _call_rows(*key[:1], 1, key[1]))  # ceil: pooled
    # scored one batch at a time, a rung pads once per batch
    assert len(calls) < sum(len(_rows_by_key_of(b)) for b in batches)


def _rows_by_key(cand_lens, ref_lens) -> dict:
    from passage_jax.shapes import rung  # noqa: PLC0415

    out: dict = {}
    for c, r in zip(cand_lens, ref_lens):
        key = (rung(max(c, r), 32), True)
        out[key] = out.get(key, 0) + 1
    return out


def _rows_by_key_of(batch) -> dict:
    cands, tasks, _, _ = batch
    refs = reference_routes(tasks, None, task_table(tasks))
    lens = [len(c) if isinstance(c, np.ndarray) and c.dtype.kind == "i" else 0 for c in cands]
    return _rows_by_key(lens, refs.lens[refs.of_record])


def test_kernel_keys_are_the_calls_a_batch_makes(batches):
    for cands, tasks, _, _ in batches:
        table = task_table(tasks)
        refs = reference_routes(tasks, None, table)
        cr = candidate_routes(cands)
        plan = plan_batch(cr, refs, table, 2048)
        want = kernel_keys(cr.lens, refs.lens[refs.of_record])
        assert {(b.length, b.pairwise) for b in plan.blocks} == want
    # long routes: the candidate's own rung, without the geometry
    assert kernel_keys([10, 5000, 40], [3000, 20, 40], 2048) == {(64, True), (32, False), (6144, False)}


def test_empty_args_have_the_leaves_of_kernel_args(batches):
    cands, tasks, cstar, ok = batches[1]
    table = task_table(tasks)
    refs = reference_routes(tasks, None, table)
    cr = candidate_routes(cands)
    plan = plan_batch(cr, refs, table, 2048)
    inputs = CallInputs(table, refs, cstar, ok, cr.well_formed, kernel_dtype())
    for block in plan.blocks:
        real = kernel_args(block, read_grids(block, table), inputs)
        empty = empty_args(block.length, block.pairwise, kernel_dtype())
        assert jax.tree_util.tree_structure(real) == jax.tree_util.tree_structure(empty)
        for a, b in zip(jax.tree_util.tree_leaves(real), jax.tree_util.tree_leaves(empty)):
            assert a.dtype == b.dtype and a.shape[1:] == b.shape[1:] and b.shape[0] == 0
        padded = pad_args(real, len(block.records) + 3)
        task = padded[2]
        assert list(np.asarray(task.c_star)[-3:]) == [1.0] * 3  # padding rows: c* 1, all else 0
        assert not np.asarray(padded[0].length)[-3:].any() and not np.asarray(padded[3])[-3:].any()


def test_prepared_kernels_compile_once_before_the_calls(batches):
    """prepare() compiles the batches' kernels on its thread; the calls then compile
    nothing more (a rung and pixel size no other test uses, so nothing is cached)."""
    stream = RouteStream(pixel_size_m=29.0)
    keys = set()
    for cands, tasks, _, _ in batches:
        keys |= set(_rows_by_key_of((cands, tasks, None, None)))
    with CompileCounter() as prep:
        thread = stream.prepare(keys)
        thread.join()
    assert prep.stats.compiled + prep.stats.cache_hits >= len(keys)
    assert stream.prepare(keys) is None  # nothing more to compile
    with CompileCounter() as calls:
        for b in batches:
            stream.add(*b)
        got = stream.results()
    assert calls.stats.compilations == 0
    reference = RouteStream(pixel_size_m=29.0)
    for b in batches:
        reference.add(*b)
    for a, g in zip(reference.results(), got):
        _same(a, g)
