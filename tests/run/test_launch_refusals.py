"""Hostile inputs to spec loading, output folders and run launch (issue 21): a spec value
never moves an output outside the folders the user named, a spec file is read bounded,
an output folder the OS refuses or that lies inside the dataset root is refused by name
before anything is written, and a launch that fails before its first record leaves the
folder reusable."""
import dataclasses
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import fixtures_runner as F
import pytest

import passage_jax.run as run_pkg
from cli.__main__ import main
from passage_jax.evaluate import default_output
from passage_jax.protocol.runfolder import LOCK as _LOCK
from passage_jax.protocol.runfolder import RUN_STARTED
from passage_jax.run import OutputFolderTaken, ResumeError, RunError, SpecError, load_spec, parse_spec
from passage_jax.run.admission.checks import AdmissionError, admit, checkpoint_files, entry_identity
from passage_jax.run.loop import run_spec
from passage_jax.run.specification.parse import ECHO_LIMIT, SPEC_MAX_BYTES

FAST = {"latency_warmup": 0, "latency_repeats": 1, "quality_repeat_index": 0}

CHDIR_PLANNER = '''
import os
from passage_jax.planners.bfs import BFSPlanner

def make_planner(into):
    os.chdir(into)  # during construction ...
    inner = BFSPlanner()
    def plan(request):
        os.chdir(into)  # ... and during every request
        return inner.plan(request)
    return plan
'''

BROKEN_PLANNER = '''
import os
from passage_jax.planners.bfs import BFSPlanner

def make_planner(fail_flag=None):
    if fail_flag is not None and os.path.exists(fail_flag):
        raise RuntimeError("cannot build: " + fail_flag)
    return BFSPlanner()
'''


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_cohort")
    F.write_cohort(root)
    return root


@pytest.fixture(scope="module")
def admitted(cohort):
    return admit(parse_spec(F.spec_dict(cohort, **FAST)))


@pytest.fixture
def planners(tmp_path, monkeypatch):
    """A folder of planner modules on sys.path (unique module names per test)."""
    mods = tmp_path / "mods"
    mods.mkdir()
    tag = f"t{abs(hash(str(tmp_path))) % 10**8}"
    names = {}
    for key, text in (("chdir", CHDIR_PLANNER), ("broken", BROKEN_PLANNER)):
        names[key] = f"hostile_{key}_{tag}"
        (mods / f"{names[key]}.py").write_text(text)
    monkeypatch.syspath_prepend(str(mods))
    return names


def _spec(cohort, **over):
    return parse_spec(F.spec_dict(cohort, **{**FAST, **over}))


def _admitted_for(admitted, spec):
    """The module's admitted tasks and references under another spec (same tasks)."""
    return dataclasses.replace(admitted, spec=spec, entry=entry_identity(spec))


def _tree(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _write(path: Path, d: dict) -> Path:
    path.write_text(json.dumps(d))
    return path


def _one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


# --------------------------------------------------------------------------- #
# 5. method_name is a plain name
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("name", ["../x", "../../x", "/abs", "/tmp/x", "a/b", "", ".hidden", "..", ".",
                                  "x" * 129, "tab\tname", "caf\u00e9", "a\\b"])
def test_method_name_must_be_a_plain_name(cohort, name):
    with pytest.raises(SpecError, match=r"method_name: must be a (non-empty )?plain name"):
        parse_spec(F.spec_dict(cohort, method_name=name))


def test_plain_method_names_are_accepted(cohort):
    for name in ("bfs", "my-method_v1.2", "A9", "-x", "x" * 128):
        assert parse_spec(F.spec_dict(cohort, method_name=name)).method_name == name


def test_bench_never_writes_outside_results_root(cohort, tmp_path, capsys):
    results = tmp_path / "nest" / "results"
    spec = _write(tmp_path / "s.json", F.spec_dict(cohort, method_name="../../escaped", **FAST,
                                                   results_root=str(results)))
    assert main(["bench", "--spec", str(spec), "--no-progress"]) == 2
    err = _one_line_err(capsys)
    assert "method_name" in err and str(spec) in err
    assert sorted(os.listdir(tmp_path)) == ["s.json"]
    # a spec object that skipped loading is still refused by the default output folder
    good = _spec(cohort, results_root=str(results))
    bad = dataclasses.replace(good, method_name="../../escaped")
    with pytest.raises(ValueError, match="not a plain name"):
        default_output(bad)
    out = default_output(good)
    assert out.is_absolute() and out.parent == results


# --------------------------------------------------------------------------- #
# 6. bounded spec loading
# --------------------------------------------------------------------------- #

BOMB = """\
method_name: bomb
inference: passage_jax.planners.bfs:make_planner
resolution: 12
cost_model: elevation
split: test
dataset_path: {root}
inference_kwargs:
  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
"""


def test_yaml_alias_bomb_is_refused_fast_and_nothing_is_written(cohort, tmp_path, capsys):
    spec = tmp_path / "bomb.yaml"
    spec.write_text(BOMB.format(root=cohort))
    assert spec.stat().st_size < 1000
    out = tmp_path / "out"
    t0 = time.monotonic()
    assert main(["run", "--spec", str(spec), "--output", str(out), "--no-progress"]) == 2
    assert time.monotonic() - t0 < 3.0
    err = _one_line_err(capsys)
    assert str(spec) in err and "alias *a is refused" in err and "line 9" in err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["bomb.yaml"]
    # a merge key is an alias too
    spec.write_text("base: &b {n_samples: 1}\n<<: *b\n")
    with pytest.raises(SpecError, match="alias"):
        load_spec(spec)


def test_spec_file_over_the_size_cap_is_refused_unread(cohort, tmp_path):
    spec = tmp_path / "big.json"
    d = F.spec_dict(cohort, family="x" * (SPEC_MAX_BYTES + 10))
    _write(spec, d)
    with pytest.raises(SpecError, match=rf"spec {spec}: larger than the 1,048,576-byte limit") as e:
        load_spec(spec)
    assert len(str(e.value)) < 300


def test_calibration_decisions_are_read_bounded(cohort, admitted, tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("a: &a [1, 2]\nb: *a\n")
    spec = _spec(cohort, split_role="test", calibration_decisions=str(cal))
    with pytest.raises(RunError, match=rf"calibration decisions {cal}: .*alias"):
        run_spec(spec, tmp_path / "out", progress=False, admitted=_admitted_for(admitted, spec))
    assert not (tmp_path / "out").exists()


def test_error_messages_echo_huge_values_truncated(cohort, admitted, tmp_path):
    huge = "y" * 1_000_000
    for over in ({"resolution": huge}, {"method_name": huge}, {"cost_model": huge}, {"split": huge},
                 {huge: 1}, {"component_control": {"variant": huge, "guide": "none"}},
                 {"inference_kwargs_by_seed": {huge: {}}}):
        with pytest.raises(SpecError) as e:
            parse_spec(F.spec_dict(cohort, **over))
        msg = str(e.value)
        assert len(msg) < 1000 and "..." in msg, msg[:300]
    # a checkpoint value that is no path at all: named, short, no OSError
    spec = _spec(cohort, inference_kwargs={"checkpoint": huge})
    with pytest.raises(AdmissionError, match=r"inference_kwargs\.checkpoint=.*\.\.\. is not an") as e:
        checkpoint_files(spec)
    assert len(str(e.value)) < 2 * ECHO_LIMIT + 200


def test_binary_spec_file_is_a_named_error(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary")
    with pytest.raises(SpecError, match=rf"spec {spec}: not UTF-8 text"):
        load_spec(spec)
    assert main(["run", "--spec", str(spec), "--output", str(tmp_path / "o")]) == 2
    assert "not UTF-8" in _one_line_err(capsys)
    # UTF-8 text with control characters, a value nested too deeply, an int too long
    for i, text in enumerate(("a: \x00\x01\n", "[" * 100_000, "a: " + "9" * 5000 + "\n")):
        p = tmp_path / f"t{i}.yaml"
        p.write_text(text)
        with pytest.raises(SpecError, match=rf"spec {p}: cannot parse") as e:
            load_spec(p)
        assert "\n" not in str(e.value) and len(str(e.value)) < 600


def test_values_that_are_not_plain_json_are_refused(cohort, tmp_path):
    spec = tmp_path / "s.yaml"
    base = "\n".join(f"{k}: {json.dumps(v)}" for k, v in F.spec_dict(cohort).items())
    for extra, key in (("inference_kwargs: {when: 2024-01-01}", "inference_kwargs"),
                       ("inference_kwargs: {1: a, b: c}", "inference_kwargs"),
                       ("inference_kwargs: {blob: !!binary aGVsbG8=}", "inference_kwargs")):
        spec.write_text(base + "\n" + extra + "\n")
        with pytest.raises(SpecError, match=rf"{key}: must hold plain JSON values"):
            load_spec(spec)


# --------------------------------------------------------------------------- #
# 7. a planner that changes the working directory
# --------------------------------------------------------------------------- #

def test_planner_that_chdirs_with_a_relative_output(cohort, admitted, planners, tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(work)
    spec = _spec(cohort, inference=f"{planners['chdir']}:make_planner",
                 inference_kwargs={"into": str(elsewhere)}, seeds=[1, 2])
    logs = []
    summary = run_spec(spec, "rel/out", progress=False, admitted=_admitted_for(admitted, spec),
                       log=logs.append)
    assert os.getcwd() == str(work)
    assert os.listdir(elsewhere) == []  # nothing of the run went where the planner moved
    out = work / "rel" / "out"
    assert sorted(summary["per_seed"]) == ["1", "2"]
    for seed in (1, 2):
        assert (out / f"seed-{seed}" / "manifest.json").is_file()
        m = json.loads((out / f"seed-{seed}" / "manifest.json").read_text())
        restored = m["resume"]["builds"][0]["working_directory_restored"]
        assert restored["restored_to"] == str(work) and restored["changed_to"] == str(elsewhere)
        assert restored["during"] == "the planner's construction"
        assert restored["times"] == 1 + 3 * 2  # the build, then 3 tasks x (cold + warm)
    assert any("changed the working directory" in m for m in logs)


def test_unchanged_working_directory_adds_nothing_to_the_manifest(cohort, admitted, tmp_path):
    spec = _spec(cohort)
    run_spec(spec, tmp_path / "out", progress=False, admitted=_admitted_for(admitted, spec))
    m = json.loads((tmp_path / "out" / "seed-1234" / "manifest.json").read_text())
    assert "working_directory_restored" not in m["resume"]["builds"][0]


# --------------------------------------------------------------------------- #
# 9. output paths the OS refuses
# --------------------------------------------------------------------------- #

def _hostile_output(kind: str, tmp_path: Path) -> tuple[Path, str]:
    if kind == "file":
        (tmp_path / "afile").write_text("x")
        return tmp_path / "afile", "exists and is not a folder"
    if kind == "loop":
        os.symlink("loop", tmp_path / "loop")
        return tmp_path / "loop", "Too many levels of symbolic links"
    if kind == "inside_loop":
        os.symlink("loop", tmp_path / "loop")
        return tmp_path / "loop" / "x", "Too many levels of symbolic links"
    if kind == "dangling":
        os.symlink("missing-target", tmp_path / "dangling")
        return tmp_path / "dangling", "symbolic link to a missing target"
    if kind == "under_file":
        (tmp_path / "afile").write_text("x")
        return tmp_path / "afile" / "x", "Not a directory"
    if kind == "dev_null":
        return Path("/dev/null/x"), "Not a directory"
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    return Path("/proc/x"), "cannot create /proc/x"


@pytest.mark.parametrize("kind", ["file", "loop", "inside_loop", "dangling", "under_file", "dev_null",
                                  "proc"])
def test_output_paths_the_os_refuses_are_one_named_line(cohort, tmp_path, capsys, kind):
    out, reason = _hostile_output(kind, tmp_path)
    spec = _write(tmp_path / "s.json", F.spec_dict(cohort, **FAST))
    before = _tree(tmp_path)
    with pytest.raises(RunError, match=reason) as e:
        run_spec(spec, out, progress=False)
    assert str(out) in str(e.value)
    for cmd in (["run", "--spec", str(spec), "--output", str(out), "--no-progress"],
                ["conform", "--spec", str(spec), "--output", str(out)],
                ["bench", "--spec", str(spec), "--output", str(out), "--no-progress"]):
        assert main(cmd) == 2
        err = _one_line_err(capsys)
        assert str(out) in err and reason in err, err
    assert _tree(tmp_path) == before
    if kind == "file":
        assert isinstance(e.value, OutputFolderTaken)


def test_empty_output_path_is_refused(cohort):
    with pytest.raises(RunError, match="an empty path names no folder"):
        run_spec(_spec(cohort), "", progress=False)


# --------------------------------------------------------------------------- #
# 11. outputs inside the dataset root
# --------------------------------------------------------------------------- #

def test_output_inside_the_dataset_root_is_refused_before_anything_is_written(
        cohort, admitted, tmp_path, capsys):
    root = tmp_path / "cohort"
    shutil.copytree(cohort, root)
    before = _tree(root)
    link = tmp_path / "link"
    os.symlink(root, link)
    spec_d = F.spec_dict(root, **FAST, results_root=str(root / "results"))
    spec_file = _write(tmp_path / "s.json", spec_d)
    spec = parse_spec(spec_d)
    for out in (root / "out", root / "12x12" / "test" / "run", link / "out"):
        with pytest.raises(RunError, match=r"is inside the dataset root"):
            run_spec(spec, out, progress=False)
        with pytest.raises(RunError, match=r"is inside the dataset root"):
            run_spec(spec, out, progress=False, admitted=_admitted_for(admitted, spec))
        assert main(["run", "--spec", str(spec_file), "--output", str(out), "--no-progress"]) == 2
        err = _one_line_err(capsys)
        assert str(out) in err and str(root) in err
        assert main(["conform", "--spec", str(spec_file), "--output", str(out)]) == 2
        assert "inside the dataset root" in _one_line_err(capsys)
    with pytest.raises(OutputFolderTaken, match="is not empty"):  # the root itself
        run_spec(spec, root, progress=False)
    # bench: the default folder under results_root, and --output
    assert main(["bench", "--spec", str(spec_file), "--no-progress"]) == 2
    assert f"inside the dataset root {root}" in _one_line_err(capsys)
    assert main(["bench", "--spec", str(spec_file), "--output", str(root / "b"), "--no-progress"]) == 2
    assert "inside the dataset root" in _one_line_err(capsys)
    assert _tree(root) == before


# --------------------------------------------------------------------------- #
# minor: the --resume prefix, and a launch that fails before its first record
# --------------------------------------------------------------------------- #

def test_resume_prefix_appears_only_under_resume(cohort, tmp_path, capsys, monkeypatch):
    spec = _write(tmp_path / "s.json", F.spec_dict(cohort, **FAST))

    def refuse(*a, **k):
        raise ResumeError("folder X: the record journal is torn")

    monkeypatch.setattr(run_pkg, "run_spec", refuse)
    out = str(tmp_path / "o")
    assert main(["run", "--spec", str(spec), "--output", out, "--no-progress"]) == 2
    err = _one_line_err(capsys)
    assert err.startswith("run: folder X") and "--resume" not in err
    assert main(["run", "--spec", str(spec), "--output", out, "--no-progress", "--resume"]) == 2
    assert _one_line_err(capsys).startswith("run --resume: folder X")


def test_lock_of_another_process_is_named_without_resume_prefix(cohort, admitted, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    spec = _spec(cohort)
    with open(out / _LOCK, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ResumeError, match="another process is running this folder"):
            run_spec(spec, out, progress=False, admitted=_admitted_for(admitted, spec), resume=True)
        assert (out / _LOCK).exists()  # the other process's lock is left alone


def test_failed_planner_build_leaves_the_folder_reusable(cohort, admitted, planners, tmp_path, capsys):
    flag = tmp_path / "fail"
    flag.write_text("")
    out = tmp_path / "run"
    entry = f"{planners['broken']}:make_planner"
    broken = _write(tmp_path / "broken.json", F.spec_dict(cohort, **FAST, inference=entry,
                                                          inference_kwargs={"fail_flag": str(flag)}))
    assert main(["run", "--spec", str(broken), "--output", str(out), "--no-progress"]) == 2
    err = _one_line_err(capsys)
    assert "cannot build" in err and "--resume" not in err
    assert sorted(os.listdir(out)) == ["resolved_protocol.0.json", "resolved_protocol.json"]
    # the fixed spec runs in the same folder
    fixed = _spec(cohort, inference=entry)
    run_spec(fixed, out, progress=False, admitted=_admitted_for(admitted, fixed))
    assert (out / "seed-1234" / "manifest.json").is_file() and not (out / _LOCK).exists()


def test_failed_build_after_records_keeps_them_for_resume(cohort, admitted, planners, tmp_path):
    flag = tmp_path / "fail"
    flag.write_text("")
    out = tmp_path / "run"
    spec = _spec(cohort, inference=f"{planners['broken']}:make_planner", seeds=[1, 2],
                 inference_kwargs_by_seed={2: {"fail_flag": str(flag)}})
    adm_ = _admitted_for(admitted, spec)
    with pytest.raises(RunError, match="seed 2: .*cannot build"):
        run_spec(spec, out, progress=False, admitted=adm_)
    assert (out / RUN_STARTED).is_file() and (out / "seed-1" / "manifest.json").is_file()
    flag.unlink()
    summary = run_spec(spec, out, progress=False, admitted=adm_, resume=True)
    assert sorted(summary["per_seed"]) == ["1", "2"]


def test_launch_refused_after_admission_removes_the_folders_it_created(cohort, admitted, tmp_path):
    cal = tmp_path / "cal.json"
    cal.write_text("[]")  # not a mapping of decisions: refused once the folder exists
    out = tmp_path / "new" / "deeper"
    spec = _spec(cohort, split_role="test", calibration_decisions=str(cal))
    with pytest.raises(RunError, match=rf"calibration decisions {cal}: must be a non-empty mapping"):
        run_spec(spec, out, progress=False, admitted=_admitted_for(admitted, spec))
    assert os.listdir(tmp_path) == ["cal.json"]
