"""Benchmark: the learned request in ``python -m cli run`` beside ``bench/learned.py``.

The same spec family, scenes and seed both ways, each in a fresh process: the
benchmark's ``ms med`` (wall time of ``plan`` per warm request) for the learned
composition and plain A*, and the median ``latency_ms`` of the warm pass of
``python -m cli run`` for the learned spec and ``configs/bounded.yaml`` (at the same
resolution and cost model), cut to that seed and those scenes. With ``--busy`` the
whole comparison runs again with one other process spinning on the machine (``python -c
"while True: pass"``), as a shared machine has it. Prints one row per machine state:
run / bench and learned / A* in the run, the ratios the project's targets are set on;
each run's ``cpu`` block (model, thread variables) says what served it.

    python bench/learned_in_run.py                       # learned256_exact_fallback, 24 scenes
    python bench/learned_in_run.py --busy --json-out learned_in_run.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from passage_jax.fileio import atomic_write_json, read_document  # noqa: E402

#: ``bench/learned.py``'s row name of each learned composition
ROWS = {"exact_fallback": "learned_exact_fallback", "direct": "learned_direct",
        "bounded_repair": "learned_bounded_repair", "prediction_free": "learned_prediction_free"}


def _spec(name: str, folder: Path, n: int, seed: int, resolution: int, cost_model: str) -> Path:
    """configs/<name>.yaml cut to ``n`` scenes and ``seed`` (its checkpoint kept), at the
    learned spec's resolution and cost model."""
    spec = read_document(REPO / "configs" / f"{name}.yaml", ValueError, "spec", yaml_allowed=True)
    spec.update({"n_samples": n, "seeds": [seed], "resolution": resolution,
                 "cost_model": cost_model, "results_root": str(folder)})
    by_seed = spec.get("inference_kwargs_by_seed")
    if by_seed:
        spec["inference_kwargs_by_seed"] = {seed: by_seed[seed]}
    path = folder / f"{name}.json"
    atomic_write_json(path, spec)
    return path


def _run_median(spec: Path, out: Path, seed: int) -> tuple[float, dict]:
    """Run the spec; the warm pass's median latency and the seed manifest's ``cpu``."""
    subprocess.run([sys.executable, "-m", "cli", "run", "--spec", str(spec), "--output", str(out),
                    "--no-progress"], check=True, cwd=REPO, capture_output=True)
    folder = out / f"seed-{seed}"
    recs = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    warm = [r["latency_ms"] for r in recs if r["series"] == "warm"]
    cpu = json.loads((folder / "manifest.json").read_text()).get("cpu")
    return float(np.median(warm)), cpu


def _bench_medians(family: str, composition: str, n: int, seed: int, resolution: int) -> dict:
    """bench/learned.py's ``ms med`` of the composition and of plain A*."""
    p = subprocess.run([sys.executable, str(REPO / "bench" / "learned.py"), "--specs", family,
                        "--resolution", str(resolution), "--n", str(n), "--seeds", str(seed)],
                       check=True, cwd=REPO, capture_output=True, text=True)
    found = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in (ROWS[composition], "astar") and parts[0] not in found:
            if re.fullmatch(r"[\d.]+", parts[-1]):
                found[parts[0]] = float(parts[-1])
    return {"learned": found[ROWS[composition]], "astar": found["astar"]}


def compare(family: str, composition: str, n: int, seed: int, work: Path) -> dict:
    learned = read_document(REPO / "configs" / f"{family}_{composition}.yaml", ValueError, "spec",
                            yaml_allowed=True)
    res, cost = learned["resolution"], learned["cost_model"]
    bench = _bench_medians(family, composition, n, seed, res)
    specs = {k: _spec(name, work, n, seed, res, cost)
             for k, name in (("learned", f"{family}_{composition}"), ("astar", "bounded"))}
    run, cpu = {}, None
    for k, spec in specs.items():
        out = work / f"run-{k}"
        shutil.rmtree(out, ignore_errors=True)
        run[k], cpu = _run_median(spec, out, seed)
    return {"bench_ms": bench, "run_ms": run, "run_over_bench": run["learned"] / bench["learned"],
            "learned_over_astar_in_run": run["learned"] / run["astar"], "cpu": cpu}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="learned256", help="spec family (configs/<family>_*.yaml)")
    ap.add_argument("--composition", default="exact_fallback", choices=sorted(ROWS))
    ap.add_argument("--n", type=int, default=24, help="scenes (default 24)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--busy", action="store_true", help="also with one other process spinning")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; {args.family}_{args.composition}, {args.n} scenes, "
          f"seed {args.seed}")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="learned-in-run-") as tmp:
        rows["idle"] = compare(args.family, args.composition, args.n, args.seed, Path(tmp))
        if args.busy:
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                rows["busy"] = compare(args.family, args.composition, args.n, args.seed, Path(tmp))
            finally:
                spinner.kill()
                spinner.wait()
    print("\n| machine | bench learned ms | run learned ms | run / bench | bench A* ms | run bounded A* ms "
          "| learned / A* in run |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for state, r in rows.items():
        print(f"| {state} | {r['bench_ms']['learned']:.1f} | {r['run_ms']['learned']:.1f} | "
              f"{r['run_over_bench']:.2f} | {r['bench_ms']['astar']:.1f} | {r['run_ms']['astar']:.1f} | "
              f"{r['learned_over_astar_in_run']:.2f} |")
    cpu = rows["idle"]["cpu"] or {}
    print(f"cpu: {cpu.get('model')}, {cpu.get('usable_cpus')} usable; thread variables "
          f"{ {k: v for k, v in (cpu.get('thread_variables') or {}).items() if v is not None} }")
    if args.json_out:
        atomic_write_json(args.json_out, {"family": args.family, "composition": args.composition,
                                          "n": args.n, "seed": args.seed, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
