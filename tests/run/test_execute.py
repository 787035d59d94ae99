"""One timed request: every terminal status, the deadline rule, device sync."""
import time

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.graph import route_cost
from passage_jax.planners import bfs, greedy
from passage_jax.protocol import BudgetSpec, PlanResult, as_planner
from passage_jax.run.execution.timing import execute


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return F.load(root)


def _p(fn):
    return as_planner(fn)


def test_ok_records_recost(tasks):
    t = tasks[2]
    rec, snap = execute(as_planner(bfs.make_planner()), t)
    assert rec["status"] == "ok" and rec["reported_status"] == "ok" and rec["problem"] is None
    expect = route_cost(snap[1], t.elevation_m, t.objective, t.weight)
    assert rec["route_cost"] == pytest.approx(expect, rel=1e-12)
    assert rec["latency_ms"] >= rec["returned_ms"] > 0
    assert rec["work"]["expansions"] > 0 and rec["route_format"] == "int"


def test_no_path_keeps_partial_route(tasks):
    trap = tasks[1]
    rec, snap = execute(as_planner(greedy.make_planner()), trap)
    assert rec["status"] == "no_path" and rec["route_format"] == "int"
    assert tuple(snap[1][0]) == tuple(trap.scene.start)


def test_invalid_paths(tasks):
    t = tasks[1]
    good = bfs.make_planner().plan(__import__("passage_jax.protocol", fromlist=["x"]).build_request(t)).path
    cases = {
        "float": lambda r: PlanResult(path=np.asarray(good, np.float64)),
        "out_of_bounds": lambda r: PlanResult(path=np.vstack([good, [[12, 11]]])),
        "gap": lambda r: PlanResult(path=np.asarray(good)[::2]),
        "obstacle": lambda r: PlanResult(path=np.array([[1, 1], [2, 2], [3, 3], [4, 4]])),
        "none": lambda r: PlanResult(path=None, status="ok"),
    }
    for name, fn in cases.items():
        rec, snap = execute(_p(fn), t)
        assert rec["status"] == "invalid_path", name
        assert rec["problem"], name
        assert rec["route_cost"] is None
    rec, snap = execute(_p(cases["float"]), t)
    assert rec["route_format"] == "float" and snap[1] is None and snap[2].dtype == np.float64


def test_budget_statuses(tasks):
    t = tasks[0]
    b = BudgetSpec(max_expansions=5)
    over = lambda r: PlanResult(path=bfs.BFSPlanner().plan(r).path, work={"expansions": 6})  # noqa
    rec, _ = execute(_p(over), t, b)
    assert rec["status"] == "budget_exhausted" and "exceeds" in rec["error"]
    missing = lambda r: PlanResult(path=bfs.BFSPlanner().plan(r).path)  # noqa: E731
    rec, _ = execute(_p(missing), t, b)
    assert rec["status"] == "runtime_error" and "no work.expansions" in rec["error"]
    rec, _ = execute(as_planner(bfs.make_planner()), t, b)  # honours the request budget
    assert rec["status"] == "budget_exhausted" and rec["work"]["expansions"] == 5
    rec, _ = execute(as_planner(bfs.make_planner()), t, BudgetSpec(max_expansions=10_000))
    assert rec["status"] == "ok"


def test_runtime_error_oom_cancelled_and_protocol_violation(tasks):
    t = tasks[0]

    def boom(r):
        raise ValueError("bad day")

    rec, snap = execute(_p(boom), t)
    assert rec["status"] == "runtime_error" and "bad day" in rec["error"]
    assert rec["error_type"] == "ValueError" and rec["route_format"] == "none"

    def oom(r):
        raise MemoryError()

    assert execute(_p(oom), t)[0]["status"] == "oom"

    def xla_oom(r):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")

    assert execute(_p(xla_oom), t)[0]["status"] == "oom"
    rec, _ = execute(_p(lambda r: PlanResult(status="cancelled")), t)
    assert rec["status"] == "cancelled"
    rec, _ = execute(_p(lambda r: PlanResult(path=[[1, 1]], status="finished")), t)
    assert rec["status"] == "runtime_error" and rec["error"].startswith("protocol:")
    rec, _ = execute(_p(lambda r: PlanResult(path=[[1, 1]], resource_peaks={"b": np.inf})), t)
    assert rec["status"] == "runtime_error"


def test_deadline_late_return_is_timeout_even_with_legal_route(tasks):
    t = tasks[0]
    sleepy = as_planner(F.make_sleepy(sleep_ms=60))
    rec, snap = execute(sleepy, t, BudgetSpec(wall_time_ms=20))
    assert rec["status"] == "timeout" and rec["reported_status"] == "ok"
    assert rec["problem"] is None and rec["late"] is True  # a legal route, still late
    assert rec["overrun_ms"] >= 30 and rec["returned_ms"] >= 60 and rec["deadline_ms"] == 20
    rec, _ = execute(sleepy, t, BudgetSpec(wall_time_ms=5000))
    assert rec["status"] == "ok" and rec["late"] is False and rec["overrun_ms"] == 0


def test_deadline_is_absolute_from_input_preparation(tasks):
    """The request's deadline is set when the timer starts, before the planner
    is called, and ``remaining_wall_ms`` counts down from it."""
    seen = {}

    def look(r):
        seen["rem"] = r.remaining_wall_ms()
        time.sleep(0.03)
        seen["rem2"] = r.remaining_wall_ms()
        return PlanResult(status="no_path")

    rec, _ = execute(_p(look), tasks[0], BudgetSpec(wall_time_ms=1000))
    assert 0 < seen["rem"] <= 1000 and seen["rem"] - seen["rem2"] >= 29
    assert rec["status"] == "no_path"


def test_jax_results_are_synchronised(tasks):
    import jax.numpy as jnp

    t = tasks[0]
    path = bfs.BFSPlanner().plan(__import__("passage_jax.protocol", fromlist=["x"]).build_request(t)).path

    def jax_plan(r):
        return PlanResult(path=jnp.asarray(path), work={"expansions": jnp.asarray(3)})

    rec, snap = execute(_p(jax_plan), t)
    assert rec["sync_arrays"] == 2 and rec["status"] == "ok" and rec["work"]["expansions"] == 3
    np.testing.assert_array_equal(snap[1], path)
