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

__all__ = ["TRAINING_RASTERS", "HELD_OUT_RASTERS", "STREAM_OFFSET", "CLEAR_OF", "Material",
           "held_out_windows", "make_material"]

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


def make_material(n_tasks: int, resolution: int, *, seed: int, stream: int = 0,
                  objectives=("elevation",), rasters=TRAINING_RASTERS, coverage_max: float = 0.3,
                  clear_of: str = "own",
                  progress: Callable[[int, int], None] | None = None) -> Material:
    """``n_tasks`` training tasks of ``resolution`` cells (see the module docstring).

    ``stream`` separates sets drawn with one seed (0: training, 1: held-out
    evaluation); ``objectives`` cycle over the tasks; every crop is drawn clear of the
    shipped test split at its own resolution (``clear_of="own"``, the 64² recipe) or at
    every shipped resolution (``"all"``: material for a network applied at other sizes
    than it trains on); ``progress(done, total)`` is called after each crop."""
    if clear_of not in CLEAR_OF:
        raise ValueError(f"clear_of must be one of {list(CLEAR_OF)}, got {clear_of!r}")
    if int(n_tasks) != n_tasks or n_tasks < 1:
        raise ValueError(f"n_tasks must be a positive integer, got {n_tasks!r}")
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad or not objectives:
        raise ValueError(f"objectives {list(objectives)} must be a non-empty subset of {OBJECTIVES}")
    keys, _ = eligible_rasters(resolution, rasters)
    if not keys:
        raise ValueError(f"no raster of {list(rasters)} can serve {resolution}x{resolution} crops")
    rng = np.random.default_rng([int(seed), int(resolution), STREAM_OFFSET + int(stream)])
    order = [keys[j] for j in rng.permutation(len(keys))]
    loaded = {k: load_raster(k) for k in keys}
    excluded = held_out_windows(resolution, every_resolution=clear_of == "all")
    min_sep = math.ceil(resolution / 3)
    z, ob, st, gl, obj, src = [], [], [], [], [], []
    for i in range(int(n_tasks)):
        key = order[i % len(order)]
        for _ in range(_MAX_REDRAWS):
            row = make_scene(rng, key, *loaded[key], resolution, "train", index=i, seed=int(seed),
                             coverage_max=coverage_max, min_sep=min_sep)
            crop = row["metadata"]["crop"]
            origin = (crop["row0"], crop["col0"])
            if not _overlaps(origin, excluded.get(key, ()), resolution):
                break
        else:
            raise ValueError(f"{key}: no {resolution}x{resolution} crop clear of the test split(s) "
                             f"after {_MAX_REDRAWS} draws")
        t = row["tensor"]
        z.append(elevation_metres(t[..., 0], PASSAGE_CALIBRATION))
        ob.append(t[..., 2] > 0.5)
        st.append(np.argwhere(t[..., 1] > 0.5)[0])
        gl.append(np.argwhere(t[..., 1] < -0.5)[0])
        obj.append(objectives[i % len(objectives)])
        src.append((key, int(origin[0]), int(origin[1])))
        if progress:
            progress(i + 1, int(n_tasks))
    z = np.stack(z).astype(np.float64)
    ob = np.stack(ob)
    st = np.array(st, np.int32)
    gl = np.array(gl, np.int32)
    w = np.array([DEFAULT_WEIGHTS[o] for o in obj], np.float64)
    res = solve_batch(z, ob, st, gl, list(obj), w, routes=True)
    if any(s != "ok" for s in res.status):
        raise ValueError(f"exact targets failed: {sorted(set(res.status))}")
    L = max(len(r) for r in res.routes)
    routes = np.zeros((len(obj), L, 2), np.int32)
    for i, r in enumerate(res.routes):
        routes[i, :len(r)] = r
    return Material(elevation=z, obstacles=ob, start=st, goal=gl,
                    model_index=np.array([MODEL_INDEX[o] for o in obj], np.int32), weight=w,
                    values=np.asarray(res.values, np.float64), c_star=np.asarray(res.c_star),
                    routes=routes, route_length=np.array([len(r) for r in res.routes], np.int32),
                    sources=tuple(src))
