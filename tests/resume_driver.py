"""Run a spec in a process that kills itself (SIGKILL) at a chosen moment.

``python tests/resume_driver.py SPEC OUTPUT POINT`` runs ``run_spec(SPEC, OUTPUT)``
after replacing one function so that the process sends itself SIGKILL there; the
library carries no test hooks. ``POINT``:

* ``none``: no kill (an uninterrupted run);
* ``admit``: during admission;
* ``between``: after the first seed folder is complete, before the next seed starts;
* ``planner:N``: inside the planner's N-th call (counted over the whole run);
* ``journal:N``: in the N-th journal append, after half of the entry's bytes are on disk;
* ``write:NAME:N``: in the N-th atomic write of a file named NAME, after half of
  its bytes are in the temporary file.

Add ``--resume`` to pass ``resume=True``. Exit status 0 when the run finished.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

from passage_jax import fileio
from passage_jax.planners import bfs
from passage_jax.protocol import records
from passage_jax.run import loop
from passage_jax.run.record import journal
from passage_jax.run.specification.parse import load_spec


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str) -> None:
    kind, _, arg = point.partition(":")
    if kind == "none":
        return
    if kind == "admit":
        real_admit = loop.admit

        def admit(spec, *a, **k):
            real_admit(spec, *a, **k)
            _die()
        loop.admit = admit
    elif kind == "between":
        real_run_seed = loop._run_seed
        calls = [0]

        def run_seed(*a, **k):
            calls[0] += 1
            if calls[0] == 2:
                _die()
            return real_run_seed(*a, **k)
        loop._run_seed = run_seed
    elif kind == "planner":
        n = int(arg)
        real_plan = bfs.BFSPlanner.plan
        calls = [0]

        def plan(self, request):
            calls[0] += 1
            if calls[0] == n:
                _die()
            return real_plan(self, request)
        bfs.BFSPlanner.plan = plan
    elif kind == "journal":
        n = int(arg)
        real_append = journal.Journal.append
        calls = [0]

        def append(self, line, snap):
            calls[0] += 1
            if calls[0] == n:
                data = journal.encode_entry(line, snap)
                self._f.write(data[:len(data) // 2])
                self._f.flush()
                os.fsync(self._f.fileno())
                _die()
            return real_append(self, line, snap)
        journal.Journal.append = append
    elif kind == "write":
        name, _, nth = arg.partition(":")
        n = int(nth or 1)
        real_write = fileio.atomic_write_bytes
        calls = [0]

        def atomic_write_bytes(path, data):
            if Path(path).name == name:
                calls[0] += 1
                if calls[0] == n:
                    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")
                    with open(tmp, "wb") as f:
                        f.write(data[:len(data) // 2])
                        f.flush()
                        os.fsync(f.fileno())
                    _die()
            return real_write(path, data)
        fileio.atomic_write_bytes = atomic_write_bytes
        real_file = fileio.atomic_file

        @contextlib.contextmanager
        def atomic_file(path):
            if Path(path).name != name:
                with real_file(path) as f:
                    yield f
                return
            calls[0] += 1
            with real_file(path) as f:
                yield f
                if calls[0] == n:  # the file is complete in its temporary: keep half, die
                    f.flush()
                    f.truncate(f.tell() // 2)
                    os.fsync(f.fileno())
                    _die()
        for mod in (fileio, loop, records):
            mod.atomic_file = atomic_file
    else:
        raise SystemExit(f"unknown kill point {point!r}")


def main(argv) -> int:
    spec_path, output, point = argv[:3]
    arm(point)
    loop.run_spec(load_spec(spec_path), output, progress=False, resume="--resume" in argv[3:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
