"""The tree is clean under the project's ruff configuration (pyproject.toml), and
no package of passage_jax imports a live-execution or offline-evaluation room it
should not (DESIGN.md: arrows point down the stage table)."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "passage_jax"


def test_ruff_clean():
    exe = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("ruff is not installed (it is part of the test extra: pip install -e '.[test]')")
    proc = subprocess.run([exe, "check", "--no-cache", str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("passage_jax")}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


# stage -> stages it may import (besides the leaf modules contract, fileio, reduce, testing)
ALLOWED = {
    "graph": set(),
    "stats": set(),
    "reference": {"graph"},
    "metrics": {"graph"},
    "protocol": {"graph"},
    "data": {"graph", "reference", "stats"},
    "planners": {"graph", "reference", "protocol"},
    "learned": {"graph", "reference", "metrics", "protocol", "data"},
    "run": {"graph", "reference", "metrics", "protocol", "data", "planners", "stats", "learned"},
    "evaluate": {"graph", "reference", "metrics", "protocol", "data", "planners", "stats", "learned",
                 "trust"},
    "trust": {"metrics", "stats"},
}
LEAVES = {"contract", "fileio", "reduce", "testing", "memory", "cluster", "precision", "shapes", "checks",
          "compilation"}


def test_stage_imports_point_down():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if len(rel.parts) < 2 or rel.parts[0] not in ALLOWED:
            continue
        stage = rel.parts[0]
        for mod in _imports(path):
            other = _stage(mod)
            if other in (None, stage) or other in LEAVES:
                continue
            if other not in ALLOWED[stage]:
                bad.append(f"{rel}: imports {mod}")
    assert not bad, "\n".join(bad)


MAX_POSITIONAL = 8


def test_no_function_takes_more_than_eight_positional_parameters():
    """Kernels exchange pytrees and options are keyword-only (``*args`` of like
    items, e.g. arrays to hash, do not count)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                if names and names[0] in ("self", "cls"):
                    names = names[1:]
                if len(names) > MAX_POSITIONAL:
                    bad.append(f"{path.relative_to(PKG)}:{node.lineno} {node.name} ({len(names)})")
    assert not bad, "\n".join(bad)


def test_leaf_modules_import_no_stage():
    for leaf in ("contract", "fileio", "reduce"):
        path = PKG / f"{leaf}.py"
        if path.exists():
            assert not _imports(path), f"{leaf}.py imports {_imports(path)}"
