"""The arithmetic of value iteration's two paths (:mod:`passage_jax.reference.vi_kernel`).

The sweeps, convergence tests and descent are written once; :class:`FloatOps` (plain
arrays, the float64 path) and :class:`PairOps` (:class:`~passage_jax.reference.dfloat.DFloat`
pairs of float32, the double-float path) supply their additions, minima, comparisons
and the Bellman backup; :func:`ops_of` picks one from the values it is given.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from passage_jax.graph.grid import bellman_backup, descent_policy
from passage_jax.reference.dfloat import (
    DFloat,
    df_add,
    df_bellman_backup,
    df_descent_policy,
    df_isfinite,
    df_isinf,
    df_less,
    df_minimum,
    df_not_equal,
    df_where,
)

__all__ = ["FloatOps", "PairOps", "ops_of", "tmap"]


class FloatOps:
    """The arithmetic of the float64 path (plain arrays of any float dtype)."""

    add = staticmethod(jnp.add)
    minimum = staticmethod(jnp.minimum)
    isinf = staticmethod(jnp.isinf)
    isfinite = staticmethod(jnp.isfinite)
    backup = staticmethod(bellman_backup)
    descent_policy = staticmethod(descent_policy)

    @staticmethod
    def inf_like(x):
        return jnp.full_like(x, jnp.inf)

    @staticmethod
    def any_less(a, b):
        return jnp.any(a < b)

    @staticmethod
    def any_ne(a, b):
        return jnp.any(a != b)

    @staticmethod
    def zero_where(mask, x):
        return jnp.where(mask, jnp.zeros_like(x), x)

    @staticmethod
    def nan_unless(ok, x):
        return jnp.where(ok, x, jnp.nan)


class PairOps:
    """The arithmetic of the double-float path (``DFloat`` pairs of float32)."""

    add = staticmethod(df_add)
    minimum = staticmethod(df_minimum)
    isinf = staticmethod(df_isinf)
    isfinite = staticmethod(df_isfinite)
    backup = staticmethod(df_bellman_backup)
    descent_policy = staticmethod(df_descent_policy)

    @staticmethod
    def inf_like(x):
        return DFloat(jnp.full_like(x.hi, jnp.inf), jnp.zeros_like(x.lo))

    @staticmethod
    def any_less(a, b):
        return jnp.any(df_less(a, b))

    @staticmethod
    def any_ne(a, b):
        return jnp.any(df_not_equal(a, b))

    @staticmethod
    def zero_where(mask, x):
        return df_where(mask, DFloat(jnp.zeros_like(x.hi), jnp.zeros_like(x.lo)), x)

    @staticmethod
    def nan_unless(ok, x):
        nan = jnp.full_like(x.hi, jnp.nan)
        return DFloat(jnp.where(ok, x.hi, nan), jnp.where(ok, x.lo, nan))


def ops_of(values):
    """:class:`PairOps` for a ``DFloat`` pair, else :class:`FloatOps`."""
    return PairOps if isinstance(values, DFloat) else FloatOps


def tmap(f, *trees):
    """``jax.tree_util.tree_map`` (arrays and ``DFloat`` pairs alike)."""
    return jax.tree_util.tree_map(f, *trees)

