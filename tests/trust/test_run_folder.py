"""One verification of a run folder for every reader of one (``score``, ``trust``,
``check-entry``, a run's ``references_from``): forged references whose hashes and identities
were all rewritten, an unlisted file in a run or seed folder, a symbolic link out of the
folder and a changed journal are refused in one line naming the file; honest runs (reused
references, supervised, resumed, with the files a run and a score leave) are accepted."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import fixtures_runner as F
import pytest

from cli.__main__ import main
from passage_jax.evaluate.entry_check import EntryError, check_entries
from passage_jax.evaluate.score import ScoreError, score_run
from passage_jax.protocol.runfolder import SEED_FOLDER_FILES, verify_run_folder
from passage_jax.run import AdmissionError, parse_spec, run_spec
from passage_jax.run.admission import checks as adm
from passage_jax.run.admission import checks as rr

SEEDS = [1234, 2026]
FAST = {"latency_warmup": 0, "latency_repeats": 1, "quality_repeat_index": 0}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A six-task cohort and a finished, scored two-seed BFS run over it."""
    root = tmp_path_factory.mktemp("trust_cohort")
    F.write_cohort(root, kinds=F.KINDS * 2)
    out = tmp_path_factory.mktemp("trust_runs") / "bfs"
    run_spec(parse_spec(F.spec_dict(root, seeds=SEEDS, **FAST)), out, progress=False)
    score_run(out)
    return root, out


def _reuse(root, folder, **over):
    return parse_spec(F.spec_dict(root, method_name="straight", inference="fixtures_runner:straight_plan",
                                  references_from=str(folder), **{**FAST, **over}))


def _one_line(err: str, *words) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    for w in words:
        assert str(w) in lines[0], (w, lines[0])
    return lines[0]


# --------------------------------------------------------------------------- #
# forged references
# --------------------------------------------------------------------------- #

FORGERY = F.bench_forgery()
forge = FORGERY.forged_references
scale_c_star = FORGERY.scale_c_star
reverse_routes = FORGERY.reverse_routes


@pytest.mark.parametrize("edit, match", [
    (scale_c_star(0.5), r"c\* .* differs from the recomputed .* > 1e-09"),
    (scale_c_star(1 + 1e-7), r"c\* .* differs from the recomputed .*relative 1e-07 > 1e-09"),
    (reverse_routes, r"the reference route \(\d+ cells\) differs from the recomputed one"),
], ids=["c_star_half", "c_star_1e-7", "route_reversed"])
def test_a_forgery_every_hash_agrees_with_is_refused_by_recomputing(earlier, tmp_path, edit, match):
    root, bfs = earlier
    forged = forge(bfs, tmp_path / "forged", edit)
    # every hash and identity agrees: the folder itself verifies ...
    assert len(verify_run_folder(forged)) == len(SEEDS)
    # ... and the sample qualified again (every task is forged, so any sample) refuses it
    with pytest.raises(AdmissionError, match=rf"^references_from: {forged}/seed-1234/references.npz: "
                                             rf"task \d+ \(scene \d+\): {match}") as e:
        adm.admit(_reuse(root, forged))
    assert "\n" not in str(e.value) and "exact reference solver" in str(e.value)


def test_a_forgery_that_left_run_started_is_refused_by_the_identity_chain(earlier, tmp_path, monkeypatch):
    root, bfs = earlier
    forged = forge(bfs, tmp_path / "forged", scale_c_star(0.5), started=False)

    def never(*a, **k):
        raise AssertionError("a folder that fails its verification was qualified")

    monkeypatch.setattr(adm, "qualify_scenes", never)
    for named in (forged, forged / "seed-2026"):
        with pytest.raises(AdmissionError, match=r"^references_from: .*seed-1234/manifest.json: "
                                                 r"references.identity .* differs from the run "
                                                 r"identity's .*run_started.json"):
            adm.admit(_reuse(root, named))
    with pytest.raises(ScoreError, match="run_started.json"):
        score_run(forged, force=True)


def test_a_seed_folder_outside_a_finished_run_is_refused(earlier, tmp_path):
    root, bfs = earlier
    alone = tmp_path / "seed-1234"
    shutil.copytree(bfs / "seed-1234", alone)
    with pytest.raises(AdmissionError, match=rf"references_from: {alone} is a seed folder, but "
                                             rf"{tmp_path} holds no run.json"):
        adm.admit(_reuse(root, alone))
    run = tmp_path / "no_started"
    shutil.copytree(bfs, run)
    (run / "run_started.json").unlink()
    with pytest.raises(AdmissionError, match=r"run_started.json: file not found: the references cannot"):
        adm.admit(_reuse(root, run))


def test_honest_reuse_recomputes_a_recorded_sample(earlier, tmp_path, monkeypatch):
    root, bfs = earlier
    qualified, real = [], adm.qualify_scenes

    def counted(scenes, *a, **k):
        qualified.extend(s.id for s in scenes)
        return real(scenes, *a, **k)

    monkeypatch.setattr(adm, "qualify_scenes", counted)
    out = tmp_path / "straight"
    run_spec(_reuse(root, bfs), out, progress=False)
    m = json.loads((out / "seed-1234" / "manifest.json").read_text())
    used = m["references"]["reused_from"]
    rec = used["recomputed"]
    assert isinstance(rec["seed"], int)
    assert rec["task_index"] == rr.sample_tasks(6, rec["seed"]) and len(rec["task_index"]) == 4
    ids = [f"{i:010d}" for i in range(6)]
    assert rec["sample_id"] == [ids[i] for i in rec["task_index"]]
    assert sorted(qualified) == sorted(rec["sample_id"])  # four of six: not the whole run
    assert rec["rtol"] == rr.SAMPLE_RTOL and 0.0 <= rec["max_relative_difference"] <= rr.SAMPLE_RTOL
    assert rec["solvers"] == ["value_iteration"]
    assert used["identity"] == m["references"]["identity"]
    # the reusing run is itself a run every reader accepts
    assert sorted(score_run(out)) == ["seed-1234"]
    assert check_entries([out])["entries"][0]["run"] == str(out)


def test_the_sample_is_drawn_from_its_seed():
    assert rr.sample_tasks(3, 7) == [0, 1, 2]
    a = rr.sample_tasks(10_000, 11)
    assert a == rr.sample_tasks(10_000, 11) and len(a) == 10 and len(set(a)) == 10
    assert a != rr.sample_tasks(10_000, 12)


# --------------------------------------------------------------------------- #
# listed contents, links, journal
# --------------------------------------------------------------------------- #

def _copy(bfs: Path, dest: Path) -> Path:
    shutil.copytree(bfs, dest)
    return dest


@pytest.mark.parametrize("where", ["run", "seed", "folder"])
def test_an_unlisted_entry_is_refused_by_every_reader(earlier, tmp_path, capsys, where):
    root, bfs = earlier
    run = _copy(bfs, tmp_path / "run")
    if where == "run":
        extra = run / "exfiltrated.txt"
        extra.write_text("written by a planner")
    elif where == "seed":
        extra = run / "seed-2026" / "notes.json"
        extra.write_text("{}")
    else:
        extra = run / "seed-1234" / "cache"
        extra.mkdir()
    with pytest.raises(ScoreError, match=rf"^{extra}: not part of a finished "):
        score_run(run, force=True)
    assert main(["score", "--run", str(run), "--force"]) == 2
    _one_line(capsys.readouterr().err, extra, "docs/runner.md")
    assert main(["trust", "--score", str(run)]) == 2
    _one_line(capsys.readouterr().err, "trust:", extra)
    with pytest.raises(EntryError, match=rf"^{extra}: not part of a finished"):
        check_entries([run])
    assert main(["check-entry", str(run)]) == 2
    _one_line(capsys.readouterr().err, "check-entry:", extra)
    with pytest.raises(AdmissionError, match=rf"^references_from: {extra}: not part of a finished"):
        adm.admit(_reuse(root, run))


def test_a_temporary_file_is_named_as_one(earlier, tmp_path):
    run = _copy(earlier[1], tmp_path / "run")
    tmp = run / "seed-1234" / ".metrics.json.tmp-4242"
    tmp.write_text("{")
    with pytest.raises(ScoreError, match=rf"{tmp}: .*a temporary file of a write that was killed"):
        score_run(run, force=True)


def test_a_listed_name_of_the_wrong_kind_is_refused(earlier, tmp_path):
    run = _copy(earlier[1], tmp_path / "run")
    (run / "sidecar.json").mkdir()
    with pytest.raises(ScoreError, match=rf"{run / 'sidecar.json'}: not a file"):
        score_run(run, force=True)


@pytest.mark.parametrize("name", ["metrics.json", "records.journal", "stray.bin"])
def test_a_link_out_of_the_folder_is_refused_by_every_reader(earlier, tmp_path, capsys, name):
    root, bfs = earlier
    run = _copy(bfs, tmp_path / "run")
    link = run / "seed-1234" / name
    target = tmp_path / f"outside-{name}"
    if link.exists():
        shutil.move(link, target)
    else:
        target.write_text("x")
    link.symlink_to(target)
    with pytest.raises(ScoreError, match=rf"{link}: a symbolic link to .*outside the run folder"):
        score_run(run, force=True)
    with pytest.raises(EntryError, match="outside the run folder"):
        check_entries([run])
    assert main(["trust", "--score", str(run)]) == 2
    _one_line(capsys.readouterr().err, link, "outside the run folder")
    with pytest.raises(AdmissionError, match=rf"references_from: {link}: a symbolic link"):
        adm.admit(_reuse(root, run))


def test_a_changed_journal_is_refused(earlier, tmp_path):
    run = _copy(earlier[1], tmp_path / "run")
    with open(run / "seed-2026" / "records.journal", "ab") as f:
        f.write(b"appended after the run")
    with pytest.raises(ScoreError, match=r"seed-2026/records.journal: sha256 .* differs from the "
                                         r"manifest's journal.sha256"):
        score_run(run, force=True)


# --------------------------------------------------------------------------- #
# honest runs
# --------------------------------------------------------------------------- #

def test_an_honest_run_with_its_normal_files_is_accepted(earlier, tmp_path, capsys):
    root, bfs = earlier
    run = _copy(bfs, tmp_path / "run")
    names = {p.name for s in SEEDS for p in (run / f"seed-{s}").iterdir()}
    assert names == set(SEED_FOLDER_FILES)  # a scored seed folder holds exactly the listed files
    assert (run / "resolved_protocol.json").is_file() and (run / "resolved_protocol.0.json").is_file()
    (run / ".run.lock").touch()  # left by a run that was killed
    (run / "sidecar.json").write_text("{}")
    assert sorted(score_run(run, force=True)) == ["seed-1234", "seed-2026"]
    assert main(["trust", "--score", str(run), "--json"]) == 0
    capsys.readouterr()
    assert check_entries([run])["entries"][0]["items"]["seeds"]["present"] is False  # two seeds
    assert main(["check-entry", str(run)]) == 1  # an incomplete entry, not a refusal
    capsys.readouterr()
    # a resume of the finished run changes nothing and leaves a run every reader accepts
    run_spec(parse_spec(F.spec_dict(root, seeds=SEEDS, **FAST)), run, progress=False, resume=True)
    assert (run / "resolved_protocol.1.json").is_file()
    assert len(verify_run_folder(run)) == 2


def test_a_supervised_run_is_accepted(earlier, tmp_path):
    root, _ = earlier
    out = tmp_path / "supervised"
    run_spec(parse_spec(F.spec_dict(root, seeds=[1234], n_samples=2, execution="supervised",
                                    budget={"wall_time_ms": 10000}, worker_warmup=0, **FAST)),
             out, progress=False)
    assert sorted(score_run(out)) == ["seed-1234"]
    assert [v.path.name for v in verify_run_folder(out)] == ["seed-1234"]
