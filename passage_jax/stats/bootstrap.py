"""Paired and seed-mean block bootstrap (host entry points around the JAX kernels).

Every draw is a row of one multiplicity matrix: K blocks drawn with replacement (K = number
of observed blocks; without blocks every task is its own block). The same matrix serves every
method, seed and metric of a call. Draws are never dropped: a draw in which a method's
retained subset is empty has an undefined value (NaN), and an interval over draws containing
an undefined one is unavailable.

Contract: per-task inputs are 1-D numeric arrays over one ordered task roster (``a`` and ``b``
paired by index); results are float64 and do not depend on how the draws are chunked or placed
on devices. ``DEFAULT_SEEDS`` is re-exported from :mod:`passage_jax.contract`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.precision import kernel_precision, kernel_x64
from passage_jax.stats.kernels import (
    block_mean_draws,
    coarse_counts,
    exact_block_mean_draws,
    slice_columns,
    weighted_quantile_draws,
)

NAN_POLICIES = ("raise", "omit")
_CHUNK_ELEMENTS = 1 << 23

__all__ = [
    "DEFAULT_SEEDS",
    "NAN_POLICIES",
    "MultiplicityStream",
    "BootstrapResult",
    "SeedMeanResult",
    "multiplicity_matrix",
    "encode_blocks",
    "parse_statistic",
    "observed_statistic",
    "stat_name",
    "paired_bootstrap",
    "callable_draws",
    "seed_mean_bootstrap",
    "percentile_interval",
    "resample_draws",
    "draw_placement",
    "seed_mean_result",
]


# ----------------------------------------------------------------------------- placement

def draw_placement(sharding):
    """Resolve a ``sharding=`` argument for the draws axis of a multiplicity matrix chunk.

    ``None`` -> ``None`` (today's single-device path). ``"auto"`` -> a 1-D mesh ``("draws",)``
    over all local devices of the default backend when there is more than one, else ``None``.
    ``"global"`` -> the same over every device of every process of a multi-process launch
    (``jax.devices()``: the global mesh; every process must make the same call with the
    same inputs, and each receives every draw); in a single process it is ``"auto"``.
    A ``jax.sharding.Sharding`` must split only axis 0 (the draws) of a 2-D (draws, blocks)
    array; multi-device shardings must be ``NamedSharding`` (their mesh gives the replicated
    placement of the per-block sums and sorted values).

    Returns ``None`` or ``(draw_sharding, replicated_sharding, n_shards)``, where ``n_shards``
    is how many pieces the draws axis is cut into (chunks are padded to a multiple of it).
    """
    if sharding is None:
        return None
    if isinstance(sharding, str):
        if sharding not in ("auto", "global"):
            raise ValueError("sharding must be None, 'auto', 'global' or a jax.sharding.Sharding, "
                             f"got {sharding!r}")
        devs = jax.devices() if sharding == "global" else jax.local_devices()
        if len(devs) < 2:
            return None
        mesh = Mesh(np.asarray(devs), ("draws",))
        return (NamedSharding(mesh, PartitionSpec("draws", None)), NamedSharding(mesh, PartitionSpec()),
                len(devs))
    if not isinstance(sharding, Sharding):
        raise ValueError("sharding must be None, 'auto', 'global' or a jax.sharding.Sharding, "
                         f"got {type(sharding).__name__}")
    nd = int(sharding.num_devices)
    try:
        shard = sharding.shard_shape((nd, nd))
    except Exception as e:  # a sharding for arrays of another rank
        raise ValueError(f"sharding does not apply to a 2-D (draws, blocks) array: {e}") from None
    if shard[1] != nd:
        raise ValueError("sharding must split only the draws axis (axis 0) of the (draws, blocks) "
                         f"matrix; it splits axis 1 ({sharding})")
    n_shards = nd // int(shard[0])
    if nd == 1:
        return sharding, sharding, 1
    if not isinstance(sharding, NamedSharding):
        raise ValueError("a multi-device sharding must be a jax.sharding.NamedSharding "
                         f"(e.g. NamedSharding(Mesh(devices, ('draws',)), PartitionSpec('draws', None))), "
                         f"got {type(sharding).__name__}")
    return sharding, NamedSharding(sharding.mesh, PartitionSpec()), n_shards


# ----------------------------------------------------------------------------- draws

class MultiplicityStream:
    """Rows of the multiplicity matrix, generated chunk by chunk from one NumPy Generator.

    A row is ``bincount(rng.integers(0, K, size=K), minlength=K)``: K blocks drawn uniformly
    with replacement. Splitting the draws into chunks does not change the rows.
    """

    def __init__(self, n_blocks: int, seed: int):
        if n_blocks < 1:
            raise ValueError("need at least one block to resample")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"bootstrap seed must be a non-negative integer, got {seed!r}")
        self.n_blocks = int(n_blocks)
        self.rng = np.random.default_rng(seed)

    def next(self, n_draws: int) -> np.ndarray:
        K = self.n_blocks
        idx = self.rng.integers(0, K, size=(n_draws, K))
        idx += (np.arange(n_draws) * K)[:, None]
        return np.bincount(idx.ravel(), minlength=n_draws * K).reshape(n_draws, K).astype(np.int32)


def multiplicity_matrix(n_blocks: int, n_draws: int, seed: int) -> np.ndarray:
    """The (n_draws, n_blocks) int32 multiplicity matrix the bootstrap functions use for ``seed``."""
    return MultiplicityStream(n_blocks, seed).next(n_draws)


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


_MAC_PER_GATHER = 100.0   # a matrix-product MAC is this much cheaper than a gathered cumsum step
_COARSE_ELEMENTS = 1 << 25


def _segment_for(m: int, n_blocks: int, n_targets: int, n_series: int = 1) -> int | None:
    """Segment length for the two-level order-statistic search, or None for one cumulative sum
    over the whole array (chosen when blocks are about as many as tasks)."""
    if m < 64:
        return None
    s = math.sqrt((n_blocks + 1) * m / (n_targets * _MAC_PER_GATHER))
    s = int(2 ** round(math.log2(max(1.0, s))))
    s = max(16, min(s, m))
    G = -(-m // s)
    cost = (n_blocks + 1) * G / _MAC_PER_GATHER + n_targets * s
    if cost < m / 2 and n_series * G * (n_blocks + 1) <= _COARSE_ELEMENTS:
        return s
    return None


def resample_draws(block_index: np.ndarray, n_blocks: int, mean_series: Sequence[np.ndarray],
                   quantile_series: Sequence[np.ndarray], qs: Sequence[float], n_draws: int, *,
                   seed: int | None = None, mult: np.ndarray | None = None,
                   chunk: int | None = None, segment: int | None | str = "auto", sharding=None):
    """Draws of means and quantiles for many series under one multiplicity matrix.

    ``mean_series`` / ``quantile_series`` are (n,) float arrays over the same tasks; a
    non-finite entry is left out of that series (callers enforce their NaN policy first).
    The matrix comes from ``seed`` (streamed in chunks) or is given as ``mult``.
    Returns ``(mean_draws (D, Jm), quantile_draws (D, Jq, len(qs)))`` as float64 NumPy.

    ``sharding`` (see :func:`draw_placement`) splits each chunk of draws across devices: the
    chunk is padded with zero rows to a multiple of the shard count (the padded rows are
    dropped), the per-block sums, sorted values and block ids are replicated once on every
    device. With an automatic chunk size each device keeps the single-device working set.
    The multiplicity rows, and so the results, do not depend on the placement.
    """
    block_index = np.asarray(block_index, dtype=np.int32)
    K = int(n_blocks)
    place = draw_placement(sharding)
    n_shards = 1 if place is None else place[2]
    qs = tuple(float(q) for q in qs)
    if mult is not None:
        mult = np.asarray(mult)
        if mult.shape != (n_draws, K):
            raise ValueError(f"multiplicity matrix has shape {mult.shape}, expected {(n_draws, K)}")
        stream = None
    else:
        stream = MultiplicityStream(K, seed)

    exact32 = kernel_precision() == "float32"   # no float64: error-free float32 means
    with kernel_x64():
        # per-block sums and counts of the retained values
        Jm = len(mean_series)
        sums = np.zeros((K, Jm))
        counts = np.zeros((K, Jm))
        for j, x in enumerate(mean_series):
            x = np.asarray(x, dtype=np.float64)
            keep = np.isfinite(x)
            sums[:, j] = np.bincount(block_index[keep], weights=x[keep], minlength=K)
            counts[:, j] = np.bincount(block_index[keep], minlength=K)

        # sorted retained values per quantile series, padded with block id K
        Jq = len(quantile_series)
        seg = None
        if Jq:
            kept = []
            for x in quantile_series:
                x = np.asarray(x, dtype=np.float64)
                keep = np.flatnonzero(np.isfinite(x))
                order = keep[np.argsort(x[keep], kind="stable")]
                kept.append((x[order], block_index[order]))
            m = max(1, max(len(v) for v, _ in kept))
            seg = _segment_for(m, K, 2 * len(qs), Jq) if segment == "auto" else segment
            P = m if seg is None else -(-m // seg) * seg
            vals = np.zeros((Jq, P))
            blk = np.full((Jq, P), K, dtype=np.int32)
            for j, (v, b) in enumerate(kept):
                vals[j, :len(v)] = v
                if len(v):
                    vals[j, len(v):] = v[-1]
                blk[j, :len(b)] = b
            coarse = coarse_counts(blk, K, seg) if seg is not None else np.zeros((Jq, 1, K + 1))

        # chunk size bounding the per-chunk working set
        if Jq:
            per_draw = Jq * (P if seg is None else (2 * len(qs) * seg + coarse.shape[1])) + K
        else:
            per_draw = K + Jm
        if chunk is None:
            chunk = max(1, min(n_draws, n_shards * (_CHUNK_ELEMENTS // max(1, per_draw))))
        chunk = max(1, min(int(chunk), max(1, n_draws)))
        width = -(-chunk // n_shards) * n_shards     # rows per kernel call (padded)

        fetch = np.asarray
        if place is None:
            put_rep = put_draws = jax.numpy.asarray
        elif place[0].is_fully_addressable:
            put_rep = lambda a: jax.device_put(a, place[1])     # noqa: E731
            put_draws = lambda a: jax.device_put(a, place[0])   # noqa: E731
        else:  # devices of other processes: each process places its pieces of the same array
            put_rep = lambda a: _global_array(a, place[1])      # noqa: E731
            put_draws = lambda a: _global_array(a, place[0])    # noqa: E731
            fetch = _fetch_global
        mean_out = np.empty((n_draws, Jm))
        q_out = np.empty((n_draws, Jq, len(qs)))
        j_sums = put_rep(sums)
        j_counts = put_rep(counts)
        if exact32 and Jm:
            max_weight = K if mult is None else float(np.abs(mult).sum(axis=1).max(initial=0.0))
            sliced = slice_columns(np.concatenate([sums, counts], axis=1), max_weight)
            j_slices = put_rep(sliced.slices)
        if Jq:
            j_vals, j_blk, j_coarse = map(put_rep, (vals, blk, coarse))
        for start in range(0, n_draws, chunk):
            stop = min(n_draws, start + chunk)
            rows = stream.next(stop - start) if stream is not None else mult[start:stop]
            block = np.zeros((width, K), dtype=np.float64)
            block[: stop - start] = rows
            jm = put_draws(block)
            if Jm and exact32:
                mean_out[start:stop] = exact_block_mean_draws(jm, j_slices, sliced,
                                                              fetch=fetch)[: stop - start]
            elif Jm:
                mean_out[start:stop] = fetch(block_mean_draws(jm, j_sums, j_counts))[: stop - start]
            if Jq:
                r = weighted_quantile_draws(jm, j_vals, j_blk, j_coarse, qs, seg)
                q_out[start:stop] = fetch(r)[: stop - start]
    return mean_out, q_out


def _global_array(a: np.ndarray, sharding) -> jax.Array:
    """``a`` (the same on every process) as a global array under ``sharding``."""
    a = np.asarray(a)
    return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])


def _fetch_global(x: jax.Array) -> np.ndarray:
    """Every element of a global array on this process (an all-gather across processes)."""
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


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


def _check_alpha(alpha):
    if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def _check_draws(n_bootstrap):
    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")


def _prepare(x, n, nan_policy, name):
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
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


def _result(cls, delta, draws, q, *, alpha, n_a, n_b, n_bootstrap, return_draws, **extra):
    lo, hi, ok, bad = percentile_interval(draws, alpha)
    return cls(delta=float(delta), ci_low=lo, ci_high=hi, ci_available=ok, n_undefined_draws=bad,
               n_a=int(n_a), n_b=int(n_b), statistic=stat_name(q), n_bootstrap=int(n_bootstrap),
               alpha=float(alpha), draws=np.asarray(draws) if return_draws else None, **extra)


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


def paired_bootstrap(a, b, statistic="mean", blocks=None, *, n_bootstrap: int = 10000,
                     alpha: float = 0.05, seed: int = 0, nan_policy: str = "raise",
                     return_draws: bool = False, sharding=None) -> BootstrapResult:
    """Paired bootstrap of ``T(a) - T(b)`` over tasks paired by index.

    ``statistic``: 'mean', 'median', 'pNN' or a quantile level (jitted kernels), or a Python
    callable reducing a 1-D float64 array to a number (e.g. ``np.median``), applied to each
    method's materialised resample draw by draw (host NumPy; the same multiplicity rows, so
    ``np.mean`` reproduces ``'mean'`` to rounding). With ``blocks`` (one label per
    task) each draw takes as many whole blocks as observed, with replacement, the same for both
    methods; without, tasks are resampled. ``nan_policy='omit'`` reduces each method's finite
    subset; a draw leaving a subset empty is undefined and makes the interval unavailable.
    ``sharding``: None, ``"auto"``, ``"global"`` or a ``jax.sharding.Sharding`` of the draws axis (see
    :func:`draw_placement`); the result does not depend on it (a callable statistic runs on
    the host and ignores it).
    """
    _check_alpha(alpha)
    _check_draws(n_bootstrap)
    fn = statistic if callable(statistic) else None
    q = None if fn is not None else parse_statistic(statistic)
    a = _prepare(a, None, nan_policy, "a")
    b = _prepare(b, a.shape[0], nan_policy, "b")
    if a.shape[0] == 0:
        raise ValueError("no tasks to resample")
    idx, labels = encode_blocks(blocks, a.shape[0])
    K = a.shape[0] if labels is None else len(labels)
    if fn is not None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"bootstrap seed must be a non-negative integer, got {seed!r}")
        name = getattr(fn, "__name__", repr(fn))
        delta = _apply_statistic(fn, a, name) - _apply_statistic(fn, b, name)
        draws = callable_draws(fn, a, b, idx, K, int(n_bootstrap), seed=int(seed))
        lo, hi, ok, bad = percentile_interval(draws, alpha)
        return BootstrapResult(delta=float(delta), ci_low=lo, ci_high=hi, ci_available=ok,
                               n_undefined_draws=bad, n_a=int(np.isfinite(a).sum()),
                               n_b=int(np.isfinite(b).sum()), statistic=f"callable({name})",
                               n_bootstrap=int(n_bootstrap), alpha=float(alpha),
                               draws=draws if return_draws else None)
    if q is None:
        m, _ = resample_draws(idx, K, [a, b], [], (), n_bootstrap, seed=seed, sharding=sharding)
        da, db = m[:, 0], m[:, 1]
    else:
        _, qd = resample_draws(idx, K, [], [a, b], (q,), n_bootstrap, seed=seed, sharding=sharding)
        da, db = qd[:, 0, 0], qd[:, 1, 0]
    delta = observed_statistic(a, q) - observed_statistic(b, q)
    return _result(BootstrapResult, delta, da - db, q, alpha=alpha, n_a=np.isfinite(a).sum(),
                   n_b=np.isfinite(b).sum(), n_bootstrap=n_bootstrap, return_draws=return_draws)


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


def seed_mean_bootstrap(A, B, statistic="mean", blocks=None, *,
                        seeds: Sequence[int] = DEFAULT_SEEDS, n_bootstrap: int = 10000,
                        alpha: float = 0.05, seed: int = 0, nan_policy: str = "raise",
                        return_draws: bool = False, sharding=None) -> SeedMeanResult:
    """Bootstrap of the mean over training seeds of ``T(A_s) - T(B_s)``.

    ``A``/``B`` map each training seed to a per-task array (or are sequences in ``seeds``
    order) over the identical ordered task roster. Every draw uses the same block
    multiplicities for every seed and both methods; its value is the mean of the per-seed
    contrasts. ``per_seed`` holds each seed's own estimate and interval from the same draws.
    ``sharding`` places the draws axis as in :func:`paired_bootstrap`.
    """
    _check_alpha(alpha)
    _check_draws(n_bootstrap)
    q = parse_statistic(statistic)
    seeds = tuple(seeds)
    xa = _seed_arrays(A, seeds, "A")
    xb = _seed_arrays(B, seeds, "B")
    n = np.asarray(xa[0]).shape[0] if np.ndim(xa[0]) == 1 else None
    xa = [_prepare(x, n, nan_policy, f"A[{s}]") for s, x in zip(seeds, xa)]
    xb = [_prepare(x, n, nan_policy, f"B[{s}]") for s, x in zip(seeds, xb)]
    if not n:
        raise ValueError("no tasks to resample")
    idx, labels = encode_blocks(blocks, n)
    K = n if labels is None else len(labels)
    series = [x for pair in zip(xa, xb) for x in pair]
    if q is None:
        d, _ = resample_draws(idx, K, series, [], (), n_bootstrap, seed=seed, sharding=sharding)
    else:
        _, qd = resample_draws(idx, K, [], series, (q,), n_bootstrap, seed=seed, sharding=sharding)
        d = qd[:, :, 0]
    return seed_mean_result(xa, xb, d[:, 0::2], d[:, 1::2], q, seeds=seeds, alpha=alpha,
                            n_bootstrap=n_bootstrap, return_draws=return_draws)


def seed_mean_result(xa, xb, da, db, q, *, seeds, alpha, n_bootstrap, return_draws) -> SeedMeanResult:
    """The seed-mean result from per-seed inputs and their draws.

    ``xa``/``xb``: per-seed float64 task arrays in ``seeds`` order; ``da``/``db``: (D, S) draws
    of the statistic ``q`` for each method and seed under one multiplicity matrix. Each seed
    gets ``T(A_s) - T(B_s)`` with its interval; the seed mean averages the per-seed deltas and,
    draw by draw, the per-seed contrasts.
    """
    per_seed = {}
    for i, s in enumerate(seeds):
        delta = observed_statistic(xa[i], q) - observed_statistic(xb[i], q)
        per_seed[s] = _result(BootstrapResult, delta, da[:, i] - db[:, i], q, alpha=alpha,
                              n_a=np.isfinite(xa[i]).sum(), n_b=np.isfinite(xb[i]).sum(),
                              n_bootstrap=n_bootstrap, return_draws=return_draws)
    draws = np.mean(da - db, axis=1)
    return _result(SeedMeanResult, np.mean([r.delta for r in per_seed.values()]), draws, q,
                   alpha=alpha, n_a=sum(r.n_a for r in per_seed.values()),
                   n_b=sum(r.n_b for r in per_seed.values()), n_bootstrap=n_bootstrap,
                   return_draws=return_draws, per_seed=per_seed)
