"""Component figures (route_stage, per-stage work) and the attribution table.

Small runs on the 12x12 fixture cohort with staged planners whose stages and counters
are fixed in advance (``fixtures_attribution``); the score's ``components`` block is
checked against counting done here from ``requests.jsonl`` and against the known plan.
"""
from __future__ import annotations

import json
from argparse import ArgumentParser

import fixtures_runner as F
import numpy as np
import pytest
from fixtures_attribution import STAGE_WORK

from cli import report as cli_report
from passage_jax.evaluate.attribution import (
    AttributionExists,
    attribution_rows,
    attribution_table,
    render_attribution_markdown,
    write_attribution_report,
)
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.components import component_summary
from passage_jax.evaluate.report import render_markdown
from passage_jax.evaluate.score import load_score, score_run
from passage_jax.protocol import PlanResult, ProtocolError, normalise_result
from passage_jax.protocol.records import RECORD_KEYS, read_requests
from passage_jax.run import parse_spec, run_spec

OPEN, TRAP, HILL = "0000000000", "0000000001", "0000000002"
PLAN_REPAIR = {OPEN: "primary", TRAP: "repair", HILL: "fallback"}
PLAN_PF = {OPEN: "primary", TRAP: "illegal", HILL: "repair"}
BUDGET = {"max_expansions": 100000}


def _cc(variant, guide, checkpoint_id=None, machinery_id=None, primary_learned=False):
    return {"variant": variant, "guide": guide, "checkpoint_id": checkpoint_id,
            "machinery_id": machinery_id, "primary_learned": primary_learned}


RUNS = {
    "bounded_repair": dict(plan=PLAN_REPAIR, cc=_cc("bounded_repair", "learned", "ck1", "m1", True)),
    "prediction_free": dict(plan=PLAN_PF, cc=_cc("prediction_free", "prediction_free", None, "m1")),
    "prediction_free_m2": dict(plan=PLAN_PF, cc=_cc("prediction_free", "prediction_free", None, "m2")),
    "direct": dict(plan={}, cc=_cc("direct", "learned", "ck1", None, True)),
    "bfs": dict(plan=None, cc=_cc("budgeted_classical", "none")),
    "bfs_undeclared": dict(plan=None, cc=None),
    # plain A*, the reference of the learned-search table (family classical, architecture astar)
    "astar": dict(plan=None, cc=_cc("exact_classical", "none"),
                  over={"inference": "passage_jax.planners.bounded:make_planner",
                        "family": "classical", "architecture": "astar"}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attribution")
    root = tmp / "cohort"
    F.write_cohort(root)
    out = {}
    for name, r in RUNS.items():
        if "over" in r:
            over = dict(r["over"])
        elif r["plan"] is None:
            over = {"inference": "passage_jax.planners.bfs:make_planner"}
        else:
            over = {"inference": "fixtures_attribution:make_staged",
                    "inference_kwargs": {"plan": r["plan"]}}
        spec = F.spec_dict(root, method_name=name, latency_warmup=0, latency_repeats=1,
                           quality_repeat_index=0, budget=BUDGET, component_control=r["cc"],
                           results_root=str(tmp / "results"), **over)
        folder = tmp / name
        run_spec(parse_spec(spec), folder, progress=False)
        score_run(folder)
        out[name] = folder
    return out


def _quality_records(folder):
    recs = read_requests(folder / "seed-1234" / "requests.jsonl")
    return [r for r in recs if r["series"] == "warm" and r["repeat"] == 0]


# ----------------------------------------------------------------------------- protocol

def test_route_stage_validated_and_recorded(runs):
    assert normalise_result(PlanResult(path=None, route_stage="repair")).route_stage == "repair"
    assert normalise_result({"path": None}).route_stage is None
    for bad in ("decoder", 3, "Primary"):
        with pytest.raises(ProtocolError, match="route_stage"):
            normalise_result(PlanResult(path=None, route_stage=bad))
    assert RECORD_KEYS[-1] == "route_stage"
    recs = _quality_records(runs["bounded_repair"])
    assert {r["sample_id"]: r["route_stage"] for r in recs} == {
        OPEN: "primary", TRAP: "repair", HILL: "fallback"}
    assert all(r["route_stage"] is None for r in _quality_records(runs["bfs"]))
    per = load_score(runs["bounded_repair"] / "seed-1234").per_sample
    assert per["route_stage"].dtype.kind == "U"
    got = dict(zip(per["sample_id"][per["primary_quality"]], per["route_stage"][per["primary_quality"]]))
    assert got == {OPEN: "primary", TRAP: "repair", HILL: "fallback"}
    per_bfs = load_score(runs["bfs"] / "seed-1234").per_sample
    assert set(per_bfs["route_stage"].tolist()) == {""}


# ----------------------------------------------------------------------------- components

def _independent(folder):
    """The component rates and per-stage medians counted here from requests.jsonl."""
    recs = _quality_records(folder)
    n = len(recs)
    legal = [r["status"] == "ok" and r["problem"] is None for r in recs]
    rates = {s: sum(ok and r["route_stage"] == s for r, ok in zip(recs, legal)) / n
             for s in ("primary", "repair", "fallback")}
    med = {}
    for st in ("primary", "repair", "fallback"):
        for c in ("expansions", "queue_operations", "live_states"):
            vals = [r["stage_work"][st][c] for r in recs
                    if st in r["stage_work"] and c in r["stage_work"][st]]
            med[(st, c)] = (float(np.median(vals)) if vals else None, len(vals))
    return rates, med, legal


@pytest.mark.parametrize("name", ["bounded_repair", "prediction_free"])
def test_component_rates_match_independent_counting(runs, name):
    comp = json.loads((runs[name] / "seed-1234" / "metrics.json").read_text())["components"]
    rates, med, legal = _independent(runs[name])
    assert comp["n_rows"] == 3 and comp["route_stage_reporting"] == "all rows"
    assert comp["direct_success_rate"] == pytest.approx(rates["primary"])
    assert comp["repair_rate"] == pytest.approx(rates["repair"])
    assert comp["fallback_rate"] == pytest.approx(rates["fallback"])
    assert comp["no_route_stage_rate"] == 0.0
    for (st, c), (m, k) in med.items():
        assert comp["stage_work"][st][c]["n_reported"] == k
        assert comp["stage_work"][st][c]["median"] == (None if m is None else pytest.approx(m))
    # the plan, known in advance
    plan = RUNS[name]["plan"]
    ok_stage = [STAGE_WORK[plan[s]][0] for s in (OPEN, TRAP, HILL) if plan[s] != "illegal"]
    assert comp["direct_success_rate"] == pytest.approx(ok_stage.count("primary") / 3)
    assert comp["fallback_rate"] == pytest.approx(ok_stage.count("fallback") / 3)
    assert sum(legal) == comp["n_success"] == len(ok_stage)


def test_known_figures_and_missing_counters_are_not_zero(runs):
    comp = json.loads((runs["bounded_repair"] / "seed-1234" / "metrics.json").read_text())["components"]
    assert (comp["direct_success_rate"], comp["repair_rate"], comp["fallback_rate"]) == \
        pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert {s: v["n_rows"] for s, v in comp["stage_ran"].items()} == \
        {"primary": 3, "repair": 2, "fallback": 1}
    assert comp["fallback_frequency"] == pytest.approx(1 / 3)
    prim = comp["stage_work"]["primary"]
    # expansions reported by all three rows: 10, 4, 6
    assert (prim["expansions"]["median"], prim["expansions"]["n_reported"]) == (6.0, 3)
    # queue operations: the repair row reports none -> median of (20, 8) over 2 rows, not of (20, 0, 8)
    assert (prim["queue_operations"]["median"], prim["queue_operations"]["n_reported"]) == (14.0, 2)
    assert prim["queue_operations"]["p90"] == pytest.approx(np.percentile([20, 8], 90))
    assert comp["stage_work"]["fallback"]["expansions"] == {"median": 100.0, "p90": 100.0,
                                                            "n_reported": 1}
    # totals accumulated over the stages: 10, 4+30, 6+40+100
    assert comp["work"]["expansions"]["median"] == 34.0
    assert comp["stage_spans"] is None
    # prediction_free: the illegal primary route is not a direct success; fallback is a true 0
    pf = json.loads((runs["prediction_free"] / "seed-1234" / "metrics.json").read_text())["components"]
    assert pf["route_stage_counts"]["primary"] == 2 and pf["direct_success_rate"] == pytest.approx(1 / 3)
    assert pf["fallback_rate"] == 0.0 and pf["fallback_frequency"] == 0.0
    # the illegal row reports expansions only: no total queue operations for it
    assert pf["work"]["queue_operations"]["n_reported"] == 2
    assert pf["work"]["expansions"]["n_reported"] == 3


def test_classical_planner_rates_are_not_reported(runs):
    comp = json.loads((runs["bfs"] / "seed-1234" / "metrics.json").read_text())["components"]
    assert comp["route_stage_reporting"] == "not reported"
    assert comp["direct_success_rate"] is None and comp["repair_rate"] is None
    assert comp["fallback_rate"] is None and comp["no_route_stage_rate"] == 1.0
    assert comp["stage_ran"]["primary"]["n_rows"] == 3  # BFS charges its work to primary


def test_component_summary_unit():
    recs = [{"route_stage": "primary", "stage_work": {"primary": {"expansions": 3}},
             "work": {"expansions": 3}},
            {"route_stage": None, "stage_work": {}, "work": {}},
            {"route_stage": "repair", "stage_work": {"primary": {"expansions": 1},
                                                     "repair": {"live_states": 4}},
             "work": {"expansions": 1, "live_states": 4}}]
    c = component_summary(recs, [True, False, False])
    assert c["route_stage_reporting"] == "some rows"
    assert c["direct_success_rate"] == pytest.approx(1 / 3) and c["repair_rate"] == 0.0
    assert c["no_route_stage_rate"] == pytest.approx(1 / 3)
    assert c["stage_ran"]["repair"] == {"n_rows": 1, "n_reporting": 2, "rate": 0.5}
    assert c["stage_work"]["repair"]["expansions"]["n_reported"] == 0
    assert c["stage_work"]["repair"]["expansions"]["median"] is None
    assert c["work"]["live_states"] == {"median": 4.0, "p90": 4.0, "n_reported": 1}
    with pytest.raises(ValueError, match="route_stage"):
        component_summary([{"route_stage": "decoder"}], [True])
    empty = component_summary([], [])
    assert empty["direct_success_rate"] is None and empty["no_route_stage_rate"] is None


# ----------------------------------------------------------------------------- attribution

def _flags(table):
    return table["flags"] + [f for r in table["rows"] for f in r["flags"]]


def test_complete_set_has_no_flags(runs):
    t = attribution_table([runs[k] for k in ("bounded_repair", "prediction_free", "direct", "bfs")])
    assert _flags(t) == [] and t["complete"] and t["declared"]
    rows = {r["name"]: r for r in t["rows"]}
    br = rows["bounded_repair"]
    assert (br["variant"], br["guide"], br["checkpoint_id"], br["machinery_id"]) == \
        ("bounded_repair", "learned", "ck1", "m1")
    metrics = json.loads((runs["bounded_repair"] / "seed-1234" / "metrics.json").read_text())
    assert br["figures"]["legal_route_rate"] == metrics["primary"]["success_rate"] == 1.0
    assert br["figures"]["regret_median"] == metrics["primary"]["regret_median"]
    assert br["figures"]["fallback_frequency"] == pytest.approx(1 / 3)
    assert br["figures"]["expansions_median"] == 34.0
    assert br["stage_work"]["repair"]["n_rows_ran"] == 2
    assert rows["bfs"]["figures"]["direct_success_rate"] is None
    md = render_attribution_markdown(t)
    assert "No flags" in md and "| bounded_repair | bounded_repair | learned | ck1 | m1 |" in md
    assert "not reported" in md


def test_missing_control_flagged(runs):
    t = attribution_table([runs["bounded_repair"], runs["bfs"]])
    assert not t["complete"]
    assert "missing control: prediction_free" in t["rows"][0]["flags"]
    assert "missing control: prediction_free" in t["flags"]
    assert t["rows"][1]["flags"] == []
    t2 = attribution_table([runs["bounded_repair"], runs["bfs_undeclared"]])
    assert t2["rows"][1]["flags"] == ["no component_control declared"]
    assert t2["rows"][1]["variant"] is None


def test_inconsistent_machinery_flagged(runs):
    t = attribution_table([runs["bounded_repair"], runs["prediction_free_m2"]])
    msgs = [f for f in t["rows"][0]["flags"] if f.startswith("inconsistent machinery")]
    assert len(msgs) == 1 and "`m1`" in msgs[0] and "`m2`" in msgs[0]
    assert msgs[0] in t["rows"][1]["flags"]
    assert not any("missing control" in f for f in _flags(t))


def test_budget_and_checkpoint_flags_from_entries():
    def entry(name, cc, budget, ck=None):
        return {"name": name, "method_name": name, "path": name, "seeds": [1], "budget": budget,
                "budgets_agree": True, "device": None, "tasks_sha256": "t", "figures": {},
                "per_seed": {}, "reporting": {}, "stage_work": {}, "stage_spans": None,
                "component_control": cc}
    br = entry("br", _cc("bounded_repair", "learned", "ck1", "m1"), {"max_expansions": 10})
    pf = entry("pf", _cc("prediction_free", "prediction_free", None, "m1"), {"max_expansions": 20})
    d = entry("d", _cc("direct", "learned", "ck2"), {})
    t = attribution_rows([br, pf, d])
    assert any(f.startswith("inconsistent budget") for f in t["rows"][0]["flags"])
    assert any(f.startswith("inconsistent budget") for f in t["rows"][1]["flags"])
    assert any(f.startswith("inconsistent checkpoint") for f in t["flags"])
    pf["budget"] = {"max_expansions": 10}
    d["component_control"]["checkpoint_id"] = "ck1"
    assert attribution_rows([br, pf, d])["complete"]


def test_compare_and_report_show_components_and_attribution(runs, tmp_path):
    cmp = compare_runs(runs["bounded_repair"], runs["bfs"], tmp_path / "cmp.json", n_bootstrap=20)
    comp = cmp["methods"]["A"]["per_seed"]["1234"]["components"]
    assert comp["repair_rate"] == pytest.approx(1 / 3)
    assert cmp["methods"]["B"]["per_seed"]["1234"]["components"]["direct_success_rate"] is None
    att = cmp["attribution"]
    assert [r["variant"] for r in att["rows"]] == ["bounded_repair", "budgeted_classical"]
    assert "missing control: prediction_free" in att["flags"]
    md = render_markdown(cmp, {})
    assert "## Components" in md and "## Component attribution" in md
    assert "missing control: prediction_free" in md
    none = compare_runs(runs["bfs_undeclared"], runs["bfs_undeclared"], tmp_path / "c2.json",
                        n_bootstrap=20)
    assert none["attribution"] is None
    assert "## Component attribution" not in render_markdown(none, {})


def test_attribution_report_file_and_cli(runs, tmp_path):
    out = tmp_path / "att.md"
    write_attribution_report([runs["bounded_repair"], runs["prediction_free"]], out)
    text = out.read_text()
    assert "# Component attribution" in text and "No flags" in text
    with pytest.raises(AttributionExists):
        write_attribution_report([runs["bounded_repair"]], out)
    p = ArgumentParser()
    cli_report.register(p)
    out2 = tmp_path / "att2.md"
    args = p.parse_args(["--attribution", str(runs["bounded_repair"]), str(runs["bfs"]),
                         "--output", str(out2)])
    assert cli_report.main(args) == 0
    assert "missing control: prediction_free" in out2.read_text()
    assert cli_report.main(p.parse_args(["--output", str(out2)])) == 2


def test_supervised_execution_records_route_stage(tmp_path):
    root = tmp_path / "cohort"
    F.write_cohort(root)
    spec = F.spec_dict(root, method_name="staged", latency_warmup=0, latency_repeats=1,
                       quality_repeat_index=0, execution="supervised",
                       budget={"wall_time_ms": 60000}, inference="fixtures_attribution:make_staged",
                       inference_kwargs={"plan": PLAN_REPAIR}, results_root=str(tmp_path / "r"))
    run_spec(parse_spec(spec), tmp_path / "run", progress=False)
    recs = read_requests(tmp_path / "run" / "seed-1234" / "requests.jsonl")
    assert {r["sample_id"]: r["route_stage"] for r in recs} == {
        OPEN: "primary", TRAP: "repair", HILL: "fallback"}
    assert all(r["worker"] is not None for r in recs)


# ----------------------------------------------------------------------------- learned search vs A*

def _search_independent(folder, astar_folder):
    """The learned-search figures of ``folder`` against ``astar_folder`` counted here in plain
    Python: expansions from requests.jsonl, c*, start and goal from references.npz, the
    route cost and success of the scored rows."""
    import math
    import statistics

    def per_task(f):
        recs = {r["sample_id"]: r for r in _quality_records(f)}
        ref = np.load(f / "seed-1234" / "references.npz")
        per = load_score(f / "seed-1234").per_sample
        q = per["primary_quality"]
        scored = {str(s): (bool(ok), float(c), float(ms)) for s, ok, c, ms in
                  zip(per["sample_id"][q], per["success"][q], per["predicted_cost"][q], per["latency_ms"][q])}
        out = {}
        for i, sid in enumerate(ref["sample_id"].tolist()):
            r = recs[sid]
            exp = (r["work"] or {}).get("expansions")
            if exp is None:
                exp = sum(v["expansions"] for v in r["stage_work"].values())
            (r0, c0), (r1, c1) = ref["start"][i].tolist(), ref["goal"][i].tolist()
            lo, hi = sorted((abs(r1 - r0), abs(c1 - c0)))
            ok, cost, ms = scored[sid]
            out[sid] = dict(exp=exp, c_star=float(ref["c_star"][i]), ok=ok, cost=cost, ms=ms,
                            lb=30.0 * (hi - lo + math.sqrt(2) * lo))
        return out

    mine, a = per_task(folder), per_task(astar_folder)
    res = {}
    for sub in ("all", "hard"):
        ids = [s for s in mine if sub == "all" or mine[s]["c_star"] / mine[s]["lb"] >= 1.05]
        r = [mine[s]["exp"] / a[s]["exp"] for s in ids if a[s]["ok"] and a[s]["exp"] > 0]
        ok = [s for s in ids if mine[s]["ok"]]
        res[sub] = {
            "n_tasks": len(ids), "n_ratio": len(r),
            "ratio_median": statistics.median(r) if r else None,
            "ratio_mean": statistics.fmean(r) if r else None,
            "ratio_geomean": statistics.geometric_mean(r) if r else None,
            "exp_reduction_pct": 100 * statistics.fmean([max(0, 1 - x) for x in r]) if r else None,
            "success_rate": len(ok) / len(ids) if ids else None,
            "cost_excess_mean": (statistics.fmean([mine[s]["cost"] / mine[s]["c_star"] - 1 for s in ok])
                                 if ok else None),
            "optimal_rate": (sum(abs(mine[s]["cost"] - mine[s]["c_star"]) <= 1e-9 * mine[s]["c_star"]
                                 for s in ok) / len(ids)) if ids else None,
            "wall_ms_median": statistics.median([mine[s]["ms"] for s in ids]) if ids else None,
            "astar_wall_ms_median": statistics.median([a[s]["ms"] for s in ids]) if ids else None,
        }
    return res


def test_learned_search_against_plain_astar(runs, tmp_path):
    names = ("bounded_repair", "prediction_free", "bfs", "astar")
    t = attribution_table([runs[k] for k in names])
    assert t["search_reference"] == "astar"
    rows = {r["name"]: r for r in t["rows"]}
    # the staged planner's known work: OPEN primary 10, TRAP repair 4 + 30, HILL fallback 6 + 40 + 100
    a_exp = {r["sample_id"]: r["work"]["expansions"] for r in _quality_records(runs["astar"])}
    assert all(v > 0 for v in a_exp.values())
    br = rows["bounded_repair"]["search"]
    want_r = sorted([10 / a_exp[OPEN], 34 / a_exp[TRAP], 146 / a_exp[HILL]])
    assert br["all"]["ratio_median"] == pytest.approx(want_r[1])
    assert br["all"]["ratio_geomean"] == pytest.approx((want_r[0] * want_r[1] * want_r[2]) ** (1 / 3))
    assert br["n_unpaired"] == 0 and br["ratio_note"] is None
    for name in ("bounded_repair", "prediction_free", "bfs", "astar"):
        got, want = rows[name]["search"], _search_independent(runs[name], runs["astar"])
        assert got["n_hard"] == want["hard"]["n_tasks"]
        for sub in ("all", "hard"):
            for k, v in want[sub].items():
                assert got[sub][k] == (None if v is None else pytest.approx(v, rel=1e-9)), (name, sub, k)
    # plain A* against itself: ratio 1, every route optimal; the illegal route of prediction_free fails
    assert rows["astar"]["search"]["all"]["ratio_geomean"] == pytest.approx(1.0)
    assert rows["astar"]["search"]["all"]["optimal_rate"] == 1.0
    assert rows["prediction_free"]["search"]["all"]["success_rate"] == pytest.approx(2 / 3)
    md = render_attribution_markdown(t)
    assert "Learned search against plain A* (`astar`" in md
    assert "| bounded_repair | all | 3 | 3 | 0 / 0 |" in md
    # without a plain A* run the figures are n/a, with the reason
    t2 = attribution_table([runs["bounded_repair"], runs["bfs"]])
    assert t2["search_reference"] is None
    assert t2["rows"][0]["search"]["reference"] is None
    md2 = render_attribution_markdown(t2)
    assert "Learned search against plain A*: n/a (no scored run is plain A*" in md2
    # compare's two-run attribution table carries no search block
    cmp = compare_runs(runs["bounded_repair"], runs["astar"], tmp_path / "cmp.json", n_bootstrap=20)
    assert "search_reference" not in cmp["attribution"]
    assert "search" not in cmp["attribution"]["rows"][0]


def test_learned_search_pairing_exclusions_and_missing_counters():
    """Hand-built entries: seed pairing (A*'s first seed stands in), unpaired tasks, an A*
    failure and an A* zero left out of the ratio and counted, unreported expansions -> n/a."""
    def entry(name, seeds, family=None, architecture=None):
        return {"name": name, "method_name": name, "path": name, "seeds": [1], "budget": {},
                "budgets_agree": True, "device": None, "tasks_sha256": "t", "figures": {},
                "per_seed": {}, "reporting": {}, "stage_work": {}, "stage_spans": None,
                "component_control": None, "family": family, "architecture": architecture,
                "_search": seeds}

    def seed(ids, exp, ok, cost, c_star, lb, ms):
        return {"sample_id": ids, "expansions": np.array(exp, float), "success": np.array(ok),
                "cost": np.array(cost, float), "c_star": np.array(c_star, float),
                "lower_bound": np.array(lb, float), "wall_ms": np.array(ms, float)}

    astar = entry("astar", {"1": seed(["a", "b", "c", "d"], [100, 0, 50, 40], [True, True, True, False],
                                      [10, 10, 21, np.nan], [10, 10, 21, 30], [10, 10, 20, 30],
                                      [5, 6, 7, 8])}, "classical", "astar")
    # seed 2 is paired with A*'s seed 1; task "z" has no A* row
    learned = entry("learned", {"2": seed(["a", "b", "c", "d", "z"], [50, 10, 100, 10, 1],
                                          [True, True, True, True, True], [10, 11, 21, 30, 1],
                                          [10, 10, 21, 30, 1], [10, 10, 20, 30, 1], [1, 2, 3, 4, 9])})
    t = attribution_rows([learned, astar], search=True)
    s = t["rows"][0]["search"]
    assert s["reference"] == "astar" and s["n_unpaired"] == 1
    a = s["all"]
    counts = (a["n_tasks"], a["n_ratio"], a["n_excluded_astar_zero"], a["n_excluded_astar_failed"])
    assert counts == (4, 2, 1, 1)
    assert a["ratio_mean"] == pytest.approx((0.5 + 2.0) / 2) and a["ratio_geomean"] == pytest.approx(1.0)
    assert a["exp_reduction_pct"] == pytest.approx(25.0)
    assert a["cost_excess_mean"] == pytest.approx(0.1 / 4) and a["optimal_rate"] == pytest.approx(0.75)
    assert a["wall_ms_median"] == 2.5 and a["astar_wall_ms_median"] == 6.5
    assert s["n_hard"] == 1 and s["hard"]["n_tasks"] == 1 and s["hard"]["ratio_median"] == pytest.approx(2.0)
    # a row without an expansions counter: the ratio figures are n/a, the rest stays
    learned["_search"]["2"]["expansions"][0] = np.nan
    s = attribution_rows([learned, astar], search=True)["rows"][0]["search"]
    assert s["ratio_note"] == "n/a: 1 of 4 rows report no expansions"
    assert s["all"]["ratio_median"] is None and s["all"]["n_ratio"] is None
    assert s["all"]["optimal_rate"] == pytest.approx(0.75)
    from passage_jax.evaluate.attribution._table import _search_lines

    md = "\n".join(_search_lines(attribution_rows([learned, astar], search=True)))
    assert "learned: expansion ratio n/a: 1 of 4 rows report no expansions" in md
    assert "learned: 1 task(s) without a plain A* row" in md


def test_attribution_cell_shows_a_failure_as_a_failure():
    from passage_jax.contract import FAILURE_REGRET
    from passage_jax.evaluate.attribution import format_number

    assert format_number(FAILURE_REGRET) == "failed (failure code)"
    assert format_number(0.25) == "0.2500" and format_number(2.5e5) == "2.500e+05"
