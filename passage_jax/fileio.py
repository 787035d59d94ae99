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

import contextlib
import datetime as _dt
import hashlib
import io
import json
import math
import os
import struct
import zipfile
from pathlib import Path

import numpy as np
import yaml

__all__ = [
    "fsync_dir",
    "utc_now", "sha256_file", "sha256_bytes", "check_sha256", "array_sha256", "jsonable", "to_json",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_write_npz", "npz_bytes",
    "read_document", "one_line", "planner_input_sha256", "atomic_file", "NpzStreamWriter", "NpzMember",
    "naming_file",
]


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-12-01T09:30:00+00:00``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


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
        # the array's own buffer (no copy); the same bytes as a.tobytes()
        h.update(a.tobytes() if a.dtype.hasobject else a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def planner_input_sha256(elevation_m, obstacles, start, goal) -> str:
    """Identity of what a planner sees of a task: elevation (metres, float64), obstacles
    (bool), start and goal (int64)."""
    return array_sha256(elevation_m, np.asarray(obstacles, bool), np.asarray(start, np.int64),
                        np.asarray(goal, np.int64))


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


@contextlib.contextmanager
def naming_file(path):
    """Re-raise an ``OSError`` raised inside the block without a file name (a write or
    fsync that hit a full disk) as the same error naming ``path``."""
    try:
        yield
    except OSError as e:
        if e.filename is None and type(e).__module__ == "builtins":
            raise type(e)(e.errno, e.strerror or str(e), str(path)) from e
        raise


@contextlib.contextmanager
def _atomic_open(path):
    path = Path(path)
    with naming_file(path):
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    try:
        with naming_file(path), open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        with naming_file(path):
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def fsync_dir(folder) -> None:
    """Make a folder's entries (created, renamed, removed files) durable, in the order
    they were made."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_file(path):
    """An open binary file at a temporary name beside ``path`` (a context manager); when
    the block ends without an error it is flushed, fsynced and moved onto ``path``,
    otherwise removed. For files written piece by piece (too large to build in memory)."""
    return _atomic_open(path)


def atomic_write_bytes(path, data: bytes) -> Path:
    with _atomic_open(path) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path, obj) -> Path:
    return atomic_write_text(path, to_json(obj) + "\n")


def npz_bytes(arrays: dict) -> bytes:
    """The bytes of a compressed npz of plain arrays (object dtypes refused)."""
    for k, v in arrays.items():
        if np.asarray(v).dtype.kind == "O":
            raise TypeError(f"npz array {k!r} has object dtype; only plain arrays are written")
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def atomic_write_npz(path, arrays: dict) -> Path:
    """Compressed npz of plain arrays (object dtypes refused), written atomically."""
    return atomic_write_bytes(path, npz_bytes(arrays))


class _MemberWriter:
    def __init__(self, fh, dtype, want: int, name: str):
        self._fh, self._dtype, self._want, self._name = fh, dtype, want, name
        self.wrote = 0

    def write(self, piece) -> None:
        b = np.ascontiguousarray(piece, self._dtype).tobytes()
        if self.wrote + len(b) > self._want:
            raise ValueError(f"npz member {self._name!r}: the pieces exceed the declared shape "
                             f"({self._want} bytes)")
        self._fh.write(b)
        self.wrote += len(b)


class NpzStreamWriter:
    """Writes an ``.npz`` member by member, each array streamed in pieces, without holding
    the arrays in memory. Members are stored uncompressed (so :class:`NpzMember` can read
    row ranges by seeking); ``np.load`` reads the file like any npz.

    Use inside :func:`atomic_file`::

        with atomic_file(path) as f, NpzStreamWriter(f) as z:
            z.add("a", small_array)
            z.add_pieces("coords", np.int32, (n, 2), pieces)
    """

    def __init__(self, fileobj):
        self._zip = zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED, allowZip64=True)

    def add(self, name: str, array) -> None:
        a = np.asarray(array)
        if a.dtype.kind == "O":
            raise TypeError(f"npz array {name!r} has object dtype; only plain arrays are written")
        self.add_pieces(name, a.dtype, a.shape, [a])

    def add_pieces(self, name: str, dtype, shape: tuple, pieces) -> None:
        """Member ``name`` of ``dtype`` and final ``shape``, from row pieces in order; the
        pieces must add up to exactly ``shape`` (ValueError otherwise)."""
        with self.member(name, dtype, shape) as m:
            for piece in pieces:
                m.write(piece)

    @contextlib.contextmanager
    def member(self, name: str, dtype, shape: tuple):
        """A writer for member ``name`` of ``dtype`` and final ``shape``: call its
        ``write(piece)`` with row pieces in order; when the block ends the pieces must
        have added up to exactly ``shape`` (ValueError otherwise)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(v) for v in shape)
        want = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                  "shape": shape}
        with self._zip.open(f"{name}.npy", "w", force_zip64=True) as m:
            np.lib.format.write_array_header_2_0(m, header)
            w = _MemberWriter(m, dtype, want, name)
            yield w
        if w.wrote != want:
            raise ValueError(f"npz member {name!r}: the pieces hold {w.wrote} bytes, the shape "
                             f"{shape} of {dtype} needs {want}")

    def close(self) -> None:
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NpzMember:
    """Row ranges of one array of an ``.npz`` read by seeking, without loading the array.

    A member stored uncompressed (as :class:`NpzStreamWriter` writes) is read in place;
    a compressed one (``np.savez_compressed``) is loaded whole once, so older files
    still read, without the memory bound.
    """

    _LOCAL = struct.Struct("<4sHHHHHIIIHH")  # zip local file header (30 bytes)

    def __init__(self, path, name: str):
        self.path = Path(path)
        self._whole = None
        with zipfile.ZipFile(self.path) as z:
            try:
                info = z.getinfo(f"{name}.npy")
            except KeyError:
                raise KeyError(f"{self.path}: no array {name!r}") from None
            stored = info.compress_type == zipfile.ZIP_STORED
        if not stored:
            with np.load(self.path, allow_pickle=False) as z:
                self._whole = z[name]
            self.shape, self.dtype = self._whole.shape, self._whole.dtype
            return
        with open(self.path, "rb") as f:
            f.seek(info.header_offset)
            fields = self._LOCAL.unpack(f.read(self._LOCAL.size))
            if fields[0] != b"PK\x03\x04":
                raise ValueError(f"{self.path}: member {name!r}: bad local header")
            f.seek(info.header_offset + self._LOCAL.size + fields[9] + fields[10])
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(f)
            if fortran:
                raise ValueError(f"{self.path}: member {name!r} is Fortran-ordered")
            self._data = f.tell()
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` along the first axis."""
        if self._whole is not None:
            return self._whole[start:stop]
        start, stop = max(0, int(start)), min(len(self), int(stop))
        n = max(0, stop - start)
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        with open(self.path, "rb") as f:
            f.seek(self._data + start * row)
            a = np.fromfile(f, self.dtype, n * row // max(self.dtype.itemsize, 1))
        return a.reshape((n, *self.shape[1:]))



class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``): a document of a few hundred
    bytes cannot expand into gigabytes of nested copies ("billion laughs")."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"YAML alias *{event.anchor} is refused (anchors and aliases are not "
                f"allowed)", event.start_mark)
        return super().compose_node(parent, index)


def one_line(text, limit: int = 300) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``limit`` characters with
    ``...``: what an error message may echo of a value or of a parser's report."""
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[:max(0, limit - 3)] + "..."


def _read_capped(p: Path, where: str, error, max_bytes: int | None) -> bytes:
    try:
        with open(p, "rb") as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{where}: cannot read: {e.strerror or e}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise error(f"{where}: larger than the {max_bytes:,}-byte limit for this document "
                    f"({max_bytes / (1 << 20):g} MiB); refused unread")
    return data


def read_document(path, error=ValueError, label: str = "", yaml_allowed: bool = False,
                  max_bytes: int | None = None):
    """Parse a JSON file (or, with ``yaml_allowed``, YAML unless the suffix is ``.json``).

    A missing or unreadable file, a file over ``max_bytes`` (when given), text that is not
    UTF-8, a YAML alias (refused: :class:`_NoAliasLoader`), a document nested too deeply
    or any parse failure raises ``error("<label> <path>: ...")``, on one line.
    """
    p = Path(path)
    where = f"{label} {p}" if label else str(p)
    if not p.is_file():
        raise error(f"{where}: file not found")
    data = _read_capped(p, where, error, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text ({e.reason} at byte {e.start}); a binary file?") from None
    kind = "cannot parse" if yaml_allowed else "not JSON"
    try:
        if yaml_allowed and p.suffix.lower() != ".json":
            return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
        return json.loads(text)
    except RecursionError:
        raise error(f"{where}: {kind}: nested too deeply") from None
    except (yaml.YAMLError, ValueError) as e:
        raise error(f"{where}: {kind}: {_parse_reason(e)}") from None


def _parse_reason(e: Exception) -> str:
    """A parser's report on one line: for YAML, what went wrong and where (line, column),
    without the echoed source snippet."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        what = "; ".join(x for x in (e.context, e.problem) if x)
        mark = e.problem_mark or e.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return one_line(what) + at
    return one_line(e)
