"""The test admission gate (docs/admission.md, "The gate").

A spec with ``split_role: test`` may run only once everything it will be judged by is
fixed. :func:`admit_test` checks each condition and names every one that is unmet (not
only the first):

* ``spec``: the spec file reads and validates (a test spec whose only problem is a missing
  calibration-decisions file is validated without its role keys and checked on the rest);
* ``split_role``: the spec declares ``split_role: test``;
* ``calibration_decisions``: the decisions file frozen on calibration is given, reads as
  a non-empty mapping, and its canonical-JSON sha256 (:func:`canonical_json_sha256`)
  equals the declared one when one is declared; the receipt records it;
* ``roster``: a sealed roster (``passage-roster-v2``) is given with its sha256, the file
  has that sha256, and its ordered task ids are the spec's admitted scene ids (the
  ``n_samples`` prefix of the split); the receipt records the tasks' hash
  (``sample_id:input_hash`` lines), which binds the roster to the scenes' content;
* ``seeds``: exactly the three declared training seeds (:data:`DEFAULT_SEEDS`);
* ``checkpoints``: for a learned method (``family: learned``, a ``component_control``
  naming a checkpoint or a learned guide, or an ``inference_kwargs`` key naming a
  checkpoint) every seed declares an existing checkpoint file and no two seeds share
  one (repeated inference seeds do not replace independently trained checkpoints);
* ``dataset``: a hub dataset at an exact 40-hex ``dataset_revision``, or a local root
  whose split folder's shards are all read and their sha256 recorded in the receipt;
* ``result_folder``: the folder the run will write is new or empty and outside the
  dataset root;
* ``evaluator``: the evaluator's git work tree is clean, or an evaluator commit is
  declared (it must then be the checkout's HEAD when there is a checkout).

The receipt (:data:`RECEIPT_FORMAT`) is written atomically beside the result folder
(``<result folder>.admission.json``, :func:`default_receipt`) whether or not it is green.
``run`` of a test spec calls :func:`require_admission`: it refuses without a green receipt
for the same spec hash and result folder, with the calibration decisions and (local)
shards unchanged since admission, unless the run is told to go without admission (the
override is recorded in each seed manifest's ``provenance.test_admission``).

A green gate says the test run may proceed; it is not a reproducible entry
(``python -m cli check-entry``, :mod:`passage_jax.evaluate.entry_check`).
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.data import DataError, shard_files
from passage_jax.fileio import atomic_write_json, jsonable, one_line, read_document, sha256_file, utc_now
from passage_jax.protocol.records import tasks_sha256_of
from passage_jax.run.admission import checks as adm
from passage_jax.run.errors import RunError
from passage_jax.run.loop import (
    ProvenanceError,
    calibration_record,
    evaluator_commit,
    holds_run,
    output_folder,
    refuse_inside_dataset,
)
from passage_jax.run.specification import SPEC_MAX_BYTES, RunSpec, SpecError, parse_spec, shown
from passage_jax.stats.roster import RosterError, read_roster

__all__ = ["RECEIPT_FORMAT", "CONDITIONS", "OVERRIDE_FLAG", "GateResult", "TestAdmissionRefused",
           "admit_test", "default_receipt", "require_admission", "is_learned", "NOT_AN_ENTRY"]

RECEIPT_FORMAT = "passage-jax-test-admission-v1"
#: the conditions, in the order they are checked and reported
CONDITIONS = ("spec", "split_role", "calibration_decisions", "roster", "seeds", "checkpoints", "dataset",
              "result_folder", "evaluator")
#: the ``run`` flag that lets a test spec run without a green receipt (recorded)
OVERRIDE_FLAG = "--without-admission"
NOT_AN_ENTRY = ("a green admission gate says that this test run may proceed under its recorded "
                "scope; it is not a reproducible entry (python -m cli check-entry checks that)")
_HEX40 = re.compile(r"[0-9a-f]{40}")


class TestAdmissionRefused(RunError):
    """A test-role run has no green admission receipt that fits it (names the receipt)."""

    __test__ = False  # not a pytest test class


@dataclasses.dataclass
class GateResult:
    """What :func:`admit_test` found: the receipt (a dict) and where it was written."""

    receipt: dict
    path: Path

    @property
    def green(self) -> bool:
        return bool(self.receipt["green"])

    @property
    def unmet(self) -> list:
        return list(self.receipt["unmet"])


def default_receipt(result_folder) -> Path:
    """``<result folder>.admission.json``: beside the folder, which must stay empty for
    the run."""
    folder = Path(os.path.abspath(os.fspath(result_folder)))
    return folder.with_name(folder.name + ".admission.json")


def is_learned(spec: RunSpec) -> bool:
    """Whether the spec runs a learned method (see the module docstring)."""
    cc = spec.component_control or {}
    if (spec.family or "").strip().lower() == "learned":
        return True
    if cc.get("checkpoint_id") or cc.get("guide") == "learned" or cc.get("primary_learned"):
        return True
    return any(adm.CHECKPOINT_KEY.search(str(k)) for s in spec.seeds for k in spec.kwargs_for_seed(s))


class _Conditions:
    def __init__(self):
        self.rows: dict = {}

    def set(self, name: str, met: bool, detail: str, **record) -> None:
        self.rows[name] = {"condition": name, "met": bool(met), "detail": detail, **record}

    def list(self) -> list:
        return [self.rows.get(n, {"condition": n, "met": False,
                                  "detail": "not checked: the spec could not be read"})
                for n in CONDITIONS]


def _load(spec_path, conds: _Conditions) -> tuple[RunSpec | None, str | None]:
    """The spec, and why it is not valid as written (None: it is). A spec whose only
    problems are its role keys (a test spec without calibration decisions, a role that
    does not fit the split) is validated without them and checked on every condition."""
    try:
        raw = read_document(spec_path, SpecError, "spec", yaml_allowed=True, max_bytes=SPEC_MAX_BYTES)
    except SpecError as e:
        conds.set("spec", False, one_line(e, 400))
        return None, None
    try:
        spec = parse_spec(raw, str(Path(spec_path)))
        conds.set("spec", True, f"valid (sha256 {spec.sha256()})")
        return spec, None
    except SpecError as e:
        first = one_line(e, 400)
    if not isinstance(raw, dict):
        conds.set("spec", False, f"not valid: {first}")
        return None, first
    try:
        base = parse_spec({**raw, "split_role": None, "calibration_decisions": None},
                          str(Path(spec_path)))
    except SpecError:
        conds.set("spec", False, f"not valid: {first}")
        return None, first
    conds.set("spec", True, "valid apart from its role keys split_role and calibration_decisions "
              "(checked below); no spec hash is admitted until they are")
    role, cal = raw.get("split_role"), raw.get("calibration_decisions")
    return dataclasses.replace(base, split_role=role if isinstance(role, str) else None,
                               calibration_decisions=cal if isinstance(cal, str) else None), first


def _calibration_condition(spec: RunSpec, declared: str | None, conds: _Conditions) -> None:
    if spec.calibration_decisions is None:
        conds.set("calibration_decisions", False, "missing: a test run needs the file of calibration "
                  "decisions frozen before it (spec key calibration_decisions)")
        return
    try:
        cal = calibration_record(spec.calibration_decisions)
    except ProvenanceError as e:
        conds.set("calibration_decisions", False, one_line(e, 400))
        return
    if declared is not None and cal["canonical_sha256"] != declared.strip().lower():
        conds.set("calibration_decisions", False,
                  f"{spec.calibration_decisions}: canonical sha256 {cal['canonical_sha256']} is not "
                  f"the declared {shown(declared, 80)}: the decisions changed since they were frozen",
                  record=cal)
        return
    conds.set("calibration_decisions", True,
              f"frozen: canonical sha256 {cal['canonical_sha256']}"
              + (" (equals the declared hash)" if declared else " (recorded)"), record=cal)


def _tasks(spec: RunSpec, root):
    """The admitted scene ids and the tasks' hash (the data read and validated), or the
    reason they cannot be read."""
    try:
        tasks = adm.open_admitted_tasks(spec, root)
        tasks.release()
    except adm.AdmissionError as e:
        return None, None, one_line(e, 300)
    ids = list(tasks.ids)
    return ids, tasks_sha256_of(ids, tasks.input_hashes), None


def _roster_condition(spec: RunSpec, ids, tasks_hash, why_no_tasks, conds: _Conditions) -> None:
    if spec.roster is None:
        conds.set("roster", False, "missing: a test run needs a sealed roster (spec keys roster and "
                  "roster_sha256, a passage-roster-v2 file)")
        return
    try:
        r = read_roster(spec.roster, sha256=spec.roster_sha256)
    except (RosterError, OSError) as e:
        conds.set("roster", False, one_line(e, 400))
        return
    record = {"path": str(Path(spec.roster).resolve()), "sha256": r.sha256, "format": r.format,
              "sealed": r.sealed, "n_tasks": len(r.task_ids), "tasks_sha256": tasks_hash}
    if not r.sealed:
        conds.set("roster", False, f"roster {spec.roster}: {r.format} is unsealed (no block rule); "
                  f"a test run needs a sealed passage-roster-v2 roster", record=record)
        return
    if ids is None:
        conds.set("roster", False, f"roster {spec.roster}: the spec's scenes cannot be read to "
                  f"check it: {why_no_tasks}", record=record)
        return
    if list(r.task_ids) != list(ids):
        first = next((i for i, (a, b) in enumerate(zip(r.task_ids, ids)) if a != b),
                     min(len(r.task_ids), len(ids)))
        conds.set("roster", False, f"roster {spec.roster}: its {len(r.task_ids)} task ids are not the "
                  f"spec's {len(ids)} ordered scene ids (first difference at position {first})",
                  record=record)
        return
    conds.set("roster", True, f"sealed {r.format} roster, sha256 {r.sha256}, {len(ids)} tasks "
              f"equal to the admitted scene ids", record=record)


def _seeds_condition(spec: RunSpec, conds: _Conditions) -> None:
    seeds = list(spec.seeds)
    if sorted(seeds) != sorted(DEFAULT_SEEDS):
        conds.set("seeds", False, f"seeds {seeds} are not the three declared training seeds "
                  f"{list(DEFAULT_SEEDS)}", seeds=seeds)
    else:
        conds.set("seeds", True, f"the three declared training seeds {seeds}", seeds=seeds)


def _checkpoint_condition(spec: RunSpec, conds: _Conditions) -> None:
    if not is_learned(spec):
        conds.set("checkpoints", True, "not a learned method (family, component_control and "
                  "inference_kwargs name no checkpoint): no checkpoint required", learned=False)
        return
    try:
        files = adm.checkpoint_files(spec)
    except adm.AdmissionError as e:
        conds.set("checkpoints", False, one_line(e, 400), learned=True)
        return
    missing = [s for s in map(str, spec.seeds) if not files.get(s)]
    if missing:
        conds.set("checkpoints", False, f"learned method: seed(s) {missing} declare no checkpoint "
                  f"file (inference_kwargs_by_seed <seed>: {{checkpoint: FILE}})", learned=True,
                  files=files)
        return
    digests = {s: tuple(sorted(f["sha256"] for f in files[s].values())) for s in files}
    by_digest: dict = {}
    for s, d in digests.items():
        by_digest.setdefault(d, []).append(s)
    shared = [seeds for seeds in by_digest.values() if len(seeds) > 1]
    if shared:
        conds.set("checkpoints", False, f"learned method: seeds {shared[0]} use the same checkpoint "
                  f"file(s); each training seed needs its own independently trained checkpoint",
                  learned=True, files=files)
        return
    conds.set("checkpoints", True, f"learned method: one distinct checkpoint per seed "
              f"({', '.join(sorted(files))}), sha256 recorded", learned=True, files=files)


def _dataset_condition(spec: RunSpec, root, why_no_root, conds: _Conditions) -> None:
    if spec.dataset_path is None:
        rev = spec.dataset_revision
        if rev is not None and len(rev) == 40:
            conds.set("dataset", True, f"hub dataset {spec.dataset_repo} at revision {rev}",
                      record={"repo": spec.dataset_repo, "revision": rev})
        else:
            conds.set("dataset", False, "a hub dataset needs an exact 40-hex dataset_revision")
        return
    if root is None:
        conds.set("dataset", False, f"dataset_path {spec.dataset_path}: {why_no_root}")
        return
    try:
        shards = _shard_records(root, spec.resolution, spec.split)
    except (DataError, OSError) as e:
        conds.set("dataset", False, f"dataset {root}: its shards cannot be hashed: {one_line(e, 300)}")
        return
    conds.set("dataset", True, f"local root {root}: {len(shards)} shard(s) of "
              f"{spec.resolution}x{spec.resolution}/{spec.split} hashed and recorded",
              record={"root": str(root), "resolution": spec.resolution, "split": spec.split,
                      "shards": shards})


def _shard_records(root, resolution: int, split: str) -> list:
    """Every shard of the split folder: name, sha256 and size (what the receipt pins)."""
    return [{"name": p.name, "sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in shard_files(root, resolution, split)]


def _folder_condition(result_folder, root, conds: _Conditions) -> Path | None:
    try:
        folder = output_folder(result_folder)
    except RunError as e:
        conds.set("result_folder", False, one_line(e, 400))
        return None
    why = holds_run(folder)
    if why is None and root is not None:
        try:
            refuse_inside_dataset(folder, root, "result folder")
        except RunError as e:
            why = str(e)
    if why:
        conds.set("result_folder", False, f"not fresh: {why}", path=str(folder))
    else:
        conds.set("result_folder", True, f"{folder} is new or empty (no run there yet)",
                  path=str(folder))
    return folder


def _evaluator_condition(declared: str | None, evaluator_root, conds: _Conditions) -> None:
    found = evaluator_commit(evaluator_root)
    record = {"checkout": found, "declared_commit": declared}
    if declared is not None:
        d = declared.strip().lower()
        if not _HEX40.fullmatch(d):
            conds.set("evaluator", False, f"declared evaluator commit {shown(declared, 80)} is not "
                      f"40 hex characters", record=record)
        elif found is not None and found["commit"] != d:
            conds.set("evaluator", False, f"declared evaluator commit {d} is not the checkout's "
                      f"HEAD {found['commit']}", record=record)
        else:
            where = ("the checkout's HEAD" + (" (work tree not clean)" if found["dirty"] else "")
                     if found else "no git checkout to verify it against")
            conds.set("evaluator", True, f"declared evaluator commit {d}: {where}", record=record)
        return
    if found is None:
        conds.set("evaluator", False, "the evaluator does not run from a git checkout and no "
                  "evaluator commit is declared (--evaluator-commit)", record=record)
    elif found["dirty"]:
        conds.set("evaluator", False, f"the evaluator's git work tree is not clean (HEAD "
                  f"{found['commit']} with uncommitted changes under passage_jax/); commit them or "
                  f"declare the evaluator commit", record=record)
    else:
        conds.set("evaluator", True, f"clean git work tree at {found['commit']}", record=record)


def admit_test(spec_path, result_folder, *, receipt=None, calibration_sha256: str | None = None,
               evaluator_commit_declared: str | None = None, evaluator_root=None) -> GateResult:
    """Check every condition of the gate for the spec file ``spec_path`` and the folder
    ``result_folder`` the run will write; write the receipt (``receipt``, default
    :func:`default_receipt`) atomically and return it. ``calibration_sha256``: the
    decisions' canonical sha256 as frozen (optional); ``evaluator_commit_declared``: the
    evaluator commit declared instead of a clean work tree; ``evaluator_root``: the
    checkout to check (default: the one the package runs from)."""
    conds = _Conditions()
    spec, invalid = _load(spec_path, conds)
    root = folder = None
    if spec is not None:
        if spec.split_role == "test" and spec.split == "test":
            conds.set("split_role", True, "split_role: test on the test split")
        else:
            conds.set("split_role", False, f"split_role is {spec.split_role or 'undeclared'} on the "
                      f"{spec.split!r} split: the gate admits split_role: test specs of the test split"
                      + (f" ({invalid})" if invalid and spec.calibration_decisions else ""))
        _calibration_condition(spec, calibration_sha256, conds)
        why_root = None
        try:
            root = adm.resolve_root(spec)
        except adm.AdmissionError as e:
            why_root = one_line(e, 300)
        ids, tasks_hash, why = _tasks(spec, root) if root is not None else (None, None, why_root)
        _roster_condition(spec, ids, tasks_hash, why, conds)
        _seeds_condition(spec, conds)
        _checkpoint_condition(spec, conds)
        _dataset_condition(spec, root, why_root, conds)
    folder = _folder_condition(result_folder, root, conds)
    _evaluator_condition(evaluator_commit_declared, evaluator_root, conds)
    rows = conds.list()
    unmet = [r["condition"] for r in rows if not r["met"]]
    full_spec_ok = spec is not None and invalid is None
    body = {
        "format": RECEIPT_FORMAT,
        "created_utc": utc_now(),
        "green": not unmet,
        "unmet": unmet,
        "spec": {"path": str(Path(spec_path).resolve()),
                 "file_sha256": sha256_file(spec_path) if Path(spec_path).is_file() else None,
                 "spec_sha256": spec.sha256() if full_spec_ok else None,
                 "method_name": None if spec is None else spec.method_name},
        "result_folder": None if folder is None else str(folder),
        "conditions": rows,
        "statement": NOT_AN_ENTRY,
    }
    path = Path(receipt) if receipt is not None else default_receipt(
        folder if folder is not None else result_folder)
    atomic_write_json(path, jsonable(body))
    return GateResult(body, path)


# --------------------------------------------------------------------------- #
# run's side: the receipt a test run needs
# --------------------------------------------------------------------------- #

def _row(receipt: dict, name: str) -> dict:
    return next((r for r in receipt.get("conditions", []) if r.get("condition") == name), {})


def require_admission(spec: RunSpec, output, *, receipt=None, without: bool = False) -> dict | None:
    """What ``run`` records about the gate for ``spec`` run into ``output`` (None for a
    spec that is not ``split_role: test``). Without ``without``, the receipt (``receipt``,
    default :func:`default_receipt` of ``output``) must be green, for this spec's hash and
    this result folder, and the calibration decisions and local shards it recorded must
    be unchanged; :class:`TestAdmissionRefused` names what does not fit."""
    if spec.split_role != "test":
        return None
    if without:
        return {"status": "overridden", "flag": OVERRIDE_FLAG, "receipt": None, "utc": utc_now(),
                "note": "run without a green admission receipt, as the command line asked"}
    path = Path(receipt) if receipt is not None else default_receipt(output)
    hint = (f"; run python -m cli admit-test --spec {spec.source} --output {output} first, or pass "
            f"{OVERRIDE_FLAG} (recorded in the manifest)")
    if not path.is_file():
        raise TestAdmissionRefused(f"test admission receipt {path}: not found: a split_role: test "
                                   f"run needs a green receipt{hint}")
    body = read_document(path, TestAdmissionRefused, "test admission receipt", max_bytes=SPEC_MAX_BYTES)
    if not isinstance(body, dict) or body.get("format") != RECEIPT_FORMAT:
        raise TestAdmissionRefused(f"test admission receipt {path}: format is not {RECEIPT_FORMAT}")
    if body.get("green") is not True:
        raise TestAdmissionRefused(f"test admission receipt {path}: not green (unmet: "
                                   f"{', '.join(map(str, body.get('unmet') or [])) or '?'}){hint}")
    spec_hash = spec.sha256()
    if (body.get("spec") or {}).get("spec_sha256") != spec_hash:
        raise TestAdmissionRefused(f"test admission receipt {path}: admits spec sha256 "
                                   f"{(body.get('spec') or {}).get('spec_sha256')}, not this spec's "
                                   f"{spec_hash}{hint}")
    folder = str(output_folder(output))
    if body.get("result_folder") != folder:
        raise TestAdmissionRefused(f"test admission receipt {path}: admits result folder "
                                   f"{body.get('result_folder')}, not {folder}{hint}")
    _unchanged(spec, body, path)
    return {"status": "admitted", "receipt": str(path.resolve()), "receipt_sha256": sha256_file(path),
            "spec_sha256": spec_hash, "admitted_utc": body.get("created_utc")}


def _unchanged(spec: RunSpec, body: dict, path: Path) -> None:
    """The calibration decisions and a local root's shards as the gate recorded them."""
    cal = _row(body, "calibration_decisions").get("record") or {}
    try:
        now = calibration_record(spec.calibration_decisions)
    except ProvenanceError as e:
        raise TestAdmissionRefused(f"test admission receipt {path}: {e}") from None
    if now is None or now["canonical_sha256"] != cal.get("canonical_sha256"):
        raise TestAdmissionRefused(
            f"test admission receipt {path}: calibration decisions {spec.calibration_decisions} "
            f"changed since admission (canonical sha256 {None if now is None else now['canonical_sha256']}, "
            f"admitted {cal.get('canonical_sha256')})")
    data = _row(body, "dataset").get("record") or {}
    if "shards" not in data:
        return
    root = Path(data["root"])
    try:
        now_shards = _shard_records(root, data["resolution"], data["split"])
    except (DataError, OSError) as e:
        raise TestAdmissionRefused(f"test admission receipt {path}: dataset {root}: {e}") from None
    if now_shards != data["shards"]:
        was = {s["name"]: s["sha256"] for s in data["shards"]}
        diff = sorted({s["name"] for s in now_shards if was.get(s["name"]) != s["sha256"]}
                      | (set(was) - {s["name"] for s in now_shards}))
        raise TestAdmissionRefused(f"test admission receipt {path}: dataset {root}: shard(s) "
                                   f"{diff[:5]} changed since admission; admit the spec again")
