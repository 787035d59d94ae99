"""Benchmark: decoded-path metrics, jitted kernels vs a per-route NumPy + cKDTree loop.

Data: the shipped real-terrain cohort (all resolutions and splits of
``passage_jax/data/cohort``); each task is scored against candidate routes made
from its exact route, the other objectives' exact routes, detours through a
random waypoint, and a few broken routes (truncated, with a gap). Both sides
score the same candidates in the same process: validity, traversals, float64
recosting, censoring/regret, ASSD, H95 and IoU.

    python bench/metrics.py            # 10,000 routes
    python bench/metrics.py --quick    # 1,000 routes
Last line: ``speedup: <peer seconds / our warm seconds>``.
"""
from __future__ import annotations

import argparse
import math
import platform
import time

import numpy as np
from scipy.spatial import cKDTree

import passage_jax.data as data
from passage_jax.graph import OBJECTIVES, route_cost
from passage_jax.metrics import score_routes
from passage_jax.testing import candidate_set, make_scene


def load_material(n_routes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tasks, cstar = [], []
    source = "shipped cohort"
    try:
        root = data.shipped_cohort_root()
        scenes = []
        for res in (64, 128, 256):
            for split in ("validation", "calibration", "test"):
                try:
                    scenes += data.load_scenes(root, res, split)
                except data.DataError:
                    continue  # this resolution/split is not shipped (yet)
        c_of = [s.metadata["c_star"] for s in scenes]
    except Exception:  # noqa: BLE001 - the cohort is optional for a benchmark
        scenes = []
    if not scenes:
        source = "scenes cut from the shipped rasters (cohort unavailable)"
        made = [make_scene(rng, n, f"b{k}") for k, n in enumerate([64, 128, 256] * 12)]
        scenes = [m[0] for m in made]
        c_of = [{f"{o}/{v}": c for (o, v), c in m[1].items()} for m in made]
    for scene, cs in zip(scenes, c_of):
        for obj in OBJECTIVES:
            for var in ("free", "obstacles"):
                tasks.append(scene.task(obj, var))
                cstar.append(cs[f"{obj}/{var}"])
    order = rng.permutation(len(tasks))
    per_task = max(1, math.ceil(n_routes / len(tasks)))
    out_t, out_c, out_s = [], [], []
    for j, i in enumerate(order):
        t = tasks[i]
        pool = candidate_set(t.scene, t.objective, t.variant, rng, 8 * per_task)
        for c in pool[j % 8::8][:per_task] if per_task < 8 else pool[:per_task]:
            out_t.append(t)
            out_c.append(c)
            out_s.append(cstar[i])
            if len(out_t) == n_routes:
                return out_c, out_t, np.array(out_s), source
    return out_c, out_t, np.array(out_s), source


def peer_score(cands, tasks, cstar, ok):
    """What a user would otherwise write: a per-route NumPy/SciPy loop."""
    n = len(tasks)
    out = {k: np.zeros(n) for k in ("regret", "assd", "h95", "path_iou", "predicted_cost")}
    valid_all = np.zeros(n, bool)
    for i in range(n):
        t, a = tasks[i], np.asarray(cands[i])
        obst = t.obstacles
        h, w = obst.shape
        conn = trav = 0
        if a.ndim == 2 and a.shape[1] == 2 and a.dtype.kind in "iu" and len(a) >= 1:
            inb = (a[:, 0] >= 0) & (a[:, 0] < h) & (a[:, 1] >= 0) & (a[:, 1] < w)
            trav = int(obst[a[inb, 0], a[inb, 1]].sum())
            step = np.abs(np.diff(a, axis=0)).max(axis=1) if len(a) > 1 else np.zeros(0)
            conn = (len(a) >= 2 and inb.all() and np.all(step == 1)
                    and tuple(a[0]) == tuple(t.scene.start) and tuple(a[-1]) == tuple(t.scene.goal))
        valid = bool(conn and trav == 0 and ok[i])
        valid_all[i] = valid
        c = cstar[i]
        if valid:
            cost = route_cost(a, t.elevation_m, t.objective, t.weight)
            ref = np.asarray(t.route)
            da, _ = cKDTree(ref).query(a)
            db, _ = cKDTree(a).query(ref)
            dstep = np.abs(np.diff(ref, axis=0)).sum(axis=1)
            l_star = np.where(dstep == 2, math.sqrt(2), 1.0).sum()
            out["assd"][i] = (da.sum() + db.sum()) / (len(a) + len(ref)) / l_star
            out["h95"][i] = max(np.percentile(da, 95), np.percentile(db, 95))
            sa = set(map(tuple, a.tolist()))
            sb = set(map(tuple, ref.tolist()))
            out["path_iou"][i] = len(sa & sb) / len(sa | sb)
            out["predicted_cost"][i] = cost
            out["regret"][i] = (cost - c) / c
        else:
            out["predicted_cost"][i] = 1e6 * c
            out["regret"][i] = 999999.0
            out["assd"][i] = out["h95"][i] = out["path_iou"][i] = np.nan
    out["valid_path"] = valid_all
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1,000 routes instead of 10,000")
    ap.add_argument("--n-routes", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3, help="warm runs of ours (best is kept)")
    ap.add_argument("--peer-repeats", type=int, default=None,
                    help="runs of the peer loop (best is kept; default 3 quick, 2 full)")
    args = ap.parse_args(argv)
    n = args.n_routes or (1000 if args.quick else 10000)

    t0 = time.perf_counter()
    cands, tasks, cstar, source = load_material(n)
    ok = np.ones(len(tasks), bool)
    t_load = time.perf_counter() - t0
    lengths = np.array([len(c) for c in cands])
    res = {}
    for t in tasks:
        res[t.scene.resolution] = res.get(t.scene.resolution, 0) + 1

    t0 = time.perf_counter()
    ours = score_routes(cands, tasks, cstar, ok)
    t_cold = time.perf_counter() - t0
    # the CPU may be shared: best of several runs for both sides
    t_warm = math.inf
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ours = score_routes(cands, tasks, cstar, ok)
        t_warm = min(t_warm, time.perf_counter() - t0)

    t_peer = math.inf
    for _ in range(args.peer_repeats or (args.repeats if args.quick else 2)):
        t0 = time.perf_counter()
        peer = peer_score(cands, tasks, cstar, ok)
        t_peer = min(t_peer, time.perf_counter() - t0)

    # same answers (the bench is only meaningful if both sides agree)
    assert np.array_equal(ours["valid_path"], peer["valid_path"])
    for k in ("regret", "assd", "h95", "path_iou", "predicted_cost"):
        np.testing.assert_allclose(ours[k], peer[k], rtol=1e-9, atol=1e-12, err_msg=k)

    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"data: {source}, {len(tasks)} routes (by grid size {dict(sorted(res.items()))}), "
          f"route length median {int(np.median(lengths))} max {lengths.max()}, "
          f"valid {int(ours['valid_path'].sum())}; material built in {t_load:.1f} s")
    print(f"{'implementation':<42}{'seconds':>10}{'routes/s':>12}")
    print(f"{'score_routes, first call (incl. compile)':<42}{t_cold:>10.3f}{len(tasks) / t_cold:>12.0f}")
    print(f"{'score_routes, warm (best of ' + str(args.repeats) + ')':<42}{t_warm:>10.3f}"
          f"{len(tasks) / t_warm:>12.0f}")
    print(f"{'NumPy + cKDTree per-route loop (best)':<42}{t_peer:>10.3f}{len(tasks) / t_peer:>12.0f}")
    print(f"results agree on all {len(tasks)} routes (rtol 1e-9)")
    print(f"speedup incl. compile: {t_peer / t_cold:.2f}")
    print(f"speedup: {t_peer / t_warm:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
