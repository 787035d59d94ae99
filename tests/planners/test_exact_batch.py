"""ExactPlanner.plan_batch: per live scene the route and status of the batch-one
``plan`` (shipped 64x64 and 256x256 tasks, every cost model and variant, batch sizes 1,
3 and 8, padding rows), hand-worked routes, no_path, budget_exhausted, padding rows that
never change the live rows, and the lock-step kernel path."""
from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from passage_jax.graph import MODEL_INDEX, GraphSpec, route_cost
from passage_jax.planners.exact import ExactPlanner
from passage_jax.protocol import PlanRequest, build_request
from passage_jax.protocol.batch import BatchRoutes, PlanBatch, batch_of, scene_routes

OBJECTIVES = ("elevation", "slope_uphill", "energy")
VARIANTS = ("free", "obstacles")


def _shipped(res: int, n: int) -> list:
    from passage_jax.data import load_tasks, shipped_cohort_root

    root = shipped_cohort_root()
    if not (root / f"{res}x{res}" / "test").is_dir():
        pytest.skip(f"no shipped {res}x{res} test split")
    return [t for o in OBJECTIVES for v in VARIANTS
            for t in load_tasks(root, res, "test", o, v, n_samples=n)]


@pytest.fixture(scope="module")
def tasks64():
    """12 tasks: two scenes under each cost model and variant."""
    return _shipped(64, 2)


@pytest.fixture(scope="module")
def tasks256():
    """Three 256x256 tasks, one per cost model, both variants among them."""
    ts = _shipped(256, 1)  # (objective, variant) order
    return [ts[0], ts[3], ts[4]]


def _plan_all(planner, tasks):
    return [planner.plan(build_request(t, include_tensor=False)) for t in tasks]


@pytest.fixture(scope="module")
def plans64(tasks64):
    return _plan_all(ExactPlanner(), tasks64)


def _batched(planner, tasks, batch_size):
    """(status, route) per task from ``plan_batch`` over consecutive batches."""
    out = []
    for lo in range(0, len(tasks), batch_size):
        chunk = tasks[lo:lo + batch_size]
        routes = jax.device_get(planner.plan_batch(batch_of(chunk, batch_size)))
        for status, route, problem in scene_routes(routes, len(chunk)):
            assert problem is None, problem
            out.append((status, route))
    return out


def _assert_same(batched, plans, tasks):
    assert len(batched) == len(plans) == len(tasks)
    for (status, route), res, t in zip(batched, plans, tasks):
        where = f"{t.id} {t.objective}/{t.variant}"
        assert status == res.status, where
        if res.path is None:
            assert route is None, where
        else:
            assert route is not None and route.dtype == np.int32, where
            assert np.array_equal(route, res.path), where


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_plan_batch_routes_are_plans_64(tasks64, plans64, batch_size):
    # batch size 8 over 12 tasks: the second batch holds 4 live tasks and 4 padding rows
    assert {p.status for p in plans64} == {"ok"}
    _assert_same(_batched(ExactPlanner(), tasks64, batch_size), plans64, tasks64)


def test_plan_batch_routes_are_plans_256(tasks256):
    plans = _plan_all(ExactPlanner(), tasks256)
    assert {p.status for p in plans} == {"ok"}
    # a batch of 4 holding the 3 tasks and one padding row
    _assert_same(_batched(ExactPlanner(), tasks256, 4), plans, tasks256)


def test_lockstep_kernel_path_gives_the_same_routes(tasks64, plans64):
    """Off CPU plan_batch solves the batch in lock step (chunk None); on CPU it goes one
    scene at a time. Both give plan's routes, padding rows (solved in lock step) aside."""
    planner = ExactPlanner()
    batch = batch_of(tasks64[:5], 8)
    lock = jax.device_get(planner._plan_batch(batch, chunk=None))
    one = jax.device_get(planner.plan_batch(batch))
    assert lock.cells.shape == one.cells.shape == (8, 64 * 64, 2)
    got = [(s, r) for s, r, _ in scene_routes(lock, 5)]
    _assert_same(got, plans64[:5], tasks64[:5])
    for a, b in zip(scene_routes(lock, 5), scene_routes(one, 5)):
        assert a[0] == b[0] and np.array_equal(a[1], b[1])


def test_budget_exhausted_where_plan_runs_out(tasks64):
    # four sweeps: some scenes converge, others run out (a mixed batch)
    planner = ExactPlanner(max_sweeps=4)
    plans = _plan_all(planner, tasks64)
    assert {p.status for p in plans} == {"ok", "budget_exhausted"}
    _assert_same(_batched(planner, tasks64, 8), plans, tasks64)
    # the lock-step path's budget loop (scenes stopping at different sweeps)
    lock = jax.device_get(planner._plan_batch(batch_of(tasks64[:8], 8), chunk=None))
    _assert_same([(s, r) for s, r, _ in scene_routes(lock, 8)], plans[:8], tasks64[:8])
    assert all(lock.length[i] == 0 for i in range(8) if plans[i].status != "ok")


def test_planner_settings_reach_the_kernel(tasks64, plans64):
    # jacobi sweeps and another check interval: the same fixed point, the same routes
    planner = ExactPlanner(strategy="jacobi", check_every=3)
    _assert_same(_batched(planner, tasks64[:4], 4), plans64[:4], tasks64[:4])
    with pytest.raises(ValueError, match="unknown strategy"):
        ExactPlanner(strategy="nope").plan_batch(batch_of(tasks64[:1], 1))


# --------------------------------------------------------------------------- #
# Hand-made 8x8 scenes (flat terrain, distance model: a step costs its length)
# --------------------------------------------------------------------------- #

N = 8
WALL = np.zeros((N, N), bool)
WALL[:, 4] = True                      # column 4 blocked: no way across
GAP = WALL.copy()
GAP[7, 4] = False                      # the only way across is (7, 4)
FREE = np.zeros((N, N), bool)
#: (obstacles, start, goal, expected route or None)
HAND = [
    (WALL, (0, 0), (7, 7), None),
    (FREE, (0, 0), (0, 3), [(0, 0), (0, 1), (0, 2), (0, 3)]),
    (FREE, (1, 1), (4, 4), [(1, 1), (2, 2), (3, 3), (4, 4)]),
    (FREE, (5, 2), (5, 2), [(5, 2)]),
    (GAP, (0, 3), (0, 5), "detour"),
]


def _hand_batch(size: int, pixel_size_m: float = 30.0, rows=HAND) -> PlanBatch:
    n = len(rows)
    pad = [rows[0]] * (size - n)
    obst = np.stack([r[0] for r in rows + pad])
    return PlanBatch(
        elevation=np.zeros((size, N, N)), obstacles=obst,
        start=np.asarray([r[1] for r in rows + pad], np.int32),
        goal=np.asarray([r[2] for r in rows + pad], np.int32),
        cost_model=np.full(size, MODEL_INDEX["distance"], np.int32),
        cost_weight=np.zeros(size), live=np.arange(size) < n, pixel_size_m=pixel_size_m)


def _hand_request(row, pixel_size_m=30.0):
    obst, start, goal, _ = row
    return PlanRequest("hand", np.zeros((N, N)), obst, start, goal, "distance", 0.0,
                       GraphSpec("distance", 0.0, pixel_size_m=pixel_size_m))


@pytest.mark.parametrize("pixel_size_m", [30.0, 10.0])
def test_hand_made_scenes(pixel_size_m):
    planner = ExactPlanner()
    routes = jax.device_get(planner.plan_batch(_hand_batch(8, pixel_size_m)))
    got = scene_routes(routes, len(HAND))
    for (status, route, problem), row in zip(got, HAND):
        assert problem is None
        plan = planner.plan(_hand_request(row, pixel_size_m))
        assert status == plan.status
        expected = row[3]
        if expected is None:
            assert status == "no_path" and route is None and plan.path is None
            continue
        assert status == "ok" and np.array_equal(route, plan.path)
        if expected == "detour":
            # down column 3, diagonally through the gap (7, 4) and back up column 5:
            # 12 straight steps and 2 diagonal ones, whatever the tie-break picks
            assert tuple(route[0]) == row[1] and tuple(route[-1]) == row[2]
            assert (7, 4) in [tuple(c) for c in route]
            c = route_cost(route, np.zeros((N, N)), "distance", 0.0, pixel_size_m=pixel_size_m)
            assert c == pytest.approx(pixel_size_m * (12 + 2 * math.sqrt(2)), rel=1e-12)
        else:
            assert np.array_equal(route, np.asarray(expected, np.int32))
    # the unreachable scene reports no route at all
    assert routes.length[0] == 0 and routes.status[0] == 1


def test_padding_rows_never_change_live_rows(tasks64):
    planner = ExactPlanner()
    live = tasks64[:3]
    a = jax.device_get(planner.plan_batch(batch_of(live, 8)))
    # the same live rows; the padding rows other scenes (other cost models and variants)
    other = batch_of(live + tasks64[5:10], 8)
    other = PlanBatch(**{f: getattr(other, f) for f in
                         ("elevation", "obstacles", "start", "goal", "cost_model",
                          "cost_weight")}, live=np.arange(8) < 3)
    b = jax.device_get(planner.plan_batch(other))
    for r in (a, b):
        assert r.cells.shape == (8, 64 * 64, 2)
    assert np.array_equal(a.cells[:3], b.cells[:3])
    assert np.array_equal(a.length[:3], b.length[:3])
    assert np.array_equal(a.status[:3], b.status[:3])
    # the hand-made batch: padding rows copies of the walled-off scene, or another scene
    h1 = jax.device_get(planner.plan_batch(_hand_batch(8)))
    rows = HAND + [(FREE, (7, 7), (0, 0), None)] * 3
    h2 = jax.device_get(planner.plan_batch(
        PlanBatch(**{**_fields(_hand_batch(8, rows=rows)), "live": np.arange(8) < len(HAND)})))
    k = len(HAND)
    assert np.array_equal(h1.cells[:k], h2.cells[:k])
    assert np.array_equal(h1.length[:k], h2.length[:k])
    assert np.array_equal(h1.status[:k], h2.status[:k])


def _fields(batch: PlanBatch) -> dict:
    return {f: getattr(batch, f) for f in
            ("elevation", "obstacles", "start", "goal", "cost_model", "cost_weight", "live",
             "pixel_size_m")}


def test_device_batch_and_result_kinds(tasks64, plans64):
    planner = ExactPlanner()
    with jax.enable_x64(True):
        dev = jax.device_put(batch_of(tasks64[:2], 2))
    routes = planner.plan_batch(dev)
    assert isinstance(routes, BatchRoutes)
    assert routes.cells.dtype == routes.length.dtype == routes.status.dtype == np.int32
    got = [(s, r) for s, r, _ in scene_routes(jax.device_get(routes), 2)]
    _assert_same(got, plans64[:2], tasks64[:2])


@pytest.mark.needs_float64("the float64 path's dtype check")
def test_bad_batches_are_refused(tasks64):
    planner = ExactPlanner()
    batch = batch_of(tasks64[:2], 2)
    f = _fields(batch)
    with pytest.raises(ValueError, match="must be float64"):
        planner.plan_batch(PlanBatch(**{**f, "elevation": batch.elevation.astype(np.float32)}))
    with pytest.raises(ValueError, match=r"PlanBatch.start must have shape \(2, 2\)"):
        planner.plan_batch(PlanBatch(**{**f, "start": batch.start[:1]}))
    with pytest.raises(ValueError, match=r"PlanBatch.elevation must have shape \(B, H, W\)"):
        planner.plan_batch(PlanBatch(**{**f, "elevation": batch.elevation[0]}))
    with pytest.raises(ValueError, match="PlanBatch.cost_model must be an integer array"):
        planner.plan_batch(PlanBatch(**{**f, "cost_model": batch.cost_model.astype(float)}))
