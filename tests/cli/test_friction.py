"""Newcomer friction at the command line: a planner module beside its spec (or on
``--planner-path``), a report named ``.html`` that would hold Markdown, bad paths and bad
specs refused before JAX loads, a did-you-mean for a mistyped flag, and what a
single-stage planner reports (docs/runner.md, docs/scoring.md, docs/protocol.md)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import fixtures_runner as F
import pytest
import yaml

from cli.__main__ import main
from passage_jax.run.specification.planner_path import (
    planner_folders,
    planner_import_path,
    planner_module_problem,
    planner_path_record,
)

ROOT = Path(__file__).resolve().parents[2]

PLANNER_SOURCE = '''\
from passage_jax.planners.bfs import make_planner as _make


def make_planner(**kw):
    return _make(**kw)
'''


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return root


def _spec(folder: Path, cohort, module: str, **over) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.yaml"
    spec.write_text(yaml.safe_dump(F.spec_dict(cohort, inference=f"{module}:make_planner",
                                               latency_warmup=0, latency_repeats=1,
                                               quality_repeat_index=0, **over)))
    return spec


@pytest.fixture
def forget_modules():
    """Modules the test imports from its own folders are dropped again afterwards."""
    names: list = []
    yield names
    for name in names:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------- #
# 1. a planner module outside the package
# --------------------------------------------------------------------------- #

def test_planner_folders_are_the_spec_folder_then_planner_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert planner_folders("specs/s.yaml", ["mine", tmp_path / "specs", "mine"]) == (
        str(tmp_path / "specs"), str(tmp_path / "mine"))
    assert planner_folders("<dict>", ["a"]) == (str(tmp_path / "a"),)
    assert planner_folders(None) == ()


def test_import_path_holds_the_folders_first_and_only_within_the_block(tmp_path):
    before = list(sys.path)
    with planner_import_path([str(tmp_path / "a"), str(tmp_path / "b")]) as added:
        assert sys.path[:2] == [str(tmp_path / "a"), str(tmp_path / "b")] == list(added)
        assert planner_path_record("x:y") == {"searched": list(added), "module_folder": None}
    assert sys.path == before and planner_path_record("x:y") is None


def test_module_problem_names_what_was_searched(tmp_path, forget_modules):
    (tmp_path / "beside_spec_probe.py").write_text("X = 1\n")
    assert planner_module_problem("beside_spec_probe:X", [str(tmp_path)]) is None
    assert planner_module_problem("passage_jax.planners.bfs:make_planner", []) is None
    why = planner_module_problem("absent_probe_mod:make", [str(tmp_path)])
    assert f"cannot find module 'absent_probe_mod': searched first {tmp_path}" in why
    assert "beside_spec_probe" not in sys.modules  # found, never imported


def test_a_missing_planner_module_is_refused_naming_the_folders_and_the_remedy(tmp_path, cohort,
                                                                               capsys):
    spec = _spec(tmp_path / "specs", cohort, "friction_absent_planner")
    extra = tmp_path / "more"
    extra.mkdir()
    for command in ("run", "conform"):
        rc = main([command, "--spec", str(spec), "--output", str(tmp_path / command),
                   "--planner-path", str(extra)])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err, err
        assert err.startswith(f"{command}: spec {spec}: inference 'friction_absent_planner:make_planner': "
                              f"cannot find module 'friction_absent_planner': searched first "
                              f"{tmp_path / 'specs'}, {extra}, then Python's import path")
        assert "--planner-path DIR" in err and "PYTHONPATH" in err
        assert not (tmp_path / command).exists()
    rc = main(["run", "--spec", str(spec), "--output", str(tmp_path / "o"),
               "--planner-path", str(tmp_path / "nowhere")])
    assert rc == 2
    assert f"run: --planner-path {tmp_path / 'nowhere'}: not a folder" in capsys.readouterr().err


def test_a_planner_beside_the_spec_runs_and_its_folder_is_recorded(tmp_path, cohort, capsys,
                                                                   forget_modules):
    module = "friction_beside_spec"
    forget_modules.append(module)
    spec = _spec(tmp_path / "specs", cohort, module)
    (tmp_path / "specs" / f"{module}.py").write_text(PLANNER_SOURCE)
    before = list(sys.path)
    out = tmp_path / "run"
    assert main(["run", "--spec", str(spec), "--output", str(out), "--no-progress"]) == 0, \
        capsys.readouterr().err
    assert sys.path == before  # the spec's folder left the import path with the command
    manifest = json.loads((out / "seed-1234" / "manifest.json").read_text())
    assert manifest["provenance"]["planner_path"] == {
        "searched": [str(tmp_path / "specs")], "module_folder": str(tmp_path / "specs")}
    assert manifest["planner"]["module_file"] == str(tmp_path / "specs" / f"{module}.py")


def test_a_planner_on_planner_path_passes_conform(tmp_path, cohort, capsys, forget_modules):
    module = "friction_on_planner_path"
    forget_modules.append(module)
    spec = _spec(tmp_path / "specs", cohort, module)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / f"{module}.py").write_text(PLANNER_SOURCE)
    rc = main(["conform", "--spec", str(spec), "--output", str(tmp_path / "c"),
               "--planner-path", str(tmp_path / "lib")])
    assert rc == 0, capsys.readouterr()
    receipt = json.loads((tmp_path / "c" / "conformance.json").read_text())
    assert receipt["passed"]


# --------------------------------------------------------------------------- #
# 2. report --output r.html
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("name", ["r.html", "R.HTM"])
@pytest.mark.parametrize("html", [False, True])
def test_report_refuses_an_html_name_for_the_markdown_before_writing(tmp_path, capsys, name, html):
    cmp = tmp_path / "cmp.json"
    cmp.write_text("{}")
    out = tmp_path / "rep"
    out.mkdir()
    rc = main(["report", "--compare", str(cmp), "--output", str(out / name)]
              + (["--html"] if html else []))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err, err
    md = Path(name).with_suffix(".md").name
    assert err.startswith(f"report: {out / name}: --output names the Markdown report")
    assert f"--output {md}" in err and "--html" in err
    assert list(out.iterdir()) == []


def test_report_attribution_refuses_an_html_name(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rc = main(["report", "--attribution", str(run), "--output", str(tmp_path / "a.html")])
    assert rc == 2 and "--output names the Markdown report" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_write_report_refuses_an_html_name_before_reading():
    from passage_jax.evaluate import ReportError, write_report

    with pytest.raises(ReportError, match="--output names the Markdown report"):
        write_report("/nonexistent/cmp.json", "/nonexistent/r.html")


# --------------------------------------------------------------------------- #
# 3. paths and specs refused before JAX loads
# --------------------------------------------------------------------------- #

def _cli_without_jax(cwd: Path, *argv) -> tuple[int, str]:
    """``python -X importtime -m cli ARGV`` in a subprocess: the exit status and the lines of
    stderr that are not import times; fails when any ``jax`` module was imported."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "cli", *map(str, argv)],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    times = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")]
    rest = [ln for ln in proc.stderr.splitlines() if not ln.startswith("import time:")]
    names = {ln.rsplit("|", 1)[-1].strip() for ln in times}
    assert names, "no import times were reported"
    loaded = sorted(n for n in names if n == "jax" or n.startswith(("jax.", "jaxlib", "flax")))
    assert not loaded, f"{argv}: JAX was imported: {loaded[:5]}"
    return proc.returncode, "\n".join(rest)


def test_run_with_a_missing_spec_is_refused_without_importing_jax(tmp_path):
    rc, err = _cli_without_jax(tmp_path, "run", "--spec", "nope.yaml", "--output", "out")
    assert rc == 2 and err == "run: spec nope.yaml: file not found"


def test_a_spec_that_fails_its_schema_is_refused_without_importing_jax(tmp_path, cohort):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({**F.spec_dict(cohort), "n_sampels": 3}))
    rc, err = _cli_without_jax(tmp_path, "run", "--spec", spec, "--output", "out")
    assert rc == 2 and err.startswith(f"run: spec {spec}: unknown key(s) ['n_sampels'] "
                                      f"(did you mean 'n_samples'?)")
    spec.write_text(yaml.safe_dump(F.spec_dict(cohort, cost_model="energie")))
    rc, err = _cli_without_jax(tmp_path, "conform", "--spec", spec, "--output", "out")
    assert rc == 2 and err.startswith(f"conform: spec {spec}: cost_model:")
    spec.write_text(yaml.safe_dump(F.spec_dict(cohort, inference="friction_nowhere:make")))
    rc, err = _cli_without_jax(tmp_path, "bench", "--spec", spec)
    assert rc == 2 and "cannot find module 'friction_nowhere'" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, line", [
    (["score", "--run", "gone"], "score: run folder gone does not exist"),
    (["score", "--run", ".", "--dataset-path", "gone"], "score: dataset root gone does not exist"),
    (["compare", "--score", "a", "--score", "b", "--output", "c.json"],
     "compare: scored run a does not exist"),
    (["trust", "--score", "a"], "trust: --score run a does not exist"),
    (["report", "--compare", "gone.json", "--output", "r.md"],
     "report: comparison file gone.json: file not found"),
    (["check-entry", "gone"], "check-entry: gone: no such run folder or compare file"),
    (["leaderboard", "gone", "--output", "lb"], "leaderboard: input gone: no such file or folder"),
    (["train", "--config", "gone.yaml", "--out", "ck"], "train: train config gone.yaml: file not found"),
    (["audit", "--dataset-path", "gone", "--resolution", "64"], "audit: dataset root gone does not exist"),
    (["analyze", "--dataset-path", "gone", "--resolution", "64", "--staging-root", "st"],
     "analyze: dataset root gone does not exist"),
    (["admit-test", "--spec", "gone.yaml", "--output", "o"],
     "admit-test: spec gone.yaml: file not found (no receipt written)"),
    (["run", "--spec", "gone.yaml", "--output", "o", "--dry-run", "--resume"],
     "run: --dry-run checks a new run; it cannot be combined with --resume"),
])
def test_every_command_refuses_a_missing_input_without_importing_jax(tmp_path, argv, line):
    rc, err = _cli_without_jax(tmp_path, *argv)
    assert (rc, err) == (2, line)


def test_run_package_names_resolve_lazily_and_conform_stays_the_function():
    import passage_jax.run as run
    import passage_jax.run.conform  # noqa: F401  (the module of the same name)

    assert callable(run.conform) and not isinstance(run.conform, types.ModuleType)
    from passage_jax.run import RunError, conform, load_spec, run_spec

    assert conform.__module__ == "passage_jax.run.conform" and callable(run_spec)
    assert RunError.__name__ == "RunError" and load_spec.__module__ == "passage_jax.run.specification.parse"
    assert set(run.__all__) <= set(dir(run))


# --------------------------------------------------------------------------- #
# 4. did-you-mean for flags
# --------------------------------------------------------------------------- #

def _usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_an_unknown_flag_gets_the_commands_closest_option(capsys):
    assert _usage_error(capsys, "score", "--run", "r", "--forse") == (
        "score: unrecognized arguments: --forse (did you mean --force?) "
        "(see python -m cli score --help)")
    assert _usage_error(capsys, "run", "--specc", "s.yaml", "--output", "o") == (
        "run: the following arguments are required: --spec (--specc is not an option: did you "
        "mean --spec?) (see python -m cli run --help)")
    err = _usage_error(capsys, "run", "--spec", "s", "--output", "o", "--resme", "--dry-rn=1")
    assert err == ("run: unrecognized arguments: --resme --dry-rn=1 (--resme: did you mean "
                   "--resume?; --dry-rn: did you mean --dry-run?) (see python -m cli run --help)")
    # nothing close: argparse's own line, unchanged
    assert _usage_error(capsys, "score", "--run", "r", "--zzzzzzzz") == (
        "score: unrecognized arguments: --zzzzzzzz (see python -m cli score --help)")
    # an abbreviation argparse takes is not an unknown flag
    assert _usage_error(capsys, "score", "--ru", "r", "--forse").startswith(
        "score: unrecognized arguments: --forse (did you mean --force?)")


# --------------------------------------------------------------------------- #
# 5. what a single-stage planner reports
# --------------------------------------------------------------------------- #

def test_protocol_doc_shows_a_single_stage_result_and_it_fills_the_components():
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text.split("### A single-stage planner", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert 'stage_work={"primary"' in example and 'route_stage="primary"' in example
    from passage_jax.evaluate.components import component_summary
    from passage_jax.protocol.contracts import PlanResult, normalise_result

    scope: dict = {"PlanResult": PlanResult}
    exec(example, scope)  # the example defines plan(request) for a stub search
    res = normalise_result(scope["plan"](None))
    assert res.work == {"expansions": 412, "queue_operations": 977}
    c = component_summary([{"route_stage": res.route_stage, "stage_work": res.stage_work,
                            "work": res.work}], [True])
    assert c["route_stage_reporting"] == "all rows" and c["direct_success_rate"] == 1.0
    assert c["repair_rate"] == 0.0 and c["fallback_frequency"] == 0.0


@pytest.mark.parametrize("command, argv", [
    ("audit", ["--dataset-path", "shipped", "--resolution", "64"]),
    ("score", ["--run", ".", "--dataset-path", "shipped"]),
    ("analyze", ["--dataset-path", "shipped", "--resolution", "64", "--staging-root", "st"]),
])
def test_the_shipped_dataset_alias_passes_every_check_before_jax(tmp_path, monkeypatch, command, argv):
    """``--dataset-path shipped`` names the shipped cohort, not a folder: no command's check
    before JAX loads refuses it, wherever the command is started."""
    import argparse  # noqa: PLC0415
    import importlib  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"cli.{command.replace('-', '_')}")
    parser = argparse.ArgumentParser()
    module.register(parser)
    module.check(parser.parse_args(argv))  # raises InputError on a refusal
