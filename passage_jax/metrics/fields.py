"""Field diagnostics for learned cost-to-go predictors (jittable, one scene each;
``vmap`` for batches).

Conventions: fields are (H, W); ``edge_costs`` is the (8, H, W) field of
:func:`passage_jax.graph.edge_cost_field` (C[k, r, c] = cost of the move from
(r, c) by ``MOVES[k]``, +inf when illegal); ``reachable`` is a bool (H, W) mask,
normally ``isfinite(V*)`` of the exact cost-to-go. Moves are tried in the
fixed ``MOVES`` order, so ties go to the earlier move. The shifts, the Bellman
backup and the descent policy are those of :mod:`passage_jax.graph.grid`, the ones
the reference value iteration uses.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from passage_jax.graph.grid import bellman_backup, cell_mask, descent_policy, shift
from passage_jax.reduce import masked_mean, masked_percentile

__all__ = [
    "bellman_residual", "descent_direction", "descent_direction_agreement", "ssi_mae",
    "neighbour_ranking_agreement", "dilate", "boundary_f_score", "component_labels", "component_count",
    "start_goal_connected", "expansions_ratio", "fallback_free_rate"
]


def bellman_residual(v_pred, edge_costs, goal, reachable):
    """Mean |V(s) - min_n (c(s, n) + V(n))| over reachable non-goal cells,
    divided by mean |V| over the reachable cells. NaN if no such cell."""
    v_pred = jnp.asarray(v_pred)
    cells = jnp.asarray(reachable, bool) & ~cell_mask(v_pred.shape, goal)
    backup = bellman_backup(v_pred, edge_costs)
    resid = jnp.abs(v_pred - backup)
    cells = cells & jnp.isfinite(backup)
    scale = masked_mean(jnp.abs(v_pred), jnp.asarray(reachable, bool))
    return masked_mean(resid, cells) / scale


def descent_direction(v, edge_costs):
    """(H, W) int32: index into ``MOVES`` of the greedy Bellman choice
    argmin_k (C[k, s] + V(s + MOVES[k])) (first of the ties); the move of
    :func:`passage_jax.graph.descent_policy`."""
    return descent_policy(v, edge_costs)[0]


def descent_direction_agreement(v_pred, v_true, edge_costs, goal, reachable):
    """Fraction of reachable, non-goal cells (obstacle cells are never
    reachable) whose greedy descent move under ``v_pred`` equals the one under
    the exact ``v_true``."""
    cells = jnp.asarray(reachable, bool) & ~cell_mask(jnp.shape(v_pred), goal)
    agree = descent_direction(v_pred, edge_costs) == descent_direction(v_true, edge_costs)
    return masked_mean(agree.astype(jnp.asarray(v_pred).dtype), cells)


def ssi_mae(pred, target, mask):
    """Scale-and-shift-invariant MAE: fit ``a, b`` by least squares
    (``a * pred + b ~ target`` on ``mask``), then the mean absolute residual.
    A constant prediction gets a = 0, b = mean(target)."""
    pred = jnp.asarray(pred)
    target = jnp.asarray(target, pred.dtype)
    m = jnp.asarray(mask, bool)
    mp = masked_mean(pred, m)
    mt = masked_mean(target, m)
    dp = jnp.where(m, pred - mp, 0)
    dt = jnp.where(m, target - mt, 0)
    var = jnp.sum(dp * dp)
    a = jnp.where(var > 0, jnp.sum(dp * dt) / jnp.where(var > 0, var, 1), 0.0)
    b = mt - a * mp
    return masked_mean(jnp.abs(a * pred + b - target), m)


_PAIR_OFFSETS = ((0, 1), (1, 0), (1, 1), (1, -1))  # each unordered 8-neighbour pair once


def neighbour_ranking_agreement(pred, target, mask, margin=1e-6):
    """Fraction of 8-neighbour cell pairs (both in ``mask``) whose target values
    differ by more than ``margin`` and whose predicted values order them the
    same way. NaN when no pair qualifies."""
    pred = jnp.asarray(pred)
    target = jnp.asarray(target)
    m = jnp.asarray(mask, bool)
    agree = jnp.zeros((), jnp.int32)
    count = jnp.zeros((), jnp.int32)
    for dr, dc in _PAIR_OFFSETS:
        pn = shift(pred, dr, dc, 0)
        tn = shift(target, dr, dc, 0)
        mn = shift(m, dr, dc, False)
        dt = tn - target
        ok = m & mn & (jnp.abs(dt) > margin)
        same = jnp.sign(pn - pred) == jnp.sign(dt)
        agree = agree + jnp.sum(ok & same, dtype=jnp.int32)
        count = count + jnp.sum(ok, dtype=jnp.int32)
    return jnp.where(count > 0, agree / jnp.maximum(count, 1), jnp.nan)


def dilate(mask, radius):
    """Cells within Euclidean distance ``radius`` (static) of a True cell."""
    mask = jnp.asarray(mask, bool)
    k = int(math.floor(radius))
    out = mask
    for dr in range(-k, k + 1):
        for dc in range(-k, k + 1):
            if (dr or dc) and dr * dr + dc * dc <= radius * radius:
                out = out | shift(mask, dr, dc, False)
    return out


def boundary_f_score(pred, gt, tolerance=2):
    """Boundary F-score at ``tolerance`` pixels (static):
    P = |pred & dilate(gt)| / |pred|, R = |gt & dilate(pred)| / |gt|,
    F = 2PR / (P + R). NaN when both masks are empty, 0 when one is."""
    pred = jnp.asarray(pred, bool)
    gt = jnp.asarray(gt, bool)
    n_p = jnp.sum(pred)
    n_g = jnp.sum(gt)
    p = jnp.sum(pred & dilate(gt, tolerance)) / jnp.maximum(n_p, 1)
    r = jnp.sum(gt & dilate(pred, tolerance)) / jnp.maximum(n_g, 1)
    f = jnp.where(p + r > 0, 2 * p * r / jnp.where(p + r > 0, p + r, 1), 0.0)
    return jnp.where((n_p == 0) & (n_g == 0), jnp.nan, f)


def component_labels(mask):
    """8-connected component labels of ``mask`` (0 off the mask): each cell
    gets 1 + the largest flat index in its component. Label propagation by 3x3
    max with pointer jumping, in a ``while_loop`` until nothing changes."""
    mask = jnp.asarray(mask, bool)
    h, w = mask.shape
    idx = jnp.arange(1, h * w + 1, dtype=jnp.int32).reshape(h, w)
    lab0 = jnp.where(mask, idx, 0)

    def step(lab):
        m = lab
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                if dr or dc:
                    m = jnp.maximum(m, shift(lab, dr, dc, 0))
        m = jnp.where(mask, m, 0)
        flat = m.reshape(-1)
        jumped = jnp.where(m > 0, flat[jnp.maximum(m - 1, 0)], 0)
        return jnp.maximum(m, jumped)

    def body(state):
        lab, _ = state
        new = step(lab)
        return new, jnp.any(new != lab)

    lab, _ = jax.lax.while_loop(lambda s: s[1], body, (lab0, jnp.asarray(True)))
    return lab


def component_count(mask):
    """Number of 8-connected components of ``mask > 0``."""
    mask = jnp.asarray(mask) > 0
    lab = component_labels(mask)
    h, w = mask.shape
    idx = jnp.arange(1, h * w + 1, dtype=jnp.int32).reshape(h, w)
    return jnp.sum(mask & (lab == idx), dtype=jnp.int32)


def start_goal_connected(mask, start, goal):
    """Do ``start`` and ``goal`` lie in one 8-connected component of ``mask > 0``?"""
    mask = jnp.asarray(mask) > 0
    lab = component_labels(mask)
    ls = lab[start[0], start[1]]
    lg = lab[goal[0], goal[1]]
    return (ls > 0) & (ls == lg)


def expansions_ratio(planner_expansions, astar_expansions, mask=None):
    """Per-task ratio planner / plain A* expansions, summarised as
    {median, p90, geomean, per_task}; tasks with A* expansions <= 0 or outside
    ``mask`` are left out (their ``per_task`` entry is NaN)."""
    p = jnp.asarray(planner_expansions)
    a = jnp.asarray(astar_expansions)
    ratio = p / jnp.where(a > 0, a, 1).astype(jnp.result_type(p, a, float))
    ok = (a > 0) & jnp.isfinite(ratio) & (ratio > 0)
    if mask is not None:
        ok = ok & jnp.asarray(mask, bool)
    per_task = jnp.where(ok, ratio, jnp.nan)
    return {
        "median": masked_percentile(per_task, ok, 50.0),
        "p90": masked_percentile(per_task, ok, 90.0),
        "geomean": jnp.exp(masked_mean(jnp.log(jnp.where(ok, ratio, 1)), ok)),
        "per_task": per_task,
    }


def fallback_free_rate(fallback_used, mask=None):
    """Fraction of tasks whose decoder did not trigger the exact fallback;
    NaN over zero tasks."""
    f = jnp.asarray(fallback_used, bool)
    m = jnp.ones(f.shape, bool) if mask is None else jnp.asarray(mask, bool)
    return masked_mean((~f).astype(jnp.zeros((), float).dtype), m)
