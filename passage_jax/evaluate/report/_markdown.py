"""The Markdown of a comparison report, section by section (:func:`render_markdown`):
header, per-method metrics, contrasts, valid routes and the both-valid geometry, latency,
components (and the attribution table), procedure limits, blocks, ODD bins, figures.

Every section reads the comparison file (:func:`~passage_jax.evaluate.report._input.read_comparison`)
and returns its lines.

A regret figure that reaches a failed task (whose regret is the contract's failure code) is
never printed as a number: :func:`regret_cell` writes it ``failed (f/n tasks)``,
:func:`failed_delta` a Δ made of it ``— (A failed)``, :func:`endpoint` an interval endpoint
made of it ``failure-coded`` (the rule: docs/scoring.md, "Failure-coded regret on the pages").

Every text read from the comparison file (names, paths, labels, reasons, identities) is
written through :mod:`~passage_jax.evaluate.text_safety`: ``md_code`` where it is shown as
code, ``md_text`` elsewhere, ``md_url`` for a figure's file name; nothing from the data is
put into the Markdown as it is (docs/scoring.md, "Text on the pages").
"""
from __future__ import annotations

import json
import math

from passage_jax.contract import METRIC_SPEC, PRIMARY_METRICS
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.attribution import markdown_table as _md_table
from passage_jax.evaluate.attribution import render_attribution_markdown
from passage_jax.evaluate.text_safety import md_code, md_text, md_url

__all__ = ["render_markdown", "components_section", "SECTIONS", "FAILURE_CODED_FROM",
           "reaches_failures", "regret_failed", "regret_cell", "failed_delta", "endpoint"]

#: a regret figure with no failure counts behind it (a bootstrap interval endpoint, an ODD
#: bin's Δ) is read as failure-coded from this magnitude on: a mean or interpolation that
#: takes in the failure regret (999999) with a weight of 0.1 % or more
FAILURE_CODED_FROM = 1e3
#: the smallest interpolation weight of a failed task that counts (below it: float dust)
_WEIGHT_EPS = 1e-9


def reaches_failures(q: float, n_tasks: int, n_failed: int) -> bool:
    """Whether the linear-interpolation quantile ``q`` of ``n_tasks`` regrets, ``n_failed``
    of them failures (whose regret, the failure code, sorts above every legal route's), takes
    in a failed task: it is the failure code, or interpolates towards it."""
    n, f = int(n_tasks), int(n_failed)
    if f <= 0 or n <= 0:
        return False
    pos = max((n - 1) * float(q), 0.0)  # as passage_jax.reduce.quantile_positions
    lo = math.floor(pos)
    return lo >= n - f or (lo + 1 >= n - f and pos - lo > _WEIGHT_EPS)


def _is_regret(metric: str) -> bool:
    return str(metric).startswith("regret")


def _coded(x) -> bool:
    """A number without failure counts behind it that is failure-coded (by its size)."""
    return x is not None and math.isfinite(float(x)) and abs(float(x)) >= FAILURE_CODED_FROM


def regret_failed(metric: str, m: dict) -> bool:
    """Whether the regret figure ``metric`` (``regret_median``, ``regret_p90``) of the seed
    summary ``m`` (a compare ``per_seed`` entry or a ``metrics.json``) reaches a failed task;
    by its size where ``m`` has no task counts. False for any other metric."""
    if not _is_regret(metric) or metric not in METRIC_SPEC:
        return False
    value = (m.get("primary") or {}).get(metric)
    if value is None or not math.isfinite(float(value)):
        return False
    n, valid = m.get("n_tasks"), m.get("n_path_valid")
    if n is None or valid is None:
        return _coded(value)
    return reaches_failures(METRIC_SPEC[metric][1], n, n - valid)


def regret_cell(metric: str, m: dict, digits: int = 4) -> str:
    """The table cell of ``m``'s figure ``metric``: ``failed (f/n tasks)`` where it reaches a
    failed task, else the number."""
    if regret_failed(metric, m):
        n, valid = m.get("n_tasks"), m.get("n_path_valid")
        return "failed" if n is None or valid is None else f"failed ({n - valid}/{n} tasks)"
    return _fmt(m["primary"][metric], digits)


def failed_delta(metric: str, c: dict, failed=(False, False), names=("A", "B")) -> str | None:
    """The text shown instead of the Δ of contrast ``c`` when it is failure-coded:
    ``— (A failed)``, ``— (B failed)``, ``— (both failed)`` after ``failed`` (whether each
    side's figure reaches a failed task; ``names`` the sides), ``— (failure-coded)`` for a Δ
    failure-coded by its size alone; None when the Δ is a regret difference (or not a regret)."""
    if not _is_regret(metric) or c.get("delta") is None:
        return None
    fa, fb = failed
    who = ("both failed" if fa and fb else f"{names[0]} failed" if fa else
           f"{names[1]} failed" if fb else "failure-coded" if _coded(c["delta"]) else None)
    return None if who is None else f"— ({who})"


def endpoint(metric: str, x, digits: int = 4) -> str:
    """An interval endpoint: ``failure-coded`` for a regret draw made of the failure code."""
    return "failure-coded" if _is_regret(metric) and _coded(x) else _fmt(x, digits)


def _side_failed(cmp: dict, metric: str, lab: str | None = None) -> tuple[bool, bool]:
    """Whether A's and B's figure reaches a failed task (in seed pair ``lab``, or any)."""
    out = []
    for side in ("A", "B"):
        per = cmp["methods"][side]["per_seed"]
        seeds = [per[lab]] if lab is not None and lab in per else list(per.values())
        out.append(any(regret_failed(metric, m) for m in seeds))
    return out[0], out[1]


def _delta_cell(metric: str, c: dict, failed) -> str:
    """A Δ with its interval in one cell (the failure text alone when failure-coded)."""
    return failed_delta(metric, c, failed) or f"{_fmt(c.get('delta'))} {_interval(c, metric)}"


def _interval(c: dict, metric: str = "") -> str:
    """The percentile interval, or why there is none (undefined draws are counted)."""
    if c.get("delta") is None:
        return "n/a"
    if c.get("ci_available"):
        return f"[{endpoint(metric, c['ci_low'])}, {endpoint(metric, c['ci_high'])}]"
    bad, n = c.get("n_undefined_draws"), c.get("n_bootstrap")
    if bad:
        return f"unavailable ({md_text(bad)}/{md_text(n)} draws undefined)"
    return "unavailable"


def _delta_header(cmp: dict) -> str:
    """Column name of the aggregate contrast: a seed mean only when both runs hold the same
    seeds; otherwise the mean over the compared pairs (or the single pair's contrast)."""
    if cmp["seed_mean"]:
        return "seed-mean Δ"
    return "Δ" if len(cmp["pairs"]) == 1 else "mean Δ over pairs"


def _block_source(blk: dict) -> str:
    if blk.get("source") == "roster":
        rule = f"rule {md_code(blk['rule'])}" if blk.get("rule") else "no block rule (v1)"
        return (f"roster {md_code(blk.get('format'))} ({rule}, sha256 "
                f"{md_code(str(blk.get('sha256'))[:16] + '…')})")
    return f"{md_text(blk.get('source'))} (rule {md_code(blk.get('rule'))})"


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
        name = md_text(cmp["methods"][side]["method_name"])
        for lab, m in cmp["methods"][side]["per_seed"].items():
            lab = md_text(lab)
            c = m.get("components")
            if not c:
                continue
            p = m["primary"]
            lat = ((m.get("latency_warm") or {}).get("interpolated") or {}).get("p50")
            n = c["n_rows"]
            work = [f"{_fmt(c['work'][k]['median'], 1)} ({md_text(c['work'][k]['n_reported'])}/"
                    f"{md_text(n)})" for k in ("expansions", "queue_operations", "live_states")]
            rows.append([f"{side}: {name}", lab, _fmt(p["success_rate"], 3),
                         regret_cell("regret_median", m), regret_cell("regret_p90", m),
                         _fmt(lat, 2),
                         _stage_rate(c, "direct_success_rate"), _stage_rate(c, "repair_rate"),
                         _stage_rate(c, "fallback_rate"), _fmt(c.get("no_route_stage_rate"), 3),
                         _stage_rate(c, "fallback_frequency"), *work])
            for st, sw in c["stage_work"].items():
                if sw["n_rows_ran"]:
                    st_rows.append([f"{side}: {name}", lab, md_text(st), md_text(sw["n_rows_ran"])]
                                   + [f"{_fmt(sw[k]['median'], 1)} / {_fmt(sw[k]['p90'], 1)} "
                                      f"({md_text(sw[k]['n_reported'])})"
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
           "whose fallback stage ran. Regret \"failed (f/n tasks)\": the figure reaches a "
           "failed task (see the primary metrics). Work: median of the total counter over the "
           "rows that reported it (reported/rows); a missing counter is not zero work.", ""]
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
    return f"**{kind}** ({md_code(proto.get('name'))})"


def _pairing_allowed(cmp: dict, A: dict, B: dict) -> bool:
    """A canonical run paired with a noncanonical one, as asked for."""
    return bool((cmp.get("inference_protocols") or {}).get("allow_noncanonical")
                and A.get("canonical", True) != B.get("canonical", True))


def _procedure(timing: dict) -> str:
    """The procedure the timing profile names: batches of ``batch_size`` scenes (the
    batched procedure: latency per batch and per scene, never per request), or batch one."""
    size = timing.get("batch_size")
    return "batch one" if size is None else (f"the batched procedure, batches of {md_text(size)}; "
                                             f"latency per batch and amortised per scene")


def _header(cmp: dict, names: tuple) -> list[str]:
    A, B = cmp["runs"]["A"], cmp["runs"]["B"]
    na, nb = names  # already md_text (render_markdown)
    ident = cmp["identity"]
    d = ident["data"]
    res = md_text(d["resolution"])
    return [
        f"# Comparison: {na} (A) vs {nb} (B)", "",
        f"- Tasks: {md_text(ident['n_tasks'])} ({res}x{res} {md_text(d['split'])}, "
        f"cost model {md_code(d['cost_model'])}, variant {md_code(d['task_variant'])}), tasks "
        f"sha256 {md_code(str(ident['tasks_sha256'])[:16] + '…')}",
        f"- References: policy {md_code(ident['references']['policy'])}, identity "
        f"{md_code(str(ident['references']['identity'])[:16] + '…')}",
        f"- Timing profile: {md_code(ident['timing_profile']['profile'])}, both sides "
        f"({_procedure(ident['timing_profile'])})",
        f"- Runs: A {md_code(A['path'])} (seeds {md_text(A['seeds'])}), B {md_code(B['path'])} "
        f"(seeds {md_text(B['seeds'])})",
        f"- Inference protocol: A {_protocol_label(A)}; B {_protocol_label(B)}"
        + (" (noncanonical pairing allowed)" if _pairing_allowed(cmp, A, B) else ""),
        f"- Pairs: {', '.join(md_text(p['label']) for p in cmp['pairs'])}; seed mean: "
        f"{'yes' if cmp['seed_mean'] else 'no (seed sets differ)'}",
        f"- Created {md_text(cmp['created_utc'])}", "",
    ]


def _metrics_section(cmp: dict, names: tuple) -> list[str]:
    header = ["method", "seed"] + list(PRIMARY_METRICS) + ["valid / tasks", "connected"]
    rows = []
    for side, name in zip(("A", "B"), names):
        for lab, m in cmp["methods"][side]["per_seed"].items():
            rows.append([f"{side}: {name}", md_text(lab)]
                        + [regret_cell(k, m) for k in PRIMARY_METRICS]
                        + [f"{md_text(m['n_path_valid'])} / {md_text(m['n_tasks'])}",
                           _fmt(m["connected_rate"])])
    return ["## Six primary metrics per method", "", _md_table(header, rows), "",
            "Regret is over all tasks, a failed task counting the contract's failure regret; "
            "a regret figure that reaches a failed task is shown as \"failed (f/n tasks)\" (f "
            "of its n tasks failed), never as that code. ASSD and H95 are over each method's "
            "own valid routes; rates are over all tasks.", ""]


def _primary_comparison_lines(cmp: dict) -> list[str]:
    pc = cmp.get("primary_comparison")
    lines = []
    if pc and "unavailable" in pc:
        lines += [f"Six-metric comparison (SPEC §5) unavailable: {md_text(pc['unavailable'])}", ""]
    if pc and "inference_status" in pc:
        lines += [f"Inference status: {md_code(pc['inference_status'])} (no confirmatory verdict "
                  f"without declared paired-test evidence)." if pc["decision"] is None else
                  f"Decision: {md_code(pc['decision'])}, winner {md_text(pc['winner'])}.", ""]
    return lines


def _contrasts_section(cmp: dict, names: tuple) -> list[str]:
    blk = cmp["blocks"]
    boot = cmp["bootstrap"]
    lines = ["## Contrasts A − B", "",
             f"Intervals: {md_text(boot['interval'])}, {md_text(boot['n_resamples'])} resamples, "
             f"alpha {md_text(boot['alpha'])}, bootstrap seed {md_text(boot['seed'])}; blocks from "
             f"{_block_source(blk)}: uncertainty **{md_text(blk['uncertainty_status'])}**"
             + (f" ({md_text(blk['reason'])})" if blk.get("reason") else "") + ".", ""]
    labels = [p["label"] for p in cmp["pairs"]]
    header = (["metric", "better", _delta_header(cmp), "interval"]
              + [f"Δ seed {md_text(lab)}" for lab in labels])
    rows = []
    for k in PRIMARY_METRICS:
        c = cmp["contrasts"][k]
        coded = failed_delta(k, c, _side_failed(cmp, k))
        rows.append([k, md_text(c["direction"]), coded or _fmt(c["delta"]),
                     "— (failure-coded)" if coded else _interval(c, k)]
                    + [_delta_cell(k, c["per_seed"][lab], _side_failed(cmp, k, lab))
                       for lab in labels])
    note = ["A regret Δ is \"— (A failed)\" (B, both) where a side's figure reaches a failed "
            "task (it is then no regret difference); an interval endpoint made of the failure "
            "regret is \"failure-coded\".", ""]
    if not any("failed" in str(x) or "failure-coded" in str(x) for r in rows for x in r):
        note = []
    return lines + [_md_table(header, rows), ""] + note + _primary_comparison_lines(cmp)


def _geometry_section(cmp: dict, names: tuple) -> list[str]:
    na, nb = names
    lines = ["## Valid routes and the both-valid geometry intersection", ""]
    rows = [[md_text(x) for x in (lab, c["n_tasks"], c["n_valid_a"], c["n_valid_b"],
                                  c["n_both_valid"])]
            for lab, c in cmp["valid_route_denominators"].items()]
    lines += [_md_table(["seed", "tasks", f"valid A ({na})", f"valid B ({nb})", "valid both"],
                        rows), ""]
    gb = cmp["geometry_both_valid"]
    if gb["empty_intersection"]:
        lines += [f"The both-valid intersection is **empty** for {md_text(gb['empty_intersection'])}; "
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
    return [f"{side}: {name}", md_text(lab), _fmt(it.get("p50"), 2), _fmt(it.get("p95"), 2),
            _fmt(it.get("p99"), 2), *(_censored_cell(cp.get(q)) for q in ("p50", "p95", "p99")),
            *(md_text(ce.get(k)) for k in ("n_requests", "n_successes", "n_timeouts",
                                           "n_other_failures")),
            _fmt(ce.get("at_least_100_warm_requests"))]


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
            + (f" ({md_text(lc['reason'])})" if lc.get("reason") else "") + ".", "",
            *_boundary_note(lc)]


def _boundary_note(lc: dict) -> list[str]:
    """A line saying that the runs' timing boundaries differ, when they do."""
    if lc.get("same_boundary", True):
        return []
    b = lc.get("timing_boundary") or {}
    return [f"The runs' timing boundaries differ (A {md_code(b.get('A'))}, B {md_code(b.get('B'))}): the "
            f"latency contrast is not a like-for-like measurement.", ""]


def _components_and_attribution(cmp: dict, names: tuple) -> list[str]:
    lines = components_section(cmp)
    if cmp.get("attribution"):
        lines += [render_attribution_markdown(cmp["attribution"])]
    return lines


def _limits_section(cmp: dict, names: tuple) -> list[str]:
    lim = cmp["procedure_limits"]
    rows = [[md_text(k), md_text(json.dumps(lim["A"][k])), md_text(json.dumps(lim["B"][k])),
             "**differs**" if k in lim["differ"] else "same"] for k in lim["A"]]
    na, nb = names
    return ["## Procedure limits", "",
            _md_table(["limit", f"A ({na})", f"B ({nb})", "A vs B"], rows), ""]


def _roster_line(blk: dict) -> list[str]:
    if blk.get("source") != "roster":
        return []
    return [f"Blocks from the {md_text(blk.get('label', 'roster'))} {md_code(blk['roster'])} "
            f"(sha256 {md_code(str(blk['sha256'])[:16] + '…')}, "
            f"{md_text(blk.get('roster_origin') or 'given')})"
            + (f", derived from the roster with sha256 "
               f"{md_code(str(blk['parent']['sha256'])[:16] + '…')}"
               if blk.get("parent") else "") + ".", ""]


def _split_roles_line(cmp: dict) -> list[str]:
    roles = cmp.get("split_roles")
    if not roles:
        return []
    claim = ("a test-set result: both runs are test-role runs with frozen calibration "
             "decisions" if cmp.get("test_set_result") else
             "**not a test-set result**: a test-set claim needs both runs declared "
             "`split_role: test` with their calibration decisions")
    return [f"Split roles: A {md_text(roles['A']['split_role'])}, B "
            f"{md_text(roles['B']['split_role'])}; "
            f"{claim}.", ""]


def _blocks_section(cmp: dict, names: tuple) -> list[str]:
    blk = cmp["blocks"]
    census = blk["census"]
    return (["## Geographic blocks", "",
             f"{md_text(census['n_blocks'])} blocks over {md_text(census['n_tasks'])} tasks; "
             f"largest block {md_code(census['largest_block'])} holds "
             f"{_fmt(census['largest_share'], 3)} of tasks; unplaced "
             f"{md_text(census['n_unplaced'])}. Adequacy ({md_text(census['criterion'])}): "
             f"{'met' if census['adequate'] else 'not met'}.", ""]
            + _roster_line(blk) + _split_roles_line(cmp))


def _odd_row(b: dict) -> list:
    desc = md_text(", ".join(f"{k} {v}" for k, v in b["bin"].items()))
    if b["n_tasks"] == 0:
        return [desc, 0, "empty"] + [""] * len(PRIMARY_METRICS)
    return [desc, md_text(b["n_tasks"]), md_text(b["uncertainty_status"])] + [
        _delta_cell(k, b["contrasts"][k], (False, False)) for k in PRIMARY_METRICS]


def _odd_section(cmp: dict, names: tuple) -> list[str]:
    odd = cmp.get("odd")
    if not odd:
        return []
    lines = ["## ODD bins", "", f"Spec {md_code(odd['spec']['path'])} (sha256 "
             f"{md_code(str(odd['spec']['sha256'])[:16] + '…')}); tasks outside every bin: "
             f"{md_text(odd['n_outside_support'])}. {md_text(odd['note'])}.", ""]
    rows = [_odd_row(b) for b in odd["bins"]]
    return lines + [_md_table(["bin", "tasks", "uncertainty"] + [f"Δ {k}" for k in PRIMARY_METRICS],
                              rows), ""]


def _figures_section(figures: dict) -> list[str]:
    lines = ["## Figures", ""]
    for key, caption in (("routes", "Candidate and reference routes on the terrain"),
                         ("regret", "Regret distribution")):
        if figures.get(key):
            lines += [f"![{caption}]({md_url(figures[key])})", "", f"*{caption}.*", ""]
    return lines


#: the report's sections in order, each ``(comparison, (name A, name B)) -> lines``
SECTIONS = (_header, _metrics_section, _contrasts_section, _geometry_section, _latency_section,
            _components_and_attribution, _limits_section, _blocks_section, _odd_section)


def render_markdown(cmp: dict, figures: dict) -> str:
    """The report's Markdown of the comparison ``cmp``, with the ``figures`` (key
    ``routes``/``regret`` -> file name beside the report) it links. The method names are
    passed to every section already escaped (``md_text``)."""
    names = (md_text(cmp["runs"]["A"]["method_name"]), md_text(cmp["runs"]["B"]["method_name"]))
    lines = []
    for section in SECTIONS:
        lines += section(cmp, names)
    lines += _figures_section(figures)
    return "\n".join(lines) + "\n"
