"""Pure JAX kernels for resampling statistics (no I/O, dtype from the inputs).

Contract: a bootstrap draw is a row of a multiplicity matrix ``M`` (draws, K): how many times
each of the K blocks was drawn. A task's weight in a draw is its block's multiplicity, so

* a mean is ``(M @ block_sums) / (M @ block_counts)`` (NaN when the denominator is 0);
* a quantile is a weighted order statistic of the values sorted once: the k-th element
  (0-based) of the materialised resample is the first sorted position whose cumulative
  weight exceeds k.

Quantiles follow NumPy's default ``linear`` method on the materialised resample of ``n``
values, with the positions and the lerp of :mod:`passage_jax.reduce`
(:func:`~passage_jax.reduce.quantile_positions`, :func:`~passage_jax.reduce.numpy_lerp`):
order statistics at ``floor((n - 1) q)`` and ``min(floor((n - 1) q) + 1, n - 1)``.
Cumulative weights are read in two levels: coarse cumulative counts at segment ends by one
matrix product, then a cumulative sum inside the one segment that holds the wanted order
statistic (``seg`` positions). With ``seg=None`` the whole array is one segment (cheaper when
the number of blocks is close to the number of tasks).

The jitted functions are pure; :func:`coarse_counts` is the one host-side (NumPy) helper.

Without float64 (:func:`passage_jax.precision.kernel_precision` ``"float32"``) the means are
computed error-free in float32 (:func:`exact_block_mean_draws`): the float64 per-block sums
and counts are cut on the host into integer-valued float32 slices of ``b`` bits
(:func:`slice_columns`, ``b = 24 - ceil(log2 R)`` for draws whose multiplicities sum to at
most ``R``), so every product and partial sum of ``M @ slice`` is an integer below
``2**24``: exact in float32 in any summation order. The S slice products come back and are
combined in float64 on the host: the means equal the float64 path's to float64 rounding
(``MEAN_RTOL_FLOAT32``). The quantile kernel runs in float32 as written (exact integer
cumulative weights below ``2**24``); its draws are order statistics rounded to float32 and
a float32 interpolation position (``QUANTILE_RTOL_FLOAT32``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.precision import kernel_precision
from passage_jax.reduce import numpy_lerp, quantile_positions

__all__ = [
    "block_mean_draws", "weighted_quantile_draws", "coarse_counts", "SlicedColumns", "slice_columns",
    "sliced_products", "exact_block_mean_draws", "MEAN_RTOL_FLOAT32", "QUANTILE_RTOL_FLOAT32",
    "precision_statement"
]

#: Stated relative tolerance of the float32 path's bootstrap means against the float64
#: path (both round the same exact sum; error-free slices, float64 combination).
MEAN_RTOL_FLOAT32 = 1e-12
#: Stated relative tolerance of float32 quantile draws: an order statistic rounded to
#: float32 (2**-24) plus the float32 position ``(n - 1) q`` (about ``n 2**-24`` of the gap
#: between neighbouring order statistics); observed below 2e-6 on the test material.
QUANTILE_RTOL_FLOAT32 = 1e-5
_F32_BITS = 24


@jax.jit
def block_mean_draws(mult, sums, counts):
    """Means per draw. mult (D, K), sums (K, J), counts (K, J) -> (D, J), NaN if no weight."""
    num = mult @ sums
    den = mult @ counts
    safe = jnp.where(den > 0, den, 1)
    return jnp.where(den > 0, num / safe, jnp.nan)


def coarse_counts(blk, n_blocks, seg):
    """Cumulative block counts at segment ends: (J, m) block ids -> (J, G, K+1).

    Entry [j, g, k] counts the positions ``< (g+1)*seg`` of row j whose block is k. Padding
    positions carry block id ``n_blocks`` (a zero-multiplicity column). Host-side helper,
    NumPy in, NumPy out.
    """
    J, m = blk.shape
    G = -(-m // seg)
    out = np.zeros((J, G, n_blocks + 1), dtype=np.float64)
    for j in range(J):
        for g in range(G):
            out[j, g] = np.bincount(blk[j, g * seg:(g + 1) * seg], minlength=n_blocks + 1)
        np.cumsum(out[j], axis=0, out=out[j])
    return out


@partial(jax.jit, static_argnames=("qs", "seg"))
def weighted_quantile_draws(mult, vals, blk, coarse, qs, seg):
    """Quantiles of the resampled values, per draw, series and quantile.

    mult   (D, K) block multiplicities (float, exact integers).
    vals   (J, P) values sorted ascending per series, padded to P = G*seg (any padding value).
    blk    (J, P) int32 block id per sorted position; padding = K (never weighted).
    coarse (J, G, K+1) from :func:`coarse_counts` (ignored when ``seg`` is None).
    qs     tuple of quantile levels in [0, 1].
    Returns (D, J, len(qs)); NaN where a draw gives a series no weight.
    """
    D = mult.shape[0]
    dtype = vals.dtype
    mx = jnp.concatenate([mult, jnp.zeros((D, 1), mult.dtype)], axis=1).astype(dtype)
    q = jnp.asarray(qs, dtype=dtype)
    P = vals.shape[1]

    def targets(n):
        # ranks of the two order statistics (as weights, in the values' dtype) and the lerp weight
        lo, hi, t = quantile_positions(n, q, dtype)
        return t, jnp.concatenate([lo.astype(dtype), hi.astype(dtype)])

    def finish(n, t, v):
        nq = q.shape[0]
        res = numpy_lerp(v[:nq], v[nq:], t)
        return jnp.where(n > 0, res, jnp.nan)

    if seg is None:
        def one(mrow, vals_j, blk_j):
            cw = jnp.cumsum(mrow[blk_j])
            n = cw[-1]
            t, k = targets(n)
            pos = jnp.searchsorted(cw, k, side="right")
            return finish(n, t, vals_j[jnp.minimum(pos, P - 1)])

        return jax.vmap(lambda m: jax.vmap(lambda v, b: one(m, v, b))(vals, blk))(mx)

    cw_coarse = jnp.einsum("dk,jgk->djg", mx, coarse.astype(dtype))  # (D, J, G)
    offs = jnp.arange(seg)

    def one(mrow, cwc, vals_j, blk_j):
        n = cwc[-1]
        t, k = targets(n)
        g = jnp.searchsorted(cwc, k, side="right")          # segment holding order stat k
        g = jnp.minimum(g, cwc.shape[0] - 1)
        prior = jnp.where(g > 0, cwc[jnp.maximum(g - 1, 0)], 0)
        pos = g[:, None] * seg + offs[None, :]               # (T, seg)
        cw = prior[:, None] + jnp.cumsum(mrow[blk_j[pos]], axis=1)
        inner = jnp.sum(cw <= k[:, None], axis=1)
        idx = jnp.minimum(g * seg + inner, P - 1)
        return finish(n, t, vals_j[idx])

    return jax.vmap(lambda m, c: jax.vmap(lambda cc, v, b: one(m, cc, v, b))(c, vals, blk))(
        mx, cw_coarse)


# ----------------------------------------------------------------------------- error-free means

@dataclass(frozen=True)
class SlicedColumns:
    """A float64 (K, J) matrix ``x`` as ``S`` integer-valued float32 slices.

    ``x[k, j] ~= sum_i slices[i, k, j] * scales[i, j]`` with ``|slices| < 2**bits`` and
    ``scales`` powers of two; the truncated rest is below ``2**-53`` of the column's
    largest magnitude per ``max_weight`` of weight. Products ``M @ slices[i]`` with
    non-negative integer ``M`` whose rows sum to at most ``max_weight`` are exact in
    float32."""
    slices: np.ndarray
    scales: np.ndarray
    bits: int
    max_weight: float


def slice_columns(x, max_weight) -> SlicedColumns:
    """Cut a finite float64 (K, J) matrix into :class:`SlicedColumns` for weight rows
    summing to at most ``max_weight`` (a bootstrap draw of K blocks: K). ValueError for a
    non-finite entry or a weight above ``2**23`` (no slice width left)."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2:
        raise ValueError(f"slice_columns: expected a (blocks, columns) matrix, got shape {x.shape}")
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        raise ValueError(f"slice_columns: entry {tuple(int(i) for i in bad[0])} is {x[tuple(bad[0])]}")
    w = float(max_weight)
    if not (math.isfinite(w) and w >= 0):
        raise ValueError(f"slice_columns: max_weight must be finite and >= 0, got {max_weight!r}")
    c = max(0, math.ceil(math.log2(w))) if w > 1 else 0
    bits = _F32_BITS - c
    if bits < 1:
        raise ValueError(f"slice_columns: weights summing to {w:g} leave no exact float32 slice "
                         f"(at most {2 ** (_F32_BITS - 1)})")
    n_slices = -(-(53 + c) // bits)
    top = np.max(np.abs(x), axis=0) if x.size else np.zeros(x.shape[1])
    _, e = np.frexp(top)                       # max |x[:, j]| < 2**e[j]
    e = e.astype(np.int64)
    r = np.ldexp(x, -e[None, :])               # |r| < 1, exact
    slices = np.empty((n_slices,) + x.shape, np.float32)
    scales = np.empty((n_slices, x.shape[1]), np.float64)
    for i in range(n_slices):
        r = np.ldexp(r, bits)
        m = np.trunc(r)
        r -= m
        slices[i] = m
        scales[i] = np.ldexp(1.0, e - bits * (i + 1))
    return SlicedColumns(slices, scales, bits, w)


@jax.jit
def sliced_products(mult, slices):
    """``mult (D, K) @ slices[i] (K, J)`` for every slice -> (S, D, J), at full float32
    precision (``Precision.HIGHEST``: no reduced-precision passes on GPUs; on TPUs exact
    while every multiplicity is below 256, which a bootstrap draw of realistic size never
    reaches)."""
    mult = jnp.asarray(mult)
    slices = jnp.asarray(slices)
    dt = jnp.result_type(mult.dtype, slices.dtype)
    return jnp.einsum("dk,skj->sdj", mult.astype(dt), slices.astype(dt),
                      precision=jax.lax.Precision.HIGHEST)


def _combine(parts: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """sum_i parts[i] * scales[i] in float64, least significant slice first."""
    out = np.zeros(parts.shape[1:], np.float64)
    for i in range(parts.shape[0] - 1, -1, -1):
        out += parts[i].astype(np.float64) * scales[i][None, :]
    return out


def exact_block_mean_draws(mult, slices, sliced: SlicedColumns, *, fetch=np.asarray) -> np.ndarray:
    """:func:`block_mean_draws` without float64 kernels, as float64 NumPy (D, J).

    ``sliced`` is :func:`slice_columns` of ``np.concatenate([sums, counts], axis=1)`` (K, 2J)
    for multiplicity rows summing to at most its ``max_weight``; ``slices`` is
    ``sliced.slices`` as given to the device (e.g. replicated with ``jax.device_put``);
    ``mult`` (D, K) exact integer multiplicities (any float dtype, a device array or NumPy).
    ``fetch`` turns the kernel's result into NumPy (an all-gather for global arrays). NaN
    where a draw gives no weight."""
    parts = np.asarray(fetch(sliced_products(mult, slices)))
    both = _combine(parts, sliced.scales)
    J = both.shape[1] // 2
    num, den = both[:, :J], both[:, J:]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def precision_statement() -> dict:
    """What a caller records next to bootstrap / randomization results:
    ``kernel_precision`` ("float64" or "float32"), ``mean_precision`` ("float64", or
    "float64 (error-free float32 slices)"), ``quantile_precision`` ("float64" or
    "float32") and the stated relative tolerances against the float64 path
    (``mean_rtol``, ``quantile_rtol``; 0 for float64 kernels)."""
    kp = kernel_precision()
    if kp == "float64":
        return {"kernel_precision": kp, "mean_precision": "float64", "quantile_precision": "float64",
                "mean_rtol": 0.0, "quantile_rtol": 0.0}
    return {"kernel_precision": kp, "mean_precision": "float64 (error-free float32 slices)",
            "quantile_precision": "float32", "mean_rtol": MEAN_RTOL_FLOAT32,
            "quantile_rtol": QUANTILE_RTOL_FLOAT32}
