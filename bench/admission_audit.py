"""Benchmark: admission and ``audit`` end to end, this code against an earlier commit.

Two commands that run the reference kernels in chunks, each a fresh process with an
empty compilation cache, with the code of ``--before`` (a ``git worktree``) and with
this checkout, side by side in one run:

* ``admission``: ``python -m cli run --dry-run`` of the exact planner's spec over an
  N-scene 256x256 cohort (``bench/campaign.py``'s builder; default N = 2000): reading,
  validating and hashing every task, and the references;
* ``audit``: ``python -m cli audit --resolution 256 --json`` of the shipped cohort
  (every split: validation, qualification of the references with the cross-check).

Each command runs with ``JAX_LOG_COMPILES=1``; the table gives wall time, exact peak RSS
(``wait4``), the number of XLA compilations and their seconds (JAX's own
"Finished XLA compilation" lines), and the function compiled most often with its count —
a kernel compiled once per chunk shows there as a count that grows with N.

    python bench/admission_audit.py                   # N = 2000, before = fb0458e
    python bench/admission_audit.py --n 500 --before fb0458e --work /tmp/passage_campaign
Last line: ``admission: <before> s -> <after> s; audit: <before> s -> <after> s``.
"""
from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import campaign  # noqa: E402  (bench/ on sys.path first)
import score_pipeline  # noqa: E402

_COMPILED = re.compile(r"Finished XLA compilation of (\S+) in ([0-9.eE+-]+) sec")


def compiles(log: Path) -> dict:
    """The XLA compilations a command's log reports: count, seconds, the most compiled."""
    names: collections.Counter = collections.Counter()
    seconds = 0.0
    for m in _COMPILED.finditer(log.read_text(errors="replace")):
        names[m.group(1)] += 1
        seconds += float(m.group(2))
    top = names.most_common(1)
    return {"compilations": sum(names.values()), "compile_s": seconds,
            "most": f"{top[0][0]} x{top[0][1]}" if top else "-"}


def measure(code: Path, cmd: list, log: Path, cache: Path) -> dict:
    """``cmd`` with the code at ``code``, an empty compilation cache, compiles logged."""
    shutil.rmtree(cache, ignore_errors=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "PASSAGE_JAX_CACHE"))}
    env.update(PYTHONPATH=str(code), JAX_LOG_COMPILES="1", PASSAGE_JAX_CACHE_DIR=str(cache))
    res = campaign.measure_command(cmd, log, env=env)
    if res["rc"] != 0:
        raise SystemExit(f"{cmd[3]} with {code} failed: see {log}")
    return {**res, **compiles(log)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="cohort size of the admission (default 2000)")
    ap.add_argument("--before", default=score_pipeline.BEFORE)
    ap.add_argument("--work", type=Path, default=Path("/tmp/passage_campaign"))
    ap.add_argument("--workers", type=int, default=2, help="cohort builder processes")
    args = ap.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    before = score_pipeline.worktree(args.before, work)
    root = Path(campaign.build_cohort(work, args.n, workers=args.workers)["root"])
    case = work / f"admission-n{args.n}"
    case.mkdir(exist_ok=True)
    spec = campaign._spec("exact", root, args.n, resolution=256, seed=1234, warmup=0, repeats=1,
                          out=case / "run")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs  python {platform.python_version()}")
    print(f"before = {args.before} ({before}); after = this checkout; admission N = {args.n}")
    rows = {}
    for label, code in (("before", before), ("after", REPO)):
        dry = case / f"dry-{label}"
        shutil.rmtree(dry, ignore_errors=True)
        rows[("admission", label)] = measure(
            code, [sys.executable, "-m", "cli", "run", "--spec", spec, "--output", dry, "--dry-run",
                   "--no-progress"], case / f"admission-{label}.log", case / f"cache-{label}")
        shipped = code / "passage_jax" / "data" / "cohort"
        rows[("audit", label)] = measure(
            code, [sys.executable, "-m", "cli", "audit", "--dataset-path", shipped, "--resolution",
                   "256", "--json", case / f"audit-{label}.json", "--force"],
            case / f"audit-{label}.log", case / f"cache-{label}")
    print("\n| command | code | wall s | peak MiB | compilations | compile s | most compiled |")
    print("|---|---|---:|---:|---:|---:|---|")
    for (cmd, label), r in rows.items():
        print(f"| {cmd} | {label} | {r['wall_s']:.1f} | {r['maxrss_kb'] / 1024:.0f} | "
              f"{r['compilations']} | {r['compile_s']:.1f} | {r['most']} |")
    a, u = rows[("admission", "before")]["wall_s"], rows[("admission", "after")]["wall_s"]
    b, v = rows[("audit", "before")]["wall_s"], rows[("audit", "after")]["wall_s"]
    print(f"admission: {a:.1f} s -> {u:.1f} s; audit: {b:.1f} s -> {v:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
