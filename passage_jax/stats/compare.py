"""Holm–Bonferroni, per-metric votes, the verdict, and ``compare_primary_metrics``.

Contract: one call compares two methods on the six primary metrics of
:mod:`passage_jax.contract` over the default training seeds. Every contrast is a seed-mean
block-bootstrap result (:class:`~passage_jax.stats.bootstrap.SeedMeanResult`, one
multiplicity matrix for every seed, method and metric); the verdict needs declared p-values
and is decided by Holm at family-wise :data:`FAMILY_ALPHA`. :meth:`Comparison.to_dict` is the
result's JSON form.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from passage_jax.contract import DEFAULT_SEEDS, DIRECTIONS, MEAN_FIELDS, METRIC_SPEC, PRIMARY_METRICS
from passage_jax.options import merge_options
from passage_jax.stats.bootstrap import SeedMeanResult, seed_mean_result
from passage_jax.stats.draws import resample_draws
from passage_jax.stats.options import ComparisonOptions, check_alpha, check_p_value
from passage_jax.stats.primary import validate_primary

#: Family-wise error rate of the Holm step-down (fixed by the protocol).
FAMILY_ALPHA = 0.05

__all__ = [
    "Decision", "HolmRecord", "Comparison", "Verdict", "holm_bonferroni", "metric_vote", "decide",
    "verdict", "compare_primary_metrics", "primary_seed_mean_draws", "FAMILY_ALPHA"
]


class Decision(str, Enum):
    PARETO_DOMINANT = "pareto_dominant"
    TRADEOFF = "tradeoff"
    PARTIAL = "partial"
    INDISTINGUISHABLE = "indistinguishable"


@dataclass
class HolmRecord:
    p_value: float
    adjusted: float
    reject: bool

    def to_dict(self):
        return {"p_value": self.p_value, "adjusted": self.adjusted, "reject": self.reject}


def holm_bonferroni(p_values: Mapping[str, float], alpha: float = FAMILY_ALPHA) -> dict[str, HolmRecord]:
    """Holm step-down over the whole family (NaN = unavailable: never rejects, still counted).

    The k-th smallest available p (k = 1..) is compared with ``alpha / (m - k + 1)`` where m is
    the family size including unavailable tests; rejection stops at the first failure. This is
    decided as adjusted p <= alpha, with adjusted p = running max of ``min(1, (m - k + 1) p_(k))``.
    Records keep the input order.
    """
    check_alpha(alpha)
    ps = {k: check_p_value(k, v) for k, v in p_values.items()}
    m = len(ps)
    avail = sorted((p, i, k) for i, (k, p) in enumerate(ps.items()) if not math.isnan(p))
    out = {k: HolmRecord(p, float("nan"), False) for k, p in ps.items() if math.isnan(p)}
    running = 0.0
    for rank, (p, _, k) in enumerate(avail):
        factor = m - rank
        running = max(running, min(1.0, factor * p))
        # reject from the adjusted p itself (equivalent to p <= alpha / factor step-down,
        # and never inconsistent with the reported adjusted p in the last digit)
        out[k] = HolmRecord(p, running, running <= alpha)
    return {k: out[k] for k in ps}


def metric_vote(metric: str, delta: float, reject: bool) -> str | None:
    """'A' or 'B' for a rejected metric by the sign of the seed-mean estimate and the metric's
    direction; ``None`` when not rejected or the estimate is 0 or NaN."""
    if metric not in DIRECTIONS:
        raise ValueError(f"unknown metric {metric!r}; its direction is not defined "
                         f"(primary metrics: {list(PRIMARY_METRICS)})")
    if not reject or delta is None or not math.isfinite(delta) or delta == 0:
        return None
    better_lower = DIRECTIONS[metric] == "lower"
    return "A" if (delta < 0) == better_lower else "B"


def decide(votes: Mapping[str, str | None]) -> tuple[Decision, str | None]:
    """Verdict from per-metric votes: (decision, winner or None)."""
    va = sum(v == "A" for v in votes.values())
    vb = sum(v == "B" for v in votes.values())
    if va and vb:
        return Decision.TRADEOFF, None
    if not va and not vb:
        return Decision.INDISTINGUISHABLE, None
    win = "A" if va else "B"
    if max(va, vb) == len(votes):
        return Decision.PARETO_DOMINANT, win
    return Decision.PARTIAL, win


@dataclass
class Comparison:
    deltas: dict
    inference_status: str
    decision: Decision | None
    winner: str | None
    votes: dict
    holm: dict | None
    p_values: dict | None
    paired_test: str | None
    test_assumptions: Any
    assumptions_verified: bool
    interval_agrees: dict
    seeds: tuple
    n_tasks: int
    n_blocks: int
    n_bootstrap: int
    alpha: float
    bootstrap_seed: int
    directions: dict = field(default_factory=lambda: dict(DIRECTIONS))

    def to_dict(self) -> dict:
        return {
            "deltas": {m: r.to_dict() for m, r in self.deltas.items()},
            "inference_status": self.inference_status,
            "decision": None if self.decision is None else self.decision.value,
            "winner": self.winner,
            "votes": dict(self.votes),
            "holm": None if self.holm is None else {m: r.to_dict() for m, r in self.holm.items()},
            "p_values": self.p_values,
            "paired_test": self.paired_test,
            "test_assumptions": self.test_assumptions,
            "assumptions_verified": self.assumptions_verified,
            "interval_agrees": dict(self.interval_agrees),
            "seeds": list(self.seeds),
            "n_tasks": self.n_tasks,
            "n_blocks": self.n_blocks,
            "n_bootstrap": self.n_bootstrap,
            "alpha": self.alpha,
            "bootstrap_seed": self.bootstrap_seed,
            "directions": dict(self.directions),
        }


def primary_seed_mean_draws(data, block_index, n_blocks, n_draws, *, seed=None, mult=None,
                            seeds=DEFAULT_SEEDS, sharding=None):
    """Per metric: (draws of A (D, S), draws of B (D, S)) under one shared multiplicity matrix."""
    means, quants = [], []
    for s in seeds:
        for mth in ("A", "B"):
            means += [data[mth][s][f] for f in MEAN_FIELDS]
            quants.append(data[mth][s]["regret"])
    md, qd = resample_draws(block_index, n_blocks, means, quants, (0.5, 0.9), n_draws,
                            seed=seed, mult=mult, sharding=sharding)
    S = len(seeds)
    out = {}
    for metric, (f, q, _) in METRIC_SPEC.items():
        if q is None:
            j = MEAN_FIELDS.index(f)
            cols = md.reshape(md.shape[0], S, 2, len(MEAN_FIELDS))[:, :, :, j]
        else:
            cols = qd.reshape(qd.shape[0], S, 2, 2)[:, :, :, (0.5, 0.9).index(q)]
        out[metric] = (cols[:, :, 0], cols[:, :, 1])
    return out


def _seed_mean_deltas(data, draws, seeds, opts: ComparisonOptions) -> dict[str, SeedMeanResult]:
    """Each primary metric's seed-mean result from its draws."""
    deltas = {}
    for metric in PRIMARY_METRICS:
        f, q, _ = METRIC_SPEC[metric]
        da, db = draws[metric]
        deltas[metric] = seed_mean_result([data["A"][s][f] for s in seeds], [data["B"][s][f] for s in seeds],
                                          da, db, q, seeds=seeds, options=opts.result)
    return deltas


@dataclass(frozen=True)
class Verdict:
    """What the declared p-values decide: Holm's records, each metric's vote and whether its
    interval agrees with a vote, the decision and the winner (all empty without p-values)."""
    inference_status: str
    holm: dict | None
    votes: dict
    interval_agrees: dict
    decision: Decision | None = None
    winner: str | None = None


def verdict(deltas: Mapping[str, SeedMeanResult], p_values: Mapping[str, float] | None) -> Verdict:
    """Holm at :data:`FAMILY_ALPHA` over ``p_values``, votes by the sign of each rejected
    metric's seed-mean estimate, and the decision; ``test_not_provided`` without p-values."""
    votes = {m: None for m in PRIMARY_METRICS}
    agrees = {m: None for m in PRIMARY_METRICS}
    if p_values is None:
        return Verdict("test_not_provided", None, votes, agrees)
    holm = holm_bonferroni(p_values, FAMILY_ALPHA)
    for m in PRIMARY_METRICS:
        r = deltas[m]
        votes[m] = metric_vote(m, r.delta, holm[m].reject)
        if votes[m] is not None:
            agrees[m] = bool(r.ci_available and (r.ci_high < 0 if r.delta < 0 else r.ci_low > 0))
    decision, winner = decide(votes)
    return Verdict("test_provided", holm, votes, agrees, decision, winner)


def compare_primary_metrics(A, B, blocks, *, options: ComparisonOptions | None = None,
                            **overrides) -> Comparison:
    """Compare two methods on the six primary metrics over the three training seeds.

    See :mod:`passage_jax.stats.primary` for the input format. ``blocks`` gives each task's
    block (sequence in roster order or mapping task id -> block). Each metric gets the seed-mean
    contrast ``mean_s [T(A_s) - T(B_s)]`` with a block-bootstrap percentile interval (one
    multiplicity matrix shared by every seed, method and metric) and per-seed results.
    Options (:class:`ComparisonOptions`, or its fields as keywords: ``n_bootstrap=10000``,
    ``alpha=0.05``, ``seed=0``, ``p_values=None``, ``paired_test=None``,
    ``test_assumptions=None``, ``task_ids=None``, ``return_draws=False``, ``sharding=None``).
    Without ``p_values`` the result has ``inference_status='test_not_provided'`` and no
    decision. With six p-values (plus ``paired_test`` and ``test_assumptions``), Holm at
    family-wise 0.05 decides which metrics count, each rejected metric votes by the sign of its
    seed-mean estimate, and the votes give the verdict. ``sharding`` (None, ``"auto"`` or a
    ``jax.sharding.Sharding`` of the draws axis) places the draws; results do not depend on it.
    """
    opts = merge_options(ComparisonOptions, options, overrides, "compare_primary_metrics")
    seeds = DEFAULT_SEEDS
    data, idx, labels, ids = validate_primary(A, B, blocks, opts.task_ids, seeds)
    draws = primary_seed_mean_draws(data, idx, len(labels), opts.n_bootstrap, seed=opts.seed, seeds=seeds,
                                    sharding=opts.sharding)
    deltas = _seed_mean_deltas(data, draws, seeds, opts)
    v = verdict(deltas, opts.p_values)
    return Comparison(deltas=deltas, inference_status=v.inference_status, decision=v.decision,
                      winner=v.winner, votes=v.votes, holm=v.holm, p_values=opts.p_values,
                      paired_test=opts.paired_test, test_assumptions=opts.test_assumptions,
                      assumptions_verified=False, interval_agrees=v.interval_agrees, seeds=seeds,
                      n_tasks=len(ids), n_blocks=len(labels), n_bootstrap=int(opts.n_bootstrap),
                      alpha=float(opts.alpha), bootstrap_seed=int(opts.seed))
