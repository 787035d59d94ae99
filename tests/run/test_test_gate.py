"""The test admission gate (``admit-test``): each condition refused by name, a complete
test spec on the shipped cohort admitted, and ``run``'s refusal and its override."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from cli.__main__ import main as cli_main
from passage_jax.data import load_tasks, shipped_cohort_root
from passage_jax.fileio import sha256_file
from passage_jax.run import load_spec
from passage_jax.run.gate import (
    CONDITIONS,
    TestAdmissionRefused,
    admit_test,
    default_receipt,
    require_admission,
)
from passage_jax.run.loop import canonical_json_sha256, evaluator_commit
from passage_jax.stats import Roster, roster_from_tiles, write_roster

N = 6
DECISIONS = {"decoder": "bounded_astar", "threshold": 0.5, "frozen_on": "calibration"}


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), "-c", "user.email=t@example.org", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def clean_repo(tmp_path_factory):
    """A git checkout with a committed passage_jax/ folder and a clean work tree."""
    root = tmp_path_factory.mktemp("evaluator")
    (root / "passage_jax").mkdir()
    (root / "passage_jax" / "x.py").write_text("X = 1\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "evaluator")
    return root


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A calibration-decisions file, a sealed roster of the first N test scenes and its hash."""
    d = tmp_path_factory.mktemp("parts")
    (d / "decisions.json").write_text(json.dumps(DECISIONS))
    tasks = load_tasks(shipped_cohort_root(), 64, "test", "energy", n_samples=N)
    r = roster_from_tiles([t.id for t in tasks], [t.scene.metadata.get("tile") for t in tasks],
                          "main_tile_5deg")
    sha = write_roster(d / "roster.json", r)
    v1 = Roster(format="passage-roster-v1", task_ids=r.task_ids, blocks=r.blocks)
    sha_v1 = write_roster(d / "roster_v1.json", v1)
    return {"dir": d, "cal": d / "decisions.json", "roster": d / "roster.json", "sha": sha,
            "roster_v1": d / "roster_v1.json", "sha_v1": sha_v1, "ids": [t.id for t in tasks]}


def _spec(tmp_path, parts, name="spec.yaml", **over) -> str:
    d = yaml.safe_load(open("configs/bfs.yaml"))
    d.update(n_samples=N, split_role="test", calibration_decisions=str(parts["cal"]),
             roster=str(parts["roster"]), roster_sha256=parts["sha"],
             results_root=str(tmp_path / "results"))
    for k, v in over.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    path = tmp_path / name
    path.write_text(yaml.safe_dump(d))
    return str(path)


def _admit(tmp_path, spec, clean_repo, out="out", **kw):
    kw.setdefault("evaluator_root", clean_repo)
    return admit_test(spec, tmp_path / out, **kw)


def _row(res, name):
    return next(r for r in res.receipt["conditions"] if r["condition"] == name)


def _only_unmet(res, name):
    assert not res.green
    assert res.unmet == [name], res.unmet
    return _row(res, name)["detail"]


def test_complete_test_spec_on_the_shipped_cohort_is_admitted(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts)
    res = _admit(tmp_path, spec, clean_repo)
    assert res.green and res.unmet == []
    assert [r["condition"] for r in res.receipt["conditions"]] == list(CONDITIONS)
    assert all(r["met"] for r in res.receipt["conditions"])
    # the receipt is on disk, beside the result folder, and is what was returned
    assert res.path == default_receipt(tmp_path / "out") == tmp_path / "out.admission.json"
    assert json.loads(res.path.read_text()) == res.receipt
    assert not (tmp_path / "out").exists()
    body = res.receipt
    assert body["spec"]["spec_sha256"] == load_spec(spec).sha256()
    assert body["result_folder"] == str(tmp_path / "out")
    cal = _row(res, "calibration_decisions")["record"]
    assert cal["canonical_sha256"] == canonical_json_sha256(DECISIONS)
    shards = _row(res, "dataset")["record"]["shards"]
    shipped = sorted((shipped_cohort_root() / "64x64" / "test").glob("*.parquet"))
    assert [s["sha256"] for s in shards] == [sha256_file(p) for p in shipped]
    roster = _row(res, "roster")["record"]
    assert roster["sha256"] == parts["sha"] and roster["sealed"] and roster["n_tasks"] == N
    head = subprocess.run(["git", "-C", str(clean_repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert _row(res, "evaluator")["record"]["checkout"] == {"commit": head, "dirty": False}
    assert "not a reproducible entry" in body["statement"]


def test_split_role_not_test_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts, split_role=None, calibration_decisions=None)
    res = _admit(tmp_path, spec, clean_repo)
    assert "split_role" in res.unmet and "undeclared" in _row(res, "split_role")["detail"]
    # a test role on another split: refused by name too
    spec = _spec(tmp_path, parts, name="v.yaml", split="validation")
    res = _admit(tmp_path, spec, clean_repo, out="out2")
    assert "split_role" in res.unmet and "'validation'" in _row(res, "split_role")["detail"]


def test_missing_calibration_decisions_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts, calibration_decisions=None)
    res = _admit(tmp_path, spec, clean_repo)
    assert "missing" in _only_unmet(res, "calibration_decisions")
    assert res.receipt["spec"]["spec_sha256"] is None  # no valid spec to admit


def test_calibration_decisions_changed_since_frozen_are_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts)
    frozen = canonical_json_sha256({**DECISIONS, "threshold": 0.25})
    res = _admit(tmp_path, spec, clean_repo, calibration_sha256=frozen)
    assert "changed since they were frozen" in _only_unmet(res, "calibration_decisions")
    ok = _admit(tmp_path, spec, clean_repo, out="out2",
                calibration_sha256=canonical_json_sha256(DECISIONS))
    assert ok.green


def test_unreadable_calibration_decisions_are_refused(tmp_path, parts, clean_repo):
    bad = tmp_path / "cal.json"
    bad.write_text("[]")
    res = _admit(tmp_path, _spec(tmp_path, parts, calibration_decisions=str(bad)), clean_repo)
    assert str(bad) in _only_unmet(res, "calibration_decisions")


def test_missing_roster_is_refused(tmp_path, parts, clean_repo):
    res = _admit(tmp_path, _spec(tmp_path, parts, roster=None, roster_sha256=None), clean_repo)
    assert "sealed roster" in _only_unmet(res, "roster")


def test_unsealed_roster_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts, roster=str(parts["roster_v1"]), roster_sha256=parts["sha_v1"])
    assert "unsealed" in _only_unmet(_admit(tmp_path, spec, clean_repo), "roster")


def test_roster_of_other_tasks_or_hash_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts, n_samples=N - 1)
    detail = _only_unmet(_admit(tmp_path, spec, clean_repo), "roster")
    assert f"{N} task ids are not the spec's {N - 1}" in detail
    spec = _spec(tmp_path, parts, name="h.yaml", roster_sha256="0" * 64)
    detail = _only_unmet(_admit(tmp_path, spec, clean_repo, out="out2"), "roster")
    assert "sha256" in detail and "0" * 64 in detail


def test_other_seeds_are_refused(tmp_path, parts, clean_repo):
    res = _admit(tmp_path, _spec(tmp_path, parts, seeds=[1234, 2026]), clean_repo)
    assert "[1234, 2026, 3407]" in _only_unmet(res, "seeds")


def _learned(tmp_path, parts, by_seed, name="learned.yaml"):
    d = yaml.safe_load(open("configs/learned_direct.yaml"))
    over = {k: d[k] for k in ("method_name", "family", "architecture", "inference", "inference_kwargs",
                              "component_control", "cost_model")}
    tasks = load_tasks(shipped_cohort_root(), 64, "test", d["cost_model"], n_samples=N)
    assert [t.id for t in tasks] == parts["ids"]
    return _spec(tmp_path, parts, name=name, inference_kwargs_by_seed=by_seed, **over)


def test_learned_method_needs_one_distinct_checkpoint_per_seed(tmp_path, parts, clean_repo):
    good = {s: {"checkpoint": f"shipped:{s}"} for s in (1234, 2026, 3407)}
    res = _admit(tmp_path, _learned(tmp_path, parts, good), clean_repo)
    assert res.green, res.unmet
    files = _row(res, "checkpoints")["files"]
    assert sorted(files) == ["1234", "2026", "3407"]
    # one checkpoint for every seed: inference seeds do not replace trained checkpoints
    same = {s: {"checkpoint": "shipped:1234"} for s in (1234, 2026, 3407)}
    res = _admit(tmp_path, _learned(tmp_path, parts, same, "same.yaml"), clean_repo, out="o2")
    assert "use the same checkpoint" in _only_unmet(res, "checkpoints")
    # a seed without a checkpoint
    res = _admit(tmp_path, _learned(tmp_path, parts, {1234: good[1234], 2026: good[2026]}, "m.yaml"),
                 clean_repo, out="o3")
    assert "['3407'] declare no checkpoint" in _only_unmet(res, "checkpoints")
    # a declared file that does not exist
    bad = {**good, 3407: {"checkpoint": str(tmp_path / "nope.msgpack")}}
    res = _admit(tmp_path, _learned(tmp_path, parts, bad, "b.yaml"), clean_repo, out="o4")
    assert "nope.msgpack" in _only_unmet(res, "checkpoints")


def test_unpinned_dataset_is_refused(tmp_path, parts, clean_repo):
    missing = tmp_path / "no-such-root"
    res = _admit(tmp_path, _spec(tmp_path, parts, dataset_path=str(missing)), clean_repo)
    assert "dataset" in res.unmet and str(missing) in _row(res, "dataset")["detail"]
    # the roster cannot be checked against scenes that cannot be read: named as well
    assert "roster" in res.unmet and "cannot be read" in _row(res, "roster")["detail"]


def test_result_folder_that_is_not_fresh_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run.json").write_text("{}")
    assert "already holds a run" in _only_unmet(_admit(tmp_path, spec, clean_repo), "result_folder")
    # inside the dataset root
    root = tmp_path / "cohort"
    shutil.copytree(shipped_cohort_root() / "64x64" / "test", root / "64x64" / "test")
    spec = _spec(tmp_path, parts, name="in.yaml", dataset_path=str(root))
    res = _admit(tmp_path, spec, clean_repo, out="cohort/out", receipt=tmp_path / "r.json")
    assert "inside the dataset root" in _only_unmet(res, "result_folder")


def test_evaluator_work_tree_not_clean_or_undeclared_is_refused(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts)
    dirty = tmp_path / "dirty"
    shutil.copytree(clean_repo, dirty)
    (dirty / "passage_jax" / "x.py").write_text("X = 2\n")
    res = _admit(tmp_path, spec, clean_repo, evaluator_root=dirty)
    assert "not clean" in _only_unmet(res, "evaluator")
    head = evaluator_commit(dirty)["commit"]
    # a declared commit stands in for the clean tree, but must be the checkout's HEAD
    assert _admit(tmp_path, spec, clean_repo, out="o2", evaluator_root=dirty,
                  evaluator_commit_declared=head).green
    res = _admit(tmp_path, spec, clean_repo, out="o3", evaluator_root=dirty,
                 evaluator_commit_declared="f" * 40)
    assert "is not the checkout's HEAD" in _only_unmet(res, "evaluator")
    # no checkout at all: refused unless a commit is declared
    plain = tmp_path / "plain"
    plain.mkdir()
    res = _admit(tmp_path, spec, clean_repo, out="o4", evaluator_root=plain)
    assert "no evaluator commit is declared" in _only_unmet(res, "evaluator")
    assert _admit(tmp_path, spec, clean_repo, out="o5", evaluator_root=plain,
                  evaluator_commit_declared="a" * 40).green


def test_every_unmet_condition_is_named_at_once(tmp_path, parts, clean_repo):
    spec = _spec(tmp_path, parts, calibration_decisions=None, roster=None, roster_sha256=None,
                 seeds=[1])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    res = _admit(tmp_path, spec, clean_repo, evaluator_root=tmp_path / "out")
    assert res.unmet == ["calibration_decisions", "roster", "seeds", "result_folder", "evaluator"]


def _declared():
    found = evaluator_commit()
    return found["commit"] if found else "a" * 40


def test_cli_admit_test_exit_status_and_lines(tmp_path, parts, capsys):
    spec = _spec(tmp_path, parts)
    code = cli_main(["admit-test", "--spec", spec, "--output", str(tmp_path / "out"),
                     "--evaluator-commit", _declared()])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "receipt: " + str(tmp_path / "out.admission.json") + " (green)" in out
    bad = _spec(tmp_path, parts, name="bad.yaml", seeds=[7], roster=None, roster_sha256=None)
    code = cli_main(["admit-test", "--spec", bad, "--output", str(tmp_path / "out2"),
                     "--evaluator-commit", _declared()])
    cap = capsys.readouterr()
    assert code == 1
    assert "unmet condition(s): roster, seeds" in cap.err
    assert "UNMET  roster" in cap.out and "UNMET  seeds" in cap.out


def test_run_refuses_a_test_spec_without_a_fitting_green_receipt(tmp_path, parts, clean_repo):
    spec_path = _spec(tmp_path, parts)
    spec = load_spec(spec_path)
    out = tmp_path / "out"
    with pytest.raises(TestAdmissionRefused, match=r"out\.admission\.json: not found.*--without-admission"):
        require_admission(spec, out)
    # a red receipt
    red = _admit(tmp_path, _spec(tmp_path, parts, name="red.yaml", seeds=[1]), clean_repo,
                 receipt=tmp_path / "red.json")
    with pytest.raises(TestAdmissionRefused, match=r"not green \(unmet: seeds\)"):
        require_admission(spec, out, receipt=red.path)
    green = _admit(tmp_path, spec_path, clean_repo)
    rec = require_admission(spec, out)
    assert rec["status"] == "admitted" and rec["receipt_sha256"] == sha256_file(green.path)
    # another spec (hash) or another folder does not fit
    other = load_spec(_spec(tmp_path, parts, name="o.yaml", latency_repeats=2))
    with pytest.raises(TestAdmissionRefused, match="not this spec's"):
        require_admission(other, out, receipt=green.path)
    with pytest.raises(TestAdmissionRefused, match="admits result folder"):
        require_admission(spec, tmp_path / "elsewhere", receipt=green.path)
    # decisions changed after admission
    parts["cal"].write_text(json.dumps({**DECISIONS, "threshold": 0.1}))
    try:
        with pytest.raises(TestAdmissionRefused, match="changed since admission"):
            require_admission(spec, out)
    finally:
        parts["cal"].write_text(json.dumps(DECISIONS))
    assert require_admission(spec, out)["status"] == "admitted"
    # the override
    rec = require_admission(spec, out, without=True)
    assert rec["status"] == "overridden" and rec["flag"] == "--without-admission"
    # a spec that is not a test spec is not gated
    dev = load_spec(_spec(tmp_path, parts, name="d.yaml", split_role=None, calibration_decisions=None))
    assert require_admission(dev, out) is None


def test_run_refuses_shards_changed_since_admission(tmp_path, parts, clean_repo):
    root = tmp_path / "cohort"
    shutil.copytree(shipped_cohort_root() / "64x64" / "test", root / "64x64" / "test")
    spec_path = _spec(tmp_path, parts, dataset_path=str(root))
    assert _admit(tmp_path, spec_path, clean_repo).green
    shard = next((root / "64x64" / "test").glob("*.parquet"))
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(TestAdmissionRefused, match=rf"shard\(s\) \['{shard.name}'\] changed"):
        require_admission(load_spec(spec_path), tmp_path / "out")


def test_cli_run_records_the_admission_and_the_override(tmp_path, parts, capsys):
    spec = _spec(tmp_path, parts, n_samples=2, roster=None, roster_sha256=None)
    code = cli_main(["run", "--spec", spec, "--output", str(tmp_path / "refused"), "--no-progress"])
    assert code == 2 and "admission.json: not found" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    code = cli_main(["run", "--spec", spec, "--output", str(tmp_path / "forced"), "--no-progress",
                     "--without-admission"])
    assert code == 0, capsys.readouterr().err
    m = json.loads((tmp_path / "forced" / "seed-2026" / "manifest.json").read_text())
    assert m["provenance"]["test_admission"]["status"] == "overridden"
    assert m["provenance"]["test_admission"]["flag"] == "--without-admission"


def test_cli_run_of_an_admitted_test_spec_records_its_receipt(tmp_path, parts, capsys):
    spec = _spec(tmp_path, parts)
    out = tmp_path / "admitted"
    assert cli_main(["admit-test", "--spec", spec, "--output", str(out),
                     "--evaluator-commit", _declared()]) == 0
    code = cli_main(["run", "--spec", spec, "--output", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    receipt = tmp_path / "admitted.admission.json"
    for seed in (1234, 2026, 3407):
        rec = json.loads((out / f"seed-{seed}" / "manifest.json").read_text())["provenance"]["test_admission"]
        assert rec["status"] == "admitted" and rec["receipt"] == str(receipt)
        assert rec["receipt_sha256"] == sha256_file(receipt)
        assert rec["spec_sha256"] == load_spec(spec).sha256()
    # the folder now holds the run: the gate refuses it as a result folder
    res = admit_test(spec, out, receipt=tmp_path / "again.json", evaluator_commit_declared=_declared())
    assert "result_folder" in res.unmet


def test_cli_missing_spec_file_is_bad_input(tmp_path, capsys):
    code = cli_main(["admit-test", "--spec", str(tmp_path / "none.yaml"), "--output",
                     str(tmp_path / "out")])
    assert code == 2
    assert f"spec {tmp_path / 'none.yaml'}: file not found" in capsys.readouterr().err
    assert not (tmp_path / "out.admission.json").exists()


def test_invalid_spec_is_named_and_the_rest_not_checked(tmp_path, parts, clean_repo):
    res = _admit(tmp_path, _spec(tmp_path, parts, cost_model="uphill"), clean_repo)
    assert "spec" in res.unmet and "cost_model" in _row(res, "spec")["detail"]
    assert _row(res, "roster")["detail"] == "not checked: the spec could not be read"
    assert _row(res, "result_folder")["met"] and _row(res, "evaluator")["met"]
    assert res.receipt["spec"]["spec_sha256"] is None
