"""Benchmark: wall time of ``audit`` (reference qualification) and ``score`` launched as
1 process and as 2 processes (``--coordinator 127.0.0.1:<port>``) on this machine.

Material: a copy of the shipped cohort's test split at one resolution (24 scenes;
``audit`` qualifies their 6 x 24 reference tasks), and a run of the exact planner on
its tasks, scored again with ``--force --chunk 6`` by each launch (whole chunks are shared
out: 4 chunks of 6 scenes). Every launch is a fresh set of
``python -m cli`` processes, so the figures include start-up (importing JAX, joining
the runtime: a second or two). The outputs of the 2-process launches are checked to
equal the single-process ones (audit JSON and per_sample.npz byte for byte).
The load average before and after is printed: other work on the machine slows both.

    python bench/distributed.py            # 256 x 256
    python bench/distributed.py --quick    # 128 x 128
Last line: ``speedup: audit <t1/t2>, score <t1/t2>``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list, n: int, out_of=None) -> float:
    """Wall seconds of ``python -m cli <args>`` as ``n`` processes (1: no launch flags)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    port = _free_port()
    t0 = time.perf_counter()
    procs = []
    for i in range(n):
        flags = [] if n == 1 else ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(n),
                                   "--process-id", str(i)]
        procs.append(subprocess.Popen([sys.executable, "-m", "cli", *args, *flags], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate()[0] for p in procs]
    dt = time.perf_counter() - t0
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise SystemExit(f"launch {args[0]} x{n} failed: {bad}\n{outs[bad[0][0]][-2000:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="128 x 128 instead of 256 x 256")
    ap.add_argument("--repeats", type=int, default=2, help="launches per setting (best kept)")
    a = ap.parse_args()
    res = 128 if a.quick else 256

    sys.path.insert(0, str(ROOT))
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415 (after sys.path)
    from passage_jax.run import parse_spec, run_spec  # noqa: PLC0415 (after sys.path)

    load0 = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="passage-dist-bench-"))
    try:
        src = shipped_cohort_root() / f"{res}x{res}" / "test"
        (tmp / "cohort" / f"{res}x{res}").mkdir(parents=True)
        shutil.copytree(src, tmp / "cohort" / f"{res}x{res}" / "test")
        spec = {"method_name": "exact", "inference": "passage_jax.planners.exact:make_planner",
                "resolution": res, "cost_model": "energy", "split": "test",
                "task_variant": "obstacles", "n_samples": 24, "seeds": [1234],
                "dataset_path": str(tmp / "cohort"), "latency_warmup": 0, "latency_repeats": 1,
                "quality_repeat_index": 0}
        run_spec(parse_spec(spec), tmp / "run", progress=False)
        n_tasks = json.loads((tmp / "run" / "seed-1234" / "manifest.json").read_text())["n_records"]

        audit = ["audit", "--dataset-path", str(tmp / "cohort"), "--resolution", str(res),
                 "--split", "test", "--workers", "2", "--json"]
        # 4 chunks of 6 scenes (the default chunk, 64 scenes at 256², would leave process 1 idle)
        score = ["score", "--run", str(tmp / "run"), "--force", "--chunk", "6"]
        times: dict = {}
        for n in (1, 2):
            for name, args in (("audit", audit + [str(tmp / f"audit-{n}.json")]), ("score", score)):
                best = min(launch(args, n) for _ in range(a.repeats))
                times[(name, n)] = best
            shutil.copy2(tmp / "run" / "seed-1234" / "per_sample.npz", tmp / f"per_sample-{n}.npz")
        same_audit = (tmp / "audit-1.json").read_bytes() == (tmp / "audit-2.json").read_bytes()
        same_score = (tmp / "per_sample-1.npz").read_bytes() == (tmp / "per_sample-2.npz").read_bytes()
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{res}x{res} test split: 24 scenes (audit: {6 * 24} reference tasks), "
          f"score: {n_tasks} records; cores: {os.cpu_count()}; best of {a.repeats} launches; "
          f"load average before {load0[0]:.2f} / after {load1[0]:.2f}")
    print("| command | 1 process (s) | 2 processes (s) | speed-up | outputs equal |")
    print("|---|---|---|---|---|")
    for name, same in (("audit", same_audit), ("score", same_score)):
        t1, t2 = times[(name, 1)], times[(name, 2)]
        print(f"| {name} | {t1:.2f} | {t2:.2f} | {t1 / t2:.2f} | {same} |")
    if not (same_audit and same_score):
        raise SystemExit("the 2-process outputs differ from the single-process ones")
    print(f"speedup: audit {times[('audit', 1)] / times[('audit', 2)]:.2f}, "
          f"score {times[('score', 1)] / times[('score', 2)]:.2f}")


if __name__ == "__main__":
    main()
