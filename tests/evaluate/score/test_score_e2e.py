"""score on real runs of the shipped cohort: per_sample.npz against an
independent NumPy recomputation from paths.npz + references, baseline
behaviour, overwrite refusal, tampering and status rules."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from score_support import N_SAMPLES, runs

from passage_jax.evaluate.score import (
    METRIC_CONTRACT,
    PER_SAMPLE_FIELDS,
    ScoreError,
    score_folder,
    score_run,
)
from passage_jax.testing import kernel_tol

MOVES = {(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)}


@pytest.fixture(scope="module")
def R():
    return runs()


# ----------------------------------------------------------------------------- helpers

def load(p):
    with np.load(p, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def tasks_of(cohort):
    from passage_jax.data import load_tasks

    return load_tasks(cohort, 64, "test", "energy", "obstacles", n_samples=N_SAMPLES)


def energy_cost(route, z, w):
    rng = z.max() - z.min()
    c = 0.0
    for (r0, c0), (r1, c1) in zip(route[:-1], route[1:]):
        d = 30.0 * (math.sqrt(2.0) if (r0 != r1 and c0 != c1) else 1.0)
        dz = z[r1, c1] - z[r0, c0]
        c += d + (w * max(dz, 0.0) / rng if rng > 0 else 0.0)
    return c


def recompute(route, ok, task, ref, c_star):
    """Plain NumPy/SciPy scoring of one candidate (docs/contract.md §4)."""
    H, W = task.obstacles.shape
    out = {}
    conn = (route is not None and route.ndim == 2 and route.shape[1] == 2
            and route.dtype.kind in "iu" and len(route) >= 2)
    if conn:
        inb = (route[:, 0] >= 0) & (route[:, 0] < H) & (route[:, 1] >= 0) & (route[:, 1] < W)
        steps = {tuple(s) for s in np.diff(route.astype(np.int64), axis=0).tolist()}
        conn = bool(inb.all() and steps <= MOVES and tuple(route[0]) == tuple(task.scene.start)
                    and tuple(route[-1]) == tuple(task.scene.goal))
    trav = 0
    if route is not None and route.ndim == 2 and route.shape[1] == 2 and route.dtype.kind in "iu":
        for r, c in route.tolist():
            if 0 <= r < H and 0 <= c < W and task.obstacles[r, c]:
                trav += 1
    valid = conn and trav == 0 and ok
    out.update(connected_path=conn, obstacle_traversals=trav, obstacle_violation=trav > 0,
               valid_path=valid, success=valid)
    if valid:
        cost = energy_cost(route, task.elevation_m, task.weight)
        out["predicted_cost"] = cost
        out["regret"] = (cost - c_star) / c_star
        dab = cdist(route, ref).min(axis=1)
        dba = cdist(ref, route).min(axis=1)
        lstar = sum(math.sqrt(2.0) if (a[0] != b[0] and a[1] != b[1]) else 1.0
                    for a, b in zip(ref[:-1], ref[1:]))
        out["assd"] = (dab.sum() + dba.sum()) / (len(route) + len(ref)) / lstar
        out["h95"] = max(np.percentile(dab, 95), np.percentile(dba, 95))
        sa, sb = set(map(tuple, route.tolist())), set(map(tuple, ref.tolist()))
        out["path_iou"] = len(sa & sb) / len(sa | sb)
    else:
        out["predicted_cost"] = 1e6 * c_star
        out["regret"] = 999999.0
        out["assd"] = out["h95"] = out["path_iou"] = np.nan
    return out


def independent_rows(folder, cohort):
    recs = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    paths = load(folder / "paths.npz")
    ref = load(folder / "references.npz")
    tasks = tasks_of(cohort)
    refs = [ref["route_coords"][ref["route_offsets"][i]:ref["route_offsets"][i + 1]]
            for i in range(len(tasks))]
    rows = {}
    for i, r in enumerate(recs):
        if r["series"] != "warm":
            continue
        fmt = int(paths["route_format"][i])
        route = paths["coords"][paths["offsets"][i]:paths["offsets"][i + 1]] if fmt == 0 else None
        t = r["task_index"]
        rows[(r["sample_id"], r["repeat"])] = dict(
            recompute(route, r["status"] == "ok", tasks[t], refs[t], ref["c_star"][t]),
            status=r["status"], latency_ms=r["latency_ms"], oracle_cost=ref["c_star"][t])
    return rows


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("name", ["exact", "bfs", "greedy"])
def test_per_sample_matches_independent_recomputation(R, name):
    for folder in sorted(R[name].glob("seed-*")):
        p = load(folder / "per_sample.npz")  # allow_pickle=False
        assert all(p[k].dtype.kind != "O" for k in p)
        assert str(p["metric_contract"]) == METRIC_CONTRACT
        for k in PER_SAMPLE_FIELDS:
            assert k in p, k
        n = len(p["sample_id"])
        assert n == N_SAMPLES  # tasks x one warm repeat
        want = independent_rows(folder, R["cohort"])
        assert len(want) == n
        for i in range(n):
            w = want[(str(p["sample_id"][i]), int(p["repeat_index"][i]))]
            for k in ("connected_path", "obstacle_violation", "valid_path", "success"):
                assert bool(p[k][i]) == w[k], (name, i, k)
            assert int(p["obstacle_traversals"][i]) == w["obstacle_traversals"]
            assert str(p["status"][i]) == w["status"]
            assert p["latency_ms"][i] == w["latency_ms"]
            assert p["oracle_cost"][i] == w["oracle_cost"]
            for k in ("predicted_cost", "regret", "assd", "h95", "path_iou"):
                a, b = float(p[k][i]), float(w[k])
                # geometry runs in float32 on a backend without float64 (stated tolerance);
                # costs and regret stay float64 on the host
                geometry = k in ("assd", "h95", "path_iou")
                rel = kernel_tol(1e-9) if geometry else 1e-9
                if math.isnan(b):
                    assert math.isnan(a), (name, i, k)
                else:
                    assert a == pytest.approx(b, rel=rel, abs=kernel_tol(1e-12) if geometry else 1e-12), \
                        (name, i, k)
        assert p["primary_quality"].all()
        assert p["quality_repeat_index"].shape == () and p["quality_repeat_index"].item() == 0
        assert p["reference_qualified"].all()
        # the headline metrics are the aggregates of these rows
        m = json.loads((folder / "metrics.json").read_text())
        assert m["primary"]["success_rate"] == pytest.approx(p["success"].mean())
        assert m["primary"]["regret_median"] == pytest.approx(np.median(p["regret"]), rel=1e-12)
        assert m["primary"]["regret_p90"] == pytest.approx(np.percentile(p["regret"], 90),
                                                           rel=1e-12)
        if p["valid_path"].any():
            assert m["primary"]["assd_mean"] == pytest.approx(p["assd"][p["valid_path"]].mean())
        assert m["n_path_valid"] == int(p["valid_path"].sum())


def test_baselines_behave(R):
    ex = [load(f / "per_sample.npz") for f in sorted(R["exact"].glob("seed-*"))]
    for p in ex:
        assert p["success"].all()
        # zero regret up to rounding of the recomputed cost against c*
        assert np.all(np.abs(p["regret"]) < 1e-12)
    bfs = load(R["bfs"] / "seed-1234" / "per_sample.npz")
    assert bfs["success"].all() and (bfs["regret"] > 1e-6).any()
    gr = load(R["greedy"] / "seed-1234" / "per_sample.npz")
    fail = ~gr["success"]
    assert fail.any() and (gr["success"]).any()
    assert np.all(gr["regret"][fail] == 999999.0)
    m = json.loads((R["greedy"] / "seed-1234" / "metrics.json").read_text())
    assert m["primary"]["success_rate"] == pytest.approx(1 - fail.mean())
    assert m["latency"]["warm"]["censored"]["n_other_failures"] == int(fail.sum())


def test_receipt_and_refusal_to_overwrite(R, tmp_path):
    from passage_jax.fileio import sha256_file

    folder = tmp_path / "run"
    shutil.copytree(R["greedy"], folder)
    seed = folder / "seed-1234"
    rec = json.loads((seed / "score_receipt.json").read_text())
    for n, h in rec["outputs"].items():
        assert sha256_file(seed / n) == h
    for n in ("manifest.json", "requests.jsonl", "paths.npz", "references.npz"):
        assert rec["inputs"][n] == sha256_file(seed / n)
    before = (seed / "metrics.json").read_bytes()
    with pytest.raises(ScoreError, match="already scored"):
        score_run(folder)
    with pytest.raises(ScoreError, match="already scored"):
        score_folder(seed)
    assert (seed / "metrics.json").read_bytes() == before
    # --force scores again, atomically, with identical numbers; no temp files left
    score_run(folder, force=True)
    a = json.loads(before)
    b = json.loads((seed / "metrics.json").read_text())
    assert a["primary"] == b["primary"]
    assert json.loads((seed / "score_receipt.json").read_text())["forced"] is True
    assert not [p for p in seed.iterdir() if p.name.startswith(".")]


def _rewrite_manifest_hash(seed, name):
    from passage_jax.fileio import sha256_file

    m = json.loads((seed / "manifest.json").read_text())
    m["files"][name] = sha256_file(seed / name)
    (seed / "manifest.json").write_text(json.dumps(m))


def test_tampered_routes_and_changed_data_refused(R, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(R["bfs"], folder)
    seed = folder / "seed-1234"
    for n in ("metrics.json", "per_sample.npz", "score_receipt.json"):
        (seed / n).unlink()
    p = load(seed / "paths.npz")
    p["coords"] = p["coords"].copy()
    p["coords"][0, 0] += 1
    np.savez(seed / "paths.npz", **p)
    with pytest.raises(ScoreError, match="paths.npz: sha256 .* differs from the manifest"):
        score_folder(seed)
    shutil.copy2(R["bfs"] / "seed-1234" / "paths.npz", seed / "paths.npz")
    # the data changed since the run: refused, naming the shard
    cohort = tmp_path / "cohort"
    shutil.copytree(R["cohort"], cohort)
    shard = next((cohort / "64x64" / "test").glob("*.parquet"))
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(shard), shard, compression="gzip")
    with pytest.raises(ScoreError, match="shard .*sha256 .* differs"):
        score_folder(seed, dataset_path=cohort)
    # the untouched copy scores
    m = score_folder(seed, dataset_path=R["cohort"])
    assert m["n_tasks"] == N_SAMPLES


def test_non_ok_status_fails_and_malformed_route_invalid(R, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(R["exact"] / "seed-1234", folder)
    for n in ("metrics.json", "per_sample.npz", "score_receipt.json"):
        (folder / n).unlink()
    lines = (folder / "requests.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    warm = [i for i, r in enumerate(recs) if r["series"] == "warm"]
    late, bad = warm[0], warm[1]
    # a legal route returned after its deadline: status timeout
    recs[late].update(status="timeout", late=True, deadline_ms=1.0)
    (folder / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    # a float route (malformed) for another record, stored as the runner would
    p = load(folder / "paths.npz")
    rows = p["coords"][p["offsets"][bad]:p["offsets"][bad + 1]].astype(np.float64)
    coords = np.concatenate([p["coords"][:p["offsets"][bad]], p["coords"][p["offsets"][bad + 1]:]])
    offsets = p["offsets"].copy()
    offsets[bad + 1:] -= len(rows)
    raw_off = np.zeros_like(p["raw_offsets"])
    raw_off[bad + 1:] = rows.size
    fmt = p["route_format"].copy()
    fmt[bad] = 2
    raw_shape = np.array([""] * len(fmt), dtype="<U16")
    raw_shape[bad] = f"{rows.shape[0]}x2"
    raw_dtype = np.array([""] * len(fmt), dtype="<U8")
    raw_dtype[bad] = "<f8"
    p.update(coords=coords, offsets=offsets, raw_values=rows.ravel(), raw_offsets=raw_off,
             route_format=fmt, raw_shape=raw_shape, raw_dtype=raw_dtype)
    np.savez(folder / "paths.npz", **p)
    _rewrite_manifest_hash(folder, "requests.jsonl")
    _rewrite_manifest_hash(folder, "paths.npz")
    m = score_folder(folder)
    ps = load(folder / "per_sample.npz")
    i_late = int(np.flatnonzero(ps["record_index"] == late)[0])
    i_bad = int(np.flatnonzero(ps["record_index"] == bad)[0])
    assert ps["connected_path"][i_late]  # the route itself connects ...
    assert not ps["success"][i_late] and ps["regret"][i_late] == 999999.0  # ... but it failed
    assert np.isnan(ps["assd"][i_late])
    assert ps["malformed"][i_bad] and not ps["connected_path"][i_bad]
    # a float route has no length in cells, even though it has an (L, 2) shape
    assert rows.shape[0] >= 2
    assert ps["route_length"][i_bad] == -1
    n_cells = np.diff(offsets)[ps["record_index"]]
    ok_rows = ps["record_index"] != bad
    np.testing.assert_array_equal(ps["route_length"][ok_rows], n_cells[ok_rows])
    assert not ps["success"][i_bad] and ps["regret"][i_bad] == 999999.0
    assert m["primary"]["success_rate"] == pytest.approx((N_SAMPLES - 2) / N_SAMPLES)
    cen = m["latency"]["warm"]["censored"]
    assert (cen["n_timeouts"], cen["n_censored"], cen["n_successes"]) == (1, 1, N_SAMPLES - 2)
    assert m["status_route_divergence"]["status_not_ok_route_connected_legal"] == 1
    assert m["status_route_divergence"]["status_ok_route_invalid"] == 1
