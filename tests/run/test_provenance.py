"""Split roles, calibration records, determinism claims and rosters bound to runs."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import yaml
from score_support import copy_cohort, spec_dict

from passage_jax.data import load_tasks
from passage_jax.evaluate.compare import RosterMismatch, compare_runs
from passage_jax.evaluate.score import score_run
from passage_jax.evaluate.sidecar import sidecar
from passage_jax.run import parse_spec, run_spec
from passage_jax.run.loop import RunError
from passage_jax.run.specification.parse import SpecError
from passage_jax.stats import (
    Roster,
    RosterError,
    check_derived,
    derive_roster,
    read_roster,
    roster_from_tiles,
    write_roster,
)

N = 4
DECISIONS = {"decoder": {"threshold": 0.25, "repair": "bounded_astar"}, "frozen_on": "calibration"}


def _canonical(obj) -> str:  # independent: the definition, written out
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return copy_cohort(tmp_path_factory.mktemp("prov") / "cohort")


def test_spec_roles_and_claims(cohort):
    base = spec_dict("bfs", cohort, n_samples=N)
    with pytest.raises(SpecError, match="calibration_decisions"):
        parse_spec({**base, "split_role": "test"})
    with pytest.raises(SpecError, match="cannot use the 'test' split"):
        parse_spec({**base, "split_role": "calibration"})
    with pytest.raises(SpecError, match="cannot use the 'test' split"):
        parse_spec({**base, "split_role": "development"})
    with pytest.raises(SpecError, match="split_role"):
        parse_spec({**base, "split_role": "tuning"})
    with pytest.raises(SpecError, match="determinism"):
        parse_spec({**base, "determinism": "mostly"})
    with pytest.raises(SpecError, match="container_digest"):
        parse_spec({**base, "container_digest": "latest"})
    with pytest.raises(SpecError, match="roster_sha256"):
        parse_spec({**base, "roster": "r.json"})
    s = parse_spec(base)
    assert s.split_role is None and s.determinism == "non_deterministic"


def test_test_role_run_records_calibration_hash(cohort, tmp_path):
    cal_json = tmp_path / "decisions.json"
    cal_json.write_text(json.dumps(DECISIONS, indent=4))
    cal_yaml = tmp_path / "decisions.yaml"
    cal_yaml.write_text(yaml.safe_dump({"frozen_on": "calibration", **DECISIONS}))
    spec = parse_spec(spec_dict("bfs", cohort, n_samples=N, split_role="test",
                                calibration_decisions=str(cal_json), determinism="deterministic",
                                container_digest="sha256:" + "b" * 64))
    run_spec(spec, tmp_path / "run", progress=False)
    scores = score_run(tmp_path / "run")
    m = json.loads((tmp_path / "run" / "seed-1234" / "manifest.json").read_text())
    prov = m["provenance"]
    assert prov["split_role"] == "test"
    assert prov["calibration_decisions"]["canonical_sha256"] == _canonical(DECISIONS)
    side = sidecar(tmp_path / "run", spec, scores)
    assert side["calibration_decisions_sha256"] == _canonical(DECISIONS)
    assert side["determinism"] == "deterministic"
    assert side["container_digest"] == "sha256:" + "b" * 64
    assert side["evaluator_commit"] is None or len(side["evaluator_commit"]["commit"]) == 40
    # the same decisions written as YAML hash the same; different decisions do not
    from passage_jax.run.loop import canonical_json_sha256
    assert canonical_json_sha256(yaml.safe_load(cal_yaml.read_text())) == _canonical(DECISIONS)
    assert canonical_json_sha256({**DECISIONS, "frozen_on": "test"}) != _canonical(DECISIONS)


def _roster(cohort, path, n=N, fmt="v2"):
    tasks = load_tasks(cohort, 64, "test", "energy", n_samples=n)
    r = roster_from_tiles([t.id for t in tasks], [t.scene.metadata.get("tile") for t in tasks],
                          "main_tile_5deg")
    if fmt == "v1":
        r = Roster(format="passage-roster-v1", task_ids=r.task_ids, blocks=r.blocks)
    return r, write_roster(path, r)


def test_rosters_bound_to_runs(cohort, tmp_path):
    roster, sha = _roster(cohort, tmp_path / "roster.json")
    runs = {}
    for name, method, bound in (("a", "bfs", True), ("b", "greedy", True), ("c", "greedy", False)):
        extra = {"roster": str(tmp_path / "roster.json"), "roster_sha256": sha} if bound else {}
        run_spec(parse_spec(spec_dict(method, cohort, n_samples=N, **extra)), tmp_path / name,
                 progress=False)
        score_run(tmp_path / name)
        runs[name] = tmp_path / name
    m = json.loads((runs["a"] / "seed-1234" / "manifest.json").read_text())
    assert m["provenance"]["roster"]["sha256"] == sha and m["provenance"]["roster"]["sealed"]
    # compare uses the recorded roster by default
    res = compare_runs(runs["a"], runs["b"], tmp_path / "ab.json", n_bootstrap=50)
    assert res["blocks"]["source"] == "roster" and res["blocks"]["sha256"] == sha
    assert res["blocks"]["roster_origin"] == "recorded" and res["blocks"]["sealed"]
    # runs admitted with different rosters (one without) are refused
    with pytest.raises(RosterMismatch, match="different rosters"):
        compare_runs(runs["a"], runs["c"], tmp_path / "ac.json", n_bootstrap=50)
    # a given roster must be the recorded one
    other, other_sha = _roster(cohort, tmp_path / "other.json", fmt="v1")
    with pytest.raises(RosterMismatch, match="not the roster the runs were admitted with"):
        compare_runs(runs["a"], runs["b"], tmp_path / "ab2.json", n_bootstrap=50,
                     roster=str(tmp_path / "other.json"), roster_sha256=other_sha)
    # a v1 roster is labelled unsealed
    res = compare_runs(runs["c"], runs["c"], tmp_path / "cc.json", n_bootstrap=50,
                       roster=str(tmp_path / "other.json"), roster_sha256=other_sha)
    assert res["blocks"]["sealed"] is False and "unsealed" in res["blocks"]["label"]
    # a run whose tasks are not the roster's is refused before any request
    short, short_sha = _roster(cohort, tmp_path / "short.json", n=N - 1)
    with pytest.raises(RunError, match="ordered scene ids"):
        run_spec(parse_spec(spec_dict("bfs", cohort, n_samples=N, roster=str(tmp_path / "short.json"),
                                      roster_sha256=short_sha)), tmp_path / "d", progress=False)
    assert not (tmp_path / "d" / "seed-1234").exists()


def test_derived_roster_keeps_parent_blocks(cohort, tmp_path):
    parent, _ = _roster(cohort, tmp_path / "parent.json", n=8)
    keep = parent.task_ids[5:1:-1]
    child = derive_roster(parent, keep)
    assert child.parent == {"sha256": parent.sha256}
    assert child.blocks == [parent.block_map()[t] for t in keep]
    write_roster(tmp_path / "child.json", child)
    back = read_roster(tmp_path / "child.json", parent=parent)
    assert back.parent == {"sha256": parent.sha256} and back.task_ids == list(keep)
    # altering a block breaks the derivation
    doc = json.loads((tmp_path / "child.json").read_text())
    doc["tasks"][0]["block"] = "5deg:+00:+000"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(RosterError, match="keeps its parent's blocks"):
        read_roster(tmp_path / "bad.json", parent=parent)
    with pytest.raises(RosterError, match="not in the parent roster"):
        derive_roster(parent, ["no-such-task"])
    with pytest.raises(RosterError, match="records no parent"):
        check_derived(parent, parent)


@pytest.mark.needs_float64("the first run must use the float64 reference path")
def test_reference_precision_recorded_and_pairing_refused(cohort, tmp_path, monkeypatch):
    from passage_jax.evaluate.compare import PrecisionMismatch

    run_spec(parse_spec(spec_dict("bfs", cohort, n_samples=N)), tmp_path / "f64", progress=False)
    score_run(tmp_path / "f64")
    monkeypatch.setenv("PASSAGE_JAX_REFERENCE_PRECISION", "double_float")
    run_spec(parse_spec(spec_dict("greedy", cohort, n_samples=N)), tmp_path / "df", progress=False)
    monkeypatch.delenv("PASSAGE_JAX_REFERENCE_PRECISION")
    score_run(tmp_path / "df")
    m64, mdf = (json.loads((tmp_path / r / "seed-1234" / "manifest.json").read_text())
                for r in ("f64", "df"))
    assert (m64["references"]["precision"], mdf["references"]["precision"]) == ("float64",
                                                                                "double_float")
    assert mdf["references"]["precision_rtol"] > m64["references"]["precision_rtol"]
    with np.load(tmp_path / "df" / "seed-1234" / "references.npz") as z:
        assert str(z["precision"]) == "double_float"
        c_df = z["c_star"]
    with np.load(tmp_path / "f64" / "seed-1234" / "references.npz") as z:
        c_64 = z["c_star"]
    # the two paths agree within the double-float tolerance (independent: the arrays)
    assert np.allclose(c_df, c_64, rtol=1e-10, atol=0)
    metrics = json.loads((tmp_path / "df" / "seed-1234" / "metrics.json").read_text())
    assert metrics["precision"]["references"]["path"] == "double_float"
    with pytest.raises(PrecisionMismatch, match="double_float"):
        compare_runs(tmp_path / "f64", tmp_path / "df", tmp_path / "c.json", n_bootstrap=50)
    res = compare_runs(tmp_path / "f64", tmp_path / "df", tmp_path / "c2.json", n_bootstrap=50,
                       allow_precision_mix=True)
    assert res["reference_precision"]["mixed"] and res["reference_precision"]["B"]["path"] == \
        "double_float"
