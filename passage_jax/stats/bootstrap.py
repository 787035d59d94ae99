"""Paired and seed-mean block bootstrap (host entry points around the JAX kernels).

Every draw is a row of one multiplicity matrix: K blocks drawn with replacement (K = number
of observed blocks; without blocks every task is its own block). The same matrix serves every
method, seed and metric of a call (:mod:`passage_jax.stats.draws`). Draws are never dropped: a
draw in which a method's retained subset is empty has an undefined value (NaN), and an
interval over draws containing an undefined one is unavailable.

Contract: per-task inputs are 1-D numeric arrays over one ordered task roster (``a`` and ``b``
paired by index); results are float64 and do not depend on how the draws are chunked or placed
on devices. Options are :class:`~passage_jax.stats.options.BootstrapOptions` (``options=``, or
its fields as keywords). The draws themselves (``MultiplicityStream``,
``multiplicity_matrix``, ``resample_draws``, ``draw_placement``) are
:mod:`passage_jax.stats.draws`'.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.options import merge_options
from passage_jax.stats.draws import MultiplicityStream, resample_draws
from passage_jax.stats.options import BootstrapOptions, ResultOptions

__all__ = [
    "BootstrapResult", "SeedMeanResult", "encode_blocks", "parse_statistic", "observed_statistic",
    "stat_name", "paired_bootstrap", "callable_draws", "seed_mean_bootstrap", "percentile_interval",
    "seed_mean_result"
]


def encode_blocks(blocks: Sequence[Any] | None, n: int, name: str = "blocks"):
    """Block labels -> (index (n,) int32, labels). ``None`` blocks: every task is its own block.

    A missing label (``None``) raises: unknown blocks are never replaced by task identities.
    """
    if blocks is None:
        return np.arange(n, dtype=np.int32), None
    blocks = list(np.asarray(blocks, dtype=object).ravel()) if not isinstance(blocks, list) else blocks
    if len(blocks) != n:
        raise ValueError(f"{name}: {len(blocks)} labels for {n} tasks")
    for i, b in enumerate(blocks):
        if b is None or (isinstance(b, float) and math.isnan(b)):
            raise ValueError(f"{name}: task {i} has no block label")
    keys = [str(b) for b in blocks]
    labels = sorted(set(keys))
    lookup = {lab: k for k, lab in enumerate(labels)}
    return np.array([lookup[k] for k in keys], dtype=np.int32), labels


def parse_statistic(statistic) -> float | None:
    """'mean' -> None; 'median' -> 0.5; 'pNN' -> NN/100; a float in [0, 1] -> itself."""
    if isinstance(statistic, str):
        s = statistic.strip().lower()
        if s == "mean":
            return None
        if s == "median":
            return 0.5
        if s.startswith("p"):
            try:
                v = float(s[1:]) / 100.0
            except ValueError:
                v = -1.0
            if 0.0 <= v <= 1.0:
                return v
        raise ValueError(f"unknown statistic {statistic!r}; use 'mean', 'median', 'pNN' "
                         "or a quantile in [0, 1]")
    if isinstance(statistic, (int, float)) and not isinstance(statistic, bool):
        v = float(statistic)
        if 0.0 <= v <= 1.0:
            return v
    raise ValueError(f"statistic must be 'mean', 'median', 'pNN' or a quantile in [0, 1], got {statistic!r}")


# ----------------------------------------------------------------------------- results

def percentile_interval(draws: np.ndarray, alpha: float):
    """(low, high, available, n_undefined): NumPy linear percentiles of the draws at alpha/2,
    1-alpha/2; unavailable (NaN, NaN) if any draw is undefined."""
    draws = np.asarray(draws, dtype=np.float64)
    bad = int(np.count_nonzero(~np.isfinite(draws)))
    if bad or draws.size == 0:
        return float("nan"), float("nan"), False, bad
    lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi), True, 0


@dataclass
class BootstrapResult:
    """T(A) - T(B) on the observed tasks, its percentile interval and retained counts."""
    delta: float
    ci_low: float
    ci_high: float
    ci_available: bool
    n_undefined_draws: int
    n_a: int
    n_b: int
    statistic: str
    n_bootstrap: int
    alpha: float
    draws: np.ndarray | None = None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("delta", "ci_low", "ci_high", "ci_available",
                                            "n_undefined_draws", "n_a", "n_b", "statistic",
                                            "n_bootstrap", "alpha")}
        return d


@dataclass
class SeedMeanResult(BootstrapResult):
    """Mean over seeds of the per-seed contrasts; ``per_seed`` holds each seed's result."""
    per_seed: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["per_seed"] = {str(s): r.to_dict() for s, r in self.per_seed.items()}
        return d


def _prepare(x, n, nan_policy, name):
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D per-task array, got shape {x.shape}")
    if n is not None and x.shape[0] != n:
        raise ValueError(f"{name}: {x.shape[0]} tasks, expected {n}")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected numbers, got dtype {x.dtype}")
    x = x.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(x))
    if nan_policy == "raise" and bad.size:
        raise ValueError(f"{name}: task {int(bad[0])} is {x[bad[0]]} ({bad.size} non-finite values); "
                         "pass nan_policy='omit' to reduce each method's finite subset")
    return x


def observed_statistic(x: np.ndarray, q: float | None) -> float:
    """The statistic (``q`` from :func:`parse_statistic`: None = mean, else a quantile level)
    of the finite entries of ``x``, by NumPy (``np.mean`` / linear ``np.quantile``); NaN when
    none is finite."""
    x = np.asarray(x)
    v = x[np.isfinite(x)]
    if v.size == 0:
        return float("nan")
    return float(np.mean(v)) if q is None else float(np.quantile(v, q))


def stat_name(q: float | None) -> str:
    """Name of a parsed statistic as results report it: 'mean', 'median' or 'quantile(0.9)'."""
    return "mean" if q is None else ("median" if q == 0.5 else f"quantile({q:g})")


def _result(cls, delta, draws, statistic: str, n_ab, report: ResultOptions, **extra):
    """A result of ``cls``: ``delta``, the percentile interval of ``draws`` and the retained
    counts ``n_ab`` = (n_a, n_b)."""
    lo, hi, ok, bad = percentile_interval(draws, report.alpha)
    return cls(delta=float(delta), ci_low=lo, ci_high=hi, ci_available=ok, n_undefined_draws=bad,
               n_a=int(n_ab[0]), n_b=int(n_ab[1]), statistic=statistic,
               n_bootstrap=int(report.n_bootstrap), alpha=float(report.alpha),
               draws=np.asarray(draws) if report.return_draws else None, **extra)


def _retained(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    return int(np.isfinite(a).sum()), int(np.isfinite(b).sum())


def _apply_statistic(fn, x: np.ndarray, name: str) -> float:
    """``fn`` of the finite entries of ``x`` as a float (NaN when none is finite)."""
    v = x[np.isfinite(x)]
    if v.size == 0:
        return float("nan")
    out = fn(v)
    if np.ndim(out) != 0:
        raise ValueError(f"statistic {name} must return a scalar, got shape {np.shape(out)}")
    try:
        return float(out)
    except (TypeError, ValueError):
        raise ValueError(f"statistic {name} must return a number, got {out!r}") from None


def callable_draws(fn, a: np.ndarray, b: np.ndarray, block_index: np.ndarray, n_blocks: int,
                   n_draws: int, *, seed: int, chunk: int = 256):
    """Draws of ``fn(a*) - fn(b*)`` for a Python callable ``fn``, in draw order.

    Each draw materialises the resample of a row of the same multiplicity matrix the string
    statistics use (:class:`MultiplicityStream`): task i is repeated ``M[d, block(i)]`` times,
    in task order. ``fn`` is applied to each method's finite values; a method left without
    any makes the draw NaN (undefined, never dropped).
    """
    name = getattr(fn, "__name__", repr(fn))
    stream = MultiplicityStream(n_blocks, seed)
    out = np.empty(n_draws)
    for start in range(0, n_draws, chunk):
        rows = stream.next(min(chunk, n_draws - start))
        for j, row in enumerate(rows):
            w = row[block_index]
            da = _apply_statistic(fn, np.repeat(a, w), name)
            db = _apply_statistic(fn, np.repeat(b, w), name)
            out[start + j] = da - db
    return out


def _statistic_draws(block_index, n_blocks: int, series, q: float | None,
                     opts: BootstrapOptions) -> np.ndarray:
    """(D, len(series)) draws of the statistic ``q`` of each series under one matrix."""
    if q is None:
        m, _ = resample_draws(block_index, n_blocks, series, [], (), opts.n_bootstrap, seed=opts.seed,
                              sharding=opts.sharding)
        return m
    _, qd = resample_draws(block_index, n_blocks, [], series, (q,), opts.n_bootstrap, seed=opts.seed,
                           sharding=opts.sharding)
    return qd[:, :, 0]


def _blocks_of(blocks, n: int):
    """(block index, number of blocks) for ``n`` tasks."""
    idx, labels = encode_blocks(blocks, n)
    return idx, n if labels is None else len(labels)


def paired_bootstrap(a, b, statistic="mean", blocks=None, *, options: BootstrapOptions | None = None,
                     **overrides) -> BootstrapResult:
    """Paired bootstrap of ``T(a) - T(b)`` over tasks paired by index.

    ``statistic``: 'mean', 'median', 'pNN' or a quantile level (jitted kernels), or a Python
    callable reducing a 1-D float64 array to a number (e.g. ``np.median``), applied to each
    method's materialised resample draw by draw (host NumPy; the same multiplicity rows, so
    ``np.mean`` reproduces ``'mean'`` to rounding). With ``blocks`` (one label per
    task) each draw takes as many whole blocks as observed, with replacement, the same for both
    methods; without, tasks are resampled. Options (:class:`BootstrapOptions`, or its fields as
    keywords: ``n_bootstrap=10000``, ``alpha=0.05``, ``seed=0``, ``nan_policy="raise"``,
    ``return_draws=False``, ``sharding=None``): ``nan_policy='omit'`` reduces each method's
    finite subset; a draw leaving a subset empty is undefined and makes the interval
    unavailable. ``sharding``: None, ``"auto"``, ``"global"`` or a ``jax.sharding.Sharding`` of
    the draws axis (see :func:`draw_placement`); the result does not depend on it (a callable
    statistic runs on the host and ignores it).
    """
    opts = merge_options(BootstrapOptions, options, overrides, "paired_bootstrap")
    fn = statistic if callable(statistic) else None
    q = None if fn is not None else parse_statistic(statistic)
    a = _prepare(a, None, opts.nan_policy, "a")
    b = _prepare(b, a.shape[0], opts.nan_policy, "b")
    if a.shape[0] == 0:
        raise ValueError("no tasks to resample")
    idx, K = _blocks_of(blocks, a.shape[0])
    if fn is not None:
        name = getattr(fn, "__name__", repr(fn))
        delta = _apply_statistic(fn, a, name) - _apply_statistic(fn, b, name)
        draws = callable_draws(fn, a, b, idx, K, int(opts.n_bootstrap), seed=int(opts.seed))
        return _result(BootstrapResult, delta, draws, f"callable({name})", _retained(a, b), opts.result)
    d = _statistic_draws(idx, K, [a, b], q, opts)
    delta = observed_statistic(a, q) - observed_statistic(b, q)
    return _result(BootstrapResult, delta, d[:, 0] - d[:, 1], stat_name(q), _retained(a, b), opts.result)


def _seed_arrays(X, seeds, name):
    if isinstance(X, Mapping):
        keys = set(X)
        if keys != set(seeds):
            raise ValueError(f"{name}: seeds {sorted(keys, key=str)} differ from the required {list(seeds)}")
        return [X[s] for s in seeds]
    X = list(X)
    if len(X) != len(seeds):
        raise ValueError(f"{name}: {len(X)} seed arrays, expected {len(seeds)} ({list(seeds)})")
    return X


def seed_mean_bootstrap(A, B, statistic="mean", blocks=None, *, seeds: Sequence[int] = DEFAULT_SEEDS,
                        options: BootstrapOptions | None = None, **overrides) -> SeedMeanResult:
    """Bootstrap of the mean over training seeds of ``T(A_s) - T(B_s)``.

    ``A``/``B`` map each training seed to a per-task array (or are sequences in ``seeds``
    order) over the identical ordered task roster. Every draw uses the same block
    multiplicities for every seed and both methods; its value is the mean of the per-seed
    contrasts. ``per_seed`` holds each seed's own estimate and interval from the same draws.
    Options as in :func:`paired_bootstrap` (``sharding`` places the draws axis).
    """
    opts = merge_options(BootstrapOptions, options, overrides, "seed_mean_bootstrap")
    q = parse_statistic(statistic)
    seeds = tuple(seeds)
    xa = _seed_arrays(A, seeds, "A")
    xb = _seed_arrays(B, seeds, "B")
    n = np.asarray(xa[0]).shape[0] if np.ndim(xa[0]) == 1 else None
    xa = [_prepare(x, n, opts.nan_policy, f"A[{s}]") for s, x in zip(seeds, xa)]
    xb = [_prepare(x, n, opts.nan_policy, f"B[{s}]") for s, x in zip(seeds, xb)]
    if not n:
        raise ValueError("no tasks to resample")
    idx, K = _blocks_of(blocks, n)
    d = _statistic_draws(idx, K, [x for pair in zip(xa, xb) for x in pair], q, opts)
    return seed_mean_result(xa, xb, d[:, 0::2], d[:, 1::2], q, seeds=seeds, options=opts.result)


def seed_mean_result(xa, xb, da, db, q, *, seeds, options: ResultOptions | None = None,
                     **overrides) -> SeedMeanResult:
    """The seed-mean result from per-seed inputs and their draws.

    ``xa``/``xb``: per-seed float64 task arrays in ``seeds`` order; ``da``/``db``: (D, S) draws
    of the statistic ``q`` for each method and seed under one multiplicity matrix. Each seed
    gets ``T(A_s) - T(B_s)`` with its interval; the seed mean averages the per-seed deltas and,
    draw by draw, the per-seed contrasts. What the results state (:class:`ResultOptions`, or
    its fields as keywords): ``alpha``, ``n_bootstrap``, ``return_draws``.
    """
    report = merge_options(ResultOptions, options, overrides, "seed_mean_result")
    name = stat_name(q)
    per_seed = {}
    for i, s in enumerate(seeds):
        delta = observed_statistic(xa[i], q) - observed_statistic(xb[i], q)
        per_seed[s] = _result(BootstrapResult, delta, da[:, i] - db[:, i], name, _retained(xa[i], xb[i]),
                              report)
    rs = per_seed.values()
    return _result(SeedMeanResult, np.mean([r.delta for r in rs]), np.mean(da - db, axis=1), name,
                   (sum(r.n_a for r in rs), sum(r.n_b for r in rs)), report, per_seed=per_seed)
