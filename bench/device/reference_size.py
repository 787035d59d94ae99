"""One exact reference at a large size against SciPy, as one JSON document (the device
check's part ``reference_4096``, ``bash bench/device_check.sh reference_4096``).

``bench/resolutions.py`` times a reference at every release resolution on a cohort it
builds first (minutes of SciPy labelling at 4,096² on the host); this script times the
reference alone, with no cohort, so a device call spends its minutes on the solve. For
each size of ``--res`` (default 2048 4096) it makes one task in memory:

* terrain: the window at a seeded offset of the plane tiled with mirrored copies of the
  shipped ``--raster`` (``numpy.pad(..., mode="symmetric")``, as ``bench/campaign.py``'s
  ``mirror_window``), normalised and read back in metres as a reader does. A *scale
  test*: mirrored terrain measures time and memory, not quality;
* obstacles: seeded discs (radius N/80 to N/20) up to ``--coverage`` of the grid, never
  on the markers, redrawn until start and goal are 8-connected;
* start and goal near opposite corners (N/16 from the edges): a route of thousands of
  steps at 4,096²;
* the task: ``energy`` at its default weight (62.4), 30 m cells.

It times ``passage_jax.reference.solve_batch`` (float64, with its route: the solver of the
exact planner and of admission's qualification) once cold (compiles) and
``--repeats`` times warm, then SciPy's ``csgraph.dijkstra`` on the same task (graph
build and search timed apart), compares c* and prints the ratio (SciPy's time over
ours, warm). Needs numpy, scipy, jax and passage_jax; not zstandard (no shard is read
or written). The document is rewritten after every size::

    python bench/device/reference_size.py --json-out /tmp/reference_size.json     # 2048, 4096
    python bench/device/reference_size.py --res 256 512 --repeats 1              # a rehearsal
Last line: ``reference <N>: ours <s> s, SciPy <s> s, ratio <x>`` for the largest size.
"""
from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np
import scipy.ndimage
import scipy.sparse.csgraph
from references import write_json  # bench/device/references.py, beside this file

from passage_jax.data.scene import PASSAGE_CALIBRATION, elevation_metres, normalise_elevation
from passage_jax.data.terrain import load_raster
from passage_jax.reference import scipy_task_graph, solve_batch

OBJECTIVE, WEIGHT = "energy", 62.4
_EIGHT = np.ones((3, 3), bool)


def make_task(n: int, raster: str, seed: int, coverage: float) -> dict:
    """The scale-test task of the module docstring at ``n``²."""
    rng = np.random.default_rng([seed, n])
    z_raster, _ = load_raster(raster)
    h, w = z_raster.shape
    row0, col0 = int(rng.integers(2 * h)), int(rng.integers(2 * w))
    plane = np.pad(z_raster, ((0, max(0, row0 + n - h)), (0, max(0, col0 + n - w))), mode="symmetric")
    e = normalise_elevation(plane[row0:row0 + n, col0:col0 + n], PASSAGE_CALIBRATION)
    del plane
    z = elevation_metres(e, PASSAGE_CALIBRATION)
    m = max(1, n // 16)
    start, goal = (m, m), (n - 1 - m, n - 1 - m)
    yy, xx = np.ogrid[:n, :n]
    for _ in range(30):
        obst = np.zeros((n, n), bool)
        while obst.mean() < coverage:
            r = rng.uniform(n / 80, n / 20)
            cy, cx = rng.uniform(0, n, 2)
            lo_y, hi_y = max(0, int(cy - r)), min(n, int(cy + r) + 1)
            lo_x, hi_x = max(0, int(cx - r)), min(n, int(cx + r) + 1)
            disc = (yy[lo_y:hi_y] - cy) ** 2 + (xx[:, lo_x:hi_x] - cx) ** 2 <= r * r
            obst[lo_y:hi_y, lo_x:hi_x] |= disc
            obst[start] = obst[goal] = False
        lab, _ = scipy.ndimage.label(~obst, structure=_EIGHT)
        if lab[start] and lab[start] == lab[goal]:
            break
    else:
        raise RuntimeError(f"{n}x{n}: no obstacle draw left the goal reachable in 30 tries")
    return {"z": z, "obstacles": obst, "start": start, "goal": goal,
            "offset": [row0, col0], "coverage": float(obst.mean())}


def time_size(n: int, a) -> dict:
    t = make_task(n, a.raster, a.seed, a.coverage)
    z, obst, start, goal = t["z"], t["obstacles"], t["start"], t["goal"]
    args = (z[None], obst[None], [start], [goal], [OBJECTIVE], [WEIGHT])
    t0 = time.perf_counter()
    res = solve_batch(*args, routes=True, precision="float64")
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        res = solve_batch(*args, routes=True, precision="float64")
        warm.append(time.perf_counter() - t0)
    ours = float(np.median(warm)) if warm else cold
    c_ours, route = float(res.c_star[0]), res.routes[0]
    sweeps, status = int(res.sweeps[0]), res.status[0]
    del res
    row = {"res": n, "scale_test": "mirrored tiling of " + a.raster, "offset": t["offset"],
           "coverage": t["coverage"], "start": list(start), "goal": list(goal), "status": status,
           "sweeps": sweeps, "route_steps": None if route is None else int(len(route) - 1),
           "ours_cold_s": cold, "ours_warm_s": warm, "ours_s": ours, "c_star": c_ours}
    try:
        stats = jax.devices()[0].memory_stats() or {}
        row["device_peak_bytes"] = stats.get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001 (a backend without memory statistics)
        row["device_peak_bytes"] = None
    if not a.no_scipy:
        t0 = time.perf_counter()
        graph = scipy_task_graph(z, obst, OBJECTIVE, WEIGHT)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        dist = scipy.sparse.csgraph.dijkstra(graph, directed=True, indices=start[0] * n + start[1])
        search = time.perf_counter() - t0
        c_sp = float(dist[goal[0] * n + goal[1]])
        del graph, dist
        row.update(scipy_build_s=build, scipy_search_s=search, scipy_s=build + search,
                   scipy_c_star=c_sp, rel_dc=abs(c_ours - c_sp) / c_sp,
                   ratio=(build + search) / ours)
    row["host_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, nargs="+", default=[2048, 4096], help="sizes (default 2048 4096)")
    ap.add_argument("--repeats", type=int, default=2, help="warm calls per size (default 2)")
    ap.add_argument("--raster", default="gironde", help="shipped raster tiled (default gironde)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coverage", type=float, default=0.15, help="obstacle coverage (default 0.15)")
    ap.add_argument("--no-scipy", action="store_true", help="time ours only")
    ap.add_argument("--json-out", type=Path, default=None)
    a = ap.parse_args(argv)
    if any(n < 16 for n in a.res) or not (0.0 <= a.coverage <= 0.3):
        ap.error("--res must be >= 16 and --coverage in [0, 0.3]")
    dev = jax.devices()[0]
    doc = {"script": "bench/device/reference_size.py", "argv": sys.argv[1:],
           "machine": platform.processor() or platform.machine(), "jax": jax.__version__,
           "backend": jax.default_backend(), "device_kind": dev.device_kind, "rows": []}
    print(f"# {doc['machine']}, {dev.platform} ({dev.device_kind}); jax {jax.__version__}; "
          f"{OBJECTIVE}, weight {WEIGHT}; scale test (mirrored {a.raster})")
    print("res | sweeps | route steps | ours cold s | ours warm s | SciPy build s | SciPy search s "
          "| SciPy / ours | rel dc* | host peak MiB")
    write_json(a.json_out, doc)
    for n in a.res:
        try:
            row = time_size(n, a)
        except (MemoryError, RuntimeError) as e:  # XLA out of memory, no reachable draw
            row = {"res": n, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{n} | failed: {row['error']}", flush=True)
        else:
            def f(k, fmt=".3g", row=row):
                return "n/a" if row.get(k) is None else format(row[k], fmt)
            print(f"{n} | {row['sweeps']} | {row['route_steps']} | {row['ours_cold_s']:.3g} | "
                  f"{row['ours_s']:.3g} | {f('scipy_build_s')} | {f('scipy_search_s')} | "
                  f"{f('ratio', '.2f')} | {f('rel_dc', '.1e')} | {row['host_peak_rss_mib']:.0f}",
                  flush=True)
        doc["rows"].append(row)
        write_json(a.json_out, doc)
    ok = [r for r in doc["rows"] if "error" not in r]
    if not ok:
        print("reference: nan")
        return 1
    big = max(ok, key=lambda r: r["res"])
    bad = [r["res"] for r in ok if r.get("rel_dc") is not None and not r["rel_dc"] <= 1e-9]
    ratio = big.get("ratio")
    print(f"reference {big['res']}: ours {big['ours_s']:.3g} s, SciPy "
          f"{'n/a' if big.get('scipy_s') is None else format(big['scipy_s'], '.3g')} s, ratio "
          f"{'n/a' if ratio is None else format(ratio, '.2f')}"
          + (f"; c* disagrees with SciPy at {bad}" if bad else ""))
    return 1 if bad or len(ok) < len(doc["rows"]) else 0


if __name__ == "__main__":
    with jax.enable_x64(True):
        raise SystemExit(main())
