"""Fault injection: misbehaving planners under supervised execution on shipped tasks.

Each fault planner of ``tests/fixtures/fault_planners.py`` (hang forever, sleep past the
deadline, ``os._exit``, SIGSEGV, memory exhaustion, a 100,000-cell looping route,
2**40 as a coordinate, an exception, child processes (plain, in their own session,
a double-forked daemon) left behind by a hang) runs in its own supervised executor
on three shipped 64x64 test tasks; it misbehaves on the middle one only, so the table
shows the fault's status between two ``ok`` tasks served after it (by a fresh
worker where the fault killed one). Exits 1 when any status differs from the
expected one, or when a process a planner started outlives its executor.

    python bench/faults.py                  # every fault
    python bench/faults.py --fault hang     # one (repeatable)
    python bench/faults.py --memory-mb 1500 # the worker cap of the memory fault
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))

import fault_planners as FP  # noqa: E402  (tests/fixtures/ on sys.path first)

from passage_jax.data import load_tasks, shipped_cohort_root  # noqa: E402
from passage_jax.protocol import BudgetSpec  # noqa: E402
from passage_jax.run.execution import SupervisedExecutor  # noqa: E402

#: fault -> (wall_time_ms, extra factory kwargs)
SETTINGS = {
    "hang": (200, {}),
    "sleep": (200, {"sleep_ms": 3000}),
    "exit": (5000, {"code": 3}),
    "segv": (5000, {}),
    "memory": (60_000, {"chunk_mb": 32, "max_mb": 4096}),
    "loop": (5000, {}),
    "huge": (5000, {}),
    "raise": (5000, {}),
    "orphans": (200, {"children": ["plain", "session", "daemon"], "then": "hang"}),
}


def _survivors(pid_dir: str) -> list:
    """The pids listed in ``pid_dir/*.pids`` that still run (not gone, not zombies)."""
    left = []
    for name in sorted(os.listdir(pid_dir)):
        if not name.endswith(".pids"):
            continue
        with open(os.path.join(pid_dir, name)) as f:
            for pid in map(int, f.read().split()):
                try:
                    with open(f"/proc/{pid}/stat") as g:
                        state = g.read().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                if state != "Z":
                    left.append(pid)
    return left


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", action="append", choices=sorted(FP.FAULTS), help="run only these faults")
    ap.add_argument("--memory-mb", type=int, default=1500, help="worker_memory_mb of the memory fault")
    ap.add_argument("--grace-ms", type=float, default=200.0, help="worker_grace_ms")
    args = ap.parse_args(argv)
    tasks = load_tasks(shipped_cohort_root(), 64, "test", "energy", "obstacles", n_samples=3)
    bad = 0
    print(f"{'fault':>7} {'task':>11} {'status':>14} {'expected':>14} {'latency ms':>11} "
          f"{'worker':>7}  detail")
    t_all = time.monotonic()
    for fault in args.fault or list(FP.FAULTS):
        factory, expected_status = FP.FAULTS[fault]
        wall, kw = SETTINGS[fault]
        budget = BudgetSpec(wall_time_ms=wall)
        ids = [tasks[1].id]
        pid_dir = tempfile.mkdtemp(prefix="faults-") if factory == "make_spawner" else None
        if pid_dir:
            kw = {**kw, "pid_dir": pid_dir}
        with SupervisedExecutor(f"fault_planners:{factory}", kwargs={"ids": ids, **kw},
                                grace_ms=args.grace_ms,
                                memory_mb=args.memory_mb if fault == "memory" else None) as ex:
            for t in tasks:
                rec, _ = ex.execute(t, budget)
                want = expected_status if t.id in ids else "ok"
                ok = rec["status"] == want
                bad += not ok
                detail = rec["error"] or rec["problem"] or (f"route of {rec['route_len']} cells"
                                                           if rec["route_len"] else "")
                print(f"{fault:>7} {t.id:>11} {rec['status']:>14} {want:>14} {rec['latency_ms']:>11.1f} "
                      f"{rec['worker']['index']:>7}  {'' if ok else 'UNEXPECTED '}{str(detail)[:90]}")
        if pid_dir:
            time.sleep(0.2)
            left = _survivors(pid_dir)
            shutil.rmtree(pid_dir, ignore_errors=True)
            bad += len(left)
            print(f"{fault:>7} {'':>11} {'':>14} {'':>14} {'':>11} {'':>7}  "
                  f"{'UNEXPECTED ' + str(left) + ' still running' if left else 'no process left behind'}")
    print(f"{bad} unexpected outcome(s); {time.monotonic() - t_all:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
