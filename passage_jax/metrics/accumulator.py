"""On-device metric accumulator for training loops (in the spirit of ``clu.metrics``).

:class:`PathMetrics` is a pytree of fixed shape, so it can be carried through
``jit``-compiled steps, ``lax.scan`` loops and ``pmap``/sharded reductions.
Means and rates are kept as exact sums and counts. Quantiles (regret median,
p90, p95) need the values themselves: the accumulator keeps the regrets in a
fixed-capacity buffer (``capacity``, chosen at :meth:`PathMetrics.empty`) and
reports exact quantiles while everything fits. Once more regrets than
``capacity`` have been seen the buffer stops taking values, the quantiles come
out NaN and ``regret_quantiles_exact`` is False; nothing is approximated
silently. For a full evaluation use :func:`score_routes` and
:func:`primary_metrics` on the per-task arrays instead.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from passage_jax.metrics.aggregate import GEOMEAN_FLOOR
from passage_jax.metrics.types import metric_dict
from passage_jax.reduce import masked_percentile

__all__ = ["PathMetrics"]


@flax.struct.dataclass(kw_only=True)
class PathMetrics:
    n_tasks: jax.Array
    n_valid: jax.Array
    n_connected: jax.Array
    n_violation: jax.Array
    traversals_in_violation: jax.Array
    assd_sum: jax.Array
    h95_sum: jax.Array
    n_regret: jax.Array  # finite (defined) regrets seen
    regret_sum: jax.Array
    log1p_regret_sum: jax.Array
    regret_buffer: jax.Array  # (capacity,)

    @classmethod
    def empty(cls, capacity: int = 4096, dtype=jnp.float32) -> PathMetrics:
        i = jnp.zeros((), jnp.int32)
        f = jnp.zeros((), dtype)
        return cls(n_tasks=i, n_valid=i, n_connected=i, n_violation=i, traversals_in_violation=i,
                   assd_sum=f, h95_sum=f, n_regret=i, regret_sum=f, log1p_regret_sum=f,
                   regret_buffer=jnp.full((capacity,), jnp.nan, dtype))

    @property
    def capacity(self) -> int:
        return self.regret_buffer.shape[-1]

    @classmethod
    def from_batch(cls, per_task, mask=None, capacity: int = 4096) -> PathMetrics:
        """Accumulator holding one batch of per-task metrics (a
        :class:`~passage_jax.metrics.types.RouteMetrics` from ``score_tasks``, or
        a mapping of the same names); ``mask`` marks the real (non-padding) tasks."""
        per_task = metric_dict(per_task)
        regret = jnp.asarray(per_task["regret"])
        return cls.empty(capacity, regret.dtype).update(per_task, mask)

    def update(self, per_task, mask=None) -> PathMetrics:
        """Add a batch of per-task metrics (``RouteMetrics`` or a mapping);
        returns a new accumulator."""
        per_task = metric_dict(per_task)
        dt = self.regret_buffer.dtype
        regret = jnp.asarray(per_task["regret"], dt)
        m = jnp.ones(regret.shape, bool) if mask is None else jnp.asarray(mask, bool)
        valid = jnp.asarray(per_task["valid_path"], bool) & m
        viol = jnp.asarray(per_task["obstacle_violation"], bool) & m
        rm = m & ~jnp.isnan(regret)
        i32 = jnp.int32
        # regrets of this batch, compacted to the front in task order
        order = jnp.argsort(~rm, stable=True)
        vals = regret[order]
        k = jnp.sum(rm, dtype=i32)
        pos = self.n_regret + jnp.arange(regret.shape[0], dtype=i32)
        keep = (jnp.arange(regret.shape[0]) < k) & (pos < self.capacity)
        buf = self.regret_buffer.at[jnp.where(keep, pos, self.capacity)].set(vals, mode="drop")
        return self.replace(
            n_tasks=self.n_tasks + jnp.sum(m, dtype=i32),
            n_valid=self.n_valid + jnp.sum(valid, dtype=i32),
            n_connected=self.n_connected + jnp.sum(jnp.asarray(per_task["connected_path"], bool) & m,
                                                   dtype=i32),
            n_violation=self.n_violation + jnp.sum(viol, dtype=i32),
            traversals_in_violation=self.traversals_in_violation + jnp.sum(
                jnp.where(viol, jnp.asarray(per_task["obstacle_traversals"], i32), 0), dtype=i32),
            assd_sum=self.assd_sum + jnp.sum(jnp.where(valid, jnp.asarray(per_task["assd"], dt), 0)),
            h95_sum=self.h95_sum + jnp.sum(jnp.where(valid, jnp.asarray(per_task["h95"], dt), 0)),
            n_regret=self.n_regret + k,
            regret_sum=self.regret_sum + jnp.sum(jnp.where(rm, regret, 0)),
            log1p_regret_sum=self.log1p_regret_sum + jnp.sum(
                jnp.where(rm, jnp.log1p(jnp.maximum(jnp.where(rm, regret, 0), GEOMEAN_FLOOR)), 0)),
            regret_buffer=buf,
        )

    def merge(self, other: PathMetrics) -> PathMetrics:
        """Combine two accumulators (e.g. from two devices or two epochs)."""
        cap = self.capacity
        pos = self.n_regret + jnp.arange(other.capacity, dtype=jnp.int32)
        keep = (jnp.arange(other.capacity) < jnp.minimum(other.n_regret, other.capacity)) & (pos < cap)
        buf = self.regret_buffer.at[jnp.where(keep, pos, cap)].set(
            other.regret_buffer.astype(self.regret_buffer.dtype), mode="drop")
        summed = jax.tree_util.tree_map(lambda a, b: a + b.astype(a.dtype), self, other)
        return summed.replace(regret_buffer=buf)

    def compute(self) -> dict:
        """The contract §4 aggregates (jittable). Rates over zero tasks are NaN."""
        dt = self.regret_buffer.dtype

        def ratio(a, b):
            return jnp.where(b > 0, a.astype(dt) / jnp.maximum(b, 1).astype(dt), jnp.nan)

        exact = self.n_regret <= self.capacity
        stored = jnp.arange(self.capacity) < jnp.minimum(self.n_regret, self.capacity)

        def q(p):
            return jnp.where(exact, masked_percentile(self.regret_buffer, stored, p), jnp.nan)

        summary = {
            "median": q(50.0), "p90": q(90.0), "p95": q(95.0),
            "mean": ratio(self.regret_sum, self.n_regret),
            "geomean": jnp.expm1(ratio(self.log1p_regret_sum, self.n_regret)),
        }
        return {
            "regret_median": summary["median"],
            "regret_p90": summary["p90"],
            "assd_mean": ratio(self.assd_sum, self.n_valid),
            "h95_mean": ratio(self.h95_sum, self.n_valid),
            "success_rate": ratio(self.n_valid, self.n_tasks),
            "obstacle_violation_rate": ratio(self.n_violation, self.n_tasks),
            "n_tasks": self.n_tasks,
            "n_path_valid": self.n_valid,
            "connected_rate": ratio(self.n_connected, self.n_tasks),
            "mean_traversals_given_violation": ratio(self.traversals_in_violation, self.n_violation),
            "regret_summary": summary,
            "regret_quantiles_exact": exact,
        }
