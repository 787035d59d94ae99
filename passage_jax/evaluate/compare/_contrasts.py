"""The contrasts ``T(A) - T(B)`` of a comparison, each over a :class:`Pairing` with what it
measures (:class:`Measure`): the six primary metrics, the geometry on the tasks valid for
both methods, and the secondary latency contrast.

Every contrast is computed by :mod:`passage_jax.stats` and written as its result's
``to_dict()``: a seed-mean bootstrap over the pairs with a block interval when the blocks
support one, otherwise the same seed-mean result without draws (estimates only, keys
:data:`ESTIMATE_KEYS`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from passage_jax.contract import DIRECTIONS, METRIC_SPEC, PRIMARY_METRICS
from passage_jax.evaluate.compare._errors import CompareError
from passage_jax.evaluate.compare._pairing import Pairing
from passage_jax.evaluate.score import Score
from passage_jax.fileio import jsonable
from passage_jax.stats import parse_statistic, seed_mean_bootstrap
from passage_jax.stats.bootstrap import seed_mean_result

__all__ = ["ESTIMATE_KEYS", "Measure", "LATENCY", "contrast", "metric_contrast", "primary_contrasts",
           "BothValid", "geometry_intersection", "latency_contrast", "method_summary"]

#: what a contrast without an interval reports (of the seed-mean result's ``to_dict()``)
ESTIMATE_KEYS = ("delta", "ci_low", "ci_high", "ci_available", "statistic", "n_a", "n_b")
LATENCY_NOTE = ("median request time of the quality repeat; timeouts enter at their recorded time "
                "(treated as finite)")


@dataclass(frozen=True)
class Measure:
    """What one contrast compares: the per-task ``field`` of the rows, the ``statistic``
    over tasks (``"mean"``, ``"median"``, a quantile) and the ``nan_policy`` (``"omit"``:
    each method's finite subset; ``"raise"``)."""
    field: str
    statistic: str = "mean"
    nan_policy: str = "omit"

    @classmethod
    def primary(cls, metric: str) -> Measure:
        """The measure of a primary metric (:data:`~passage_jax.contract.METRIC_SPEC`)."""
        f, q, pol = METRIC_SPEC[metric]
        return cls(f, "mean" if q is None else q, pol)


#: the secondary latency contrast: median request time of the quality repeat
LATENCY = Measure("latency_ms", "median", "raise")


def _serialise(result, labels) -> dict:
    """JSON form of a stats seed-mean result, its per-seed entries keyed by pair label."""
    d = result.to_dict()
    d["per_seed"] = {lab: d["per_seed"][str(k)] for k, lab in zip(result.per_seed, labels)}
    return jsonable(d)


def _estimates_only(d: dict) -> dict:
    """A serialised result without an interval: estimates and counts only."""
    per = {lab: {k: v for k, v in p.items() if k in ESTIMATE_KEYS and k != "statistic"}
           for lab, p in d["per_seed"].items()}
    return {**{k: d[k] for k in ESTIMATE_KEYS}, "per_seed": per}


def contrast(pairing: Pairing, measure: Measure) -> dict:
    """Seed-mean contrast of ``measure`` over the pairs (per pair too) with a block interval
    when the pairing's blocks support one; otherwise estimates only (the seed-mean result
    without draws)."""
    keys = tuple(range(len(pairing.labels)))
    xa, xb = pairing.values(measure.field)
    d = pairing.draws
    if pairing.available:
        try:
            r = seed_mean_bootstrap(dict(zip(keys, xa)), dict(zip(keys, xb)),
                                    statistic=measure.statistic, blocks=list(pairing.blocks),
                                    seeds=keys, n_bootstrap=d.n, alpha=d.alpha, seed=d.seed,
                                    nan_policy=measure.nan_policy, sharding=d.sharding)
        except ValueError as e:
            raise CompareError(f"bootstrap of {measure.statistic}: {e}") from None
        return _serialise(r, pairing.labels)
    no_draws = np.zeros((0, len(keys)))
    r = seed_mean_result(xa, xb, no_draws, no_draws, parse_statistic(measure.statistic), seeds=keys,
                         alpha=d.alpha, n_bootstrap=0, return_draws=False)
    return _estimates_only(_serialise(r, pairing.labels))


def metric_contrast(pairing: Pairing, metric: str) -> dict:
    """The contrast of one primary metric."""
    return contrast(pairing, Measure.primary(metric))


def primary_contrasts(pairing: Pairing, computed=None) -> dict:
    """The six primary contrasts; ``computed``: the metrics' seed-mean results of a
    :func:`~passage_jax.stats.compare_primary_metrics` call over the same pairs, used as
    they are (None: one seed-mean bootstrap per metric)."""
    out = {}
    for metric in PRIMARY_METRICS:
        c = (_serialise(computed[metric], pairing.labels) if computed is not None
             else metric_contrast(pairing, metric))
        c["direction"] = DIRECTIONS[metric]
        out[metric] = c
    return out


@dataclass(frozen=True)
class BothValid:
    """The geometry on the tasks valid for both methods: per pair the valid-route
    denominators (``counts``), the pairs whose intersection is empty, and the ASSD and H95
    contrasts on the intersection (``contrasts``)."""
    counts: dict
    empty: tuple
    contrasts: dict

    def to_dict(self) -> dict:
        """The comparison file's ``geometry_both_valid``."""
        return {"empty_intersection": list(self.empty), **self.contrasts}


def _both_valid_rows(pairing: Pairing) -> tuple[dict, list, Pairing]:
    counts, empty, xa, xb = {}, [], [], []
    for lab, ra, rb in zip(pairing.labels, pairing.a, pairing.b):
        both = ra["valid_path"].astype(bool) & rb["valid_path"].astype(bool)
        counts[lab] = {"n_tasks": int(both.size), "n_valid_a": int(ra["valid_path"].sum()),
                       "n_valid_b": int(rb["valid_path"].sum()), "n_both_valid": int(both.sum())}
        if not both.any():
            empty.append(lab)
        xa.append({g: np.where(both, ra[g], np.nan) for g in ("assd", "h95")})
        xb.append({g: np.where(both, rb[g], np.nan) for g in ("assd", "h95")})
    return counts, empty, pairing.with_rows(xa, xb)


def geometry_intersection(pairing: Pairing) -> BothValid:
    """ASSD and H95 contrasts on the tasks valid for both methods (none when a pair's
    intersection is empty)."""
    counts, empty, masked = _both_valid_rows(pairing)
    out = {}
    for g in ("assd", "h95"):
        if empty:
            out[f"{g}_mean"] = {"delta": None, "ci_available": False,
                                "reason": f"empty both-valid intersection for {empty}"}
        else:
            out[f"{g}_mean"] = contrast(masked, Measure(g, "mean", "omit"))
    return BothValid(counts, tuple(empty), out)


def latency_contrast(pairing, *group) -> dict:
    """Median request-time contrast of the quality repeat (secondary). A request without a
    recorded time (a censored one from an external runner) makes it unavailable rather than
    refusing the whole comparison: dropping it would bias the median down.

    ``pairing``: a :class:`Pairing`, or the rows of A followed by the rest of its pieces
    (``latency_contrast(RA, RB, labels, blocks, boot, available)``, :meth:`Pairing.of`)."""
    if group:
        pairing = Pairing.of(pairing, *group)
    missing = {lab: int(np.count_nonzero(~np.isfinite(np.asarray(r["latency_ms"], np.float64))))
               for side in (pairing.a, pairing.b) for lab, r in zip(pairing.labels, side)}
    if any(missing.values()):
        bad = sorted(lab for lab, k in missing.items() if k)
        return {"delta": None, "ci_low": None, "ci_high": None, "ci_available": False,
                "statistic": "median", "note": LATENCY_NOTE,
                "reason": f"requests without a recorded time in pair(s) {bad}"}
    out = contrast(pairing, LATENCY)
    out["note"] = LATENCY_NOTE
    return out


def method_summary(score: Score) -> dict:
    """One seed's figures in the comparison file's ``methods`` block."""
    m = score.metrics
    return {"primary": m["primary"], "n_tasks": m["n_tasks"], "n_path_valid": m["n_path_valid"],
            "connected_rate": m["connected_rate"],
            "mean_traversals_given_violation": m["mean_traversals_given_violation"],
            "regret_summary": m["regret_summary"], "status_counts": m.get("status_counts"),
            "latency_warm": (m.get("latency") or {}).get("warm"),
            "components": m.get("components")}
