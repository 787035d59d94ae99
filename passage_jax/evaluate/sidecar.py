"""The bench sidecar (docs/scoring.md; docs/contract.md §7): what a reader needs to place a scored run.

``python -m cli bench --spec S`` runs the spec through :func:`passage_jax.run.run_spec`,
scores it with :func:`passage_jax.evaluate.score_run`, then writes
``sidecar.json`` from :func:`sidecar`: the evaluated subset (sample ids and their
hash), the dataset identity (root, revision, shard hashes), seeds, inference
kwargs per seed, hardware, timing settings, precision, the evaluator's source
hash, the six primary metrics per seed and their seed mean, the timing profile and
boundary and each seed's ``validation_recost_ms`` block (as in ``metrics.json``); and
from the run's provenance (:mod:`passage_jax.run.loop`): the split role, the canonical-JSON
sha256 of the calibration decisions (null without), the determinism claim (default
``non_deterministic``), the evaluator's git commit when it runs from a checkout, the
roster and the container digest (the spec's ``container_digest``, the argument or
``PASSAGE_CONTAINER_DIGEST``; null when none is given).

Without an output folder the results go to :func:`default_output`, a fresh
folder ``<results_root>/<method>-<UTC timestamp>`` (a suffix is added when that
name is taken); an existing run is never overwritten.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
from pathlib import Path

import numpy as np

from passage_jax.contract import PRIMARY_METRICS
from passage_jax.evaluate.score import PER_SAMPLE_FIELDS, PER_SAMPLE_SCALARS, read_json, seed_folders
from passage_jax.fileio import sha256_file, utc_now
from passage_jax.protocol.records import code_hash
from passage_jax.protocol.runfolder import MANIFEST, METRICS, PATHS, PER_SAMPLE, RECEIPT, REFERENCES, REQUESTS

__all__ = ["sidecar", "default_output", "SIDECAR_FORMAT", "CONTAINER_ENV", "SEED_FILES"]

SIDECAR_FORMAT = "passage-jax-bench-sidecar-v1"
CONTAINER_ENV = "PASSAGE_CONTAINER_DIGEST"
#: the files of a scored seed folder whose sha256 the sidecar records
SEED_FILES = (MANIFEST, REQUESTS, PATHS, REFERENCES, PER_SAMPLE,
              METRICS, RECEIPT)


def default_output(spec, now=None) -> Path:
    """A fresh folder ``<results_root>/<method_name>-<UTC timestamp>`` (``-2``, ``-3`` ...
    when taken), as an absolute path (``results_root`` is resolved from the working
    directory; ``method_name`` is a plain name, checked when the spec was loaded)."""
    now = now or _dt.datetime.now(_dt.UTC)
    root = Path(os.path.abspath(spec.results_root))
    base = root / f"{spec.method_name}-{now.strftime('%Y%m%dT%H%M%SZ')}"
    if base.parent != root or str(spec.method_name).startswith("."):
        raise ValueError(f"method_name {str(spec.method_name)[:200]!r} is not a plain name: the "
                         f"results would not be a folder directly under results_root {root}")
    out, k = base, 1
    while out.exists():
        k += 1
        out = base.with_name(f"{base.name}-{k}")
    return out


def _seed_mean(scores: dict) -> dict:
    out = {}
    for k in PRIMARY_METRICS:
        vals = [m["primary"][k] for m in scores.values()]
        out[k] = (float(np.mean(vals)) if vals and all(v is not None for v in vals) else None)
    return out


def _subset(data: dict) -> dict:
    """The evaluated subset: its sample ids' hash, task hash and data settings."""
    ids = list(data["sample_ids"])
    return {"n_tasks": len(ids), "sample_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "tasks_sha256": data.get("tasks_sha256"), "resolution": data["resolution"],
            "split": data["split"], "cost_model": data["cost_model"],
            "task_variant": data["task_variant"], "n_samples": data.get("n_samples")}


def _dataset(data: dict) -> dict:
    return {"root": data.get("dataset_root"), "path": data.get("dataset_path"),
            "repo": data.get("dataset_repo"), "revision": data.get("dataset_revision"),
            "shards": data.get("shards")}


def _spec_blocks(spec) -> dict:
    """The spec's identity: method, family, architecture, the spec and its file."""
    return {"method_name": spec.method_name, "family": spec.family,
            "architecture": spec.architecture, "spec": spec.to_dict(), "spec_sha256": spec.sha256(),
            "spec_file": {"path": str(Path(spec.source).resolve()),
                          "sha256": sha256_file(spec.source)} if Path(spec.source).is_file() else None}


def _scores_blocks(scores: dict) -> dict:
    """Precision, evaluator, the six metrics per seed and their seed mean, and the counts."""
    return {"precision": {name: s.get("precision") for name, s in scores.items()},
            "evaluator": code_hash(),
            "metrics": {name: s["primary"] for name, s in scores.items()},
            "metrics_seed_mean": _seed_mean(scores),
            "counts": {name: {"n_tasks": s["n_tasks"], "n_path_valid": s["n_path_valid"],
                              "status_counts": s.get("status_counts")} for name, s in scores.items()}}


def _timing_blocks(scores: dict) -> dict:
    """The timing profile and boundary (the first seed's: a run's seeds share them) and
    each seed's ``validation_recost_ms`` block (``null`` for a seed scored before it
    existed)."""
    first = next(iter(scores.values()))
    profile = first.get("timing_profile") or {}
    return {"timing_profile": profile,
            "timing_boundary": first.get("timing_boundary", profile.get("timing_boundary")),
            "validation_recost_ms": {name: s.get("validation_recost_ms")
                                     for name, s in scores.items()}}


def _files(folders: list) -> dict:
    return {f.name: {n: sha256_file(f / n) for n in SEED_FILES} for f in folders}


def _provenance(m0: dict, container_digest) -> dict:
    """The run's provenance: split role, calibration decisions, determinism, commit, roster
    and the container digest (argument, recorded, or :data:`CONTAINER_ENV`)."""
    prov = m0.get("provenance") or {}
    cal = prov.get("calibration_decisions")
    digest = container_digest or prov.get("container_digest") or os.environ.get(CONTAINER_ENV)
    return {"split_role": prov.get("split_role", "undeclared"),
            "calibration_decisions_sha256": cal["canonical_sha256"] if cal else None,
            "calibration_decisions": cal,
            "determinism": prov.get("determinism", "non_deterministic"),
            "evaluator_commit": prov.get("evaluator_commit"),
            "roster": prov.get("roster"),
            "container_digest": digest or None}


def sidecar(output: Path, spec, scores: dict, container_digest=None) -> dict:
    """The sidecar of the scored run in ``output`` (``spec``: its RunSpec; ``scores``:
    what ``score_run`` returned)."""
    folders = seed_folders(output)
    manifests = {f.name: read_json(f / MANIFEST) for f in folders}
    m0 = next(iter(manifests.values()))
    data = m0["data"]
    return {
        "format": SIDECAR_FORMAT,
        "created_utc": utc_now(),
        **_spec_blocks(spec),
        "evaluated_subset": _subset(data),
        "dataset": _dataset(data),
        "references": m0.get("references"),
        "seeds": [m["seed"] for m in manifests.values()],
        "inference": spec.inference,
        "inference_format": spec.inference_format,
        "inference_kwargs": {str(m["seed"]): m.get("inference_kwargs") for m in manifests.values()},
        "checkpoints": {str(m["seed"]): m.get("checkpoints") for m in manifests.values()},
        "hardware": m0.get("hardware"),
        "device": m0.get("device"),
        "versions": m0.get("versions"),
        "timing": {**(m0.get("timing") or {}), "budget": m0.get("budget")},
        **_timing_blocks(scores),
        **_scores_blocks(scores),
        "files": _files(folders),
        "per_sample_fields": list(PER_SAMPLE_FIELDS),
        "per_sample_scalars": list(PER_SAMPLE_SCALARS),
        **_provenance(m0, container_digest),
    }
