"""The batch planner protocol (passage_jax.protocol.batch): batch_of pads with copies of
the first task, scene_routes reads a BatchRoutes back per scene and names what does not
follow the protocol."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from passage_jax.graph import MODEL_INDEX
from passage_jax.protocol.batch import (
    BATCH_STATUS_CODE,
    BATCH_STATUSES,
    BatchProtocolError,
    BatchRoutes,
    PlanBatch,
    batch_of,
    plan_batch_of,
    scene_routes,
)


def _tasks(res: int, objective: str, variant: str, n: int) -> list:
    from passage_jax.data import load_tasks, shipped_cohort_root

    root = shipped_cohort_root()
    if not (root / f"{res}x{res}" / "test").is_dir():
        pytest.skip(f"no shipped {res}x{res} test split")
    return load_tasks(root, res, "test", objective, variant, n_samples=n)


@pytest.fixture(scope="module")
def mixed():
    """Three 64x64 tasks: energy with obstacles, slope_uphill free, elevation with obstacles."""
    return (_tasks(64, "energy", "obstacles", 1) + _tasks(64, "slope_uphill", "free", 2)[1:]
            + _tasks(64, "elevation", "obstacles", 3)[2:])


def test_batch_of_pads_with_copies_of_the_first_task(mixed):
    b = batch_of(mixed, 5, pixel_size_m=12.5)
    assert b.size == 5 and b.pixel_size_m == 12.5
    assert b.elevation.shape == b.obstacles.shape == (5, 64, 64)
    assert b.start.shape == b.goal.shape == (5, 2)
    assert b.cost_model.shape == b.cost_weight.shape == b.live.shape == (5,)
    assert (b.elevation.dtype, b.obstacles.dtype, b.start.dtype, b.goal.dtype,
            b.cost_model.dtype, b.cost_weight.dtype, b.live.dtype) == (
        np.float64, bool, np.int32, np.int32, np.int32, np.float64, bool)
    assert b.live.tolist() == [True, True, True, False, False]
    rows = list(mixed) + [mixed[0], mixed[0]]
    for i, t in enumerate(rows):
        assert np.array_equal(b.elevation[i], t.elevation_m)
        assert np.array_equal(b.obstacles[i], t.obstacles)
        assert tuple(b.start[i]) == tuple(t.scene.start)
        assert tuple(b.goal[i]) == tuple(t.scene.goal)
        assert b.cost_model[i] == MODEL_INDEX[t.objective]
        assert b.cost_weight[i] == t.weight
    assert b.cost_model[:3].tolist() == [MODEL_INDEX["energy"], MODEL_INDEX["slope_uphill"],
                                         MODEL_INDEX["elevation"]]
    # the free variant's obstacles are cleared; the scene's own are not
    assert not b.obstacles[1].any() and b.obstacles[0].any()
    # a full batch has no padding row
    assert batch_of(mixed, 3).live.tolist() == [True] * 3


def test_batch_of_refuses_bad_batches(mixed):
    with pytest.raises(ValueError, match="a batch holds 1 to 2 tasks, got 3"):
        batch_of(mixed, 2)
    with pytest.raises(ValueError, match="a batch holds 1 to 4 tasks, got 0"):
        batch_of([], 4)
    big = _tasks(128, "energy", "obstacles", 1)
    with pytest.raises(ValueError, match=r"one resolution: .* is \(128, 128\)"):
        batch_of(mixed[:1] + big, 2)


def test_batches_are_pytrees_with_a_static_pixel_size(mixed):
    b = batch_of(mixed, 4, pixel_size_m=10.0)
    leaves, tree = jax.tree_util.tree_flatten(b)
    assert len(leaves) == 7
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.pixel_size_m == 10.0
    # the pixel size is static: a jitted function sees it as a Python float
    seen = []

    @jax.jit
    def f(batch):
        seen.append(batch.pixel_size_m)
        return batch.start.sum()

    assert int(f(b)) == int(b.start.sum())
    assert seen == [10.0]
    r = BatchRoutes(cells=np.zeros((2, 3, 2), np.int32), length=np.zeros(2, np.int32),
                    status=np.zeros(2, np.int32))
    assert len(jax.tree_util.tree_leaves(r)) == 3


def _routes(cells, length, status):
    return BatchRoutes(cells=np.asarray(cells), length=np.asarray(length),
                       status=np.asarray(status))


CELLS = np.array([[[0, 0], [0, 1], [-1, -1], [-1, -1]],
                  [[5, 5], [-1, -1], [-1, -1], [-1, -1]],
                  [[1, 1], [2, 2], [3, 3], [3, 4]]], np.int64)


def test_scene_routes_reads_each_scene():
    out = scene_routes(_routes(CELLS, [2, 0, 4], [0, 1, 0]), 3)
    assert [o[0] for o in out] == ["ok", "no_path", "ok"]
    assert [o[2] for o in out] == [None, None, None]
    assert out[0][1].dtype == np.int32 and out[0][1].tolist() == [[0, 0], [0, 1]]
    assert out[1][1] is None  # length 0: no route, whatever the cells hold
    assert out[2][1].tolist() == [[1, 1], [2, 2], [3, 3], [3, 4]]
    # only the first n scenes are read (the rest are padding)
    assert len(scene_routes(_routes(CELLS, [2, 0, 99], [0, 1, 7]), 2)) == 2
    assert BATCH_STATUSES[BATCH_STATUS_CODE["budget_exhausted"]] == "budget_exhausted"
    assert scene_routes(_routes(CELLS, [0, 0, 0], [2, 2, 2]), 1)[0][:2] == ("budget_exhausted", None)


def test_scene_routes_names_bad_entries():
    out = scene_routes(_routes(CELLS, [2, 5, -1], [3, 0, 0]), 3)
    assert out[0] == (None, None, "status code 3 is not one of 0..2 (ok, no_path, budget_exhausted)")
    assert out[1] == (None, None, "route length 5 is outside 0..4")
    assert out[2] == (None, None, "route length -1 is outside 0..4")
    out = scene_routes(_routes(CELLS, [2, 0, 4], [-1, 1, 0]), 3)
    assert out[0][0] is None and "status code -1" in out[0][2]
    assert out[1][0] == "no_path" and out[2][0] == "ok"  # one bad scene leaves the others


@pytest.mark.parametrize("routes, match", [
    ((np.zeros((3, 4), np.int32), [1, 1, 1], [0, 0, 0]), "cells must be a 3-d integer array"),
    ((CELLS.astype(float), [1, 1, 1], [0, 0, 0]), "cells must be a 3-d integer array"),
    ((CELLS, [1.0, 1.0, 1.0], [0, 0, 0]), "length must be a 1-d integer array"),
    ((CELLS, [1, 1, 1], [[0, 0, 0]]), "status must be a 1-d integer array"),
    ((CELLS, [1, 1], [0, 0, 0]), "do not hold"),
    ((CELLS, [1, 1, 1], [0, 0, 0, 0]), "do not hold"),
    ((np.zeros((3, 4, 3), np.int32), [1, 1, 1], [0, 0, 0]), "do not hold"),
])
def test_scene_routes_refuses_wrong_shapes(routes, match):
    with pytest.raises(BatchProtocolError, match=match):
        scene_routes(_routes(*routes), 3)


def test_scene_routes_refuses_other_results():
    with pytest.raises(BatchProtocolError, match="must return a BatchRoutes, got tuple"):
        scene_routes((CELLS, [1, 1, 1], [0, 0, 0]), 3)
    # fewer rows than the batch's scenes
    with pytest.raises(BatchProtocolError, match="for the batch's 4 scene"):
        scene_routes(_routes(CELLS, [1, 1, 1], [0, 0, 0]), 4)


def test_plan_batch_of():
    from passage_jax.planners import BFSPlanner, ExactPlanner

    p = ExactPlanner()
    assert plan_batch_of(p) == p.plan_batch
    assert plan_batch_of(BFSPlanner()) is None

    class NotCallable:
        plan_batch = 3

    assert plan_batch_of(NotCallable()) is None


def test_plan_batch_type_is_a_frozen_dataclass(mixed):
    b = batch_of(mixed, 3)
    with pytest.raises(AttributeError):
        b.live = None  # type: ignore[misc]
    assert isinstance(b, PlanBatch)
