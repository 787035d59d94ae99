"""The checks a command makes of its named inputs before anything loads JAX.

``cli/__main__.py`` calls a command module's ``check(args)`` (when it has one) before it
sets up JAX's compilation cache or runs the command: a missing file or folder, a spec
that does not parse or fails its schema, or a planner module that cannot be found is
refused in well under a second, as one line ``<command>: <what>`` (exit 2). Nothing here
imports JAX, nor may anything a ``check`` calls (``tests/cli/test_friction.py`` checks
``run``).
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["InputError", "DATASET_NAMES", "require_file", "require_folder", "require_path",
           "require_dataset", "add_planner_path", "check_spec", "planner_folders_of", "planner_hint"]

#: ``--dataset-path`` values that name no folder
DATASET_NAMES = ("shipped",)


class InputError(ValueError):
    """A named input is missing, or arguments do not fit together (the message names them)."""


def _absent(path) -> bool:
    """Nothing at ``path``, not even a broken link (what is there, and whether it reads,
    the command itself checks and names)."""
    return path is not None and not os.path.lexists(path)


def require_file(path, what: str) -> None:
    """A named input file: ``<what> <path>: file not found`` when nothing is there."""
    if _absent(path):
        raise InputError(f"{what} {path}: file not found")


def require_folder(path, what: str) -> None:
    """A named input folder: ``<what> <path> does not exist`` when nothing is there."""
    if _absent(path):
        raise InputError(f"{what} {path} does not exist")


def require_path(path, what: str) -> None:
    """A named input file or folder: ``<what> <path>: no such file or folder``."""
    if _absent(path):
        raise InputError(f"{what} {path}: no such file or folder")


def require_dataset(path) -> None:
    """A ``--dataset-path`` that names a folder (not ``shipped``): ``dataset root <path> does
    not exist`` when nothing is there."""
    if path is not None and str(path) not in DATASET_NAMES:
        require_folder(path, "dataset root")


def add_planner_path(p) -> None:
    """``--planner-path DIR`` (repeatable) on a command that builds a spec's planner."""
    p.add_argument("--planner-path", action="append", default=[], metavar="DIR",
                   help="a folder searched for the spec's planner module (repeatable); the spec "
                        "file's own folder is searched first, then these in order, then "
                        "PYTHONPATH and the installed packages (docs/runner.md)")


def planner_hint(inference) -> str:
    """What to do when the planner module of entry point ``inference`` is not found."""
    module = str(inference).split(":")[0].split(".")[0]
    return (f"; put {module}.py (or the package {module}/) in the spec's folder, pass "
            f"--planner-path DIR naming its folder, or add that folder to PYTHONPATH")


def planner_folders_of(spec, args) -> tuple:
    """The folders searched first for ``spec``'s planner module: its file's folder, then
    each ``--planner-path`` (:func:`passage_jax.run.specification.planner_path.planner_folders`)."""
    from passage_jax.run.specification import planner_folders  # noqa: PLC0415 (CLI start-up)

    return planner_folders(spec.source, getattr(args, "planner_path", None) or ())


def check_spec(path, args, what: str = "spec"):
    """Read and validate the spec file ``path`` (JAX-free: :mod:`passage_jax.run.specification`) and
    check that its planner module can be found from the folders searched first (the
    spec's own, then ``--planner-path``); returns the :class:`~passage_jax.run.RunSpec`."""
    from passage_jax.run.specification import load_spec, planner_module_problem  # noqa: PLC0415 (CLI start-up)

    for folder in getattr(args, "planner_path", None) or ():
        if not Path(folder).is_dir():
            raise InputError(f"--planner-path {folder}: not a folder")
    spec = load_spec(path)
    problem = planner_module_problem(spec.inference, planner_folders_of(spec, args))
    if problem:
        raise InputError(f"{what} {path}: {problem}{planner_hint(spec.inference)}")
    return spec
