"""The README's library example runs and says what it claims."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    proc = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    regret_median, success, _ = proc.stdout.split()[:3]
    assert abs(float(regret_median)) < 1e-12 and float(success) == 1.0


def test_readme_first_commands_are_the_install_and_test_commands():
    text = README.read_text()
    first = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1).strip().splitlines()
    assert len(first) == 2, first
    assert first[0].endswith("pip install -c constraints.txt -e . && python -m cli bench "
                             "--spec configs/quickstart.yaml --against configs/quickstart_bfs.yaml")
    assert first[1].endswith("pip install -c constraints.txt -e '.[test,torch]' && python -m pytest -q")
    # each command starts its own environment: either is a fresh install in a fresh clone
    venvs = [re.match(r"python3 -m venv (\S+) && \. (\S+)/bin/activate", c).groups() for c in first]
    assert all(a == b for a, b in venvs) and venvs[0][0] != venvs[1][0], venvs
    assert (README.parent / "constraints.txt").is_file()
    assert (README.parent / "configs" / "quickstart.yaml").is_file()
    assert (README.parent / "configs" / "quickstart_bfs.yaml").is_file()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and "-c constraints.txt -e '.[test,torch]'" in ci


RESULTS = README.parent / "bench" / "RESULTS.md"
#: a measured figure: a number with a unit of time or memory, or pytest's "N passed"
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?)(?:\s?(?:ms|s|min|h|GiB|MiB)\b| passed\b)")
#: the citation that follows the figures it covers: (bench/RESULTS.md, YYYY-MM-DD ...)
CITE = re.compile(r"\(bench/RESULTS\.md,\s+(\d{4}-\d{2}-\d{2})[^)]*\)")


def _prose(text: str) -> str:
    return re.sub(r"```.*?```", "\n\n", text, flags=re.S)


def _sections(date: str) -> str:
    """The text of every bench/RESULTS.md section whose heading carries ``date``."""
    parts = re.split(r"(?m)^## ", RESULTS.read_text())
    return "\n".join(p for p in parts if p.startswith(date))


def readme_figures() -> list[tuple[str, str | None, str]]:
    """(figure, date of its citation or None, the clause around it) for every measured
    figure in the README's prose: a figure is covered by the next citation in its paragraph."""
    out = []
    for para in re.split(r"\n\s*\n", _prose(README.read_text())):
        start = 0
        for m in CITE.finditer(para):
            clause = para[start:m.start()]
            out += [(f.group(1), m.group(1), clause) for f in FIGURE.finditer(clause)]
            start = m.end()
        out += [(f.group(1), None, para[start:]) for f in FIGURE.finditer(para[start:])]
    return out


def test_readme_figures_come_from_results_with_their_date():
    """Every time, memory and test-count figure the README quotes cites the dated section of
    bench/RESULTS.md it comes from, and that section holds the number: the two cannot drift."""
    figures = readme_figures()
    assert len(figures) >= 8, figures
    for figure, date, clause in figures:
        assert date, f"README figure {figure!r} cites no bench/RESULTS.md section: {clause.strip()[-200:]!r}"
        section = _sections(date)
        assert section, f"bench/RESULTS.md has no section dated {date} (README figure {figure!r})"
        assert re.search(rf"(?<![\d.]){re.escape(figure)}(?!\d)", section), \
            f"README figure {figure!r} is not in bench/RESULTS.md's {date} sections: " \
            f"{clause.strip()[-200:]!r}"


def test_the_figure_check_can_fail(tmp_path, monkeypatch):
    fake = tmp_path / "README.md"
    fake.write_text("Runs in 12.5 s (bench/RESULTS.md, 2026-12-02).\n\nAnd 3.25 min uncited.\n")
    monkeypatch.setattr(sys.modules[__name__], "README", fake)
    figures = readme_figures()
    assert [(f, d) for f, d, _ in figures] == [("12.5", "2026-12-02"), ("3.25", None)]
