"""A static leaderboard page across comparisons and scored runs (``python -m cli leaderboard``).

:func:`leaderboard` reads any number of inputs, each one of

* a comparison file written by ``compare`` (``passage-jax-compare-v1``), or a folder holding
  one as ``compare.json`` (the output folder of ``bench --against``);
* a scored run folder (or one seed folder of it), read with ``load_score``;

and ranks every method they hold against one baseline method. The baseline is
``baseline=NAME`` (a ``method_name``); by default it is run B of the first comparison given
(``compare``'s and ``bench --against``'s convention: B is the baseline), or the first scored
run when no comparison is given.

Each row shows the method's seed means of all-task regret median, success rate and warm
latency p50 (quality repeat), its contrasts against the baseline (method − baseline) with
their paired block-bootstrap intervals, the planner-reported precision and a relative link
to the comparison's report where one exists (``report.html`` or ``report.md`` beside the
comparison file or in its ``report/`` folder). A contrast comes from a comparison file that
pairs the method with the baseline (reoriented when the baseline is its run A); otherwise
the two scored runs are compared in memory (``compare_runs``, ``n_bootstrap`` draws), and
when neither is possible the row says why.
The setting (resolution, cost model, split, variant, task set, timing profile), the same for
every row, is stated once above the table.

Rows are ranked by seed-mean regret median (lower first), then success rate (higher
first), then latency p50 (lower first).

A regret median that reaches a failed task in any seed (``failure_coded`` in the row) is shown
as ``failed (x% of tasks)``, its Δ as ``— (method failed)`` (``baseline``, ``both``), and an
interval endpoint made of the failure regret as ``failure-coded``: never the code itself
(:mod:`~passage_jax.evaluate.report._markdown`; docs/scoring.md).

Every name, path, precision string and reason on the page goes through
:mod:`~passage_jax.evaluate.text_safety` (a report link's destination percent-encoded), and
the page is rendered with raw HTML disabled and no image from outside its folder
(docs/scoring.md, "Text on the pages"). ``index.html`` and ``leaderboard.json`` are written
together or not at all.

Incomparable entries are **refused**, never mixed and never split into separate tables: all
methods must share resolution, cost model, split, task variant, the task set
(``tasks_sha256``) and the timing profile. The error names both entries and the field.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from passage_jax.contract import FAILURE_REGRET
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.attribution import markdown_table
from passage_jax.evaluate.compare import COMPARE_FORMAT, compare_runs
from passage_jax.evaluate.report import (
    ReportError,
    ReportHtmlError,
    endpoint,
    failed_delta,
    html_page,
    markdown_body,
    read_comparison,
    regret_failed,
)
from passage_jax.evaluate.score import ScoreError, load_score, read_json, seed_folders
from passage_jax.evaluate.text_safety import md_code, md_text, md_url
from passage_jax.fileio import atomic_write_json, atomic_write_text, jsonable, utc_now
from passage_jax.protocol.runfolder import MANIFEST, METRICS, RUN_SUMMARY

__all__ = ["leaderboard", "write_leaderboard", "LeaderboardError", "LeaderboardExists",
           "LEADERBOARD_FORMAT", "COMPARABLE_FIELDS", "render_leaderboard_markdown",
           "LEADERBOARD_COLUMNS", "table_rows"]

LEADERBOARD_FORMAT = "passage-jax-leaderboard-v1"
#: what every entry on one leaderboard must share (field -> how it is named in an error)
COMPARABLE_FIELDS = {"resolution": "resolution", "cost_model": "cost model", "split": "split",
                     "task_variant": "task variant", "tasks_sha256": "task set (tasks_sha256)",
                     "timing_profile": "timing profile", "batch_size": "batch size"}
#: the page's table columns, in order
LEADERBOARD_COLUMNS = ("rank", "method", "seeds", "regret median", "Δ regret median [interval]",
                       "success rate", "Δ success [interval]", "latency p50 ms",
                       "Δ latency p50 ms [interval]", "precision", "report")


#: the page's own style (on top of the report page's): the full window's width; the method
#: (at least 14em wide) and precision cells may break inside a long name (the other cells
#: wrap between words only: a Δ above its interval, a number never split)
_PAGE_CSS = ("body{max-width:none}td:nth-child(2),td:nth-child(10){overflow-wrap:anywhere}"
             "td:nth-child(2){min-width:14em}")


class LeaderboardError(RuntimeError):
    """The leaderboard cannot be built (bad input, incomparable entries, unknown baseline)."""


class LeaderboardExists(LeaderboardError, FileExistsError):
    """The output folder already holds a leaderboard (replacing it must be asked for)."""


# --------------------------------------------------------------------------- #
# inputs
# --------------------------------------------------------------------------- #

def _identity(data: dict, timing_profile, where: str, fields: dict, batch_size=None) -> dict:
    """The comparability fields of one entry; ``fields`` names where each is read;
    ``batch_size``: the batched procedure's (None: batch one)."""
    out = {k: data.get(k) for k in ("resolution", "cost_model", "split", "task_variant",
                                    "tasks_sha256")}
    out["timing_profile"] = (timing_profile or {}).get("profile") if isinstance(
        timing_profile, dict) else timing_profile
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise LeaderboardError(f"{where}: field {fields[missing[0]]!r} is missing (cannot tell "
                               f"which entries it is comparable with)")
    out["batch_size"] = batch_size
    return out


def _seed_figures(m: dict) -> dict:
    """regret median, success rate, warm latency p50 of one seed (compare ``methods`` entry
    or ``metrics.json``)."""
    p = m.get("primary") or {}
    lat = m.get("latency_warm")
    if lat is None:
        lat = (m.get("latency") or {}).get("warm")
    p50 = ((lat or {}).get("interpolated") or {}).get("p50")
    return {"regret_median": p.get("regret_median"), "success_rate": p.get("success_rate"),
            "latency_p50_ms": p50}


def _mean(vals):
    vals = [v for v in vals if v is not None and math.isfinite(float(v))]
    return float(np.mean(vals)) if vals else None


def _precision(folders) -> str | None:
    """The planner-reported precisions of the seed folders (when readable)."""
    found = []
    for f in folders:
        try:
            m = read_json(Path(f) / METRICS, LeaderboardError)
        except (LeaderboardError, OSError):
            return None
        found += [str(x) for x in ((m.get("precision") or {}).get("planner_reported") or [])]
    return ", ".join(sorted(set(found))) or None


def _method(name, path, seeds, per_seed: dict, identity, folders, source) -> dict:
    figs = {k: _mean([_seed_figures(m)[k] for m in per_seed.values()])
            for k in ("regret_median", "success_rate", "latency_p50_ms")}
    coded = {"regret_median": any(regret_failed("regret_median", m) for m in per_seed.values())}
    return {"method_name": name, "path": str(path), "seeds": [int(s) for s in seeds],
            "figures": figs, "failure_coded": coded, "identity": identity,
            "folders": [str(f) for f in folders], "precision": _precision(folders),
            "source": str(source)}


def _report_of(compare_file: Path) -> Path | None:
    d = compare_file.parent
    for cand in (d / "report" / "report.html", d / "report.html", d / "report" / "report.md",
                 d / "report.md"):
        if cand.is_file():
            return cand
    return None


def _read_compare(path: Path) -> dict:
    try:
        return _compare_entry(path)
    except ReportError as e:
        raise LeaderboardError(str(e)) from None
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise LeaderboardError(f"{path}: malformed comparison file: {type(e).__name__}: {e}") from None


def _compare_entry(path: Path) -> dict:
    cmp = read_comparison(path)
    where = str(path)
    ident = cmp["identity"]
    identity = _identity(dict(ident["data"], tasks_sha256=ident.get("tasks_sha256")),
                         ident.get("timing_profile"), where,
                         {**{k: f"identity.data.{k}" for k in COMPARABLE_FIELDS},
                          "tasks_sha256": "identity.tasks_sha256",
                          "timing_profile": "identity.timing_profile.profile"},
                         (ident.get("timing_profile") or {}).get("batch_size"))
    sides = {}
    for side in ("A", "B"):
        run = cmp["runs"][side]
        sides[side] = _method(run["method_name"], run["path"], run["seeds"],
                              cmp["methods"][side]["per_seed"], identity,
                              list(run["folders"].values()), path)
    return {"file": str(path), "sides": sides, "contrasts": cmp["contrasts"],
            "latency_contrast": cmp["latency_contrast"], "report": _report_of(path)}


def _read_run(path: Path) -> dict:
    try:
        folders = seed_folders(path)
        scores = [load_score(f) for f in folders]
    except ScoreError as e:
        raise LeaderboardError(str(e)) from None
    m0 = scores[0].manifest
    where = str(folders[0] / MANIFEST)
    identity = _identity(m0.get("data") or {}, scores[0].metrics.get("timing_profile"), where,
                         {**{k: f"data.{k}" for k in COMPARABLE_FIELDS},
                          "timing_profile": f"timing_profile.profile ({METRICS})"},
                         (m0.get("spec") or {}).get("batch_size"))
    per_seed = {str(s.manifest.get("seed")): s.metrics for s in scores}
    return _method(m0.get("method_name"), Path(path).resolve(), list(per_seed), per_seed,
                   identity, folders, path)


def _classify(path: Path):
    """("compare", file) or ("run", folder) for one input; refused by name otherwise."""
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeError) as e:
            raise LeaderboardError(f"{path}: not a JSON comparison file ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") != COMPARE_FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise LeaderboardError(f"{path}: not a {COMPARE_FORMAT} file (format {got!r})")
        return "compare", path
    if path.is_dir():
        if (path / RUN_SUMMARY).is_file() or (path / MANIFEST).is_file():
            return "run", path
        if (path / "compare.json").is_file():
            return "compare", path / "compare.json"
        raise LeaderboardError(f"{path}: neither a comparison (no compare.json) nor a scored run "
                               f"folder (no {RUN_SUMMARY} or {MANIFEST})")
    raise LeaderboardError(f"{path}: not found")


# --------------------------------------------------------------------------- #
# the table
# --------------------------------------------------------------------------- #

def _check_comparable(methods: list) -> None:
    first = methods[0]
    for m in methods[1:]:
        for k, what in COMPARABLE_FIELDS.items():
            if m["identity"][k] != first["identity"][k]:
                raise LeaderboardError(
                    f"incomparable entries: {m['method_name']!r} from {m['source']} has {what} "
                    f"{m['identity'][k]!r} but {first['method_name']!r} from {first['source']} has "
                    f"{first['identity'][k]!r}; a leaderboard ranks only entries with the same "
                    f"resolution, cost model, split, task variant, task set, timing profile and "
                    f"batch size (build one leaderboard per setting)")


def _contrast(c: dict, flip: bool) -> dict:
    """``{delta, ci_low, ci_high, ci_available, reason}`` of a contrast, as method − baseline."""
    if c is None:
        return {"delta": None, "ci_low": None, "ci_high": None, "ci_available": False}
    d, lo, hi = c.get("delta"), c.get("ci_low"), c.get("ci_high")
    if flip:
        d = None if d is None else -d
        lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
    return {"delta": d, "ci_low": lo, "ci_high": hi, "ci_available": bool(c.get("ci_available")),
            "reason": c.get("reason")}


def _contrasts(contrasts: dict, latency: dict, flip: bool) -> dict:
    return {"regret_median": _contrast(contrasts.get("regret_median"), flip),
            "success_rate": _contrast(contrasts.get("success_rate"), flip),
            "latency_p50_ms": _contrast(latency, flip)}


def _in_memory(method: dict, base: dict, n_bootstrap: int) -> tuple[dict | None, str | None]:
    try:
        res = compare_runs(method["path"], base["path"], None, n_bootstrap=n_bootstrap)
    except (RuntimeError, ValueError, OSError, KeyError) as e:  # a refusal: the row's reason
        return None, f"no paired comparison with the baseline ({type(e).__name__}: {e})"
    return _contrasts(res["contrasts"], res["latency_contrast"], False), None


def _choose_baseline(baseline, methods_list, compares, runs) -> tuple:
    """(the baseline entry, how it was chosen): the method named ``baseline``, else run B of
    the first comparison, else the first scored run."""
    if baseline is None:
        if compares:
            return compares[0]["sides"]["B"], "run B of the first comparison given"
        return runs[0], "the first scored run given"
    named = [m for m in methods_list if m["method_name"] == baseline]
    if not named:
        raise LeaderboardError(f"--baseline {baseline!r}: no entry has that method_name (names: "
                               f"{sorted({m['method_name'] for m in methods_list})})")
    if len(named) > 1:
        raise LeaderboardError(f"--baseline {baseline!r}: several runs have that method_name "
                               f"({', '.join(m['path'] for m in named)}); give one of them")
    return named[0], "--baseline"


def _rank_key(r: dict) -> tuple:
    """Seed-mean regret median (lower first), success rate (higher first), latency p50
    (lower first), then the name; a missing figure ranks last."""
    f = r["figures"]
    reg = f["regret_median"] if f["regret_median"] is not None else FAILURE_REGRET * 10
    suc = -(f["success_rate"] if f["success_rate"] is not None else -1.0)
    lat = f["latency_p50_ms"] if f["latency_p50_ms"] is not None else math.inf
    return (reg, suc, lat, r["method_name"])


def leaderboard(inputs, baseline: str | None = None, output_dir=None,
                n_bootstrap: int = 2000) -> dict:
    """The leaderboard of ``inputs`` (comparison files or folders, scored run folders) against
    the method named ``baseline`` (see the module docstring for the default); report links are
    relative to ``output_dir`` (default: the current folder). :class:`LeaderboardError` names
    a bad input, an unknown or ambiguous baseline, or two incomparable entries."""
    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise LeaderboardError("no input given (comparison files or folders, scored run folders)")
    compares, runs = [], []
    for p in inputs:
        kind, where = _classify(p)
        (compares if kind == "compare" else runs).append(
            _read_compare(where) if kind == "compare" else _read_run(where))
    entries = [s for c in compares for s in (c["sides"]["A"], c["sides"]["B"])] + runs
    _check_comparable(entries)
    methods: dict[str, dict] = {}
    for m in entries:
        methods.setdefault(str(Path(m["path"]).resolve()), m)
    methods_list = list(methods.values())
    base, baseline_rule = _choose_baseline(baseline, methods_list, compares, runs)
    base_key = str(Path(base["path"]).resolve())
    out_dir = Path(output_dir) if output_dir is not None else Path.cwd()
    rows = []
    for key, m in methods.items():
        row = {**m, "baseline": key == base_key, "contrasts": None, "contrast_source": None,
               "reason": None, "report": None}
        for c in compares:
            pair = {str(Path(c["sides"][s]["path"]).resolve()): s for s in ("A", "B")}
            if key in pair and row["report"] is None and c["report"] is not None:
                row["report"] = os.path.relpath(c["report"], out_dir.resolve())
            if key != base_key and key in pair and base_key in pair:
                row["contrasts"] = _contrasts(c["contrasts"], c["latency_contrast"],
                                              flip=pair[key] == "B")
                row["contrast_source"] = c["file"]
        if key != base_key and row["contrasts"] is None:
            row["contrasts"], row["reason"] = _in_memory(m, base, n_bootstrap)
            row["contrast_source"] = "in memory" if row["contrasts"] else None
        rows.append(row)
    rows.sort(key=_rank_key)
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return jsonable({"format": LEADERBOARD_FORMAT, "created_utc": utc_now(),
                     "baseline": {"method_name": base["method_name"], "path": base["path"],
                                  "chosen_by": baseline_rule},
                     "identity": base["identity"], "inputs": [str(p) for p in inputs],
                     "ranking": "seed-mean regret median (lower first), then success rate "
                                "(higher first), then latency p50 (lower first)",
                     "rows": rows})


def _interval(c: dict | None, metric: str = "") -> str:
    """``[low, high]`` (held together by a no-break space: the cell wraps before it, never
    inside it), or why there is none."""
    if not c or c.get("delta") is None:
        return "(no interval)"
    if c.get("ci_available"):
        return f"[{endpoint(metric, c['ci_low'])},\u00a0{endpoint(metric, c['ci_high'])}]"
    return "(interval unavailable)"


def _regret_figure(r: dict) -> str:
    """The seed-mean regret median, or the failure it is made of with the share of tasks
    failed (1 − seed-mean success rate)."""
    f = r["figures"]
    if not (r.get("failure_coded") or {}).get("regret_median"):
        return _fmt(f["regret_median"])
    if f["success_rate"] is None:
        return "failed"
    share = 1.0 - f["success_rate"]
    return "failed (all tasks)" if share >= 1 - 1e-9 else f"failed ({share:.0%} of tasks)"


def _link(rel: str | None) -> str:
    return f"[report]({md_url(rel)})" if rel else "—"


def table_rows(board: dict) -> list[list[str]]:
    """The leaderboard's rows as Markdown cells under :data:`LEADERBOARD_COLUMNS` (names,
    seeds and precision escaped with ``md_text``; :func:`markdown_table` escapes ``|``)."""
    out = []
    base_row = next((r for r in board["rows"] if r["baseline"]), {})
    base_failed = bool((base_row.get("failure_coded") or {}).get("regret_median"))
    for r in board["rows"]:
        f, c = r["figures"], r["contrasts"] or {}
        name = md_text(r["method_name"]) + (" (baseline)" if r["baseline"] else "")
        base = "baseline" if r["baseline"] else "n/a"
        failed = (bool((r.get("failure_coded") or {}).get("regret_median")), base_failed)
        cells = [md_text(r["rank"]), name, md_text(", ".join(map(str, r["seeds"]))),
                 _regret_figure(r)]
        for k, digits in (("regret_median", 4), ("success_rate", 4), ("latency_p50_ms", 2)):
            if k != "regret_median":
                cells.append(_fmt(f[k], digits))
            ck = c.get(k) or {}
            d = ck.get("delta")
            coded = failed_delta(k, ck, failed, ("method", "baseline"))
            cells.append(base if r["baseline"] else "n/a" if d is None else
                         coded or f"{_fmt(d, digits)} {_interval(ck, k)}")
        cells += [md_text(r["precision"]) if r["precision"] else "not reported",
                  _link(r["report"])]
        out.append([str(x) for x in cells])
    return out


def render_leaderboard_markdown(board: dict) -> str:
    """The leaderboard as Markdown (the page's content)."""
    ident, base = board["identity"], board["baseline"]
    res = md_text(ident["resolution"])
    lines = ["# Leaderboard", "",
             f"- Setting: {res}x{res} {md_text(ident['split'])}, cost model "
             f"{md_code(ident['cost_model'])}, variant {md_code(ident['task_variant'])}, tasks "
             f"sha256 {md_code(str(ident['tasks_sha256'])[:16] + '…')}, timing profile "
             f"{md_code(ident['timing_profile'])}"
             + (" (batch one)" if ident.get("batch_size") is None else
                f" (the batched procedure, batches of {md_text(ident['batch_size'])}: latency per "
                f"batch and per scene, not per request)"),
             f"- Baseline: **{md_text(base['method_name'])}** ({md_code(base['path'])}, chosen by "
             f"{md_text(base['chosen_by'])})",
             f"- Ranked by {board['ranking']}; Δ = method − baseline with its paired "
             f"block-bootstrap interval.",
             f"- Created {md_text(board['created_utc'])} from {len(board['inputs'])} input(s).", "",
             markdown_table(LEADERBOARD_COLUMNS, table_rows(board)), ""]
    notes = [f"- {md_text(r['method_name'])}: {md_text(r['reason'])}" for r in board["rows"]
             if r.get("reason")]
    if notes:
        lines += ["Rows without a contrast:", "", *notes, ""]
    lines += ["Regret is the relative regret over all tasks, a failed task counting the "
              "contract's failure regret; a regret median that reaches a failed task (in any "
              "seed) is shown as \"failed\" with the share of tasks failed, its Δ as \"— "
              "(method failed)\" (baseline, both), and an interval endpoint made of the failure "
              "regret as \"failure-coded\", never as the code. Success is the legal-route rate; "
              "latency p50 is the warm quality-repeat median in ms. Local results, not official "
              "leaderboard entries.", ""]
    return "\n".join(lines)


def write_leaderboard(inputs, output_dir, baseline: str | None = None, force: bool = False,
                      n_bootstrap: int = 2000) -> dict:
    """Write ``output_dir/index.html`` (self-contained) and ``output_dir/leaderboard.json``;
    a folder already holding either is refused unless ``force``. Returns their paths. The page
    is built before anything is written: a page that cannot be built (an image reference
    outside the folder: :class:`LeaderboardError`) leaves neither file behind."""
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise LeaderboardError(f"{out}: exists and is not a folder; --output names a folder")
    page, data = out / "index.html", out / "leaderboard.json"
    held = [p for p in (page, data) if p.exists()]
    if held and not force:
        raise LeaderboardExists(f"{held[0]} exists (an earlier leaderboard); choose a new folder")
    board = leaderboard(inputs, baseline, out, n_bootstrap)
    md = render_leaderboard_markdown(board)
    title = f"Leaderboard against {board['baseline']['method_name']}"  # html_page escapes it
    try:
        text = html_page(title, markdown_body(md, out), css=_PAGE_CSS)
    except ReportHtmlError as e:
        raise LeaderboardError(str(e)) from None
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(data, board)
    atomic_write_text(page, text)
    return {"index": str(page), "data": str(data), "board": board}
