"""A run from its spec to its folder: the launch's records (its resolved protocol, its
provenance, its identity), the output folder it owns, and the loop over the seeds
(:func:`run_spec`, at the end; one seed's story is
:func:`passage_jax.run.execution.seed.run_seed_folder`).

**The launch record.** The resolved protocol of a launch: ``resolved_protocol.json``
(docs/runner.md, "Resolved protocol").

Every ``run`` launch (a new run, each resume, and ``run --dry-run``) writes into the
output folder ``resolved_protocol.<n>.json`` (``n`` = 0, 1, ... in launch order) and
``resolved_protocol.json`` (a copy of the latest launch), both atomically. A record
holds the resolved spec, the inference protocol and its canonical flag, the sha256 of
the evaluator's source tree and of the spec file, the checkpoint files with their
sha256, the launcher's argv and the resolved command, the UTC time, package versions
and the devices. It documents the launch; no other output depends on it.

The inference protocol is read from the spec's ``inference_kwargs`` (per seed): the
keys ``tile``, ``stride``, ``hflip``, ``blend``, ``stitch`` (at the top level or
inside a ``tiling`` mapping). None present is whole-scene inference (no tiling),
canonical. A tile size makes it tiled inference, canonical exactly under
:data:`CANONICAL_TILED` (an even tile, stride = tile / 2, hflip on, Hann blend, fields
stitched; the name of any other tiled setting is ``passage_jax_tiled_v1_noncanonical``);
any other setting is noncanonical and the launch prints :data:`NONCANONICAL_MARKER`.

**The provenance.** What a run records about where its tasks and decisions come from
(docs/runner.md, "seed-<seed>/manifest.json", ``provenance``): the role of its split, the
calibration decisions frozen before a test run, the determinism claim, the container digest,
the roster it was admitted with, and the evaluator's source commit.

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

**The output folder.** Run folders: where a run writes, what refuses a folder, the lock of a
running folder, and what a launch that failed early leaves behind.

The output folder is made absolute before anything else (:func:`output_folder`: a
planner that changes the working directory cannot move it), refused by name when the
OS cannot make it a folder (a symbolic-link loop, a parent that is a file,
``/dev/null/x``), refused when it already holds something (:func:`holds_run`) and
refused when it is inside the dataset root (:func:`refuse_inside_dataset`). A new run
that fails before its first durable record leaves the folder as it found it apart from
its ``resolved_protocol`` records (:func:`undo_launch`).

**The run loop.** The complete-request run loop: admission, timed series, durable records,
run folders (contract §7), and resuming a run that was killed.

``run_spec(spec, output)`` admits the run (nothing is called before every
admission check passed), writes ``<output>/run_started.json`` (what a resume must
find unchanged), then for each seed opens an executor (planner construction is not
timed), runs one cold pass over the tasks, ``latency_warmup`` recorded warm-up
passes and ``latency_repeats`` measured warm repeats, one request at a time (under a
session timing profile: ``session_warmup`` untimed calls on the warm-up scene, then one
timed request per task; :mod:`passage_jax.run.execution.sessions`), and writes
``<output>/seed-<seed>/`` (formats in :mod:`passage_jax.protocol.records` and
``docs/runner.md``).

A seed in progress lives in ``<output>/.seed-<seed>.partial/``. Each record is
appended to its journal (:mod:`passage_jax.run.execution.seed`) and fsynced before the
next request starts; when the seed completes, ``requests.jsonl``, ``paths.npz``,
``references.npz`` and ``manifest.json`` are built from the journal
(:mod:`passage_jax.run.execution.seed`) and the folder is renamed to ``seed-<seed>``.
``run_spec(..., resume=True)`` continues a killed run from what is durable
(:mod:`passage_jax.run.resume`): it checks the stored identities, keeps completed seeds
(verified, and rebuilt from their journals when a file is torn) and every complete
journal entry, and re-runs only what is missing. Under a session profile in a
multi-process launch the processes share each seed's requests out, one session each,
and process 0 journals the gathered records (:mod:`passage_jax.run.execution.seed`).

The pieces: the output folder (refusals, the lock, what a failed launch leaves) and the
launch's records are above in this module; one seed, from its folder in progress to its
files, is :func:`passage_jax.run.execution.seed.run_seed_folder`; the seed manifest is
:mod:`passage_jax.run.record`'s; progress events for the command line to draw are
:mod:`passage_jax.run.progress`'s."""
from __future__ import annotations

import contextlib
import contextvars
import fcntl
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jax

from passage_jax import cluster
from passage_jax.checks import is_int
from passage_jax.data.reader import SHIPPED, shipped_cohort_root
from passage_jax.fileio import (
    atomic_write_json,
    atomic_write_text,
    fsync_dir,
    jsonable,
    read_document,
    sha256_file,
    to_json,
    utc_now,
)
from passage_jax.protocol.records import RUN_FORMAT, code_hash, input_hash, package_versions, tasks_sha256
from passage_jax.protocol.runfolder import (
    JOURNAL,
    LOCK,
    PARTIAL_SEED_PREFIX,
    RESOLVED_PROTOCOL,
    RUN_STARTED,
    RUN_STARTED_FORMAT,
    RUN_SUMMARY,
    SEED_FOLDER_PREFIX,
    is_partial_seed_folder_name,
    is_protocol_file,
    launch_index,
    launch_record_name,
    partial_seed_folder_name,
    remove_temporaries,
    seed_folder_name,
)
from passage_jax.run.admission import Admitted, admit
from passage_jax.run.context import RunContext
from passage_jax.run.errors import OutputFolderTaken, ResumeError, RunError
from passage_jax.run.execution import (
    JOURNAL_HEADER,
    Leader,
    RunInterrupted,
    follow,
    run_seed_folder,
    stop_on_signals,
)
from passage_jax.run.record import hardware
from passage_jax.run.resume import (
    finished_summary,
    keep_completed_seed,
    refuse_differences,
    refuse_other_spec,
    stored_run,
)
from passage_jax.run.specification import SPEC_MAX_BYTES, RunSpec, load_spec, planner_path_record
from passage_jax.stats.roster import RosterError, read_roster

__all__ = ["inference_protocol", "run_protocol", "resolved_protocol", "write_resolved_protocol",
           "RESOLVED_PROTOCOL_FORMAT", "NONCANONICAL_MARKER", "CANONICAL_TILED", "WHOLE_SCENE",
           "TILING_KEYS", "ProvenanceError", "run_provenance", "canonical_json_sha256", "evaluator_commit",
           "roster_record", "calibration_record", "UNDECLARED", "ROSTER_MAX_BYTES",
           "test_admission_recorded", "output_folder", "create_folder", "remove_created",
           "refuse_inside_dataset", "holds_run", "spec_and_output", "local_root", "locked", "holds_records",
           "undo_launch", "run_spec", "run_seed", "run_identity", "splits_requests"]


# ---- the launch record ---------------------------------------------------------------------

RESOLVED_PROTOCOL_FORMAT = "passage-jax-resolved-protocol-v1"
NONCANONICAL_MARKER = "NONCANONICAL_EVALUATION_PROTOCOL"
#: name of the canonical tiled protocol
CANONICAL_TILED = "passage_jax_tiled_v1"
WHOLE_SCENE = "whole-scene (no tiling)"
TILING_KEYS = ("tile", "stride", "hflip", "blend", "stitch")
_VERSIONS = ("jax", "jaxlib", "flax", "numpy")


def _tiling_settings(kwargs: dict) -> dict:
    nested = kwargs.get("tiling")
    src = dict(nested) if isinstance(nested, dict) else {}
    src.update({k: kwargs[k] for k in TILING_KEYS if k in kwargs})
    return {k: src[k] for k in TILING_KEYS if k in src}


def inference_protocol(kwargs: dict) -> dict:
    """The inference protocol resolved from one seed's ``inference_kwargs``:
    ``{name, settings, canonical, deviations}``."""
    given = _tiling_settings(kwargs or {})
    if not given or given.get("tile") is None:
        stray = [f"{k}={given[k]!r} without a tile" for k in given if k != "tile"]
        return {"name": WHOLE_SCENE, "settings": {"tiling": None}, "canonical": not stray,
                "deviations": stray}
    tile = given["tile"]
    settings = {"tile": tile, "stride": given.get("stride"), "hflip": given.get("hflip", True),
                "blend": given.get("blend", "hann"), "stitch": given.get("stitch", "fields")}
    canonical_stride = tile // 2 if is_int(tile) else None
    if settings["stride"] is None:
        settings["stride"] = canonical_stride
    want = {"stride": canonical_stride, "hflip": True, "blend": "hann", "stitch": "fields"}
    deviations = [f"{k}={settings[k]!r} (canonical {v!r})" for k, v in want.items()
                  if settings[k] != v]
    if canonical_stride is None or tile % 2:
        deviations.insert(0, f"tile={tile!r} (canonical: an even tile size)")
    canonical = not deviations
    return {"name": CANONICAL_TILED + ("" if canonical else "_noncanonical"), "settings": settings,
            "canonical": canonical, "deviations": deviations}


def run_protocol(spec: RunSpec) -> dict:
    """The inference protocol of the whole run: one seed's protocol when every seed
    resolves the same one, else ``name: "per seed"`` with ``per_seed`` and canonical
    only when every seed is."""
    per = {str(s): inference_protocol(spec.kwargs_for_seed(s)) for s in spec.seeds}
    first = next(iter(per.values()))
    if all(p == first for p in per.values()):
        return dict(first)
    return {"name": "per seed", "settings": None,
            "canonical": all(p["canonical"] for p in per.values()),
            "deviations": sorted({d for p in per.values() for d in p["deviations"]}),
            "per_seed": per}


def _versions() -> dict:
    pkgs = package_versions()
    out = {"python": platform.python_version()}
    for name in _VERSIONS:
        out[name] = pkgs.get(name)
    return out


def _spec_file(spec: RunSpec) -> dict | None:
    p = Path(spec.source)
    if spec.source.startswith("<") or not p.is_file():
        return None
    return {"path": str(p.resolve()), "sha256": sha256_file(p)}


def resolved_protocol(ctx: RunContext, output, *, kind: str, index: int = 0) -> dict:
    """The record of one launch (``kind``: ``run``, ``resume`` or ``dry_run``) under the
    launch's context ``ctx`` (its code hash, inference protocol, checkpoints and device)."""
    spec, device = ctx.spec, ctx.admitted.device
    output = Path(output)
    spec_file = _spec_file(spec)
    command = ["python", "-m", "cli", "run", "--spec", spec_file["path"] if spec_file else spec.source,
               "--output", str(output.resolve())]
    if kind == "resume":
        command.append("--resume")
    elif kind == "dry_run":
        command.append("--dry-run")
    return jsonable({
        "format": RESOLVED_PROTOCOL_FORMAT,
        "launch": {"index": int(index), "kind": kind, "utc": utc_now(), "argv": list(sys.argv),
                   "command": shlex.join(command), "output": str(output.resolve())},
        "method_name": spec.method_name,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "spec_file": spec_file,
        "inference_protocol": ctx.protocol,
        "code": ctx.code,
        "checkpoints": ctx.admitted.checkpoints or {},
        "versions": _versions(),
        "devices": [str(d) for d in jax.devices()],
        "selected_device": None if device is None else str(device),
    })


def write_resolved_protocol(ctx: RunContext, output, *, kind: str) -> dict:
    """Write this launch's record into ``output`` (``resolved_protocol.<n>.json`` and
    ``resolved_protocol.json``) and announce a noncanonical protocol
    (:data:`NONCANONICAL_MARKER`, through the context's log or on stderr). Returns the record."""
    output = Path(output)
    index = launch_index(output)
    rec = resolved_protocol(ctx, output, kind=kind, index=index)
    atomic_write_json(output / launch_record_name(index), rec)
    atomic_write_json(output / RESOLVED_PROTOCOL, rec)
    proto = rec["inference_protocol"]
    if not proto["canonical"]:
        msg = (f"{NONCANONICAL_MARKER}: {ctx.spec.method_name}: inference protocol {proto['name']!r} "
               f"({'; '.join(proto['deviations'])}); recorded as noncanonical")
        if ctx.log is not None:
            ctx.log(msg)
        else:
            print(msg, file=sys.stderr)
    return rec


# ---- the provenance and the run identity ---------------------------------------------------

UNDECLARED = "undeclared"
#: the largest roster file read, in bytes (about 900,000 task records)
ROSTER_MAX_BYTES = 64 << 20


#: what ``run`` found at the test admission gate (:mod:`passage_jax.run.gate`), set
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


def run_identity(admitted, code: dict, prov: dict | None = None) -> dict:
    """What a resumed run must share with the stored one: spec hash, data (shards by
    name, sha256 and rows; sample ids; tasks hash), references identity, planner entry,
    checkpoints, runtime bundle, code hash, the calibration decisions and roster (of the
    provenance, :func:`run_provenance`), and a session profile's warm-up scene (id and input
    hash)."""
    spec = admitted.spec
    prov = prov or {}
    return jsonable({
        "calibration_decisions": prov.get("calibration_decisions"),
        "roster": prov.get("roster"),
        "spec_sha256": spec.sha256(),
        "data": {"shards": [{"name": s["name"], "sha256": s["sha256"], "rows_used": s["rows_used"]}
                            for s in admitted.shards],
                 "sample_ids": admitted.sample_ids, "tasks_sha256": tasks_sha256(admitted)},
        "references": {"identity": admitted.references.identity(),
                       "policy": admitted.references.policy},
        "planner": {"inference": admitted.entry.get("inference"),
                    "module_sha256": admitted.entry.get("module_sha256"),
                    "qualname": admitted.entry.get("qualname")},
        "checkpoints": admitted.checkpoints,
        "runtime_bundle": (admitted.runtime_bundle or {}).get("files"),
        "code_sha256": code["sha256"],
        "warmup_scene": _warmup_identity(admitted),
    })


def _warmup_identity(admitted) -> dict | None:
    w = admitted.warmup
    return None if w is None else {"sample_id": w.id, "input_sha256": input_hash(w)}


# ---- the output folder ---------------------------------------------------------------------

def _is_run_entry(name: str) -> bool:
    return name.startswith((SEED_FOLDER_PREFIX, PARTIAL_SEED_PREFIX)) or name in (RUN_SUMMARY, RUN_STARTED)


def _os_problem(folder: Path) -> str | None:
    """Why the OS cannot let ``folder`` be a folder (a symbolic-link loop, a parent that is
    not a folder, a link to nothing), or None (it is a folder, a file, or can be created)."""
    try:
        os.stat(folder)
    except FileNotFoundError:
        if os.path.islink(folder):
            return f"output folder {folder} is a symbolic link to a missing target"
        return None
    except OSError as e:
        return f"output folder {folder} cannot be used: {e.strerror or e}"
    except ValueError as e:  # an embedded NUL byte
        return f"output folder {folder!r} cannot be used: {e}"
    return None


def output_folder(output) -> Path:
    """``output`` as an absolute path (``os.path.abspath``: nothing a planner does to the
    working directory moves it), after checking that the OS can let it be a folder:
    :class:`RunError` naming the path and the OS reason otherwise (a symbolic-link loop,
    a parent that is a file such as ``/dev/null/x``, a link to nothing, an empty path)."""
    text = os.fspath(output)
    if not isinstance(text, str) or not text.strip():
        raise RunError(f"output folder {text!r}: an empty path names no folder")
    folder = Path(os.path.abspath(text))
    why = _os_problem(folder)
    if why:
        raise RunError(why)
    return folder


def create_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; returns the folders created (outermost
    first). :class:`RunError` naming the folder and the OS reason when one cannot be made
    (``/proc/x``, a read-only file system, a parent that is a file)."""
    folder = Path(folder)
    missing = []
    p = folder
    while not (p.exists() or p.is_symlink()) and p != p.parent:
        missing.append(p)
        p = p.parent
    made = []
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            remove_created(made)
            raise RunError(f"output folder {folder}: cannot create {p}: {e.strerror or e}") from None
        made.append(p)
    if not folder.is_dir():
        why = _os_problem(folder) or f"output folder {folder} exists and is not a folder"
        raise RunError(why)
    return made


def remove_created(made: list[Path]) -> None:
    """Remove the folders of ``made`` (outermost first) that are empty, innermost first."""
    for p in reversed(made):
        with contextlib.suppress(OSError):
            p.rmdir()


def refuse_inside_dataset(output, root, what: str = "output folder") -> None:
    """:class:`RunError` when ``output`` is the dataset root or inside it (symbolic links
    followed): a run never writes into the data it and every later run read."""
    if root is None:
        return
    out, data = os.path.realpath(output), os.path.realpath(root)
    if out == data or out.startswith(data.rstrip(os.sep) + os.sep):
        raise RunError(f"{what} {output} is inside the dataset root {root}; a run never writes "
                       f"into the data it reads: choose a folder outside it")


def holds_run(folder) -> str | None:
    """Why ``folder`` cannot receive a new run (it exists and is not empty, or the OS
    cannot let it be a folder), or None."""
    folder = Path(folder)
    why = _os_problem(folder)
    if why:
        return why
    if folder.exists() and not folder.is_dir():
        return f"{folder} exists and is not a folder"
    if folder.is_dir():  # the launch records of a dry run do not make a folder taken
        try:
            entries = sorted(p.name for p in folder.iterdir() if not is_protocol_file(p.name))
        except OSError as e:
            return f"output folder {folder} cannot be listed: {e.strerror or e}"
        if entries:
            what = "already holds a run" if any(_is_run_entry(e) for e in entries) else "is not empty"
            return f"output folder {folder} {what} ({', '.join(entries[:5])}); choose a new folder"
    return None


def spec_and_output(spec: RunSpec | str | os.PathLike, output) -> tuple[RunSpec, Path]:
    """The spec (loaded and validated when given as a path) and the output folder, which
    must be new or empty (:class:`OutputFolderTaken` otherwise)."""
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = output_folder(output)
    why = holds_run(output)
    if why:
        raise OutputFolderTaken(why)
    refuse_inside_dataset(output, local_root(spec))
    return spec, output


def local_root(spec: RunSpec):
    """The dataset root a spec's local ``dataset_path`` names (nothing is read or checked:
    admission does that), None for a hub dataset (its root is known after admission)."""
    if spec.dataset_path is None:
        return None
    if str(spec.dataset_path) == SHIPPED:
        return shipped_cohort_root()
    return Path(spec.dataset_path).expanduser()


@contextlib.contextmanager
def locked(output: Path):
    """Hold the folder's lock file while the block runs (:class:`ResumeError` when another
    process holds it); the lock file is removed afterwards."""
    path = output / LOCK
    fh = open(path, "a")  # held open for the run
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResumeError(f"{output}: another process is running this folder "
                              f"({LOCK} is locked)") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
    finally:
        fh.close()


def holds_records(output: Path) -> bool:
    """Whether a run folder holds a completed seed or a journal with any entry (what a
    resume keeps)."""
    for p in output.iterdir():
        if p.name.startswith(SEED_FOLDER_PREFIX) and p.is_dir():
            return True
        if is_partial_seed_folder_name(p.name):
            j = p / JOURNAL
            if j.is_file() and j.stat().st_size > len(JOURNAL_HEADER):
                return True
    return False


def undo_launch(output: Path, created: list[Path], started: bool) -> None:
    """After a launch failed: a new run that wrote its ``run_started.json`` (``started``)
    and no durable record leaves nothing of itself (``run_started.json``, seed folders in
    progress, the lock) but its ``resolved_protocol`` records; folders this launch created
    are removed when empty. A folder holding records keeps everything (``--resume``
    continues it)."""
    with contextlib.suppress(OSError):
        if started and output.is_dir() and not holds_records(output):
            for p in output.iterdir():
                if is_partial_seed_folder_name(p.name) and p.is_dir():
                    shutil.rmtree(p)
                elif p.name in (RUN_STARTED, LOCK) or p.name.startswith(f".{RUN_STARTED}.tmp-"):
                    p.unlink()
            fsync_dir(output)
    remove_created(created)


# ---- the run loop --------------------------------------------------------------------------

def splits_requests(spec) -> bool:
    """Whether a run of ``spec`` in this launch shares each seed's requests out across the
    processes (a session timing profile or the batched procedure, in a multi-process
    launch)."""
    return bool(getattr(spec, "one_pass", False)) and cluster.process_count() > 1


def run_spec(spec: RunSpec | str | os.PathLike, output, progress=None,
             admitted: Admitted | None = None, log=None, *, resume: bool = False,
             dry_run: bool = False) -> dict:
    """Admit and run ``spec``, writing ``<output>/seed-<seed>/`` per seed and
    ``<output>/run.json``. Refuses an output folder that is not empty.

    With ``resume=True`` the folder may hold a run that was interrupted: the spec must
    equal the stored one, and after admission the data, tasks, references, planner
    entry, checkpoints and code must equal the stored identities (:class:`ResumeError`
    naming the differing field otherwise). Completed seeds are kept (verified; rebuilt
    from their journals when torn), the seed in progress continues from its journal,
    and only the missing requests run. A folder holding a finished run is verified and
    left as it is; a missing or empty folder starts a new run.

    ``output`` is made absolute and checked before admission (:func:`output_folder`,
    :func:`refuse_inside_dataset`); a new run that fails before its first durable record
    leaves only its ``resolved_protocol`` records behind
    (:func:`undo_launch`).

    ``progress``: a callable taking a :class:`~passage_jax.run.progress.ProgressEvent`
    (when a seed starts executing requests and after each request); anything else
    (``None``, ``False``, ``True``) reports nothing: drawing progress is the command
    line's job. ``log``: a callable taking one line, or None.

    Every launch writes ``resolved_protocol.json`` (this module).
    With ``dry_run=True`` the run is admitted and that record written, nothing else: no
    request runs and no seed folder is made; returns ``{"dry_run": True, ...}``.

    Under a session timing profile in a multi-process launch every process calls this:
    each runs its own session on its share of each seed's requests
    (:mod:`passage_jax.run.execution.seed`; ``admitted``: the launch's admission, made
    here when not given); process 0 writes the run folder and returns the summary, the
    others return ``{"follower": True, ...}``. Under ``complete_request_v1`` the process
    calling this runs every request.
    """
    if dry_run and resume:
        raise RunError("a dry run checks a new run; it cannot resume one")
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    if not splits_requests(spec):
        return _run_spec(spec, output, admitted, progress=progress, log=log, resume=resume,
                         dry_run=dry_run)
    if admitted is None:  # every process of the launch admits, together
        admitted = admit(spec)
    if not cluster.is_writer():
        return follow(admitted, log)
    with Leader():  # process 0 leads the others through the run (execution.seed.leading)
        return _run_spec(spec, output, admitted, progress=progress, log=log, resume=resume,
                         dry_run=dry_run)


def _run_spec(spec: RunSpec, output, admitted: Admitted | None, *, progress, log, resume: bool,
              dry_run: bool) -> dict:
    """:func:`run_spec` in this process."""
    output = output_folder(output)
    stored = stored_run(output) if resume else None
    if stored is not None:
        refuse_other_spec(output, stored, spec)
    elif not resume:
        why = holds_run(output)
        if why:
            raise OutputFolderTaken(why)
    refuse_inside_dataset(output, local_root(spec))  # before admission: nothing is read
    if admitted is None:
        admitted = admit(spec)
    refuse_inside_dataset(output, admitted.root)
    return _launch(admitted, output, stored, progress=progress, log=log, dry_run=dry_run)


def _launch(admitted, output: Path, stored: dict | None, *, progress, log, dry_run: bool) -> dict:
    """The identity checks and the run itself in ``output`` (absolute and checked; created
    here). A launch that fails is undone as far as :func:`undo_launch`
    says. SIGINT and SIGTERM stop it (:mod:`passage_jax.run.execution.interrupts`: whatever a planner
    raises does not): what it made is undone likewise, ``log`` gets one line saying what is
    kept, and :class:`~passage_jax.run.execution.interrupts.RunInterrupted` (a ``KeyboardInterrupt``)
    is raised."""
    created = create_folder(output)
    started = False  # a new run's run_started.json is being written
    try:
        with stop_on_signals():
            ctx = _launch_context(admitted, progress, log)
            identity = run_identity(admitted, ctx.code, ctx.provenance)
            if stored is not None:
                refuse_differences(str(output / RUN_STARTED), "the run identity", stored["identity"],
                                   identity)
            with locked(output):
                kind = "dry_run" if dry_run else "resume" if stored is not None else "run"
                record = write_resolved_protocol(ctx, output, kind=kind)
                early = _early_end(ctx, output, stored, record)
                if early is not None:
                    return early
                started = stored is None
                if stored is not None:
                    remove_temporaries(output)
                atomic_write_json(output / RUN_STARTED, _started_record(record, identity, stored))
                fsync_dir(output)
                return _run_seeds(ctx, output, record)
    except BaseException as e:
        undo_launch(output, created, started)
        if isinstance(e, RunInterrupted) and log is not None:
            log(_stopped_line(output, e))
        raise


def _launch_context(admitted: Admitted, progress, log) -> RunContext:
    """The context of a launch: the code hash, the provenance record and the inference
    protocol are taken now (:class:`RunError` naming the provenance input that is missing or
    does not fit)."""
    code = code_hash()
    try:
        prov = run_provenance(admitted.spec, admitted.sample_ids)
    except ProvenanceError as e:
        raise RunError(str(e)) from None
    return RunContext(admitted, code, prov, run_protocol(admitted.spec), progress, log)


def _stopped_line(output: Path, e: RunInterrupted) -> str:
    """The one line saying that the evaluator's signal stopped the run, and what is kept."""
    if holds_records(output):
        return (f"{output}: the run was stopped by {e.signal_name}; every record completed "
                f"before it is durable, and resuming the run continues it")
    return f"{output}: the run was stopped by {e.signal_name} before its first record; nothing is kept"


def _early_end(ctx: RunContext, output: Path, stored: dict | None, record: dict) -> dict | None:
    """The result of a launch that ends with its ``resolved_protocol`` ``record`` (a dry run,
    a resumed run that is already complete), else None."""
    spec = ctx.spec
    if record["launch"]["kind"] == "dry_run":
        return {"dry_run": True, "method_name": spec.method_name,
                "resolved_protocol": str(output / launch_record_name(record['launch']['index'])),
                "inference_protocol": record["inference_protocol"], "n_tasks": len(ctx.admitted.tasks)}
    finished = None if stored is None else finished_summary(output, spec)
    if finished is not None:
        ctx.say(f"{output}: the run is complete (every seed verified); nothing to resume")
    return finished


def _started_record(launch: dict, identity: dict, stored: dict | None) -> dict:
    """``run_started.json``: a new run's (its spec as the ``launch``'s resolved protocol
    records it), or the stored one with this resume added."""
    if stored is None:
        return {"format": RUN_STARTED_FORMAT, "method_name": launch["method_name"],
                "spec": launch["spec"], "spec_sha256": launch["spec_sha256"],
                "seeds": launch["spec"]["seeds"], "identity": identity, "started_utc": utc_now(),
                "resumes": []}
    resume = {"utc": utc_now(), "hardware": hardware()}
    return {**stored, "resumes": [*stored["resumes"], resume]}


def _run_seeds(ctx: RunContext, output: Path, launch: dict) -> dict:
    """Every seed (kept when complete, else run), then ``run.json`` (its spec as the
    ``launch``'s resolved protocol records it)."""
    summaries = {}
    for seed in ctx.spec.seeds:
        m = _one_seed(ctx, output, seed)
        summaries[str(seed)] = {"folder": seed_folder_name(seed), "status_counts": m["status_counts"],
                                "n_records": m["n_records"]}
    summary = {"format": RUN_FORMAT, "method_name": launch["method_name"], "spec": launch["spec"],
               "spec_sha256": launch["spec_sha256"], "seeds": launch["spec"]["seeds"],
               "per_seed": summaries, "code": ctx.code, "finished_utc": utc_now()}
    atomic_write_text(output / RUN_SUMMARY, to_json(summary) + "\n")
    return summary


def _one_seed(ctx: RunContext, output: Path, seed: int) -> dict:
    """The manifest of ``seed-<seed>``: a completed folder verified (and repaired), or the
    seed run in its ``.partial`` folder and renamed when complete."""
    final = output / seed_folder_name(seed)
    partial = output / partial_seed_folder_name(seed)
    if final.is_dir():
        if partial.exists():  # cannot coexist with a completed seed; nothing in it is needed
            shutil.rmtree(partial)
        m = keep_completed_seed(ctx, seed, final)
        ctx.say(f"seed {seed}: complete ({m['n_records']} records) -> {final}")
        return m
    m = run_seed_folder(ctx, seed, partial)
    os.replace(partial, final)
    fsync_dir(output)
    ctx.say(f"seed {seed}: {m['n_records']} records -> {final}")
    return m


def run_seed(admitted: Admitted, seed: int, folder: Path, progress=None,
             planner=None, code: dict | None = None, *, log=None,
             provenance: dict | None = None) -> dict:
    """Run every pass for one seed in ``folder`` (created, or continued when it holds the
    journal of an interrupted attempt) and write its files; returns the manifest.

    Each record is appended to the folder's journal and fsynced as it completes. When
    the folder already holds a journal, its complete entries are kept (a torn last entry
    is dropped and reported), the planner is rebuilt, and execution continues with the
    first missing request, whose record carries ``resumed: true``. ``progress``: as in
    :func:`run_spec`; ``provenance``: the run's provenance record (None: taken
    here). On process 0 of a multi-process session run
    (:func:`~passage_jax.run.execution.seed.leading`) the missing requests are shared out
    across the launch's processes.
    """
    spec = admitted.spec
    ctx = RunContext.of(admitted, code, provenance=provenance or run_provenance(spec, admitted.sample_ids),
                        protocol=run_protocol(spec), progress=progress, log=log)
    return run_seed_folder(ctx, seed, folder, planner)
