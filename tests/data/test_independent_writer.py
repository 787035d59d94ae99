"""Shards from a writer that follows docs/contract.md §1/§2 on its own (plain pyarrow + zstandard,
its own heap Dijkstra with its own neighbour order and cost formulas): the audit
accepts them and qualifies every label with the weights of metadata.solvers, and a
legal but non-optimal released route is rejected naming its scene."""
import heapq
import io
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard as zstd

N = 20  # not a power of two
CAL = (-430.0, 8767.0)
WEIGHTS = {"elevation": 40.0, "slope_uphill": 7.5, "energy": 80.0}  # not the defaults
COL = {"elevation": "elevation", "slope_uphill": "slope", "energy": "energy"}
NB = [(1, 1), (1, 0), (1, -1), (0, 1), (0, -1), (-1, 1), (-1, 0), (-1, -1)]


def _step(model, w, d, dz, rng):
    if model == "elevation":
        return d + (w * abs(dz) / rng if rng > 0 else 0.0)
    if model == "energy":
        return d + (w * max(dz, 0.0) / rng if rng > 0 else 0.0)
    return d * (1.0 + w * max(dz / d, 0.0) ** 2)


def _dijkstra(z, ob, s, g, model, w):
    rng = float(z.max() - z.min())
    dist, prev, done, heap = {s: 0.0}, {}, set(), [(0.0, s)]
    while heap:
        c, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for dr, dc in NB:
            v = (u[0] + dr, u[1] + dc)
            if 0 <= v[0] < N and 0 <= v[1] < N and not ob[v]:
                d = 30.0 * math.sqrt(2.0) if dr and dc else 30.0
                nc = c + _step(model, w, d, float(z[v] - z[u]), rng)
                if nc < dist.get(v, math.inf):
                    dist[v], prev[v] = nc, u
                    heapq.heappush(heap, (nc, v))
    path = [g]
    while path[-1] != s:
        path.append(prev[path[-1]])
    return path[::-1]


def _frame(t):
    buf = io.BytesIO()  # streamed: the frame declares no content size
    with zstd.ZstdCompressor(write_content_size=False).stream_writer(buf, closefd=False) as w:
        w.write(np.ascontiguousarray(t, "<f4").tobytes())
    return buf.getvalue()


def _scene(seed, flat):
    rs = np.random.default_rng(seed)
    if flat:
        zt = np.full((N, N), 640.0)
    else:
        f = np.fft.fft2(rs.standard_normal((N, N)))
        k2 = np.fft.fftfreq(N)[:, None] ** 2 + np.fft.fftfreq(N)[None, :] ** 2
        zt = np.real(np.fft.ifft2(f * np.exp(-k2 * 40.0)))
        zt = 900.0 + 400.0 * (zt - zt.min()) / (zt.max() - zt.min())
    e = ((zt - CAL[0]) / (CAL[1] - CAL[0])).astype(np.float32)
    z = CAL[0] + e.astype(np.float64) * (CAL[1] - CAL[0])  # as the reader rebuilds it
    ob = np.zeros((N, N), bool)
    ob[4:14, 9:11] = True
    s, g = (2, 2), (N - 3, N - 4)
    t = np.stack([e, np.zeros_like(e), ob.astype(np.float32)], -1)
    t[s + (1,)], t[g + (1,)] = 1.0, -1.0
    routes = {(m, v): _dijkstra(z, ob if v == "obstacles" else np.zeros_like(ob), s, g, m, w)
              for m, w in WEIGHTS.items() for v in ("free", "obstacles")}
    return t, routes


def _write(root, detour=False):
    rows = []
    for i in range(2):
        t, routes = _scene(i, flat=(i == 1))
        if detour and i == 0:  # legal, avoids the obstacles, far from optimal
            r = [(2, c) for c in range(2, N - 1)] + [(r, N - 2) for r in range(3, N - 3)] + [(N - 3, N - 3)]
            r.append((N - 3, N - 4))
            routes[("elevation", "obstacles")] = r
        md = {"index": i, "resolution": N, "split": "validation",
              "calibration": {"min": CAL[0], "max": CAL[1]},
              "solvers": {m: {"weight": w, "solver": "heap", "heuristic": "none"}
                          for m, w in WEIGHTS.items()}}
        if i == 0:
            md["tile"] = {"source": "x", "lat": 46, "lon": 7, "tiles": [[46, 7]]}
        rows.append((f"{4200000000 + i:010d}", t, routes, md))
    rt = pa.large_list(pa.list_(pa.int64()))
    cols = {"id": pa.array([r[0] for r in rows]), "tensor": pa.array([_frame(r[1]) for r in rows])}
    for m in WEIGHTS:
        cols[f"image_astar_{COL[m]}"] = pa.array([b"png"] * len(rows), pa.binary())
        for v in ("free", "obstacles"):
            cols[f"path_astar_{COL[m]}_{v}"] = pa.array(
                [[list(c) for c in r[2][(m, v)]] for r in rows], rt)
    cols["metadata"] = pa.array([json.dumps(r[3]) for r in rows])
    (root / f"{N}x{N}" / "validation").mkdir(parents=True)
    pq.write_table(pa.table(cols), root / f"{N}x{N}" / "validation" / "p.parquet", row_group_size=1)


def test_independent_shards_are_accepted_and_qualified(tmp_path):
    from passage_jax.data import audit_dataset

    _write(tmp_path)
    rep = audit_dataset(tmp_path, [N], qualify=True, workers=0)
    s = rep["summary"]
    assert s["all_valid"] and s["n_valid"] == 2 and s["unqualified"] == []
    assert s["resolutions"][str(N)]["splits"]["validation"]["qualification"]["n_qualified"] == 12


def test_independent_non_optimal_route_is_rejected(tmp_path):
    from passage_jax.data import audit_dataset

    _write(tmp_path, detour=True)
    rep = audit_dataset(tmp_path, [N], qualify=True, workers=0)
    bad = rep["summary"]["unqualified"]
    assert [(b["id"], b["task"]) for b in bad] == [("4200000000", "elevation/obstacles")]
    assert "4200000000" in bad[0]["reason"]
