"""The README's library example runs and says what it claims."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
    assert (README.parent / "constraints.txt").is_file()
    assert (README.parent / "configs" / "quickstart.yaml").is_file()
    assert (README.parent / "configs" / "quickstart_bfs.yaml").is_file()
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and "-c constraints.txt -e '.[test,torch]'" in ci
