"""Baseline planners against independent computations on tiny scenes."""
from collections import deque

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.graph import route_cost, route_problem
from passage_jax.planners import bfs, bounded, exact, greedy
from passage_jax.protocol import BudgetSpec, build_request


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return {t.id: t for t in F.load(root)}


def _optimal_cost(task):
    """Independent optimum: SciPy Dijkstra on the explicit sparse graph."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra as sp_dijkstra

    from passage_jax.graph import MOVES, edge_cost_field_np

    z, o = task.elevation_m, task.obstacles
    h, w = z.shape
    C = edge_cost_field_np(z, o, task.objective, task.weight)
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        for r in range(h):
            for c in range(w):
                if np.isfinite(C[k, r, c]):
                    rows.append(r * w + c)
                    cols.append((r + dr) * w + c + dc)
                    vals.append(C[k, r, c])
    g = coo_matrix((vals, (rows, cols)), shape=(h * w, h * w)).tocsr()
    d = sp_dijkstra(g, indices=task.scene.start[0] * w + task.scene.start[1])
    return d[task.scene.goal[0] * w + task.scene.goal[1]]


def _fewest_steps(obst, start, goal):
    """Independent BFS distance (steps) on the 8-connected grid."""
    h, w = obst.shape
    dist = {start: 0}
    q = deque([start])
    while q:
        u = q.popleft()
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                v = (u[0] + dr, u[1] + dc)
                if (dr or dc) and 0 <= v[0] < h and 0 <= v[1] < w and not obst[v] and v not in dist:
                    dist[v] = dist[u] + 1
                    q.append(v)
    return dist.get(goal)


def test_exact_matches_independent_optimum(tasks):
    p = exact.make_planner()
    for t in tasks.values():
        res = p.plan(build_request(t))
        assert res.status == "ok" and res.precision == "fp64"
        assert route_problem(res.path, t.scene.start, t.scene.goal, t.obstacles) is None
        c = route_cost(res.path, t.elevation_m, t.objective, t.weight)
        assert c == pytest.approx(_optimal_cost(t), rel=1e-12)


def test_bounded_optimal_and_budgeted(tasks):
    t = tasks["0000000001"]  # trap: needs a detour
    res = bounded.make_planner().plan(build_request(t))
    assert res.status == "ok"
    assert route_cost(res.path, t.elevation_m, t.objective, t.weight) == \
        pytest.approx(_optimal_cost(t), rel=1e-12)
    assert res.work["expansions"] > 5 and res.stage_work["primary"] == res.work
    # the request's budget is honoured (tighter than the planner's own limit)
    res = bounded.make_planner(max_expansions=1000).plan(
        build_request(t, BudgetSpec(max_expansions=5)))
    assert res.status == "budget_exhausted" and res.path is None
    assert res.work["expansions"] <= 5
    d = bounded.make_planner(algorithm="dijkstra").plan(build_request(t))
    assert d.work["expansions"] >= res.work["expansions"]
    with pytest.raises(TypeError, match="unknown inference_kwargs"):
        bounded.make_planner(budget=3)


def test_bfs_fewest_steps_and_regret(tasks):
    p = bfs.make_planner()
    for t in tasks.values():
        res = p.plan(build_request(t))
        assert res.status == "ok"
        assert route_problem(res.path, t.scene.start, t.scene.goal, t.obstacles) is None
        assert len(res.path) - 1 == _fewest_steps(t.obstacles, t.scene.start, t.scene.goal)
    hill = tasks["0000000002"]
    res = p.plan(build_request(hill))
    assert route_cost(res.path, hill.elevation_m, hill.objective, hill.weight) > \
        _optimal_cost(hill) * 1.01
    res = bfs.make_planner(max_expansions=3).plan(build_request(hill))
    assert res.status == "budget_exhausted" and res.work["expansions"] == 3


def test_bfs_unreachable_goal():
    o = np.zeros((5, 5), bool)
    o[2, :] = True
    from passage_jax.graph import GraphSpec
    from passage_jax.protocol import PlanRequest

    req = PlanRequest("u", np.zeros((5, 5)), o, (0, 0), (4, 4), "distance", 0.0,
                      GraphSpec("distance", 0.0))
    res = bfs.make_planner().plan(req)
    assert res.status == "no_path" and res.path is None
    assert greedy.make_planner().plan(req).status == "no_path"


def test_bfs_stops_at_deadline(tasks):
    import time

    req = build_request(tasks["0000000000"], deadline_monotonic=time.monotonic() - 1)
    assert bfs.make_planner().plan(req).status == "timeout"


def test_greedy_walks_or_fails(tasks):
    p = greedy.make_planner()
    for t in tasks.values():
        res = p.plan(build_request(t))
        path = np.asarray(res.path)
        assert tuple(path[0]) == tuple(t.scene.start)
        steps = np.abs(np.diff(path, axis=0)).max(axis=1)
        assert np.all(steps == 1)
        assert not t.obstacles[path[:, 0], path[:, 1]].any()
        g = np.asarray(t.scene.goal)
        d = np.hypot(*(path - g).T)
        assert np.all(np.diff(d) < 0)  # strictly closer every step: no backtracking
        if t.obstacles.any():
            assert res.status == "no_path" and tuple(path[-1]) != tuple(t.scene.goal)
        else:
            assert res.status == "ok" and tuple(path[-1]) == tuple(t.scene.goal)
    with pytest.raises(TypeError):
        greedy.make_planner(max_expansions=3)
