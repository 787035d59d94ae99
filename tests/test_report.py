"""report: Markdown with the tables and two legible PNG figures beside it."""
from __future__ import annotations

import numpy as np
import pytest
from test_score_support import runs

from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.report import ReportError, write_report


def test_report_markdown_and_figures(tmp_path):
    R = runs()
    cmp = tmp_path / "cmp.json"
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"], cmp, n_resamples=200)
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
