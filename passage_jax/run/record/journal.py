"""The durable record journal of a seed in progress (``records.journal``).

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
"""
from __future__ import annotations

import dataclasses
import json
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np

from passage_jax.fileio import atomic_write_bytes, fsync_dir, naming_file

__all__ = ["JOURNAL_HEADER", "JournalError", "JournalScan", "Journal",
           "encode_entry", "decode_entry", "scan_journal", "SYNC_INTERVAL_S"]

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
