"""The complete-request run loop: admission, timed series, durable records, run folders
(SPEC §7), and resuming a run that was killed.

``run_spec(spec, output)`` admits the run (nothing is called before every
admission check passed), writes ``<output>/run_started.json`` (what a resume must
find unchanged), then for each seed opens an executor (planner construction is not
timed), runs one cold pass over the tasks, ``latency_warmup`` recorded warm-up
passes and ``latency_repeats`` measured warm repeats, one request at a time, and
writes ``<output>/seed-<seed>/`` (formats in :mod:`passage_jax.protocol.records` and
``docs/runner.md``).

A seed in progress lives in ``<output>/.seed-<seed>.partial/``. Each record is
appended to its journal (:mod:`passage_jax.run.journal`) and fsynced before the
next request starts; when the seed completes, ``requests.jsonl``, ``paths.npz``,
``references.npz`` and ``manifest.json`` are built from the journal and the folder
is renamed to ``seed-<seed>``. ``run_spec(..., resume=True)`` continues a killed
run from what is durable: it checks the stored identities, keeps completed seeds
(verified, and rebuilt from their journals when a file is torn) and every complete
journal entry, and re-runs only what is missing.

Output folders (:func:`output_folder`): the folder is made absolute before anything
else (a planner that changes the working directory cannot move it; the run restores
the working directory after the planner's construction and after each request, and
records it), refused by name when the OS cannot make it a folder (a symbolic-link
loop, a parent that is a file, ``/dev/null/x``), and refused when it is inside the
dataset root (:func:`refuse_inside_dataset`). A new run that fails before its first
durable record (a planner that cannot be built, admission refused) leaves the folder
as it found it apart from its ``resolved_protocol`` records, so the same folder takes
the corrected spec; once a record is journalled, everything is kept for ``--resume``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from passage_jax.compilation import CompileCounter, compile_stats
from passage_jax.data.reader import SHIPPED, shipped_cohort_root
from passage_jax.fileio import (
    atomic_file,
    atomic_write_json,
    atomic_write_npz,
    atomic_write_text,
    jsonable,
    read_document,
    sha256_file,
    to_json,
    utc_now,
)
from passage_jax.protocol.records import (
    RECORD_KEYS,
    REFERENCES_FORMAT,
    RUN_FORMAT,
    PathsWriter,
    code_hash,
    pack_routes,
    package_versions,
)
from passage_jax.run import admission as adm
from passage_jax.run.executors import PlannerBuildError, open_executor
from passage_jax.run.journal import (
    JOURNAL_HEADER,
    JOURNAL_NAME,
    Journal,
    JournalError,
    fsync_dir,
    scan_journal,
)
from passage_jax.run.protocol_record import is_protocol_file, run_protocol, write_resolved_protocol
from passage_jax.run.provenance import ProvenanceError, provenance
from passage_jax.run.spec import RunSpec, load_spec

__all__ = ["RunError", "OutputFolderTaken", "ResumeError", "run_spec", "run_seed", "passes",
           "holds_run", "spec_and_output", "references_arrays", "run_identity", "SERIES",
           "output_folder", "create_folder", "remove_created", "refuse_inside_dataset",
           "RUN_STARTED", "RUN_STARTED_FORMAT", "SEED_STATE", "SEED_FILES"]

SERIES = ("cold", "warmup", "warm")
#: run-level record of what a resume must find unchanged (written after admission)
RUN_STARTED = "run_started.json"
RUN_STARTED_FORMAT = "passage-jax-run-started-v1"
#: per-seed state: start time, planner builds, resumes and repairs
SEED_STATE = "seed_state.json"
SEED_STATE_FORMAT = "passage-jax-seed-state-v1"
#: the files of a finished seed that the manifest hashes (built from the journal)
SEED_FILES = ("requests.jsonl", "paths.npz", "references.npz")
_LOCK = ".run.lock"


class RunError(RuntimeError):
    """The run cannot proceed (output folder taken, planner construction failed ...)."""


class OutputFolderTaken(RunError, FileExistsError):
    """The output folder exists and is not empty (it may hold a run)."""


class ResumeError(RunError):
    """A run folder cannot be resumed: it holds a different run (the differing field is
    named), another process is running it, or its durable records are corrupt."""


def _is_run_entry(name: str) -> bool:
    return name.startswith(("seed-", ".seed-")) or name in ("run.json", RUN_STARTED)


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
    refuse_inside_dataset(output, _local_root(spec))
    return spec, output


def _local_root(spec: RunSpec):
    """The dataset root a spec's local ``dataset_path`` names (nothing is read or checked:
    admission does that), None for a hub dataset (its root is known after admission)."""
    if spec.dataset_path is None:
        return None
    if str(spec.dataset_path) == SHIPPED:
        return shipped_cohort_root()
    return Path(spec.dataset_path).expanduser()


def passes(spec: RunSpec) -> list[tuple[str, int]]:
    """The timing series as (series, repeat index) passes, in execution order."""
    return ([("cold", 0)] + [("warmup", i) for i in range(spec.latency_warmup)]
            + [("warm", i) for i in range(spec.latency_repeats)])


def references_arrays(admitted: adm.Admitted) -> dict:
    """The arrays of ``references.npz`` (from the compact task facts: no grids are read).
    Route cells are stored as int16 when the grid fits (every reference and released
    route is a legal in-grid route); readers widen them to int32."""
    refs, stubs = admitted.references, admitted.tasks.stubs
    cell = np.int16 if admitted.spec.resolution <= np.iinfo(np.int16).max else np.int32
    coords, offsets = pack_routes(refs.routes)
    rel_coords, rel_offsets = pack_routes([t.route for t in stubs])
    n = len(stubs)
    tiles = [json.dumps(t.tile, sort_keys=True) if t.tile is not None else "" for t in stubs]
    return {
        "format": np.array(REFERENCES_FORMAT),
        "policy": np.array(refs.policy),
        "cohort_id": np.array(refs.cohort_id or ""),
        "identity": np.array(refs.identity()),
        "precision": np.array(refs.precision),
        "precision_rtol": np.array(refs.precision_rtol, np.float64),
        "resolution": np.array(admitted.spec.resolution, np.int64),
        "split": np.array(admitted.spec.split),
        "task_index": np.arange(n, dtype=np.int64),
        "sample_id": np.asarray(refs.sample_id, dtype=str),
        "objective": np.asarray([t.objective for t in stubs], dtype=str),
        "variant": np.asarray([t.variant for t in stubs], dtype=str),
        "cost_weight": np.asarray([t.weight for t in stubs], np.float64),
        "start": np.asarray([t.start for t in stubs], np.int32).reshape(n, 2),
        "goal": np.asarray([t.goal for t in stubs], np.int32).reshape(n, 2),
        "c_star": refs.c_star,
        "qualified": refs.qualified,
        "released_cost": refs.released_cost,
        "solver": np.asarray(refs.solver, dtype=str),
        "reason": np.asarray(refs.reason, dtype=str),
        "solver_work": refs.work,
        "route_coords": coords.astype(cell),
        "route_offsets": offsets,
        "released_coords": rel_coords.astype(cell),
        "released_offsets": rel_offsets,
        "input_sha256": np.asarray(admitted.input_hashes(), dtype=str),
        "tile_json": np.asarray(tiles, dtype=str),
    }


def _progress(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), transient=False)


# --------------------------------------------------------------------------- #
# identities: what a resume must find unchanged
# --------------------------------------------------------------------------- #

def run_identity(admitted: adm.Admitted, code: dict, prov: dict | None = None) -> dict:
    """What a resumed run must share with the stored one: spec hash, data (shards by
    name, sha256 and rows; sample ids; tasks hash), references identity, planner entry,
    checkpoints, runtime bundle, code hash, and the calibration decisions and roster
    (:mod:`passage_jax.run.provenance`)."""
    spec = admitted.spec
    prov = prov or {}
    return jsonable({
        "calibration_decisions": prov.get("calibration_decisions"),
        "roster": prov.get("roster"),
        "spec_sha256": spec.sha256(),
        "data": {"shards": [{"name": s["name"], "sha256": s["sha256"], "rows_used": s["rows_used"]}
                            for s in admitted.shards],
                 "sample_ids": admitted.sample_ids, "tasks_sha256": _tasks_sha(admitted)},
        "references": {"identity": admitted.references.identity(),
                       "policy": admitted.references.policy},
        "planner": {"inference": admitted.entry.get("inference"),
                    "module_sha256": admitted.entry.get("module_sha256"),
                    "qualname": admitted.entry.get("qualname")},
        "checkpoints": admitted.checkpoints,
        "runtime_bundle": (admitted.runtime_bundle or {}).get("files"),
        "code_sha256": code["sha256"],
    })


def _short(v) -> str:
    t = json.dumps(v, sort_keys=True, default=str)
    return t if len(t) <= 80 else t[:77] + "..."


def _differences(stored, now, prefix="") -> list[str]:
    """Dotted paths where two JSON values differ, with both values (shortened)."""
    if isinstance(stored, dict) and isinstance(now, dict):
        out = []
        for k in sorted(set(stored) | set(now), key=str):
            if k not in stored or k not in now:
                out.append(f"{prefix}{k}: stored {_short(stored.get(k))}, now {_short(now.get(k))}")
            else:
                out += _differences(stored[k], now[k], f"{prefix}{k}.")
        return out
    if isinstance(stored, list) and isinstance(now, list) and len(stored) == len(now) \
            and any(isinstance(x, (dict, list)) for x in stored):
        out = []
        for i, (a, b) in enumerate(zip(stored, now)):
            out += _differences(a, b, f"{prefix}{i}.")
        return out
    if stored != now:
        return [f"{prefix.rstrip('.')}: stored {_short(stored)}, now {_short(now)}"]
    return []


def _refuse_differences(where: str, what: str, stored, now) -> None:
    diffs = _differences(stored, now)
    if diffs:
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise ResumeError(f"{where}: {what} differs from the stored run: "
                          + "; ".join(diffs[:3]) + more)


# --------------------------------------------------------------------------- #
# one seed
# --------------------------------------------------------------------------- #

class _Plan:
    """The seed's requests in execution order: request ``i`` is pass ``i // T`` on task
    ``i % T`` (computed on demand: nothing per request is held)."""

    def __init__(self, spec: RunSpec, stubs):
        self.passes = passes(spec)
        self.stubs = stubs

    def __len__(self) -> int:
        return len(self.passes) * len(self.stubs)

    def __getitem__(self, i: int) -> tuple:
        series, rep = self.passes[i // len(self.stubs)]
        ti = i % len(self.stubs)
        return series, rep, ti, self.stubs[ti].id


def _is_temporary(p: Path) -> bool:
    """A temporary file of an interrupted atomic write (``.<name>.tmp-<pid>``)."""
    return p.is_file() and p.name.startswith(".") and ".tmp-" in p.name


def _remove_temporaries(folder: Path) -> None:
    for p in folder.iterdir():
        if _is_temporary(p):
            p.unlink()


def _clear_leftovers(folder: Path) -> None:
    """Remove what a killed run may have left in a seed folder in progress: final files
    (rebuilt from the journal) and temporary files of interrupted atomic writes."""
    _remove_temporaries(folder)
    for name in (*SEED_FILES, "manifest.json"):
        (folder / name).unlink(missing_ok=True)


def _check_entry(rec: dict, i: int, seed: int, row: tuple, where: Path) -> None:
    series, rep, ti, sample_id = row
    want = {"record": i, "seed": int(seed), "series": series, "repeat": rep, "task_index": ti,
            "sample_id": sample_id}
    got = {k: rec.get(k) for k in want}
    if got != want:
        raise ResumeError(f"{where}: entry {i} is {got}, the spec's request {i} is {want}; "
                          f"the journal does not belong to this run")


def _read_state(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        state = read_document(path, ResumeError, "seed state")
    except ResumeError:
        return None  # written atomically: unreadable only when damaged; started anew
    return state if isinstance(state, dict) and state.get("format") == SEED_STATE_FORMAT else None


def run_seed(admitted: adm.Admitted, seed: int, folder: Path, progress=None,
             planner=None, code: dict | None = None, *, log=None) -> dict:
    """Run every pass for one seed in ``folder`` (created, or continued when it holds the
    journal of an interrupted attempt) and write its files; returns the manifest.

    Each record is appended to the folder's journal and fsynced as it completes. When
    the folder already holds a journal, its complete entries are kept (a torn last entry
    is dropped and reported), the planner is rebuilt, and execution continues with the
    first missing request, whose record carries ``resumed: true``.
    """
    spec = admitted.spec
    code = code or code_hash()
    folder.mkdir(parents=True, exist_ok=True)
    fsync_dir(folder.parent)
    _clear_leftovers(folder)
    state_path = folder / SEED_STATE
    state = _read_state(state_path)
    resumed = state is not None or (folder / JOURNAL_NAME).exists()
    if state is None:
        state = {"format": SEED_STATE_FORMAT, "seed": int(seed), "started_utc": utc_now(),
                 "builds": [], "resumes": [], "repairs": []}
    if int(state.get("seed", seed)) != int(seed):
        raise ResumeError(f"{state_path}: seed {state.get('seed')} is not seed {seed}")
    rows = _Plan(spec, admitted.tasks.stubs)
    jpath = folder / JOURNAL_NAME

    def check(i, line, _snap):
        if i >= len(rows):
            raise ResumeError(f"{jpath}: more than {len(rows)} entries for a seed of {len(rows)} "
                              f"requests")
        _check_entry(json.loads(line), i, seed, rows[i], jpath)

    journal, scan = Journal.open(jpath, visit=check)
    try:
        done = scan.count
        if resumed:
            state["resumes"].append({"utc": utc_now(), "recovered_records": done,
                                     "dropped_torn_bytes": scan.torn_bytes, "torn": scan.torn})
            if log:
                log(f"seed {seed}: resuming with {done} of {len(rows)} records recovered"
                    + (f"; dropped a torn last entry ({scan.torn_bytes} bytes: {scan.torn})"
                       if scan.torn else ""))
        del scan
        atomic_write_json(state_path, state)
        if done < len(rows):
            _execute_rows(admitted, seed, rows, journal, state, progress, planner, resumed, log=log)
    finally:
        journal.close()
    return _finish_seed(admitted, seed, folder, state, code)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


class _WorkingDirectory:
    """The run's working directory, restored when a planner (in this process) changed it
    during its construction or a request: the run's own paths are absolute, and the
    planner's next call starts from the directory it was built in. Each change is logged
    once per build and counted in the seed's build record."""

    def __init__(self, seed, log):
        self.path, self.seed, self.log = _cwd(), seed, log
        self.changes, self.first = 0, None

    def restore(self, when: str) -> None:
        now = _cwd()  # None: the planner removed the directory it moved into
        if self.path is None or now == self.path:
            return
        try:
            os.chdir(self.path)
        except OSError as e:
            raise RunError(f"seed {self.seed}: the planner changed the working directory during "
                           f"{when} and {self.path} cannot be restored: {e.strerror or e}") from None
        self.changes += 1
        if self.first is None:
            self.first = {"during": when, "changed_to": now}
            if self.log:
                self.log(f"seed {self.seed}: the planner changed the working directory to {now} "
                         f"during {when}; restored {self.path} (a planner must not change it)")

    def record(self) -> dict:
        return {"restored_to": self.path, "times": self.changes, **(self.first or {})}


def _execute_rows(admitted, seed, rows, journal: Journal, state: dict, progress, planner,
                  resumed: bool, *, log=None) -> None:
    spec = admitted.spec
    done = journal.n_entries
    bar = None
    if progress is not None:
        bar = progress.add_task(f"{spec.method_name} seed {seed}", total=len(rows), completed=done)
    cwd = _WorkingDirectory(seed, log)
    counter = CompileCounter().__enter__()  # what this build compiled in the run's process
    try:
        ex_ctx = open_executor(spec, seed, device=admitted.device, planner=planner)
    except PlannerBuildError as e:
        raise RunError(f"seed {seed}: {e}") from e
    finally:
        cwd.restore("the planner's construction")
    with ex_ctx as ex:
        state["builds"].append({"utc": utc_now(), "at_record": done,
                                "construction_ms": ex.construction_ms,
                                "planner_name": ex.planner_name, "profile": ex.profile,
                                "timer": ex.timer})
        atomic_write_json(journal.path.parent / SEED_STATE, state)
        first = resumed
        for i in range(done, len(rows)):
            series, rep, ti, _sid = rows[i]
            task = admitted.tasks[ti]  # the chunk holding it is read when first needed
            try:
                rec, snap = ex.execute(task, spec.budget)
            finally:
                cwd.restore(f"request {i}")
            rec.update(record=i, seed=int(seed), series=series, repeat=rep, task_index=ti,
                       sample_id=task.id, resumed=first,
                       quality=series == "warm" and rep == spec.quality_repeat_index)
            first = False
            ordered = {k: rec.get(k) for k in RECORD_KEYS}
            journal.append(json.dumps(ordered, default=_json_num, allow_nan=False), snap)
            if bar is not None:
                progress.update(bar, advance=1, description=(
                    f"{spec.method_name} seed {seed} {series}#{rep}"))
        # what the executor saw (requests; for workers also starts, kills, crashes, warm-ups)
        state["builds"][-1]["executor_stats"] = dict(getattr(ex, "stats", {}) or {})
        counter.__exit__(None, None, None)
        state["builds"][-1]["compilation"] = counter.stats.to_dict()
        if cwd.changes:
            state["builds"][-1]["working_directory_restored"] = cwd.record()
        atomic_write_json(journal.path.parent / SEED_STATE, state)


def _finish_seed(admitted, seed, folder: Path, state: dict, code: dict) -> dict:
    """Build the seed's files from its journal (which must be complete) and its manifest.

    The journal is read entry by entry (three passes: the records and the route sizes,
    the route cells, the raw values of malformed routes), so memory stays bounded
    whatever the number of records."""
    spec = admitted.spec
    admitted.tasks.release()
    rows = _Plan(spec, admitted.tasks.stubs)
    n_rows = len(rows)
    jpath = folder / JOURNAL_NAME
    sizes = PathsWriter()  # route formats and sizes only: no cells are kept
    counts: dict = {}

    def first_pass(out):
        def visit(i, line, snap):
            if i >= n_rows:
                raise ResumeError(f"{jpath}: more than {n_rows} entries for a seed of {n_rows} "
                                  f"requests")
            rec = json.loads(line)
            _check_entry(rec, i, seed, rows[i], jpath)
            fmt, route, raw, desc = snap
            sizes.add_sizes(fmt, 0 if route is None else len(route), 0 if raw is None else len(raw),
                            desc)
            out.write(line.encode("utf-8") + b"\n")
            counts.setdefault(rec["series"], {}).setdefault(rec["status"], 0)
            counts[rec["series"]][rec["status"]] += 1
        return visit

    try:
        with atomic_file(folder / "requests.jsonl") as out:
            scan = scan_journal(jpath, first_pass(out))
            if scan.torn is not None or scan.count != n_rows:
                raise ResumeError(f"{jpath}: {scan.count} complete entries (torn: {scan.torn}) "
                                  f"for a seed of {n_rows} requests")
        sizes.write_streamed(folder / "paths.npz", lambda visit: scan_journal(jpath, visit))
    except (OSError, JournalError) as e:
        raise ResumeError(f"{jpath}: cannot read the record journal: {e}") from None
    atomic_write_npz(folder / "references.npz", references_arrays(admitted))
    files = {name: sha256_file(folder / name) for name in SEED_FILES}
    manifest = _manifest(admitted, seed, state, code, {"n_records": n_rows, "status_counts": counts,
                                                       "files": files, "journal": jpath})
    atomic_write_json(folder / "manifest.json", manifest)
    fsync_dir(folder)
    return manifest


def _manifest(admitted, seed, state: dict, code: dict, made: dict) -> dict:
    spec = admitted.spec
    refs = admitted.references
    tasks = admitted.tasks
    first = state["builds"][0] if state["builds"] else {}
    resumes = state["resumes"]
    return {
        "format": RUN_FORMAT,
        "seed": int(seed),
        "method_name": spec.method_name,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "spec_source": spec.source,
        "inference_kwargs": spec.kwargs_for_seed(seed),
        "planner": {**admitted.entry, "name": first.get("planner_name"),
                    "construction_ms": first.get("construction_ms")},
        "checkpoints": admitted.checkpoints.get(str(seed), {}),
        "runtime_bundle": admitted.runtime_bundle,
        "component_control": spec.component_control,
        "inference_protocol": run_protocol(spec),
        "provenance": getattr(admitted, "provenance", None) or provenance(spec, admitted.sample_ids),
        "code": code,
        "data": {
            "dataset_root": str(Path(admitted.root).resolve()),
            "dataset_path": spec.dataset_path,
            "dataset_repo": spec.dataset_repo,
            "dataset_revision": spec.dataset_revision,
            "resolution": spec.resolution, "split": spec.split,
            "n_samples": spec.n_samples, "n_tasks": len(tasks),
            "cost_model": spec.cost_model, "task_variant": spec.task_variant,
            "shards": admitted.shards,
            "sample_ids": admitted.sample_ids,
            "tasks_sha256": _tasks_sha(admitted),
        },
        "references": {
            "policy": refs.policy, "cohort_id": refs.cohort_id,
            "reference_max_expansions": refs.max_expansions,
            "identity": refs.identity(), "n_qualified": int(refs.qualified.sum()),
            "solvers": sorted(set(refs.solver)),
            "precision": refs.precision, "precision_rtol": refs.precision_rtol,
        },
        "timing": {
            "profile": first.get("profile"),
            "latency_warmup": spec.latency_warmup, "latency_repeats": spec.latency_repeats,
            "quality_repeat_index": spec.quality_repeat_index,
            "passes": [list(p) for p in passes(spec)],
            "timer": first.get("timer"),
        },
        "budget": spec.budget.to_dict(),
        "hardware": adm.hardware(),
        "device": None if admitted.device is None else str(admitted.device),
        "versions": package_versions(),
        "n_records": made["n_records"],
        "status_counts": made["status_counts"],
        "files": made["files"],
        "journal": {"file": JOURNAL_NAME, "sha256": sha256_file(made["journal"]),
                    "entries": made["n_records"], "durability": "each record fsynced as it completes"},
        "resume": {
            "resumed": bool(resumes),
            "recovered_records": max((r["recovered_records"] for r in resumes), default=0),
            "resumes": resumes,
            "builds": state["builds"],
            "repairs": state.get("repairs", []),
        },
        "compilation": {"process": compile_stats().to_dict(),
                        "scope": "the run's process (admission, references and in-process planners; "
                                 "a supervised worker's compilations are its own)"},
        "started_utc": state["started_utc"],
        "finished_utc": utc_now(),
    }


def _tasks_sha(admitted) -> str:
    h = hashlib.sha256()
    for sid, ih in zip(admitted.sample_ids, admitted.input_hashes()):
        h.update(f"{sid}:{ih}\n".encode())
    return h.hexdigest()


def _json_num(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# --------------------------------------------------------------------------- #
# completed seeds on resume
# --------------------------------------------------------------------------- #

def _seed_problems(folder: Path) -> tuple[dict | None, list[str]]:
    """The manifest of a completed seed folder and what is wrong with its files."""
    try:
        manifest = read_document(folder / "manifest.json", ValueError)
    except (ValueError, OSError) as e:
        return None, [f"manifest.json: {e}"]
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None, ["manifest.json: not a seed manifest"]
    problems = []
    for name in SEED_FILES:
        p = folder / name
        if not p.is_file():
            problems.append(f"{name}: missing")
        elif sha256_file(p) != manifest["files"].get(name):
            problems.append(f"{name}: sha256 differs from the manifest (torn or changed)")
    return manifest, problems


def _keep_completed_seed(admitted, seed, folder: Path, code: dict, log) -> dict:
    """Verify a completed seed folder against the run; rebuild its files from the journal
    when one is torn or missing. Returns its manifest."""
    manifest, problems = _seed_problems(folder)
    if manifest is not None:
        if manifest.get("seed") != int(seed):
            raise ResumeError(f"{folder / 'manifest.json'}: seed {manifest.get('seed')} is not {seed}")
        now = {"spec_sha256": admitted.spec.sha256(), "tasks_sha256": _tasks_sha(admitted),
               "references": admitted.references.identity()}
        stored = {"spec_sha256": manifest.get("spec_sha256"),
                  "tasks_sha256": (manifest.get("data") or {}).get("tasks_sha256"),
                  "references": (manifest.get("references") or {}).get("identity")}
        _refuse_differences(str(folder / "manifest.json"), "the completed seed", stored, now)
    _remove_temporaries(folder)
    if not problems:
        return manifest
    if not (folder / JOURNAL_NAME).is_file():
        raise ResumeError(f"{folder}: {'; '.join(problems)}, and there is no {JOURNAL_NAME} "
                          f"to rebuild it from")
    state = _read_state(folder / SEED_STATE)
    if state is None:
        raise ResumeError(f"{folder}: {'; '.join(problems)}, and {SEED_STATE} is unreadable")
    state.setdefault("repairs", []).append({"utc": utc_now(), "problems": problems})
    atomic_write_json(folder / SEED_STATE, state)
    if log:
        log(f"seed {seed}: {'; '.join(problems)}; rebuilding from {JOURNAL_NAME}")
    return _finish_seed(admitted, seed, folder, state, code)


# --------------------------------------------------------------------------- #
# the run
# --------------------------------------------------------------------------- #

@contextlib.contextmanager
def _locked(output: Path):
    path = output / _LOCK
    fh = open(path, "a")  # held open for the run
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResumeError(f"{output}: another process is running this folder "
                              f"({_LOCK} is locked)") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)
    finally:
        fh.close()


def _stored_run(output: Path) -> dict | None:
    """The stored ``run_started.json`` of a folder to resume, or None when the folder holds
    nothing to resume (missing, empty, or only temporaries of an interrupted write)."""
    if output.exists() and not output.is_dir():
        raise ResumeError(f"{output} exists and is not a folder")
    if not output.is_dir():
        return None
    started = output / RUN_STARTED
    if started.is_file():
        stored = read_document(started, ResumeError, "run record")
        if not isinstance(stored, dict) or stored.get("format") != RUN_STARTED_FORMAT:
            raise ResumeError(f"{started}: not a {RUN_STARTED_FORMAT} record")
        return stored
    entries = [p.name for p in output.iterdir()
               if not (p.name == _LOCK or (p.name.startswith(f".{RUN_STARTED}.tmp-"))
                       or is_protocol_file(p.name))]
    if entries:
        raise ResumeError(f"output folder {output} has no {RUN_STARTED} but is not empty "
                          f"({', '.join(sorted(entries)[:5])}); it does not hold a resumable run")
    return None


def _finished_summary(output: Path, spec: RunSpec) -> dict | None:
    """``run.json`` of a finished run whose every seed folder verifies, else None."""
    try:
        summary = read_document(output / "run.json", ValueError)
    except ValueError:
        return None
    if not isinstance(summary, dict) or summary.get("spec_sha256") != spec.sha256():
        return None
    for seed in spec.seeds:
        folder = output / f"seed-{seed}"
        if not folder.is_dir():
            return None
        manifest, problems = _seed_problems(folder)
        if manifest is None or problems or manifest.get("seed") != int(seed):
            return None
    return {**summary, "complete": True}


def run_spec(spec: RunSpec | str | os.PathLike, output, progress: bool | None = None,
             admitted: adm.Admitted | None = None, log=None, *, resume: bool = False,
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
    leaves only its ``resolved_protocol`` records behind (:func:`_undo_launch`).

    Every launch writes ``resolved_protocol.json`` (:mod:`passage_jax.run.protocol_record`).
    With ``dry_run=True`` the run is admitted and that record written, nothing else: no
    request runs and no seed folder is made; returns ``{"dry_run": True, ...}``.
    """
    if dry_run and resume:
        raise RunError("a dry run checks a new run; it cannot resume one")
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = output_folder(output)
    stored = _stored_run(output) if resume else None
    if stored is not None:
        _refuse_other_spec(output, stored, spec)
    elif not resume:
        why = holds_run(output)
        if why:
            raise OutputFolderTaken(why)
    refuse_inside_dataset(output, _local_root(spec))  # before admission: nothing is read
    if admitted is None:
        admitted = adm.admit(spec)
    refuse_inside_dataset(output, admitted.root)
    created = create_folder(output)
    launch = {"new_run": stored is None, "wrote_started": False}
    try:
        return _launch(spec, output, admitted, stored, launch, progress=progress, log=log,
                       dry_run=dry_run)
    except BaseException:
        _undo_launch(output, created, launch)
        raise


def _refuse_other_spec(output: Path, stored: dict, spec: RunSpec) -> None:
    if stored.get("spec_sha256") != spec.sha256():
        now_spec = json.loads(to_json(spec.to_dict()))
        _refuse_differences(str(output / RUN_STARTED), "the spec",
                            {"spec": stored.get("spec")}, {"spec": now_spec})
        raise ResumeError(f"{output / RUN_STARTED}: spec_sha256 {stored.get('spec_sha256')} "
                          f"differs from the spec's {spec.sha256()}")


def _launch(spec: RunSpec, output: Path, admitted, stored, launch: dict, *, progress, log,
            dry_run: bool) -> dict:
    """The identity checks and the run itself, in ``output`` (absolute, checked, created)."""
    if progress is None:
        progress = os.isatty(2)
    code = code_hash()
    try:
        prov = provenance(spec, admitted.sample_ids)
    except ProvenanceError as e:
        raise RunError(str(e)) from None
    admitted.provenance = prov
    identity = run_identity(admitted, code, prov)
    if stored is not None:
        _refuse_differences(str(output / RUN_STARTED), "the run identity", stored["identity"], identity)
    with _locked(output):
        record = write_resolved_protocol(
            spec, output, kind="dry_run" if dry_run else "resume" if stored is not None else "run",
            checkpoints=admitted.checkpoints, device=admitted.device, log=log, code=code)
        if dry_run:
            return {"dry_run": True, "method_name": spec.method_name,
                    "resolved_protocol": str(output / f"resolved_protocol.{record['launch']['index']}.json"),
                    "inference_protocol": record["inference_protocol"], "n_tasks": len(admitted.tasks)}
        finished = None if stored is None else _finished_summary(output, spec)
        if finished is not None:
            if log:
                log(f"{output}: the run is complete (every seed verified); nothing to resume")
            return finished
        if stored is None:
            stored = {"format": RUN_STARTED_FORMAT, "method_name": spec.method_name,
                      "spec": spec.to_dict(), "spec_sha256": spec.sha256(),
                      "seeds": list(spec.seeds), "identity": identity, "started_utc": utc_now(),
                      "resumes": []}
        else:
            stored["resumes"].append({"utc": utc_now(), "hardware": adm.hardware()})
            _remove_temporaries(output)
        launch["wrote_started"] = launch["new_run"]
        atomic_write_json(output / RUN_STARTED, stored)
        fsync_dir(output)
        return _run_seeds(admitted, output, code, progress, log)


def _holds_records(output: Path) -> bool:
    """Whether a run folder holds a completed seed or a journal with any entry (what a
    resume keeps)."""
    for p in output.iterdir():
        if p.name.startswith("seed-") and p.is_dir():
            return True
        if p.name.startswith(".seed-") and p.name.endswith(".partial"):
            j = p / JOURNAL_NAME
            if j.is_file() and j.stat().st_size > len(JOURNAL_HEADER):
                return True
    return False


def _undo_launch(output: Path, created: list[Path], launch: dict) -> None:
    """After a launch failed: a new run with no durable record leaves nothing of itself
    (``run_started.json``, seed folders in progress, the lock) but its
    ``resolved_protocol`` records; folders this launch created are removed when empty.
    A folder holding records keeps everything (``--resume`` continues it)."""
    with contextlib.suppress(OSError):
        if launch["wrote_started"] and output.is_dir() and not _holds_records(output):
            for p in output.iterdir():
                if p.name.startswith(".seed-") and p.name.endswith(".partial") and p.is_dir():
                    shutil.rmtree(p)
                elif p.name in (RUN_STARTED, _LOCK) or p.name.startswith(f".{RUN_STARTED}.tmp-"):
                    p.unlink()
            fsync_dir(output)
    remove_created(created)


def _run_seeds(admitted, output: Path, code: dict, progress: bool, log) -> dict:
    spec = admitted.spec
    summaries = {}
    with _progress(progress) as prog:
        for seed in spec.seeds:
            final = output / f"seed-{seed}"
            partial = output / f".seed-{seed}.partial"
            if final.is_dir():
                if partial.exists():  # cannot coexist with a completed seed; nothing in it is needed
                    shutil.rmtree(partial)
                m = _keep_completed_seed(admitted, seed, final, code, log)
                if log:
                    log(f"seed {seed}: complete ({m['n_records']} records) -> {final}")
            else:
                m = run_seed(admitted, seed, partial, prog, code=code, log=log)
                os.replace(partial, final)
                fsync_dir(output)
                if log:
                    log(f"seed {seed}: {m['n_records']} records -> {final}")
            summaries[str(seed)] = {"folder": final.name, "status_counts": m["status_counts"],
                                    "n_records": m["n_records"]}
    summary = {"format": RUN_FORMAT, "method_name": spec.method_name, "spec": spec.to_dict(),
               "spec_sha256": spec.sha256(), "seeds": list(spec.seeds), "per_seed": summaries,
               "code": code, "finished_utc": utc_now()}
    atomic_write_text(output / "run.json", to_json(summary) + "\n")
    return summary
