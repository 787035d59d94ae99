"""Markdown report of a comparison, with route and regret figures (SPEC §7).

``write_report(compare_json, output_md)`` reads the file written by
``compare``, reloads the two runs' persisted routes and references (and the
scenes' terrain, hash-checked, for the route figure) and writes:

* ``<output>.md``: per-method six-metric tables per seed, the contrasts with
  their intervals, valid-route denominators and the both-valid geometry
  intersection, latency, the component figures (and the component-attribution
  table when the runs declare ``component_control``), block census, limits and
  ODD bins;
* ``<stem>_routes.png``: candidate A, candidate B and the reference route over
  a hillshaded elevation map with the obstacles, for a few tasks (those where
  the two methods' regrets differ most, then the first tasks);
* ``<stem>_regret.png``: the distribution of all-task regret per method
  (empirical CDF of the finite, non-censored regrets on a symmetric-log axis,
  with the number of failures, whose regret is 999999, stated).

Also :func:`metrics_rows` and :data:`METRICS_COLUMNS`: the six-metric table of
``score`` and ``bench`` as data (``cli/console.py`` draws it).
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np

from passage_jax.contract import FAILURE_REGRET, PRIMARY_METRICS, PRIMARY_SHORT
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.attribution import markdown_table as _md_table
from passage_jax.evaluate.attribution import render_attribution_markdown
from passage_jax.evaluate.compare import COMPARE_FORMAT
from passage_jax.evaluate.score import (
    ScoreError,
    load_npz,
    load_score,
    open_run_tasks,
    read_json,
)
from passage_jax.fileio import atomic_write_bytes, atomic_write_text
from passage_jax.protocol.records import PathsReader, RecordFileError, unpack_routes

__all__ = ["write_report", "render_markdown", "METRICS_COLUMNS", "metrics_rows",
           "components_section", "read_comparison",
           "route_figure", "regret_figure", "ReportError", "ReportExists", "COMPARE_FIELDS"]


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib  # noqa: PLC0415 (optional: matplotlib only for figures)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (optional: matplotlib only for figures)

    return plt


def _save_figure(fig, path):
    """Lay out, render to PNG and write atomically; closes the figure."""
    plt = _pyplot()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


class ReportError(RuntimeError):
    """The report cannot be written (bad comparison file, existing outputs, runs changed)."""


class ReportExists(ReportError, FileExistsError):
    """A report file or figure already exists (replacing it must be asked for)."""


# --------------------------------------------------------------------------- #
# console table (score, bench)
# --------------------------------------------------------------------------- #

def metrics_rows(scores: dict) -> list[list[str]]:
    rows = []
    for name, m in scores.items():
        p = m["primary"]
        label = str(name)[5:] if str(name).startswith("seed-") else str(name)
        rows.append([label] + [_fmt(p[k]) for k in PRIMARY_METRICS]
                    + [f"{m['n_path_valid']}/{m['n_tasks']}"])
    if len(scores) > 1:
        mean = []
        for k in PRIMARY_METRICS:
            vals = [m["primary"][k] for m in scores.values() if m["primary"][k] is not None]
            mean.append(_fmt(float(np.mean(vals))) if vals else "n/a")
        rows.append(["seed mean"] + mean + [""])
    return rows


METRICS_COLUMNS = ("seed",) + PRIMARY_SHORT + ("valid/tasks",)


# --------------------------------------------------------------------------- #
# markdown
# --------------------------------------------------------------------------- #

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


def render_markdown(cmp: dict, figures: dict) -> str:
    A, B = cmp["runs"]["A"], cmp["runs"]["B"]
    na, nb = A["method_name"], B["method_name"]
    lines = [f"# Comparison: {na} (A) vs {nb} (B)", ""]
    ident = cmp["identity"]
    d = ident["data"]
    lines += [
        f"- Tasks: {ident['n_tasks']} ({d['resolution']}x{d['resolution']} {d['split']}, "
        f"cost model `{d['cost_model']}`, variant `{d['task_variant']}`), tasks sha256 "
        f"`{str(ident['tasks_sha256'])[:16]}…`",
        f"- References: policy `{ident['references']['policy']}`, identity "
        f"`{str(ident['references']['identity'])[:16]}…`",
        f"- Timing profile: `{ident['timing_profile']['profile']}`",
        f"- Runs: A `{A['path']}` (seeds {A['seeds']}), B `{B['path']}` (seeds {B['seeds']})",
        f"- Inference protocol: A {_protocol_label(A)}; B {_protocol_label(B)}"
        + (" (noncanonical pairing allowed)" if (cmp.get("inference_protocols") or {}).get(
            "allow_noncanonical") and A.get("canonical", True) != B.get("canonical", True) else ""),
        f"- Pairs: {', '.join(p['label'] for p in cmp['pairs'])}; seed mean: "
        f"{'yes' if cmp['seed_mean'] else 'no (seed sets differ)'}",
        f"- Created {cmp['created_utc']}", "",
        "## Six primary metrics per method", "",
    ]
    header = ["method", "seed"] + list(PRIMARY_METRICS) + ["valid / tasks", "connected"]
    rows = []
    for side, name in (("A", na), ("B", nb)):
        for lab, m in cmp["methods"][side]["per_seed"].items():
            rows.append([f"{side}: {name}", lab] + [_fmt(m["primary"][k]) for k in PRIMARY_METRICS]
                        + [f"{m['n_path_valid']} / {m['n_tasks']}", _fmt(m["connected_rate"])])
    lines += [_md_table(header, rows), ""]
    lines += ["Regret is over all tasks (a failure counts as 999999); ASSD and H95 are over "
              "each method's own valid routes; rates are over all tasks.", ""]

    blk = cmp["blocks"]
    boot = cmp["bootstrap"]
    lines += ["## Contrasts A − B", "",
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
    lines += [_md_table(header, rows), ""]
    pc = cmp.get("primary_comparison")
    if pc and "unavailable" in pc:
        lines += [f"Six-metric comparison (SPEC §5) unavailable: {pc['unavailable']}", ""]
    if pc and "inference_status" in pc:
        lines += [f"Inference status: `{pc['inference_status']}` (no confirmatory verdict "
                  f"without declared paired-test evidence)." if pc["decision"] is None else
                  f"Decision: `{pc['decision']}`, winner {pc['winner']}.", ""]

    lines += ["## Valid routes and the both-valid geometry intersection", ""]
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
    lines += [_md_table(["metric", "Δ own valid subsets", "interval", "Δ both valid",
                         "interval"], rows), ""]

    lines += ["## Latency (warm series)", ""]
    rows = []
    for side, name in (("A", na), ("B", nb)):
        for lab, m in cmp["methods"][side]["per_seed"].items():
            lw = m.get("latency_warm") or {}
            it, ce = lw.get("interpolated") or {}, lw.get("censored") or {}
            cp = ce.get("percentiles") or {}
            rows.append([f"{side}: {name}", lab, _fmt(it.get("p50"), 2), _fmt(it.get("p95"), 2),
                         _fmt(it.get("p99"), 2), *(_censored_cell(cp.get(q))
                                                   for q in ("p50", "p95", "p99")),
                         ce.get("n_requests"), ce.get("n_successes"), ce.get("n_timeouts"),
                         ce.get("n_other_failures"),
                         _fmt(ce.get("at_least_100_warm_requests"))])
    lines += [_md_table(["method", "seed", "p50 ms", "p95 ms", "p99 ms", "p50 os", "p95 os",
                         "p99 os", "requests", "successes", "timeouts", "other failures",
                         "≥100 warm"], rows), "",
              "p50/p95/p99: linear interpolation over all recorded times; \"os\": order "
              "statistics (inverted CDF) with timeouts ordered as +inf, a censored percentile "
              "shown as a lower bound (`passage-censored-latency/v1`).", ""]
    lc = cmp["latency_contrast"]
    lines += [f"Median latency contrast A − B (quality repeat): {_fmt(lc['delta'], 3)} ms, "
              f"interval {_interval(lc)}"
              + (f" ({lc['reason']})" if lc.get("reason") else "") + ".", ""]

    lines += components_section(cmp)
    if cmp.get("attribution"):
        lines += [render_attribution_markdown(cmp["attribution"])]

    lines += ["## Procedure limits", ""]
    lim = cmp["procedure_limits"]
    rows = [[k, json.dumps(lim["A"][k]), json.dumps(lim["B"][k]),
             "**differs**" if k in lim["differ"] else ""] for k in lim["A"]]
    lines += [_md_table(["limit", "A", "B", ""], rows), ""]

    census = blk["census"]
    lines += ["## Geographic blocks", "",
              f"{census['n_blocks']} blocks over {census['n_tasks']} tasks; largest block "
              f"`{census['largest_block']}` holds {_fmt(census['largest_share'], 3)} of tasks; "
              f"unplaced {census['n_unplaced']}. Adequacy ({census['criterion']}): "
              f"{'met' if census['adequate'] else 'not met'}.", ""]
    if blk.get("source") == "roster":
        lines += [f"Blocks from the {blk.get('label', 'roster')} `{blk['roster']}` (sha256 "
                  f"`{str(blk['sha256'])[:16]}…`, {blk.get('roster_origin') or 'given'})"
                  + (f", derived from the roster with sha256 `{blk['parent']['sha256'][:16]}…`"
                     if blk.get("parent") else "") + ".", ""]
    roles = cmp.get("split_roles")
    if roles:
        claim = ("a test-set result: both runs are test-role runs with frozen calibration "
                 "decisions" if cmp.get("test_set_result") else
                 "**not a test-set result**: a test-set claim needs both runs declared "
                 "`split_role: test` with their calibration decisions")
        lines += [f"Split roles: A {roles['A']['split_role']}, B {roles['B']['split_role']}; "
                  f"{claim}.", ""]

    odd = cmp.get("odd")
    if odd:
        lines += ["## ODD bins", "", f"Spec `{odd['spec']['path']}` (sha256 "
                  f"`{odd['spec']['sha256'][:16]}…`); tasks outside every bin: "
                  f"{odd['n_outside_support']}. {odd['note']}.", ""]
        rows = []
        for b in odd["bins"]:
            desc = ", ".join(f"{k} {v}" for k, v in b["bin"].items())
            if b["n_tasks"] == 0:
                rows.append([desc, 0, "empty"] + [""] * len(PRIMARY_METRICS))
                continue
            rows.append([desc, b["n_tasks"], b["uncertainty_status"]]
                        + [f"{_fmt(b['contrasts'][k].get('delta'))} "
                           f"{_interval(b['contrasts'][k])}" for k in PRIMARY_METRICS])
        lines += [_md_table(["bin", "tasks", "uncertainty"] + [f"Δ {k}" for k in PRIMARY_METRICS],
                            rows), ""]

    lines += ["## Figures", ""]
    for key, caption in (("routes", "Candidate and reference routes on the terrain"),
                         ("regret", "Regret distribution")):
        if figures.get(key):
            lines += [f"![{caption}]({figures[key]})", "", f"*{caption}.*", ""]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- #
# figures
# --------------------------------------------------------------------------- #

def _seed_data(folder: Path) -> dict:
    s = load_score(folder)
    p = s["per_sample"]
    sel = np.flatnonzero(p["primary_quality"])
    sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
    return {"score": s, "rows": {k: p[k][sel] for k in ("regret", "valid_path", "status",
                                                        "sample_id", "success")},
            "paths": PathsReader(folder / "paths.npz"), "record_index": p["record_index"][sel]}


def _route_for(d: dict, i: int):
    """The quality-repeat route of task ``i`` (an integer (L, 2) route, else None)."""
    (rt,) = d["paths"].routes_at([int(d["record_index"][i])])
    return rt if isinstance(rt, np.ndarray) and rt.ndim == 2 and rt.dtype.kind in "iu" else None


def _hillshade(z: np.ndarray) -> np.ndarray:
    from matplotlib.colors import LightSource  # noqa: PLC0415 (optional: matplotlib only for figures)

    return LightSource(azdeg=315, altdeg=45).hillshade(z, vert_exag=2.0, dx=30.0, dy=30.0)


def route_figure(cmp: dict, path: Path, n_tasks: int = 4) -> Path:
    plt = _pyplot()
    pair = cmp["pairs"][0]
    fa = Path(cmp["runs"]["A"]["folders"][str(pair["seed_a"])])
    fb = Path(cmp["runs"]["B"]["folders"][str(pair["seed_b"])])
    da, db = _seed_data(fa), _seed_data(fb)
    ref = load_npz(fa / "references.npz")
    ref_routes = unpack_routes(ref["route_coords"], ref["route_offsets"])
    refs = {"sample_id": [str(s) for s in ref["sample_id"]],
            "objective": [str(x) for x in ref["objective"]],
            "variant": [str(x) for x in ref["variant"]],
            "cost_weight": ref["cost_weight"], "input_sha256": [str(x) for x in ref["input_sha256"]]}
    tasks, _, _ = open_run_tasks(read_json(fa / "manifest.json"), refs, str(fa))  # read on demand
    ra, rb = da["rows"]["regret"], db["rows"]["regret"]
    gap = np.abs(np.minimum(ra, 10.0) - np.minimum(rb, 10.0))
    order = list(np.argsort(-gap, kind="stable"))
    chosen = [int(i) for i in order if gap[i] > 0][: n_tasks // 2]
    chosen += [i for i in range(len(tasks)) if i not in chosen][: n_tasks - len(chosen)]
    chosen = chosen[:n_tasks]
    ncol = min(len(chosen), 2)
    nrow = int(math.ceil(len(chosen) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 5.6 * nrow), squeeze=False)
    na, nb = cmp["runs"]["A"]["method_name"], cmp["runs"]["B"]["method_name"]
    for ax, i in zip(axes.ravel(), chosen):
        t = tasks[i]
        z = np.asarray(t.elevation_m, np.float64)
        ax.imshow(z, cmap="terrain", interpolation="nearest")
        ax.imshow(_hillshade(z), cmap="gray", alpha=0.35, interpolation="nearest")
        obst = np.asarray(t.obstacles, bool)
        over = np.zeros(obst.shape + (4,))
        over[obst] = (0.1, 0.1, 0.1, 0.75)
        ax.imshow(over, interpolation="nearest")
        rr = ref_routes[i]
        ax.plot(rr[:, 1], rr[:, 0], color="white", lw=4.0, zorder=3)
        ax.plot(rr[:, 1], rr[:, 0], color="black", lw=1.2, ls="--", zorder=3,
                label="reference route")
        for d, color, lab, ls in ((da, "tab:red", f"A: {na}", "-"), (db, "tab:blue", f"B: {nb}", "-")):
            route = _route_for(d, i)
            reg = d["rows"]["regret"][i]
            st = d["rows"]["status"][i]
            txt = f"{lab} (regret {_fmt(reg, 3)}, {st})"
            if route is not None and len(route):
                ax.plot(route[:, 1], route[:, 0], color=color, lw=1.8, ls=ls, label=txt, zorder=4)
            else:
                ax.plot([], [], color=color, label=txt + ", no route")
        (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
        ax.scatter([c0], [r0], marker="o", s=70, c="lime", edgecolors="black", zorder=5,
                   label="start")
        ax.scatter([c1], [r1], marker="*", s=150, c="yellow", edgecolors="black", zorder=5,
                   label="goal")
        ax.set_title(f"scene {t.id}  ({t.objective}/{t.variant})", fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.01), fontsize=8, ncol=2,
                  frameon=False)
    for ax in axes.ravel()[len(chosen):]:
        ax.axis("off")
    fig.suptitle(f"Routes on terrain (seed pair {pair['label']}); black = obstacles", fontsize=12)
    return _save_figure(fig, path)


def regret_figure(cmp: dict, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    linthresh = 1e-3
    lowest = 0.0
    for side, color in (("A", "tab:red"), ("B", "tab:blue")):
        run = cmp["runs"][side]
        vals, fails, n = [], 0, 0
        for pair in cmp["pairs"]:
            seed = pair["seed_a"] if side == "A" else pair["seed_b"]
            p = load_score(Path(run["folders"][str(seed)]))["per_sample"]
            r = p["regret"][p["primary_quality"]]
            n += r.size
            fails += int(np.sum(r >= FAILURE_REGRET))
            vals.append(r[(r < FAILURE_REGRET) & np.isfinite(r)])
        v = np.sort(np.concatenate(vals)) if vals else np.zeros(0)
        lowest = min(lowest, float(v[0])) if v.size else lowest
        undefined = n - fails - v.size
        lab = (f"{side}: {run['method_name']} ("
               + (f"{fails}/{n} failures at regret 999999, not drawn" if fails else
                  f"0/{n} failures")
               + (f"; {undefined} undefined (c* <= 0)" if undefined else "") + ")")
        if v.size:
            y = np.arange(1, v.size + 1) / n
            ax.step(np.concatenate([[v[0]], v]), np.concatenate([[0], y]), where="post",
                    color=color, lw=2, label=lab)
        else:
            ax.plot([], [], color=color, label=lab)
    ax.set_xscale("symlog", linthresh=linthresh)
    # start left of zero so a curve at regret 0 (an optimal planner) is not hidden under the
    # axis, and negative regrets (a route cheaper than the reference) stay visible
    ax.set_xlim(left=min(-0.3 * linthresh, 1.5 * lowest))
    ax.axvline(0.0, color="0.5", lw=0.8, ls=":", zorder=1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("regret (predicted cost − c*) / c*  [symlog]")
    ax.set_ylabel("fraction of all tasks")
    ax.set_title("Regret distribution (quality repeat, all seeds pooled)")
    ax.grid(alpha=0.3)
    # below the axes: inside, it would cover part of a curve (one at 0 rises along the left)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return _save_figure(fig, path)


# --------------------------------------------------------------------------- #
# reading the comparison file
# --------------------------------------------------------------------------- #

#: top-level fields of a comparison file that the report reads, and their JSON types
COMPARE_FIELDS = {"runs": dict, "identity": dict, "pairs": list, "seed_mean": bool, "blocks": dict,
                  "bootstrap": dict, "methods": dict, "contrasts": dict,
                  "valid_route_denominators": dict, "geometry_both_valid": dict,
                  "latency_contrast": dict, "procedure_limits": dict, "created_utc": str}
_JSON_TYPE = {dict: "an object", list: "a list", bool: "true or false", str: "a string", int: "an integer"}


class _Fields(dict):
    """A JSON object of a comparison file that names its dotted path when a field it is
    asked for is missing; the last field read is kept (``trail``) for other errors."""

    def __init__(self, data: dict, path: str, where: str, trail: list):
        super().__init__({k: _fields(v, _join(path, k), where, trail) for k, v in data.items()})
        self._path, self._where, self._trail = path, where, trail

    def __missing__(self, key):
        raise ReportError(f"{self._where}: field {_join(self._path, key)!r} is missing")

    def __getitem__(self, key):
        self._trail[:] = [_join(self._path, key)]
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._trail[:] = [_join(self._path, key)]
        return super().get(key, default)


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _fields(v, path: str, where: str, trail: list):
    if isinstance(v, dict):
        return _Fields(v, path, where, trail)
    if isinstance(v, list):
        return [_fields(x, f"{path}[{i}]", where, trail) for i, x in enumerate(v)]
    return v


def _need(doc: dict, key: str, kind, where: str, path: str = ""):
    name = _join(path, key)
    if key not in doc:
        raise ReportError(f"{where}: field {name!r} is missing")
    v = doc[key]
    ok = (isinstance(v, int) and not isinstance(v, bool)) if kind is int else isinstance(v, kind)
    if not ok:
        raise ReportError(f"{where}: field {name!r} must be {_JSON_TYPE[kind]}, got "
                          f"{type(v).__name__}")
    return v


def read_comparison(path) -> dict:
    """The comparison file written by ``compare``, checked: a JSON object of format
    :data:`~passage_jax.evaluate.compare.COMPARE_FORMAT` with the fields the report reads
    (:data:`COMPARE_FIELDS`, the runs and the seed pairs) of their types; :class:`ReportError`
    naming the file and field otherwise. Missing nested fields are named when read."""
    path = Path(path)
    where = str(path)
    cmp = read_json(path, ReportError)
    if cmp.get("format") != COMPARE_FORMAT:
        raise ReportError(f"{where}: not a {COMPARE_FORMAT} file (format {cmp.get('format')!r})")
    for k, kind in COMPARE_FIELDS.items():
        _need(cmp, k, kind, where)
    for side in ("A", "B"):
        run = _need(cmp["runs"], side, dict, where, "runs")
        for k, kind in (("path", str), ("method_name", str), ("seeds", list), ("folders", dict)):
            _need(run, k, kind, where, f"runs.{side}")
        _need(_need(cmp["methods"], side, dict, where, "methods"), "per_seed", dict, where,
              f"methods.{side}")
    if not cmp["pairs"]:
        raise ReportError(f"{where}: field 'pairs' is empty")
    for i, pair in enumerate(cmp["pairs"]):
        if not isinstance(pair, dict):
            raise ReportError(f"{where}: field 'pairs[{i}]' must be an object, got {type(pair).__name__}")
        _need(pair, "label", str, where, f"pairs[{i}]")
        for k in ("seed_a", "seed_b"):
            _need(pair, k, int, where, f"pairs[{i}]")
    return _fields(cmp, "", where, [])


def _refuse_folders(paths) -> None:
    folders = [p for p in paths if p.is_dir()]
    if folders:
        raise ReportError(f"{folders[0]} is a folder; the report's files must be new or existing "
                          f"files (a folder is never replaced, with or without --force)")


def write_report(compare_json, output, n_route_tasks: int = 4, force: bool = False) -> dict:
    """Write the Markdown report of the comparison file ``compare_json`` to ``output`` and its
    figures beside it; returns their paths. A malformed comparison file (not JSON, not an
    object, a field missing or of the wrong type) raises :class:`ReportError` naming the file
    and the field; existing outputs are replaced only with ``force`` (never a folder)."""
    compare_json, output = Path(compare_json), Path(output)
    cmp = read_comparison(compare_json)
    trail = cmp._trail
    stem = output.stem
    figs = {"routes": output.with_name(f"{stem}_routes.png"),
            "regret": output.with_name(f"{stem}_regret.png")}
    _refuse_folders([output, *figs.values()])
    existing = [p for p in [output, *figs.values()] if p.exists()]
    if existing and not force:
        raise ReportExists(f"{existing[0]} exists; choose a new report name")
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        md = render_markdown(cmp, {k: v.name for k, v in figs.items()})
        route_figure(cmp, figs["routes"], n_route_tasks)
        regret_figure(cmp, figs["regret"])
    except (ScoreError, RecordFileError) as e:
        raise ReportError(str(e)) from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        near = f" near field {trail[0]!r}" if trail else ""
        raise ReportError(f"{compare_json}: malformed comparison file{near}: {type(e).__name__}: "
                          f"{e}") from None
    atomic_write_text(output, md)
    return {"report": str(output), **{k: str(v) for k, v in figs.items()}}
