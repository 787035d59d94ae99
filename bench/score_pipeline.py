"""Benchmark: ``python -m cli score`` end to end, this code against an earlier commit.

For each N it builds (or reuses) an N-scene 256x256 cohort of the shipped rasters
(``bench/campaign.py``'s builder), runs the exact planner once over it with two
passes (cold + one warm repeat: 2 N records), and then scores copies of that run
folder, side by side in one run:

* ``before``: the code of ``--before`` (a ``git worktree`` of that commit; it has no
  persistent compilation cache);
* ``after``: this checkout, from an empty persistent compilation cache;
* ``after, warm cache``: this checkout again, on a fresh copy, with the cache the
  previous step filled.

Each score is a fresh ``python -m cli score`` process (wall time and exact peak RSS
from ``wait4``). The table gives records/s end to end, the compilations and
compile seconds this checkout records in ``score_receipt.json``, and the warm
throughput of ``score_routes`` alone on the same records (in process, second call,
the peer a user would otherwise call). The outputs of ``before`` and ``after`` are
compared field by field (flags and counts exactly, floats to the last bit).

    python bench/score_pipeline.py                       # N = 2000, 8000
    python bench/score_pipeline.py --quick               # N = 200
    python bench/score_pipeline.py --sizes 500 --before fb0458e --work /tmp/passage_campaign
Last line: ``speedup: <ratio>`` (before's wall time over after's, largest N, empty cache).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import campaign  # noqa: E402  (bench/ on sys.path first)

#: the commit before the compile-once work (issue 22)
BEFORE = "fb0458e"
QUALITY = ("regret", "assd", "h95", "path_iou", "predicted_cost", "oracle_cost", "success",
           "valid_path", "connected_path", "obstacle_violation", "obstacle_traversals", "status",
           "sample_id", "route_length", "malformed")


def worktree(commit: str, work: Path) -> Path:
    """A checkout of ``commit`` (made once under ``work``)."""
    path = work / f"before-{commit}"
    if not (path / "passage_jax").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--force", str(path),
                        commit], check=True, capture_output=True)
    return path


def make_run(root: Path, n: int, case: Path) -> Path:
    """An exact-planner run over the cohort, cold + one warm repeat (one seed)."""
    run = case / "run"
    if (run / "run.json").is_file():
        return run
    shutil.rmtree(run, ignore_errors=True)
    spec = campaign._spec("exact", root, n, resolution=256, seed=1234, warmup=0, repeats=1, out=run)
    m = campaign.measure_command([sys.executable, "-m", "cli", "run", "--spec", spec, "--output", run,
                                  "--no-progress"], case / "run.log")
    if m["rc"] != 0:
        raise SystemExit(f"run failed: see {case / 'run.log'}")
    return run


def score_once(code: Path, run: Path, dest: Path, cache: Path | None) -> dict:
    """``python -m cli score`` of a fresh copy of ``run`` with the code at ``code``."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(run, dest)
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "PASSAGE_JAX_CACHE"))}
    # ``code`` first; the caller's other entries kept (e.g. packages installed with
    # ``pip --target``, as bench/device_check.sh does with the carried wheels), this
    # checkout's own root dropped so that ``before`` imports only its own code
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() not in (REPO, Path(code).resolve())]
    env["PYTHONPATH"] = os.pathsep.join([str(code), *rest])
    if cache is None:
        env["PASSAGE_JAX_NO_COMPILE_CACHE"] = "1"
    else:
        env["PASSAGE_JAX_CACHE_DIR"] = str(cache)
    log = dest.with_suffix(".log")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", campaign._WRAPPER, str(log) + ".m", str(log),
                           sys.executable, "-m", "cli", "score", "--run", str(dest)],
                          cwd=code, env=env, check=True)
    del proc
    res = json.loads(Path(str(log) + ".m").read_text())
    res["outer_s"] = time.perf_counter() - t0
    if res["rc"] != 0:
        raise SystemExit(f"score with {code} failed: see {log}")
    receipt = json.loads((dest / "seed-1234" / "score_receipt.json").read_text())
    res["compilation"] = receipt.get("compilation")
    return res


def compare_outputs(a: Path, b: Path) -> dict:
    """Field by field: exactly equal flags and counts, floats equal or their largest
    relative difference; metrics.json equal outside latency and time fields."""
    pa = np.load(a / "seed-1234" / "per_sample.npz", allow_pickle=False)
    pb = np.load(b / "seed-1234" / "per_sample.npz", allow_pickle=False)
    out = {"unequal_fields": [], "max_rel_diff": 0.0, "n_rows": int(len(pa["regret"]))}
    for k in QUALITY:
        x, y = pa[k], pb[k]
        if x.dtype.kind == "f":
            same = np.array_equal(x, y, equal_nan=True)
            if not same:
                fin = np.isfinite(x) & np.isfinite(y)
                if not np.array_equal(np.isfinite(x), np.isfinite(y)):
                    out["unequal_fields"].append(k)
                    continue
                # relative above 1, absolute below (a regret of 1e-17 against 0 is one ulp of c*)
                scale = np.maximum(np.maximum(np.abs(x[fin]), np.abs(y[fin])), 1.0)
                rel = np.abs(x[fin] - y[fin]) / scale
                out["max_rel_diff"] = max(out["max_rel_diff"], float(rel.max()))
                out.setdefault("last_bit_rows", {})[k] = int(np.sum(x[fin] != y[fin]))
        elif not np.array_equal(x, y):
            out["unequal_fields"].append(k)
    return out


def kernel_throughput(run: Path, limit: int = 128) -> float:
    """Records/s of ``score_routes`` alone (second call) on the run's first records."""
    sys.path.insert(0, str(REPO))
    from passage_jax.evaluate import load_score  # noqa: F401  (same code as the after column)
    from passage_jax.evaluate.score import open_run_tasks, references_from_npz
    from passage_jax.metrics import score_routes
    from passage_jax.protocol.records import PathsReader

    seed = run / "seed-1234"
    manifest = json.loads((seed / "manifest.json").read_text())
    with np.load(seed / "references.npz", allow_pickle=False) as z:
        ref_npz = {k: z[k] for k in z.files}
    refs = references_from_npz(ref_npz, str(seed))
    refs.update(objective=[str(x) for x in ref_npz["objective"]],
                variant=[str(x) for x in ref_npz["variant"]],
                cost_weight=np.asarray(ref_npz["cost_weight"], np.float64),
                input_sha256=[str(x) for x in ref_npz["input_sha256"]])
    tasks, _, _ = open_run_tasks(manifest, refs, str(seed))
    n = min(limit, len(tasks))
    sel = [tasks[i] for i in range(n)]
    routes = PathsReader(seed / "paths.npz").routes_at(np.arange(n))
    args = (routes, sel, refs["c_star"][:n], np.ones(n, bool))
    score_routes(*args, references=refs["routes"][:n])
    t0 = time.perf_counter()
    score_routes(*args, references=refs["routes"][:n])
    return n / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000], metavar="N")
    ap.add_argument("--quick", action="store_true", help="N = 200")
    ap.add_argument("--before", default=BEFORE, help=f"the earlier commit (default {BEFORE})")
    ap.add_argument("--no-before", action="store_true",
                    help="time this checkout only (where no git history is at hand, e.g. a device copy)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/passage_campaign"))
    ap.add_argument("--workers", type=int, default=2, help="cohort builder processes")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args(argv)
    sizes = [200] if args.quick else args.sizes
    print(f"machine: {platform.machine()}, {__import__('os').cpu_count()} CPUs  python "
          f"{platform.python_version()}; before = {args.before}")
    old = None if args.no_before else worktree(args.before, args.work)
    rows = []
    for n in sizes:
        root = Path(campaign.build_cohort(args.work, n, workers=args.workers)["root"])
        case = args.work / "score_pipeline" / f"n{n}"
        case.mkdir(parents=True, exist_ok=True)
        run = make_run(root, n, case)
        cache = case / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        before = None if old is None else score_once(old, run, case / "before", None)
        after = score_once(REPO, run, case / "after", cache)
        warm = score_once(REPO, run, case / "warm", cache)
        same = None if old is None else compare_outputs(case / "before", case / "after")
        rec = 2 * n
        rows.append({"n": n, "records": rec, "before": before, "after": after, "warm": warm,
                     "outputs": same, "score_routes_rps": kernel_throughput(run)})
    print("| N | records | before s | after s (empty cache) | after s (warm cache) | records/s after "
          "| score_routes rec/s | compilations after / warm | compile s after / warm | peak GiB "
          "before / after | outputs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ca, cw = r["after"]["compilation"] or {}, r["warm"]["compilation"] or {}
        o = r["outputs"] or {"unequal_fields": None, "max_rel_diff": None}
        b = r["before"] or {"wall_s": float("nan"), "maxrss_kb": float("nan")}
        same = ("-" if o["unequal_fields"] is None else
                "equal" if not o["unequal_fields"] and not o["max_rel_diff"] else
                f"flags equal, floats within {o['max_rel_diff']:.1e} (rel.)" if not o["unequal_fields"]
                else f"DIFFER: {o['unequal_fields']}")
        print(f"| {r['n']} | {r['records']} | {b['wall_s']:.1f} | {r['after']['wall_s']:.1f} | "
              f"{r['warm']['wall_s']:.1f} | {r['records'] / r['after']['wall_s']:.0f} | "
              f"{r['score_routes_rps']:.0f} | {ca.get('compilations')} / {cw.get('compilations')} "
              f"({cw.get('cache_hits')} from cache) | {ca.get('compile_s')} / {cw.get('compile_s')} | "
              f"{b['maxrss_kb'] / 2**20:.2f} / {r['after']['maxrss_kb'] / 2**20:.2f} | {same} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2, default=str))
    big = rows[-1]
    if big["before"] is None:
        print("speedup: n/a (no earlier code timed)")
    else:
        print(f"speedup: {big['before']['wall_s'] / big['after']['wall_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
