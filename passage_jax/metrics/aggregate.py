"""Primary aggregates of contract §4, as a jittable masked reducer and a host wrapper.

The percentiles and means are :mod:`passage_jax.reduce`'s; the metric names are
:data:`passage_jax.contract.PRIMARY_METRICS`.

Precision: :func:`primary_metrics` aggregates in float64 always: with the jitted
reducer under x64 where the backend has float64, and otherwise
(:func:`passage_jax.precision.kernel_precision` ``"float32"``) with NumPy on the host
(the same definitions: NumPy's linear percentiles, sum over count), which is cheap
host work over one number per task. :func:`primary_metrics_jax` computes in the
dtype of its inputs; in float32 its means are pairwise sums over exact integer counts.
:func:`precision_statement` is what a caller records next to the metrics.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.metrics.types import metric_dict
from passage_jax.precision import kernel_precision, kernel_x64, pairwise_sum
from passage_jax.reduce import masked_mean, masked_percentile

__all__ = ["GEOMEAN_FLOOR", "GEOMETRY_RTOL_FLOAT32", "regret_summary_jax", "primary_metrics_jax",
           "primary_metrics", "precision_statement"]

#: Floor of ``1 + r`` in the regret geometric mean.
GEOMEAN_FLOOR = -1 + 1e-12
#: Stated relative tolerance of the per-task geometry (ASSD, H95, IoU) computed by the
#: float32 kernels against the float64 path (square roots of exact integer squared
#: distances, pairwise sums over at most ``LONG_ROUTE`` cells: measured below 1e-6).
GEOMETRY_RTOL_FLOAT32 = 1e-5


def _mean(x, m):
    """``masked_mean`` in float64; in a narrower float the pairwise sum of ``x[m]``
    over the exact integer count."""
    if x.dtype == jnp.float64:
        return masked_mean(x, m)
    n = jnp.sum(m, dtype=jnp.int32)
    s = pairwise_sum(jnp.where(m, x, 0).astype(x.dtype))
    return jnp.where(n > 0, s / jnp.maximum(n, 1).astype(x.dtype), jnp.nan)


def regret_summary_jax(regret, mask):
    """median, p90, p95, mean and geomean of ``regret[mask]`` (NaN regrets,
    i.e. c* <= 0, are left out); each NaN when nothing is left."""
    regret = jnp.asarray(regret)
    m = jnp.asarray(mask, bool) & ~jnp.isnan(regret)
    logs = jnp.log1p(jnp.maximum(jnp.where(m, regret, 0), GEOMEAN_FLOOR))
    return {
        "median": masked_percentile(regret, m, 50.0),
        "p90": masked_percentile(regret, m, 90.0),
        "p95": masked_percentile(regret, m, 95.0),
        "mean": _mean(regret, m),
        "geomean": jnp.expm1(_mean(logs, m)),
    }


@jax.jit
def primary_metrics_jax(per_task, mask=None) -> dict:
    """Jittable contract §4 aggregates over the tasks where ``mask`` is True
    (padding rows False). ``per_task`` is a batched
    :class:`~passage_jax.metrics.types.RouteMetrics` or a mapping with ``regret``, ``assd``, ``h95``,
    ``valid_path``, ``connected_path``, ``obstacle_violation`` and
    ``obstacle_traversals`` arrays of equal length (``success`` is taken as
    ``valid_path`` when absent). Rates are NaN over zero tasks."""
    per_task = metric_dict(per_task)
    regret = jnp.asarray(per_task["regret"])
    if mask is None:
        mask = jnp.ones(regret.shape, bool)
    mask = jnp.asarray(mask, bool)
    fdt = regret.dtype
    valid = jnp.asarray(per_task["valid_path"], bool) & mask
    success = jnp.asarray(per_task.get("success", per_task["valid_path"]), bool)
    viol = jnp.asarray(per_task["obstacle_violation"], bool) & mask
    summ = regret_summary_jax(regret, mask)
    return {
        "regret_median": summ["median"],
        "regret_p90": summ["p90"],
        "assd_mean": _mean(jnp.asarray(per_task["assd"], fdt), valid),
        "h95_mean": _mean(jnp.asarray(per_task["h95"], fdt), valid),
        "success_rate": _mean(success.astype(fdt), mask),
        "obstacle_violation_rate": _mean(viol.astype(fdt), mask),
        "n_tasks": jnp.sum(mask, dtype=jnp.int32),
        "n_path_valid": jnp.sum(valid, dtype=jnp.int32),
        "connected_rate": _mean(jnp.asarray(per_task["connected_path"], fdt), mask),
        "mean_traversals_given_violation": _mean(
            jnp.asarray(per_task["obstacle_traversals"], fdt), viol),
        "regret_summary": summ,
    }


def primary_metrics(per_task: dict, valid_mask=None) -> dict:
    """Host aggregates (contract §4) of :func:`score_routes` output, in float64.

    ``valid_mask`` selects the tasks that count (e.g. the reference-qualified
    ones); None counts all. Returns plain Python floats/ints:
    the six primary metrics, ``n_tasks``, ``n_path_valid``, ``connected_rate``,
    ``mean_traversals_given_violation`` and ``regret_summary``
    {median, p90, p95, mean, geomean}, plus ``n_regret_undefined`` (tasks whose
    regret is NaN because c* <= 0; left out of the regret summary).
    """
    regret = np.asarray(per_task["regret"], np.float64)
    n = regret.shape[0]
    mask = np.ones(n, bool) if valid_mask is None else np.asarray(valid_mask, bool)
    if mask.shape != (n,):
        raise ValueError(f"valid_mask has shape {mask.shape}, expected ({n},)")
    keys = ("regret", "assd", "h95", "valid_path", "connected_path", "obstacle_violation",
            "obstacle_traversals", "success")
    missing = [k for k in keys[:-1] if k not in per_task]
    if missing:
        raise ValueError(f"per_task lacks {missing}")
    arrays = {}
    for k in keys:
        if k not in per_task:
            continue
        a = np.asarray(per_task[k])
        if a.shape != (n,):
            raise ValueError(f"per_task[{k!r}] has shape {a.shape}, expected ({n},)")
        arrays[k] = a.astype(np.float64) if k in ("regret", "assd", "h95") else a
    if kernel_precision() == "float64":
        with kernel_x64():
            res = jax.device_get(primary_metrics_jax(arrays, mask))
    else:
        res = _primary_metrics_host(arrays, mask)
    out = {}
    for k, v in res.items():
        if k == "regret_summary":
            out[k] = {kk: float(vv) for kk, vv in v.items()}
        elif k.startswith("n_"):
            out[k] = int(v)
        else:
            out[k] = float(v)
    out["n_regret_undefined"] = int(np.sum(mask & np.isnan(regret)))
    return out


def _host_percentile(x, m, q):
    v = x[m]
    return float(np.percentile(v, q)) if v.size else float("nan")


def _host_mean(x, m):
    n = int(np.count_nonzero(m))
    return float(np.sum(np.where(m, x, 0.0)) / n) if n else float("nan")


def _primary_metrics_host(arrays: dict, mask: np.ndarray) -> dict:
    """:func:`primary_metrics_jax` in float64 with NumPy (same definitions)."""
    regret = arrays["regret"]
    valid = arrays["valid_path"].astype(bool) & mask
    success = arrays.get("success", arrays["valid_path"]).astype(bool)
    viol = arrays["obstacle_violation"].astype(bool) & mask
    m = mask & ~np.isnan(regret)
    with np.errstate(invalid="ignore"):
        logs = np.log1p(np.maximum(np.where(m, regret, 0.0), GEOMEAN_FLOOR))
    summ = {"median": _host_percentile(regret, m, 50.0), "p90": _host_percentile(regret, m, 90.0),
            "p95": _host_percentile(regret, m, 95.0), "mean": _host_mean(regret, m),
            "geomean": float(np.expm1(_host_mean(logs, m)))}
    return {
        "regret_median": summ["median"],
        "regret_p90": summ["p90"],
        "assd_mean": _host_mean(arrays["assd"], valid),
        "h95_mean": _host_mean(arrays["h95"], valid),
        "success_rate": _host_mean(success.astype(np.float64), mask),
        "obstacle_violation_rate": _host_mean(viol.astype(np.float64), mask),
        "n_tasks": int(np.count_nonzero(mask)),
        "n_path_valid": int(np.count_nonzero(valid)),
        "connected_rate": _host_mean(arrays["connected_path"].astype(np.float64), mask),
        "mean_traversals_given_violation": _host_mean(
            arrays["obstacle_traversals"].astype(np.float64), viol),
        "regret_summary": summ,
    }


def precision_statement() -> dict:
    """What a caller records next to :func:`score_routes` / :func:`primary_metrics`
    results: ``kernel_precision`` ("float64" or "float32", the device kernels),
    ``cost_precision`` (predicted cost and regret: "float64" always, on the host when the
    kernels are float32), ``aggregate_precision`` ("float64" always) and
    ``geometry_rtol`` (stated relative tolerance of ASSD/H95/IoU against the float64
    path: 0 for float64 kernels, :data:`GEOMETRY_RTOL_FLOAT32` for float32)."""
    kp = kernel_precision()
    return {"kernel_precision": kp, "cost_precision": "float64", "aggregate_precision": "float64",
            "geometry_rtol": 0.0 if kp == "float64" else GEOMETRY_RTOL_FLOAT32}
