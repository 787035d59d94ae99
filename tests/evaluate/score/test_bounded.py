"""Scoring any planner output in bounded memory (issue 10, item 3).

Very long valid and invalid routes, looping routes, huge / negative
coordinates, empty, ragged, None, float and object routes: every one gets its
fields, checked against independent NumPy/SciPy computations; a long route
never reaches the pairwise geometry, never pads other tasks, and scoring a
100,000-cell route stays under a fixed peak memory (measured in a subprocess).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import passage_jax.metrics.host as host
import passage_jax.metrics.host_numpy as host_numpy
import passage_jax.metrics.host_stream as host_stream
from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET
from passage_jax.graph import route_cost
from passage_jax.metrics import score_routes
from passage_jax.testing import candidate_set, kernel_tol, make_scene

N_LONG = 100_000
ROOT = Path(__file__).resolve().parents[3]


# ----------------------------------------------------------------------------- material

def looping(route, n: int, other=None) -> np.ndarray:
    """A legal route of exactly ``n`` cells (``n`` >= len(route)): back and forth
    between the first cell of ``route`` and ``other`` (a neighbour of it; default
    the route's second cell), then the rest of ``route`` to the goal."""
    r = np.asarray(route, np.int32)
    other = r[1] if other is None else np.asarray(other, np.int32)
    k = n - (len(r) - 1)  # cells before route[1:]; must be odd to end on route[0]
    if k % 2 == 0:
        raise ValueError("n - len(route) must be even")
    prefix = np.where((np.arange(k) % 2 == 0)[:, None], r[0], other)
    return np.concatenate([prefix, r[1:]]).astype(np.int32)


def off_route_neighbour(task):
    """A free in-grid neighbour of the start that is not on the task's route."""
    ref = np.asarray(task.route)
    on = set(map(tuple, ref.tolist()))
    ob = np.asarray(task.obstacles, bool)
    r0, c0 = ref[0]
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            r, c = r0 + dr, c0 + dc
            if (dr or dc) and 0 <= r < ob.shape[0] and 0 <= c < ob.shape[1] \
                    and not ob[r, c] and (r, c) not in on:
                return np.array([r, c], np.int32)
    raise AssertionError("no free off-route neighbour of the start")


@pytest.fixture(scope="module")
def scene_task():
    rng = np.random.default_rng(5)
    scene, cs = make_scene(rng, 64, "bounded")
    task = scene.task("elevation", "obstacles")
    return scene, task, float(cs[("elevation", "obstacles")])


def long_valid(task):
    ref = np.asarray(task.route, np.int32)
    n = N_LONG if (N_LONG - len(ref)) % 2 == 0 else N_LONG - 1
    return looping(ref, n, off_route_neighbour(task))


def geometry_brute(a, b):
    """ASSD, H95, IoU by docs/contract.md §4 with plain SciPy: directed minima over the
    distinct cells (cdist), spread to every visit (multiplicity counts)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ua, ia = np.unique(a, axis=0, return_inverse=True)
    ub, ib = np.unique(b, axis=0, return_inverse=True)
    d = cdist(ua, ub)
    da = d.min(axis=1)[ia.reshape(-1)]
    db = d.min(axis=0)[ib.reshape(-1)]
    steps = np.abs(np.diff(b, axis=0)).sum(axis=1)
    l_star = np.where(steps == 2, math.sqrt(2.0), 1.0).sum()
    assd = (da.sum() + db.sum()) / (len(a) + len(b)) / l_star
    h95 = max(np.percentile(da, 95), np.percentile(db, 95))
    sa, sb = set(map(tuple, ua.tolist())), set(map(tuple, ub.tolist()))
    return assd, h95, len(sa & sb) / len(sa | sb)


# ----------------------------------------------------------------------------- every kind of record

def test_every_kind_of_route(scene_task):
    scene, task, c = scene_task
    ref = np.asarray(task.route, np.int32)
    good = long_valid(task)
    bad = good.copy()
    bad[N_LONG // 2:, 0] += 3  # a jump halfway: disconnected, 100,000 cells
    ending = good[:-1]         # legal steps but does not end at the goal
    cands = [
        good, bad, ending,
        [[2 ** 40, 0], [1, 1]],                  # beyond int32: malformed
        np.array([[-5, 3], [-4, 3]], np.int64),  # negative: well formed, out of bounds
        np.zeros((0, 2), np.int32),              # empty: well formed, not connected
        [[0, 0], [1]],                           # ragged
        None,
        ref.astype(np.float64),                  # integral floats: malformed
        np.array([object(), object()], dtype=object),
        ref,                                     # the exact route
    ]
    n = len(cands)
    out = score_routes(cands, [task] * n, np.full(n, c), np.ones(n, bool))
    valid = [True] + [False] * (n - 2) + [True]
    assert out["valid_path"].tolist() == valid
    assert out["success"].tolist() == valid
    assert out["connected_path"].tolist() == valid  # the invalid ones are all disconnected
    assert out["obstacle_traversals"].tolist() == [0] * n
    assert out["malformed"].tolist() == [False] * 3 + [True, False, False, True, True, True, True,
                                                        False]
    assert "int32 range" in out["problem"][3]
    assert out["problem"][7] == "route is None"
    assert "integers" in out["problem"][8]
    # a valid looping route: recosted over every step, regret from that cost
    cost = route_cost(good, task.elevation_m, task.objective, task.weight)
    assert out["predicted_cost"][0] == pytest.approx(cost, rel=1e-9)
    assert out["regret"][0] == pytest.approx((cost - c) / c, rel=1e-9)
    assert out["regret"][0] > 100  # 100,000 cells against a short optimum
    geo = geometry_brute(good, ref)
    # half the cells are one off-route cell, a neighbour of the start
    assert geo[0] > 0 and geo[1] in (1.0, math.sqrt(2.0)) and geo[2] == len(ref) / (len(ref) + 1)
    np.testing.assert_allclose([out[k][0] for k in ("assd", "h95", "path_iou")], geo,
                               rtol=1e-12)
    # every failure: censored cost, failure regret, NaN geometry
    for i in range(1, n - 1):
        assert out["predicted_cost"][i] == CENSOR_FACTOR * c
        assert out["regret"][i] == FAILURE_REGRET
        assert all(np.isnan(out[k][i]) for k in ("assd", "h95", "path_iou"))
    assert out["regret"][-1] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose([out[k][-1] for k in ("assd", "h95", "path_iou")], [0, 0, 1])


def test_obstacle_crossing_long_route(scene_task):
    scene, task, c = scene_task
    good = long_valid(task)
    ob = np.asarray(task.obstacles, bool)
    r, q = np.argwhere(ob)[0]
    crossing = good.copy()
    crossing[1000] = (r, q)  # lands on an obstacle (and breaks two steps)
    out = score_routes([crossing], [task], [c], [True])
    assert out["obstacle_traversals"][0] == 1
    assert not out["valid_path"][0] and np.isnan(out["assd"][0])


def test_request_not_ok_long_route_is_a_failure(scene_task):
    scene, task, c = scene_task
    out = score_routes([long_valid(task)], [task], [c], [False])
    assert out["connected_path"][0] and not out["valid_path"][0]
    assert out["regret"][0] == FAILURE_REGRET and np.isnan(out["h95"][0])


# ----------------------------------------------------------------------------- long path = kernel

def _assert_same(a, b):
    for k in ("connected_path", "obstacle_traversals", "obstacle_violation", "valid_path",
              "success", "malformed"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # floats to a few ulp (a cost summed over a differently padded row, as with another
    # batch size); regret is relative to c*, so its ulp are those of the cost / c*
    for k in ("predicted_cost", "regret", "assd", "h95", "path_iou"):
        geometry = k in ("assd", "h95", "path_iou")
        np.testing.assert_allclose(a[k], b[k], rtol=kernel_tol(1e-12) if geometry else 1e-12,
                                   atol=1e-12 if k == "regret" else kernel_tol(0.0) if geometry else 0,
                                   equal_nan=True, err_msg=k)
    assert list(a["problem"]) == list(b["problem"])


def test_long_route_path_matches_the_kernel():
    rng = np.random.default_rng(11)
    cands, tasks, cs = [], [], []
    for k, size in enumerate((64, 128)):
        scene, c_of = make_scene(rng, size, f"eq{k}")
        for obj, var in (("elevation", "obstacles"), ("energy", "free")):
            t = scene.task(obj, var)
            for cand in candidate_set(scene, obj, var, rng, 16):
                cands.append(cand)
                tasks.append(t)
                cs.append(c_of[(obj, var)])
            cands.append(looping(t.route, len(t.route) + 40))  # revisits, moderate length
            tasks.append(t)
            cs.append(c_of[(obj, var)])
    n = len(cands)
    ok = rng.random(n) < 0.9
    fused = score_routes(cands, tasks, cs, ok)
    assert fused["valid_path"].sum() >= n // 3 and (~fused["valid_path"]).sum() >= 5
    _assert_same(score_routes(cands, tasks, cs, ok, long_route=0), fused)      # all long
    lens = sorted(len(x) for x in cands)
    _assert_same(score_routes(cands, tasks, cs, ok, long_route=lens[n // 2]), fused)  # mixed


def test_route_geometry_host_matches_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(50):
        a = rng.integers(-3, 20, (rng.integers(1, 80), 2))
        b = rng.integers(0, 20, (rng.integers(2, 80), 2))
        np.testing.assert_allclose(host_numpy.route_geometry_host(a, b), geometry_brute(a, b),
                                   rtol=1e-12)
    assert all(np.isnan(host_numpy.route_geometry_host(np.zeros((0, 2)), [[0, 0], [0, 1]])))
    far = np.array([[0, 0], [0, 1 << 15]])  # beyond the geometry window: NaN, as the kernel
    assert all(np.isnan(host_numpy.route_geometry_host(far, [[0, 0], [0, 1]])))


def test_long_routes_never_pad_others_nor_reach_the_geometry(scene_task, monkeypatch):
    scene, task, c = scene_task
    good = long_valid(task)
    bad = good[:-1]
    calls, geoms = [], []
    kernel, geo = host_stream.score_tasks_packed_exported, host_stream.route_geometry_host

    def spy(cand, ref, *a, geometry=True, **kw):
        calls.append((cand.cells.shape, geometry, None if ref is None else ref.cells.shape))
        return kernel(cand, ref, *a, geometry=geometry, **kw)

    def spy_geo(a, b):
        geoms.append(len(a))
        return geo(a, b)

    monkeypatch.setattr(host_stream, "score_tasks_packed_exported", spy)
    monkeypatch.setattr(host_stream, "route_geometry_host", spy_geo)
    ref = np.asarray(task.route, np.int32)
    out = score_routes([ref, good, bad, ref[:5]], [task] * 4, [c] * 4, [True] * 4)
    assert out["valid_path"].tolist() == [True, True, False, False]
    pairwise = [s for s, g, _ in calls if g]
    assert pairwise and max(s[1] for s in pairwise) <= host.LONG_ROUTE
    # the two short routes keep the bucket of their own length
    assert {s[1] for s in pairwise} == {host._bucket(len(ref))}
    long_calls = [(s, r) for s, g, r in calls if not g]
    assert long_calls and all(r is None for _, r in long_calls)
    assert all(s[1] >= N_LONG - 1 for s, _ in long_calls)
    assert geoms == [len(good)]  # the valid long route only; the invalid one never


# ----------------------------------------------------------------------------- memory

_MEMORY_SCRIPT = textwrap.dedent("""
    import json, re, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_bounded import long_valid, make_scene
    from passage_jax.metrics import score_routes

    def hwm_kb():
        # this process's own peak (VmHWM starts afresh at exec; ru_maxrss would carry
        # the forking parent's peak across exec)
        text = open("/proc/self/status").read()
        return int(re.search(r"VmHWM:\\s+(\\d+) kB", text).group(1))

    scene, cs = make_scene(np.random.default_rng(5), 64, "bounded")
    task = scene.task("elevation", "obstacles")
    c = cs[("elevation", "obstacles")]
    good = long_valid(task)
    bad = good.copy(); bad[-1] = (-5, 2 ** 31 - 1)
    out = score_routes([good, bad], [task, task], [c, c], [True, True])
    print(json.dumps({{"valid": out["valid_path"].tolist(), "h95": float(out["h95"][0]),
                      "maxrss_kb": hwm_kb()}}))
""")


def test_peak_memory_of_a_100000_cell_route_is_bounded(tmp_path):
    script = tmp_path / "score_long.py"
    script.write_text(_MEMORY_SCRIPT.format(tests=str(Path(__file__).parent)))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["valid"] == [True, False] and got["h95"] >= 1.0
    peak_kb = got["maxrss_kb"]  # the child's own peak (other children do not count)
    assert peak_kb > 0
    # the pairwise matrix alone would be 4e10 bytes; the whole process stays far below 2 GB
    assert peak_kb < 2 * 1024 * 1024, f"peak RSS {peak_kb / 1024:.0f} MiB"


# ----------------------------------------------------------------------------- end to end

WILD = ("loop", "loop_bad", "huge", "negative", "empty", "ragged", "none", "float")


def make_wild():
    """Factory: a planner whose answer depends on the task (in first-seen order):
    a 100,000-cell looping legal route, the same not ending at the goal, 2**40
    as a coordinate, negative cells, an empty array, a ragged list, None and
    float cells (importable as ``tests.evaluate.score.test_bounded:make_wild``)."""
    from passage_jax.planners.bfs import BFSPlanner
    from passage_jax.protocol import PlanResult

    inner = BFSPlanner()
    kind_of: dict = {}

    def plan(request):
        kind = kind_of.setdefault(request.sample_id, WILD[len(kind_of) % len(WILD)])
        path = np.asarray(inner.plan(request).path, np.int32)
        if kind in ("loop", "loop_bad"):
            n = N_LONG if (N_LONG - len(path)) % 2 == 0 else N_LONG - 1
            path = looping(path, n)
            return PlanResult(path=path if kind == "loop" else path[:-1])
        return PlanResult(path={
            "huge": [[2 ** 40, 0], [1, 1]], "negative": np.array([[-5, 3], [-4, 3]]),
            "empty": np.zeros((0, 2), np.int64), "ragged": [[0, 0], [1]], "none": None,
            "float": path.astype(np.float64)}[kind])

    return plan


def test_run_with_wild_routes_scores_completely(tmp_path):
    from score_support import copy_cohort, spec_dict

    from passage_jax.evaluate.score import score_run
    from passage_jax.run import parse_spec, run_spec

    cohort = copy_cohort(tmp_path / "cohort")
    spec = spec_dict("wild", cohort, n_samples=len(WILD),
                     inference="tests.evaluate.score.test_bounded:make_wild",
                     results_root=str(tmp_path / "results"))
    run_spec(parse_spec(spec), tmp_path / "run", progress=False)
    score_run(tmp_path / "run")
    folder = tmp_path / "run" / "seed-1234"
    with np.load(folder / "per_sample.npz", allow_pickle=False) as z:
        ps = {k: z[k] for k in z.files}
    with open(folder / "metrics.json") as f:
        metrics = json.load(f)
    order = np.argsort(ps["task_index"][ps["primary_quality"]])
    q = {k: v[ps["primary_quality"]][order] for k, v in ps.items() if np.ndim(v)}
    kinds = list(WILD)  # the cold pass sees the tasks in task order
    assert q["valid_path"].tolist() == [k == "loop" for k in kinds]
    # the runner records every illegal route as invalid_path; the score still scores it
    assert q["status"].tolist() == ["ok"] + ["invalid_path"] * (len(kinds) - 1)
    assert q["route_length"][0] == q["route_length"][1] + 1 >= N_LONG - 1
    assert q["regret"][0] > 100 and math.isfinite(q["h95"][0]) and q["path_iou"][0] <= 1
    assert (q["regret"][1:] == FAILURE_REGRET).all() and np.isnan(q["assd"][1:]).all()
    assert q["malformed"].tolist() == [k in ("huge", "ragged", "none", "float") for k in kinds]
    assert q["route_format"].tolist() == ["int", "int", "int_range", "int", "int", "object",
                                          "none", "float"]
    assert metrics["primary"]["success_rate"] == pytest.approx(1 / len(kinds))
