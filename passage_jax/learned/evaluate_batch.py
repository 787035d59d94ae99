"""A batch planner and the metric kernels in one compiled call: the primary metrics of a
validation cohort from inside a training loop (docs/metrics.md, "Inside a training loop").

:func:`evaluate_batch` takes a jittable batch planner ``planner_fn(params, batch) ->
BatchRoutes`` (the batch protocol of :mod:`passage_jax.protocol.batch`: a learned
planner's batched procedure, or :func:`passage_jax.planners.exact.batch_planner_fn`), its
``params`` and an :class:`EvalCohort` (the scenes as a :class:`~passage_jax.protocol.batch.PlanBatch`, their
references and c*), and returns the contract §4 aggregates
(:func:`~passage_jax.metrics.aggregate.primary_metrics_jax`) of the routes the planner
returned: the same per-task kernels :func:`~passage_jax.metrics.score_tasks` that
``score`` runs (validity, recosting on the full float grids, censoring, regret, geometry),
on the live, reference-qualified scenes. It is pure: ``jax.jit`` it, or call it inside a
jitted training step next to the loss.

What is kept static: each route is read up to ``max_route_len`` cells (default: the
batch's own route axis). A route longer than that cannot be scored here; such scenes are
counted in ``n_truncated`` and score as failures, so the figures equal ``score``'s when
``n_truncated`` is 0. The per-task scores run ``score_chunk`` scenes at a time
(``lax.map``), bounding the pairwise geometry's memory.

:func:`evaluation_cohort` builds an :class:`EvalCohort` on the host from dataset tasks
and their references (a run's ``references.npz`` arrays, or c* and routes of one's own).
"""
from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.metrics.aggregate import primary_metrics_jax
from passage_jax.metrics.kernels import score_task
from passage_jax.metrics.types import Route, TaskArrays
from passage_jax.protocol.batch import BATCH_STATUS_CODE, BatchRoutes, PlanBatch, batch_of

__all__ = ["EvalCohort", "evaluation_cohort", "evaluate_batch"]


@flax.struct.dataclass
class EvalCohort:
    """A validation cohort as arrays: ``batch`` (the scenes, a
    :class:`~passage_jax.protocol.batch.PlanBatch`; its padding rows ``live`` False),
    ``c_star`` (B,) float64 optimal costs, ``references`` the reference routes (a
    :class:`~passage_jax.metrics.types.Route` with a leading axis B) and ``qualified``
    (B,) bool, the scenes whose reference counts (a run's reference qualification)."""

    batch: PlanBatch
    c_star: jax.Array
    references: Route
    qualified: jax.Array


def evaluation_cohort(tasks: list, c_star, reference_routes: list, qualified=None, *,
                      batch_size: int | None = None, pixel_size_m: float = 30.0) -> EvalCohort:
    """The :class:`EvalCohort` of dataset ``tasks`` (:class:`passage_jax.data.Task`, one
    resolution) with their ``c_star`` and reference routes ((L, 2) arrays; a run's
    ``references.npz``: ``c_star``, the routes of ``route_coords``/``route_offsets``,
    ``qualified``), padded to ``batch_size`` scenes (default: as many as there are)."""
    n = len(tasks)
    size = n if batch_size is None else int(batch_size)
    c_star = np.asarray(c_star, np.float64).reshape(-1)
    if c_star.shape != (n,) or len(reference_routes) != n:
        raise ValueError(f"{n} tasks need {n} c* and {n} reference routes, got {c_star.shape[0]} "
                         f"and {len(reference_routes)}")
    qualified = np.ones(n, bool) if qualified is None else np.asarray(qualified, bool).reshape(-1)
    if qualified.shape != (n,):
        raise ValueError(f"qualified has {qualified.shape[0]} entries for {n} tasks")
    batch = batch_of(list(tasks), size, pixel_size_m)
    longest = max([len(r) for r in reference_routes] + [1])
    cells = np.zeros((size, longest, 2), np.int32)
    length = np.zeros(size, np.int32)
    for b, r in enumerate(reference_routes):
        r = np.asarray(r, np.int32).reshape(-1, 2)
        cells[b, :len(r)] = r
        length[b] = len(r)
    pad = size - n
    return EvalCohort(batch=batch, c_star=np.concatenate([c_star, np.ones(pad)]),
                      references=Route(cells, length),
                      qualified=np.concatenate([qualified, np.zeros(pad, bool)]))


def evaluate_batch(planner_fn, params, cohort: EvalCohort, *, max_route_len: int | None = None,
                   score_chunk: int = 8) -> dict:
    """The primary metrics (and companions) of ``planner_fn(params, cohort.batch)``'s
    routes on ``cohort``: :func:`~passage_jax.metrics.aggregate.primary_metrics_jax` over
    the live, qualified scenes, plus ``n_truncated`` (see the module text) and the
    per-scene ``status`` codes. Pure and jittable (``planner_fn``, ``max_route_len`` and
    ``score_chunk`` static under jit); floats in the elevation's dtype (float64 under
    x64, as ``score``'s)."""
    batch = cohort.batch
    routes = planner_fn(params, batch)
    if not isinstance(routes, BatchRoutes):
        raise TypeError(f"planner_fn must return a BatchRoutes, got {type(routes).__name__}")
    cells = jnp.asarray(routes.cells, jnp.int32)
    cap = cells.shape[1] if max_route_len is None else min(int(max_route_len), cells.shape[1])
    length = jnp.asarray(routes.length, jnp.int32)
    truncated = length > cap
    status = jnp.asarray(routes.status, jnp.int32)
    live = jnp.asarray(batch.live, bool)
    request_ok = (status == BATCH_STATUS_CODE["ok"]) & live & ~truncated
    dtype = jnp.asarray(batch.elevation).dtype
    tasks = TaskArrays(elevation=batch.elevation, obstacles=batch.obstacles, start=batch.start,
                       goal=batch.goal, cost_model=batch.cost_model,
                       weight=jnp.asarray(batch.cost_weight, dtype),
                       c_star=jnp.asarray(cohort.c_star, dtype))
    candidates = Route(cells[:, :cap], jnp.clip(length, 0, cap))

    def one(x):
        cand, ref, task, ok = x
        return score_task(cand, ref, task, request_ok=ok, pixel_size_m=batch.pixel_size_m)

    per_task = jax.lax.map(one, (candidates, cohort.references, tasks, request_ok),
                           batch_size=max(1, int(score_chunk)))
    counted = live & jnp.asarray(cohort.qualified, bool)
    out = primary_metrics_jax(per_task, counted)
    out["n_truncated"] = jnp.sum(truncated & counted, dtype=jnp.int32)
    out["status"] = status
    return out
