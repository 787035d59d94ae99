"""Masked reductions shared by every stage: NumPy's linear-interpolation
percentile and the masked mean, as pure jittable JAX functions.

A leaf module (it imports only JAX), so the metric kernels, the statistics and
the runner all use the same arithmetic:

* :func:`quantile_positions` — the two order statistics and the weight of
  NumPy's default ``method="linear"``: ``h = (n - 1) * q``, ``lo = floor(h)``,
  ``hi = min(lo + 1, n - 1)``, ``t = h - lo``;
* :func:`numpy_lerp` — NumPy's two-sided ``_lerp`` between them (run eagerly,
  bit-for-bit what ``np.percentile`` computes; under ``jit`` XLA may fuse the
  multiply-add, a difference of an ulp or two);
* :func:`percentile_of_sorted` — a percentile of the first ``n`` entries of an
  ascending array (``n`` may be traced), with an optional monotone map applied
  to the two order statistics only;
* :func:`masked_percentile` — a percentile of ``x[mask]``;
* :func:`masked_mean` — the mean of ``x[mask]``.

Every reducer returns NaN over an empty selection.
"""
from __future__ import annotations

import jax.numpy as jnp

__all__ = ["quantile_positions", "numpy_lerp", "percentile_of_sorted", "masked_percentile",
           "masked_mean"]


def quantile_positions(n, quantile, dtype):
    """(lo, hi, t) of NumPy's ``linear`` quantile of ``n`` sorted values.

    ``quantile`` is a level in [0, 1] (scalar or array, cast to ``dtype``);
    ``n`` is an integer count (may be traced). ``lo``/``hi`` are int32 indices of
    the two order statistics (0 when ``n`` is 0) and ``t`` in [0, 1) the weight
    of ``hi``: ``h = max((n - 1) * q, 0)``, ``lo = floor(h)``,
    ``hi = min(lo + 1, max(n - 1, 0))``, ``t = h - lo``.
    """
    n = jnp.asarray(n)
    pos = (n - 1).astype(dtype) * jnp.asarray(quantile, dtype)
    pos = jnp.maximum(pos, 0)
    lo = jnp.floor(pos).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, jnp.maximum(n - 1, 0))
    return lo, hi, pos - lo.astype(dtype)


def numpy_lerp(a, b, t):
    """NumPy's ``_lerp``: ``a + (b - a) t`` below t = 0.5, ``b - (b - a)(1 - t)``
    from 0.5 (so the result is exact at both ends), and ``a`` where ``a == b``."""
    d = b - a
    val = jnp.where(t >= 0.5, b - d * (1 - t), a + d * t)
    return jnp.where(a == b, a, val)


def percentile_of_sorted(xs, n, q, value=None):
    """The ``q``-th percentile (``q`` in [0, 100]) of the first ``n`` entries of
    the ascending array ``xs``, by NumPy's default linear interpolation.

    ``n`` may be traced; entries at ``n`` and beyond are never read into the
    result. ``value`` (optional) maps an entry to the float it stands for and
    must be monotone non-decreasing; it is applied to the two order statistics
    only (e.g. a square root of exact squared distances). Without ``value``,
    ``xs`` must be floating. NaN when ``n`` is 0.
    """
    xs = jnp.asarray(xs)
    if value is None:
        value = lambda v: v  # noqa: E731
    dt = value(xs[:1]).dtype
    lo, hi, t = quantile_positions(n, jnp.asarray(q, dt) / 100, dt)
    val = numpy_lerp(value(xs[lo]), value(xs[hi]), t)
    return jnp.where(n > 0, val, jnp.nan)


def masked_percentile(x, mask, q):
    """The ``q``-th percentile (``q`` in [0, 100]) of ``x[mask]`` for a 1-D ``x``,
    by NumPy's default linear interpolation (as ``np.percentile(x[mask], q)``,
    see :func:`numpy_lerp`); NaN when the mask is empty. NaNs in ``x`` must be
    masked out. Jittable: the mask may be traced."""
    x = jnp.asarray(x)
    if x.shape[-1] == 0:
        return jnp.asarray(jnp.nan, x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else float)
    n = jnp.sum(mask)
    xs = jnp.sort(jnp.where(mask, x, jnp.inf))
    return percentile_of_sorted(xs, n, q)


def masked_mean(x, mask):
    """The mean of ``x[mask]`` (sum over count, in ``x``'s dtype); NaN when the
    mask is empty. Jittable: the mask may be traced."""
    n = jnp.sum(mask)
    s = jnp.sum(jnp.where(mask, x, 0))
    return jnp.where(n > 0, s / jnp.maximum(n, 1), jnp.nan)
