"""The complete-request run loop: admission, timed series, durable records, run folders
(contract §7), and resuming a run that was killed.

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
appended to its journal (:mod:`passage_jax.run.record.journal`) and fsynced before the
next request starts; when the seed completes, ``requests.jsonl``, ``paths.npz``,
``references.npz`` and ``manifest.json`` are built from the journal
(:mod:`passage_jax.run.record.seed_files`) and the folder is renamed to ``seed-<seed>``.
``run_spec(..., resume=True)`` continues a killed run from what is durable
(:mod:`passage_jax.run.record.resume`): it checks the stored identities, keeps completed seeds
(verified, and rebuilt from their journals when a file is torn) and every complete
journal entry, and re-runs only what is missing. Under a session profile in a
multi-process launch the processes share each seed's requests out, one session each,
and process 0 journals the gathered records (:mod:`passage_jax.run.execution.session_shares`).

The pieces: :mod:`~passage_jax.run.record.folder` (output folders, refusals, the lock, what a
failed launch leaves), :mod:`~passage_jax.run.specification.plan` (the requests in order),
:mod:`~passage_jax.run.record.seed_state` (``seed_state.json``),
:mod:`~passage_jax.run.execution.seed_requests` (one planner build's requests),
:mod:`~passage_jax.run.record.manifest` (identities and the seed manifest) and
:mod:`~passage_jax.run.progress` (progress events for the command line to draw).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from passage_jax import cluster
from passage_jax.fileio import atomic_write_json, atomic_write_text, fsync_dir, to_json, utc_now
from passage_jax.protocol.records import RUN_FORMAT, code_hash
from passage_jax.protocol.runfolder import (
    JOURNAL,
    RUN_STARTED,
    RUN_STARTED_FORMAT,
    RUN_SUMMARY,
    SEED_STATE,
    launch_record_name,
    partial_seed_folder_name,
    seed_folder_name,
)
from passage_jax.run.admission import Admitted, admit
from passage_jax.run.context import RunContext
from passage_jax.run.errors import OutputFolderTaken, ResumeError, RunError
from passage_jax.run.execution import (
    Leader,
    RunInterrupted,
    execute_requests,
    execute_shared,
    follow,
    leading,
    splits_requests,
    stop_on_signals,
)
from passage_jax.run.record import (
    Journal,
    ProvenanceError,
    SeedState,
    clear_leftovers,
    create_folder,
    finish_seed,
    finished_summary,
    hardware,
    holds_records,
    holds_run,
    keep_completed_seed,
    load_state,
    local_root,
    locked,
    output_folder,
    refuse_differences,
    refuse_inside_dataset,
    refuse_other_spec,
    remove_temporaries,
    run_identity,
    run_provenance,
    save_state,
    stored_run,
    undo_launch,
    write_resolved_protocol,
)
from passage_jax.run.specification import RequestPlan, RunSpec, check_entry, load_spec

__all__ = ["run_spec", "run_seed"]


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
    (:func:`passage_jax.run.record.folder.undo_launch`).

    ``progress``: a callable taking a :class:`~passage_jax.run.progress.ProgressEvent`
    (when a seed starts executing requests and after each request); anything else
    (``None``, ``False``, ``True``) reports nothing: drawing progress is the command
    line's job. ``log``: a callable taking one line, or None.

    Every launch writes ``resolved_protocol.json`` (:mod:`passage_jax.run.record.launch_record`).
    With ``dry_run=True`` the run is admitted and that record written, nothing else: no
    request runs and no seed folder is made; returns ``{"dry_run": True, ...}``.

    Under a session timing profile in a multi-process launch every process calls this:
    each runs its own session on its share of each seed's requests
    (:mod:`passage_jax.run.execution.session_shares`; ``admitted``: the launch's admission, made
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
    with Leader():  # process 0 leads the others through the run (session_shares.leading)
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
    here). A launch that fails is undone as far as :func:`~passage_jax.run.record.folder.undo_launch`
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
                early = _record_launch(ctx, output, stored, dry_run)
                if early is not None:
                    return early
                started = stored is None
                if stored is not None:
                    remove_temporaries(output)
                atomic_write_json(output / RUN_STARTED, _started_record(ctx.spec, identity, stored))
                fsync_dir(output)
                return _run_seeds(ctx, output)
    except BaseException as e:
        undo_launch(output, created, started)
        if isinstance(e, RunInterrupted) and log is not None:
            log(_stopped_line(output, e))
        raise


def _launch_context(admitted: Admitted, progress, log) -> RunContext:
    """The context of a launch: the code hash and the provenance record are taken now
    (:class:`RunError` naming the provenance input that is missing or does not fit)."""
    code = code_hash()
    try:
        prov = run_provenance(admitted.spec, admitted.sample_ids)
    except ProvenanceError as e:
        raise RunError(str(e)) from None
    return RunContext(admitted, code, prov, progress, log)


def _stopped_line(output: Path, e: RunInterrupted) -> str:
    """The one line saying that the evaluator's signal stopped the run, and what is kept."""
    if holds_records(output):
        return (f"{output}: the run was stopped by {e.signal_name}; every record completed "
                f"before it is durable, and resuming the run continues it")
    return f"{output}: the run was stopped by {e.signal_name} before its first record; nothing is kept"


def _record_launch(ctx: RunContext, output: Path, stored: dict | None, dry_run: bool) -> dict | None:
    """Write the launch's ``resolved_protocol`` record; the result of a launch that ends
    there (a dry run, a resumed run that is already complete), else None."""
    spec = ctx.spec
    record = write_resolved_protocol(
        spec, output, kind="dry_run" if dry_run else "resume" if stored is not None else "run",
        checkpoints=ctx.admitted.checkpoints, device=ctx.admitted.device, log=ctx.log, code=ctx.code)
    if dry_run:
        return {"dry_run": True, "method_name": spec.method_name,
                "resolved_protocol": str(output / launch_record_name(record['launch']['index'])),
                "inference_protocol": record["inference_protocol"], "n_tasks": len(ctx.admitted.tasks)}
    finished = None if stored is None else finished_summary(output, spec)
    if finished is not None:
        ctx.say(f"{output}: the run is complete (every seed verified); nothing to resume")
    return finished


def _started_record(spec: RunSpec, identity: dict, stored: dict | None) -> dict:
    """``run_started.json``: a new run's, or the stored one with this resume added."""
    if stored is None:
        return {"format": RUN_STARTED_FORMAT, "method_name": spec.method_name,
                "spec": spec.to_dict(), "spec_sha256": spec.sha256(),
                "seeds": list(spec.seeds), "identity": identity, "started_utc": utc_now(),
                "resumes": []}
    resume = {"utc": utc_now(), "hardware": hardware()}
    return {**stored, "resumes": [*stored["resumes"], resume]}


def _run_seeds(ctx: RunContext, output: Path) -> dict:
    """Every seed (kept when complete, else run), then ``run.json``."""
    spec = ctx.spec
    summaries = {}
    for seed in spec.seeds:
        m = _one_seed(ctx, output, seed)
        summaries[str(seed)] = {"folder": seed_folder_name(seed), "status_counts": m["status_counts"],
                                "n_records": m["n_records"]}
    summary = {"format": RUN_FORMAT, "method_name": spec.method_name, "spec": spec.to_dict(),
               "spec_sha256": spec.sha256(), "seeds": list(spec.seeds), "per_seed": summaries,
               "code": ctx.code, "finished_utc": utc_now()}
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
    m = _run_seed(ctx, seed, partial)
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
    :func:`run_spec`; ``provenance``: the run's provenance record (None: the manifest
    takes it). On process 0 of a multi-process session run
    (:func:`~passage_jax.run.execution.session_shares.leading`) the missing requests are shared out
    across the launch's processes.
    """
    ctx = RunContext.of(admitted, code, provenance=provenance, progress=progress, log=log)
    return _run_seed(ctx, seed, folder, planner)


def _run_seed(ctx: RunContext, seed: int, folder: Path, planner=None) -> dict:
    """:func:`run_seed` under the launch's context ``ctx``."""
    leader = leading()
    folder.mkdir(parents=True, exist_ok=True)
    fsync_dir(folder.parent)
    clear_leftovers(folder)
    state = load_state(folder, seed)
    resumed = state is not None or (folder / JOURNAL).exists()
    state = state or SeedState.new(seed)
    if state.seed != int(seed):
        raise ResumeError(f"{folder / SEED_STATE}: seed {state.seed} is not seed {seed}")
    rows = RequestPlan(ctx.spec, ctx.admitted.tasks.stubs)
    journal, scan = _open_journal(folder / JOURNAL, rows, seed)
    try:
        if resumed:
            state = state.with_resume(scan.count, scan.torn_bytes, scan.torn)
            ctx.say(f"seed {seed}: resuming with {scan.count} of {len(rows)} records recovered"
                    + (f"; dropped a torn last entry ({scan.torn_bytes} bytes: {scan.torn})"
                       if scan.torn else ""))
        del scan
        save_state(folder, state)
        if journal.n_entries < len(rows) and leader is not None:
            state = execute_shared(ctx, leader, seed, rows, journal, state, resumed)
        elif journal.n_entries < len(rows):
            state = execute_requests(ctx, seed, rows, journal, state, planner, resumed)
    finally:
        journal.close()
    return finish_seed(ctx, seed, folder, state)


def _open_journal(jpath: Path, rows: RequestPlan, seed: int):
    """The seed's journal, opened for appending (each entry it holds checked against the
    request it stands for), and the scan of what it held."""

    def check(i, line, _snap):
        rows.check_count(i, jpath)
        check_entry(json.loads(line), i, seed, rows[i], jpath)

    return Journal.open(jpath, visit=check)
