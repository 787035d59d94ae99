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

__all__ = ["BatchScores", "score_batch", "task_strata"]


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


def score_batch(batch: Batch, kernel, *, sharding) -> BatchScores:
    """Score ``batch`` with ``kernel`` (the signature of
    :func:`passage_jax.metrics.score_routes`), spread over the devices of ``sharding``."""
    strata = task_strata(batch.scenes, batch.scene_references)
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


def task_strata(scenes, ref_routes) -> dict:
    """The :data:`~passage_jax.evaluate.score_format.STRATIFIERS` of each task."""
    out = {k: np.empty(len(scenes), np.float64) for k in STRATIFIERS}
    for i, t in enumerate(scenes):
        out["obstacle_coverage"][i] = float(np.mean(np.asarray(t.obstacles, bool)))
        (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
        out["start_goal_distance_px"][i] = math.hypot(r1 - r0, c1 - c0)
        out["reference_length_px"][i] = route_length_pixels(ref_routes[i])
        out["relief_m"][i] = float(np.ptp(t.elevation_m))
        out["elevation_median_m"][i] = float(np.median(t.elevation_m))
        out["superellipse_exponent"][i] = _mean_exponent(t)
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
