"""Tiled inference of the 64-trained network at larger resolutions: canonical vs controls.

The shipped network (trained on 64x64 crops; checkpoint ``shipped:1234`` by default,
``--seeds`` for more) plans the shipped cohort's test split (elevation cost, obstacles)
at 128 and 256 (24 scenes each; ``--quick``: 8 scenes at 128 only; ``--cohort-dir DIR``
adds the resolutions of another cohort, e.g. one made with ``python -m cli make-cohort
--resolution 512 ...``). Each network setting is one guide
(``load_guide(checkpoint, tiling=tiling_protocol(...))``, the guide
``make_planner(checkpoint=..., tile=64, ...)`` builds) shared by two planners,
``direct`` (the stages ``[descent]``) and ``bounded_repair`` (``[descent, guided_astar]``,
``max_expansions`` 4096):

* ``canonical`` — ``passage_jax_tiled_v1``: tile 64, stride 32, hflip, Hann, fields;
* ``no_flip`` / ``uniform`` / ``hard`` — noncanonical controls, one setting changed each
  (hflip off; uniform blend; hard stitch, nearest tile centre);
* ``whole`` — no tiling: the fully convolutional network applied to the whole scene at once.

Routes are scored against the exact references (``reference.solve_batch``, float64
value iteration) by ``metrics.score_routes``. Per row: ``success``, ``regret med`` /
``p90`` over all tasks (a failure counts ``FAILURE_REGRET``), ``exp med`` (expansions
over every stage), ``tiles`` (network tile evaluations per scene, both orientations
counted), ``tiles/s`` (tile evaluations per second of guide time, ``forward_ms`` of the
planner: features, every tile, fusion, reconstruction, transfer) and ``ms med`` (wall
time of ``plan`` per request, warm: one untimed call first; it covers the guide, the
decoders and device synchronisation).

The last line is ``speedup: <ratio>`` = median per-scene ``plan`` latency of ``whole``
over that of ``canonical`` (direct decoder, largest resolution measured; > 1 means
tiling is faster than one whole-scene pass).

    python bench/tiled.py --quick     # 8 scenes, 128 only
    python bench/tiled.py             # 24 scenes at 128 and 256
    python -m cli make-cohort --out /tmp/tiled512 --resolution 512 --split test \\
        --n-scenes 8 --seed 12 --no-progress
    python bench/tiled.py --n 8 --resolutions --cohort-dir /tmp/tiled512   # 512 only
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from passage_jax.contract import FAILURE_REGRET
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.learned.guide import load_guide
from passage_jax.learned.planner import make_planner
from passage_jax.learned.tiling import tile_origins, tiling_protocol
from passage_jax.metrics import score_routes
from passage_jax.protocol import BudgetSpec, build_request
from passage_jax.reference import solve_batch

OBJECTIVE, VARIANT = "elevation", "obstacles"
TILE = 64
MAX_EXPANSIONS = 4096
DECODERS = ("direct", "bounded_repair")
#: their stages (passage_jax.learned.stages)
STAGES = {"direct": [{"descent": {}}],
          "bounded_repair": [{"descent": {}}, {"guided_astar": {"max_expansions": MAX_EXPANSIONS}}]}
#: setting name -> tiling_protocol kwargs (None: the whole scene at once)
SETTINGS: dict[str, dict | None] = {
    "canonical": {"tile": TILE, "stride": TILE // 2, "hflip": True, "blend": "hann", "stitch": "fields"},
    "no_flip": {"tile": TILE, "stride": TILE // 2, "hflip": False, "blend": "hann", "stitch": "fields"},
    "uniform": {"tile": TILE, "stride": TILE // 2, "hflip": True, "blend": "uniform", "stitch": "fields"},
    "hard": {"tile": TILE, "stride": TILE // 2, "hflip": True, "blend": "hann", "stitch": "hard"},
    "whole": None,
}


def load_material(root: Path, resolution: int, n: int):
    scenes = load_scenes(root, resolution, "test", n_samples=n)
    tasks = [s.task(OBJECTIVE, VARIANT) for s in scenes]
    res = solve_batch(np.stack([t.elevation_m for t in tasks]), np.stack([t.obstacles for t in tasks]),
                      np.array([s.start for s in scenes]), np.array([s.goal for s in scenes]),
                      [OBJECTIVE] * len(tasks), np.array([t.weight for t in tasks]))
    c_star = np.asarray(res.c_star, np.float64)
    if not np.all(np.isfinite(c_star)):
        raise SystemExit(f"{int((~np.isfinite(c_star)).sum())} tasks at {resolution} have no exact reference")
    return tasks, c_star


def tiles_per_scene(shape: tuple[int, int], setting: dict | None) -> int | None:
    if setting is None:
        return None
    n = 1
    for size in shape:
        n *= len(tile_origins(max(size, TILE), TILE, setting["stride"]))
    return n * (2 if setting["hflip"] else 1)


def run_planner(planner, tasks) -> dict:
    budget = BudgetSpec()
    planner.plan(build_request(tasks[0], budget=budget))  # warm-up (compilation), untimed
    paths, ok, exp, ms, fwd = [], [], [], [], []
    for t in tasks:
        req = build_request(t, budget=budget)
        t0 = time.perf_counter()
        res = planner.plan(req)
        ms.append((time.perf_counter() - t0) * 1000.0)
        good = res.status == "ok" and res.path is not None
        paths.append(res.path if good else None)
        ok.append(good)
        exp.append(sum(int((w or {}).get("expansions") or 0) for w in (res.stage_work or {}).values()))
        fwd.append(float((res.resource_peaks or {}).get("forward_ms") or np.nan))
    return {"paths": paths, "ok": ok, "exp": np.array(exp), "ms": np.array(ms), "fwd": np.array(fwd)}


def summarise(runs: list[dict], tasks, c_star, tiles: int | None) -> dict:
    succ, regret = [], []
    for r in runs:  # one run per seed, same tasks
        per = score_routes(r["paths"], tasks, c_star, request_ok=r["ok"])
        succ.append(np.asarray(per["success"], bool))
        regret.append(np.asarray(per["regret"], np.float64))
    s, g = np.concatenate(succ), np.concatenate(regret)
    fwd = np.concatenate([r["fwd"] for r in runs])
    return {
        "n": len(s), "success": float(s.mean()),
        "regret_median": float(np.median(g)), "regret_p90": float(np.percentile(g, 90)),
        "exp_median": float(np.median(np.concatenate([r["exp"] for r in runs]))),
        "tiles": tiles,
        "tiles_per_s": (tiles / (np.median(fwd) / 1000.0)) if tiles else None,
        "ms_median": float(np.median(np.concatenate([r["ms"] for r in runs]))),
    }


def _fmt_regret(v: float) -> str:
    if v >= FAILURE_REGRET:
        return "fail"
    return f"{v:.4f}" if v < 1000 else f"{v:.2e}"


def print_table(rows: list[tuple[int, str, str, dict]]) -> None:
    head = (f"{'res':>5}  {'setting':<10}{'canon':>6}  {'decoder':<15}{'tasks':>6}{'success':>9}"
            f"{'regret med':>11}{'p90':>10}{'exp med':>9}{'tiles':>7}{'tiles/s':>9}{'ms med':>9}")
    print(head)
    print("-" * len(head))
    for res, setting, dec, r in rows:
        cfg = SETTINGS[setting]
        canon = "-" if cfg is None else ("yes" if tiling_protocol(**cfg)["canonical"] else "no")
        tiles = "-" if r["tiles"] is None else str(r["tiles"])
        tps = "-" if r["tiles_per_s"] is None else f"{r['tiles_per_s']:.0f}"
        print(f"{res:>5}  {setting:<10}{canon:>6}  {dec:<15}{r['n']:>6}{r['success']:>9.3f}"
              f"{_fmt_regret(r['regret_median']):>11}{_fmt_regret(r['regret_p90']):>10}"
              f"{r['exp_median']:>9.0f}{tiles:>7}{tps:>9}{r['ms_median']:>9.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 scenes, 128 only")
    ap.add_argument("--n", type=int, default=None, help="scenes per resolution (default 24; --quick 8)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1234], help="shipped checkpoint seeds")
    ap.add_argument("--checkpoint", default="shipped:{seed}",
                    help="checkpoint per seed, '{seed}' substituted (default shipped:{seed})")
    ap.add_argument("--resolutions", type=int, nargs="*", default=None,
                    help="resolutions of the shipped cohort (default 128 256; --quick 128; "
                         "none given: only --cohort-dir)")
    ap.add_argument("--cohort-dir", default=None,
                    help="another cohort (e.g. make-cohort --resolution 512); its resolutions "
                         "given by --cohort-resolutions")
    ap.add_argument("--cohort-resolutions", type=int, nargs="+", default=[512])
    args = ap.parse_args(argv)
    n = args.n or (8 if args.quick else 24)
    resolutions = args.resolutions if args.resolutions is not None else ([128] if args.quick else [128, 256])
    sources = [(shipped_cohort_root(), r) for r in resolutions]
    if args.cohort_dir:
        sources += [(Path(args.cohort_dir), r) for r in args.cohort_resolutions]
    if not sources:
        raise SystemExit("no resolution to measure: give --resolutions or --cohort-dir")

    print(f"machine: {platform.machine()} python {platform.python_version()}, jax {jax.__version__} "
          f"on {jax.devices()[0].platform}")
    print(f"network: {args.checkpoint} for seed in {args.seeds} (trained at 64x64); tile {TILE}; "
          f"bounded_repair max_expansions {MAX_EXPANSIONS}; {OBJECTIVE}/{VARIANT}, test split")
    print("regret over all tasks (failure = 'fail'); exp = expansions over stages; tiles = tile "
          "evaluations per scene (both orientations); tiles/s over guide time; ms = plan() per scene, warm")

    rows = []
    for root, res in sources:
        t0 = time.perf_counter()
        tasks, c_star = load_material(root, res, n)
        print(f"data {res}x{res}: {root}, {len(tasks)} scenes; references in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        for setting, cfg in SETTINGS.items():
            runs: dict[str, list[dict]] = {d: [] for d in DECODERS}
            for seed in args.seeds:
                ckpt = args.checkpoint.replace("{seed}", str(seed))
                guide = load_guide(ckpt, tiling=None if cfg is None else tiling_protocol(**cfg))
                for d in DECODERS:
                    runs[d].append(run_planner(make_planner(guide=guide, stages=STAGES[d]), tasks))
            tiles = tiles_per_scene(tasks[0].elevation_m.shape, cfg)
            for d in DECODERS:
                rows.append((res, setting, d, summarise(runs[d], tasks, c_star, tiles)))
    print()
    print_table(rows)

    last = sources[-1][1]
    pick = {s: r for res, s, d, r in rows if res == last and d == "direct"}
    whole, canon = pick["whole"]["ms_median"], pick["canonical"]["ms_median"]
    print(f"\nspeedup = median plan() latency per scene of the whole-scene pass / canonical tiling "
          f"(direct decoder, {last}x{last}; > 1: tiling is faster)")
    print(f"speedup: {whole / canon:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
