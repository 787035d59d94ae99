"""Kernels without float64 (PASSAGE_JAX_NO_X64=1): the float32 paths against the float64 ones.

Each test runs the float64 path, then sets the variable (monkeypatch) and runs the same call
again in one process; the x64 state is part of JAX's jit cache key, and the tests check that
the second run really computed in float32 (its geometry differs in the last float32 bits) and
that what is stated exact is exact: validity flags and counts, rates, the predicted cost and
regret (recomputed in float64 on the host), the bootstrap means (error-free float32 slices).
Independent references: NumPy/SciPy recosting and percentiles, exact rational sums.
"""
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import passage_jax.data as data
from passage_jax.graph import OBJECTIVES, route_cost
from passage_jax.metrics import METRIC_KEYS, primary_metrics, primary_metrics_jax, score_routes
from passage_jax.metrics.aggregate import GEOMETRY_RTOL_FLOAT32, precision_statement
from passage_jax.precision import (
    NO_X64_ENV,
    float64_available,
    kernel_dtype,
    kernel_precision,
    kernel_x64,
    no_x64,
    pairwise_sum,
)
from passage_jax.reference import vi
from passage_jax.stats.draws import multiplicity_matrix
from passage_jax.stats.kernels import (
    MEAN_RTOL_FLOAT32,
    QUANTILE_RTOL_FLOAT32,
    block_mean_draws,
    coarse_counts,
    exact_block_mean_draws,
    slice_columns,
    sliced_products,
    weighted_quantile_draws,
)
from passage_jax.stats.kernels import precision_statement as stats_precision
from passage_jax.testing import candidate_set, make_scene
from passage_jax.trust.axes import (
    efficiency_axis,
    geographic_axis,
    odd_boundary_axis,
    stability_axis,
)

FLOATS = ("predicted_cost", "regret", "assd", "h95", "path_iou")
GEOMETRY = ("assd", "h95", "path_iou")


@pytest.fixture
def both_modes(monkeypatch):
    """run(fn) -> (fn() with float64 kernels, fn() with x64 off), in that order."""
    def run(fn):
        monkeypatch.delenv(NO_X64_ENV, raising=False)
        assert kernel_precision() == "float64"
        a = fn()
        monkeypatch.setenv(NO_X64_ENV, "1")
        assert kernel_precision() == "float32"
        b = fn()
        return a, b
    return run


# --------------------------------------------------------------------------- #
# the switch
# --------------------------------------------------------------------------- #

def test_switch_and_reference_share_it(monkeypatch):
    monkeypatch.delenv(NO_X64_ENV, raising=False)
    assert not no_x64() and not vi.no_x64() and float64_available("cpu")
    assert kernel_precision("cpu") == "float64" and kernel_dtype("cpu") == np.float64
    assert kernel_precision("tpu") == "float32" and not float64_available("TPU")
    with kernel_x64("cpu"):
        assert jnp.zeros(1, float).dtype == jnp.float64
    with kernel_x64("tpu"):
        assert jnp.zeros(1, float).dtype == jnp.float32
    assert vi.NO_X64_ENV == NO_X64_ENV
    for raw in ("1", "true", "YES"):
        monkeypatch.setenv(NO_X64_ENV, raw)
        assert no_x64() and vi.no_x64() and kernel_precision("cpu") == "float32"
        with jax.enable_x64(True), kernel_x64():  # explicit off, even inside an x64 scope
            assert jnp.zeros(1, float).dtype == jnp.float32
        assert vi.resolve_precision("auto", "cpu") == "double_float"
    monkeypatch.setenv(NO_X64_ENV, "maybe")
    with pytest.raises(ValueError, match=NO_X64_ENV):
        kernel_precision()


def test_pairwise_sum_bounds_the_float32_error():
    """1 followed by 2**20 values of 2**-24 (exact sum 1.0625): a sequential float32 sum
    stays at 1 (each addition rounds away), the pairwise sum is within two float32 ulps."""
    n = 1 << 20
    x = np.full(n + 1, 2.0 ** -24, np.float32)
    x[0] = 1.0
    exact = 1.0 + n * 2.0 ** -24
    with jax.enable_x64(False):
        got = float(jax.jit(pairwise_sum)(x))
        seq = np.float32(0)
        for v in x[:4096]:  # sequential rounding, first 4096 terms
            seq = np.float32(seq + v)
        assert seq == 1.0
        assert abs(got - exact) <= 2.0 ** -22  # two float32 ulps of the sum (sequential: 2**-4)
        # random data: within ceil(log2 n) eps of sum |x|
        r = np.random.default_rng(0).normal(size=(3, 1001)).astype(np.float32)
        got = np.asarray(pairwise_sum(r, axis=1))
        assert pairwise_sum(np.zeros((2, 0), np.float32)).shape == (2,)
    ref = np.array([math.fsum(map(float, row)) for row in r])
    bound = 10 * 2.0 ** -24 * np.abs(r.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(got - ref) <= bound)


def test_jit_caches_keep_the_modes_apart(both_modes):
    """The same jitted reducer, called with float64 arrays in both modes: its second call
    must be a float32 trace (x64 state is part of the cache key)."""
    rng = np.random.default_rng(1)
    per = {"regret": rng.random(50), "assd": rng.random(50), "h95": rng.random(50),
           "valid_path": rng.random(50) > 0.2, "connected_path": np.ones(50, bool),
           "obstacle_violation": np.zeros(50, bool), "obstacle_traversals": np.zeros(50, np.int64)}

    def call():
        with kernel_x64():
            return jax.device_get(primary_metrics_jax(per))

    a, b = both_modes(call)
    assert a["regret_median"].dtype == np.float64 and b["regret_median"].dtype == np.float32
    np.testing.assert_allclose(b["assd_mean"], a["assd_mean"], rtol=1e-6)
    assert int(a["n_path_valid"]) == int(b["n_path_valid"])


# --------------------------------------------------------------------------- #
# metrics
# --------------------------------------------------------------------------- #

def _shipped_material():
    scenes = data.load_scenes(data.shipped_cohort_root(), 64, "test")
    assert scenes
    rng = np.random.default_rng(11)
    tasks, cstar, cands = [], [], []
    for scene in scenes[:4]:
        for (obj, var) in sorted(scene.routes):
            task = scene.task(obj, var)
            for c in candidate_set(scene, obj, var, rng, 6):
                tasks.append(task)
                cstar.append(scene.metadata["c_star"][f"{obj}/{var}"])
                cands.append(c)
    t0 = tasks[0]
    for c in (None, np.array([[0.0, 1.0]]), np.array([[-1, 0], [0, 0]], np.int32), t0.route):
        tasks.append(t0)
        cstar.append(cstar[0])
        cands.append(c)
    cstar = np.array(cstar, np.float64)
    cstar[-1] = 0.0  # a valid route whose regret is undefined
    ok = np.ones(len(tasks), bool)
    ok[2] = False
    return cands, tasks, cstar, ok


def _synthetic_material():
    rng = np.random.default_rng(5)
    tasks, cands, cstar = [], [], []
    for s, n in enumerate((40, 56)):
        scene, cs = make_scene(rng, n, f"syn{s}")
        for obj in OBJECTIVES[:2]:
            task = scene.task(obj, "obstacles")
            for c in candidate_set(scene, obj, "obstacles", rng, 8):
                tasks.append(task)
                cands.append(c)
                cstar.append(cs[(obj, "obstacles")])
    return cands, tasks, np.array(cstar), np.ones(len(tasks), bool)


def _compare_scores(a, b):
    assert set(a) == set(b)
    for k in METRIC_KEYS + ("malformed",):
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype, k
        if k not in FLOATS:
            assert np.array_equal(x, y), k
            continue
        assert np.array_equal(np.isnan(x), np.isnan(y)), k
        if k in GEOMETRY:
            np.testing.assert_allclose(y, x, rtol=GEOMETRY_RTOL_FLOAT32, err_msg=k)
        else:  # host float64 recosting: the order of float64 additions only
            np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12, err_msg=k)
    assert list(a["problem"]) == list(b["problem"])


@pytest.mark.parametrize("material", ["shipped", "synthetic"])
@pytest.mark.parametrize("long_route", [pytest.param(2048, marks=pytest.mark.slow), 24])
def test_score_routes_without_float64(both_modes, material, long_route):
    """Shipped cohort (64x64 test scenes) and synthetic terrain; ``long_route=24`` sends
    most tasks through the long-route path (kernel without geometry + host geometry)."""
    cands, tasks, cstar, ok = _shipped_material() if material == "shipped" else _synthetic_material()
    a, b = both_modes(lambda: score_routes(cands, tasks, cstar, ok, long_route=long_route))
    _compare_scores(a, b)
    valid = b["valid_path"]
    assert 0.2 < valid.mean() < 0.98 and (~valid).sum() >= 3
    # the float32 path really ran in float32: its fused-kernel geometry is not bit-equal
    fused = valid & (np.array([len(np.asarray(c)) if c is not None else 0 for c in cands])
                     <= long_route)
    if long_route == 2048:
        assert np.any(a["assd"][fused] != b["assd"][fused])
    # regret against an independent recosting (graph stage, NumPy, sequential sum)
    for i in np.flatnonzero(valid & (cstar > 0)):
        t = tasks[i]
        cost = route_cost(np.asarray(cands[i]), t.elevation_m, t.objective, t.weight)
        assert b["predicted_cost"][i] == pytest.approx(cost, rel=1e-13)
        assert b["regret"][i] == pytest.approx((cost - cstar[i]) / cstar[i], rel=1e-9, abs=1e-13)
    assert np.all(b["regret"][~valid & (cstar > 0)] == 999999.0)
    np.testing.assert_array_equal(b["predicted_cost"][~valid], 1e6 * cstar[~valid])

    ma, mb = (primary_metrics(r, valid_mask=np.arange(len(cands)) % 5 != 0) for r in (a, b))
    assert ma.keys() == mb.keys()
    for k in ("success_rate", "obstacle_violation_rate", "connected_rate", "n_tasks",
              "n_path_valid", "n_regret_undefined", "mean_traversals_given_violation"):
        assert ma[k] == mb[k] or (math.isnan(ma[k]) and math.isnan(mb[k])), k  # rates exact
    for k in ("regret_median", "regret_p90"):
        assert mb[k] == pytest.approx(ma[k], rel=1e-12, abs=1e-12), k
    for k in ("assd_mean", "h95_mean"):
        assert mb[k] == pytest.approx(ma[k], rel=GEOMETRY_RTOL_FLOAT32), k
    for k, v in ma["regret_summary"].items():
        assert mb["regret_summary"][k] == pytest.approx(v, rel=1e-12, abs=1e-12), k


def test_primary_metrics_host_path_matches_numpy(monkeypatch):
    """The no-x64 aggregates are NumPy's definitions (independent re-derivation)."""
    rng = np.random.default_rng(3)
    n = 301
    valid = rng.random(n) > 0.3
    per = {"regret": np.where(valid, rng.gamma(1.0, 0.05, n), 999999.0),
           "assd": np.where(valid, rng.random(n), np.nan), "h95": np.where(valid, rng.random(n), np.nan),
           "valid_path": valid, "connected_path": valid | (rng.random(n) > 0.5),
           "obstacle_violation": ~valid & (rng.random(n) > 0.5),
           "obstacle_traversals": rng.integers(0, 5, n)}
    per["obstacle_traversals"] = np.where(per["obstacle_violation"], per["obstacle_traversals"] + 1, 0)
    per["regret"][7] = np.nan
    mask = rng.random(n) > 0.1
    monkeypatch.setenv(NO_X64_ENV, "1")
    m = primary_metrics(per, valid_mask=mask)
    r = per["regret"][mask & ~np.isnan(per["regret"])]
    assert m["regret_median"] == np.percentile(r, 50) and m["regret_p90"] == np.percentile(r, 90)
    assert m["regret_summary"]["geomean"] == pytest.approx(np.expm1(np.mean(np.log1p(r))), rel=1e-13)
    assert m["success_rate"] == np.count_nonzero(valid & mask) / np.count_nonzero(mask)
    assert m["assd_mean"] == pytest.approx(per["assd"][valid & mask].mean(), rel=1e-14)
    assert m["n_regret_undefined"] == int(mask[7])
    st = precision_statement()
    assert st["kernel_precision"] == "float32" and st["cost_precision"] == "float64"
    monkeypatch.delenv(NO_X64_ENV)
    assert precision_statement()["geometry_rtol"] == 0.0


# --------------------------------------------------------------------------- #
# trust axes
# --------------------------------------------------------------------------- #

def test_trust_axes_without_float64(both_modes):
    rng = np.random.default_rng(2)
    p90 = rng.random(3) + 0.1
    h, r = rng.normal(0.2, 1, 193), np.where(rng.random(211) > 0.1, rng.normal(0, 1, 211), np.nan)
    vals = rng.random((3, 400))
    vals[1, ::7] = np.nan
    strat = rng.normal(size=400)
    to, tp = rng.random(40) + 1, rng.random(30) + 0.5

    def axes():
        return [stability_axis(p90), stability_axis([0.0, 0.0, 0.0]), stability_axis([-1.0, 1.0]),
                geographic_axis(h, r), odd_boundary_axis(vals, strat, top_quantile=0.2),
                efficiency_axis(to, tp)]

    a, b = both_modes(axes)
    for x, y in zip(a, b):
        assert x.details.pop("precision") == "float64" and y.details.pop("precision") == "float64-host"
        assert x.fires == y.fires and x.available == y.available, x.axis
        assert y.value == pytest.approx(x.value, rel=1e-13, abs=1e-15), x.axis
        assert x.details.keys() == y.details.keys()
    assert b[1].value == 0.0 and b[2].value == math.inf
    assert b[4].details["n_boundary"] == a[4].details["n_boundary"] == 80
    assert b[4].details["cut"] == np.percentile(strat, 80)


# --------------------------------------------------------------------------- #
# statistics
# --------------------------------------------------------------------------- #

def _exact_mean(mrow, sums_col, counts_col):
    num = sum(Fraction(int(m)) * Fraction(float(s)) for m, s in zip(mrow, sums_col))
    den = sum(int(m) * int(c) for m, c in zip(mrow, counts_col))
    return float(num / den) if den else math.nan


@pytest.mark.parametrize("K", [7, 120, 3000])
def test_error_free_block_means(K):
    """Sliced float32 products reproduce the exact rational mean (to float64 rounding) and
    the float64 kernel within MEAN_RTOL_FLOAT32 of the series' scale; wide dynamic range,
    negative values, empty blocks and a draw with no weight included."""
    rng = np.random.default_rng(K)
    D = 64
    sums = np.stack([rng.normal(size=K) * 1e3, rng.gamma(0.3, 1e-7, K), -rng.random(K) * 1e12,
                     np.where(rng.random(K) > 0.5, 1.0, 0.0) * 3.0], axis=1)
    counts = rng.integers(0, 40, (K, 4)).astype(np.float64)
    counts[:, 3] = sums[:, 3] / 3.0  # successes: counts 0/1
    mult = multiplicity_matrix(K, D, K).astype(np.float64)
    mult[0] = 0
    mult[0, 0] = K
    counts[0] = 0  # draw 0 gives every series no weight
    sliced = slice_columns(np.concatenate([sums, counts], axis=1), K)
    with jax.enable_x64(True):
        ref = np.asarray(block_mean_draws(mult, sums, counts))
    with jax.enable_x64(False):
        assert sliced_products(mult, sliced.slices).dtype == jnp.float32
        got = exact_block_mean_draws(mult, sliced.slices, sliced)
    assert got.dtype == np.float64 and np.all(np.isnan(got[0])) and np.all(np.isnan(ref[0]))
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    scale = np.nanmax(np.abs(ref), axis=0)
    fin = ~np.isnan(ref)
    assert fin[1:, :3].all()
    assert np.all((np.abs(got - ref) <= MEAN_RTOL_FLOAT32 * scale)[fin])
    for d in (1, 2, D - 1):
        for j in range(4):
            e = _exact_mean(mult[d], sums[:, j], counts[:, j])
            assert (math.isnan(got[d, j]) if math.isnan(e)
                    else got[d, j] == pytest.approx(e, rel=4e-16, abs=0)), (d, j)


def test_slice_columns_checks_its_inputs():
    with pytest.raises(ValueError, match=r"entry \(1, 0\) is nan"):
        slice_columns(np.array([[1.0], [np.nan]]), 4)
    with pytest.raises(ValueError, match="no exact float32 slice"):
        slice_columns(np.ones((2, 1)), 2 ** 23 + 1)
    with pytest.raises(ValueError, match="blocks, columns"):
        slice_columns(np.ones(3), 4)
    assert slice_columns(np.ones((2, 1)), 2 ** 23).bits == 1
    s = slice_columns(np.array([[0.0, 5.0], [0.0, -3.25]]), 1000)
    assert s.bits == 14 and np.all(np.abs(s.slices) < 2 ** 14)
    np.testing.assert_array_equal((s.slices * s.scales[:, None, :]).sum(axis=0), [[0, 5], [0, -3.25]])


def test_quantile_draws_in_float32():
    """The quantile kernel as the float32 path runs it: within QUANTILE_RTOL_FLOAT32 of the
    float64 draws (same order statistics, float32 values and positions)."""
    rng = np.random.default_rng(4)
    K, n, D = 40, 900, 32
    blk_of = rng.integers(0, K, n).astype(np.int32)
    vals = [rng.gamma(2.0, 0.05, n) + 1.0, rng.normal(size=n) * 10]
    order = [np.argsort(v, kind="stable") for v in vals]
    v = np.stack([x[o] for x, o in zip(vals, order)])
    b = np.stack([blk_of[o] for o in order]).astype(np.int32)
    seg = 64
    P = -(-n // seg) * seg
    vp = np.concatenate([v, np.repeat(v[:, -1:], P - n, axis=1)], axis=1)
    bp = np.concatenate([b, np.full((2, P - n), K, np.int32)], axis=1)
    coarse = coarse_counts(bp, K, seg)
    mult = multiplicity_matrix(K, D, 9).astype(np.float64)
    qs = (0.5, 0.9)
    with jax.enable_x64(True):
        ref = np.asarray(weighted_quantile_draws(mult, vp, bp, coarse, qs, seg))
    with jax.enable_x64(False):
        got = weighted_quantile_draws(mult, vp, bp, coarse, qs, seg)
        assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=QUANTILE_RTOL_FLOAT32,
                               atol=QUANTILE_RTOL_FLOAT32 * np.abs(ref).max())
    # an independent check of one draw: NumPy quantile of the materialised resample
    w = mult[3].astype(int)[blk_of]
    np.testing.assert_allclose(ref[3, 0], np.quantile(np.repeat(vals[0], w), qs), rtol=1e-13)


def test_stats_precision_statement(monkeypatch):
    monkeypatch.delenv(NO_X64_ENV, raising=False)
    assert stats_precision()["mean_rtol"] == 0.0
    monkeypatch.setenv(NO_X64_ENV, "1")
    st = stats_precision()
    assert st["kernel_precision"] == "float32" and st["quantile_precision"] == "float32"
    assert st["mean_rtol"] == MEAN_RTOL_FLOAT32 and st["quantile_rtol"] == QUANTILE_RTOL_FLOAT32
