"""Protocol objects: requests are isolated ordinary input; results are checked."""
import dataclasses
import math
import time

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.graph import GraphSpec
from passage_jax.protocol import (
    METADATA_ALLOWLIST,
    REQUEST_FIELDS,
    STATUSES,
    BudgetSpec,
    FlaxPlanner,
    PlanRequest,
    PlanResult,
    ProtocolError,
    as_planner,
    budget_problem,
    build_request,
    is_factory,
    load_planner,
    normalise_result,
)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return F.load(root)


def _plain_request(**over):
    z = np.arange(16, dtype=np.float64).reshape(4, 4)
    d = dict(sample_id="x", elevation=z, obstacles=np.zeros((4, 4), bool), start=(0, 0),
             goal=(3, 3), cost_model="elevation", cost_weight=1.0,
             graph=GraphSpec("elevation", 1.0))
    d.update(over)
    return PlanRequest(**d)


# --------------------------------------------------------------------------- #
# budgets
# --------------------------------------------------------------------------- #

def test_budget_validation():
    assert BudgetSpec().limits() == {}
    b = BudgetSpec(wall_time_ms=5, max_expansions=10)
    assert b.wall_time_ms == 5.0 and b.limits() == {"max_expansions": 10}
    for bad in (dict(max_expansions=0), dict(max_expansions=1.5), dict(max_expansions=True),
                dict(wall_time_ms=-1), dict(wall_time_ms=float("inf"))):
        with pytest.raises(ProtocolError):
            BudgetSpec(**bad)
    with pytest.raises(ProtocolError, match="max_expansion"):
        BudgetSpec.from_dict({"max_expansion": 3})


# --------------------------------------------------------------------------- #
# request isolation
# --------------------------------------------------------------------------- #

def test_request_fields_are_exactly_the_ordinary_input():
    names = tuple(f.name for f in dataclasses.fields(PlanRequest))
    assert names == REQUEST_FIELDS
    forbidden = ("route", "c_star", "cost_star", "optimal", "reference", "label", "solver",
                 "reachable", "value", "target")
    for n in names:
        assert not any(w in n for w in forbidden), n


def test_request_from_task_carries_no_reference(tasks):
    for task in tasks:
        req = build_request(task, BudgetSpec(max_expansions=100), time.monotonic() + 10)
        # metadata: only allowlisted keys; the fixture's solvers/source/index are dropped
        assert set(req.metadata) <= set(METADATA_ALLOWLIST)
        assert "solvers" not in req.metadata and "source" not in req.metadata
        assert "index" not in req.metadata
        assert set(task.scene.metadata) - set(req.metadata) >= {"solvers", "source", "index",
                                                               "fixture"}
        # no field holds a released route (of any objective/variant) or c*-like number
        routes = [np.asarray(r) for r in task.scene.routes.values()]
        ref_costs = {round(float(v), 6) for v in [
            __import__("passage_jax.graph", fromlist=["route_cost"]).route_cost(
                task.route, task.elevation_m, task.objective, task.weight)]}
        for name in REQUEST_FIELDS:
            v = getattr(req, name)
            if isinstance(v, np.ndarray):
                for r in routes:
                    assert not (v.shape == r.shape and np.array_equal(v, r)), name
            if isinstance(v, float):
                assert round(v, 6) not in ref_costs, name
        flat = repr(req.metadata)
        assert "never forwarded" not in flat and "dijkstra" not in flat
        # arrays equal the ordinary input
        np.testing.assert_array_equal(req.elevation, task.elevation_m)
        np.testing.assert_array_equal(req.obstacles, task.obstacles)
        assert req.start == tuple(task.scene.start) and req.goal == tuple(task.scene.goal)
        assert req.cost_weight == task.weight and req.cost_model == task.objective
        np.testing.assert_array_equal(req.input_tensor, task.scene.input_tensor(task.variant))


def test_request_arrays_are_read_only_copies(tasks):
    task = tasks[1]
    before = task.elevation_m.copy()
    req = build_request(task)
    for name in ("elevation", "obstacles", "input_tensor"):
        a = getattr(req, name)
        assert not a.flags.writeable
        with pytest.raises(ValueError):
            a[0, 0] = 1
        assert not np.shares_memory(a, task.elevation_m)
    # even a planner that unlocks its copy and writes cannot reach the runner's data
    req.elevation.setflags(write=True)
    req.elevation[:] = -1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.sample_id = "y"
    with pytest.raises(TypeError):
        req.metadata["tile"] = None
    with pytest.raises(TypeError):
        req.metadata["tile"]["lat"] = 0
    np.testing.assert_array_equal(task.elevation_m, before)
    assert task.elevation_m.flags.writeable  # the runner's own data is untouched


def test_free_variant_request_clears_obstacles(tmp_path):
    F.write_cohort(tmp_path, kinds=("trap",))
    t = F.load(tmp_path, variant="free")[0]
    req = build_request(t)
    assert not req.obstacles.any() and t.scene.obstacles.any()
    assert not req.input_tensor[..., 2].any()


def test_request_rejects_bad_input():
    with pytest.raises(ProtocolError, match="not allowlisted"):
        _plain_request(metadata={"solvers": {}})
    with pytest.raises(ProtocolError, match="start"):
        _plain_request(start=(4, 0))
    with pytest.raises(ProtocolError, match="disagree"):
        _plain_request(cost_weight=2.0)
    with pytest.raises(ProtocolError, match="obstacles"):
        _plain_request(obstacles=np.full((4, 4), 2))


def test_remaining_wall_ms():
    assert _plain_request().remaining_wall_ms() == math.inf
    r = _plain_request(deadline_monotonic=time.monotonic() + 0.5)
    assert 0 < r.remaining_wall_ms() <= 500
    r = _plain_request(deadline_monotonic=time.monotonic() - 0.01)
    assert r.remaining_wall_ms() < 0


# --------------------------------------------------------------------------- #
# results
# --------------------------------------------------------------------------- #

def test_normalise_result_shapes_and_statuses():
    assert normalise_result([[0, 0], [1, 1]]).status == "ok"
    r = normalise_result({"path": None, "status": "no_path"})
    assert r.status == "no_path" and r.path is None
    for s in STATUSES:
        assert normalise_result(PlanResult(status=s)).status == s
    with pytest.raises(ProtocolError, match="status"):
        normalise_result(PlanResult(status="done"))
    with pytest.raises(ProtocolError, match="unknown key"):
        normalise_result({"path": None, "cost": 3.0})
    with pytest.raises(ProtocolError, match="counter"):
        normalise_result(PlanResult(work={"nodes": 3}))
    with pytest.raises(ProtocolError, match="non-negative"):
        normalise_result(PlanResult(work={"expansions": -1}))
    with pytest.raises(ProtocolError, match="stage"):
        normalise_result(PlanResult(stage_work={"polish": {"expansions": 1}}))


def test_stage_work_accumulates():
    r = normalise_result(PlanResult(stage_work={
        "primary": {"expansions": 5, "queue_operations": 9, "live_states": 7},
        "repair": {"expansions": 3, "live_states": 4},
        "fallback": {"expansions": 2, "queue_operations": 1, "live_states": 9}}))
    # sums for expansions and queue operations, maximum for live states
    assert r.work == {"expansions": 10, "queue_operations": 10, "live_states": 9}
    # a total below the accumulated stages is an under-report
    with pytest.raises(ProtocolError, match="accumulated stage work"):
        normalise_result(PlanResult(work={"expansions": 6},
                                    stage_work={"primary": {"expansions": 5},
                                                "fallback": {"expansions": 2}}))


def test_budget_problem():
    b = BudgetSpec(max_expansions=10, max_live_states=5)
    assert budget_problem(normalise_result(PlanResult(work={"expansions": 10, "live_states": 5})),
                          b) is None
    st, why = budget_problem(normalise_result(PlanResult(work={"expansions": 10})), b)
    assert st == "runtime_error" and "live_states" in why
    st, why = budget_problem(normalise_result(PlanResult(work={"expansions": 11,
                                                               "live_states": 1})), b)
    assert st == "budget_exhausted" and "expansions" in why
    assert budget_problem(normalise_result(PlanResult()), BudgetSpec(wall_time_ms=5)) is None


# --------------------------------------------------------------------------- #
# adapters
# --------------------------------------------------------------------------- #

ROUTE = [[0, 0], [1, 1], [2, 2], [3, 3]]


class _PlanObject:
    def plan(self, request):
        return PlanResult(path=ROUTE, work={"expansions": 1})


def _plan_fn(request, scale=1):
    return [[0, 0], [1, 1], [2, 2], [3, 3]][:: scale]


def test_adapter_shapes():
    req = _plain_request(input_tensor=np.zeros((4, 4, 3), np.float32))
    assert as_planner(_PlanObject())(req).work == {"expansions": 1}
    assert as_planner(_plan_fn, call_kwargs={"scale": 3})(req).path == [[0, 0], [3, 3]]
    seen = {}

    class Legacy:
        def predict_path(self, scene):
            seen.update(scene)
            return ROUTE

    res = as_planner(Legacy(), "scene")(req)
    assert res.path == ROUTE and res.status == "ok"
    assert set(seen) == set(REQUEST_FIELDS) | {"remaining_wall_ms"}
    assert isinstance(seen["metadata"], dict)
    got = {}
    res = as_planner(lambda t: got.setdefault("shape", t.shape) and ROUTE, "tensor")(req)
    assert got["shape"] == (4, 4, 3) and res.path == ROUTE
    with pytest.raises(TypeError):
        as_planner(object(), "request")
    with pytest.raises(ValueError):
        as_planner(_plan_fn, "image")


def test_flax_adapter():
    import flax.linen as nn
    import jax

    class Tiny(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(1)(x)[..., 0]  # (1, H, W) field

    m = Tiny()
    params = m.init(jax.random.PRNGKey(0), np.zeros((1, 4, 4, 3), np.float32))
    calls = {}

    def decoder(request, out):
        calls["shape"] = tuple(out.shape)
        return ROUTE

    p = as_planner(FlaxPlanner(m, params, decoder))
    res = p(_plain_request(input_tensor=np.ones((4, 4, 3), np.float32)))
    assert calls["shape"] == (1, 4, 4)
    assert res.path == ROUTE and res.precision == "fp32"


def test_factory_rule_and_load_planner():
    from passage_jax.planners import bfs

    assert is_factory(bfs.make_planner) and is_factory(bfs.BFSPlanner)
    assert not is_factory(F.straight_plan)
    p = load_planner("passage_jax.planners.bfs:make_planner", "request", {"max_expansions": 3})
    assert p.target.max_expansions == 3
    p = load_planner("fixtures_runner:straight_plan", "request", {"unused": 1})
    res = p(_plain_request())
    assert res.status == "ok" and len(res.path) == 4
    legacy = load_planner("fixtures_runner:LegacyPlanner", "scene")
    assert legacy(_plain_request()).status == "ok"
    with pytest.raises(ImportError, match="no attribute"):
        load_planner("passage_jax.planners.bfs:nope")
    with pytest.raises(ValueError, match="module:attr"):
        load_planner("passage_jax.planners.bfs")


@pytest.mark.parametrize("markers_key", [True, False])
def test_request_tensor_keeps_the_release_marker_convention(tmp_path, markers_key):
    # a release whose start is marked -1: the tensor a planner gets carries the stored
    # signs, and the request's metadata.markers says which sign is the start (also when
    # the file had no markers key and the convention was detected from the routes)
    import fixtures_data as D

    from passage_jax.data import load_scenes

    D.write_rows(tmp_path, D.make_rows(2, flipped=True, markers_key=markers_key))
    for s in load_scenes(tmp_path, 8, "test"):
        req = build_request(s.task("elevation", "obstacles"))
        t = np.asarray(req.input_tensor)
        # the start is the first cell of the released routes (hand-built: (1, 1))
        assert req.start == (1, 1) and req.goal == (6, 6)
        assert dict(req.metadata["markers"]) == {"start": -1, "goal": 1}
        assert np.argwhere(t[..., 1] == -1).tolist() == [[1, 1]]
        assert np.argwhere(t[..., 1] == 1).tolist() == [[6, 6]]


def test_request_shares_only_arrays_nobody_can_write(tmp_path):
    import mmap

    from passage_jax.protocol import HandedOver
    z = np.arange(16, dtype=np.float64).reshape(4, 4)
    path = tmp_path / "z.f64"
    path.write_bytes(z.tobytes())
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped = np.frombuffer(m, np.float64).reshape(4, 4)  # a read-only memory map: shared
    assert np.shares_memory(_plain_request(elevation=mapped).elevation, mapped)
    owner = z.copy()
    owner.setflags(write=False)  # read-only, but its owner could unlock it: copied
    assert not np.shares_memory(_plain_request(elevation=owner).elevation, owner)
    view = owner[:, :]  # a read-only view of an array that can be unlocked: copied
    assert not np.shares_memory(_plain_request(elevation=view).elevation, owner)
    assert not np.shares_memory(_plain_request(elevation=z).elevation, z)  # writable: copied
    # a handed-over tensor is taken as the request's own, made read-only
    t = np.zeros((4, 4, 3), np.float32)
    req = _plain_request(input_tensor=HandedOver(t))
    assert req.input_tensor is t and not t.flags.writeable
    with pytest.raises(ProtocolError, match="handed-over array"):
        _plain_request(input_tensor=HandedOver(np.zeros((4, 4, 3), np.float64)))


def test_request_metadata_is_frozen_all_the_way_down():
    import pickle

    from passage_jax.protocol import FrozenMapping
    md = {"tile": {"tiles": [[45, -1]], "lat": 45}, "markers": {"start": 1, "goal": -1}}
    req = _plain_request(metadata=md)
    assert isinstance(req.metadata, FrozenMapping) and req.metadata["tile"]["tiles"] == ((45, -1),)
    md["tile"]["lat"] = 0  # the caller's dict changes; the request's copy does not
    assert req.metadata["tile"]["lat"] == 45
    # a frozen mapping built by hand freezes what it is given
    hand = FrozenMapping({"tile": {"tiles": [[1, 2]]}})
    assert hand["tile"]["tiles"] == ((1, 2),)
    with pytest.raises(TypeError):
        hand["tile"]["x"] = 1
    again = pickle.loads(pickle.dumps(req.metadata))
    assert again == req.metadata and isinstance(again["tile"], FrozenMapping)
    with pytest.raises(ProtocolError, match="must be a mapping"):
        _plain_request(metadata=[("tile", 1)])


def test_input_tensor_is_the_stacked_planes(tasks):
    for task in tasks[:3]:
        s = task.scene
        markers = np.zeros(s.elevation_norm.shape, np.float32)
        markers[s.start] = s.metadata["markers"]["start"]
        markers[s.goal] = s.metadata["markers"]["goal"]
        for variant, obst in (("obstacles", s.obstacles), ("free", np.zeros_like(s.obstacles))):
            want = np.stack([s.elevation_norm.astype(np.float32), markers,
                             obst.astype(np.float32)], axis=-1)
            got = s.input_tensor(variant)
            assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
