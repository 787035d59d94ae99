"""The batched procedure at the paper's test-split size on a device: the learned
``plan_batch`` (configs/learned256_direct_batched.yaml's planner) and the exact planner's
over 40,000 scenes of 256x256, timed batch by batch as ``batched_v1`` times them.

The 40,000 scenes are the shipped 256x256 test cohort's 24 replicated in roster order (a
timing cohort: each scene's route is the same however often it recurs; the quality of the
24 is checked once against the batch-one planner). Only the few distinct batches the
replication gives are built on the host (a batch of B scenes recurs every lcm(24, B) / B
batches); each timed call puts its batch in device memory before the clock starts and
stops it when every route is on the host.

    python bench/device/batched_40k.py                        # 40,000 scenes, batches of 64 and 256
    python bench/device/batched_40k.py --scenes 512 --batch-sizes 8 64 --json-out x.json

Last line: ``batched <planner> <B>: <scenes/s> scenes/s, <s> for <N> scenes`` for the learned
planner at the largest batch size.
"""
from __future__ import annotations

import argparse
import math
import platform
import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import batched as bench  # noqa: E402  (bench/batched.py)
from references import write_json  # noqa: E402  (bench/device/references.py, beside this file)

from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.planners.exact import ExactPlanner  # noqa: E402
from passage_jax.protocol.batch import batch_of, scene_routes  # noqa: E402


def time_replicated(planner, tasks: list, n_scenes: int, batch_size: int, warmup: int) -> dict:
    """``n_scenes`` scenes cycling through ``tasks`` in roster order, ``batch_size`` at a time
    through ``planner.plan_batch``: per batch ms, total, scenes/s; and each distinct task's
    (status, route) from the first batches holding it."""
    period = math.lcm(len(tasks), batch_size) // batch_size
    n_batches = math.ceil(n_scenes / batch_size)
    distinct = {}
    for k in range(min(period, n_batches)):
        first = k * batch_size
        live = min(batch_size, n_scenes - first)
        distinct[k] = batch_of([tasks[(first + i) % len(tasks)] for i in range(live)], batch_size)
    last_live = n_scenes - (n_batches - 1) * batch_size
    if last_live != batch_size:  # the last, padded batch
        first = (n_batches - 1) * batch_size
        distinct["last"] = batch_of([tasks[(first + i) % len(tasks)] for i in range(last_live)], batch_size)
    for i in range(warmup):
        jax.device_get(planner.plan_batch(bench._on_device(distinct[i % min(period, n_batches)])))
    ms, routes = [], {}
    for k in range(n_batches):
        key = "last" if k == n_batches - 1 and "last" in distinct else k % period
        dev = bench._on_device(distinct[key])
        t0 = time.perf_counter()
        out = jax.device_get(jax.block_until_ready(planner.plan_batch(dev)))
        ms.append((time.perf_counter() - t0) * 1e3)
        if len(routes) < len(tasks):
            live = int(np.sum(distinct[key].live))
            for i, (status, route, problem) in enumerate(scene_routes(out, live)):
                if problem is not None:
                    raise SystemExit(f"plan_batch returned a bad entry: {problem}")
                routes.setdefault((k * batch_size + i) % len(tasks), (status, route))
    ms = np.asarray(ms)
    total = float(ms.sum()) / 1e3
    return {"batch_size": batch_size, "n_scenes": n_scenes, "n_batches": n_batches,
            "distinct_batches": len(distinct), "batch_ms_p50": float(np.median(ms)),
            "batch_ms_p95": float(np.percentile(ms, 95)), "total_s": total,
            "per_scene_ms": total * 1e3 / n_scenes, "scenes_per_s": n_scenes / total,
            "routes": routes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=40_000, help="scenes in all (default 40,000)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--seed", type=int, default=1234, help="the shipped checkpoint's seed")
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches first")
    ap.add_argument("--no-exact", action="store_true", help="the learned planner only")
    ap.add_argument("--json-out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.scenes < 1 or min(a.batch_sizes) < 1:
        ap.error("--scenes and --batch-sizes must be positive")
    print(bench.machine_line(), flush=True)
    tasks = bench.load_learned_tasks(shipped_cohort_root(), 256, "test", None)
    planners = {"learned": bench.learned_planner(a.seed)}
    if not a.no_exact:
        planners["exact"] = ExactPlanner()
    doc = {"script": "bench/device/batched_40k.py", "argv": sys.argv[1:], "machine": platform.machine(),
           "jax": jax.__version__, "backend": jax.default_backend(),
           "devices": [str(d) for d in jax.devices()], "n_distinct_scenes": len(tasks), "rows": []}
    ones = {}
    print(f"{len(tasks)} distinct 256x256 scenes replicated to {a.scenes}")
    print("| planner | batch | batches | batch p50 ms | batch p95 ms | total s | ms / scene | scenes / s | "
          "routes = batch-one |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, planner in planners.items():
        ones[name] = [(r.status, r.path) for r in (_plan(planner, t) for t in tasks)]
        for b in a.batch_sizes:
            row = time_replicated(planner, tasks, a.scenes, b, a.warmup)
            got = [row["routes"][i] for i in range(len(tasks)) if i in row["routes"]]
            same = len(got) == len(tasks) and not bench.same_routes(got, ones[name])
            row.pop("routes")
            row.update(planner=name, routes_equal_batch_one=same)
            doc["rows"].append(row)
            write_json(a.json_out, doc)
            print(f"| {name} | {b} | {row['n_batches']} | {row['batch_ms_p50']:.2f} | "
                  f"{row['batch_ms_p95']:.2f} | {row['total_s']:.2f} | {row['per_scene_ms']:.3f} | "
                  f"{row['scenes_per_s']:.1f} | {'yes' if same else 'NO'} |", flush=True)
    doc["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    write_json(a.json_out, doc)
    best = max((r for r in doc["rows"] if r["planner"] == "learned"), key=lambda r: r["batch_size"])
    print(f"peak RSS {doc['peak_rss_mib']:.0f} MiB")
    print(f"batched learned {best['batch_size']}: {best['scenes_per_s']:.1f} scenes/s, "
          f"{best['total_s']:.2f} s for {best['n_scenes']} scenes")
    return 0 if all(r["routes_equal_batch_one"] for r in doc["rows"]) else 1


def _plan(planner, task):
    """The batch-one planner's result for ``task`` (its request as the runner builds it)."""
    from passage_jax.protocol.requests import build_request

    return planner.plan(build_request(task))


if __name__ == "__main__":
    raise SystemExit(main())
