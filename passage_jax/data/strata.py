"""A task's scene descriptors, the stratifiers measured on its own grids and scene
(contract §7): obstacle coverage, start-goal distance, relief, median elevation and the
mean super-ellipse exponent of its obstacle shapes, in :data:`SCENE_STRATIFIERS`' order.

Admission measures them as it reads every task and the run keeps them in
``references.npz`` (``scene_strata``); scoring reads them from there (a run written
before this measured them as it re-read the scenes)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["SCENE_STRATIFIERS", "scene_strata", "strata_rows"]

#: The stratifiers measured on a task's own grids and scene (the reference route gives the
#: other, ``reference_length_px``), in :func:`scene_strata`'s order.
SCENE_STRATIFIERS = ("obstacle_coverage", "start_goal_distance_px", "relief_m", "elevation_median_m",
                     "superellipse_exponent")


def scene_strata(task) -> tuple:
    """The :data:`SCENE_STRATIFIERS` of one task, in that order."""
    obstacles = np.asarray(task.obstacles, bool)
    (r0, c0), (r1, c1) = task.scene.start, task.scene.goal
    elevation = np.asarray(task.elevation_m)
    return (np.count_nonzero(obstacles) / obstacles.size, math.hypot(r1 - r0, c1 - c0),
            float(np.ptp(elevation)), float(np.median(elevation)), _mean_exponent(task))


def strata_rows(tasks) -> np.ndarray:
    """(len(tasks), 5) float64: :func:`scene_strata` of each task."""
    return np.array([scene_strata(t) for t in tasks], np.float64).reshape(len(tasks),
                                                                         len(SCENE_STRATIFIERS))


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
