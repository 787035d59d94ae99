"""In-memory scene and task types (contract §1)."""
from __future__ import annotations

import dataclasses

import numpy as np

from passage_jax.contract import OBJECTIVE_COLUMN, OBJECTIVES, VARIANTS
from passage_jax.fileio import planner_input_sha256

__all__ = [
    "SPLITS", "SPLIT_ALIASES", "PASSAGE_CALIBRATION", "DEFAULT_MARKERS", "ROUTE_COLUMNS",
    "canonical_split", "route_column", "elevation_metres", "elevation_bounds", "keep_elevation_bounds",
    "normalise_elevation", "Scene", "Task",
    "task_input_hash",
]

SPLITS = ("train", "validation", "calibration", "test")
SPLIT_ALIASES = {"val": "validation", "calib": "calibration"}
#: PASSAGE's global calibration in metres.
PASSAGE_CALIBRATION = {"min": -430.0, "max": 8767.0}
#: Marker signs of the standard convention (+1 start, -1 goal).
DEFAULT_MARKERS = {"start": 1, "goal": -1}


def canonical_split(split: str) -> str:
    """``val`` -> ``validation``, ``calib`` -> ``calibration``; ValueError if unknown."""
    s = SPLIT_ALIASES.get(split, split)
    if s not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {list(SPLITS)} (aliases {SPLIT_ALIASES})")
    return s


def route_column(objective: str, variant: str) -> str:
    """Column name of a released route, e.g. ``path_astar_slope_obstacles``."""
    if objective not in OBJECTIVE_COLUMN:
        raise ValueError(f"unknown objective {objective!r}; known: {list(OBJECTIVES)}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown task variant {variant!r}; known: {list(VARIANTS)}")
    return f"path_astar_{OBJECTIVE_COLUMN[objective]}_{variant}"


ROUTE_COLUMNS = {(o, v): route_column(o, v) for o in OBJECTIVES for v in VARIANTS}


def elevation_metres(e: np.ndarray, calibration: dict) -> np.ndarray:
    """z = cal_min + e * (cal_max - cal_min), in float64 from the float32 ``e``."""
    lo = np.float64(calibration["min"])
    hi = np.float64(calibration["max"])
    return lo + np.asarray(e, np.float32).astype(np.float64) * (hi - lo)


def elevation_bounds(e_min, e_max, calibration: dict) -> tuple[float, float]:
    """(min, max) of :func:`elevation_metres` of a plane whose least and greatest values
    are ``e_min`` and ``e_max``, bit for bit what ``z.min()`` and ``z.max()`` of the plane
    in metres give: each cell is ``lo + e * (hi - lo)`` with both operations correctly
    rounded, so monotone in ``e`` (increasing or decreasing with the sign of
    ``hi - lo``), and the extremes of z are those of the two end values."""
    lo = np.float64(calibration["min"])
    d = np.float64(calibration["max"]) - lo
    a = lo + np.float64(np.float32(e_min)) * d
    b = lo + np.float64(np.float32(e_max)) * d
    return float(np.minimum(a, b)), float(np.maximum(a, b))


def keep_elevation_bounds(scene, e_min, e_max) -> None:
    """Keep on ``scene`` the (min, max) of its ``elevation_m`` (:func:`elevation_bounds` of
    its plane's extremes, which the reader's range check took), tied to that very grid."""
    scene._elevation_bounds = (scene.elevation_m,
                               *elevation_bounds(e_min, e_max, scene.metadata["calibration"]))


def normalise_elevation(z: np.ndarray, calibration: dict) -> np.ndarray:
    """Inverse of :func:`elevation_metres`, rounded to float32."""
    lo = np.float64(calibration["min"])
    hi = np.float64(calibration["max"])
    return ((np.asarray(z, np.float64) - lo) / (hi - lo)).astype(np.float32)


@dataclasses.dataclass
class Scene:
    """One validated released scene (a shard row)."""

    id: str
    resolution: int
    split: str
    elevation_norm: np.ndarray  # (N, N) float32, ch0
    elevation_m: np.ndarray  # (N, N) float64 metres
    obstacles: np.ndarray  # (N, N) bool, as stored (ch2)
    start: tuple[int, int]
    goal: tuple[int, int]
    routes: dict  # (objective, variant) -> (L, 2) int32 released route
    metadata: dict
    file: str = ""
    row: int = -1

    @property
    def where(self) -> str:
        """'file row R scene ID' for error messages."""
        return f"{self.file} row {self.row} scene {self.id}"

    def kept_elevation_bounds(self, z) -> tuple[float, float] | None:
        """The (min, max) kept for the grid ``z`` (:func:`keep_elevation_bounds`), or None:
        none kept, or kept for another grid (``elevation_m`` replaced since)."""
        kept = getattr(self, "_elevation_bounds", None)
        return (kept[1], kept[2]) if kept is not None and kept[0] is z else None

    def weight(self, objective: str) -> float:
        return float(self.metadata["solvers"][objective]["weight"])

    def task(self, objective: str, variant: str = "obstacles") -> Task:
        if variant not in VARIANTS:
            raise ValueError(f"unknown task variant {variant!r}; known: {list(VARIANTS)}")
        obst = self.obstacles if variant == "obstacles" else np.zeros_like(self.obstacles)
        return Task(scene=self, objective=objective, variant=variant, obstacles=obst,
                    route=self.routes.get((objective, variant)), weight=self.weight(objective))

    def input_tensor(self, variant: str = "obstacles") -> np.ndarray:
        """The normalised (N, N, 3) float32 input (a new array): the elevation plane, the
        markers (the start's and the goal's sign, 0 elsewhere) and the obstacles (1.0;
        cleared for ``free``)."""
        e = np.asarray(self.elevation_norm, np.float32)
        out = np.empty(e.shape + (3,), np.float32)
        out[..., 0] = e
        out[..., 1] = 0.0
        sgn = self.metadata.get("markers", DEFAULT_MARKERS)
        out[(*self.start, 1)] = sgn["start"]
        out[(*self.goal, 1)] = sgn["goal"]
        out[..., 2] = self.obstacles if variant == "obstacles" else False
        return out

    @property
    def blocks(self) -> dict:
        """Main-tile and tile list from ``metadata.tile`` (None when absent)."""
        return self.metadata.get("tile")


@dataclasses.dataclass
class Task:
    """A scene under one objective and task variant."""

    scene: Scene
    objective: str
    variant: str
    obstacles: np.ndarray  # bool (N, N), cleared for `free`
    route: np.ndarray | None  # released route (L, 2) int32; None when the routes were not read
    weight: float
    #: the input tensor kept for it (a read-only view of a run's kept grids,
    #: :mod:`passage_jax.data.grid_store`); None: built from the scene for each request
    input_tensor: np.ndarray | None = None

    @property
    def id(self) -> str:
        return self.scene.id

    @property
    def elevation_m(self) -> np.ndarray:
        return self.scene.elevation_m

    @property
    def input_sha256(self) -> str:
        """:func:`task_input_hash`: computed once, then kept on the task."""
        return task_input_hash(self)


def task_input_hash(task) -> str:
    """Identity of what a planner sees of a task: the sha256 of its elevation (metres,
    float64), obstacles (bool), start and goal (int64), i.e.
    :func:`~passage_jax.fileio.planner_input_sha256`, the identity
    ``passage_jax.protocol.records.input_hash`` records.

    Computed once per task object and kept on it: the stream's re-read check and every
    later caller (the score's check of the run's hashes) get the kept value. It is
    computed again when one of the four inputs is replaced by another object (the kept
    value is tied to the objects it was computed from); the grids of a task are never
    changed in place.
    """
    el, ob, start, goal = task.elevation_m, task.obstacles, task.scene.start, task.scene.goal
    kept = getattr(task, "_input_sha256", None)
    if kept is not None and kept[0] is el and kept[1] is ob and kept[2] is start and kept[3] is goal:
        return kept[4]
    digest = planner_input_sha256(el, ob, start, goal)
    try:
        task._input_sha256 = (el, ob, start, goal, digest)
    except AttributeError:  # a task-like object that takes no new attributes
        pass
    return digest
