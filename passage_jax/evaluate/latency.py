"""Latency summaries of a timing series (docs/scoring.md; docs/contract.md §7).

Two summaries are computed for every series of requests:

* the legacy interpolated percentiles: p50/p95/p99 by NumPy's default
  (linear) percentile over every recorded request time, timeouts included at
  their recorded (finite) time;
* the censoring-aware block ``passage-censored-latency/v1``: every request of
  the series counts; a timeout is right-censored and ordered as ``+inf``; each
  percentile is an order statistic (``inverted_cdf``: the ``ceil(n q)``-th
  smallest value, no interpolation). When that rank falls on a censored
  request the percentile is reported as censored, with no value and a lower
  bound: the same order statistic of the series in which every censored
  request takes its censoring time (its recorded time, or the deadline when no
  time was recorded). Because the true durations of censored requests are at
  least their censoring times, that order statistic can only be smaller than
  or equal to the true one.

The block also counts requests, distinct scenes, repeats per scene, successes,
timeouts, censored requests and failures that are not timeouts (successes,
timeouts and other failures add up to the number of requests), gives
success-only percentiles as secondary values, and flags whether the series
holds at least 100 warm requests (a reporting threshold; it admits or refuses
nothing). A request is warm when it ran after the warm-up the run declared and
recorded: the caller says which (``warm``: one flag for the whole series, or one
per request, e.g. the records' ``warm_complete``).

:func:`validation_recost_block` summarises the recorded legality-check and recosting
times of a series (``validation_recost_ms``) beside the timing profile that says
whether they are inside the scored latency.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from passage_jax.contract import CENSORED_LATENCY_FORMAT, CENSORED_STATUSES

__all__ = ["interpolated_percentiles", "order_statistic_rank", "censored_latency_block",
           "series_latency", "PERCENTILES", "WARM_THRESHOLD", "CensoredSeries",
           "validation_recost_block", "warm_flags"]

PERCENTILES = (50, 95, 99)
WARM_THRESHOLD = 100


def interpolated_percentiles(latency_ms, percentiles=PERCENTILES) -> dict:
    """Linear-interpolation percentiles (NumPy default) over the finite recorded
    times; ``n`` counts them, ``n_missing`` the requests without a time."""
    v = np.asarray([np.nan if x is None else x for x in latency_ms], np.float64)
    finite = v[np.isfinite(v)]
    out = {f"p{q}": (float(np.percentile(finite, q)) if finite.size else None)
           for q in percentiles}
    out["mean"] = float(finite.mean()) if finite.size else None
    out["max"] = float(finite.max()) if finite.size else None
    out["n"] = int(finite.size)
    out["n_missing"] = int(v.size - finite.size)
    return out


def order_statistic_rank(n: int, q) -> int:
    """1-based rank of the ``inverted_cdf`` percentile ``q`` (in [0, 100]) of
    ``n`` values: ``max(1, ceil(n q / 100))``, computed exactly."""
    if n < 1:
        raise ValueError("no values")
    qf = Fraction(str(q))
    if not 0 <= qf <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    k = math.ceil(n * qf / 100)
    return int(min(max(k, 1), n))


@dataclass(frozen=True)
class CensoredSeries:
    """A series of requests as the censored block reads it: ``observed`` (the recorded
    time, ``+inf`` for a censored request), ``lower`` (the recorded time, or the censoring
    time of a censored request), ``censored`` and ``success`` flags per request."""
    observed: np.ndarray
    lower: np.ndarray
    censored: np.ndarray
    success: np.ndarray

    @classmethod
    def of(cls, latency_ms, statuses, successes, deadline_ms=None) -> CensoredSeries:
        """Checked: a success is never censored, a censored request has a recorded time or
        a deadline, every other request a finite time."""
        n = len(statuses)
        if deadline_ms is None or np.isscalar(deadline_ms):
            deadline_ms = [deadline_ms] * n
        censored = np.array([s in CENSORED_STATUSES for s in statuses], bool)
        succ = np.asarray(successes, bool)
        if np.any(succ & censored):
            raise ValueError("a request cannot be both a success and censored")
        obs = np.empty(n, np.float64)
        lower = np.empty(n, np.float64)
        for i in range(n):
            t = latency_ms[i]
            if censored[i]:
                obs[i] = np.inf
                c = t if t is not None and math.isfinite(float(t)) else deadline_ms[i]
                if c is None or not math.isfinite(float(c)):
                    raise ValueError(f"request {i}: censored without a recorded time or a deadline")
                lower[i] = float(c)
            else:
                if t is None or not math.isfinite(float(t)):
                    raise ValueError(f"request {i} (status {statuses[i]!r}) has no finite latency")
                obs[i] = lower[i] = float(t)
        return cls(obs, lower, censored, succ)


def warm_flags(warm, n: int) -> np.ndarray:
    """``warm`` as one bool per request of a series of ``n``: a single flag is every
    request's; a sequence must hold ``n`` flags."""
    if np.ndim(warm) == 0:
        return np.full(n, bool(warm))
    flags = np.asarray(warm, bool)
    if flags.shape != (n,):
        raise ValueError(f"{flags.size} warm flags for {n} requests")
    return flags


def _counts(series: CensoredSeries, statuses, sample_ids, warm) -> dict:
    n = len(statuses)
    n_warm = int(warm_flags(warm, n).sum())
    n_timeouts = int(np.sum([s == "timeout" for s in statuses]))
    n_success = int(series.success.sum())
    counts = Counter(sample_ids)
    reps = sorted(set(counts.values()))
    return {
        "format": CENSORED_LATENCY_FORMAT,
        "method": "inverted_cdf",
        "censored_statuses": list(CENSORED_STATUSES),
        "n_requests": n,
        "n_scenes": len(counts),
        "repeats_per_scene": (reps[0] if len(reps) == 1 else {"min": reps[0], "max": reps[-1]})
        if reps else 0,
        "n_successes": n_success,
        "n_timeouts": n_timeouts,
        "n_censored": int(series.censored.sum()),
        "n_other_failures": n - n_success - n_timeouts,
        "percentiles": {},
        "success_only": {},
        "n_warm_requests": n_warm,
        "at_least_100_warm_requests": n_warm >= WARM_THRESHOLD,
    }


def _order_percentiles(series: CensoredSeries, percentiles) -> dict:
    """Each percentile's order statistic, or its lower bound when it falls on a censored
    request."""
    n = series.observed.size
    out = {}
    if not n:
        return out
    srt = series.observed[np.lexsort((series.observed,))]  # stable; +inf last
    low_srt = np.sort(series.lower, kind="stable")
    for q in percentiles:
        k = order_statistic_rank(n, q)
        v = srt[k - 1]
        if np.isinf(v):
            out[f"p{q}"] = {"rank": k, "censored": True, "value": None,
                            "lower_bound": float(low_srt[k - 1])}
        else:
            out[f"p{q}"] = {"rank": k, "censored": False, "value": float(v), "lower_bound": None}
    return out


def _success_only(series: CensoredSeries, percentiles) -> dict:
    s = np.sort(series.observed[series.success])
    out = {f"p{q}": (float(s[order_statistic_rank(s.size, q) - 1]) if s.size else None)
           for q in percentiles}
    out["n"] = int(s.size)
    return out


def censored_latency_block(latency_ms, statuses, successes, sample_ids, deadline_ms=None,
                           warm=False, percentiles=PERCENTILES) -> dict:
    """The ``passage-censored-latency/v1`` block of one series.

    ``latency_ms`` recorded request times (None allowed for a censored request
    with no time), ``statuses`` the terminal statuses, ``successes`` bool per
    request (status ``ok`` with a valid route), ``sample_ids`` the scene of each
    request, ``deadline_ms`` per request (or one value, or None): the censoring
    time used when a censored request has no recorded time. ``warm``: whether
    the requests are warm (measured after a declared, recorded warm-up), one
    bool for the whole series or one per request; ``n_warm_requests`` counts
    them and ``at_least_100_warm_requests`` says whether they are at least
    :data:`WARM_THRESHOLD`.
    """
    n = len(statuses)
    if not (len(latency_ms) == len(successes) == len(sample_ids) == n):
        raise ValueError("latency_ms, statuses, successes and sample_ids differ in length")
    series = CensoredSeries.of(latency_ms, statuses, successes, deadline_ms)
    block = _counts(series, statuses, sample_ids, warm)
    block["percentiles"] = _order_percentiles(series, percentiles)
    block["success_only"] = _success_only(series, percentiles)
    return block


def series_latency(records, successes, warm) -> dict:
    """Both summaries for one series of ``requests.jsonl`` records (``warm`` as for
    :func:`censored_latency_block`)."""
    lat = [r.get("latency_ms") for r in records]
    return {
        "interpolated": interpolated_percentiles(lat),
        "censored": censored_latency_block(lat, [r["status"] for r in records], successes,
                                           [r["sample_id"] for r in records],
                                           [r.get("deadline_ms") for r in records], warm=warm),
    }


def validation_recost_block(values_ms, *, profile: str, boundary: str, inside_latency: bool,
                            series: str = "warm") -> dict:
    """The ``validation_recost_ms`` block of one series: the timing ``profile`` and
    ``boundary``, whether the profile counts the legality check and recosting inside
    ``latency_ms`` (``inside_latency``), the series' requests (``n_requests``), how many
    recorded a time (``recorded``; NaN or None is not recorded) and the total, mean,
    p50, p95 (linear interpolation, NumPy's default) and max over those; ``null`` when
    none recorded one."""
    v = np.asarray([np.nan if x is None else x for x in values_ms], np.float64).reshape(-1)
    got = v[np.isfinite(v)]
    have = got.size > 0
    return {"profile": profile, "timing_boundary": boundary, "inside_latency": bool(inside_latency),
            "series": series, "n_requests": int(v.size), "recorded": int(got.size),
            "total_ms": float(got.sum()) if have else None,
            "mean_ms": float(got.mean()) if have else None,
            "p50_ms": float(np.percentile(got, 50)) if have else None,
            "p95_ms": float(np.percentile(got, 95)) if have else None,
            "max_ms": float(got.max()) if have else None}
