"""The PASSAGE v1.0 shard layout (contract §1): dataset roots, resolution and split folders,
the shard files of a split, and why a path is not a usable folder.

``<root>/<N>x<N>/<split>/*.parquet``; shards in sorted file-name order. A root, folder
or shard that cannot be used is a :class:`~passage_jax.data.validate.DataError` naming
it, never a fallback and never left out.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from passage_jax.checks import is_int
from passage_jax.data.scene import SPLITS, canonical_split
from passage_jax.data.validate import DataError

__all__ = [
    "SHIPPED", "dataset_root", "path_problem", "resolution_folder", "split_folder",
    "present_splits", "shard_files", "shipped_cohort_root",
]

#: Dataset root value naming the real-terrain cohort shipped inside the package
#: (a folder literally named ``shipped`` can be given as ``./shipped``).
SHIPPED = "shipped"


def _why(e: BaseException) -> str:
    """An exception as one line."""
    return " ".join(str(e).split()) or type(e).__name__


def _check_resolution(resolution) -> int:
    if not is_int(resolution) or resolution <= 0:
        raise DataError(f"resolution must be a positive integer, got {resolution!r}")
    return int(resolution)


def _check_n_samples(n_samples):
    if n_samples is None:
        return None
    if not is_int(n_samples) or n_samples < 0:
        raise DataError(f"n_samples must be a non-negative integer or None, got {n_samples!r}")
    return int(n_samples)


def _split(split: str) -> str:
    try:
        return canonical_split(split)
    except ValueError as e:
        raise DataError(str(e)) from None


def shipped_cohort_root() -> Path:
    """Root of the small real-terrain cohort shipped inside the package
    (resolutions 64, 128, 256; splits validation, calibration, test)."""
    return Path(__file__).resolve().parent / "cohort"


def path_problem(path: Path) -> str:
    """Why ``path`` is not a usable folder, as the end of a sentence naming it: "does
    not exist", a dangling symbolic link, a symbolic link loop, the operating
    system's reason, or "is not a directory"."""
    try:
        path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"is a symbolic link loop and cannot be resolved ({e.strerror})"
        return f"cannot be resolved ({e.strerror or _why(e)})"
    return "is not a directory"


def dataset_root(root) -> Path:
    """The local dataset root; DataError if it is not a usable folder (never a fallback),
    saying why (missing, a symbolic link loop, ...). ``"shipped"`` names
    :func:`shipped_cohort_root`."""
    if root is None:
        raise DataError("no dataset root given")
    if str(root) == SHIPPED:
        return shipped_cohort_root()
    p = Path(root).expanduser()
    if not p.is_dir():
        raise DataError(f"dataset root {p} {path_problem(p)}")
    return p


def resolution_folder(root, resolution: int) -> Path:
    r = _check_resolution(resolution)
    folder = dataset_root(root) / f"{r}x{r}"
    if not folder.is_dir():
        have = sorted(p.name for p in dataset_root(root).iterdir() if p.is_dir())
        raise DataError(f"resolution folder {folder} {path_problem(folder)} (the root holds {have})")
    return folder


def split_folder(root, resolution: int, split: str) -> Path:
    """``<root>/<N>x<N>/<split>`` (split aliases accepted); DataError if missing."""
    s = _split(split)
    folder = resolution_folder(root, resolution) / s
    if not folder.is_dir():
        raise DataError(f"split folder {folder} {path_problem(folder)} "
                        f"(present: {_split_dirs(folder.parent)})")
    return folder


def _split_dirs(folder: Path) -> list[str]:
    return [s for s in SPLITS if (folder / s).is_dir()]


def present_splits(root, resolution: int) -> list[str]:
    """Canonical split folders present under ``<root>/<N>x<N>``, in SPEC order. An entry
    named like a split that is not a usable folder (a file, a dangling or looping
    symbolic link) is a DataError naming it, never left out."""
    folder = resolution_folder(root, resolution)
    for s in SPLITS:
        p = folder / s
        if not p.is_dir() and (p.is_symlink() or p.exists()):
            raise DataError(f"split folder {p} {path_problem(p)}")
    return _split_dirs(folder)


def shard_files(root, resolution: int, split: str) -> list[Path]:
    """The split's ``*.parquet`` entries in sorted file-name order; DataError if none.

    Every entry is listed, also one that is not a readable file (a folder, a dangling
    or looping symbolic link): it fails when it is opened, naming it, rather than
    being left out.
    """
    folder = split_folder(root, resolution, split)
    files = sorted(folder.glob("*.parquet"), key=lambda p: p.name)
    if not files:
        raise DataError(f"split folder {folder} holds no *.parquet shards")
    return files
