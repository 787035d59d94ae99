"""Benchmark: time and peak memory of scoring very long routes, against a per-route peer.

Each size runs in a fresh subprocess (so every peak is its own): a batch of one
task of a 64x64 scene cut from the shipped rasters with a looping legal route of
``L`` cells (back and forth beside the start, then the exact route: valid),
the same route not ending at the goal (invalid), and 16 ordinary candidates
(exact, detoured, broken). ``score_routes`` scores the batch (first call,
compile included, then the best of the warm calls); the peer is the per-route
NumPy + ``scipy.spatial.cKDTree`` loop of ``bench/metrics.py`` on the same batch.
Both must agree (rtol 1e-9). Peak RSS is the child's VmHWM; "before"
is its high-water mark after the imports and the material, before scoring.

    python bench/score_memory.py            # L = 1e3, 1e4, 1e5, 1e6
    python bench/score_memory.py --quick    # L = 1e3, 1e4, 1e5 (within a minute)
Last line: ``speedup: <peer seconds / our warm seconds at the longest L>``.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _peer():
    spec = importlib.util.spec_from_file_location("bench_metrics", HERE / "metrics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.peer_score


def material(length: int, seed: int = 0):
    from passage_jax.testing import candidate_set, make_scene

    rng = np.random.default_rng(seed)
    scene, c_of = make_scene(rng, 64, "long")
    task = scene.task("elevation", "obstacles")
    c = float(c_of[("elevation", "obstacles")])
    ref = np.asarray(task.route, np.int32)
    ob = np.asarray(task.obstacles, bool)
    on = set(map(tuple, ref.tolist()))
    r0, c0 = ref[0]
    other = next(np.array([r0 + dr, c0 + dc], np.int32)
                 for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                 if (dr or dc) and 0 <= r0 + dr < 64 and 0 <= c0 + dc < 64
                 and not ob[r0 + dr, c0 + dc] and (r0 + dr, c0 + dc) not in on)
    k = max(1, length - (len(ref) - 1))
    k += 1 - k % 2  # odd: the back-and-forth ends on the start
    loop = np.concatenate([np.where((np.arange(k) % 2 == 0)[:, None], ref[0], other),
                           ref[1:]]).astype(np.int32)
    cands = [loop, loop[:-1]] + list(candidate_set(scene, "elevation", "obstacles", rng, 16))
    return cands, [task] * len(cands), np.full(len(cands), c)


def _peak_kb() -> float:
    """This process's peak RSS in KiB: VmHWM, which starts afresh at exec (``ru_maxrss``
    carries the forking parent's peak across exec; used only where /proc is absent)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def child(side: str, length: int, repeats: int) -> dict:
    cands, tasks, cstar = material(length)
    ok = np.ones(len(cands), bool)
    before = _peak_kb()
    if side == "ours":
        from passage_jax.metrics import score_routes

        t0 = time.perf_counter()
        out = score_routes(cands, tasks, cstar, ok)
        first = time.perf_counter() - t0
    else:
        run = _peer()
        first = None
        out = None
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = score_routes(cands, tasks, cstar, ok) if side == "ours" else run(cands, tasks,
                                                                                cstar, ok)
        best = min(best, time.perf_counter() - t0)
    keep = {k: np.asarray(out[k], np.float64).tolist()
            for k in ("valid_path", "predicted_cost", "regret", "assd", "h95", "path_iou")}
    return {"side": side, "length": len(cands[0]), "first_s": first, "warm_s": best,
            "rss_before_mb": before / 1024,
            "peak_rss_mb": _peak_kb() / 1024,
            "values": keep}


def run_child(side: str, length: int, repeats: int) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", side, "--length", str(length),
                          "--repeats", str(repeats)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{side} at L={length} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="L up to 1e5 (within a minute)")
    ap.add_argument("--repeats", type=int, default=None, help="warm runs (best is kept)")
    ap.add_argument("--child", choices=("ours", "peer"), help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.length, args.repeats or 1)))
        return 0
    sizes = (1_000, 10_000, 100_000) if args.quick else (1_000, 10_000, 100_000, 1_000_000)
    repeats = args.repeats or (2 if args.quick else 3)
    print(f"machine: {platform.machine()}  python {platform.python_version()}")
    print("batch: 18 routes on one 64x64 task (a looping valid route of L cells, the same "
          "invalid, 16 ordinary)")
    print(f"{'L':>9} {'side':<6} {'first s':>8} {'warm s':>8} {'RSS before MB':>14} "
          f"{'peak RSS MB':>12}")
    ratio = None
    for length in sizes:
        ours = run_child("ours", length, repeats)
        peer = run_child("peer", length, repeats)
        a, b = ours["values"], peer["values"]
        assert a["valid_path"] == b["valid_path"], "validity differs from the peer"
        for k in ("predicted_cost", "regret", "assd", "h95", "path_iou"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-12, err_msg=k)
        for r in (ours, peer):
            first = f"{r['first_s']:8.3f}" if r["first_s"] is not None else f"{'-':>8}"
            print(f"{r['length']:>9} {r['side']:<6} {first} {r['warm_s']:8.3f} "
                  f"{r['rss_before_mb']:14.0f} {r['peak_rss_mb']:12.0f}")
        ratio = peer["warm_s"] / ours["warm_s"]
    print("results agree with the peer at every L (rtol 1e-9)")
    print(f"speedup: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
