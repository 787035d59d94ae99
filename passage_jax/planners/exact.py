"""Exact baseline: float64 JAX value iteration per request (``passage_jax.reference``).

Solves the request's own graph from its ordinary input (elevation, obstacles,
endpoints, cost model and weight) and descends the cost-to-go field with the
fixed tie-break. Reports no search counters (value iteration has no
expansions), so it cannot run under a budget with work limits.
"""
from __future__ import annotations

from passage_jax.planners._common import check_kwargs
from passage_jax.protocol.contracts import PlanRequest, PlanResult
from passage_jax.reference.vi import solve_batch

__all__ = ["ExactPlanner", "make_planner"]

_KWARGS = ("max_sweeps", "check_every", "strategy")


class ExactPlanner:
    # defaults are the reference solver's (fast sweeping: the strategy measured best,
    # docs/reference.md)
    def __init__(self, max_sweeps: int = 4096, check_every: int = 2, strategy: str = "sweep"):
        self.max_sweeps = int(max_sweeps)
        self.check_every = int(check_every)
        self.strategy = strategy

    def plan(self, request: PlanRequest) -> PlanResult:
        res = solve_batch(
            request.elevation[None], request.obstacles[None], [request.start], [request.goal],
            [request.cost_model], [request.cost_weight], max_sweeps=self.max_sweeps,
            check_every=self.check_every, strategy=self.strategy, routes=True,
            pixel_size_m=request.graph.pixel_size_m)
        status = res.status[0]
        route = res.routes[0]
        peaks = {"sweeps": float(res.sweeps[0])}
        if status == "ok" and route is not None:
            return PlanResult(path=route, status="ok", precision="fp64", resource_peaks=peaks)
        if status == "unreachable":
            return PlanResult(path=None, status="no_path", precision="fp64", resource_peaks=peaks,
                              message="the goal cannot be reached from the start")
        return PlanResult(path=None, status="budget_exhausted", precision="fp64",
                          resource_peaks=peaks, message=f"value iteration: {status}")


def make_planner(**inference_kwargs) -> ExactPlanner:
    check_kwargs("exact", inference_kwargs, _KWARGS)
    return ExactPlanner(**inference_kwargs)
