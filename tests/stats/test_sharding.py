"""Block bootstrap and randomization test split across devices along the draws axis.

tests/conftest.py asks XLA for 4 host CPU devices; the sharded path must give the unsharded
results (to 1e-15 relative, NaN where NaN) from the same multiplicity rows, and the kernels
must really run on all 4 devices.
"""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from passage_jax.stats import (
    block_randomization_test,
    compare_primary_metrics,
    multiplicity_matrix,
    paired_bootstrap,
    seed_mean_bootstrap,
)
from passage_jax.stats import draws as bs
from passage_jax.stats.bootstrap import encode_blocks
from passage_jax.stats.draws import draw_placement, resample_draws
from passage_jax.stats.kernels import block_mean_draws, coarse_counts, weighted_quantile_draws
from passage_jax.testing import kernel_tol

N_DEV = 4
pytestmark = pytest.mark.skipif(
    jax.device_count() != N_DEV,
    reason=f"needs {N_DEV} devices (tests/conftest.py sets XLA_FLAGS="
           f"--xla_force_host_platform_device_count={N_DEV} before jax starts; "
           f"this process sees {jax.device_count()} {jax.default_backend()} device(s))")

SEEDS = (1234, 2026, 3407)
COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter")


def draws_sharding():
    return NamedSharding(Mesh(np.asarray(jax.devices()), ("draws",)), PartitionSpec("draws", None))


def same(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    assert x.shape == y.shape
    np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
    np.testing.assert_allclose(x, y, rtol=kernel_tol(1e-15), atol=0, equal_nan=True)


def same_result(r0, r1):
    d0, d1 = r0.to_dict(), r1.to_dict()
    flat0, flat1 = _flatten(d0), _flatten(d1)
    assert flat0.keys() == flat1.keys()
    for k in flat0:
        a, b = flat0[k], flat1[k]
        if isinstance(a, float):
            same(a, b)
        else:
            assert a == b, k


def _flatten(d, pre=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{pre}{k}/"))
        else:
            out[f"{pre}{k}"] = v
    return out


def naive_draw(x, bi, mrow, q):
    """One draw by materialising the resample with NumPy."""
    idx = np.concatenate([np.repeat(np.flatnonzero(bi == k), c) for k, c in enumerate(mrow)])
    v = x[idx]
    v = v[np.isfinite(v)]
    if v.size == 0:
        return np.nan
    return np.mean(v) if q is None else np.percentile(v, 100 * q)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    n = 300
    a = rng.gamma(2.0, 1.0, n)
    b = a + rng.normal(0.1, 0.5, n)
    a[rng.random(n) < 0.15] = np.nan
    b[rng.random(n) < 0.1] = np.nan
    blocks = [f"t{k}" for k in rng.integers(0, 23, n)]
    return a, b, blocks


@pytest.mark.parametrize("statistic,q", [("mean", None), ("median", 0.5), ("p90", 0.9)])
@pytest.mark.parametrize("with_blocks", [True, False])
def test_paired_bootstrap_sharded_equals_unsharded(data, statistic, q, with_blocks):
    a, b, blocks = data
    blk = blocks if with_blocks else None
    D = 1001   # not a multiple of 4: the last chunk is padded and the padding dropped
    kw = dict(statistic=statistic, blocks=blk, n_bootstrap=D, seed=5, nan_policy="omit",
              return_draws=True)
    r0 = paired_bootstrap(a, b, **kw)
    r1 = paired_bootstrap(a, b, sharding=draws_sharding(), **kw)
    r2 = paired_bootstrap(a, b, sharding="auto", **kw)
    assert r1.draws.shape == (D,)
    same(r0.draws, r1.draws)
    same(r0.draws, r2.draws)
    same_result(r0, r1)
    same_result(r0, r2)
    assert np.isfinite(r1.draws).all() and r1.ci_available
    # the draws come from the same multiplicity rows: check some against materialised resamples
    bi, labels = encode_blocks(blk, a.shape[0])
    K = a.shape[0] if labels is None else len(labels)
    M = multiplicity_matrix(K, D, 5)
    for d in (0, 1, 500, D - 1):
        want = naive_draw(a, bi, M[d], q) - naive_draw(b, bi, M[d], q)
        np.testing.assert_allclose(r1.draws[d], want, rtol=kernel_tol(1e-12), atol=kernel_tol(1e-13))


def test_undefined_draws_survive_sharding():
    # few blocks, sparse finite values: some draws leave a method empty -> NaN, interval unavailable
    rng = np.random.default_rng(2)
    n = 40
    blocks = [f"b{i % 5}" for i in range(n)]
    a = rng.random(n)
    a[[i for i in range(n) if i % 5 != 0]] = np.nan   # only block b0 has finite values of a
    b = rng.random(n)
    kw = dict(statistic="median", blocks=blocks, n_bootstrap=203, seed=1, nan_policy="omit",
              return_draws=True)
    r0 = paired_bootstrap(a, b, **kw)
    r1 = paired_bootstrap(a, b, sharding="auto", **kw)
    assert r0.n_undefined_draws > 0 and not r0.ci_available
    same(r0.draws, r1.draws)
    same_result(r0, r1)


@pytest.mark.parametrize("statistic", ["mean", "p90"])
def test_seed_mean_bootstrap_sharded(data, statistic):
    a, b, blocks = data
    rng = np.random.default_rng(4)
    A = {s: a + rng.normal(0, 0.1, a.shape) for s in SEEDS}
    B = {s: b + rng.normal(0, 0.1, b.shape) for s in SEEDS}
    kw = dict(statistic=statistic, blocks=blocks, n_bootstrap=517, seed=9, nan_policy="omit",
              return_draws=True)
    r0 = seed_mean_bootstrap(A, B, **kw)
    r1 = seed_mean_bootstrap(A, B, sharding=draws_sharding(), **kw)
    same(r0.draws, r1.draws)
    same_result(r0, r1)
    for s in SEEDS:
        same(r0.per_seed[s].draws, r1.per_seed[s].draws)


def make_primary(rng, n, shift=0.0):
    ids = [f"s{i}/elevation/free" for i in range(n)]
    out = {}
    for s in SEEDS:
        v = rng.random(n) < 0.8
        v[:2] = True
        out[s] = {"task_id": ids,
                  "regret": np.where(v, rng.gamma(2, size=n) * 0.01 + shift, 999999.0),
                  "assd": np.where(v, rng.random(n), np.nan),
                  "h95": np.where(v, 3 * rng.random(n), np.nan),
                  "success": v, "obstacle_violation": (~v) & (rng.random(n) < 0.5),
                  "valid_path": v}
    return out


def test_compare_primary_metrics_sharded():
    rng = np.random.default_rng(8)
    n = 240
    A, B = make_primary(rng, n), make_primary(rng, n, shift=0.005)
    blocks = [f"c{i % 17}" for i in range(n)]
    kw = dict(n_bootstrap=402, seed=3, return_draws=True)
    c0 = compare_primary_metrics(A, B, blocks, **kw)
    c1 = compare_primary_metrics(A, B, blocks, sharding=draws_sharding(), **kw)
    c2 = compare_primary_metrics(A, B, blocks, sharding="auto", **kw)
    for c in (c1, c2):
        for m in c0.deltas:
            same(c0.deltas[m].draws, c.deltas[m].draws)
            for s in SEEDS:
                same(c0.deltas[m].per_seed[s].draws, c.deltas[m].per_seed[s].draws)
        same_result(c0.deltas["regret_p90"], c.deltas["regret_p90"])
        assert _flatten(c0.to_dict()).keys() == _flatten(c.to_dict()).keys()
        for k, v in _flatten(c0.to_dict()).items():
            w = _flatten(c.to_dict())[k]
            if isinstance(v, float):
                same(v, w)
            else:
                assert v == w, k


@pytest.mark.parametrize("K,chunk", [(5, None), (14, 7)])
def test_randomization_test_sharded(K, chunk):
    # K=5: exact, 2^5 + 1 = 33 swap rows; K=14: 61 random patterns in chunks of 7 (padded to 8)
    rng = np.random.default_rng(K)
    n = 70
    A, B = make_primary(rng, n), make_primary(rng, n, shift=0.003)
    blocks = [f"g{i % K}" for i in range(n)]
    kw = dict(n_random=60, seed=2, chunk=chunk)
    r0 = block_randomization_test(A, B, blocks, **kw)
    r1 = block_randomization_test(A, B, blocks, sharding=draws_sharding(), **kw)
    r2 = block_randomization_test(A, B, blocks, sharding="auto", **kw)
    assert r0.exact == (K <= 12)
    for r in (r1, r2):
        assert r.to_dict().keys() == r0.to_dict().keys()
        for m in r0.p_values:
            same(r0.p_values[m], r.p_values[m])
            same(r0.observed[m], r.observed[m])
            assert r0.reasons[m] == r.reasons[m]
        assert (r.n_patterns, r.exact, r.seed) == (r0.n_patterns, r0.exact, r0.seed)


@pytest.mark.needs_float64("the draw chunks are sized for float64 rows")
def test_resample_draws_chunks_run_on_every_device(monkeypatch):
    """Each chunk reaches the kernels split over the 4 devices, sums and sorted values whole on
    every device; odd chunk sizes are padded to a multiple of 4 and trimmed."""
    seen = []

    def spy(kernel):
        def wrapped(mult, *rest, **kw):
            out = kernel(mult, *rest, **kw)
            seen.append((kernel.__name__, mult.shape, mult.sharding,
                         [r.sharding for r in rest if isinstance(r, jax.Array)], out.sharding))
            return out
        return wrapped

    monkeypatch.setattr(bs, "block_mean_draws", spy(block_mean_draws))
    monkeypatch.setattr(bs, "weighted_quantile_draws", spy(weighted_quantile_draws))
    rng = np.random.default_rng(3)
    n, K, D = 500, 31, 23
    bi = rng.integers(0, K, n).astype(np.int32)
    bi[:K] = np.arange(K)
    x = [rng.random(n), rng.gamma(2, 1, n)]
    m0, q0 = resample_draws(bi, K, x, x, (0.5, 0.9), D, seed=7, chunk=5)
    assert [s[1] for s in seen] == [(5, K)] * 10      # unsharded: chunks of 5 as before
    seen.clear()
    m1, q1 = resample_draws(bi, K, x, x, (0.5, 0.9), D, seed=7, chunk=5, sharding="auto")
    same(m0, m1)
    same(q0, q1)
    assert m1.shape == (D, 2) and q1.shape == (D, 2, 2)
    assert {s[0] for s in seen} == {"block_mean_draws", "weighted_quantile_draws"}
    assert len(seen) == 2 * 5    # 5 chunks (5,5,5,5,3), both kernels
    for name, shape, msh, rest, osh in seen:
        assert shape == (8, K), name                      # 5 rows padded to 8 = 2 per device
        assert len(msh.device_set) == N_DEV and not msh.is_fully_replicated
        assert msh.shard_shape(shape) == (2, K)
        for r in rest:
            assert len(r.device_set) == N_DEV and r.is_fully_replicated
        assert len(osh.device_set) == N_DEV and not osh.is_fully_replicated


def test_kernels_shard_the_draws_axis_without_collectives():
    rng = np.random.default_rng(0)
    K, D, J, P, seg = 12, 16, 2, 64, 16
    place = draw_placement("auto")
    assert place is not None and place[2] == N_DEV
    dsh, rep, _ = place
    with jax.enable_x64(True):
        mult = rng.integers(0, 3, (D, K)).astype(np.float64)
        sums, counts = rng.random((K, 3)), rng.integers(1, 4, (K, 3)).astype(np.float64)
        vals = np.sort(rng.random((J, P)), axis=1)
        blk = rng.integers(0, K, (J, P)).astype(np.int32)
        coarse = coarse_counts(blk, K, seg)
        jm = jax.device_put(mult, dsh)
        js, jc = jax.device_put(sums, rep), jax.device_put(counts, rep)
        jv, jb, jco = (jax.device_put(a, rep) for a in (vals, blk, coarse))

        out = block_mean_draws(jm, js, jc)
        assert len(out.sharding.device_set) == N_DEV
        assert sorted(s.data.shape for s in out.addressable_shards) == [(D // N_DEV, 3)] * N_DEV
        assert {s.device for s in out.addressable_shards} == set(jax.devices())
        # each device holds its own rows of the result
        for s in out.addressable_shards:
            rows = s.index[0]
            np.testing.assert_allclose(np.asarray(s.data), (mult[rows] @ sums) / (mult[rows] @ counts),
                                       rtol=kernel_tol(1e-14))
        hlo = block_mean_draws.lower(jm, js, jc).compile().as_text()
        assert not [c for c in COLLECTIVES if c in hlo]

        for sg in (seg, None):
            q = weighted_quantile_draws(jm, jv, jb, jco, (0.5, 0.9), sg)
            assert sorted(s.data.shape for s in q.addressable_shards) == [(D // N_DEV, J, 2)] * N_DEV
            ref = weighted_quantile_draws(jax.numpy.asarray(mult),
                                          *map(jax.numpy.asarray, (vals, blk, coarse)),
                                          (0.5, 0.9), sg)
            same(np.asarray(ref), np.asarray(q))
            hlo = weighted_quantile_draws.lower(jm, jv, jb, jco, (0.5, 0.9), sg).compile().as_text()
            assert not [c for c in COLLECTIVES if c in hlo]


def test_draw_placement_forms_and_errors():
    assert draw_placement(None) is None
    dsh, rep, nsh = draw_placement(draws_sharding())
    assert nsh == N_DEV and rep.is_fully_replicated and len(rep.device_set) == N_DEV
    # a 2x2 mesh splitting the draws over one mesh axis only: 2 shards of draws
    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 2), ("draws", "other"))
    assert draw_placement(NamedSharding(mesh, PartitionSpec("draws", None)))[2] == 2
    assert draw_placement(NamedSharding(mesh, PartitionSpec(("draws", "other"))))[2] == 4
    one = SingleDeviceSharding(jax.devices()[1])
    assert draw_placement(one)[2] == 1
    with pytest.raises(ValueError, match="only the draws axis"):
        draw_placement(NamedSharding(Mesh(np.asarray(jax.devices()), ("b",)), PartitionSpec(None, "b")))
    with pytest.raises(ValueError, match="'auto'"):
        draw_placement("all")
    with pytest.raises(ValueError, match="jax.sharding.Sharding"):
        draw_placement(jax.devices())
    with pytest.raises(ValueError, match="sharding"):
        paired_bootstrap(np.ones(4), np.ones(4), sharding="everywhere")


def test_two_by_two_mesh_and_single_device_give_the_same_draws(data):
    a, b, blocks = data
    kw = dict(statistic="median", blocks=blocks, n_bootstrap=99, seed=13, nan_policy="omit",
              return_draws=True)
    r0 = paired_bootstrap(a, b, **kw)
    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 2), ("draws", "other"))
    r1 = paired_bootstrap(a, b, sharding=NamedSharding(mesh, PartitionSpec("draws", None)), **kw)
    r2 = paired_bootstrap(a, b, sharding=SingleDeviceSharding(jax.devices()[2]), **kw)
    same(r0.draws, r1.draws)
    same(r0.draws, r2.draws)


def test_runner_compare_shard_draws_gives_the_same_file(tmp_path):
    pytest.importorskip("score_support")
    from score_support import runs

    from passage_jax.evaluate.compare import compare_runs

    R = runs()
    r0 = compare_runs(R["bfs"], R["exact"], tmp_path / "a.json", n_bootstrap=101, bootstrap_seed=3)
    r1 = compare_runs(R["bfs"], R["exact"], tmp_path / "b.json", n_bootstrap=101, bootstrap_seed=3,
                      shard_draws=True)
    f0 = _flatten({k: v for k, v in r0.items() if k != "created_utc"})
    f1 = _flatten({k: v for k, v in r1.items() if k != "created_utc"})
    assert f0.keys() == f1.keys()
    n_float = 0
    for k, v in f0.items():
        if isinstance(v, float):
            same(v, f1[k])
            n_float += 1
        else:
            assert v == f1[k], k
    assert n_float > 20 and r0["blocks"]["uncertainty_status"] == "available"
