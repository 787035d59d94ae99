"""Exact references at one size against SciPy, as one JSON document (the device check's
first part, ``bash bench/device_check.sh references``).

``bench/reference.py`` times every size from 64 to 1024 and prints a table; the open
target (issue 3: value iteration at 256², batch >= 256, >= 100x SciPy's single-core
throughput) needs one size only, more batches and a repeated timing. This script uses
``bench/reference.py``'s own material and peers (``cohort_items``/``raster_items``,
``run_scipy``, ``run_mcp``) and times ``solve_batch`` itself: one untimed call (it
compiles; its seconds are kept as ``first_call_s``), then ``--repeats`` timed calls
(median and best). Rows: ``--batches`` with the sweep strategy in float64, then the
double-float path (float32 pairs, x64 off) at ``--double-float`` batches and plain
Jacobi at ``--jacobi`` batches. Each row's c* is compared with SciPy's Dijkstra on the
peer tasks it holds. The document is rewritten after every row (a run stopped part way
keeps what it measured)::

    python bench/device/references.py --json-out /tmp/references.json          # device sizes
    python bench/device/references.py --batches 1 16 --peer 8 --double-float 16 --jacobi 16
Last line: ``speedup: <sweep float64 scenes/s at the largest batch / SciPy+build scenes/s>``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import reference as ref  # noqa: E402  (bench/reference.py)

from passage_jax.reference import solve_batch  # noqa: E402


def write_json(path: Path | None, doc: dict) -> None:
    """``doc`` written to ``path`` (None: nowhere) through a temporary file and a rename."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def time_rows(items, b: int, strategy: str, precision: str, repeats: int) -> dict:
    """One row: first call (compiles), then ``repeats`` timed calls of ``b`` tasks."""
    args = ref._batch_args(items, b)
    t0 = time.perf_counter()
    solve_batch(*args, strategy=strategy, precision=precision)
    first = time.perf_counter() - t0
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = solve_batch(*args, strategy=strategy, precision=precision)
        times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    return {"batch": b, "strategy": strategy, "precision": precision, "first_call_s": first,
            "times_s": times, "sps_median": b / med, "sps_best": b / min(times),
            "sweeps_median": int(np.median(res.sweeps)), "sweeps_max": int(res.sweeps.max()),
            "converged": bool(np.all(res.converged))}, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--res", type=int, default=256)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 256, 1024],
                    help="sweep-strategy float64 batches (default 1 16 256 1024)")
    ap.add_argument("--double-float", type=int, nargs="*", default=[256, 1024],
                    help="double-float batches (default 256 1024; none: no rows)")
    ap.add_argument("--jacobi", type=int, nargs="*", default=[16, 256],
                    help="plain-Jacobi float64 batches (default 16 256)")
    ap.add_argument("--peer", type=int, default=32, help="tasks timed with SciPy (default 32)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per row (default 3)")
    ap.add_argument("--json-out", type=Path, default=None)
    a = ap.parse_args(argv)
    dev = jax.devices()[0]
    doc = {"script": "bench/device/references.py", "argv": sys.argv[1:],
           "machine": platform.processor() or platform.machine(), "jax": jax.__version__,
           "backend": jax.default_backend(), "device_kind": dev.device_kind,
           "devices": len(jax.devices()), "res": a.res, "rows": []}
    print(f"# {doc['machine']}, {doc['devices']} {dev.platform} device(s) ({dev.device_kind}); "
          f"jax {jax.__version__}; {a.res}x{a.res}")
    try:
        items, source = ref.cohort_items(a.res, max(a.peer, 16)), "cohort"
    except Exception:  # noqa: BLE001  (no cohort at this size: crops of the rasters)
        items = []
    if not items:
        items, source = ref.raster_items(a.res, max(a.peer, 16)), "raster crops"
    if not items:
        print(f"no terrain at {a.res}x{a.res}")
        print("speedup: nan")
        return 1
    peer = items[:a.peer]
    sp_build, sp_solve, sp_c = ref.run_scipy(peer)
    mcp, _ = ref.run_mcp(peer)
    sp_c = np.asarray(sp_c)
    doc.update(source=source, tasks=len(items),
               peer={"n": len(peer), "scipy_build_sps": sp_build, "scipy_sps": sp_solve,
                     "mcp_sps": mcp})
    print(f"source {source}, {len(items)} tasks; SciPy+build {sp_build:.2f} sc/s, SciPy "
          f"{sp_solve:.2f} sc/s, MCP {'n/a' if mcp is None else f'{mcp:.2f}'} sc/s ({len(peer)} tasks)")
    print("batch | strategy | precision | sc/s median | sc/s best | first call s | sweeps med/max "
          "| max rel dc* | x SciPy+build")
    write_json(a.json_out, doc)
    plan = ([(b, "sweep", "float64") for b in a.batches]
            + [(b, "sweep", "double_float") for b in a.double_float or []]
            + [(b, "jacobi", "float64") for b in a.jacobi or []])
    for b, strategy, precision in plan:
        try:
            row, res = time_rows(items, b, strategy, precision, a.repeats)
        except (MemoryError, RuntimeError) as e:  # XLA out of memory
            row = {"batch": b, "strategy": strategy, "precision": precision,
                   "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{b} | {strategy} | {precision} | failed: {row['error']}")
        else:
            k = min(len(peer), b)
            row["max_rel_dc"] = float(np.max(np.abs(res.c_star[:k] - sp_c[:k]) / sp_c[:k]))
            row["compared"] = k
            row["x_scipy_build"] = row["sps_median"] / sp_build
            print(f"{b} | {strategy} | {precision} | {row['sps_median']:.2f} | {row['sps_best']:.2f} | "
                  f"{row['first_call_s']:.2f} | {row['sweeps_median']}/{row['sweeps_max']} | "
                  f"{row['max_rel_dc']:.2e} | {row['x_scipy_build']:.2f}")
        doc["rows"].append(row)
        write_json(a.json_out, doc)
    main_rows = [r for r in doc["rows"] if r["strategy"] == "sweep" and r["precision"] == "float64"
                 and "error" not in r]
    if not main_rows:
        print("speedup: nan")
        return 1
    best = max(main_rows, key=lambda r: r["batch"])
    doc["speedup"] = best["x_scipy_build"]
    doc["speedup_batch"] = best["batch"]
    doc["max_rel_dc_all"] = max(r.get("max_rel_dc", 0.0) for r in doc["rows"])
    write_json(a.json_out, doc)
    print(f"speedup: {doc['speedup']:.3f} (batch {best['batch']}; target >= 100 on one H200)")
    return 0


if __name__ == "__main__":
    with jax.enable_x64(True):
        raise SystemExit(main())
