import math

import numpy as np
import pytest

from passage_jax.stats import (
    Decision,
    block_randomization_test,
    compare_primary_metrics,
    decide,
    holm_bonferroni,
    metric_vote,
    multiplicity_matrix,
)
from passage_jax.stats.bootstrap import encode_blocks
from passage_jax.stats.randomization import swap_patterns
from passage_jax.testing import kernel_tol

SEEDS = (1234, 2026, 3407)
METRICS = ("regret_median", "regret_p90", "assd_mean", "h95_mean", "success_rate",
           "obstacle_violation_rate")


def make(rng, n, regret_shift=0.0, p_valid=0.8, geo_shift=0.0):
    ids = [f"s{i}/elevation/free" for i in range(n)]
    out = {}
    for s in SEEDS:
        v = rng.random(n) < p_valid
        v[:2] = True
        viol = (~v) & (rng.random(n) < 0.5)
        out[s] = {"task_id": ids,
                  "regret": np.where(v, rng.gamma(2, size=n) * 0.01 + regret_shift, 999999.0),
                  "assd": np.where(v, rng.random(n) + geo_shift, np.nan),
                  "h95": np.where(v, 3 * rng.random(n) + geo_shift, np.nan),
                  "success": v, "obstacle_violation": viol, "valid_path": v}
    return out


def materialise_idx(bi, mrow):
    return np.concatenate([np.repeat(np.flatnonzero(bi == k), c) for k, c in enumerate(mrow)])


def naive_metric(rec, field, q, idx):
    x = np.asarray(rec[field], dtype=float)[idx]
    x = x[np.isfinite(x)]
    if x.size == 0:
        return np.nan
    return np.mean(x) if q is None else np.percentile(x, 100 * q)


SPEC = {"regret_median": ("regret", 0.5), "regret_p90": ("regret", 0.9), "assd_mean": ("assd", None),
        "h95_mean": ("h95", None), "success_rate": ("success", None),
        "obstacle_violation_rate": ("obstacle_violation", None)}


def test_holm_hand_worked_family():
    p = {"a": 0.011, "b": 0.04, "c": 0.03, "d": float("nan"), "e": 0.005, "f": 0.5}
    h = holm_bonferroni(p)
    assert list(h) == list(p)
    # m = 6 (NaN counted). order e(0.005 <= .05/6 reject), a(0.011 > .05/5) stop
    assert [h[k].reject for k in "abcdef"] == [False, False, False, False, True, False]
    assert h["e"].adjusted == pytest.approx(0.03)
    assert h["a"].adjusted == pytest.approx(0.055)
    assert h["c"].adjusted == pytest.approx(0.12)
    assert h["b"].adjusted == pytest.approx(0.12)   # 3*0.04 = 0.12, monotone max keeps 0.12
    assert h["f"].adjusted == pytest.approx(1.0)
    assert math.isnan(h["d"].adjusted) and math.isnan(h["d"].p_value)
    # without the NaN the family has 5: a is rejected (0.011 <= .05/4), c is not (0.03 > .05/3)
    h5 = holm_bonferroni({k: v for k, v in p.items() if k != "d"})
    assert [h5[k].reject for k in "abcef"] == [True, False, False, True, False]
    assert h5["a"].adjusted == pytest.approx(0.044)


@pytest.mark.parametrize("bad", [1.2, -0.1, float("inf"), "0.1", None, True])
def test_holm_rejects_bad_p(bad):
    with pytest.raises(ValueError, match="p-value for 'x'"):
        holm_bonferroni({"x": bad, "y": 0.1})


def test_votes_and_decisions():
    assert metric_vote("regret_median", -0.1, True) == "A"
    assert metric_vote("regret_median", 0.1, True) == "B"
    assert metric_vote("success_rate", 0.1, True) == "A"
    assert metric_vote("success_rate", -0.1, True) == "B"
    assert metric_vote("success_rate", -0.1, False) is None
    assert metric_vote("assd_mean", float("nan"), True) is None
    assert decide({m: "A" for m in METRICS}) == (Decision.PARETO_DOMINANT, "A")
    assert decide({m: ("B" if i < 2 else "A") for i, m in enumerate(METRICS)}) == (Decision.TRADEOFF, None)
    assert decide({m: ("B" if i < 2 else None) for i, m in enumerate(METRICS)}) == (Decision.PARTIAL, "B")
    assert decide({m: None for m in METRICS}) == (Decision.INDISTINGUISHABLE, None)


def test_compare_estimates_and_draws_against_naive():
    rng = np.random.default_rng(1)
    n = 50
    A, B = make(rng, n), make(rng, n, regret_shift=0.01)
    blocks = [f"b{i % 6}" for i in range(n)]
    D = 30
    c = compare_primary_metrics(A, B, blocks, n_bootstrap=D, seed=77, return_draws=True)
    assert c.inference_status == "test_not_provided" and c.decision is None and c.holm is None
    assert all(v is None for v in c.votes.values())
    bi, labels = encode_blocks(blocks, n)
    mult = multiplicity_matrix(len(labels), D, seed=77)
    for metric in METRICS:
        f, q = SPEC[metric]
        r = c.deltas[metric]
        per = []
        # float32 kernels: a quantile interpolated between the failure regret (999999) and a
        # small value carries the float32 rounding of the larger end: scale by the data
        scale = max(float(np.nanmax(np.abs(np.asarray(X[s][f], float)))) for X in (A, B)
                    for s in SEEDS)
        atol = kernel_tol(1e-13) * (1.0 if kernel_tol(0.0) == 0.0 else scale)
        for s in SEEDS:
            ref = [naive_metric(A[s], f, q, materialise_idx(bi, m))
                   - naive_metric(B[s], f, q, materialise_idx(bi, m))
                   for m in mult]
            np.testing.assert_allclose(r.per_seed[s].draws, ref, rtol=kernel_tol(1e-12), atol=atol)
            per.append(ref)
            est = naive_metric(A[s], f, q, np.arange(n)) - naive_metric(B[s], f, q, np.arange(n))
            assert r.per_seed[s].delta == pytest.approx(est, rel=kernel_tol(1e-12), abs=1e-15)
        np.testing.assert_allclose(r.draws, np.mean(per, axis=0), rtol=kernel_tol(1e-12), atol=atol)
        lo, hi = np.quantile(np.mean(per, axis=0), [0.025, 0.975])
        assert r.ci_low == pytest.approx(lo, rel=kernel_tol(1e-12), abs=min(atol, 1e-15) if
                                         kernel_tol(0.0) == 0.0 else atol)
        assert r.ci_high == pytest.approx(hi, rel=kernel_tol(1e-12), abs=1e-15)
        assert r.n_a == sum(np.isfinite(np.asarray(A[s][f], float)).sum() for s in SEEDS)


def _pv(values):
    return dict(zip(METRICS, values))


def test_compare_verdict_cases():
    rng = np.random.default_rng(2)
    n = 40
    # A: lower regret and geometry, higher success, fewer violations than B
    A = make(rng, n, p_valid=0.95)
    B = make(rng, n, regret_shift=0.05, p_valid=0.6, geo_shift=0.5)
    blocks = [f"b{i % 5}" for i in range(n)]
    kw = dict(n_bootstrap=50, seed=1, paired_test="declared test", test_assumptions="declared")
    c0 = compare_primary_metrics(A, B, blocks, n_bootstrap=50, seed=1)
    signs = {m: np.sign(c0.deltas[m].delta) for m in METRICS}
    assert signs["regret_median"] < 0 and signs["success_rate"] > 0 and signs["assd_mean"] < 0
    assert signs["obstacle_violation_rate"] < 0
    c = compare_primary_metrics(A, B, blocks, p_values=_pv([1e-4] * 6), **kw)
    assert c.inference_status == "test_provided"
    assert c.decision == Decision.PARETO_DOMINANT and c.winner == "A"
    assert c.votes == {m: "A" for m in METRICS}
    # swapping the methods flips every vote
    c = compare_primary_metrics(B, A, blocks, p_values=_pv([1e-4] * 6), **kw)
    assert c.decision == Decision.PARETO_DOMINANT and c.winner == "B"
    # one metric unavailable (NaN) -> partial, and NaN still counts in the family of 6
    c = compare_primary_metrics(A, B, blocks, p_values=_pv([0.008, 1e-4, 1e-4, 1e-4, 1e-4, float("nan")]),
                                **kw)
    assert c.decision == Decision.PARTIAL and c.votes["obstacle_violation_rate"] is None
    assert c.votes["regret_median"] == "A"   # 0.008 <= 0.05/5 at the 5th step
    c = compare_primary_metrics(A, B, blocks, p_values=_pv([0.5] * 6), **kw)
    assert c.decision == Decision.INDISTINGUISHABLE and c.winner is None
    # trade-off: B better on success only (construct by flipping success labels)
    B2 = {s: dict(B[s], success=np.ones(n, bool)) for s in SEEDS}
    c = compare_primary_metrics(A, B2, blocks, p_values=_pv([1e-4] * 6), **kw)
    assert c.votes["success_rate"] == "B" and c.votes["regret_median"] == "A"
    assert c.decision == Decision.TRADEOFF


def test_compare_input_errors():
    rng = np.random.default_rng(3)
    n = 12
    A, B = make(rng, n), make(rng, n)
    blocks = [f"b{i % 3}" for i in range(n)]
    with pytest.raises(ValueError, match=r"exactly \[1234, 2026, 3407\]"):
        compare_primary_metrics({1234: A[1234], 2026: A[2026]}, B, blocks, n_bootstrap=5)
    bad = {s: {k: v for k, v in A[s].items() if k != "h95"} for s in SEEDS}
    with pytest.raises(ValueError, match="A\\[1234\\]: missing metric field 'h95'"):
        compare_primary_metrics(bad, B, blocks, n_bootstrap=5)
    swapped = {s: dict(B[s], task_id=list(reversed(B[s]["task_id"]))) for s in SEEDS}
    with pytest.raises(ValueError, match="B\\[1234\\].task_id: position 0"):
        compare_primary_metrics(A, swapped, blocks, n_bootstrap=5)
    with pytest.raises(ValueError, match="at least two"):
        compare_primary_metrics(A, B, ["one"] * n, n_bootstrap=5)
    with pytest.raises(ValueError, match="has no block"):
        compare_primary_metrics(A, B, [None] + blocks[1:], n_bootstrap=5)
    with pytest.raises(ValueError, match="outside"):
        compare_primary_metrics(A, B, blocks, n_bootstrap=5, p_values=_pv([1.5] + [0.1] * 5),
                                paired_test="t", test_assumptions="a")
    with pytest.raises(ValueError, match="paired_test"):
        compare_primary_metrics(A, B, blocks, n_bootstrap=5, p_values=_pv([0.1] * 6))
    with pytest.raises(ValueError, match="six primary"):
        compare_primary_metrics(A, B, blocks, n_bootstrap=5, p_values={"regret_median": 0.1},
                                paired_test="t", test_assumptions="a")
    nanreg = {s: dict(A[s], regret=np.where(np.arange(n) == 3, np.nan, A[s]["regret"])) for s in SEEDS}
    with pytest.raises(ValueError, match="A\\[1234\\].regret: task 3"):
        compare_primary_metrics(nanreg, B, blocks, n_bootstrap=5)
    with pytest.raises(ValueError, match="task_ids"):
        compare_primary_metrics(A, B, blocks, n_bootstrap=5, task_ids=["x"] * n)


def test_interval_unavailable_when_a_draw_empties_geometry():
    rng = np.random.default_rng(4)
    n = 12
    A, B = make(rng, n), make(rng, n)
    blocks = [f"b{i % 3}" for i in range(n)]
    for s in SEEDS:  # A's valid paths only in block b0
        v = np.array([i % 3 == 0 for i in range(n)])
        A[s].update(assd=np.where(v, 1.0, np.nan), h95=np.where(v, 1.0, np.nan), valid_path=v,
                    success=v)
    c = compare_primary_metrics(A, B, blocks, n_bootstrap=200, seed=0)
    r = c.deltas["assd_mean"]
    assert not r.ci_available and r.n_undefined_draws > 0 and math.isnan(r.ci_low)
    mult = multiplicity_matrix(3, 200, seed=0)
    assert r.n_undefined_draws == int((mult[:, 0] == 0).sum())
    assert c.deltas["regret_median"].ci_available


def naive_randomization(A, B, blocks, patterns):
    bi, labels = encode_blocks(blocks, len(blocks))
    out = []
    for pat in patterns:
        swap = np.asarray(pat, bool)[bi]
        row = {}
        for metric in METRICS:
            f, q = SPEC[metric]
            cs = []
            for s in SEEDS:
                a = np.where(swap, B[s][f], A[s][f]).astype(float)
                b = np.where(swap, A[s][f], B[s][f]).astype(float)
                cs.append(naive_metric({"x": a}, "x", q, np.arange(len(a))) -
                          naive_metric({"x": b}, "x", q, np.arange(len(b))))
            row[metric] = np.mean(cs)
        out.append(row)
    return out


def test_randomization_exact_hand_case():
    # 3 blocks of one task; A always succeeds, B never: |T*| = |3 - 2j| / 3 -> p = 2/8
    n = 3
    ids = ["t0", "t1", "t2"]

    def rec(succ):
        return {"task_id": ids, "regret": np.array([0.1, 0.2, 0.3]) + (0 if succ else 1.0),
                "assd": np.ones(n), "h95": np.ones(n), "success": np.full(n, succ),
                "obstacle_violation": np.zeros(n, bool)}

    A = {s: rec(True) for s in SEEDS}
    B = {s: rec(False) for s in SEEDS}
    r = block_randomization_test(A, B, ["x", "y", "z"])
    assert r.exact and r.n_patterns == 8 and r.assumptions_verified is False
    assert r.p_values["success_rate"] == pytest.approx(0.25)
    assert r.observed["success_rate"] == pytest.approx(1.0)
    assert r.p_values["obstacle_violation_rate"] == 1.0  # all contrasts 0: every pattern ties


@pytest.mark.needs_float64("ties of the test statistic are decided in float64")
def test_randomization_exact_matches_enumeration_and_random_formula():
    rng = np.random.default_rng(5)
    n = 24
    A, B = make(rng, n, p_valid=0.9), make(rng, n, regret_shift=0.01, p_valid=0.9)
    blocks = [f"b{i % 4}" for i in range(n)]
    r = block_randomization_test(A, B, blocks)
    pats, exact = swap_patterns(4)
    assert exact and pats.shape == (16, 4)
    rows = naive_randomization(A, B, blocks, pats)
    for m in METRICS:
        T = np.array([row[m] for row in rows])
        assert r.observed[m] == pytest.approx(T[0], rel=kernel_tol(1e-12), abs=1e-15)
        hits = np.sum(np.abs(T) >= abs(T[0]) * (1 - 1e-12))
        assert r.p_values[m] == pytest.approx(hits / 16)
    # random mode: (1 + hits) / (1 + n)
    blocks13 = [f"b{i % 13}" for i in range(n)]
    r = block_randomization_test(A, B, blocks13, n_random=40, seed=9)
    assert not r.exact and r.n_patterns == 40
    pats, exact = swap_patterns(13, n_random=40, seed=9)
    rows = naive_randomization(A, B, blocks13, np.concatenate([np.zeros((1, 13), np.uint8), pats]))
    for m in METRICS:
        T = np.array([row[m] for row in rows])
        if not np.all(np.isfinite(T)):
            assert math.isnan(r.p_values[m])
            continue
        hits = np.sum(np.abs(T[1:]) >= abs(T[0]) * (1 - 1e-12))
        assert r.p_values[m] == pytest.approx((1 + hits) / 41)


def test_randomization_geometry_unavailable():
    rng = np.random.default_rng(6)
    n = 12
    A, B = make(rng, n), make(rng, n)
    blocks = [f"b{i % 3}" for i in range(n)]
    va = np.array([i % 3 == 0 for i in range(n)])
    vb = np.array([i % 3 != 0 for i in range(n)])
    for s in SEEDS:
        A[s].update(assd=np.where(va, 1.0, np.nan), h95=np.where(va, 1.0, np.nan), valid_path=va)
        B[s].update(assd=np.where(vb, 2.0, np.nan), h95=np.where(vb, 2.0, np.nan), valid_path=vb)
    r = block_randomization_test(A, B, blocks)
    assert math.isnan(r.p_values["assd_mean"]) and "valid paths" in r.reasons["assd_mean"]
    assert math.isnan(r.p_values["h95_mean"])
    assert not math.isnan(r.p_values["regret_median"])


def test_holm_reject_agrees_with_adjusted_p_at_the_threshold():
    from passage_jax.stats import holm_bonferroni

    # 3 * (0.05 / 3) may round above or below 0.05; the decision must follow the
    # adjusted p that is reported
    fam = {"a": 0.05 / 3, "b": 0.5, "c": float("nan")}
    rec = holm_bonferroni(fam, alpha=0.05)
    for r in rec.values():
        if r.adjusted == r.adjusted:  # not NaN
            assert r.reject == (r.adjusted <= 0.05)
    assert rec["a"].reject and not rec["b"].reject and not rec["c"].reject


def test_negative_or_non_integer_bootstrap_seed_is_refused():
    import pytest

    from passage_jax.stats import paired_bootstrap

    for bad in (-1, 1.5, "7"):
        with pytest.raises(ValueError, match="seed"):
            paired_bootstrap([1.0, 2.0, 3.0], [1.0, 2.5, 2.0], seed=bad, n_bootstrap=10)
