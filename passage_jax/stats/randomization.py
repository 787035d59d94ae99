"""Block randomization test of the seed-mean contrast on the six primary metrics.

Under the null hypothesis that the method labels are exchangeable within each block, swapping
A and B for every task of a block (the same blocks for every training seed) leaves the joint
distribution unchanged. The statistic is the seed-mean contrast of each metric; the p-value is
two-sided (``|T*| >= |T_obs|``, with a relative tolerance of 1e-12 for ties).

Up to ``exact_limit`` blocks (2^12 patterns by default) every swap pattern is enumerated and
``p = #{|T*| >= |T_obs|} / 2^K`` (the identity pattern is one of them). Beyond, ``n_random``
random patterns are drawn and ``p = (1 + #{|T*| >= |T_obs|}) / (1 + n_random)``.

A geometry metric whose valid subset some swap pattern could leave empty for a method (for some
seed, every block's smaller valid count is zero) gets a NaN p-value with the reason. The
exchangeability assumption is reported as unverified.

Contract: the inputs are those of :func:`passage_jax.stats.compare.compare_primary_metrics`;
:class:`RandomizationResult` carries ``p_values``, ``paired_test`` and ``test_assumptions``
ready to pass on to it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from passage_jax.contract import DEFAULT_SEEDS, MEAN_FIELDS, METRIC_SPEC, PRIMARY_METRICS
from passage_jax.options import merge_options
from passage_jax.stats.draws import resample_draws
from passage_jax.stats.options import RandomizationOptions
from passage_jax.stats.primary import validate_primary

TEST_NAME = "block randomization (label swap per whole block, same swap for every seed)"
ASSUMPTIONS = ("method labels exchangeable within each block under the null; blocks independent; "
               "the three checkpoints per method held fixed (unverified)")
TIE_RTOL = 1e-12

__all__ = ["RandomizationResult", "block_randomization_test", "swap_patterns", "TEST_NAME", "ASSUMPTIONS"]


@dataclass
class RandomizationResult:
    p_values: dict
    observed: dict
    reasons: dict
    exact: bool
    n_patterns: int
    n_blocks: int
    paired_test: str = TEST_NAME
    test_assumptions: str = ASSUMPTIONS
    assumptions_verified: bool = False
    seed: int | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("p_values", "observed", "reasons", "exact", "n_patterns",
                                               "n_blocks", "paired_test", "test_assumptions",
                                               "assumptions_verified", "seed")}


def swap_patterns(n_blocks: int, exact_limit: int = 12, n_random: int = 9999, seed: int = 0):
    """(patterns (P, K) uint8, exact). Exact: all 2^K patterns, row i swaps block k iff bit k
    of i is set (row 0 = the observed labelling). Otherwise ``n_random`` uniform patterns."""
    K = int(n_blocks)
    if K <= exact_limit:
        i = np.arange(2 ** K, dtype=np.int64)[:, None]
        return ((i >> np.arange(K)) & 1).astype(np.uint8), True
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, size=(n_random, K), dtype=np.uint8), False


@dataclass(frozen=True)
class _SwapDraws:
    """Mean and quantile draws of A' and B' (the relabelled methods) for every pattern, the
    observed labelling first: means (P, S * len(MEAN_FIELDS)), quantiles (P, S, 2)."""
    mean_a: np.ndarray
    quant_a: np.ndarray
    mean_b: np.ndarray
    quant_b: np.ndarray

    def contrast(self, metric: str, n_seeds: int) -> np.ndarray:
        """(P,) seed-mean contrast of ``metric`` under each pattern."""
        f, q, _ = METRIC_SPEC[metric]
        if q is None:
            j = MEAN_FIELDS.index(f)
            P = self.mean_a.shape[0]
            ca = self.mean_a.reshape(P, n_seeds, len(MEAN_FIELDS))[:, :, j]
            cb = self.mean_b.reshape(P, n_seeds, len(MEAN_FIELDS))[:, :, j]
        else:
            t = (0.5, 0.9).index(q)
            ca, cb = self.quant_a[:, :, t], self.quant_b[:, :, t]
        return np.mean(ca - cb, axis=1)


def _swap_draws(data, idx, K: int, pats: np.ndarray, opts: RandomizationOptions, seeds) -> _SwapDraws:
    """A' and B' draw the same series (A then B values) with complementary multiplicities."""
    pats = np.concatenate([np.zeros((1, K), np.uint8), pats]).astype(np.float64)
    keep_a = np.concatenate([1 - pats, pats], axis=1)   # weights of (A tasks, B tasks) in A'
    keep_b = np.concatenate([pats, 1 - pats], axis=1)   # ... in B'
    idx2 = np.concatenate([idx, idx + K]).astype(np.int32)
    means, quants = [], []
    for s in seeds:
        means += [np.concatenate([data["A"][s][f], data["B"][s][f]]) for f in MEAN_FIELDS]
        quants.append(np.concatenate([data["A"][s]["regret"], data["B"][s]["regret"]]))
    P = pats.shape[0]
    ma, qa = resample_draws(idx2, 2 * K, means, quants, (0.5, 0.9), P, mult=keep_a, chunk=opts.chunk,
                            sharding=opts.sharding)
    mb, qb = resample_draws(idx2, 2 * K, means, quants, (0.5, 0.9), P, mult=keep_b, chunk=opts.chunk,
                            sharding=opts.sharding)
    return _SwapDraws(ma, qa, mb, qb)


def _unavailable(data, idx, K: int, metric: str, T: np.ndarray, seeds) -> str | None:
    """Why ``metric`` gets no p-value: a swap could leave a method without valid paths for a
    geometry metric, or the statistic is undefined under some pattern; None otherwise."""
    f, _, policy = METRIC_SPEC[metric]
    if policy == "omit":
        for s in seeds:
            fa = np.bincount(idx, weights=np.isfinite(data["A"][s][f]), minlength=K)
            fb = np.bincount(idx, weights=np.isfinite(data["B"][s][f]), minlength=K)
            if np.minimum(fa, fb).sum() == 0:
                return (f"seed {s}: a block swap could leave a method without valid paths "
                        f"for {f}; the test is unavailable")
    if not np.all(np.isfinite(T)):
        return "undefined statistic under some swap pattern"
    return None


def _p_value(T: np.ndarray, exact: bool) -> float:
    """Two-sided p-value of ``T[0]`` (observed) among the patterns ``T[1:]``."""
    t_obs = abs(T[0])
    hits = int(np.count_nonzero(np.abs(T[1:]) >= t_obs * (1 - TIE_RTOL)))
    n = T.shape[0] - 1
    return hits / n if exact else (1 + hits) / (1 + n)


def block_randomization_test(A, B, blocks, task_ids: Sequence[str] | None = None, *,
                             options: RandomizationOptions | None = None, **overrides) -> RandomizationResult:
    """Two-sided block randomization p-values for the six primary metrics (same inputs as
    :func:`passage_jax.stats.compare.compare_primary_metrics`). Options
    (:class:`~passage_jax.stats.options.RandomizationOptions`, or its fields as keywords:
    ``exact_limit=12``, ``n_random=9999``, ``seed=0``, ``chunk=None``, ``sharding=None``).
    ``sharding`` (None, ``"auto"`` or a ``jax.sharding.Sharding``) splits the swap patterns
    across devices; the p-values do not depend on it."""
    opts = merge_options(RandomizationOptions, options, overrides, "block_randomization_test")
    seeds = DEFAULT_SEEDS
    data, idx, labels, ids = validate_primary(A, B, blocks, task_ids, seeds)
    K = len(labels)
    pats, exact = swap_patterns(K, opts.exact_limit, opts.n_random, opts.seed)
    draws = _swap_draws(data, idx, K, pats, opts, seeds)
    p_values, observed, reasons = {}, {}, {}
    for metric in PRIMARY_METRICS:
        T = draws.contrast(metric, len(seeds))
        observed[metric] = float(T[0])
        reasons[metric] = _unavailable(data, idx, K, metric, T, seeds)
        p_values[metric] = float("nan") if reasons[metric] is not None else _p_value(T, exact)
    return RandomizationResult(p_values=p_values, observed=observed, reasons=reasons, exact=exact,
                               n_patterns=pats.shape[0], n_blocks=K, seed=None if exact else opts.seed)
