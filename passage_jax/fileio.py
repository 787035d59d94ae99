"""Small file helpers shared by every stage: UTC timestamps, hashing, JSON with one
NaN policy, atomic writes and reading JSON/YAML documents.

Atomic writes go to a temporary name in the target's folder, are flushed and
fsynced, then moved into place with ``os.replace``: a reader sees the old file or
the new one, never a torn one.

NaN policy: :func:`jsonable` turns NaN and ±inf into ``None`` (JSON ``null``),
NumPy scalars and arrays into Python values, tuples into lists and mapping keys
into strings. :func:`to_json` keeps non-finite floats as written by Python's
``json`` (``NaN``) for the few files that document that; every versioned result
file is passed through :func:`jsonable` first.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import math
import os
from pathlib import Path

import numpy as np
import yaml

__all__ = [
    "utc_now", "sha256_file", "sha256_bytes", "check_sha256", "array_sha256", "jsonable", "to_json",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_write_npz",
    "read_document",
]


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-12-01T09:30:00+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def sha256_file(path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(path, expected: str, error=ValueError, *, what: str = "file",
                 recorded_by: str = "the record", remedy: str = "") -> str:
    """The file's sha256, after checking it exists and equals ``expected``.

    A missing file raises ``error("<what> <path> is missing: the file does not exist")``
    and a different digest ``error("<what> <path>: sha256 <got> differs from the <expected>
    recorded by <recorded_by>")``; ``remedy`` (e.g. "; rebuild it with ...") ends both.
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} is missing: the file does not exist{remedy}")
    got = sha256_file(path)
    if got != expected:
        raise error(f"{what} {path}: sha256 {got} differs from the {expected} recorded by "
                    f"{recorded_by}{remedy}")
    return got


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def array_sha256(*arrays) -> str:
    """Hash of arrays' dtypes, shapes and bytes (identity of request inputs)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def jsonable(x):
    """A JSON-ready copy of ``x``: NaN/±inf -> None, NumPy values -> Python values,
    tuples -> lists, mapping keys -> strings, paths -> strings."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Path):
        return str(x)
    return x


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def to_json(obj, indent: int | None = 2) -> str:
    """Sorted-key JSON text; NumPy values and paths are converted, NaN kept as ``NaN``."""
    return json.dumps(obj, indent=indent, sort_keys=True, default=_json_default, allow_nan=True)


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def atomic_write_bytes(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> Path:
    return atomic_write_text(path, to_json(obj) + "\n")


def atomic_write_npz(path, arrays: dict) -> Path:
    """Compressed npz of plain arrays (object dtypes refused), written atomically."""
    for k, v in arrays.items():
        if np.asarray(v).dtype.kind == "O":
            raise TypeError(f"npz array {k!r} has object dtype; only plain arrays are written")
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


def read_document(path, error=ValueError, label: str = "", yaml_allowed: bool = False):
    """Parse a JSON file (or, with ``yaml_allowed``, YAML unless the suffix is ``.json``).

    A missing file or a parse failure raises ``error("<label> <path>: ...")``.
    """
    p = Path(path)
    where = f"{label} {p}" if label else str(p)
    if not p.is_file():
        raise error(f"{where}: file not found")
    text = p.read_text()
    try:
        if yaml_allowed and p.suffix.lower() != ".json":
            return yaml.safe_load(text)
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise error(f"{where}: {'cannot parse' if yaml_allowed else 'not JSON'}: {e}") from None
