"""One seed of a run, from its folder in progress to its files: the requests in order, the
durable journal of their records, the seed's state, the requests executed on a planner
build (in this process, or shared out across the processes of a launch) and the seed's
files built from the journal. :func:`run_seed_folder` is the seed's story top to bottom:
its folder prepared, its state and journal opened (a resumed seed keeps every complete
entry), the missing requests run, then :func:`finish_seed` writes ``requests.jsonl``,
``paths.npz``, ``references.npz`` and ``manifest.json`` (the manifest's content:
:mod:`passage_jax.run.record`).

**The requests in order.** The requests of one seed in execution order: the timing series as
passes over the tasks (a cold pass, ``latency_warmup`` recorded warm-up passes,
``latency_repeats`` measured warm repeats; under a session timing profile one warm pass, its
warm-up being the session's untimed calls), and the check that a journal entry is the
request it stands for. Passes and requests are computed from the counts when asked for (an
index, a generator), never listed up front, so memory does not grow with
``latency_repeats``.

**The journal.** The durable record journal of a seed in progress (``records.journal``).

Every completed request is appended to the journal of its seed folder and handed to
the operating system (written and flushed) before the next request starts, so a killed
process loses at most the request that was executing. The journal is fsynced at most
:data:`SYNC_INTERVAL_S` after an append, and when it is closed: a power cut or an
operating-system crash loses at most the records of that last interval, which
``run --resume`` runs again (one fsync a request cost a campaign of 240,000 requests
minutes on a busy disk). The final files of a
seed (``requests.jsonl``, ``paths.npz``) are built from the journal when the seed
completes, and rebuilt from it when a resumed run finds them torn.

File layout: the header line :data:`JOURNAL_HEADER`, then one entry per record::

    b"PJE1" | payload length (uint64 LE) | crc32 of payload (uint32 LE) | payload

    payload = meta length (uint32 LE) | meta (JSON, UTF-8)
              | the record's requests.jsonl line (UTF-8, no newline)
              | route cells (int32 LE, row-major (L, 2)) | raw values (float64 LE)

``meta`` holds ``line`` (bytes of the line), ``fmt`` (route format code),
``desc`` (the raw ``[dtype, shape]`` description, or null; a journal written before
it was a pair holds one ``"dtype|shape"`` string), ``route`` (rows of the
integer route, -1 for none) and ``raw`` (number of raw values, -1 for none): the
route snapshot of :func:`passage_jax.protocol.records.snapshot_route` round-trips
exactly, malformed float values and shapes included.

A reader accepts every entry whose length and checksum match. A last entry that
is cut short, or whose checksum fails, is a torn tail (a write the process did not
finish): :func:`scan_journal` reports it and :meth:`Journal.open` truncates it. A
bad entry followed by further entries is corruption, never a torn tail, and is
refused.

**The seed's state.** The state of one seed folder (``seed_state.json``): when the seed
started, every planner build, every resume and every repair of its final files.

:class:`SeedState` is immutable: each transition (:meth:`SeedState.with_build`,
:meth:`SeedState.with_build_finished`, :meth:`SeedState.with_resume`,
:meth:`SeedState.with_repair`) returns a new state, and :func:`save_state` is the one
place that writes the file. The manifest's ``resume`` block is built from it.

**The working directory.** The run's working directory, kept for the planner's calls in the
run's process.

**The requests executed.** A seed's requests, executed one at a time on one planner build
and journalled.

The planner is built (not timed); under a session timing profile the session's warm-up
calls run next (:mod:`passage_jax.run.execution.sessions`). The build is recorded in the seed state
(with its session entry), every missing request runs and its record is appended to the
journal (written and flushed before the next request starts; fsynced within half a
second), then the build records what the executor saw and what it compiled in the run's
process. :func:`serve_requests` is that
build and its requests with the records handed to any sink: the journal here, a process's
share of a seed in a multi-process session run (this module).

A record's ``warm_complete``: under a session profile the executor's (the session or
worker serving it completed its ``session_warmup`` calls); under the default profile a
warm-series record when ``latency_warmup >= 1`` and the planner build serving it ran the
warm-up passes (a build a resume started after the first warm-up request did not).

**Shared out across processes.** One-pass runs across processes: under a session timing
profile, each process of a multi-process launch runs its own persistent session on its share
of a seed's roster (under the batched procedure, its own planner build on its share of the
batches), and process 0 writes the seed.

Under a session timing profile (:mod:`passage_jax.run.execution.sessions`) or the batched
procedure (:mod:`passage_jax.run.execution.sessions`) in a multi-process launch
(:mod:`passage_jax.cluster`) :func:`splits_requests` is true, and a seed's missing
records ``[first, T)`` (``first``: the records already durable in process 0's journal, 0
for a new seed) are shared out, contiguous, in process order: in whole chunks of the
admission chunk size under a session profile (:func:`passage_jax.cluster.chunk_share_from`,
the rule ``score`` uses), in whole batches counted from ``first`` under the batched
procedure (the batches a single process would run). Each process builds its planner on
its own local devices, runs the warm-up calls (batches) on the warm-up scene (the same
for every process), then its
share's requests in roster order (:func:`serve_requests`),
keeping the records and route snapshots in memory. The shares are gathered
(:func:`passage_jax.cluster.run_share`); process 0 records one planner build (one
session) per process that served records, appends the records to the seed's journal in
roster order (their indices are the roster's, as in a single process) and writes the
seed files as a single-process run does.

Process 0 leads (:class:`Leader`): before each seed it runs it sends the others its word
(a gather whose payload is process 0's): the seed, its first missing record (so every
process agrees on what is durable), the spec, code and warm-up scene they must share; at
the end its last word (done, or its failure). A seed that process 0 keeps (complete, or
with a complete journal) is never announced. The others follow (:func:`follow`): they
write nothing and need no access to the run folder.

Failures: a share that raises sends its error, and every process fails naming the
process, the seed and its tasks (scenes); a process that dies makes the others' gather
fail naming it (:class:`~passage_jax.cluster.PeerLost`); a failure of process 0 outside
a share (a resume refused, a file it cannot write) is sent to the others, which fail
naming process 0. Nothing of a seed's shares is durable before they are gathered: a
launch that fails mid-seed leaves what was durable before it, and ``run --resume``
shares out the missing records again.

**The seed's files.** The files of a finished seed, built from its journal:
``requests.jsonl``, ``paths.npz``, ``references.npz`` and ``manifest.json`` (formats in
:mod:`passage_jax.protocol.records` and ``docs/runner.md``).

The journal is read entry by entry (three passes: the records and the route sizes,
the route cells, the raw values of malformed routes), so memory stays bounded
whatever the number of records."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from passage_jax import cluster, fileio
from passage_jax.compilation import CompileCounter
from passage_jax.fileio import (
    atomic_write_bytes,
    atomic_write_json,
    fsync_dir,
    naming_file,
    read_document,
    sha256_file,
    utc_now,
)
from passage_jax.protocol.records import BATCH_RECORD_KEYS, RECORD_KEYS, PathsWriter
from passage_jax.protocol.runfolder import (
    JOURNAL,
    MANIFEST,
    PATHS,
    REFERENCES,
    REQUESTS,
    RUN_FILES,
    SEED_STATE,
    remove_temporaries,
)
from passage_jax.run.admission import Admitted
from passage_jax.run.context import RunContext
from passage_jax.run.errors import ResumeError, RunError
from passage_jax.run.execution.sessions import PlannerBuildError, open_executor
from passage_jax.run.progress import ProgressEvent
from passage_jax.run.record import SeedFiles, references_npz, seed_manifest
from passage_jax.run.specification.parse import RunSpec

__all__ = ["SERIES", "passes", "n_passes", "pass_at", "RequestPlan", "check_entry", "JOURNAL_HEADER",
           "JournalError", "JournalScan", "Journal", "encode_entry", "decode_entry", "scan_journal",
           "SYNC_INTERVAL_S", "SEED_STATE_FORMAT", "Build", "SeedState", "load_state", "save_state",
           "WorkingDirectory", "execute_requests", "serve_requests", "report", "share_of", "Leader",
           "leading", "execute_shared", "follow", "clear_leftovers", "finish_seed", "run_seed_folder"]


# ---- the requests in order -----------------------------------------------------------------

SERIES = ("cold", "warmup", "warm")


def n_passes(spec: RunSpec) -> int:
    """How many passes a seed makes: 1 under a one-pass profile (a session, the batched
    procedure), else 1 + warm-up + repeats."""
    if spec.one_pass:
        return 1
    return 1 + spec.latency_warmup + spec.latency_repeats


def pass_at(spec: RunSpec, p: int) -> tuple[str, int]:
    """Pass ``p`` (in execution order) as ``(series, repeat index)``, computed from the
    counts: ``cold#0``, then ``warmup#0..W-1``, then ``warm#0..R-1`` (a session profile:
    ``warm#0`` only; so the batched procedure)."""
    if not 0 <= p < n_passes(spec):
        raise IndexError(f"pass {p} of a seed of {n_passes(spec)} passes")
    if spec.one_pass:
        return ("warm", 0)
    if p == 0:
        return ("cold", 0)
    if p <= spec.latency_warmup:
        return ("warmup", p - 1)
    return ("warm", p - 1 - spec.latency_warmup)


def passes(spec: RunSpec) -> Iterator[tuple[str, int]]:
    """The timing series as (series, repeat index) passes, in execution order (a session
    profile: one warm pass, no cold pass), generated one at a time: nothing is built up
    front, whatever the counts."""
    return (pass_at(spec, p) for p in range(n_passes(spec)))


class RequestPlan:
    """The seed's requests in execution order: request ``i`` is pass ``i // T`` on task
    ``i % T``, as ``(series, repeat, task index, sample id)`` (computed on demand from the
    counts: nothing per pass or per request is held)."""

    def __init__(self, spec: RunSpec, stubs):
        self.spec = spec
        self.n_passes = n_passes(spec)
        self.stubs = stubs

    def __len__(self) -> int:
        return self.n_passes * len(self.stubs)

    def __getitem__(self, i: int) -> tuple:
        if not 0 <= i < len(self):
            raise IndexError(f"request {i} of a seed of {len(self)} requests")
        series, rep = pass_at(self.spec, i // len(self.stubs))
        ti = i % len(self.stubs)
        return series, rep, ti, self.stubs[ti].id

    def check_count(self, i: int, where) -> None:
        """:class:`ResumeError` when a journal holds an entry ``i`` past the last request."""
        if i >= len(self):
            raise ResumeError(f"{where}: more than {len(self)} entries for a seed of {len(self)} "
                              f"requests")


def check_entry(rec: dict, i: int, seed: int, row: tuple, where) -> None:
    """:class:`ResumeError` unless journal entry ``i`` is the record of request ``row``."""
    series, rep, ti, sample_id = row
    want = {"record": i, "seed": int(seed), "series": series, "repeat": rep, "task_index": ti,
            "sample_id": sample_id}
    got = {k: rec.get(k) for k in want}
    if got != want:
        raise ResumeError(f"{where}: entry {i} is {got}, the spec's request {i} is {want}; "
                          f"the journal does not belong to this run")


# ---- the journal ---------------------------------------------------------------------------

#: seconds at most between an append and the journal's fsync
SYNC_INTERVAL_S = 0.5
JOURNAL_HEADER = b"passage-jax-journal-v1\n"
_MAGIC = b"PJE1"
_HEAD = struct.Struct("<4sQI")  # magic, payload length, crc32
_META = struct.Struct("<I")


class JournalError(ValueError):
    """A journal is not a journal, or is corrupt before its last entry."""


def encode_entry(line: str, snap: tuple) -> bytes:
    """One journal entry (header and payload) for a record line and its route snapshot."""
    fmt, route, raw, desc = snap
    lb = line.encode("utf-8")
    rb = b"" if route is None else np.ascontiguousarray(route, "<i4").reshape(-1, 2).tobytes()
    vb = b"" if raw is None else np.ascontiguousarray(raw, "<f8").ravel().tobytes()
    meta = json.dumps({"line": len(lb), "fmt": int(fmt), "desc": desc,
                       "route": -1 if route is None else len(rb) // 8,
                       "raw": -1 if raw is None else len(vb) // 8},
                      separators=(",", ":")).encode()
    payload = _META.pack(len(meta)) + meta + lb + rb + vb
    return _HEAD.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def decode_entry(payload: bytes) -> tuple[str, tuple]:
    """``(line, snapshot)`` of an entry's payload (checksum already verified)."""
    (n,) = _META.unpack_from(payload, 0)
    meta = json.loads(payload[_META.size:_META.size + n])
    pos = _META.size + n
    line = payload[pos:pos + meta["line"]].decode("utf-8")
    pos += meta["line"]
    route = raw = None
    if meta["route"] >= 0:
        nb = meta["route"] * 8
        route = np.frombuffer(payload, "<i4", meta["route"] * 2, pos).reshape(-1, 2).astype(np.int32)
        pos += nb
    if meta["raw"] >= 0:
        raw = np.frombuffer(payload, "<f8", meta["raw"], pos).astype(np.float64)
        pos += meta["raw"] * 8
    if pos != len(payload):
        raise JournalError(f"entry payload holds {len(payload) - pos} unexplained bytes")
    desc = meta["desc"]  # the (dtype, shape) pair went through JSON as a list
    return line, (int(meta["fmt"]), route, raw, tuple(desc) if isinstance(desc, list) else desc)


@dataclasses.dataclass
class JournalScan:
    """What :func:`scan_journal` found: the complete entries (unless a visitor took
    them), the byte offset where they end, the file size, when the tail is torn, why,
    and the number of complete entries."""

    entries: list
    good_bytes: int
    size: int
    torn: str | None
    count: int = -1

    def __post_init__(self):
        if self.count < 0:
            self.count = len(self.entries)

    @property
    def torn_bytes(self) -> int:
        return self.size - self.good_bytes


def scan_journal(path, visit=None) -> JournalScan:
    """Read every complete entry of a journal; a torn last entry is reported, not read.

    The file is read entry by entry. Without ``visit`` the decoded entries are kept in
    ``entries``; with ``visit(index, line, snapshot)`` each entry is handed over as it
    is read and nothing is kept (memory bounded by one entry, whatever the journal's
    size). A file shorter than the header line (a journal whose creation was cut
    short) reads as empty with its bytes torn. JournalError for a file that is not a
    journal or is corrupt before its last entry, naming the file and offset.
    """
    path = Path(path)
    size = path.stat().st_size
    entries: list = []
    count = 0

    def done(pos, torn):
        return JournalScan(entries, pos, size, torn, count)

    with open(path, "rb") as f:
        head = f.read(len(JOURNAL_HEADER))
        if len(head) < len(JOURNAL_HEADER) and JOURNAL_HEADER.startswith(head):
            return done(0, "journal header cut short" if size else None)
        if head != JOURNAL_HEADER:
            raise JournalError(f"{path}: not a record journal (header {head!r})")
        pos = len(JOURNAL_HEADER)
        while pos < size:
            where = f"{path}: offset {pos} (entry {count})"
            h = f.read(_HEAD.size)
            if len(h) < _HEAD.size:
                if _MAGIC.startswith(h[:4]):
                    return done(pos, f"entry {count}: header cut short ({len(h)} of "
                                     f"{_HEAD.size} bytes)")
                raise JournalError(f"{where}: bad entry marker {h[:4]!r}")
            magic, n, crc = _HEAD.unpack(h)
            if magic != _MAGIC:
                raise JournalError(f"{where}: bad entry marker {magic!r}")
            end = pos + _HEAD.size + n
            if end > size:
                return done(pos, f"entry {count}: {size - pos - _HEAD.size} of {n} payload "
                                 f"bytes written")
            payload = f.read(n)
            if zlib.crc32(payload) != crc:
                if end == size:
                    return done(pos, f"entry {count}: checksum mismatch in the last entry")
                raise JournalError(f"{where}: checksum mismatch before the last entry")
            try:
                line, snap = decode_entry(payload)
            except (ValueError, KeyError, UnicodeDecodeError) as e:
                raise JournalError(f"{where}: {e}") from None
            if visit is None:
                entries.append((line, snap))
            else:
                visit(count, line, snap)
            count += 1
            pos = end
    return done(pos, None)


class Journal:
    """An open journal: :meth:`append` makes one record durable (write, flush, fsync)."""

    def __init__(self, path: Path, n_entries: int, fh):
        self.path = path
        self.n_entries = n_entries
        self._f = fh
        self._synced = time.monotonic()
        self._pending = False  # appended since the last fsync

    @classmethod
    def open(cls, path, visit=None) -> tuple[Journal, JournalScan]:
        """Open (creating, or recovering) the journal at ``path`` for appending.

        An existing journal is scanned (``visit`` as in :func:`scan_journal`); a torn tail
        is truncated away (the scan says what was dropped). Returns the journal and the
        scan of what it held.
        """
        path = Path(path)
        if path.exists():
            scan = scan_journal(path, visit)
        else:
            scan = JournalScan([], 0, 0, None)
        if scan.good_bytes < len(JOURNAL_HEADER):  # new, or its header was cut short
            atomic_write_bytes(path, JOURNAL_HEADER)
            fsync_dir(path.parent)
        elif scan.torn is not None:
            with open(path, "r+b") as f:
                f.truncate(scan.good_bytes)
                f.flush()
                os.fsync(f.fileno())
        fh = open(path, "ab")  # held open until close()
        return cls(path, scan.count, fh), scan

    def append(self, line: str, snap: tuple) -> int:
        """Append one record (written and flushed: a killed process keeps it; fsynced when
        :data:`SYNC_INTERVAL_S` passed since the last fsync); returns its index in the
        journal. A write that fails (a full disk) raises the ``OSError`` naming the
        journal; what it left is a torn tail that ``run --resume`` drops."""
        with naming_file(self.path):
            self._f.write(encode_entry(line, snap))
            self._f.flush()
            self._pending = True
            if time.monotonic() - self._synced >= SYNC_INTERVAL_S:
                self.sync()
        self.n_entries += 1
        return self.n_entries - 1

    def sync(self) -> None:
        """fsync what was appended since the last fsync."""
        if self._pending and not self._f.closed:
            with naming_file(self.path):
                os.fsync(self._f.fileno())
            self._pending = False
        self._synced = time.monotonic()

    def close(self) -> None:
        if not self._f.closed:
            self.sync()
            with naming_file(self.path):
                self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- the seed's state ----------------------------------------------------------------------

#: per-seed state: start time, planner builds, resumes and repairs
SEED_STATE_FORMAT = "passage-jax-seed-state-v1"

_BUILD_KEYS = ("utc", "at_record", "construction_ms", "planner_name", "profile", "timer")
#: what a build records when its requests are done (absent while it runs); ``session`` (a
#: session timing profile's session entry) is recorded after the session's warm-up and
#: again, brought up to date, when its requests are done
_FINISHED_KEYS = ("executor_stats", "compilation", "working_directory_restored", "session",
                  "requests_wall_ms")


@dataclasses.dataclass(frozen=True)
class Build:
    """One construction of the planner: when, at which record, how long it took, what it
    is; once its requests are done, what the executor saw (``executor_stats``), what it
    compiled in the run's process (``compilation``) and, when the planner changed the
    working directory, how it was restored (``working_directory_restored``). Under a
    session timing profile ``session`` is the build's session entry (the manifest's
    ``session.sessions``). ``requests_wall_ms``: the wall time of its requests, from the
    first one's preparation to the last record handed to the journal (the evaluator's own
    time per request is this over the requests, less their mean ``latency_ms``)."""

    utc: str
    at_record: int
    construction_ms: float | None
    planner_name: str | None
    profile: str | None
    timer: str | None
    executor_stats: dict | None = None
    compilation: dict | None = None
    working_directory_restored: dict | None = None
    session: dict | None = None
    requests_wall_ms: float | None = None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _BUILD_KEYS}
        d.update({k: getattr(self, k) for k in _FINISHED_KEYS if getattr(self, k) is not None})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Build:
        return cls(**{k: d.get(k) for k in (*_BUILD_KEYS, *_FINISHED_KEYS)})


@dataclasses.dataclass(frozen=True)
class SeedState:
    """What ``seed_state.json`` holds. ``resumes`` entries are ``{utc, recovered_records,
    dropped_torn_bytes, torn}``, ``repairs`` entries ``{utc, problems}``."""

    seed: int
    started_utc: str | None
    builds: tuple[Build, ...] = ()
    resumes: tuple[dict, ...] = ()
    repairs: tuple[dict, ...] = ()

    @classmethod
    def new(cls, seed: int) -> SeedState:
        return cls(seed=int(seed), started_utc=utc_now())

    @property
    def first_build(self) -> Build | None:
        return self.builds[0] if self.builds else None

    @property
    def sessions(self) -> list[dict]:
        """The session entries of the builds, in build order (session timing profiles)."""
        return [b.session for b in self.builds if b.session is not None]

    def with_build(self, build: Build) -> SeedState:
        return dataclasses.replace(self, builds=(*self.builds, build))

    def with_build_finished(self, executor_stats: dict, compilation: dict,
                            working_directory_restored: dict | None = None,
                            session: dict | None = None,
                            requests_wall_ms: float | None = None) -> SeedState:
        """The last build, its requests done (``session``: its session entry brought up to
        date; None keeps the one recorded)."""
        last = self.builds[-1]
        last = dataclasses.replace(last, executor_stats=executor_stats, compilation=compilation,
                                   working_directory_restored=working_directory_restored,
                                   session=last.session if session is None else session,
                                   requests_wall_ms=requests_wall_ms)
        return dataclasses.replace(self, builds=(*self.builds[:-1], last))

    def with_resume(self, recovered_records: int, dropped_torn_bytes: int, torn) -> SeedState:
        entry = {"utc": utc_now(), "recovered_records": recovered_records,
                 "dropped_torn_bytes": dropped_torn_bytes, "torn": torn}
        return dataclasses.replace(self, resumes=(*self.resumes, entry))

    def with_repair(self, problems: list[str]) -> SeedState:
        entry = {"utc": utc_now(), "problems": list(problems)}
        return dataclasses.replace(self, repairs=(*self.repairs, entry))

    def to_dict(self) -> dict:
        return {"format": SEED_STATE_FORMAT, "seed": self.seed, "started_utc": self.started_utc,
                "builds": [b.to_dict() for b in self.builds], "resumes": list(self.resumes),
                "repairs": list(self.repairs)}

    @classmethod
    def from_dict(cls, d: dict, seed: int) -> SeedState:
        """The state ``d`` holds (``seed`` where it names none)."""
        return cls(seed=int(d.get("seed", seed)), started_utc=d.get("started_utc"),
                   builds=tuple(Build.from_dict(b) for b in d.get("builds", ())),
                   resumes=tuple(d.get("resumes", ())), repairs=tuple(d.get("repairs", ())))


def load_state(folder: Path, seed: int) -> SeedState | None:
    """The state stored in ``folder``, or None when there is none or it is unreadable (it is
    written atomically: unreadable only when damaged; the seed starts its state anew)."""
    path = Path(folder) / SEED_STATE
    if not path.exists():
        return None
    try:
        doc = read_document(path, ResumeError, "seed state")
    except ResumeError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != SEED_STATE_FORMAT:
        return None
    return SeedState.from_dict(doc, seed)


def save_state(folder: Path, state: SeedState) -> SeedState:
    """Write ``state`` to ``folder/seed_state.json`` (atomically); returns it."""
    atomic_write_json(Path(folder) / SEED_STATE, state.to_dict())
    return state


# ---- the working directory -----------------------------------------------------------------

def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


class WorkingDirectory:
    """The run's working directory, restored when a planner (in this process) changed it
    during its construction or a request: the run's own paths are absolute, and the
    planner's next call starts from the directory it was built in. Each change is logged
    once per build and counted in the seed's build record."""

    def __init__(self, seed, log):
        self.path, self.seed, self.log = _cwd(), seed, log
        self.changes, self.first = 0, None

    def restore(self, when: str) -> None:
        now = _cwd()  # None: the planner removed the directory it moved into
        if self.path is None or now == self.path:
            return
        try:
            os.chdir(self.path)
        except OSError as e:
            raise RunError(f"seed {self.seed}: the planner changed the working directory during "
                           f"{when} and {self.path} cannot be restored: {e.strerror or e}") from None
        self.changes += 1
        if self.first is None:
            self.first = {"during": when, "changed_to": now}
            if self.log:
                self.log(f"seed {self.seed}: the planner changed the working directory to {now} "
                         f"during {when}; restored {self.path} (a planner must not change it)")

    def record(self) -> dict | None:
        """What the build record says about it (None: the planner never changed it)."""
        if not self.changes:
            return None
        return {"restored_to": self.path, "times": self.changes, **(self.first or {})}


# ---- the requests executed -----------------------------------------------------------------

def execute_requests(ctx: RunContext, seed: int, rows: RequestPlan, journal: Journal,
                     state: SeedState, planner=None, resumed: bool = False) -> SeedState:
    """Run requests ``journal.n_entries ..`` of ``rows`` on one planner build (``planner``:
    an already-built planner, in-process only); the first carries ``resumed``. Returns
    the seed state with the build recorded (saved)."""
    folder = journal.path.parent
    done = journal.n_entries
    report(ctx, seed, done, len(rows))
    held = {"state": state}

    def started(build: Build) -> None:  # recorded before its first request
        held["state"] = save_state(folder, held["state"].with_build(build))

    build = serve_requests(ctx, seed, rows, range(done, len(rows)), journal.append, planner=planner,
                           resumed_at=done if resumed else None, on_build=started)
    state = held["state"].with_build_finished(build.executor_stats, build.compilation,
                                              build.working_directory_restored, build.session,
                                              build.requests_wall_ms)
    return save_state(folder, state)


def serve_requests(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, *,
                   planner=None, resumed_at: int | None = None, on_build=None) -> Build:
    """Requests ``indices`` of ``rows`` on one planner build, in order; each record is handed
    to ``append(line, snapshot)`` as it completes, and the record ``resumed_at`` (if any)
    carries ``resumed: true``. ``on_build(build)`` is called once the planner is built (and
    its session warmed up). Returns the build with what its executor saw and compiled."""
    first = indices.start
    cwd = WorkingDirectory(seed, ctx.log)
    counter = CompileCounter().__enter__()  # what this build compiled in the run's process
    with _open(ctx, seed, planner, cwd) as ex:
        session = _open_session(ctx, ex, cwd, first)
        build = _build(ex, first, session)
        if on_build is not None:
            on_build(build)
        t0 = time.monotonic()
        run = _run_batches if ctx.spec.batched else _run_rows
        run(ctx, seed, rows, indices, append, ex, cwd, resumed_at)
        wall_ms = (time.monotonic() - t0) * 1000.0
        # what the executor saw (requests; for workers also starts, kills, crashes, warm-ups)
        stats = dict(ex.stats or {})
        counter.__exit__(None, None, None)
        if session is not None:
            session = {**ex.session.to_dict(), "first_record": first}
        return dataclasses.replace(build, executor_stats=stats, compilation=counter.stats.to_dict(),
                                   working_directory_restored=cwd.record(), session=session,
                                   requests_wall_ms=round(wall_ms, 3))


def _open(ctx: RunContext, seed: int, planner, cwd: WorkingDirectory):
    """The seed's executor (its planner built), the working directory restored after."""
    warmup = None if ctx.admitted.warmup is None else [ctx.admitted.warmup]
    try:
        return open_executor(ctx.spec, seed, device=ctx.admitted.device, planner=planner,
                             warmup_tasks=warmup)
    except PlannerBuildError as e:
        raise RunError(f"seed {seed}: {e}") from e
    finally:
        cwd.restore("the planner's construction")


def _open_session(ctx: RunContext, ex, cwd: WorkingDirectory, first_record: int) -> dict | None:
    """Under a one-pass timing profile, the session's warm-up calls (the batched
    procedure's warm-up batches) run; its session entry, with the first record it serves
    (None under the default profile)."""
    if not ctx.spec.one_pass:
        return None
    try:
        return {**ex.open_session(ctx.spec.budget), "first_record": first_record}
    finally:
        cwd.restore("the session's warm-up")


def _build(ex, at_record: int, session: dict | None = None) -> Build:
    return Build(utc=utc_now(), at_record=at_record, construction_ms=ex.construction_ms,
                 planner_name=ex.planner_name, profile=ex.profile, timer=ex.timer, session=session)


def _run_rows(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, ex,
              cwd: WorkingDirectory, resumed_at: int | None) -> None:
    spec = ctx.spec
    # default profile: this build ran the warm-up passes (it started at or before their first request)
    warmed_build = spec.latency_warmup >= 1 and indices.start <= len(rows.stubs)
    for i in indices:
        series, rep, ti, _sid = rows[i]
        task = ctx.admitted.tasks[ti]  # the chunk holding it is taken when first needed
        try:
            rec, snap = ex.execute(task, spec.budget)
        finally:
            cwd.restore(f"request {i}")
        rec.update(record=i, seed=int(seed), series=series, repeat=rep, task_index=ti,
                   sample_id=task.id, resumed=i == resumed_at,
                   quality=series == "warm" and rep == spec.quality_repeat_index)
        if rec.get("warm_complete") is None:
            rec["warm_complete"] = series == "warm" and warmed_build
        ordered = {k: rec.get(k) for k in RECORD_KEYS}
        append(json.dumps(ordered, default=_json_num, allow_nan=False), snap)
        report(ctx, seed, i + 1, len(rows), series, rep)


def _run_batches(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, ex,
                 cwd: WorkingDirectory, resumed_at: int | None) -> None:
    """The batched procedure's one pass: requests ``indices`` (each a task, in roster order)
    ``batch_size`` at a time (:meth:`~passage_jax.run.execution.sessions.BatchExecutor.execute_batch`),
    each batch's records appended in order once it is timed, checked and recosted. A
    resumed seed's batches start at its first missing request."""
    size = ctx.spec.batch_size
    for k in range(indices.start, indices.stop, size):
        idx = range(k, min(k + size, indices.stop))
        tasks = [ctx.admitted.tasks[rows[i][2]] for i in idx]
        try:
            results = ex.execute_batch(tasks, k)
        finally:
            cwd.restore(f"the batch of requests {idx.start}-{idx.stop - 1}")
        for i, task, (rec, snap) in zip(idx, tasks, results):
            series, rep, ti, _sid = rows[i]
            rec.update(record=i, seed=int(seed), series=series, repeat=rep, task_index=ti,
                       sample_id=task.id, resumed=i == resumed_at, quality=True)
            ordered = {key: rec.get(key) for key in (*RECORD_KEYS, *BATCH_RECORD_KEYS)}
            append(json.dumps(ordered, default=_json_num, allow_nan=False), snap)
        report(ctx, seed, idx.stop, len(rows), "warm", 0)


def report(ctx: RunContext, seed: int, done: int, total: int, series=None, repeat=None) -> None:
    """Tell the progress callback (if any) that ``done`` of ``total`` requests are done."""
    if ctx.progress is not None:
        ctx.progress(ProgressEvent(ctx.spec.method_name, int(seed), done, total, series, repeat))


def _json_num(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# ---- shared out across processes -----------------------------------------------------------

#: the Leader of the run this process 0 is leading (while its ``with`` block runs)
_LEADING: contextvars.ContextVar = contextvars.ContextVar("passage_jax_run_leader", default=None)


def leading() -> Leader | None:
    """The :class:`Leader` of the multi-process session run this process leads (process 0,
    inside the leader's ``with`` block), or None."""
    return _LEADING.get()


def share_of(admitted: Admitted, rows: RequestPlan, first: int, *, process: int | None = None,
             processes: int | None = None) -> range:
    """The records of ``[first, len(rows))`` that process ``process`` (default: this one)
    runs, contiguous: whole chunks of the admission's chunk size under a session profile;
    under the batched procedure whole batches counted from ``first``, so that the batches
    are those a single process would run (each share's last one padded only where the
    seed's last one is)."""
    if admitted.spec.batched:
        mine = cluster.chunk_share_from(0, len(rows) - first, admitted.spec.batch_size,
                                        process=process, processes=processes)
        return range(first + mine.start, first + mine.stop)
    return cluster.chunk_share_from(first, len(rows), admitted.tasks.chunk, process=process,
                                    processes=processes)


def _text(e: BaseException) -> str:
    return str(e) if isinstance(e, RunError) else f"{type(e).__name__}: {e}"


def _where(rows: RequestPlan, mine: range) -> str:
    if not len(mine):
        return "no tasks"
    a, b = rows[mine.start], rows[mine.stop - 1]
    return f"tasks {a[2]}-{b[2]} (scenes {a[3]} to {b[3]})"


def _describer(admitted: Admitted, seed: int, rows: RequestPlan, first: int):
    """How a share's failure is told to the other processes: the seed, the share's tasks
    and scenes, the error."""
    def describe(e: BaseException) -> str:
        text = _text(e).removeprefix(f"seed {seed}: ")
        return f"seed {seed}: {_where(rows, share_of(admitted, rows, first))}: {text}"
    return describe


def _check_word(ctx: RunContext, word: dict) -> None:
    """:class:`RunError` unless this process runs the spec, code and warm-up scene that
    process 0 runs."""
    warmup = None if ctx.admitted.warmup is None else ctx.admitted.warmup.id
    mine = {"spec_sha256": ctx.spec.sha256(), "code_sha256": ctx.code.get("sha256"),
            "warmup_scene": warmup}
    for key, value in mine.items():
        if word.get(key) != value:
            raise RunError(f"{key} {value} is not process 0's ({word.get(key)}); every process "
                           f"must run the same command on the same code and data")


def _run_share(ctx: RunContext, rows: RequestPlan, word: dict) -> dict:
    """This process's share of the seed ``word`` announces: its own session on its records;
    the records (``(line, snapshot)`` in roster order) and the build, to gather."""
    _check_word(ctx, word)
    seed, first = int(word["seed"]), int(word["first"])
    mine = share_of(ctx.admitted, rows, first)
    out = {"start": mine.start, "stop": mine.stop, "records": [], "build": None}
    if not len(mine):
        return out
    records = out["records"]
    try:
        out["build"] = serve_requests(ctx, seed, rows, mine, lambda line, snap: records.append((line, snap)),
                                      resumed_at=first if word["resumed"] else None)
    finally:
        ctx.admitted.tasks.release()
    return out


def _fail(text: str):
    raise RunError(text)


class Leader:
    """Process 0's side of a multi-process session run, held around the whole run (a
    context manager; :func:`leading` returns it meanwhile): :meth:`seed_shares` announces a
    seed and gathers its shares; leaving tells the others that the run is done, or sends
    them process 0's failure."""

    def __init__(self):
        self.owed = True  # the other processes wait for process 0's word
        self._token = None

    def __enter__(self) -> Leader:
        self._token = _LEADING.set(self)
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        _LEADING.reset(self._token)
        if not self.owed:  # the others are gone, or already failed with this process
            return False
        self.owed = False
        if exc is None:
            cluster.gather_shares({"kind": "done"}, what="telling the other processes the run "
                                  "is done", error=RunError)
            return False
        with contextlib.suppress(Exception):  # this process raises its own error, below
            cluster.run_share(_fail, _text(exc), what="telling the other processes of process "
                              "0's failure", error=RunError, describe=str)
        return False

    def seed_shares(self, ctx: RunContext, seed: int, rows: RequestPlan, first: int,
                    resumed: bool) -> list[dict]:
        """Announce seed ``seed`` from record ``first`` on, run this process's share and
        gather every process's, in process order."""
        warmup = None if ctx.admitted.warmup is None else ctx.admitted.warmup.id
        word = {"kind": "seed", "seed": int(seed), "first": int(first), "resumed": bool(resumed),
                "spec_sha256": ctx.spec.sha256(), "code_sha256": ctx.code.get("sha256"),
                "warmup_scene": warmup}
        self.owed = False
        cluster.gather_shares(word, what=f"seed {seed}: announcing its shares", error=RunError)
        shares = cluster.run_share(_run_share, ctx, rows, word, what=f"seed {seed}: gathering "
                                   f"the shares", error=RunError,
                                   describe=_describer(ctx.admitted, seed, rows, first))
        self.owed = True
        return shares


def execute_shared(ctx: RunContext, leader: Leader, seed: int, rows: RequestPlan, journal: Journal,
                   state: SeedState, resumed: bool = False) -> SeedState:
    """Process 0: the records ``journal.n_entries ..`` of ``rows`` shared out across the
    launch's processes by ``leader``, each share's build recorded in the seed state (saved)
    and every record appended to the journal in roster order. Returns the state."""
    first = journal.n_entries
    report(ctx, seed, first, len(rows))
    shares = leader.seed_shares(ctx, seed, rows, first, resumed)
    for share in shares:
        if share["build"] is not None:
            state = state.with_build(share["build"])
    state = save_state(journal.path.parent, state)
    for i, share in enumerate(shares):
        n = share["stop"] - share["start"]
        if n and (share["start"] != journal.n_entries or len(share["records"]) != n):
            raise RunError(f"{journal.path}: process {i}'s share of seed {seed} holds "
                           f"{len(share['records'])} records from record {share['start']}, the "
                           f"journal's next record is {journal.n_entries}")
        for line, snap in share["records"]:
            journal.append(line, snap)
    report(ctx, seed, journal.n_entries, len(rows))
    return state


def follow(admitted: Admitted, log=None) -> dict:
    """A process other than 0: run this process's share of every seed process 0 announces,
    until its last word. Returns ``{"follower": True, "process_index", "shares": [{seed,
    records: [start, stop]}]}``; :class:`RunError` naming the process that failed."""
    ctx = RunContext.of(admitted, log=log)
    rows = RequestPlan(ctx.spec, admitted.tasks.stubs)
    served = []
    while True:
        word = cluster.gather_shares(None, what="waiting for process 0", error=RunError)[0]
        if not isinstance(word, dict) or word.get("kind") not in ("seed", "done"):
            raise RunError(f"process {cluster.process_index()}: process 0 sent {word!r}, not a seed "
                           f"or the end of the run")
        if word["kind"] == "done":
            return {"follower": True, "process_index": cluster.process_index(), "shares": served}
        seed, first = int(word["seed"]), int(word["first"])
        shares = cluster.run_share(_run_share, ctx, rows, word, what=f"seed {seed}: gathering "
                                   f"the shares", error=RunError,
                                   describe=_describer(admitted, seed, rows, first))
        mine = shares[cluster.process_index()]
        served.append({"seed": seed, "records": [mine["start"], mine["stop"]]})
        ctx.say(f"seed {seed}: process {cluster.process_index()} of {cluster.process_count()}: "
                f"{_where(rows, range(mine['start'], mine['stop']))} run and delivered")


# ---- the seed's files ----------------------------------------------------------------------

def clear_leftovers(folder: Path) -> None:
    """Remove what a killed run may have left in a seed folder in progress: final files
    (rebuilt from the journal) and temporary files of interrupted atomic writes."""
    remove_temporaries(folder)
    for name in (*RUN_FILES, MANIFEST):
        (folder / name).unlink(missing_ok=True)


def finish_seed(ctx: RunContext, seed: int, folder: Path, state: SeedState, rows: RequestPlan
                ) -> dict:
    """Build the seed's files from its journal (which must hold every request of ``rows``,
    the seed's :class:`RequestPlan`) and its manifest; returns the manifest."""
    admitted = ctx.admitted
    admitted.tasks.release()
    seed_passes = [list(p) for p in passes(ctx.spec)]
    jpath = folder / JOURNAL
    try:
        sizes, counts, batches = _write_requests(folder, jpath, rows, seed)
        sizes.write_streamed(folder / PATHS, lambda visit: scan_journal(jpath, visit))
    except (OSError, JournalError) as e:
        raise ResumeError(f"{jpath}: cannot read the record journal: {e}") from None
    atomic_write_bytes(folder / REFERENCES, references_npz(admitted))
    made = SeedFiles(n_records=len(rows), status_counts=counts, batches=batches,
                     files={name: sha256_file(folder / name) for name in RUN_FILES}, journal=jpath,
                     sync_interval_s=SYNC_INTERVAL_S, passes=seed_passes)
    manifest = seed_manifest(ctx, seed, state, made)
    atomic_write_json(folder / MANIFEST, manifest)
    fsync_dir(folder)
    return manifest


def _write_requests(folder: Path, jpath: Path, rows: RequestPlan, seed: int
                    ) -> tuple[PathsWriter, dict, dict]:
    """Write ``requests.jsonl`` from the journal (each entry checked against the request it
    stands for); returns the route sizes (no cells are kept), the status counts per
    series and the batched procedure's batches ({first record: (batch_ms, live scenes)};
    empty for any other profile)."""
    sizes = PathsWriter()
    counts: dict = {}
    batches: dict = {}

    def visit(out):
        def one(i, line, snap):
            rows.check_count(i, jpath)
            rec = json.loads(line)
            check_entry(rec, i, seed, rows[i], jpath)
            fmt, route, raw, desc = snap
            sizes.add_sizes(fmt, 0 if route is None else len(route), 0 if raw is None else len(raw),
                            desc)
            out.write(line.encode("utf-8") + b"\n")
            counts.setdefault(rec["series"], {}).setdefault(rec["status"], 0)
            counts[rec["series"]][rec["status"]] += 1
            if rec.get("batch_first") is not None:
                batches[rec["batch_first"]] = (rec["batch_ms"], rec["batch_live"])
        return one

    with fileio.atomic_file(folder / REQUESTS) as out:
        scan = scan_journal(jpath, visit(out))
        if scan.torn is not None or scan.count != len(rows):
            raise ResumeError(f"{jpath}: {scan.count} complete entries (torn: {scan.torn}) "
                              f"for a seed of {len(rows)} requests")
    return sizes, counts, batches


# ---- the seed, top to bottom ----------------------------------------------------------------

def run_seed_folder(ctx: RunContext, seed: int, folder: Path, planner=None) -> dict:
    """Run every missing request of ``seed`` in ``folder`` under the launch's context ``ctx``
    and write the seed's files; returns the manifest (:func:`passage_jax.run.loop.run_seed`)."""
    leader = leading()
    folder.mkdir(parents=True, exist_ok=True)
    fsync_dir(folder.parent)
    clear_leftovers(folder)
    state = load_state(folder, seed)
    resumed = state is not None or (folder / JOURNAL).exists()
    state = state or SeedState.new(seed)
    if state.seed != int(seed):
        raise ResumeError(f"{folder / SEED_STATE}: seed {state.seed} is not seed {seed}")
    rows = RequestPlan(ctx.spec, ctx.admitted.tasks.stubs)
    journal, scan = _open_journal(folder / JOURNAL, rows, seed)
    try:
        if resumed:
            state = state.with_resume(scan.count, scan.torn_bytes, scan.torn)
            ctx.say(f"seed {seed}: resuming with {scan.count} of {len(rows)} records recovered"
                    + (f"; dropped a torn last entry ({scan.torn_bytes} bytes: {scan.torn})"
                       if scan.torn else ""))
        del scan
        save_state(folder, state)
        if journal.n_entries < len(rows) and leader is not None:
            state = execute_shared(ctx, leader, seed, rows, journal, state, resumed)
        elif journal.n_entries < len(rows):
            state = execute_requests(ctx, seed, rows, journal, state, planner, resumed)
    finally:
        journal.close()
    return finish_seed(ctx, seed, folder, state, rows)


def _open_journal(jpath: Path, rows: RequestPlan, seed: int):
    """The seed's journal, opened for appending (each entry it holds checked against the
    request it stands for), and the scan of what it held."""

    def check(i, line, _snap):
        rows.check_count(i, jpath)
        check_entry(json.loads(line), i, seed, rows[i], jpath)

    return Journal.open(jpath, visit=check)
