"""The shipped learned planner against the classical baselines, same tasks, one process.

On the shipped 64x64 cohort (elevation cost, obstacles; default the 24-scene test
split), each learned composition of ``configs/learned_*.yaml`` (``direct``,
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

The learned rows include ``learned_guided_astar`` ("A* on the learned heuristic alone":
the stages ``[backups] guided_astar``, the guided bounded A* of the repair run from the
start with no descent, under the repair's budget), and the classical rows plain A* (``astar``,
``passage_jax.planners.bounded`` under resolution² expansions, enough to finish).
The classical baselines are deterministic: they run once and stand for every seed.

Then the learned-search table of TransPath / Neural A* (``metrics.search_report``),
one row per procedure (direct, bounded_repair = descent then repair, guided A* alone,
prediction_free, exact_fallback, plain A*), over all tasks and over the hard subset
(c* / octile lower bound >= 1.05; the bound is ``decoders.octile_field`` at the start,
the prediction-free guide: octile metres times the smallest step cost per metre):

* ``ratio n`` / ``excl 0/fail`` — tasks in the expansion ratio, and those left out
  because plain A* expanded nothing / failed;
* ``ratio med`` / ``mean`` / ``geomean`` — per-task expansions (all stages) over plain
  A*'s; ``Exp %`` = 100 * mean(max(0, 1 - ratio)) (Neural A*'s arithmetic mean);
* ``succ``, ``excess`` (mean cost / c* - 1 over the successes only), ``Opt`` (share of
  all tasks whose cost is within a relative 1e-9 of c*; a failure is not optimal);
* ``ms med`` / ``A* ms`` — median wall time of ``plan`` per request (the learned
  guide's forward pass included) beside plain A*'s on the same tasks.

Every seed's tasks are pooled, each paired with plain A*'s run of the task.
Then the timing block of ``bench/learned_profiling.py`` for the first seed's
checkpoint on the ``bounded_repair`` planner: bare forward, guide call, forward +
decoder and the decoder alone, float32 and bfloat16, parameter count, peak device
memory (``None`` where the backend reports none, e.g. the CPU).

Generalisation: ``--split validation`` (another split of the shipped cohort) or
``--cohort-dir DIR`` with a cohort of crops of a raster the network never saw::

    python -m cli make-cohort --out /tmp/heldout --resolution 64 --split test \\
        --n-scenes 24 --seed 11 --rasters minnesota
    python bench/learned.py --cohort-dir /tmp/heldout

Other sizes: ``--resolution N`` (default 64; the shipped cohort has 64, 128, 256). Off
64 the shipped 64x64 checkpoints are applied tile by tile (``--tile``, default 64, the
canonical ``passage_jax_tiled_v1``; ``--stride``; ``--tile 0``: the whole grid at once)
and the repair budget is half the grid (N²/2) instead of the specs' 2048::

    python bench/learned.py --resolution 256 --n 24

The last line is ``speedup: <ratio>`` = median expansions of ``prediction_free`` over
median expansions of ``bounded_repair`` (same machinery and budget; > 1 means the
learned guide saves search work).

    python bench/learned.py --quick      # 8 scenes, 1 seed, short timing (~1 minute on 2 cores)
    python bench/learned.py              # 24 scenes x 3 seeds
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

from passage_jax.contract import DEFAULT_SEEDS, FAILURE_REGRET
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.learned.decoders import octile_field
from passage_jax.learned.guide import load_guide
from passage_jax.learned.planner import make_planner
from passage_jax.learned.tiling import tiling_protocol
from passage_jax.metrics import HARD_RATIO, hard_subset_mask, primary_metrics, score_routes, search_report
from passage_jax.planners.bfs import make_planner as make_bfs
from passage_jax.planners.bounded import make_planner as make_bounded
from passage_jax.planners.greedy import make_planner as make_greedy
from passage_jax.protocol import BudgetSpec, build_request
from passage_jax.reference import solve_batch
from passage_jax.run import load_spec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: its sibling modules
from learned_profiling import timing_report  # noqa: E402

DECODERS = ("direct", "bounded_repair", "prediction_free", "exact_fallback")
#: the learned-search report's rows: (label, results key), plain A* last
SEARCH_ROWS = (("direct", "learned_direct"), ("bounded_repair (descent+repair)", "learned_bounded_repair"),
               ("guided A* alone", "learned_guided_astar"), ("prediction_free", "learned_prediction_free"),
               ("exact_fallback", "learned_exact_fallback"), ("plain A*", "astar"))
#: the resolution the shipped 64x64 checkpoints were trained at (and their specs' budgets are for)
TRAIN_RESOLUTION = 64
#: spec families: configs/<prefix>_<composition>.yaml (``learned``: the 64x64 network, tiled off
#: 64; ``learned256``: the 256x256 U-Net, whole-scene at any side divisible by 32)
SPEC_PREFIXES = ("learned", "learned256")
OBJECTIVE, VARIANT = "elevation", "obstacles"


def stage_settings(stages: list, key: str):
    """The settings of the first stage ``key`` of a spec's stages list ({} when absent; for
    ``backups`` the count, 0 when absent)."""
    for item in stages:
        if key in item:
            return item[key] or ({} if key != "backups" else 0)
    return 0 if key == "backups" else {}


def guided_alone(stages: list) -> list:
    """A repair composition's stages as "A* on the learned heuristic alone": its backups and
    its guided A* (budget and weight) from the start, with no descent, no route refinement
    and no acceptance test."""
    search = {k: v for k, v in stage_settings(stages, "guided_astar").items()
              if k in ("max_expansions", "weight")}
    return [item for item in stages if "backups" in item] + [{"guided_astar": search}]


def load_material(root: Path, resolution: int, split: str, n: int):
    scenes = load_scenes(root, resolution, split, n_samples=n)
    tasks = [s.task(OBJECTIVE, VARIANT) for s in scenes]
    res = solve_batch(np.stack([t.elevation_m for t in tasks]), np.stack([t.obstacles for t in tasks]),
                      np.array([s.start for s in scenes]), np.array([s.goal for s in scenes]),
                      [OBJECTIVE] * len(tasks), np.array([t.weight for t in tasks]))
    if not np.all(np.isfinite(res.c_star)):
        raise SystemExit(f"{int((~np.isfinite(res.c_star)).sum())} tasks have no exact reference")
    return tasks, np.asarray(res.c_star, np.float64)


def octile_bounds(tasks) -> np.ndarray:
    """Each task's admissible octile lower bound of its cost: the prediction-free guide
    (``decoders.octile_field``: octile metres x the smallest step cost per metre of the
    request's graph) at the start."""
    out = []
    for t in tasks:
        req = build_request(t, include_tensor=False)
        out.append(float(octile_field(req)[tuple(req.start)]))
    return np.asarray(out, np.float64)


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
            "cost": np.asarray(per_task["predicted_cost"], np.float64),
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


def search_table(results: dict, c_star: np.ndarray, lower_bound: np.ndarray) -> dict:
    """The learned-search report (``metrics.search_report``) of each :data:`SEARCH_ROWS`
    procedure against plain A* on the same tasks: every seed's tasks pooled, each paired
    with plain A*'s run of that task (deterministic: one run stands for every seed)."""
    astar = results["astar"][0]
    out = {}
    for label, key in SEARCH_ROWS:
        parts = results[key]
        k = len(parts)
        procedure = {"expansions": np.concatenate([p["expansions"] for p in parts]),
                     "cost": np.concatenate([p["cost"] for p in parts]), "c_star": np.tile(c_star, k),
                     "success": np.concatenate([p["success"] for p in parts]),
                     "wall_ms": np.concatenate([p["ms"] for p in parts])}
        reference = {"expansions": np.tile(astar["expansions"], k), "success": np.tile(astar["success"], k),
                     "wall_ms": np.tile(astar["ms"], k)}
        out[label] = search_report(procedure, reference, lower_bound=np.tile(lower_bound, k))
    return out


def _f(v: float, spec: str) -> str:
    return "n/a" if v != v else format(v, spec)


def print_search_table(table: dict) -> None:
    head = (f"{'procedure':<32}{'subset':>7}{'tasks':>6}{'ratio n':>8}{'excl 0/fail':>12}"
            f"{'ratio med':>10}{'mean':>8}{'geomean':>8}{'Exp %':>7}{'succ':>7}{'excess':>9}"
            f"{'Opt':>7}{'ms med':>8}{'A* ms':>8}")
    print(head)
    print("-" * len(head))
    for label, rep in table.items():
        for sub in ("all", "hard"):
            r = rep[sub]
            excl = f"{r['n_excluded_astar_zero']}/{r['n_excluded_astar_failed']}"
            print(f"{label if sub == 'all' else '':<32}{sub:>7}{r['n_tasks']:>6}{r['n_ratio']:>8}{excl:>12}"
                  f"{_f(r['ratio_median'], '.3f'):>10}{_f(r['ratio_mean'], '.3f'):>8}"
                  f"{_f(r['ratio_geomean'], '.3f'):>8}{_f(r['exp_reduction_pct'], '.1f'):>7}"
                  f"{_f(r['success_rate'], '.3f'):>7}{_f(r['cost_excess_mean'], '.4f'):>9}"
                  f"{_f(r['optimal_rate'], '.3f'):>7}{_f(r['wall_ms_median'], '.2f'):>8}"
                  f"{_f(r['astar_wall_ms_median'], '.2f'):>8}")


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


def _tiling(args, resolution: int, spec_resolution: int):
    """The tiling protocol of the guide: ``--tile`` (0: the whole grid at once), by default
    the canonical ``passage_jax_tiled_v1`` with the 64x64 checkpoints' own 64-cell tile when
    the grid is not their resolution, none at it nor for the U-Net of ``learned256``."""
    off = resolution != spec_resolution and spec_resolution == TRAIN_RESOLUTION
    tile = args.tile if args.tile is not None else (TRAIN_RESOLUTION if off else 0)
    if tile == 0:
        if args.stride is not None:
            raise SystemExit("--stride needs a tile (--tile N > 0)")
        return None
    return tiling_protocol(tile, args.stride)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 scenes, one seed, short timing")
    ap.add_argument("--split", default="test", help="split of the cohort (default test)")
    ap.add_argument("--cohort-dir", default=None,
                    help="dataset root of another cohort (default: the shipped cohort)")
    ap.add_argument("--resolution", type=int, default=TRAIN_RESOLUTION,
                    help=f"grid size of the cohort's scenes (default {TRAIN_RESOLUTION}; the shipped "
                         f"cohort has 64, 128 and 256)")
    ap.add_argument("--tile", type=int, default=None,
                    help=f"apply the checkpoint tile by tile (passage_jax_tiled_v1) with this tile; 0: "
                         f"the whole grid at once (default: {TRAIN_RESOLUTION} when --resolution is not "
                         f"{TRAIN_RESOLUTION}, else 0)")
    ap.add_argument("--stride", type=int, default=None, help="tile stride (default tile / 2)")
    ap.add_argument("--n", type=int, default=None, help="scenes (default 24; --quick 8)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help=f"checkpoint seeds (default {list(DEFAULT_SEEDS)}; --quick the first)")
    ap.add_argument("--checkpoint", default=None,
                    help="checkpoint per seed, '{seed}' substituted (default: the specs' own, e.g. "
                         "shipped:{seed}; e.g. runs/train-{seed}/checkpoint.json for one's own)")
    ap.add_argument("--specs", default="learned", choices=SPEC_PREFIXES,
                    help="spec family configs/<specs>_<composition>.yaml (default learned: the 64x64 "
                         "network; learned256: the 256x256 U-Net)")
    ap.add_argument("--guide-weight", type=float, default=None,
                    help="override the specs' guide_weight (the guided A* stages' operating point)")
    ap.add_argument("--accept-ratio", default=None,
                    help="override the specs' descent accept_ratio where they set one ('none': accept "
                         "every descent)")
    ap.add_argument("--refine-radius", default=None,
                    help="override the specs' refine_radius where they set one ('none': no corridor "
                         "refinement)")
    ap.add_argument("--backups", type=int, default=None,
                    help="override the Bellman backups of every learned composition's field, the "
                         "control's included (0: the network's field alone)")
    ap.add_argument("--budget", type=int, default=None,
                    help="override the repair budget (expansions; default the specs' at their "
                         "resolution, else half the grid)")
    ap.add_argument("--timing-requests", type=int, default=None,
                    help="requests in the timing block (default 8; --quick 4)")
    args = ap.parse_args(argv)
    n = args.n or (8 if args.quick else 24)
    seeds = args.seeds or (list(DEFAULT_SEEDS[:1]) if args.quick else list(DEFAULT_SEEDS))
    root = Path(args.cohort_dir) if args.cohort_dir else shipped_cohort_root()
    specs = {d: load_spec(REPO / "configs" / f"{args.specs}_{d}.yaml") for d in DECODERS}
    resolution = args.resolution
    if resolution <= 0:
        raise SystemExit(f"--resolution {resolution} must be positive")
    tiling = _tiling(args, resolution, specs["direct"].resolution)

    def checkpoint_of(seed) -> str:
        """``--checkpoint`` for ``seed``, else the specs' own checkpoint of that seed."""
        if args.checkpoint:
            return args.checkpoint.replace("{seed}", str(seed))
        return specs["direct"].kwargs_for_seed(seed)["checkpoint"]

    t0 = time.perf_counter()
    tasks, c_star = load_material(root, resolution, args.split, n)
    t_load = time.perf_counter() - t0
    lower_bound = octile_bounds(tasks)
    budget = specs["bounded_repair"].budget
    limit = budget.max_expansions
    if resolution != specs["direct"].resolution:  # the specs' budget is for their own grid
        limit = resolution * resolution // 2
    limit = args.budget or limit
    budget = dataclasses.replace(budget, max_expansions=limit)
    # the learned compositions: the specs' stages, and the guided A* alone under the repair's budget
    compositions = {d: (specs[d].kwargs_for_seed, specs[d].budget) for d in DECODERS}
    compositions["guided_astar"] = (  # A* alone: no descent to test, no route refinement
        lambda seed: {**specs["bounded_repair"].kwargs_for_seed(seed),
                      "stages": guided_alone(specs["bounded_repair"].kwargs_for_seed(seed)["stages"])},
        specs["bounded_repair"].budget)

    def sized(kw: dict, b: BudgetSpec):
        """The spec's kwargs and budget, the repair limit at this resolution's."""
        stages = []
        for item in kw["stages"]:
            (key, value), = item.items()
            if key == "backups":
                continue
            value = dict(value or {})
            if key == "guided_astar":
                if "max_expansions" in value:
                    value["max_expansions"] = limit
                if args.guide_weight is not None and kw.get("guide") != "octile":
                    value["weight"] = args.guide_weight
            if args.accept_ratio is not None and "accept_ratio" in value:
                value["accept_ratio"] = None if args.accept_ratio == "none" else float(args.accept_ratio)
            if args.refine_radius is not None and "refine_radius" in value:
                value["refine_radius"] = None if args.refine_radius == "none" else int(args.refine_radius)
            stages.append({key: value})
        n = args.backups if args.backups is not None else stage_settings(kw["stages"], "backups")
        kw["stages"] = ([{"backups": n}] if n else []) + stages
        if b.max_expansions is not None:
            b = dataclasses.replace(b, max_expansions=limit)
        return kw, b

    results: dict[str, list[dict]] = {f"learned_{d}": [] for d in compositions}
    guides = {}
    for seed in seeds:
        guide = guides[seed] = load_guide(checkpoint_of(seed), tiling=tiling)
        for d, (kwargs_for_seed, b) in compositions.items():
            kw, b = sized(dict(kwargs_for_seed(seed)), b)
            kw.pop("checkpoint", None)
            if kw.get("guide", "learned") == "learned":  # the network loaded once per seed
                kw["guide"] = guide
            planner = make_planner(**kw)
            rows = run_method(planner, tasks, b)
            results[f"learned_{d}"].append(score(rows, tasks, c_star))
    full = resolution * resolution
    classical = {"bfs": (make_bfs(), BudgetSpec()), "greedy": (make_greedy(), BudgetSpec()),
                 f"bounded_astar ({limit})": (make_bounded(max_expansions=limit), budget),
                 "astar": (make_bounded(max_expansions=full), BudgetSpec(max_expansions=full))}
    for name, (planner, b) in classical.items():
        results[name] = [score(run_method(planner, tasks, b), tasks, c_star)]
    table = {name: pooled(parts) for name, parts in results.items()}
    search = search_table(results, c_star, lower_bound)

    where = f"{root} ({'shipped cohort' if args.cohort_dir is None else 'cohort dir'})"
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
          f", jax {jax.__version__} on {jax.devices()[0].platform}")
    print(f"data: {where}, {resolution}x{resolution} {args.split}, {len(tasks)} scenes, {OBJECTIVE}/"
          f"{VARIANT}; exact references by value iteration in {t_load:.1f} s (with loading)")
    how = ("whole grid" if tiling is None else f"tiled {tiling['name']} tile {tiling['tile']} "
           f"stride {tiling['stride']}")
    stages = {d: specs[d].kwargs_for_seed(seeds[0])["stages"] for d in ("direct", "bounded_repair")}
    weight = args.guide_weight if args.guide_weight is not None else \
        stage_settings(stages["bounded_repair"], "guided_astar").get("weight", 1.0)
    ratio = args.accept_ratio if args.accept_ratio is not None else \
        stage_settings(stages["bounded_repair"], "descent").get("accept_ratio")
    radius = args.refine_radius if args.refine_radius is not None else \
        stage_settings(stages["bounded_repair"], "descent").get("refine_radius")
    escapes = {d: stage_settings(stages[d], "descent").get("max_escapes", 0) for d in stages}
    backups = {d: args.backups if args.backups is not None else stage_settings(stages[d], "backups")
               for d in stages}
    print(f"learned: specs configs/{args.specs}_*.yaml, checkpoints "
          f"{', '.join(checkpoint_of(s) for s in seeds)} "
          f"({how}), guide_weight {weight:g}, accept_ratio {ratio}, refine_radius {radius}, "
          f"max_escapes {escapes['bounded_repair']} and backups {backups['bounded_repair']} (repair "
          f"compositions), max_escapes {escapes['direct']} and backups {backups['direct']} (direct), "
          f"repair budget "
          f"{limit} expansions (request budget of bounded_repair / guided_astar / prediction_free / "
          f"bounded A*); plain A* ('astar') under {full} = {resolution}^2 expansions; classical "
          f"baselines are deterministic (one run stands for every seed)")
    print("regret over all tasks (a failure counts 999999 = 'fail'); regret|ok over successes; "
          "exp = expansions summed over stages; prim/rep/fb = route from primary/repair/fallback\n")
    print_table(table)

    n_hard = int(hard_subset_mask(c_star, lower_bound).sum())
    print(f"\nlearned search against plain A* (TransPath / Neural A*), every seed's tasks pooled; hard = "
          f"c*/octile bound >= {HARD_RATIO:g} ({n_hard} of {len(tasks)} tasks):")
    print("ratio = expansions (all stages) / plain A*'s, per task (median, mean, geomean); excl 0/fail ="
          " tasks left out of the ratio as A* expanded 0 / failed; Exp % = 100*mean(max(0, 1-ratio)) "
          "(Neural A*); excess = mean cost/c*-1 over successes; Opt = share of all tasks within 1e-9 "
          "of c*; ms med = wall time per request (forward pass included) beside plain A*'s")
    print_search_table(search)

    k = args.timing_requests or (4 if args.quick else 8)
    seed0 = seeds[0]
    rkw, _ = sized({k2: v for k2, v in specs["bounded_repair"].kwargs_for_seed(seed0).items()
                    if k2 != "checkpoint"}, budget)
    planner = make_planner(**{**rkw, "guide": guides[seed0]})
    reqs = [build_request(t, budget=budget) for t in tasks[:k]]
    rep = timing_report(planner, reqs, repeats=1 if args.quick else 3, warmup=1)
    print_timing(rep, len(reqs), checkpoint_of(seed0))

    pf, br = table["learned_prediction_free"]["exp_median"], table["learned_bounded_repair"]["exp_median"]
    print("\nspeedup = median expansions of prediction_free / bounded_repair "
          "(same machinery and budget; the work the learned guide saves)")
    print(f"speedup: {pf / br:.2f}" if br > 0 else "speedup: nan")
    return 0


if __name__ == "__main__":
    sys.exit(main())
