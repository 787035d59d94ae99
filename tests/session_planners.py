"""Planners for the session timing-profile tests (importable as ``session_planners:<name>``,
``tests/`` on ``sys.path``): each call is appended to a log file, so the calls a planner
received can be counted across processes (a supervised worker is another process)."""
from __future__ import annotations

import json
import os

from passage_jax.planners.bfs import BFSPlanner

__all__ = ["make_logging", "read_log", "make_crash_once"]


def make_logging(log: str, crash_ids=()):
    """Factory: a BFS planner that appends ``{id, start, goal, pid}`` of every request to
    ``log`` (one JSON line, written and closed before it plans) and ends its process
    (``os._exit(3)``) on the requests whose ``sample_id`` is in ``crash_ids``."""
    inner = BFSPlanner()
    crash = set(map(str, crash_ids))

    def plan(request):
        with open(log, "a") as f:
            f.write(json.dumps({"id": request.sample_id, "start": list(request.start),
                                "goal": list(request.goal), "pid": os.getpid()}) + "\n")
        if str(request.sample_id) in crash:
            os._exit(3)
        return inner.plan(request)

    return plan


def read_log(log) -> list[dict]:
    """The calls :func:`make_logging` logged, in order."""
    with open(log) as f:
        return [json.loads(line) for line in f if line.strip()]


def make_crash_once(folder: str, crash_ids=(), fail_build_in=None):
    """Factory: a BFS planner that appends ``{id, pid}`` of every request to
    ``<folder>/calls.jsonl`` and, on the first request whose ``sample_id`` is in
    ``crash_ids`` while ``<folder>/crashed`` does not exist, creates that file and ends
    its process (``os._exit(3)``): a resumed run is not crashed again. Raises at
    construction in the process of a multi-process launch whose index is
    ``fail_build_in``. (``folder`` is an existing folder, so the run identity does not
    change as files appear in it.)"""
    from passage_jax import cluster

    if fail_build_in is not None and cluster.process_index() == int(fail_build_in):
        raise RuntimeError(f"injected construction failure in process {cluster.process_index()}")
    inner = BFSPlanner()
    crash = set(map(str, crash_ids))
    log, marker = os.path.join(folder, "calls.jsonl"), os.path.join(folder, "crashed")

    def plan(request):
        with open(log, "a") as f:
            f.write(json.dumps({"id": request.sample_id, "pid": os.getpid()}) + "\n")
        if str(request.sample_id) in crash and not os.path.exists(marker):
            with open(marker, "w"):
                pass
            os._exit(3)
        return inner.plan(request)

    return plan
