"""Component figures of one scored seed folder (docs/scoring.md, "Components"): which stage produced
each route and how much work each stage did.

:func:`component_summary` turns the quality rows' records (``requests.jsonl``: their
``route_stage``, ``stage_work`` and ``work``) and their scored ``success`` flags into
the ``components`` block of ``metrics.json``:

* ``direct_success_rate``, ``repair_rate``, ``fallback_rate``: the share of quality
  rows whose route is legal (``success``) and came from the stage ``primary``,
  ``repair`` or ``fallback`` (``route_stage``). They are ``null`` when no quality row
  reports a ``route_stage`` (``route_stage_reporting: "not reported"``, e.g. a
  single-stage classical planner): an unreported stage is never a zero rate;
* ``no_route_stage_rate``: the share of quality rows without a ``route_stage``;
* ``stage_ran``: per stage, the rows whose ``stage_work`` holds that stage, over the
  rows that report any ``stage_work``; ``fallback_frequency`` is its ``fallback`` rate;
* ``stage_work``: per stage and counter (``WORK_KEYS``), median and p90 over the rows
  where the stage ran *and* reported the counter, with ``n_reported``: a missing
  counter is left out, never counted as zero work;
* ``work``: the same for the total ``work`` counters over all quality rows;
* ``stage_spans``: per-stage latency; ``requests.jsonl`` records none, so it is
  ``null`` (with ``stage_spans_note``). Stage spans are never summed into a total.

Percentiles are linear interpolation (``numpy.percentile``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from passage_jax.protocol.contracts import STAGES, WORK_KEYS
from passage_jax.protocol.runfolder import REQUESTS

__all__ = ["COMPONENTS_FORMAT", "component_summary", "counter_summary", "ROUTE_STAGE_WIDTH",
           "route_stage_column", "SPANS_NOTE"]

COMPONENTS_FORMAT = "passage-components-v1"
#: width of the fixed-width unicode ``route_stage`` column of per_sample.npz
ROUTE_STAGE_WIDTH = max(len(s) for s in STAGES)
SPANS_NOTE = (f"per-stage latency is not recorded in {REQUESTS}; stage spans would be shown "
              "per stage and never summed (sums of stage medians do not reconstruct latency)")
_RATE_KEYS = {"primary": "direct_success_rate", "repair": "repair_rate",
              "fallback": "fallback_rate"}


def _ratio(k: int, n: int):
    return None if n == 0 else float(k) / float(n)


def counter_summary(values: Sequence) -> dict:
    """``{"median", "p90", "n_reported"}`` of the reported (non-None) values; the
    statistics are ``None`` when nothing was reported."""
    v = np.asarray([float(x) for x in values if x is not None], np.float64)
    if v.size == 0:
        return {"median": None, "p90": None, "n_reported": 0}
    return {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)),
            "n_reported": int(v.size)}


def route_stage_column(records: Sequence[Mapping]) -> np.ndarray:
    """The records' ``route_stage`` as fixed-width unicode, ``""`` where none."""
    return np.asarray([str(r.get("route_stage") or "") for r in records],
                      dtype=f"<U{ROUTE_STAGE_WIDTH}")


def _stage_work_of(rec: Mapping) -> Mapping | None:
    sw = rec.get("stage_work")
    return sw if isinstance(sw, Mapping) and sw else None


def component_summary(records: Sequence[Mapping], success) -> dict:
    """The components block over ``records`` (the quality rows) and their scored
    ``success`` flags (same length)."""
    success = np.asarray(success, bool)
    n = len(records)
    if success.shape != (n,):
        raise ValueError(f"success has shape {success.shape}, expected ({n},)")
    stage = [r.get("route_stage") for r in records]
    bad = sorted({str(s) for s in stage if s is not None and s not in STAGES})
    if bad:
        raise ValueError(f"records hold unknown route_stage value(s) {bad}; known: {list(STAGES)}")
    n_stage = sum(s is not None for s in stage)
    counts = {s: sum(x == s for x in stage) for s in STAGES}
    legal = {s: int(sum(bool(ok) and x == s for x, ok in zip(stage, success))) for s in STAGES}
    reported = n_stage > 0
    out: dict = {
        "format": COMPONENTS_FORMAT,
        "n_rows": n,
        "n_success": int(success.sum()),
        "route_stage_reporting": ("not reported" if not reported else
                                  "all rows" if n_stage == n else "some rows"),
        "n_route_stage_reported": int(n_stage),
        "route_stage_counts": counts,
        "legal_route_stage_counts": legal if reported else {s: None for s in STAGES},
    }
    for s, key in _RATE_KEYS.items():
        out[key] = _ratio(legal[s], n) if reported else None
    out["no_route_stage_rate"] = _ratio(n - n_stage, n)

    sws = [_stage_work_of(r) for r in records]
    n_sw = sum(sw is not None for sw in sws)
    ran = {}
    stage_work = {}
    for s in STAGES:
        rows = [sw[s] for sw in sws if sw is not None and isinstance(sw.get(s), Mapping)]
        ran[s] = {"n_rows": len(rows), "n_reporting": n_sw, "rate": _ratio(len(rows), n_sw)}
        stage_work[s] = {"n_rows_ran": len(rows),
                         **{c: counter_summary([w.get(c) for w in rows]) for c in WORK_KEYS}}
    out["n_stage_work_reported"] = int(n_sw)
    out["stage_ran"] = ran
    out["fallback_frequency"] = ran["fallback"]["rate"]
    out["stage_work"] = stage_work
    works = [r.get("work") if isinstance(r.get("work"), Mapping) else {} for r in records]
    out["work"] = {c: counter_summary([w.get(c) for w in works]) for c in WORK_KEYS}
    out["stage_spans"] = None  # the records hold no per-stage latency
    out["stage_spans_note"] = SPANS_NOTE
    return out

