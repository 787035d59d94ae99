"""The journal's durability: every append is flushed (a killed process keeps it), the
fsync comes at most SYNC_INTERVAL_S after an append and at close."""
from __future__ import annotations

import os

import numpy as np

import passage_jax.run.execution.seed as journal
from passage_jax.protocol.records import snapshot_route
from passage_jax.protocol.runfolder import JOURNAL


def test_appends_are_flushed_each_and_fsynced_by_interval_and_at_close(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(journal.time, "monotonic", lambda: clock[0])
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(journal.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    path = tmp_path / JOURNAL
    j, _ = journal.Journal.open(path)
    opened = len(synced)
    snap = snapshot_route(np.array([[0, 0], [1, 1]], np.int32))
    for i in range(5):
        j.append(f'{{"i": {i}}}', snap)
        clock[0] += journal.SYNC_INTERVAL_S / 4
    assert len(synced) == opened + 1  # the fifth append came a whole interval after the open
    # flushed: another reader sees every entry before any further fsync
    assert journal.scan_journal(path).count == 5
    j.append('{"i": 5}', snap)  # within the interval: no fsync
    assert len(synced) == opened + 1
    j.close()
    assert len(synced) == opened + 2  # the close fsyncs what is pending
    j.close()  # closing again does nothing
    assert len(synced) == opened + 2
    k, scan = journal.Journal.open(path)
    assert scan.count == 6 and k.n_entries == 6
    k.close()
    assert len(synced) == opened + 2  # nothing appended: nothing to fsync
