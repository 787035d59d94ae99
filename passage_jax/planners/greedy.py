"""Greedy straight-line walker: no search, no backtracking; it may fail.

From the start, repeatedly step to the legal, not yet visited neighbour that is
closest (Euclidean) to the goal, ties broken by the MOVES order, as long as
that neighbour is strictly closer than the current cell. When no neighbour
makes progress (an obstacle in the way), it stops and returns ``no_path`` with
the partial route it walked. Without obstacles it always arrives.
"""
from __future__ import annotations

import math

import numpy as np

from passage_jax.planners._common import as_path, check_kwargs, free_neighbours
from passage_jax.protocol.contracts import PlanRequest, PlanResult, work_counters

__all__ = ["GreedyPlanner", "make_planner"]

_KWARGS = ()


class GreedyPlanner:
    """Steps to the free unvisited neighbour closest to the goal; stops when stuck."""

    def plan(self, request: PlanRequest) -> PlanResult:
        obst = np.asarray(request.obstacles)
        goal = tuple(request.goal)
        cur = tuple(request.start)
        cells, seen = [cur], {cur}

        def dist(p):
            return math.hypot(p[0] - goal[0], p[1] - goal[1])

        steps = 0
        while cur != goal:
            best, best_d = None, dist(cur)
            for _, v in free_neighbours(cur, obst):
                if v not in seen and dist(v) < best_d:
                    best, best_d = v, dist(v)
            if best is None:
                work = work_counters(steps, 0, 1)
                return PlanResult(path=as_path(cells), status="no_path", work=work,
                                  stage_work={"primary": dict(work)},
                                  message=f"greedy walker stuck at {cur}")
            cur = best
            cells.append(cur)
            seen.add(cur)
            steps += 1
        work = work_counters(steps, 0, 1)
        return PlanResult(path=as_path(cells), status="ok", work=work,
                          stage_work={"primary": dict(work)})


def make_planner(**inference_kwargs) -> GreedyPlanner:
    check_kwargs("greedy", inference_kwargs, _KWARGS)
    return GreedyPlanner()
