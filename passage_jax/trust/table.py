"""The trust table over scored runs (docs/trust.md § The table over scored runs).

A scored run is given as an object with the fields ``path``, ``method_name`` and ``seeds``
({seed: scored seed}; ``passage_jax.evaluate.compare.Side``), each scored seed an object
with the fields ``manifest``, ``metrics`` and ``per_sample`` as read from a scored seed
folder (``manifest.json``, ``metrics.json``, ``per_sample.npz``; the offline evaluation
reads and verifies them into a ``passage_jax.evaluate.score.Score``). The rows used are the
quality repeat's reference-qualified tasks (``primary_quality & reference_qualified``) in
task order.

Rows of the table, per scored run: ``stability`` (per-seed ``metrics.json``
``primary.regret_p90``), one ``odd_boundary`` row per ``stratum_*`` column of
``per_sample.npz`` (one per-task field, per seed, averaged over seeds) and, with an oracle
run, ``efficiency`` (per-seed warm p50 latency of ``metrics.json`` ``latency.warm``; both
runs must have the same hardware, device, timing profile and timer). With a hold-out run and
a matched random-split run of the same planner: one ``geographic`` row (the field pooled over
each run's seeds). An axis whose inputs are missing is listed as unavailable, never fires,
and says why.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from passage_jax.fileio import jsonable, utc_now
from passage_jax.trust.axes import (
    DEFAULT_TOP_QUANTILE,
    EFFICIENCY_THRESHOLD,
    STABILITY_THRESHOLD,
    AxisResult,
    efficiency_axis,
    geographic_axis,
    higher_is_better,
    odd_boundary_axis,
    stability_axis,
)

__all__ = ["TRUST_FORMAT", "TrustError", "trust_table", "quality_rows", "stratifier_names",
           "device_identity"]

TRUST_FORMAT = "passage-jax-trust-v1"


class TrustError(ValueError):
    """A scored run cannot enter the trust table (missing field, other device, ...)."""


def _where(run: Any, seed=None) -> str:
    base = f"run {run.path}"
    return base if seed is None else f"{base} seed {seed}"


def quality_rows(run: Any, seed, field_name: str) -> np.ndarray:
    """The per-task ``field_name`` of one seed's quality repeat (reference-qualified tasks,
    in task order) as float64."""
    p = run.seeds[seed].per_sample
    for k in ("primary_quality", "reference_qualified", "task_index", field_name):
        if k not in p:
            raise TrustError(f"{_where(run, seed)}: per_sample.npz has no field {k!r}")
    sel = np.flatnonzero(np.asarray(p["primary_quality"], bool)
                         & np.asarray(p["reference_qualified"], bool))
    sel = sel[np.argsort(np.asarray(p["task_index"])[sel], kind="stable")]
    return np.asarray(p[field_name])[sel].astype(np.float64)


def stratifier_names(run: Any) -> list[str]:
    """The ``stratum_*`` columns of the run's per_sample.npz (names without the prefix),
    identical for every seed."""
    names = None
    for seed, s in run.seeds.items():
        got = sorted(k[len("stratum_"):] for k in s.per_sample if k.startswith("stratum_"))
        if names is not None and got != names:
            raise TrustError(f"{_where(run, seed)}: stratifier columns {got} differ from "
                             f"another seed's {names}")
        names = got
    return names or []


def device_identity(run: Any) -> dict:
    """What makes two runs' timings comparable: hardware, device, timing profile and timer
    (identical across the run's seeds)."""
    ids = {}
    for seed, s in run.seeds.items():
        m = s.manifest
        t = m.get("timing") or {}
        ids[seed] = {"hardware": m.get("hardware"), "device": m.get("device"),
                     "timing_profile": t.get("profile"), "timer": t.get("timer")}
    first = next(iter(ids.values()))
    for seed, d in ids.items():
        diff = [k for k in d if d[k] != first[k]]
        if diff:
            raise TrustError(f"{_where(run, seed)}: {', '.join(diff)} differ(s) between the "
                             f"run's seeds")
    return first


def _unavailable(axis: str, threshold: float, reason: str, **details) -> AxisResult:
    return AxisResult(axis, float("nan"), threshold, False, False, {"reason": reason, **details})


def _stability(run) -> AxisResult:
    seeds = sorted(run.seeds)
    if len(seeds) < 2:
        return _unavailable("stability", STABILITY_THRESHOLD,
                            f"needs at least two training seeds, the run has {seeds}")
    vals = []
    for s in seeds:
        prim = (run.seeds[s].metrics or {}).get("primary") or {}
        v = prim.get("regret_p90")
        if v is None:
            raise TrustError(f"{_where(run, s)}: metrics.json has no primary.regret_p90")
        vals.append(float(v))
    r = stability_axis(vals, seeds=seeds)
    return AxisResult(r.axis, r.value, r.threshold, r.fires, r.available,
                      {**r.details, "source": "metrics.json primary.regret_p90"})


def _odd(run, name: str, field_name: str, top_quantile: float) -> AxisResult:
    seeds = sorted(run.seeds)
    strat = [quality_rows(run, s, f"stratum_{name}") for s in seeds]
    for s, x in zip(seeds[1:], strat[1:]):
        if x.shape != strat[0].shape or not np.array_equal(x, strat[0], equal_nan=True):
            raise TrustError(f"{_where(run, s)}: stratum_{name} differs from seed {seeds[0]}'s")
    bad = np.flatnonzero(~np.isfinite(strat[0]))
    if bad.size:  # e.g. no obstacle shapes recorded (free variant, older cohorts): unavailable
        return AxisResult("odd_boundary", float("nan"), 0.0, False, False, {
            "stratifier": name, "field": field_name, "top_quantile": float(top_quantile),
            "reason": f"stratum_{name} is not finite for {bad.size} task(s) (first at quality "
                      f"row {int(bad[0])})"})
    vals = np.stack([quality_rows(run, s, field_name) for s in seeds])
    r = odd_boundary_axis(vals, strat[0], top_quantile=top_quantile,
                          higher_is_better=higher_is_better(field_name))
    per = {str(s): row for s, row in zip(seeds, r.details.pop("per_row"))}
    return AxisResult(r.axis, r.value, r.threshold, r.fires, r.available,
                      {**r.details, "per_seed": per, "stratifier": name, "field": field_name})


def _warm_p50(run) -> dict:
    out = {}
    for s in sorted(run.seeds):
        lat = ((run.seeds[s].metrics or {}).get("latency") or {}).get("warm") or {}
        out[s] = (lat.get("interpolated") or {}).get("p50")
    return out


def _efficiency(run, oracle) -> AxisResult:
    da, do = device_identity(run), device_identity(oracle)
    diff = [k for k in da if da[k] != do[k]]
    if diff:
        raise TrustError(f"efficiency compares timings on the same device: {_where(run)} and the "
                         f"oracle {_where(oracle)} differ in {', '.join(diff)} "
                         f"({'; '.join(f'{k}: {da[k]!r} vs {do[k]!r}' for k in diff)})")
    tp, to = _warm_p50(run), _warm_p50(oracle)
    missing = [f"{n} seed {s}" for n, d in (("planner", tp), ("oracle", to))
               for s, v in d.items() if v is None]
    if missing:
        return _unavailable("efficiency", EFFICIENCY_THRESHOLD,
                            f"no warm latency p50 in metrics.json for {', '.join(missing)}")
    r = efficiency_axis(list(to.values()), list(tp.values()))
    return AxisResult(r.axis, r.value, r.threshold, r.fires, r.available,
                      {**r.details, "source": "metrics.json latency.warm.interpolated.p50 "
                                              "(median over seeds)",
                       "oracle": oracle.method_name, "oracle_path": oracle.path,
                       "per_seed_planner_ms": {str(k): v for k, v in tp.items()},
                       "per_seed_oracle_ms": {str(k): v for k, v in to.items()}})


def _geographic(holdout, random_split, field_name: str) -> AxisResult:
    mh, mr = holdout.method_name, random_split.method_name
    if mh != mr:
        raise TrustError(f"the geographic axis compares one planner on two splits: the hold-out "
                         f"run is {mh!r}, the random-split run {mr!r}")
    h = np.concatenate([quality_rows(holdout, s, field_name) for s in sorted(holdout.seeds)])
    r = np.concatenate([quality_rows(random_split, s, field_name)
                        for s in sorted(random_split.seeds)])
    try:
        res = geographic_axis(h, r, higher_is_better=higher_is_better(field_name))
    except ValueError as e:
        return _unavailable("geographic", 0.0, str(e), field=field_name)
    return AxisResult(res.axis, res.value, res.threshold, res.fires, res.available,
                      {**res.details, "field": field_name,
                       "holdout": {"path": holdout.path, "seeds": sorted(holdout.seeds)},
                       "matched_random": {"path": random_split.path,
                                          "seeds": sorted(random_split.seeds)}})


def _row(run, label: str, r: AxisResult) -> dict:
    d = r.to_dict()
    return {"run": None if run is None else run.path,
            "method_name": None if run is None else run.method_name, "label": label, **d}


def trust_table(runs, *, oracle=None, holdout=None, random_split=None,
                field_name: str = "regret",
                top_quantile: float = DEFAULT_TOP_QUANTILE) -> dict[str, Any]:
    """The trust table of scored runs (see the module docstring for their form).

    ``field_name`` is the per-task field of the ODD and geographic axes (``regret``,
    ``assd``, ``h95``, ``success`` or ``obstacle_violation``); ``top_quantile`` the share of
    tasks in each ODD boundary slice. ``holdout`` and ``random_split`` go together. Returns
    ``{"format", "created_utc", "options", "rows"}``; each row holds ``run``,
    ``method_name``, ``label``, ``axis``, ``value``, ``threshold``, ``fires``, ``available``
    and ``details``. Bad inputs raise :class:`TrustError` naming the run and field.
    """
    runs = list(runs)
    if (holdout is None) != (random_split is None):
        raise TrustError("the geographic axis needs both a hold-out run and a matched random-split run")
    if not runs and holdout is None:
        raise TrustError("nothing to tabulate: give at least one scored run, or a hold-out and "
                         "a random-split run")
    try:
        higher_is_better(field_name)
    except ValueError as e:
        raise TrustError(str(e)) from None
    for run in runs + [r for r in (oracle, holdout, random_split) if r is not None]:
        if not run.seeds:
            raise TrustError(f"{_where(run)}: no scored seed")
    rows = []
    try:
        for run in runs:
            rows.append(_row(run, "stability", _stability(run)))
            for name in stratifier_names(run):
                rows.append(_row(run, f"odd_boundary:{name}",
                                 _odd(run, name, field_name, top_quantile)))
            if oracle is not None:
                rows.append(_row(run, "efficiency", _efficiency(run, oracle)))
        if holdout is not None:
            rows.append(_row(holdout, "geographic", _geographic(holdout, random_split, field_name)))
    except ValueError as e:
        if isinstance(e, TrustError):
            raise
        raise TrustError(str(e)) from None
    return jsonable({
        "format": TRUST_FORMAT,
        "created_utc": utc_now(),
        "options": {"field": field_name, "top_quantile": float(top_quantile),
                    "stability_threshold": STABILITY_THRESHOLD,
                    "efficiency_threshold": EFFICIENCY_THRESHOLD,
                    "oracle": None if oracle is None else oracle.path,
                    "holdout": None if holdout is None else holdout.path,
                    "random_split": None if random_split is None else random_split.path},
        "rows": rows,
    })
