"""The learned-search report (passage_jax.metrics.search_report) against hand-worked
inputs and an independent plain-Python computation (statistics module)."""
from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from passage_jax.metrics import (
    HARD_RATIO,
    SEARCH_REPORT_FIGURES,
    hard_subset_mask,
    octile_lower_bound,
    search_report,
)

# five tasks, worked by hand:
#   task  exp  A*exp  A*ok  cost    c*    ok     lb     c*/lb
#   0      50   100   yes   10.0    10.0  yes   10.0   1.00   ratio 0.5, optimal
#   1     200   100   yes   12.0    11.0  yes   10.0   1.10   ratio 2.0, excess 1/11, hard
#   2      30     0   yes   nan     20.0  no    10.0   2.00   A* zero -> excluded; hard
#   3      40    80   no    21.0    21.0  yes   20.0   1.05   A* failed -> excluded; optimal; hard
#   4      25   100   yes   30.0    30.0  yes   30.0   1.00   ratio 0.25, optimal
EXP = [50, 200, 30, 40, 25]
A_EXP = [100, 100, 0, 80, 100]
A_OK = [True, True, True, False, True]
COST = [10.0, 12.0, math.nan, 21.0, 30.0]
C_STAR = [10.0, 11.0, 20.0, 21.0, 30.0]
OK = [True, True, False, True, True]
LB = [10.0, 10.0, 10.0, 20.0, 30.0]
WALL = [1.0, 2.0, 3.0, 4.0, 5.0]
A_WALL = [10.0, 20.0, 30.0, 40.0, 50.0]


def _report(procedure=None, astar=None, **over):
    proc = {**dict(expansions=EXP, cost=COST, c_star=C_STAR, success=OK, wall_ms=WALL), **(procedure or {})}
    a = {**dict(expansions=A_EXP, success=A_OK, wall_ms=A_WALL), **(astar or {})}
    kw = dict(lower_bound=LB)
    kw.update(over)
    return search_report(proc, a, **kw)


def test_hand_worked_all_tasks():
    a = _report()["all"]
    assert set(a) == set(SEARCH_REPORT_FIGURES)
    assert (a["n_tasks"], a["n_ratio"]) == (5, 3)
    assert (a["n_excluded_astar_zero"], a["n_excluded_astar_failed"]) == (1, 1)
    assert a["n_ratio_zero"] == 0
    # ratios 0.5, 2.0, 0.25
    assert a["ratio_median"] == pytest.approx(0.5)
    assert a["ratio_mean"] == pytest.approx((0.5 + 2.0 + 0.25) / 3)
    assert a["ratio_geomean"] == pytest.approx((0.5 * 2.0 * 0.25) ** (1 / 3))
    # Neural A*'s Exp: mean of max(0, 1 - r) = (0.5 + 0 + 0.75) / 3
    assert a["exp_reduction_pct"] == pytest.approx(100 * 1.25 / 3)
    assert a["exp_reduction_geomean_pct"] == pytest.approx(100 * (1 - 0.25 ** (1 / 3)))
    assert a["n_success"] == 4 and a["success_rate"] == pytest.approx(0.8)
    # excess over the 4 successes: 0, 1/11, 0, 0
    assert a["cost_excess_mean"] == pytest.approx((1 / 11) / 4)
    # optimal: tasks 0, 3, 4 over all 5 tasks (the failure counts as not optimal)
    assert a["optimal_rate"] == pytest.approx(3 / 5)
    assert a["wall_ms_median"] == 3.0 and a["astar_wall_ms_median"] == 30.0


def test_hand_worked_hard_subset():
    rep = _report()
    assert rep["n_hard"] == 3 and "1.05" in rep["hard_rule"]
    h = rep["hard"]
    assert h["n_tasks"] == 3  # tasks 1, 2, 3 (task 3 sits exactly on 1.05)
    assert (h["n_ratio"], h["n_excluded_astar_zero"], h["n_excluded_astar_failed"]) == (1, 1, 1)
    assert h["ratio_median"] == h["ratio_mean"] == h["ratio_geomean"] == pytest.approx(2.0)
    assert h["exp_reduction_pct"] == 0.0  # clipped at 0
    assert h["exp_reduction_geomean_pct"] == pytest.approx(-100.0)
    assert h["n_success"] == 2 and h["success_rate"] == pytest.approx(2 / 3)
    assert h["cost_excess_mean"] == pytest.approx((1 / 11 + 0) / 2)
    assert h["optimal_rate"] == pytest.approx(1 / 3)
    assert h["wall_ms_median"] == 3.0 and h["astar_wall_ms_median"] == 30.0


def test_hard_mask_given_directly_and_mask_function():
    mask = hard_subset_mask(C_STAR, LB)
    assert mask.tolist() == [False, True, True, True, False]
    assert hard_subset_mask([1.0, 1.0, 5.0], [0.0, 1.0, 5.0], threshold=1.0).tolist() == [False, True, True]
    by_mask = _report(lower_bound=None, hard=mask)
    assert by_mask["hard"] == _report()["hard"]
    assert by_mask["hard_rule"] == "hard mask given by the caller"
    other = _report(lower_bound=None, hard=[True, False, False, False, True])
    assert other["hard"]["n_tasks"] == 2 and other["hard"]["ratio_mean"] == pytest.approx(0.375)
    none = _report(lower_bound=None)
    assert none["hard"] is None and none["n_hard"] is None and none["hard_rule"].startswith("n/a")
    with pytest.raises(ValueError, match="not both"):
        _report(hard=mask)
    with pytest.raises(ValueError, match="4 values for 5"):
        _report(astar={"wall_ms": [1, 2, 3, 4]})
    with pytest.raises(ValueError, match="'cost' is required"):
        search_report({"expansions": [1]}, {"expansions": [1]})


def test_zero_ratio_and_empty_subsets():
    rep = search_report({"expansions": [0, 10], "cost": [1.0, 1.0], "c_star": [1.0, 1.0],
                         "success": [True, True]}, {"expansions": [10, 10]}, lower_bound=[1.0, 1.0])
    a = rep["all"]
    assert a["n_ratio_zero"] == 1 and a["ratio_mean"] == pytest.approx(0.5)
    assert a["ratio_geomean"] == pytest.approx(1.0)  # over the positive ratio only
    assert a["exp_reduction_pct"] == pytest.approx(50.0)
    h = rep["hard"]  # c*/lb = 1 < 1.05: no hard task
    assert h["n_tasks"] == 0 and math.isnan(h["ratio_median"]) and math.isnan(h["success_rate"])
    assert math.isnan(a["wall_ms_median"])  # not measured


def test_octile_lower_bound():
    lb = octile_lower_bound([[0, 0], [5, 5], [2, 3]], [[3, 4], [5, 5], [2, 0]], pixel_size_m=30.0)
    assert lb == pytest.approx([(1 + 3 * math.sqrt(2)) * 30.0, 0.0, 90.0])
    assert octile_lower_bound([0, 0], [1, 1], 10.0, scale=2.0) == pytest.approx([20 * math.sqrt(2)])


def _independent(exp, a_exp, a_ok, cost, c_star, ok, lb, wall, a_wall):
    """The same figures in plain Python (statistics), over all and over the hard tasks."""
    out = {}
    hard = [i for i in range(len(exp)) if lb[i] > 0 and c_star[i] / lb[i] >= HARD_RATIO]
    for name, idx in (("all", range(len(exp))), ("hard", hard)):
        idx = list(idx)
        r = [exp[i] / a_exp[i] for i in idx if a_ok[i] and a_exp[i] > 0]
        succ = [i for i in idx if ok[i]]
        out[name] = {
            "n_tasks": len(idx), "n_ratio": len(r),
            "n_excluded_astar_zero": sum(1 for i in idx if a_ok[i] and a_exp[i] <= 0),
            "n_excluded_astar_failed": sum(1 for i in idx if not a_ok[i]),
            "ratio_median": statistics.median(r), "ratio_mean": statistics.fmean(r),
            "ratio_geomean": statistics.geometric_mean(r),
            "exp_reduction_pct": 100 * statistics.fmean([max(0.0, 1 - x) for x in r]),
            "success_rate": len(succ) / len(idx),
            "cost_excess_mean": statistics.fmean([cost[i] / c_star[i] - 1 for i in succ]),
            "optimal_rate": sum(1 for i in succ if abs(cost[i] - c_star[i]) <= 1e-9 * c_star[i]) / len(idx),
            "wall_ms_median": statistics.median([wall[i] for i in idx]),
            "astar_wall_ms_median": statistics.median([a_wall[i] for i in idx]),
        }
    return out


def test_against_plain_python_on_random_tasks():
    rng = random.Random(7)
    n = 61
    a_exp = [rng.choice([0] + list(range(5, 400))) for _ in range(n)]
    exp = [rng.randint(1, 600) for _ in range(n)]
    a_ok = [rng.random() > 0.1 for _ in range(n)]
    c_star = [rng.uniform(50, 500) for _ in range(n)]
    lb = [c / rng.uniform(1.0, 1.2) for c in c_star]
    ok = [rng.random() > 0.2 for _ in range(n)]
    cost = [c * (1 + (0 if rng.random() < 0.4 else rng.uniform(0, 0.3))) if s else math.nan
            for c, s in zip(c_star, ok)]
    wall = [rng.uniform(0.1, 9) for _ in range(n)]
    a_wall = [rng.uniform(0.1, 9) for _ in range(n)]
    got = search_report({"expansions": exp, "cost": cost, "c_star": c_star, "success": ok, "wall_ms": wall},
                        {"expansions": a_exp, "success": a_ok, "wall_ms": a_wall}, lower_bound=lb)
    want = _independent(exp, a_exp, a_ok, cost, c_star, ok, lb, wall, a_wall)
    assert 0 < got["n_hard"] < n
    for sub in ("all", "hard"):
        for k, v in want[sub].items():
            assert got[sub][k] == pytest.approx(v, rel=1e-12), (sub, k)
    # the numbers of the A* exclusions are as drawn
    assert got["all"]["n_excluded_astar_failed"] == sum(not x for x in a_ok)


def test_expansions_ratio_kernel_agrees_on_positive_ratios():
    from passage_jax.metrics import expansions_ratio

    exp, a_exp = np.array([50, 200, 30, 25.0]), np.array([100, 100, 0, 100.0])
    k = expansions_ratio(exp, a_exp)
    rep = search_report({"expansions": exp, "cost": [1.0] * 4, "c_star": [1.0] * 4, "success": [True] * 4},
                        {"expansions": a_exp})["all"]
    assert float(k["median"]) == pytest.approx(rep["ratio_median"])
    assert float(k["geomean"]) == pytest.approx(rep["ratio_geomean"])
