"""Supervised execution: a planner in a worker process cannot take the run down.

Every worker is a spawned process that imports JAX (about a second each), so the
tests share workers where they can: one mixed-fault planner covers the process
faults in one executor.
"""
import json
import time

import fault_planners as FP
import fixtures_runner as F
import jax
import numpy as np
import pytest

from passage_jax.contract import IN_PROCESS_TIMING_PROFILE, SUPERVISED_TIMING_PROFILE
from passage_jax.data import load_tasks, shipped_cohort_root
from passage_jax.protocol import BudgetSpec, as_planner
from passage_jax.protocol.records import RECORD_KEYS
from passage_jax.run.execution import InProcessExecutor, PlannerBuildError, SupervisedExecutor, open_executor
from passage_jax.run.execution import synthetic_warmup_task as warmup_task
from passage_jax.run.execution.timing import execute
from passage_jax.run.specification.parse import SpecError, load_spec, parse_spec

# fields a supervised request must share with the in-process request on the same planner
SAME = ("status", "reported_status", "route_format", "route_len", "route_cost", "problem", "work",
        "error_type", "error")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort9")
    F.write_cohort(root, kinds=F.KINDS * 3)  # nine scenes, ids 0000000000 .. 0000000008
    ts = F.load(root)
    assert len(ts) == 9
    return ts


def _same(a, b, fields=SAME):
    for k in fields:
        assert a[k] == b[k], (k, a[k], b[k])


def test_nine_tasks_every_third_hangs(tasks):
    """The acceptance case: 100 ms deadline, tasks 2, 5 and 8 never return."""
    hang = [t.id for t in tasks[2::3]]
    budget = BudgetSpec(wall_time_ms=100)
    ref = [execute(as_planner(FP.make_hang(ids=[])), t, budget) for t in tasks]  # nobody hangs
    t_start = time.monotonic()
    with SupervisedExecutor("fault_planners:make_hang", kwargs={"ids": hang}, grace_ms=100) as ex:
        out = [ex.execute(t, budget) for t in tasks]
        stats = dict(ex.stats)
    elapsed = time.monotonic() - t_start
    assert elapsed < 60, elapsed  # bounded: three kills + three fresh workers
    statuses = [r["status"] for r, _ in out]
    assert statuses == ["ok", "ok", "timeout"] * 3
    for (rec, snap), (want, wsnap), t in zip(out, ref, tasks):
        if t.id in hang:
            assert rec["late"] and rec["returned_ms"] is None and rec["route_format"] == "none"
            assert rec["latency_ms"] >= 200.0 - 1e-6 and rec["overrun_ms"] >= 100.0 - 1e-6
            assert rec["error_type"] == "WorkerTimeout" and "killed" in rec["error"]
            assert snap[1] is None
        else:
            assert not rec["late"] and rec["returned_ms"] <= rec["latency_ms"] < 100.0
            _same(rec, want)
            np.testing.assert_array_equal(snap[1], wsnap[1])  # the same route as in-process
            assert rec["route_cost"] == pytest.approx(want["route_cost"], rel=1e-12)
    pids = [r["worker"]["pid"] for r, _ in out]
    assert len(set(pids)) == 3 and pids[0] == pids[1] == pids[2] != pids[3]  # replaced after each kill
    assert [r["worker"]["restarted"] for r, _ in out] == [False] * 3 + [True] * 6
    assert all(r["worker"]["warmup"] == 1 for r, _ in out)
    assert stats["timeouts_killed"] == 3 and stats["workers_started"] == 3
    assert stats["warmup_requests"] == 3 and stats["crashes"] == stats["oom_kills"] == 0


@pytest.mark.slow  # every fault in one executor (about 9 s); bench/faults.py runs each too
def test_process_faults_one_executor(tasks):
    """exit, segfault, memory cap, sleep past deadline+grace, late within grace, raise,
    looping route, 2**40 coordinate: each task its status, the run goes on."""
    ids = [t.id for t in tasks]
    faults = {
        ids[0]: ["make_exit", {"code": 3}],
        ids[1]: ["make_segv", {}],
        ids[2]: ["make_hog", {"chunk_mb": 32, "max_mb": 3072}],
        ids[3]: ["make_sleeper", {"sleep_ms": 5000}],
        ids[4]: ["make_sleeper", {"sleep_ms": 250}],
        ids[5]: ["make_raiser", {}],
        ids[6]: ["make_looper", {}],
        ids[7]: ["make_huge", {}],
        ids[8]: ["make_hog", {"chunk_mb": 16, "max_mb": 64}],  # raises MemoryError under the cap
    }
    budgets = [BudgetSpec(wall_time_ms=w) for w in (5000, 5000, 20000, 100, 100, 5000, 5000, 5000, 5000)]
    ref_planner = as_planner(FP.make_mixed({k: faults[k] for k in ids[5:]}))
    t_start = time.monotonic()
    with SupervisedExecutor("fault_planners:make_mixed", kwargs={"faults": faults}, grace_ms=400,
                            memory_mb=1200) as ex:
        out = [ex.execute(t, b) for t, b in zip(tasks, budgets)]
        stats = dict(ex.stats)
    assert time.monotonic() - t_start < 90
    recs = [r for r, _ in out]
    assert [r["status"] for r in recs] == ["runtime_error", "runtime_error", "oom", "timeout",
                                           "timeout", "runtime_error", "ok", "invalid_path", "oom"]
    assert recs[0]["error_type"] == "WorkerDied" and "exit code 3" in recs[0]["error"]
    assert recs[1]["error_type"] == "WorkerDied" and "SIGSEGV" in recs[1]["error"]
    assert recs[2]["error_type"] == "WorkerMemoryLimit" and "worker_memory_mb=1200" in recs[2]["error"]
    assert recs[2]["latency_ms"] < 20000  # stopped by the cap, not by the deadline
    # killed past deadline + grace: no return
    assert recs[3]["returned_ms"] is None and recs[3]["error_type"] == "WorkerTimeout"
    assert 500 - 1e-6 <= recs[3]["latency_ms"] < 4000
    # late but within the grace: the reply is kept, the worker lives on
    assert recs[4]["late"] and recs[4]["returned_ms"] >= 250 and recs[4]["route_format"] == "int"
    assert recs[4]["error"] is None and recs[4]["route_len"] > 0
    assert recs[5]["worker"]["pid"] == recs[4]["worker"]["pid"]
    assert recs[8]["error_type"] == "MemoryError" and recs[8]["worker"]["pid"] == recs[4]["worker"]["pid"]
    assert stats["crashes"] == 2 and stats["oom_kills"] == 1 and stats["timeouts_killed"] == 1
    assert stats["workers_started"] == 5
    # the faults that do not end the process record exactly what the in-process runner records
    for i in (5, 6, 7, 8):
        want, wsnap = execute(ref_planner, tasks[i], budgets[i])
        _same(recs[i], want)
        np.testing.assert_array_equal(out[i][1][1], wsnap[1]) if wsnap[1] is not None else None
    assert recs[6]["route_len"] == FP.LOOP_CELLS and recs[6]["problem"] is None
    assert "int_range" in recs[7]["problem"]
    assert out[7][1][2].max() == 2 ** 40  # the raw values kept, never cast


def test_adapters_and_device(tasks):
    """module:function, a plan object (class factory), a legacy predict_path and a Flax
    planner on a chosen device give the in-process records."""
    budget = BudgetSpec(wall_time_ms=10_000)
    t = tasks[1]
    cases = [("fixtures_runner:straight_plan", "request"), ("passage_jax.planners.bfs:BFSPlanner", "request"),
             ("fixtures_runner:LegacyPlanner", "scene")]
    from passage_jax.protocol import load_planner

    for entry, fmt in cases:
        want, wsnap = execute(load_planner(entry, fmt), t, budget)
        with SupervisedExecutor(entry, fmt, warmup=0) as ex:
            rec, snap = ex.execute(t, budget)
            assert ex.stats["warmup_requests"] == 0
        _same(rec, want)
        np.testing.assert_array_equal(snap[1], wsnap[1])
    dev = jax.devices("cpu")[-1]  # conftest asks for four host devices
    assert dev.id != jax.devices()[0].id
    with SupervisedExecutor("fault_planners:make_flax", device=dev) as ex:
        rec, _ = ex.execute(t, budget)
    assert rec["status"] == "ok" and rec["precision"] == "fp32"
    assert str(dev) in rec["message"], rec["message"]


def test_build_errors_name_the_entry_point():
    with pytest.raises(PlannerBuildError, match="no_such_module_xyz.*cannot import"):
        SupervisedExecutor("no_such_module_xyz:make_planner")
    with pytest.raises(PlannerBuildError, match="passage_jax.planners.bfs:make_planner failed: .*bogus"):
        InProcessExecutor("passage_jax.planners.bfs:make_planner", kwargs={"bogus": 1})


def test_in_process_executor_is_execute(tasks):
    spec = parse_spec(F.spec_dict("/x"))
    ex = open_executor(spec, 1234)
    assert isinstance(ex, InProcessExecutor) and ex.profile == IN_PROCESS_TIMING_PROFILE
    assert SupervisedExecutor.profile == SUPERVISED_TIMING_PROFILE != IN_PROCESS_TIMING_PROFILE
    assert "IPC" in SupervisedExecutor.timer and "worker_grace_ms" in SupervisedExecutor.timer
    with ex:
        rec, snap = ex.execute(tasks[2], spec.budget)
    want, wsnap = execute(as_planner(__import__("passage_jax.planners.bfs", fromlist=["x"]).make_planner()),
                          tasks[2], spec.budget)
    _same(rec, want)
    assert rec["worker"] is None and "worker" in RECORD_KEYS
    with pytest.raises(ValueError, match="supervised worker"):
        open_executor(parse_spec(F.spec_dict("/x", execution="supervised", budget={"wall_time_ms": 50})),
                      1234, planner=ex.planner)


def test_supervised_needs_a_wall_time_budget():
    with pytest.raises(ValueError, match="wall_time_ms"):
        SupervisedExecutor.execute(object.__new__(SupervisedExecutor), None, BudgetSpec())


@pytest.mark.parametrize("over, match", [
    ({"execution": "threads"}, "execution: must be one of"),
    ({"execution": "supervised"}, "execution: supervised execution needs budget.wall_time_ms"),
    ({"worker_memory_mb": 100}, "worker_memory_mb: only applies to execution: supervised"),
    ({"execution": "supervised", "budget": {"wall_time_ms": 5}, "worker_memory_mb": 0},
     "worker_memory_mb: must be a positive integer"),
    ({"worker_grace_ms": -1}, "worker_grace_ms: must be a finite number"),
    ({"worker_grace_ms": True}, "worker_grace_ms"),
    ({"worker_warmup": 1.5}, "worker_warmup: must be an integer >= 0"),
])
def test_spec_keys_refused(over, match):
    with pytest.raises(SpecError, match=match):
        parse_spec(F.spec_dict("/x", **over))


def test_spec_keys_accepted_and_configs(tmp_path):
    s = parse_spec(F.spec_dict("/x", execution="supervised", budget={"wall_time_ms": 100},
                               worker_memory_mb=2048, worker_grace_ms=50, worker_warmup=0))
    assert (s.execution, s.worker_memory_mb, s.worker_grace_ms, s.worker_warmup) == \
        ("supervised", 2048, 50, 0)
    assert s.to_dict()["execution"] == "supervised"
    d = parse_spec(F.spec_dict("/x"))
    assert (d.execution, d.worker_memory_mb, d.worker_grace_ms, d.worker_warmup) == \
        ("in_process", None, 200, 1)
    assert d.sha256() != s.sha256()


def test_warmup_scene_is_disjoint(tasks):
    t = tasks[0]
    w0, w1 = warmup_task(t, 0), warmup_task(t, 1)
    assert w0.id == "warmup-0" and not w0.obstacles.any()
    assert w0.elevation_m.shape == t.elevation_m.shape and w0.elevation_m.dtype == t.elevation_m.dtype
    assert w0.scene.input_tensor(w0.variant).dtype == t.scene.input_tensor(t.variant).dtype
    assert (w0.objective, w0.variant, w0.weight) == (t.objective, t.variant, t.weight)
    assert w0.scene.start == (0, 0) and w1.scene.start == (11, 0)
    assert not np.array_equal(w0.elevation_m, w1.elevation_m)
    # a plane: every second difference is zero, which no roster scene's terrain is
    assert np.allclose(np.diff(w0.elevation_m, 2, axis=0), 0)
    assert np.allclose(np.diff(w0.elevation_m, 2, axis=1), 0)
    for x in tasks:
        assert not np.allclose(np.diff(x.elevation_m, 2, axis=0), 0)


def test_shipped_bfs_config_supervised():
    """The bfs baseline config on shipped 64x64 tasks: supervised records equal the
    in-process ones."""
    spec = load_spec("configs/bfs.yaml")
    sup = parse_spec({**spec.to_dict(), "execution": "supervised", "budget": {"wall_time_ms": 5000}})
    ts = load_tasks(shipped_cohort_root(), 64, "test", spec.cost_model, spec.task_variant, n_samples=3)
    with open_executor(sup, 1234) as ex, open_executor(spec, 1234) as ip:
        assert isinstance(ex, SupervisedExecutor) and ex.planner_name == spec.inference
        for t in ts:
            (a, sa), (b, sb) = ex.execute(t, sup.budget), ip.execute(t, sup.budget)
            _same(a, b)
            np.testing.assert_array_equal(sa[1], sb[1])
            assert a["status"] == "ok"


@pytest.mark.slow  # run by CI after the default run (the default run stays under five minutes)
def test_run_spec_supervised_end_to_end(tmp_path):
    """Through run_spec: the hanging tasks time out in every pass, the manifest names the
    supervised boundary, and compare lists it against an in-process run's as a differing
    limit (refused only when identical limits are required)."""
    from passage_jax.evaluate.compare import CompareError, Side, check_identity, check_limits
    from passage_jax.evaluate.score import Score
    from passage_jax.run.loop import run_spec

    root = tmp_path / "cohort"
    F.write_cohort(root, kinds=F.KINDS * 3)
    hang = [t.id for t in F.load(root)[2::3]]
    common = dict(latency_warmup=0, latency_repeats=1, quality_repeat_index=0,
                  budget={"wall_time_ms": 100})
    sup = parse_spec(F.spec_dict(root, inference="fault_planners:make_hang", inference_kwargs={"ids": hang},
                                 execution="supervised", worker_grace_ms=100, **common))
    ip = parse_spec(F.spec_dict(root, inference="fault_planners:make_hang", inference_kwargs={"ids": []},
                                **common))
    t0 = time.monotonic()
    run_spec(sup, tmp_path / "sup", progress=False)
    assert time.monotonic() - t0 < 90
    run_spec(ip, tmp_path / "ip", progress=False)
    manifests = {}
    for name in ("sup", "ip"):
        folder = tmp_path / name / "seed-1234"
        manifests[name] = json.loads((folder / "manifest.json").read_text())
        recs = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
        want = ["ok", "ok", "timeout"] * 3 if name == "sup" else ["ok"] * 9
        assert [r["status"] for r in recs] == want * 2  # cold and warm
        assert all((r["worker"] is None) == (name == "ip") for r in recs)
    assert manifests["sup"]["timing"]["profile"] == SUPERVISED_TIMING_PROFILE
    assert manifests["ip"]["timing"]["profile"] == IN_PROCESS_TIMING_PROFILE
    side = {n: Side(path=n, seeds={"seed-1234": Score(folder=None, manifest=m, metrics={}, receipt={},
                                                      per_sample={})}, method_name=None)
            for n, m in manifests.items()}
    # one timing profile (complete_request_v1), two boundaries: accepted, listed as a limit
    assert check_identity(side["sup"], side["ip"])["timing_profile"] == "complete_request_v1"
    assert "timing_boundary" in check_limits(side["sup"], side["ip"], False)["differ"]
    with pytest.raises(CompareError, match="timing_boundary"):
        check_limits(side["sup"], side["ip"], True)
