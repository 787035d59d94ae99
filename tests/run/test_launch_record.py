"""resolved_protocol.json on every launch, run --dry-run, and canonical vs noncanonical
inference protocols in compare and report."""
from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import fixtures_runner as fx
import pytest

from passage_jax.evaluate.compare import NoncanonicalPairing, compare_runs
from passage_jax.evaluate.report import render_markdown
from passage_jax.evaluate.score import score_run
from passage_jax.run import load_spec, run_spec
from passage_jax.run.loop import CANONICAL_TILED, NONCANONICAL_MARKER, WHOLE_SCENE, inference_protocol

PKG = Path(__file__).resolve().parents[2] / "passage_jax"


def make_counting(sentinel=None, **kw):
    """Factory: plans with BFS and appends one line to ``sentinel`` per request."""
    from passage_jax.planners.bfs import BFSPlanner

    inner = BFSPlanner()

    def plan(request):
        if sentinel:
            with open(sentinel, "a") as fh:
                fh.write(request.sample_id + "\n")
        return inner.plan(request)

    return plan


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _code_sha() -> str:
    """The source-tree hash, recomputed here: relative path, NUL, bytes, NUL per *.py."""
    h = hashlib.sha256()
    for p in sorted(PKG.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(p.relative_to(PKG).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    fx.write_cohort(root)
    return root


def _spec_file(folder: Path, cohort: Path, name: str, **kwargs) -> Path:
    d = fx.spec_dict(cohort, method_name=name, inference="tests.run.test_launch_record:make_counting",
                     inference_kwargs=kwargs, latency_warmup=0, latency_repeats=1,
                     quality_repeat_index=0)
    p = folder / f"{name}.json"
    p.write_text(json.dumps(d))
    return p


def _check_record(rec: dict, spec_path: Path, kind: str, index: int) -> None:
    spec = load_spec(spec_path)
    assert rec["launch"]["kind"] == kind and rec["launch"]["index"] == index
    assert rec["spec"] == json.loads(json.dumps(spec.to_dict()))
    assert rec["spec_sha256"] == spec.sha256()
    assert rec["spec_file"]["path"] == str(spec_path.resolve())
    assert rec["spec_file"]["sha256"] == _sha(spec_path)
    assert rec["code"]["sha256"] == _code_sha()
    for files in rec["checkpoints"].values():
        for f in files.values():
            assert f["sha256"] == _sha(f["path"])
    assert rec["versions"]["python"] == platform.python_version()
    assert {"jax", "jaxlib", "flax", "numpy"} <= set(rec["versions"])
    assert rec["devices"] and isinstance(rec["launch"]["argv"], list)
    assert "--spec" in rec["launch"]["command"]


def test_protocol_resolution_known_answers():
    assert inference_protocol({}) == {"name": WHOLE_SCENE, "settings": {"tiling": None},
                                      "canonical": True, "deviations": []}
    canon = inference_protocol({"tile": 64, "checkpoint": "x"})
    assert canon["name"] == CANONICAL_TILED and canon["canonical"]
    assert canon["settings"] == {"tile": 64, "stride": 32, "hflip": True, "blend": "hann",
                                 "stitch": "fields"}
    assert inference_protocol({"tiling": {"tile": 64, "stride": 32}})["canonical"]
    for bad in ({"stride": 16}, {"hflip": False}, {"blend": "uniform"}, {"stitch": "hard"}):
        p = inference_protocol({"tile": 64, **bad})
        assert not p["canonical"] and len(p["deviations"]) == 1, p
    assert not inference_protocol({"hflip": False})["canonical"]
    odd = inference_protocol({"tile": 9})
    assert not odd["canonical"] and odd["name"] == CANONICAL_TILED + "_noncanonical"


def test_run_and_dry_run_records_and_noncanonical_marker(cohort, tmp_path, capsys):
    from cli.run import main as cli_run

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"not really weights")
    sentinel = tmp_path / "calls.txt"
    spec_path = _spec_file(tmp_path, cohort, "tiled", sentinel=str(sentinel),
                           params_file=str(weights), tile=8, hflip=False)
    out = tmp_path / "run"
    from cli.__main__ import build_parser

    args = build_parser("run").parse_args(["run", "--spec", str(spec_path), "--output", str(out),
                                           "--dry-run", "--no-progress"])
    assert cli_run(args) == 0
    err = capsys.readouterr().err
    assert NONCANONICAL_MARKER in err and "hflip=False" in err
    # a dry run: the record, no request executed, no seed folder
    assert not sentinel.exists()
    assert sorted(p.name for p in out.iterdir()) == ["resolved_protocol.0.json", "resolved_protocol.json"]
    rec = json.loads((out / "resolved_protocol.json").read_text())
    assert rec == json.loads((out / "resolved_protocol.0.json").read_text())
    _check_record(rec, spec_path, "dry_run", 0)
    assert rec["checkpoints"]["1234"]["params_file"]["path"] == str(weights.resolve())
    assert rec["inference_protocol"]["canonical"] is False
    # the run itself, into the same folder (the dry run's records do not take it)
    args.dry_run = False
    assert cli_run(args) == 0
    assert NONCANONICAL_MARKER in capsys.readouterr().err
    assert len(sentinel.read_text().split()) == 2 * 3  # a cold and a warm pass over 3 tasks
    rec1 = json.loads((out / "resolved_protocol.json").read_text())
    _check_record(rec1, spec_path, "run", 1)
    assert json.loads((out / "resolved_protocol.0.json").read_text()) == rec  # kept
    manifest = json.loads((out / "seed-1234" / "manifest.json").read_text())
    assert manifest["inference_protocol"]["canonical"] is False
    assert manifest["inference_protocol"]["settings"]["hflip"] is False


def test_compare_refuses_canonical_vs_noncanonical(cohort, tmp_path):
    runs = {}
    for name, kw in (("whole", {}), ("tiled", {"tile": 8, "stride": 2}), ("canon", {"tile": 8})):
        spec_path = _spec_file(tmp_path, cohort, name, **kw)
        runs[name] = tmp_path / f"run-{name}"
        run_spec(load_spec(spec_path), runs[name], progress=False)
        _check_record(json.loads((runs[name] / "resolved_protocol.json").read_text()),
                      spec_path, "run", 0)
        score_run(runs[name])
    with pytest.raises(NoncanonicalPairing, match="noncanonical"):
        compare_runs(runs["whole"], runs["tiled"], tmp_path / "c.json", n_bootstrap=20)
    assert not (tmp_path / "c.json").exists()
    res = compare_runs(runs["whole"], runs["tiled"], tmp_path / "c.json", n_bootstrap=20,
                       allow_noncanonical=True)
    assert res["runs"]["A"]["canonical"] is True and res["runs"]["B"]["canonical"] is False
    md = render_markdown(res, {})
    assert "A **canonical** (`whole-scene (no tiling)`)" in md
    assert "B **noncanonical** (`passage_jax_tiled_v1_noncanonical`)" in md
    # two canonical protocols pair without the flag
    res = compare_runs(runs["whole"], runs["canon"], tmp_path / "c2.json", n_bootstrap=20)
    assert res["runs"]["B"]["inference_protocol"]["name"] == CANONICAL_TILED
    # a run recorded before protocols were recorded counts as canonical whole-scene
    m = runs["tiled"] / "seed-1234" / "manifest.json"
    d = json.loads(m.read_text())
    del d["inference_protocol"]
    m.write_text(json.dumps(d))
    score_run(runs["tiled"], force=True)
    res = compare_runs(runs["whole"], runs["tiled"], tmp_path / "c3.json", n_bootstrap=20)
    assert res["runs"]["B"]["inference_protocol"] == {**res["runs"]["A"]["inference_protocol"],
                                                      "recorded": False}
