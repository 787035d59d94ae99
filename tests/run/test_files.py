"""Run-folder records: paths.npz round trip, atomic writes, refusal to overwrite."""
import os

import numpy as np
import pytest

from passage_jax.fileio import atomic_write_json, atomic_write_npz
from passage_jax.protocol.records import (
    ROUTE_FORMATS,
    PathsWriter,
    load_paths,
    pack_routes,
    route_of,
    snapshot_route,
    unpack_routes,
)
from passage_jax.run import holds_run


def test_snapshot_classifies_without_casting():
    code = {v: k for k, v in ROUTE_FORMATS.items()}
    f, r, raw, _ = snapshot_route([[0, 0], [1, 1]])
    assert f == code["int"] and r.dtype == np.int32 and raw is None
    f, r, raw, desc = snapshot_route(np.array([[0.0, 0.0], [1.0, 1.0]]))
    assert f == code["float"] and r is None and raw.tolist() == [0, 0, 1, 1] and desc == ("<f8", "2x2")
    f, r, raw, _ = snapshot_route(np.array([[0.5, 0.0], [1.0, 1.0]], np.float32))
    assert f == code["float"] and raw[0] == 0.5
    assert snapshot_route(None)[0] == code["none"]
    f, r, raw, _ = snapshot_route([0, 1, 2])
    assert f == code["shape"] and raw.tolist() == [0, 1, 2]
    f, r, raw, _ = snapshot_route(np.array([[0, 2 ** 40], [1, 1]], np.int64))
    assert f == code["int_range"] and raw[1] == 2 ** 40
    assert snapshot_route([[0, 0], [1]])[0] == code["object"]  # ragged
    assert snapshot_route(np.array([[True, False]]))[0] == code["float"]  # bool is not integer
    f, r, _, _ = snapshot_route([])
    assert f == code["int"] and r.shape == (0, 2)
    # the snapshot is a copy: later mutation by the planner does not leak in
    src = np.array([[0, 0], [1, 1]])
    _, r, _, _ = snapshot_route(src)
    src[0, 0] = 7
    assert r[0, 0] == 0


def test_paths_npz_round_trip(tmp_path):
    routes = [np.array([[0, 0], [1, 1], [2, 1]]), None, np.array([[0.0, 0.0], [1.0, 1.5]]),
              np.zeros((0, 2), np.int64), [[3, 4], [4, 5]], [1, 2, 3],
              np.array([[-5, 2 ** 33]], np.int64)]
    w = PathsWriter()
    for r in routes:
        w.add(*snapshot_route(r))
    w.write(tmp_path / "paths.npz")
    with np.load(tmp_path / "paths.npz", allow_pickle=False) as z:
        for k in z.files:
            assert z[k].dtype.kind != "O"
        assert z["coords"].dtype == np.int32 and z["coords"].shape[1] == 2
        assert z["offsets"].dtype == np.int64
    d = load_paths(tmp_path / "paths.npz")
    assert [ROUTE_FORMATS[int(c)] for c in d["route_format"]] == \
        ["int", "none", "float", "int", "int", "shape", "int_range"]
    np.testing.assert_array_equal(route_of(d, 0), routes[0])
    assert route_of(d, 1) is None
    fr = route_of(d, 2)
    assert fr.dtype == np.float64 and fr.shape == (2, 2) and fr[1, 1] == 1.5
    assert route_of(d, 3).shape == (0, 2)
    np.testing.assert_array_equal(route_of(d, 4), routes[4])
    assert route_of(d, 5).tolist() == [1, 2, 3]
    assert route_of(d, 6).tolist() == [[-5.0, float(2 ** 33)]]
    np.testing.assert_array_equal(d["record_index"], np.arange(len(routes)))


def test_pack_unpack():
    rs = [np.array([[0, 0], [1, 1]]), None, np.array([[2, 2]])]
    c, o = pack_routes(rs)
    assert o.tolist() == [0, 2, 2, 3]
    back = unpack_routes(c, o)
    assert back[1].shape == (0, 2) and back[2].tolist() == [[2, 2]]


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    p = tmp_path / "x.json"
    atomic_write_json(p, {"a": 1})
    with pytest.raises(TypeError):
        atomic_write_json(p, {"a": object()})
    assert p.read_text().strip().replace(" ", "").replace("\n", "") == '{"a":1}'
    assert sorted(os.listdir(tmp_path)) == ["x.json"]  # no temporary left behind
    with pytest.raises(TypeError, match="object dtype"):
        atomic_write_npz(tmp_path / "y.npz", {"a": np.array([None])})
    assert not (tmp_path / "y.npz").exists()


def test_holds_run(tmp_path):
    assert holds_run(tmp_path / "new") is None
    assert holds_run(tmp_path) is None  # empty folder is fine
    (tmp_path / "seed-1234").mkdir()
    assert "already holds a run" in holds_run(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    assert "is not empty" in holds_run(other)
