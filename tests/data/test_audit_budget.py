"""``audit`` is bounded by default: the A* cross-check of each task has an expansion
budget, a task whose solve runs out is censored (counted and listed, neither
qualified nor failed), and valid scenes are qualified in chunks."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from cli.__main__ import main as cli_main
from passage_jax.data import audit_dataset, load_scenes, shipped_cohort_root
from passage_jax.data.audit import (
    DEFAULT_EXPANSIONS_PER_CELL,
    chunk_scenes,
    qualify_scene_tasks,
    resolve_budget,
)
from passage_jax.data.writer import write_split
from passage_jax.graph import route_cost
from passage_jax.reference import TASK_KEYS, astar, qualify_scene, scipy_task_graph

N = 64
SPLIT = "test"
#: a hand budget near the median A* expansion count of the 64x64 cohort's tasks
K = 400
OLD_KEYS = ("c_star", "route_cost", "qualified", "reason", "solver", "work")


@pytest.fixture(scope="module")
def scenes():
    return load_scenes(shipped_cohort_root(), N, SPLIT, n_samples=None, workers=0)


@pytest.fixture(scope="module")
def expansions(scenes):
    """Per task: the unbounded A* expansion count (the search's own counter) and a
    lower bound computed independently from SciPy's Dijkstra: A* with a consistent
    heuristic expands every cell with g* + h < c* (at least once; a cell reopened on a
    last-ulp inconsistency of the heuristic counts again, so there is no matching
    upper bound)."""
    out = {}
    rr, cc = np.divmod(np.arange(N * N), N)
    for s in scenes:
        for key in TASK_KEYS:
            t = s.task(*key.split("/"))
            r = astar(t.elevation_m, t.obstacles, s.start, s.goal, t.objective, t.weight)
            assert r.status == "ok"
            g = sp_dijkstra(scipy_task_graph(t.elevation_m, t.obstacles, t.objective, t.weight),
                            indices=s.start[0] * N + s.start[1])
            f = g + np.hypot(rr - s.goal[0], cc - s.goal[1]) * 30.0
            c = g[s.goal[0] * N + s.goal[1]]
            assert r.cost == pytest.approx(c, rel=1e-12)
            lo = int(np.sum(f < c * (1 - 1e-9)))
            assert lo <= r.expansions, (s.id, key, lo, r.expansions)
            out[(s.id, key)] = (r.expansions, lo)
    return out


@pytest.fixture(scope="module")
def bounded():
    return audit_dataset(shipped_cohort_root(), [N], [SPLIT], workers=2, budget=K)


@pytest.fixture(scope="module")
def unbounded():
    return audit_dataset(shipped_cohort_root(), [N], [SPLIT], workers=2, budget=None)


def test_resolve_budget_and_chunks():
    assert resolve_budget("default", 64) == DEFAULT_EXPANSIONS_PER_CELL * 64 * 64
    assert resolve_budget(None, 64) is None and resolve_budget(7, 64) == 7
    for bad in (0, -3, 1.5, True, "many"):
        with pytest.raises(ValueError, match="budget"):
            resolve_budget(bad, 64)
    with pytest.raises(ValueError, match="chunk_size"):
        audit_dataset(shipped_cohort_root(), [N], [SPLIT], chunk_size=0)
    # a chunk holds at most CHUNK_CELLS task cells, never fewer than one scene
    assert chunk_scenes(64) == 64 and chunk_scenes(256) == 10 and chunk_scenes(4096) == 1


def test_censored_count_matches_the_expansion_counts(bounded, expansions):
    s = bounded["summary"]
    want = sorted(k for k, (e, _) in expansions.items() if e > K)
    assert 0 < len(want) < len(expansions)  # the hand budget censors some tasks, not all
    got = sorted((c["id"], c["task"]) for c in s["censored"])
    assert got == want and s["n_censored"] == len(want)
    # every task that must expand more than K cells, by the SciPy bound alone, is censored
    sure = {k for k, (_, lo) in expansions.items() if lo > K}
    assert sure and sure <= set(got)
    for c in s["censored"]:
        # the search stops when it has spent exactly its budget
        assert (c["solver"], c["budget"], c["work"], c["work_unit"]) == ("astar", K, K, "expansions")
    q = s["resolutions"][str(N)]["splits"][SPLIT]["qualification"]
    assert q["n_censored"] == len(want)
    assert q["n_qualified"] == len(expansions) - len(want) and q["n_tasks"] == len(expansions)
    # censored is not unqualified; the audit exits 0 on censoring alone
    assert s["unqualified"] == []
    assert s["reference_budget"]["max_expansions"] == {str(N): K}
    assert s["reference_budget"]["mode"] == "fixed"
    for e in bounded["scenes"]:
        for key, ref in e["references"].items():
            cens = expansions[(e["id"], key)][0] > K
            assert ref["censored"] is cens and ref["qualified"] is not cens
            assert (ref["censored_by"] == "astar") is cens
            assert ref["cross_solver"] == "astar"
            assert ref["cross_work"] == (K if cens else expansions[(e["id"], key)][0])
            # value iteration still finished: c* and the released route's cost agree
            assert ref["c_star"] == pytest.approx(ref["route_cost"], rel=1e-9)


def test_old_semantics_fail_what_the_audit_censors(bounded, scenes):
    # without censoring (qualify_scene's default, used by run admission) the same
    # budget fails the task as a solver disagreement
    first = next(c for c in bounded["summary"]["censored"])
    scene = next(s for s in scenes if s.id == first["id"])
    q = qualify_scene(scene, max_expansions=K, cross_check=True)[first["task"]]
    assert not q.qualified and not q.censored
    assert "disagree" in q.reason and "budget_exhausted" in q.reason


def test_unbounded_reproduces_per_scene_qualification(unbounded, scenes, expansions):
    s = unbounded["summary"]
    assert s["n_censored"] == 0 and s["censored"] == [] and s["unqualified"] == []
    assert s["reference_budget"]["max_expansions"] == {str(N): None}
    assert [e["id"] for e in unbounded["scenes"]] == [sc.id for sc in scenes]
    for e, sc in zip(unbounded["scenes"], scenes):
        old = qualify_scene(sc, cross_check=True)  # the previous audit's per-scene check
        for key, ref in e["references"].items():
            assert {k: ref[k] for k in OLD_KEYS} == {k: v for k, v in old[key].to_dict().items()
                                                   if k in OLD_KEYS}
            assert ref["cross_work"] == expansions[(e["id"], key)][0]


def test_default_budget_is_n_squared(scenes):
    rep = audit_dataset(shipped_cohort_root(), [N], [SPLIT], workers=0)
    b = rep["summary"]["reference_budget"]
    assert b["mode"] == "default" and b["max_expansions"] == {str(N): N * N}
    assert rep["summary"]["n_censored"] == 0  # no task of this cohort needs N² expansions


@pytest.mark.parametrize("chunk_size", [1, pytest.param(7, marks=pytest.mark.slow)])
def test_chunked_equals_per_scene(bounded, scenes, chunk_size):
    rep = audit_dataset(shipped_cohort_root(), [N], [SPLIT], workers=2, budget=K,
                        chunk_size=chunk_size)
    assert rep == bounded
    if chunk_size == 1:
        for e, sc in zip(rep["scenes"], scenes):
            assert e["references"] == qualify_scene_tasks(sc, K)


def test_defect_under_a_censored_cross_check_is_unqualified(tmp_path, scenes):
    # a legal, non-optimal label with a 1-expansion budget: every cross-check runs
    # out, yet the released route is checked against value iteration's c* and fails
    sub = scenes[:4]
    rows = [{"id": s.id, "tensor": s.input_tensor("obstacles"), "routes": dict(s.routes),
             "metadata": s.metadata} for s in sub]
    bad = None
    for i, sc in enumerate(sub):
        z, w = sc.elevation_m, sc.weight("elevation")
        best = route_cost(sc.routes[("elevation", "free")], z, "elevation", w)
        r = sc.routes[("slope_uphill", "free")]
        if route_cost(r, z, "elevation", w) > best * 1.001:
            rows[i]["routes"][("elevation", "free")] = r
            bad = sc.id
            break
    assert bad is not None
    write_split(tmp_path / "d", N, SPLIT, rows)
    out = tmp_path / "a.json"
    rc = cli_main(["audit", "--dataset-path", str(tmp_path / "d"), "--resolution", str(N),
                   "--json", str(out), "--workers", "0", "--max-expansions", "1"])
    rep = json.loads(out.read_text())
    s = rep["summary"]
    assert rc == 1
    assert [(u["id"], u["task"]) for u in s["unqualified"]] == [(bad, "elevation/free")]
    assert "not optimal" in s["unqualified"][0]["reason"]
    assert s["n_censored"] == 6 * len(sub) - 1
    assert (bad, "elevation/free") not in {(c["id"], c["task"]) for c in s["censored"]}


def test_cli_budget_options(tmp_path, scenes, capsys):
    rows = [{"id": s.id, "tensor": s.input_tensor("obstacles"), "routes": dict(s.routes),
             "metadata": s.metadata} for s in scenes[:2]]
    write_split(tmp_path / "d", N, SPLIT, rows)
    base = ["audit", "--dataset-path", str(tmp_path / "d"), "--resolution", str(N), "--workers", "0"]
    out = tmp_path / "a.json"
    assert cli_main([*base, "--json", str(out), "--max-expansions", "5"]) == 0
    rep = json.loads(out.read_text())
    err = capsys.readouterr().err
    assert rep["summary"]["n_censored"] == 12 and "12 reference task(s) censored" in err
    assert cli_main([*base, "--json", str(out), "--force", "--unbounded"]) == 0
    rep = json.loads(out.read_text())
    assert rep["summary"]["n_censored"] == 0
    assert rep["summary"]["reference_budget"]["mode"] == "unbounded"
    for bad in (["--max-expansions", "0"], ["--unbounded", "--max-expansions", "9"]):
        with pytest.raises(SystemExit) as e:
            cli_main([*base, *bad])
        assert e.value.code == 2
