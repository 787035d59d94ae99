"""The SciPy graph of a scene: an edge-cost field as a ``scipy.sparse`` matrix.

Node ``r * W + c`` is cell ``(r, c)``; the edge ``u -> u + MOVES[k]`` carries
``C[k, u]`` for every finite entry of the (8, H, W) field, entered move by move in
``MOVES`` order and cells in row-major order (so ``scipy.sparse.csgraph`` searches
break ties the same way on every call). Used by the cohort maker's exact labels, the
scored-route test material, the tests and ``bench/reference.py`` as the independent
SciPy check of the JAX value iteration.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from passage_jax.graph import MOVES, edge_cost_field_np

__all__ = ["scipy_graph", "scipy_task_graph"]


def scipy_graph(cost_field) -> scipy.sparse.csr_matrix:
    """Directed ``(H*W, H*W)`` CSR graph of the finite entries of an (8, H, W) field.

    ValueError if a finite edge cost is not positive: csgraph reads an explicit zero
    as "no edge" (every registry cost is at least the step length, so this never
    happens for a valid field). Transpose (``.T.tocsr()``) for cost-to-go searches
    from the goal.
    """
    cost_field = np.asarray(cost_field, np.float64)
    _, h, w = cost_field.shape
    idx = np.arange(h * w).reshape(h, w)
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        ok = np.isfinite(cost_field[k])
        r, c = np.nonzero(ok)
        rows.append(idx[r, c])
        cols.append(idx[r + dr, c + dc])
        vals.append(cost_field[k][ok])
    vals = np.concatenate(vals)
    if vals.size and not vals.min() > 0:
        raise ValueError(f"non-positive edge cost {vals.min()}")
    return scipy.sparse.csr_matrix((vals, (np.concatenate(rows), np.concatenate(cols))),
                                   shape=(h * w, h * w))


def scipy_task_graph(z, obstacles, model: str, weight: float,
                     pixel_size_m: float = 30.0) -> scipy.sparse.csr_matrix:
    """:func:`scipy_graph` of the float64 NumPy edge-cost field of one task."""
    return scipy_graph(edge_cost_field_np(z, obstacles, model, weight, pixel_size_m))
