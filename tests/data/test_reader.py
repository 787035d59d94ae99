"""Reader behaviour: order, prefix cap, batches, aliases, marker convention, task
variants and shards from a separate writer of docs/contract.md §1."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from fixtures_data import (
    diagonal_route,
    free_route,
    make_row,
    make_rows,
    mutated,
    write_dataset,
    write_foreign,
    write_rows,
)

from passage_jax.data import (
    PASSAGE_CALIBRATION,
    DataError,
    iter_scene_batches,
    load_scenes,
    load_tasks,
    scan_split,
)
from passage_jax.graph import OBJECTIVES

N = 8


def test_prefix_cap_is_deterministic_across_shards(tmp_path):
    # 7 rows in shards of 3: part-00000 (0,1,2), part-00001 (3,4,5), part-00002 (6)
    write_dataset(tmp_path, count=7, rows_per_shard=3)
    full = load_scenes(tmp_path, N, "test", n_samples=None)
    assert [s.id for s in full] == [f"{i:010d}" for i in range(7)]
    assert [(s.file.rsplit("/", 1)[-1], s.row) for s in full][2:5] == [
        ("part-00000.parquet", 2), ("part-00001.parquet", 0), ("part-00001.parquet", 1)]
    for cap in (0, 1, 3, 4, 7, 50):
        a = [s.id for s in load_scenes(tmp_path, N, "test", n_samples=cap, workers=3)]
        b = [s.id for s in load_scenes(tmp_path, N, "test", n_samples=cap, workers=0)]
        assert a == b == [s.id for s in full[:cap]]
    # the default cap is 1024
    assert len(load_scenes(tmp_path, N, "test")) == 7


def test_shards_read_in_sorted_name_order(tmp_path):
    # file names sort differently from creation order
    rows = make_rows(4)
    write_foreign(tmp_path, rows[2:], name="b.parquet", drop_markers_key=False)
    write_foreign(tmp_path, rows[:2], name="a.parquet", drop_markers_key=False)
    assert [s.id for s in load_scenes(tmp_path, N, "test")] == [r["id"] for r in rows]
    assert [s.id for s in load_scenes(tmp_path, N, "test", n_samples=3)] == [
        r["id"] for r in rows[:3]]


def test_batches_preserve_order(tmp_path):
    write_dataset(tmp_path, count=7, rows_per_shard=3)
    batches = list(iter_scene_batches(tmp_path, N, "test", n_samples=None, batch_size=3, workers=2))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert [s.id for b in batches for s in b] == [f"{i:010d}" for i in range(7)]
    with pytest.raises(DataError):
        next(iter_scene_batches(tmp_path, N, "test", batch_size=0))


@pytest.mark.parametrize("alias,folder", [("val", "validation"), ("calib", "calibration")])
def test_split_aliases(tmp_path, alias, folder):
    write_dataset(tmp_path, count=2, split=folder)
    a = load_scenes(tmp_path, N, alias)
    b = load_scenes(tmp_path, N, folder)
    assert [s.id for s in a] == [s.id for s in b] and a[0].split == folder


def test_unknown_split(tmp_path):
    write_dataset(tmp_path, count=1)
    with pytest.raises(DataError, match="unknown split"):
        load_scenes(tmp_path, N, "dev")


def test_metres_and_scene_fields(tmp_path):
    rows = make_rows(2)
    write_rows(tmp_path, rows)
    s = load_scenes(tmp_path, N, "test")[1]
    e = rows[1]["tensor"][..., 0]
    lo, hi = PASSAGE_CALIBRATION["min"], PASSAGE_CALIBRATION["max"]
    want = np.array([[lo + float(v) * (hi - lo) for v in row] for row in e.tolist()])
    assert s.elevation_m.dtype == np.float64
    np.testing.assert_allclose(s.elevation_m, want, rtol=1e-15, atol=1e-9)
    assert s.start == (1, 1) and s.goal == (N - 2, N - 2)
    assert s.obstacles.sum() == 2 and s.obstacles[1, N - 2] and s.obstacles[N - 2, 1]
    np.testing.assert_array_equal(s.input_tensor(), rows[1]["tensor"])


def test_flipped_marker_convention_is_detected(tmp_path):
    rows = make_rows(3, flipped=True, markers_key=False)
    write_rows(tmp_path, rows)
    scenes = load_scenes(tmp_path, N, "test")
    for s in scenes:
        # the -1 cell is the routes' first cell: it must be the start
        assert s.start == (1, 1) and s.goal == (N - 2, N - 2)
        assert s.metadata["markers"] == {"start": -1, "goal": 1}
        assert s.input_tensor()[1, 1, 1] == -1.0  # the stored convention is kept


def test_standard_marker_convention_is_detected_without_metadata(tmp_path):
    write_rows(tmp_path, make_rows(2, markers_key=False))
    for s in load_scenes(tmp_path, N, "test"):
        assert s.start == (1, 1) and s.metadata["markers"] == {"start": 1, "goal": -1}


def test_marker_convention_from_metadata_wins(tmp_path):
    # metadata says flipped, but the markers are stored in the standard way:
    # the routes then start at the "goal", which is an error naming the scene
    rows = make_rows(2, markers_key=True)
    rows[1]["metadata"]["markers"] = {"start": -1, "goal": 1}
    write_rows(tmp_path, rows)
    with pytest.raises(DataError, match=r"row 1 scene 0000000001: route path_astar_elevation_free:"
                                        r" route starts at \(1, 1\), not at the start \(6, 6\)"):
        load_scenes(tmp_path, N, "test")


def test_inconsistent_markers_are_an_error(tmp_path):
    rows = make_rows(2, markers_key=False)
    r = mutated(rows[1])
    # move both markers off the routes' endpoints
    r["tensor"][1, 1, 1] = 0.0
    r["tensor"][N - 2, N - 2, 1] = 0.0
    r["tensor"][2, 4, 1] = 1.0
    r["tensor"][4, 2, 1] = -1.0
    rows[1] = r
    write_rows(tmp_path, rows)
    with pytest.raises(DataError, match=r"row 1 scene 0000000001: marker convention.*neither"):
        load_scenes(tmp_path, N, "test")


def test_free_variant_clears_obstacles_and_uses_free_routes(tmp_path):
    write_dataset(tmp_path, count=2)
    free = load_tasks(tmp_path, N, "test", "energy", variant="free")
    obst = load_tasks(tmp_path, N, "test", "energy", variant="obstacles")
    for tf, to in zip(free, obst):
        assert not tf.obstacles.any() and to.obstacles.sum() == 2
        np.testing.assert_array_equal(tf.route, free_route(N))
        np.testing.assert_array_equal(to.route, diagonal_route(N))
        assert tf.scene.input_tensor("free")[..., 2].sum() == 0
        assert tf.weight == to.weight == 62.4
    with pytest.raises(DataError, match="unknown task variant"):
        load_tasks(tmp_path, N, "test", "energy", variant="none")
    with pytest.raises(DataError, match="unknown objective"):
        load_tasks(tmp_path, N, "test", "slope")


@pytest.mark.parametrize("route_type", [pa.int64(), pa.int32()])
def test_separate_writer_shards_are_accepted(tmp_path, route_type):
    rows = make_rows(5)
    write_foreign(tmp_path, rows, route_type=route_type, row_group_size=2)
    scenes = load_scenes(tmp_path, N, "test", n_samples=None)
    assert [s.id for s in scenes] == [r["id"] for r in rows]
    for s, r in zip(scenes, rows):
        assert "markers" in s.metadata  # detected (the foreign metadata had none)
        for obj in OBJECTIVES:
            np.testing.assert_array_equal(s.routes[(obj, "free")], r["routes"][(obj, "free")])
            assert s.routes[(obj, "free")].dtype == np.int32


def test_float_route_coordinates_are_refused(tmp_path):
    rows = make_rows(2)
    write_foreign(tmp_path, rows, route_type=pa.float64())
    with pytest.raises(DataError, match=r"row 0 scene 0000000000: route path_astar_elevation_free "
                                        r"is malformed: coordinates must be integers"):
        load_scenes(tmp_path, N, "test")


def test_scan_split_collects_every_failing_row(tmp_path):
    rows = make_rows(6)
    rows[1]["tensor"][2, 2, 0] = np.nan
    rows[4]["routes"][("energy", "obstacles")] = rows[4]["routes"][("energy", "obstacles")][:-1]
    rows[5]["id"] = rows[0]["id"]
    write_rows(tmp_path, rows, rows_per_shard=4)
    reps = scan_split(tmp_path, N, "test", workers=2)
    assert [r.valid for r in reps] == [False, False, True, True, False, False]
    assert "is not unique" in reps[0].error and "is not unique" in reps[5].error
    assert "non-finite" in reps[1].error and "scene 0000000001" in reps[1].error
    assert "path_astar_energy_obstacles" in reps[4].error and "scene 0000000004" in reps[4].error
    assert reps[2].info["obstacle_coverage"] == pytest.approx(2 / 64)
    assert reps[2].info["route_cells"]["energy/free"] == len(free_route(N))


def test_scenes_do_not_share_buffers(tmp_path):
    write_dataset(tmp_path, count=2)
    a, b = load_scenes(tmp_path, N, "test")
    a.elevation_norm[0, 0] = 0.99  # writable, independent copies
    assert b.elevation_norm[0, 0] != 0.99


def test_metadata_is_kept(tmp_path):
    rows = make_rows(1)
    write_rows(tmp_path, rows)
    s = load_scenes(tmp_path, N, "test")[0]
    want = json.loads(json.dumps(rows[0]["metadata"]))
    assert {k: s.metadata[k] for k in want} == want
    assert s.weight("slope_uphill") == 10.0


def test_bad_resolution_and_cap_arguments(tmp_path):
    write_dataset(tmp_path, count=1)
    for bad in (True, -1, 1.5):
        with pytest.raises(DataError, match="n_samples"):
            load_scenes(tmp_path, N, "test", n_samples=bad)
    with pytest.raises(DataError, match="resolution"):
        load_scenes(tmp_path, "8", "test")


def test_layout_errors_raise_at_the_call(tmp_path):
    from passage_jax.data import iter_scenes
    with pytest.raises(DataError, match="does not exist"):
        iter_scene_batches(tmp_path / "absent", N, "test")  # no next() needed
    write_dataset(tmp_path, count=1)
    with pytest.raises(DataError, match="validation does not exist"):
        iter_scenes(tmp_path, N, "validation")


def test_stopping_early_leaves_no_threads(tmp_path):
    import threading
    write_dataset(tmp_path, count=9, rows_per_shard=2)
    it = iter_scene_batches(tmp_path, N, "test", n_samples=None, batch_size=2, workers=3)
    assert [s.id for s in next(it)] == ["0000000000", "0000000001"]
    it.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("passage-decode")]


def test_one_marker_convention_per_split(tmp_path):
    rows = make_rows(4, markers_key=False)
    rows[2] = make_row(2, flipped=True, markers_key=False)
    write_rows(tmp_path, rows, rows_per_shard=2)
    with pytest.raises(DataError, match=r"part-00001.parquet row 0 scene 0000000002: marker "
                                        r"convention -1=start differs from \+1=start used by "
                                        r".*part-00000.parquet row 0 scene 0000000000"):
        load_scenes(tmp_path, N, "test")
    assert len(load_scenes(tmp_path, N, "test", n_samples=2)) == 2
    reps = scan_split(tmp_path, N, "test")
    assert [r.valid for r in reps] == [True, True, False, True]


def test_metadata_markers_forms(tmp_path):
    rows = make_rows(2)
    rows[0]["metadata"]["markers"] = {"start": 1.0, "goal": -1.0, "background": 0}
    rows[1]["metadata"]["markers"] = {"start": 1, "goal": 1}
    write_rows(tmp_path, rows)
    reps = scan_split(tmp_path, N, "test")
    assert reps[0].valid, reps[0].error
    assert not reps[1].valid and "metadata.markers must hold start and goal" in reps[1].error


# --------------------------------------------------------------------------- route columns from Arrow

def _python_cells(column) -> list:
    """The independent conversion: Python values per row, then an int64 array."""
    return [np.array(v, dtype=np.int64).reshape(-1, 2) for v in column.to_pylist()]


@pytest.mark.parametrize("int_type", [pa.int32(), pa.int64(), pa.int16()])
def test_route_cells_equal_python_values_on_a_sliced_batch(int_type):
    from passage_jax.data.reader import _route_cells
    rng = np.random.default_rng(3)
    routes = [rng.integers(0, 64, size=(int(n), 2)).tolist() for n in (5, 0, 1, 17, 3, 0, 9)]
    whole = pa.array(routes, type=pa.list_(pa.list_(int_type)))
    for column in (whole, whole.slice(2, 4), whole.slice(5)):
        got = _route_cells(column)
        want = _python_cells(column)
        assert len(got) == len(want) == len(column)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g.astype(np.int64), w)


@pytest.mark.parametrize("values, type_", [
    ([[[1, 2]], None], pa.list_(pa.list_(pa.int32()))),           # a null route
    ([[[1, 2], None]], pa.list_(pa.list_(pa.int32()))),           # a null cell
    ([[[1, None]]], pa.list_(pa.list_(pa.int32()))),              # a null coordinate
    ([[[1, 2, 3]]], pa.list_(pa.list_(pa.int32()))),              # three coordinates
    ([[[1]]], pa.list_(pa.list_(pa.int32()))),                    # one coordinate
    ([[[1.0, 2.0]]], pa.list_(pa.list_(pa.float64()))),           # not integers
    ([[1, 2]], pa.list_(pa.int32())),                             # flat
], ids=["null-route", "null-cell", "null-coordinate", "three", "one", "float", "flat"])
def test_route_cells_leave_anything_else_to_the_python_checks(values, type_):
    from passage_jax.data.reader import _route_cells
    assert _route_cells(pa.array(values, type=type_)) is None


def test_scenes_read_with_route_arrays_equal_scenes_read_with_python_values(tmp_path, monkeypatch):
    import passage_jax.data.reader as reader
    write_dataset(tmp_path, count=6)
    fast = load_scenes(tmp_path, N, "test", n_samples=None)
    monkeypatch.setattr(reader, "_route_cells", lambda column: None)
    slow = load_scenes(tmp_path, N, "test", n_samples=None)
    assert [s.id for s in fast] == [s.id for s in slow]
    for a, b in zip(fast, slow):
        assert a.routes.keys() == b.routes.keys()
        for k in a.routes:
            assert a.routes[k].dtype == b.routes[k].dtype == np.int32
            np.testing.assert_array_equal(a.routes[k], b.routes[k])
        np.testing.assert_array_equal(a.elevation_m, b.elevation_m)
        assert (a.start, a.goal, a.metadata) == (b.start, b.goal, b.metadata)


def test_scenes_at_are_the_streamed_scenes_and_only_they_are_decoded(monkeypatch):
    from passage_jax.data import reader, scenes_at, shipped_cohort_root

    root = shipped_cohort_root()
    every = load_scenes(root, 64, "test", n_samples=None, workers=0)
    decoded = []
    real = reader._validate_raw
    monkeypatch.setattr(reader, "_validate_raw",
                        lambda raw, *a, **k: decoded.append(raw.row) or real(raw, *a, **k))
    got = scenes_at(root, 64, "test", [7, 2, 7, 19])
    assert sorted(got) == [2, 7, 19] and len(decoded) == 3
    for i, s in got.items():
        e = every[i]
        assert (s.id, s.file, s.row, s.start, s.goal) == (e.id, e.file, e.row, e.start, e.goal)
        assert (s.elevation_m == e.elevation_m).all() and (s.obstacles == e.obstacles).all()
        assert s.routes.keys() == e.routes.keys()
    assert scenes_at(root, 64, "test", []) == {}
    n = len(every)
    with pytest.raises(DataError, match=rf"scene {n} asked for; the split holds {n} scenes"):
        scenes_at(root, 64, "test", [0, len(every)])
    with pytest.raises(DataError, match="within its first 3"):
        scenes_at(root, 64, "test", [3], n_samples=3)
