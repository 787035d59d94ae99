"""The censoring-aware latency block on hand-made series."""
import numpy as np
import pytest

from passage_jax.evaluate.latency import (
    CENSORED_LATENCY_FORMAT,
    censored_latency_block,
    interpolated_percentiles,
    order_statistic_rank,
)

# six requests on three scenes, two repeats each:
#   t (ms)  status      success
#   5.0     ok          yes
#   1.0     ok          yes
#   3.0     ok          yes
#   4.0     timeout     (censored, recorded 4.0)
#   2.0     no_path     no  (a failure that is not a timeout: counts at its time)
#   12.0    timeout     (censored, recorded 12.0)
LAT = [5.0, 1.0, 3.0, 4.0, 2.0, 12.0]
STATUS = ["ok", "ok", "ok", "timeout", "no_path", "timeout"]
SUCCESS = [True, True, True, False, False, False]
SCENES = ["a", "b", "c", "a", "b", "c"]


def test_hand_made_series():
    b = censored_latency_block(LAT, STATUS, SUCCESS, SCENES, warm=True,
                               percentiles=(50, 80, 95, 99))
    assert b["format"] == CENSORED_LATENCY_FORMAT
    # counts
    assert (b["n_requests"], b["n_scenes"], b["repeats_per_scene"]) == (6, 3, 2)
    assert (b["n_successes"], b["n_timeouts"], b["n_censored"], b["n_other_failures"]) == (3, 2, 2, 1)
    assert b["n_successes"] + b["n_timeouts"] + b["n_other_failures"] == b["n_requests"]
    # ordered with timeouts as +inf: 1, 2, 3, 5, inf, inf
    # p50: rank ceil(6 * .5) = 3 -> 3.0 (finite)
    p = b["percentiles"]
    assert p["p50"] == {"rank": 3, "censored": False, "value": 3.0, "lower_bound": None}
    # p80: rank ceil(4.8) = 5 -> censored. Lower bound: 5th smallest of
    # (1, 2, 3, 5, 4, 12) with censored requests at their recorded time -> 1,2,3,4,5,12 -> 5
    assert p["p80"] == {"rank": 5, "censored": True, "value": None, "lower_bound": 5.0}
    # p95 and p99: rank 6 -> censored, lower bound 12
    assert p["p95"] == {"rank": 6, "censored": True, "value": None, "lower_bound": 12.0}
    assert p["p99"]["censored"] and p["p99"]["lower_bound"] == 12.0
    # success-only (secondary): successes 1, 3, 5
    so = b["success_only"]
    assert so["n"] == 3 and so["p50"] == 3.0 and so["p95"] == 5.0 and so["p80"] == 5.0
    assert b["n_warm_requests"] == 6 and b["at_least_100_warm_requests"] is False


def test_censored_without_time_uses_deadline():
    b = censored_latency_block([1.0, None, 2.0], ["ok", "timeout", "ok"], [True, False, True],
                               ["a", "b", "c"], deadline_ms=[None, 50.0, None])
    assert b["percentiles"]["p99"] == {"rank": 3, "censored": True, "value": None,
                                       "lower_bound": 50.0}
    assert b["percentiles"]["p50"]["value"] == 2.0
    with pytest.raises(ValueError, match="censored without"):
        censored_latency_block([None], ["timeout"], [False], ["a"])
    with pytest.raises(ValueError, match="no finite latency"):
        censored_latency_block([None], ["ok"], [True], ["a"])
    with pytest.raises(ValueError, match="both a success and censored"):
        censored_latency_block([1.0], ["timeout"], [True], ["a"])


def test_order_statistics_match_numpy_inverted_cdf():
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 19, 20, 100, 101, 333):
        x = rng.gamma(2.0, 3.0, size=n)
        b = censored_latency_block(list(x), ["ok"] * n, [True] * n, [str(i) for i in range(n)],
                                   percentiles=(1, 50, 90, 95, 99))
        for q in (1, 50, 90, 95, 99):
            want = np.percentile(x, q, method="inverted_cdf")
            assert b["percentiles"][f"p{q}"]["value"] == want, (n, q)
    # exact ranks where n q / 100 is an integer (no floating-point overshoot)
    assert order_statistic_rank(20, 95) == 19
    assert order_statistic_rank(100, 99) == 99
    assert order_statistic_rank(100, 50) == 50
    assert order_statistic_rank(7, 0) == 1
    assert order_statistic_rank(3, 100) == 3


def test_warm_flag_threshold():
    def blk(n, warm):
        return censored_latency_block([1.0] * n, ["ok"] * n, [True] * n, ["s"] * n, warm=warm)
    assert blk(100, True)["at_least_100_warm_requests"] is True
    assert blk(99, True)["at_least_100_warm_requests"] is False
    assert blk(150, False)["at_least_100_warm_requests"] is False
    assert blk(150, False)["n_warm_requests"] == 0


def test_interpolated_counts_timeouts_as_finite():
    it = interpolated_percentiles(LAT)
    for q in (50, 95, 99):
        assert it[f"p{q}"] == pytest.approx(np.percentile(LAT, q), rel=1e-15)
    assert it["n"] == 6 and it["n_missing"] == 0
    it = interpolated_percentiles([1.0, None, 3.0])
    assert it["n"] == 2 and it["n_missing"] == 1 and it["p50"] == 2.0
