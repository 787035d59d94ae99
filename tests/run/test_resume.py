"""Durable records and resume: a run killed (SIGKILL) at several points and resumed
scores exactly like an uninterrupted run; torn journals and torn final files are
detected and rebuilt; a different spec or different data is refused."""
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.evaluate import score_run
from passage_jax.protocol.records import PathsWriter, load_paths, read_requests, snapshot_route
from passage_jax.protocol.runfolder import JOURNAL as JOURNAL_NAME
from passage_jax.run import OutputFolderTaken, ResumeError, parse_spec, run_spec
from passage_jax.run.execution import JOURNAL_HEADER, Journal, encode_entry, scan_journal

HERE = Path(__file__).resolve().parents[1] / "fixtures"
DRIVER = HERE / "resume_driver.py"
SEEDS = [1, 2]
N_TASKS = 3
PER_SEED = N_TASKS * 4  # cold + 1 warm-up + 2 warm repeats
#: per_sample.npz fields that depend on the routes and statuses only (not on timing)
QUALITY_FIELDS = ("reference_qualified", "sample_id", "cluster_id", "repeat_index",
                  "quality_repeat_index", "primary_quality", "regret", "assd", "h95", "path_iou",
                  "success", "valid_path", "connected_path", "obstacle_violation",
                  "obstacle_traversals", "predicted_cost", "oracle_cost", "status", "record_index",
                  "task_index", "route_format", "route_length", "malformed")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("resume")
    F.write_cohort(base / "cohort")
    spec = base / "spec.json"
    spec.write_text(json.dumps(F.spec_dict(base / "cohort", seeds=SEEDS)))
    ref = base / "reference"
    run_spec(parse_spec(json.loads(spec.read_text())), ref, progress=False)
    score_run(ref)
    return {"base": base, "spec": spec, "reference": ref}


def _drive(spec, out, point, resume=False):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]))
    args = [sys.executable, str(DRIVER), str(spec), str(out), point] + (["--resume"] if resume else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


def _kill(setup, out, point):
    p = _drive(setup["spec"], out, point)
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])


def _resume(setup, out):
    logs = []
    summary = run_spec(setup["spec"], out, progress=False, resume=True, log=logs.append)
    return summary, logs


def _same_scores(setup, out):
    """Score ``out`` and compare every quality field of per_sample.npz, per seed, with the
    uninterrupted run's; also the records other than timing."""
    score_run(out)
    for seed in SEEDS:
        a = np.load(setup["reference"] / f"seed-{seed}" / "per_sample.npz", allow_pickle=False)
        b = np.load(out / f"seed-{seed}" / "per_sample.npz", allow_pickle=False)
        for k in QUALITY_FIELDS:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"seed {seed} {k}")
        pa = load_paths(setup["reference"] / f"seed-{seed}" / "paths.npz")
        pb = load_paths(out / f"seed-{seed}" / "paths.npz")
        for k in pa:
            np.testing.assert_array_equal(pa[k], pb[k], err_msg=f"seed {seed} paths {k}")
        ra = read_requests(setup["reference"] / f"seed-{seed}" / "requests.jsonl")
        rb = read_requests(out / f"seed-{seed}" / "requests.jsonl")
        keep = ("record", "seed", "series", "repeat", "task_index", "sample_id", "quality", "status",
                "route_format", "route_len", "route_cost", "problem")
        assert [{k: r[k] for k in keep} for r in ra] == [{k: r[k] for k in keep} for r in rb]
        assert not any(n.startswith(".") for n in os.listdir(out / f"seed-{seed}"))
    assert sorted(n for n in os.listdir(out) if n.startswith(".")) == []


def _manifest(out, seed):
    return json.loads((out / f"seed-{seed}" / "manifest.json").read_text())


# --------------------------------------------------------------------------- #
# the journal format
# --------------------------------------------------------------------------- #

def test_journal_round_trips_every_route_snapshot(tmp_path):
    routes = [np.array([[1, 1], [2, 2]], np.int64), None, np.array([[1.5, 2.0], [3.0, 4.25]]),
              np.arange(6, dtype=np.int16).reshape(3, 2, 1), np.array([[2 ** 40, -3]], np.int64),
              np.zeros((0, 2), np.int32), ["a", object()], np.array([[True, False]]),
              np.array([np.nan, np.inf, -0.0])]
    snaps = [snapshot_route(r) for r in routes]
    lines = [json.dumps({"record": i, "note": "é"}) for i in range(len(snaps))]
    j, scan = Journal.open(tmp_path / JOURNAL_NAME)
    assert scan.entries == [] and scan.torn is None
    for line, snap in zip(lines, snaps):
        j.append(line, snap)
    j.close()
    back = scan_journal(tmp_path / JOURNAL_NAME)
    assert back.torn is None and [e[0] for e in back.entries] == lines
    direct, replay = PathsWriter(), PathsWriter()
    for snap, (_, got) in zip(snaps, back.entries):
        direct.add(*snap)
        replay.add(*got)
        assert got[0] == snap[0] and got[3] == snap[3]
        for x, y in ((snap[1], got[1]), (snap[2], got[2])):
            assert (x is None) == (y is None)
            if x is not None:
                assert y.dtype == x.dtype and y.shape == x.shape
                np.testing.assert_array_equal(x, y)  # NaN, inf and -0.0 included
    a, b = direct.arrays(), replay.arrays()
    for k in a:
        assert a[k].dtype == b[k].dtype
        np.testing.assert_array_equal(a[k], b[k])
    assert np.signbit(b["raw_values"][-1])  # -0.0 kept bit for bit


def test_journal_torn_tail_and_corruption(tmp_path):
    path = tmp_path / JOURNAL_NAME
    j, _ = Journal.open(path)
    snap = snapshot_route(np.array([[0, 0], [1, 1]]))
    for i in range(3):
        j.append(json.dumps({"record": i}), snap)
    j.close()
    data = path.read_bytes()
    entry = len(encode_entry(json.dumps({"record": 0}), snap))
    assert len(data) == len(JOURNAL_HEADER) + 3 * entry
    for cut in (1, 10, entry - 1):  # the last entry cut short anywhere
        path.write_bytes(data[:-cut])
        s = scan_journal(path)
        assert len(s.entries) == 2 and s.torn and s.torn_bytes == entry - cut
    # a flipped byte in the last entry's payload: torn (checksum), two entries kept
    bad = bytearray(data)
    bad[-3] ^= 0xFF
    path.write_bytes(bytes(bad))
    s = scan_journal(path)
    assert len(s.entries) == 2 and "checksum" in s.torn
    # opening truncates the torn tail and appends after the last complete entry
    j, s = Journal.open(path)
    assert j.n_entries == 2 and path.stat().st_size == len(JOURNAL_HEADER) + 2 * entry
    j.append(json.dumps({"record": 2}), snap)
    j.close()
    assert path.read_bytes() == data
    # a flipped byte in an earlier entry is corruption, never a torn tail
    bad = bytearray(data)
    bad[len(JOURNAL_HEADER) + entry + 20] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(ValueError, match="checksum mismatch before the last entry"):
        scan_journal(path)
    path.write_bytes(b"something else entirely\n")
    with pytest.raises(ValueError, match="not a record journal"):
        scan_journal(path)


# --------------------------------------------------------------------------- #
# an uninterrupted run
# --------------------------------------------------------------------------- #

def test_final_files_are_built_from_the_journal(setup):
    out = setup["reference"]
    started = json.loads((out / "run_started.json").read_text())
    assert started["format"] == "passage-jax-run-started-v1" and started["resumes"] == []
    assert started["identity"]["spec_sha256"] == _manifest(out, 1)["spec_sha256"]
    for seed in SEEDS:
        folder = out / f"seed-{seed}"
        scan = scan_journal(folder / JOURNAL_NAME)
        assert scan.torn is None and len(scan.entries) == PER_SEED
        text = (folder / "requests.jsonl").read_text()
        assert text == "".join(line + "\n" for line, _ in scan.entries)
        w = PathsWriter()
        for _, snap in scan.entries:
            w.add(*snap)
        paths = load_paths(folder / "paths.npz")
        for k, v in w.arrays().items():
            np.testing.assert_array_equal(paths[k], v)
        recs = read_requests(folder / "requests.jsonl")
        assert not any(r["resumed"] for r in recs)
        m = _manifest(out, seed)
        assert m["resume"]["resumed"] is False and m["resume"]["recovered_records"] == 0
        assert len(m["resume"]["builds"]) == 1 and m["resume"]["builds"][0]["at_record"] == 0
        assert m["timing"]["profile"] == "in_process_complete_request_v1"
        assert m["timing"]["timer"].startswith("time.monotonic")
        assert m["journal"]["entries"] == PER_SEED


# --------------------------------------------------------------------------- #
# killed and resumed
# --------------------------------------------------------------------------- #

KILLS = [
    # point, folders expected complete after the kill, records recovered in the seed in progress
    ("admit", [], None),
    ("between", [1], None),
    ("planner:5", [], 4),
    ("planner:17", [1], 4),
    ("journal:7", [], 6),
    ("write:paths.npz:1", [], PER_SEED),
    ("write:manifest.json:2", [1], PER_SEED),
    ("write:run.json:1", [1, 2], None),
]
#: the kill points run by default, one of each kind; the others run with -m slow
DEFAULT_KILLS = ("admit", "planner:5", "journal:7", "write:paths.npz:1")


@pytest.mark.parametrize("point,complete,recovered", [
    k if k[0] in DEFAULT_KILLS else pytest.param(*k, marks=pytest.mark.slow) for k in KILLS],
    ids=[k[0] for k in KILLS])
def test_killed_and_resumed_scores_identically(setup, tmp_path, point, complete, recovered):
    out = tmp_path / "run"
    _kill(setup, out, point)
    # what survived the kill
    done = sorted(int(p.name[5:]) for p in out.glob("seed-*")) if out.exists() else []
    assert done == complete
    assert not (out / "run.json").exists()
    partial = [p for p in out.glob(".seed-*.partial")] if out.exists() else []
    if recovered is not None:
        assert len(partial) == 1
        scan = scan_journal(partial[0] / JOURNAL_NAME)
        assert len(scan.entries) == recovered
        assert (scan.torn is not None) == point.startswith("journal")
    # a plain run refuses the folder; the library says why, the CLI suggests --resume
    if out.exists():
        with pytest.raises(OutputFolderTaken, match="already holds a run"):
            run_spec(setup["spec"], out, progress=False)
    summary, logs = _resume(setup, out)
    assert sorted(summary["per_seed"]) == [str(s) for s in SEEDS]
    _same_scores(setup, out)
    if recovered is not None:
        seed = int(partial[0].name.split("-")[1].split(".")[0])
        m = _manifest(out, seed)
        assert m["resume"]["resumed"] and m["resume"]["recovered_records"] == recovered
        recs = read_requests(out / f"seed-{seed}" / "requests.jsonl")
        flagged = [r["record"] for r in recs if r["resumed"]]
        # the first request run after the resume says so (none when nothing was missing)
        assert flagged == ([recovered] if recovered < PER_SEED else [])
        assert any("resuming with" in line for line in logs)
        if point.startswith("journal"):
            assert any("dropped a torn last entry" in line for line in logs)
        others = [s for s in SEEDS if s != seed]
        assert all(not _manifest(out, s)["resume"]["resumed"] for s in others)
    started = json.loads((out / "run_started.json").read_text())
    assert len(started["resumes"]) == (0 if point == "admit" else 1)


def test_resume_via_cli_after_a_kill_mid_seed(setup, tmp_path, capsys):
    from cli.__main__ import main

    out = tmp_path / "run"
    _kill(setup, out, "planner:9")
    assert main(["run", "--spec", str(setup["spec"]), "--output", str(out), "--no-progress"]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["run", "--spec", str(setup["spec"]), "--output", str(out), "--no-progress",
                 "--resume"]) == 0
    _same_scores(setup, out)
    # resuming a finished run: it says so and changes nothing
    # (but for the launch's own resolved_protocol record)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "resolved_protocol" not in p.name}
    capsys.readouterr()
    assert main(["run", "--spec", str(setup["spec"]), "--output", str(out), "--no-progress",
                 "--resume"]) == 0
    assert "already complete" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in out.rglob("*")
            if p.is_file() and "resolved_protocol" not in p.name} == before
    assert json.loads((out / "resolved_protocol.json").read_text())["launch"]["kind"] == "resume"


def test_torn_journal_tail_is_dropped_and_rerun(setup, tmp_path):
    out = tmp_path / "run"
    _kill(setup, out, "planner:8")  # seven records durable
    j = out / ".seed-1.partial" / JOURNAL_NAME
    size = j.stat().st_size
    with open(j, "r+b") as f:
        f.truncate(size - 25)  # the seventh entry cut mid-way
    assert len(scan_journal(j).entries) == 6
    summary, logs = _resume(setup, out)
    assert any("dropped a torn last entry" in line for line in logs)
    m = _manifest(out, 1)
    assert m["resume"]["recovered_records"] == 6
    assert m["resume"]["resumes"][0]["dropped_torn_bytes"] > 0
    _same_scores(setup, out)


def test_torn_final_files_of_a_completed_seed_are_rebuilt(setup, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(setup["reference"], out)
    for seed in SEEDS:
        for n in ("per_sample.npz", "metrics.json", "score_receipt.json"):
            (out / f"seed-{seed}" / n).unlink()
    good = {n: (out / "seed-1" / n).read_bytes() for n in ("requests.jsonl", "paths.npz")}
    (out / "seed-1" / "paths.npz").write_bytes(good["paths.npz"][:100])  # a partial npz
    text = good["requests.jsonl"].decode()
    (out / "seed-2" / "requests.jsonl").write_text(text[:len(text) - 40])  # a torn last line
    (out / "seed-2" / "manifest.json").write_text("{\"format\": ")  # and a torn manifest
    summary, logs = _resume(setup, out)
    assert not summary.get("complete")
    assert any("seed 1: paths.npz" in line and "rebuilding" in line for line in logs)
    assert any("seed 2: manifest.json" in line for line in logs)
    assert (out / "seed-1" / "requests.jsonl").read_bytes() == good["requests.jsonl"]
    m1 = _manifest(out, 1)
    assert m1["resume"]["repairs"] and "paths.npz" in m1["resume"]["repairs"][0]["problems"][0]
    _same_scores(setup, out)


def test_completed_seed_without_journal_is_not_silently_accepted(setup, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(setup["reference"], out)
    (out / "seed-2" / JOURNAL_NAME).unlink()
    (out / "seed-2" / "paths.npz").write_bytes(b"PK\x03\x04")
    with pytest.raises(ResumeError, match=r"paths\.npz: sha256 differs.*no records\.journal"):
        _resume(setup, out)


# --------------------------------------------------------------------------- #
# refusals
# --------------------------------------------------------------------------- #

def test_resume_refuses_a_different_spec_or_different_data(setup, tmp_path, capsys):
    out = tmp_path / "run"
    _kill(setup, out, "planner:3")
    d = json.loads(setup["spec"].read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**d, "latency_repeats": 3}))
    with pytest.raises(ResumeError, match=r"the spec differs.*spec\.latency_repeats: stored 2, now 3"):
        run_spec(other, out, progress=False, resume=True)
    from cli.__main__ import main

    assert main(["run", "--spec", str(other), "--output", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "latency_repeats" in err and "without --resume" in err
    # the same spec over different scenes at the same path: the data identity differs
    data = tmp_path / "cohort"
    F.write_cohort(data)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**d, "dataset_path": str(data)}))
    out2 = tmp_path / "run2"
    p = _drive(spec, out2, "planner:3")
    assert p.returncode == -signal.SIGKILL
    shutil.rmtree(data)
    F.write_cohort(data, kinds=("open", "hill", "trap"))
    with pytest.raises(ResumeError, match=r"run identity differs.*data\.shards\.1\.sha256"):
        run_spec(spec, out2, progress=False, resume=True)
    # nothing was changed by the refusals
    assert len(scan_journal(out2 / ".seed-1.partial" / JOURNAL_NAME).entries) == 2


def test_resume_of_an_empty_or_foreign_folder(setup, tmp_path):
    out = tmp_path / "new"
    summary, _ = _resume(setup, out)  # nothing to resume: a fresh run
    assert not summary.get("complete")
    _same_scores(setup, out)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("x")
    with pytest.raises(ResumeError, match="no run_started.json but is not empty"):
        _resume(setup, foreign)


@pytest.mark.slow  # a larger sibling of a default-run check (the default run stays short)
def test_supervised_run_killed_mid_seed_and_resumed(setup, tmp_path):
    """The same durability under execution: supervised (the worker dies with the run)."""
    d = json.loads(setup["spec"].read_text())
    spec = tmp_path / "supervised.json"
    spec.write_text(json.dumps({**d, "execution": "supervised", "budget": {"wall_time_ms": 20000}}))
    out = tmp_path / "run"
    p = _drive(spec, out, "journal:5")
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert len(scan_journal(out / ".seed-1.partial" / JOURNAL_NAME).entries) == 4
    run_spec(spec, out, progress=False, resume=True)
    _same_scores(setup, out)  # the quality of a well-behaved planner does not depend on the executor
    for seed in SEEDS:
        m = _manifest(out, seed)
        assert m["timing"]["profile"] == "supervised_worker_request_v1"
        assert "IPC" in m["timing"]["timer"]
    recs = read_requests(out / "seed-1" / "requests.jsonl")
    assert [r["record"] for r in recs if r["resumed"]] == [4]
    pids = {r["worker"]["pid"] for r in recs}
    assert len(pids) == 2  # one worker before the kill, a fresh one after the resume
