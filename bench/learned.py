"""The shipped learned planner against the classical baselines, same tasks, one process.

On the shipped 64x64 cohort (elevation cost, obstacles; default the 24-scene test
split), each learned decoder of ``configs/learned_*.yaml`` (``direct``,
``bounded_repair``, ``prediction_free``, ``exact_fallback``; seed s loads the shipped
checkpoint ``shipped:s``, with the spec's ``inference_kwargs`` and request budget)
and the classical baselines BFS, greedy and bounded A* (``passage_jax.planners``,
A* under the same expansion budget as the repair) plan every task, batch one. The
routes are scored against the exact references (``reference.solve_batch``, float64
value iteration) by ``metrics.score_routes``, and one table prints per method:

* ``success`` — legal route reaching the goal (over every seed's tasks; for the
  learned rows also per seed), ``regret med`` / ``p90`` over all tasks (a failure
  counts ``FAILURE_REGRET``), ``regret|ok`` the median over successes only;
* ``exp med`` / ``exp p90`` — total expansions over every stage, every request;
* ``prim`` / ``rep`` / ``fb`` — the share of tasks whose route came from the primary
  descent, the repair or the exact fallback (``PlanResult.route_stage``);
* ``ms med`` — wall time of ``plan`` per request (warm; the first request of each
  method is planned once untimed).

The classical baselines are deterministic: they run once and stand for every seed.
Then the timing block of :mod:`passage_jax.learned.profiling` for the first seed's
checkpoint on the ``bounded_repair`` planner: bare forward, guide call, forward +
decoder and the decoder alone, float32 and bfloat16, parameter count, peak device
memory (``None`` where the backend reports none, e.g. the CPU).

Generalisation: ``--split validation`` (another split of the shipped cohort) or
``--cohort-dir DIR`` with a cohort of crops of a raster the network never saw::

    python -m cli make-cohort --out /tmp/heldout --resolution 64 --split test \\
        --n-scenes 24 --seed 11 --rasters minnesota
    python bench/learned.py --cohort-dir /tmp/heldout

The last line is ``speedup: <ratio>`` = median expansions of ``prediction_free`` over
median expansions of ``bounded_repair`` (same machinery and budget; > 1 means the
learned guide saves search work).

    python bench/learned.py --quick      # 8 scenes, 1 seed, short timing (~1 minute on 2 cores)
    python bench/learned.py              # 24 scenes x 3 seeds
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from passage_jax.contract import DEFAULT_SEEDS, FAILURE_REGRET
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.learned.guide import load_guide
from passage_jax.learned.planner import make_planner
from passage_jax.learned.profiling import timing_report
from passage_jax.metrics import primary_metrics, score_routes
from passage_jax.planners.bfs import make_planner as make_bfs
from passage_jax.planners.bounded import make_planner as make_bounded
from passage_jax.planners.greedy import make_planner as make_greedy
from passage_jax.protocol import BudgetSpec, build_request
from passage_jax.reference import solve_batch
from passage_jax.run import load_spec

REPO = Path(__file__).resolve().parents[1]
DECODERS = ("direct", "bounded_repair", "prediction_free", "exact_fallback")
OBJECTIVE, VARIANT = "elevation", "obstacles"


def load_material(root: Path, resolution: int, split: str, n: int):
    scenes = load_scenes(root, resolution, split, n_samples=n)
    tasks = [s.task(OBJECTIVE, VARIANT) for s in scenes]
    res = solve_batch(np.stack([t.elevation_m for t in tasks]), np.stack([t.obstacles for t in tasks]),
                      np.array([s.start for s in scenes]), np.array([s.goal for s in scenes]),
                      [OBJECTIVE] * len(tasks), np.array([t.weight for t in tasks]))
    if not np.all(np.isfinite(res.c_star)):
        raise SystemExit(f"{int((~np.isfinite(res.c_star)).sum())} tasks have no exact reference")
    return tasks, np.asarray(res.c_star, np.float64)


def run_method(planner, tasks, budget: BudgetSpec) -> list[dict]:
    """Plan every task (batch one) and keep what the table needs."""
    planner.plan(build_request(tasks[0], budget=budget))  # warm-up (compilation), untimed
    out = []
    for t in tasks:
        req = build_request(t, budget=budget)
        t0 = time.perf_counter()
        res = planner.plan(req)
        ms = (time.perf_counter() - t0) * 1000.0
        exp = sum(int((w or {}).get("expansions") or 0) for w in (res.stage_work or {}).values()) \
            if res.stage_work else int((res.work or {}).get("expansions") or 0)
        ok = res.status == "ok" and res.path is not None
        if budget.max_expansions is not None and exp > budget.max_expansions:
            ok = False  # the runner records budget_exhausted for work over the request budget
        out.append({"path": res.path if ok else None, "ok": ok, "status": res.status,
                    "expansions": exp, "route_stage": getattr(res, "route_stage", None) if ok else None,
                    "ms": ms})
    return out


def score(rows: list[dict], tasks, c_star) -> dict:
    per_task = score_routes([r["path"] for r in rows], tasks, c_star, request_ok=[r["ok"] for r in rows])
    m = primary_metrics(per_task)
    success = np.asarray(per_task["success"], bool)
    regret = np.asarray(per_task["regret"], np.float64)
    return {"n": len(rows), "success": success, "regret": regret, "metrics": m,
            "expansions": np.array([r["expansions"] for r in rows], np.int64),
            "stage": [r["route_stage"] for r in rows], "ms": np.array([r["ms"] for r in rows])}


def pooled(parts: list[dict]) -> dict:
    """Figures over every seed's tasks together (regret over all tasks, failures counted)."""
    success = np.concatenate([p["success"] for p in parts])
    regret = np.concatenate([p["regret"] for p in parts])
    exp = np.concatenate([p["expansions"] for p in parts])
    stages = [s for p in parts for s in p["stage"]]
    n = len(success)
    ok_regret = regret[success]
    return {
        "n": n, "seeds": len(parts),
        "success": float(success.mean()),
        "success_by_seed": [float(p["success"].mean()) for p in parts],
        "regret_median": float(np.median(regret)), "regret_p90": float(np.percentile(regret, 90)),
        "regret_median_ok": float(np.median(ok_regret)) if ok_regret.size else float("nan"),
        "exp_median": float(np.median(exp)), "exp_p90": float(np.percentile(exp, 90)),
        "primary": stages.count("primary") / n, "repair": stages.count("repair") / n,
        "fallback": stages.count("fallback") / n,
        "ms_median": float(np.median(np.concatenate([p["ms"] for p in parts]))),
    }


def _fmt_regret(v: float) -> str:
    if v != v:
        return "nan"
    if v >= FAILURE_REGRET:
        return "fail"
    return f"{v:.4f}" if v < 1000 else f"{v:.2e}"  # a percentile between a success and a failure


def print_table(rows: dict) -> None:
    head = (f"{'method':<26}{'seeds':>6}{'tasks':>6}{'success':>9}{'by seed':>17}{'regret med':>11}"
            f"{'p90':>10}{'regret|ok':>10}{'exp med':>9}{'exp p90':>9}{'prim':>6}{'rep':>6}{'fb':>6}"
            f"{'ms med':>8}")
    print(head)
    print("-" * len(head))
    for name, r in rows.items():
        by_seed = "/".join(f"{s:.2f}" for s in r["success_by_seed"]) if r["seeds"] > 1 else ""
        print(f"{name:<26}{r['seeds']:>6}{r['n']:>6}{r['success']:>9.3f}{by_seed:>17}"
              f"{_fmt_regret(r['regret_median']):>11}{_fmt_regret(r['regret_p90']):>9}"
              f"{_fmt_regret(r['regret_median_ok']):>10}{r['exp_median']:>9.0f}{r['exp_p90']:>9.0f}"
              f"{r['primary']:>6.2f}{r['repair']:>6.2f}{r['fallback']:>6.2f}{r['ms_median']:>8.2f}")


def print_timing(rep: dict, n_requests: int, checkpoint: str) -> None:
    print(f"\ntiming ({checkpoint}, bounded_repair planner, {n_requests} requests, batch one, "
          f"device {rep['device']}):")
    print(f"{'part':<18}{'dtype':>10}{'n':>6}{'median ms':>11}{'p90 ms':>9}  boundary")
    for t in rep["timings"]:
        print(f"{t['stage']:<18}{str(t['dtype']):>10}{t['n']:>6}{t['median_ms']:>11.3f}"
              f"{t['p90_ms']:>9.3f}  {t['boundary']}")
    for a in rep["agreement"]:
        print(f"{a['dtype']} vs float32 cost-to-go: median relative difference "
              f"{a['median_rel_diff']:.2e}, max {a['max_rel_diff']:.2e} over {a['n_cells']} cells")
    print(f"parameters: {rep['param_count']}")
    peak = rep["peak_memory_bytes"]
    print(f"peak device memory: {'not reported by this backend' if peak is None else f'{peak} bytes'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 scenes, one seed, short timing")
    ap.add_argument("--split", default="test", help="split of the cohort (default test)")
    ap.add_argument("--cohort-dir", default=None,
                    help="dataset root of another cohort (default: the shipped cohort)")
    ap.add_argument("--n", type=int, default=None, help="scenes (default 24; --quick 8)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help=f"checkpoint seeds (default {list(DEFAULT_SEEDS)}; --quick the first)")
    ap.add_argument("--checkpoint", default="shipped:{seed}",
                    help="checkpoint per seed, '{seed}' substituted (default shipped:{seed}; "
                         "e.g. runs/train-{seed}/checkpoint.json for one's own)")
    ap.add_argument("--timing-requests", type=int, default=None,
                    help="requests in the timing block (default 8; --quick 4)")
    args = ap.parse_args(argv)
    n = args.n or (8 if args.quick else 24)
    seeds = args.seeds or (list(DEFAULT_SEEDS[:1]) if args.quick else list(DEFAULT_SEEDS))
    root = Path(args.cohort_dir) if args.cohort_dir else shipped_cohort_root()
    specs = {d: load_spec(REPO / "configs" / f"learned_{d}.yaml") for d in DECODERS}
    resolution = specs["direct"].resolution

    t0 = time.perf_counter()
    tasks, c_star = load_material(root, resolution, args.split, n)
    t_load = time.perf_counter() - t0
    budget = specs["bounded_repair"].budget
    limit = budget.max_expansions

    results: dict[str, list[dict]] = {f"learned_{d}": [] for d in DECODERS}
    guides = {}
    for seed in seeds:
        guide = guides[seed] = load_guide(args.checkpoint.replace("{seed}", str(seed)))
        for d in DECODERS:
            kw = specs[d].kwargs_for_seed(seed)
            kw.pop("checkpoint", None)
            planner = make_planner(**kw, **({} if d == "prediction_free" else {"guide": guide}))
            rows = run_method(planner, tasks, specs[d].budget)
            results[f"learned_{d}"].append(score(rows, tasks, c_star))
    classical = {"bfs": (make_bfs(), BudgetSpec()), "greedy": (make_greedy(), BudgetSpec()),
                 f"bounded_astar ({limit})": (make_bounded(max_expansions=limit), budget)}
    for name, (planner, b) in classical.items():
        results[name] = [score(run_method(planner, tasks, b), tasks, c_star)]
    table = {name: pooled(parts) for name, parts in results.items()}

    where = f"{root} ({'shipped cohort' if args.cohort_dir is None else 'cohort dir'})"
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
          f", jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"data: {where}, {resolution}x{resolution} {args.split}, {len(tasks)} scenes, {OBJECTIVE}/"
          f"{VARIANT}; exact references by value iteration in {t_load:.1f} s (with loading)")
    print(f"learned: checkpoints {args.checkpoint} for seed in {seeds}, repair budget "
          f"{limit} expansions (request budget of bounded_repair / prediction_free / bounded A*); "
          f"classical baselines are deterministic (one run stands for every seed)")
    print("regret over all tasks (a failure counts 999999 = 'fail'); regret|ok over successes; "
          "exp = expansions summed over stages; prim/rep/fb = route from primary/repair/fallback\n")
    print_table(table)

    k = args.timing_requests or (4 if args.quick else 8)
    seed0 = seeds[0]
    planner = make_planner(**{**{k2: v for k2, v in specs["bounded_repair"].kwargs_for_seed(seed0).items()
                                 if k2 != "checkpoint"}, "guide": guides[seed0]})
    reqs = [build_request(t, budget=budget) for t in tasks[:k]]
    rep = timing_report(planner, reqs, repeats=1 if args.quick else 3, warmup=1)
    print_timing(rep, len(reqs), args.checkpoint.replace("{seed}", str(seed0)))

    pf, br = table["learned_prediction_free"]["exp_median"], table["learned_bounded_repair"]["exp_median"]
    print("\nspeedup = median expansions of prediction_free / bounded_repair "
          "(same machinery and budget; the work the learned guide saves)")
    print(f"speedup: {pf / br:.2f}" if br > 0 else "speedup: nan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
