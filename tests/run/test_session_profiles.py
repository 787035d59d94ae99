"""The session timing profiles (``timing_profile``): one persistent session per seed, its
warm-up on a validation scene outside the roster, one timed request per task with the
legality check and recosting timed apart; the refusals; supervised services with a worker
replaced (re-warmed or not); resuming a killed session run; the default profile unchanged
but for the new record keys; and the PyTorch CUDA synchronisation (with a fake module)."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import fixtures_runner as F
import jax
import pytest
import yaml
from session_planners import read_log

from passage_jax.data import load_scenes, load_tasks
from passage_jax.data.writer import write_split
from passage_jax.evaluate import score_run
from passage_jax.protocol import BudgetSpec, as_planner
from passage_jax.protocol.records import RECORD_KEYS, read_requests
from passage_jax.run import AdmissionError, SpecError, parse_spec, run_spec
from passage_jax.run.admission.checks import admit
from passage_jax.run.execution import scan_journal
from passage_jax.run.execution import timing as timing_mod
from passage_jax.run.execution.device_sync import synchronize_torch

HERE = Path(__file__).resolve().parents[1] / "fixtures"
NATIVE, SERVICE, REWARM = ("native_raw_path_persistent_v1", "supervised_service_v1",
                           "supervised_service_rewarm_v1")
#: the validation scenes: another start and goal than the test scenes (1, 1) -> (10, 10)
VAL_START, VAL_GOAL = (2, 1), (9, 10)
VAL_KINDS = ("open", "hill", "trap")
SERIES_KEYS = ("latency_warmup", "latency_repeats", "quality_repeat_index")
NEW_KEYS = ("validation_recost_ms", "warm_complete", "torch_synchronized", "process_index", "host",
            "device")


def _write_validation(root, kinds=VAL_KINDS, first=10):
    with pytest.MonkeyPatch.context() as mp:  # the fixture rows take their start/goal from F
        mp.setattr(F, "START", VAL_START)
        mp.setattr(F, "GOAL", VAL_GOAL)
        rows = [F.make_row(first + i, k, "validation") for i, k in enumerate(kinds)]
    write_split(root, F.N, "validation", rows, rows_per_shard=2)


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("sessions")
    F.write_cohort(root)  # test split: ids 0000000000 .. 0000000002
    _write_validation(root)  # validation split: ids 0000000010 .. 0000000012
    return root


@pytest.fixture(scope="module")
def no_validation(tmp_path_factory):
    root = tmp_path_factory.mktemp("test-only")
    F.write_cohort(root)
    return root


def _session_spec(root, profile=NATIVE, **over) -> dict:
    d = {k: v for k, v in F.spec_dict(root).items() if k not in SERIES_KEYS}
    d["timing_profile"] = profile
    if profile != NATIVE:
        d.update(execution="supervised", budget={"wall_time_ms": 5000})
    d.update(over)
    return d


def _logging(log, **kwargs) -> dict:
    return {"inference": "session_planners:make_logging",
            "inference_kwargs": {"log": str(log), **kwargs}}


def _manifest(out, seed=1234) -> dict:
    return json.loads((Path(out) / f"seed-{seed}" / "manifest.json").read_text())


def _records(out, seed=1234) -> list:
    return read_requests(Path(out) / f"seed-{seed}" / "requests.jsonl")


def _slow_legality(monkeypatch, ms: float):
    """The legality check and recosting take at least ``ms`` longer."""
    real = timing_mod._legality

    def slow(rec, task, snap):
        time.sleep(ms / 1000.0)
        real(rec, task, snap)
    monkeypatch.setattr(timing_mod, "_legality", slow)


# --------------------------------------------------------------------------- #
# the native session
# --------------------------------------------------------------------------- #

def test_native_session_run(cohort, tmp_path, monkeypatch):
    log = tmp_path / "calls.jsonl"
    _slow_legality(monkeypatch, 50.0)
    spec = parse_spec(_session_spec(cohort, **_logging(log)))
    assert (spec.session_warmup, spec.latency_warmup, spec.latency_repeats,
            spec.quality_repeat_index) == (16, 0, 1, 0)
    out = tmp_path / "run"
    run_spec(spec, out, progress=False)
    tasks = load_tasks(cohort, F.N, "test", "elevation", n_samples=None)
    roster = [t.id for t in tasks]
    # the default warm-up scene: the first validation scene (stored order) outside the roster
    val = load_scenes(cohort, F.N, "validation", None)
    warm_id = next(s.id for s in val if s.id not in roster)
    assert warm_id == "0000000010"

    recs = _records(out)
    assert len(recs) == len(tasks)  # exactly one timed request per task, no cold pass
    assert [r["sample_id"] for r in recs] == roster
    assert all(r["series"] == "warm" and r["repeat"] == 0 and r["quality"] for r in recs)
    assert all(r["warm_complete"] is True and r["status"] == "ok" for r in recs)
    for r in recs:
        assert list(r) == list(RECORD_KEYS)
        # the clock stops at the route snapshot; the 50 ms check and recosting are outside it
        assert r["latency_ms"] == r["returned_ms"] and r["latency_ms"] < 50.0
        assert r["validation_recost_ms"] >= 50.0
        assert r["route_cost"] is not None and r["problem"] is None
        assert (r["process_index"], r["host"], r["device"]) == (0, socket.gethostname(),
                                                                 str(jax.devices()[0]))
        assert r["torch_synchronized"] is False

    # the build's requests took at least their latencies and their 50 ms checks
    build = json.loads((out / "seed-1234" / "seed_state.json").read_text())["builds"][-1]
    assert build["requests_wall_ms"] >= sum(r["latency_ms"] + 50.0 for r in recs)
    calls = read_log(log)  # every call the planner received, in order
    assert len(calls) == 16 + len(tasks)
    assert all(c["id"] == warm_id and tuple(c["start"]) == VAL_START and tuple(c["goal"]) == VAL_GOAL
               for c in calls[:16])
    assert [c["id"] for c in calls[16:]] == roster
    assert all(tuple(c["start"]) == F.START for c in calls[16:])

    m = _manifest(out)
    assert m["timing_profile"] == NATIVE and m["timing_boundary"] == NATIVE
    assert m["timing"]["profile"] == NATIVE and m["timing"]["passes"] == [["warm", 0]]
    s = m["session"]
    assert (s["profile"], s["warmup_scene"], s["warmup_calls"], s["n_sessions"]) == \
        (NATIVE, warm_id, 16, 1)
    assert s["identical_hardware"] is True and len(s["sessions"]) == 1
    one = s["sessions"][0]
    assert len(one["warmup_ms"]) == 16 and all(ms > 0 for ms in one["warmup_ms"])
    assert one["first_call_ms"] == pytest.approx(one["warmup_ms"][0], abs=1e-3)
    assert one["cold_start_ms"] == pytest.approx(one["construction_ms"] + one["first_call_ms"])
    assert one["construction_ms"] == m["planner"]["construction_ms"]
    assert (one["process_index"], one["host"], one["device"]) == (0, socket.gethostname(),
                                                                     str(jax.devices()[0]))
    assert one["replacements"] == 0 and one["rewarm_calls"] == 0 and one["first_record"] == 0
    assert m["status_counts"] == {"warm": {"ok": len(tasks)}}


def test_session_without_warmup_is_not_warm_complete(cohort, tmp_path):
    log = tmp_path / "calls.jsonl"
    out = tmp_path / "run"
    run_spec(parse_spec(_session_spec(cohort, session_warmup=0, **_logging(log))), out, progress=False)
    recs = _records(out)
    assert len(recs) == 3 and not any(r["warm_complete"] for r in recs)
    assert [c["id"] for c in read_log(log)] == [r["sample_id"] for r in recs]  # no warm-up call
    one = _manifest(out)["session"]["sessions"][0]
    assert one["warmup_ms"] == [] and one["first_call_ms"] == pytest.approx(recs[0]["latency_ms"])


def test_session_request_built_before_the_clock(cohort):
    """Under a session profile the request (its raw arrays) exists before the clock starts,
    and its deadline is the clock's start + wall_time_ms."""
    task = load_tasks(cohort, F.N, "test", "elevation", n_samples=1)[0]
    events, seen = [], {}
    base = time.monotonic()  # the planner checks its deadline on the real clock
    ticks = iter([base, base + 0.002, base + 0.003, base + 0.004])

    def clock():
        events.append("clock")
        return next(ticks)

    def plan(request):
        events.append("plan")
        seen["deadline"] = request.deadline_monotonic
        from passage_jax.planners.bfs import BFSPlanner
        return BFSPlanner().plan(request)

    real_build = timing_mod.build_request

    def build(*a, **k):
        events.append("build")
        return real_build(*a, **k)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timing_mod, "build_request", build)
        rec, _ = timing_mod.execute_session(as_planner(plan), task, BudgetSpec(wall_time_ms=250),
                                            clock=clock)
    assert events == ["build", "clock", "plan", "clock", "clock", "clock"]
    assert seen["deadline"] == pytest.approx(base + 0.25, abs=1e-9)
    assert rec["latency_ms"] == pytest.approx(2.0) and rec["returned_ms"] == pytest.approx(2.0)
    assert rec["validation_recost_ms"] == pytest.approx(1.0) and rec["status"] == "ok"


def test_warmup_scene_choice(cohort):
    # a validation run of the first scene: the warm-up is the next validation scene
    spec = parse_spec(_session_spec(cohort, split="validation", n_samples=1))
    a = admit(spec)
    assert a.sample_ids == ["0000000010"] and a.warmup.id == "0000000011"
    assert tuple(a.warmup.scene.start) == VAL_START and a.warmup.objective == "elevation"
    # a named scene
    a = admit(parse_spec(_session_spec(cohort, warmup_scene="0000000012")))
    assert a.warmup.id == "0000000012" and a.warmup.weight == F.WEIGHTS["elevation"]
    # the default profile reads no warm-up scene
    assert admit(parse_spec(F.spec_dict(cohort))).warmup is None


# --------------------------------------------------------------------------- #
# refusals
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("over, match", [
    ({"warmup_scene": "0000000001"}, r"warmup_scene: '0000000001' is a task of the run"),
    ({"warmup_scene": "0000000099"}, r"warmup_scene: no scene '0000000099' in .*12x12/validation"),
    ({"split": "validation", "n_samples": None}, r"warmup_scene: every scene of .*validation is a task"),
])
def test_admission_refuses_a_warmup_scene(cohort, over, match):
    with pytest.raises(AdmissionError, match=match) as e:
        admit(parse_spec(_session_spec(cohort, **over)))
    assert "\n" not in str(e.value)


def test_admission_refuses_a_root_without_validation(no_validation, tmp_path):
    spec = parse_spec(_session_spec(no_validation))
    with pytest.raises(AdmissionError, match=r"warmup_scene: the dataset root .* has no validation "
                                             r"split at 12x12") as e:
        run_spec(spec, tmp_path / "run", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run" / "seed-1234").exists()


@pytest.mark.parametrize("over, match", [
    ({"latency_warmup": 5}, "latency_warmup does not apply to timing_profile "
                            "native_raw_path_persistent_v1; its warm-up is session_warmup"),
    ({"latency_repeats": 3}, "latency_repeats does not apply to timing_profile"),
    ({"quality_repeat_index": 1, "latency_repeats": 2}, "latency_repeats does not apply"),
    ({"worker_warmup": 1}, "worker_warmup does not apply to timing_profile"),
    ({"execution": "supervised", "budget": {"wall_time_ms": 100}},
     "timing_profile native_raw_path_persistent_v1 requires execution: in_process "
     "(got execution: supervised)"),
    ({"timing_profile": SERVICE, "execution": "in_process", "budget": {}},
     "timing_profile supervised_service_v1 requires execution: supervised"),
    ({"session_warmup": -1}, "session_warmup: must be an integer >= 0"),
    ({"timing_profile": "warm_only"}, "timing_profile: must be one of"),
])
def test_spec_refusals_under_a_session_profile(cohort, over, match):
    with pytest.raises(SpecError, match=re.escape(match)) as e:
        parse_spec(_session_spec(cohort, **over))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("key, value", [("session_warmup", 16), ("warmup_scene", "0000000010")])
def test_session_keys_refused_under_the_default_profile(cohort, key, value):
    # warmup_scene also serves the batched procedure's warm-up batches
    with pytest.raises(SpecError, match=rf"{key}: only applies to the (session|one-pass) timing profiles"):
        parse_spec(F.spec_dict(cohort, **{key: value}))
    with pytest.raises(SpecError, match=rf"{key}: only applies"):
        parse_spec(F.spec_dict(cohort, timing_profile="complete_request_v1", **{key: value}))


def test_cli_run_refuses_in_one_line(cohort, no_validation, tmp_path, capsys):
    from cli.__main__ import main

    cases = [(_session_spec(cohort, latency_warmup=5), "latency_warmup does not apply"),
             (_session_spec(no_validation), "warmup_scene: the dataset root")]
    for i, (spec, said) in enumerate(cases):
        path = tmp_path / f"s{i}.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["run", "--spec", str(path), "--output", str(tmp_path / f"r{i}"),
                     "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / f"r{i}" / "seed-1234").exists()


def test_resolved_session_spec_round_trips(cohort):
    """The resolved spec (what run_started.json and the manifests store) parses back to itself,
    and explicit session values are accepted."""
    spec = parse_spec(_session_spec(cohort, session_warmup=4))
    again = parse_spec(spec.to_dict())
    assert again.to_dict() == spec.to_dict() and again.sha256() == spec.sha256()
    explicit = parse_spec(_session_spec(cohort, session_warmup=4, latency_warmup=0, latency_repeats=1,
                                        quality_repeat_index=0, worker_warmup=0))
    assert explicit.sha256() == spec.sha256()


# --------------------------------------------------------------------------- #
# supervised services: a worker lost on one scene
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("profile", [SERVICE, REWARM])
def test_supervised_service_replacement(cohort, tmp_path, monkeypatch, profile):
    log = tmp_path / "calls.jsonl"
    crash = "0000000001"
    _slow_legality(monkeypatch, 30.0)  # in the parent: outside the timed value
    spec = parse_spec(_session_spec(cohort, profile, session_warmup=2,
                                    **_logging(log, crash_ids=[crash])))
    out = tmp_path / "run"
    run_spec(spec, out, progress=False)
    recs = _records(out)
    assert [r["status"] for r in recs] == ["ok", "runtime_error", "ok"]
    assert recs[1]["error_type"] == "WorkerDied" and "exit code 3" in recs[1]["error"]
    rewarm = profile == REWARM
    # the first worker completed its warm-up; the replacement only under the re-warm profile
    assert [r["warm_complete"] for r in recs] == [True, True, rewarm]
    assert [r["worker"]["index"] for r in recs] == [0, 0, 1]
    assert recs[2]["worker"]["warmup"] == (2 if rewarm else 0)
    assert recs[1]["returned_ms"] is None  # the worker died: it never returned
    for r in recs:
        assert r["latency_ms"] == (r["returned_ms"] or r["latency_ms"])  # send -> snapshot received
        assert r["device"] == str(jax.devices()[0]) and r["process_index"] == 0
    for r in (recs[0], recs[2]):
        assert r["latency_ms"] < 30.0 <= r["validation_recost_ms"]
    calls = read_log(log)
    first, second = recs[0]["worker"]["pid"], recs[2]["worker"]["pid"]
    assert [(c["id"], c["pid"]) for c in calls] == (
        [("0000000010", first)] * 2 + [("0000000000", first), (crash, first)]
        + [("0000000010", second)] * (2 if rewarm else 0) + [("0000000002", second)])
    m = _manifest(out)
    assert m["timing_profile"] == profile and m["timing_boundary"] == profile
    one = m["session"]["sessions"][0]
    assert one["replacements"] == 1 and one["rewarm_calls"] == (2 if rewarm else 0)
    assert len(one["warmup_ms"]) == 2 and one["warm_complete"] is True


# --------------------------------------------------------------------------- #
# resume
# --------------------------------------------------------------------------- #

def test_resume_of_a_killed_session_run(cohort, tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(_session_spec(cohort, session_warmup=2)))  # the BFS baseline
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]))
    # planner calls: 2 warm-up calls, record 0, killed inside record 1
    p = subprocess.run([sys.executable, str(HERE / "resume_driver.py"), str(spec_file), str(out),
                        "planner:4"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert scan_journal(out / ".seed-1234.partial" / "records.journal").count == 1
    logs = []
    run_spec(spec_file, out, progress=False, resume=True, log=logs.append)
    recs = _records(out)
    assert [r["task_index"] for r in recs] == [0, 1, 2]
    assert [r["resumed"] for r in recs] == [False, True, False]
    assert all(r["series"] == "warm" and r["warm_complete"] for r in recs)
    s = _manifest(out)["session"]
    assert s["n_sessions"] == 2 and [x["first_record"] for x in s["sessions"]] == [0, 1]
    assert all(len(x["warmup_ms"]) == 2 for x in s["sessions"])  # the new session re-warmed
    assert _manifest(out)["resume"]["recovered_records"] == 1
    score_run(out)  # a session run scores like any run
    per = json.loads((out / "seed-1234" / "metrics.json").read_text())
    assert per["status_counts"] == {"warm": {"ok": 3}}


# --------------------------------------------------------------------------- #
# the default profile
# --------------------------------------------------------------------------- #

def test_default_profile_unchanged(cohort, tmp_path, monkeypatch):
    _slow_legality(monkeypatch, 20.0)
    out = tmp_path / "run"
    spec = parse_spec(F.spec_dict(cohort))  # cold + 1 warm-up pass + 2 warm repeats
    assert spec.timing_profile == "complete_request_v1" and spec.session_warmup is None
    run_spec(spec, out, progress=False)
    recs = _records(out)
    assert len(recs) == 3 * 4
    assert [(r["series"], r["repeat"]) for r in recs[::3]] == \
        [("cold", 0), ("warmup", 0), ("warm", 0), ("warm", 1)]
    for r in recs:
        assert list(r) == list(RECORD_KEYS) and all(k in r for k in NEW_KEYS)
        # the check and recosting stay inside the timer, and are also timed on their own
        assert isinstance(r["validation_recost_ms"], float)
        assert 20.0 <= r["validation_recost_ms"] <= r["latency_ms"]
        assert r["latency_ms"] >= r["returned_ms"] + r["validation_recost_ms"] - 1e-6
        assert r["warm_complete"] == (r["series"] == "warm")
        assert r["torch_synchronized"] is False and r["device"] == str(jax.devices()[0])
    m = _manifest(out)
    assert m["timing_profile"] == "complete_request_v1"
    assert m["timing_boundary"] == m["timing"]["profile"] == "in_process_complete_request_v1"
    assert m["session"] is None
    # without a declared warm-up no record is warm-complete
    out0 = tmp_path / "run0"
    run_spec(parse_spec(F.spec_dict(cohort, latency_warmup=0)), out0, progress=False)
    assert not any(r["warm_complete"] for r in _records(out0))


def test_default_profile_resume_in_the_warm_series(cohort, tmp_path):
    """A planner rebuilt by a resume after the warm-up passes began never ran them: the warm
    records it serves are not warm-complete; the ones before the kill are."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(F.spec_dict(cohort)))  # 3 tasks: cold, warmup, warm x2
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]))
    p = subprocess.run([sys.executable, str(HERE / "resume_driver.py"), str(spec_file), str(out),
                        "planner:8"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    run_spec(spec_file, out, progress=False, resume=True)
    recs = _records(out)
    assert len(recs) == 12 and recs[7]["resumed"]
    assert [r["warm_complete"] for r in recs] == [False] * 6 + [True] + [False] * 5


# --------------------------------------------------------------------------- #
# PyTorch CUDA synchronisation
# --------------------------------------------------------------------------- #

def _fake_torch(events, initialised=True, available=True):
    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        is_initialized=lambda: events.append("is_initialized") or initialised,
        synchronize=lambda: events.append("synchronize"))
    return types.SimpleNamespace(cuda=cuda)


def test_torch_cuda_synchronised_before_the_clock_stops(cohort, monkeypatch):
    """This is the check where no GPU exists: a fake ``torch`` module in ``sys.modules``
    records what the runner asks of it. An initialised CUDA context is synchronised after
    the planner returned and before the clock stops; an uninitialised or unavailable one,
    or no torch at all, is left alone, and nothing imports torch."""
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert synchronize_torch() is False and "torch" not in sys.modules
    events = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(events, initialised=False))
    assert synchronize_torch() is False and events == ["is_initialized"]
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(events, available=False))
    assert synchronize_torch() is False and events == ["is_initialized"]

    task = load_tasks(cohort, F.N, "test", "elevation", n_samples=1)[0]
    events.clear()
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(events))

    def clock():
        events.append("clock")
        return time.monotonic()

    def plan(request):
        events.append("plan")
        from passage_jax.planners.bfs import BFSPlanner
        return BFSPlanner().plan(request)
    for run in (timing_mod.execute, timing_mod.execute_session):
        events.clear()
        rec, _ = run(as_planner(plan), task, BudgetSpec(), clock=clock)
        assert rec["torch_synchronized"] is True and rec["status"] == "ok"
        i = events.index("plan")
        assert events[i + 1:i + 4] == ["is_initialized", "synchronize", "clock"]
        assert events.count("synchronize") == 1
