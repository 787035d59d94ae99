"""Planners for the session timing-profile tests (importable as ``session_planners:<name>``,
``tests/`` on ``sys.path``): each call is appended to a log file, so the calls a planner
received can be counted across processes (a supervised worker is another process)."""
from __future__ import annotations

import json
import os

from passage_jax.planners.bfs import BFSPlanner

__all__ = ["make_logging", "read_log"]


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
