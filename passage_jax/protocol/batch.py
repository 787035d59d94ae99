"""The batch planner protocol (docs/protocol.md, "Batches"): a batch of requests of one
resolution as padded arrays (:class:`PlanBatch`), and a route per scene back
(:class:`BatchRoutes`).

A planner that declares ``plan_batch(batch) -> BatchRoutes`` may run under the batched
procedure (timing profile ``batched_v1``, docs/runner.md, "The batched procedure"): the
scenes in roster order, ``batch_size`` at a time, the last batch padded. A planner that
only has ``plan`` is refused there. Per scene, the request and the route are the batch-one
contract's (docs/protocol.md, "Route"): the ordinary input of the task (elevation in
metres, the task's obstacles, start, goal, cost model and weight, the pixel size), never
the references; a route is the ``(L, 2)`` cells from the start to the goal, checked and
recosted by the evaluator as a batch-one route is.

Both classes are JAX pytrees (their arrays are the leaves; ``pixel_size_m`` is static), so
a planner's ``plan_batch`` may be a jitted function of the batch, and a training loop may
call one inside its own compiled step (:func:`passage_jax.learned.evaluate_batch`).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from passage_jax.graph.costs import MODEL_INDEX

__all__ = ["BATCH_STATUSES", "BATCH_STATUS_CODE", "PlanBatch", "BatchRoutes", "plan_batch_of",
           "batch_of", "scene_routes", "BatchProtocolError", "batch_timing", "check_batch"]

#: The statuses a batch planner reports per scene (``BatchRoutes.status`` codes, in order).
BATCH_STATUSES = ("ok", "no_path", "budget_exhausted")
BATCH_STATUS_CODE = {s: i for i, s in enumerate(BATCH_STATUSES)}


class BatchProtocolError(ValueError):
    """What a batch planner returned does not follow :class:`BatchRoutes`."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PlanBatch:
    """A batch of ``B`` requests of one ``(H, W)`` resolution: ``elevation`` (B, H, W)
    float64 metres, ``obstacles`` (B, H, W) bool (the task's: none under the ``free``
    variant), ``start`` and ``goal`` (B, 2) int32 ``(row, col)``, ``cost_model`` (B,)
    int32 index into :data:`passage_jax.graph.costs.MODEL_NAMES`, ``cost_weight`` (B,)
    float64, ``live`` (B,) bool (False: a padding row, a copy of the batch's first scene,
    never scored) and the static ``pixel_size_m``."""

    elevation: object
    obstacles: object
    start: object
    goal: object
    cost_model: object
    cost_weight: object
    live: object
    pixel_size_m: float = dataclasses.field(default=30.0, metadata={"static": True})

    @property
    def size(self) -> int:
        return int(np.shape(self.live)[0])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BatchRoutes:
    """A route per scene of a batch: ``cells`` (B, L, 2) integer, scene ``b``'s route being
    ``cells[b, :length[b]]`` (what lies past it is ignored); ``length`` (B,) integer, 0 for
    no route; ``status`` (B,) integer code of :data:`BATCH_STATUSES`."""

    cells: object
    length: object
    status: object


def check_batch(batch: PlanBatch, float64: bool) -> None:
    """ValueError unless ``batch``'s arrays have the shapes and kinds of a PlanBatch (and,
    with ``float64``, a float64 elevation: a float32 one would change the edge costs)."""
    shape = np.shape(batch.elevation)
    if len(shape) != 3:
        raise ValueError(f"PlanBatch.elevation must have shape (B, H, W), got {shape}")
    b = shape[0]
    expected = {"obstacles": shape, "start": (b, 2), "goal": (b, 2), "cost_model": (b,),
                "cost_weight": (b,), "live": (b,)}
    for name, want in expected.items():
        got = np.shape(getattr(batch, name))
        if got != want:
            raise ValueError(f"PlanBatch.{name} must have shape {want} (elevation {shape}), got {got}")
    for name in ("start", "goal", "cost_model"):
        kind = _dtype(getattr(batch, name)).kind
        if kind not in "iu":
            raise ValueError(f"PlanBatch.{name} must be an integer array, got {kind!r} kind")
    dtype = _dtype(batch.elevation)
    if float64 and dtype != np.float64:
        raise ValueError(f"PlanBatch.elevation must be float64 metres, got {dtype} (an array put "
                         "on the device with x64 off loses float64: put it under "
                         "jax.enable_x64(True), or pass the NumPy arrays)")


def _dtype(x) -> np.dtype:
    """The dtype of an array (NumPy, JAX or traced) as given, not as x64 would cast it."""
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def plan_batch_of(planner):
    """The planner's ``plan_batch`` (a callable; that of the object a normalised
    :class:`~passage_jax.protocol.adapters.Planner` wraps), or None when it has none."""
    for obj in (planner, getattr(planner, "target", None)):
        fn = getattr(obj, "plan_batch", None)
        if callable(fn):
            return fn
    return None


def batch_of(tasks: list, batch_size: int, pixel_size_m: float = 30.0) -> PlanBatch:
    """The :class:`PlanBatch` (NumPy arrays) of ``tasks`` (1 to ``batch_size`` tasks of one
    resolution, :class:`passage_jax.data.Task`), padded to ``batch_size`` with copies of
    the first task (``live`` False)."""
    n = len(tasks)
    if not 1 <= n <= batch_size:
        raise ValueError(f"a batch holds 1 to {batch_size} tasks, got {n}")
    shape = tasks[0].elevation_m.shape
    for t in tasks:
        if t.elevation_m.shape != shape:
            raise ValueError(f"a batch holds scenes of one resolution: {t.id} is "
                             f"{t.elevation_m.shape}, {tasks[0].id} is {shape}")
    rows = list(tasks) + [tasks[0]] * (batch_size - n)
    elevation = np.empty((batch_size, *shape), np.float64)
    obstacles = np.empty((batch_size, *shape), bool)
    for b, t in enumerate(rows):
        elevation[b] = t.elevation_m
        obstacles[b] = t.obstacles
    return PlanBatch(
        elevation=elevation, obstacles=obstacles,
        start=np.asarray([t.scene.start for t in rows], np.int32).reshape(batch_size, 2),
        goal=np.asarray([t.scene.goal for t in rows], np.int32).reshape(batch_size, 2),
        cost_model=np.asarray([MODEL_INDEX[t.objective] for t in rows], np.int32),
        cost_weight=np.asarray([float(t.weight) for t in rows], np.float64),
        live=np.arange(batch_size) < n, pixel_size_m=float(pixel_size_m))


def _integer_array(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != ndim or a.dtype.kind not in "iu":
        raise BatchProtocolError(f"BatchRoutes.{name} must be a {ndim}-d integer array, got "
                                 f"{a.dtype} of shape {a.shape}")
    return a


def scene_routes(routes, n: int) -> list[tuple[str | None, np.ndarray | None, str | None]]:
    """Per scene ``b < n`` of a batch's host :class:`BatchRoutes`: ``(status, route,
    problem)``; ``route`` an ``(L, 2)`` int32 array or None, ``problem`` why scene ``b``'s
    entry does not follow the protocol (its status then None). A result that is not a
    :class:`BatchRoutes` of consistent shapes raises :class:`BatchProtocolError` (every
    scene of the batch fails with it)."""
    if not isinstance(routes, BatchRoutes):
        raise BatchProtocolError(f"plan_batch must return a BatchRoutes, got {type(routes).__name__}")
    cells = _integer_array(routes.cells, "cells", 3)
    length = _integer_array(routes.length, "length", 1)
    status = _integer_array(routes.status, "status", 1)
    size = cells.shape[0]
    if cells.shape[2:] != (2,) or length.shape != (size,) or status.shape != (size,) or size < n:
        raise BatchProtocolError(f"BatchRoutes shapes cells {cells.shape}, length {length.shape}, "
                                 f"status {status.shape} do not hold (B, L, 2), (B,), (B,) for the "
                                 f"batch's {n} scene(s)")
    out = []
    for b in range(n):
        code, k = int(status[b]), int(length[b])
        if not 0 <= code < len(BATCH_STATUSES):
            out.append((None, None, f"status code {code} is not one of 0..{len(BATCH_STATUSES) - 1} "
                                    f"({', '.join(BATCH_STATUSES)})"))
        elif not 0 <= k <= cells.shape[1]:
            out.append((None, None, f"route length {k} is outside 0..{cells.shape[1]}"))
        else:
            out.append((BATCH_STATUSES[code], cells[b, :k].astype(np.int32) if k else None, None))
    return out


def _summary(values: np.ndarray) -> dict:
    """p50, p95 (linear interpolation), mean, min and max of ``values`` (ms); nulls when
    there are none."""
    if len(values) == 0:
        return {"p50": None, "p95": None, "mean": None, "min": None, "max": None}
    p50, p95 = np.percentile(values, [50, 95])
    return {"p50": float(p50), "p95": float(p95), "mean": float(values.mean()),
            "min": float(values.min()), "max": float(values.max())}


def batch_timing(batches: dict, batch_size: int | None) -> dict:
    """The batched procedure's timing block of a seed (manifest and ``metrics.json``:
    ``batched``) from ``batches`` ({first record: (batch_ms, live scenes)}, one entry per
    timed batch): the declared ``batch_size``, the number of batches and of scenes, and
    the p50/p95/mean/min/max of ``batch_ms`` and of the amortised ``per_scene_ms``
    (each batch's ``batch_ms`` over its live scenes). Never a per-request latency."""
    order = sorted(batches)
    ms = np.asarray([float(batches[k][0]) for k in order], np.float64)
    live = np.asarray([int(batches[k][1]) for k in order], np.int64)
    per_scene = ms / np.maximum(live, 1)
    return {"batch_size": batch_size, "n_batches": len(order), "n_scenes": int(live.sum()),
            "batch_ms": _summary(ms), "per_scene_ms": _summary(per_scene),
            "scenes_per_s": None if not len(order) or ms.sum() <= 0 else float(live.sum() / ms.sum() * 1e3)}
