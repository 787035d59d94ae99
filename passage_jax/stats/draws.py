"""Bootstrap draws: multiplicity rows and the draws of many series under one matrix.

Every draw is a row of one multiplicity matrix: K blocks drawn with replacement. A row's
draw of a series is the mean, or a quantile, of the series' retained (finite) values, each
task weighted by its block's multiplicity; the jitted kernels of
:mod:`passage_jax.stats.kernels` compute them chunk by chunk, optionally split across
devices along the draws axis (:func:`draw_placement`). The rows, and so the draws, do not
depend on the chunking or the placement.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passage_jax.checks import is_int
from passage_jax.options import merge_options
from passage_jax.placement import Placement, fetch, put, resolve_placement
from passage_jax.precision import kernel_precision, kernel_x64
from passage_jax.stats.kernels import (
    SlicedColumns,
    block_mean_draws,
    coarse_counts,
    exact_block_mean_draws,
    slice_columns,
    weighted_quantile_draws,
)
from passage_jax.stats.options import DrawOptions

#: The axes of a chunk of the multiplicity matrix; a placement splits the first.
DRAW_AXES = ("draws", "blocks")
#: The ``sharding=`` strings the draws accept.
DRAW_MODES = ("auto", "global")
_CHUNK_ELEMENTS = 1 << 23
_MAC_PER_GATHER = 100.0   # a matrix-product MAC is this much cheaper than a gathered cumsum step
_COARSE_ELEMENTS = 1 << 25

__all__ = ["DRAW_AXES", "DRAW_MODES", "MultiplicityStream", "multiplicity_matrix", "draw_placement",
           "SortedSeries", "sorted_series", "resample_draws"]


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
    is how many pieces the draws axis is cut into (chunks are padded to a multiple of it);
    :func:`passage_jax.placement.resolve_placement` gives the same as a ``Placement``.
    """
    p = resolve_placement(sharding, axes=DRAW_AXES, modes=DRAW_MODES)
    return None if p is None else (p.split, p.replicated, p.n_shards)


# ----------------------------------------------------------------------------- rows

class MultiplicityStream:
    """Rows of the multiplicity matrix, generated chunk by chunk from one NumPy Generator.

    A row is ``bincount(rng.integers(0, K, size=K), minlength=K)``: K blocks drawn uniformly
    with replacement. Splitting the draws into chunks does not change the rows.
    """

    def __init__(self, n_blocks: int, seed: int):
        if n_blocks < 1:
            raise ValueError("need at least one block to resample")
        if not is_int(seed) or seed < 0:
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


def _row_source(n_blocks: int, n_draws: int, options: DrawOptions):
    """``take(start, stop)``: rows ``start:stop`` of the given matrix, or the next rows of the
    stream seeded by ``options.seed`` (taken in order)."""
    mult = options.mult
    if mult is not None:
        if mult.shape != (n_draws, n_blocks):
            raise ValueError(f"multiplicity matrix has shape {mult.shape}, expected {(n_draws, n_blocks)}")
        return lambda start, stop: mult[start:stop]
    stream = MultiplicityStream(n_blocks, options.seed)
    return lambda start, stop: stream.next(stop - start)


# ----------------------------------------------------------------------------- series

def _block_sums(block_index: np.ndarray, n_blocks: int, series: Sequence[np.ndarray]):
    """Per-block sums and counts (K, J) of each series' retained (finite) values."""
    sums = np.zeros((n_blocks, len(series)))
    counts = np.zeros((n_blocks, len(series)))
    for j, x in enumerate(series):
        x = np.asarray(x, dtype=np.float64)
        keep = np.isfinite(x)
        sums[:, j] = np.bincount(block_index[keep], weights=x[keep], minlength=n_blocks)
        counts[:, j] = np.bincount(block_index[keep], minlength=n_blocks)
    return sums, counts


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


@dataclass(frozen=True)
class SortedSeries:
    """Each quantile series' retained values in ascending order (stable) with their block ids,
    padded to one length P (values with the last value, block ids with K); ``coarse`` holds
    the per-segment block counts of the two-level search (``segment`` None: one cumulative
    sum, and ``coarse`` is a (J, 1, K + 1) placeholder)."""
    values: np.ndarray     # (J, P) float64
    blocks: np.ndarray     # (J, P) int32
    coarse: np.ndarray     # (J, G, K + 1)
    segment: int | None

    def per_draw(self, n_levels: int) -> int:
        """Elements a draw of every series touches (what a chunk's size is bounded by)."""
        J, P = self.values.shape
        return J * (P if self.segment is None else 2 * n_levels * self.segment + self.coarse.shape[1])


def sorted_series(block_index: np.ndarray, n_blocks: int, series: Sequence[np.ndarray],
                  n_targets: int, segment: Any = "auto") -> SortedSeries:
    """The :class:`SortedSeries` of ``series`` (``n_targets`` order statistics per draw choose
    the ``"auto"`` segment)."""
    K = n_blocks
    kept = []
    for x in series:
        x = np.asarray(x, dtype=np.float64)
        keep = np.flatnonzero(np.isfinite(x))
        order = keep[np.argsort(x[keep], kind="stable")]
        kept.append((x[order], block_index[order]))
    m = max(1, max(len(v) for v, _ in kept))
    seg = _segment_for(m, K, n_targets, len(series)) if segment == "auto" else segment
    P = m if seg is None else -(-m // seg) * seg
    vals = np.zeros((len(series), P))
    blk = np.full((len(series), P), K, dtype=np.int32)
    for j, (v, b) in enumerate(kept):
        vals[j, :len(v)] = v
        if len(v):
            vals[j, len(v):] = v[-1]
        blk[j, :len(b)] = b
    coarse = coarse_counts(blk, K, seg) if seg is not None else np.zeros((len(series), 1, K + 1))
    return SortedSeries(values=vals, blocks=blk, coarse=coarse, segment=seg)


# ----------------------------------------------------------------------------- kernels

@dataclass(frozen=True)
class _OnDevices:
    """The per-call kernel inputs, placed once: per-block sums and counts (or, without
    float64, their error-free float32 slices) and the sorted quantile series."""
    place: Placement | None
    sums: Any
    counts: Any
    sliced: SlicedColumns | None
    slices: Any
    quantiles: tuple | None     # (values, blocks, coarse, segment)

    def means(self, jm) -> np.ndarray:
        if self.sliced is not None:
            return exact_block_mean_draws(jm, self.slices, self.sliced, fetch=self.fetch)
        return self.fetch(block_mean_draws(jm, self.sums, self.counts))

    def quantile_draws(self, jm, qs: tuple) -> np.ndarray:
        vals, blk, coarse, seg = self.quantiles
        return self.fetch(weighted_quantile_draws(jm, vals, blk, coarse, qs, seg))

    def fetch(self, x) -> np.ndarray:
        return fetch(x, self.place)


def _on_devices(place, sums, counts, series: SortedSeries | None, max_weight) -> _OnDevices:
    """Place the kernel inputs (``max_weight``: the largest row sum of the multiplicities;
    None keeps float64 block means)."""
    def rep(a):
        return put(a, place, replicated=True)

    j_sums, j_counts = rep(sums), rep(counts)
    sliced = slices = None
    if max_weight is not None:
        sliced = slice_columns(np.concatenate([sums, counts], axis=1), max_weight)
        slices = rep(sliced.slices)
    quantiles = None
    if series is not None:
        quantiles = (*map(rep, (series.values, series.blocks, series.coarse)), series.segment)
    return _OnDevices(place=place, sums=j_sums, counts=j_counts, sliced=sliced, slices=slices,
                      quantiles=quantiles)


def _chunking(n_draws: int, n_shards: int, per_draw: int, chunk) -> tuple[int, int]:
    """(draws per chunk, rows per kernel call: the chunk padded to a multiple of the shards)."""
    if chunk is None:
        chunk = max(1, min(n_draws, n_shards * (_CHUNK_ELEMENTS // max(1, per_draw))))
    chunk = max(1, min(int(chunk), max(1, n_draws)))
    return chunk, -(-chunk // n_shards) * n_shards


def resample_draws(block_index: np.ndarray, n_blocks: int, mean_series: Sequence[np.ndarray],
                   quantile_series: Sequence[np.ndarray], qs: Sequence[float], n_draws: int, *,
                   options: DrawOptions | None = None, **overrides):
    """Draws of means and quantiles for many series under one multiplicity matrix.

    ``mean_series`` / ``quantile_series`` are (n,) float arrays over the same tasks; a
    non-finite entry is left out of that series (callers enforce their NaN policy first).
    The matrix comes from ``seed`` (streamed in chunks) or is given as ``mult``
    (:class:`~passage_jax.stats.options.DrawOptions`, or its fields as keywords: ``seed``,
    ``mult``, ``chunk``, ``segment``, ``sharding``).
    Returns ``(mean_draws (D, Jm), quantile_draws (D, Jq, len(qs)))`` as float64 NumPy.

    ``sharding`` (see :func:`draw_placement`) splits each chunk of draws across devices: the
    chunk is padded with zero rows to a multiple of the shard count (the padded rows are
    dropped), the per-block sums, sorted values and block ids are replicated once on every
    device. With an automatic chunk size each device keeps the single-device working set.
    The multiplicity rows, and so the results, do not depend on the placement.
    """
    opts = merge_options(DrawOptions, options, overrides, "resample_draws")
    block_index = np.asarray(block_index, dtype=np.int32)
    K = int(n_blocks)
    place = resolve_placement(opts.sharding, axes=DRAW_AXES, modes=DRAW_MODES)
    n_shards = 1 if place is None else place.n_shards
    qs = tuple(float(q) for q in qs)
    take = _row_source(K, n_draws, opts)
    exact32 = kernel_precision() == "float32"   # no float64: error-free float32 means
    with kernel_x64():
        sums, counts = _block_sums(block_index, K, mean_series)
        Jm, Jq = len(mean_series), len(quantile_series)
        series = sorted_series(block_index, K, quantile_series, 2 * len(qs), opts.segment) if Jq else None
        per_draw = series.per_draw(len(qs)) + K if Jq else K + Jm
        chunk, width = _chunking(n_draws, n_shards, per_draw, opts.chunk)
        max_weight = None
        if exact32 and Jm:
            max_weight = K if opts.mult is None else float(np.abs(opts.mult).sum(axis=1).max(initial=0.0))
        dev = _on_devices(place, sums, counts, series, max_weight)
        mean_out = np.empty((n_draws, Jm))
        q_out = np.empty((n_draws, Jq, len(qs)))
        for start in range(0, n_draws, chunk):
            stop = min(n_draws, start + chunk)
            block = np.zeros((width, K), dtype=np.float64)
            block[: stop - start] = take(start, stop)
            jm = put(block, place)
            if Jm:
                mean_out[start:stop] = dev.means(jm)[: stop - start]
            if Jq:
                q_out[start:stop] = dev.quantile_draws(jm, qs)[: stop - start]
    return mean_out, q_out
