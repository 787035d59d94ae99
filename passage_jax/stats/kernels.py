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
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.reduce import numpy_lerp, quantile_positions

# numpy_lerp is re-exported: it was first published here
__all__ = ["block_mean_draws", "weighted_quantile_draws", "numpy_lerp", "coarse_counts"]


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
