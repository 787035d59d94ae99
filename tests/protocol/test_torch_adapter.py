"""The PyTorch planner adapter (TorchPlanner) and its example planner (planners.torch_greedy):
lazy import, inputs on the device in the requested dtype, the result back on the host
unchanged, the runner's records, and one end-to-end run."""
import json
import subprocess
import sys

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.graph import GraphSpec
from passage_jax.graph.moves import MOVES
from passage_jax.planners.greedy import GreedyPlanner
from passage_jax.protocol import PlanRequest, PlanResult, as_planner, build_request, load_planner
from passage_jax.protocol.records import load_paths, read_requests, route_of
from passage_jax.run.execution.timing import execute

SKIP = "the torch extra is not installed (pip install -e '.[torch]')"


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason=SKIP)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return root


@pytest.fixture(scope="module")
def tasks(cohort):
    return {t.scene.metadata["index"]: t for t in F.load(cohort)}  # 0 open, 1 trap, 2 hill


def numpy_greedy(obstacles, start, goal):
    """The greedy walk in NumPy: step to the free neighbour with the smallest squared
    distance to the goal (first in MOVES order) while it is strictly below the current one."""
    h, w = obstacles.shape
    goal = np.asarray(goal)
    cur, cells = np.asarray(start), [tuple(start)]
    while tuple(cur) != tuple(goal):
        nb = cur + MOVES.astype(np.int64)
        ok = (nb[:, 0] >= 0) & (nb[:, 0] < h) & (nb[:, 1] >= 0) & (nb[:, 1] < w)
        ok[ok] = ~obstacles[nb[ok, 0], nb[ok, 1]]
        d2 = ((nb - goal) ** 2).sum(1)
        ok &= d2 < ((cur - goal) ** 2).sum()
        if not ok.any():
            return np.asarray(cells, np.int64), "no_path"
        cur = nb[np.flatnonzero(ok)[np.argmin(d2[ok])]]
        cells.append(tuple(cur))
    return np.asarray(cells, np.int64), "ok"


def _request(rng, n=17, coverage=0.25, **kw):
    obst = rng.random((n, n)) < coverage
    start, goal = tuple(rng.integers(0, n, 2)), tuple(rng.integers(0, n, 2))
    obst[start] = obst[goal] = False
    return PlanRequest(sample_id="r", elevation=rng.normal(500.0, 30.0, (n, n)), obstacles=obst,
                       start=start, goal=goal, cost_model="elevation", cost_weight=62.4,
                       graph=GraphSpec(cost_model="elevation", cost_weight=62.4, pixel_size_m=30.0),
                       input_tensor=rng.random((n, n, 3)).astype(np.float32), **kw)


# ---------------------------------------------------------------- without torch


def test_importing_the_package_and_the_adapter_never_imports_torch():
    code = ("import passage_jax, passage_jax.protocol, passage_jax.planners, "
            "passage_jax.protocol.torch_adapter, passage_jax.planners.torch_greedy, sys; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_missing_torch_is_a_clear_error(monkeypatch):
    from passage_jax.planners import torch_greedy
    from passage_jax.protocol.torch_adapter import TorchPlanner

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    for build in (lambda: TorchPlanner(lambda *a: None), torch_greedy.make_planner):
        with pytest.raises(ImportError, match=r"torch extra.*pip install .*\.\[torch\]"):
            build()


# ---------------------------------------------------------------- the example planner


def test_torch_greedy_matches_the_numpy_walk_and_the_greedy_baseline(torch):
    from passage_jax.planners import torch_greedy

    rng = np.random.default_rng(7)
    planner = torch_greedy.make_planner()
    outcomes = set()
    for _ in range(60):
        req = _request(rng, n=int(rng.integers(5, 25)), coverage=float(rng.uniform(0, 0.4)))
        res = planner.plan(req)
        route, status = numpy_greedy(np.asarray(req.obstacles), req.start, req.goal)
        assert isinstance(res.path, np.ndarray) and res.path.dtype == np.int64
        np.testing.assert_array_equal(res.path, route)
        assert res.status == status and res.precision == "fp32"
        base = GreedyPlanner().plan(req)  # the baseline's own (Euclidean) implementation
        np.testing.assert_array_equal(res.path, base.path)
        assert res.status == base.status
        outcomes.add(status)
    assert outcomes == {"ok", "no_path"}  # both endings were exercised


def test_execute_records_the_torch_route(torch, tasks):
    from passage_jax.planners import torch_greedy

    planner = as_planner(torch_greedy.make_planner(), name="torch_greedy")
    for index, want in ((0, "ok"), (2, "ok"), (1, "no_path")):  # open, hill, trap
        t = tasks[index]
        rec, snap = execute(planner, t)
        route, status = numpy_greedy(t.obstacles, t.scene.start, t.scene.goal)
        assert status == want and rec["status"] == want and rec["reported_status"] == want
        assert rec["route_format"] == "int" and rec["precision"] == "fp32"
        np.testing.assert_array_equal(snap[1], route)
        assert rec["route_len"] == len(route)
        if want == "ok":
            from passage_jax.graph import route_cost
            assert rec["problem"] is None
            assert rec["route_cost"] == pytest.approx(
                route_cost(route, t.elevation_m, t.objective, t.weight), rel=1e-12)


def test_make_planner_refuses_unknown_kwargs(torch):
    from passage_jax.planners import torch_greedy

    with pytest.raises(TypeError, match="unknown inference_kwargs"):
        torch_greedy.make_planner(devcie="cpu")


# ---------------------------------------------------------------- inputs: dtype, device, fields


@pytest.mark.parametrize("dtype,precision", [("float32", "fp32"), ("float64", "fp64"),
                                             ("bfloat16", "bf16"), ("float16", "fp16")])
def test_inputs_arrive_on_the_device_in_the_dtype(torch, dtype, precision):
    from passage_jax.protocol.torch_adapter import TorchPlanner

    seen = {}

    def fn(elevation, obstacles, start, goal, cost_model, cost_weight, pixel_size_m, input_tensor):
        seen.update(elevation=elevation, obstacles=obstacles, start=start, goal=goal,
                    cost_model=cost_model, cost_weight=cost_weight, pixel_size_m=pixel_size_m,
                    input_tensor=input_tensor, grad=torch.is_grad_enabled())
        return torch.stack([start, goal])

    req = _request(np.random.default_rng(3))
    res = TorchPlanner(fn, device="cpu", dtype=dtype).plan(req)
    want = getattr(torch, dtype)
    assert seen["elevation"].dtype == want and seen["input_tensor"].dtype == want
    assert all(seen[k].device == torch.device("cpu") for k in ("elevation", "obstacles", "start"))
    expect_z = torch.tensor(np.asarray(req.elevation), dtype=torch.float64).to(want)
    assert torch.equal(seen["elevation"], expect_z)
    assert seen["obstacles"].dtype == torch.bool
    np.testing.assert_array_equal(seen["obstacles"].numpy(), req.obstacles)
    assert seen["start"].dtype == torch.int64 and seen["start"].tolist() == list(req.start)
    assert seen["goal"].tolist() == list(req.goal)
    assert seen["cost_model"] == "elevation" and seen["cost_weight"] == 62.4
    assert seen["pixel_size_m"] == 30.0 and seen["grad"] is False
    np.testing.assert_array_equal(seen["input_tensor"].float().numpy(),
                                  torch.tensor(req.input_tensor).to(want).float().numpy())
    assert res.precision == precision and res.status == "ok"
    np.testing.assert_array_equal(res.path, [req.start, req.goal])


def test_only_declared_fields_are_passed_and_kwargs_takes_all(torch):
    from passage_jax.protocol.torch_adapter import TORCH_FIELDS, TorchPlanner

    got = {}

    def plain(elevation, obstacles, start, goal):
        got["plain"] = True
        return None, "no_path"

    def everything(elevation, obstacles, start, goal, **kw):
        got["kw"] = kw
        return None, "no_path"

    req = _request(np.random.default_rng(4), deadline_monotonic=None)
    assert TorchPlanner(plain).plan(req).status == "no_path" and got["plain"]
    TorchPlanner(everything).plan(req)
    assert sorted(got["kw"]) == sorted(TORCH_FIELDS)
    assert got["kw"]["remaining_wall_ms"]() == float("inf")


def test_a_module_is_a_planner(torch):
    from passage_jax.protocol.torch_adapter import TorchPlanner

    class Straight(torch.nn.Module):
        def forward(self, elevation, obstacles, start, goal, cost_weight):
            assert cost_weight == 62.4
            return torch.stack([start, goal]).to(torch.int32)

    req = _request(np.random.default_rng(5))
    planner = TorchPlanner(Straight(), dtype=torch.float64)  # a torch.dtype names the same dtype
    assert planner.dtype == "float64" and planner.name == "Straight"
    res = planner.plan(req)
    assert res.path.dtype == np.int32 and res.precision == "fp64"
    np.testing.assert_array_equal(res.path, [req.start, req.goal])


def test_bad_construction_is_refused(torch):
    from passage_jax.protocol.torch_adapter import TorchPlanner

    def fn(e, o, s, g):
        return None

    with pytest.raises(ValueError, match="dtype='int8' is not one of"):
        TorchPlanner(fn, dtype="int8")
    with pytest.raises(ValueError, match="device='bogus' is not a PyTorch device"):
        TorchPlanner(fn, device="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda' is not usable here"):
            TorchPlanner(fn, device="cuda")
    with pytest.raises(TypeError, match="needs a callable"):
        TorchPlanner(42)
    with pytest.raises(TypeError, match=r"must take \(elevation, obstacles, start, goal\)"):
        TorchPlanner(lambda elevation, obstacles: None)
    with pytest.raises(TypeError, match="must take"):
        TorchPlanner(lambda e, o, s, g, *, scale: None)  # a required keyword never passed


# ---------------------------------------------------------------- results, as the runner records them


def _both(torch, task, make_route):
    """The record of a TorchPlanner returning ``make_route(torch)`` and of a plain NumPy
    planner returning the same values as an array."""
    from passage_jax.protocol.torch_adapter import TorchPlanner

    t_rec, t_snap = execute(as_planner(TorchPlanner(lambda e, o, s, g: make_route(torch))), task)
    n_rec, n_snap = execute(as_planner(lambda r: make_route(torch).numpy()), task)
    return t_rec, n_rec, t_snap, n_snap


def test_a_float_route_is_malformed_like_any_planners(torch, tasks):
    t = tasks[0]
    legal = GreedyPlanner().plan(build_request(t)).path
    for dtype in (torch.float32, torch.float64, torch.bool):
        t_rec, n_rec, t_snap, n_snap = _both(torch, t, lambda th, d=dtype: th.tensor(legal, dtype=d))
        assert t_rec["status"] == n_rec["status"] == "invalid_path"
        assert t_rec["route_format"] == n_rec["route_format"] == "float"
        assert t_rec["problem"] == n_rec["problem"] and t_rec["problem"].startswith("malformed route")
        assert t_snap[1] is None and np.array_equal(t_snap[2], n_snap[2])
    # a legal route in a wrong shape, and one in half precision
    t_rec, n_rec, _, _ = _both(torch, t, lambda th: th.tensor(legal).reshape(-1))
    assert t_rec["route_format"] == n_rec["route_format"] == "shape" and t_rec["status"] == "invalid_path"
    bf = _result_of(torch, lambda th: th.tensor(legal, dtype=th.bfloat16))
    assert bf.path.dtype.kind == "f"


def _result_of(torch, make_out, **kw):
    from passage_jax.protocol.torch_adapter import TorchPlanner

    return TorchPlanner(lambda e, o, s, g: make_out(torch), **kw).plan(_request(np.random.default_rng(9)))


def test_statuses_counters_and_results_pass_through(torch, tasks):
    from passage_jax.protocol.torch_adapter import TorchPlanner

    t = tasks[0]
    legal = GreedyPlanner().plan(build_request(t)).path

    def mapping(e, o, s, g):
        n = torch.tensor(len(legal) - 1)
        return {"path": torch.tensor(legal), "work": {"expansions": n},
                "stage_work": {"primary": {"expansions": n, "live_states": torch.tensor(3)}},
                "resource_peaks": {"host_bytes": torch.tensor(1024.0)}, "precision": "mixed"}

    rec, _ = execute(as_planner(TorchPlanner(mapping)), t)
    assert rec["status"] == "ok" and rec["precision"] == "mixed"
    assert rec["work"] == {"expansions": len(legal) - 1, "live_states": 3}
    assert rec["stage_work"] == {"primary": {"expansions": len(legal) - 1, "live_states": 3}}
    assert rec["resource_peaks"] == {"host_bytes": 1024.0}

    def result(e, o, s, g):
        return PlanResult(path=torch.tensor(legal), status="ok", message="m")

    rec, snap = execute(as_planner(TorchPlanner(result, dtype="float64")), t)
    assert rec["status"] == "ok" and rec["precision"] == "fp64" and rec["message"] == "m"
    np.testing.assert_array_equal(snap[1], legal)

    cases = {  # fn's return -> the record's status
        "none": (lambda e, o, s, g: None, "invalid_path"),  # a bare value means status ok
        "no_path": (lambda e, o, s, g: (None, "no_path"), "no_path"),
        "bad_status": (lambda e, o, s, g: (torch.tensor(legal), "fine"), "runtime_error"),
        "bad_key": (lambda e, o, s, g: {"path": None, "route": 1}, "runtime_error"),
        "raises": (lambda e, o, s, g: 1 / 0, "runtime_error"),
    }
    for name, (fn, want) in cases.items():
        rec, _ = execute(as_planner(TorchPlanner(fn)), t)
        assert rec["status"] == want, (name, rec)
    rec, _ = execute(as_planner(TorchPlanner(cases["bad_key"][0])), t)
    assert rec["error"].startswith("protocol:") and "route" in rec["error"]
    rec, _ = execute(as_planner(TorchPlanner(cases["raises"][0])), t)
    assert rec["error_type"] == "ZeroDivisionError"


# ---------------------------------------------------------------- end to end


def test_a_run_of_the_torch_example(torch, cohort, tmp_path):
    from passage_jax.run import parse_spec, run_spec

    spec = parse_spec(F.spec_dict(cohort, inference="passage_jax.planners.torch_greedy:make_planner",
                                  inference_kwargs={"dtype": "float64"}, latency_warmup=0,
                                  latency_repeats=1, quality_repeat_index=0))
    run_spec(spec, tmp_path / "run", progress=False)
    folder = tmp_path / "run" / "seed-1234"
    recs = read_requests(folder / "requests.jsonl")
    tasks = F.load(cohort)
    assert len(recs) == 2 * len(tasks)  # cold + one warm repeat
    paths = load_paths(folder / "paths.npz")
    for r in recs:
        t = tasks[r["task_index"]]
        route, status = numpy_greedy(t.obstacles, t.scene.start, t.scene.goal)
        assert r["status"] == status and r["precision"] == "fp64"
        np.testing.assert_array_equal(route_of(paths, r["record"]), route)
    assert {r["status"] for r in recs} == {"ok", "no_path"}
    m = json.loads((folder / "manifest.json").read_text())
    assert m["spec"]["inference"] == "passage_jax.planners.torch_greedy:make_planner"
    # the same planner through the spec's loader
    p = load_planner("passage_jax.planners.torch_greedy:make_planner", "request", {"dtype": "float64"})
    assert p.target.dtype == "float64" and p.target.precision == "fp64"
