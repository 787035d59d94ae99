"""``references_from``: a run takes an earlier run's qualified references over the same
tasks (no value iteration at admission), and refuses, naming the field, whatever
differs."""
from __future__ import annotations

import json
import shutil

import fixtures_runner as F
import numpy as np
import pytest

from passage_jax.run import AdmissionError, parse_spec, run_spec
from passage_jax.run.admission import checks as adm
from passage_jax.run.admission import checks as rr


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A small cohort and a finished BFS run over it (its references qualified)."""
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    out = tmp_path_factory.mktemp("runs") / "bfs"
    run_spec(parse_spec(F.spec_dict(root, latency_repeats=1, quality_repeat_index=0)), out,
             progress=False)
    return root, out


def _spec(root, earlier_run, **over):
    return parse_spec(F.spec_dict(root, method_name="straight",
                                  inference="fixtures_runner:straight_plan", latency_repeats=1,
                                  quality_repeat_index=0, references_from=str(earlier_run), **over))


def test_a_run_takes_the_earlier_references_without_qualifying(earlier, tmp_path, monkeypatch):
    """Only the random sample is qualified again (here one task of three)."""
    root, bfs = earlier
    qualified, real = [], adm.qualify_scenes

    def counted(scenes, *a, **k):
        qualified.extend(s.id for s in scenes)
        return real(scenes, *a, **k)

    monkeypatch.setattr(adm, "qualify_scenes", counted)
    monkeypatch.setattr(rr, "SAMPLE_MIN", 1)
    out = tmp_path / "straight"
    run_spec(_spec(root, bfs), out, progress=False)
    mine, theirs = out / "seed-1234", bfs / "seed-1234"
    a, b = np.load(mine / "references.npz"), np.load(theirs / "references.npz")
    for k in ("sample_id", "c_star", "qualified", "route_coords", "route_offsets", "released_cost",
              "solver", "input_sha256", "identity", "scene_strata", "scene_strata_fields"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    m = json.loads((mine / "manifest.json").read_text())
    t = json.loads((theirs / "manifest.json").read_text())
    assert m["references"]["identity"] == t["references"]["identity"]
    used = m["references"]["reused_from"]
    assert used["folder"] == str(theirs.resolve())
    assert used["references_sha256"] == t["files"]["references.npz"]
    assert t["references"]["reused_from"] is None
    assert qualified == used["recomputed"]["sample_id"] and len(qualified) == 1


def test_the_seed_folder_may_be_named(earlier, tmp_path, monkeypatch):
    root, bfs = earlier
    refs = adm.admit(_spec(root, bfs / "seed-1234")).references
    assert refs.reused_from["folder"] == str((bfs / "seed-1234").resolve())


@pytest.mark.parametrize("over, match", [
    ({"cost_model": "energy"}, r"data\.cost_model is 'elevation', this run's cost_model is 'energy'"),
    ({"reference_max_expansions": 500}, r"references\.reference_max_expansions is None"),
    ({"n_samples": 2}, r"this run has 2 tasks, the earlier run 3"),
])
def test_other_settings_or_tasks_are_refused(earlier, over, match):
    root, bfs = earlier
    with pytest.raises(AdmissionError, match=match):
        adm.admit(_spec(root, bfs, **over))


def test_a_changed_references_file_is_refused(earlier, tmp_path):
    root, bfs = earlier
    copy = tmp_path / "copy"
    shutil.copytree(bfs, copy)
    z = dict(np.load(copy / "seed-1234" / "references.npz"))
    z["c_star"] = z["c_star"] * 0.5
    np.savez(copy / "seed-1234" / "references.npz", **z)
    with pytest.raises(AdmissionError, match="references_from: .*references.npz: sha256 .* differs from "
                                             "the manifest's"):
        adm.admit(_spec(root, copy))


def test_other_scenes_are_refused(earlier, tmp_path):
    root, bfs = earlier
    other = tmp_path / "other"
    F.write_cohort(other, kinds=list(reversed(F.KINDS)))
    with pytest.raises(AdmissionError, match=r"task 0 \(scene .*\): (scene id|input hash)"):
        adm.admit(_spec(other, bfs))


def test_a_folder_that_is_no_run_is_refused(earlier, tmp_path):
    root, _ = earlier
    with pytest.raises(AdmissionError, match="neither a finished run folder"):
        adm.admit(_spec(root, tmp_path))
