"""Training material: real-terrain crops with cohort-style obstacles and exact targets.

Crops are cut by the cohort maker's own scene routine
(:func:`passage_jax.data.cohort.make_scene`: a crop of a shipped raster, start and
goal at least ``ceil(N / 3)`` cells apart, superellipse obstacles up to
``coverage_max`` with start-goal connectivity), so obstacles look exactly like the
shipped cohort's. Targets are the exact float64 cost-to-go field to the task's goal
from :func:`passage_jax.reference.solve_batch` (value iteration), plus its optimal
cost and route for the held-out metrics.

Never test scenes: the random stream is ``numpy.random.default_rng([seed, N,
1000 + stream])`` (the cohort maker seeds with ``[seed, N, split number < 4]``), and
any crop whose window overlaps the window of a shipped test-split scene of the same
raster and size is drawn again, so no training crop shares a cell with a shipped
test scene at that resolution. ``TRAINING_RASTERS`` leaves one shipped raster
(``minnesota``) out, so its crops measure generalisation to unseen terrain.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.data.cohort import (
    DEFAULT_WEIGHTS,
    SHIPPED_SCENES,
    eligible_rasters,
    make_scene,
)
from passage_jax.data.scene import PASSAGE_CALIBRATION, elevation_metres
from passage_jax.data.terrain import RASTERS, load_raster
from passage_jax.graph import MODEL_INDEX, OBJECTIVES
from passage_jax.reference import solve_batch

__all__ = ["TRAINING_RASTERS", "HELD_OUT_RASTERS", "STREAM_OFFSET", "CLEAR_OF", "CropRule",
           "Material", "held_out_windows", "make_material"]

HELD_OUT_RASTERS = ("minnesota",)
TRAINING_RASTERS = tuple(k for k in RASTERS if k not in HELD_OUT_RASTERS)
#: Third entry of the training seed is ``STREAM_OFFSET + stream`` (disjoint from the cohort maker's).
STREAM_OFFSET = 1000
#: which shipped test windows material is drawn clear of (:func:`make_material`)
CLEAR_OF = ("own", "all")
_MAX_REDRAWS = 200


@dataclasses.dataclass(frozen=True)
class Material:
    """B same-size tasks: inputs, exact targets and what the metrics need.

    elevation (B, H, W) float64 metres, obstacles (B, H, W) bool, start/goal (B, 2)
    int32, model_index (B,) int32, weight (B,) float64, values (B, H, W) float64
    exact cost-to-go to the goal (+inf where unreachable or blocked), c_star (B,),
    routes (B, L, 2) int32 optimal routes padded with zeros and route_length (B,),
    sources: ``(raster, row0, col0)`` of each crop.
    """

    elevation: np.ndarray
    obstacles: np.ndarray
    start: np.ndarray
    goal: np.ndarray
    model_index: np.ndarray
    weight: np.ndarray
    values: np.ndarray
    c_star: np.ndarray
    routes: np.ndarray
    route_length: np.ndarray
    sources: tuple

    def __len__(self):
        return int(self.elevation.shape[0])


def held_out_windows(resolution: int,
                     every_resolution: bool = False) -> dict[str, list[tuple[int, int, int]]]:
    """(row0, col0, side) of the shipped test-split scenes at ``resolution`` — with
    ``every_resolution``, of the shipped test split at every resolution — per raster
    (empty when the shipped cohort has none)."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for res in sorted(SHIPPED_SCENES) if every_resolution else [resolution]:
        if res not in SHIPPED_SCENES:
            continue
        for s in load_scenes(shipped_cohort_root(), res, "test"):
            c = s.metadata["crop"]
            out.setdefault(s.metadata["source"]["raster"], []).append(
                (int(c["row0"]), int(c["col0"]), int(res)))
    return out


def _overlaps(origin, windows, n) -> bool:
    """Whether the n x n crop at ``origin`` shares a cell with one of ``windows``
    ((row0, col0, side) each)."""
    r, c = origin
    return any(r < r2 + m and r2 < r + n and c < c2 + m and c2 < c + n for r2, c2, m in windows)


@dataclasses.dataclass(frozen=True)
class CropRule:
    """How training crops are drawn: the objectives they cycle over, the rasters they
    are cut from, the obstacle coverage cap, and which shipped test windows they stay
    clear of (``"own"``: the test split at their own resolution, the 64² recipe;
    ``"all"``: every shipped resolution, for a network applied at other sizes than it
    trains on)."""

    objectives: tuple = ("elevation",)
    rasters: tuple = TRAINING_RASTERS
    coverage_max: float = 0.3
    clear_of: str = "own"

    def check(self, resolution: int) -> list:
        """The rasters of this rule that can serve ``resolution`` crops (errors name the field)."""
        if self.clear_of not in CLEAR_OF:
            raise ValueError(f"clear_of must be one of {list(CLEAR_OF)}, got {self.clear_of!r}")
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            raise ValueError(f"objectives {list(self.objectives)} must be a non-empty subset of "
                             f"{OBJECTIVES}")
        keys, _ = eligible_rasters(resolution, self.rasters)
        if not keys:
            raise ValueError(f"no raster of {list(self.rasters)} can serve "
                             f"{resolution}x{resolution} crops")
        return keys


def make_material(n_tasks: int, resolution: int, *, seed: int, stream: int = 0,
                  rule: CropRule = CropRule(),
                  progress: Callable[[int, int], None] | None = None) -> Material:
    """``n_tasks`` training tasks of ``resolution`` cells (see the module docstring).

    ``stream`` separates sets drawn with one seed (0: training, 1: held-out
    evaluation); ``rule`` (:class:`CropRule`) says which objectives, rasters, obstacle
    coverage and test windows; ``progress(done, total)`` is called after each crop."""
    if int(n_tasks) != n_tasks or n_tasks < 1:
        raise ValueError(f"n_tasks must be a positive integer, got {n_tasks!r}")
    keys = rule.check(resolution)
    rng = np.random.default_rng([int(seed), int(resolution), STREAM_OFFSET + int(stream)])
    order = [keys[j] for j in rng.permutation(len(keys))]
    loaded = {k: load_raster(k) for k in keys}
    excluded = held_out_windows(resolution, every_resolution=rule.clear_of == "all")
    crops = []
    for i in range(int(n_tasks)):
        key = order[i % len(order)]
        crops.append(_draw_crop(rng, key, loaded[key], excluded.get(key, ()), resolution,
                                dict(index=i, seed=int(seed), coverage_max=rule.coverage_max)))
        if progress:
            progress(i + 1, int(n_tasks))
    objectives = [rule.objectives[i % len(rule.objectives)] for i in range(int(n_tasks))]
    return _with_targets(crops, objectives)


def _draw_crop(rng, key, raster, excluded, resolution, scene_args):
    """One crop of ``key`` clear of the ``excluded`` windows, redrawn until it is:
    (elevation m, obstacles, start, goal, (raster, row0, col0))."""
    for _ in range(_MAX_REDRAWS):
        row = make_scene(rng, key, *raster, resolution, "train",
                         min_sep=math.ceil(resolution / 3), **scene_args)
        crop = row["metadata"]["crop"]
        origin = (crop["row0"], crop["col0"])
        if not _overlaps(origin, excluded, resolution):
            break
    else:
        raise ValueError(f"{key}: no {resolution}x{resolution} crop clear of the test split(s) "
                         f"after {_MAX_REDRAWS} draws")
    t = row["tensor"]
    return (elevation_metres(t[..., 0], PASSAGE_CALIBRATION), t[..., 2] > 0.5,
            np.argwhere(t[..., 1] > 0.5)[0], np.argwhere(t[..., 1] < -0.5)[0],
            (key, int(origin[0]), int(origin[1])))


def _with_targets(crops, objectives) -> Material:
    """The :class:`Material` of ``crops`` with their exact cost-to-go targets."""
    z, ob, st, gl, src = zip(*crops)
    z = np.stack(z).astype(np.float64)
    ob = np.stack(ob)
    st = np.array(st, np.int32)
    gl = np.array(gl, np.int32)
    w = np.array([DEFAULT_WEIGHTS[o] for o in objectives], np.float64)
    res = solve_batch(z, ob, st, gl, list(objectives), w, routes=True)
    if any(s != "ok" for s in res.status):
        raise ValueError(f"exact targets failed: {sorted(set(res.status))}")
    L = max(len(r) for r in res.routes)
    routes = np.zeros((len(objectives), L, 2), np.int32)
    for i, r in enumerate(res.routes):
        routes[i, :len(r)] = r
    return Material(elevation=z, obstacles=ob, start=st, goal=gl,
                    model_index=np.array([MODEL_INDEX[o] for o in objectives], np.int32), weight=w,
                    values=np.asarray(res.values, np.float64), c_star=np.asarray(res.c_star),
                    routes=routes, route_length=np.array([len(r) for r in res.routes], np.int32),
                    sources=tuple(src))
