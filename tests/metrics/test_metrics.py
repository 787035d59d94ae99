"""Per-task decoded-path metrics (docs/contract.md §4) against plain NumPy/SciPy, hand-worked
cases, jit/no-jit and vmap/per-item equality."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial import cKDTree

from passage_jax.data.scene import Scene
from passage_jax.graph import MODEL_INDEX, OBJECTIVES, route_cost
from passage_jax.metrics import (
    METRIC_KEYS,
    Route,
    RouteMetrics,
    TaskArrays,
    padded_route_cost,
    primary_metrics,
    route_geometry,
    score_routes,
    score_task,
    score_tasks,
)
from passage_jax.testing import candidate_set, make_scene

#: why a test is skipped under PASSAGE_JAX_NO_X64=1 (tests/conftest.py)
GEOMETRY_F64 = ("float64 geometry to 1e-12 (the float32 geometry is checked against the float64 "
                "path within GEOMETRY_RTOL_FLOAT32 in tests/test_no_x64.py)")
RTOL = 1e-12


# --------------------------------------------------------------------------- #
# Independent per-route reference (plain NumPy / SciPy)
# --------------------------------------------------------------------------- #

def np_metrics(cand, task, c_star, ok, ref=None):
    ref = np.asarray(task.route if ref is None else ref)
    obst = np.asarray(task.obstacles, bool)
    h, w = obst.shape
    out = dict(connected_path=False, obstacle_traversals=0)
    try:
        a = np.asarray(cand)
        well = cand is not None and (a.size == 0 or (a.ndim == 2 and a.shape[1] == 2
                                                      and a.dtype.kind in "iu"))
    except (ValueError, TypeError):
        well = False
    if well and a.size:
        cells = [tuple(int(v) for v in p) for p in a]
        inb = [0 <= r < h and 0 <= c < w for r, c in cells]
        out["obstacle_traversals"] = sum(1 for (r, c), b in zip(cells, inb) if b and obst[r, c])
        steps = [max(abs(r2 - r1), abs(c2 - c1)) for (r1, c1), (r2, c2) in zip(cells, cells[1:])]
        out["connected_path"] = (len(cells) >= 2 and all(inb) and all(s == 1 for s in steps)
                                 and cells[0] == tuple(task.scene.start)
                                 and cells[-1] == tuple(task.scene.goal))
    out["obstacle_violation"] = out["obstacle_traversals"] > 0
    valid = out["connected_path"] and not out["obstacle_violation"] and ok
    out["valid_path"] = out["success"] = valid
    if valid:
        cost = route_cost(a, task.elevation_m, task.objective, task.weight)
    else:
        cost = 1e6 * c_star
    out["predicted_cost"] = cost
    if not (np.isfinite(c_star) and c_star > 0):
        out["regret"] = np.nan
    else:
        out["regret"] = (cost - c_star) / c_star if valid else 999999.0
    if valid:
        da, _ = cKDTree(ref).query(a)
        db, _ = cKDTree(a).query(ref)
        steps = np.abs(np.diff(ref, axis=0)).sum(axis=1)
        l_star = float(np.sum(np.where(steps == 2, math.sqrt(2), 1.0)))
        out["assd"] = (da.sum() + db.sum()) / (len(a) + len(ref)) / l_star
        out["h95"] = max(np.percentile(da, 95), np.percentile(db, 95))
        sa = set(map(tuple, a.tolist()))
        sb = set(map(tuple, ref.tolist()))
        out["path_iou"] = len(sa & sb) / len(sa | sb)
    else:
        out["assd"] = out["h95"] = out["path_iou"] = np.nan
    return out


def assert_matches(got, i, want, where=""):
    for k in METRIC_KEYS:
        g = got[k][i]
        e = want[k]
        if isinstance(e, (bool, np.bool_)):
            assert bool(g) == bool(e), (where, i, k, g, e)
        elif isinstance(e, (int, np.integer)):
            assert int(g) == int(e), (where, i, k, g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=1e-12, err_msg=f"{where} {i} {k}")


# --------------------------------------------------------------------------- #
# Real-terrain route pairs
# --------------------------------------------------------------------------- #

@pytest.fixture(scope="module")
def terrain_batch():
    rng = np.random.default_rng(7)
    tasks, cands, cstar = [], [], []
    for s, n in enumerate((40, 56, 40)):  # two grid sizes: two groups
        scene, cs = make_scene(rng, n, f"scene{s}")
        assert scene.metadata["terrain"] != "synthetic"  # shipped rasters are present
        for obj in OBJECTIVES:
            for var in ("free", "obstacles"):
                task = scene.task(obj, var)
                for c in candidate_set(scene, obj, var, rng, 10):
                    tasks.append(task)
                    cands.append(c)
                    cstar.append(cs[(obj, var)])
    ok = rng.random(len(tasks)) > 0.05
    return cands, tasks, np.array(cstar), ok


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_terrain_pairs_match_numpy_scipy(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    got = score_routes(cands, tasks, cstar, ok)
    for i in range(len(tasks)):
        assert_matches(got, i, np_metrics(cands[i], tasks[i], cstar[i], ok[i]))
    # the material is not trivial: valid, invalid, violations and imperfect routes all occur
    assert 0 < got["valid_path"].sum() < len(tasks)
    assert got["obstacle_violation"].any()
    assert (~got["connected_path"]).any()
    assert (got["regret"][got["valid_path"]] > 1e-6).any()
    assert (got["path_iou"][got["valid_path"]] < 1).any()
    # exact routes: regret ~ 0 and zero geometry against themselves
    exact = [i for i in range(len(tasks)) if cands[i] is tasks[i].route and ok[i]]
    assert exact
    np.testing.assert_allclose(got["regret"][exact], 0, atol=1e-12)
    np.testing.assert_array_equal(got["assd"][exact], 0)
    np.testing.assert_array_equal(got["path_iou"][exact], 1)


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_other_references_and_shuffled_order(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    rng = np.random.default_rng(1)
    perm = rng.permutation(len(tasks))[:60]
    refs = [tasks[i].scene.routes[(OBJECTIVES[(j + 1) % 3], tasks[i].variant)]
            for j, i in enumerate(perm)]
    got = score_routes([cands[i] for i in perm], [tasks[i] for i in perm], cstar[perm], ok[perm],
                       references=refs)
    for j, i in enumerate(perm):
        assert_matches(got, j, np_metrics(cands[i], tasks[i], cstar[i], ok[i], refs[j]))


# --------------------------------------------------------------------------- #
# Hand-worked cases on a 5x5 grid
# --------------------------------------------------------------------------- #

def tiny_task(obstacles=(), start=(0, 0), goal=(0, 2), route=((0, 0), (0, 1), (0, 2)),
              objective="elevation"):
    n = 5
    obst = np.zeros((n, n), bool)
    for r, c in obstacles:
        obst[r, c] = True
    z = np.arange(n * n, dtype=np.float64).reshape(n, n) * 10.0  # range 240 m
    scene = Scene(id="tiny", resolution=n, split="test", elevation_norm=z.astype(np.float32),
                  elevation_m=z, obstacles=obst, start=start, goal=goal,
                  routes={(objective, "obstacles"): np.array(route, np.int32)},
                  metadata={"solvers": {objective: {"weight": 62.4}}})
    return scene.task(objective, "obstacles")


def score1(route, task, c_star=100.0, ok=True, reference=None):
    out = score_routes([route], [task], [c_star], [ok],
                       references=None if reference is None else [reference])
    return {k: v[0] for k, v in out.items()}


def test_hand_exact_route_cost_and_geometry():
    t = tiny_task()
    got = score1([[0, 0], [0, 1], [0, 2]], t, c_star=61.0)
    # two cardinal steps, each 30 + 62.4 * 10 / 240
    cost = 2 * (30 + 62.4 * 10 / 240)
    assert got["connected_path"] and got["valid_path"] and got["success"]
    np.testing.assert_allclose(got["predicted_cost"], cost, rtol=RTOL)
    np.testing.assert_allclose(got["regret"], (cost - 61.0) / 61.0, rtol=RTOL)
    assert got["assd"] == 0 and got["h95"] == 0 and got["path_iou"] == 1


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_hand_geometry_known_answer():
    t = tiny_task(route=((0, 0), (1, 1), (0, 2)))
    a = [[0, 0], [0, 1], [0, 2]]
    got = score1(a, t)
    # d(a, B) = 0, 1, 0; d(b, A) = 0, 1, 0; L* = 2 sqrt 2
    np.testing.assert_allclose(got["assd"], 2 / 6 / (2 * math.sqrt(2)), rtol=RTOL)
    np.testing.assert_allclose(got["h95"], 0.9, rtol=RTOL)  # sorted [0,0,1], index 1.9
    assert got["path_iou"] == 0.5


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_legal_revisit_counts_once_per_visit():
    t = tiny_task(route=((0, 0), (1, 1), (0, 2)))
    a = [[0, 0], [0, 1], [1, 1], [0, 1], [0, 2]]
    got = score1(a, t)
    assert got["connected_path"] and got["valid_path"]
    # d(a, B) = 0, 1, 0, 1, 0 (both visits of (0, 1) count); d(b, A) = 0, 0, 0
    np.testing.assert_allclose(got["assd"], 2 / 8 / (2 * math.sqrt(2)), rtol=RTOL)
    np.testing.assert_allclose(got["h95"], np.percentile([0, 1, 0, 1, 0], 95), rtol=RTOL)
    assert got["path_iou"] == 0.75  # cell sets {00, 01, 11, 02} and {00, 11, 02}
    zc = 62.4 * 10 / 240
    zr = 62.4 * 50 / 240
    zd = 62.4 * 60 / 240
    d2 = 30 * math.sqrt(2)
    cost = (30 + zc) + (30 + zr) + (30 + zr) + (30 + zc)
    np.testing.assert_allclose(got["predicted_cost"], cost, rtol=RTOL)
    del zd, d2


def test_diagonal_squeeze_between_corner_obstacles_is_legal():
    t = tiny_task(obstacles=((0, 1), (1, 0)), goal=(1, 1), route=((0, 0), (1, 1)))
    got = score1([[0, 0], [1, 1]], t, c_star=30 * math.sqrt(2) + 62.4 * 60 / 240)
    assert got["connected_path"] and got["valid_path"]
    assert got["obstacle_traversals"] == 0
    np.testing.assert_allclose(got["regret"], 0, atol=1e-14)


@pytest.mark.parametrize("route,why", [
    ([[0, 1], [0, 2]], "wrong first cell"),
    ([[0, 0], [0, 1]], "wrong last cell"),
    ([[0, 0], [0, 1], [0, 1], [0, 2]], "repeated consecutive cell"),
    ([[0, 0], [0, 2]], "gap"),
    ([[0, 0]], "one cell"),
    (np.zeros((0, 2), np.int64), "empty"),
    ([], "empty list"),
])
def test_invalid_routes_fail_with_censored_cost(route, why):
    t = tiny_task()
    got = score1(route, t, c_star=70.0)
    assert not got["connected_path"], why
    assert not got["valid_path"] and not got["success"]
    assert got["predicted_cost"] == 1e6 * 70.0
    assert got["regret"] == 999999.0
    assert np.isnan(got["assd"]) and np.isnan(got["h95"]) and np.isnan(got["path_iou"])
    assert not got["malformed"]


@pytest.mark.parametrize("route", [
    [[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]],  # integral floats are still floats
    np.array([[0, 0], [0, 1], [0, 2]], np.float32),
    [[0, 0], [0, 1.5], [0, 2]],
    [[0, 0, 0], [0, 1, 0]],
    [[0, 0], [0, 1, 2]],
    None,
    [[True, False], [False, True]],
    [[0, 0], [0, 2 ** 40], [0, 2]],
])
def test_malformed_routes_are_invalid_never_rounded(route):
    t = tiny_task(obstacles=((0, 1),), route=((0, 0), (1, 1), (0, 2)))
    got = score1(route, t)
    assert got["malformed"] and got["problem"]
    assert not got["connected_path"] and not got["valid_path"]
    assert got["obstacle_traversals"] == 0
    assert got["regret"] == 999999.0 and np.isnan(got["assd"])


def test_out_of_bounds_cells_are_masked_not_gathered():
    # (-1, 1) and (0, 5) would clamp onto the obstacles at (0, 1) and (0, 4)
    t = tiny_task(obstacles=((0, 1), (0, 4)), goal=(0, 2), route=((0, 0), (1, 1), (0, 2)))
    got = score1([[0, 0], [-1, 1], [0, 2]], t)
    assert not got["connected_path"] and got["obstacle_traversals"] == 0
    got = score1([[0, 3], [0, 5], [0, 4]], t)
    assert not got["connected_path"] and got["obstacle_traversals"] == 1  # only (0, 4)
    assert not got["malformed"]


def test_obstacle_violation_is_separate_from_connection():
    t = tiny_task(obstacles=((0, 1),), route=((0, 0), (1, 1), (0, 2)))
    got = score1([[0, 0], [0, 1], [0, 2]], t)
    assert got["connected_path"] and got["obstacle_violation"]
    assert got["obstacle_traversals"] == 1
    assert not got["valid_path"] and got["regret"] == 999999.0
    got = score1([[0, 0], [0, 1], [0, 0], [0, 1], [0, 2]], t)
    assert got["obstacle_traversals"] == 2  # each visit counts


def test_request_status_and_nonpositive_cstar():
    t = tiny_task()
    got = score1([[0, 0], [0, 1], [0, 2]], t, ok=False)
    assert got["connected_path"] and not got["valid_path"] and got["regret"] == 999999.0
    assert np.isnan(got["assd"])
    for c in (0.0, -1.0, np.nan, np.inf):
        got = score1([[0, 0], [0, 1], [0, 2]], t, c_star=c)
        assert np.isnan(got["regret"])


def test_bad_reference_and_lengths_raise():
    t = tiny_task()
    with pytest.raises(ValueError, match="tiny.*reference"):
        score1([[0, 0], [0, 1], [0, 2]], t, reference=[[0, 0], [0, 2]])
    with pytest.raises(ValueError, match="candidates"):
        score_routes([], [t], [1.0], [True])
    with pytest.raises(ValueError, match="bool"):
        score_routes([[[0, 0]]], [t], [1.0], [1])


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_bucketing_mixed_lengths_and_grids(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    # very long legal route (back and forth) alongside short ones: different buckets
    t = tasks[0]
    r = np.asarray(t.route)
    long_route = np.concatenate([r[:2]] + [r[1:2], r[0:1]] * 40 + [r[1:]])
    long_route = long_route[np.r_[True, np.any(long_route[1:] != long_route[:-1], axis=1)]]
    got = score_routes([long_route, cands[5], cands[-1]], [t, tasks[5], tasks[-1]],
                       [cstar[0], cstar[5], cstar[-1]], [True, ok[5], ok[-1]])
    for j, i in enumerate((0, 5, len(tasks) - 1)):
        c = long_route if j == 0 else cands[i]
        assert_matches(got, j, np_metrics(c, tasks[i], cstar[i], True if j == 0 else ok[i]))
    assert got["valid_path"][0]


# --------------------------------------------------------------------------- #
# Kernel properties: symmetry, jit vs eager, vmap vs per item
# --------------------------------------------------------------------------- #

def test_geometry_symmetric(terrain_batch):
    cands, tasks, _, _ = terrain_batch
    rng = np.random.default_rng(3)
    geom = jax.jit(route_geometry)
    with jax.enable_x64(True):
        for i in rng.choice(len(tasks), 20, replace=False):
            a = np.asarray(cands[i], np.int32)
            b = np.asarray(tasks[i].route, np.int32)
            if len(a) < 2:
                continue
            pa = np.zeros((256, 2), np.int32)
            pa[:len(a)] = a
            pb = np.zeros((128, 2), np.int32)
            pb[:len(b)] = b
            ab = geom(Route(pa, len(a)), Route(pb, len(b)))
            ba = geom(Route(pb, len(b)), Route(pa, len(a)))
            la = float(np.sum(np.where(np.abs(np.diff(a, axis=0)).sum(1) == 2, math.sqrt(2), 1)))
            lb = float(np.sum(np.where(np.abs(np.diff(b, axis=0)).sum(1) == 2, math.sqrt(2), 1)))
            # ASSD's distance term is symmetric; only the reference length differs
            np.testing.assert_allclose(float(ab[0]) * lb, float(ba[0]) * la, rtol=RTOL)
            assert float(ab[1]) == float(ba[1])
            assert float(ab[2]) == float(ba[2])


def _padded(cands, tasks, cstar, ok, la=256, lb=128):
    """(candidates, references, tasks, request_ok, well_formed) of a batch, as
    the pytrees of the kernel boundary with a leading task axis."""
    n = len(tasks)
    cand = np.zeros((n, la, 2), np.int32)
    cl = np.zeros(n, np.int32)
    ref = np.zeros((n, lb, 2), np.int32)
    rl = np.zeros(n, np.int32)
    for i, (c, t) in enumerate(zip(cands, tasks)):
        c = np.asarray(c, np.int32).reshape(-1, 2)
        cand[i, :len(c)] = c
        cl[i] = len(c)
        ref[i, :len(t.route)] = t.route
        rl[i] = len(t.route)
    task = TaskArrays(
        elevation=np.stack([t.elevation_m for t in tasks]),
        obstacles=np.stack([t.obstacles for t in tasks]).astype(bool),
        start=np.array([t.scene.start for t in tasks], np.int32),
        goal=np.array([t.scene.goal for t in tasks], np.int32),
        cost_model=np.array([MODEL_INDEX[t.objective] for t in tasks], np.int32),
        weight=np.array([t.weight for t in tasks]), c_star=np.asarray(cstar, np.float64))
    return Route(cand, cl), Route(ref, rl), task, np.asarray(ok, bool), np.ones(n, bool)


def _row(tree, j):
    return jax.tree_util.tree_map(lambda x: x[j], tree)


@pytest.mark.slow  # a larger sibling of a default test (the suite stays under five minutes)
def test_jit_eager_vmap_agree(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    idx = [i for i in range(len(tasks)) if tasks[i].obstacles.shape == (40, 40)][:: 9][:2]
    cand, ref, task, req, wf = _padded([cands[i] for i in idx], [tasks[i] for i in idx],
                                       cstar[idx], ok[idx])
    with jax.enable_x64(True):
        batched = jax.device_get(score_tasks(cand, ref, task, req, wf)).to_dict()
        one = jax.jit(score_task)
        for j in range(len(idx)):
            item = (_row(cand, j), _row(ref, j), _row(task, j))
            kw = dict(request_ok=req[j], well_formed=wf[j])
            jitted = jax.device_get(one(*item, **kw)).to_dict()
            with jax.disable_jit():
                eager = jax.device_get(score_task(*item, **kw)).to_dict()
            for k in METRIC_KEYS:
                np.testing.assert_allclose(np.asarray(jitted[k], float), np.asarray(eager[k], float),
                                           rtol=RTOL, err_msg=k)
                np.testing.assert_allclose(np.asarray(batched[k][j], float),
                                           np.asarray(jitted[k], float), rtol=RTOL, err_msg=k)
    # and the batch matches the independent reference
    for j, i in enumerate(idx):
        want = np_metrics(cands[i], tasks[i], cstar[i], ok[i])
        assert_matches({k: np.asarray(v) for k, v in batched.items()}, j, want)


@pytest.mark.parametrize("jit", [pytest.param(False, marks=pytest.mark.slow), True], ids=["eager", "jit"])
def test_score_task_jitted_and_eager_match_numpy(terrain_batch, jit):
    """score_task alone (no vmap), run jitted and un-jitted, against the
    independent NumPy/SciPy reference, on every kind of candidate."""
    cands, tasks, cstar, ok = terrain_batch
    idx = [i for i in range(len(tasks)) if tasks[i].obstacles.shape == (40, 40)][:: 13][:4]
    cand, ref, task, req, wf = _padded([cands[i] for i in idx], [tasks[i] for i in idx],
                                       cstar[idx], ok[idx])
    fn = jax.jit(score_task) if jit else score_task
    with jax.enable_x64(True):
        for j, i in enumerate(idx):
            if jit:
                got = fn(_row(cand, j), _row(ref, j), _row(task, j), request_ok=req[j])
            else:
                with jax.disable_jit():
                    got = fn(_row(cand, j), _row(ref, j), _row(task, j), request_ok=req[j])
            assert isinstance(got, RouteMetrics)
            got = {k: np.asarray(v)[None] for k, v in jax.device_get(got).to_dict().items()}
            assert_matches(got, 0, np_metrics(cands[i], tasks[i], cstar[i], ok[i]))


@pytest.mark.slow  # about 9 s of tracing; the pytrees also cross jit/vmap in test_jit_eager_vmap_agree
def test_pytrees_round_trip_through_tree_map_and_vmap(terrain_batch):
    """The kernel-boundary types are pytrees: tree_map keeps the type and
    fields, vmap maps over their leading axis, and stacking per-task results
    gives the batched result."""
    cands, tasks, cstar, ok = terrain_batch
    idx = list(range(0, 60, 20))
    cand, ref, task, req, wf = _padded([cands[i] for i in idx], [tasks[i] for i in idx],
                                       cstar[idx], ok[idx])
    for tree in (cand, ref, task):
        copy = jax.tree_util.tree_map(lambda x: x, tree)
        assert type(copy) is type(tree)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(tree),
                                                       jax.tree_util.tree_leaves(copy)))
    assert jax.tree_util.tree_map(lambda x: x.shape[0], cand) == Route(len(idx), len(idx))
    one = Route.pad(tasks[idx[0]].route, 256)
    assert int(one.length) == len(tasks[idx[0]].route) and one.cells.shape == (256, 2)
    np.testing.assert_array_equal(one.cells[:int(one.length)], tasks[idx[0]].route)
    assert not one.cells[int(one.length):].any()
    with pytest.raises(ValueError, match="does not fit"):
        Route.pad(tasks[idx[0]].route, 1)
    with jax.enable_x64(True):
        lengths = jax.vmap(lambda r: r.length * 2)(cand)
        np.testing.assert_array_equal(lengths, cand.length * 2)
        live = jax.vmap(Route.live)(cand)
        assert live.shape == cand.cells.shape[:2] and int(live.sum()) == int(cand.length.sum())
        batched = score_tasks(cand, ref, task, req, wf)
        per = [score_task(_row(cand, j), _row(ref, j), _row(task, j), request_ok=req[j])
               for j in range(len(idx))]
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *jax.device_get(per))
    assert isinstance(batched, RouteMetrics) and isinstance(stacked, RouteMetrics)
    assert jax.tree_util.tree_structure(stacked) == jax.tree_util.tree_structure(batched)
    for k, v in jax.device_get(batched).to_dict().items():
        np.testing.assert_allclose(np.asarray(v, float), np.asarray(getattr(stacked, k), float),
                                   rtol=RTOL, err_msg=k)
    assert tuple(batched.to_dict()) == METRIC_KEYS


def test_named_model_and_float32_kernels():
    t = tiny_task(route=((0, 0), (1, 1), (0, 2)), objective="slope_uphill")
    route = Route(np.array([[0, 0], [1, 1], [0, 2], [0, 0]], np.int32), 3)
    z32 = jnp.asarray(t.elevation_m, jnp.float32)
    task = TaskArrays(elevation=z32, obstacles=t.obstacles, start=np.array((0, 0), np.int32),
                      goal=np.array((0, 2), np.int32), cost_model=MODEL_INDEX["slope_uphill"],
                      weight=10.0, c_star=1.0)
    res = jax.jit(score_task)(route, route, task)
    want = route_cost(route.cells[:3], t.elevation_m, "slope_uphill", 10.0)
    assert res.predicted_cost.dtype == jnp.float32
    np.testing.assert_allclose(float(res.predicted_cost), want, rtol=1e-6)
    assert float(res.assd) == 0.0
    # the padded recosting by model name (static) and by id (traced) agree
    by_name = jax.jit(padded_route_cost, static_argnames=("model",))(
        route, z32, model="slope_uphill", weight=10.0)
    by_id = jax.jit(padded_route_cost)(route, z32, MODEL_INDEX["slope_uphill"], 10.0)
    assert by_name.dtype == jnp.float32 and float(by_name) == float(by_id)
    np.testing.assert_allclose(float(by_name), want, rtol=1e-6)


def test_primary_metrics_of_scored_batch(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    got = score_routes(cands, tasks, cstar, ok)
    pm = primary_metrics(got)
    v = got["valid_path"]
    np.testing.assert_allclose(pm["regret_median"], np.median(got["regret"]), rtol=RTOL)
    np.testing.assert_allclose(pm["assd_mean"], got["assd"][v].mean(), rtol=RTOL)
    assert pm["n_tasks"] == len(tasks) and pm["n_path_valid"] == v.sum()


# --------------------------------------------------------------------------- #
# Host path: buckets, input forms, reference checks; geometry window
# --------------------------------------------------------------------------- #

def _back_and_forth(route, n_cells):
    """A legal route of exactly ``n_cells`` cells: shuttle between the first two
    cells, then follow ``route`` to the goal."""
    r = np.asarray(route)
    extra = n_cells - len(r)
    assert extra >= 0 and extra % 2 == 0
    head = [r[0]] + [r[1], r[0]] * (extra // 2)
    return np.concatenate([np.array(head), r[1:]]).astype(np.int32)


@pytest.mark.slow  # a larger sibling of a default-run check (the default run stays short)
def test_bucket_edges_match_numpy(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    t = next(x for x in tasks if len(x.route) % 2 == 0)
    routes, want_len = [], []
    for n_cells in (32, 34, 64, 66, 96, 98, 128, 130, 384, 386):
        n_cells += len(t.route) % 2  # keep the parity of the reference
        if n_cells < len(t.route):
            continue
        routes.append(_back_and_forth(t.route, n_cells))
        want_len.append(n_cells)
    assert [len(r) for r in routes] == want_len
    got = score_routes(routes, [t] * len(routes), [cstar[tasks.index(t)]] * len(routes),
                       [True] * len(routes))
    for j, r in enumerate(routes):
        assert_matches(got, j, np_metrics(r, t, cstar[tasks.index(t)], True))
    assert got["valid_path"].all()


def test_candidate_forms_agree(terrain_batch):
    cands, tasks, cstar, ok = terrain_batch
    idx = [i for i in range(0, len(tasks), 7) if np.asarray(cands[i]).size][:12]
    base = score_routes([cands[i] for i in idx], [tasks[i] for i in idx], cstar[idx], ok[idx])
    for form in (lambda a: np.asarray(a, np.int64), lambda a: np.asarray(a).tolist(),
                 lambda a: [tuple(p) for p in np.asarray(a).tolist()],
                 lambda a: np.asfortranarray(np.asarray(a, np.int32)),
                 lambda a: np.asarray(a, np.int16)):
        got = score_routes([form(cands[i]) for i in idx], [tasks[i] for i in idx], cstar[idx],
                           ok[idx])
        for k in METRIC_KEYS:
            np.testing.assert_array_equal(got[k], base[k], err_msg=k)
        assert not got["malformed"].any()


@pytest.mark.parametrize("bad,expect", [
    (lambda r: np.concatenate([r[:1], r[2:]]), "gap|not one of the 8 moves"),
    (lambda r: np.concatenate([r[:2], r[1:]]), "repeats the previous cell"),
    (lambda r: r[1:], "starts at"),
    (lambda r: r[:-1], "ends at"),
    (lambda r: r[:1], "at least 2"),
    (lambda r: r.astype(np.float64), "integers"),
    (lambda r: np.concatenate([[[-1, r[0][1]]], r]), "out of bounds"),
])
def test_bad_references_name_the_first_task_and_problem(bad, expect):
    t = tiny_task(route=((0, 0), (0, 1), (1, 2), (0, 3)), goal=(0, 3))
    ok_route = np.asarray(t.route)
    refs = [ok_route, ok_route, bad(ok_route), bad(ok_route)]
    with pytest.raises(ValueError, match=rf"task 2 \(scene tiny.*reference route.*({expect})"):
        score_routes([ok_route] * 4, [t] * 4, [100.0] * 4, [True] * 4, references=refs)


def test_reference_on_obstacle_is_refused():
    t = tiny_task(obstacles=((1, 1),), route=((0, 0), (0, 1), (0, 2)))
    with pytest.raises(ValueError, match=r"task 1 .*obstacle"):
        score_routes([[[0, 0], [0, 1], [0, 2]]] * 2, [t, t], [100.0] * 2, [True] * 2,
                     references=[[[0, 0], [0, 1], [0, 2]], [[0, 0], [1, 1], [0, 2]]])


def test_geometry_window_and_float32():
    with jax.enable_x64(True):
        geom = jax.jit(route_geometry)
        span = 1 << 15
        a = np.array([[0, 0], [1, 1], [2, 1]], np.int32)
        for far, defined in ((span - 1, True), (span, False)):
            b = np.array([[0, 0], [far, 1]], np.int32)  # not a path: geometry of cell sets
            assd, h95, iou = (float(v) for v in geom(Route(a, 3), Route(b, 2)))
            if not defined:
                assert np.isnan(assd) and np.isnan(h95) and np.isnan(iou)
                continue
            da, _ = cKDTree(b).query(a)
            db, _ = cKDTree(a).query(b)
            # L* counts the one (non-move) step of b as 1 pixel, as np_metrics does
            np.testing.assert_allclose(assd, (da.sum() + db.sum()) / 5 / 1.0, rtol=RTOL)
            np.testing.assert_allclose(h95, max(np.percentile(da, 95), np.percentile(db, 95)),
                                       rtol=RTOL)
            assert iou == 1 / 4
    # float32 kernels (x64 off): same cell-set IoU, distances to float32 precision
    rng = np.random.default_rng(5)
    a = np.cumsum(rng.integers(-1, 2, (40, 2)), axis=0).astype(np.int32) + 50
    b = np.cumsum(rng.integers(-1, 2, (30, 2)), axis=0).astype(np.int32) + 50
    g32 = [float(v) for v in jax.jit(route_geometry)(Route(a, 40), Route(b, 30))]
    with jax.enable_x64(True):
        g64 = [float(v) for v in jax.jit(route_geometry)(Route(a, 40), Route(b, 30))]
    np.testing.assert_allclose(g32[:2], g64[:2], rtol=1e-6)
    np.testing.assert_allclose(g32[2], g64[2], rtol=1e-7)  # same counts, float32 ratio
    sa, sb = set(map(tuple, a.tolist())), set(map(tuple, b.tolist()))
    np.testing.assert_allclose(g64[2], len(sa & sb) / len(sa | sb), rtol=RTOL)
