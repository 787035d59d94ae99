"""Host-side route checks and float64 recosting (contract §2, §4).

These are the strict, plain-NumPy definitions used for validation at load and as
the scoring ground truth: :func:`route_problem` is the one host implementation of
route legality (the reader, qualification, the runner and the host scorer call
it); the jittable padded-route kernels live in ``passage_jax.metrics``.
"""
from __future__ import annotations

import numpy as np

from passage_jax.graph.costs import crop_stats, get_cost_model
from passage_jax.graph.spec import GraphSpec

__all__ = ["as_route_array", "route_problem", "route_step_costs", "route_cost", "route_length_pixels"]


def as_route_array(route) -> np.ndarray:
    """A route as an (L, 2) int64 array; ValueError for non-integer or ill-shaped input.

    Nothing is rounded: a float coordinate that is not exactly integral, NaN, or a
    bool is refused.
    """
    a = np.asarray(route)
    if a.size == 0:
        return np.zeros((0, 2), np.int64)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"route must have shape (L, 2), got {a.shape}")
    if a.dtype.kind in "iu":
        return a.astype(np.int64)
    raise ValueError(f"route coordinates must be integers, got dtype {a.dtype}")


def route_problem(route, start, goal, obstacles=None, shape=None) -> str | None:
    """First reason the route is not a legal start→goal route, or None.

    Checks, in order: shape/integers, at least 2 cells, in bounds, every step one
    of the 8 moves (a repeated consecutive cell is a problem; a later revisit is
    not), first cell = start, last cell = goal, and (if ``obstacles`` is given)
    no cell on an obstacle.
    """
    try:
        r = as_route_array(route)
    except ValueError as e:
        return str(e)
    if shape is None:
        if obstacles is None:
            raise ValueError("route_problem needs obstacles or shape")
        shape = np.shape(obstacles)
    h, w = shape
    if len(r) < 2:
        return f"route has {len(r)} cell(s); at least 2 are needed"
    bad = np.flatnonzero((r[:, 0] < 0) | (r[:, 0] >= h) | (r[:, 1] < 0) | (r[:, 1] >= w))
    if bad.size:
        i = int(bad[0])
        return f"cell {i} {tuple(r[i].tolist())} is out of bounds for a {h}x{w} grid"
    step = np.abs(np.diff(r, axis=0)).max(axis=1)
    rep = np.flatnonzero(step == 0)
    if rep.size:
        i = int(rep[0])
        return f"cell {i + 1} {tuple(r[i + 1].tolist())} repeats the previous cell"
    gap = np.flatnonzero(step > 1)
    if gap.size:
        i = int(gap[0])
        return (f"step {i} from {tuple(r[i].tolist())} to {tuple(r[i + 1].tolist())} "
                f"is not one of the 8 moves (gap)")
    if tuple(r[0].tolist()) != tuple(np.asarray(start).tolist()):
        return f"route starts at {tuple(r[0].tolist())}, not at the start {tuple(np.asarray(start).tolist())}"
    if tuple(r[-1].tolist()) != tuple(np.asarray(goal).tolist()):
        return f"route ends at {tuple(r[-1].tolist())}, not at the goal {tuple(np.asarray(goal).tolist())}"
    if obstacles is not None:
        on = np.flatnonzero(np.asarray(obstacles, bool)[r[:, 0], r[:, 1]])
        if on.size:
            i = int(on[0])
            return f"cell {i} {tuple(r[i].tolist())} is an obstacle"
    return None


def route_step_costs(route, z, model: str, weight: float, pixel_size_m: float = 30.0,
                     stats=None) -> np.ndarray:
    """float64 cost of each step of an 8-connected route (length L-1).

    Raises ValueError if a step is not one of the 8 moves. Obstacles are not
    checked here (that is legality, not cost).
    """
    r = as_route_array(route)
    z = np.asarray(z, np.float64)
    if stats is None:
        stats = crop_stats(z)
    if len(r) < 2:
        return np.zeros(0, np.float64)
    dr = np.diff(r, axis=0)
    cheb = np.abs(dr).max(axis=1)
    if np.any(cheb != 1):
        i = int(np.flatnonzero(cheb != 1)[0])
        raise ValueError(f"step {i} of the route is not one of the 8 moves")
    diag = np.abs(dr).sum(axis=1) == 2
    d = np.where(diag, np.sqrt(2.0), 1.0) * pixel_size_m
    z_u = z[r[:-1, 0], r[:-1, 1]]
    z_v = z[r[1:, 0], r[1:, 1]]
    return np.asarray(get_cost_model(model).step_cost(d, z_u, z_v, np.float64(weight), stats, np),
                      np.float64)


def route_cost(route, z, model: str | GraphSpec, weight: float | None = None,
               pixel_size_m: float = 30.0, stats=None) -> float:
    """float64 route cost: step costs accumulated in order from start to goal."""
    if isinstance(model, GraphSpec):
        spec = model
        model, weight, pixel_size_m = spec.cost_model, spec.cost_weight, spec.pixel_size_m
    costs = route_step_costs(route, z, model, weight, pixel_size_m, stats)
    if costs.size == 0:
        return 0.0
    # np.cumsum accumulates sequentially start to goal (np.sum would pair terms).
    return float(np.cumsum(costs)[-1])


def route_length_pixels(route) -> float:
    """Route length in pixels (1 per cardinal, sqrt(2) per diagonal step)."""
    r = as_route_array(route)
    if len(r) < 2:
        return 0.0
    diag = np.abs(np.diff(r, axis=0)).sum(axis=1) == 2
    return float(np.where(diag, np.sqrt(2.0), 1.0).sum())
