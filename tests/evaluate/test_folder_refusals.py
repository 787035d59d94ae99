"""score, compare, report and trust on hostile run and score folders: a seed dropped,
missing or copied in from another run, a run still being written, a score that was killed,
outputs named as folders, malformed comparison files, truncated npz files whose recorded
hashes were updated to match, records with fields of the wrong type, and the ``shipped``
dataset alias. Each is refused by name (or, for a killed score, scored again) instead of
being scored, averaged or ending in a traceback."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest

from cli.__main__ import main as cli_main
from passage_jax.evaluate.compare import CompareError, OutputIsFolder, compare_runs
from passage_jax.evaluate.report import ReportError, write_report
from passage_jax.evaluate.score import (
    OUTPUTS,
    AlreadyScored,
    ForeignSeed,
    RunIncomplete,
    ScoreError,
    load_score,
    score_folder,
    score_run,
)
from passage_jax.evaluate.score import _pipeline as S
from passage_jax.evaluate.score._scenes import dataset_root
from passage_jax.fileio import sha256_file

SEEDS = [1, 2, 3]
B = 20  # bootstrap draws: enough to write a comparison file


def _spec(root, method="test", seeds=SEEDS, **over):
    return F.spec_dict(root, method_name=method, seeds=list(seeds), latency_warmup=0,
                       latency_repeats=1, quality_repeat_index=0, **over)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A finished three-seed run (``unscored`` and ``scored`` copies), a finished scored
    run of another method (``other``, seed 2) on the same tiny cohort, and a comparison
    file of the scored run with itself."""
    from passage_jax.run import parse_spec, run_spec

    base = tmp_path_factory.mktemp("hostile")
    F.write_cohort(base / "cohort")
    run_spec(parse_spec(_spec(base / "cohort")), base / "unscored", progress=False)
    shutil.copytree(base / "unscored", base / "scored")
    score_run(base / "scored")
    run_spec(parse_spec(_spec(base / "cohort", method="other", seeds=[2])), base / "other",
             progress=False)
    score_run(base / "other")
    compare_runs(base / "scored", base / "scored", base / "cmp.json", n_bootstrap=B)
    return {"base": base, "unscored": base / "unscored", "scored": base / "scored",
            "other": base / "other", "cmp": base / "cmp.json"}


def copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def cli(argv, capsys) -> tuple[int, str]:
    rc = cli_main([str(a) for a in argv])
    err = capsys.readouterr().err
    return rc, err


def outputs_of(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for n in OUTPUTS for p in run.glob(f"seed-*/{n}"))


def update_manifest_hash(seed: Path, name: str) -> None:
    """Record the current sha256 of ``name`` in the seed's manifest (hash-consistent edit)."""
    m = json.loads((seed / "manifest.json").read_text())
    m["files"][name] = sha256_file(seed / name)
    (seed / "manifest.json").write_text(json.dumps(m))


def truncate(path: Path, keep: float = 0.6) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


# --------------------------------------------------------------------------- #
# 1. seeds dropped, missing or mixed in
# --------------------------------------------------------------------------- #

def test_seed_manifest_missing_refused(runs, tmp_path, capsys):
    run = copy(runs["unscored"], tmp_path / "run")
    (run / "seed-2" / "manifest.json").unlink()
    rc, err = cli(["score", "--run", run], capsys)
    assert rc == 2
    assert f"{run / 'seed-2' / 'manifest.json'}: file not found" in err and "run --resume" in err
    assert outputs_of(run) == []  # no seed was scored, no two-seed mean printed
    with pytest.raises(RunIncomplete, match="seed-2"):
        score_run(run)


def test_seed_folder_missing_refused(runs, tmp_path, capsys):
    run = copy(runs["unscored"], tmp_path / "run")
    shutil.rmtree(run / "seed-2")
    rc, err = cli(["score", "--run", run], capsys)
    assert rc == 2 and f"{run / 'seed-2'}: not found" in err and "declares seed 2" in err
    assert outputs_of(run) == []
    # the same for compare on a scored run whose seed folder went missing
    scored = copy(runs["scored"], tmp_path / "scored")
    shutil.rmtree(scored / "seed-3")
    with pytest.raises(CompareError, match="seed-3: not found"):
        compare_runs(scored, runs["scored"], tmp_path / "c.json", n_bootstrap=B)
    assert not (tmp_path / "c.json").exists()


def test_foreign_seed_folder_refused(runs, tmp_path, capsys):
    run = copy(runs["unscored"], tmp_path / "run")
    shutil.rmtree(run / "seed-2")
    shutil.copytree(runs["other"] / "seed-2", run / "seed-2")
    for n in OUTPUTS:
        (run / "seed-2" / n).unlink()
    rc, err = cli(["score", "--run", run], capsys)
    where = run / "seed-2" / "manifest.json"
    assert rc == 2 and f"{where}: method_name \"other\" differs from the run's \"test\"" in err
    assert outputs_of(run) == []
    # given directly, the seed folder is still checked against its parent run
    with pytest.raises(ForeignSeed, match="method_name"):
        score_run(run / "seed-2")
    # scored and copied in: compare refuses it instead of averaging it in
    scored = copy(runs["scored"], tmp_path / "scored")
    shutil.rmtree(scored / "seed-2")
    shutil.copytree(runs["other"] / "seed-2", scored / "seed-2")
    with pytest.raises(CompareError, match="method_name"):
        compare_runs(scored, runs["scored"], tmp_path / "c.json", n_bootstrap=B)


def test_foreign_identity_and_undeclared_seed_refused(runs, tmp_path):
    run = copy(runs["unscored"], tmp_path / "run")
    m = json.loads((run / "seed-3" / "manifest.json").read_text())
    m["references"]["identity"] = "0" * 64  # a seed of a run with other references
    (run / "seed-3" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ForeignSeed, match=r"seed-3/manifest.json: references.identity .*run_started.json"):
        score_run(run)
    run = copy(runs["unscored"], tmp_path / "run2")
    m = json.loads((run / "seed-3" / "manifest.json").read_text())
    m["seed"] = 1
    (run / "seed-3" / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ForeignSeed, match="seed 1 is not the folder's seed 3"):
        score_run(run)
    run = copy(runs["unscored"], tmp_path / "run3")
    shutil.copytree(run / "seed-1", run / "seed-9")
    with pytest.raises(ForeignSeed, match=r"seed-9: not a seed of this run .*declares seeds \[1, 2, 3\]"):
        score_run(run)
    assert outputs_of(run) == []


# --------------------------------------------------------------------------- #
# 2. a run still being written
# --------------------------------------------------------------------------- #

def test_run_still_being_written_refused(runs, tmp_path, capsys):
    run = copy(runs["unscored"], tmp_path / "run")
    (run / "run.json").unlink()  # run.json is written last
    (run / "seed-3").rename(run / ".seed-3.partial")
    rc, err = cli(["score", "--run", run], capsys)
    assert rc == 2 and f"{run / 'run.json'}: file not found" in err
    assert "unfinished or still being written" in err and ".seed-3.partial" in err
    assert "run --resume" in err
    assert outputs_of(run) == []
    # once the run is finished, a plain score scores every seed (nothing was half-done)
    (run / ".seed-3.partial").rename(run / "seed-3")
    shutil.copy2(runs["unscored"] / "run.json", run / "run.json")
    assert sorted(score_run(run)) == ["seed-1", "seed-2", "seed-3"]
    # seed folders without any run record: not a finished run either
    bare = copy(runs["unscored"], tmp_path / "bare")
    (bare / "run.json").unlink()
    (bare / "run_started.json").unlink()
    with pytest.raises(RunIncomplete, match="run.json: file not found: .* did not finish"):
        score_run(bare)


# --------------------------------------------------------------------------- #
# 3. a killed score does not block its own re-run
# --------------------------------------------------------------------------- #

def test_killed_score_is_scored_again_without_force(runs, tmp_path, capsys):
    run = copy(runs["scored"], tmp_path / "run")
    seed = run / "seed-2"
    (seed / "score_receipt.json").unlink()  # kill -9 / full disk before the receipt
    (seed / "metrics.json").unlink()
    (seed / "per_sample.npz").write_bytes(b"stale")
    with pytest.raises(ScoreError, match="seed-2 is not scored"):
        load_score(seed)
    with pytest.raises(CompareError, match="seed-2 is not scored"):
        compare_runs(run, runs["scored"], tmp_path / "c.json", n_bootstrap=B)
    kept = (run / "seed-1" / "score_receipt.json").read_bytes()
    rc, err = cli(["score", "--run", run], capsys)
    assert rc == 0, err
    assert f"kept {run / 'seed-1'}" in err and f"scored {seed}" in err
    assert (run / "seed-1" / "score_receipt.json").read_bytes() == kept
    got, ref = load_score(seed), load_score(runs["scored"] / "seed-2")
    assert got.metrics["primary"] == ref.metrics["primary"]
    assert got.receipt["forced"] is False
    # now every seed holds a receipt: a plain score refuses, naming the receipt
    rc, err = cli(["score", "--run", run], capsys)
    assert rc == 2 and "already scored (score_receipt.json exists)" in err and "--force" in err


def test_receipt_written_last_and_removed_first(runs, tmp_path, monkeypatch):
    seed = copy(runs["scored"], tmp_path / "run") / "seed-1"
    events = []
    real_npz, real_json, real_unlink = S.atomic_write_npz, S.atomic_write_json, Path.unlink

    def npz(path, arrays):
        events.append(("write", Path(path).name, (seed / "score_receipt.json").exists()))
        return real_npz(path, arrays)

    def js(path, obj):
        events.append(("write", Path(path).name, (seed / "score_receipt.json").exists()))
        return real_json(path, obj)

    def unlink(self, missing_ok=False):
        if self.name in OUTPUTS:
            events.append(("unlink", self.name, None))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(S, "atomic_write_npz", npz)
    monkeypatch.setattr(S, "atomic_write_json", js)
    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(AlreadyScored):
        score_folder(seed)
    assert events == []
    score_folder(seed, force=True)
    assert events == [("unlink", "score_receipt.json", None),
                      ("write", "per_sample.npz", False), ("write", "metrics.json", False),
                      ("write", "score_receipt.json", False)]


# --------------------------------------------------------------------------- #
# 9. named errors instead of tracebacks
# --------------------------------------------------------------------------- #

def test_compare_trust_report_output_folder_refused(runs, tmp_path, capsys):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep").write_text("keep")
    for force in ([], ["--force"]):
        rc, err = cli(["compare", "--score", runs["scored"], "--score", runs["scored"], "--output",
                       folder, "--n-bootstrap", B, *force], capsys)
        assert rc == 2 and f"compare: {folder} is a folder" in err and "internal error" not in err
        rc, err = cli(["trust", "--score", runs["scored"], "--output", folder, *force], capsys)
        assert rc == 2 and f"trust: {folder} is a folder" in err
        rc, err = cli(["report", "--compare", runs["cmp"], "--output", folder, *force], capsys)
        assert rc == 2 and f"report: {folder} is a folder" in err
    assert [p.name for p in folder.iterdir()] == ["keep"]
    with pytest.raises(OutputIsFolder):
        compare_runs(runs["scored"], runs["scored"], folder, n_bootstrap=B, force=True)
    # --force still replaces an existing file
    out = tmp_path / "c.json"
    out.write_text("old")
    rc, err = cli(["compare", "--score", runs["scored"], "--score", runs["scored"], "--output", out,
                   "--n-bootstrap", B, "--force"], capsys)
    assert rc == 0, err
    assert json.loads(out.read_text())["format"] == "passage-jax-compare-v1"


def _edited_cmp(runs, tmp_path, name, edit) -> Path:
    doc = json.loads(runs["cmp"].read_text())
    doc = edit(doc)
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _drop(*keys):
    def edit(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
        return doc
    return edit


def _set(value, *keys):
    def edit(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
        return doc
    return edit


@pytest.mark.parametrize("name, edit, message", [
    ("not-json.json", lambda d: "{not json", "not JSON"),
    ("list.json", lambda d: [d], "not a JSON object (got list)"),
    ("no-pairs.json", _drop("pairs"), "field 'pairs' is missing"),
    ("pairs-int.json", _set(5, "pairs"), "field 'pairs' must be a list, got int"),
    ("pair-seed.json", _set("x", "pairs", 0, "seed_a"), "field 'pairs[0].seed_a' must be an integer"),
    ("no-split.json", _drop("identity", "data", "split"), "field 'identity.data.split' is missing"),
    ("no-folder.json", _set({}, "runs", "A", "folders"), "field 'runs.A.folders.1' is missing"),
    ("no-format.json", _drop("format"), "not a passage-jax-compare-v1 file"),
    ("contrast-int.json", _set(5, "contrasts", "regret_median"), "malformed comparison file near field"),
])
def test_report_malformed_compare_file_named(runs, tmp_path, capsys, name, edit, message):
    bad = _edited_cmp(runs, tmp_path, name, edit)
    out = tmp_path / "r" / "report.md"
    with pytest.raises(ReportError, match="^" + re.escape(str(bad))) as e:
        write_report(bad, out)
    assert message in str(e.value) and "\n" not in str(e.value)
    rc, err = cli(["report", "--compare", bad, "--output", out], capsys)
    assert rc == 2 and message in err and "internal error" not in err
    assert not out.exists()


def test_truncated_npz_with_updated_hashes_named(runs, tmp_path, capsys):
    # paths.npz truncated, the manifest's hash updated to match: the read fails by name
    run = copy(runs["unscored"], tmp_path / "run")
    seed = run / "seed-1"
    truncate(seed / "paths.npz")
    update_manifest_hash(seed, "paths.npz")
    with pytest.raises(ScoreError, match=r"seed-1/paths.npz: cannot be read, the file is truncated "
                                         r"or corrupt \(BadZipFile"):
        score_folder(seed)
    rc, err = cli(["score", "--run", seed], capsys)
    assert rc == 2 and f"{seed / 'paths.npz'}: cannot be read" in err
    # references.npz likewise
    seed = run / "seed-2"
    truncate(seed / "references.npz")
    update_manifest_hash(seed, "references.npz")
    with pytest.raises(ScoreError, match=r"seed-2/references.npz: cannot be read"):
        score_folder(seed)
    # per_sample.npz truncated, the receipt's hash updated: load_score / compare / trust name it
    scored = copy(runs["scored"], tmp_path / "scored")
    seed = scored / "seed-3"
    truncate(seed / "per_sample.npz")
    rec = json.loads((seed / "score_receipt.json").read_text())
    rec["outputs"]["per_sample.npz"] = sha256_file(seed / "per_sample.npz")
    (seed / "score_receipt.json").write_text(json.dumps(rec))
    with pytest.raises(ScoreError, match=r"seed-3/per_sample.npz: cannot be read"):
        load_score(seed)
    with pytest.raises(CompareError, match=r"seed-3/per_sample.npz: cannot be read"):
        compare_runs(scored, runs["scored"], tmp_path / "c.json", n_bootstrap=B)
    rc, err = cli(["trust", "--score", scored], capsys)
    assert rc == 2 and f"{seed / 'per_sample.npz'}: cannot be read" in err


def test_per_sample_member_torn_named(runs, tmp_path):
    """A per_sample.npz whose member is replaced by one of another length (hashes updated)."""
    seed = copy(runs["scored"], tmp_path / "scored") / "seed-1"
    with np.load(seed / "per_sample.npz", allow_pickle=False) as z:
        per = {k: z[k] for k in z.files}
    per["regret"] = per["regret"][:-1]
    np.savez_compressed(seed / "per_sample.npz", **per)
    rec = json.loads((seed / "score_receipt.json").read_text())
    rec["outputs"]["per_sample.npz"] = sha256_file(seed / "per_sample.npz")
    (seed / "score_receipt.json").write_text(json.dumps(rec))
    with pytest.raises(ScoreError, match=r"per_sample.npz: member 'regret' has shape"):
        load_score(seed)


def _records_edit(seed: Path, line: int, edit) -> None:
    lines = (seed / "requests.jsonl").read_text().splitlines()
    rec = json.loads(lines[line - 1])
    lines[line - 1] = edit(rec)
    (seed / "requests.jsonl").write_text("\n".join(lines) + "\n")
    update_manifest_hash(seed, "requests.jsonl")


@pytest.mark.parametrize("field, value, what", [
    ("latency_ms", "fast", "must be a number or null, got str"),
    ("repeat", "0", "must be an integer, got str"),
    ("task_index", 1.5, "must be an integer, got float"),
    ("record", True, "must be an integer, got bool"),
    ("status", 3, "must be one of"),
    ("series", "hot", "must be one of"),
    ("sample_id", None, "must be a string, got NoneType"),
    ("work", [1], "must be a mapping of counters"),
    ("stage_work", {"primary": {"expansions": "many"}}, "must be a mapping of stages"),
    ("route_stage", 7, "must be one of"),
    ("deadline_ms", [], "must be a number or null, got list"),
])
def test_record_field_of_wrong_type_named(runs, tmp_path, capsys, field, value, what):
    seed = copy(runs["unscored"] / "seed-1", tmp_path / "seed-1")
    _records_edit(seed, 2, lambda r: json.dumps({**r, field: value}))
    with pytest.raises(ScoreError) as e:
        score_folder(seed)
    msg = str(e.value)
    assert msg.startswith(f"{seed / 'requests.jsonl'} line 2: field {field!r} {what}"), msg
    rc, err = cli(["score", "--run", seed], capsys)
    assert rc == 2 and f"requests.jsonl line 2: field {field!r}" in err and "internal error" not in err
    assert not (seed / "per_sample.npz").exists()


def test_record_missing_field_or_not_object_named(runs, tmp_path):
    seed = copy(runs["unscored"] / "seed-1", tmp_path / "seed-1")
    _records_edit(seed, 3, lambda r: json.dumps({k: v for k, v in r.items() if k != "sample_id"}))
    with pytest.raises(ScoreError, match=r"requests.jsonl line 3: field 'sample_id' is missing"):
        score_folder(seed)
    _records_edit(seed, 1, lambda r: json.dumps([r]))
    with pytest.raises(ScoreError, match=r"requests.jsonl line 1: not a JSON object \(got list\)"):
        score_folder(seed)


def test_malformed_score_files_named(runs, tmp_path):
    """metrics.json and the receipt of a scored folder, edited with their hashes kept
    consistent: not an object, a field missing or of the wrong type."""
    seed = copy(runs["scored"], tmp_path / "scored") / "seed-1"

    def rewrite_metrics(doc):
        (seed / "metrics.json").write_text(json.dumps(doc))
        rec = json.loads((seed / "score_receipt.json").read_text())
        rec["outputs"]["metrics.json"] = sha256_file(seed / "metrics.json")
        (seed / "score_receipt.json").write_text(json.dumps(rec))

    good = json.loads((seed / "metrics.json").read_text())
    rewrite_metrics([good])
    with pytest.raises(ScoreError, match=r"metrics.json: not a JSON object \(got list\)"):
        load_score(seed)
    rewrite_metrics({k: v for k, v in good.items() if k != "n_path_valid"})
    with pytest.raises(ScoreError, match=r"metrics.json: field 'n_path_valid' is missing"):
        load_score(seed)
    rewrite_metrics({**good, "primary": {**good["primary"], "success_rate": "high"}})
    with pytest.raises(ScoreError, match=r"metrics.json: field 'primary' must be"):
        load_score(seed)
    rewrite_metrics({**good, "components": {**good["components"], "work": []}})
    with pytest.raises(ScoreError, match=r"metrics.json: field 'components' must be"):
        load_score(seed)
    (seed / "score_receipt.json").write_text(json.dumps({"outputs": [], "inputs": {}}))
    with pytest.raises(ScoreError, match=r"score_receipt.json: field 'outputs' must be"):
        load_score(seed)


# --------------------------------------------------------------------------- #
# the shipped dataset alias
# --------------------------------------------------------------------------- #

def test_dataset_path_shipped_alias(tmp_path, capsys):
    from passage_jax.data import shipped_cohort_root
    from passage_jax.run import parse_spec, run_spec

    assert dataset_root({"data": {}}, "shipped") == shipped_cohort_root()
    moved = {"data": {"dataset_root": str(tmp_path / "gone"), "dataset_path": "shipped"}}
    assert dataset_root(moved) == shipped_cohort_root()
    spec = {"method_name": "bfs", "inference": "passage_jax.planners.bfs:make_planner",
            "resolution": 64, "cost_model": "energy", "split": "test", "task_variant": "obstacles",
            "n_samples": 2, "seeds": [1], "dataset_path": "shipped", "latency_warmup": 0,
            "latency_repeats": 1, "quality_repeat_index": 0,
            "results_root": str(tmp_path / "results")}
    run_spec(parse_spec(spec), tmp_path / "run", progress=False)
    rc, err = cli(["score", "--run", tmp_path / "run", "--dataset-path", "shipped"], capsys)
    assert rc == 0, err
    rec = load_score(tmp_path / "run" / "seed-1").receipt
    assert Path(rec["dataset_root"]) == shipped_cohort_root().resolve()
