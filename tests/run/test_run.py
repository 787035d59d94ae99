"""End-to-end runs on tiny scenes: admission, series, persistence, refusal, CLI."""
import json
import os

import fixtures_runner as F
import numpy as np
import pytest
import yaml

from passage_jax.graph import route_cost, route_problem
from passage_jax.planners import bfs
from passage_jax.protocol import build_request
from passage_jax.protocol.records import load_paths, read_requests, route_of
from passage_jax.run import AdmissionError, RunError, parse_spec, run_spec
from passage_jax.run.admission.checks import admit


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return root


@pytest.fixture(scope="module")
def admitted(cohort):
    return admit(parse_spec(F.spec_dict(cohort)))


def _run(cohort, out, admitted=None, **over):
    spec = parse_spec(F.spec_dict(cohort, **over))
    if admitted is not None:  # reuse the admitted tasks and references, new spec
        import dataclasses

        from passage_jax.run.admission.checks import entry_identity
        admitted = dataclasses.replace(admitted, spec=spec, entry=entry_identity(spec))
    return spec, run_spec(spec, out, progress=False, admitted=admitted)


def test_bfs_run_files(cohort, admitted, tmp_path):
    out = tmp_path / "run"
    spec, summary = _run(cohort, out, admitted)
    folder = out / "seed-1234"
    assert sorted(os.listdir(out)) == ["resolved_protocol.0.json", "resolved_protocol.json", "run.json",
                                       "run_started.json", "seed-1234"]
    assert sorted(os.listdir(folder)) == ["manifest.json", "paths.npz", "records.journal",
                                          "references.npz", "requests.jsonl", "seed_state.json"]
    recs = read_requests(folder / "requests.jsonl")
    tasks = admitted.tasks
    # one terminal record per task and pass: cold + 1 warm-up + 2 warm repeats
    assert len(recs) == len(tasks) * 4
    assert [(r["series"], r["repeat"]) for r in recs[::len(tasks)]] == \
        [("cold", 0), ("warmup", 0), ("warm", 0), ("warm", 1)]
    assert [r["record"] for r in recs] == list(range(len(recs)))
    assert all(r["quality"] == (r["series"] == "warm" and r["repeat"] == 1) for r in recs)
    assert all(r["status"] == "ok" for r in recs)
    paths = load_paths(folder / "paths.npz")
    for r in recs:
        t = tasks[r["task_index"]]
        assert r["sample_id"] == t.id
        route = route_of(paths, r["record"])
        expect = bfs.BFSPlanner().plan(build_request(t)).path
        np.testing.assert_array_equal(route, expect)
        assert route_problem(route, t.scene.start, t.scene.goal, t.obstacles) is None
        assert r["route_cost"] == pytest.approx(
            route_cost(route, t.elevation_m, t.objective, t.weight), rel=1e-12)
    with np.load(folder / "references.npz", allow_pickle=False) as z:
        assert z["sample_id"].tolist() == [t.id for t in tasks]
        assert z["qualified"].all()
        for i, t in enumerate(tasks):
            ref = z["route_coords"][z["route_offsets"][i]:z["route_offsets"][i + 1]]
            np.testing.assert_array_equal(ref, t.route)
            c = route_cost(t.route, t.elevation_m, t.objective, t.weight)
            assert z["c_star"][i] == pytest.approx(c, rel=1e-7)
    m = json.loads((folder / "manifest.json").read_text())
    assert m["seed"] == 1234 and m["n_records"] == len(recs)
    assert m["spec"]["latency_repeats"] == 2 and m["spec_sha256"] == spec.sha256()
    assert len(m["code"]["sha256"]) == 64
    from passage_jax.fileio import sha256_file
    for s in m["data"]["shards"]:
        assert s["sha256"] == sha256_file(s["path"])
    assert sum(s["rows_used"] for s in m["data"]["shards"]) == len(tasks)
    for name, h in m["files"].items():
        assert sha256_file(folder / name) == h
    assert m["hardware"]["jax_backend"] == "cpu" and m["versions"]["jax"]
    # the CPU and its thread settings, as this process sees them
    assert m["cpu"]["usable_cpus"] == len(os.sched_getaffinity(0))
    assert m["cpu"]["thread_variables"] == {k: os.environ.get(k) for k in (
        "XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
        "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")}
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), None)
    assert m["cpu"]["model"] == model
    flags = next((set(line.split(":", 1)[1].split()) for line in open("/proc/cpuinfo")
                  if line.startswith("flags")), set())
    widest = next((name for flag, name in (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"),
                                           ("sse2", "sse2")) if flag in flags), None)
    assert m["cpu"]["vector_isa"] == widest
    # the hill task costs more by BFS than the reference: positive regret material
    hill = next(r for r in recs if r["sample_id"] == "0000000002")
    with np.load(folder / "references.npz", allow_pickle=False) as z:
        assert hill["route_cost"] > z["c_star"][2] * 1.01


def test_refuses_existing_run(cohort, admitted, tmp_path):
    out = tmp_path / "run"
    _run(cohort, out, admitted, latency_repeats=1, quality_repeat_index=0, latency_warmup=0)
    before = (out / "seed-1234" / "requests.jsonl").read_bytes()
    with pytest.raises(RunError, match="already holds a run"):
        _run(cohort, out, admitted, latency_repeats=1, quality_repeat_index=0)
    assert (out / "seed-1234" / "requests.jsonl").read_bytes() == before


def test_exceptions_and_deadlines_are_terminal_records(cohort, admitted, tmp_path):
    out = tmp_path / "flaky"
    _run(cohort, out, admitted, inference="fixtures_runner:make_flaky", latency_warmup=0,
         latency_repeats=1, quality_repeat_index=0, seeds=[1, 2])
    for seed in (1, 2):
        recs = read_requests(out / f"seed-{seed}" / "requests.jsonl")
        assert [r["status"] for r in recs] == ["ok", "runtime_error", "ok"] * 2
        bad = recs[1]
        assert "boom on 0000000001" in bad["error"] and bad["route_format"] == "none"
    out = tmp_path / "sleepy"
    _run(cohort, out, admitted, inference="fixtures_runner:make_sleepy",
         inference_kwargs={"sleep_ms": 40}, budget={"wall_time_ms": 10}, latency_warmup=0,
         latency_repeats=1, quality_repeat_index=0)
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert all(r["status"] == "timeout" and r["late"] and r["problem"] is None for r in recs)
    assert all(r["deadline_ms"] == 10 and r["overrun_ms"] > 20 for r in recs)


def test_float_routes_persisted_faithfully(cohort, admitted, tmp_path):
    out = tmp_path / "floaty"
    _run(cohort, out, admitted, inference="fixtures_runner:make_floaty", latency_warmup=0,
         latency_repeats=1, quality_repeat_index=0)
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert all(r["status"] == "invalid_path" and r["route_format"] == "float" for r in recs)
    paths = load_paths(out / "seed-1234" / "paths.npz")
    assert len(paths["coords"]) == 0  # nothing was cast into the integer routes
    r0 = route_of(paths, 0)
    assert r0.dtype == np.float64 and r0.shape[1] == 2
    from passage_jax.metrics import score_routes

    s = score_routes([route_of(paths, i) for i in range(3)], admitted.tasks,
                     admitted.references.c_star, np.zeros(3, bool))
    assert not s["valid_path"].any() and not s["success"].any()


def test_legacy_scene_planner_runs(cohort, admitted, tmp_path):
    out = tmp_path / "legacy"
    _run(cohort, out, admitted, inference="fixtures_runner:LegacyPlanner",
         inference_format="scene", latency_warmup=0, latency_repeats=1, quality_repeat_index=0)
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert [r["status"] for r in recs] == ["ok"] * 6  # cold pass + one warm repeat


def test_admission_failures(cohort, tmp_path):
    with pytest.raises(AdmissionError, match="cannot import module"):
        admit(parse_spec(F.spec_dict(cohort, inference="no_such_module_x:make_planner")))
    with pytest.raises(AdmissionError, match="checkpoint"):
        admit(parse_spec(F.spec_dict(cohort, inference_kwargs={"checkpoint": "/no/file.ckpt"})))
    with pytest.raises(AdmissionError, match="does not exist"):
        admit(parse_spec(F.spec_dict(cohort, dataset_path=str(tmp_path / "missing"))))
    with pytest.raises(AdmissionError, match="differs from the released weight"):
        admit(parse_spec(F.spec_dict(cohort, cost_weight=1.0)))
    # a released route that is legal but not optimal: admission names the scene
    rows = [F.make_row(i, k) for i, k in enumerate(("open", "hill"))]
    from passage_jax.planners.bfs import BFSPlanner  # noqa: F401
    rows[1]["routes"][("elevation", "obstacles")] = np.array(
        [(i, i) for i in range(1, 11)], np.int32)  # straight over the peak
    from passage_jax.data.writer import write_split
    bad = tmp_path / "bad"
    write_split(bad, F.N, "test", rows)
    with pytest.raises(AdmissionError, match="scene 0000000001.*not optimal"):
        admit(parse_spec(F.spec_dict(bad)))
    # the planner is never called when admission fails
    assert not (tmp_path / "never").exists()


def test_checkpoint_hashes_recorded(cohort, tmp_path):
    ck = tmp_path / "w.ckpt"
    ck.write_bytes(b"weights")
    spec = parse_spec(F.spec_dict(cohort, inference="fixtures_runner:straight_plan",
                                  inference_kwargs_by_seed={1234: {"checkpoint": str(ck)}}))
    a = admit(spec)
    import hashlib
    assert a.checkpoints["1234"]["checkpoint"]["sha256"] == hashlib.sha256(b"weights").hexdigest()


def test_cli_init_spec_run_and_conform(cohort, tmp_path, capsys):
    from cli.__main__ import main

    starter = tmp_path / "starter.yaml"
    assert main(["init-spec", "--out", str(starter)]) == 0
    assert main(["init-spec", "--out", str(starter)]) == 2  # refuses to overwrite
    text = starter.read_text()
    assert text.lstrip().startswith("#") and "inference:" in text
    parse_spec(yaml.safe_load(text))

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(F.spec_dict(cohort, latency_warmup=0, latency_repeats=1,
                                               quality_repeat_index=0)))
    assert main(["run", "--spec", str(spec), "--output", str(tmp_path / "r"),
                 "--no-progress"]) == 0
    assert main(["run", "--spec", str(spec), "--output", str(tmp_path / "r"),
                 "--no-progress"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**F.spec_dict(cohort), "colour": "red"}))
    assert main(["run", "--spec", str(bad), "--output", str(tmp_path / "r2")]) == 2
    assert "colour" in capsys.readouterr().err

    assert main(["conform", "--spec", str(spec), "--output", str(tmp_path / "c")]) == 0
    receipt = json.loads((tmp_path / "c" / "conformance.json").read_text())
    assert receipt["passed"] and len(receipt["checks"]) == 7
    assert main(["conform", "--spec", str(spec), "--output", str(tmp_path / "c")]) == 2


def test_conform_flags_a_bad_planner(cohort, tmp_path):
    from passage_jax.run.conform import conform

    spec = parse_spec(F.spec_dict(cohort, inference="fixtures_runner:make_flaky",
                                  inference_kwargs={"fail_ids": ["0000000000", "analytic"]},
                                  budget={"max_expansions": 100000}))
    r = conform(spec, tmp_path / "c")
    by = {c["name"]: c["passed"] for c in r["checks"]}
    assert not r["passed"]
    assert by["admitted_task"] is False and by["analytic_graph"] is False
    assert by["malformed_coordinates"] and by["failure_penalties"]
    assert by["absolute_deadlines"] is False  # the planner errors rather than answering late
