"""The Markdown of a comparison report, section by section (:func:`render_markdown`):
header, per-method metrics, contrasts, valid routes and the both-valid geometry, latency,
components (and the attribution table), procedure limits, blocks, ODD bins, figures.

Every section reads the comparison file (:func:`~passage_jax.evaluate.report_input.read_comparison`)
and returns its lines.
"""
from __future__ import annotations

import json

from passage_jax.contract import PRIMARY_METRICS
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.attribution import markdown_table as _md_table
from passage_jax.evaluate.attribution import render_attribution_markdown

__all__ = ["render_markdown", "components_section", "SECTIONS"]


def _interval(c: dict) -> str:
    """The percentile interval, or why there is none (undefined draws are counted)."""
    if c.get("delta") is None:
        return "n/a"
    if c.get("ci_available"):
        return f"[{_fmt(c['ci_low'])}, {_fmt(c['ci_high'])}]"
    bad, n = c.get("n_undefined_draws"), c.get("n_bootstrap")
    if bad:
        return f"unavailable ({bad}/{n} draws undefined)"
    return "unavailable"


def _delta_header(cmp: dict) -> str:
    """Column name of the aggregate contrast: a seed mean only when both runs hold the same
    seeds; otherwise the mean over the compared pairs (or the single pair's contrast)."""
    if cmp["seed_mean"]:
        return "seed-mean Δ"
    return "Δ" if len(cmp["pairs"]) == 1 else "mean Δ over pairs"


def _block_source(blk: dict) -> str:
    if blk.get("source") == "roster":
        rule = f"rule `{blk['rule']}`" if blk.get("rule") else "no block rule (v1)"
        return f"roster `{blk.get('format')}` ({rule}, sha256 `{str(blk.get('sha256'))[:16]}…`)"
    return f"{blk.get('source')} (rule `{blk.get('rule')}`)"


def _censored_cell(e) -> str:
    """One order-statistic percentile of the censored latency block."""
    if not e:
        return "n/a"
    return f"≥ {_fmt(e['lower_bound'], 2)} (censored)" if e["censored"] else _fmt(e["value"], 2)


def _stage_rate(c: dict, key: str) -> str:
    v = c.get(key)
    return "not reported" if v is None else _fmt(v, 3)


def components_section(cmp: dict) -> list[str]:
    """The per-method component figures (``metrics.json`` ``components``) beside the
    success rate, regret and latency of each seed; empty for compare files without them."""
    rows, st_rows = [], []
    for side in ("A", "B"):
        name = cmp["methods"][side]["method_name"]
        for lab, m in cmp["methods"][side]["per_seed"].items():
            c = m.get("components")
            if not c:
                continue
            p = m["primary"]
            lat = ((m.get("latency_warm") or {}).get("interpolated") or {}).get("p50")
            n = c["n_rows"]
            work = [f"{_fmt(c['work'][k]['median'], 1)} ({c['work'][k]['n_reported']}/{n})"
                    for k in ("expansions", "queue_operations", "live_states")]
            rows.append([f"{side}: {name}", lab, _fmt(p["success_rate"], 3),
                         _fmt(p["regret_median"]), _fmt(p["regret_p90"]), _fmt(lat, 2),
                         _stage_rate(c, "direct_success_rate"), _stage_rate(c, "repair_rate"),
                         _stage_rate(c, "fallback_rate"), _fmt(c.get("no_route_stage_rate"), 3),
                         _stage_rate(c, "fallback_frequency"), *work])
            for st, sw in c["stage_work"].items():
                if sw["n_rows_ran"]:
                    st_rows.append([f"{side}: {name}", lab, st, sw["n_rows_ran"]]
                                   + [f"{_fmt(sw[k]['median'], 1)} / {_fmt(sw[k]['p90'], 1)} "
                                      f"({sw[k]['n_reported']})"
                                      for k in ("expansions", "queue_operations", "live_states")])
    if not rows:
        return []
    out = ["## Components (which stage produced the route, and its work)", "",
           _md_table(["method", "seed", "success", "regret median", "regret p90",
                      "latency p50 ms", "direct", "repair", "fallback", "no stage",
                      "fallback freq", "expansions med", "queue ops med", "live states med"],
                     rows), "",
           "Direct / repair / fallback: share of tasks with a legal route produced by that "
           "stage (\"not reported\" when the planner names no stage; never read as 0); no "
           "stage: share of tasks whose result names no stage; fallback freq: share of rows "
           "whose fallback stage ran. Work: median of the total counter over the rows that "
           "reported it (reported/rows); a missing counter is not zero work.", ""]
    if st_rows:
        out += [_md_table(["method", "seed", "stage", "rows ran", "expansions med / p90 (n)",
                           "queue ops med / p90 (n)", "live states med / p90 (n)"], st_rows), "",
                "Per-stage work over the rows where the stage ran; stages are shown apart, "
                "never summed. Stage spans (per-stage latency) are not recorded.", ""]
    return out


def _protocol_label(run: dict) -> str:
    """``canonical``/``noncanonical`` and the protocol's name (a comparison made before
    protocols were recorded: canonical whole-scene inference)."""
    proto = run.get("inference_protocol") or {"name": "whole-scene (no tiling)"}
    kind = "canonical" if run.get("canonical", True) else "noncanonical"
    return f"**{kind}** (`{proto.get('name')}`)"


def _pairing_allowed(cmp: dict, A: dict, B: dict) -> bool:
    """A canonical run paired with a noncanonical one, as asked for."""
    return bool((cmp.get("inference_protocols") or {}).get("allow_noncanonical")
                and A.get("canonical", True) != B.get("canonical", True))


def _header(cmp: dict, names: tuple) -> list[str]:
    A, B = cmp["runs"]["A"], cmp["runs"]["B"]
    na, nb = names
    ident = cmp["identity"]
    d = ident["data"]
    return [
        f"# Comparison: {na} (A) vs {nb} (B)", "",
        f"- Tasks: {ident['n_tasks']} ({d['resolution']}x{d['resolution']} {d['split']}, "
        f"cost model `{d['cost_model']}`, variant `{d['task_variant']}`), tasks sha256 "
        f"`{str(ident['tasks_sha256'])[:16]}…`",
        f"- References: policy `{ident['references']['policy']}`, identity "
        f"`{str(ident['references']['identity'])[:16]}…`",
        f"- Timing profile: `{ident['timing_profile']['profile']}`",
        f"- Runs: A `{A['path']}` (seeds {A['seeds']}), B `{B['path']}` (seeds {B['seeds']})",
        f"- Inference protocol: A {_protocol_label(A)}; B {_protocol_label(B)}"
        + (" (noncanonical pairing allowed)" if _pairing_allowed(cmp, A, B) else ""),
        f"- Pairs: {', '.join(p['label'] for p in cmp['pairs'])}; seed mean: "
        f"{'yes' if cmp['seed_mean'] else 'no (seed sets differ)'}",
        f"- Created {cmp['created_utc']}", "",
    ]


def _metrics_section(cmp: dict, names: tuple) -> list[str]:
    header = ["method", "seed"] + list(PRIMARY_METRICS) + ["valid / tasks", "connected"]
    rows = []
    for side, name in zip(("A", "B"), names):
        for lab, m in cmp["methods"][side]["per_seed"].items():
            rows.append([f"{side}: {name}", lab] + [_fmt(m["primary"][k]) for k in PRIMARY_METRICS]
                        + [f"{m['n_path_valid']} / {m['n_tasks']}", _fmt(m["connected_rate"])])
    return ["## Six primary metrics per method", "", _md_table(header, rows), "",
            "Regret is over all tasks (a failure counts as 999999); ASSD and H95 are over "
            "each method's own valid routes; rates are over all tasks.", ""]


def _primary_comparison_lines(cmp: dict) -> list[str]:
    pc = cmp.get("primary_comparison")
    lines = []
    if pc and "unavailable" in pc:
        lines += [f"Six-metric comparison (SPEC §5) unavailable: {pc['unavailable']}", ""]
    if pc and "inference_status" in pc:
        lines += [f"Inference status: `{pc['inference_status']}` (no confirmatory verdict "
                  f"without declared paired-test evidence)." if pc["decision"] is None else
                  f"Decision: `{pc['decision']}`, winner {pc['winner']}.", ""]
    return lines


def _contrasts_section(cmp: dict, names: tuple) -> list[str]:
    blk = cmp["blocks"]
    boot = cmp["bootstrap"]
    lines = ["## Contrasts A − B", "",
             f"Intervals: {boot['interval']}, {boot['n_resamples']} resamples, alpha "
             f"{boot['alpha']}, bootstrap seed {boot['seed']}; blocks from {_block_source(blk)}: "
             f"uncertainty **{blk['uncertainty_status']}**"
             + (f" ({blk['reason']})" if blk.get("reason") else "") + ".", ""]
    labels = [p["label"] for p in cmp["pairs"]]
    header = ["metric", "better", _delta_header(cmp), "interval"] + [f"Δ seed {lab}" for lab in labels]
    rows = []
    for k in PRIMARY_METRICS:
        c = cmp["contrasts"][k]
        rows.append([k, c["direction"], _fmt(c["delta"]), _interval(c)]
                    + [f"{_fmt(c['per_seed'][lab]['delta'])} {_interval(c['per_seed'][lab])}"
                       for lab in labels])
    return lines + [_md_table(header, rows), ""] + _primary_comparison_lines(cmp)


def _geometry_section(cmp: dict, names: tuple) -> list[str]:
    na, nb = names
    lines = ["## Valid routes and the both-valid geometry intersection", ""]
    rows = [[lab, c["n_tasks"], c["n_valid_a"], c["n_valid_b"], c["n_both_valid"]]
            for lab, c in cmp["valid_route_denominators"].items()]
    lines += [_md_table(["seed", "tasks", f"valid A ({na})", f"valid B ({nb})", "valid both"],
                        rows), ""]
    gb = cmp["geometry_both_valid"]
    if gb["empty_intersection"]:
        lines += [f"The both-valid intersection is **empty** for {gb['empty_intersection']}; "
                  f"no geometry contrast on it.", ""]
    rows = []
    for g in ("assd_mean", "h95_mean"):
        own, both = cmp["contrasts"][g], gb[g]
        rows.append([g, _fmt(own["delta"]), _interval(own), _fmt(both.get("delta")),
                     _interval(both)])
    return lines + [_md_table(["metric", "Δ own valid subsets", "interval", "Δ both valid",
                               "interval"], rows), ""]


def _latency_row(side: str, name: str, lab: str, m: dict) -> list:
    lw = m.get("latency_warm") or {}
    it, ce = lw.get("interpolated") or {}, lw.get("censored") or {}
    cp = ce.get("percentiles") or {}
    return [f"{side}: {name}", lab, _fmt(it.get("p50"), 2), _fmt(it.get("p95"), 2),
            _fmt(it.get("p99"), 2), *(_censored_cell(cp.get(q)) for q in ("p50", "p95", "p99")),
            ce.get("n_requests"), ce.get("n_successes"), ce.get("n_timeouts"),
            ce.get("n_other_failures"), _fmt(ce.get("at_least_100_warm_requests"))]


def _latency_section(cmp: dict, names: tuple) -> list[str]:
    rows = [_latency_row(side, name, lab, m) for side, name in zip(("A", "B"), names)
            for lab, m in cmp["methods"][side]["per_seed"].items()]
    lc = cmp["latency_contrast"]
    return ["## Latency (warm series)", "",
            _md_table(["method", "seed", "p50 ms", "p95 ms", "p99 ms", "p50 os", "p95 os",
                       "p99 os", "requests", "successes", "timeouts", "other failures",
                       "≥100 warm"], rows), "",
            "p50/p95/p99: linear interpolation over all recorded times; \"os\": order "
            "statistics (inverted CDF) with timeouts ordered as +inf, a censored percentile "
            "shown as a lower bound (`passage-censored-latency/v1`).", "",
            f"Median latency contrast A − B (quality repeat): {_fmt(lc['delta'], 3)} ms, "
            f"interval {_interval(lc)}"
            + (f" ({lc['reason']})" if lc.get("reason") else "") + ".", "",
            *_boundary_note(lc)]


def _boundary_note(lc: dict) -> list[str]:
    """A line saying that the runs' timing boundaries differ, when they do."""
    if lc.get("same_boundary", True):
        return []
    b = lc.get("timing_boundary") or {}
    return [f"The runs' timing boundaries differ (A `{b.get('A')}`, B `{b.get('B')}`): the "
            f"latency contrast is not a like-for-like measurement.", ""]


def _components_and_attribution(cmp: dict, names: tuple) -> list[str]:
    lines = components_section(cmp)
    if cmp.get("attribution"):
        lines += [render_attribution_markdown(cmp["attribution"])]
    return lines


def _limits_section(cmp: dict, names: tuple) -> list[str]:
    lim = cmp["procedure_limits"]
    rows = [[k, json.dumps(lim["A"][k]), json.dumps(lim["B"][k]),
             "**differs**" if k in lim["differ"] else "same"] for k in lim["A"]]
    na, nb = names
    return ["## Procedure limits", "",
            _md_table(["limit", f"A ({na})", f"B ({nb})", "A vs B"], rows), ""]


def _roster_line(blk: dict) -> list[str]:
    if blk.get("source") != "roster":
        return []
    return [f"Blocks from the {blk.get('label', 'roster')} `{blk['roster']}` (sha256 "
            f"`{str(blk['sha256'])[:16]}…`, {blk.get('roster_origin') or 'given'})"
            + (f", derived from the roster with sha256 `{blk['parent']['sha256'][:16]}…`"
               if blk.get("parent") else "") + ".", ""]


def _split_roles_line(cmp: dict) -> list[str]:
    roles = cmp.get("split_roles")
    if not roles:
        return []
    claim = ("a test-set result: both runs are test-role runs with frozen calibration "
             "decisions" if cmp.get("test_set_result") else
             "**not a test-set result**: a test-set claim needs both runs declared "
             "`split_role: test` with their calibration decisions")
    return [f"Split roles: A {roles['A']['split_role']}, B {roles['B']['split_role']}; "
            f"{claim}.", ""]


def _blocks_section(cmp: dict, names: tuple) -> list[str]:
    blk = cmp["blocks"]
    census = blk["census"]
    return (["## Geographic blocks", "",
             f"{census['n_blocks']} blocks over {census['n_tasks']} tasks; largest block "
             f"`{census['largest_block']}` holds {_fmt(census['largest_share'], 3)} of tasks; "
             f"unplaced {census['n_unplaced']}. Adequacy ({census['criterion']}): "
             f"{'met' if census['adequate'] else 'not met'}.", ""]
            + _roster_line(blk) + _split_roles_line(cmp))


def _odd_row(b: dict) -> list:
    desc = ", ".join(f"{k} {v}" for k, v in b["bin"].items())
    if b["n_tasks"] == 0:
        return [desc, 0, "empty"] + [""] * len(PRIMARY_METRICS)
    return [desc, b["n_tasks"], b["uncertainty_status"]] + [
        f"{_fmt(b['contrasts'][k].get('delta'))} {_interval(b['contrasts'][k])}"
        for k in PRIMARY_METRICS]


def _odd_section(cmp: dict, names: tuple) -> list[str]:
    odd = cmp.get("odd")
    if not odd:
        return []
    lines = ["## ODD bins", "", f"Spec `{odd['spec']['path']}` (sha256 "
             f"`{odd['spec']['sha256'][:16]}…`); tasks outside every bin: "
             f"{odd['n_outside_support']}. {odd['note']}.", ""]
    rows = [_odd_row(b) for b in odd["bins"]]
    return lines + [_md_table(["bin", "tasks", "uncertainty"] + [f"Δ {k}" for k in PRIMARY_METRICS],
                              rows), ""]


def _figures_section(figures: dict) -> list[str]:
    lines = ["## Figures", ""]
    for key, caption in (("routes", "Candidate and reference routes on the terrain"),
                         ("regret", "Regret distribution")):
        if figures.get(key):
            lines += [f"![{caption}]({figures[key]})", "", f"*{caption}.*", ""]
    return lines


#: the report's sections in order, each ``(comparison, (name A, name B)) -> lines``
SECTIONS = (_header, _metrics_section, _contrasts_section, _geometry_section, _latency_section,
            _components_and_attribution, _limits_section, _blocks_section, _odd_section)


def render_markdown(cmp: dict, figures: dict) -> str:
    """The report's Markdown of the comparison ``cmp``, with the ``figures`` (key
    ``routes``/``regret`` -> file name beside the report) it links."""
    names = (cmp["runs"]["A"]["method_name"], cmp["runs"]["B"]["method_name"])
    lines = []
    for section in SECTIONS:
        lines += section(cmp, names)
    lines += _figures_section(figures)
    return "\n".join(lines) + "\n"
