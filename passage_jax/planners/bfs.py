"""Breadth-first baseline: the fewest-steps route, ignoring the cost model.

Avoids obstacles; neighbours are visited in the fixed MOVES order, so the
route is deterministic. Reports expansions (cells dequeued), queue operations
(pushes + pops) and the peak queue length as live states; honours
``max_expansions`` and checks the request's deadline every 256 expansions.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from passage_jax.planners._common import as_path, check_kwargs, effective_limit, free_neighbours
from passage_jax.protocol.contracts import PlanRequest, PlanResult, work_counters

__all__ = ["BFSPlanner", "make_planner"]

_KWARGS = ("max_expansions",)


class BFSPlanner:
    """Breadth-first search in the MOVES order; the fewest-steps route."""

    def __init__(self, max_expansions: int | None = None):
        self.max_expansions = None if max_expansions is None else int(max_expansions)

    def plan(self, request: PlanRequest) -> PlanResult:
        obst = np.asarray(request.obstacles)
        start, goal = tuple(request.start), tuple(request.goal)
        limit = effective_limit(self.max_expansions, request.budget.max_expansions)
        parent = {start: None}
        queue = deque([start])
        pushes, pops, peak, expansions = 1, 0, 1, 0
        found = start == goal
        status, message = "no_path", "the goal cannot be reached from the start"
        while queue and not found:
            if limit is not None and expansions >= limit:
                status, message = "budget_exhausted", f"bfs: {expansions} expansions reached the limit"
                break
            if expansions % 256 == 0 and request.remaining_wall_ms() <= 0:
                status, message = "timeout", "bfs: deadline passed"
                break
            u = queue.popleft()
            pops += 1
            expansions += 1
            for _, v in free_neighbours(u, obst):
                if v not in parent:
                    parent[v] = u
                    if v == goal:
                        found = True
                        break
                    queue.append(v)
                    pushes += 1
            peak = max(peak, len(queue))
        work = work_counters(expansions, pushes + pops, peak)
        if not found:
            return PlanResult(path=None, status=status, work=work,
                              stage_work={"primary": dict(work)}, message=message)
        cells = [goal]
        while parent[cells[-1]] is not None:
            cells.append(parent[cells[-1]])
        return PlanResult(path=as_path(cells[::-1]), status="ok", work=work,
                          stage_work={"primary": dict(work)})


def make_planner(**inference_kwargs) -> BFSPlanner:
    check_kwargs("bfs", inference_kwargs, _KWARGS)
    return BFSPlanner(**inference_kwargs)
