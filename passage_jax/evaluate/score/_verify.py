"""Score and comparison files read back re-derived, not trusted.

A ``metrics.json`` is a summary of its ``per_sample.npz``; a receipt whose hash was updated
after the summary was edited proves nothing about it. So a score read back
(:func:`~passage_jax.evaluate.score._load.load_score`) is checked here, in two steps, and any
difference is refused in one line naming the file and the field:

* :func:`check_numbers` (also applied to comparison files,
  :mod:`~passage_jax.evaluate.compare._verify`): every number is finite (``NaN``,
  ``Infinity`` and literals beyond the float range such as ``1e400`` parse to non-finite
  floats and are refused) and in its domain by its name: a count (``n_*``, ``recorded``,
  ``rank``, ``quality_repeat_index``, and the entries of ``status_counts``,
  ``route_stage_counts``, ``legal_route_stage_counts``, ``block_sizes``,
  ``repeats_per_scene``, ``status_route_divergence``) is an integer >= 0; a rate (``rate``,
  ``*_rate``, ``fallback_frequency``, ``largest_share``, ``alpha``, ``p_value``, the
  entries of ``p_values``) lies in [0, 1]; a contrast of a rate (``delta``, ``ci_low``,
  ``ci_high`` below a rate's name) in [-1, 1]; and an interval's ``ci_low`` is not above
  its ``ci_high``.
* :func:`verify_metrics`: what ``per_sample.npz`` gives of ``metrics.json`` is computed
  again with the code that wrote it (:func:`~passage_jax.evaluate.score._collect.quality_summary`
  for the headline and every warm pass, the latency summaries of
  :mod:`~passage_jax.evaluate.latency`, the block census, the route-stage figures of
  :func:`~passage_jax.evaluate.components.component_summary`, the warm status counts) and
  must equal it: integers, strings and flags exactly, floats within a relative
  :data:`RTOL` (sums over another row order differ in the last bits); the method name,
  seed, timing profile and boundary must be the manifest's. What the records alone give
  (the cold and warm-up passes, the work counters, the recost times) is checked by
  :func:`check_numbers` only.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from passage_jax.checks import is_int
from passage_jax.contract import BATCHED_PROFILE, CENSORED_STATUSES, PRIMARY_METRICS, UNPLACED
from passage_jax.evaluate.components import component_summary
from passage_jax.evaluate.latency import censored_latency_block, interpolated_percentiles
from passage_jax.evaluate.score._collect import HEADLINE_COMPANIONS, quality_summary, timing_profile
from passage_jax.evaluate.score._format import BLOCK_RULE, METRIC_CONTRACT, ScoreError, short
from passage_jax.fileio import jsonable
from passage_jax.protocol.runfolder import MANIFEST, METRICS, PER_SAMPLE
from passage_jax.stats import block_census

__all__ = ["check_numbers", "verify_metrics", "derived_metrics", "first_difference",
           "difference_text", "Partial", "MISSING", "RTOL", "ATOL"]

#: relative tolerance of a float re-derived against the one a file states
RTOL = 1e-9
#: absolute tolerance beside it, for figures that are zero up to rounding (an exact
#: planner's regret)
ATOL = 1e-12


class _Missing:
    def __repr__(self) -> str:
        return "missing"


#: what :func:`first_difference` gives for a field one side lacks
MISSING = _Missing()
#: keys whose number is a count wherever it appears (besides every ``n_*``); a flag of the
#: same name is left alone (``inference_protocols.*.recorded``)
_COUNT_KEYS = frozenset({"recorded", "rank", "quality_repeat_index"})
#: keys whose every number below is a count
_COUNT_MAPS = frozenset({"status_counts", "route_stage_counts", "legal_route_stage_counts",
                         "block_sizes", "repeats_per_scene", "status_route_divergence"})
#: keys whose number is a rate in [0, 1] (besides ``rate`` and every ``*_rate``)
_RATE_KEYS = frozenset({"fallback_frequency", "largest_share", "alpha", "p_value"})
#: keys whose every number below is a rate
_RATE_MAPS = frozenset({"p_values"})
#: the fields of a contrast; below a rate's name they lie in [-1, 1]
_CONTRAST_KEYS = ("delta", "ci_low", "ci_high")

#: the per_sample.npz row fields the quality summaries read
_QUALITY_ROWS = ("regret", "assd", "h95", "path_iou", "success", "valid_path", "connected_path",
                 "obstacle_violation", "obstacle_traversals", "predicted_cost")
#: the components fields that the per_sample.npz ``route_stage`` column gives
_STAGE_FIELDS = ("format", "n_rows", "n_success", "route_stage_reporting", "n_route_stage_reported",
                 "route_stage_counts", "legal_route_stage_counts", "direct_success_rate",
                 "repair_rate", "fallback_rate", "no_route_stage_rate")
#: censored-latency fields that depend on the run's warm-up declaration, not on the rows
_WARM_FIELDS = ("n_warm_requests", "at_least_100_warm_requests")


def _is_rate(key: str) -> bool:
    return key == "rate" or key.endswith("_rate") or key in _RATE_KEYS


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def check_numbers(doc, where, error=ScoreError) -> None:
    """Every number of the JSON document ``doc`` (read from ``where``) finite and in its
    domain (the module docstring); ``error`` naming the file and the field otherwise."""
    _numbers(doc, "", "", "", str(where), error)


def _numbers(v, path: str, key: str, kind: str, where: str, error) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            k = str(k)
            sub = kind
            if k in _COUNT_MAPS:
                sub = "count"
            elif k in _RATE_MAPS:
                sub = "rate"
            elif _is_rate(k) and isinstance(x, dict) and kind not in ("count", "rate"):
                sub = "rate_contrast"
            _numbers(x, _join(path, k), k, sub, where, error)
        lo, hi = v.get("ci_low"), v.get("ci_high")
        if _real(lo) and _real(hi) and lo > hi:
            raise error(f"{where}: field {_join(path, 'ci_low')!r} is {short(lo)}, above "
                        f"ci_high {short(hi)}")
        return
    if isinstance(v, list):
        for i, x in enumerate(v):
            _numbers(x, f"{path}[{i}]", key, kind, where, error)
        return
    if not isinstance(v, (int, float)) or (isinstance(v, bool) and key in _COUNT_KEYS):
        return  # other flags are refused where a count or a rate is read
    if _real(v) and ((isinstance(v, float) and not math.isfinite(v)) or abs(v) > sys.float_info.max):
        raise error(f"{where}: field {path!r} is {short(v)}: not a finite number (NaN, Infinity "
                    f"and numbers beyond the float range, such as 1e400, are refused)")
    if kind == "count" or key.startswith("n_") or key in _COUNT_KEYS:
        if not is_int(v) or v < 0:
            raise error(f"{where}: field {path!r} must be a count (an integer >= 0), got {short(v)}")
    elif kind == "rate" or _is_rate(key):
        if not _real(v) or not 0 <= v <= 1:
            raise error(f"{where}: field {path!r} must be a rate in [0, 1], got {short(v)}")
    elif kind == "rate_contrast" and key in _CONTRAST_KEYS and (not _real(v) or not -1 <= v <= 1):
        raise error(f"{where}: field {path!r} must lie in [-1, 1] (a difference of two rates), "
                    f"got {short(v)}")


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# --------------------------------------------------------------------------- #
# comparing a document with what was re-derived
# --------------------------------------------------------------------------- #

def _same_number(a, b) -> bool:
    if is_int(a) and is_int(b):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=RTOL, abs_tol=ATOL)


class Partial(dict):
    """A re-derived object that holds some of the fields of the one it is compared with
    (the others are not derived from the same source); a plain ``dict`` holds them all."""


def first_difference(got, want, path: str = "") -> tuple[str, object, object] | None:
    """The first field where document ``got`` differs from the re-derived ``want``:
    ``(path, got value, wanted value)``, either value :data:`MISSING` where that side lacks
    the field, or None. A :class:`Partial` object of ``want`` compares only the fields it
    holds; any other object compares every field of both. Integers, strings, flags and null
    compare exactly, floats within :data:`RTOL` / :data:`ATOL`."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return path, got, want
        for k, w in want.items():
            if k not in got:
                return _join(path, k), MISSING, w
            d = first_difference(got[k], w, _join(path, k))
            if d is not None:
                return d
        extra = [] if isinstance(want, Partial) else [k for k in got if k not in want]
        return (_join(path, extra[0]), got[extra[0]], MISSING) if extra else None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return path, got, want
        for i, (g, w) in enumerate(zip(got, want)):
            d = first_difference(g, w, f"{path}[{i}]")
            if d is not None:
                return d
        return None
    if _real(want) and _real(got):
        return None if _same_number(got, want) else (path, got, want)
    return None if type(got) is type(want) and got == want else (path, got, want)


def difference_text(diff: tuple, gives: str) -> str:
    """``field 'p' is X but <gives> Y`` for a :func:`first_difference` (``gives``: e.g.
    ``"per_sample.npz gives"``)."""
    path, got, want = diff
    if got is MISSING:
        return f"field {path!r} is missing but {gives} {short(want)}"
    if want is MISSING:
        return f"field {path!r} is {short(got)} but {gives} no such field"
    return f"field {path!r} is {short(got)} but {gives} {short(want)}"


def _refuse_difference(doc: dict, want: dict, where, source: str, hint: str) -> None:
    d = first_difference(doc, want)
    if d is not None:
        raise ScoreError(f"{where}: {difference_text(d, f'{source} gives')}; {hint}")


# --------------------------------------------------------------------------- #
# metrics.json from per_sample.npz
# --------------------------------------------------------------------------- #

def _latency(per: dict, sel: np.ndarray) -> dict:
    """The latency summaries of rows ``sel`` that the rows give: the interpolated block
    whole, the censored block without the warm flags (and without the lower bounds when a
    censored row has no recorded time: its censoring time is the record's deadline)."""
    lat = np.asarray(per["latency_ms"], np.float64)[sel]
    times = [None if np.isnan(t) else float(t) for t in lat]
    status = [str(s) for s in per["status"][sel]]
    block = jsonable(censored_latency_block(times, status, per["success"][sel].astype(bool),
                                            [str(s) for s in per["sample_id"][sel]],
                                            deadline_ms=[0.0 if t is None else None for t in times]))
    for k in _WARM_FIELDS:
        block.pop(k)
    if any(t is None and s in CENSORED_STATUSES for t, s in zip(times, status)):
        block["percentiles"] = {q: Partial({k: v for k, v in p.items() if k != "lower_bound"})
                                for q, p in block["percentiles"].items()}
    return {"interpolated": jsonable(interpolated_percentiles(times)), "censored": Partial(block)}


def derived_metrics(per: dict, batched: bool = False) -> Partial:
    """What the ``per_sample.npz`` arrays ``per`` give of their ``metrics.json`` (JSON types;
    :class:`Partial` where the document holds more): the quality repeat's quality and its
    companions, every warm pass's quality, the warm series' status counts and latency, the
    quality repeat's latency, the block census and the route-stage figures of the components
    block. ``batched``: the run followed the batched procedure (no per-request latency: the
    latency blocks are empty; its ``batched`` block comes from the records, not the rows).
    :class:`ValueError` when the rows cannot be summarised."""
    rows = {k: per[k] for k in _QUALITY_ROWS}
    quality = np.asarray(per["primary_quality"], bool)
    qualified = np.asarray(per["reference_qualified"], bool)
    repeat = np.asarray(per["repeat_index"])
    headline = quality_summary(rows, quality, qualified)
    order = np.flatnonzero(quality)
    order = order[np.argsort(np.asarray(per["task_index"])[order], kind="stable")]
    clusters = [str(c) for c in per["cluster_id"][order]]
    statuses, counts = np.unique(np.asarray(per["status"], str), return_counts=True)
    stage = np.flatnonzero(quality & qualified)
    components = component_summary([{"route_stage": str(s) or None} for s in per["route_stage"][stage]],
                                   np.asarray(per["success"], bool)[stage])
    return Partial({
        "metric_contract": METRIC_CONTRACT,
        "block_rule": BLOCK_RULE,
        "quality_repeat_index": int(per["quality_repeat_index"]),
        "n_tasks": int(quality.sum()),
        "n_reference_qualified": int((quality & qualified).sum()),
        "primary": {k: headline[k] for k in PRIMARY_METRICS},
        **{k: headline[k] for k in HEADLINE_COMPANIONS},
        "quality": headline,
        "quality_by_pass": Partial({f"warm#{r}": quality_summary(rows, repeat == r, qualified)
                                    for r in sorted(set(repeat.tolist()))}),
        "status_counts": Partial({"warm": {str(s): int(c) for s, c in zip(statuses, counts)}}),
        "latency": {} if batched else Partial({"warm": _latency(per, np.ones(len(quality), bool))}),
        "latency_warm_quality_repeat": None if batched else _latency(per, quality),
        "validation_recost_ms": Partial({"n_requests": int(len(quality))}),
        "block_census": jsonable(block_census([None if c == UNPLACED else c for c in clusters])),
        "components": Partial(jsonable({k: components[k] for k in _STAGE_FIELDS})),
    })


def _from_manifest(manifest: dict, where) -> Partial:
    timing = jsonable(timing_profile(manifest, where))
    return Partial({"method_name": manifest.get("method_name"), "seed": manifest.get("seed"),
                    "timing_profile": timing, "timing_boundary": timing["timing_boundary"],
                    "validation_recost_ms": Partial({"profile": timing["profile"],
                                                     "timing_boundary": timing["timing_boundary"]})})


def verify_metrics(metrics: dict, per: dict, manifest: dict, folder) -> None:
    """A seed folder's ``metrics.json`` (already of the structure the readers need) checked:
    its numbers (:func:`check_numbers`), then what its ``per_sample.npz`` (``per``) and its
    manifest give of it (:func:`derived_metrics`); :class:`ScoreError` naming the file and
    the first field that differs."""
    where = folder / METRICS
    check_numbers(metrics, where)
    again = "(edited after scoring?); score the folder again with score --force"
    batched = timing_profile(manifest, folder / MANIFEST)["profile"] == BATCHED_PROFILE
    try:
        want = derived_metrics(per, batched)
    except (ValueError, TypeError, IndexError) as e:
        raise ScoreError(f"{folder / PER_SAMPLE}: its rows cannot be summarised "
                         f"({type(e).__name__}: {e})") from None
    _refuse_difference(metrics, want, where, PER_SAMPLE,
                       f"{METRICS} must be what its {PER_SAMPLE} gives {again}")
    _refuse_difference(metrics, _from_manifest(manifest, folder / MANIFEST), where,
                       MANIFEST, f"{METRICS} must state its manifest's run {again}")
