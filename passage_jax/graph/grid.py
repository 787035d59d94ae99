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
* :func:`descent_policy` — the first ``k`` in ``MOVES`` order among the moves whose
  ``Q`` is within :data:`TIE_RTOL` of the minimum (the route tie rule), with the
  backed-up value.

Users: the edge-cost fields (``passage_jax.graph.costs``), the reference value
iteration (``passage_jax.reference.vi``) and the field diagnostics
(``passage_jax.metrics.fields``).
"""
from __future__ import annotations

import jax.numpy as jnp

from passage_jax.graph.moves import MOVES

__all__ = ["shift", "neighbours", "cell_mask", "move_values", "bellman_backup", "descent_policy",
           "TIE_RTOL"]

#: The route tie rule's tolerance (``docs/reference.md`` § Route extraction): a move whose
#: total ``C[k, u] + V(u + MOVES[k])`` is within ``TIE_RTOL * |best|`` of the cell's best
#: total is tied with it, and a tie goes to the earliest move in ``MOVES`` order. Float
#: noise in a converged float64 or double-float field is below 1e-12 relative at every
#: shipped resolution; a route that takes a tied move at each of its n steps costs at
#: most ``n * TIE_RTOL`` relative above c* (4e-7 at n = 4,096).
TIE_RTOL = 1e-10


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


def descent_policy(values, edge_costs, xp=jnp, rtol: float = TIE_RTOL):
    """Greedy descent on ``V``: ``(move, backup)`` per cell. ``backup`` is the minimum
    ``best`` of ``Q[k, u] = C[k, u] + V(u + MOVES[k])`` (:func:`bellman_backup`); ``move``
    (int32) is the first index into ``MOVES`` whose ``Q`` lies within ``rtol * |best|``
    of it (the route tie rule, ``docs/reference.md``): moves whose totals differ by
    float noise alone are tied, and the tie goes to the earlier move whatever the order
    of the additions, the backend or the precision path. A NaN counts as the minimum
    (the first NaN move, as in ``argmin``); a cell without a legal move backs up +inf
    and takes move 0."""
    qs = [_move_value(values, edge_costs, k, xp) for k in range(len(MOVES))]
    best = qs[0]
    for q in qs[1:]:
        best = xp.minimum(best, q)  # NaN propagates
    bound = best + rtol * xp.abs(best)
    nan = xp.isnan(best)
    move = xp.zeros(best.shape, xp.int32)
    for k in range(len(MOVES) - 1, -1, -1):  # the earliest tied move is set last
        tied = (qs[k] <= bound) | (nan & xp.isnan(qs[k]))
        move = xp.where(tied, xp.int32(k), move)
    return move, best
