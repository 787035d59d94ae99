"""What a run records about where its tasks and decisions come from (docs/runner.md,
"seed-<seed>/manifest.json", ``provenance``): the role of its split, the calibration
decisions frozen before a test run, the determinism claim, the container digest, the
roster it was admitted with, and the evaluator's source commit.

* ``split_role``: ``development``, ``calibration``, ``validation`` or ``test`` (the spec
  checks that the role fits the split); ``null`` is recorded as ``undeclared``.
* ``calibration_decisions``: the file's path and the sha256 of its canonical JSON
  (keys sorted, no whitespace, UTF-8), so the same decisions written differently
  hash the same. A ``test`` run cannot start without it.
* ``roster``: a sealed roster (path and sha256, :func:`passage_jax.stats.read_roster`)
  whose ordered task ids must equal the admitted scene ids; its format, whether it
  is sealed (``passage-roster-v1`` files are *unsealed*: no block rule) and, for a
  derived roster, its parent.
* ``evaluator_commit``: ``git rev-parse HEAD`` of the source checkout the package
  runs from, with a ``dirty`` flag; ``null`` when the package is not a git checkout.
* ``planner_path`` (when the command put folders first on the import path for the
  planner: ``run``, ``conform``, ``bench``): ``searched``, those folders (the spec's
  own, then each ``--planner-path``), and ``module_folder``, the one that held the
  planner's module (``null``: the rest of the import path did).

Both files are read bounded: the calibration decisions at most
:data:`passage_jax.run.specification.SPEC_MAX_BYTES` (no YAML aliases), a roster at most
:data:`ROSTER_MAX_BYTES`; a larger file is refused unread, naming it.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import subprocess
from pathlib import Path

from passage_jax.fileio import read_document
from passage_jax.run.specification import SPEC_MAX_BYTES, planner_path_record
from passage_jax.stats.roster import RosterError, read_roster

__all__ = ["ProvenanceError", "run_provenance", "canonical_json_sha256", "evaluator_commit",
           "roster_record", "calibration_record", "UNDECLARED", "ROSTER_MAX_BYTES", "test_admission_recorded"]

UNDECLARED = "undeclared"
#: the largest roster file read, in bytes (about 900,000 task records)
ROSTER_MAX_BYTES = 64 << 20


#: what ``run`` found at the test admission gate (:mod:`passage_jax.run.admission.gate`), set
#: for the duration of a launch by :func:`test_admission_recorded`
_TEST_ADMISSION: contextvars.ContextVar = contextvars.ContextVar("test_admission", default=None)


@contextlib.contextmanager
def test_admission_recorded(record: dict | None):
    """Within the block, a run's provenance carries ``test_admission: record`` (nothing
    when ``record`` is None)."""
    token = _TEST_ADMISSION.set(record)
    try:
        yield
    finally:
        _TEST_ADMISSION.reset(token)


class ProvenanceError(RuntimeError):
    """A provenance input is missing or does not match the run (names the file)."""


def canonical_json_sha256(obj) -> str:
    """sha256 of ``obj`` as canonical JSON (sorted keys, no whitespace, UTF-8)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def calibration_record(path) -> dict | None:
    if path is None:
        return None
    doc = read_document(path, ProvenanceError, "calibration decisions", yaml_allowed=True,
                        max_bytes=SPEC_MAX_BYTES)
    if not isinstance(doc, dict) or not doc:
        raise ProvenanceError(f"calibration decisions {path}: must be a non-empty mapping of "
                              f"the decisions frozen on calibration")
    try:
        digest = canonical_json_sha256(doc)
    except ValueError as e:
        raise ProvenanceError(f"calibration decisions {path}: {e}") from None
    return {"path": str(Path(path).resolve()), "canonical_sha256": digest}


def roster_record(path, sha256, sample_ids) -> dict | None:
    """The roster a run is bound to, read sealed and checked against ``sample_ids``."""
    if path is None:
        return None
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise ProvenanceError(f"roster {path}: cannot read: {e.strerror or e}") from None
    if size > ROSTER_MAX_BYTES:
        raise ProvenanceError(f"roster {path}: {size:,} bytes, larger than the "
                              f"{ROSTER_MAX_BYTES:,}-byte limit for a roster; refused unread")
    try:
        r = read_roster(path, sha256=sha256)
    except (RosterError, OSError) as e:
        raise ProvenanceError(f"roster {path}: {e}") from None
    if list(r.task_ids) != list(sample_ids):
        first = next((i for i, (a, b) in enumerate(zip(r.task_ids, sample_ids)) if a != b),
                     min(len(r.task_ids), len(sample_ids)))
        raise ProvenanceError(
            f"roster {path}: its {len(r.task_ids)} task ids are not the run's {len(sample_ids)} "
            f"ordered scene ids (first difference at position {first})")
    return {"path": str(Path(path).resolve()), "sha256": r.sha256, "format": r.format,
            "sealed": r.sealed, "parent": r.parent}


def evaluator_commit(root=None) -> dict | None:
    """``{"commit", "dirty"}`` of the git checkout holding the package, or None."""
    root = Path(root) if root else Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                 "passage_jax"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def run_provenance(spec, sample_ids) -> dict:
    """The provenance block of a run's manifest (ProvenanceError when an input is bad);
    ``test_admission`` only when the launch recorded one (:func:`test_admission_recorded`);
    ``planner_path`` only when the launch put folders first on the import path for the
    planner (:func:`passage_jax.run.specification.planner_path.planner_path_record`)."""
    out = {
        "split_role": spec.split_role or UNDECLARED,
        "split": spec.split,
        "calibration_decisions": calibration_record(spec.calibration_decisions),
        "determinism": spec.determinism,
        "container_digest": spec.container_digest,
        "roster": roster_record(spec.roster, spec.roster_sha256, sample_ids),
        "evaluator_commit": evaluator_commit(),
    }
    if _TEST_ADMISSION.get() is not None:
        out["test_admission"] = _TEST_ADMISSION.get()
    searched = planner_path_record(spec.inference)
    if searched is not None:
        out["planner_path"] = searched
    return out
