"""Check: two checkouts of this project give byte-identical scored outputs.

A change that only moves code (a restructure) must leave every result file as it was.
This script runs one fixed workload with one checkout's code and rescoring (or rerunning)
it with another's, then compares the files byte for byte:

* the README's main job (``cli bench`` of configs/quickstart.yaml against
  configs/quickstart_bfs.yaml: the shipped learned planner and BFS on the shipped 64x64
  cohort, three seeds);
* a 256x256 campaign cohort of the shipped rasters (``bench/campaign.py``'s builder, N
  scenes), the exact and greedy planners under the session profile, three seeds, the
  greedy run taking the exact run's references (``bench/campaign_session.py``'s specs).

    python bench/same_outputs.py make    --checkout BEFORE --work W/before
    python bench/same_outputs.py rescore --checkout AFTER  --runs W/before --work W/after-score
    python bench/same_outputs.py make    --checkout AFTER  --work W/after-run
    python bench/same_outputs.py diff W/before W/after-score       # score: bytes equal
    python bench/same_outputs.py diff W/before W/after-run --routes  # run: same routes

``diff`` compares ``per_sample.npz`` and ``metrics.json`` of every seed folder byte for
byte (score of the same run files), or with ``--routes`` the routes and statuses the two
runs recorded (``paths.npz``'s arrays and each record's ``status``; timings differ between
two runs, so only what the planner returned is compared). Exit 0 when equal, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import campaign  # noqa: E402  (bench/ on sys.path first)
import campaign_session  # noqa: E402

from passage_jax.protocol.runfolder import (  # noqa: E402
    METRICS,
    PATHS,
    PER_SAMPLE,
    REQUESTS,
    SCORE_OUTPUTS,
)

SCORED = (PER_SAMPLE, METRICS)


def _cli(checkout: Path, *args) -> None:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, "-m", "cli", *map(str, args)]
    print("  $", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL)


def cohort(work: Path, n: int) -> Path:
    """The 256x256 campaign cohort (built once under ``work``) with its warm-up split."""
    root = Path(campaign.build_cohort(work / "cohort", n, seed=0, resolution=256, split="test")["root"])
    campaign_session.add_validation_split(root, 256, 0)
    return root


def run_folders(work: Path) -> list[Path]:
    return [work / "quickstart", work / "exact", work / "greedy"]


def make(checkout: Path, work: Path, n: int, cohort_work: Path) -> None:
    work.mkdir(parents=True, exist_ok=False)
    root = cohort(cohort_work, n)
    _cli(checkout, "bench", "--spec", "configs/quickstart.yaml", "--against", "configs/quickstart_bfs.yaml",
         "--output", work / "quickstart", "--no-progress")
    sx = campaign_session.session_spec("exact", root, n, work / "exact", 256)
    sg = campaign_session.session_spec("greedy", root, n, work / "greedy", 256,
                                       references_from=str(work / "exact"))
    for spec, out in ((sx, work / "exact"), (sg, work / "greedy")):
        _cli(checkout, "run", "--spec", spec, "--output", out, "--no-progress")
        _cli(checkout, "score", "--run", out)


def seed_folders(work: Path) -> dict[str, Path]:
    """Every seed folder under ``work``, by its path relative to ``work``."""
    return {str(p.parent.relative_to(work)): p.parent for p in sorted(work.rglob(REQUESTS))}


def rescore(checkout: Path, runs: Path, work: Path) -> None:
    """``runs``' run folders copied to ``work`` without their score outputs, scored again."""
    work.mkdir(parents=True, exist_ok=False)
    for seed in seed_folders(runs).values():
        run = seed.parent
        dest = work / run.relative_to(runs)
        if not dest.exists():
            shutil.copytree(run, dest)
    for seed in seed_folders(work).values():
        for name in SCORE_OUTPUTS:
            (seed / name).unlink(missing_ok=True)
    for run in sorted({p.parent for p in seed_folders(work).values()}):
        _cli(checkout, "score", "--run", run)


def _routes(seed: Path) -> dict:
    with np.load(seed / PATHS, allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    lines = (seed / REQUESTS).read_text().splitlines()
    out["status"] = np.array([json.loads(line)["status"] for line in lines])
    return out


def diff(a: Path, b: Path, routes: bool) -> int:
    fa, fb = seed_folders(a), seed_folders(b)
    if set(fa) != set(fb):
        print(f"different seed folders: {sorted(set(fa) ^ set(fb))}")
        return 1
    bad = 0
    for rel in sorted(fa):
        if routes:
            ra, rb = _routes(fa[rel]), _routes(fb[rel])
            same = ra.keys() == rb.keys() and all(np.array_equal(ra[k], rb[k]) for k in ra)
            print(f"  {rel}: routes {'identical' if same else 'DIFFER'}")
            bad += not same
            continue
        for name in SCORED:
            same = (fa[rel] / name).read_bytes() == (fb[rel] / name).read_bytes()
            print(f"  {rel}/{name}: {'identical' if same else 'DIFFERS'}")
            bad += not same
    print("all identical" if not bad else f"{bad} file(s) differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    m = sub.add_parser("make", help="run and score the workload with one checkout")
    m.add_argument("--checkout", type=Path, default=REPO)
    m.add_argument("--work", type=Path, required=True)
    m.add_argument("--n", type=int, default=200, help="256x256 campaign scenes (default 200)")
    m.add_argument("--cohort-work", type=Path, default=Path("/tmp/passage_same_outputs"))
    r = sub.add_parser("rescore", help="score another workload's run files with one checkout")
    r.add_argument("--checkout", type=Path, default=REPO)
    r.add_argument("--runs", type=Path, required=True)
    r.add_argument("--work", type=Path, required=True)
    d = sub.add_parser("diff", help="compare two workloads' outputs")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    d.add_argument("--routes", action="store_true", help="compare routes and statuses, not score files")
    args = ap.parse_args(argv)
    if args.verb == "make":
        make(args.checkout.resolve(), args.work.resolve(), args.n, args.cohort_work)
    elif args.verb == "rescore":
        rescore(args.checkout.resolve(), args.runs.resolve(), args.work.resolve())
    else:
        return diff(args.a, args.b, args.routes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
