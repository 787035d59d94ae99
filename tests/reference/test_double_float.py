"""The double-float reference path: pair arithmetic against exact rational arithmetic,
the precision selection, a kernel without float64, and agreement with the float64
solver and SciPy Dijkstra on every shipped cohort scene."""
from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from passage_jax.graph import OBJECTIVES, VARIANTS, GraphSpec, route_cost, route_problem
from passage_jax.precision import REFERENCE_PRECISION_ENV as PRECISION_ENV
from passage_jax.precision import resolve_reference_precision as resolve_precision
from passage_jax.reference import scipy_task_graph, solve_batch, vi_kernel
from passage_jax.reference.dfloat import (
    ADD_RTOL,
    SPLIT_RTOL,
    DFloat,
    df_add,
    df_less,
    df_minimum,
    quick_two_sum,
    split_float64,
    to_float64,
    two_sum,
)
from passage_jax.reference.vi import NO_X64_ENV, PRECISION_RTOL, double_float_inputs
from passage_jax.reference.vi_kernel import SolverConfig
from tests.reference.test_reference import batch, terrain  # the shared synthetic scenes

try:
    from passage_jax.data import load_tasks, shipped_cohort_root
    ROOT = shipped_cohort_root()
except Exception:  # the cohort is optional until it ships
    ROOT = None

SPLITS = ("validation", "calibration", "test")
F = Fraction


def _fr(x) -> Fraction:
    return Fraction(float(x))


def _random_f32(rng, n, spread=40):
    """float32 values of both signs over ``spread`` binades (exactly representable)."""
    m = rng.uniform(1.0, 2.0, n)
    e = rng.integers(-spread // 2, spread // 2, n)
    s = rng.choice([-1.0, 1.0], n)
    return (s * np.ldexp(m, e)).astype(np.float32)


def _random_pairs(rng, n):
    """Normalised pairs of positive values of a wide range (the solver adds costs >= 0)."""
    x = np.ldexp(rng.uniform(1.0, 2.0, n), rng.integers(-10, 30, n))
    return split_float64(x), x


# --------------------------------------------------------------------------- #
# pair arithmetic against Fraction
# --------------------------------------------------------------------------- #

def test_two_sum_and_quick_two_sum_are_error_free():
    rng = np.random.default_rng(0)
    a, b = _random_f32(rng, 2000), _random_f32(rng, 2000)
    s, e = jax.jit(two_sum)(jnp.asarray(a), jnp.asarray(b))
    s, e = np.asarray(s), np.asarray(e)
    big = np.where(np.abs(a) >= np.abs(b), a, b)
    small = np.where(np.abs(a) >= np.abs(b), b, a)
    qs, qe = (np.asarray(v) for v in jax.jit(quick_two_sum)(jnp.asarray(big), jnp.asarray(small)))
    for i in range(len(a)):
        exact = _fr(a[i]) + _fr(b[i])
        assert _fr(s[i]) + _fr(e[i]) == exact, (a[i], b[i])
        assert s[i] == np.float32(float(exact))  # s is the rounded sum
        assert _fr(qs[i]) + _fr(qe[i]) == exact and qs[i] == s[i]
    # naive float32 loses the error term on most of these inputs: the test can fail
    assert np.count_nonzero(e) > len(a) // 2


def test_df_add_bound_normalisation_and_order():
    rng = np.random.default_rng(1)
    x, xv = _random_pairs(rng, 1500)
    y, yv = _random_pairs(rng, 1500)
    z = jax.jit(df_add)(x, y)
    hi, lo = np.asarray(z.hi), np.asarray(z.lo)
    worst = 0.0
    for i in range(len(xv)):
        exact = _fr(x.hi[i]) + _fr(x.lo[i]) + _fr(y.hi[i]) + _fr(y.lo[i])
        got = _fr(hi[i]) + _fr(lo[i])
        rel = abs(got - exact) / exact
        worst = max(worst, float(rel))
        assert rel <= F(ADD_RTOL), (i, float(rel))
        # normalised: hi is the float32 rounding of hi + lo
        assert np.float32(float(got)) == hi[i]
    print(f"df_add worst relative error {worst:.3g} (bound {ADD_RTOL:.3g})")
    # lexicographic order is the order of the values; minimum picks the smaller value
    less = np.asarray(jax.jit(df_less)(x, y))
    mn = jax.jit(df_minimum)(x, y)
    for i in range(len(xv)):
        vx, vy = _fr(x.hi[i]) + _fr(x.lo[i]), _fr(y.hi[i]) + _fr(y.lo[i])
        assert bool(less[i]) == (vx < vy)
        assert _fr(mn.hi[i]) + _fr(mn.lo[i]) == min(vx, vy)


def test_df_add_infinity():
    inf = DFloat(np.float32([np.inf, np.inf, 5.0]), np.float32([0.0, 0.0, 1e-8]))
    fin = DFloat(np.float32([3.0, np.inf, np.inf]), np.float32([1e-9, 0.0, 0.0]))
    z = jax.jit(df_add)(inf, fin)
    assert np.all(np.isposinf(np.asarray(z.hi))) and np.all(np.asarray(z.lo) == 0)


def test_pair_sum_survives_compilation_where_float32_fails():
    """A route-like sum of 1000 step costs: float32 misses by far more than the
    contract's 1e-9, the jitted pair sum stays within its bound (so XLA kept the
    error terms of TwoSum)."""
    rng = np.random.default_rng(2)
    costs = rng.uniform(30.0, 130.0, 1000)
    pairs = split_float64(costs)
    exact = sum((_fr(h) + _fr(lo_) for h, lo_ in zip(pairs.hi, pairs.lo)), Fraction(0))

    @jax.jit
    def sums(hi, lo):
        def body(carry, x):
            acc, naive = carry
            return (df_add(DFloat(x[0], x[1]), acc), naive + x[0]), None
        zero = jnp.zeros((), jnp.float32)
        (acc, naive), _ = jax.lax.scan(body, (DFloat(zero, zero), zero), (hi, lo))
        return acc, naive

    acc, naive = sums(jnp.asarray(pairs.hi), jnp.asarray(pairs.lo))
    rel_pair = abs(_fr(acc.hi) + _fr(acc.lo) - exact) / exact
    rel_naive = abs(_fr(naive) - exact) / exact
    print(f"1000-step sum: float32 relative error {float(rel_naive):.3g}, "
          f"pair {float(rel_pair):.3g}")
    assert rel_naive > 1e-9
    assert rel_pair <= 1000 * ADD_RTOL


def test_split_and_back():
    rng = np.random.default_rng(3)
    x = np.ldexp(rng.uniform(1, 2, 3000), rng.integers(-20, 40, 3000))
    p = split_float64(x)
    assert p.hi.dtype == p.lo.dtype == np.float32
    back = to_float64(p)
    assert np.all(np.abs(back - x) <= SPLIT_RTOL * x)
    assert np.array_equal(p.hi, x.astype(np.float32))  # hi is float32(x)
    # hi + lo is exact in float64 (Fraction check on a sample)
    for i in range(0, 3000, 97):
        assert _fr(back[i]) == _fr(p.hi[i]) + _fr(p.lo[i])
    q = split_float64(np.array([np.inf, 2.5]))
    assert np.isposinf(q.hi[0]) and q.lo[0] == 0 and np.isposinf(to_float64(q)[0])
    with pytest.raises(ValueError, match="edge costs: NaN"):
        split_float64(np.array([1.0, np.nan]), where="edge costs")
    with pytest.raises(ValueError, match=r"at \(1,\) is outside the float32 range"):
        split_float64(np.array([1.0, 1e300]))


# --------------------------------------------------------------------------- #
# selection
# --------------------------------------------------------------------------- #

def test_precision_selection(monkeypatch):
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    monkeypatch.delenv(NO_X64_ENV, raising=False)
    assert resolve_precision("auto", platform="cpu") == "float64"
    assert resolve_precision("auto", platform="gpu") == "float64"
    assert resolve_precision("auto", platform="tpu") == "double_float"
    assert resolve_precision("double_float", platform="cpu") == "double_float"
    monkeypatch.setenv(PRECISION_ENV, "double_float")
    assert resolve_precision("auto", platform="cpu") == "double_float"
    assert resolve_precision("float64", platform="cpu") == "float64"  # the argument wins
    monkeypatch.setenv(PRECISION_ENV, "quad")
    with pytest.raises(ValueError, match=PRECISION_ENV):
        resolve_precision()
    with pytest.raises(ValueError, match="unknown reference precision"):
        resolve_precision("half")
    with pytest.raises(ValueError, match="unknown reference precision"):
        SolverConfig(precision="half")
    monkeypatch.setenv(PRECISION_ENV, "auto")
    monkeypatch.setenv(NO_X64_ENV, "1")
    assert resolve_precision("auto", platform="cpu") == "double_float"
    with pytest.raises(ValueError, match=NO_X64_ENV):
        resolve_precision("float64")
    monkeypatch.setenv(NO_X64_ENV, "maybe")
    with pytest.raises(ValueError, match=NO_X64_ENV):
        resolve_precision()


def test_env_var_read_at_call_time(monkeypatch):
    z, o, s, g, m, w = batch(12, 2, seed0=1)
    monkeypatch.delenv(NO_X64_ENV, raising=False)
    monkeypatch.setenv(PRECISION_ENV, "double_float")
    a = solve_batch(z, o, s, g, m, w)
    assert a.precision == "double_float" and a.precision_rtol == PRECISION_RTOL["double_float"]
    monkeypatch.setenv(PRECISION_ENV, "float64")
    b = solve_batch(z, o, s, g, m, w)
    assert b.precision == "float64" and b.precision_rtol == PRECISION_RTOL["float64"]
    np.testing.assert_allclose(a.c_star, b.c_star, rtol=1e-12)
    monkeypatch.setenv(PRECISION_ENV, "nope")
    with pytest.raises(ValueError, match=PRECISION_ENV):
        solve_batch(z, o, s, g, m, w)


# --------------------------------------------------------------------------- #
# the kernel without float64
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("chunk", [None, 1])
@pytest.mark.parametrize("x64", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_double_float_kernel_has_no_float64(chunk, x64):
    """The traced double-float kernel holds no f64 value, traced with x64 off (as it
    runs) and even with x64 on (nothing in it asks for float64)."""
    z, o, s, g, m, w = batch(10, 2, seed0=3)
    scenes = double_float_inputs(z, o, s, g, m, w)
    config = SolverConfig(precision="double_float")
    with jax.enable_x64(x64):
        jaxpr = jax.make_jaxpr(lambda sc: vi_kernel(sc, config, with_routes=True, chunk=chunk))(
            scenes)
        text = str(jaxpr)
        assert "f32[" in text and "while" in text
        assert "f64" not in text
        out = vi_kernel(scenes, config, with_routes=True, chunk=chunk)
        assert out.values.hi.dtype == np.float32
    ref = solve_batch(z, o, s, g, m, w, precision="double_float", routes=True, bucket=False)
    np.testing.assert_array_equal(to_float64(jax.device_get(out.c_star)), ref.c_star)


@pytest.mark.slow
def test_lockstep_and_one_at_a_time_agree_bitwise():
    z, o, s, g, m, w = batch(20, 5, seed0=9)
    a = solve_batch(z, o, s, g, m, w, chunk=None, routes=True, precision="double_float")
    b = solve_batch(z, o, s, g, m, w, chunk=1, routes=True, precision="double_float")
    assert a.status == b.status and np.array_equal(a.sweeps, b.sweeps)
    assert np.array_equal(a.values, b.values) and np.array_equal(a.c_star, b.c_star)
    assert all(np.array_equal(x, y) for x, y in zip(a.routes, b.routes))


def test_unreachable_and_budget_on_pairs():
    z, o = terrain(16, 3)
    o[:] = False
    o[9:12, 9:12] = True
    o[10, 10] = False
    r = solve_batch(z[None], o[None], [(0, 0)], [(10, 10)], ["energy"], [62.4], routes=True,
                    precision="double_float")
    assert r.status == ("unreachable",) and np.isposinf(r.c_star[0]) and r.routes[0] is None
    assert np.isposinf(r.values[0][0, 0]) and r.values[0][10, 10] == 0.0
    z, o, s, g, m, w = batch(32, 2, seed0=3)
    r = solve_batch(z, o, s, g, m, w, max_sweeps=2, precision="double_float")
    assert r.status == ("budget_exhausted",) * 2 and np.all(np.isnan(r.c_star))


# --------------------------------------------------------------------------- #
# the shipped cohort
# --------------------------------------------------------------------------- #

def _tasks(res, per_split=None):
    if ROOT is None or not (ROOT / f"{res}x{res}").is_dir():
        pytest.skip(f"no shipped {res}x{res} cohort")
    out = []
    for split in SPLITS:
        if not (ROOT / f"{res}x{res}" / split).is_dir():
            continue
        for o in OBJECTIVES:
            for v in VARIANTS:
                ts = load_tasks(ROOT, res, split, o, v, n_samples=None)
                out += ts if per_split is None else ts[:per_split]
    return out


def _scipy_c_star(t):
    h, w = t.elevation_m.shape
    g = scipy_task_graph(t.elevation_m, t.obstacles, t.objective, t.weight)
    d = sp_dijkstra(g, directed=True, indices=int(t.scene.start[0] * w + t.scene.start[1]))
    return float(d[t.scene.goal[0] * w + t.scene.goal[1]])


def _check_cohort(tasks, label):
    args = (np.stack([t.elevation_m for t in tasks]), np.stack([t.obstacles for t in tasks]),
            [t.scene.start for t in tasks], [t.scene.goal for t in tasks],
            [t.objective for t in tasks], [t.weight for t in tasks])
    pair = solve_batch(*args, routes=True, precision="double_float")
    assert pair.precision == "double_float"
    sci = np.array([_scipy_c_star(t) for t in tasks])
    assert all(st == "ok" for st in pair.status), label
    worst_sci = np.max(np.abs(pair.c_star - sci) / sci)
    worst_route = 0.0
    for i, t in enumerate(tasks):
        where = f"{label}: scene {t.id} {t.objective}/{t.variant}"
        r = pair.routes[i]
        assert route_problem(r, t.scene.start, t.scene.goal, t.obstacles) is None, where
        spec = GraphSpec(t.objective, t.weight)
        rc = route_cost(r, t.elevation_m, spec)
        assert spec.costs_agree(rc, pair.c_star[i]), where
        worst_route = max(worst_route, abs(rc - pair.c_star[i]) / rc)
    msg = f"{label}: {len(tasks)} tasks, double-float vs SciPy worst rel {worst_sci:.3g}"
    try:
        f64 = solve_batch(*args, precision="float64")
    except ValueError:  # PASSAGE_JAX_NO_X64: no float64 solver to compare with
        f64 = None
    if f64 is not None:
        worst_f64 = np.max(np.abs(pair.c_star - f64.c_star) / f64.c_star)
        msg += f", vs float64 {worst_f64:.3g}"
        assert worst_f64 <= 1e-12, msg
    print(f"{msg}, route recost {worst_route:.3g}")
    assert worst_sci <= 1e-12, msg
    assert worst_sci <= PRECISION_RTOL["double_float"]


@pytest.mark.parametrize("res", [pytest.param(64, marks=pytest.mark.slow),
                                 pytest.param(128, marks=pytest.mark.slow)])
def test_cohort_double_float_agrees(res):
    _check_cohort(_tasks(res), f"{res}x{res}")


@pytest.mark.slow
def test_cohort_256_sample_double_float_agrees():
    _check_cohort(_tasks(256, per_split=1), "256x256 (1 scene per split and task)")


@pytest.mark.slow
def test_cohort_256_double_float_agrees():
    _check_cohort(_tasks(256), "256x256")
