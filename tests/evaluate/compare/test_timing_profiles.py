"""Timing profiles on the scoring and comparison side: the ``validation_recost_ms`` block of
metrics.json (checked against NumPy over the records of requests.jsonl), the warm-request
flag of the censored block read from the records' ``warm_complete``, a session run's
latency over its timed warm requests only, compare's identity (the profile name) and
limits (the timing boundary and timer), the refusal of different profiles (library and
CLI), runs written before the profile keys existed, and the sidecar's block."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.data.writer import write_split
from passage_jax.evaluate.compare import CompareError, LimitsDiffer, compare_runs
from passage_jax.evaluate.compare._checks import identity, limits
from passage_jax.evaluate.latency import censored_latency_block, validation_recost_block
from passage_jax.evaluate.score import Score, ScoreError, score_run
from passage_jax.evaluate.score._collect import warm_requests
from passage_jax.evaluate.score._records import check_record
from passage_jax.evaluate.score._timing import run_timing
from passage_jax.protocol.records import read_requests
from passage_jax.run import parse_spec, run_spec

ROOT = Path(__file__).resolve().parents[3]
NATIVE = "native_raw_path_persistent_v1"
DEFAULT = "complete_request_v1"
IN_PROCESS, SUPERVISED = "in_process_complete_request_v1", "supervised_worker_request_v1"
SERIES_KEYS = ("latency_warmup", "latency_repeats", "quality_repeat_index")
BUDGET = {"wall_time_ms": 5000}
B = 50  # bootstrap draws
STATS = ("total_ms", "mean_ms", "p50_ms", "p95_ms", "max_ms")


def _cohort(root: Path) -> Path:
    """The runner fixtures' test split and a validation split (another start and goal)
    for a session's warm-up scene."""
    F.write_cohort(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "START", (2, 1))
        mp.setattr(F, "GOAL", (9, 10))
        rows = [F.make_row(10 + i, k, "validation") for i, k in enumerate(("open", "hill"))]
    write_split(root, F.N, "validation", rows, rows_per_shard=2)
    return root


def _run(spec: dict, out: Path) -> Path:
    run_spec(parse_spec(spec), out, progress=False)
    score_run(out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Scored runs of one spec: in process and supervised (default profile), and the native
    session profile."""
    tmp = tmp_path_factory.mktemp("profiles")
    root = _cohort(tmp / "cohort")
    out = {"root": root}
    for ex in ("in_process", "supervised"):
        out[ex] = _run(F.spec_dict(root, execution=ex, budget=BUDGET), tmp / ex)
    native = {k: v for k, v in F.spec_dict(root, budget=BUDGET).items() if k not in SERIES_KEYS}
    native["timing_profile"] = NATIVE
    out["native"] = _run(native, tmp / "native")
    return out


def _seed(run: Path) -> Path:
    return run / "seed-1234"


def _metrics(run: Path) -> dict:
    return json.loads((_seed(run) / "metrics.json").read_text())


def _manifest(run: Path) -> dict:
    return json.loads((_seed(run) / "manifest.json").read_text())


def _records(run: Path) -> list:
    return read_requests(_seed(run) / "requests.jsonl")


def _numpy_block(values) -> dict:
    v = np.asarray(values, np.float64)
    return {"total_ms": v.sum(), "mean_ms": v.mean(), "p50_ms": np.percentile(v, 50),
            "p95_ms": np.percentile(v, 95), "max_ms": v.max()}


# --------------------------------------------------------------------------- #
# metrics.json
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("ex, boundary", [("in_process", IN_PROCESS), ("supervised", SUPERVISED)])
def test_default_profile_block_matches_numpy_over_warm_records(runs, ex, boundary):
    m, recs = _metrics(runs[ex]), _records(runs[ex])
    warm = [r for r in recs if r["series"] == "warm"]
    assert len(warm) == 2 * 3 < len(recs)  # cold and warm-up passes are left out
    blk = m["validation_recost_ms"]
    assert (blk["profile"], blk["timing_boundary"], blk["inside_latency"]) == (DEFAULT, boundary, True)
    assert (blk["series"], blk["n_requests"], blk["recorded"]) == ("warm", len(warm), len(warm))
    want = _numpy_block([r["validation_recost_ms"] for r in warm])
    for k in STATS:
        assert blk[k] == pytest.approx(want[k], rel=1e-12)
    # inside the timed value: never longer than the request it is part of
    assert all(0 <= r["validation_recost_ms"] <= r["latency_ms"] for r in recs)
    assert m["timing_profile"]["profile"] == DEFAULT
    assert m["timing_boundary"] == m["timing_profile"]["timing_boundary"] == boundary
    assert m["timing_profile"]["timer"] == _manifest(runs[ex])["timing"]["timer"]


def test_native_session_block_and_latency_over_the_timed_requests(runs):
    m, recs = _metrics(runs["native"]), _records(runs["native"])
    assert {r["series"] for r in recs} == {"warm"} and len(recs) == 3  # one timed request per task
    blk = m["validation_recost_ms"]
    assert (blk["profile"], blk["timing_boundary"], blk["inside_latency"]) == (NATIVE, NATIVE, False)
    assert blk["recorded"] == blk["n_requests"] == len(recs)
    want = _numpy_block([r["validation_recost_ms"] for r in recs])
    for k in STATS:
        assert blk[k] == pytest.approx(want[k], rel=1e-12)
    # no cold or warm-up series: latency and quality over the timed warm requests only
    assert set(m["latency"]) == {"warm"} and set(m["quality_by_pass"]) == {"warm#0"}
    lat = np.array([r["latency_ms"] for r in recs])
    for q in (50, 95, 99):
        assert m["latency"]["warm"]["interpolated"][f"p{q}"] == pytest.approx(np.percentile(lat, q))
    assert m["latency_warm_quality_repeat"]["interpolated"]["p50"] == pytest.approx(np.median(lat))
    # the session warmed up before its first timed request: every request counts as warm,
    # although the spec declares no latency_warmup passes
    assert _manifest(runs["native"])["timing"]["latency_warmup"] == 0
    n_warm = sum(r["warm_complete"] is True for r in recs)
    assert n_warm == len(recs)
    assert m["latency"]["warm"]["censored"]["n_warm_requests"] == n_warm
    assert m["latency_warm_quality_repeat"]["censored"]["n_warm_requests"] == n_warm


@pytest.mark.parametrize("ex", ["in_process", "supervised"])
def test_warm_count_follows_the_records_warm_complete(runs, ex):
    m, recs = _metrics(runs[ex]), _records(runs[ex])
    for series, blk in m["latency"].items():
        got = [r for r in recs if r["series"] == series]
        assert blk["censored"]["n_warm_requests"] == sum(r["warm_complete"] is True for r in got)
    assert m["latency"]["cold"]["censored"]["n_warm_requests"] == 0
    assert m["latency"]["warm"]["censored"]["n_warm_requests"] == 6
    assert m["latency"]["warm"]["censored"]["at_least_100_warm_requests"] is False


def _inputs(series, warm_complete, warmup_declared=1):
    """What :func:`warm_requests` reads of a seed's inputs."""
    wc = np.array([-1 if w is None else int(w) for w in warm_complete], np.int8)
    rec = types.SimpleNamespace(series=np.asarray(series), warm_complete=wc,
                                warm_recorded=bool(np.any(wc >= 0)))
    return types.SimpleNamespace(records=rec, warmup_declared=warmup_declared)


def test_warm_flag_counts_only_complete_warm_ups():
    # a re-warm service: 130 timed requests, 31 served before a replaced worker re-warmed
    n = 130
    flags = [i not in range(40, 71) for i in range(n)]
    inputs = _inputs(["warm"] * n, flags)
    w = warm_requests(inputs, np.arange(n))
    assert w.tolist() == flags
    blk = censored_latency_block([1.0] * n, ["ok"] * n, [True] * n, [str(i) for i in range(n)], warm=w)
    assert (blk["n_requests"], blk["n_warm_requests"]) == (130, 99)
    assert blk["at_least_100_warm_requests"] is False  # 99 warm among 130 requests
    flags[40] = True
    blk = censored_latency_block([1.0] * n, ["ok"] * n, [True] * n, [str(i) for i in range(n)],
                                 warm=warm_requests(_inputs(["warm"] * n, flags), np.arange(n)))
    assert blk["n_warm_requests"] == 100 and blk["at_least_100_warm_requests"] is True
    with pytest.raises(ValueError, match="3 warm flags for 4 requests"):
        censored_latency_block([1.0] * 4, ["ok"] * 4, [True] * 4, list("abcd"), warm=[True] * 3)


def test_warm_flag_of_runs_without_warm_complete_keeps_the_series_rule():
    series = ["cold"] * 3 + ["warm"] * 3
    old = _inputs(series, [None] * 6)
    assert warm_requests(old, np.arange(3, 6)) is True  # warm series, a declared warm-up
    assert warm_requests(old, np.arange(0, 3)) is False  # the cold pass
    assert warm_requests(_inputs(series, [None] * 6, warmup_declared=0), np.arange(3, 6)) is False
    # recorded: the field decides, whatever the series is named
    new = _inputs(series, [False, False, False, True, False, True], warmup_declared=1)
    assert warm_requests(new, np.arange(3, 6)).tolist() == [True, False, True]


def test_validation_recost_block_not_recorded_and_partly_recorded():
    blk = validation_recost_block([None, np.nan], profile=DEFAULT, boundary=IN_PROCESS,
                                  inside_latency=True)
    assert (blk["n_requests"], blk["recorded"]) == (2, 0)
    assert all(blk[k] is None for k in STATS)
    blk = validation_recost_block([2.0, None, 4.0, 9.0], profile=NATIVE, boundary=NATIVE,
                                  inside_latency=False)
    assert (blk["n_requests"], blk["recorded"], blk["inside_latency"]) == (4, 3, False)
    # hand-worked: 2, 4, 9 -> total 15, mean 5, median 4, p95 = 4 + 0.9 * 5 = 8.5
    assert (blk["total_ms"], blk["mean_ms"], blk["p50_ms"], blk["max_ms"]) == (15.0, 5.0, 4.0, 9.0)
    assert blk["p95_ms"] == pytest.approx(8.5)


@pytest.mark.parametrize("field, value", [("validation_recost_ms", "fast"),
                                          ("validation_recost_ms", -1.0),
                                          ("warm_complete", "yes"), ("process_index", 1.5),
                                          ("host", 3), ("torch_synchronized", 1)])
def test_malformed_profile_fields_are_refused_by_name(field, value):
    rec = {"record": 0, "series": "warm", "repeat": 0, "task_index": 0, "sample_id": "a",
           "status": "ok"}
    check_record(rec, "requests.jsonl", 1)  # an older record without the fields reads
    with pytest.raises(ScoreError, match=f"requests.jsonl line 1: field '{field}' must be"):
        check_record({**rec, field: value}, "requests.jsonl", 1)


# --------------------------------------------------------------------------- #
# compare
# --------------------------------------------------------------------------- #

def test_compare_accepts_boundaries_of_one_profile_and_lists_them(runs, tmp_path):
    res = compare_runs(runs["in_process"], runs["supervised"], tmp_path / "c.json", n_bootstrap=B)
    assert res["identity"]["timing_profile"] == {"profile": DEFAULT}
    lim = res["procedure_limits"]
    assert "timing_boundary" in lim["differ"] and "timer" in lim["differ"]
    assert (lim["A"]["timing_boundary"], lim["B"]["timing_boundary"]) == (IN_PROCESS, SUPERVISED)
    assert "budget" not in lim["differ"]  # the same spec otherwise
    lc = res["latency_contrast"]
    assert lc["timing_boundary"] == {"A": IN_PROCESS, "B": SUPERVISED} and lc["same_boundary"] is False
    for side, run in (("A", runs["in_process"]), ("B", runs["supervised"])):
        assert res["validation_recost_ms"][side] == {"1234": _metrics(run)["validation_recost_ms"]}
    same = compare_runs(runs["in_process"], runs["in_process"], None, n_bootstrap=B,
                        require_identical_limits=True)
    assert same["procedure_limits"]["differ"] == [] and same["latency_contrast"]["same_boundary"]


def test_report_says_when_boundaries_differ(runs, tmp_path):
    from passage_jax.evaluate.report import write_report

    note = "timing boundaries differ (A `{}`, B `{}`)"
    for b, differ in (("supervised", True), ("in_process", False)):
        cmp = tmp_path / f"{b}.json"
        compare_runs(runs["in_process"], runs[b], cmp, n_bootstrap=B)
        write_report(cmp, tmp_path / f"{b}.md")
        text = (tmp_path / f"{b}.md").read_text()
        assert f"Timing profile: `{DEFAULT}`" in text
        assert (note.format(IN_PROCESS, SUPERVISED) in text) is differ
        assert ("not a like-for-like measurement" in text) is differ


def test_console_names_differing_boundaries(runs, capsys):
    from cli.compare import print_limits

    res = compare_runs(runs["in_process"], runs["supervised"], None, n_bootstrap=B)
    print_limits(res)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("warning: procedure limits differ: timer, timing_boundary (timer: A ")
    assert out[1].startswith(f"timing boundaries differ (A {IN_PROCESS}, B {SUPERVISED})")
    print_limits(compare_runs(runs["in_process"], runs["in_process"], None, n_bootstrap=B))
    assert capsys.readouterr().out == ""


def test_compare_require_identical_limits_refuses_boundaries(runs, tmp_path):
    with pytest.raises(LimitsDiffer, match=f"timing_boundary: A '{IN_PROCESS}' vs B '{SUPERVISED}'"):
        compare_runs(runs["in_process"], runs["supervised"], tmp_path / "c.json", n_bootstrap=B,
                     require_identical_limits=True)
    assert not (tmp_path / "c.json").exists()


def test_compare_refuses_different_profiles(runs, tmp_path):
    with pytest.raises(CompareError, match=f"^timing profiles differ: A {NATIVE} vs B {DEFAULT}$"):
        compare_runs(runs["native"], runs["supervised"], tmp_path / "c.json", n_bootstrap=B)
    with pytest.raises(CompareError, match=f"A {DEFAULT} vs B {NATIVE}"):
        compare_runs(runs["in_process"], runs["native"], tmp_path / "c.json", n_bootstrap=B)


def test_cli_compare_refuses_different_profiles_in_one_line(runs, tmp_path):
    out = tmp_path / "c.json"
    p = subprocess.run([sys.executable, "-m", "cli", "compare", "--score", str(runs["native"]),
                        "--score", str(runs["in_process"]), "--output", str(out),
                        "--n-bootstrap", str(B)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and not out.exists()
    err = p.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert f"timing profiles differ: A {NATIVE} vs B {DEFAULT}" in err


# --------------------------------------------------------------------------- #
# runs written before the profile keys
# --------------------------------------------------------------------------- #

_NEW_KEYS = ("validation_recost_ms", "warm_complete", "torch_synchronized", "process_index",
             "host", "device")


def _older_style(src: Path, dest: Path) -> Path:
    """A copy of ``src`` as the runner wrote it before timing profiles: no ``timing_profile``,
    ``timing_boundary`` or ``session`` in the manifest, none of the new record keys (the
    manifest's hash of requests.jsonl updated), scored again."""
    from passage_jax.fileio import sha256_file

    def edit(m):
        for k in ("timing_profile", "timing_boundary", "session"):
            m.pop(k, None)
        seed = dest / f"seed-{m['seed']}"
        lines = [json.loads(x) for x in (seed / "requests.jsonl").read_text().splitlines() if x]
        (seed / "requests.jsonl").write_text(
            "".join(json.dumps({k: v for k, v in r.items() if k not in _NEW_KEYS}) + "\n"
                    for r in lines))
        m["files"]["requests.jsonl"] = sha256_file(seed / "requests.jsonl")
    return F.edited_copy(src, dest, edit)


@pytest.fixture(scope="module")
def older(runs, tmp_path_factory):
    return _older_style(runs["in_process"], tmp_path_factory.mktemp("older") / "run")


def test_older_run_reads_as_the_default_profile(older, runs):
    assert "timing_profile" not in _manifest(older)
    assert all("validation_recost_ms" not in r for r in _records(older))
    m = _metrics(older)
    assert (m["timing_profile"]["profile"], m["timing_boundary"]) == (DEFAULT, IN_PROCESS)
    blk = m["validation_recost_ms"]
    assert (blk["profile"], blk["inside_latency"], blk["n_requests"], blk["recorded"]) == \
        (DEFAULT, True, 6, 0)
    assert all(blk[k] is None for k in STATS)
    # no warm_complete recorded: the warm series of a run with a declared warm-up is warm
    assert m["latency"]["warm"]["censored"]["n_warm_requests"] == 6
    assert m["latency"]["warmup"]["censored"]["n_warm_requests"] == 0
    # the quality is the same as the run it was copied from
    assert m["primary"] == _metrics(runs["in_process"])["primary"]


def test_older_run_compares_with_runs_of_the_default_profile(older, runs):
    same = compare_runs(older, runs["in_process"], None, n_bootstrap=B, require_identical_limits=True)
    assert same["identity"]["timing_profile"] == {"profile": DEFAULT}
    assert same["validation_recost_ms"]["A"]["1234"]["recorded"] == 0
    mixed = compare_runs(older, runs["supervised"], None, n_bootstrap=B)
    assert "timing_boundary" in mixed["procedure_limits"]["differ"]
    with pytest.raises(CompareError, match=f"timing profiles differ: A {NATIVE} vs B {DEFAULT}"):
        compare_runs(runs["native"], older, None, n_bootstrap=B)


def _score_of(manifest: dict) -> Score:
    return Score(folder=Path("/runs/x/seed-1"), manifest=manifest, metrics={}, receipt={}, per_sample={})


def test_identity_and_limits_of_manifest_dicts():
    old = {"timing": {"profile": SUPERVISED, "timer": "the parent's clock"}, "budget": BUDGET}
    assert identity(_score_of(old))["timing_profile"] == DEFAULT
    lim = limits(_score_of(old))
    assert (lim["timing_boundary"], lim["timer"]) == (SUPERVISED, "the parent's clock")
    bare = {"timing": {}}
    assert identity(_score_of(bare))["timing_profile"] == DEFAULT
    assert limits(_score_of(bare))["timing_boundary"] == IN_PROCESS
    new = {"timing_profile": NATIVE, "timing_boundary": NATIVE, "timing": {"profile": NATIVE}}
    assert identity(_score_of(new))["timing_profile"] == NATIVE
    assert run_timing({"timing": {"profile": NATIVE}})["profile"] == NATIVE
    with pytest.raises(CompareError, match=r"seed-1/manifest.json: field 'timing_profile' must be "
                                           r"one of .* got \"fast_v9\""):
        identity(_score_of({"timing_profile": "fast_v9"}))
    with pytest.raises(ScoreError, match="manifest.json: field 'timing_boundary' must be a non-empty"):
        run_timing({"timing_profile": DEFAULT, "timing_boundary": 7})


# --------------------------------------------------------------------------- #
# sidecar
# --------------------------------------------------------------------------- #

def test_sidecar_carries_the_block(runs):
    from passage_jax.evaluate.score import load_score
    from passage_jax.evaluate.sidecar import sidecar

    for name in ("native", "supervised"):
        run = runs[name]
        spec = parse_spec(_manifest(run)["spec"])
        scores = {"seed-1234": load_score(_seed(run)).metrics}
        side = sidecar(run, spec, scores)
        m = _metrics(run)
        assert side["validation_recost_ms"] == {"seed-1234": m["validation_recost_ms"]}
        assert side["timing_boundary"] == m["timing_boundary"] == _manifest(run)["timing_boundary"]
        assert side["timing_profile"]["profile"] == _manifest(run)["timing_profile"]
