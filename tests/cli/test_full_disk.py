"""A full disk under run, score, compare and report (issue family 4): each command ends
with one line naming the file it could not write and a non-zero exit, never a
traceback, and nothing half-written is accepted afterwards (a run resumes, a score is
redone without --force).

The disk is a small tmpfs mounted for the module (root and a kernel that allows it);
elsewhere the module is skipped with the reason.
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import fixtures_runner as F
import pytest

from cli.__main__ import EXIT_ERROR, main
from passage_jax.evaluate import score_run
from passage_jax.run import parse_spec, run_spec

SIZE = 4 << 20  # bytes of the tmpfs


def _mount(point: Path) -> str | None:
    point.mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(point)],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run mount: {e}"
    return None if p.returncode == 0 else f"cannot mount a tmpfs here: {p.stderr.strip()}"


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    point = tmp_path_factory.mktemp("fulldisk") / "mnt"
    why = _mount(point)
    if why:
        pytest.skip(why)
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=20)


@pytest.fixture(scope="module")
def material(tmp_path_factory):
    base = tmp_path_factory.mktemp("disk_material")
    F.write_cohort(base / "cohort")
    spec = base / "spec.json"
    spec.write_text(json.dumps(F.spec_dict(base / "cohort", seeds=[1234, 2026])))
    runs = []
    for name in ("a", "b"):
        d = dict(F.spec_dict(base / "cohort", seeds=[1234, 2026]), method_name=name)
        out = base / name
        run_spec(parse_spec(d), out, progress=False)
        score_run(out)
        runs.append(out)
    return {"base": base, "spec": spec, "runs": runs}


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` but for about ``leave`` bytes; returns the filler file."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def _empty(disk: Path) -> None:
    for p in disk.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def _one_line(err: str, command: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert lines, "no error line"
    last = lines[-1]
    assert last.startswith(f"{command}: "), last
    return last


@pytest.mark.parametrize("leave", [0, 24 << 10])
def test_run_on_a_full_disk_names_the_file_then_resumes(disk, material, capsys, leave):
    _empty(disk)
    out = disk / "run"
    filler = _fill(disk, leave)
    code = main(["run", "--spec", str(material["spec"]), "--output", str(out), "--no-progress"])
    line = _one_line(capsys.readouterr().err, "run")
    assert code == EXIT_ERROR
    assert "no space left on device" in line and str(disk) in line, line
    assert not (out / "run.json").exists()
    # space again: the interrupted run continues and completes
    filler.unlink()
    if (out / "run_started.json").exists():
        assert main(["run", "--spec", str(material["spec"]), "--output", str(out), "--resume",
                     "--no-progress"]) == 0
    else:  # refused before the run started: the folder is still free for it
        assert main(["run", "--spec", str(material["spec"]), "--output", str(out),
                     "--no-progress"]) == 0
    assert (out / "run.json").is_file()
    capsys.readouterr()


def test_score_on_a_full_disk_is_redone_without_force(disk, material, capsys):
    _empty(disk)
    run = disk / "scored"
    shutil.copytree(material["runs"][0], run)
    for seed in run.glob("seed-*"):
        for name in ("per_sample.npz", "metrics.json", "score_receipt.json"):
            (seed / name).unlink()
    filler = _fill(disk, 8 << 10)
    code = main(["score", "--run", str(run)])
    line = _one_line(capsys.readouterr().err, "score")
    assert code == EXIT_ERROR
    assert "no space left on device" in line and str(run) in line, line
    assert not any((s / "score_receipt.json").exists() for s in run.glob("seed-*"))
    filler.unlink()
    assert main(["score", "--run", str(run)]) == 0, capsys.readouterr().err
    assert all((s / "score_receipt.json").is_file() for s in run.glob("seed-*"))
    capsys.readouterr()


def test_compare_and_report_on_a_full_disk(disk, material, capsys):
    _empty(disk)
    a, b = material["runs"]
    cmp = disk / "cmp.json"
    filler = _fill(disk, 0)
    code = main(["compare", "--score", str(a), "--score", str(b), "--output", str(cmp),
                 "--n-bootstrap", "200"])
    line = _one_line(capsys.readouterr().err, "compare")
    assert code == EXIT_ERROR and "no space left on device" in line and str(cmp) in line, line
    assert not cmp.exists()
    filler.unlink()
    local = material["base"] / "cmp.json"
    if not local.exists():
        assert main(["compare", "--score", str(a), "--score", str(b), "--output", str(local),
                     "--n-bootstrap", "200"]) == 0
    capsys.readouterr()
    report = disk / "report" / "report.md"
    filler = _fill(disk, 0)
    code = main(["report", "--compare", str(local), "--output", str(report)])
    line = _one_line(capsys.readouterr().err, "report")
    assert code == EXIT_ERROR and "no space left on device" in line and str(disk) in line, line
    assert not report.exists()
    filler.unlink()
