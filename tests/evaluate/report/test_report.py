"""report: Markdown with the tables and two legible PNG figures beside it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from score_support import runs

from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.report import ReportError, write_report


def test_report_markdown_and_figures(tmp_path):
    R = runs()
    cmp = tmp_path / "cmp.json"
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"], cmp, n_bootstrap=200)
    out = write_report(cmp, tmp_path / "rep" / "report.md")
    md = (tmp_path / "rep" / "report.md").read_text()
    for k in ("regret_median", "regret_p90", "assd_mean", "h95_mean", "success_rate",
              "obstacle_violation_rate", "valid both", "passage-censored-latency/v1",
              "report_routes.png", "report_regret.png", "A: bfs", "B: greedy"):
        assert k in md, k
    # the table carries the compare's numbers
    sr = res["methods"]["B"]["per_seed"]["1234"]["primary"]["success_rate"]
    assert f"{sr:.4f}" in md
    import matplotlib.image as mpimg

    for key in ("routes", "regret"):
        img = mpimg.imread(out[key])
        assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 500
        assert np.std(img[..., :3]) > 0.05  # not blank
    with pytest.raises(ReportError, match="exists"):
        write_report(cmp, tmp_path / "rep" / "report.md")
    with pytest.raises(ReportError, match="not a passage-jax-compare-v1"):
        (tmp_path / "x.json").write_text("{}")
        write_report(tmp_path / "x.json", tmp_path / "r2.md")


# --------------------------------------------------------------------------- #
# the procedure-limits header, the figures' styling, the attribution hints
# --------------------------------------------------------------------------- #

def _section_table(md: str, heading: str) -> list[list[str]]:
    """The first Markdown table under ``heading`` as rows of cells (header first)."""
    lines = md.split(heading, 1)[1].splitlines()
    rows = [ln for ln in lines if ln.startswith("|")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    block = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        block.append(ln)
    assert rows
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in block
            if not ln.startswith("|---")]


def _captured(monkeypatch):
    """Patch the figure writer to keep the figure instead of saving it."""
    from passage_jax.evaluate.report import _figures as report_figures

    figs = []
    monkeypatch.setattr(report_figures, "_save_figure", lambda fig, path: figs.append(fig) or path)
    return figs


def test_limits_header_named_and_figures_styled(tmp_path, monkeypatch):
    R = runs()
    cmp = tmp_path / "cmp.json"
    compare_runs(R["bfs"] / "seed-1234", R["greedy"], cmp, n_bootstrap=50)
    from passage_jax.evaluate.report import read_comparison
    from passage_jax.evaluate.report._figures import (
        REGRET_AXIS_LABEL,
        ROUTE_STYLES,
        regret_figure,
        route_figure,
    )
    from passage_jax.evaluate.report._markdown import render_markdown

    c = read_comparison(cmp)
    table = _section_table(render_markdown(c, {}), "## Procedure limits")
    header, body = table[0], table[1:]
    assert all(header) and len(header) == 4, header
    lim = c["procedure_limits"]
    assert [r[0] for r in body] == list(lim["A"])
    for r in body:  # the fourth column says, for every limit, whether it differs
        assert r[3] == ("**differs**" if r[0] in lim["differ"] else "same")

    figs = _captured(monkeypatch)
    route_figure(c, tmp_path / "r.png", 2)
    (fig,) = figs
    panels = [ax for ax in fig.axes if ax.get_title().startswith("scene")]
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "elevation (m)"]
    assert len(panels) == 2 and len(bars) == len(panels)
    for ax in panels:
        lines = {ln.get_label().split(" (")[0]: ln for ln in ax.get_lines()}
        a, b = lines["A: bfs"], lines["B: greedy"]
        # where the routes share cells both stay visible: B narrower than A, dashed, on top
        assert b.get_linewidth() < a.get_linewidth() and b.get_zorder() > a.get_zorder()
        assert a.get_linestyle() == "-" and b.get_linestyle() != "-"
        assert a.get_alpha() < 1
    assert ROUTE_STYLES["A"]["lw"] > ROUTE_STYLES["B"]["lw"]

    regret_figure(c, tmp_path / "g.png")
    ax = figs[-1].axes[0]
    assert ax.get_xlabel() == REGRET_AXIS_LABEL
    assert ax.get_xlabel().startswith("relative regret") and "/ c*" in ax.get_xlabel()


def test_stage_work_over_the_seeds_where_the_stage_ran():
    """A stage that ran in one seed only has that seed's median (as the per-seed table
    shows it), not n/a; a seed where it ran without the counter still gives n/a."""
    from passage_jax.evaluate.attribution._table import _stage_medians

    def comp(n_ran, med):
        work = {k: {"median": med, "p90": med, "n_reported": n_ran}
                for k in ("expansions", "queue_operations", "live_states")}
        return {"stage_work": {"fallback": {"n_rows_ran": n_ran, **work}}}

    comps = [comp(0, None), comp(0, None), comp(1, 1629.0)]
    assert _stage_medians(comps, "fallback")["expansions_median"] == 1629.0
    comps = [comp(2, 100.0), comp(0, None), comp(1, 300.0)]
    assert _stage_medians(comps, "fallback")["expansions_median"] == pytest.approx(200.0)
    comps = [comp(2, 100.0), comp(3, None)]
    assert _stage_medians(comps, "fallback")["expansions_median"] is None
    assert _stage_medians([comp(0, None)], "fallback")["expansions_median"] is None


def test_missing_control_names_the_spec_to_run():
    import yaml

    from passage_jax.evaluate.attribution import CONTROL_SPECS, render_attribution_markdown

    root = Path(__file__).resolve().parents[3]
    for variant, spec in CONTROL_SPECS.items():  # each named spec declares that variant
        doc = yaml.safe_load((root / spec).read_text())
        assert doc["component_control"]["variant"] == variant, spec
    table = {"rows": [], "flags": ["missing control: bounded_repair", "different device: x"],
             "complete": False}
    md = render_attribution_markdown(table)
    line = next(ln for ln in md.splitlines() if ln.startswith("- missing control: bounded_repair"))
    assert "--spec configs/learned_bounded_repair.yaml" in line and "report --attribution" in line
    other = next(ln for ln in md.splitlines() if ln.startswith("- different device"))
    assert "--spec" not in other
