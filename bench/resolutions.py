"""Benchmark: every release resolution, 64² to 4,096²: audit, run, score and one exact reference.

The PASSAGE release has seven resolutions (64² to 4,096²). For each size of ``--sizes``
this script builds (or reuses) a K-scene test cohort at that size with
``bench/campaign.py``'s builder (crops of the shipped rasters labelled by SciPy's
Dijkstra; cached under ``--work``) plus a one-scene validation split (the session's
warm-up scene), and measures, each in a fresh process started through
``campaign.measure_command`` (wall time and the exact peak RSS from ``wait4``):

* ``cohort``: building the cohort and its validation scene (this script in a child
  process, ``--build-cohort``; a cached cohort is reused in seconds, and the seconds its
  build took, kept in its record, are printed beside);
* ``reference``: one exact reference in process (this script in a child process,
  ``--time-reference``): the project's float64 value iteration
  (``passage_jax.reference.solve_batch`` with its route, the solver of the exact
  planner and of admission's qualification) on the first test scene's task
  (energy, obstacles), once cold (compiles) and ``--reference-repeats`` times warm,
  against SciPy's ``csgraph.dijkstra`` on the same task (graph build included, timed
  apart); c* compared, the ratio printed (SciPy's time over ours, warm);
* ``audit``: ``python -m cli audit`` of the test split (validation, census and
  reference qualification: value iteration with the A* cross-check);
* ``run_exact``: ``python -m cli run`` of configs/exact.yaml over the K scenes, one
  seed, ``latency_warmup 0``, ``latency_repeats 1`` (a cold and a timed call a task);
  its admission qualifies the references;
* ``run_greedy``: configs/greedy.yaml under the paper's session timing profile
  (``native_raw_path_persistent_v1``, ``--session-warmup`` untimed calls on the
  validation scene, then one timed request a task), the exact run's references
  (``references_from``), as ``bench/campaign_session.py`` runs it;
* ``score_exact``, ``score_greedy``: ``python -m cli score`` of each run.

Per size it prints one row: the reference's time (ours warm, SciPy with its graph
build, their ratio), the planners' time per request (median ``latency_ms`` of the
timed, ``warm``, calls in ``requests.jsonl``), ``score``'s wall time per scored record
(the whole command over its records: with few records, the process's start and
compilations, about 2 s on a 2-core CPU, dominate it), the audit's wall time per
scene, and each command's wall time and peak RSS (MiB). Then a scaling line per
figure (and per command's wall time and peak RSS), ``a + b * cells`` fitted by least
squares over the measured sizes, with the log-log slope beside it (``value ~
cells**slope``: 1 is linear in the cells) and, for the release sizes above the largest
measured one, the line's value there: a projection, never below the largest
measurement, and said so (super-linear parts, Dijkstra's heap, A*, are under-projected).

Cohorts at 2,048² and 4,096²: no shipped raster is that large (the largest, gironde,
is 1142x1093), so the builder cuts windows of mirrored tilings of the rasters
(``build_cohort(..., mirror=True)``; ``bench/campaign.py``'s docstring). Such a cohort
is a *scale test*: its folder ends in ``-scale``, its record and every scene's
``metadata.source.scale_test`` say so, and the rows measured on it are marked
``scale test`` here. They measure time and memory only; their scores are not results.
Shards hold at most ``max(1, 2**26 // cells)`` scenes (capped at 64: 16 at 2,048², 4 at
4,096²); from 2,048² on the cohort is built in one process (``--workers`` below).

    python bench/resolutions.py                                   # 64 .. 4096, 4 scenes (2 at 4096)
    python bench/resolutions.py --quick                           # 64, 128; 2 scenes (< 1 minute)
    python bench/resolutions.py --sizes 64 128 256 512 1024 --scenes 2 --json-out res.json
Last line: ``resolutions: <sizes> measured; largest peak RSS <MiB> MiB (<command> at <N>²)``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import campaign  # noqa: E402  (bench/ on sys.path first)

from passage_jax.fileio import atomic_write_json, read_document  # noqa: E402

SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
PROFILE = "native_raw_path_persistent_v1"
STEPS = ("cohort", "reference", "audit", "run_exact", "run_greedy", "score_exact", "score_greedy")
#: the task timed by the reference row: the runs' own (configs/exact.yaml)
OBJECTIVE, VARIANT = "energy", "obstacles"
#: grid cells a shard holds at most (and never more than 64 scenes): 4 scenes at 4,096²
#: (a 4,096² tensor compresses to about 10 MB; the scenes of a shard share a crop's graphs)
SHARD_CELLS = 1 << 26
#: from this many cells a scene (2,048²) the cohort is built in one process
BIG_CELLS = 1 << 22


def default_scenes(n: int) -> int:
    """Scenes of a size when ``--scenes`` is not given: 4, and 2 at 4,096² and above."""
    return 2 if n >= 4096 else 4


def rows_per_shard(n: int) -> int:
    """Scenes per shard at ``n``²: ``SHARD_CELLS // n**2``, between 1 and 64."""
    return max(1, min(64, SHARD_CELLS // (n * n)))


def add_validation(root: Path, n: int, seed: int, mirror: bool) -> None:
    """A one-scene validation split in the cohort root (the session's warm-up scene),
    built once; mirrored like the cohort where it is a scale test. Its labels are not
    relabelled by the shipped maker's own path (``check=False``: the warm-up scene is
    never scored, and at 4,096² that check is six more graphs and searches)."""
    folder = root / f"{n}x{n}" / "validation"
    if (folder / "part-00000.parquet").is_file():
        return
    partial = folder.with_name("validation.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    campaign.build_shard(partial, 0, 0, 1, n=n, split="validation", seed=seed, mirror=mirror,
                         check=False)
    partial.rename(folder)


def fit_power(cells, seconds) -> tuple[float, float] | None:
    """``(c, b)`` of ``seconds ~ c * cells**b`` (least squares on log-log axes), or None
    with fewer than two positive points."""
    pts = [(x, y) for x, y in zip(cells, seconds) if y is not None and y > 0 and x > 0]
    if len(pts) < 2:
        return None
    lx = np.log([p[0] for p in pts])
    ly = np.log([p[1] for p in pts])
    b, a = np.polyfit(lx, ly, 1)
    return float(math.exp(a)), float(b)


# --------------------------------------------------------------------------- #
# One reference, in process (run in a child: --time-reference)
# --------------------------------------------------------------------------- #

def time_reference(root: Path, n: int, repeats: int) -> dict:
    """The first test scene's (energy, obstacles) task: value iteration (cold, then
    ``repeats`` warm calls) and SciPy's Dijkstra (graph build and search timed apart)."""
    import jax  # noqa: PLC0415
    import scipy.sparse.csgraph  # noqa: PLC0415

    from passage_jax.data import load_scenes  # noqa: PLC0415
    from passage_jax.reference import scipy_task_graph, solve_batch  # noqa: PLC0415

    scene = load_scenes(root, n, "test", n_samples=1)[0]
    task = scene.task(OBJECTIVE, VARIANT)
    z, obst = np.asarray(task.elevation_m, np.float64), np.asarray(task.obstacles, bool)
    start, goal = tuple(scene.start), tuple(scene.goal)
    args = (z[None], obst[None], [start], [goal], [OBJECTIVE], [task.weight])
    t0 = time.perf_counter()
    res = solve_batch(*args, routes=True, precision="float64")
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = solve_batch(*args, routes=True, precision="float64")
        warm.append(time.perf_counter() - t0)
    ours_c = float(res.c_star[0])
    route = res.routes[0]
    del res
    t0 = time.perf_counter()
    graph = scipy_task_graph(z, obst, OBJECTIVE, task.weight)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist = scipy.sparse.csgraph.dijkstra(graph, directed=True, indices=start[0] * n + start[1])
    search = time.perf_counter() - t0
    sp_c = float(dist[goal[0] * n + goal[1]])
    ours = statistics.median(warm) if warm else cold
    return {"scene": scene.id, "task": f"{OBJECTIVE}/{VARIANT}", "backend": jax.default_backend(),
            "ours_cold_s": cold, "ours_warm_s": warm, "ours_s": ours,
            "route_steps": None if route is None else int(len(route) - 1),
            "scipy_build_s": build, "scipy_search_s": search, "scipy_s": build + search,
            "ratio": (build + search) / ours, "c_star": ours_c, "scipy_c_star": sp_c,
            "rel_dc": abs(ours_c - sp_c) / sp_c,
            "released_c_star": scene.metadata.get("c_star", {}).get(f"{OBJECTIVE}/{VARIANT}")}


# --------------------------------------------------------------------------- #
# The commands of one size
# --------------------------------------------------------------------------- #

def write_spec(model: str, root: Path, n: int, scenes: int, out: Path, seed: int, **keys) -> Path:
    """configs/<model>.yaml over the cohort: ``scenes`` test scenes, one ``seed``, ``keys``
    on top (a session profile drops the per-task series keys)."""
    spec = read_document(REPO / "configs" / f"{model}.yaml", ValueError, "spec", yaml_allowed=True)
    if keys.get("timing_profile"):
        for k in ("latency_warmup", "latency_repeats", "quality_repeat_index"):
            spec.pop(k, None)
    spec.update({"resolution": n, "dataset_path": str(root), "split": "test", "n_samples": scenes,
                 "seeds": [seed], "results_root": str(out.parent), **keys})
    path = out.parent / f"spec-{model}.json"
    atomic_write_json(path, spec)
    return path


def size_steps(root: Path, n: int, scenes: int, case: Path, *, seed: int, session_warmup: int,
               repeats: int, audit: bool) -> list:
    py = sys.executable
    cli = [py, "-m", "cli"]
    sx = write_spec("exact", root, n, scenes, case / "exact", seed, latency_warmup=0,
                    latency_repeats=1)
    sg = write_spec("greedy", root, n, scenes, case / "greedy", seed, timing_profile=PROFILE,
                    session_warmup=session_warmup, references_from=str(case / "exact"))
    steps = [("reference", [py, str(Path(__file__).resolve()), "--time-reference", str(root), str(n),
                            str(case / "reference.json"), "--reference-repeats", str(repeats)])]
    if audit:
        steps.append(("audit", cli + ["audit", "--dataset-path", root, "--resolution", str(n),
                                      "--split", "test", "--json", case / "audit.json"]))
    steps += [
        ("run_exact", cli + ["run", "--spec", sx, "--output", case / "exact", "--no-progress"]),
        ("run_greedy", cli + ["run", "--spec", sg, "--output", case / "greedy", "--no-progress"]),
        ("score_exact", cli + ["score", "--run", case / "exact"]),
        ("score_greedy", cli + ["score", "--run", case / "greedy"]),
    ]
    return steps


def request_latencies(run: Path) -> list[float]:
    """``latency_ms`` of the timed (``warm`` series) calls of a run, every seed's
    ``requests.jsonl``; the cold calls (the first compiles) are left out."""
    out = []
    for f in sorted(Path(run).glob("seed-*/requests.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("latency_ms") is not None and rec.get("series") == "warm":
                out.append(float(rec["latency_ms"]))
    return out


def scored_records(run: Path) -> int:
    """Records scored in a run folder (every seed's ``per_sample.npz``)."""
    total = 0
    for f in sorted(Path(run).glob("seed-*/per_sample.npz")):
        with np.load(f, allow_pickle=False) as z:
            total += int(len(z["sample_id"]))
    return total


def builder_workers(n: int, workers: int) -> int:
    """Cohort builder processes at ``n``²: ``workers`` below 2,048², one from there on (a
    builder process holds a crop's three SciPy graphs, about 1.6 GiB each at 4,096²)."""
    return max(1, int(workers)) if n * n < BIG_CELLS else 1


def build_size(work: Path, n: int, scenes: int, cohort_seed: int, workers: int) -> dict:
    """The cohort of a size and its validation scene, built or reused (the ``cohort`` step's
    child process: ``--build-cohort``); its summary."""
    c = campaign.build_cohort(work, scenes, seed=cohort_seed, resolution=n,
                              workers=builder_workers(n, workers), rows_per_shard=rows_per_shard(n),
                              mirror=True)
    t0 = time.perf_counter()
    add_validation(Path(c["root"]), n, cohort_seed, campaign.needs_mirror(n))
    return {**c, "validation_s": time.perf_counter() - t0}


def measure_size(n: int, scenes: int, args, work: Path, env: dict) -> dict:
    out = work / f"cohort-{n}-k{scenes}.json"
    log = work / f"cohort-{n}-k{scenes}.log"
    m = campaign.measure_command([sys.executable, str(Path(__file__).resolve()), "--build-cohort",
                                  str(n), str(scenes), str(out), "--work", str(work), "--cohort-seed",
                                  str(args.cohort_seed), "--workers", str(args.workers)], log, env=env)
    m["peak_mib"] = m["maxrss_kb"] / 1024
    if m["rc"] != 0:
        tail = log.read_text(errors="replace")[-2000:]
        print(f"  cohort at {n}x{n} exited {m['rc']} ({log}):\n{tail}", flush=True)
        return {"n": n, "cells": n * n, "scenes": scenes, "scale_test": campaign.needs_mirror(n),
                "cohort": {}, "steps": {"cohort": m},
                "failed": {"step": "cohort", "rc": m["rc"], "log": str(log), "tail": tail}}
    c = json.loads(out.read_text())
    root = Path(c["root"])
    how = ("reused" if c["reused"] else f"built in {c['build_s']:.1f} s") + \
        f", validation scene {c['validation_s']:.1f} s"
    label = " (scale test: mirrored tiling)" if "scale_test" in c else ""
    print(f"{n}x{n}: cohort of {scenes} scene(s){label} {how}: {root}", flush=True)
    print(f"  {n:>5} {'cohort':<13} {m['wall_s']:9.2f} s  peak {m['peak_mib']:8.0f} MiB  "
          f"({'reused' if c['reused'] else 'built'})", flush=True)
    case = work / f"case-{n}-k{scenes}-s{args.cohort_seed}-seed{args.seed}"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    row = {"n": n, "cells": n * n, "scenes": scenes, "scale_test": "scale_test" in c,
           "cohort": {k: c.get(k) for k in ("root", "build_s", "validation_s", "reused", "rasters",
                                            "scale_test", "workers")},
           "steps": {"cohort": m}}
    for step, cmd in size_steps(root, n, scenes, case, seed=args.seed,
                                session_warmup=args.session_warmup, repeats=args.reference_repeats,
                                audit=not args.no_audit):
        log = case / f"{step}.log"
        m = campaign.measure_command(cmd, log, env=env)
        m["peak_mib"] = m["maxrss_kb"] / 1024
        row["steps"][step] = m
        print(f"  {n:>5} {step:<13} {m['wall_s']:9.2f} s  peak {m['peak_mib']:8.0f} MiB  "
              f"(exit {m['rc']})", flush=True)
        if m["rc"] != 0:
            tail = log.read_text(errors="replace")[-2000:]
            row["failed"] = {"step": step, "rc": m["rc"], "log": str(log), "tail": tail}
            print(f"  {step} at {n}x{n} exited {m['rc']} ({log}):\n{tail}", flush=True)
            break
    ref = case / "reference.json"
    if ref.is_file():
        row["reference"] = json.loads(ref.read_text())
    for model in ("exact", "greedy"):
        lat = request_latencies(case / model)
        row[f"{model}_requests"] = len(lat)
        row[f"{model}_ms_per_request"] = statistics.median(lat) if lat else None
        rec = scored_records(case / model)
        s = row["steps"].get(f"score_{model}")
        row[f"{model}_records"] = rec
        row[f"score_{model}_s_per_record"] = (s["wall_s"] / rec if s and s["rc"] == 0 and rec
                                              else None)
    a = row["steps"].get("audit")
    row["audit_s_per_scene"] = a["wall_s"] / scenes if a and a["rc"] == 0 else None
    return row


# --------------------------------------------------------------------------- #
# Output
# --------------------------------------------------------------------------- #

def _f(v, fmt: str = ".3g") -> str:
    return "n/a" if v is None else format(v, fmt)


def print_tables(rows: list) -> dict:
    """The figures table, the peak RSS table and the scaling lines; returns the fits."""
    print("\n| res | scenes | ref ours s | ref SciPy+build s | SciPy / ours | exact ms/request "
          "| greedy ms/request (session) | score s/record (exact / greedy) | audit s/scene |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ref = r.get("reference") or {}
        tag = " (scale test)" if r["scale_test"] else ""
        print(f"| {r['n']}²{tag} | {r['scenes']} | {_f(ref.get('ours_s'))} | {_f(ref.get('scipy_s'))} "
              f"| {_f(ref.get('ratio'), '.2f')} | {_f(r['exact_ms_per_request'])} "
              f"| {_f(r['greedy_ms_per_request'])} | {_f(r['score_exact_s_per_record'])} / "
              f"{_f(r['score_greedy_s_per_record'])} | {_f(r['audit_s_per_scene'])} |")
    print("\n| res | " + " | ".join(f"{s} s / MiB" for s in STEPS) + " |")
    print("|---|" + "---:|" * len(STEPS))
    for r in rows:
        cells = []
        for s in STEPS:
            m = r["steps"].get(s)
            note = "" if m is None or m["rc"] == 0 else " (failed)"
            if s == "cohort" and r["cohort"].get("reused"):
                note = f" (reused; built in {r['cohort']['build_s']:.1f} s)"
            cells.append("n/a" if m is None else f"{m['wall_s']:.1f} / {m['peak_mib']:.0f}{note}")
        tag = " (scale test)" if r["scale_test"] else ""
        print(f"| {r['n']}²{tag} | " + " | ".join(cells) + " |")
    series = {
        "reference ours s": [(r["cells"], (r.get("reference") or {}).get("ours_s")) for r in rows],
        "reference SciPy+build s": [(r["cells"], (r.get("reference") or {}).get("scipy_s")) for r in rows],
        "exact ms/request": [(r["cells"], r["exact_ms_per_request"]) for r in rows],
        "greedy ms/request": [(r["cells"], r["greedy_ms_per_request"]) for r in rows],
        "score_exact s/record": [(r["cells"], r["score_exact_s_per_record"]) for r in rows],
        "audit s/scene": [(r["cells"], r["audit_s_per_scene"]) for r in rows],
        "cohort build s/scene": [(r["cells"], (r["cohort"].get("build_s") or 0) / r["scenes"] or None)
                                 for r in rows],
    }
    for step in STEPS:
        series[f"{step} wall s"] = [(r["cells"], (r["steps"].get(step) or {}).get("wall_s")) for r in rows]
        series[f"{step} peak MiB"] = [(r["cells"], (r["steps"].get(step) or {}).get("peak_mib"))
                                      for r in rows]
    measured = sorted(r["n"] for r in rows)
    ahead = [m for m in SIZES if m > measured[-1]]
    print(f"\nscaling lines, fitted {measured[0]}² .. {measured[-1]}²: value = a + b * cells (least "
          "squares; its value at the larger release sizes is a projection) and the log-log slope "
          "(value ~ cells**slope)")
    print("| figure | a | b per Mcell | log-log slope | " + " | ".join(f"{m}² (projected)" for m in ahead)
          + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(ahead))
    fits = {}
    for name, pts in series.items():
        xs = [x for x, y in pts if y is not None]
        ys = [y for _, y in pts if y is not None]
        if len(xs) < 2:
            fits[name] = None
            continue
        a, b = campaign.fit_line(xs, ys)
        power = fit_power(xs, ys)
        proj = {m: max(a + b * m * m, max(ys)) for m in ahead}  # never below the largest measured
        fits[name] = {"line": [a, b], "power": power, "projected": {str(m): v for m, v in proj.items()}}
        print(f"| {name} | {a:.3g} | {b * 1e6:.3g} | {'n/a' if power is None else f'{power[1]:.2f}'} | "
              + " | ".join(f"{proj[m]:.3g}" for m in ahead) + " |")
    return fits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                    help="resolutions (default 64 128 256 512 1024 2048 4096)")
    ap.add_argument("--scenes", type=int, default=None, metavar="K",
                    help="test scenes per size (default 4, 2 at 4096)")
    ap.add_argument("--quick", action="store_true", help="64 and 128, 2 scenes (under a minute)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/passage_resolutions"),
                    help="folder for cohorts (cached by size, scenes and seed), run folders and logs")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the figures as JSON")
    ap.add_argument("--cohort-seed", type=int, default=0, help="seed of the cohorts (default 0)")
    ap.add_argument("--seed", type=int, default=1234, help="the one run seed (default 1234)")
    ap.add_argument("--workers", type=int, default=2, help="cohort builder processes")
    ap.add_argument("--session-warmup", type=int, default=16,
                    help="untimed calls of the greedy session on its warm-up scene (default 16)")
    ap.add_argument("--reference-repeats", type=int, default=1,
                    help="warm calls of the timed reference (default 1)")
    ap.add_argument("--no-audit", action="store_true", help="skip the audit")
    ap.add_argument("--from-json", type=Path, nargs="+", default=None, metavar="FILE",
                    help="measure nothing: print the tables and the scaling line of the rows of "
                         "earlier --json-out files together (e.g. 64..1024 and 2048..4096 run apart)")
    ap.add_argument("--time-reference", nargs=3, metavar=("ROOT", "N", "OUT"), default=None,
                    help=argparse.SUPPRESS)  # the reference row's child process
    ap.add_argument("--build-cohort", nargs=3, metavar=("N", "K", "OUT"), default=None,
                    help=argparse.SUPPRESS)  # the cohort step's child process
    args = ap.parse_args(argv)
    if args.build_cohort is not None:
        n, k, out = args.build_cohort
        doc = build_size(args.work.resolve(), int(n), int(k), args.cohort_seed, args.workers)
        atomic_write_json(Path(out), doc)
        return 0
    if args.time_reference is not None:
        import jax  # noqa: PLC0415

        root, n, out = args.time_reference
        with jax.enable_x64(True):
            doc = time_reference(Path(root), int(n), args.reference_repeats)
        atomic_write_json(Path(out), doc)
        print(json.dumps(doc))
        return 0
    if args.from_json:
        rows = sorted((r for f in args.from_json for r in json.loads(f.read_text())["rows"]),
                      key=lambda r: r["n"])
        fits = print_tables(rows)
        if args.json_out:
            atomic_write_json(args.json_out, {"from": [str(f) for f in args.from_json], "rows": rows,
                                              "fits": fits})
        return 0
    sizes = args.sizes or ((64, 128) if args.quick else SIZES)
    bad = [n for n in sizes if n < 8]
    if bad or (args.scenes is not None and args.scenes < 1):
        ap.error(f"--sizes must be >= 8 and --scenes >= 1 (got {list(sizes)}, {args.scenes})")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs  python {platform.python_version()}")
    print(f"sizes {list(sizes)}; run seed {args.seed}; greedy session warm-up {args.session_warmup}; "
          f"work {work}", flush=True)
    rows = []
    doc = {"machine": platform.machine(), "platform": platform.platform(), "cpus": os.cpu_count(),
           "sizes": list(sizes), "seed": args.seed, "session_warmup": args.session_warmup, "rows": rows}
    for n in sizes:
        k = args.scenes if args.scenes is not None else (2 if args.quick else default_scenes(n))
        rows.append(measure_size(n, k, args, work, env))
        if args.json_out:
            atomic_write_json(args.json_out, doc)
    doc["fits"] = print_tables(rows)
    if args.json_out:
        atomic_write_json(args.json_out, doc)
    failed = [f"{r['failed']['step']} at {r['n']}²" for r in rows if "failed" in r]
    peak = max(((m["peak_mib"], s, r["n"]) for r in rows for s, m in r["steps"].items()),
               default=(float("nan"), "none", 0))
    measured = ", ".join(f"{r['n']}²" for r in rows)
    tail = f"; failed: {', '.join(failed)}" if failed else ""
    print(f"resolutions: {measured} measured; largest peak RSS "
          f"{peak[0]:.0f} MiB ({peak[1]} at {peak[2]}²){tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
