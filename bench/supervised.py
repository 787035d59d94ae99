"""Benchmark: the cost of supervised execution per request (IPC to a worker process).

Ours: ``SupervisedExecutor`` (the planner in a spawned worker; the parent times the
request including sending the task and receiving the route snapshot). Peer: the
in-process executor (``run.timing.execute`` in this process), the boundary a user
gets without supervision. Same planner (the breadth-first baseline), same shipped
tasks, same budget, interleaved request by request after one untimed warm-up pass
each; the routes of both are checked to be identical. A second planner that answers
at once (no route) isolates the transport: its supervised overhead is the IPC alone.

    python bench/supervised.py            # 24 tasks at 64x64 and 256x256, 5 repeats
    python bench/supervised.py --quick    # 8 tasks per size, 2 repeats (well under a minute)

The last line is ``speedup: <in-process time / supervised time>`` summed over every
baseline request (below 1: supervision costs that factor in request latency).
"""
from __future__ import annotations

import argparse
import pickle
import platform
from pathlib import Path

import numpy as np

from passage_jax.data import load_tasks, shipped_cohort_root
from passage_jax.protocol import BudgetSpec
from passage_jax.run.execution import InProcessExecutor, SupervisedExecutor, task_payload

ENTRY = "passage_jax.planners.bfs:make_planner"
#: this file as a module of the worker's sys.path (the script's folder is sys.path[0])
INSTANT = f"{Path(__file__).stem}:instant_plan"


def instant_plan(request):
    """Answers at once without a route: the request cost is input preparation and transport."""
    return {"path": None, "status": "no_path"}


def run(entry, resolutions, n_tasks, repeats):
    budget = BudgetSpec(wall_time_ms=60_000)
    rows, tot_ip, tot_sv = [], 0.0, 0.0
    with SupervisedExecutor(entry, warmup=1) as sv:
        start_ms = sv.construction_ms
        ip = InProcessExecutor(entry)
        for n in resolutions:
            tasks = load_tasks(shipped_cohort_root(), n, "test", "energy", "obstacles", n_samples=n_tasks)
            for t in tasks:  # untimed warm-up pass for both
                ip.execute(t, budget)
                sv.execute(t, budget)
            lat_ip, lat_sv = [], []
            for _ in range(repeats):
                for t in tasks:
                    a, sa = ip.execute(t, budget)
                    b, sb = sv.execute(t, budget)
                    if a["status"] != b["status"] or not np.array_equal(sa[1], sb[1]):
                        raise SystemExit(f"{t.id}: supervised and in-process records differ")
                    lat_ip.append(a["latency_ms"])
                    lat_sv.append(b["latency_ms"])
            payload = len(pickle.dumps(task_payload(tasks[0]), protocol=pickle.HIGHEST_PROTOCOL))
            mi, ms = float(np.median(lat_ip)), float(np.median(lat_sv))
            diffs = np.asarray(lat_sv) - np.asarray(lat_ip)
            rows.append((entry.split(":")[-1], n, len(lat_ip), mi, ms, float(np.median(diffs)), ms / mi,
                         payload))
            tot_ip += sum(lat_ip)
            tot_sv += sum(lat_sv)
        stats = dict(sv.stats)
    return rows, tot_ip, tot_sv, start_ms, stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n_tasks, repeats = (8, 2) if args.quick else (24, 5)
    rows, tot_ip, tot_sv, start_ms, stats = run(ENTRY, (64, 256), n_tasks, repeats)
    rows += run(INSTANT, (64, 256), n_tasks, repeats)[0]
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    print(f"first worker ready after {start_ms:.0f} ms (spawn, imports, building the planner; untimed)")
    print(f"{'planner':>13} {'N':>4} {'requests':>8} {'in-process ms':>13} {'supervised ms':>13} "
          f"{'overhead ms':>11} {'sup/in':>7} {'task bytes':>10}")
    for name, n, k, a, b, d, r, p in rows:
        print(f"{name:>13} {n:>4} {k:>8} {a:>13.3f} {b:>13.3f} {d:>11.3f} {r:>7.2f} {p:>10,}")
    print("(medians per request; overhead = median of supervised - in-process, same task and repeat)")
    print(f"worker stats (baseline): {({k: v for k, v in stats.items() if k != 'worker_start_ms'})}")
    print(f"baseline total: in-process {tot_ip:.1f} ms, supervised {tot_sv:.1f} ms")
    print(f"speedup: {tot_ip / tot_sv:.3f}")


if __name__ == "__main__":
    main()
