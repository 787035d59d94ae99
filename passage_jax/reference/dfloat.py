"""Double-float arithmetic: a value is the unevaluated sum ``hi + lo`` of two float32s.

Value iteration needs only additions and comparisons, and float32 pairs carry a
48-bit significand (``hi`` has 24 bits, ``lo`` the next 24), so the reference
solver can run where float64 is missing or slow (TPUs have no float64; consumer
GPUs run it at 1/32 to 1/64 of the float32 rate).

* :class:`DFloat` — the pair, a pytree (``hi`` and ``lo`` of one shape, float32);
  normalised means ``hi = fl32(hi + lo)``, so ``|lo| <= ulp(hi) / 2`` and the pair
  of a value is unique: lexicographic ``(hi, lo)`` order is the order of the values
  and pair equality is value equality. ``+inf`` is ``(inf, 0)``.
* :func:`two_sum` (Knuth's error-free sum, any magnitudes) and
  :func:`quick_two_sum` (Dekker's, ``|a| >= |b|``): ``s + e == a + b`` exactly.
* :func:`df_add` — the accurate pair sum (both halves added with :func:`two_sum`,
  renormalised twice); relative error at most ``3 * 2**-48`` (Joldes, Muller and
  Popescu 2017, for ``p = 24``); an infinite sum is ``(inf, 0)``.
* :func:`df_less`, :func:`df_minimum`, :func:`df_not_equal`, :func:`df_where` —
  comparisons and selection on normalised pairs.
* :func:`split_float64` / :func:`to_float64` — host conversions: ``hi =
  float32(x)``, ``lo = float32(x - hi)`` (``|x - (hi + lo)| <= 2**-48 |x|``), and
  back, ``hi + lo`` in float64 (exact: the pair spans at most 48 bits).
* :func:`df_shift`, :func:`df_bellman_backup`, :func:`df_descent_policy` — the grid
  operators of :mod:`passage_jax.graph.grid` on pairs.

Nothing here reassociates: XLA keeps the order of floating-point additions unless
fast-math is switched on (it is off by default in JAX), and
``tests/reference/test_double_float.py`` checks that the error terms survive compilation (a
sum that float32 gets wrong and the pair gets exactly right).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from passage_jax.graph.grid import TIE_RTOL, shift
from passage_jax.graph.moves import MOVES

__all__ = [
    "DFloat", "ADD_RTOL", "SPLIT_RTOL", "two_sum", "quick_two_sum", "df_add", "df_less",
    "df_minimum", "df_not_equal", "df_where", "df_full", "df_isinf", "df_isfinite",
    "split_float64", "to_float64", "split_traced", "df_shift", "df_bellman_backup",
    "df_descent_policy",
]

#: Relative error bound of :func:`df_add` on float32 pairs (3 u**2, u = 2**-24).
ADD_RTOL = 3.0 * 2.0 ** -48
#: Relative error bound of :func:`split_float64` (u**2).
SPLIT_RTOL = 2.0 ** -48


@struct.dataclass
class DFloat:
    """A double-float array: the value is ``hi + lo`` (both float32, same shape).

    Host conveniences: ``np.asarray(x)`` and ``float(x)`` give the float64 value,
    ``x[i]`` and ``x.T`` index and transpose both halves."""

    hi: jax.Array
    lo: jax.Array

    @property
    def shape(self):
        return jnp.shape(self.hi)

    @property
    def ndim(self):
        return jnp.ndim(self.hi)

    @property
    def T(self):
        return DFloat(self.hi.T, self.lo.T)

    def __getitem__(self, idx):
        return DFloat(self.hi[idx], self.lo[idx])

    def __array__(self, dtype=None, copy=None):
        out = to_float64(self)
        return out if dtype is None else out.astype(dtype)

    def __float__(self):
        return float(to_float64(self))


def two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth; any order
    of magnitudes; finite inputs)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def quick_two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly, when ``|a| >= |b|``
    (Dekker; finite inputs)."""
    s = a + b
    e = b - (s - a)
    return s, e


def df_add(x: DFloat, y: DFloat) -> DFloat:
    """Normalised pair sum ``x + y`` (the accurate algorithm: both halves summed
    error-free, renormalised twice). ``+inf`` in either gives ``(inf, 0)``."""
    s1, s2 = two_sum(x.hi, y.hi)
    t1, t2 = two_sum(x.lo, y.lo)
    s2 = s2 + t1
    s1, s2 = quick_two_sum(s1, s2)
    s2 = s2 + t2
    hi, lo = quick_two_sum(s1, s2)
    raw = x.hi + y.hi
    finite = jnp.isfinite(raw)
    return DFloat(jnp.where(finite, hi, raw), jnp.where(finite, lo, jnp.zeros_like(lo)))


def df_less(x: DFloat, y: DFloat):
    """``x < y`` for normalised pairs (lexicographic on ``(hi, lo)``)."""
    return (x.hi < y.hi) | ((x.hi == y.hi) & (x.lo < y.lo))


def df_not_equal(x: DFloat, y: DFloat):
    """``x != y`` for normalised pairs."""
    return (x.hi != y.hi) | (x.lo != y.lo)


def df_where(mask, x: DFloat, y: DFloat) -> DFloat:
    return DFloat(jnp.where(mask, x.hi, y.hi), jnp.where(mask, x.lo, y.lo))


def df_minimum(x: DFloat, y: DFloat) -> DFloat:
    """Elementwise minimum (``x`` where the two are equal)."""
    return df_where(df_less(y, x), y, x)


def df_full(shape, value: float) -> DFloat:
    """A pair array of one float32-exact value (``+inf`` or a small integer)."""
    return DFloat(jnp.full(shape, value, jnp.float32), jnp.zeros(shape, jnp.float32))


def df_isinf(x: DFloat):
    return jnp.isinf(x.hi)


def df_isfinite(x: DFloat):
    return jnp.isfinite(x.hi)


def split_float64(x, where: str = "value") -> DFloat:
    """Host split of float64 values into normalised float32 pairs (NumPy arrays):
    ``hi = float32(x)``, ``lo = float32(x - hi)``; ``+inf`` becomes ``(inf, 0)``.

    ValueError (naming ``where``) for NaN or a finite value outside the float32 range.
    """
    x = np.asarray(x, np.float64)
    if np.isnan(x).any():
        raise ValueError(f"{where}: NaN cannot be split into a float32 pair")
    fin = np.isfinite(x)
    big = np.abs(np.where(fin, x, 0.0)) >= float(np.finfo(np.float32).max)
    if big.any():
        i = np.unravel_index(int(np.flatnonzero(big)[0]), x.shape)
        raise ValueError(f"{where}: {x[i]!r} at {tuple(int(v) for v in i)} is outside the "
                         "float32 range of a double-float pair")
    with np.errstate(over="ignore", invalid="ignore"):
        hi = x.astype(np.float32)
        lo = np.where(fin, x - hi.astype(np.float64), 0.0).astype(np.float32)
    return DFloat(hi, lo)


def to_float64(x: DFloat) -> np.ndarray:
    """Host value of a pair as float64 (``hi + lo``, exact; NaN and inf kept)."""
    hi = np.asarray(x.hi, np.float64)
    lo = np.asarray(x.lo, np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(hi), hi + lo, hi)


def split_traced(x) -> DFloat:
    """:func:`split_float64` inside a traced computation (``x`` float64 needs x64; a
    float32 ``x`` gives ``lo = 0``)."""
    hi = x.astype(jnp.float32)
    fin = jnp.isfinite(hi)
    lo = jnp.where(fin, x - hi.astype(x.dtype), jnp.zeros_like(x)).astype(jnp.float32)
    return DFloat(hi, lo)


# --------------------------------------------------------------------------- #
# Grid operators on pairs (the float versions are passage_jax.graph.grid's)
# --------------------------------------------------------------------------- #

def df_shift(x: DFloat, d_row: int, d_col: int) -> DFloat:
    """``x[r + d_row, c + d_col]``, ``+inf`` outside the grid."""
    # float32 fills: a Python float would enter the traced pad as a float64 constant
    return DFloat(shift(x.hi, d_row, d_col, np.float32(np.inf)),
                  shift(x.lo, d_row, d_col, np.float32(0.0)))


def _move_value(values: DFloat, edge_costs: DFloat, k: int) -> DFloat:
    dr, dc = MOVES[k].tolist()
    return df_add(edge_costs[..., k, :, :], df_shift(values, dr, dc))


def df_bellman_backup(values: DFloat, edge_costs: DFloat) -> DFloat:
    """``min_k (C[k, u] + V(u + MOVES[k]))`` per cell (+inf where no legal move), the
    additions in Dijkstra's order."""
    best = _move_value(values, edge_costs, 0)
    for k in range(1, len(MOVES)):
        best = df_minimum(best, _move_value(values, edge_costs, k))
    return best


def df_descent_policy(values: DFloat, edge_costs: DFloat, rtol: float = TIE_RTOL):
    """``(move, backup)``: the first ``k`` in ``MOVES`` order whose ``C[k, u] + V(u +
    MOVES[k])`` is within ``rtol * |best|`` of the minimum ``best`` (the route tie rule of
    :func:`passage_jax.graph.descent_policy`, the difference taken in pair arithmetic)
    (int32), and that minimum (a pair)."""
    qs = [_move_value(values, edge_costs, k) for k in range(len(MOVES))]
    best = qs[0]
    for q in qs[1:]:
        best = df_minimum(best, q)
    tol = jnp.float32(rtol) * jnp.abs(best.hi)
    neg_best = DFloat(-best.hi, -best.lo)
    move = jnp.zeros(best.hi.shape, jnp.int32)
    for k in range(len(MOVES) - 1, -1, -1):  # the earliest tied move is set last
        gap = df_add(qs[k], neg_best)  # +inf for an illegal move beside a finite best
        tied = ~df_not_equal(qs[k], best) | (gap.hi + gap.lo <= tol)
        move = jnp.where(tied, jnp.int32(k), move)
    return move, best
