"""Run folders: where a run writes, what refuses a folder, the lock of a running folder,
and what a launch that failed early leaves behind.

The output folder is made absolute before anything else (:func:`output_folder`: a
planner that changes the working directory cannot move it), refused by name when the
OS cannot make it a folder (a symbolic-link loop, a parent that is a file,
``/dev/null/x``), refused when it already holds something (:func:`holds_run`) and
refused when it is inside the dataset root (:func:`refuse_inside_dataset`). A new run
that fails before its first durable record leaves the folder as it found it apart from
its ``resolved_protocol`` records (:func:`undo_launch`).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

from passage_jax.data.reader import SHIPPED, shipped_cohort_root
from passage_jax.fileio import fsync_dir
from passage_jax.protocol.runfolder import (
    JOURNAL,
    LOCK,
    PARTIAL_SEED_PREFIX,
    RUN_STARTED,
    RUN_SUMMARY,
    SEED_FOLDER_PREFIX,
    is_partial_seed_folder_name,
)
from passage_jax.run.errors import OutputFolderTaken, ResumeError, RunError
from passage_jax.run.record.journal import JOURNAL_HEADER
from passage_jax.run.record.launch_record import is_protocol_file
from passage_jax.run.specification import RunSpec, load_spec

__all__ = ["output_folder", "create_folder",
           "remove_created", "refuse_inside_dataset", "holds_run", "spec_and_output", "local_root",
           "locked", "holds_records", "undo_launch", "remove_temporaries"]



def _is_run_entry(name: str) -> bool:
    return name.startswith((SEED_FOLDER_PREFIX, PARTIAL_SEED_PREFIX)) or name in (RUN_SUMMARY, RUN_STARTED)


def _os_problem(folder: Path) -> str | None:
    """Why the OS cannot let ``folder`` be a folder (a symbolic-link loop, a parent that is
    not a folder, a link to nothing), or None (it is a folder, a file, or can be created)."""
    try:
        os.stat(folder)
    except FileNotFoundError:
        if os.path.islink(folder):
            return f"output folder {folder} is a symbolic link to a missing target"
        return None
    except OSError as e:
        return f"output folder {folder} cannot be used: {e.strerror or e}"
    except ValueError as e:  # an embedded NUL byte
        return f"output folder {folder!r} cannot be used: {e}"
    return None


def output_folder(output) -> Path:
    """``output`` as an absolute path (``os.path.abspath``: nothing a planner does to the
    working directory moves it), after checking that the OS can let it be a folder:
    :class:`RunError` naming the path and the OS reason otherwise (a symbolic-link loop,
    a parent that is a file such as ``/dev/null/x``, a link to nothing, an empty path)."""
    text = os.fspath(output)
    if not isinstance(text, str) or not text.strip():
        raise RunError(f"output folder {text!r}: an empty path names no folder")
    folder = Path(os.path.abspath(text))
    why = _os_problem(folder)
    if why:
        raise RunError(why)
    return folder


def create_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns the folders created (outermost
    first). :class:`RunError` naming the folder and the OS reason when one cannot be made
    (``/proc/x``, a read-only file system, a parent that is a file)."""
    folder = Path(folder)
    missing = []
    p = folder
    while not (p.exists() or p.is_symlink()) and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            remove_created(made)
            raise RunError(f"output folder {folder}: cannot create {p}: {e.strerror or e}") from None
        made.append(p)
    if not folder.is_dir():
        why = _os_problem(folder) or f"output folder {folder} exists and is not a folder"
        raise RunError(why)
    return made


def remove_created(made: list[Path]) -> None:
    """Remove the folders of ``made`` (outermost first) that are empty, innermost first."""
    for p in reversed(made):
        with contextlib.suppress(OSError):
            p.rmdir()


def refuse_inside_dataset(output, root, what: str = "output folder") -> None:
    """:class:`RunError` when ``output`` is the dataset root or inside it (symbolic links
    followed): a run never writes into the data it and every later run read."""
    if root is None:
        return
    out, data = os.path.realpath(output), os.path.realpath(root)
    if out == data or out.startswith(data.rstrip(os.sep) + os.sep):
        raise RunError(f"{what} {output} is inside the dataset root {root}; a run never writes "
                       f"into the data it reads: choose a folder outside it")


def holds_run(folder) -> str | None:
    """Why ``folder`` cannot receive a new run (it exists and is not empty, or the OS
    cannot let it be a folder), or None."""
    folder = Path(folder)
    why = _os_problem(folder)
    if why:
        return why
    if folder.exists() and not folder.is_dir():
        return f"{folder} exists and is not a folder"
    if folder.is_dir():  # the launch records of a dry run do not make a folder taken
        try:
            entries = sorted(p.name for p in folder.iterdir() if not is_protocol_file(p.name))
        except OSError as e:
            return f"output folder {folder} cannot be listed: {e.strerror or e}"
        if entries:
            what = "already holds a run" if any(_is_run_entry(e) for e in entries) else "is not empty"
            return f"output folder {folder} {what} ({', '.join(entries[:5])}); choose a new folder"
    return None


def spec_and_output(spec: RunSpec | str | os.PathLike, output) -> tuple[RunSpec, Path]:
    """The spec (loaded and validated when given as a path) and the output folder, which
    must be new or empty (:class:`OutputFolderTaken` otherwise)."""
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = output_folder(output)
    why = holds_run(output)
    if why:
        raise OutputFolderTaken(why)
    refuse_inside_dataset(output, local_root(spec))
    return spec, output


def local_root(spec: RunSpec):
    """The dataset root a spec's local ``dataset_path`` names (nothing is read or checked:
    admission does that), None for a hub dataset (its root is known after admission)."""
    if spec.dataset_path is None:
        return None
    if str(spec.dataset_path) == SHIPPED:
        return shipped_cohort_root()
    return Path(spec.dataset_path).expanduser()


@contextlib.contextmanager
def locked(output: Path):
    """Hold the folder's lock file while the block runs (:class:`ResumeError` when another
    process holds it); the lock file is removed afterwards."""
    path = output / LOCK
    fh = open(path, "a")  # held open for the run
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResumeError(f"{output}: another process is running this folder "
                              f"({LOCK} is locked)") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
    finally:
        fh.close()


def holds_records(output: Path) -> bool:
    """Whether a run folder holds a completed seed or a journal with any entry (what a
    resume keeps)."""
    for p in output.iterdir():
        if p.name.startswith(SEED_FOLDER_PREFIX) and p.is_dir():
            return True
        if is_partial_seed_folder_name(p.name):
            j = p / JOURNAL
            if j.is_file() and j.stat().st_size > len(JOURNAL_HEADER):
                return True
    return False


def undo_launch(output: Path, created: list[Path], started: bool) -> None:
    """After a launch failed: a new run that wrote its ``run_started.json`` (``started``)
    and no durable record leaves nothing of itself (``run_started.json``, seed folders in
    progress, the lock) but its ``resolved_protocol`` records; folders this launch created
    are removed when empty. A folder holding records keeps everything (``--resume``
    continues it)."""
    with contextlib.suppress(OSError):
        if started and output.is_dir() and not holds_records(output):
            for p in output.iterdir():
                if is_partial_seed_folder_name(p.name) and p.is_dir():
                    shutil.rmtree(p)
                elif p.name in (RUN_STARTED, LOCK) or p.name.startswith(f".{RUN_STARTED}.tmp-"):
                    p.unlink()
            fsync_dir(output)
    remove_created(created)


def _is_temporary(p: Path) -> bool:
    """A temporary file of an interrupted atomic write (``.<name>.tmp-<pid>``)."""
    return p.is_file() and p.name.startswith(".") and ".tmp-" in p.name


def remove_temporaries(folder: Path) -> None:
    """Remove the temporary files of interrupted atomic writes in ``folder``."""
    for p in folder.iterdir():
        if _is_temporary(p):
            p.unlink()
