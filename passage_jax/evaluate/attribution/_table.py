"""Component-attribution table over any number of scored runs (docs/scoring.md, "Component attribution").

:func:`attribution_table` takes scored runs (run folders or seed folders), for
example four decoder variants and a classical baseline, and returns one row per run:
its declared ``component_control`` (variant, guide, checkpoint_id, machinery_id,
primary_learned; from the run's manifest) beside the legal-route rate
(``success_rate``), all-task regret (median, p90), total work medians (expansions,
queue operations, live states, with how many rows reported each), the direct,
repair and fallback rates, the fallback frequency and the warm latency of the
quality repeat (p50, p95). Each figure is the mean over the run's seeds of its
per-seed value in ``metrics.json``, and ``null`` when a seed lacks it (nothing is
filled in). Stage work is shown per stage; stage figures are never summed.

The table checks the experiment and marks what is wrong as flags, never inferring a
missing piece:

* ``missing control: <variant>``: a declared variant without the run that controls
  it (:data:`REQUIRED_CONTROLS`; e.g. ``bounded_repair`` without ``prediction_free``);
* ``inconsistent machinery`` / ``inconsistent budget``: a ``bounded_repair`` run and
  its ``prediction_free`` control with different ``machinery_id`` or budget blocks;
* ``inconsistent checkpoint``: learned-guide runs with different ``checkpoint_id``;
* ``different workload`` / ``different device`` / ``different seeds``: runs on other
  tasks (``tasks_sha256``), devices or seed sets;
* ``no component_control declared``: a run without a declaration beside runs with one;
* ``diagnostic only``: an ``oracle_diagnostic`` run (it cannot represent ordinary input).

:func:`render_attribution_markdown` renders the table; :func:`write_attribution_report`
writes it to a Markdown file (``python -m cli report --attribution DIR ... --output F``).

**Learned search against plain A*** (:func:`attribution_table`, so ``report
--attribution``; not the two-run table of ``compare``): when one of the scored runs is
plain A* (its spec declares ``family: classical``, ``architecture: astar``), each row
gets ``search``, the learned-search report against it, rendered as a second table
(:mod:`passage_jax.evaluate.attribution._search` reads the per-task inputs and states
every decision).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from passage_jax.contract import FAILURE_REGRET
from passage_jax.evaluate.attribution._search import (
    SearchInputError,
    is_astar_reference,
    search_figures,
    search_inputs,
)
from passage_jax.evaluate.score import ScoreError, load_score, seed_folders
from passage_jax.evaluate.text_safety import md_cell, md_code, md_text
from passage_jax.fileio import atomic_write_text, jsonable, utc_now
from passage_jax.protocol.contracts import STAGES, WORK_KEYS
from passage_jax.protocol.runfolder import REFERENCES

__all__ = [
    "format_number", "markdown_table", "attribution_table", "attribution_rows", "attribution_flags",
    "run_entry",
    "render_attribution_markdown", "write_attribution_report", "AttributionError",
    "AttributionExists", "ATTRIBUTION_FORMAT", "REQUIRED_CONTROLS", "ROW_FIGURES", "CONTROL_SPECS",
]

ATTRIBUTION_FORMAT = "passage-attribution-v1"
#: declared variant -> the variants whose runs must be present to attribute it
REQUIRED_CONTROLS = {
    "direct": (),
    "bounded_repair": ("prediction_free",),
    "prediction_free": ("bounded_repair",),
    "exact_fallback": ("bounded_repair",),
    "exact_classical": (),
    "budgeted_classical": (),
    "oracle_diagnostic": (),
}
#: variant -> the shipped run spec that declares it (named by a ``missing control`` flag's hint)
CONTROL_SPECS = {
    "direct": "configs/learned_direct.yaml",
    "bounded_repair": "configs/learned_bounded_repair.yaml",
    "prediction_free": "configs/learned_prediction_free.yaml",
    "exact_fallback": "configs/learned_exact_fallback.yaml",
}
#: the per-run figures of a row (seed means), in table order
ROW_FIGURES = ("legal_route_rate", "regret_median", "regret_p90", "direct_success_rate",
               "repair_rate", "fallback_rate", "no_route_stage_rate", "fallback_frequency",
               "expansions_median", "queue_operations_median", "live_states_median",
               "latency_p50_ms", "latency_p95_ms")


class AttributionError(RuntimeError):
    """A run cannot enter the attribution table (not scored, unreadable)."""


class AttributionExists(AttributionError, FileExistsError):
    """The report file already exists (replacing it must be asked for)."""


def _seed_figures(metrics: dict) -> dict:
    p = metrics.get("primary") or {}
    comp = metrics.get("components") or {}
    work = comp.get("work") or {}
    lat = ((metrics.get("latency_warm_quality_repeat") or {}).get("interpolated") or {})
    out = {"legal_route_rate": p.get("success_rate"), "regret_median": p.get("regret_median"),
           "regret_p90": p.get("regret_p90"),
           "direct_success_rate": comp.get("direct_success_rate"),
           "repair_rate": comp.get("repair_rate"), "fallback_rate": comp.get("fallback_rate"),
           "no_route_stage_rate": comp.get("no_route_stage_rate"),
           "fallback_frequency": comp.get("fallback_frequency"),
           "latency_p50_ms": lat.get("p50"), "latency_p95_ms": lat.get("p95")}
    for c in WORK_KEYS:
        out[f"{c}_median"] = (work.get(c) or {}).get("median")
    return out


def _seed_mean(values: list):
    """Mean over seeds; ``None`` when any seed lacks the figure."""
    if not values or any(v is None for v in values):
        return None
    return float(np.mean([float(v) for v in values]))


def _stage_medians(comps: list, stage: str) -> dict:
    """A stage's work medians: the mean over the seeds where the stage ran of each seed's
    median (a seed whose stage never ran has no median to average, and is not a missing
    counter); ``None`` when a seed where it ran lacks the counter."""
    ran = [((c.get("stage_work") or {}).get(stage) or {}) for c in comps]
    ran = [sw for sw in ran if int(sw.get("n_rows_ran") or 0) > 0]
    return {f"{k}_median": _seed_mean([(sw.get(k) or {}).get("median") for sw in ran])
            for k in WORK_KEYS}


def _entry_search(folders, scores) -> dict:
    """Per seed, the per-task inputs of the learned-search table (``search_inputs``)."""
    try:
        return {str(s.manifest.get("seed")): search_inputs(f, s) for f, s in zip(folders, scores)}
    except SearchInputError as e:
        raise AttributionError(str(e)) from None


def run_entry(path, name: str | None = None, search: bool = False) -> dict:
    """One scored run's row: declaration, identity, limits, seed-mean figures, the
    per-stage work and the reporting counts behind them; with ``search`` also the
    per-task inputs of the learned-search table (``_search``, per seed; not exported)."""
    try:
        folders = seed_folders(path)
        scores = [load_score(f) for f in folders]
    except ScoreError as e:
        raise AttributionError(str(e)) from None
    m0 = scores[0].manifest
    cc = m0.get("component_control")
    if cc is None:
        cc = (m0.get("spec") or {}).get("component_control")
    per_seed = {}
    for s in scores:
        m = s.manifest
        per_seed[str(m.get("seed"))] = {
            "figures": _seed_figures(s.metrics),
            "components": s.metrics.get("components"),
            "budget": {k: v for k, v in (m.get("budget") or {}).items() if v is not None},
            "device": m.get("device"),
            "tasks_sha256": (m.get("data") or {}).get("tasks_sha256"),
        }
    seeds = list(per_seed)
    figures = {k: _seed_mean([per_seed[s]["figures"][k] for s in seeds]) for k in ROW_FIGURES}
    comps = [per_seed[s]["components"] or {} for s in seeds]
    reporting = {
        "n_rows": sum(int(c.get("n_rows") or 0) for c in comps),
        "route_stage_reporting": sorted({str(c.get("route_stage_reporting")) for c in comps}),
        "work_reported": {k: sum(int(((c.get("work") or {}).get(k) or {}).get("n_reported") or 0)
                                 for c in comps) for k in WORK_KEYS},
    }
    stage_work = {st: _stage_medians(comps, st) for st in STAGES}
    for st in STAGES:
        stage_work[st]["n_rows_ran"] = sum(int(((c.get("stage_work") or {}).get(st) or {})
                                               .get("n_rows_ran") or 0) for c in comps)
    spans = [c.get("stage_spans") for c in comps]
    budgets = [per_seed[s]["budget"] for s in seeds]
    spec = m0.get("spec") or {}
    entry_search = _entry_search(folders, scores) if search else None
    return {
        "name": name or m0.get("method_name"),
        "path": str(Path(path).resolve()),
        "method_name": m0.get("method_name"),
        "family": spec.get("family"),
        "architecture": spec.get("architecture"),
        "_search": entry_search,
        "component_control": cc,
        "seeds": [int(s) for s in seeds],
        "budget": budgets[0] if all(b == budgets[0] for b in budgets) else None,
        "budgets_agree": all(b == budgets[0] for b in budgets),
        "device": per_seed[seeds[0]]["device"],
        "tasks_sha256": per_seed[seeds[0]]["tasks_sha256"],
        "figures": figures,
        "per_seed": {s: v["figures"] for s, v in per_seed.items()},
        "reporting": reporting,
        "stage_work": stage_work,
        "stage_spans": None if all(sp is None for sp in spans) else spans,
    }


def _variant(e: dict):
    return (e.get("component_control") or {}).get("variant")


def _cc(e: dict, key: str):
    return (e.get("component_control") or {}).get(key)


def attribution_flags(entries: list) -> tuple[list, list]:
    """``(per-row flag lists, table flags)`` of :func:`run_entry` rows."""
    rows = [[] for _ in entries]
    table = []
    declared = [e for e in entries if e.get("component_control")]
    present = {_variant(e) for e in declared}
    for i, e in enumerate(entries):
        v = _variant(e)
        if v is None:
            if declared:
                rows[i].append("no component_control declared")
            continue
        for need in REQUIRED_CONTROLS.get(v, ()):
            if need not in present:
                rows[i].append(f"missing control: {need}")
        if v == "oracle_diagnostic":
            rows[i].append("diagnostic only: oracle guide, not ordinary input")
        if not e.get("budgets_agree", True):
            rows[i].append("inconsistent budget across seeds")
    # the repair machinery and its budget: bounded_repair vs its prediction_free control
    for i, e in enumerate(entries):
        if _variant(e) != "bounded_repair":
            continue
        for j, c in enumerate(entries):
            if _variant(c) != "prediction_free":
                continue
            if _cc(e, "machinery_id") != _cc(c, "machinery_id"):
                msg = (f"inconsistent machinery: bounded_repair {e['name']!r} "
                       f"`{_cc(e, 'machinery_id')}` vs prediction_free {c['name']!r} "
                       f"`{_cc(c, 'machinery_id')}`")
                rows[i].append(msg)
                rows[j].append(msg)
            if e.get("budget") != c.get("budget"):
                msg = (f"inconsistent budget: bounded_repair {e['name']!r} {e.get('budget')} vs "
                       f"prediction_free {c['name']!r} {c.get('budget')}")
                rows[i].append(msg)
                rows[j].append(msg)
    learned = [e for e in declared if _cc(e, "guide") == "learned" or
               _variant(e) in ("direct", "bounded_repair")]
    ckpts = sorted({str(_cc(e, "checkpoint_id")) for e in learned})
    if len(ckpts) > 1:
        table.append(f"inconsistent checkpoint: learned-guide runs declare {ckpts}")
    for key, what in (("tasks_sha256", "different workload (tasks_sha256)"),
                      ("device", "different device"), ("seeds", "different seeds")):
        vals = [e.get(key) for e in entries]
        if any(v != vals[0] for v in vals):
            table.append(f"{what}: " + ", ".join(f"{e['name']} {e.get(key)}" for e in entries))
    missing = sorted({f.split(": ", 1)[1] for r in rows for f in r
                      if f.startswith("missing control: ")})
    table += [f"missing control: {m}" for m in missing]
    return [sorted(set(r), key=r.index) for r in rows], table


def attribution_rows(entries: list, search: bool = False) -> dict:
    """The table of already built :func:`run_entry` rows, with their flags; with
    ``search`` (rows built with ``search=True``) each row's learned-search figures
    against the first plain A* row (``search`` per row, and the table's
    ``search_reference``)."""
    flags, table_flags = attribution_flags(entries)
    reference = next((e for e in entries if is_astar_reference(e)), None) if search else None
    rows = []
    for e, f in zip(entries, flags):
        cc = e.get("component_control") or {}
        rows.append({**{k: e[k] for k in ("name", "method_name", "path", "seeds", "budget",
                                           "device", "figures", "per_seed", "reporting",
                                           "stage_work", "stage_spans")},
                     "variant": cc.get("variant"), "guide": cc.get("guide"),
                     "checkpoint_id": cc.get("checkpoint_id"),
                     "machinery_id": cc.get("machinery_id"),
                     "primary_learned": cc.get("primary_learned"),
                     "declared": bool(cc), "flags": f})
        if search:
            rows[-1]["search"] = search_figures(e, reference)
    extra = {}
    if search:
        extra["search_reference"] = None if reference is None else reference["name"]
    return jsonable({
        "format": ATTRIBUTION_FORMAT,
        "declared": any(r["declared"] for r in rows),
        "rows": rows,
        **extra,
        "flags": table_flags,
        "complete": not table_flags and not any(r["flags"] for r in rows),
        "figures": "mean over each run's seeds of the per-seed value (null when a seed lacks "
                   "it); legal_route_rate is success_rate; regret over all tasks; work medians "
                   "over the rows that reported the counter; stage figures never summed",
    })


def attribution_table(score_dirs, names=None) -> dict:
    """The attribution table of any number of scored runs (run or seed folders), with
    the learned-search figures against plain A* (module text); ``names`` optionally
    labels them (default: each run's method name)."""
    score_dirs = list(score_dirs)
    if not score_dirs:
        raise AttributionError("no scored run given")
    names = list(names) if names is not None else [None] * len(score_dirs)
    if len(names) != len(score_dirs):
        raise AttributionError(f"{len(names)} names for {len(score_dirs)} runs")
    entries = [run_entry(p, n, search=True) for p, n in zip(score_dirs, names)]
    return attribution_rows(entries, search=True)


def format_number(x, digits=4) -> str:
    """A table cell: None/NaN -> "n/a", booleans yes/no, the failure regret as
    ``failed (failure code)`` (never the code's number: docs/scoring.md),
    ulp-level values as 0, very large or small values in e-notation."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return "n/a"
    if x == FAILURE_REGRET:
        return "failed (failure code)"
    if abs(x) < 1e-12:  # ulp-level differences (e.g. an exact route's recomputed cost)
        return f"{0.0:.{digits}f}"
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.3e}"
    return f"{x:.{digits}f}"


def markdown_table(header, rows) -> str:
    """A Markdown table: a header row, the rule, one row per item. Cells are Markdown (a
    name or other data in them already through :func:`~passage_jax.evaluate.text_safety.md_text`
    or ``md_code``); every ``|`` in them is escaped here (``md_cell``)."""
    out = ["| " + " | ".join(md_cell(c) for c in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _rate(x) -> str:
    return "not reported" if x is None else format_number(x, 3)


def _control_hint(flag: str) -> str:
    """What to run for a ``missing control: <variant>`` flag (empty for other flags)."""
    if not flag.startswith("missing control: "):
        return ""
    variant = flag.split(": ", 1)[1]
    spec = CONTROL_SPECS.get(variant)
    how = (f"a run spec declaring {md_code(f'component_control.variant: {variant}')} with the "
           f"same machinery_id and budget")
    if spec is None:
        return f" (run and score {how}, then add it to the table)"
    return (f" (run and score {how}, e.g. the shipped `{spec}`: `python -m cli run --spec {spec} "
            f"--output outputs/{Path(spec).stem}`, `python -m cli score --run "
            f"outputs/{Path(spec).stem}`, then `python -m cli report --attribution RUN "
            f"outputs/{Path(spec).stem} --output attribution.md` with this run as RUN)")


def _search_lines(table: dict) -> list:
    """The learned-search table against plain A* (only for tables built with it)."""
    if "search_reference" not in table:
        return []
    ref = table["search_reference"]  # a name: md_code below
    if ref is None:
        return ["Learned search against plain A*: n/a (no scored run is plain A*: a run spec "
                "declaring `family: classical` and `architecture: astar`, e.g. `configs/bounded.yaml` "
                "on the same tasks, with a budget that lets it finish).", ""]
    header = ["run", "subset", "tasks", "ratio tasks", "excluded (A* 0 / failed)", "ratio median",
              "ratio mean", "ratio geomean", "Exp %", "success", "cost excess mean", "Opt",
              "latency med ms", "A* latency med ms"]
    rows, notes = [], []
    for r in table["rows"]:
        sr = r.get("search") or {}
        if sr.get("ratio_note"):
            notes.append(f"- {md_text(r['name'])}: expansion ratio {md_text(sr['ratio_note'])}")
        if sr.get("n_unpaired"):
            notes.append(f"- {md_text(r['name'])}: {md_text(sr['n_unpaired'])} task(s) without "
                         f"a plain A* row, left out")
        for sub in ("all", "hard"):
            x = sr.get(sub)
            if x is None:
                continue
            excl = ("n/a" if x["n_excluded_astar_zero"] is None else
                    f"{md_text(x['n_excluded_astar_zero'])} / "
                    f"{md_text(x['n_excluded_astar_failed'])}")
            rows.append([md_text(r["name"]) if sub == "all" else "", sub, md_text(x["n_tasks"]),
                         "n/a" if x["n_ratio"] is None else md_text(x["n_ratio"]), excl,
                         format_number(x["ratio_median"], 3), format_number(x["ratio_mean"], 3),
                         format_number(x["ratio_geomean"], 3), format_number(x["exp_reduction_pct"], 1),
                         format_number(x["success_rate"], 3), format_number(x["cost_excess_mean"]),
                         format_number(x["optimal_rate"], 3), format_number(x["wall_ms_median"], 2),
                         format_number(x["astar_wall_ms_median"], 2)])
    first = next((r.get("search") for r in table["rows"] if r.get("search")), {}) or {}
    out = [f"Learned search against plain A* ({md_code(ref)}; TransPath / Neural A*; hard: "
           f"{md_text(first.get('hard_rule'))}):", "", markdown_table(header, rows), "",
           "Every seed's tasks pooled, each paired by sample_id with plain A*'s row of the same seed "
           "(or its first seed). Ratio = the run's total expansions (all stages) / plain A*'s, per "
           "task; tasks where A* expanded 0 (or reported none) or failed are left out of it and "
           "counted. Exp % = 100 x mean(max(0, 1 - ratio)) (Neural A*, arithmetic mean). Cost excess "
           "= mean of cost / c* - 1 over the successful tasks only (failures: see success). Opt = "
           "share of all tasks whose route cost is within a relative 1e-9 of c* (a failure is not "
           "optimal). Octile lower bound: octile distance x 30 m (per-metre scale 1, from "
           f"{REFERENCES} start and goal).", ""]
    if notes:
        out += notes + [""]
    return out


def render_attribution_markdown(table: dict, heading: str = "## Component attribution") -> str:
    """Markdown of an :func:`attribution_table` (or a compare file's ``attribution``)."""
    lines = [heading, ""]
    header = ["run", "variant", "guide", "checkpoint_id", "machinery_id", "seeds",
              "legal-route rate", "regret median", "regret p90", "expansions med",
              "queue ops med", "live states med", "direct", "repair", "fallback",
              "fallback freq", "latency p50 ms", "latency p95 ms", "flags"]
    rows = []
    for r in table["rows"]:
        f = r["figures"]
        rep = r["reporting"]
        n = rep["n_rows"]
        work = [f"{format_number(f[f'{c}_median'], 1)} ({md_text(rep['work_reported'][c])}/"
                f"{md_text(n)})" for c in WORK_KEYS]
        rows.append([md_text(r["name"]), md_text(r["variant"] or "undeclared"),
                     md_text(r["guide"] or ""), md_text(r["checkpoint_id"] or ""),
                     md_text(r["machinery_id"] or ""),
                     md_text(", ".join(map(str, r["seeds"]))),
                     format_number(f["legal_route_rate"], 3),
                     format_number(f["regret_median"]), format_number(f["regret_p90"]), *work,
                     _rate(f["direct_success_rate"]), _rate(f["repair_rate"]),
                     _rate(f["fallback_rate"]), _rate(f["fallback_frequency"]),
                     format_number(f["latency_p50_ms"], 2), format_number(f["latency_p95_ms"], 2),
                     md_text("; ".join(r["flags"])) or "—"])
    lines += [markdown_table(header, rows), ""]
    lines += ["Figures are seed means of each run's per-seed values (n/a when a seed lacks "
              "one). Legal-route rate = success rate over all tasks; regret over all tasks "
              "(a failure counts 999999). Work: median of the total counter over the quality "
              "rows that reported it (reported/rows): a missing counter is not zero work. "
              "Direct / repair / fallback: share of tasks with a legal route produced by the "
              "`primary`, `repair` or `fallback` stage (\"not reported\" when the planner names "
              "no stage); fallback freq: share of rows whose fallback stage ran.", ""]
    st_rows = []
    for r in table["rows"]:
        for st in STAGES:
            sw = r["stage_work"][st]
            if not sw["n_rows_ran"]:
                continue
            st_rows.append([md_text(r["name"]), md_text(st), md_text(sw["n_rows_ran"])]
                           + [format_number(sw[f"{c}_median"], 1) for c in WORK_KEYS])
    if st_rows:
        lines += ["Per-stage work (each seed's median over the rows where the stage ran and "
                  "reported the counter, averaged over the seeds in which the stage ran; stages "
                  "are shown apart and never summed):", "",
                  markdown_table(["run", "stage", "rows ran", "expansions med", "queue ops med",
                             "live states med"], st_rows), ""]
    if not any(r["stage_spans"] for r in table["rows"]):
        lines += ["Stage spans: not recorded (per-stage latency is not in the records; "
                  "a sum of stage medians would not reconstruct total latency anyway).", ""]
    lines += _search_lines(table)
    if table["flags"]:
        lines += ["Flags:", ""] + [f"- {md_text(f)}{_control_hint(f)}" for f in table["flags"]] + [""]
    elif table["complete"]:
        lines += ["No flags: every declared variant has its controls, with the same machinery "
                  "and budget.", ""]
    return "\n".join(lines) + "\n"


def write_attribution_report(score_dirs, output, names=None, force: bool = False) -> dict:
    """Write the attribution table of ``score_dirs`` as Markdown to ``output``
    (refused when it exists unless ``force``); returns the table."""
    output = Path(output)
    if output.is_dir():
        raise AttributionError(f"{output} is a folder; --output names the report file to write "
                               f"(a folder is never replaced, with or without --force)")
    if output.exists() and not force:
        raise AttributionExists(f"{output} exists; choose a new report name")
    table = attribution_table(score_dirs, names)
    md = (f"# Component attribution\n\nCreated {utc_now()}; runs: "
          + ", ".join(md_code(r["path"]) for r in table["rows"]) + "\n\n"
          + render_attribution_markdown(table, heading="## Table"))
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, md)
    return table
