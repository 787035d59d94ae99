"""Paired comparison of two scored runs (SPEC §5, §7).

``compare_runs(a, b, output)`` reads two scored runs (run folders or seed
folders), refuses them when their tasks (ordered sample ids and input hashes),
data (shards), references or timing profiles differ (and, with
``require_identical_limits``, when their budgets, timing series or deadlines
differ), and writes one JSON file with:

* each method's six primary metrics and counts per seed;
* paired contrasts ``T(A) - T(B)`` of the six metrics, per seed and as the
  seed mean when both runs hold the same seeds, with geographic-block
  percentile intervals from :mod:`passage_jax.stats` (blocks from
  ``metadata.tile`` under ``main_tile_5deg``, or from a sealed roster);
* valid-route denominators and the geometry contrast on the tasks valid for
  both methods, beside the contrast of each method's own valid subset;
* a secondary latency contrast (median of the quality repeat);
* optional ODD bins (``odd_spec``): the same contrasts per joint bin of
  per-task stratifiers, empty bins included;
* the confirmatory test when asked for (``paired_test="randomization"`` or a
  ``test_evidence`` file): six p-values into Holm at family-wise 0.05, the decision
  and votes in ``primary_comparison``, the source of the p-values in
  ``confirmatory`` (``null`` without a test);
* each method's ``components`` block per seed (direct/repair/fallback rates,
  per-stage work) and, when either run declares ``component_control``, the
  ``attribution`` table of the two runs (:mod:`passage_jax.evaluate.attribution`;
  ``null`` otherwise).

Every contrast is computed by :mod:`passage_jax.stats` and written as its result's
``to_dict()``: the six primary contrasts of a seed-mean comparison over the default
seeds come from one :func:`~passage_jax.stats.compare_primary_metrics` call (also
written as ``primary_comparison``); any other contrast from
:func:`~passage_jax.stats.seed_mean_bootstrap` over the compared pairs, or, when the
blocks do not support an interval, from the same seed-mean result without draws
(estimates only, keys :data:`ESTIMATE_KEYS`).
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from passage_jax.contract import DEFAULT_SEEDS, DIRECTIONS, METRIC_SPEC, PRIMARY_METRICS, UNPLACED
from passage_jax.evaluate.attribution import AttributionError, attribution_rows, run_entry
from passage_jax.evaluate.score import (
    STRATIFIERS,
    ScoreError,
    load_score,
    read_doc,
    seed_folders,
    timing_profile,
)
from passage_jax.fileio import atomic_write_json, jsonable, sha256_file, utc_now
from passage_jax.stats import (
    RosterError,
    block_census,
    block_randomization_test,
    compare_primary_metrics,
    parse_statistic,
    read_roster,
    seed_mean_bootstrap,
)
from passage_jax.stats.bootstrap import seed_mean_result
from passage_jax.stats.compare import FAMILY_ALPHA

__all__ = ["RosterMismatch", "bound_roster", "split_role_of", "PrecisionMismatch",
           "check_precision", "reference_precision",
           "compare_runs", "CompareError", "OutputExists", "OutputIsFolder", "InvalidResamples",
           "LimitsDiffer",
           "RosterHashMissing", "bin_index",
           "blocks_for", "check_identity", "latency_contrast", "contrast", "COMPARE_FORMAT",
           "ODD_FORMAT", "DEFAULT_RESAMPLES", "ESTIMATE_KEYS", "attribution_of", "NoncanonicalPairing",
           "inference_protocol_of", "LEGACY_PROTOCOL", "load_side", "read_test_evidence",
           "TestEvidenceError", "PAIRED_TESTS", "EVIDENCE_KEYS", "confirmatory_inputs"]

COMPARE_FORMAT = "passage-jax-compare-v1"
ODD_FORMAT = "passage-odd-spec-v1"
DEFAULT_RESAMPLES = 10000


class CompareError(RuntimeError):
    """The two runs cannot be compared (or an input is malformed)."""


class OutputExists(CompareError, FileExistsError):
    """The comparison file already exists (replacing it must be asked for)."""


class OutputIsFolder(CompareError):
    """The comparison's output path is an existing folder (``force`` replaces a file only)."""


class InvalidResamples(CompareError, ValueError):
    """The number of bootstrap resamples is not a positive integer."""


class LimitsDiffer(CompareError):
    """The runs' procedure limits differ while identical limits are required."""


class RosterHashMissing(CompareError):
    """A roster was given without its sealed sha256, or a sha256 without a roster."""


class RosterMismatch(CompareError):
    """The runs were admitted with different rosters, or a roster was given that is not
    the one the runs recorded."""


class PrecisionMismatch(CompareError):
    """The runs' references came from arithmetic paths with different stated tolerances."""


class NoncanonicalPairing(CompareError):
    """A run under the canonical inference protocol is paired with a noncanonical one."""


class TestEvidenceError(CompareError, ValueError):
    """A paired-test evidence file is malformed, or a confirmatory test cannot be run."""

    __test__ = False   # not a test class


#: paired tests ``compare_runs`` can run itself (``paired_test=``)
PAIRED_TESTS = ("randomization",)
#: the keys of a paired-test evidence file (seed 003): all required, no others
EVIDENCE_KEYS = ("p_values", "paired_test", "test_assumptions")


def read_test_evidence(path) -> dict:
    """Read and validate a paired-test evidence file (JSON object with exactly
    ``p_values``, ``paired_test`` and ``test_assumptions``).

    ``p_values`` maps each of the six primary metrics to a number in [0, 1], or ``null`` /
    ``NaN`` for an unavailable test (it keeps its place in the Holm family);
    ``paired_test`` is a non-empty string; ``test_assumptions`` a non-empty string, a
    non-empty list of non-empty strings or a non-empty object. Any other shape raises
    :class:`TestEvidenceError` naming the file and the field. Returns ``{"p_values",
    "paired_test", "test_assumptions", "path", "sha256"}`` (p-values as floats, NaN for
    unavailable).
    """
    p = Path(path)
    doc = read_doc(p, TestEvidenceError, "test evidence")
    where = f"test evidence {p}"
    if not isinstance(doc, dict):
        raise TestEvidenceError(f"{where}: expected a JSON object with {list(EVIDENCE_KEYS)}, "
                                f"got {type(doc).__name__}")
    missing = [k for k in EVIDENCE_KEYS if k not in doc]
    if missing:
        raise TestEvidenceError(f"{where}: missing field(s) {missing}")
    extra = sorted(set(doc) - set(EVIDENCE_KEYS), key=str)
    if extra:
        raise TestEvidenceError(f"{where}: unknown field(s) {extra}; expected exactly "
                                f"{list(EVIDENCE_KEYS)}")
    pv = doc["p_values"]
    if not isinstance(pv, dict):
        raise TestEvidenceError(f"{where}: p_values must map each primary metric to a p-value, "
                                f"got {type(pv).__name__}")
    miss = [m for m in PRIMARY_METRICS if m not in pv]
    unknown = sorted(set(pv) - set(PRIMARY_METRICS), key=str)
    if miss or unknown:
        raise TestEvidenceError(f"{where}: p_values must name exactly the six primary metrics "
                                f"{list(PRIMARY_METRICS)}; missing {miss}, unknown {unknown}")
    p_values = {}
    for m in PRIMARY_METRICS:
        v = pv[m]
        if v is None:
            p_values[m] = float("nan")
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TestEvidenceError(f"{where}: p_values.{m} must be a number in [0, 1] or null, "
                                    f"got {v!r}")
        v = float(v)
        if not math.isnan(v) and not 0.0 <= v <= 1.0:
            raise TestEvidenceError(f"{where}: p_values.{m} is {v}, outside [0, 1]")
        p_values[m] = v
    name = doc["paired_test"]
    if not isinstance(name, str) or not name.strip():
        raise TestEvidenceError(f"{where}: paired_test must be the declared test's name (a "
                                f"non-empty string), got {name!r}")
    ta = doc["test_assumptions"]
    ok = ((isinstance(ta, str) and ta.strip())
          or (isinstance(ta, list) and ta and all(isinstance(x, str) and x.strip() for x in ta))
          or (isinstance(ta, dict) and ta))
    if not ok:
        raise TestEvidenceError(f"{where}: test_assumptions must state the test's assumptions (a "
                                f"non-empty string, list of strings or object), got {ta!r}")
    return {"p_values": p_values, "paired_test": name, "test_assumptions": ta,
            "path": str(p.resolve()), "sha256": sha256_file(p)}


def confirmatory_inputs(recs: list, blocks, ids: list, *, paired_test=None, evidence=None,
                        randomization_draws: int = 9999, seed: int = 0, sharding=None) -> dict | None:
    """The p-values, test name and assumptions for ``compare_primary_metrics`` and their
    record: from the block randomization test run here (``paired_test="randomization"``,
    swap patterns drawn from ``seed`` when the blocks are too many to enumerate) or from a
    validated evidence file (:func:`read_test_evidence`); None when neither is asked for."""
    if paired_test is None and evidence is None:
        return None
    if paired_test is not None:
        try:
            rt = block_randomization_test(recs[0], recs[1], blocks, task_ids=ids,
                                          n_random=randomization_draws, seed=seed,
                                          sharding=sharding)
        except ValueError as e:
            raise TestEvidenceError(f"block randomization test: {e}") from None
        return {"source": "randomization", "p_values": rt.p_values, "paired_test": rt.paired_test,
                "test_assumptions": rt.test_assumptions, "randomization": rt.to_dict(),
                "evidence_file": None}
    return {"source": "evidence_file", "p_values": evidence["p_values"],
            "paired_test": evidence["paired_test"], "test_assumptions": evidence["test_assumptions"],
            "randomization": None,
            "evidence_file": {"path": evidence["path"], "sha256": evidence["sha256"]}}


#: the inference protocol of a run recorded before protocols were recorded
LEGACY_PROTOCOL = {"name": "whole-scene (no tiling)", "settings": {"tiling": None}, "canonical": True,
                   "deviations": [], "recorded": False}


def inference_protocol_of(side: dict) -> dict:
    """The inference protocol of a loaded side (from its seed manifests'
    ``inference_protocol``; a run without one is canonical whole-scene inference);
    noncanonical when any seed is."""
    protos = [s["manifest"].get("inference_protocol") for s in side["seeds"].values()]
    protos = [{**p, "recorded": True} if isinstance(p, dict) else dict(LEGACY_PROTOCOL) for p in protos]
    bad = [p for p in protos if not p.get("canonical", True)]
    return bad[0] if bad else protos[0]


def check_protocols(A: dict, B: dict, allow_noncanonical: bool) -> dict:
    pa, pb = inference_protocol_of(A), inference_protocol_of(B)
    ca, cb = bool(pa.get("canonical", True)), bool(pb.get("canonical", True))
    if ca != cb and not allow_noncanonical:
        def label(n, p):
            return f"{n} {p.get('name')!r} ({'canonical' if p.get('canonical', True) else 'noncanonical'})"
        raise NoncanonicalPairing(f"the runs' inference protocols differ in kind: {label('A', pa)} vs "
                                  f"{label('B', pb)}; a canonical run is not paired with a noncanonical one")
    return {"A": pa, "B": pb, "allow_noncanonical": bool(allow_noncanonical)}


# --------------------------------------------------------------------------- #
# loading and identity
# --------------------------------------------------------------------------- #

def load_side(path) -> dict:
    try:
        folders = seed_folders(path)
        scores = [load_score(f) for f in folders]
    except ScoreError as e:
        raise CompareError(str(e)) from None
    seeds = {}
    for s in scores:
        seed = int(s["manifest"]["seed"])
        seeds[seed] = s
    first = scores[0]
    return {"path": str(Path(path).resolve()), "seeds": seeds,
            "method_name": first["manifest"].get("method_name")}


def identity(score: dict) -> dict:
    m = score["manifest"]
    d = m.get("data") or {}
    return {
        "tasks": {"sample_ids": list(d.get("sample_ids") or []),
                  "tasks_sha256": d.get("tasks_sha256")},
        "data": {"resolution": d.get("resolution"), "split": d.get("split"),
                 "cost_model": d.get("cost_model"), "task_variant": d.get("task_variant"),
                 "shards": sorted((s.get("name"), s.get("sha256")) for s in d.get("shards") or []),
                 "dataset_revision": d.get("dataset_revision")},
        "references": {k: (m.get("references") or {}).get(k)
                       for k in ("identity", "policy", "cohort_id")},
        "timing_profile": timing_profile(m),
    }


def limits(score: dict) -> dict:
    m = score["manifest"]
    t = m.get("timing") or {}
    budget = {k: v for k, v in (m.get("budget") or {}).items() if v is not None}
    return {"budget": budget,
            "deadline_ms": budget.get("wall_time_ms"),
            "latency_warmup": t.get("latency_warmup"),
            "latency_repeats": t.get("latency_repeats"),
            "quality_repeat_index": t.get("quality_repeat_index"),
            "timing_boundary": t.get("timer"),
            "device": m.get("device")}


def _first_diff(a: list, b: list, name_a: str = "A", name_b: str = "B") -> str:
    if len(a) != len(b):
        return f"{name_a} has {len(a)} tasks, {name_b} has {len(b)}"
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"position {i}: {name_a} {a[i]!r}, {name_b} {b[i]!r}"


def reference_precision(side: dict) -> dict:
    """The arithmetic path of a run's references (``references.precision`` in its manifests;
    runs written before it was recorded were float64) and its stated relative tolerance."""
    got = set()
    for sc in side["seeds"].values():
        ref = sc["manifest"].get("references") or {}
        got.add((ref.get("precision", "float64"), float(ref.get("precision_rtol", 1e-12))))
    if len(got) != 1:
        raise CompareError(f"{side['path']}: its seeds record different reference precisions "
                           f"{sorted(got)}")
    path, rtol = got.pop()
    return {"path": path, "rtol": rtol}


def check_precision(A: dict, B: dict, allow_mix: bool) -> dict:
    """Refuse runs whose references came from paths with different stated tolerances unless
    ``allow_mix``; then their c* must still agree within the looser tolerance (task by task,
    from per_sample ``oracle_cost``). Returns both statements."""
    pa, pb = reference_precision(A), reference_precision(B)
    out = {"A": pa, "B": pb, "mixed": pa != pb}
    if pa == pb:
        return out
    if not allow_mix:
        raise PrecisionMismatch(f"the references of A came from the {pa['path']} path (rtol "
                                f"{pa['rtol']:g}) and those of B from the {pb['path']} path (rtol "
                                f"{pb['rtol']:g}); pairing them must be asked for")
    rtol = max(pa["rtol"], pb["rtol"])
    ca = next(iter(A["seeds"].values()))["per_sample"]["oracle_cost"]
    cb = next(iter(B["seeds"].values()))["per_sample"]["oracle_cost"]
    if ca.shape != cb.shape or not np.allclose(ca, cb, rtol=rtol, atol=0.0):
        worst = float(np.max(np.abs(ca - cb) / np.maximum(np.abs(cb), 1e-300))) \
            if ca.shape == cb.shape else float("inf")
        raise PrecisionMismatch(f"the two runs' c* differ by {worst:.3g} relative, beyond the "
                                f"looser stated tolerance {rtol:g}")
    out["rtol"] = rtol
    return out


def check_identity(A: dict, B: dict, *, precision_mix: bool = False) -> dict:
    """Refuse mismatched runs; returns the shared identity. With ``precision_mix`` (runs
    whose references came from different arithmetic paths, c* checked within tolerance by
    :func:`check_precision`) the references' identity hash may differ."""
    ids = {}
    for name, side in (("A", A), ("B", B)):
        per = [identity(s) for s in side["seeds"].values()]
        for p in per[1:]:
            if p != per[0]:
                raise CompareError(f"run {name} ({side['path']}): its seed folders disagree on "
                                   f"tasks, data, references or timing profile")
        ids[name] = per[0]
    a, b = ids["A"], ids["B"]
    if a["tasks"]["sample_ids"] != b["tasks"]["sample_ids"]:
        raise CompareError("tasks differ: the ordered sample ids are not identical ("
                           + _first_diff(a["tasks"]["sample_ids"], b["tasks"]["sample_ids"]) + ")")
    # data first: a different resolution, split or cost model also changes the task hash,
    # and naming it says more than the hash does
    for k in a["data"]:
        if a["data"][k] != b["data"][k]:
            what = "data hashes" if k == "shards" else f"data {k}"
            raise CompareError(f"{what} differ: A {a['data'][k]!r} vs B {b['data'][k]!r}")
    if a["tasks"]["tasks_sha256"] != b["tasks"]["tasks_sha256"]:
        raise CompareError(f"tasks differ: same sample ids but different task inputs "
                           f"(tasks_sha256 A {a['tasks']['tasks_sha256']} vs B "
                           f"{b['tasks']['tasks_sha256']})")
    # the policy and cohort first: the identity hash changes with them
    for k in ("policy", "cohort_id") + (() if precision_mix else ("identity",)):
        if a["references"][k] != b["references"][k]:
            raise CompareError(f"references differ ({k}): A {a['references'][k]!r} vs B "
                               f"{b['references'][k]!r}")
    if a["timing_profile"] != b["timing_profile"]:
        diff = [k for k in a["timing_profile"] if a["timing_profile"][k] != b["timing_profile"][k]]
        raise CompareError(f"timing profiles differ ({', '.join(diff)}): A "
                           f"{a['timing_profile']} vs B {b['timing_profile']}")
    return a


def check_limits(A: dict, B: dict, require_identical: bool) -> dict:
    la = [limits(s) for s in A["seeds"].values()]
    lb = [limits(s) for s in B["seeds"].values()]
    a, b = la[0], lb[0]
    differ = sorted({k for x in la + lb for k in x if x[k] != a[k]})
    out = {"A": a, "B": b, "differ": differ, "required_identical": bool(require_identical)}
    if require_identical and differ:
        raise LimitsDiffer("limits differ and identical limits are required: "
                           + "; ".join(f"{k}: A {a[k]!r} vs B {b[k]!r}" for k in differ))
    return out


# --------------------------------------------------------------------------- #
# per-task arrays and blocks
# --------------------------------------------------------------------------- #

QUALITY_FIELDS = ("regret", "assd", "h95", "success", "obstacle_violation", "valid_path",
                  "connected_path", "latency_ms", "cluster_id", "sample_id", "oracle_cost")


def quality_rows(score: dict) -> dict:
    """The quality repeat's rows in task order."""
    p = score["per_sample"]
    sel = np.flatnonzero(p["primary_quality"])
    sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
    out = {k: p[k][sel] for k in QUALITY_FIELDS}
    for k in STRATIFIERS:
        out[f"stratum_{k}"] = p[f"stratum_{k}"][sel]
    return out


def pairs_of(A: dict, B: dict) -> tuple[list, bool]:
    sa, sb = sorted(A["seeds"]), sorted(B["seeds"])
    if sa == sb:
        return [(f"{s}", s, s) for s in sa], True
    common = sorted(set(sa) & set(sb))
    if common:
        return [(f"{s}", s, s) for s in common], False
    if len(sa) == 1 and len(sb) == 1:
        return [(f"A:{sa[0]}/B:{sb[0]}", sa[0], sb[0])], False
    raise CompareError(f"the runs share no seed (A {sa}, B {sb}); compare seed folders one "
                       f"pair at a time")


def split_role_of(side: dict) -> dict:
    """A run's split role and calibration-decisions hash (every seed must agree)."""
    got = set()
    for sc in side["seeds"].values():
        prov = sc["manifest"].get("provenance") or {}
        cal = prov.get("calibration_decisions") or {}
        got.add((prov.get("split_role", "undeclared"), cal.get("canonical_sha256")))
    if len(got) != 1:
        raise CompareError(f"{side['path']}: its seeds record different split roles or calibration "
                           f"decisions {sorted(got, key=str)}")
    role, cal = got.pop()
    return {"split_role": role, "calibration_decisions_sha256": cal}


def bound_roster(A: dict, B: dict, roster=None, roster_sha256=None) -> tuple:
    """The roster to use: every seed of both runs must have been admitted with the same
    roster (or none: :class:`RosterMismatch` otherwise); the recorded roster is used when
    none is given, and a given one must be it. Returns ``(roster, sha256, origin)`` with
    origin ``"recorded"``, ``"given"`` or None (no roster)."""
    recorded = {}
    for side, S in (("A", A), ("B", B)):
        for seed, sc in S["seeds"].items():
            r = (sc["manifest"].get("provenance") or {}).get("roster")
            recorded[f"{side} seed {seed}"] = None if r is None else (r.get("sha256"), r.get("path"))
    shas = {v[0] if v else None for v in recorded.values()}
    if len(shas) > 1:
        listed = "; ".join(f"{k}: {'no roster' if v is None else v[0][:12]}" for k, v in recorded.items())
        raise RosterMismatch(f"the runs were admitted with different rosters ({listed}); compare "
                             f"runs bound to one roster")
    (sha,) = shas
    if sha is None:
        return roster, roster_sha256, ("given" if roster is not None else None)
    path = next(v[1] for v in recorded.values() if v)
    if roster is None:
        if not Path(path).is_file():
            raise RosterMismatch(f"the runs were admitted with roster {path} (sha256 {sha}), which "
                                 f"is no longer there; give it with --roster and its sha256")
        return path, sha, "recorded"
    if roster_sha256 is not None and str(roster_sha256).lower() != sha:
        raise RosterMismatch(f"roster sha256 {roster_sha256} is not the roster the runs were admitted "
                             f"with ({path}, sha256 {sha})")
    return roster, roster_sha256, "given"


def blocks_for(ids: list, clusters: np.ndarray, roster=None, roster_sha256=None) -> dict:
    if roster is None:
        labels = [None if str(c) == UNPLACED else str(c) for c in clusters]
        src = {"source": "metadata.tile", "rule": "main_tile_5deg"}
        # a task without a tile has no block identity: uncertainty is unknown (only a
        # sealed roster may gather such tasks into one declared unplaced block)
        blocks = list(labels)
    else:
        if roster_sha256 is None:
            raise RosterHashMissing(f"roster {roster} is given without its sealed sha256")
        try:
            r = read_roster(roster, sha256=roster_sha256)
        except (RosterError, OSError) as e:
            raise CompareError(str(e)) from None
        if [str(t) for t in r.task_ids] != list(ids):
            raise CompareError(f"roster {roster}: its task ids are not the runs' ordered sample "
                               f"ids (" + _first_diff([str(t) for t in r.task_ids], ids,
                                                      "the roster", "the runs") + ")")
        # the roster's unplaced block (and the conventional name "unplaced") is one shared
        # resampling block but no geographic identity; it is labelled UNPLACED so that every
        # consumer (census, ODD bins, compare_primary_metrics) counts it as unknown alike
        unplaced = {r.unplaced_block, UNPLACED} - {None}
        blocks = [UNPLACED if b in unplaced else b for b in r.blocks]
        labels = [None if b is None or b == UNPLACED else b for b in blocks]
        src = {"source": "roster", "roster": str(Path(roster).resolve()), "sha256": r.sha256,
               "format": r.format, "rule": r.block_rule, "rule_version": r.block_rule_version,
               "sealed": r.sealed, "parent": r.parent,
               "label": "sealed roster" if r.sealed else "unsealed roster (passage-roster-v1: no "
                                                         "declared block rule)"}
    census = block_census(labels)
    unknown = any(b is None for b in blocks)
    known = {b for b in labels if b is not None}
    status = "available" if (not unknown and len(known) >= 2) else "unknown"
    reason = None
    if unknown:
        reason = "some tasks have no block identity"
    elif len(known) < 2:
        reason = f"{len(known)} known block(s); at least two are needed"
    return {**src, "labels": blocks, "census": jsonable(census), "uncertainty_status": status,
            "reason": reason}


# --------------------------------------------------------------------------- #
# contrasts
# --------------------------------------------------------------------------- #

#: what a contrast without an interval reports (of the seed-mean result's ``to_dict()``)
ESTIMATE_KEYS = ("delta", "ci_low", "ci_high", "ci_available", "statistic", "n_a", "n_b")


def _serialise(result, labels) -> dict:
    """JSON form of a stats seed-mean result, its per-seed entries keyed by pair label."""
    d = result.to_dict()
    d["per_seed"] = {lab: d["per_seed"][str(k)] for k, lab in zip(result.per_seed, labels)}
    return jsonable(d)


def _estimates_only(d: dict) -> dict:
    """A serialised result without an interval: estimates and counts only."""
    per = {lab: {k: v for k, v in p.items() if k in ESTIMATE_KEYS and k != "statistic"}
           for lab, p in d["per_seed"].items()}
    return {**{k: d[k] for k in ESTIMATE_KEYS}, "per_seed": per}


def contrast(xa: list, xb: list, labels: list, statistic, nan_policy: str, blocks, boot: dict,
             available: bool) -> dict:
    """Seed-mean contrast over the pairs (per pair too) with a block interval when
    ``available``; otherwise estimates only (the seed-mean result without draws)."""
    keys = tuple(range(len(labels)))
    if available:
        try:
            r = seed_mean_bootstrap(dict(zip(keys, xa)), dict(zip(keys, xb)), statistic=statistic,
                                    blocks=blocks, seeds=keys, n_bootstrap=boot["n"],
                                    alpha=boot["alpha"], seed=boot["seed"], nan_policy=nan_policy,
                                    sharding=boot.get("sharding"))
        except ValueError as e:
            raise CompareError(f"bootstrap of {statistic}: {e}") from None
        return _serialise(r, labels)
    no_draws = np.zeros((0, len(keys)))
    r = seed_mean_result([np.asarray(x, np.float64) for x in xa],
                         [np.asarray(x, np.float64) for x in xb], no_draws, no_draws,
                         parse_statistic(statistic), seeds=keys, alpha=boot["alpha"],
                         n_bootstrap=0, return_draws=False)
    return _estimates_only(_serialise(r, labels))


def primary_contrasts(RA: list, RB: list, labels: list, blocks, boot, available,
                      computed=None) -> dict:
    """The six primary contrasts; ``computed``: the metrics' seed-mean results of a
    :func:`~passage_jax.stats.compare_primary_metrics` call over the same pairs, used as
    they are (None: one seed-mean bootstrap per metric)."""
    out = {}
    for metric in PRIMARY_METRICS:
        if computed is not None:
            c = _serialise(computed[metric], labels)
        else:
            f, q, pol = METRIC_SPEC[metric]
            stat = "mean" if q is None else q
            xa = [np.asarray(r[f], np.float64) for r in RA]
            xb = [np.asarray(r[f], np.float64) for r in RB]
            c = contrast(xa, xb, labels, stat, pol, blocks, boot, available)
        c["direction"] = DIRECTIONS[metric]
        out[metric] = c
    return out


def method_summary(score: dict) -> dict:
    m = score["metrics"]
    return {"primary": m["primary"], "n_tasks": m["n_tasks"], "n_path_valid": m["n_path_valid"],
            "connected_rate": m["connected_rate"],
            "mean_traversals_given_violation": m["mean_traversals_given_violation"],
            "regret_summary": m["regret_summary"], "status_counts": m.get("status_counts"),
            "latency_warm": (m.get("latency") or {}).get("warm"),
            "components": m.get("components")}


def geometry_intersection(RA, RB, labels, blocks, boot, available) -> dict:
    counts = {}
    xa = {"assd": [], "h95": []}
    xb = {"assd": [], "h95": []}
    empty = []
    for lab, ra, rb in zip(labels, RA, RB):
        both = ra["valid_path"].astype(bool) & rb["valid_path"].astype(bool)
        counts[lab] = {"n_tasks": int(both.size), "n_valid_a": int(ra["valid_path"].sum()),
                       "n_valid_b": int(rb["valid_path"].sum()), "n_both_valid": int(both.sum())}
        if not both.any():
            empty.append(lab)
        for g in ("assd", "h95"):
            xa[g].append(np.where(both, ra[g], np.nan))
            xb[g].append(np.where(both, rb[g], np.nan))
    out = {"counts": counts, "empty_intersection": empty}
    for g in ("assd", "h95"):
        if empty:
            out[f"{g}_mean"] = {"delta": None, "ci_available": False,
                                "reason": f"empty both-valid intersection for {empty}"}
        else:
            out[f"{g}_mean"] = contrast(xa[g], xb[g], labels, "mean", "omit", blocks, boot,
                                        available)
    return out


def latency_contrast(RA, RB, labels, blocks, boot, available) -> dict:
    """Median request-time contrast of the quality repeat (secondary). A request without a
    recorded time (a censored one from an external runner) makes it unavailable rather than
    refusing the whole comparison: dropping it would bias the median down."""
    note = ("median request time of the quality repeat; timeouts enter at their recorded time "
            "(treated as finite)")
    missing = {lab: int(np.count_nonzero(~np.isfinite(np.asarray(r["latency_ms"], np.float64))))
               for side in (RA, RB) for lab, r in zip(labels, side)}
    if any(missing.values()):
        bad = sorted(lab for lab, k in missing.items() if k)
        return {"delta": None, "ci_low": None, "ci_high": None, "ci_available": False,
                "statistic": "median", "note": note,
                "reason": f"requests without a recorded time in pair(s) {bad}"}
    out = contrast([r["latency_ms"] for r in RA], [r["latency_ms"] for r in RB], labels,
                   "median", "raise", blocks, boot, available)
    out["note"] = note
    return out


# --------------------------------------------------------------------------- #
# ODD bins
# --------------------------------------------------------------------------- #

def read_odd_spec(path) -> dict:
    p = Path(path)
    data = read_doc(p, CompareError, "odd spec", yaml_allowed=True)
    where = f"odd spec {p}"
    if not isinstance(data, dict) or "stratifiers" not in data:
        raise CompareError(f"{where}: expected a mapping with 'stratifiers'")
    extra = set(data) - {"format", "stratifiers"}
    if extra:
        raise CompareError(f"{where}: unknown key(s) {sorted(extra)}")
    if data.get("format", ODD_FORMAT) != ODD_FORMAT:
        raise CompareError(f"{where}: format must be {ODD_FORMAT!r}")
    strat = data["stratifiers"]
    if not isinstance(strat, dict) or not strat:
        raise CompareError(f"{where}: 'stratifiers' must map stratifier names to bin edges")
    out = {}
    for name, edges in strat.items():
        if name not in STRATIFIERS:
            raise CompareError(f"{where}: stratifier {name!r} is not one of {list(STRATIFIERS)}")
        if not isinstance(edges, list) or len(edges) < 2 or not all(
                isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e)
                for e in edges):
            raise CompareError(f"{where}: stratifiers.{name}: need a list of at least two "
                               f"finite numbers (bin edges)")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise CompareError(f"{where}: stratifiers.{name}: edges must increase strictly")
        out[name] = [float(e) for e in edges]
    return {"path": str(p.resolve()), "sha256": sha256_file(p),
            "stratifiers": out}


def bin_index(values: np.ndarray, edges: list) -> np.ndarray:
    """Bin of each value: i for edges[i] <= v < edges[i+1] (the last bin is
    closed), -1 outside the edges or NaN."""
    e = np.asarray(edges)
    v = np.asarray(values, np.float64)
    i = np.searchsorted(e, v, side="right") - 1
    i = np.where(v == e[-1], len(e) - 2, i)
    bad = ~np.isfinite(v) | (v < e[0]) | (v > e[-1])
    return np.where(bad, -1, i)


def odd_bins(spec: dict, R0: dict, RA, RB, labels, blocks, boot) -> dict:
    names = list(spec["stratifiers"])
    idx = {n: bin_index(R0[f"stratum_{n}"], spec["stratifiers"][n]) for n in names}
    outside = np.zeros(len(blocks), bool)
    for n in names:
        outside |= idx[n] < 0
    bins = []
    for combo in itertools.product(*[range(len(spec["stratifiers"][n]) - 1) for n in names]):
        mask = ~outside
        desc = {}
        for n, j in zip(names, combo):
            mask &= idx[n] == j
            e = spec["stratifiers"][n]
            last = j == len(e) - 2
            desc[n] = f"[{e[j]:g}, {e[j + 1]:g}{']' if last else ')'}"
        sel = np.flatnonzero(mask)
        entry = {"bin": desc, "n_tasks": int(sel.size)}
        if sel.size == 0:
            entry["support"] = "empty"
            bins.append(entry)
            continue
        bl = [blocks[i] for i in sel]
        known = {b for b in bl if b is not None and b != UNPLACED}
        avail = len(known) >= 2 and all(b is not None for b in bl)
        entry["n_blocks"] = len(set(bl))
        entry["uncertainty_status"] = "available" if avail else "unknown"
        ra = [{k: v[sel] for k, v in r.items()} for r in RA]
        rb = [{k: v[sel] for k, v in r.items()} for r in RB]
        entry["valid"] = {lab: {"n_valid_a": int(a["valid_path"].sum()),
                                "n_valid_b": int(b["valid_path"].sum())}
                          for lab, a, b in zip(labels, ra, rb)}
        entry["contrasts"] = _odd_contrasts(ra, rb, labels, bl, boot, avail)
        bins.append(entry)
    return {"spec": spec, "n_outside_support": int(outside.sum()), "bins": bins,
            "note": "occupied bins describe support only; they do not establish independence, "
                    "representativeness or a causal geographic effect"}


def _odd_contrasts(ra, rb, labels, bl, boot, avail):
    out = {}
    for metric in PRIMARY_METRICS:
        f, q, pol = METRIC_SPEC[metric]
        xa = [r[f].astype(np.float64) for r in ra]
        xb = [r[f].astype(np.float64) for r in rb]
        if pol == "omit" and any(not np.isfinite(x).any() for x in xa + xb):
            out[metric] = {"delta": None, "ci_available": False,
                           "reason": "a method has no valid route in this bin"}
            continue
        out[metric] = contrast(xa, xb, labels, "mean" if q is None else q, pol, bl, boot, avail)
    return out


def attribution_of(A: dict, B: dict) -> dict | None:
    """The component-attribution table of the two runs when either declares a
    ``component_control`` (:mod:`passage_jax.evaluate.attribution`); None otherwise."""
    if not any(s["manifest"].get("component_control") for side in (A, B)
               for s in side["seeds"].values()):
        return None
    try:
        entries = [run_entry(side["path"], f"{n}: {side['method_name']}")
                   for n, side in (("A", A), ("B", B))]
    except AttributionError as e:
        raise CompareError(str(e)) from None
    return attribution_rows(entries)


# --------------------------------------------------------------------------- #
# entry point
# --------------------------------------------------------------------------- #

def compare_runs(a, b, output, *, n_resamples: int = DEFAULT_RESAMPLES, alpha: float = 0.05,
                 bootstrap_seed: int = 0, roster=None, roster_sha256=None, odd_spec=None,
                 require_identical_limits: bool = False, force: bool = False,
                 shard_draws: bool = False, allow_noncanonical: bool = False,
                 paired_test: str | None = None, test_evidence=None,
                 randomization_draws: int = 9999, allow_precision_mix: bool = False) -> dict:
    """Paired comparison of two scored runs written to ``output``. ``shard_draws`` splits the
    bootstrap draws over all local devices (``sharding="auto"``); results do not depend on it.
    A run under the canonical inference protocol is paired with a noncanonical one only with
    ``allow_noncanonical`` (:class:`NoncanonicalPairing` otherwise).

    The confirmatory test: ``paired_test="randomization"`` runs the block randomization test
    on the six primary metrics (``randomization_draws`` random swap patterns from
    ``bootstrap_seed`` when the blocks are more than 12; all patterns otherwise);
    ``test_evidence`` reads the six p-values, the test's name and assumptions from a file
    (:func:`read_test_evidence`). Either feeds Holm in ``compare_primary_metrics``, and the
    decision and votes land in ``primary_comparison``; ``confirmatory`` records where the
    p-values came from. Both need the three default seeds on both runs and known blocks
    (:class:`TestEvidenceError` otherwise)."""
    output = Path(output)
    if output.is_dir():
        raise OutputIsFolder(f"{output} is a folder; --output names the comparison file to write "
                             f"(a folder is never replaced, with or without --force)")
    if output.exists() and not force:
        raise OutputExists(f"{output} exists; choose a new file")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InvalidResamples(f"the number of bootstrap resamples must be a positive integer, "
                               f"got {n_resamples!r}")
    if roster_sha256 is not None and roster is None:
        raise RosterHashMissing("a roster sha256 is given without a roster")
    if paired_test is not None and test_evidence is not None:
        raise TestEvidenceError("give either a paired test to run or a test evidence file, not both")
    if paired_test is not None and paired_test not in PAIRED_TESTS:
        raise TestEvidenceError(f"unknown paired test {paired_test!r}; choose one of "
                                f"{list(PAIRED_TESTS)} or supply a test evidence file")
    if isinstance(randomization_draws, bool) or not isinstance(randomization_draws, int) \
            or randomization_draws < 1:
        raise TestEvidenceError(f"the number of randomization draws must be a positive integer, "
                                f"got {randomization_draws!r}")
    evidence = read_test_evidence(test_evidence) if test_evidence is not None else None
    odd = read_odd_spec(odd_spec) if odd_spec is not None else None
    A, B = load_side(a), load_side(b)
    precision = check_precision(A, B, allow_precision_mix)
    shared = check_identity(A, B, precision_mix=precision["mixed"])
    protocols = check_protocols(A, B, allow_noncanonical)
    lim = check_limits(A, B, require_identical_limits)
    pairs, seed_mean = pairs_of(A, B)
    labels = [p[0] for p in pairs]
    RA = [quality_rows(A["seeds"][p[1]]) for p in pairs]
    RB = [quality_rows(B["seeds"][p[2]]) for p in pairs]
    ids = [str(s) for s in RA[0]["sample_id"]]
    for r in RA + RB:
        if [str(s) for s in r["sample_id"]] != ids:
            raise CompareError("per_sample.npz rows are not in the runs' task order")
    if any((r["cluster_id"] != RA[0]["cluster_id"]).any() for r in RB):
        raise CompareError("the two runs assign different geographic blocks to the same tasks")
    roles = {n: split_role_of(S) for n, S in (("A", A), ("B", B))}
    roster, roster_sha256, roster_origin = bound_roster(A, B, roster, roster_sha256)
    blk = blocks_for(ids, RA[0]["cluster_id"], roster, roster_sha256)
    blk["roster_origin"] = roster_origin
    avail = blk["uncertainty_status"] == "available"
    boot = {"n": int(n_resamples), "alpha": float(alpha), "seed": int(bootstrap_seed),
            "sharding": "auto" if shard_draws else None}
    blocks = blk["labels"]
    official, computed, confirm = None, None, None
    canonical = seed_mean and tuple(sorted(A["seeds"])) == tuple(DEFAULT_SEEDS) and avail
    if not canonical and (paired_test is not None or evidence is not None):
        why = (f"known blocks ({blk['reason']})" if not avail else
               f"the seeds {list(DEFAULT_SEEDS)} on both runs (A {sorted(A['seeds'])}, "
               f"B {sorted(B['seeds'])})")
        raise TestEvidenceError(f"the confirmatory test compares the seed-mean contrast of the six "
                                f"primary metrics and needs {why}")
    if canonical:
        recs = []
        for R in (RA, RB):
            recs.append({int(lab): {"task_id": ids, **{f: R[i][f] for f in (
                "regret", "assd", "h95", "success", "obstacle_violation", "valid_path")}}
                for i, lab in enumerate(labels)})
        confirm = confirmatory_inputs(recs, blocks, ids, paired_test=paired_test, evidence=evidence,
                                      randomization_draws=randomization_draws, seed=bootstrap_seed,
                                      sharding=boot["sharding"])
        test = ({} if confirm is None else
                {k: confirm[k] for k in ("p_values", "paired_test", "test_assumptions")})
        try:
            cmp = compare_primary_metrics(recs[0], recs[1], blocks, n_bootstrap=n_resamples,
                                          alpha=alpha, seed=bootstrap_seed, task_ids=ids,
                                          sharding=boot["sharding"], **test)
            official, computed = jsonable(cmp.to_dict()), cmp.deltas
        except ValueError as e:
            if confirm is not None:
                raise TestEvidenceError(f"confirmatory comparison: {e}") from None
            official = {"unavailable": str(e)}
        if confirm is not None:
            confirm.update({k: official[k] for k in ("inference_status", "decision", "winner",
                                                     "votes", "holm")})
            confirm["family_alpha"] = FAMILY_ALPHA
    contrasts = primary_contrasts(RA, RB, labels, blocks, boot, avail, computed)
    geometry = geometry_intersection(RA, RB, labels, blocks, boot, avail)
    latency = latency_contrast(RA, RB, labels, blocks, boot, avail)
    result = {
        "format": COMPARE_FORMAT,
        "created_utc": utc_now(),
        "runs": {n: {"path": s["path"], "method_name": s["method_name"],
                     "seeds": sorted(s["seeds"]),
                     "canonical": bool(protocols[n].get("canonical", True)),
                     "inference_protocol": protocols[n],
                     "folders": {str(k): str(v["folder"].resolve()) for k, v in s["seeds"].items()}}
                 for n, s in (("A", A), ("B", B))},
        "identity": {"n_tasks": len(ids), "sample_ids": ids,
                     "tasks_sha256": shared["tasks"]["tasks_sha256"], "data": shared["data"],
                     "references": shared["references"],
                     "timing_profile": shared["timing_profile"]},
        "procedure_limits": lim,
        "reference_precision": precision,
        "split_roles": roles,
        "test_set_result": all(r["split_role"] == "test" and r["calibration_decisions_sha256"]
                               for r in roles.values()),
        "inference_protocols": protocols,
        "pairs": [{"label": p[0], "seed_a": p[1], "seed_b": p[2]} for p in pairs],
        "seed_mean": bool(seed_mean),
        "blocks": {k: v for k, v in blk.items() if k != "labels"},
        "bootstrap": {"n_resamples": int(n_resamples), "alpha": float(alpha),
                      "seed": int(bootstrap_seed),
                      "interval": "percentile over paired whole-block draws"},
        "methods": {n: {"method_name": s["method_name"],
                        "per_seed": {p[0]: method_summary(s["seeds"][p[1 if n == "A" else 2]])
                                     for p in pairs}}
                    for n, s in (("A", A), ("B", B))},
        "contrasts": contrasts,
        "valid_route_denominators": geometry["counts"],
        "geometry_both_valid": {k: v for k, v in geometry.items() if k != "counts"},
        "latency_contrast": latency,
        "primary_comparison": official,
        "confirmatory": confirm,
        "odd": None if odd is None else odd_bins(odd, RA[0], RA, RB, labels, blocks, boot),
        "attribution": attribution_of(A, B),
    }
    result = jsonable(result)
    atomic_write_json(output, result)
    return result
