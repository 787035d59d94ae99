"""Grid operators on the 8-connected grid, written once (contract §2, §3.1).

Every field is indexed ``[..., r, c]`` (leading axes are batch axes); a move is
``MOVES[k] = (d_row, d_col)``; an edge-cost field ``C`` has shape ``(..., 8, H, W)``
with ``C[k, r, c]`` the cost of the move from ``(r, c)`` by ``MOVES[k]`` (+inf when
illegal). Functions take an array namespace ``xp`` (``jax.numpy`` by default,
NumPy for host code) and are pure and jittable under ``jax.numpy``.

* :func:`shift` and :func:`neighbours` — ``a[r + dr, c + dc]`` with a fill value
  outside the grid, and the stack of the 8 neighbours in ``MOVES`` order;
* :func:`move_values` — ``Q[k, u] = C[k, u] + V(u + MOVES[k])``, the additions in
  Dijkstra's order (step cost plus the successor's cost-to-go);
* :func:`bellman_backup` — ``min_k Q[k, u]`` (the Bellman operator without the goal
  condition);
* :func:`descent_policy` — the first ``k`` in ``MOVES`` order among the exact
  minima of ``Q`` (the fixed tie-break), with the backed-up value.

Users: the edge-cost fields (``passage_jax.graph.costs``), the reference value
iteration (``passage_jax.reference.vi``) and the field diagnostics
(``passage_jax.metrics.fields``).
"""
from __future__ import annotations

import jax.numpy as jnp

from passage_jax.graph.moves import MOVES

__all__ = ["shift", "neighbours", "cell_mask", "move_values", "bellman_backup", "descent_policy"]


def shift(a, d_row: int, d_col: int, fill, xp=jnp):
    """``out[..., r, c] = a[..., r + d_row, c + d_col]``, ``fill`` outside the grid
    (any static offset)."""
    k = max(abs(int(d_row)), abs(int(d_col)))
    if k == 0:
        return a
    h, w = a.shape[-2:]
    pad = ((0, 0),) * (a.ndim - 2) + ((k, k), (k, k))
    p = xp.pad(a, pad, constant_values=fill)
    return p[..., k + d_row:k + d_row + h, k + d_col:k + d_col + w]


def neighbours(a, fill, xp=jnp):
    """``(..., 8, H, W)`` stack with ``[k, r, c] = a[r + dr_k, c + dc_k]`` (``fill`` outside)."""
    return xp.stack([shift(a, dr, dc, fill, xp) for dr, dc in MOVES.tolist()], axis=-3)


def cell_mask(shape, cell, xp=jnp):
    """Bool ``(H, W)`` mask that is True at ``cell = (row, col)`` only (traced cells allowed)."""
    r = xp.arange(shape[0])[:, None]
    c = xp.arange(shape[1])[None, :]
    return (r == cell[0]) & (c == cell[1])


def move_values(values, edge_costs, xp=jnp):
    """``Q[..., k, r, c] = C[..., k, r, c] + V[..., r + dr_k, c + dc_k]`` (+inf off the grid)."""
    return edge_costs + neighbours(values, xp.inf, xp)


def _move_value(values, edge_costs, k, xp):
    dr, dc = MOVES[k].tolist()
    return edge_costs[..., k, :, :] + shift(values, dr, dc, xp.inf, xp)


# bellman_backup and descent_policy run a minimum over the 8 moves one move at a time
# instead of reducing the (8, H, W) stack of move_values: XLA then fuses the shifts and
# never materialises the stack (measured ~10x faster on a 256x256 CPU Jacobi sweep).

def bellman_backup(values, edge_costs, xp=jnp):
    """``min_k (C[k, u] + V(u + MOVES[k]))`` per cell (+inf where no legal move; NaN
    propagates, as in a reduction)."""
    best = _move_value(values, edge_costs, 0, xp)
    for k in range(1, len(MOVES)):
        best = xp.minimum(best, _move_value(values, edge_costs, k, xp))
    return best


def descent_policy(values, edge_costs, xp=jnp):
    """Greedy descent on ``V``: ``(move, backup)`` per cell, ``move`` (int32) the first
    index into ``MOVES`` among the exact minima of ``C[k, u] + V(u + MOVES[k])`` (ties go
    to the earlier move; a NaN counts as the minimum, as in ``argmin``) and ``backup``
    that minimum (:func:`bellman_backup`)."""
    best = _move_value(values, edge_costs, 0, xp)
    move = xp.zeros(best.shape, xp.int32)
    for k in range(1, len(MOVES)):
        q = _move_value(values, edge_costs, k, xp)
        better = (q < best) | (xp.isnan(q) & ~xp.isnan(best))  # strict: earlier k wins ties
        best = xp.where(better, q, best)
        move = xp.where(better, xp.int32(k), move)
    return move, best
