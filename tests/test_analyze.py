"""``python -m cli analyze``: notebooks per resolution, executed, and the analysis manifest."""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

import cli.analyze as analyze_cli  # noqa: E402
import passage_jax.evaluate.analyze as analysis  # noqa: E402
from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.evaluate.analyze import (  # noqa: E402
    TEMPLATES,
    AnalyzeError,
    parameterise,
    parameters_source,
)
from passage_jax.protocol.records import code_hash  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run_cli(argv) -> int:
    parser = argparse.ArgumentParser()
    analyze_cli.register(parser)
    return analyze_cli.main(parser.parse_args([str(a) for a in argv]))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow  # four notebooks executed in kernels (about 25 s); each also runs in test_notebooks
def test_analyze_executes_the_four_notebooks_and_records_identities(tmp_path, capsys):
    out = tmp_path / "staging"
    rc = run_cli(["--dataset-path", "shipped", "--resolution", "64", "--staging-root", out, "--execute",
                  "--census-limit", "2", "--classical-budget", "2"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-3000:]
    manifest = json.loads((out / "analysis_manifest.json").read_text())
    assert manifest["format"] == "passage-jax-analysis-v1"
    assert [e["notebook"] for e in manifest["notebooks"]] == list(TEMPLATES)
    for entry in manifest["notebooks"]:
        path = out / entry["path"]
        assert path == out / "64x64" / f"{entry['notebook']}.ipynb"
        assert entry["status"] == "executed" and entry["ready"] and entry["error"] is None
        assert entry["seconds"] > 0
        assert entry["template_sha256"] == sha256(NOTEBOOKS / f"_{entry['notebook']}.ipynb")
        assert entry["notebook_sha256"] == sha256(path)
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code)
        assert not [o for c in code for o in c.outputs if o.output_type == "error"]
        params = next(c for c in code if "parameters" in c.metadata.get("tags", []))
        assert "resolution = 64" in params.source and "census_limit = 2" in params.source
    assert manifest["failed"] == []
    # data identities: an independent sha256 of every 64x64 shard
    root = shipped_cohort_root().resolve()
    assert manifest["data"]["dataset_root"] == str(root)
    expected = {p.relative_to(root).as_posix(): sha256(p) for p in (root / "64x64").glob("*/*.parquet")}
    got = {f["path"]: f["sha256"] for files in manifest["data"]["resolutions"]["64"]["splits"].values()
           for f in files}
    assert got == expected and len(expected) == 3
    # evaluator identity
    assert manifest["evaluator"]["code_hash"] == code_hash()
    assert manifest["evaluator"]["notebook_packages"]["nbclient"]
    # the kernel ran in the staging folder; the dataset was not copied there
    assert (out / "64x64" / "outputs" / "metrics" / "exact").is_dir()
    assert not list(out.rglob("*.parquet"))


def _tiny_templates(folder: Path, failing: str | None = None) -> Path:
    folder.mkdir()
    for stem in TEMPLATES:
        cells = [nbformat.v4.new_markdown_cell(f"# {stem}"),
                 nbformat.v4.new_code_cell("resolution = 0\ndataset_path = ''\nsplit = ''\n"
                                           "census_limit = None\nclassical_budget = 1\noutput_dir = ''"),
                 nbformat.v4.new_code_cell("import os\nprint(os.getcwd(), resolution)")]
        cells[1].metadata["tags"] = ["parameters"]
        if stem == failing:
            cells.append(nbformat.v4.new_code_cell("raise ValueError(f'no analysis at {resolution}')"))
        nbformat.write(nbformat.v4.new_notebook(cells=cells), folder / f"_{stem}.ipynb")
    return folder


def test_a_failing_cell_fails_the_command_naming_notebook_and_cell(tmp_path, monkeypatch, capsys):
    templates = _tiny_templates(tmp_path / "templates", failing="display")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    rc = run_cli(["--dataset-path", "shipped", "--resolution", "64", "--staging-root", out, "--execute"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "64x64/display.ipynb failed at cell 3" in err and "no analysis at 64" in err
    manifest = json.loads((out / "analysis_manifest.json").read_text())
    status = {e["notebook"]: e["status"] for e in manifest["notebooks"]}
    assert status == {"dataset": "executed", "display": "failed", "metrics": "executed",
                      "passage_eval_metrics": "executed"}
    failed = manifest["failed"]
    assert len(failed) == 1 and failed[0]["cell_index"] == 3 and failed[0]["ename"] == "ValueError"
    # the executed notebook is written in place, its error output kept; the cwd was the staging folder
    nb = nbformat.read(out / "64x64" / "display.ipynb", as_version=4)
    assert nb.cells[3].outputs[-1].output_type == "error"
    assert str(out / "64x64") in nb.cells[2].outputs[0].text


def test_a_staging_root_with_an_analysis_is_refused(tmp_path, monkeypatch, capsys):
    templates = _tiny_templates(tmp_path / "templates")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    argv = ["--dataset-path", "shipped", "--resolution", "64", "128", "--staging-root", out]
    assert run_cli(argv) == 0
    first = json.loads((out / "analysis_manifest.json").read_text())
    assert {e["status"] for e in first["notebooks"]} == {"not_executed"}
    assert len(first["notebooks"]) == 8 and (out / "128x128" / "metrics.ipynb").is_file()
    capsys.readouterr()
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "already holds an analysis" in err and "--force" in err
    assert json.loads((out / "analysis_manifest.json").read_text()) == first
    assert run_cli([*argv, "--force"]) == 0


def test_bad_dataset_and_resolution_are_named(tmp_path, capsys):
    assert run_cli(["--dataset-path", str(tmp_path / "nowhere"), "--resolution", "64",
                    "--staging-root", tmp_path / "s"]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert run_cli(["--dataset-path", "shipped", "--resolution", "96", "--staging-root", tmp_path / "s"]) == 2
    assert "96x96" in capsys.readouterr().err


def test_missing_extra_names_the_install_command(tmp_path, monkeypatch, capsys):
    real = analysis.importlib.import_module

    def fake(name, *a, **k):
        if name == "nbformat":
            raise ImportError("No module named 'nbformat'")
        return real(name, *a, **k)

    monkeypatch.setattr(analysis.importlib, "import_module", fake)
    rc = run_cli(["--dataset-path", "shipped", "--resolution", "64", "--staging-root", tmp_path / "s"])
    err = capsys.readouterr().err
    assert rc == 2 and "nbformat" in err and "pip install -e '.[analyze]'" in err
    assert not (tmp_path / "s").exists()


def test_parameters_cell_is_replaced_and_checked():
    params = {"dataset_path": "/data/x", "resolution": 128, "census_limit": None, "split": "test"}
    ns: dict = {}
    exec(parameters_source(params), {}, ns)
    assert ns == params
    nb = parameterise(NOTEBOOKS / "_dataset.ipynb", {"resolution": 128, "census_limit": 5})
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    ns = {}
    exec(cell.source, {}, ns)
    assert ns["resolution"] == 128 and ns["census_limit"] == 5 and ns["dataset_path"] == "shipped"
    with pytest.raises(AnalyzeError, match="unknown parameter"):
        parameterise(NOTEBOOKS / "_dataset.ipynb", {"resolutoin": 128})
    with pytest.raises(AnalyzeError, match="not a plain literal"):
        parameters_source({"output_dir": Path("/x")})
