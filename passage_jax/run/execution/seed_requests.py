"""A seed's requests, executed one at a time on one planner build and journalled.

The planner is built (not timed); under a session timing profile the session's warm-up
calls run next (:mod:`passage_jax.run.execution.sessions`). The build is recorded in the seed state
(with its session entry), every missing request runs and its record is appended to the
journal (written and flushed before the next request starts; fsynced within half a
second), then the build records what the executor saw and what it compiled in the run's
process. :func:`serve_requests` is that
build and its requests with the records handed to any sink: the journal here, a process's
share of a seed in a multi-process session run (:mod:`passage_jax.run.execution.session_shares`).

A record's ``warm_complete``: under a session profile the executor's (the session or
worker serving it completed its ``session_warmup`` calls); under the default profile a
warm-series record when ``latency_warmup >= 1`` and the planner build serving it ran the
warm-up passes (a build a resume started after the first warm-up request did not).
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from passage_jax.compilation import CompileCounter
from passage_jax.fileio import utc_now
from passage_jax.protocol.records import BATCH_RECORD_KEYS, RECORD_KEYS
from passage_jax.run.context import RunContext
from passage_jax.run.errors import RunError
from passage_jax.run.execution.executors import open_executor
from passage_jax.run.execution.planner_build import PlannerBuildError
from passage_jax.run.execution.working_directory import WorkingDirectory
from passage_jax.run.progress import ProgressEvent
from passage_jax.run.record import Build, Journal, SeedState, save_state
from passage_jax.run.specification import RequestPlan

__all__ = ["execute_requests", "serve_requests", "report"]


def execute_requests(ctx: RunContext, seed: int, rows: RequestPlan, journal: Journal,
                     state: SeedState, planner=None, resumed: bool = False) -> SeedState:
    """Run requests ``journal.n_entries ..`` of ``rows`` on one planner build (``planner``:
    an already-built planner, in-process only); the first carries ``resumed``. Returns
    the seed state with the build recorded (saved)."""
    folder = journal.path.parent
    done = journal.n_entries
    report(ctx, seed, done, len(rows))
    held = {"state": state}

    def started(build: Build) -> None:  # recorded before its first request
        held["state"] = save_state(folder, held["state"].with_build(build))

    build = serve_requests(ctx, seed, rows, range(done, len(rows)), journal.append, planner=planner,
                           resumed_at=done if resumed else None, on_build=started)
    state = held["state"].with_build_finished(build.executor_stats, build.compilation,
                                              build.working_directory_restored, build.session,
                                              build.requests_wall_ms)
    return save_state(folder, state)


def serve_requests(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, *,
                   planner=None, resumed_at: int | None = None, on_build=None) -> Build:
    """Requests ``indices`` of ``rows`` on one planner build, in order; each record is handed
    to ``append(line, snapshot)`` as it completes, and the record ``resumed_at`` (if any)
    carries ``resumed: true``. ``on_build(build)`` is called once the planner is built (and
    its session warmed up). Returns the build with what its executor saw and compiled."""
    first = indices.start
    cwd = WorkingDirectory(seed, ctx.log)
    counter = CompileCounter().__enter__()  # what this build compiled in the run's process
    with _open(ctx, seed, planner, cwd) as ex:
        session = _open_session(ctx, ex, cwd, first)
        build = _build(ex, first, session)
        if on_build is not None:
            on_build(build)
        t0 = time.monotonic()
        run = _run_batches if ctx.spec.batched else _run_rows
        run(ctx, seed, rows, indices, append, ex, cwd, resumed_at)
        wall_ms = (time.monotonic() - t0) * 1000.0
        # what the executor saw (requests; for workers also starts, kills, crashes, warm-ups)
        stats = dict(ex.stats or {})
        counter.__exit__(None, None, None)
        if session is not None:
            session = {**ex.session.to_dict(), "first_record": first}
        return dataclasses.replace(build, executor_stats=stats, compilation=counter.stats.to_dict(),
                                   working_directory_restored=cwd.record(), session=session,
                                   requests_wall_ms=round(wall_ms, 3))


def _open(ctx: RunContext, seed: int, planner, cwd: WorkingDirectory):
    """The seed's executor (its planner built), the working directory restored after."""
    warmup = None if ctx.admitted.warmup is None else [ctx.admitted.warmup]
    try:
        return open_executor(ctx.spec, seed, device=ctx.admitted.device, planner=planner,
                             warmup_tasks=warmup)
    except PlannerBuildError as e:
        raise RunError(f"seed {seed}: {e}") from e
    finally:
        cwd.restore("the planner's construction")


def _open_session(ctx: RunContext, ex, cwd: WorkingDirectory, first_record: int) -> dict | None:
    """Under a one-pass timing profile, the session's warm-up calls (the batched
    procedure's warm-up batches) run; its session entry, with the first record it serves
    (None under the default profile)."""
    if not ctx.spec.one_pass:
        return None
    try:
        return {**ex.open_session(ctx.spec.budget), "first_record": first_record}
    finally:
        cwd.restore("the session's warm-up")


def _build(ex, at_record: int, session: dict | None = None) -> Build:
    return Build(utc=utc_now(), at_record=at_record, construction_ms=ex.construction_ms,
                 planner_name=ex.planner_name, profile=ex.profile, timer=ex.timer, session=session)


def _run_rows(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, ex,
              cwd: WorkingDirectory, resumed_at: int | None) -> None:
    spec = ctx.spec
    # default profile: this build ran the warm-up passes (it started at or before their first request)
    warmed_build = spec.latency_warmup >= 1 and indices.start <= len(rows.stubs)
    for i in indices:
        series, rep, ti, _sid = rows[i]
        task = ctx.admitted.tasks[ti]  # the chunk holding it is taken when first needed
        try:
            rec, snap = ex.execute(task, spec.budget)
        finally:
            cwd.restore(f"request {i}")
        rec.update(record=i, seed=int(seed), series=series, repeat=rep, task_index=ti,
                   sample_id=task.id, resumed=i == resumed_at,
                   quality=series == "warm" and rep == spec.quality_repeat_index)
        if rec.get("warm_complete") is None:
            rec["warm_complete"] = series == "warm" and warmed_build
        ordered = {k: rec.get(k) for k in RECORD_KEYS}
        append(json.dumps(ordered, default=_json_num, allow_nan=False), snap)
        report(ctx, seed, i + 1, len(rows), series, rep)


def _run_batches(ctx: RunContext, seed: int, rows: RequestPlan, indices: range, append, ex,
                 cwd: WorkingDirectory, resumed_at: int | None) -> None:
    """The batched procedure's one pass: requests ``indices`` (each a task, in roster order)
    ``batch_size`` at a time (:meth:`~passage_jax.run.execution.batches.BatchExecutor.execute_batch`),
    each batch's records appended in order once it is timed, checked and recosted. A
    resumed seed's batches start at its first missing request."""
    size = ctx.spec.batch_size
    for k in range(indices.start, indices.stop, size):
        idx = range(k, min(k + size, indices.stop))
        tasks = [ctx.admitted.tasks[rows[i][2]] for i in idx]
        try:
            results = ex.execute_batch(tasks, k)
        finally:
            cwd.restore(f"the batch of requests {idx.start}-{idx.stop - 1}")
        for i, task, (rec, snap) in zip(idx, tasks, results):
            series, rep, ti, _sid = rows[i]
            rec.update(record=i, seed=int(seed), series=series, repeat=rep, task_index=ti,
                       sample_id=task.id, resumed=i == resumed_at, quality=True)
            ordered = {key: rec.get(key) for key in (*RECORD_KEYS, *BATCH_RECORD_KEYS)}
            append(json.dumps(ordered, default=_json_num, allow_nan=False), snap)
        report(ctx, seed, idx.stop, len(rows), "warm", 0)


def report(ctx: RunContext, seed: int, done: int, total: int, series=None, repeat=None) -> None:
    """Tell the progress callback (if any) that ``done`` of ``total`` requests are done."""
    if ctx.progress is not None:
        ctx.progress(ProgressEvent(ctx.spec.method_name, int(seed), done, total, series, repeat))


def _json_num(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
