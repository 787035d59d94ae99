"""trust: each axis against an independent NumPy computation (firing and not), the jitted
kernels against eager ones, the table and the ``trust`` command on small scored runs."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import fixtures_runner as F
import jax
import numpy as np
import pytest
from score_support import runs

from cli import trust as trust_cli
from passage_jax.trust import (
    TrustError,
    boundary_delta,
    coefficient_of_variation,
    efficiency_axis,
    geographic_axis,
    odd_boundary_axis,
    speedup,
    stability_axis,
)

# --------------------------------------------------------------------------- #
# axes on synthetic arrays
# --------------------------------------------------------------------------- #


def np_cv(x):
    x = np.asarray(x, float)
    return np.sqrt(np.mean((x - x.mean()) ** 2)) / abs(x.mean())


@pytest.mark.parametrize("vals, fires", [([0.10, 0.11, 0.12], False), ([0.05, 0.20, 0.10], True)])
def test_stability_against_numpy(vals, fires):
    r = stability_axis(vals, seeds=[1234, 2026, 3407])
    assert r.value == pytest.approx(np.std(vals) / np.mean(vals), rel=1e-12)
    assert r.value == pytest.approx(np_cv(vals), rel=1e-12)
    assert r.threshold == 0.25 and r.fires is fires and r.available
    assert r.details["per_seed"] == {"1234": vals[0], "2026": vals[1], "3407": vals[2]}
    # a custom threshold moves the verdict
    assert stability_axis(vals, threshold=r.value + 1e-9).fires is False
    assert stability_axis(vals, threshold=r.value - 1e-9).fires is True


def test_stability_edge_cases():
    assert stability_axis([0.0, 0.0, 0.0]).value == 0.0           # no variation
    r = stability_axis([-1.0, 1.0, 0.0])                           # mean 0, values differ
    assert r.value == np.inf and r.fires
    with pytest.raises(ValueError, match="at least two seeds"):
        stability_axis([0.3])
    with pytest.raises(ValueError, match="entry 1 is nan"):
        stability_axis([0.3, np.nan, 0.2])


def test_geographic_against_numpy():
    rng = np.random.default_rng(1)
    hold = rng.gamma(2.0, 1.2, 200)
    rand = rng.gamma(2.0, 1.0, 300)
    hold[:7] = np.nan                                              # geometry off valid routes
    r = geographic_axis(hold, rand)
    expect = np.nanmean(hold) - np.mean(rand)
    assert r.value == pytest.approx(expect, rel=1e-12) and expect > 0
    assert r.fires and r.threshold == 0.0 and r.details["n_holdout"] == 193
    # the hold-out better: not firing
    better = geographic_axis(rand, hold)
    assert better.value == pytest.approx(-expect, rel=1e-12) and not better.fires
    # success: higher is better, so a lower hold-out mean fires
    s_h = (rng.random(100) < 0.6).astype(float)
    s_r = (rng.random(100) < 0.9).astype(float)
    r = geographic_axis(s_h, s_r, higher_is_better=True)
    assert r.value == pytest.approx(s_h.mean() - s_r.mean(), rel=1e-12) and r.fires
    assert not geographic_axis(s_r, s_h, higher_is_better=True).fires
    with pytest.raises(ValueError, match="no finite value"):
        geographic_axis([np.nan], [1.0])


def np_boundary(values, strat, tq):
    cut = np.percentile(strat, 100 * (1 - tq))
    edge = strat >= cut
    v = values
    return np.nanmean(v[edge]) - np.nanmean(v), cut, int(edge.sum())


@pytest.mark.parametrize("tq", [0.1, 0.25])
def test_odd_boundary_against_numpy(tq):
    rng = np.random.default_rng(7)
    n = 120
    strat = np.round(rng.uniform(0, 1, n), 2)                     # ties at the cut
    worse_at_edge = 1.0 + 3.0 * strat ** 4 + rng.normal(0, 0.05, n)
    better_at_edge = 2.0 - strat ** 4 + rng.normal(0, 0.05, n)
    worse_at_edge[[3, 9]] = np.nan
    for values, fires in ((worse_at_edge, True), (better_at_edge, False)):
        r = odd_boundary_axis(values, strat, top_quantile=tq)
        d, cut, nb = np_boundary(values, strat, tq)
        assert r.value == pytest.approx(d, rel=1e-12)
        assert r.details["cut"] == pytest.approx(cut, rel=1e-15) and r.details["n_boundary"] == nb
        assert r.fires is fires and r.threshold == 0.0
    # success (higher is better): a drop at the edge fires
    succ = (strat < 0.8).astype(float)
    r = odd_boundary_axis(succ, strat, top_quantile=tq, higher_is_better=True)
    assert r.value == pytest.approx(np_boundary(succ, strat, tq)[0], rel=1e-12) and r.fires
    # several seeds: the mean of the per-seed deltas
    rows = np.stack([worse_at_edge, better_at_edge, better_at_edge + 1])
    r = odd_boundary_axis(rows, strat, top_quantile=tq)
    assert r.value == pytest.approx(np.mean([np_boundary(v, strat, tq)[0] for v in rows]), rel=1e-12)


def test_odd_boundary_unavailable_and_bad_input():
    strat = np.arange(10.0)
    v = np.ones(10)
    v[8:] = np.nan                                                 # the top slice is all NaN
    r = odd_boundary_axis(v, strat, top_quantile=0.2)
    assert not r.available and not r.fires and np.isnan(r.value)
    with pytest.raises(ValueError, match="top_quantile"):
        odd_boundary_axis(np.ones(10), strat, top_quantile=1.0)
    with pytest.raises(ValueError, match="stratifier: entry 2 is nan"):
        odd_boundary_axis(np.ones(3), [0.0, 1.0, np.nan])
    with pytest.raises(ValueError, match="3 tasks, the stratifier 2"):
        odd_boundary_axis(np.ones(3), [0.0, 1.0])


def test_efficiency_against_numpy():
    to = np.array([12.0, 10.0, 11.0])
    fast = np.array([2.0, 3.0, 2.5, 9.0])
    slow = np.array([40.0, 15.0])
    r = efficiency_axis(to, fast)
    assert r.value == pytest.approx(np.median(to) / np.median(fast), rel=1e-12)
    assert not r.fires and r.threshold == 1.0
    r = efficiency_axis(to, slow)
    assert r.value == pytest.approx(np.median(to) / np.median(slow), rel=1e-12) and r.fires
    assert efficiency_axis(5.0, 4.0).value == pytest.approx(1.25)     # scalars
    with pytest.raises(ValueError, match="planner times: entry 0 is not positive"):
        efficiency_axis(5.0, 0.0)


def test_kernels_jitted_equal_eager():
    rng = np.random.default_rng(3)
    x = rng.gamma(2.0, size=40)
    s = rng.random(40)
    with jax.enable_x64(True):
        for f, args in ((coefficient_of_variation, (x[:3],)), (speedup, (x[:5], x[5:9])),
                        (boundary_delta, (x, s, 0.1))):
            eager = jax.tree_util.tree_leaves(f(*args))
            jitted = jax.tree_util.tree_leaves(jax.jit(f)(*args))
            for a, b in zip(eager, jitted):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14)


# --------------------------------------------------------------------------- #
# the table and the command on small scored runs
# --------------------------------------------------------------------------- #

@pytest.fixture(scope="module")
def R():
    return runs()


def cli(argv, capsys):
    p = argparse.ArgumentParser()
    trust_cli.register(p)
    rc = trust_cli.main(p.parse_args(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def per_sample(run: Path, seed: int) -> dict:
    with np.load(run / f"seed-{seed}" / "per_sample.npz", allow_pickle=False) as z:
        p = {k: z[k] for k in z.files}
    sel = np.flatnonzero(p["primary_quality"] & p["reference_qualified"])
    sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
    return {k: v[sel] for k, v in p.items() if v.ndim == 1}


def metrics(run: Path, seed: int) -> dict:
    return json.loads((run / f"seed-{seed}" / "metrics.json").read_text())


edited_copy = F.edited_copy


def test_cli_json_matches_numpy_on_scored_runs(R, capsys, tmp_path):
    out = tmp_path / "trust.json"
    rc, text, _ = cli(["--score", str(R["bfs"]), "--oracle", str(R["exact"]), "--json",
                       "--output", str(out)], capsys)
    assert rc == 0
    table = json.loads(text)
    assert table == json.loads(out.read_text()) and table["format"] == "passage-jax-trust-v1"
    rows = {r["label"]: r for r in table["rows"]}
    seeds = (1234, 2026)
    # stability from the per-seed regret p90 of metrics.json
    p90 = [metrics(R["bfs"], s)["primary"]["regret_p90"] for s in seeds]
    st = rows["stability"]
    if np.std(p90) == 0:
        assert st["value"] == 0.0
    else:
        assert st["value"] == pytest.approx(np_cv(p90), rel=1e-12)
    assert st["fires"] == (st["value"] > 0.25)
    # ODD boundary rows: one per stratum_* column, seed mean of per-seed deltas of regret
    ps = {s: per_sample(R["bfs"], s) for s in seeds}
    names = sorted(k[len("stratum_"):] for k in ps[1234] if k.startswith("stratum_"))
    assert names and {f"odd_boundary:{n}" for n in names} <= set(rows)
    for n in names:
        strat = ps[1234][f"stratum_{n}"]
        d = np.mean([np_boundary(ps[s]["regret"], strat, 0.1)[0] for s in seeds])
        r = rows[f"odd_boundary:{n}"]
        assert r["value"] == pytest.approx(d, rel=1e-12, abs=1e-12), n
        assert r["fires"] == bool(d > 0)
    # efficiency: median over seeds of the warm p50, oracle over planner
    t = {k: [metrics(R[k], s)["latency"]["warm"]["interpolated"]["p50"] for s in seeds]
         for k in ("bfs", "exact")}
    e = rows["efficiency"]
    assert e["value"] == pytest.approx(np.median(t["exact"]) / np.median(t["bfs"]), rel=1e-12)
    assert e["fires"] == (e["value"] < 1.0) and e["threshold"] == 1.0
    # the rich table names every axis
    rc, text, _ = cli(["--score", str(R["bfs"]), "--oracle", str(R["exact"])], capsys)
    assert rc == 0 and "stability" in text and "efficiency" in text


def test_cli_geographic_firing_and_not(R, capsys, tmp_path):
    # the same planner on the same split: difference 0, not firing
    rc, text, _ = cli(["--holdout", str(R["bfs"]), "--random-split", str(R["bfs"]), "--json"],
                      capsys)
    g = json.loads(text)["rows"][0]
    assert rc == 0 and g["label"] == "geographic" and g["value"] == 0.0 and not g["fires"]
    # a worse "hold-out" run of the same planner name (greedy's routes relabelled)
    hold = edited_copy(R["greedy"], tmp_path / "hold", lambda m: m.update(method_name="bfs"))
    rc, text, _ = cli(["--holdout", str(hold), "--random-split", str(R["bfs"]), "--json",
                       "--field", "success"], capsys)
    g = json.loads(text)["rows"][0]
    h = per_sample(hold, 1234)["success"].astype(float)
    r = np.concatenate([per_sample(R["bfs"], s)["success"] for s in (1234, 2026)]).astype(float)
    assert g["value"] == pytest.approx(h.mean() - r.mean(), rel=1e-12)
    assert h.mean() < r.mean() and g["fires"]
    # two different planners are refused, naming them
    rc, _, err = cli(["--holdout", str(R["greedy"]), "--random-split", str(R["bfs"])], capsys)
    assert rc == 2 and "'greedy'" in err and "'bfs'" in err


def test_cli_refusals(R, capsys, tmp_path):
    rc, _, err = cli(["--holdout", str(R["bfs"])], capsys)
    assert rc == 2 and "go together" in err
    rc, _, err = cli([], capsys)
    assert rc == 2 and "--score" in err
    # another device: the efficiency axis refuses, naming the field
    other = edited_copy(R["exact"], tmp_path / "exact-other",
                        lambda m: m["hardware"].update(machine="another-machine"))
    rc, _, err = cli(["--score", str(R["bfs"]), "--oracle", str(other)], capsys)
    assert rc == 2 and "same device" in err and "hardware" in err
    # a single seed: stability is unavailable, never fires
    rc, text, _ = cli(["--score", str(R["greedy"]), "--json"], capsys)
    st = json.loads(text)["rows"][0]
    assert rc == 0 and st["label"] == "stability" and not st["available"] and not st["fires"]
    assert "two training seeds" in st["details"]["reason"]


def test_table_refuses_bad_field(R):
    from passage_jax.evaluate.compare import load_side
    from passage_jax.trust import trust_table

    with pytest.raises(TrustError, match="unknown per-task field 'path_iou'"):
        trust_table([load_side(R["bfs"])], field_name="path_iou")
