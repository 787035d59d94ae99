"""The planner's persisted records: what a run writes and an evaluation reads.

A run folder ``seed-<seed>/`` holds ``requests.jsonl`` (one terminal record per
request, keys :data:`RECORD_KEYS`), ``paths.npz`` (the routes as returned) and
``references.npz`` (the qualified references, format :data:`REFERENCES_FORMAT`),
next to ``manifest.json``. ``passage_jax.run`` writes them, ``passage_jax.evaluate``
reads them; both take the formats, the route snapshot, the input and reference
identities and the provenance helpers from here. The npz files hold plain arrays
only (numbers, bools, fixed-width unicode); they load with ``allow_pickle=False``.

``paths.npz`` (one entry per record of ``requests.jsonl``, same order):

* ``record_index`` int64 (R,): the record's index (its line in requests.jsonl);
* ``route_format`` int8 (R,): :data:`ROUTE_FORMATS` code of what the planner returned;
* ``coords`` int32 (M, 2) and ``offsets`` int64 (R+1,): the routes stored
  exactly (format ``int``; other formats contribute no rows), record ``i`` is
  ``coords[offsets[i]:offsets[i+1]]``;
* ``raw_values`` float64 (K,), ``raw_offsets`` int64 (R+1,), ``raw_shape``
  unicode (R,), ``raw_dtype`` unicode (R,): the flattened values of a malformed
  but numeric route (formats ``float``, ``shape``, ``int_range``) as returned,
  never rounded or cast into ``coords``; ``raw_dtype`` is the returned array's
  ``dtype.str`` (``|b1``, ``|u1``, ``>i4``, ``<f2`` ...; for something no array holds,
  its type name) and ``raw_shape`` its shape (``"3x2"``, ``""`` for 0-d), two fields
  (a route snapshot carries them as the pair :func:`snapshot_route` returns);
* ``format`` unicode scalar ``"passage-jax-paths-v1"``.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import zipfile
import zlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from passage_jax.fileio import (
    NpzMember,
    NpzStreamWriter,
    array_sha256,
    atomic_file,
    planner_input_sha256,
)

__all__ = ["PATHS_FORMAT", "REFERENCES_FORMAT", "RUN_FORMAT", "REQUESTS_FORMAT", "RECORD_KEYS",
           "BATCH_RECORD_KEYS", "ROUTE_FORMATS", "ROUTE_FORMAT_CODE", "snapshot_route", "PathsWriter",
           "PathsReader", "load_paths", "route_of", "pack_routes", "unpack_routes", "read_requests",
           "input_hash", "references_identity", "code_hash", "package_versions", "RecordFileError",
           "npz_errors", "NPZ_READ_ERRORS", "open_npz", "route_description", "describe_route",
           "tasks_sha256", "tasks_sha256_of"]

PATHS_FORMAT = "passage-jax-paths-v1"
REFERENCES_FORMAT = "passage-jax-references-v1"
#: route_format codes
ROUTE_FORMATS = {
    0: "int",        # integer (L, 2) array stored exactly in coords (L may be 0)
    1: "none",       # the planner returned no route (None)
    2: "float",      # numeric but not an integer dtype (floats, bools): malformed
    3: "shape",      # numeric but not of shape (L, 2): malformed
    4: "int_range",  # integer coordinates beyond the int32 range: malformed
    5: "object",     # not convertible to a numeric array: malformed, nothing stored
}
ROUTE_FORMAT_CODE = {v: k for k, v in ROUTE_FORMATS.items()}
_I32 = np.iinfo(np.int32)


class RecordFileError(ValueError):
    """A persisted record file cannot be read: not a zip archive, truncated, a member
    missing or torn, or its structure inconsistent (the message names the file, and the
    member when known)."""


#: what reading a damaged ``.npz`` raises (numpy, zipfile, zlib)
NPZ_READ_ERRORS = (zipfile.BadZipFile, ValueError, EOFError, KeyError, zlib.error)


@contextlib.contextmanager
def npz_errors(path, member: str | None = None, error=RecordFileError):
    """Turn a damaged ``.npz`` read inside the block into ``error`` naming ``path`` (and
    ``member``); a :class:`RecordFileError` raised inside passes unchanged."""
    try:
        yield
    except RecordFileError:
        raise
    except NPZ_READ_ERRORS as e:
        what = f"{path} (member {member!r})" if member else f"{path}"
        text = str(e).strip() or type(e).__name__
        raise error(f"{what}: cannot be read, the file is truncated or corrupt "
                    f"({type(e).__name__}: {text})") from None


RUN_FORMAT = "passage-jax-run-v1"
REQUESTS_FORMAT = "passage-jax-requests-v1"
#: record keys, in the order they are written to requests.jsonl
RECORD_KEYS = ("record", "seed", "series", "repeat", "task_index", "sample_id", "quality",
               "status", "reported_status", "latency_ms", "returned_ms", "deadline_ms", "late",
               "overrun_ms", "work", "stage_work", "precision", "resource_peaks", "route_format",
               "route_len", "route_cost", "problem", "error_type", "error", "message",
               "sync_arrays", "worker", "resumed", "validation_recost_ms", "warm_complete",
               "torch_synchronized", "process_index", "host", "device", "route_stage")
#: The keys a record of the batched procedure (``batched_v1``) adds after
#: :data:`RECORD_KEYS`: the first record of its batch (the batch's identity), the declared
#: batch size, the batch's live scenes and its timed wall time (its ``latency_ms`` and
#: ``returned_ms`` are null: the procedure times batches, not requests).
BATCH_RECORD_KEYS = ("batch_first", "batch_size", "batch_live", "batch_ms")
#: packages whose versions every manifest and score receipt records
VERSIONED_PACKAGES = ("passage_jax", "jax", "jaxlib", "numpy", "scipy", "flax", "optax",
                      "pyarrow", "zstandard", "pyyaml", "rich")


# --------------------------------------------------------------------------- #
# identities and provenance
# --------------------------------------------------------------------------- #

def input_hash(task) -> str:
    """Identity of what a planner sees of a task: elevation, obstacles, start, goal
    (:func:`passage_jax.fileio.planner_input_sha256`)."""
    kept = getattr(task, "input_sha256", None)  # the stream's verified hash (computed once)
    return kept or planner_input_sha256(task.elevation_m, task.obstacles, task.scene.start,
                                        task.scene.goal)


def references_identity(sample_ids, c_star, coords, offsets, qualified) -> str:
    """Identity of a run's references (``references.npz`` ``identity``): sample ids,
    c*, packed reference routes and qualification flags."""
    ids = np.asarray(sample_ids, dtype=str).astype("U32")
    return array_sha256(ids, np.asarray(c_star, np.float64), np.asarray(coords, np.int32),
                        np.asarray(offsets, np.int64), np.asarray(qualified))


def code_hash(root=None) -> dict:
    """sha256 over the package source tree: every ``*.py`` under ``passage_jax/``
    in sorted relative-path order, hashing path and bytes."""
    root = Path(root) if root else Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    for p in files:
        rel = p.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return {"sha256": h.hexdigest(), "n_files": len(files), "root": "passage_jax"}


def package_versions() -> dict:
    """Installed versions of :data:`VERSIONED_PACKAGES` (None when absent)."""
    out = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def read_requests(path) -> list[dict]:
    """Records of a ``requests.jsonl`` (one JSON object per line); ValueError naming
    the line when one is not JSON."""
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {i + 1}: not JSON: {e}") from None
    return out


# --------------------------------------------------------------------------- #
# route snapshots
# --------------------------------------------------------------------------- #

def snapshot_route(path) -> tuple[int, np.ndarray | None, np.ndarray | None, tuple | None]:
    """Copy what a planner returned as its route, classifying it.

    Returns ``(format_code, int_route (L, 2) int32 or None, raw float64 values or
    None, description)``; the description is the pair ``(dtype, shape)``: the returned
    array's ``dtype.str`` (for something that is no array, its type name) and its shape
    as text (``"3x2"``; ``""`` for 0-d), two fields with no delimiter between them, so
    every NumPy dtype (``|b1``, ``|u1``, ``>i4`` ...) round-trips. Nothing is rounded,
    clipped or cast: a float (or bool) route keeps its values in ``raw`` and gets no
    integer route; an empty route is the empty integer route when its shape is ``(0,)``
    or ``(0, 2)``, malformed (``shape``) otherwise. Converting ``path`` runs the planner's
    code (``__array__``, ``__len__`` ...): what it raises, other than the ``ValueError`` or
    ``TypeError`` of something no array holds (format ``object``), propagates to the
    caller, which records it as the planner's failure.
    """
    if path is None:
        return ROUTE_FORMAT_CODE["none"], None, None, None
    try:
        a = np.array(path, copy=True)
    except (ValueError, TypeError):
        return ROUTE_FORMAT_CODE["object"], None, None, (type(path).__name__, "")
    desc = (a.dtype.str, "x".join(map(str, a.shape)))
    if a.dtype.kind not in "iufb":
        return ROUTE_FORMAT_CODE["object"], None, None, desc
    if a.size == 0:
        if a.shape in ((0,), (0, 2)):
            return ROUTE_FORMAT_CODE["int"], np.zeros((0, 2), np.int32), None, desc
        return ROUTE_FORMAT_CODE["shape"], None, np.zeros(0, np.float64), desc
    raw = a.astype(np.float64).ravel()
    if a.dtype.kind not in "iu":
        return ROUTE_FORMAT_CODE["float"], None, raw, desc
    if a.ndim != 2 or a.shape[1] != 2:
        return ROUTE_FORMAT_CODE["shape"], None, raw, desc
    if int(a.max()) > _I32.max or (a.dtype.kind == "i" and int(a.min()) < _I32.min):
        return ROUTE_FORMAT_CODE["int_range"], None, raw, desc
    return ROUTE_FORMAT_CODE["int"], a.astype(np.int32), None, desc


def route_description(desc) -> tuple[str, str]:
    """A snapshot's description as ``(dtype, shape)`` text fields: the pair
    :func:`snapshot_route` returns (a list once it went through JSON), ``("", "")`` for
    None, and a string ``"<dtype>|<shape>"`` of a journal written before the pair
    (split at its last ``|``: a shape has none, a dtype such as ``|b1`` may)."""
    if desc is None:
        return "", ""
    if isinstance(desc, (tuple, list)) and len(desc) == 2:
        return str(desc[0]), str(desc[1])
    dtype, sep, shape = str(desc).rpartition("|")
    return (dtype, shape) if sep else (shape, "")


def describe_route(desc) -> str:
    """A snapshot's description for a message: ``dtype |b1, shape 3x2``."""
    dtype, shape = route_description(desc)
    return f"dtype {dtype or '?'}, shape {shape or '()'}"


class PathsWriter:
    """Accumulates route snapshots in record order and writes ``paths.npz``.

    :meth:`add` keeps the routes in memory (small runs); :meth:`add_sizes` records only
    a route's format and sizes, and :meth:`write_streamed` then writes the file reading
    the routes again from their source, piece by piece (a run's journal: memory bounded
    whatever the number of records). Members are stored uncompressed, so a reader can
    take any record range by seeking (:class:`PathsReader`).
    """

    def __init__(self):
        self.formats: list[int] = []
        self.lengths: list[int] = []
        self.raw_lengths: list[int] = []
        self.raw_desc: list[tuple[str, str]] = []
        self.coords: list[np.ndarray] = []
        self.raw: list[np.ndarray] = []

    def add_sizes(self, fmt: int, n_cells: int, n_raw: int, desc) -> int:
        self.formats.append(int(fmt))
        self.lengths.append(int(n_cells))
        self.raw_lengths.append(int(n_raw))
        self.raw_desc.append(route_description(desc))
        return len(self.formats) - 1

    def add(self, fmt: int, route, raw, desc) -> int:
        r = route if route is not None else np.zeros((0, 2), np.int32)
        v = raw if raw is not None else np.zeros(0, np.float64)
        self.coords.append(r)
        self.raw.append(v)
        return self.add_sizes(fmt, len(r), len(v), desc)

    def _index_arrays(self) -> dict:
        n = len(self.formats)
        offsets = np.zeros(n + 1, np.int64)
        offsets[1:] = np.cumsum(self.lengths)
        raw_offsets = np.zeros(n + 1, np.int64)
        raw_offsets[1:] = np.cumsum(self.raw_lengths)
        dtypes = [d[0] for d in self.raw_desc]
        shapes = [d[1] for d in self.raw_desc]
        return {
            "format": np.array(PATHS_FORMAT),
            "record_index": np.arange(n, dtype=np.int64),
            "route_format": np.asarray(self.formats, np.int8),
            "offsets": offsets,
            "raw_offsets": raw_offsets,
            "raw_dtype": np.asarray(dtypes, dtype=str) if n else np.zeros(0, "<U1"),
            "raw_shape": np.asarray(shapes, dtype=str) if n else np.zeros(0, "<U1"),
        }

    def arrays(self) -> dict:
        """Every array of the file (routes added with :meth:`add`)."""
        out = self._index_arrays()
        n = len(self.formats)
        out["coords"] = (np.concatenate(self.coords).astype(np.int32).reshape(-1, 2) if n
                         else np.zeros((0, 2), np.int32))
        out["raw_values"] = (np.concatenate(self.raw).astype(np.float64) if n
                             else np.zeros(0, np.float64))
        return out

    def write(self, path) -> Path:
        """Write the routes added with :meth:`add`."""
        def feed(visit):
            for i, (r, v) in enumerate(zip(self.coords, self.raw)):
                visit(i, "", (None, r, v, None))
        return self.write_streamed(path, feed)

    def write_streamed(self, path, scan) -> Path:
        """Write the file, reading the routes again with ``scan(visit)``, which must call
        ``visit(index, line, (fmt, route, raw, desc))`` for every record in order (as
        :func:`passage_jax.run.execution.seed.scan_journal` does); the sizes must be those given
        to :meth:`add_sizes` (ValueError otherwise)."""
        idx = self._index_arrays()
        n_cells, n_raw = int(idx["offsets"][-1]), int(idx["raw_offsets"][-1])
        with atomic_file(path) as f, NpzStreamWriter(f) as z:
            for k, v in idx.items():
                z.add(k, v)
            for name, part, dtype, shape in (("coords", 1, np.int32, (n_cells, 2)),
                                             ("raw_values", 2, np.float64, (n_raw,))):
                with z.member(name, dtype, shape) as m:
                    if int(np.prod(shape)):
                        scan(lambda _i, _line, snap, m=m, part=part: (
                            None if snap[part] is None else m.write(snap[part])))
        return Path(path)


_INDEX_KEYS = ("format", "record_index", "route_format", "offsets", "raw_offsets", "raw_dtype",
               "raw_shape")


def _check_paths(path, d: dict, n_cells: int, n_raw: int) -> None:
    missing = [k for k in _INDEX_KEYS if k not in d]
    if missing:
        raise RecordFileError(f"{path}: missing arrays {missing}")
    if str(d.get("format")) != PATHS_FORMAT:
        raise RecordFileError(f"{path}: not a {PATHS_FORMAT} file (format={d.get('format')!r})")
    for k in _INDEX_KEYS[1:]:
        if np.ndim(d[k]) != 1:
            raise RecordFileError(f"{path}: member {k!r} is not one-dimensional")
    n = len(d["route_format"])
    if len(d["record_index"]) != n or len(d["raw_shape"]) != n or len(d["raw_dtype"]) != n:
        raise RecordFileError(f"{path}: the per-record arrays differ in length")
    if len(d["offsets"]) != n + 1 or d["offsets"][-1] != n_cells:
        raise RecordFileError(f"{path}: offsets do not match coords")
    if len(d["raw_offsets"]) != n + 1 or d["raw_offsets"][-1] != n_raw:
        raise RecordFileError(f"{path}: raw_offsets do not match raw_values")
    bad = [k for k in ("offsets", "raw_offsets") if n and (np.any(np.diff(d[k]) < 0) or d[k][0] != 0)]
    if bad:
        raise RecordFileError(f"{path}: member {bad[0]!r} does not rise from 0")
    unknown = sorted(set(np.asarray(d["route_format"]).tolist()) - set(ROUTE_FORMATS))
    if unknown:
        raise RecordFileError(f"{path}: member 'route_format' holds unknown code(s) {unknown}")


def open_npz(path, error=RecordFileError):
    """``np.load(path, allow_pickle=False)`` of an ``.npz`` archive (a context manager);
    a file that is not one, or is truncated or corrupt, raises ``error`` naming it."""
    with npz_errors(path, error=error):
        z = np.load(path, allow_pickle=False)
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise error(f"{path}: not an .npz archive (it holds a single {type(z).__name__})")
    return z


def _read_npz(path) -> dict:
    """Every member of an ``.npz`` (``allow_pickle=False``), a damaged file or member
    raising :class:`RecordFileError` naming it."""
    out = {}
    with npz_errors(path), open_npz(path) as z:
        for k in z.files:
            with npz_errors(path, k):
                out[k] = z[k]
    return out


def load_paths(path) -> dict:
    """Read ``paths.npz`` (``allow_pickle=False``) and check its structure
    (:class:`RecordFileError` naming the file and member otherwise)."""
    d = _read_npz(path)
    for k in ("coords", "raw_values"):
        if k not in d:
            raise RecordFileError(f"{path}: missing arrays {[k]}")
    _check_paths(path, d, len(d["coords"]), len(d["raw_values"]))
    return d


def _route(fmt_code: int, cells, raw, shape_text: str):
    fmt = ROUTE_FORMATS[int(fmt_code)]
    if fmt == "int":
        return cells
    if fmt in ("none", "object"):
        return None
    parts = [s for s in str(shape_text).split("x") if s]
    if not all(s.isdigit() for s in parts):  # written by an older evaluator: the flat values
        return raw
    shape = tuple(int(s) for s in parts)
    if not shape:  # a 0-d value: a one-element array (a route always has a length)
        return raw
    try:
        return raw.reshape(shape)
    except ValueError:
        return raw


def route_of(paths: dict, i: int):
    """The route of record ``i`` as the scorer should see it: the exact int32
    route for format ``int``, ``None`` for ``none``, and for a malformed route the
    raw values reshaped to their recorded shape in float64 (never cast to int; a 0-d
    value, or a shape an older file recorded unreadably, as the flat values)."""
    return _route(paths["route_format"][i], paths["coords"][paths["offsets"][i]:paths["offsets"][i + 1]],
                  paths["raw_values"][paths["raw_offsets"][i]:paths["raw_offsets"][i + 1]],
                  paths["raw_shape"][i])


class PathsReader:
    """Record ranges of a ``paths.npz`` read by seeking, without loading every route
    (memory: the per-record index plus the routes asked for). Files written before
    routes were stored uncompressed are read whole once (:class:`NpzMember`)."""

    def __init__(self, path):
        self.path = Path(path)
        with npz_errors(self.path), open_npz(self.path) as z:
            missing = [k for k in (*_INDEX_KEYS, "coords", "raw_values") if k not in z.files]
            if missing:
                raise RecordFileError(f"{self.path}: missing arrays {missing}")
            self.index = {}
            for k in _INDEX_KEYS:
                with npz_errors(self.path, k):
                    self.index[k] = z[k]
        with npz_errors(self.path, "coords"):
            self._coords = NpzMember(self.path, "coords")
        with npz_errors(self.path, "raw_values"):
            self._raw = NpzMember(self.path, "raw_values")
        _check_paths(self.path, self.index, len(self._coords), len(self._raw))

    def __len__(self) -> int:
        return len(self.index["route_format"])

    @property
    def route_format(self) -> np.ndarray:
        return self.index["route_format"]

    def routes_at(self, indices) -> list:
        """:func:`route_of` for the records ``indices`` (ascending), read one run of
        consecutive records at a time."""
        idx = np.asarray(indices, np.int64)
        out: list = []
        if idx.size == 0:
            return out
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        for run in np.split(idx, breaks):
            out += self.routes(int(run[0]), int(run[-1]) + 1)
        return out

    def routes(self, start: int, stop: int) -> list:
        """:func:`route_of` for records ``[start, stop)``."""
        ix = self.index
        o, ro = ix["offsets"], ix["raw_offsets"]
        with npz_errors(self.path, "coords"):
            cells = self._coords.rows(o[start], o[stop])
        with npz_errors(self.path, "raw_values"):
            raw = self._raw.rows(ro[start], ro[stop])
        with npz_errors(self.path, "raw_shape"):
            return [_route(ix["route_format"][i], cells[o[i] - o[start]:o[i + 1] - o[start]],
                           raw[ro[i] - ro[start]:ro[i + 1] - ro[start]], ix["raw_shape"][i])
                    for i in range(start, stop)]


def pack_routes(routes) -> tuple[np.ndarray, np.ndarray]:
    """Ragged integer routes -> (coords int32 (M, 2), offsets int64 (n+1,)); None -> empty."""
    arrs = [np.zeros((0, 2), np.int32) if r is None else np.asarray(r, np.int32).reshape(-1, 2)
            for r in routes]
    offsets = np.zeros(len(arrs) + 1, np.int64)
    offsets[1:] = np.cumsum([len(a) for a in arrs])
    coords = np.concatenate(arrs) if arrs else np.zeros((0, 2), np.int32)
    return coords.astype(np.int32).reshape(-1, 2), offsets


def unpack_routes(coords, offsets) -> list[np.ndarray]:
    return [coords[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def tasks_sha256(admitted) -> str:
    """sha256 over the tasks' ``sample_id:input_hash`` lines, in task order."""
    return tasks_sha256_of(admitted.sample_ids, admitted.input_hashes())


def tasks_sha256_of(sample_ids, input_hashes) -> str:
    """:func:`tasks_sha256` of the tasks' ids and input hashes, in task order."""
    h = hashlib.sha256()
    for sid, ih in zip(sample_ids, input_hashes):
        h.update(f"{sid}:{ih}\n".encode())
    return h.hexdigest()
