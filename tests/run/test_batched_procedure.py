"""The batched procedure (timing profile ``batched_v1``, docs/runner.md "The batched
procedure"): the spec's keys, the batches a planner's ``plan_batch`` is given (roster order,
the last one padded, untimed warm-up batches of the validation scene first), the records and
the manifest's and metrics' batch timing (checked against the records by hand), routes equal
to a batch-one run's, misbehaving batch planners costing their own scenes, and ``compare`` /
``leaderboard`` refusing to mix procedures."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from batch_planners import make_looped  # noqa: F401  (tests/fixtures on sys.path)

from passage_jax.evaluate import score_run
from passage_jax.evaluate.compare import CompareError, compare_runs
from passage_jax.evaluate.leaderboard import LeaderboardError, leaderboard
from passage_jax.evaluate.score import load_score
from passage_jax.protocol.records import read_requests
from passage_jax.run import parse_spec, run_spec
from passage_jax.run.errors import RunError
from passage_jax.run.specification.parse import SpecError

N, SIZE = 10, 4  # three batches: 4 + 4 + 2 live scenes


def spec_dict(**over) -> dict:
    d = {"method_name": "batched", "inference": "batch_planners:make_looped", "resolution": 64,
         "cost_model": "energy", "split": "test", "task_variant": "obstacles", "n_samples": N,
         "seeds": [1234], "dataset_path": "shipped", "timing_profile": "batched_v1",
         "batch_size": SIZE}
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


def records(folder) -> list[dict]:
    return read_requests(folder / "seed-1234" / "requests.jsonl")


def manifest(folder) -> dict:
    return json.loads((folder / "seed-1234" / "manifest.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batched")
    log = tmp / "batches.jsonl"
    out = {"tmp": tmp, "log": log}
    out["batched"] = tmp / "batched"
    run_spec(parse_spec(spec_dict(inference="batch_planners:make_logged",
                                  inference_kwargs={"log": str(log)})), out["batched"], progress=False)
    out["one"] = tmp / "one"  # the batch-one planner, one session request per task
    run_spec(parse_spec(spec_dict(method_name="one", inference="passage_jax.planners.exact:make_planner",
                                  timing_profile="native_raw_path_persistent_v1", batch_size=None)),
             out["one"], progress=False)
    for k in ("batched", "one"):
        score_run(out[k])
    return out


# --------------------------------------------------------------------------- spec

def test_spec_keys_of_the_procedure():
    s = parse_spec(spec_dict())
    assert (s.batched, s.one_pass, s.session_profile) == (True, True, False)
    assert (s.batch_size, s.batch_warmup, s.latency_warmup, s.latency_repeats) == (SIZE, 2, 0, 1)
    assert parse_spec(spec_dict(batch_warmup=0)).batch_warmup == 0
    plain = parse_spec(spec_dict(timing_profile=None, batch_size=None))
    assert not plain.batched and "batch_size" not in plain.to_dict()  # other specs' hashes unchanged
    for over, msg in [({"batch_size": None}, "batch_size: is required by timing_profile batched_v1"),
                      ({"batch_size": 0}, "batch_size: must be a positive integer"),
                      ({"timing_profile": None}, "batch_size: only applies to timing_profile batched_v1"),
                      ({"batch_warmup": -1}, "batch_warmup: must be an integer >= 0"),
                      ({"budget": {"max_expansions": 5}}, "has no per-request budget: leave "
                                                          "budget.max_expansions out"),
                      ({"latency_repeats": 3}, "latency_repeats does not apply to timing_profile "
                                               "batched_v1"),
                      ({"inference_format": "scene"}, "needs inference_format: request"),
                      ({"execution": "supervised", "budget": {"wall_time_ms": 100}},
                       "timing_profile batched_v1 requires execution: in_process")]:
        with pytest.raises(SpecError, match=msg):
            parse_spec(spec_dict(**over))


# --------------------------------------------------------------------------- the run

def test_batches_given_to_the_planner(runs):
    calls = [json.loads(x) for x in runs["log"].read_text().splitlines()]
    assert len(calls) == 2 + 3  # two untimed warm-up batches, then three timed ones
    warm = manifest(runs["batched"])["batched"]["warmup_scene"]
    assert warm is not None
    for c in calls:
        assert c["size"] == SIZE and c["dtype"] == "float64"
    assert [c["live"] for c in calls] == [[True, False, False, False]] * 2 + [
        [True] * 4, [True] * 4, [True, True, False, False]]
    # roster order: the timed batches' live starts are the tasks' starts in order, padding
    # rows copy the batch's first scene
    recs = records(runs["batched"])
    one = records(runs["one"])
    assert [r["sample_id"] for r in recs] == [r["sample_id"] for r in one]
    starts = [tuple(s) for c in calls[2:] for s, live in zip(c["start"], c["live"]) if live]
    assert len(starts) == N
    last = calls[-1]
    assert last["start"][2] == last["start"][0] == last["start"][3]


def test_each_batch_is_split_over_the_local_devices(runs):
    """tests/conftest.py gives the CPU backend several devices: a batch of 4 is split
    over them (the routes, checked against the batch-one run's below, do not change)."""
    import jax

    n_dev = len(jax.local_devices())
    build = manifest(runs["batched"])["batched"]["builds"][0]
    want = [f"cpu:{d.id}" for d in jax.local_devices()] if SIZE % n_dev == 0 else [build["device"]]
    assert build["batch_devices"] == want


def test_records_and_routes(runs):
    recs = records(runs["batched"])
    assert [r["batch_first"] for r in recs] == [0] * 4 + [4] * 4 + [8] * 2
    assert [r["batch_live"] for r in recs] == [4] * 8 + [2] * 2
    assert {r["batch_size"] for r in recs} == {SIZE}
    assert all(r["latency_ms"] is None and r["returned_ms"] is None for r in recs)
    assert all(r["series"] == "warm" and r["quality"] and r["warm_complete"] for r in recs)
    assert all(r["status"] == "ok" and r["problem"] is None for r in recs)
    # the same routes as the batch-one planner's, task by task
    a = np.load(runs["batched"] / "seed-1234" / "paths.npz")
    b = np.load(runs["one"] / "seed-1234" / "paths.npz")
    assert np.array_equal(a["coords"], b["coords"]) and np.array_equal(a["offsets"], b["offsets"])
    assert [r["route_cost"] for r in recs] == [r["route_cost"] for r in records(runs["one"])]


def _by_hand(recs) -> dict:
    batches = {}
    for r in recs:
        batches.setdefault(r["batch_first"], (r["batch_ms"], r["batch_live"]))
    ms = np.array([v[0] for _, v in sorted(batches.items())])
    per = ms / np.array([v[1] for _, v in sorted(batches.items())])
    return {"n": len(ms), "batch_p50": float(np.median(ms)), "per_p50": float(np.median(per)),
            "per_p95": float(np.percentile(per, 95)), "per_mean": float(per.mean())}


def test_manifest_and_metrics_time_batches_never_requests(runs):
    want = _by_hand(records(runs["batched"]))
    scored = load_score(runs["batched"] / "seed-1234").metrics
    for block in (manifest(runs["batched"])["batched"], scored["batched"]):
        assert block["batch_size"] == SIZE and block["n_batches"] == want["n"] == 3
        assert block["n_scenes"] == N
        assert block["batch_ms"]["p50"] == pytest.approx(want["batch_p50"], rel=1e-12)
        assert block["per_scene_ms"]["p50"] == pytest.approx(want["per_p50"], rel=1e-12)
        assert block["per_scene_ms"]["p95"] == pytest.approx(want["per_p95"], rel=1e-12)
        assert block["per_scene_ms"]["mean"] == pytest.approx(want["per_mean"], rel=1e-12)
    m = load_score(runs["batched"] / "seed-1234").metrics
    assert m["latency"] == {} and m["latency_warm_quality_repeat"] is None
    assert m["timing_profile"]["profile"] == m["timing_boundary"] == "batched_v1"
    one = load_score(runs["one"] / "seed-1234").metrics
    assert m["primary"] == one["primary"]  # the same routes score the same


def test_compare_and_leaderboard_refuse_to_mix_procedures(runs, tmp_path):
    with pytest.raises(CompareError, match=r"a batched run cannot be set against a batch-one run: A "
                                           r"follows batched_v1 \(batches of 4\), B "
                                           r"native_raw_path_persistent_v1 \(batch one\)"):
        compare_runs(runs["batched"], runs["one"], n_bootstrap=50)
    other = tmp_path / "b8"
    run_spec(parse_spec(spec_dict(batch_size=8)), other, progress=False)
    score_run(other)
    with pytest.raises(CompareError, match=r"the batch sizes differ: A follows batched_v1 \(batches "
                                           r"of 4\), B batched_v1 \(batches of 8\)"):
        compare_runs(runs["batched"], other, n_bootstrap=50)
    with pytest.raises(LeaderboardError, match="has timing profile 'native_raw_path_persistent_v1'"):
        leaderboard([runs["batched"], runs["one"]], n_bootstrap=50)
    with pytest.raises(LeaderboardError, match="has batch size 8 but"):
        leaderboard([runs["batched"], other], n_bootstrap=50)


# --------------------------------------------------------------------------- planners that misbehave

def test_a_planner_without_plan_batch_is_refused(tmp_path):
    with pytest.raises(RunError, match="the planner has no plan_batch, so it cannot run under "
                                       "timing_profile batched_v1"):
        run_spec(parse_spec(spec_dict(inference="batch_planners:make_plan_only")), tmp_path / "r",
                 progress=False)


@pytest.mark.parametrize("factory, kwargs, want", [
    ("make_raising", {"first_bad": 3}, "RuntimeError: batch call"),  # the second timed batch on
    ("make_wrong_shape", {}, "protocol: BatchRoutes shapes"),
    ("make_bad_status", {}, "protocol: status code 7"),
])
def test_a_misbehaving_batch_costs_its_own_scenes(tmp_path, factory, kwargs, want):
    out = tmp_path / "r"
    run_spec(parse_spec(spec_dict(inference=f"batch_planners:{factory}", inference_kwargs=kwargs)),
             out, progress=False)
    recs = records(out)
    assert len(recs) == N
    bad = [r["error"] is not None and want in r["error"] for r in recs]
    if factory == "make_raising":  # warm-up batches 1-2 and the first timed batch pass
        assert bad == [False] * 4 + [True] * 6
    elif factory == "make_wrong_shape":
        assert all(bad)
    else:  # the second row of every batch
        assert bad == [i % SIZE == 1 for i in range(N)]
    for r, b in zip(recs, bad):
        assert (r["status"] == "runtime_error") == b
        assert (r["status"] == "ok") == (not b)
    score_run(out)  # a failed scene scores as a failure, the run as a whole
    m = load_score(out / "seed-1234").metrics
    assert m["primary"]["success_rate"] == pytest.approx(1 - sum(bad) / N)


def test_scores_of_a_copy_are_the_same(runs, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(runs["batched"], copy)
    for seed in copy.glob("seed-*"):
        for name in ("score_receipt.json", "metrics.json", "per_sample.npz"):
            (seed / name).unlink()
    score_run(copy)
    a = load_score(copy / "seed-1234").metrics
    b = load_score(runs["batched"] / "seed-1234").metrics
    assert a["batched"] == b["batched"] and a["primary"] == b["primary"]


def test_the_exact_batch_planner_gives_the_batch_one_routes(runs, tmp_path):
    """The shipped exact planner's jitted plan_batch (its batches split over the local
    devices where they divide) under the procedure: the batch-one run's routes."""
    out = tmp_path / "exact"
    run_spec(parse_spec(spec_dict(inference="passage_jax.planners.exact:make_planner")), out,
             progress=False)
    a = np.load(out / "seed-1234" / "paths.npz")
    b = np.load(runs["one"] / "seed-1234" / "paths.npz")
    assert np.array_equal(a["coords"], b["coords"]) and np.array_equal(a["offsets"], b["offsets"])
    assert [r["status"] for r in records(out)] == ["ok"] * N
