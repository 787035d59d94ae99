"""The kernel stage of scoring: one :class:`~passage_jax.evaluate.score_batch.Batch` in,
its :class:`BatchScores` out. The records' routes go through the scoring kernel
(:func:`passage_jax.metrics.score_routes`, given by the caller), the tasks' stratifiers
(:data:`~passage_jax.evaluate.score_format.STRATIFIERS`) are measured on the host, and
each integer route's length in cells is taken."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from passage_jax.evaluate.score_batch import Batch
from passage_jax.evaluate.score_format import STRATIFIERS
from passage_jax.graph.routes import route_length_pixels
from passage_jax.protocol.records import ROUTE_FORMAT_CODE

__all__ = ["BatchScores", "score_batch", "task_strata", "scene_strata", "SceneStrata",
           "SCENE_STRATIFIERS"]

#: The stratifiers measured on a task's own grids and scene (the reference route gives the
#: other, ``reference_length_px``), in :func:`scene_strata`'s order.
SCENE_STRATIFIERS = ("obstacle_coverage", "start_goal_distance_px", "relief_m", "elevation_median_m",
                     "superellipse_exponent")


@dataclasses.dataclass(frozen=True)
class BatchScores:
    """What a batch scored to: per record (``records``) the kernel's numeric fields and
    the route length (-1 for anything but an integer route); per task (``tasks``) the
    stratifiers."""

    tasks: range
    records: np.ndarray
    fields: dict
    route_length: np.ndarray
    strata: dict


def score_batch(batch: Batch, kernel, *, sharding, measured: np.ndarray | None = None) -> BatchScores:
    """Score ``batch`` with ``kernel`` (the signature of
    :func:`passage_jax.metrics.score_routes`), spread over the devices of ``sharding``.
    ``measured``: the batch's tasks' :func:`scene_strata` rows when they were measured
    already (as the scenes were read: :class:`SceneStrata`); measured here otherwise."""
    strata = task_strata(batch.scenes, batch.scene_references, measured)
    res = kernel(batch.candidates, batch.record_scenes, batch.c_star, batch.request_ok,
                 references=batch.references, sharding=sharding)
    fields = {}
    for k, v in res.items():
        v = np.asarray(v)
        if v.dtype.kind == "O":
            continue  # why a candidate was malformed: in the run's records already
        fields[k] = v
    # only an exact integer route has a length in cells; a malformed route that still
    # has an (L, 2) shape (float coordinates) is -1 like any other malformed one
    is_int = batch.route_format == ROUTE_FORMAT_CODE["int"]
    lengths = np.where(is_int, [0 if c is None else len(c) for c in batch.candidates], -1)
    return BatchScores(tasks=batch.tasks, records=batch.records, fields=fields,
                       route_length=lengths, strata=strata)


def scene_strata(task) -> tuple:
    """The :data:`SCENE_STRATIFIERS` of one task, in that order."""
    obstacles = np.asarray(task.obstacles, bool)
    (r0, c0), (r1, c1) = task.scene.start, task.scene.goal
    elevation = np.asarray(task.elevation_m)
    return (np.count_nonzero(obstacles) / obstacles.size, math.hypot(r1 - r0, c1 - c0),
            float(np.ptp(elevation)), float(np.median(elevation)), _mean_exponent(task))


class SceneStrata:
    """The :func:`scene_strata` rows of a seed's tasks ``owned`` (a range), measured as the
    scenes are read (:meth:`measure` is an ``on_read`` hook of
    :func:`passage_jax.data.open_tasks`: it runs on the reading thread, each row written
    once, before the chunk holding it is handed on)."""

    def __init__(self, owned: range):
        self.owned = owned
        self.rows = np.full((len(owned), len(SCENE_STRATIFIERS)), np.nan)

    def measure(self, index: int, task) -> None:
        if index in self.owned:
            self.rows[index - self.owned.start] = scene_strata(task)

    def of(self, tasks: range) -> np.ndarray:
        """The rows of ``tasks`` (within ``owned``)."""
        return self.rows[tasks.start - self.owned.start:tasks.stop - self.owned.start]


def task_strata(scenes, ref_routes, measured: np.ndarray | None = None) -> dict:
    """The :data:`~passage_jax.evaluate.score_format.STRATIFIERS` of each task; the
    :data:`SCENE_STRATIFIERS` from ``measured`` (rows of :func:`scene_strata`) when given."""
    rows = np.array([scene_strata(t) for t in scenes], np.float64).reshape(len(scenes), -1) \
        if measured is None else measured
    out = {k: np.empty(len(scenes), np.float64) for k in STRATIFIERS}
    for j, k in enumerate(SCENE_STRATIFIERS):
        out[k][:] = rows[:, j]
    out["reference_length_px"][:] = [route_length_pixels(r) for r in ref_routes]
    return out


def _mean_exponent(task) -> float:
    """Mean super-ellipse exponent of the scene's obstacle shapes (``metadata.obstacles.
    superellipse_exponents``); NaN for the free variant, a scene without shapes, or one
    whose metadata does not record them."""
    if task.variant == "free":
        return math.nan
    exps = ((task.scene.metadata.get("obstacles") or {}).get("superellipse_exponents"))
    if not isinstance(exps, list) or not exps:
        return math.nan
    try:
        return float(np.mean(np.asarray(exps, np.float64)))
    except (TypeError, ValueError):
        return math.nan
