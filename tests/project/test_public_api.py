"""The curated public API: every package of ``passage_jax`` declares ``__all__``, and every
name in any module's ``__all__`` can be imported.

Packages are the folders under ``passage_jax/`` that hold Python files (each must be a
regular package with an ``__init__.py``); modules are found by walking the package tree.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import passage_jax

ROOT = Path(passage_jax.__file__).resolve().parent


def _package_dirs() -> list[Path]:
    dirs = {p.parent for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}
    return sorted(dirs)


def _dotted(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_names() -> list[str]:
    # from the files, not pkgutil.walk_packages (which skips a package that fails to import)
    return sorted({_dotted(p) for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts})


def _declares_all(source: str) -> bool:
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in names):
            return True
    return False


PACKAGE_DIRS = _package_dirs()
MODULES = _module_names()


@pytest.mark.parametrize("folder", PACKAGE_DIRS, ids=[_dotted(d / "__init__.py") for d in PACKAGE_DIRS])
def test_every_package_declares_all(folder):
    init = folder / "__init__.py"
    assert init.is_file(), f"{folder.relative_to(ROOT.parent)} holds Python files but no __init__.py"
    assert _declares_all(init.read_text()), f"{_dotted(init)} has no __all__"
    module = importlib.import_module(_dotted(init))
    assert isinstance(module.__all__, (list, tuple)) and module.__all__, f"{_dotted(init)}.__all__ is empty"


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_imports(name):
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    assert public is not None, f"{name} declares no __all__ (every module states its public names)"
    assert all(isinstance(n, str) for n in public), f"{name}.__all__ holds a non-string"
    dupes = sorted({n for n in public if list(public).count(n) > 1})
    assert not dupes, f"{name}.__all__ lists {dupes} more than once"
    missing = [n for n in public if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names {missing}, which the module does not define"
    for n in public:
        getattr(module, n)


def test_star_import_of_every_package():
    """``from <package> import *`` works for every package (the names resolve)."""
    for folder in PACKAGE_DIRS:
        name = _dotted(folder / "__init__.py")
        namespace: dict = {}
        exec(f"from {name} import *", namespace)
        module = importlib.import_module(name)
        assert set(getattr(module, "__all__", ())) <= set(namespace), name
