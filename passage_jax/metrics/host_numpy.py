"""Kernel metrics recomputed on the host in float64 NumPy, where the kernels do not
compute them:

* :func:`route_geometry_host` — ASSD, H95 and IoU of a long route (more than
  ``LONG_ROUTE`` cells) in memory linear in its length (nearest cells through a k-d
  tree over the distinct cells, exact integer squared distances), only for valid routes;
* :func:`host_cost_regret` — the predicted cost and regret in float64 when the kernels
  run in float32 (:func:`passage_jax.precision.kernel_precision`), from the same
  elevations with the registry's step costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET
from passage_jax.graph import MODEL_NAMES, CropStats, get_cost_model
from passage_jax.metrics.host_inputs import cell_owner
from passage_jax.metrics.kernels import GEOMETRY_SPAN

__all__ = ["RouteCostModels", "host_cost_regret", "route_geometry_host"]


@dataclass(frozen=True, eq=False)
class RouteCostModels:
    """The cost model of each of n routes."""

    model: np.ndarray   #: (n,) ``MODEL_INDEX`` ids
    weight: np.ndarray  #: (n,) weights
    stats: np.ndarray   #: (n, 3) crop statistics: min, range, max |z|


def host_cost_regret(cells, lens, z, valid, models: RouteCostModels, c_star, *,
                     pixel_size_m: float = 30.0):
    """(predicted_cost, regret) in float64 with NumPy, as the kernels define them.

    ``cells`` (M, 2) int32 are the routes concatenated (``lens`` (n,) cells each), ``z``
    (M,) float64 the elevation at each cell (anything at cells of invalid routes);
    ``valid`` (n,) bool, ``models`` each route's cost model (:class:`RouteCostModels`),
    ``c_star`` (n,). A valid route's cost is the registry's step costs summed in route
    order (as :func:`passage_jax.graph.route_cost`); a failure's predicted cost is
    ``CENSOR_FACTOR * c*`` and its regret ``FAILURE_REGRET``; the regret is NaN where c*
    is not a finite positive number.
    """
    lens = np.asarray(lens, np.int64)
    n = len(lens)
    valid = np.asarray(valid, bool)
    c_star = np.asarray(c_star, np.float64)
    cost = np.zeros(n, np.float64)
    if len(cells) > 1:
        owner = cell_owner(lens)
        so = owner[:-1]
        idx = np.flatnonzero((owner[1:] == so) & valid[so])
        so = so[idx]
        step = np.abs(cells[idx + 1].astype(np.int64) - cells[idx])
        d = np.where(step.sum(axis=1) == 2, math.sqrt(2.0), 1.0) * np.float64(pixel_size_m)
        z = np.asarray(z, np.float64)
        z0, z1 = z[idx], z[idx + 1]
        m = np.asarray(models.model)[so]
        w = np.asarray(models.weight, np.float64)[so]
        st = np.asarray(models.stats, np.float64).reshape(-1, 3)[so]
        c = np.zeros(len(idx), np.float64)
        for k, name in enumerate(MODEL_NAMES):
            sel = m == k
            if sel.any():
                c[sel] = get_cost_model(name).step_cost(
                    d[sel], z0[sel], z1[sel], w[sel],
                    CropStats(st[sel, 0], st[sel, 1], st[sel, 2]), np)
        cost = np.bincount(so, weights=c, minlength=n)  # in route order, as route_cost
    good = np.isfinite(c_star) & (c_star > 0)
    safe = np.where(good, c_star, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        pred = np.where(valid, cost, CENSOR_FACTOR * c_star)
        reg = np.where(good, np.where(valid, (pred - safe) / safe, FAILURE_REGRET), np.nan)
    return pred, reg


def _nearest_d2(q, pts):
    """Exact integer squared distance from each cell of ``q`` to its nearest cell of ``pts``."""
    from scipy.spatial import cKDTree  # noqa: PLC0415 (long routes only: a second to import)

    _, j = cKDTree(pts.astype(np.float64)).query(q.astype(np.float64), k=1)
    d = q - pts[j]
    return d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]


def route_geometry_host(candidate, reference) -> tuple[float, float, float]:
    """(assd, h95, path_iou) of two int32 (L, 2) routes, as
    :func:`~passage_jax.metrics.kernels.route_geometry` defines them (a revisited
    cell counts once per visit for ASSD and H95; IoU of the cell sets; NaN when
    a route is empty or the cells do not fit a ``GEOMETRY_SPAN``-wide window),
    in float64 and in memory O(L_candidate + L_reference): the directed minimum
    squared distances are found for the distinct cells of each route through a
    k-d tree over the other route's distinct cells and made exact integers from
    the nearest cell's coordinates (every squared distance inside the window is
    below 2**31, so the tree's float64 comparisons are exact), then spread to
    every visit. Equal to the kernel's values up to the order of float sums.
    """
    a = np.asarray(candidate, np.int64).reshape(-1, 2)
    b = np.asarray(reference, np.int64).reshape(-1, 2)
    nan = (math.nan, math.nan, math.nan)
    if len(a) == 0 or len(b) == 0:
        return nan
    both = np.concatenate([a, b])
    lo = both.min(axis=0)
    if np.any(both.max(axis=0) - lo >= GEOMETRY_SPAN):
        return nan
    ka = (a[:, 0] - lo[0]) * GEOMETRY_SPAN + (a[:, 1] - lo[1])
    kb = (b[:, 0] - lo[0]) * GEOMETRY_SPAN + (b[:, 1] - lo[1])
    ua, ia = np.unique(ka, return_inverse=True)
    ub, ib = np.unique(kb, return_inverse=True)
    ca = np.stack([ua // GEOMETRY_SPAN, ua % GEOMETRY_SPAN], axis=1)
    cb = np.stack([ub // GEOMETRY_SPAN, ub % GEOMETRY_SPAN], axis=1)
    da = np.sqrt(_nearest_d2(ca, cb).astype(np.float64))[ia.reshape(-1)]
    db = np.sqrt(_nearest_d2(cb, ca).astype(np.float64))[ib.reshape(-1)]
    steps = np.abs(np.diff(b, axis=0)).sum(axis=1)
    l_star = float(np.where(steps == 2, math.sqrt(2.0), 1.0).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        assd = float((da.sum() + db.sum()) / (len(a) + len(b)) / np.float64(l_star))
    h95 = float(max(np.percentile(da, 95.0), np.percentile(db, 95.0)))
    inter = len(np.intersect1d(ua, ub, assume_unique=True))
    iou = inter / (len(ua) + len(ub) - inter)
    return assd, h95, iou
