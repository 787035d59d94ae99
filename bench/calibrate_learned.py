"""Calibrate the learned 256x256 planner's operating point on the calibration split, and
freeze it (docs/learned.md, "The 256x256 baseline"; docs/contract.md §7: decisions are tuned on
calibration and frozen before a test pass).

On the shipped cohort's ``calibration`` split at 256x256 (elevation cost, obstacles,
24 scenes), for each candidate network family (``--families``: the three seeds'
checkpoints ``shipped:<family>-<seed>``; by default ``value256ft``, the 256x256 fine-tune of
the U-Net of configs/train_value256.yaml — ``value256`` itself, a candidate of the v2–v4
sweeps, never came near it), the ``exact_fallback`` composition of
``configs/learned256_*.yaml`` plans every task at each candidate ``backups`` (the Bellman
backups of the field before every stage, a fixed value-iteration head: 0, 8, 16, 32, 64 —
at most a quarter of the scene's side: with 128 the octile bound alone, no network, already
descends to the goal on 92 % of these tasks, so the head rather than the network would be
solving them; at 64 it does on 62 %, the network's field on 94 %), ``refine_radius`` (each
guided stage's route refined by the exact search of the corridor of that Chebyshev radius
around it; ``none``: no refinement), ``accept_ratio`` (a guided route costing more than that times the octile
bound is rejected and handed to the next stage; ``none`` accepts every route),
``guide_weight`` (the guided A* stages' heuristic ``w * field + (1 - w) * octile``),
``max_escapes`` (``--escapes``: how many times each descent may step to its best unvisited
neighbour where its Bellman choice was visited; 0 is the strict descent) and repair
budget, and ``bounded_repair`` at the decided point under each budget; then ``direct`` plans
every task with the decided family at each candidate ``backups`` and ``max_escapes``
(``--direct-escapes``). Each task's field is computed once per checkpoint (``FieldMemo``).
The routes are scored against the exact references (float64 value iteration) as in
``bench/learned.py``.

The rule (:data:`RULE`): the family, radius, accept_ratio, weight, escapes and backups from
``exact_fallback`` — among its candidates whose mean regret over every seed's tasks is at
most ``--max-regret`` (0.003, the target) the one with the least median total work
(expansions over every stage; ties: less regret, then fewer backups); when none qualifies, the one with the
least mean regret (ties: less work) — and for that point the budget under which
``bounded_repair`` succeeds most often (ties: the smaller); the direct spec's
``backups`` and ``max_escapes``: the candidate under which ``direct`` succeeds most often
among those whose mean regret over its successes is at most twice the strict descent's on
the network's own field (ties: fewer backups, then fewer escapes). The rule is the one of
the earlier sweeps, with the backups one more candidate key. The decision, the rule, every
candidate checkpoint's sha256 and the whole sweep are written to ``--out`` (default
``configs/learned256_calibration.json``, its canonical-JSON sha256 printed: the specs quote
it and ``tests/learned/test_configs.py`` checks that the specs' checkpoints,
``refine_radius``, ``accept_ratio``, ``guide_weight``, ``max_escapes``, ``backups`` and
``max_expansions`` are the decided ones)::

    python bench/calibrate_learned.py --backups 0 8 16 32 64  # the sweep of v5 (~6 min on 2 cores)
    python bench/calibrate_learned.py --families value256 --weights 1 0.5 --ratios none 1.3 \\
        --radii none 2 --escapes 0 8 --backups 0 16 --direct-escapes 0 8 --budgets 4096 --n 8 \\
        --out /tmp/c.json
"""
from __future__ import annotations

import argparse
import itertools
import math
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learned import load_material, run_method, score  # noqa: E402

from passage_jax.contract import DEFAULT_SEEDS  # noqa: E402
from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.fileio import atomic_write_json  # noqa: E402
from passage_jax.learned.guide import load_guide  # noqa: E402
from passage_jax.learned.planner import make_planner  # noqa: E402
from passage_jax.learned.stages import legacy_form  # noqa: E402
from passage_jax.protocol import BudgetSpec  # noqa: E402
from passage_jax.run import load_spec  # noqa: E402
from passage_jax.run.loop import canonical_json_sha256  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FORMAT = "passage-jax-learned-calibration-v5"
RULE = ("family, refine_radius, accept_ratio, guide_weight, max_escapes and backups: among the "
        "exact_fallback candidates (every budget) whose mean regret over every seed's tasks is at "
        "most max_regret, the one with the least median total work (expansions over every stage; "
        "ties: less regret, then fewer backups); when none qualifies, the least mean regret (ties: "
        "less work); max_expansions: for that point, the budget with the highest bounded_repair "
        "success (ties: the smaller budget); the direct spec's backups and max_escapes: for that "
        "family, the candidate under which direct succeeds most often among those whose mean "
        "regret over its successes is at most twice the strict descent's on the network's own "
        "field (backups 0, max_escapes 0; ties: fewer backups, then fewer escapes)")
#: the keys of a candidate besides its budget
POINT = ("family", "refine_radius", "accept_ratio", "guide_weight", "max_escapes", "backups")


class FieldMemo:
    """A guide that computes each task's field once (keyed by the request's sample id)
    and answers every later candidate from memory: the candidates differ only in what
    the planner does with the field."""

    def __init__(self, guide):
        self.guide, self.dtype = guide, getattr(guide, "dtype", None)
        self.checkpoint_id = getattr(guide, "checkpoint_id", None)
        self._fields = {}

    def __call__(self, request):
        key = (request.sample_id, tuple(request.start), tuple(request.goal))
        if key not in self._fields:
            self._fields[key] = self.guide(request)
        return self._fields[key]


def point_stages(decoder: str, point: dict, limit: int | None) -> dict:
    """The planner's ``stages`` (and ``guide``) for a composition at a candidate point: the
    calibration names its points in the planner's former flat keys, and
    :func:`~passage_jax.learned.stages.legacy_form` writes them as stages, as the specs do."""
    return legacy_form({"decoder": decoder, "max_expansions": limit, "guide_weight": point["guide_weight"],
                        "accept_ratio": point["accept_ratio"], "refine_radius": point["refine_radius"],
                        "max_escapes": point["max_escapes"], "backups": point["backups"]})


def evaluate(guides: dict, tasks, c_star, decoder: str, point: dict, limit: int) -> dict:
    """One candidate: every seed's tasks planned by ``decoder`` with the family's guides at
    ``point`` (refine_radius, accept_ratio, guide_weight, max_escapes, backups) and ``limit``."""
    regret, work, success = [], [], []
    for guide in guides.values():
        planner = make_planner(guide=guide, **point_stages(decoder, point, limit))
        s = score(run_method(planner, tasks, BudgetSpec()), tasks, c_star)  # the planner's limit only
        success.append(s["success"])
        regret.append(np.where(s["success"], s["regret"], np.nan))
        work.append(s["expansions"])
    success, regret, work = np.concatenate(success), np.concatenate(regret), np.concatenate(work)
    return {"decoder": decoder, **point, "max_expansions": limit,
            "n": int(success.size), "success": float(success.mean()),
            "regret_mean_ok": float(np.nanmean(regret)) if success.any() else None,
            "work_median": float(np.median(work)), "work_mean": float(np.mean(work))}


def decide(rows: list[dict], max_regret: float) -> dict:
    """The operating point the rule (:data:`RULE`) picks from the sweep's rows:
    ``{"family": f, "refine_radius": k, "accept_ratio": r, "guide_weight": w,
    "max_escapes": e, "backups": n, "max_expansions": b}``."""
    fb = [r for r in rows if r["decoder"] == "exact_fallback" and r["success"] == 1.0]
    if not fb:
        raise SystemExit("no exact_fallback candidate succeeded on every task")
    ok = [r for r in fb if r["regret_mean_ok"] <= max_regret]
    if ok:
        best = min(ok, key=lambda r: (r["work_median"], r["regret_mean_ok"], r["backups"]))
    else:
        best = min(fb, key=lambda r: (r["regret_mean_ok"], r["work_median"]))
    point = {k: best[k] for k in POINT}
    repair = [r for r in rows if r["decoder"] == "bounded_repair" and all(r[k] == point[k] for k in POINT)]
    budget = min(repair, key=lambda r: (-r["success"], r["max_expansions"]))["max_expansions"] \
        if repair else best["max_expansions"]
    return {**point, "max_expansions": budget}


def decide_direct(rows: list[dict]) -> dict:
    """The direct spec's ``{"backups": n, "max_escapes": e}`` by the rule (:data:`RULE`), from
    the ``direct`` rows of the decided family: the most successful candidate whose mean regret
    over its successes is at most twice the strict descent's on the network's own field
    (backups 0, max_escapes 0; ties: fewer backups, then fewer escapes; None, no limit, counts
    as the most escapes)."""
    strict = [r for r in rows if r["max_escapes"] == 0 and r["backups"] == 0]
    if not strict:
        raise SystemExit("the direct candidates must include backups 0 with max_escapes 0 "
                         "(the strict descent on the network's field)")
    cap = 2.0 * (strict[0]["regret_mean_ok"] or 0.0)
    ok = [r for r in rows if r["regret_mean_ok"] is not None and r["regret_mean_ok"] <= cap] or strict
    best = min(ok, key=lambda r: (-r["success"], r["backups"], math.inf if r["max_escapes"] is None
                                  else r["max_escapes"]))
    return {"backups": best["backups"], "max_escapes": best["max_escapes"]}


def checkpoint_ref(family: str, seed: int) -> str:
    """A family's checkpoint of ``seed``: ``shipped:<family>-<seed>`` for a shipped family,
    else the family itself as a path with ``{seed}`` substituted."""
    if "{seed}" in family:
        return family.replace("{seed}", str(seed))
    return f"shipped:{family}-{seed}"


def _ratio(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def _count(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def _row_line(r: dict) -> str:
    reg = "n/a" if r["regret_mean_ok"] is None else f"{r['regret_mean_ok']:.5f}"
    return (f"{r['family']:<12}{str(r['refine_radius']):>7}{str(r['accept_ratio']):>6}{r['guide_weight']:>7g}"
            f"{str(r['max_escapes']):>8}{r['backups']:>8}{str(r['max_expansions']):>8} "
            f"{r['decoder']:<16}{r['n']:>6}"
            f"{r['success']:>9.3f}{reg:>11}{r['work_median']:>10.0f}{r['work_mean']:>11.0f}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=["value256ft"],
                    help="candidate networks: shipped families (shipped:<family>-<seed>) or paths "
                         "with {seed}, e.g. runs/ft-{seed}")
    ap.add_argument("--radii", type=_count, nargs="+", default=[None, 1, 2, 3],
                    help="candidate refine_radius values ('none': no corridor refinement)")
    ap.add_argument("--ratios", type=_ratio, nargs="+", default=[None, 2.0, 1.4, 1.3],
                    help="candidate accept_ratio values ('none': accept every route)")
    ap.add_argument("--weights", type=float, nargs="+", default=[1.0])
    ap.add_argument("--escapes", type=_count, nargs="+", default=[0, 4],
                    help="candidate max_escapes of the compositions' descent ('none': no limit)")
    ap.add_argument("--backups", type=int, nargs="+", default=[0, 8, 16, 32, 64],
                    help="candidate Bellman backups of the field before every stage (0: none)")
    ap.add_argument("--direct-escapes", type=_count, nargs="+",
                    default=[0, 1, 2, 4, 8, 16, 32, 64, None],
                    help="candidate max_escapes of the direct spec (must include 0)")
    ap.add_argument("--budgets", type=int, nargs="+", default=[32768])
    ap.add_argument("--n", type=int, default=24, help="calibration scenes (default 24: the split)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument("--max-regret", type=float, default=0.003)
    ap.add_argument("--out", default=str(REPO / "configs" / "learned256_calibration.json"))
    return ap


def _sweep(args, guides, tasks, c_star) -> tuple[dict, dict, list, list]:
    """Every candidate's rows, printed as they come, and the two decisions."""
    print(f"{'family':<12}{'radius':>7}{'ratio':>6}{'weight':>7}{'escapes':>8}{'backups':>8}{'budget':>8} "
          f"{'decoder':<16}{'tasks':>6}{'success':>9}{'regret|ok':>11}{'work med':>10}{'work mean':>11}")

    def run(decoder, point, limit, into):
        into.append(evaluate(guides[point["family"]], tasks, c_star, decoder, point, limit))
        print(_row_line(into[-1]), flush=True)

    rows = []
    for values in itertools.product(args.families, args.radii, args.ratios, args.weights, args.escapes,
                                    args.backups, args.budgets):
        run("exact_fallback", dict(zip(POINT, values[:-1])), values[-1], rows)
    point = {k: v for k, v in decide(rows, args.max_regret).items() if k in POINT}
    for limit in args.budgets:  # the budget decision reads bounded_repair at the decided point only
        run("bounded_repair", point, limit, rows)
    pick = decide(rows, args.max_regret)
    direct_rows = []
    for n, esc in itertools.product(args.backups, args.direct_escapes):
        run("direct", {"family": pick["family"], "refine_radius": None, "accept_ratio": None,
                       "guide_weight": 1.0, "max_escapes": esc, "backups": n}, None, direct_rows)
    return pick, {"family": pick["family"], **decide_direct(direct_rows)}, rows, direct_rows


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    spec = load_spec(REPO / "configs" / "learned256_exact_fallback.yaml")
    resolution = spec.resolution
    t0 = time.perf_counter()
    tasks, c_star = load_material(shipped_cohort_root(), resolution, "calibration", args.n)
    guides = {f: {s: FieldMemo(load_guide(checkpoint_ref(f, s))) for s in args.seeds} for f in args.families}
    pick, pick_direct, rows, direct_rows = _sweep(args, guides, tasks, c_star)
    decisions = {
        "format": FORMAT, "method": "learned256", "split": "calibration", "resolution": resolution,
        "cost_model": spec.cost_model, "task_variant": spec.task_variant, "n_scenes": len(tasks),
        "seeds": list(args.seeds),
        "checkpoints": {f: {str(s): g.checkpoint_id for s, g in gs.items()} for f, gs in guides.items()},
        "rule": RULE, "max_regret": args.max_regret,
        "decided": pick,
        "decided_direct": pick_direct,
        "sweep": rows,
        "sweep_direct": direct_rows,
        "machine": f"{platform.machine()} python {platform.python_version()}, jax {jax.__version__} "
                   f"on {jax.devices()[0].platform}",
        "seconds": round(time.perf_counter() - t0, 1),
    }
    atomic_write_json(args.out, decisions)
    print(f"\ndecided: family {pick['family']}, refine_radius {pick['refine_radius']}, accept_ratio "
          f"{pick['accept_ratio']}, guide_weight {pick['guide_weight']:g}, max_escapes "
          f"{pick['max_escapes']}, backups {pick['backups']}, max_expansions {pick['max_expansions']}; "
          f"direct: backups {pick_direct['backups']}, max_escapes {pick_direct['max_escapes']}; "
          f"written to {args.out}")
    print(f"calibration_decisions sha256: {canonical_json_sha256(decisions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
