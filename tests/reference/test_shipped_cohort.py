"""Exact references on every scene of the shipped real-terrain cohort: value
iteration agrees with A* and with SciPy csgraph, its route is legal and recosts
to c*, and the released labels qualify."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from passage_jax.graph import MOVES, GraphSpec, edge_cost_field_np, route_cost, route_problem
from passage_jax.reference import qualification_failures, qualify_scenes, solve_tasks

try:
    from passage_jax.data import load_scenes, shipped_cohort_root
    ROOT = shipped_cohort_root()
except Exception:  # the cohort is optional until it ships
    ROOT = None

SPLITS = ("validation", "calibration", "test")


def _scenes(res):
    if ROOT is None or not (ROOT / f"{res}x{res}").is_dir():
        pytest.skip(f"no shipped {res}x{res} cohort")
    return [s for split in SPLITS if (ROOT / f"{res}x{res}" / split).is_dir()
            for s in load_scenes(ROOT, res, split, n_samples=None)]


def _scipy_c_star(task):
    z, o = task.elevation_m, task.obstacles
    C = edge_cost_field_np(z, o, task.objective, task.weight)
    h, w = z.shape
    idx = np.arange(h * w).reshape(h, w)
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        r, c = np.nonzero(np.isfinite(C[k]))
        rows.append(idx[r, c]), cols.append(idx[r + dr, c + dc]), vals.append(C[k][r, c])
    g = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(h * w, h * w))
    d = sp_dijkstra(g, indices=int(idx[task.scene.start]))
    return float(d[idx[task.scene.goal]])


@pytest.mark.parametrize("res", [64, pytest.param(128, marks=pytest.mark.slow),
                                 pytest.param(256, marks=pytest.mark.slow)])
def test_cohort_references(res):
    scenes = _scenes(res)
    assert scenes
    tasks = [s.task(o, v) for s in scenes for o in ("elevation", "slope_uphill", "energy")
             for v in ("free", "obstacles")]
    vi = solve_tasks(tasks, "vi")
    cpu = solve_tasks(tasks, "astar")
    for t, a, b in zip(tasks, vi, cpu):
        where = f"scene {t.id} {t.objective}/{t.variant}"
        assert a.status == b.status == "ok", where
        assert abs(a.c_star - b.c_star) <= 1e-9 * b.c_star, where
        assert route_problem(a.route, t.scene.start, t.scene.goal, t.obstacles) is None, where
        spec = GraphSpec(t.objective, t.weight)
        assert spec.costs_agree(route_cost(a.route, t.elevation_m, spec), a.c_star), where
    for t, a in list(zip(tasks, vi))[:: max(1, len(tasks) // 24)]:
        ref = _scipy_c_star(t)
        assert abs(a.c_star - ref) <= 1e-9 * ref, f"scene {t.id} {t.objective}/{t.variant}"
    qs = qualify_scenes(scenes, cross_check=False)
    assert [f for q in qs for f in qualification_failures(q)] == []
