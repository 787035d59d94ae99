"""Cohort maker and the shipped cohort: determinism, exact labels against an
independent solver, obstacles and markers, tiles and crops against the rasters."""
from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from passage_jax.data.codec import decode_tensor
from passage_jax.data.cohort import (
    SHIPPED_ROOT,
    SHIPPED_SCENES,
    SHIPPED_SEED,
    SHIPPED_SPLITS,
    CohortError,
    eligible_rasters,
    make_cohort,
    solve_label,
)
from passage_jax.data.terrain import RASTERS, load_raster

SQRT2 = math.sqrt(2.0)
PIX = 30.0
COLUMN = {"elevation": "elevation", "slope_uphill": "slope", "energy": "energy"}
WEIGHTS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}
LABELS = [(o, v) for o in ("elevation", "slope_uphill", "energy") for v in ("free", "obstacles")]


# --------------------------------------------------------------------------- #
# An independent exact solver: docs/contract.md §2 formulas written out, heap Dijkstra.
# --------------------------------------------------------------------------- #

def step(model, d, zu, zv, w, rng_):
    dz = zv - zu
    if model == "elevation":
        return d + (w * abs(dz) / rng_ if rng_ > 0 else 0.0)
    if model == "energy":
        return d + (w * max(dz, 0.0) / rng_ if rng_ > 0 else 0.0)
    if model == "slope_uphill":
        g = max(dz / d, 0.0)
        return d * (1.0 + w * g * g)
    raise AssertionError(model)


def _move_costs(z, model, w):
    """[k][r][c]: cost of the move k out of (r, c), ignoring legality (NumPy, own formulas)."""
    h, wd = z.shape
    rng_ = float(z.max() - z.min())
    zp = np.pad(z, 1, constant_values=np.nan)
    out = []
    for dr, dc in ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)):
        d = PIX * (SQRT2 if dr and dc else 1.0)
        zv = zp[1 + dr:1 + dr + h, 1 + dc:1 + dc + wd]
        dz = zv - z
        if model == "elevation":
            c = d + (w * np.abs(dz) / rng_ if rng_ > 0 else 0.0 * dz)
        elif model == "energy":
            c = d + (w * np.maximum(dz, 0.0) / rng_ if rng_ > 0 else 0.0 * dz)
        else:
            g = np.maximum(dz / d, 0.0)
            c = d * (1.0 + w * g * g)
        out.append((dr, dc, c.tolist()))
    return out


def heap_dijkstra(z, blocked, start, goal, model, w):
    """Plain heap Dijkstra over the 8-neighbour grid; returns c*(start -> goal)."""
    h, wd = z.shape
    moves = _move_costs(z, model, w)
    blk = blocked.tolist()
    dist = {start: 0.0}
    done = set()
    heap = [(0.0, start)]
    while heap:
        du, u = heapq.heappop(heap)
        if u in done:
            continue
        if u == goal:
            return du
        done.add(u)
        r, c = u
        for dr, dc, cost in moves:
            rr, cc = r + dr, c + dc
            if 0 <= rr < h and 0 <= cc < wd and not blk[rr][cc]:
                nd = du + cost[r][c]
                if nd < dist.get((rr, cc), math.inf):
                    dist[(rr, cc)] = nd
                    heapq.heappush(heap, (nd, (rr, cc)))
    return math.inf


def recost(route, z, model, w):
    rng_ = float(z.max() - z.min())
    total = 0.0
    for (r0, c0), (r1, c1) in zip(route[:-1], route[1:]):
        d = PIX * (SQRT2 if (r0 != r1 and c0 != c1) else 1.0)
        total += step(model, d, float(z[r0, c0]), float(z[r1, c1]), w, rng_)
    return total


# --------------------------------------------------------------------------- #
# Reading shards without the project's reader
# --------------------------------------------------------------------------- #

def read_split(root, n, split):
    rows = []
    for f in sorted((Path(root) / f"{n}x{n}" / split).glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    out = []
    for r in rows:
        md = json.loads(r["metadata"])
        t = decode_tensor(r["tensor"], n)
        cal = md["calibration"]
        z = cal["min"] + t[..., 0].astype(np.float64) * (cal["max"] - cal["min"])
        routes = {(o, v): [tuple(p) for p in r[f"path_astar_{COLUMN[o]}_{v}"]] for o, v in LABELS}
        out.append({"id": r["id"], "md": md, "t": t, "z": z, "routes": routes})
    return out


def markers(t):
    s = np.argwhere(t[..., 1] == 1)
    g = np.argwhere(t[..., 1] == -1)
    assert len(s) == 1 and len(g) == 1 and np.count_nonzero(t[..., 1]) == 2
    return tuple(map(int, s[0])), tuple(map(int, g[0]))


def check_labels(scene):
    t, z = scene["t"], scene["z"]
    start, goal = markers(t)
    obst = t[..., 2] == 1
    for o, v in LABELS:
        blocked = obst if v == "obstacles" else np.zeros_like(obst)
        w = scene["md"]["solvers"][o]["weight"]
        assert w == WEIGHTS[o]
        route = scene["routes"][(o, v)]
        assert route[0] == start and route[-1] == goal
        for a, b in zip(route[:-1], route[1:]):
            assert max(abs(a[0] - b[0]), abs(a[1] - b[1])) == 1, (scene["id"], o, v)
        if v == "obstacles":
            assert not any(obst[p] for p in route)
        c_star = heap_dijkstra(z, blocked, start, goal, o, w)
        c_route = recost(route, z, o, w)
        assert abs(c_route - c_star) <= 1e-9 * c_star, (scene["id"], o, v, c_route, c_star)
        assert abs(scene["md"]["c_star"][f"{o}/{v}"] - c_star) <= 1e-9 * c_star


SHIPPED = {(n, s): read_split(SHIPPED_ROOT, n, s) for n in SHIPPED_SCENES for s in SHIPPED_SPLITS}


# --------------------------------------------------------------------------- #
# The independent solver itself, on a hand-worked grid
# --------------------------------------------------------------------------- #

def test_independent_solver_hand_worked():
    z = np.array([[0.0, 10.0], [0.0, 0.0]])
    # elevation, w = 1, range 10: straight down/right avoids the 10 m cell;
    # (0,0)->(1,1) diagonal costs 30*sqrt2 with dz = 0.
    assert heap_dijkstra(z, np.zeros((2, 2), bool), (0, 0), (1, 1), "elevation", 1.0) == \
        pytest.approx(30 * SQRT2)
    # to (0,1): direct costs 30 + 1*10/10 = 31; the detour costs more
    assert heap_dijkstra(z, np.zeros((2, 2), bool), (0, 0), (0, 1), "elevation", 1.0) == pytest.approx(31.0)
    # energy is free downhill: (0,1)->(0,0) costs 30 exactly, uphill 31
    assert heap_dijkstra(z, np.zeros((2, 2), bool), (0, 1), (0, 0), "energy", 1.0) == pytest.approx(30.0)
    # slope_uphill: 30 * (1 + 2 * (10/30)^2)
    assert heap_dijkstra(z, np.zeros((2, 2), bool), (0, 0), (0, 1), "slope_uphill", 2.0) == \
        pytest.approx(30 * (1 + 2 * (1 / 3) ** 2))
    blocked = np.array([[False, True], [False, False]])
    assert heap_dijkstra(z, blocked, (0, 0), (0, 1), "elevation", 1.0) == math.inf


def test_solve_label_agrees_with_independent_solver_on_random_grid():
    rng = np.random.default_rng(7)
    z = rng.normal(0, 50, (12, 15)).cumsum(axis=1)
    obst = rng.uniform(size=z.shape) < 0.2
    obst[0, 0] = obst[11, 14] = False
    for o in WEIGHTS:
        if heap_dijkstra(z, obst, (0, 0), (11, 14), o, WEIGHTS[o]) == math.inf:
            continue
        c, route = solve_label(z, obst, (0, 0), (11, 14), o, WEIGHTS[o])
        ref = heap_dijkstra(z, obst, (0, 0), (11, 14), o, WEIGHTS[o])
        assert c == pytest.approx(ref, rel=1e-12)
        assert recost([tuple(p) for p in route.tolist()], z, o, WEIGHTS[o]) == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------- #
# The shipped cohort
# --------------------------------------------------------------------------- #

def test_shipped_cohort_counts_and_rasters():
    ids = {}
    for (n, s), scenes in SHIPPED.items():
        assert len(scenes) == SHIPPED_SCENES[n]
        used = {sc["md"]["source"]["raster"] for sc in scenes}
        fit = {k for k in RASTERS if min(load_raster(k)[1]["shape"]) >= n}
        assert used == fit, (n, s, fit - used)
        if n in (64, 128):
            assert used == set(RASTERS)
        for sc in scenes:
            md = sc["md"]
            assert (md["resolution"], md["split"]) == (n, s)
            assert len(sc["id"]) == 10 and sc["id"].isdigit() and md["index"] == int(sc["id"])
            assert md["source"]["fixture"] is True and md["source"]["seed"] == SHIPPED_SEED
            assert md["calibration"] == {"min": -430.0, "max": 8767.0}
            assert md["markers"] == {"start": 1, "goal": -1}
            assert sc["id"] not in ids.setdefault(n, set())
            ids[n].add(sc["id"])


def test_shipped_64_labels_optimal_every_scene():
    for s in SHIPPED_SPLITS:
        for scene in SHIPPED[(64, s)]:
            check_labels(scene)


def test_shipped_128_256_labels_optimal_sample():
    for s in SHIPPED_SPLITS:
        check_labels(SHIPPED[(128, s)][0])
    check_labels(SHIPPED[(256, "test")][5])


@pytest.mark.slow
@pytest.mark.parametrize("n", [128, 256])
def test_shipped_labels_optimal_all(n):
    for s in SHIPPED_SPLITS:
        for scene in SHIPPED[(n, s)]:
            check_labels(scene)


def test_shipped_obstacles_markers_and_crops():
    rasters = {k: load_raster(k) for k in RASTERS}
    for (n, _split), scenes in SHIPPED.items():
        for sc in scenes:
            t, md = sc["t"], sc["md"]
            assert set(np.unique(t[..., 2])) <= {0.0, 1.0}
            obst = t[..., 2] == 1
            cov = obst.mean()
            assert cov <= 0.3 and cov == pytest.approx(md["obstacles"]["coverage"], abs=1e-12)
            assert md["obstacles"]["target"] <= 0.3 and md["obstacles"]["n_shapes"] >= 1
            start, goal = markers(t)
            assert not obst[start] and not obst[goal]
            assert max(abs(start[0] - goal[0]), abs(start[1] - goal[1])) >= math.ceil(n / 3)
            assert 0.0 <= t[..., 0].min() and t[..., 0].max() <= 1.0
            # the elevation is the native-grid crop of the raster it names
            c = md["crop"]
            assert (c["rows"], c["cols"], c["cell_size_m"]) == (n, n, 30.0)
            z_r, info = rasters[md["source"]["raster"]]
            ref = z_r[c["row0"]:c["row0"] + n, c["col0"]:c["col0"] + n]
            assert ref.shape == (n, n)
            assert np.abs(sc["z"] - ref).max() <= 5e-4
            assert md["source"]["native_cell_m"] == info["native_cell_m"]


def _bilinear(corners, fr, fc):
    tl, tr, bl, br = (np.array(corners[k]) for k in ("top_left", "top_right", "bottom_left",
                                                       "bottom_right"))
    return (1 - fr) * ((1 - fc) * tl + fc * tr) + fr * ((1 - fc) * bl + fc * br)


def test_shipped_tiles_consistent_with_raster_bounds():
    cells5 = {}
    for (n, _split), scenes in SHIPPED.items():
        for sc in scenes:
            md = sc["md"]
            _, info = load_raster(md["source"]["raster"])
            tile, c = md["tile"], md["crop"]
            h, w = info["shape"]
            pts = np.array([_bilinear(info["corners_lat_lon"], r / h, q / w)
                            for r in (c["row0"], c["row0"] + n) for q in (c["col0"], c["col0"] + n)])
            lat_lo, lon_lo = pts.min(axis=0)
            lat_hi, lon_hi = pts.max(axis=0)
            b = info["bounds"]
            assert b["lat_min"] - 1e-6 <= lat_lo and lat_hi <= b["lat_max"] + 1e-6
            assert b["lon_min"] - 1e-6 <= lon_lo and lon_hi <= b["lon_max"] + 1e-6
            want = {(la, lo) for la in range(-90, 90) for lo in range(-180, 180)
                    if la < lat_hi - 1e-9 and la + 1 > lat_lo + 1e-9
                    and lo < lon_hi - 1e-9 and lo + 1 > lon_lo + 1e-9}
            assert {tuple(p) for p in tile["tiles"]} == want
            centre = _bilinear(info["corners_lat_lon"], (c["row0"] + n / 2) / h, (c["col0"] + n / 2) / w)
            assert [tile["lat"], tile["lon"]] == [math.floor(centre[0]), math.floor(centre[1])]
            assert [tile["lat"], tile["lon"]] in tile["tiles"]
            # a 1-degree tile of the raster itself (gironde straddles 45 N, so its crops
            # fall in two tiles and two 5-degree cells; the other rasters in one cell)
            assert math.floor(b["lat_min"]) <= tile["lat"] <= math.floor(b["lat_max"])
            assert math.floor(b["lon_min"]) <= tile["lon"] <= math.floor(b["lon_max"])
            cells5.setdefault(info["key"], set()).add((tile["lat"] // 5, tile["lon"] // 5))
    assert all(len(v) == 1 for k, v in cells5.items() if k != "gironde")
    assert len(set().union(*cells5.values())) >= 7


# --------------------------------------------------------------------------- #
# The maker
# --------------------------------------------------------------------------- #

def _content(root, n, split):
    rows = []
    for f in sorted((Path(root) / f"{n}x{n}" / split).glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def test_make_cohort_deterministic(tmp_path):
    a = make_cohort(tmp_path / "a", 32, "test", 3, seed=11, progress=False)
    make_cohort(tmp_path / "b", 32, "test", 3, seed=11, progress=False)
    make_cohort(tmp_path / "c", 32, "test", 3, seed=12, progress=False)
    ra, rb, rc = (_content(tmp_path / x, 32, "test") for x in "abc")
    assert len(ra) == 3 and ra == rb
    fa = sorted((tmp_path / "a" / "32x32" / "test").glob("*.parquet"))
    fb = sorted((tmp_path / "b" / "32x32" / "test").glob("*.parquet"))
    assert [f.read_bytes() for f in fa] == [f.read_bytes() for f in fb]
    assert [r["tensor"] for r in ra] != [r["tensor"] for r in rc]
    assert sum(a["rasters"].values()) == 3 and len(a["rasters"]) == 3
    for sc in read_split(tmp_path / "a", 32, "test"):
        check_labels(sc)


def test_shipped_split_is_reproducible(tmp_path):
    """Regenerating a shipped split gives the same scenes (tensors compared decoded,
    so a change of Zstandard frame options alone does not count)."""
    make_cohort(tmp_path, 64, "validation", SHIPPED_SCENES[64], seed=SHIPPED_SEED, progress=False)
    new, old = _content(tmp_path, 64, "validation"), _content(SHIPPED_ROOT, 64, "validation")
    assert len(new) == len(old) == SHIPPED_SCENES[64]
    for a, b in zip(new, old):
        ta, tb = decode_tensor(a.pop("tensor"), 64), decode_tensor(b.pop("tensor"), 64)
        np.testing.assert_array_equal(ta, tb)
        assert a == b


def test_refuses_existing_shards_and_bad_arguments(tmp_path):
    make_cohort(tmp_path, 32, "val", 1, seed=0, progress=False)
    with pytest.raises(CohortError, match="already holds shards"):
        make_cohort(tmp_path, 32, "validation", 1, seed=0, progress=False)
    with pytest.raises(CohortError, match="coverage_max"):
        make_cohort(tmp_path, 32, "test", 1, coverage_max=0.35, progress=False)
    with pytest.raises(CohortError, match="unknown raster"):
        make_cohort(tmp_path, 32, "test", 1, rasters=["everest"], progress=False)
    with pytest.raises(ValueError, match="unknown split"):
        make_cohort(tmp_path, 32, "dev", 1, progress=False)


def test_small_rasters_skipped_for_large_crops():
    ok, skipped = eligible_rasters(384)
    assert set(skipped) == {"aletsch", "jacksboro"}  # 310x358 and 344x403
    assert "310x358" in skipped["aletsch"]
    assert set(ok) == set(RASTERS) - set(skipped)
    with pytest.raises(CohortError, match="no raster can serve"):
        make_cohort("/nonexistent-root", 2048, "test", 1, progress=False)


def test_cli_make_cohort(tmp_path, capsys):
    from cli.__main__ import main

    args = ["make-cohort", "--out", str(tmp_path), "--resolution", "32", "--split", "calib",
            "--n-scenes", "2", "--seed", "4", "--coverage-max", "0.2", "--rasters", "carrizo",
            "minnesota", "--no-progress"]
    assert main(args) == 0
    scenes = read_split(tmp_path, 32, "calibration")
    assert len(scenes) == 2
    assert {sc["md"]["source"]["raster"] for sc in scenes} == {"carrizo", "minnesota"}
    assert all(sc["md"]["obstacles"]["coverage"] <= 0.2 for sc in scenes)
    assert main(args) == 2  # the split folder now holds shards
    assert "already holds shards" in capsys.readouterr().err
    bad = ["make-cohort", "--out", str(tmp_path), "--resolution", "32", "--split", "test",
           "--n-scenes", "1", "--rasters", "everest", "--no-progress"]
    assert main(bad) == 2
    assert "unknown raster" in capsys.readouterr().err
    assert not (tmp_path / "32x32" / "test").exists()
