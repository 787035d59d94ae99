"""The learned-search report of the literature, per procedure against plain A*
(host side, NumPy, float64).

TransPath (Kirilenko et al., AAAI 2023) and Neural A* (Yonetani et al., ICML 2021)
report a learned search by how much search it saves against plain A* on the same
tasks and what that costs in route quality. :func:`search_report` takes, per task,
one procedure's total expansions (every stage), plain A*'s expansions on the same
task, the route cost, c* (the exact optimal cost), the success flag, the task's
admissible octile lower bound (or the hard-subset mask itself) and the wall time per
request, and returns the figures below, over all tasks (``"all"``) and over
TransPath's hard subset (``"hard"``: tasks with ``c* / lower_bound >= 1.05``, where
the straight line is a poor guide).

Decisions (each figure's definition):

* **Expansion ratio** ``r = procedure expansions / A* expansions`` per task,
  summarised by its median, arithmetic mean and geometric mean. Tasks where A*
  reported 0 expansions or failed (no route: budget spent or no path) have no
  ratio: they are left out of every ratio figure and counted
  (``n_excluded_astar_zero``, ``n_excluded_astar_failed``; a task both failed and at
  zero is counted as failed). A procedure's failure keeps its ratio (the expansions
  were spent). A ratio of exactly 0 (the procedure expanded nothing) enters the
  median and the mean but not the geometric mean (log 0), which is taken over the
  positive ratios; ``n_ratio_zero`` counts them.
* **Exp** (Neural A*): ``exp_reduction_pct = 100 * mean(max(0, 1 - r))``, the
  arithmetic mean over the ratio tasks of the per-task reduction clipped at 0, which
  is Neural A*'s ``p_exp`` (its published code clips and takes the arithmetic mean);
  ``exp_reduction_geomean_pct = 100 * (1 - geomean(r))`` is the unclipped figure of
  the typical task (negative when the procedure expands more than A*).
* **Cost excess** ``cost / c* - 1`` averaged over the *successful* tasks only
  (``cost_excess_mean``; a failure has no route cost): failures are not counted in
  it, they show in ``success_rate`` beside it, and ``n_success`` says how many tasks
  the mean is over (NaN over none).
* **Opt** (Neural A*): ``optimal_rate``, the share of *all* tasks (a failure counts
  as not optimal) whose route cost is within a relative ``1e-9`` of c*
  (``|cost - c*| <= 1e-9 * c*``).
* **Wall time**: the median wall time per request of the procedure
  (``wall_ms_median``; callers include the forward pass of a learned guide) beside
  plain A*'s median on the same tasks (``astar_wall_ms_median``).

Every figure is NaN over zero tasks (e.g. an empty hard subset); the counts say why.
"""
from __future__ import annotations

import math

import numpy as np

from passage_jax.graph.moves import STEP_PIXELS

__all__ = ["HARD_RATIO", "OPTIMAL_RTOL", "octile_lower_bound", "hard_subset_mask", "search_report",
           "SEARCH_REPORT_FIGURES"]

#: TransPath's hard subset: c* / octile lower bound at least this.
HARD_RATIO = 1.05
#: relative tolerance of an optimal route (Neural A*'s "Opt")
OPTIMAL_RTOL = 1e-9
#: the figures of each subset of :func:`search_report`, in table order
SEARCH_REPORT_FIGURES = (
    "n_tasks", "n_ratio", "n_excluded_astar_zero", "n_excluded_astar_failed", "n_ratio_zero",
    "ratio_median", "ratio_mean", "ratio_geomean", "exp_reduction_pct", "exp_reduction_geomean_pct",
    "n_success", "success_rate", "cost_excess_mean", "optimal_rate", "wall_ms_median",
    "astar_wall_ms_median",
)


def octile_lower_bound(start, goal, pixel_size_m: float = 30.0, scale: float = 1.0) -> np.ndarray:
    """(n,) float64 octile distance from each start to its goal in metres times ``scale``
    (the smallest step cost per metre; 1 is admissible for every registered cost model
    with a non-negative weight, since every step costs at least its length).
    ``start``/``goal``: (n, 2) or (2,) cells."""
    s = np.asarray(start, np.float64).reshape(-1, 2)
    g = np.asarray(goal, np.float64).reshape(-1, 2)
    d = np.abs(s - g)
    lo, hi = d.min(axis=1), d.max(axis=1)
    diag = float(STEP_PIXELS.max())  # sqrt(2)
    return (hi - lo + diag * lo) * float(pixel_size_m) * np.asarray(scale, np.float64)


def hard_subset_mask(c_star, lower_bound, threshold: float = HARD_RATIO) -> np.ndarray:
    """TransPath's hard tasks: ``c* / lower_bound >= threshold``; a task with a bound
    <= 0 (start at the goal) or a non-finite c* is not hard."""
    c = np.asarray(c_star, np.float64)
    lb = np.asarray(lower_bound, np.float64)
    ok = (lb > 0) & np.isfinite(c) & np.isfinite(lb)
    ratio = np.divide(c, np.where(ok, lb, 1.0))
    return ok & (ratio >= threshold)


def _nan_stat(fn, v):
    return float(fn(v)) if v.size else math.nan


def _subset(m, v: dict, rtol: float) -> dict:
    """The figures over the tasks of mask ``m`` of the checked columns ``v``."""
    exp, a_exp, a_ok, cost, c_star = v["exp"], v["a_exp"], v["a_ok"], v["cost"], v["c_star"]
    n = int(m.sum())
    zero = m & a_ok & (a_exp <= 0)
    failed = m & ~a_ok
    use = m & a_ok & (a_exp > 0)
    r = exp[use] / a_exp[use]
    pos = r[r > 0]
    geo = float(np.exp(np.mean(np.log(pos)))) if pos.size else math.nan
    succ = m & v["success"]
    excess = cost[succ] / c_star[succ] - 1.0
    optimal = succ & (np.abs(cost - c_star) <= rtol * np.abs(c_star))
    wall, a_wall = v["wall"], v["a_wall"]
    return {
        "n_tasks": n, "n_ratio": int(use.sum()),
        "n_excluded_astar_zero": int(zero.sum()), "n_excluded_astar_failed": int(failed.sum()),
        "n_ratio_zero": int((r == 0).sum()),
        "ratio_median": _nan_stat(np.median, r), "ratio_mean": _nan_stat(np.mean, r),
        "ratio_geomean": geo,
        "exp_reduction_pct": _nan_stat(np.mean, 100.0 * np.maximum(0.0, 1.0 - r)),
        "exp_reduction_geomean_pct": 100.0 * (1.0 - geo) if geo == geo else math.nan,
        "n_success": int(succ.sum()),
        "success_rate": float(succ.sum() / n) if n else math.nan,
        "cost_excess_mean": _nan_stat(np.mean, excess),
        "optimal_rate": float(optimal.sum() / n) if n else math.nan,
        "wall_ms_median": _nan_stat(np.median, wall[m & np.isfinite(wall)]),
        "astar_wall_ms_median": _nan_stat(np.median, a_wall[m & np.isfinite(a_wall)]),
    }


def _column(source: dict, key: str, n: int | None, dtype=np.float64, default=None) -> np.ndarray:
    x = source.get(key)
    if x is None:
        if default is None:
            raise ValueError(f"search_report: {key!r} is required")
        return np.full(n, default, dtype)
    v = np.asarray(x, dtype).reshape(-1)
    if n is not None and v.size != n:
        raise ValueError(f"search_report: {key!r} has {v.size} values for {n} tasks")
    return v


def search_report(procedure: dict, astar: dict, *, lower_bound=None, hard=None,
                  threshold: float = HARD_RATIO, rtol: float = OPTIMAL_RTOL) -> dict:
    """The learned-search figures of one procedure against plain A* (module text).

    ``procedure``: per-task arrays (all length n) ``expansions`` (total over every
    stage), ``cost`` (route cost; ignored where ``success`` is false, may be NaN
    there), ``c_star`` (optimal cost), ``success`` (legal route) and optionally
    ``wall_ms`` (wall time per request; NaN where not measured). ``astar``: plain A*'s
    ``expansions`` on the same tasks and optionally ``success`` (default all true) and
    ``wall_ms``. ``lower_bound`` (the admissible octile lower bound of each task's cost)
    or ``hard`` (the hard-subset mask itself): one of them, or neither, then the hard
    subset is reported unavailable (``"hard": None``).

    Returns ``{"all": figures, "hard": figures or None, "hard_rule": str, "n_hard": int
    or None}``, figures keyed by :data:`SEARCH_REPORT_FIGURES`.
    """
    exp = _column(procedure, "expansions", None)
    n = exp.size
    v = {"exp": exp, "a_exp": _column(astar, "expansions", n),
         "cost": _column(procedure, "cost", n), "c_star": _column(procedure, "c_star", n),
         "success": _column(procedure, "success", n, bool),
         "a_ok": _column(astar, "success", n, bool, True),
         "wall": _column(procedure, "wall_ms", n, default=math.nan),
         "a_wall": _column(astar, "wall_ms", n, default=math.nan)}
    if lower_bound is not None and hard is not None:
        raise ValueError("search_report: pass lower_bound or hard, not both")
    if np.any(~np.isfinite(exp) | (exp < 0)):
        raise ValueError("search_report: expansions must be finite and non-negative")
    v["success"] = v["success"] & np.isfinite(v["cost"]) & np.isfinite(v["c_star"])
    if hard is not None:
        hmask, rule = _column({"hard": hard}, "hard", n, bool), "hard mask given by the caller"
    elif lower_bound is not None:
        hmask = hard_subset_mask(v["c_star"], _column({"lower_bound": lower_bound}, "lower_bound", n),
                                 threshold)
        rule = f"c* / octile lower bound >= {threshold:g}"
    else:
        hmask, rule = None, "n/a: no lower bound or hard mask given"
    return {
        "all": _subset(np.ones(n, bool), v, rtol),
        "hard": None if hmask is None else _subset(hmask, v, rtol),
        "hard_rule": rule,
        "n_hard": None if hmask is None else int(hmask.sum()),
    }
