"""Hostile planners and run folders, round 2: a route of any dtype or shape is stored so
that ``score`` reads it (scored, or recorded invalid with its reason); whatever a planner
raises (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, in process or in a worker,
from ``plan()`` or from converting its route) is that request's ``runtime_error`` and the
run goes on, while a real SIGINT/SIGTERM to the evaluator stops the run resumably with
one line; and ``score`` never reads or writes through a symbolic link out of the run
folder."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest

from cli.__main__ import main
from passage_jax.evaluate import ScoreError, score_run
from passage_jax.protocol import BudgetSpec
from passage_jax.protocol.records import (
    ROUTE_FORMATS,
    PathsReader,
    PathsWriter,
    load_paths,
    read_requests,
    route_description,
    route_of,
    snapshot_route,
)
from passage_jax.run.execution import interrupts
from passage_jax.run.execution.timing import call_planner, execute

ROOT = Path(__file__).resolve().parents[2]
FAST = {"latency_warmup": 0, "latency_repeats": 1, "quality_repeat_index": 0}

#: route variants: name -> what the planner returns in place of its (L, 2) route ``r``
ROUTE_VARIANTS = {
    "bool": lambda r: r.astype(bool),
    "uint8": lambda r: r.astype(np.uint8),
    "int8": lambda r: r.astype(np.int8),
    "int16": lambda r: r.astype(np.int16),
    "uint16": lambda r: r.astype(np.uint16),
    "big_int32": lambda r: r.astype(">i4"),
    "uint64": lambda r: r.astype(np.uint64),
    "float16": lambda r: r.astype(np.float16),
    "big_float64": lambda r: r.astype(">f8"),
    "zero_d": lambda r: np.array(int(r[0, 0])),
    "three_d": lambda r: r.reshape(1, -1, 2),
    "empty_1d": lambda r: np.zeros(0),
    "empty_u1": lambda r: np.zeros((0, 2), np.uint8),
    "empty_3x0": lambda r: np.zeros((3, 0), np.int8),
    "object_ints": lambda r: r.astype(object),
    "ragged": lambda r: [list(r[0]), [1]],
    "strings": lambda r: r.astype(str),
}
#: the variants whose cells are the exact integer route (scored as the route itself)
EXACT = {"uint8", "int8", "int16", "uint16", "big_int32", "uint64"}

PLANNERS = '''
import numpy as np
from passage_jax.planners.bfs import BFSPlanner

class Raising:
    """A route whose conversion raises (``__array__``)."""
    def __init__(self, exc):
        self.exc = exc
    def __array__(self, *a, **k):
        raise self.exc

def _exc(kind):
    return {"SystemExit0": SystemExit(0), "SystemExit3": SystemExit(3),
            "GeneratorExit": GeneratorExit(), "KeyboardInterrupt": KeyboardInterrupt()}[kind]

def make_raising(cycle):
    """Request i raises cycle[i % len(cycle)] = (kind, where) from plan() or __array__."""
    inner = BFSPlanner()
    calls = [0]
    def plan(request):
        kind, where = cycle[calls[0] % len(cycle)]
        calls[0] += 1
        if where == "plan":
            raise _exc(kind)
        res = inner.plan(request)
        res.path = Raising(_exc(kind))
        return res
    return plan

def make_variants(names):
    """Request i returns its route converted by variant names[i % len(names)]."""
    import tests.run.test_planner_faults as T
    inner = BFSPlanner()
    calls = [0]
    def plan(request):
        name = names[calls[0] % len(names)]
        calls[0] += 1
        res = inner.plan(request)
        res.path = T.ROUTE_VARIANTS[name](np.asarray(res.path))
        return res
    return plan

def make_slow(swallow=False):
    """Plans with BFS after a second of sleeping (swallowing what interrupts it)."""
    import time
    inner = BFSPlanner()
    def plan(request):
        t = time.monotonic()
        while time.monotonic() - t < 1.0:
            try:
                time.sleep(0.02)
            except BaseException:
                if not swallow:
                    raise
        return inner.plan(request)
    return plan
'''

#: the exceptions every variant of family 2 raises, from plan() and from __array__
CYCLE = [(k, w) for k in ("SystemExit0", "SystemExit3", "GeneratorExit", "KeyboardInterrupt")
         for w in ("plan", "array")]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("round2_cohort")
    F.write_cohort(root)
    return root


@pytest.fixture(scope="module")
def mods(tmp_path_factory):
    d = tmp_path_factory.mktemp("round2_mods")
    name = f"round2_planners_{os.getpid()}"
    (d / f"{name}.py").write_text(PLANNERS)
    sys.path.insert(0, str(d))
    yield name, d
    sys.path.remove(str(d))


def _write_spec(path: Path, cohort, **over) -> Path:
    path.write_text(json.dumps(F.spec_dict(cohort, **{**FAST, **over})))
    return path


def _run_and_score(tmp_path, cohort, **over) -> Path:
    spec = _write_spec(tmp_path / "spec.json", cohort, **over)
    out = tmp_path / "run"
    assert main(["run", "--spec", str(spec), "--output", str(out), "--no-progress"]) == 0
    assert main(["score", "--run", str(out)]) == 0
    return out


# --------------------------------------------------------------------------- #
# 1. routes of any dtype or shape
# --------------------------------------------------------------------------- #

def _route():
    return np.array([[1, 1], [2, 2], [3, 3]], np.int32)  # int32, as the BFS baseline returns


@pytest.mark.parametrize("name", sorted(ROUTE_VARIANTS))
def test_every_route_variant_round_trips_through_paths_npz(tmp_path, name):
    value = ROUTE_VARIANTS[name](_route())
    fmt, cells, raw, desc = snapshot_route(value)
    dtype, shape = route_description(desc)
    if isinstance(value, np.ndarray):
        # the description is the array's own dtype and shape, in two fields
        assert np.dtype(dtype) == value.dtype and dtype == value.dtype.str
        assert shape == "x".join(map(str, value.shape))
    w = PathsWriter()
    w.add(fmt, cells, raw, desc)
    w.write(tmp_path / "paths.npz")
    d = load_paths(tmp_path / "paths.npz")
    assert str(d["raw_dtype"][0]) == dtype and str(d["raw_shape"][0]) == shape
    got = route_of(d, 0)
    sought = PathsReader(tmp_path / "paths.npz").routes(0, 1)[0]  # read by seeking: the same
    assert (sought is None and got is None) or np.array_equal(sought, got)
    kind = ROUTE_FORMATS[fmt]
    if name in EXACT:
        assert kind == "int" and got.dtype == np.int32 and np.array_equal(got, _route())
    elif kind in ("float", "shape", "int_range"):
        want = np.asarray(value, np.float64)
        np.testing.assert_array_equal(got, want.reshape(-1) if want.ndim == 0 else want)  # not rounded
    elif name in ("empty_1d", "empty_u1"):
        assert kind == "int" and got.shape == (0, 2)
    else:
        assert kind == "object" and got is None


def test_an_older_files_split_description_still_reads(tmp_path):
    """A paths.npz written before the fix holds raw_dtype '' and raw_shape 'b1' for a
    bool route: its values read back flat (malformed), never an error."""
    w = PathsWriter()
    w.add(*snapshot_route(np.array([[1, 1], [2, 2]], bool)))
    arrays = w.arrays()
    arrays["raw_dtype"] = np.array([""])
    arrays["raw_shape"] = np.array(["b1"])
    np.savez(tmp_path / "paths.npz", **arrays)
    assert route_of(load_paths(tmp_path / "paths.npz"), 0).tolist() == [1.0, 1.0, 1.0, 1.0]
    assert PathsReader(tmp_path / "paths.npz").routes(0, 1)[0].tolist() == [1.0, 1.0, 1.0, 1.0]
    # a journal written before the fix holds the description as one string
    assert route_description("|b1|3x2") == ("|b1", "3x2")
    assert route_description("<f8|3x2") == ("<f8", "3x2")
    assert route_description("<i8|") == ("<i8", "")
    assert route_description("list") == ("list", "")
    assert route_description(None) == ("", "")
    assert route_description(["|u1", "2x2"]) == ("|u1", "2x2")


def test_a_run_of_every_route_variant_scores(tmp_path, cohort, mods):
    name, _ = mods
    names = sorted(ROUTE_VARIANTS)
    # 3 tasks x (1 cold + 5 warm) = 18 requests: every variant at least once
    out = _run_and_score(tmp_path, cohort, inference=f"{name}:make_variants",
                         inference_kwargs={"names": names}, latency_repeats=5)
    seed = out / "seed-1234"
    recs = read_requests(seed / "requests.jsonl")
    per = np.load(seed / "per_sample.npz", allow_pickle=False)
    paths = load_paths(seed / "paths.npz")
    for rec in recs:
        variant = names[rec["record"] % len(names)]
        if variant in EXACT:
            assert rec["status"] == "ok" and rec["route_format"] == "int", (variant, rec)
        elif variant in ("empty_1d", "empty_u1"):
            assert rec["status"] == "invalid_path" and rec["problem"], (variant, rec)
        else:
            assert rec["status"] == "invalid_path", (variant, rec)
            assert rec["problem"].startswith("malformed route"), (variant, rec)
            value = ROUTE_VARIANTS[variant](_route())
            if isinstance(value, np.ndarray):  # strings: the width is the route's
                want = value.dtype.str if variant != "strings" else "<U"
                assert f"dtype {want}" in rec["problem"], (variant, rec)
                assert str(paths["raw_dtype"][rec["record"]]).startswith(want), (variant, rec)
    # the warm records are scored: exact routes valid, the others failures
    for i, r in zip(per["record_index"], per["valid_path"]):
        assert bool(r) == (names[int(i) % len(names)] in EXACT)


# --------------------------------------------------------------------------- #
# 2. whatever a planner raises is its request's runtime_error
# --------------------------------------------------------------------------- #

def _check_raised_records(out: Path):
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert len(recs) == 3 * 3
    for rec in recs:
        kind, where = CYCLE[rec["record"] % len(CYCLE)]
        name = kind.rstrip("03")
        assert rec["status"] == "runtime_error", rec
        assert rec["error_type"] == name, rec
        assert rec["error"].startswith(name), rec
        if kind.startswith("SystemExit"):
            assert rec["error"] == f"SystemExit: {kind[-1]}"
    assert (out / "run.json").is_file()


@pytest.mark.parametrize("execution", ["in_process", "supervised"])
def test_a_planner_raising_base_exceptions_does_not_end_the_run(tmp_path, cohort, mods, execution):
    name, _ = mods
    extra = {"budget": {"wall_time_ms": 60000}, "worker_warmup": 0} if execution == "supervised" else {}
    out = _run_and_score(tmp_path, cohort, inference=f"{name}:make_raising",
                         inference_kwargs={"cycle": CYCLE}, latency_repeats=2, execution=execution,
                         **extra)
    _check_raised_records(out)
    if execution == "supervised":  # the worker served on: it was never replaced
        recs = read_requests(out / "seed-1234" / "requests.jsonl")
        assert {r["worker"]["index"] for r in recs} == {0}


def test_call_planner_contains_a_hostile_exception_text():
    """An exception whose __str__ raises SystemExit is still recorded by its name."""
    class Nasty(Exception):
        def __str__(self):
            raise SystemExit(7)

    def plan(_request):
        raise Nasty()

    out = call_planner(plan, lambda: None)
    assert out["status"] == "runtime_error" and out["error_type"] == "Nasty"


def test_the_evaluators_own_signal_is_not_contained(cohort):
    task = F.load(cohort)[0]

    def signalled(_request):
        os.kill(os.getpid(), signal.SIGINT)  # a real signal delivered to the evaluator
        time.sleep(1.0)

    def swallowed(_request):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
        except BaseException:  # noqa: BLE001
            return None

    before = signal.getsignal(signal.SIGINT)
    for plan in (signalled, swallowed):
        with interrupts.stop_on_signals(), pytest.raises(interrupts.RunInterrupted):
            execute(plan, task, BudgetSpec())
        with pytest.raises(interrupts.RunInterrupted):  # outside a run: Ctrl-C still stops
            execute(plan, task, BudgetSpec())
    assert signal.getsignal(signal.SIGINT) is before  # restored

    def raised(_request):
        raise KeyboardInterrupt

    with interrupts.stop_on_signals():
        rec, _ = execute(raised, task, BudgetSpec())
    assert rec["status"] == "runtime_error" and rec["error_type"] == "KeyboardInterrupt"


def _cli(*args, env=None):
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *env]))
    # SIGINT handled as under a terminal (a shell's background job would inherit it ignored)
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.argv[0] = 'cli'; runpy.run_module('cli', run_name='__main__', alter_sys=True)")
    return subprocess.Popen([sys.executable, "-c", boot, *map(str, args)], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("execution,sig,swallow", [
    ("in_process", "SIGINT", False),
    # the other two kinds run with the larger checks (-m slow): each is a whole CLI run
    pytest.param("in_process", "SIGTERM", True, marks=pytest.mark.slow),
    pytest.param("supervised", "SIGINT", False, marks=pytest.mark.slow)])
def test_a_real_signal_stops_the_run_resumably(tmp_path, cohort, mods, execution, sig, swallow):
    name, d = mods
    extra = {"budget": {"wall_time_ms": 60000}, "worker_warmup": 0} if execution == "supervised" else {}
    spec = _write_spec(tmp_path / "spec.json", cohort, inference=f"{name}:make_slow",
                       inference_kwargs={"swallow": swallow}, execution=execution, **extra)
    out = tmp_path / "run"
    p = _cli("run", "--spec", spec, "--output", out, "--no-progress", env=[str(d)])
    journal = out / ".seed-1234.partial" / "records.journal"
    end = time.monotonic() + 120
    while time.monotonic() < end and p.poll() is None:
        if journal.is_file() and journal.stat().st_size > 100:  # a record is durable
            break
        time.sleep(0.05)
    time.sleep(0.3)  # inside the next request
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert f"stopped by {sig}" in lines[-1] and "resum" in lines[-1], err
    r = _cli("run", "--spec", spec, "--output", out, "--no-progress", "--resume", env=[str(d)])
    _, err = r.communicate(timeout=300)
    assert r.returncode == 0, err
    recs = read_requests(out / "seed-1234" / "requests.jsonl")
    assert [rec["status"] for rec in recs] == ["ok"] * 6


# --------------------------------------------------------------------------- #
# 3. score stays inside the run folder
# --------------------------------------------------------------------------- #

@pytest.fixture(scope="module")
def finished(tmp_path_factory, cohort):
    """A finished (unscored) two-seed run."""
    base = tmp_path_factory.mktemp("round2_run")
    spec = _write_spec(base / "spec.json", cohort, seeds=[1234, 2026])
    out = base / "run"
    assert main(["run", "--spec", str(spec), "--output", str(out), "--no-progress"]) == 0
    return out


def _outputs(folder: Path) -> list:
    return sorted(n for n in ("per_sample.npz", "metrics.json", "score_receipt.json")
                  if (folder / n).exists() or (folder / n).is_symlink())


def _refused(run: Path, named: Path, capsys) -> None:
    with pytest.raises(ScoreError, match=re.escape(str(named))):
        score_run(run)
    capsys.readouterr()
    assert main(["score", "--run", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(named) in err[0] and "outside the run folder" in err[0], err


def test_a_seed_folder_linked_out_of_the_run_is_refused(tmp_path, finished, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "seed-2026", elsewhere)
    (run / "seed-2026").symlink_to(elsewhere)
    _refused(run, run / "seed-2026", capsys)
    assert _outputs(elsewhere) == [] and _outputs(run / "seed-1234") == []


@pytest.mark.parametrize("name", ["paths.npz", "manifest.json", "metrics.json", "run.json"])
def test_a_file_linked_out_of_the_run_is_refused(tmp_path, finished, capsys, name):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    where = run if name == "run.json" else run / "seed-1234"
    target = tmp_path / f"outside-{name}"
    if (where / name).exists():
        shutil.move(where / name, target)
    else:
        target.write_text("{}")
    (where / name).symlink_to(target)
    _refused(run, where / name, capsys)
    for s in ("seed-1234", "seed-2026"):
        assert [n for n in _outputs(run / s) if n != name] == []
    # the seed folder scored on its own is refused the same way
    if name != "run.json":
        with pytest.raises(ScoreError, match="outside the run folder"):
            score_run(run / "seed-1234")


def test_a_link_inside_the_run_folder_is_followed(tmp_path, finished):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    shutil.move(run / "seed-2026", run / "kept")
    (run / "seed-2026").symlink_to(run / "kept")  # inside the run folder: allowed
    assert set(score_run(run)) == {"seed-1234", "seed-2026"}
    assert _outputs(run / "kept") == ["metrics.json", "per_sample.npz", "score_receipt.json"]
