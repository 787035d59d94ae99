"""The score pipeline as typed stages (issue 22, item 4).

**Byte identity.** ``tests/fixtures/golden/score_runs.tar.gz`` holds four unscored run folders on
the shipped test cohort and the ``per_sample.npz`` and ``metrics.json`` that scoring them
wrote before ``score_folder`` was split into stages (read -> batch -> kernel -> collect ->
write): BFS on 64² with three seeds, the exact planner on 64² and on 256², and on 64² a
planner that returns every kind of route (float, beyond int32, wrong shape, none, ragged,
a 2,200-cell loop scored on the host path, a raised error) with a warm-up pass, two warm
repeats and quality repeat 1. Scoring them again must write the same bytes (recorded on
the CPU backend in float64; the outputs are the same on one device and on the four host
devices the tests see).

**Compilation.** ``score_receipt.json`` records what scoring the folder compiled
(``compilation``), never ``metrics.json``; scoring an identical folder a second time in
the same process compiles nothing.

**Layout.** The pipeline's modules stay under 600 lines, its functions under 60 lines and
8 parameters.

A deliberate change of the outputs (its format bumped) regenerates the expected files::

    PASSAGE_UPDATE_GOLDEN=1 python -m pytest -q -n 0 tests/evaluate/score/test_pipeline.py
"""
from __future__ import annotations

import ast
import dataclasses
import gzip
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import jax
import numpy as np
import pytest

from passage_jax.evaluate import score as S
from passage_jax.evaluate.score._batch import Batch, BatchPlan, make_batch
from passage_jax.evaluate.score._collect import Collector, ScoreOutputs, collect_outputs
from passage_jax.evaluate.score._folder import SeedFolder, SeedInputs
from passage_jax.evaluate.score._kernel import BatchScores, finish_batches, submit_batch
from passage_jax.evaluate.score._records import References
from passage_jax.evaluate.score._scenes import open_run_tasks
from passage_jax.evaluate.score._write import COMPILATION_FIELDS
from passage_jax.metrics import RouteStream
from passage_jax.precision import kernel_precision

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "score_runs.tar.gz"
UPDATE = os.environ.get("PASSAGE_UPDATE_GOLDEN", "") not in ("", "0")
RUNS = ("bfs64", "exact64", "exact256", "odd64")
OUTPUT_FILES = ("per_sample.npz", "metrics.json")
SCORE = Path(S.__file__).parent
PIPELINE = sorted(SCORE.glob("*.py"))


def _pack(src: Path, dest: Path) -> None:
    """``src``'s files into a gzipped tar at ``dest``, the same bytes for the same files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(q for q in src.rglob("*") if q.is_file()):
            info = tarfile.TarInfo(p.relative_to(src).as_posix())
            data = p.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    dest.write_bytes(gzip.compress(buf.getvalue(), mtime=0))


def _unpack(dest: Path) -> Path:
    with tarfile.open(GOLDEN) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python 3.10 before the extraction filters
            tar.extractall(dest)
    return dest


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """The golden runs, unpacked: {"runs": unscored run folders, "expected": their outputs}."""
    root = _unpack(tmp_path_factory.mktemp("score-golden"))
    return {"runs": root / "runs", "expected": root / "expected", "root": root}


@pytest.fixture(scope="module")
def scored(golden, tmp_path_factory):
    """Every golden run folder scored by this code (a copy); with PASSAGE_UPDATE_GOLDEN the
    outputs become the expected ones."""
    out = tmp_path_factory.mktemp("score-now")
    for name in RUNS:
        shutil.copytree(golden["runs"] / name, out / name)
        S.score_run(out / name, dataset_path="shipped")
    if UPDATE:
        for seed in sorted(out.glob("*/seed-*")):
            dest = golden["expected"] / seed.parent.name / seed.name
            dest.mkdir(parents=True, exist_ok=True)
            for f in OUTPUT_FILES:
                shutil.copy2(seed / f, dest / f)
        _pack(golden["root"], GOLDEN)
    return out


def _json_diff(a, b, path="", rtol=0.0) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in a:
            if k in b:
                out += _json_diff(a[k], b[k], f"{path}/{k}", rtol)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _json_diff(x, y, f"{path}/{i}", rtol)]
    if rtol and type(a) is float and type(b) is float and abs(a - b) <= rtol * max(abs(a), abs(b)):
        return []
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def _recorded_environment() -> bool:
    """The golden bytes were recorded with constraints.txt's JAX and NumPy: there they must
    match bit for bit; under other releases (constraints-py312.txt) XLA's and NumPy's
    transcendental functions may round the last bit differently (a geomean's expm1), so
    floats are compared to 1e-12 relative and everything else exactly."""
    pins = dict(line.split("==") for line in (Path(__file__).parents[3] / "constraints.txt")
                .read_text().splitlines() if "==" in line and not line.startswith("#"))
    return jax.__version__ == pins["jax"] and np.__version__ == pins["numpy"]


def _npz_diff(a: Path, b: Path, rtol=0.0) -> list[str]:
    with np.load(a, allow_pickle=False) as x, np.load(b, allow_pickle=False) as y:
        if x.files != y.files:
            return [f"members {x.files} -> {y.files}"]
        out = []
        for k in x.files:
            u, v = x[k], y[k]
            if u.dtype != v.dtype or u.shape != v.shape:
                out.append(f"{k}: {u.dtype}{u.shape} -> {v.dtype}{v.shape}")
            elif u.dtype.kind == "f" and rtol and np.allclose(u, v, rtol=rtol, atol=0, equal_nan=True):
                continue
            elif not np.array_equal(u, v, equal_nan=u.dtype.kind == "f"):
                is_float = u.dtype.kind == "f"
                differ = ~((u == v) | (np.isnan(u) & np.isnan(v))) if is_float else u != v
                gap = f", max |difference| {np.nanmax(np.abs(u - v)):.3g}" if is_float else ""
                out.append(f"{k}: {int(np.sum(differ))} of {u.size} values differ{gap}")
        return out


def _cpu_float64() -> None:
    if jax.default_backend() != "cpu" or kernel_precision() != "float64":
        pytest.skip("the golden bytes were recorded on the CPU backend in float64")


@pytest.mark.parametrize("name", RUNS)
def test_outputs_are_byte_identical_to_the_monolithic_scorer(golden, scored, name):
    _cpu_float64()
    seeds = sorted(p.name for p in (golden["expected"] / name).iterdir())
    assert seeds == sorted(p.name for p in (scored / name).glob("seed-*")) and seeds
    for seed in seeds:
        for f in OUTPUT_FILES:
            want, got = golden["expected"] / name / seed / f, scored / name / seed / f
            if want.read_bytes() == got.read_bytes():
                continue
            rtol = 0.0 if _recorded_environment() else 1e-12
            diff = (_npz_diff(want, got, rtol) if f.endswith(".npz")
                    else _json_diff(json.loads(want.read_text()), json.loads(got.read_text()), rtol=rtol))
            if rtol and not diff:
                continue
            pytest.fail(f"{name}/{seed}/{f} is not byte-identical to the golden output (a change "
                        f"of the outputs: bump the format and regenerate with "
                        f"PASSAGE_UPDATE_GOLDEN=1):\n  " + "\n  ".join(diff[:12] or ["(bytes only)"]))


def test_receipt_records_compilation_and_a_second_score_compiles_nothing(golden, tmp_path):
    run = shutil.copytree(golden["runs"] / "bfs64", tmp_path / "run")
    seed = run / "seed-1234"
    jax.clear_caches()  # the first score compiles (or fetches) whatever other tests compiled
    first = S.score_folder(seed, dataset_path="shipped")
    r1 = json.loads((seed / "score_receipt.json").read_text())
    metrics = (seed / "metrics.json").read_bytes()
    second = S.score_folder(seed, force=True, dataset_path="shipped")
    r2 = json.loads((seed / "score_receipt.json").read_text())
    for r in (r1, r2):
        assert r["format"] == S.RECEIPT_FORMAT == "passage-jax-score-receipt-v3"
        assert sorted(r["compilation"]) == sorted(COMPILATION_FIELDS)
        c = r["compilation"]
        assert c["compiled"] == c["compilations"] - c["cache_hits"] >= 0
        assert all(c[k] >= 0 for k in ("compile_s", "trace_s", "lower_s"))
    assert r1["compilation"]["compilations"] > 0
    assert r2["compilation"]["compilations"] == 0, r2["compilation"]
    assert r2["forced"] is True and r1["forced"] is False
    assert first == second and (seed / "metrics.json").read_bytes() == metrics
    assert "compilation" not in first and b"compil" not in metrics


def test_the_stages_compose_to_score_folder(golden, scored):
    """Read -> batch -> kernel -> collect by hand, two tasks per batch, gives the outputs
    ``score_folder`` wrote (whatever the chunk), through frozen dataclasses."""
    folder = SeedFolder(scored / "odd64" / "seed-1234")
    inputs = folder.read_inputs()
    assert isinstance(inputs, SeedInputs) and isinstance(inputs.refs, References)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inputs.quality_repeat = 0
    plan = BatchPlan.of(inputs, chunk=2)
    assert plan.share == range(inputs.n_tasks) and plan.chunk == 2
    collector, seen, pending = Collector(len(inputs.records), inputs.n_tasks), [], []
    stream = RouteStream(sharding="auto")

    def on_chunk(first, scenes):
        batch = make_batch(plan, inputs, first, scenes)
        assert isinstance(batch, Batch) and len(batch.candidates) == len(batch.records)
        pending.append(submit_batch(batch, stream))
        seen.append(batch.label)

    open_run_tasks(inputs.manifest, inputs.refs, inputs.where, "shipped", on_chunk, chunk=2)
    assert seen[0].startswith("tasks 0-1 (scenes ") and len(seen) == -(-inputs.n_tasks // 2)
    for p, scores in zip(pending, finish_batches(pending, stream)):
        assert isinstance(scores, BatchScores) and scores.tasks == p.tasks
        collector.add(scores)
    outputs = collect_outputs(inputs, collector.collected(inputs.where))
    assert isinstance(outputs, ScoreOutputs)
    written = json.loads((folder.path / "metrics.json").read_text())
    assert json.loads(json.dumps(outputs.metrics)) == written
    with np.load(folder.path / "per_sample.npz", allow_pickle=False) as z:
        assert list(outputs.rows) == z.files
        for k in z.files:
            assert np.array_equal(outputs.rows[k], z[k], equal_nan=z[k].dtype.kind == "f"), k


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            yield node, node.end_lineno - node.lineno + 1, len(names) + bool(a.vararg) + bool(a.kwarg)


def test_pipeline_modules_and_functions_are_small():
    assert len(PIPELINE) >= 9, PIPELINE
    long_modules = [f"{p.name}: {n} lines" for p in PIPELINE if (n := len(p.read_text().splitlines())) > 600]
    assert not long_modules, long_modules
    bad = [f"{p.name}:{node.lineno} {node.name}: {lines} lines, {params} parameters"
           for p in PIPELINE for node, lines, params in _functions(p) if lines > 60 or params > 8]
    assert not bad, "\n".join(bad)


def test_score_module_keeps_its_public_names():
    """The names scoring exposed before the split, importable from the score package."""
    import passage_jax.evaluate as E

    for name in ("score_run", "score_folder", "load_score", "seed_folders", "timing_profile",
                 "reload_tasks", "open_run_tasks", "RecordColumns", "check_record", "RECORD_FIELDS",
                 "is_scored", "check_seed_folder", "read_json", "read_doc", "load_npz", "ScoreError",
                 "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "RunIncomplete", "ForeignSeed",
                 "PER_SAMPLE_FIELDS", "PER_SAMPLE_SCALARS", "STRATIFIERS", "METRIC_CONTRACT",
                 "SCORE_FORMAT", "RECEIPT_FORMAT", "BLOCK_RULE", "OUTPUTS", "RECEIPT", "RUN_SUMMARY",
                 "RUN_STARTED", "RUN_INPUTS"):
        assert name in S.__all__ and hasattr(S, name), name
    # the stage helpers other code and tests reach, each on the stage module that owns it
    import importlib

    for stage, names in (("_scenes", ("dataset_root",)),
                         ("_folder", ("verify_run_files",)),
                         ("_records", ("references_from_npz",)),
                         ("_collect", ("quality_summary", "cluster_ids", "scoring_precision")),
                         ("_pipeline", ("RouteStream", "atomic_write_npz", "atomic_write_json"))):
        module = importlib.import_module(f"passage_jax.evaluate.score.{stage}")
        for name in names:
            assert hasattr(module, name), f"{stage}.{name}"
    for name in ("score_run", "score_folder", "load_score", "seed_folders", "PER_SAMPLE_FIELDS",
                 "ScoreError", "AlreadyScored", "DatasetNotFound", "ScoreOutdated"):
        assert getattr(E, name) is getattr(S, name)
