"""Shared helpers of the baseline planners (host-side, NumPy)."""
from __future__ import annotations

import numpy as np

from passage_jax.graph.moves import MOVES

__all__ = ["effective_limit", "check_kwargs", "free_neighbours", "as_path"]


def effective_limit(own, budget_value):
    """The tighter of a planner's own limit and the request's budget (None = none)."""
    vals = [int(v) for v in (own, budget_value) if v is not None]
    return min(vals) if vals else None


def check_kwargs(name: str, kwargs: dict, allowed: tuple) -> None:
    """TypeError naming any ``inference_kwargs`` key the planner does not take."""
    bad = sorted(set(kwargs) - set(allowed))
    if bad:
        raise TypeError(f"planner {name!r}: unknown inference_kwargs {bad}; known: {list(allowed)}")


def free_neighbours(cell, obstacles):
    """Legal moves from ``cell`` in the fixed MOVES order: [(k, (r, c)), ...]."""
    h, w = obstacles.shape
    r, c = cell
    out = []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        rr, cc = r + dr, c + dc
        if 0 <= rr < h and 0 <= cc < w and not obstacles[rr, cc]:
            out.append((k, (rr, cc)))
    return out


def as_path(cells) -> np.ndarray:
    """Cells as an (L, 2) int32 route."""
    return np.asarray(cells, np.int32).reshape(-1, 2)
