"""Staged planners for the attribution tests (importable as ``fixtures_attribution:<name>``).

``make_staged(plan)`` answers each scene with a fixed behaviour (``plan``: sample id ->
behaviour, default ``"primary"``), so the stage that produced each route and the work
each stage reports are known in advance:

* ``primary``: the BFS route from the ``primary`` stage, all three counters;
* ``repair``: the BFS route from ``repair``; the ``primary`` stage reports expansions only;
* ``fallback``: the BFS route from ``fallback`` after ``primary`` and ``repair``;
* ``illegal``: the straight diagonal (through the ``trap`` scene's wall) from ``primary``,
  status ``ok`` (recorded ``invalid_path``), expansions only;
* ``unstaged``: the BFS route without ``route_stage`` or any counter.
"""
from __future__ import annotations

import numpy as np

from passage_jax.planners.bfs import BFSPlanner
from passage_jax.protocol import PlanResult

#: behaviour -> (route_stage, stage_work)
STAGE_WORK = {
    "primary": ("primary", {"primary": {"expansions": 10, "queue_operations": 20, "live_states": 5}}),
    "repair": ("repair", {"primary": {"expansions": 4},
                          "repair": {"expansions": 30, "queue_operations": 50, "live_states": 12}}),
    "fallback": ("fallback", {"primary": {"expansions": 6, "queue_operations": 8, "live_states": 2},
                              "repair": {"expansions": 40, "queue_operations": 60, "live_states": 15},
                              "fallback": {"expansions": 100, "queue_operations": 150,
                                           "live_states": 40}}),
    "illegal": ("primary", {"primary": {"expansions": 7}}),
    "unstaged": (None, {}),
}


def make_staged(plan=None):
    plan = dict(plan or {})
    inner = BFSPlanner()

    def staged(request):
        how = plan.get(request.sample_id, "primary")
        stage, sw = STAGE_WORK[how]
        if how == "illegal":
            (r0, c0), (r1, c1) = request.start, request.goal
            n = max(abs(r1 - r0), abs(c1 - c0)) + 1
            path = np.stack([np.linspace(r0, r1, n), np.linspace(c0, c1, n)], 1).round()
            return PlanResult(path=path.astype(np.int64), status="ok", stage_work=sw,
                              route_stage=stage)
        return PlanResult(path=inner.plan(request).path, status="ok", stage_work=sw,
                          route_stage=stage)

    return staged
