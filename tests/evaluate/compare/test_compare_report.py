"""Regressions found reviewing compare/report/stats: refusal messages name the first real
difference, a roster's unplaced block is unknown everywhere, estimates-only contrasts carry
the same fields as bootstrapped ones, the report labels the aggregate contrast and why an
interval is missing, and the regret figure does not hide a curve at regret 0."""
from __future__ import annotations

import json

import numpy as np
import pytest
from score_support import runs

from passage_jax.evaluate.compare import CompareError, Side, blocks_for, check_identity, compare_runs
from passage_jax.evaluate.score import Score

B = 200


@pytest.fixture(scope="module")
def R():
    return runs()


def _side(manifest, path="run"):
    return Side(path=path, seeds={1234: Score(folder=None, manifest=manifest, metrics={}, receipt={},
                                              per_sample={})}, method_name=None)


def _manifest(**data_over):
    data = {"sample_ids": ["s0", "s1"], "tasks_sha256": "t" * 64, "resolution": 64,
            "split": "test", "cost_model": "energy", "task_variant": "obstacles",
            "shards": [{"name": "a.parquet", "sha256": "a" * 64}], "dataset_revision": None}
    data.update(data_over)
    return {"format": "x", "data": data, "timing": {"timer": "t"},
            "references": {"identity": "i" * 64, "policy": "released_labels", "cohort_id": None}}


def test_refusal_names_the_data_field_before_the_task_hash():
    # a different resolution changes the task hash too; the message must name the resolution
    a = _manifest()
    b = _manifest(resolution=128, tasks_sha256="u" * 64)
    with pytest.raises(CompareError, match="data resolution differ: A 64 vs B 128"):
        check_identity(_side(a), _side(b))
    # only the task inputs differ: the hash is named
    with pytest.raises(CompareError, match="different task inputs"):
        check_identity(_side(a), _side(_manifest(tasks_sha256="u" * 64)))


def test_refusal_names_the_reference_policy_before_its_identity():
    a, b = _manifest(), _manifest()
    b["references"] = {"identity": "j" * 64, "policy": "independent_analytic_reference",
                       "cohort_id": "c1"}
    with pytest.raises(CompareError, match=r"references differ \(policy\)"):
        check_identity(_side(a), _side(b))


def test_roster_custom_unplaced_block_is_unknown_everywhere(tmp_path):
    from passage_jax.stats import Roster, write_roster

    ids = [f"s{i}" for i in range(6)]
    # one real block plus a custom-named unplaced block: only ONE known block
    r = Roster(format="passage-roster-v2", task_ids=ids, blocks=["X"] * 4 + ["nowhere"] * 2,
               block_rule="main_tile_5deg", block_rule_version=1, footprint_required=False,
               unplaced_block="nowhere")
    sha = write_roster(tmp_path / "r.json", r)
    blk = blocks_for(ids, np.array(["?"] * 6), tmp_path / "r.json", sha)
    assert blk["uncertainty_status"] == "unknown"
    assert blk["census"]["n_blocks"] == 1 and blk["census"]["n_unplaced"] == 2
    # the resampling labels use the shared unplaced name, which compare_primary_metrics and
    # the ODD bins treat as unknown
    from passage_jax.contract import UNPLACED

    assert blk["labels"] == ["X"] * 4 + [UNPLACED] * 2
    # the refusal of a roster with other task ids says which side is which
    with pytest.raises(CompareError, match="position 0: the roster 's0', the runs 'z0'"):
        blocks_for([f"z{i}" for i in range(6)], np.array(["?"] * 6), tmp_path / "r.json", sha)


def test_estimates_only_contrast_names_statistic_and_counts(R, tmp_path):
    from passage_jax.stats import Roster, write_roster

    p = np.load(R["bfs"] / "seed-1234" / "per_sample.npz", allow_pickle=False)
    ids = [str(s) for s in p["sample_id"]]
    roster = Roster(format="passage-roster-v1", task_ids=ids,
                    blocks=[None] + [f"b{i % 2}" for i in range(1, len(ids))])
    sha = write_roster(tmp_path / "r.json", roster)
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c.json",
                       n_bootstrap=B, roster=tmp_path / "r.json", roster_sha256=sha)
    assert res["blocks"]["uncertainty_status"] == "unknown"
    g = np.load(R["greedy"] / "seed-1234" / "per_sample.npz", allow_pickle=False)
    c = res["contrasts"]["regret_median"]
    assert c["statistic"] == "median" and not c["ci_available"] and c["ci_low"] is None
    assert c["delta"] == pytest.approx(np.median(p["regret"]) - np.median(g["regret"]),
                                       rel=1e-12)
    a = res["contrasts"]["assd_mean"]
    assert a["statistic"] == "mean"
    assert (a["n_a"], a["n_b"]) == (int(np.isfinite(p["assd"]).sum()),
                                    int(np.isfinite(g["assd"]).sum()))


def test_report_labels_pair_contrast_and_undefined_draws(R, tmp_path):
    from passage_jax.evaluate.report import write_report

    cmp = tmp_path / "cmp.json"
    # a two-seed run against a one-seed run: the common seed, a single pair, no seed mean
    res = compare_runs(R["bfs"], R["greedy"], cmp, n_bootstrap=B)
    assert not res["seed_mean"] and len(res["pairs"]) == 1
    write_report(cmp, tmp_path / "rep.md")
    md = (tmp_path / "rep.md").read_text()
    assert "seed-mean Δ" not in md
    assert "| metric | better | Δ | interval |" in md
    # an unavailable interval says how many draws were undefined (recomputed from the JSON)
    for m in ("assd_mean", "h95_mean"):
        c = res["contrasts"][m]
        if not c["ci_available"] and c["n_undefined_draws"]:
            assert f"unavailable ({c['n_undefined_draws']}/{B} draws undefined)" in md


def test_report_seed_mean_header_when_seeds_match(R, tmp_path):
    from passage_jax.evaluate.report import render_markdown

    res = compare_runs(R["bfs"], R["exact"], tmp_path / "c.json", n_bootstrap=B)
    md = render_markdown(json.loads((tmp_path / "c.json").read_text()), {})
    assert res["seed_mean"] and "| metric | better | seed-mean Δ | interval |" in md


def test_regret_figure_shows_a_curve_at_zero(R, tmp_path, monkeypatch):
    """An exact planner's regrets are 0 (to an ulp); its CDF must not sit on the left spine,
    and the legend must not cover the plotting area."""
    import passage_jax.evaluate.report._figures as rep

    res = compare_runs(R["bfs"], R["exact"], tmp_path / "c.json", n_bootstrap=B)
    seen = {}

    def capture(fig, path):
        ax = fig.axes[0]
        fig.canvas.draw()
        seen["xlim"] = ax.get_xlim()
        seen["lines"] = [ln.get_xdata() for ln in ax.get_lines() if len(ln.get_xdata())]
        leg = ax.get_legend().get_window_extent()
        seen["overlap"] = leg.overlaps(ax.get_window_extent()) and \
            leg.y0 > ax.get_window_extent().y0
        return path

    monkeypatch.setattr(rep, "_save_figure", capture)
    rep.regret_figure(res, tmp_path / "r.png")
    smallest = min(float(np.min(x)) for x in seen["lines"])
    assert abs(smallest) < 1e-12  # the exact method's curve is there, at 0
    left, right = seen["xlim"]
    assert left < smallest - 1e-6 * (right - left)  # ... and left of it is visible margin
    assert not seen["overlap"]


def test_the_figures_leave_the_callers_matplotlib_alone(R, tmp_path):
    """The report's figures draw on their own Agg canvases: a process with another
    backend keeps it, pyplot is never imported, and the PNGs are written."""
    import os
    import subprocess
    import sys

    compare_runs(R["bfs"], R["exact"], tmp_path / "c.json", n_bootstrap=B)
    code = ("import json, sys, matplotlib; from pathlib import Path; "
            "from passage_jax.evaluate.report._figures import regret_figure, route_figure; "
            "c = json.loads(Path(sys.argv[1]).read_text()); d = Path(sys.argv[2]); "
            "route_figure(c, d / 'routes.png'); regret_figure(c, d / 'regret.png'); "
            "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)")
    env = dict(os.environ, MPLBACKEND="svg")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "c.json"), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["svg", "False"]
    for name in ("routes.png", "regret.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_metric_vote_refuses_unknown_metric():
    from passage_jax.stats import metric_vote

    with pytest.raises(ValueError, match="unknown metric"):
        metric_vote("regret_mean", -1.0, True)


def test_randomization_accepts_numpy_integers_and_checks_limits():
    from passage_jax.stats import DEFAULT_SEEDS, block_randomization_test

    rng = np.random.default_rng(1)
    n = 8
    ids = [f"t{i}" for i in range(n)]

    def rec(shift):
        v = np.ones(n, bool)
        return {"task_id": ids, "regret": rng.random(n) + shift, "assd": rng.random(n),
                "h95": rng.random(n), "success": v, "obstacle_violation": ~v}

    A = {s: rec(0.0) for s in DEFAULT_SEEDS}
    Bm = {s: rec(0.3) for s in DEFAULT_SEEDS}
    blocks = [f"b{i // 2}" for i in range(n)]
    r1 = block_randomization_test(A, Bm, blocks, exact_limit=1, n_random=np.int64(99), seed=2)
    r2 = block_randomization_test(A, Bm, blocks, exact_limit=1, n_random=99, seed=2)
    assert r1.n_patterns == 99 and r1.p_values == r2.p_values
    with pytest.raises(ValueError, match="exact_limit"):
        block_randomization_test(A, Bm, blocks, exact_limit=-1)
    with pytest.raises(ValueError, match="n_random"):
        block_randomization_test(A, Bm, blocks, n_random=0)


def test_latency_without_recorded_time_is_unavailable_not_a_refusal():
    from passage_jax.evaluate.compare import latency_contrast

    boot = {"n": 50, "alpha": 0.05, "seed": 0}
    lat_a = np.array([1.0, 2.0, 3.0, 4.0])
    lat_b = np.array([2.0, np.nan, 1.0, 5.0])
    blocks = ["x", "x", "y", "y"]
    out = latency_contrast([{"latency_ms": lat_a}], [{"latency_ms": lat_b}], ["1234"], blocks,
                           boot, True)
    assert out["delta"] is None and not out["ci_available"] and "1234" in out["reason"]
    ok = latency_contrast([{"latency_ms": lat_a}], [{"latency_ms": np.array([2., 2., 1., 5.])}],
                          ["1234"], blocks, boot, True)
    assert ok["delta"] == pytest.approx(np.median(lat_a) - 2.0, rel=1e-12)


def test_tileless_task_without_roster_leaves_uncertainty_unknown():
    """docs/contract.md §5: missing block identities leave uncertainty unknown; only a
    sealed roster may gather tile-less tasks into a declared unplaced block."""
    import numpy as np

    from passage_jax.contract import UNPLACED
    from passage_jax.evaluate.compare import blocks_for

    ids = [f"{i:010d}" for i in range(4)]
    placed = np.array(["5deg:+35:-115", "5deg:+35:-115", "5deg:+45:+5", "5deg:+45:+5"])
    assert blocks_for(ids, placed)["uncertainty_status"] == "available"
    one_missing = placed.copy()
    one_missing[2] = UNPLACED
    b = blocks_for(ids, one_missing)
    assert b["uncertainty_status"] == "unknown"
    assert b["labels"][2] is None and b["reason"] == "some tasks have no block identity"
