"""Benchmark: the paper's headline campaign under its own timing profile, end to end.

The paper times a persistent batch-one session per seed (``timing_profile:
native_raw_path_persistent_v1``): 16 untimed warm-up calls on one validation scene,
then one timed request per test scene. This script runs that campaign for real on an
N-scene 256x256 cohort of the shipped rasters (``bench/campaign.py``'s builder, cached
under ``--work``; a 16-scene ``validation`` split is added to it for the warm-up scene),
three seeds, the exact planner against the greedy baseline, every step a fresh
``python -m cli`` process (wall time and exact peak RSS from ``wait4``):

* ``admission``: ``run --dry-run`` of the exact spec (the admission every run repeats:
  reading, validating and hashing the tasks, the references; shown apart, not counted
  again in the total);
* ``run_exact``, ``run_greedy``: the three-seed session runs (their own admission
  inside; the greedy run takes the exact run's qualified references, ``references_from``,
  so its admission reads, validates and hashes the tasks without solving them again;
  ``--requalify`` has it qualify them itself);
* ``score_exact``, ``score_greedy``: offline scoring of the three seeds;
* ``compare``: the paired block-bootstrap comparison (greedy against exact);
* ``trust``: the trust axes of the greedy run with the exact run as its oracle;
* ``report``: the Markdown report of the comparison.

Then per session run and size: the planner's latency (p50, mean), the session's wall
time a request and the evaluator's own time a request (the session's wall time less
the planner's latency; from the seed states' ``requests_wall_ms``).

With ``--processes P`` (P > 1) the runs and scores are P-process launches on this
host (``--coordinator 127.0.0.1:PORT``): each process runs its own session on its share
of the roster. The quality fields of ``per_sample.npz`` are then checked equal to the
one-process campaign's when both were measured at the same N.

Where N is below the headline 40,000, each step's time is fitted ``a + b*N`` over the
measured sizes (a single size: proportional) and projected to 40,000, said so.

    python bench/campaign_session.py --sizes 2000 8000
    python bench/campaign_session.py --sizes 2000 --processes 2
    python bench/campaign_session.py --quick        # N = 200
    python bench/campaign_session.py --sizes 2000 --work W2 --quality-against W1
Last line: ``campaign: <minutes> min for <N> scenes x 3 seeds (measured|projected to 40000)``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import campaign  # noqa: E402  (bench/ on sys.path first)

from passage_jax.fileio import atomic_write_json, read_document  # noqa: E402

PROFILE = "native_raw_path_persistent_v1"
SEEDS = (0, 1, 2)
HEADLINE = 40_000
WARMUP_SCENES = 16
QUALITY = ("regret", "assd", "h95", "path_iou", "predicted_cost", "oracle_cost", "success",
           "valid_path", "connected_path", "obstacle_violation", "obstacle_traversals", "status",
           "sample_id")
STEPS = ("admission", "run_exact", "run_greedy", "score_exact", "score_greedy", "compare",
         "trust", "report")


def add_validation_split(root: Path, resolution: int, seed: int, count: int = WARMUP_SCENES) -> None:
    """A ``count``-scene validation split in the cohort root (the session's warm-up scene
    comes from it); built once."""
    folder = root / f"{resolution}x{resolution}" / "validation"
    if (folder / "part-00000.parquet").is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    campaign.build_shard(folder, 0, 0, count, n=resolution, split="validation", seed=seed)


def session_spec(model: str, root: Path, n: int, out: Path, resolution: int, **extra) -> Path:
    """The model's config as a three-seed session spec over the cohort (``extra``: more
    spec keys)."""
    spec = read_document(REPO / "configs" / f"{model}.yaml", ValueError, "spec", yaml_allowed=True)
    for k in ("latency_warmup", "latency_repeats", "quality_repeat_index"):
        spec.pop(k, None)  # the session profile's warm-up is session_warmup
    spec.update({"resolution": resolution, "dataset_path": str(root), "split": "test",
                 "n_samples": n, "seeds": list(SEEDS), "timing_profile": PROFILE,
                 "session_warmup": 16, "results_root": str(out.parent), **extra})
    path = out.parent / f"spec-{model}-n{n}.json"
    atomic_write_json(path, spec)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(cmd: list, log: Path, processes: int, env: dict) -> dict:
    """``cmd`` in ``processes`` processes (a launch on 127.0.0.1 when more than one):
    wall time of the launch, the largest peak RSS of its processes, every exit status."""
    if processes == 1:
        return campaign.measure_command(cmd, log, env=env)
    port = _free_port()
    procs = []
    for i in range(processes):
        flags = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes),
                 "--process-id", str(i)]
        wrapper = [sys.executable, "-c", campaign._WRAPPER, str(log.with_suffix(f".p{i}.json")),
                   str(log.with_suffix(f".p{i}.log")), *map(str, cmd), *flags]
        procs.append(subprocess.Popen(wrapper, env=env))
    for p in procs:
        p.wait()
    parts = [json.loads(log.with_suffix(f".p{i}.json").read_text()) for i in range(processes)]
    return {"rc": max(abs(p["rc"]) for p in parts), "wall_s": max(p["wall_s"] for p in parts),
            "maxrss_kb": max(p["maxrss_kb"] for p in parts), "processes": processes}


def campaign_steps(root: Path, n: int, case: Path, resolution: int, reuse: bool = True) -> list:
    cli = [sys.executable, "-m", "cli"]
    sx = session_spec("exact", root, n, case / "exact", resolution)
    # the greedy run takes the exact run's qualified references (references_from) unless
    # told to qualify them again
    more = {"references_from": str(case / "exact")} if reuse else {}
    sg = session_spec("greedy", root, n, case / "greedy", resolution, **more)
    return [
        ("admission", cli + ["run", "--spec", sx, "--output", case / "dry", "--dry-run", "--no-progress"], 1),
        ("run_exact", cli + ["run", "--spec", sx, "--output", case / "exact", "--no-progress"], None),
        ("run_greedy", cli + ["run", "--spec", sg, "--output", case / "greedy", "--no-progress"], None),
        ("score_exact", cli + ["score", "--run", case / "exact"], None),
        ("score_greedy", cli + ["score", "--run", case / "greedy"], None),
        ("compare", cli + ["compare", "--score", case / "greedy", "--score", case / "exact",
                           "--output", case / "compare.json"], 1),
        ("trust", cli + ["trust", "--score", case / "greedy", "--oracle", case / "exact",
                         "--output", case / "trust.json"], 1),
        ("report", cli + ["report", "--compare", case / "compare.json", "--output", case / "report.md"], 1),
    ]


def run_campaign(root: Path, n: int, case: Path, *, resolution: int, processes: int, env: dict,
                 reuse: bool = True) -> dict:
    """Every step once (a fresh case folder); {step: measurement}."""
    if case.exists():
        import shutil  # noqa: PLC0415
        shutil.rmtree(case)
    case.mkdir(parents=True)
    out = {}
    for step, cmd, fixed in campaign_steps(root, n, case, resolution, reuse):
        m = measure(cmd, case / f"{step}.log", fixed or processes, env)
        if m["rc"] != 0:
            raise SystemExit(f"N={n} {step} failed (exit {m['rc']}): see {case}/{step}*.log")
        out[step] = m
        print(f"  N={n:>6} P={processes} {step:<13} {m['wall_s']:8.1f} s  "
              f"peak {m['maxrss_kb'] / 1024:7.0f} MiB", flush=True)
    return out


def quality_equal(a: Path, b: Path) -> bool:
    """per_sample.npz quality fields of every seed equal between two campaign folders."""
    for model in ("exact", "greedy"):
        for seed in SEEDS:
            pa = np.load(a / model / f"seed-{seed}" / "per_sample.npz", allow_pickle=False)
            pb = np.load(b / model / f"seed-{seed}" / "per_sample.npz", allow_pickle=False)
            for k in QUALITY:
                if k in pa.files and not np.array_equal(pa[k], pb[k], equal_nan=pa[k].dtype.kind == "f"):
                    print(f"  differs: {model} seed {seed} {k}")
                    return False
    return True


def session_figures(run: Path) -> dict:
    """A session run's own figures per seed, from its files: requests, the planner's
    latency (p50, mean), the session's wall time a request (its builds'
    ``requests_wall_ms``) and the evaluator's own time a request (that less the mean
    latency); the means over the seeds."""
    seeds = []
    for folder in sorted(Path(run).glob("seed-*")):
        state = json.loads((folder / "seed_state.json").read_text())
        wall = [b.get("requests_wall_ms") for b in state["builds"]]
        lat = np.array([json.loads(line)["latency_ms"]
                        for line in (folder / "requests.jsonl").read_text().splitlines()], float)
        if None in wall or not len(lat):
            continue
        per = sum(wall) / len(lat)
        seeds.append({"seed": folder.name, "requests": len(lat), "latency_p50_ms": float(np.median(lat)),
                      "latency_mean_ms": float(lat.mean()), "session_ms_per_request": per,
                      "evaluator_ms_per_request": per - float(lat.mean())})
    keys = ("latency_p50_ms", "latency_mean_ms", "session_ms_per_request", "evaluator_ms_per_request")
    mean = {k: float(np.mean([s[k] for s in seeds])) for k in keys} if seeds else {}
    return {"seeds": seeds, "mean": mean}


def projection(rows: dict, target: int = HEADLINE) -> dict:
    """Per step, the time at ``target`` scenes from ``a + b*N`` over the measured sizes."""
    ns = sorted(rows)
    out = {}
    for step in STEPS:
        a, b = campaign.fit_line(ns, [rows[n][step]["wall_s"] for n in ns])
        out[step] = max(a + b * target, rows[ns[-1]][step]["wall_s"])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 8000], metavar="N")
    ap.add_argument("--quick", action="store_true", help="N = 200")
    ap.add_argument("--processes", type=int, default=1, help="processes per run and score launch")
    ap.add_argument("--work", type=Path, default=Path("/tmp/passage_campaign"))
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--cohort-seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="cohort builder processes")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--requalify", action="store_true",
                    help="the greedy run qualifies its references again (default: it takes the exact "
                         "run's, references_from)")
    ap.add_argument("--quality-against", type=Path, default=None, metavar="WORK",
                    help="another campaign's --work folder (the code before, say): the quality "
                         "fields of every seed's per_sample.npz checked equal to its, size by size")
    args = ap.parse_args(argv)
    sizes = [200] if args.quick else args.sizes
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs  python {platform.python_version()}")
    print(f"profile {PROFILE}; seeds {list(SEEDS)}; exact vs greedy; sizes {sizes}; "
          f"{args.processes} process(es) per run/score")
    rows, equal = {}, {}
    for n in sizes:
        info = campaign.build_cohort(work, n, seed=args.cohort_seed, resolution=args.resolution,
                                     workers=args.workers)
        root = Path(info["root"])
        add_validation_split(root, args.resolution, args.cohort_seed)
        case = work / f"session-n{n}-p{args.processes}"
        rows[n] = run_campaign(root, n, case, resolution=args.resolution, processes=args.processes,
                               env=env, reuse=not args.requalify)
        if args.quality_against is not None:
            other = args.quality_against.resolve() / case.name
            equal[f"against-{n}"] = quality_equal(other, case)
            print(f"  N={n}: quality equal to {other}: {equal[f'against-{n}']}")
        single = work / f"session-n{n}-p1"
        if args.processes > 1 and (single / "report.md").is_file():
            equal[n] = quality_equal(single, case)
            print(f"  N={n}: quality equal to the one-process campaign: {equal[n]}")
    print("\n| run | N | latency p50 ms | latency mean ms | session ms/request | evaluator ms/request |")
    print("|---|---:|---:|---:|---:|---:|")
    sessions = {}
    for n in sizes:
        for model in ("exact", "greedy"):
            f = session_figures(work / f"session-n{n}-p{args.processes}" / model)
            sessions[f"{model}-{n}"] = f
            m = f["mean"]
            if m:
                print(f"| run_{model} | {n} | {m['latency_p50_ms']:.3f} | {m['latency_mean_ms']:.3f} | "
                      f"{m['session_ms_per_request']:.3f} | {m['evaluator_ms_per_request']:.3f} |")
    big = max(sizes)
    total = sum(rows[big][s]["wall_s"] for s in STEPS if s != "admission")
    peak = max(rows[big][s]["maxrss_kb"] for s in STEPS) / 1024
    print("\n| step | " + " | ".join(f"N={n}" for n in sizes) + " | peak MiB (N=" + str(big) + ") |")
    print("|---|" + "---:|" * (len(sizes) + 1))
    for s in STEPS:
        print(f"| {s} | " + " | ".join(f"{rows[n][s]['wall_s']:.1f} s" for n in sizes)
              + f" | {rows[big][s]['maxrss_kb'] / 1024:.0f} |")
    proj = projection(rows) if big < HEADLINE else None
    doc = {"machine": platform.platform(), "cpus": os.cpu_count(), "profile": PROFILE,
           "seeds": list(SEEDS), "processes": args.processes, "rows": rows,
           "total_s": total, "peak_mib": peak, "quality_equal_single": equal, "sessions": sessions,
           "projection_s": proj}
    if args.json_out:
        atomic_write_json(args.json_out, doc)
    if proj is None:
        print(f"campaign: {total / 60:.1f} min for {big} scenes x 3 seeds (measured); peak {peak:.0f} MiB")
    else:
        ptotal = sum(v for k, v in proj.items() if k != "admission")
        print(f"measured: {total / 60:.1f} min for {big} scenes x 3 seeds; peak {peak:.0f} MiB")
        print(f"campaign: {ptotal / 60:.1f} min for {HEADLINE} scenes x 3 seeds (projected to {HEADLINE} "
              f"from N={sizes})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
