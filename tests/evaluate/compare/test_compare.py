"""compare: refusal of mismatched runs, paired contrasts against a plain NumPy
block bootstrap, both-valid geometry, rosters, ODD bins; report and bench."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest
from score_support import N_SAMPLES, runs, spec_dict

from passage_jax.evaluate.compare import CompareError, bin_index, compare_runs
from passage_jax.evaluate.score import score_run
from passage_jax.testing import kernel_tol

B = 300  # bootstrap draws in these tests


@pytest.fixture(scope="module")
def R():
    return runs()


def load(p):
    with np.load(p, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


edited_copy = F.edited_copy


def test_contrasts_match_plain_numpy(R, tmp_path):
    out = tmp_path / "c.json"
    res = compare_runs(R["bfs"], R["exact"], out, n_bootstrap=B, bootstrap_seed=7)
    assert json.loads(out.read_text())["format"] == "passage-jax-compare-v1"
    assert res["seed_mean"] and [p["label"] for p in res["pairs"]] == ["1234", "2026"]
    pa = {s: load(R["bfs"] / f"seed-{s}" / "per_sample.npz") for s in (1234, 2026)}
    pb = {s: load(R["exact"] / f"seed-{s}" / "per_sample.npz") for s in (1234, 2026)}
    blocks = pa[1234]["cluster_id"]
    labels = sorted(set(blocks))
    assert res["blocks"]["census"]["n_blocks"] == len(labels)
    assert res["blocks"]["uncertainty_status"] == "available"
    # materialised block bootstrap with the same multiplicity rows as passage_jax.stats
    from passage_jax.stats import multiplicity_matrix

    mult = multiplicity_matrix(len(labels), B, 7)
    bi = np.array([labels.index(b) for b in blocks])
    specs = {"regret_median": ("regret", 50), "regret_p90": ("regret", 90),
             "success_rate": ("success", None), "assd_mean": ("assd", None)}
    for metric, (f, q) in specs.items():
        def stat(x, q=q):
            x = x[np.isfinite(x)]
            return np.mean(x) if q is None else np.percentile(x, q)
        draws = []
        for row in mult:
            idx = np.concatenate([np.flatnonzero(bi == k).repeat(1) for k in range(len(labels))
                                  for _ in range(row[k])])
            per = [stat(pa[s][f].astype(float)[idx]) - stat(pb[s][f].astype(float)[idx])
                   for s in (1234, 2026)]
            draws.append(np.mean(per))
        lo, hi = np.percentile(draws, [2.5, 97.5])
        c = res["contrasts"][metric]
        est = np.mean([stat(pa[s][f].astype(float)) - stat(pb[s][f].astype(float))
                       for s in (1234, 2026)])
        assert c["delta"] == pytest.approx(est, rel=kernel_tol(1e-9), abs=1e-12), metric
        assert c["ci_low"] == pytest.approx(lo, rel=kernel_tol(1e-9), abs=1e-12), metric
        assert c["ci_high"] == pytest.approx(hi, rel=kernel_tol(1e-9), abs=1e-12), metric
    # bfs is never cheaper than exact
    assert res["contrasts"]["regret_median"]["delta"] > 0
    assert res["methods"]["B"]["per_seed"]["1234"]["n_path_valid"] == N_SAMPLES


def test_both_valid_intersection_and_denominators(R, tmp_path):
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"] / "seed-1234", tmp_path / "c.json",
                       n_bootstrap=B)
    a = load(R["bfs"] / "seed-1234" / "per_sample.npz")
    b = load(R["greedy"] / "seed-1234" / "per_sample.npz")
    both = a["valid_path"] & b["valid_path"]
    c = res["valid_route_denominators"]["1234"]
    assert (c["n_valid_a"], c["n_valid_b"], c["n_both_valid"]) == (
        a["valid_path"].sum(), b["valid_path"].sum(), both.sum())
    assert 0 < both.sum() < N_SAMPLES
    g = res["geometry_both_valid"]["assd_mean"]
    assert g["delta"] == pytest.approx(a["assd"][both].mean() - b["assd"][both].mean())
    own = res["contrasts"]["assd_mean"]["delta"]
    assert own == pytest.approx(a["assd"][a["valid_path"]].mean()
                                - b["assd"][b["valid_path"]].mean())
    assert res["contrasts"]["success_rate"]["delta"] == pytest.approx(
        a["success"].mean() - b["success"].mean())


def test_refuses_different_tasks(R, tmp_path):
    from passage_jax.run import parse_spec, run_spec

    other = tmp_path / "greedy5"
    run_spec(parse_spec(spec_dict("greedy", R["cohort"], n_samples=N_SAMPLES - 1)), other,
             progress=False)
    score_run(other)
    with pytest.raises(CompareError, match="tasks differ"):
        compare_runs(R["greedy"], other, tmp_path / "c.json", n_bootstrap=B)
    assert not (tmp_path / "c.json").exists()


def test_refuses_different_data_hash(R, tmp_path):
    import pyarrow.parquet as pq

    from passage_jax.run import parse_spec, run_spec

    cohort = tmp_path / "cohort"
    shutil.copytree(R["cohort"], cohort)
    shard = next((cohort / "64x64" / "test").glob("*.parquet"))
    pq.write_table(pq.read_table(shard), shard, compression="gzip")  # same scenes, new bytes
    other = tmp_path / "greedy-recompressed"
    run_spec(parse_spec(spec_dict("greedy", cohort)), other, progress=False)
    score_run(other)
    with pytest.raises(CompareError, match="data hashes differ"):
        compare_runs(R["greedy"], other, tmp_path / "c.json", n_bootstrap=B)


def test_refuses_different_timing_profile_and_references(R, tmp_path):
    def prof(m):
        m["timing_profile"] = "supervised_service_v1"
    other = edited_copy(R["greedy"], tmp_path / "g-prof", prof)
    with pytest.raises(CompareError, match="timing profiles differ"):
        compare_runs(R["greedy"], other, tmp_path / "c.json", n_bootstrap=B)

    other = _other_references(R["greedy"], tmp_path / "g-ref")
    with pytest.raises(CompareError, match="references differ"):
        compare_runs(R["greedy"], other, tmp_path / "c.json", n_bootstrap=B)


def _other_references(src: Path, dest: Path) -> Path:
    """A copy of a scored run as if qualified with other references (c* doubled): its
    references.npz, identity, manifests and run_started.json agree, and it is scored again."""
    from passage_jax.fileio import sha256_file
    from passage_jax.protocol.records import references_identity

    shutil.copytree(src, dest)
    for seed in dest.glob("seed-*"):
        a = load(seed / "references.npz")
        a["c_star"] = a["c_star"] * 2.0
        a["identity"] = np.array(references_identity(a["sample_id"], a["c_star"], a["route_coords"],
                                                     a["route_offsets"], a["qualified"]))
        np.savez_compressed(seed / "references.npz", **a)
        m = json.loads((seed / "manifest.json").read_text())
        m["files"]["references.npz"] = sha256_file(seed / "references.npz")
        m["references"]["identity"] = str(a["identity"])
        (seed / "manifest.json").write_text(json.dumps(m))
    st = json.loads((dest / "run_started.json").read_text())
    st["identity"]["references"]["identity"] = str(a["identity"])
    (dest / "run_started.json").write_text(json.dumps(st))
    score_run(dest, force=True)
    return dest


def test_limits_listed_and_refused_under_flag(R, tmp_path):
    def deadline(m):
        m["budget"]["wall_time_ms"] = 5000.0
        m["timing"]["latency_warmup"] = 3
    other = edited_copy(R["greedy"], tmp_path / "g-lim", deadline)
    res = compare_runs(R["greedy"], other, tmp_path / "ok.json", n_bootstrap=B)
    assert {"budget", "deadline_ms", "latency_warmup"} <= set(res["procedure_limits"]["differ"])
    with pytest.raises(CompareError, match="limits differ .*deadline_ms"):
        compare_runs(R["greedy"], other, tmp_path / "c.json", n_bootstrap=B,
                     require_identical_limits=True)
    # identical limits pass the flag
    compare_runs(R["greedy"], R["greedy"], tmp_path / "same.json", n_bootstrap=B,
                 require_identical_limits=True)


def test_roster_sha_and_blocks(R, tmp_path):
    from passage_jax.stats import Roster, write_roster

    p = load(R["greedy"] / "seed-1234" / "per_sample.npz")
    ids = [str(s) for s in p["sample_id"]]
    # one block per pair of tasks (a different blocking from the tiles)
    roster = Roster(format="passage-roster-v1", task_ids=ids,
                    blocks=[f"b{i // 2}" for i in range(len(ids))])
    f = tmp_path / "roster.json"
    sha = write_roster(f, roster)
    with pytest.raises(CompareError, match="sha256"):
        compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c.json", n_bootstrap=B,
                     roster=f, roster_sha256="f" * 64)
    with pytest.raises(CompareError, match="without its sealed sha256"):
        compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c.json", n_bootstrap=B,
                     roster=f)
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c.json", n_bootstrap=B,
                       roster=f, roster_sha256=sha)
    assert res["blocks"]["source"] == "roster" and res["blocks"]["sha256"] == sha
    assert res["blocks"]["census"]["n_blocks"] == len(ids) // 2
    # a roster whose tasks are not the runs' tasks
    bad = Roster(format="passage-roster-v1", task_ids=ids[::-1], blocks=roster.blocks)
    sha2 = write_roster(tmp_path / "bad.json", bad)
    with pytest.raises(CompareError, match="not the runs' ordered sample ids"):
        compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c2.json", n_bootstrap=B,
                     roster=tmp_path / "bad.json", roster_sha256=sha2)


def test_odd_bins(R, tmp_path):
    p = load(R["greedy"] / "seed-1234" / "per_sample.npz")
    d = p["stratum_start_goal_distance_px"]
    mid = float(np.median(d))
    spec = tmp_path / "odd.yaml"
    spec.write_text("stratifiers:\n"
                    f"  start_goal_distance_px: [0, {mid}, {float(d.max()) + 1}]\n"
                    "  obstacle_coverage: [0.0, 0.9, 1.0]\n")
    res = compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c.json", n_bootstrap=B,
                       odd_spec=spec)
    bins = res["odd"]["bins"]
    assert len(bins) == 4 and res["odd"]["n_outside_support"] == 0
    assert sum(b["n_tasks"] for b in bins) == N_SAMPLES
    assert [b["n_tasks"] for b in bins if "[0.9, 1]" in b["bin"]["obstacle_coverage"]] == [0, 0]
    lo = d < mid
    a = load(R["bfs"] / "seed-1234" / "per_sample.npz")
    b0 = next(b for b in bins if b["bin"]["start_goal_distance_px"].startswith("[0,")
              and b["bin"]["obstacle_coverage"] == "[0, 0.9)")
    assert b0["n_tasks"] == lo.sum()
    assert b0["contrasts"]["success_rate"]["delta"] == pytest.approx(
        a["success"][lo].mean() - p["success"][lo].mean())
    # bins: half-open, last closed, outside -> -1
    assert bin_index(np.array([0.0, 0.5, 1.0, 2.0, -1.0, np.nan]), [0, 1, 2]).tolist() == \
        [0, 0, 1, 1, -1, -1]
    bad = tmp_path / "bad.yaml"
    bad.write_text("stratifiers:\n  elevation_colour: [0, 1]\n")
    with pytest.raises(CompareError, match="elevation_colour"):
        compare_runs(R["bfs"] / "seed-1234", R["greedy"], tmp_path / "c3.json", odd_spec=bad)


def test_output_not_overwritten(R, tmp_path):
    out = tmp_path / "c.json"
    out.write_text("keep")
    with pytest.raises(CompareError, match="exists"):
        compare_runs(R["greedy"], R["greedy"], out, n_bootstrap=B)
    assert out.read_text() == "keep"


def test_unscored_run_refused(R, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(R["greedy"], d)
    (d / "seed-1234" / "per_sample.npz").unlink()
    with pytest.raises(CompareError, match="not scored"):
        compare_runs(R["greedy"], d, tmp_path / "c.json", n_bootstrap=B)


# --------------------------------------------------------------------------- #
# the confirmatory test: block randomization or a declared evidence file
# --------------------------------------------------------------------------- #

SEEDS3 = (1234, 2026, 3407)


@pytest.fixture(scope="module")
def R3(R):
    """Three-seed scored runs (exact, bfs) on the shared cohort."""
    from passage_jax.run import parse_spec, run_spec

    out = {}
    for m in ("exact", "bfs"):
        folder = R["root"] / f"{m}-3seeds"
        if not folder.exists():
            run_spec(parse_spec(spec_dict(m, R["cohort"], SEEDS3)), folder, progress=False)
            score_run(folder)
        out[m] = folder
    return out


def primary_records(run: Path) -> tuple[dict, list, list]:
    """compare_primary_metrics input from a run's per_sample.npz, read independently."""
    recs, ids, blocks = {}, None, None
    for s in SEEDS3:
        p = load(run / f"seed-{s}" / "per_sample.npz")
        sel = np.flatnonzero(p["primary_quality"])
        sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
        ids = [str(x) for x in p["sample_id"][sel]]
        blocks = [str(x) for x in p["cluster_id"][sel]]
        recs[s] = {"task_id": ids, **{f: p[f][sel] for f in (
            "regret", "assd", "h95", "success", "obstacle_violation", "valid_path")}}
    return recs, ids, blocks


def hand_holm(p: dict, alpha: float = 0.05) -> tuple[set, dict]:
    """Holm step-down written out: reject the k-th smallest while p_(k) <= alpha/(m-k+1)."""
    m = len(p)
    avail = sorted((v, k) for k, v in p.items() if v == v)
    rejected, adjusted, running, going = set(), {}, 0.0, True
    for k, (v, name) in enumerate(avail):
        going = going and v <= alpha / (m - k)
        if going:
            rejected.add(name)
        running = max(running, min(1.0, (m - k) * v))
        adjusted[name] = running
    return rejected, adjusted


def hand_votes(deltas: dict, rejected: set) -> tuple[dict, str]:
    votes = {}
    for m, d in deltas.items():
        if m not in rejected or d is None or d == 0:
            votes[m] = None
        elif m == "success_rate":
            votes[m] = "A" if d > 0 else "B"
        else:
            votes[m] = "A" if d < 0 else "B"
    va = sum(v == "A" for v in votes.values())
    vb = sum(v == "B" for v in votes.values())
    decision = ("tradeoff" if va and vb else "indistinguishable" if not (va or vb)
                else "pareto_dominant" if max(va, vb) == len(votes) else "partial")
    return votes, decision


def test_randomization_p_values_equal_a_direct_call_and_holm_by_hand(R3, tmp_path):
    from passage_jax.stats import block_randomization_test

    res = compare_runs(R3["bfs"], R3["exact"], tmp_path / "c.json", n_bootstrap=B,
                       bootstrap_seed=3, paired_test="randomization")
    recs_a, ids, blocks = primary_records(R3["bfs"])
    recs_b, _, _ = primary_records(R3["exact"])
    direct = block_randomization_test(recs_a, recs_b, blocks, task_ids=ids, seed=3)
    conf = res["confirmatory"]
    assert conf["source"] == "randomization" and conf["evidence_file"] is None
    pc = res["primary_comparison"]
    for m, p in direct.p_values.items():
        got = conf["p_values"][m]
        assert (got is None and p != p) or got == p, m
        assert pc["p_values"][m] == got
    assert conf["randomization"]["exact"] == direct.exact
    assert conf["randomization"]["n_patterns"] == direct.n_patterns
    assert pc["inference_status"] == "test_provided" and pc["paired_test"] == direct.paired_test
    rejected, adjusted = hand_holm(direct.p_values)
    assert {m for m, h in pc["holm"].items() if h["reject"]} == rejected
    for m, a in adjusted.items():
        assert pc["holm"][m]["adjusted"] == pytest.approx(a, rel=1e-12)
    votes, decision = hand_votes({m: d["delta"] for m, d in pc["deltas"].items()}, rejected)
    assert pc["votes"] == votes == conf["votes"] and pc["decision"] == decision == conf["decision"]
    # the written file holds the same record
    assert json.loads((tmp_path / "c.json").read_text())["confirmatory"]["p_values"] == \
        conf["p_values"]


def test_evidence_file_feeds_holm(R3, tmp_path, capsys):
    from cli.__main__ import main as cli_main

    p = {"regret_median": 0.001, "regret_p90": 0.004, "assd_mean": 0.03, "h95_mean": None,
         "success_rate": 0.012, "obstacle_violation_rate": 0.5}
    ev = tmp_path / "evidence.json"
    ev.write_text(json.dumps({"p_values": p, "paired_test": "declared block permutation test",
                              "test_assumptions": ["labels exchangeable within blocks"]}))
    out = tmp_path / "c.json"
    rc = cli_main(["compare", "--score", str(R3["bfs"]), "--score", str(R3["exact"]),
                   "--output", str(out), "--n-bootstrap", str(B),
                   "--test-evidence", str(ev)])
    assert rc == 0
    shown = capsys.readouterr().out
    res = json.loads(out.read_text())
    conf, pc = res["confirmatory"], res["primary_comparison"]
    assert conf["source"] == "evidence_file" and conf["evidence_file"]["path"] == str(ev.resolve())
    # hand computation: m = 6 (the unavailable h95 test still counts);
    # 0.001 <= 0.05/6, 0.004 <= 0.05/5, 0.012 <= 0.05/4, 0.03 > 0.05/3 stops
    hand = {"regret_median", "regret_p90", "success_rate"}
    assert {m for m, h in pc["holm"].items() if h["reject"]} == hand
    assert hand_holm({k: (float("nan") if v is None else v) for k, v in p.items()})[0] == hand
    expect_adj = {"regret_median": 0.006, "regret_p90": 0.02, "success_rate": 0.048,
                  "assd_mean": 0.09, "obstacle_violation_rate": 1.0}
    for m, a in expect_adj.items():
        assert pc["holm"][m]["adjusted"] == pytest.approx(a, rel=1e-12), m
    assert pc["holm"]["h95_mean"]["adjusted"] is None and not pc["holm"]["h95_mean"]["reject"]
    votes, decision = hand_votes({m: d["delta"] for m, d in pc["deltas"].items()}, hand)
    assert pc["votes"] == votes and pc["decision"] == decision
    # bfs (A) is costlier than exact (B): the regret metrics vote for B
    assert votes["regret_median"] == "B"
    assert f"decision: {decision}" in shown


@pytest.mark.parametrize("doc, field", [
    ([1, 2], "expected a JSON object"),
    ({"paired_test": "t", "test_assumptions": "a"}, r"missing field\(s\) \['p_values'\]"),
    ({"p_values": {}, "paired_test": "t", "test_assumptions": "a", "alpha": 0.1}, "unknown field"),
    ({"p_values": [0.1] * 6, "paired_test": "t", "test_assumptions": "a"}, "p_values must map"),
    ({"p_values": {"regret_median": 0.1}, "paired_test": "t", "test_assumptions": "a"},
     "missing .*regret_p90"),
    ("bad_value", r"p_values\.success_rate is 1\.5"),
    ("bad_type", r"p_values\.assd_mean must be a number"),
    ("bad_test", "paired_test must be"),
    ("bad_assumptions", "test_assumptions must"),
])
def test_malformed_evidence_is_refused_naming_the_field(R3, tmp_path, doc, field):
    good = {"p_values": {m: 0.2 for m in ("regret_median", "regret_p90", "assd_mean", "h95_mean",
                                          "success_rate", "obstacle_violation_rate")},
            "paired_test": "t", "test_assumptions": "a"}
    if doc == "bad_value":
        good["p_values"]["success_rate"] = 1.5
        doc = good
    elif doc == "bad_type":
        good["p_values"]["assd_mean"] = "0.1"
        doc = good
    elif doc == "bad_test":
        good["paired_test"] = "  "
        doc = good
    elif doc == "bad_assumptions":
        good["test_assumptions"] = []
        doc = good
    ev = tmp_path / "ev.json"
    ev.write_text(json.dumps(doc))
    with pytest.raises(CompareError, match=field):
        compare_runs(R3["bfs"], R3["exact"], tmp_path / "c.json", n_bootstrap=B, test_evidence=ev)
    assert not (tmp_path / "c.json").exists()


def test_confirmatory_test_needs_three_seeds_and_one_source(R, R3, tmp_path):
    with pytest.raises(CompareError, match=r"needs the seeds \[1234, 2026, 3407\]"):
        compare_runs(R["bfs"], R["exact"], tmp_path / "c.json", n_bootstrap=B,
                     paired_test="randomization")
    with pytest.raises(CompareError, match="not both"):
        compare_runs(R3["bfs"], R3["exact"], tmp_path / "c.json", n_bootstrap=B,
                     paired_test="randomization", test_evidence=tmp_path / "x.json")
    with pytest.raises(CompareError, match="unknown paired test"):
        compare_runs(R3["bfs"], R3["exact"], tmp_path / "c.json", n_bootstrap=B,
                     paired_test="t-test")
    res = compare_runs(R3["bfs"], R3["exact"], tmp_path / "plain.json", n_bootstrap=B)
    assert res["confirmatory"] is None
    assert res["primary_comparison"]["inference_status"] == "test_not_provided"
