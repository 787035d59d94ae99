"""The checks before two scored runs are paired: they must hold the same tasks, data,
references and timing profile (:func:`check_identity`), references of one arithmetic path
(:func:`check_precision`), inference protocols of one kind (:func:`check_protocols`) and,
when asked for, the same procedure limits (:func:`check_limits`).

The timing profile is the manifest's ``timing_profile`` name alone (a run written before it
was recorded reads as ``complete_request_v1``): it decides what a request time measures.
The timing boundary (in process or supervised under the default profile) and the timer
text are procedure limits: listed when they differ, refused only with identical limits
required.

A loaded run (a *side*, :func:`load_side`) is a frozen :class:`Side`: its path, each seed's
:class:`~passage_jax.evaluate.score.Score` and its method name.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from passage_jax.contract import BATCHED_PROFILE
from passage_jax.evaluate.compare._blocks import first_diff as _first_diff
from passage_jax.evaluate.compare._errors import (
    CompareError,
    LimitsDiffer,
    NoncanonicalPairing,
    PrecisionMismatch,
)
from passage_jax.evaluate.score import Score, ScoreError, load_score, seed_folders, timing_profile
from passage_jax.protocol.runfolder import MANIFEST

__all__ = ["LEGACY_PROTOCOL", "inference_protocol_of", "check_protocols", "Side", "load_side", "identity",
           "limits", "reference_precision", "check_precision", "check_identity", "check_limits",
           "split_role_of", "Checks", "check_runs", "run_timing_of"]


#: the inference protocol of a run recorded before protocols were recorded
LEGACY_PROTOCOL = {"name": "whole-scene (no tiling)", "settings": {"tiling": None}, "canonical": True,
                   "deviations": [], "recorded": False}


def inference_protocol_of(side: Side) -> dict:
    """The inference protocol of a loaded side (from its seed manifests'
    ``inference_protocol``; a run without one is canonical whole-scene inference);
    noncanonical when any seed is."""
    protos = [s.manifest.get("inference_protocol") for s in side.seeds.values()]
    protos = [{**p, "recorded": True} if isinstance(p, dict) else dict(LEGACY_PROTOCOL) for p in protos]
    bad = [p for p in protos if not p.get("canonical", True)]
    return bad[0] if bad else protos[0]


def check_protocols(A: Side, B: Side, allow_noncanonical: bool) -> dict:
    pa, pb = inference_protocol_of(A), inference_protocol_of(B)
    ca, cb = bool(pa.get("canonical", True)), bool(pb.get("canonical", True))
    if ca != cb and not allow_noncanonical:
        def label(n, p):
            return f"{n} {p.get('name')!r} ({'canonical' if p.get('canonical', True) else 'noncanonical'})"
        raise NoncanonicalPairing(f"the runs' inference protocols differ in kind: {label('A', pa)} vs "
                                  f"{label('B', pb)}; a canonical run is not paired with a noncanonical one")
    return {"A": pa, "B": pb, "allow_noncanonical": bool(allow_noncanonical)}


@dataclass(frozen=True)
class Side:
    """A scored run loaded for a comparison (:func:`load_side`)."""

    #: the run folder or seed folder, resolved
    path: str
    #: {seed: its :class:`~passage_jax.evaluate.score.Score`}
    seeds: dict
    #: the method name of its first seed's manifest
    method_name: str | None


def load_side(path) -> Side:
    """A scored run (run folder or seed folder) loaded as a :class:`Side`;
    :class:`CompareError` when it is not scored."""
    try:
        folders = seed_folders(path)
        scores = [load_score(f) for f in folders]
    except ScoreError as e:
        raise CompareError(str(e)) from None
    seeds = {}
    for s in scores:
        seed = int(s.manifest["seed"])
        seeds[seed] = s
    first = scores[0]
    return Side(path=str(Path(path).resolve()), seeds=seeds,
                method_name=first.manifest.get("method_name"))


def run_timing_of(score: Score) -> dict:
    """The timing profile, boundary and timer of a loaded seed score
    (:func:`~passage_jax.evaluate.score.timing_profile` of its manifest);
    :class:`CompareError` naming the manifest's field when it is malformed."""
    folder = score.folder
    where = Path(folder) / MANIFEST if folder is not None else MANIFEST
    try:
        return timing_profile(score.manifest, where)
    except ScoreError as e:
        raise CompareError(str(e)) from None


def identity(score: Score) -> dict:
    m = score.manifest
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
        "timing_profile": run_timing_of(score)["profile"],
        "batch_size": _batch_size(score),
    }


def _batch_size(score: Score):
    """The declared batch size of a run of the batched procedure (its spec's ``batch_size``),
    else None."""
    spec = score.manifest.get("spec")
    return spec.get("batch_size") if isinstance(spec, dict) else None


def procedure(profile: str, batch_size=None) -> str:
    """How a side was timed, in words: the batched procedure with its batch size, or the
    batch-one profile."""
    if profile == BATCHED_PROFILE:
        return f"{profile} (batches of {batch_size})"
    return f"{profile} (batch one)"


def limits(score: Score) -> dict:
    m = score.manifest
    t = m.get("timing") or {}
    timing = run_timing_of(score)
    budget = {k: v for k, v in (m.get("budget") or {}).items() if v is not None}
    return {"budget": budget,
            "deadline_ms": budget.get("wall_time_ms"),
            "latency_warmup": t.get("latency_warmup"),
            "latency_repeats": t.get("latency_repeats"),
            "quality_repeat_index": t.get("quality_repeat_index"),
            "timing_boundary": timing["timing_boundary"],
            "timer": timing["timer"],
            "device": m.get("device")}


def reference_precision(side: Side) -> dict:
    """The arithmetic path of a run's references (``references.precision`` in its manifests;
    runs written before it was recorded were float64) and its stated relative tolerance."""
    got = set()
    for sc in side.seeds.values():
        ref = sc.manifest.get("references") or {}
        got.add((ref.get("precision", "float64"), float(ref.get("precision_rtol", 1e-12))))
    if len(got) != 1:
        raise CompareError(f"{side.path}: its seeds record different reference precisions "
                           f"{sorted(got)}")
    path, rtol = got.pop()
    return {"path": path, "rtol": rtol}


def check_precision(A: Side, B: Side, allow_mix: bool) -> dict:
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
    ca = next(iter(A.seeds.values())).per_sample["oracle_cost"]
    cb = next(iter(B.seeds.values())).per_sample["oracle_cost"]
    if ca.shape != cb.shape or not np.allclose(ca, cb, rtol=rtol, atol=0.0):
        worst = float(np.max(np.abs(ca - cb) / np.maximum(np.abs(cb), 1e-300))) \
            if ca.shape == cb.shape else float("inf")
        raise PrecisionMismatch(f"the two runs' c* differ by {worst:.3g} relative, beyond the "
                                f"looser stated tolerance {rtol:g}")
    out["rtol"] = rtol
    return out


def check_identity(A: Side, B: Side, *, precision_mix: bool = False) -> dict:
    """Refuse mismatched runs; returns the shared identity. With ``precision_mix`` (runs
    whose references came from different arithmetic paths, c* checked within tolerance by
    :func:`check_precision`) the references' identity hash may differ."""
    ids = {}
    for name, side in (("A", A), ("B", B)):
        per = [identity(s) for s in side.seeds.values()]
        for p in per[1:]:
            if p != per[0]:
                raise CompareError(f"run {name} ({side.path}): its seed folders disagree on "
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
    batched = BATCHED_PROFILE in (a["timing_profile"], b["timing_profile"])
    if batched and (a["timing_profile"], a["batch_size"]) != (b["timing_profile"], b["batch_size"]):
        what = ("a batched run cannot be set against a batch-one run"
                if a["timing_profile"] != b["timing_profile"] else "the batch sizes differ")
        raise CompareError(f"{what}: A follows {procedure(a['timing_profile'], a['batch_size'])}, B "
                           f"{procedure(b['timing_profile'], b['batch_size'])}; their latencies "
                           f"time different things")
    if a["timing_profile"] != b["timing_profile"]:
        raise CompareError(f"timing profiles differ: A {a['timing_profile']} vs B "
                           f"{b['timing_profile']}")
    return a


def check_limits(A: Side, B: Side, require_identical: bool) -> dict:
    la = [limits(s) for s in A.seeds.values()]
    lb = [limits(s) for s in B.seeds.values()]
    a, b = la[0], lb[0]
    differ = sorted({k for x in la + lb for k in x if x[k] != a[k]})
    out = {"A": a, "B": b, "differ": differ, "required_identical": bool(require_identical)}
    if require_identical and differ:
        raise LimitsDiffer("limits differ and identical limits are required: "
                           + "; ".join(f"{k}: A {a[k]!r} vs B {b[k]!r}" for k in a if k in differ))
    return out


def split_role_of(side: Side) -> dict:
    """A run's split role and calibration-decisions hash (every seed must agree)."""
    got = set()
    for sc in side.seeds.values():
        prov = sc.manifest.get("provenance") or {}
        cal = prov.get("calibration_decisions") or {}
        got.add((prov.get("split_role", "undeclared"), cal.get("canonical_sha256")))
    if len(got) != 1:
        raise CompareError(f"{side.path}: its seeds record different split roles or calibration "
                           f"decisions {sorted(got, key=str)}")
    role, cal = got.pop()
    return {"split_role": role, "calibration_decisions_sha256": cal}


@dataclass(frozen=True)
class Checks:
    """What the checks of two runs established, each a block of the comparison file:
    ``precision`` (``reference_precision``), ``shared`` (the identity both runs hold),
    ``protocols`` (``inference_protocols``), ``limits`` (``procedure_limits``)."""
    precision: dict
    shared: dict
    protocols: dict
    limits: dict


def check_runs(A: Side, B: Side, options) -> Checks:
    """Every check of two loaded runs under ``options`` (a
    :class:`~passage_jax.evaluate.compare._options.CompareOptions`), in order: reference
    precision, identity, inference protocols, procedure limits."""
    precision = check_precision(A, B, options.allow_precision_mix)
    shared = check_identity(A, B, precision_mix=precision["mixed"])
    protocols = check_protocols(A, B, options.allow_noncanonical)
    lim = check_limits(A, B, options.require_identical_limits)
    return Checks(precision, shared, protocols, lim)
