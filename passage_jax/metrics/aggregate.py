"""Primary aggregates of SPEC §4, as a jittable masked reducer and a host wrapper.

The percentiles and means are :mod:`passage_jax.reduce`'s; the metric names are
:data:`passage_jax.contract.PRIMARY_METRICS`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.metrics.types import metric_dict
from passage_jax.reduce import masked_mean, masked_percentile

__all__ = ["GEOMEAN_FLOOR", "regret_summary_jax", "primary_metrics_jax", "primary_metrics"]

#: Floor of ``1 + r`` in the regret geometric mean.
GEOMEAN_FLOOR = -1 + 1e-12


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
        "mean": masked_mean(regret, m),
        "geomean": jnp.expm1(masked_mean(logs, m)),
    }


@jax.jit
def primary_metrics_jax(per_task, mask=None) -> dict:
    """Jittable SPEC §4 aggregates over the tasks where ``mask`` is True
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
        "assd_mean": masked_mean(jnp.asarray(per_task["assd"], fdt), valid),
        "h95_mean": masked_mean(jnp.asarray(per_task["h95"], fdt), valid),
        "success_rate": masked_mean(success.astype(fdt), mask),
        "obstacle_violation_rate": masked_mean(viol.astype(fdt), mask),
        "n_tasks": jnp.sum(mask, dtype=jnp.int32),
        "n_path_valid": jnp.sum(valid, dtype=jnp.int32),
        "connected_rate": masked_mean(jnp.asarray(per_task["connected_path"], fdt), mask),
        "mean_traversals_given_violation": masked_mean(
            jnp.asarray(per_task["obstacle_traversals"], fdt), viol),
        "regret_summary": summ,
    }


def primary_metrics(per_task: dict, valid_mask=None) -> dict:
    """Host aggregates (SPEC §4) of :func:`score_routes` output, in float64.

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
    with jax.enable_x64(True):
        res = jax.device_get(primary_metrics_jax(arrays, mask))
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
