"""Building a :class:`PlanRequest` from a task: the ordinary-input boundary.

This is the only place where evaluator-side objects (scenes and tasks, which
carry released routes) are turned into planner input. It copies exactly the
ordinary fields and the allowlisted metadata; nothing else crosses.
"""
from __future__ import annotations

from passage_jax.graph.spec import GraphSpec
from passage_jax.protocol.contracts import BudgetSpec, HandedOver, PlanRequest, filter_metadata

__all__ = ["request_graph", "build_request", "set_deadline"]


def request_graph(task, pixel_size_m: float = 30.0) -> GraphSpec:
    """The graph of a task: its objective as cost model, the scene's weight."""
    return GraphSpec(cost_model=task.objective, cost_weight=float(task.weight),
                     pixel_size_m=pixel_size_m)


def build_request(task, budget: BudgetSpec | None = None, deadline_monotonic: float | None = None,
                  include_tensor: bool = True, graph: GraphSpec | None = None) -> PlanRequest:
    """The request for ``task`` (a ``passage_jax.data.scene.Task``).

    Copies: elevation (float64 metres), the task's obstacles (cleared for the
    ``free`` variant), start, goal, the objective and its weight, the allowlisted
    metadata and (``include_tensor``) the normalised (H, W, 3) input tensor (built for
    the request and handed over to it). A grid nobody can write to (the kept grids of a
    run's seeds) is shared, not copied.
    Never the released routes, ``c*`` or the solver metadata.
    """
    scene = task.scene
    graph = graph or request_graph(task)
    return PlanRequest(
        sample_id=scene.id,
        elevation=scene.elevation_m,
        obstacles=task.obstacles,
        start=tuple(scene.start),
        goal=tuple(scene.goal),
        cost_model=graph.cost_model,
        cost_weight=graph.cost_weight,
        graph=graph,
        budget=budget or BudgetSpec(),
        metadata=filter_metadata(scene.metadata),
        input_tensor=_tensor(task) if include_tensor else None,
        deadline_monotonic=deadline_monotonic,
    )


def _tensor(task):
    """The task's kept input tensor (shared: nobody can write to it), or one built for the
    request and handed over to it."""
    kept = getattr(task, "input_tensor", None)
    return kept if kept is not None else HandedOver(task.scene.input_tensor(task.variant))


def set_deadline(request: PlanRequest, deadline_monotonic: float | None) -> PlanRequest:
    """Set the absolute deadline of a request built before its clock started (the session
    timing profiles build the request first and start the clock with its raw arrays in
    memory; the deadline is the clock's start + ``wall_time_ms``). Returns ``request``."""
    object.__setattr__(request, "deadline_monotonic", deadline_monotonic)
    return request
