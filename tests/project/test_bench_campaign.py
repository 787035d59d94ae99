"""bench/campaign.py: the cohort builder's labels against an independent Dijkstra, distinct
scenes, the cache, and the growth fit / projection against hand computations."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse
import scipy.sparse.csgraph

from passage_jax.data.codec import decode_tensor
from passage_jax.data.scene import PASSAGE_CALIBRATION, ROUTE_COLUMNS, elevation_metres
from passage_jax.graph import MOVES, edge_cost_field_np

__all__: list[str] = []

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_campaign", REPO / "bench" / "campaign.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


campaign = _bench()


def _own_graph(field: np.ndarray):
    """Adjacency built here from the (8, H, W) edge-cost field: one edge per finite entry."""
    _, h, w = field.shape
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        for r in range(h):
            for c in range(w):
                if np.isfinite(field[k, r, c]):
                    assert 0 <= r + dr < h and 0 <= c + dc < w
                    rows.append(r * w + c)
                    cols.append((r + dr) * w + c + dc)
                    vals.append(field[k, r, c])
    return scipy.sparse.coo_matrix((vals, (rows, cols)), shape=(h * w, h * w)).tocsr()


def _recost(route: np.ndarray, field: np.ndarray) -> float:
    moves = {tuple(m): k for k, m in enumerate(MOVES.tolist())}
    total = 0.0
    for (r0, c0), (r1, c1) in zip(route[:-1].tolist(), route[1:].tolist(), strict=True):
        k = moves[(r1 - r0, c1 - c0)]  # KeyError: not an 8-neighbour step
        total += field[k, r0, c0]
    return total


@pytest.fixture(scope="module")
def tiny_cohort(tmp_path_factory):
    work = tmp_path_factory.mktemp("campaign")
    summary = campaign.build_cohort(work, 4, seed=3, resolution=32, workers=1, rows_per_shard=2,
                                    scenes_per_crop=2)
    return work, summary


def test_labels_are_optimal_and_scenes_distinct(tiny_cohort):
    _, summary = tiny_cohort
    assert not summary["reused"]
    folder = Path(summary["root"]) / "32x32" / "test"
    shards = sorted(folder.glob("*.parquet"))
    assert [p.name for p in shards] == ["part-00000.parquet", "part-00001.parquet"]
    table = [r for p in shards for r in pq.read_table(p).to_pylist()]
    assert len(table) == 4
    tensors = []
    weights = None
    for row in table:
        md = json.loads(row["metadata"])
        t = decode_tensor(row["tensor"], 32)
        tensors.append(t)
        z = elevation_metres(t[..., 0], PASSAGE_CALIBRATION)
        start = tuple(int(v) for v in np.argwhere(t[..., 1] == md["markers"]["start"])[0])
        goal = tuple(int(v) for v in np.argwhere(t[..., 1] == md["markers"]["goal"])[0])
        obst = t[..., 2] > 0.5
        assert obst.any() and not obst[start] and not obst[goal]
        weights = {obj: s["weight"] for obj, s in md["solvers"].items()}
        for (obj, var), col in ROUTE_COLUMNS.items():
            blocked = obst if var == "obstacles" else np.zeros_like(obst)
            field = edge_cost_field_np(z, blocked, obj, weights[obj], 30.0)
            dist = scipy.sparse.csgraph.dijkstra(_own_graph(field), indices=start[0] * 32 + start[1])
            best = dist[goal[0] * 32 + goal[1]]
            route = np.asarray(row[col], np.int64)
            assert tuple(route[0]) == start and tuple(route[-1]) == goal
            assert not blocked[route[:, 0], route[:, 1]].any()
            cost = _recost(route, field)
            np.testing.assert_allclose(cost, best, rtol=1e-9, err_msg=f"{row['id']} {col}")
            np.testing.assert_allclose(md["c_star"][f"{obj}/{var}"], best, rtol=1e-9)
    ids = [r["id"] for r in table]
    assert len(set(ids)) == 4
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(tensors[i], tensors[j])
    # scenes 0-1 share a crop (same elevation), scenes 1-2 do not
    assert np.array_equal(tensors[0][..., 0], tensors[1][..., 0])
    assert not np.array_equal(tensors[1][..., 0], tensors[2][..., 0])


def test_cohort_is_cached(tiny_cohort):
    work, summary = tiny_cohort
    again = campaign.build_cohort(work, 4, seed=3, resolution=32, workers=1, rows_per_shard=2,
                                  scenes_per_crop=2)
    assert again["reused"] and again["root"] == summary["root"]
    with pytest.raises(campaign.CohortError, match="holds another cohort"):
        campaign.build_cohort(work, 4, seed=3, resolution=32, workers=1, rows_per_shard=4,
                              scenes_per_crop=2)


def test_drop_edges_into_equals_fresh_obstacle_graph():
    rng = np.random.default_rng(0)
    z = rng.uniform(0, 50, (9, 9))
    obst = rng.uniform(size=(9, 9)) < 0.3
    free = edge_cost_field_np(z, np.zeros_like(obst), "energy", 1.0, 30.0)
    thinned = campaign.drop_edges_into(_own_graph(free), obst)
    fresh = _own_graph(edge_cost_field_np(z, obst, "energy", 1.0, 30.0))
    assert thinned.nnz == fresh.nnz
    assert (thinned != fresh).nnz == 0


def test_fit_line_by_hand():
    # y = 1, 2, 2 at N = 1, 2, 3: b = (2/3 + 1/3) / 2 = 0.5, a = 5/3 - 2 b = 2/3
    a, b = campaign.fit_line([1, 2, 3], [1, 2, 2])
    assert a == pytest.approx(2 / 3, rel=1e-12) and b == pytest.approx(0.5, rel=1e-12)
    assert campaign.fit_line([100, 300], [5, 9]) == pytest.approx((3.0, 0.02))
    assert campaign.fit_line([400], [2.0]) == pytest.approx((0.0, 0.005))


def test_projection_by_hand():
    lines = {"admission": (1, 0.001, 0.5, 1e-4), "run_exact": (3, 0.002, 1.0, 2e-4),
             "score_exact": (2, 0.0005, 0.3, 5e-5), "compare": (1, 1e-4, 0.2, 1e-5),
             "audit": (5, 0.003, 0.7, 1e-4)}
    rows = [{"n": n, "step": s, "seconds": ta + tb * n, "peak_gb": pa + pb * n}
            for s, (ta, tb, pa, pb) in lines.items() for n in (100, 400, 1600)]
    p = campaign.project(rows, n_target=40_000, seeds=3, limit_gb=24.0)
    # admission 1 + 40 = 41; run 41 + 3 * (83 - 41) = 167; score 3 * 22 = 66;
    # compare at 120,000 records 1 + 12 = 13; audit 5 + 120 = 125
    want = {"admission": 41.0, "run_exact": 167.0, "score_exact": 66.0, "compare": 13.0,
            "audit": 125.0}
    for step, s in want.items():
        assert p["seconds"][step] == pytest.approx(s, rel=1e-9), step
    # the exact-planner campaign: run (which admits once) + score + compare
    assert p["total_s"] == pytest.approx(167.0 + 66.0 + 13.0, rel=1e-9)
    # five request passes projected from two measured: request time x 2.5
    q = campaign.project(rows, n_target=40_000, seeds=3, pass_scale=2.5)
    assert q["seconds"]["run_exact"] == pytest.approx(41 + 3 * 2.5 * 42, rel=1e-9)
    assert q["seconds"]["score_exact"] == pytest.approx(3 * 2.5 * 22, rel=1e-9)
    assert q["seconds"]["compare"] == pytest.approx(13.0, rel=1e-9)
    # peaks: admission 4.5, run 9, score 2.3, compare 0.2 + 1.2 = 1.4, audit 4.7
    assert p["peak_gb"]["compare"] == pytest.approx(1.4, rel=1e-9)
    assert p["max_peak_gb"] == pytest.approx(9.0, rel=1e-9) and p["fits_limit"]
    assert not campaign.project(rows, limit_gb=8.0)["fits_limit"]


def test_projection_never_below_measurements():
    # a falling fit (timing noise) projects the largest measurement, not a negative time
    rows = [{"n": 50, "step": "score_exact", "seconds": 16.0, "peak_gb": 0.5},
            {"n": 200, "step": "score_exact", "seconds": 7.0, "peak_gb": 0.7}]
    p = campaign.project(rows, n_target=40_000, seeds=3)
    assert p["fits"]["score_exact"]["time"] == pytest.approx((19.0, -0.06))
    assert p["seconds"]["score_exact"] == pytest.approx(48.0)
    assert p["peak_gb"]["score_exact"] == pytest.approx(0.5 + 0.2 / 150 * 39_950)


# --------------------------------------------------------------------------- #
# Scale tests: windows of mirrored tilings (bench/resolutions.py at 2,048² and 4,096²)
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("shape, n, row0, col0", [
    ((5, 7), 4, 0, 0), ((5, 7), 16, 3, 11), ((5, 7), 23, 9, 13), ((3, 2), 20, 5, 1),
    ((1, 4), 9, 0, 6), ((6, 6), 6, 6, 6)])
def test_mirror_window_is_numpys_symmetric_padding(shape, n, row0, col0):
    z = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape) * 1.5 - 7.0
    # numpy's symmetric padding, wide enough to hold the window, cut at (row0, col0)
    padded = np.pad(z, ((0, row0 + n), (0, col0 + n)), mode="symmetric")
    want = padded[row0:row0 + n, col0:col0 + n]
    got = campaign.mirror_window(z, row0, col0, n)
    assert got.shape == (n, n) and got.flags.c_contiguous
    assert np.array_equal(got, want)
    # the plane repeats with periods 2H and 2W
    h, w = shape
    assert np.array_equal(campaign.mirror_window(z, row0 + 2 * h, col0 + 4 * w, n), want)


def test_mirror_window_refusals():
    with pytest.raises(campaign.CohortError, match="2-D"):
        campaign.mirror_window(np.zeros(4), 0, 0, 2)
    with pytest.raises(campaign.CohortError, match="row0, col0 >= 0"):
        campaign.mirror_window(np.zeros((3, 3)), -1, 0, 2)


def test_scale_test_rasters():
    # at most four mirrored copies across a crop; the largest raster when none qualifies
    assert sorted(campaign.scale_test_rasters(2048)) == ["anatolia", "gironde", "grand_canyon"]
    assert campaign.scale_test_rasters(4096) == ["gironde"]
    assert campaign.needs_mirror(2048) and campaign.needs_mirror(1143)
    assert not campaign.needs_mirror(1024)


@pytest.fixture(scope="module")
def scale_cohort(tmp_path_factory):
    """A 32x32 scale-test cohort cut from mirrored tilings of an 11x9 raster (the shipped
    aletsch raster's corner, with its provenance): the code path of 2,048² and 4,096²
    at a size a test can label."""
    real_z, real_info = campaign.load_raster("aletsch")
    small = np.ascontiguousarray(real_z[:11, :9])
    info = {**real_info, "shape": [11, 9]}
    mp = pytest.MonkeyPatch()
    mp.setattr(campaign, "load_raster", lambda key: (small, info))
    mp.setattr(campaign, "eligible_rasters", lambda n, rasters=None: ([], {}))
    mp.setattr(campaign, "scale_test_rasters", lambda n: ["aletsch"])
    try:
        work = tmp_path_factory.mktemp("scale")
        summary = campaign.build_cohort(work, 3, seed=5, resolution=32, workers=1, rows_per_shard=2,
                                        scenes_per_crop=2, mirror=True)
        refused = None
        try:
            campaign.build_cohort(work, 3, seed=5, resolution=32, workers=1, rows_per_shard=2,
                                  scenes_per_crop=2)
        except campaign.CohortError as e:
            refused = str(e)
    finally:
        mp.undo()
    return summary, small, info, refused


def test_scale_test_cohort_is_labelled_and_exact(scale_cohort):
    summary, small, info, refused = scale_cohort
    root = Path(summary["root"])
    assert root.name == "cohort-32-n3-s5-scale"
    assert summary["scale_test"]["tiling"] == "mirror"
    assert "not results" in summary["scale_test"]["note"]
    assert json.loads((root / "campaign_cohort.json").read_text())["scale_test"] == summary["scale_test"]
    # without mirror the same size is refused (no shipped raster is that large)
    assert refused is not None and "mirror=True" in refused
    shards = sorted((root / "32x32" / "test").glob("*.parquet"))
    rows = [r for p in shards for r in pq.read_table(p).to_pylist()]
    assert len(rows) == 3
    for row in rows:
        md = json.loads(row["metadata"])
        st = md["source"]["scale_test"]
        assert st["tiling"] == "mirror" and st["raster_shape"] == [11, 9]
        assert "scale test" in md["source"]["generator"] and "not results" in st["note"]
        # the crop is the mirrored window at metadata.crop's row0/col0, as a reader sees it
        t = decode_tensor(row["tensor"], 32)
        window = campaign.mirror_window(small, md["crop"]["row0"], md["crop"]["col0"], 32)
        want_e = ((window - PASSAGE_CALIBRATION["min"])
                  / (PASSAGE_CALIBRATION["max"] - PASSAGE_CALIBRATION["min"])).astype(np.float32)
        np.testing.assert_allclose(t[..., 0], want_e, rtol=0, atol=2e-7)
        assert 0 <= md["crop"]["row0"] < 22 and 0 <= md["crop"]["col0"] < 18
        # the labels are optimal on that terrain (an independent graph and Dijkstra)
        z = elevation_metres(t[..., 0], PASSAGE_CALIBRATION)
        start = tuple(int(v) for v in np.argwhere(t[..., 1] == md["markers"]["start"])[0])
        goal = tuple(int(v) for v in np.argwhere(t[..., 1] == md["markers"]["goal"])[0])
        obst = t[..., 2] > 0.5
        for (obj, var), col in ROUTE_COLUMNS.items():
            blocked = obst if var == "obstacles" else np.zeros_like(obst)
            field = edge_cost_field_np(z, blocked, obj, md["solvers"][obj]["weight"], 30.0)
            dist = scipy.sparse.csgraph.dijkstra(_own_graph(field), indices=start[0] * 32 + start[1])
            best = dist[goal[0] * 32 + goal[1]]
            np.testing.assert_allclose(_recost(np.asarray(row[col], np.int64), field), best, rtol=1e-9)
            np.testing.assert_allclose(md["c_star"][f"{obj}/{var}"], best, rtol=1e-9)
