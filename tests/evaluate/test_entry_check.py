"""The reproducible-entry check (``check-entry``): what a complete and an incomplete entry
hold and lack."""
from __future__ import annotations

import json
import shutil

import pytest
from score_support import copy_cohort, spec_dict

from cli.__main__ import main as cli_main
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.entry_check import ITEMS, check_entries
from passage_jax.evaluate.score import score_run
from passage_jax.evaluate.sidecar import sidecar
from passage_jax.fileio import atomic_write_json
from passage_jax.run import loop as prov_mod
from passage_jax.run import parse_spec, run_spec

N = 8
SEEDS = (1234, 2026, 3407)
DIGEST = "sha256:" + "c" * 64
COMMIT = "e" * 40


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    """Two complete scored runs (bfs, greedy; three seeds, calibration decisions, container
    digest, sidecar, a clean evaluator commit) with their compare, and an incomplete run."""
    root = tmp_path_factory.mktemp("entries")
    cohort = copy_cohort(root / "cohort")
    cal = root / "decisions.json"
    cal.write_text(json.dumps({"decoder": "x", "frozen_on": "calibration"}))
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        # the run as it would be from a clean checkout of a published commit
        mp.setattr(prov_mod, "evaluator_commit", lambda root=None: {"commit": COMMIT, "dirty": False})
        for name in ("bfs", "greedy"):
            spec = parse_spec(spec_dict(name, cohort, SEEDS, n_samples=N, split_role="test",
                                        calibration_decisions=str(cal), container_digest=DIGEST))
            run_spec(spec, root / name, progress=False)
            scores = score_run(root / name)
            atomic_write_json(root / name / "sidecar.json", sidecar(root / name, spec, scores))
            out[name] = root / name
        # an incomplete entry: not from a git checkout, one seed, nothing declared
        mp.setattr(prov_mod, "evaluator_commit", lambda root=None: None)
        spec = parse_spec(spec_dict("bfs", cohort, (1234,), n_samples=N))
        run_spec(spec, root / "partial", progress=False)
        score_run(root / "partial")
    out["partial"] = root / "partial"
    compare_runs(out["bfs"], out["greedy"], root / "compare.json", n_bootstrap=200)
    out["compare"] = root / "compare.json"
    return out


def test_complete_entries_from_a_compare(entries):
    res = check_entries([entries["compare"]])
    assert [e["run"] for e in res["entries"]] == [str(entries["bfs"]), str(entries["greedy"])]
    for e in res["entries"]:
        assert e["missing"] == [] and e["reproducible"], e["items"]
        assert list(e["items"]) == list(ITEMS)
        assert COMMIT in e["items"]["evaluator_commit"]["detail"]
        assert e["items"]["container_digest"]["detail"] == DIGEST
        assert "seeds [1234, 2026, 3407]" in e["items"]["intervals"]["detail"]
    assert res["reproducible"]
    assert "separate from a reproducible entry" in res["statement"]


def test_incomplete_entry_lists_what_is_missing(entries):
    res = check_entries([entries["partial"]])
    (e,) = res["entries"]
    assert not res["reproducible"]
    assert e["missing"] == ["evaluator_commit", "container_digest", "calibration_decisions", "seeds",
                            "sidecar", "intervals"]
    assert "no evaluator commit recorded" in e["items"]["evaluator_commit"]["detail"]
    assert e["items"]["dataset"]["present"] and e["items"]["checkpoints"]["present"]
    assert "[1234]" in e["items"]["seeds"]["detail"]
    assert "sidecar.json: missing" in e["items"]["sidecar"]["detail"]
    # a run given alone has no intervals, even when complete otherwise
    alone = check_entries([entries["bfs"]])["entries"][0]
    assert alone["missing"] == ["intervals"]


def test_incomplete_sidecar_is_named(entries, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(entries["bfs"], run)
    side = json.loads((run / "sidecar.json").read_text())
    side["container_digest"] = None
    side.pop("hardware")
    (run / "sidecar.json").write_text(json.dumps(side))
    e = check_entries([run])["entries"][0]
    assert "sidecar" in e["missing"]
    assert "hardware" in e["items"]["sidecar"]["detail"]
    assert "container_digest" in e["items"]["sidecar"]["detail"]


def test_cli_check_entry_table_and_exit_status(entries, capsys):
    assert cli_main(["check-entry", str(entries["compare"])]) == 0
    out = capsys.readouterr().out
    assert out.count("present  ") == 2 * len(ITEMS)
    assert "separate from a reproducible entry" in out
    assert cli_main(["check-entry", str(entries["partial"]), str(entries["compare"])]) == 1
    cap = capsys.readouterr()
    assert "MISSING  sidecar" in cap.out and "present  dataset" in cap.out
    assert "not a reproducible entry: missing" in cap.err and "intervals" in cap.err
    assert cli_main(["check-entry", str(entries["partial"] / "nothing")]) == 2
    assert "no such run folder or compare file" in capsys.readouterr().err
