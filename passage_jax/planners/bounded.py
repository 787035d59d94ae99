"""Bounded classical baseline: CPU Dijkstra or A* (``passage_jax.reference``) with
an expansion budget.

The effective expansion limit is the tighter of ``max_expansions`` (inference
kwarg) and the request's ``budget.max_expansions``. Search counters are
reported as ``work`` and as the ``primary`` stage.
"""
from __future__ import annotations

from passage_jax.planners._common import check_kwargs, effective_limit
from passage_jax.protocol.contracts import SEARCH_STATUS, PlanRequest, PlanResult, work_counters
from passage_jax.reference.search import astar, dijkstra

__all__ = ["BoundedPlanner", "make_planner"]

_KWARGS = ("max_expansions", "algorithm")
_SEARCH = {"astar": astar, "dijkstra": dijkstra}


class BoundedPlanner:
    """CPU Dijkstra or A* under the tighter of its own and the request's expansion limit."""

    def __init__(self, max_expansions: int | None = None, algorithm: str = "astar"):
        if algorithm not in _SEARCH:
            raise ValueError(f"bounded planner: algorithm {algorithm!r} is not 'astar' or 'dijkstra'")
        if max_expansions is not None and int(max_expansions) <= 0:
            raise ValueError("bounded planner: max_expansions must be positive")
        self.max_expansions = None if max_expansions is None else int(max_expansions)
        self.algorithm = algorithm

    def plan(self, request: PlanRequest) -> PlanResult:
        search = _SEARCH[self.algorithm]
        limit = effective_limit(self.max_expansions, request.budget.max_expansions)
        res = search(request.elevation, request.obstacles, request.start, request.goal,
                     request.cost_model, request.cost_weight, max_expansions=limit,
                     pixel_size_m=request.graph.pixel_size_m)
        work = work_counters(res.expansions, res.queue_operations, res.live_states)
        status = SEARCH_STATUS.get(res.status, "runtime_error")
        return PlanResult(path=res.route if status == "ok" else None, status=status,
                          work=work, stage_work={"primary": dict(work)}, precision="fp64",
                          message=None if status == "ok" else f"{self.algorithm}: {res.status}")


def make_planner(**inference_kwargs) -> BoundedPlanner:
    check_kwargs("bounded", inference_kwargs, _KWARGS)
    return BoundedPlanner(**inference_kwargs)
