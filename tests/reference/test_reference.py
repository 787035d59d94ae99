"""Exact references: value iteration vs independent solvers, routes, statuses,
qualification, jit/sharding invariance."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from passage_jax.data.scene import Scene
from passage_jax.graph import (
    MODEL_INDEX,
    MOVES,
    OBJECTIVES,
    VARIANTS,
    GraphSpec,
    edge_cost_field_np,
    route_cost,
    route_problem,
)
from passage_jax.reference import (
    SceneInputs,
    SolverConfig,
    VIResult,
    astar,
    descend_route,
    dijkstra,
    qualification_failures,
    qualify_scene,
    qualify_scenes,
    scipy_graph,
    scipy_task_graph,
    solve_batch,
    solve_scene,
    solve_tasks,
    vi_kernel,
)
from passage_jax.reference.vi_kernel import init, step, terminate

WEIGHTS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}


def terrain(n, seed, relief=0.15):
    """Smooth multi-scale terrain in metres (30 m cells) plus wall-like obstacles."""
    rng = np.random.default_rng(seed)
    z = np.zeros((n, n))
    x = np.linspace(0, 1, n)
    for s in (2, 4, 8, 16):
        g = rng.normal(size=(s + 1, s + 1))
        t = x * s
        i = np.minimum(t.astype(int), s - 1)
        f = t - i
        a = g[i][:, i] * (1 - f) + g[i][:, i + 1] * f
        b = g[i + 1][:, i] * (1 - f) + g[i + 1][:, i + 1] * f
        z += (a * (1 - f)[:, None] + b * f[:, None]) * relief * 30.0 * n / s
    obst = np.zeros((n, n), bool)
    for _ in range(max(2, n // 6)):
        r, c = rng.integers(0, n, 2)
        L = int(rng.integers(2, max(3, n // 3)))
        if rng.random() < 0.5:
            obst[r, c:c + L] = True
        else:
            obst[r:r + L, c] = True
    return 800.0 + z, obst


def batch(n, count, seed0=0):
    zs, obs, starts, goals, models, weights = [], [], [], [], [], []
    for i in range(count):
        z, o = terrain(n, seed0 + i)
        rng = np.random.default_rng(100 + seed0 + i)
        s = tuple(int(v) for v in rng.integers(0, n // 4, 2))
        g = tuple(int(v) for v in n - 1 - rng.integers(0, n // 4, 2))
        o[s] = o[g] = False
        m = OBJECTIVES[i % 3]
        if (i // 3) % 2 == 0:
            o = np.zeros_like(o)  # "free" variant
        zs.append(z), obs.append(o), starts.append(s), goals.append(g)
        models.append(m), weights.append(WEIGHTS[m])
    return np.stack(zs), np.stack(obs), starts, goals, models, weights


def scipy_costs_from(C, source_or_target, reverse=False):
    """Independent SciPy csgraph Dijkstra on the graph of the NumPy edge field."""
    _, h, w = C.shape
    idx = np.arange(h * w).reshape(h, w)
    g = scipy_graph(C)
    if reverse:
        g = g.T.tocsr()
    src = int(idx[source_or_target])
    return sp_dijkstra(g, directed=True, indices=src).reshape(h, w)


@pytest.fixture(scope="module")
def solved32():
    z, o, s, g, m, w = batch(32, 12)
    res = solve_batch(z, o, s, g, m, w, routes=True)
    return (z, o, s, g, m, w), res, res.routes


def test_vi_equals_search_and_scipy(solved32):
    (z, o, s, g, m, w), res, _ = solved32
    assert all(st == "ok" for st in res.status)
    for i in range(len(z)):
        C = edge_cost_field_np(z[i], o[i], m[i], w[i])
        a = astar(z[i], o[i], s[i], g[i], m[i], w[i])
        d = dijkstra(z[i], o[i], s[i], g[i], m[i], w[i])
        ref = scipy_costs_from(C, s[i])[g[i]]
        for other in (a.cost, d.cost, ref):
            assert abs(res.c_star[i] - other) <= 1e-9 * other, (i, res.c_star[i], other)
        assert res.c_star[i] > 0


def test_vi_whole_field_equals_backward_dijkstra(solved32):
    (z, o, s, g, m, w), res, _ = solved32
    for i in (0, 4, 11):
        C = edge_cost_field_np(z[i], o[i], m[i], w[i])
        back = scipy_costs_from(C, g[i], reverse=True)  # cost-to-go of every cell
        V = res.values[i]
        assert np.array_equal(np.isinf(V), np.isinf(back))
        fin = np.isfinite(back)
        np.testing.assert_allclose(V[fin], back[fin], rtol=1e-12, atol=0)
        assert V[g[i]] == 0.0


def test_vi_routes_legal_and_cost_matches(solved32):
    (z, o, s, g, m, w), res, routes = solved32
    for i in range(len(z)):
        r = routes[i]
        assert route_problem(r, s[i], g[i], o[i]) is None
        rc = route_cost(r, z[i], m[i], w[i])
        assert GraphSpec(m[i], w[i]).costs_agree(rc, res.c_star[i])
        assert abs(rc - res.c_star[i]) <= 1e-12 * rc
        # V strictly decreases along the descent
        assert np.all(np.diff(res.values[i][r[:, 0], r[:, 1]]) < 0)


def test_strategies_agree():
    z, o, s, g, m, w = batch(16, 6, seed0=7)
    base = solve_batch(z, o, s, g, m, w, strategy="jacobi")
    r = solve_batch(z, o, s, g, m, w, strategy="sweep")
    assert r.status == base.status
    np.testing.assert_allclose(r.c_star, base.c_star, rtol=1e-12)
    fin = np.isfinite(base.values)
    np.testing.assert_allclose(r.values[fin], base.values[fin], rtol=1e-12)
    # line sweeps need far fewer sweeps than plain Jacobi on these routes
    assert r.directional_sweeps.max() < base.sweeps.max()
    assert not base.directional_sweeps.any()
    with pytest.raises(ValueError, match="unknown strategy"):
        solve_batch(z, o, s, g, m, w, strategy="scan")


def test_hand_worked_3x3():
    # a 100 m bump in the middle: the diagonal through it costs more than going round
    z = np.zeros((3, 3))
    z[1, 1] = 100.0
    o = np.zeros((3, 3), bool)
    res = solve_batch(z[None], o[None], [(0, 0)], [(2, 2)], ["elevation"], [62.4], routes=True)
    routes = res.routes
    r2 = 30.0 * math.sqrt(2.0)
    expect_V = np.array([
        [30.0 + (r2 + 30.0), r2 + 30.0, 60.0],
        [r2 + 30.0, r2 + 62.4, 30.0],
        [60.0, 30.0, 0.0],
    ])
    np.testing.assert_allclose(res.values[0], expect_V, rtol=1e-12)
    assert res.c_star[0] == pytest.approx(60.0 + r2, rel=1e-12)
    # tie between (0,1) and (1,0): the first move in MOVES order, (0,+1), wins
    assert routes[0].tolist() == [[0, 0], [0, 1], [1, 2], [2, 2]]
    C = edge_cost_field_np(z, o, "elevation", 62.4)
    assert descend_route(C, res.values[0], (0, 0), (2, 2)).tolist() == routes[0].tolist()
    a = astar(z, o, (0, 0), (2, 2), "elevation", 62.4)
    assert a.cost == pytest.approx(60.0 + r2, rel=1e-12)


def test_unreachable_goal():
    z, o = terrain(16, 3)
    o[:] = False
    o[9:12, 9:12] = True
    o[10, 10] = False  # goal enclosed by a ring of obstacles
    res = solve_batch(z[None], o[None], [(0, 0)], [(10, 10)], ["energy"], [62.4], routes=True)
    assert res.status == ("unreachable",)
    assert np.isinf(res.c_star[0]) and res.routes[0] is None and res.converged[0]
    for fn in (astar, dijkstra):
        r = fn(z, o, (0, 0), (10, 10), "energy", 62.4)
        assert r.status == "unreachable" and r.route is None and math.isinf(r.cost)
        assert r.expansions == 16 * 16 - 9  # everything outside the ring was expanded


def test_budget_exhaustion():
    z, o, s, g, m, w = batch(32, 2, seed0=3)
    res = solve_batch(z, o, s, g, m, w, max_sweeps=2, check_every=2)
    assert isinstance(res, VIResult) and res.routes is None
    assert res.status == ("budget_exhausted", "budget_exhausted")
    assert np.all(np.isnan(res.c_star)) and not res.converged.any()
    r = astar(z[0], o[0], s[0], g[0], m[0], w[0], max_expansions=10)
    assert r.status == "budget_exhausted" and r.expansions == 10 and math.isnan(r.cost)
    full = astar(z[0], o[0], s[0], g[0], m[0], w[0])
    again = astar(z[0], o[0], s[0], g[0], m[0], w[0], max_expansions=full.expansions)
    assert again.status == "ok" and again.cost == full.cost


def test_search_counters_and_heuristic():
    z, o, s, g, m, w = batch(32, 3, seed0=11)
    for i in range(3):
        a = astar(z[i], o[i], s[i], g[i], m[i], w[i])
        d = dijkstra(z[i], o[i], s[i], g[i], m[i], w[i])
        assert a.expansions <= d.expansions <= 32 * 32
        assert a.queue_operations > a.expansions and a.live_states >= 1
        assert route_problem(a.route, s[i], g[i], o[i]) is None
        assert route_cost(a.route, z[i], m[i], w[i]) == a.cost  # same start-to-goal sums
        assert route_cost(d.route, z[i], m[i], w[i]) == d.cost


def _scenes(z, o, s, g, m, w) -> SceneInputs:
    return SceneInputs(elevation_m=jnp.asarray(z), obstacles=jnp.asarray(o),
                       start=jnp.asarray(s, jnp.int32), goal=jnp.asarray(g, jnp.int32),
                       model_index=jnp.asarray([MODEL_INDEX[x] for x in m], jnp.int32),
                       weight=jnp.asarray(w))


@pytest.mark.slow  # a larger sibling of a default test (the suite stays under five minutes)
def test_jit_and_nonjit_agree():
    z, o, s, g, m, w = batch(8, 3, seed0=5)
    with jax.enable_x64(True):
        scenes = _scenes(z, o, s, g, m, w)
        jitted = vi_kernel(scenes)
        with jax.disable_jit():
            eager = vi_kernel(scenes)
        np.testing.assert_allclose(np.asarray(eager.c_star), np.asarray(jitted.c_star), rtol=1e-12)
        fin = np.isfinite(np.asarray(jitted.values))
        np.testing.assert_allclose(np.asarray(eager.values)[fin], np.asarray(jitted.values)[fin],
                                   rtol=1e-12)
        assert np.array_equal(np.asarray(eager.status), np.asarray(jitted.status))


@pytest.mark.parametrize("strategy", ["sweep", "jacobi"])
def test_step_jitted_and_unjitted_agree(strategy):
    """The per-scene step function, run jitted and un-jitted, gives the same state."""
    z, o, s, g, m, w = batch(12, 1, seed0=4)
    config = SolverConfig(strategy=strategy, check_every=3)
    with jax.enable_x64(True):
        scene = jax.tree_util.tree_map(lambda a: a[0], _scenes(z, o, s, g, m, w))
        problem, state = init(scene, config)
        jit_step = jax.jit(step, static_argnames="config")
        eager_state = jitted_state = state
        for _ in range(3):
            jitted_state = jit_step(problem, jitted_state, config=config)
            with jax.disable_jit():
                eager_state = step(problem, eager_state, config)
            assert jitted_state.phase == eager_state.phase
            assert int(jitted_state.sweeps) == int(eager_state.sweeps)
            assert bool(jitted_state.changed) == bool(eager_state.changed)
            assert bool(terminate(jitted_state, config)) == bool(terminate(eager_state, config))
            fin = np.isfinite(np.asarray(jitted_state.values))
            assert np.array_equal(fin, np.isfinite(np.asarray(eager_state.values)))
            np.testing.assert_allclose(np.asarray(eager_state.values)[fin],
                                       np.asarray(jitted_state.values)[fin], rtol=1e-12)
        # the goal keeps its value 0 and every block counts its sweeps
        assert float(jitted_state.values[g[0]]) == 0.0
        assert int(jitted_state.sweeps) == 9


def test_solve_scene_equals_batch_item():
    z, o, s, g, m, w = batch(12, 3, seed0=6)
    flat = solve_batch(z, o, s, g, m, w, bucket=False, routes=True)
    with jax.enable_x64(True):
        scenes = _scenes(z, o, s, g, m, w)
        for i in range(3):
            one = jax.jit(solve_scene, static_argnames=("config", "with_routes"))(
                jax.tree_util.tree_map(lambda a, i=i: a[i], scenes), SolverConfig(),
                with_routes=True)
            assert float(one.c_star) == pytest.approx(flat.c_star[i], rel=1e-12)
            assert int(one.sweeps) == flat.sweeps[i]
            n = int(one.route_length)
            assert np.array_equal(np.asarray(one.route)[:n], flat.routes[i])
            assert np.all(np.asarray(one.route)[n:] == -1)


@pytest.mark.slow  # a larger sibling of a default test (the suite stays under five minutes)
def test_vmap_over_kernel_equals_flat_batch():
    z, o, s, g, m, w = batch(8, 4, seed0=2)
    flat = solve_batch(z, o, s, g, m, w, bucket=False)
    with jax.enable_x64(True):
        nested = jax.tree_util.tree_map(lambda a: a.reshape((2, 2) + a.shape[1:]),
                                        _scenes(z, o, s, g, m, w))
        r = jax.vmap(vi_kernel)(nested)
        np.testing.assert_allclose(np.asarray(r.c_star).ravel(), flat.c_star, rtol=1e-12)


@pytest.mark.slow  # the split into calls is also checked by test_compile_counts by default
def test_chunked_equals_lockstep():
    z, o, s, g, m, w = batch(20, 4, seed0=9)
    a = solve_batch(z, o, s, g, m, w, chunk=None, routes=True)
    b = solve_batch(z, o, s, g, m, w, chunk=1, routes=True)
    c = solve_batch(z, o, s, g, m, w, chunk=2)
    np.testing.assert_allclose(b.c_star, a.c_star, rtol=1e-12)
    np.testing.assert_allclose(c.c_star, a.c_star, rtol=1e-12)
    assert a.status == b.status == c.status
    assert all(np.array_equal(x, y) for x, y in zip(a.routes, b.routes))
    # every scene stops at its own convergence, in lock step as well
    assert np.array_equal(b.sweeps, a.sweeps) and np.array_equal(c.sweeps, a.sweeps)


@pytest.mark.parametrize("max_sweeps", [pytest.param(5, marks=pytest.mark.slow), 6,
                                        pytest.param(7, marks=pytest.mark.slow)])
def test_lockstep_budget_equals_one_at_a_time(max_sweeps):
    # budgets that stop some scenes in either phase while others still run
    z, o, s, g, m, w = batch(32, 8, seed0=0)
    a = solve_batch(z, o, s, g, m, w, chunk=None, max_sweeps=max_sweeps)
    b = solve_batch(z, o, s, g, m, w, chunk=1, max_sweeps=max_sweeps)
    assert a.status == b.status and "budget_exhausted" in a.status
    assert np.array_equal(a.sweeps, b.sweeps) and np.array_equal(a.converged, b.converged)
    assert np.array_equal(a.directional_sweeps, b.directional_sweeps)
    assert np.all(a.sweeps <= max_sweeps)
    fin = np.isfinite(b.values)
    assert np.array_equal(np.isfinite(a.values), fin)
    np.testing.assert_allclose(a.values[fin], b.values[fin], rtol=1e-12)


def test_sharded_batch_equals_unsharded():
    if jax.device_count() < 2:
        pytest.skip("needs several devices (tests/conftest.py forces 4 CPU devices)")
    from jax.sharding import NamedSharding, PartitionSpec
    mesh = jax.make_mesh((jax.device_count(),), ("b",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, PartitionSpec("b"))
    z, o, s, g, m, w = batch(24, 6, seed0=21)
    plain = solve_batch(z, o, s, g, m, w, routes=True)
    sharded = solve_batch(z, o, s, g, m, w, routes=True, sharding=sharding)
    np.testing.assert_allclose(sharded.c_star, plain.c_star, rtol=1e-12)
    assert sharded.status == plain.status
    for a, b in zip(plain.routes, sharded.routes):
        assert np.array_equal(a, b)


def test_scipy_graph_hand_worked():
    # a flat 2x3 grid whose middle cell of the second row is an obstacle
    o = np.array([[False, False, False], [False, True, False]])
    g = scipy_task_graph(np.zeros((2, 3)), o, "distance", 0.0)
    assert g.shape == (6, 6)
    d = 30.0 * math.sqrt(2.0)
    # from (0, 0): right 30, down 30, diagonal into the obstacle is not an edge
    assert g[0, 1] == 30.0 and g[0, 3] == 30.0 and g[0, 4] == 0.0
    # from (1, 0): up 30, up-right diagonal, nothing into (1, 1)
    assert g[3, 0] == 30.0 and g[3, 1] == d and g[3, 4] == 0.0
    assert g.nnz == sum(1 for u in range(6) for v in range(6) if g[u, v] > 0)
    # every edge of the graph is a legal move of the NumPy field, and only those
    C = edge_cost_field_np(np.zeros((2, 3)), o, "distance", 0.0)
    assert g.nnz == int(np.isfinite(C).sum())
    with pytest.raises(ValueError, match="non-positive"):
        scipy_graph(np.where(np.isfinite(C), 0.0, np.inf))


def test_bad_input_is_refused():
    z, o, s, g, m, w = batch(16, 1)
    o = o.copy()
    o[0][s[0]] = True
    with pytest.raises(ValueError, match="batch item 0: start .* obstacle"):
        solve_batch(z, o, s, g, m, w)
    with pytest.raises(ValueError, match="outside"):
        solve_batch(z, o * False, [(16, 0)], g, m, w)
    with pytest.raises(ValueError, match="unknown cost model"):
        solve_batch(z, o * False, s, g, ["nope"], w)
    with pytest.raises(ValueError, match="on an obstacle"):
        astar(z[0], o[0], s[0], g[0], m[0], w[0])


# --------------------------------------------------------------------------- #
# qualification
# --------------------------------------------------------------------------- #

def make_scene(n=24, seed=0, sid="0000000042"):
    z, o = terrain(n, seed)
    start, goal = (1, 2), (n - 2, n - 3)
    o[start] = o[goal] = False
    routes = {}
    for obj in OBJECTIVES:
        for var in VARIANTS:
            obst = o if var == "obstacles" else np.zeros_like(o)
            routes[(obj, var)] = astar(z, obst, start, goal, obj, WEIGHTS[obj]).route
    meta = {"solvers": {obj: {"weight": WEIGHTS[obj]} for obj in OBJECTIVES}}
    return Scene(id=sid, resolution=n, split="validation",
                 elevation_norm=np.zeros((n, n), np.float32), elevation_m=z, obstacles=o,
                 start=start, goal=goal, routes=routes, metadata=meta, file="mem.parquet", row=0)


def detour(route, obstacles):
    """A legal, longer variant of a route: one step out to a free side cell and back."""
    r = [tuple(p) for p in route.tolist()]
    h, w = obstacles.shape
    for i in range(len(r) - 1):
        a, b = r[i], r[i + 1]
        for dr, dc in MOVES.tolist():
            c = (a[0] + dr, a[1] + dc)
            if (0 <= c[0] < h and 0 <= c[1] < w and not obstacles[c] and c not in (a, b)
                    and max(abs(c[0] - b[0]), abs(c[1] - b[1])) == 1):
                return np.asarray(r[:i + 1] + [c] + r[i + 1:], np.int32)
    raise AssertionError("no detour found")


def test_qualification_passes_on_exact_labels():
    scene = make_scene()
    for solver in ("vi", "astar"):
        q = qualify_scene(scene, solver=solver, cross_check=True)
        assert set(q) == {f"{o}/{v}" for o in OBJECTIVES for v in VARIANTS}
        assert qualification_failures(q) == []
        d = q["energy/obstacles"].to_dict()
        assert d["qualified"] and d["reason"] is None and d["work"] > 0
        assert abs(d["route_cost"] - d["c_star"]) <= 1e-9 * d["c_star"]


def test_legal_but_not_optimal_route_fails_naming_scene():
    scene = make_scene(sid="0000000777")
    bad = detour(scene.routes[("slope_uphill", "obstacles")], scene.obstacles)
    assert route_problem(bad, scene.start, scene.goal, scene.obstacles) is None
    scene.routes[("slope_uphill", "obstacles")] = bad
    q = qualify_scene(scene)
    fails = qualification_failures(q)
    assert len(fails) == 1
    assert "0000000777" in fails[0] and "not optimal" in fails[0]
    bad_q = q["slope_uphill/obstacles"]
    assert not bad_q.qualified and bad_q.route_cost > bad_q.c_star
    # the independent policy uses the solver's own route, so it qualifies
    with pytest.raises(ValueError, match="reference_cohort_id"):
        qualify_scene(scene, "independent_analytic_reference")
    q2 = qualify_scene(scene, "independent_analytic_reference", reference_cohort_id="own-v1")
    assert qualification_failures(q2) == []


def test_illegal_and_unreachable_fail_qualification():
    scene = make_scene(sid="0000000555")
    r = scene.routes[("elevation", "free")].copy()
    scene.routes[("elevation", "free")] = r[::2] if len(r) > 3 else r[:1]
    scene.obstacles = scene.obstacles.copy()
    g = scene.goal
    scene.obstacles[g[0] - 1:g[0] + 2, g[1] - 1:g[1] + 2] = True
    scene.obstacles[g] = False
    q = qualify_scene(scene, cross_check=True)
    assert "not legal" in q["elevation/free"].reason
    for o in OBJECTIVES:
        assert "unreachable" in q[f"{o}/obstacles"].reason
        assert "0000000555" in q[f"{o}/obstacles"].reason
        assert q[f"{o}/obstacles"].to_dict()["c_star"] is None


def test_qualify_scenes_batches_many():
    scenes = [make_scene(20, seed=i, sid=f"{i:010d}") for i in range(3)]
    qs = qualify_scenes(scenes, cross_check=True)
    assert len(qs) == 3 and all(qualification_failures(q) == [] for q in qs)
    single = qualify_scene(scenes[1])
    for k in single:
        assert qs[1][k].c_star == pytest.approx(single[k].c_star, rel=1e-12)


def test_solve_tasks_orders_and_mixes_sizes():
    scenes = [make_scene(20, seed=1, sid="0000000001"), make_scene(16, seed=2, sid="0000000002")]
    tasks = [s.task(o, v) for s in scenes for o in OBJECTIVES for v in VARIANTS]
    vi = solve_tasks(tasks)
    cpu = solve_tasks(tasks, "dijkstra")
    for t, a, b in zip(tasks, vi, cpu):
        assert a.status == b.status == "ok"
        assert abs(a.c_star - b.c_star) <= 1e-9 * b.c_star
        assert route_problem(a.route, t.scene.start, t.scene.goal, t.obstacles) is None
        assert a.solver == "value_iteration" and b.solver == "dijkstra"


def test_result_records_its_precision():
    """VIResult says which arithmetic computed c* (the default follows
    resolve_precision: float64 on CPU, double-float under PASSAGE_JAX_NO_X64)."""
    from passage_jax.reference import PRECISION_RTOL, resolve_precision
    z, o, s, g, m, w = batch(8, 2, seed0=13)
    res = solve_batch(z, o, s, g, m, w)
    assert res.precision == resolve_precision()
    assert res.precision_rtol == PRECISION_RTOL[res.precision]
    pair = solve_batch(z, o, s, g, m, w, precision="double_float")
    assert pair.precision == "double_float" and pair.precision_rtol == 1e-10
    np.testing.assert_allclose(pair.c_star, res.c_star, rtol=1e-12)
    with pytest.raises(ValueError, match="unknown reference precision"):
        solve_batch(z, o, s, g, m, w, precision="float16")
