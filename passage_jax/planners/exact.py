"""Exact baseline: float64 JAX value iteration per request (``passage_jax.reference``).

Solves the request's own graph from its ordinary input (elevation, obstacles,
endpoints, cost model and weight) and descends the cost-to-go field with the
fixed tie-break. Reports no search counters (value iteration has no
expansions), so it cannot run under a budget with work limits.

:meth:`ExactPlanner.plan_batch` is the same solver as a batch planner
(:mod:`passage_jax.protocol.batch`): value iteration and the descent of every scene of
a :class:`~passage_jax.protocol.batch.PlanBatch` in one jitted call of the reference
kernel (:func:`passage_jax.reference.vi_kernel.vi_kernel`), the quality ceiling of the
batched procedure. Per scene it returns the route and status :meth:`ExactPlanner.plan`
returns for that scene's request.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph.costs import MODEL_NAMES, edge_cost_field_np
from passage_jax.graph.moves import MOVES
from passage_jax.planners._common import check_kwargs
from passage_jax.precision import resolve_reference_precision
from passage_jax.protocol.batch import BATCH_STATUS_CODE, BatchRoutes, PlanBatch, check_batch
from passage_jax.protocol.contracts import PlanRequest, PlanResult
from passage_jax.reference.dfloat import DFloat, split_float64
from passage_jax.reference.vi import SolveOptions, solve_batch
from passage_jax.reference.vi_kernel import (
    STATUS_BUDGET,
    STATUS_NAMES,
    STATUS_OK,
    STATUS_UNREACHABLE,
    SceneInputs,
    SolverConfig,
    vi_kernel,
)

__all__ = ["ExactPlanner", "make_planner", "batch_routes", "batch_planner_fn"]

_KWARGS = ("max_sweeps", "check_every", "strategy")

#: The batch status code of each kernel status code (``STATUS_NAMES`` order): the
#: mapping :meth:`ExactPlanner.plan` applies to one request.
_BATCH_CODE = np.zeros(len(STATUS_NAMES), np.int32)
_BATCH_CODE[STATUS_OK] = BATCH_STATUS_CODE["ok"]
_BATCH_CODE[STATUS_UNREACHABLE] = BATCH_STATUS_CODE["no_path"]
_BATCH_CODE[STATUS_BUDGET] = BATCH_STATUS_CODE["budget_exhausted"]


class ExactPlanner:
    # defaults are the reference solver's (fast sweeping: the strategy measured best,
    # docs/reference.md)
    def __init__(self, max_sweeps: int = 4096, check_every: int = 2, strategy: str = "sweep"):
        self.max_sweeps = int(max_sweeps)
        self.check_every = int(check_every)
        self.strategy = strategy

    def plan(self, request: PlanRequest) -> PlanResult:
        res = solve_batch(
            request.elevation[None], request.obstacles[None], [request.start], [request.goal],
            [request.cost_model], [request.cost_weight], max_sweeps=self.max_sweeps,
            check_every=self.check_every, strategy=self.strategy, routes=True,
            pixel_size_m=request.graph.pixel_size_m)
        status = res.status[0]
        route = res.routes[0]
        peaks = {"sweeps": float(res.sweeps[0])}
        if status == "ok" and route is not None:
            return PlanResult(path=route, status="ok", precision="fp64", resource_peaks=peaks)
        if status == "unreachable":
            return PlanResult(path=None, status="no_path", precision="fp64", resource_peaks=peaks,
                              message="the goal cannot be reached from the start")
        return PlanResult(path=None, status="budget_exhausted", precision="fp64",
                          resource_peaks=peaks, message=f"value iteration: {status}")

    def plan_batch(self, batch: PlanBatch) -> BatchRoutes:
        """Routes of every scene of ``batch`` (:class:`~passage_jax.protocol.batch.PlanBatch`):
        value iteration and the descent of the whole batch in one jitted kernel call,
        with this planner's ``max_sweeps``, ``check_every`` and ``strategy`` in the
        arithmetic :meth:`plan` uses (float64; double-float pairs where float64 is
        missing, :func:`~passage_jax.precision.resolve_reference_precision`).

        Returns a :class:`~passage_jax.protocol.batch.BatchRoutes` of device arrays:
        ``cells`` (B, H*W, 2) int32 (a descent visits a cell at most once), ``length``
        (B,) int32 and ``status`` (B,) int32; per live scene the route and status
        :meth:`plan` returns for its request (``ok``; ``no_path`` when the goal cannot
        be reached; ``budget_exhausted`` when the sweeps ran out first), the same cells
        and tie-breaks. On CPU the scenes are solved one after another in the call (a
        padding row, ``live`` False, is skipped: its row holds no route); elsewhere in
        lock step, as :func:`~passage_jax.reference.solve_batch` chooses.

        The grids are taken as the protocol hands them over (tasks checked on reading);
        the shapes and, on the float64 path, the elevation's dtype are checked here
        (ValueError), since a float32 elevation (an array put on the device with x64
        off) would change the edge costs. On the double-float path (no float64) the edge
        costs are computed in float64 on the host from the elevation as the batch holds
        it: a batch put on the device with x64 off holds float32 metres, and its costs
        then differ from :meth:`plan`'s by that rounding."""
        return self._plan_batch(batch, "auto")

    def _plan_batch(self, batch: PlanBatch, chunk: int | str | None) -> BatchRoutes:
        """:meth:`plan_batch` with the kernel's ``chunk`` (``"auto"``: as
        :func:`~passage_jax.reference.solve_batch` picks it; None: lock step; k: k scenes
        at a time)."""
        precision = resolve_reference_precision("auto")
        opts = SolveOptions(max_sweeps=self.max_sweeps, check_every=self.check_every,
                            strategy=self.strategy, pixel_size_m=batch.pixel_size_m, routes=True,
                            chunk=chunk)
        config = opts.solver_config(precision)
        check_batch(batch, precision == "float64")
        with jax.enable_x64(precision == "float64"):
            if precision == "float64":
                scenes = SceneInputs(elevation_m=batch.elevation, obstacles=batch.obstacles,
                                     start=batch.start, goal=batch.goal,
                                     model_index=batch.cost_model, weight=batch.cost_weight)
            else:
                scenes = _pair_scenes(batch)
            return batch_routes(scenes, batch.live, config=config, chunk=opts.kernel_chunk())


@partial(jax.jit, static_argnames=("config", "chunk"))
def batch_routes(scenes: SceneInputs, live, *, config: SolverConfig,
                 chunk: int | None) -> BatchRoutes:
    """The :class:`~passage_jax.protocol.batch.BatchRoutes` of a batch of scenes (every
    field of ``scenes`` with a leading axis B; ``live`` (B,) bool): value iteration and
    the descent by :func:`~passage_jax.reference.vi_kernel.vi_kernel` (routes padded to
    H*W cells), the kernel's statuses as batch statuses. A route the descent could not
    finish (no cell of it reaches the goal, which a converged field never gives) is
    ``budget_exhausted``, as :meth:`ExactPlanner.plan` reports it. Pure and jitted
    (``config`` and ``chunk`` static); float64 needs x64."""
    out = vi_kernel(scenes, config, with_routes=True, chunk=chunk, live=live)
    status = jnp.asarray(_BATCH_CODE)[out.status]
    unfinished = (out.status == STATUS_OK) & (out.route_length <= 0)
    status = jnp.where(unfinished, BATCH_STATUS_CODE["budget_exhausted"], status)
    length = jnp.where(status == BATCH_STATUS_CODE["ok"], out.route_length, 0)
    return BatchRoutes(cells=out.route, length=length.astype(jnp.int32),
                       status=status.astype(jnp.int32))


def _pair_scenes(batch: PlanBatch) -> SceneInputs:
    """The double-float inputs of ``batch`` (host): each live scene's edge costs computed
    in float64 (``edge_cost_field_np``) and split into float32 pairs, as
    :meth:`ExactPlanner.plan` gets them on that path; a padding row gets +inf pairs
    (every move blocked)."""
    z = np.asarray(batch.elevation, np.float64)
    obstacles = np.asarray(batch.obstacles, bool)
    models = np.asarray(batch.cost_model)
    weights = np.asarray(batch.cost_weight, np.float64)
    live = np.asarray(batch.live, bool)
    n, h, w = z.shape
    hi = np.full((n, len(MOVES), h, w), np.inf, np.float32)
    lo = np.zeros((n, len(MOVES), h, w), np.float32)
    for i in np.flatnonzero(live).tolist():
        field = edge_cost_field_np(z[i], obstacles[i], MODEL_NAMES[int(models[i])],
                                   float(weights[i]), batch.pixel_size_m)
        pair = split_float64(field, where=f"batch row {i}: edge costs")
        hi[i], lo[i] = pair.hi, pair.lo
    return SceneInputs(elevation_m=None, obstacles=obstacles,
                       start=np.asarray(batch.start, np.int32), goal=np.asarray(batch.goal, np.int32),
                       model_index=None, weight=None, edge_costs=DFloat(hi, lo))


def make_planner(**inference_kwargs) -> ExactPlanner:
    check_kwargs("exact", inference_kwargs, _KWARGS)
    return ExactPlanner(**inference_kwargs)


def batch_planner_fn(**inference_kwargs):
    """``planner_fn(params, batch) -> BatchRoutes`` of the exact planner
    (:meth:`ExactPlanner.plan_batch`; ``params`` unused), for
    :func:`passage_jax.learned.evaluate_batch.evaluate_batch`: the quality ceiling of a
    cohort, jittable (inside an outer ``jax.jit`` too; float64 needs x64 on)."""
    planner = make_planner(**inference_kwargs)

    def planner_fn(params, batch):
        del params
        return planner.plan_batch(batch)

    return planner_fn
