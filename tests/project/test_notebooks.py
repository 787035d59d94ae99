"""The notebooks of notebooks/: stored stripped, and each one runs on the shipped cohort."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.evaluate.analyze import TEMPLATES, execute_notebook, parameterise  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))
COMMON_PARAMETERS = {"dataset_path", "resolution", "split", "census_limit", "classical_budget",
                     "output_dir"}
#: bounded parameters for the default test run (seconds, not minutes, per notebook)
SMALL = {"census_limit": 3, "classical_budget": 3}
WORKED = {"evaluate_a_planner.ipynb": {"n_samples": 4, "n_bootstrap": 200},
          "training_loop_metrics.ipynb": {"steps": 120, "n_train": 32, "n_eval": 8, "eval_every": 60,
                                          "n_held_out": 8}}


def _text(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") if o.get("output_type") == "stream"
                       else o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def _pngs(nb) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_the_templates_and_worked_examples_are_there():
    names = {p.name for p in ALL}
    assert {f"_{t}.ipynb" for t in TEMPLATES} | set(WORKED) <= names
    assert not list(NOTEBOOKS.glob("*.py")), "the worked examples live in .ipynb files"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_notebook_is_stored_stripped(path):
    raw = path.read_text()
    nb = nbformat.reads(raw, as_version=4)
    nbformat.validate(nb)
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, nb.metadata
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = []
    for i, cell in enumerate(nb.cells):
        assert set(cell.metadata) <= {"tags"}, f"cell {i}: metadata {dict(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has stored outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"
            if "parameters" in cell.metadata.get("tags", []):
                tagged.append(i)
    assert len(tagged) == 1, f"{len(tagged)} cells tagged parameters"
    assert nb.cells[tagged[0]].cell_type == "code"
    assert all(c.cell_type == "markdown" for c in nb.cells[:tagged[0]]), "the parameters cell comes first"
    declared: dict = {}
    exec(nb.cells[tagged[0]].source, {}, declared)
    if path.name.startswith("_"):
        assert COMMON_PARAMETERS <= set(declared), sorted(COMMON_PARAMETERS - set(declared))
    assert '"image/png"' not in raw and '"execution_count": null' in raw


def _run(path, tmp_path, params):
    nb = parameterise(path, params)
    result = execute_notebook(nb, tmp_path, timeout=600)
    assert result["status"] == "executed", f"{path.name}: {result['error']}"
    assert all(c.execution_count is not None for c in nb.cells if c.cell_type == "code")
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    return nb


def test_dataset_notebook_counts_what_the_shards_hold(tmp_path):
    nb = _run(NOTEBOOKS / "_dataset.ipynb", tmp_path, {**SMALL, "output_dir": str(tmp_path / "out")})
    text = _text(nb)
    assert sys.executable in text, "the kernel runs another interpreter"
    root = shipped_cohort_root()
    for split_dir in sorted((root / "64x64").iterdir()):
        rows = sum(pq.ParquetFile(p).metadata.num_rows for p in split_dir.glob("*.parquet"))
        expected = min(rows, SMALL["census_limit"])
        line = re.search(rf"^{split_dir.name}\s+(\d+)\s", text, flags=re.M)
        assert line and int(line.group(1)) == expected, (split_dir.name, expected, text[:2000])
    assert _pngs(nb) >= 3


def test_display_notebook_draws_the_scenes(tmp_path):
    nb = _run(NOTEBOOKS / "_display.ipynb", tmp_path, {"n_display": 2, "output_dir": str(tmp_path / "o")})
    assert _pngs(nb) == 2
    assert "2 scene(s) of 64x64 test" in _text(nb)


# both metrics notebooks run with the larger checks (-m slow); evaluate_a_planner runs by default
@pytest.mark.slow
@pytest.mark.parametrize("stem", ["metrics", "passage_eval_metrics"])
def test_metrics_notebooks_run_and_score(stem, tmp_path):
    out = tmp_path / "out"
    params = {**SMALL, "output_dir": str(out)}
    if stem == "passage_eval_metrics":
        params |= {"n_bootstrap": 200, "randomization_draws": 200}
    nb = _run(NOTEBOOKS / f"_{stem}.ipynb", tmp_path, params)
    assert _pngs(nb) >= 1
    runs = {p.name for p in out.iterdir() if p.is_dir()}
    assert "exact" in runs and "learned_bounded_repair" in runs
    # every run folder is scored for the three seeds
    for run in runs:
        assert len(list((out / run).glob("seed-*/score_receipt.json"))) == 3, run
    if stem == "metrics":
        # the exact planner's row of the primary table: zero regret, every task a success
        row = re.search(r"^exact\s+(.*)$", _text(nb), flags=re.M).group(1)
        means = [float(v) for v in re.findall(r"(\S+) \[[^]]*\]", row)]
        assert len(means) == 6 and abs(means[0]) < 1e-9 and abs(means[1]) < 1e-9, row
        assert means[4] == 1.0 and means[5] == 0.0, row  # success_rate, obstacle_violation_rate
    else:
        assert (out / "compare.json").is_file() and (out / "trust.json").is_file()


# the training-loop example trains a network (about 20 s): behind -m slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n == "training_loop_metrics.ipynb" else n for n in sorted(WORKED)])
def test_worked_example_runs(name, tmp_path):
    params = dict(WORKED[name])
    if name == "evaluate_a_planner.ipynb":
        params["output_dir"] = str(tmp_path / "out")
    nb = _run(NOTEBOOKS / name, tmp_path, params)
    text = _text(nb)
    if name == "evaluate_a_planner.ipynb":
        assert (tmp_path / "out" / "report" / "report.md").is_file()
        assert "success_rate" in text
    else:
        assert "shipped value64-1234" in text and "greedy success on the held-out crops" in text
