"""Stable shapes (issue 22): scoring and value iteration compile a bounded number of
kernels, whatever the number and sizes of the chunks, a repeated call compiles nothing,
and padding never changes a result.

Compilations are counted with :class:`passage_jax.compilation.CompileCounter` (every
executable built or fetched from the persistent cache) after ``jax.clear_caches()``, so
the counts do not depend on what other tests compiled before.
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

from passage_jax.compilation import CompileCounter
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.graph import route_cost
from passage_jax.metrics import METRIC_KEYS, host, host_batch, host_numpy, score_routes
from passage_jax.reference import TASK_KEYS, qualify_scenes, solve_batch, vi
from passage_jax.shapes import rung, rung_below, rungs, rungs_of
from passage_jax.testing import candidate_set, kernel_tol

CHUNKS = (5, 23, 64)  # tasks per chunk: three different sizes


@pytest.fixture(scope="module")
def scenes():
    root = shipped_cohort_root()
    return {n: [s for split in ("test", "validation", "calibration")
                for s in load_scenes(root, n, split, n_samples=None, workers=0)]
            for n in (64, 128)}


@pytest.fixture(scope="module")
def material(scenes):
    """92 tasks of shipped 64² and 128² scenes (all six task keys), each with one
    candidate of varied length and kind (exact, another objective's route, detoured,
    broken) and its released route as reference."""
    rng = np.random.default_rng(22)
    mixed = [s for pair in zip(scenes[64], scenes[128]) for s in pair]
    tasks, cands, c_star = [], [], []
    for i in range(sum(CHUNKS)):
        s = mixed[i % len(mixed)]
        key = TASK_KEYS[(i // len(mixed) + i) % len(TASK_KEYS)]
        t = s.task(*key.split("/"))
        tasks.append(t)
        cands.append(candidate_set(s, t.objective, t.variant, rng, 8)[i % 8])
        c_star.append(s.metadata["c_star"][key])
    return tasks, cands, np.asarray(c_star, np.float64)


def _chunks(n_items):
    out, lo = [], 0
    for k in CHUNKS:
        out.append(slice(lo, min(lo + k, n_items)))
        lo += k
    return out


def test_the_ladder():
    assert rungs(2048, 32) == (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
    assert rungs(1024) == (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
    for n in range(1, 5000):
        r = rung(n)
        assert r >= n and r in rungs(r) and (n <= 64 and r < 2 * n or r <= n * 3 / 2)
        assert rung(n, 32) == max(32, r)
        assert rung_below(n) <= n < rung_below(n) * 2
    assert list(rungs_of([0, 1, 31, 33, 65, 97, 3000], 32)) == [32, 32, 32, 64, 96, 128, 3072]
    assert host._bucket(33) == 64 and host._bucket(2049) == 3072  # the metric kernels' rungs


def test_vi_call_sizes():
    assert vi.call_sizes(1, 256 * 256) == [1]  # a planner's single scene stays unpadded
    assert vi.call_sizes(17, 256 * 256) == [32]
    assert vi.call_sizes(64, 256 * 256) == [64]
    assert vi.call_sizes(65, 256 * 256) == [64, 1]
    assert vi.call_sizes(200, 256 * 256) == [64, 64, 64, 8]
    assert vi.call_sizes(300, 64 * 64) == [384] and vi.call_sizes(3000, 64 * 64) == [1024] * 2 + [1024]
    assert vi.call_sizes(9, 64 * 64, n_dev=4) == [16]  # 3 per device -> rung 4, on 4 devices
    assert vi.call_sizes(0, 64 * 64) == []
    for cells in (64 * 64, 128 * 128, 256 * 256, 100 * 100):
        cap = rung_below(vi.VI_CALL_CELLS // cells)
        seen = {s for b in range(1, 3 * cap) for s in vi.call_sizes(b, cells)}
        assert seen == set(rungs(cap))  # the stated bound: one kernel per rung up to the cap


def test_score_compiles_once_per_length_rung(material):
    tasks, cands, c_star = material
    ok = np.ones(len(tasks), bool)
    parts = _chunks(len(tasks))
    lengths = [max(len(np.asarray(c).reshape(-1, 2)), len(t.route)) for c, t in zip(cands, tasks)]
    want = len(set(rungs_of(lengths, host_batch.MIN_BUCKET)))  # rungs that occur
    assert 3 <= want <= len(rungs(host.LONG_ROUTE, host_batch.MIN_BUCKET)) == 12

    def score_all():
        return [score_routes(cands[p], tasks[p], c_star[p], ok[p],
                             references=[t.route for t in tasks[p]]) for p in parts]

    jax.clear_caches()
    with CompileCounter() as first:
        outs = score_all()
    # one kernel per length rung, shared by every chunk, whatever its size
    assert first.stats.compilations == want, first.stats
    with CompileCounter() as again:
        score_all()
    assert again.stats.compilations == 0, again.stats

    # padding never changes a result: a task's metrics are the same bit for bit whether
    # its call's other rows are other tasks or padding (one call of all 92 tasks) ...
    whole = score_routes(cands, tasks, c_star, ok)
    for p, got in zip(parts, outs):
        for k in METRIC_KEYS + ("malformed",):
            np.testing.assert_array_equal(got[k], whole[k][p], err_msg=k)
    # ... and they are the unpadded NumPy computation's: validity, cost, regret, geometry
    tol = kernel_tol(1e-12)
    for i, (c, t) in enumerate(zip(cands, tasks)):
        a = np.asarray(c).reshape(-1, 2)
        if not whole["valid_path"][i]:
            assert whole["regret"][i] == 999999.0 and np.isnan(whole["assd"][i])
            continue
        cost = route_cost(a, t.elevation_m, t.objective, t.weight)
        np.testing.assert_allclose(whole["predicted_cost"][i], cost, rtol=tol)
        np.testing.assert_allclose(whole["regret"][i], (cost - c_star[i]) / c_star[i],
                                   rtol=tol, atol=tol)
        np.testing.assert_allclose([whole[k][i] for k in ("assd", "h95", "path_iou")],
                                   host_numpy.route_geometry_host(a, t.route), rtol=tol, atol=tol)
    assert 0 < whole["valid_path"].sum() < len(tasks)


def _arrays(ts):
    return (np.stack([t.elevation_m for t in ts]), np.stack([t.obstacles for t in ts]),
            [t.scene.start for t in ts], [t.scene.goal for t in ts], [t.objective for t in ts],
            [t.weight for t in ts])


def test_value_iteration_compiles_once_per_rung(scenes):
    pool = scenes[64]
    key = "energy/obstacles"
    parts = [slice(0, 5), slice(5, 28), slice(8, 72)]  # 5, 23 and 64 scenes
    sizes = [p.stop - p.start for p in parts]
    bound = len(rungs(rung_below(vi.VI_CALL_CELLS // (64 * 64))))
    assert bound == 15

    def qualify_all():
        return [qualify_scenes(pool[p], keys=[key], cross_check=False) for p in parts]

    jax.clear_caches()
    with CompileCounter() as first:
        quals = qualify_all()
    assert first.stats.compilations == len({rung(n) for n in sizes}) <= bound, first.stats
    with CompileCounter() as again:
        qualify_all()
    assert again.stats.compilations == 0, again.stats
    # admission, audit and the exact planner share these kernels: solve_batch on batches
    # of the same rungs (any sizes) compiles nothing more
    with CompileCounter() as shared:
        for n in (6, 7, 17, 30, 64):  # rungs 8, 8, 32, 32, 64
            solve_batch(*_arrays([s.task(*key.split("/")) for s in pool[:n]]), routes=True)
    assert shared.stats.compilations == 0, shared.stats
    for p, q in zip(parts, quals):
        assert all(d[key].qualified for d in q)
        np.testing.assert_allclose([d[key].c_star for d in q],
                                   [s.metadata["c_star"][key] for s in pool[p]], rtol=1e-9)


@pytest.mark.parametrize("precision,chunks", [
    ("float64", ("auto", None)), pytest.param("double_float", ("auto",), marks=pytest.mark.slow)])
def test_padded_and_split_batches_equal_the_unpadded_one(scenes, monkeypatch, precision, chunks):
    """Padding scenes (skipped one at a time, converged in lock step) and the split into
    calls leave every scene's values, c*, sweep counts, statuses and routes as one
    unpadded call computes them, bit for bit."""
    if precision == "float64" and vi.no_x64():
        pytest.skip("PASSAGE_JAX_NO_X64=1: the float64 path is refused")
    ts = [s.task(*TASK_KEYS[i % 6].split("/")) for i, s in enumerate(scenes[64][:11])]
    args = _arrays(ts)
    ref = solve_batch(*args, routes=True, bucket=False, precision=precision)
    monkeypatch.setattr(vi, "VI_CALL_CELLS", 4 * 64 * 64)  # a cap of 4 scenes: calls of 4, 4, 3 + 1
    assert vi.call_sizes(11, 64 * 64) == [4, 4, 4]
    for chunk in chunks:
        got = solve_batch(*args, routes=True, precision=precision, chunk=chunk)
        base = ref if chunk == "auto" else solve_batch(*args, routes=True, bucket=False,
                                                       precision=precision, chunk=None)
        assert got.status == base.status
        for f in ("values", "c_star", "sweeps", "directional_sweeps", "converged"):
            np.testing.assert_array_equal(getattr(got, f), getattr(base, f), err_msg=f)
        assert all(np.array_equal(a, b) for a, b in zip(got.routes, base.routes))
