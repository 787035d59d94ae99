"""The four trustworthiness axes (docs/trust.md § Axes): stability, geographic hold-out,
ODD boundary and same-device efficiency.

Each axis is a jittable kernel on arrays (:func:`coefficient_of_variation`,
:func:`mean_difference`, :func:`boundary_delta`, :func:`speedup`) and a host function that
validates its inputs, runs the kernel in float64 and returns an :class:`AxisResult`
(``value``, ``threshold``, ``fires``, ``available``, ``details``). Thresholds and firing rules:

| axis | value | fires when | default threshold |
|---|---|---|---|
| stability | σ/|μ| of the per-seed regret p90 (σ with ddof 0) | value > threshold | 0.25 |
| geographic | mean(hold-out) − mean(matched random split) | hold-out is worse (sign only) | 0 |
| ODD boundary | mean(top-quantile slice) − mean(all) | the boundary slice is worse (sign only) | 0 |
| efficiency | T_oracle / T_planner (medians) | value < threshold | 1.0 |

"Worse" follows the metric's direction: higher for ``success``, lower for every other field.
Means are over finite values (geometry is NaN off valid routes). None of the flags is a
significance test.

Precision: every axis value is float64. Where the backend has float64 the kernel runs under
:func:`passage_jax.precision.kernel_x64`; without it (``kernel_precision() == "float32"``: a
TPU, or ``PASSAGE_JAX_NO_X64=1``) the host function evaluates the same definitions with NumPy
in float64 (one pass over at most a few thousand numbers: cheap host work, and a flag that
compares a value with its threshold must not flip on float32 rounding). ``details["precision"]``
says which ran: ``"float64"`` (kernel) or ``"float64-host"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.checks import is_number, require_number
from passage_jax.contract import DIRECTIONS, METRIC_SPEC
from passage_jax.precision import kernel_precision, kernel_x64
from passage_jax.reduce import masked_mean, masked_percentile

__all__ = [
    "AxisResult", "FIELD_DIRECTIONS", "STABILITY_THRESHOLD", "EFFICIENCY_THRESHOLD",
    "DEFAULT_TOP_QUANTILE", "coefficient_of_variation", "mean_difference", "boundary_delta",
    "speedup", "stability_axis", "geographic_axis", "odd_boundary_axis", "efficiency_axis",
    "higher_is_better",
]

#: CV of the per-seed regret p90 above which a planner is flagged training-unstable
STABILITY_THRESHOLD = 0.25
#: speed-up over the oracle below which the efficiency axis fires
EFFICIENCY_THRESHOLD = 1.0
#: share of tasks with the largest stratifier values that form the boundary slice
DEFAULT_TOP_QUANTILE = 0.1
#: per-task field -> "lower" or "higher" (which is better), from the contract
FIELD_DIRECTIONS = {f: DIRECTIONS[m] for m, (f, _, _) in METRIC_SPEC.items()}


def higher_is_better(field_name: str) -> bool:
    """Direction of a per-task field (``regret``, ``assd``, ``h95``, ``success``,
    ``obstacle_violation``); an unknown name raises."""
    if field_name not in FIELD_DIRECTIONS:
        raise ValueError(f"unknown per-task field {field_name!r}; choose one of "
                         f"{sorted(FIELD_DIRECTIONS)}")
    return FIELD_DIRECTIONS[field_name] == "higher"


@dataclass(frozen=True)
class AxisResult:
    """One axis: its value, threshold and whether it fires (False when unavailable)."""
    axis: str
    value: float
    threshold: float
    fires: bool
    available: bool = True
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "value": self.value, "threshold": self.threshold,
                "fires": self.fires, "available": self.available, "details": dict(self.details)}


# --------------------------------------------------------------------------- #
# kernels (pure, jittable)
# --------------------------------------------------------------------------- #

def coefficient_of_variation(x):
    """σ/|μ| of a 1-D array (σ with ddof 0): 0 when every value is equal, +inf when the
    mean is 0 but the values differ; NaN propagates."""
    x = jnp.asarray(x)
    mu = jnp.mean(x)
    sd = jnp.sqrt(jnp.mean((x - mu) ** 2))
    safe = jnp.where(mu == 0, 1.0, jnp.abs(mu))
    cv = jnp.where(mu == 0, jnp.inf, sd / safe)
    return jnp.where(sd == 0, jnp.zeros_like(cv), cv)


def mean_difference(a, b):
    """``mean(a) - mean(b)`` over each array's finite values (NaN when one has none)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    return masked_mean(a, jnp.isfinite(a)) - masked_mean(b, jnp.isfinite(b))


def boundary_delta(values, stratifier, top_quantile):
    """(Δ, cut, n_boundary, mean_boundary, mean_full) for 1-D ``values`` and ``stratifier``.

    The boundary slice holds the tasks whose stratifier is at or above ``cut``, the
    ``100 (1 - top_quantile)``-th linear percentile of the stratifier (NumPy's default);
    ``Δ = mean(values[slice]) - mean(values)``, both over finite values. The stratifier
    must be finite (checked by :func:`odd_boundary_axis`)."""
    values, stratifier = jnp.asarray(values), jnp.asarray(stratifier)
    cut = masked_percentile(stratifier, jnp.ones(stratifier.shape, bool),
                            100.0 * (1.0 - top_quantile))
    edge = stratifier >= cut
    ok = jnp.isfinite(values)
    mb = masked_mean(values, edge & ok)
    mf = masked_mean(values, ok)
    return mb - mf, cut, jnp.sum(edge), mb, mf


def speedup(t_oracle, t_planner):
    """``median(t_oracle) / median(t_planner)`` (linear median of the finite times)."""
    to, tp = jnp.atleast_1d(jnp.asarray(t_oracle)), jnp.atleast_1d(jnp.asarray(t_planner))
    mo = masked_percentile(to, jnp.isfinite(to), 50.0)
    mp = masked_percentile(tp, jnp.isfinite(tp), 50.0)
    return mo / mp


# --------------------------------------------------------------------------- #
# the same definitions in NumPy float64 (for backends without float64)
# --------------------------------------------------------------------------- #

def _finite_mean(x, m=None):
    keep = np.isfinite(x) if m is None else (m & np.isfinite(x))
    return float(np.mean(x[keep])) if keep.any() else float("nan")


def _cv_host(x):
    mu = float(np.mean(x))
    sd = float(np.sqrt(np.mean((x - mu) ** 2)))
    if sd == 0 or math.isnan(sd):
        return sd if math.isnan(sd) else 0.0
    return math.inf if mu == 0 else sd / abs(mu)


def _mean_difference_host(a, b):
    return _finite_mean(a) - _finite_mean(b)


def _boundary_delta_host(v, s, top_quantile):
    """:func:`boundary_delta` of each row of ``v`` (S, n): arrays (d, cut, nb, mb, mf)."""
    cut = float(np.percentile(s, 100.0 * (1.0 - top_quantile)))
    edge = s >= cut
    mb = np.array([_finite_mean(row, edge) for row in v])
    mf = np.array([_finite_mean(row) for row in v])
    rows = len(v)
    return mb - mf, np.full(rows, cut), np.full(rows, int(edge.sum())), mb, mf


def _speedup_host(to, tp):
    return float(np.median(to[np.isfinite(to)]) / np.median(tp[np.isfinite(tp)]))


def _precision() -> str:
    return "float64" if kernel_precision() == "float64" else "float64-host"


# --------------------------------------------------------------------------- #
# host entry points
# --------------------------------------------------------------------------- #

def _vector(x, name: str, allow_nan: bool = False) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected numbers, got dtype {a.dtype}")
    a = np.atleast_1d(a.astype(np.float64))
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name}: empty")
    if not allow_nan:
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise ValueError(f"{name}: entry {int(bad[0])} is {a[bad[0]]} ({bad.size} non-finite)")
    return a


def _threshold(t, name: str) -> float:
    return require_number(t, name)


def stability_axis(per_seed_p90, *, threshold: float = STABILITY_THRESHOLD,
                   seeds=None) -> AxisResult:
    """Stability: coefficient of variation of the per-seed regret p90 (at least two seeds);
    fires when it exceeds ``threshold`` (0.25)."""
    x = _vector(per_seed_p90, "per-seed regret p90")
    thr = _threshold(threshold, "threshold")
    if x.size < 2:
        raise ValueError(f"stability needs the regret p90 of at least two seeds, got {x.size}")
    if seeds is not None and len(seeds) != x.size:
        raise ValueError(f"{len(seeds)} seeds for {x.size} regret p90 values")
    if kernel_precision() == "float64":
        with kernel_x64():
            cv = float(jax.jit(coefficient_of_variation)(x))
    else:
        cv = _cv_host(x)
    details = {"per_seed": (x.tolist() if seeds is None
                            else {str(s): float(v) for s, v in zip(seeds, x)}),
               "mean": float(np.mean(x)), "std_ddof0": float(np.std(x)), "n_seeds": int(x.size),
               "precision": _precision()}
    return AxisResult("stability", cv, thr, bool(cv > thr), True, details)


def geographic_axis(holdout, matched_random, *, higher_is_better: bool = False) -> AxisResult:
    """Geographic: ``mean(holdout) - mean(matched_random)`` of one per-task metric (finite
    values); fires when the hold-out mean is worse (sign only, threshold 0)."""
    h = _vector(holdout, "hold-out values", allow_nan=True)
    r = _vector(matched_random, "matched random split values", allow_nan=True)
    for name, v in (("hold-out values", h), ("matched random split values", r)):
        if not np.isfinite(v).any():
            raise ValueError(f"{name}: no finite value")
    if kernel_precision() == "float64":
        with kernel_x64():
            d = float(jax.jit(mean_difference)(h, r))
    else:
        d = _mean_difference_host(h, r)
    worse = d < 0 if higher_is_better else d > 0
    details = {"mean_holdout": float(np.mean(h[np.isfinite(h)])),
               "mean_matched_random": float(np.mean(r[np.isfinite(r)])),
               "n_holdout": int(np.isfinite(h).sum()), "n_matched_random": int(np.isfinite(r).sum()),
               "higher_is_better": bool(higher_is_better), "precision": _precision()}
    return AxisResult("geographic", d, 0.0, bool(worse), True, details)


def odd_boundary_axis(values, stratifier, *, top_quantile: float = DEFAULT_TOP_QUANTILE,
                      higher_is_better: bool = False) -> AxisResult:
    """ODD boundary: mean of the top-``top_quantile`` stratifier slice minus the full mean.

    ``values`` is (n,) or (S, n) (one row per training seed over the same tasks); with
    several rows the value is the mean of the per-row Δ. ``stratifier`` is (n,), finite.
    Fires when Δ is worse (> 0 for lower-is-better, < 0 for success; threshold 0). A slice
    without a finite value makes the axis unavailable (NaN, not firing)."""
    v = np.asarray(values)
    if v.dtype.kind not in "biuf":
        raise ValueError(f"values: expected numbers, got dtype {v.dtype}")
    v = np.atleast_2d(v.astype(np.float64))
    if v.ndim != 2:
        raise ValueError(f"values: expected (n,) or (seeds, n), got shape {np.shape(values)}")
    s = _vector(stratifier, "stratifier")
    if v.shape[1] != s.size:
        raise ValueError(f"values have {v.shape[1]} tasks, the stratifier {s.size}")
    if not is_number(top_quantile) or not 0.0 < float(top_quantile) < 1.0:
        raise ValueError(f"top_quantile must be in (0, 1), got {top_quantile!r}")
    if kernel_precision() == "float64":
        with kernel_x64():
            fn = jax.jit(jax.vmap(boundary_delta, in_axes=(0, None, None)))
            d, cut, nb, mb, mf = (np.asarray(o) for o in fn(v, s, float(top_quantile)))
    else:
        d, cut, nb, mb, mf = _boundary_delta_host(v, s, float(top_quantile))
    details = {"top_quantile": float(top_quantile), "cut": float(cut[0]),
               "n_boundary": int(nb[0]), "n_tasks": int(s.size),
               "per_row": [{"delta": float(a), "mean_boundary": float(b), "mean_full": float(c)}
                           for a, b, c in zip(d, mb, mf)],
               "higher_is_better": bool(higher_is_better), "precision": _precision()}
    if not np.all(np.isfinite(d)):
        details["reason"] = "the boundary slice (or all tasks) has no finite value in some row"
        return AxisResult("odd_boundary", float("nan"), 0.0, False, False, details)
    delta = float(np.mean(d))
    worse = delta < 0 if higher_is_better else delta > 0
    return AxisResult("odd_boundary", delta, 0.0, bool(worse), True, details)


def efficiency_axis(t_oracle, t_planner, *,
                    threshold: float = EFFICIENCY_THRESHOLD) -> AxisResult:
    """Efficiency: speed-up ``T_oracle / T_planner`` on the same device (scalars, or arrays
    summarised by their median); fires when below ``threshold`` (1.0). Times must be finite
    and positive."""
    to = _vector(t_oracle, "oracle times")
    tp = _vector(t_planner, "planner times")
    thr = _threshold(threshold, "threshold")
    for name, t in (("oracle times", to), ("planner times", tp)):
        if np.any(t <= 0):
            raise ValueError(f"{name}: entry {int(np.flatnonzero(t <= 0)[0])} is not positive")
    if kernel_precision() == "float64":
        with kernel_x64():
            value = float(jax.jit(speedup)(to, tp))
    else:
        value = _speedup_host(to, tp)
    details = {"t_oracle": float(np.median(to)), "t_planner": float(np.median(tp)),
               "n_oracle": int(to.size), "n_planner": int(tp.size), "precision": _precision()}
    return AxisResult("efficiency", value, thr, bool(value < thr), True, details)
