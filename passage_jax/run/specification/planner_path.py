"""Where a spec's planner module is looked for (docs/runner.md, "Where the planner module
is found").

A spec names its planner by module (``inference: my_planner:make_planner``). While a
command runs the spec, the folders of :func:`planner_folders` go on the front of
Python's import path (``sys.path``), in order: the spec file's own folder, then each
folder named with ``--planner-path``; the usual path follows (the working directory
under ``python -m``, ``PYTHONPATH``, the installed packages). :func:`planner_import_path`
holds them there for a block: the planner's import, its construction and its requests,
and a supervised worker, which starts with the path of the process that starts it.

Nothing here loads JAX: the CLI checks that the planner module can be found before it
loads JAX (:func:`planner_module_problem`), and the manifest's provenance records the
folders searched and the one that held the module (:func:`planner_path_record`).
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["planner_folders", "planner_import_path", "planner_module_problem",
           "planner_path_record"]

#: the folders :func:`planner_import_path` put first, for the duration of its block
_SEARCHED: contextvars.ContextVar = contextvars.ContextVar("planner_path", default=None)


def planner_folders(spec_source=None, extra=()) -> tuple[str, ...]:
    """The folders searched first for a spec's planner module, absolute, without repeats:
    the folder of the spec file ``spec_source`` (none for a spec that is not a file:
    ``None`` or ``"<dict>"``), then each of ``extra`` in order."""
    folders = []
    if spec_source and not str(spec_source).startswith("<"):
        folders.append(Path(spec_source).parent)
    folders.extend(Path(f) for f in extra)
    out: list[str] = []
    for f in folders:
        text = os.path.abspath(os.fspath(f))
        if text not in out:
            out.append(text)
    return tuple(out)


@contextlib.contextmanager
def planner_import_path(folders):
    """Within the block, ``folders`` come first on ``sys.path`` (in their order); on exit,
    the entries this block added are removed again (what else changed the path stays)."""
    added = [str(f) for f in folders]
    sys.path[:0] = added
    token = _SEARCHED.set(tuple(added))
    try:
        yield tuple(added)
    finally:
        _SEARCHED.reset(token)
        for f in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(f)


def _module_name(inference) -> str | None:
    if not isinstance(inference, str) or inference.count(":") != 1:
        return None
    return inference.split(":")[0] or None


def planner_module_problem(inference, folders) -> str | None:
    """Why the top-level module of entry point ``inference`` cannot be found with
    ``folders`` first on the import path (what was searched), or None when it can (or
    ``inference`` is not ``module:attr``, which the spec check reports). Nothing is
    imported: only the module's file is looked for."""
    module = _module_name(inference)
    if module is None:
        return None
    top = module.split(".")[0]
    with planner_import_path(folders):
        try:
            found = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            found = False
    if found:
        return None
    first = ", ".join(folders) if folders else "no folder"
    return (f"inference {inference!r}: cannot find module {top!r}: searched first {first}, "
            f"then Python's import path (the working directory, PYTHONPATH, the installed "
            f"packages)")


def _holder(module, folders) -> str | None:
    mod = sys.modules.get(module.split(".")[0]) if module else None
    where = getattr(mod, "__file__", None)
    if where is None:
        return None
    where = os.path.abspath(where)
    return next((f for f in folders if where.startswith(os.path.join(f, ""))), None)


def planner_path_record(inference) -> dict | None:
    """What a run's provenance records about the planner's import path: ``searched``, the
    folders :func:`planner_import_path` put first, and ``module_folder``, the one of them
    that holds the planner's module (None: it came from the rest of the import path); None
    outside such a block."""
    folders = _SEARCHED.get()
    if folders is None:
        return None
    return {"searched": list(folders), "module_folder": _holder(_module_name(inference), folders)}
