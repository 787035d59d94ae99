"""``python -m cli analyze``: notebooks per resolution, executed, and the analysis manifest."""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

import cli.analyze as analyze_cli  # noqa: E402
import passage_jax.evaluate.analyze._export as export  # noqa: E402
import passage_jax.evaluate.analyze._notebooks as analysis  # noqa: E402
from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.evaluate.analyze import (  # noqa: E402
    TEMPLATES,
    AnalyzeError,
    parameterise,
    parameters_source,
)
from passage_jax.protocol.records import code_hash  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_cli(argv) -> int:
    parser = argparse.ArgumentParser()
    analyze_cli.register(parser)
    return analyze_cli.main(parser.parse_args([str(a) for a in argv]))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """A copy of the shipped cohort (64x64 and 128x128): staging hardlinks its shards and
    makes them read-only, which the package's own files are kept out of."""
    root = tmp_path_factory.mktemp("cohort") / "cohort"
    for n in (64, 128):
        shutil.copytree(shipped_cohort_root() / f"{n}x{n}", root / f"{n}x{n}")
    return root


def _staged_shards_are_hardlinks(out: Path, root: Path, manifest: dict, n: int = 64) -> None:
    staging = manifest["parquet_staging"]
    assert staging["state"] == "staged" and staging["method"] == "hardlink"
    assert staging["read_only"] and staging["verified"]
    sources = sorted((root / f"{n}x{n}").glob("*/*.parquet"))
    assert len(sources) == 3 and staging["n_files"] == 3
    for src in sources:
        rel = src.relative_to(root)
        dst = out / "data" / rel
        assert os.stat(dst).st_ino == os.stat(src).st_ino and os.stat(dst).st_dev == os.stat(src).st_dev
        assert not os.stat(dst).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        entry = next(f for f in staging["files"] if f["path"] == f"data/{rel.as_posix()}")
        assert entry["method"] == "hardlink" and entry["sha256"] == sha256(src)
        assert entry["inode"] == os.stat(src).st_ino


def _source_copies(out: Path, templates: Path, manifest: dict) -> None:
    copies = manifest["source_notebooks"]
    assert [c["notebook"] for c in copies] == list(TEMPLATES)
    for c in copies:
        src = templates / f"_{c['notebook']}.ipynb"
        assert (out / c["path"]).read_bytes() == src.read_bytes()
        assert c["sha256"] == sha256(src)


@pytest.mark.slow  # four notebooks executed in kernels (about 25 s); each also runs in test_notebooks
def test_analyze_executes_the_four_notebooks_and_records_identities(tmp_path, capsys, cohort):
    out = tmp_path / "staging"
    rc = run_cli(["--dataset-path", cohort, "--resolution", "64", "--staging-root", out, "--execute",
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
    root = cohort.resolve()
    assert manifest["data"]["dataset_root"] == str(root)
    expected = {p.relative_to(root).as_posix(): sha256(p) for p in (root / "64x64").glob("*/*.parquet")}
    got = {f["path"]: f["sha256"] for files in manifest["data"]["resolutions"]["64"]["splits"].values()
           for f in files}
    assert got == expected and len(expected) == 3
    # evaluator identity
    assert manifest["evaluator"]["code_hash"] == code_hash()
    assert manifest["evaluator"]["notebook_packages"]["nbclient"]
    # the kernel ran in the staging folder on the staged read-only snapshot (hardlinks)
    assert (out / "64x64" / "outputs" / "metrics" / "exact").is_dir()
    _staged_shards_are_hardlinks(out, root, manifest)
    _source_copies(out, NOTEBOOKS, manifest)
    states = manifest["states"]
    assert states["notebooks"]["state"] == "executed" and states["notebooks"]["executed"] == 4
    assert states["parquet_staging"]["method"] == "hardlink"
    assert states["publication"] == {"state": "admitted", "reasons": []}


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


def test_a_failing_cell_fails_the_command_naming_notebook_and_cell(tmp_path, monkeypatch, capsys,
                                                                  cohort):
    templates = _tiny_templates(tmp_path / "templates", failing="display")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    rc = run_cli(["--dataset-path", cohort, "--resolution", "64", "--staging-root", out, "--execute"])
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
    # the failure keeps the export from publication; the staging is its own state
    states = manifest["states"]
    assert states["notebooks"]["state"] == "failed" and states["notebooks"]["failed"] == 1
    assert states["parquet_staging"] == {"state": "staged", "method": "hardlink", "read_only": True,
                                         "verified": True}
    assert states["publication"]["state"] == "not_admitted"
    assert states["publication"]["reasons"] == ["64x64/display.ipynb failed at cell 3"]


def test_execute_exports_notebooks_sources_hardlinked_shards_and_three_states(tmp_path, monkeypatch,
                                                                             capsys, cohort):
    templates = _tiny_templates(tmp_path / "templates")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    rc = run_cli(["--dataset-path", cohort, "--resolution", "64", "--staging-root", out, "--execute"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-2000:]
    assert "parquet staging: hardlink (3 shard(s), read-only); publication: admitted" in captured.out
    manifest = json.loads((out / "analysis_manifest.json").read_text())
    _staged_shards_are_hardlinks(out, cohort, manifest)
    _source_copies(out, templates, manifest)
    # the notebooks read the staged snapshot, not the dataset root
    params = manifest["notebooks"][0]["parameters"]
    assert params["dataset_path"] == str(out / "data")
    states = manifest["states"]
    assert states["notebooks"] == {"state": "executed", "total": 4, "ready": 4, "executed": 4,
                                   "failed": 0, "not_executed": 0}
    assert states["publication"] == {"state": "admitted", "reasons": []}


def test_not_executed_export_is_ready_but_not_admitted(tmp_path, monkeypatch, cohort):
    templates = _tiny_templates(tmp_path / "templates")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    assert run_cli(["--dataset-path", cohort, "--resolution", "64", "--staging-root", out]) == 0
    states = json.loads((out / "analysis_manifest.json").read_text())["states"]
    assert states["notebooks"]["state"] == "ready" and states["notebooks"]["not_executed"] == 4
    assert states["parquet_staging"]["method"] == "hardlink"
    assert states["publication"] == {"state": "not_admitted",
                                     "reasons": ["the notebooks were not executed (--execute)"]}


def test_no_links_is_a_named_refusal_and_copy_opts_in(tmp_path, monkeypatch, capsys, cohort):
    """A file system without hardlinks or reflinks: the staging is refused by name, nothing
    is left staged; --copy then makes ordinary read-only copies."""
    templates = _tiny_templates(tmp_path / "templates")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)

    def no_link(src, dst, *a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link", str(src), None, str(dst))

    def no_reflink(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(export.os, "link", no_link)
    monkeypatch.setattr(export, "_reflink", no_reflink)
    out = tmp_path / "staging"
    argv = ["--dataset-path", cohort, "--resolution", "64", "--staging-root", out]
    assert run_cli(argv) == 2
    err = capsys.readouterr().err
    assert "staging refused: cannot stage shard" in err
    assert "hardlink refused (Invalid cross-device link [EXDEV])" in err
    assert "reflink refused (Operation not permitted [EPERM])" in err and "--copy" in err
    assert not list(out.rglob("*.parquet")) and not (out / "analysis_manifest.json").exists()
    assert run_cli([*argv, "--copy"]) == 0
    manifest = json.loads((out / "analysis_manifest.json").read_text())
    staging = manifest["parquet_staging"]
    assert staging["method"] == "copy" and staging["copy_allowed"] and staging["read_only"]
    assert manifest["options"]["copy"] is True
    for f in staging["files"]:
        src, dst = Path(f["source"]), out / f["path"]
        assert os.stat(dst).st_ino != os.stat(src).st_ino
        assert sha256(dst) == sha256(src) == f["sha256"]
        assert not os.stat(dst).st_mode & 0o222
    assert manifest["states"]["parquet_staging"]["method"] == "copy"


def test_a_staging_root_with_an_analysis_is_refused(tmp_path, monkeypatch, capsys, cohort):
    templates = _tiny_templates(tmp_path / "templates")
    monkeypatch.setattr(analysis, "default_template_dir", lambda: templates)
    out = tmp_path / "staging"
    argv = ["--dataset-path", cohort, "--resolution", "64", "128", "--staging-root", out]
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
