"""One timed request: the complete procedure from input preparation to recosting.

``execute(planner, task, budget)`` (the ``complete_request_v1`` timing profile) starts
the clock, builds the request (input preparation; the absolute deadline is
``start + budget.wall_time_ms``), calls the planner, waits for any JAX arrays in its
result (``block_until_ready``) and for an initialised PyTorch CUDA context
(:func:`~passage_jax.run.execution.device_sync.synchronize_torch`), snapshots the route to host
memory, then checks legality and recosts it, and stops the clock. The deadline is
judged at the moment the route snapshot is complete (the planner's work is finished
then); a return after the deadline is ``timeout`` even with a legal route.

``execute_session(planner, task, budget)`` (the session timing profiles) builds the
request first, starts the clock with its raw arrays in memory (the deadline is the
clock's start + ``wall_time_ms``), and stops it when the route is returned and
snapshotted; the legality check and recosting follow outside ``latency_ms``. Every
record carries ``validation_recost_ms``, the time of its legality check and recosting
(inside ``latency_ms`` under the default profile, outside it under a session profile).

Status precedence: planner exception (any ``BaseException``, ``SystemExit`` and
``KeyboardInterrupt`` included; only the evaluator's own SIGINT/SIGTERM stops the run:
:mod:`passage_jax.run.execution.interrupts`) -> ``runtime_error`` (``oom`` for memory
exhaustion); malformed result -> ``runtime_error``; late -> ``timeout``;
missing counter for a configured limit -> ``runtime_error``; counter above its
limit -> ``budget_exhausted``; planner said ``ok`` but the route is malformed or
illegal -> ``invalid_path``; otherwise the planner's own status.
"""
from __future__ import annotations

import math
import time
import traceback

import jax

from passage_jax.graph.costs import crop_stats_from_bounds
from passage_jax.graph.routes import route_cost, route_problem
from passage_jax.protocol.contracts import (
    BudgetSpec,
    PlanResult,
    ProtocolError,
    budget_problem,
    normalise_result,
)
from passage_jax.protocol.records import ROUTE_FORMAT_CODE, ROUTE_FORMATS, describe_route, snapshot_route
from passage_jax.protocol.requests import build_request, set_deadline
from passage_jax.run.execution import interrupts
from passage_jax.run.execution.device_sync import synchronize_torch

__all__ = ["execute", "execute_session", "call_planner", "empty_outcome", "finish_record",
           "block_until_ready"]


def block_until_ready(tree) -> int:
    """Wait for every JAX array in ``tree`` (nested lists/tuples/dicts/dataclass
    fields); returns how many were waited for."""
    n = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        if isinstance(leaf, jax.Array):
            leaf.block_until_ready()
            n += 1
    return n


def _is_oom(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    text = f"{_name(e)}: {_text(e)}"
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def empty_outcome() -> dict:
    """A planner call's outcome before anything came back (no result, no route, no
    failure): what :func:`call_planner` fills in and :func:`finish_record` reads."""
    return {"result": None, "snap": (ROUTE_FORMAT_CODE["none"], None, None, None),
            "sync_arrays": 0, "torch_synchronized": False, "status": None, "error": None,
            "error_type": None}


def call_planner(planner, make_request) -> dict:
    """The planner's part of one request: build it (``make_request()``), call the
    planner, wait for its JAX arrays and an initialised PyTorch CUDA context, normalise
    the result and snapshot the route.

    Returns the outcome ``{"result": PlanResult or None, "snap": snapshot_route
    tuple, "sync_arrays": int, "torch_synchronized": bool, "status": None or the
    failure status, "error", "error_type"}``; a planner failure is recorded here, never
    raised: any ``BaseException`` raised by the planner or by converting what it returned
    (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` included) is the request's
    ``runtime_error`` naming the exception. Only the evaluator's own SIGINT or SIGTERM
    received during the call (:mod:`passage_jax.run.execution.interrupts`) is raised, as
    :class:`~passage_jax.run.execution.interrupts.RunInterrupted`. A supervised worker runs exactly
    this and sends the outcome (with ``result.path`` dropped) to the parent, which
    finishes it with :func:`finish_record`.
    """
    out = empty_outcome()
    with interrupts.planner_call():
        try:
            request = make_request()
            raw = planner.raw(request) if hasattr(planner, "raw") else planner(request)
            out["sync_arrays"] = block_until_ready(raw.__dict__ if isinstance(raw, PlanResult) else raw)
            out["torch_synchronized"] = synchronize_torch()
            result = normalise_result(raw)
            out["result"] = result
            out["snap"] = snapshot_route(result.path)
        except ProtocolError as e:
            out.update(status="runtime_error", error=f"protocol: {_text(e)}", error_type="ProtocolError")
        except BaseException as e:  # noqa: BLE001  (a planner failure is recorded, never fatal)
            interrupts.raise_if_received()  # the evaluator's own signal stops the run
            out.update(status="oom" if _is_oom(e) else "runtime_error", error=_failure(e),
                       error_type=_name(e))
        interrupts.raise_if_received()  # a signal the planner swallowed
    return out


def _name(e: BaseException) -> str:
    try:
        return str(type(e).__name__)
    except BaseException:  # noqa: BLE001  (a hostile metaclass)
        return "BaseException"


def _text(e: BaseException) -> str:
    """``str(e)``, or nothing when the planner's exception cannot say itself."""
    try:
        return str(e)
    except BaseException:  # noqa: BLE001  (its __str__ raised)
        return ""


def _failure(e: BaseException) -> str:
    """The record's ``error`` for what the planner raised: ``Name: text`` (the last 2,000
    characters), the name alone when the exception's text cannot be had."""
    try:
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
    except BaseException:  # noqa: BLE001  (its __str__ raised)
        text = ""
    return (text or _name(e))[-2000:]


def _reported(rec: dict, result) -> None:
    """The planner's own figures from its result into the record."""
    rec.update(reported_status=result.status, work=result.work, stage_work=result.stage_work,
               precision=result.precision, resource_peaks=result.resource_peaks,
               route_stage=result.route_stage)
    if result.message:
        rec["message"] = result.message[-2000:]


def _legality(rec: dict, task, snap: tuple) -> None:
    """The route's legality problem (or its malformation) and, for a legal route, its cost."""
    fmt, route, _, _ = snap
    if route is not None:
        rec["problem"] = route_problem(route, task.scene.start, task.scene.goal, task.obstacles)
        if rec["problem"] is None:
            rec["route_cost"] = route_cost(route, task.elevation_m, task.objective, task.weight,
                                           stats=_crop_stats(task))
    elif ROUTE_FORMATS[fmt] != "none":
        rec["problem"] = f"malformed route ({ROUTE_FORMATS[fmt]}: {describe_route(snap[3])})"


def _crop_stats(task):
    """The crop statistics of the task's elevation from the extremes the reader took
    (:meth:`passage_jax.data.Scene.kept_elevation_bounds`), or None (computed over the grid)."""
    kept = getattr(getattr(task, "scene", None), "kept_elevation_bounds", None)
    bounds = None if kept is None else kept(task.elevation_m)
    return None if bounds is None else crop_stats_from_bounds(*bounds)


def _status(rec: dict, result, budget: BudgetSpec, has_route: bool, late: bool) -> str:
    """The status of a request the planner answered in its own process (the precedence
    after a planner failure): late, budget problem, ok without a legal route, its own."""
    if late:
        return "timeout"
    bp = budget_problem(result, budget)
    if bp is not None:
        status, reason = bp
        rec["error"] = reason
        rec["error_type"] = "BudgetError" if status == "budget_exhausted" else "ProtocolError"
        return status
    if result.status == "ok" and (rec["problem"] is not None or not has_route):
        if not has_route and rec["problem"] is None:
            rec["problem"] = "status ok without a route"
        return "invalid_path"
    return result.status


def finish_record(task, budget: BudgetSpec, outcome: dict, t0: float, t_ret: float,
                  clock=time.monotonic, recost_inside: bool = True) -> tuple:
    """Check legality, recost, stop the clock and apply the status precedence.

    ``outcome`` is :func:`call_planner`'s dict (a supervisor may also pass one with
    a forced ``status`` and ``"returned": False`` when the planner never returned);
    ``t0`` is the request's start and ``t_ret`` the moment the route snapshot was
    complete (or the request was given up). ``recost_inside``: ``latency_ms`` runs to
    the end of the legality check and recosting (the default profile), else it stops at
    ``t_ret`` (the session profiles). Either way ``validation_recost_ms`` is the time of
    the legality check and recosting. Returns ``(record, snapshot)``.
    """
    wall = budget.wall_time_ms
    deadline = None if wall is None else t0 + wall / 1000.0
    rec: dict = {"reported_status": None, "error": outcome["error"], "error_type": outcome["error_type"],
                 "problem": None, "work": {}, "stage_work": {}, "precision": None,
                 "resource_peaks": {}, "route_cost": None, "sync_arrays": outcome["sync_arrays"],
                 "torch_synchronized": bool(outcome.get("torch_synchronized", False)),
                 "route_stage": None}
    snap = outcome["snap"]
    result = outcome["result"]
    if result is not None:
        _reported(rec, result)
    t_check = clock()
    _legality(rec, task, snap)  # inside the timer under the default profile
    t_end = clock()
    rec["validation_recost_ms"] = (t_end - t_check) * 1000.0
    late = deadline is not None and t_ret > deadline
    status = outcome["status"]
    if status is None:
        status = _status(rec, result, budget, snap[1] is not None, late)
    fmt, route = snap[0], snap[1]
    rec["status"] = status
    rec["latency_ms"] = ((t_end if recost_inside else t_ret) - t0) * 1000.0
    rec["returned_ms"] = (t_ret - t0) * 1000.0 if outcome.get("returned", True) else None
    rec["deadline_ms"] = wall
    rec["late"] = bool(late)
    rec["overrun_ms"] = max(0.0, (t_ret - deadline) * 1000.0) if deadline is not None else None
    rec["route_format"] = ROUTE_FORMATS[fmt]
    rec["route_len"] = None if route is None else int(len(route))
    if rec["route_cost"] is not None and not math.isfinite(rec["route_cost"]):
        rec["route_cost"] = None
    return rec, snap


def execute(planner, task, budget: BudgetSpec | None = None, clock=time.monotonic) -> tuple:
    """Run one request; returns ``(record, snapshot)``.

    ``record`` is a JSON-ready dict (status, latency and deadline figures, work,
    stage work, precision, peaks, route format and length, legality problem,
    recomputed cost, error); ``snapshot`` is ``snapshot_route``'s tuple.
    """
    budget = budget or BudgetSpec()
    wall = budget.wall_time_ms
    t0 = clock()
    deadline = None if wall is None else t0 + wall / 1000.0
    outcome = call_planner(planner, lambda: build_request(task, budget, deadline))
    t_ret = clock()
    return finish_record(task, budget, outcome, t0, t_ret, clock)


def execute_session(planner, task, budget: BudgetSpec | None = None, clock=time.monotonic) -> tuple:
    """One timed request of a session profile; returns ``(record, snapshot)`` as
    :func:`execute` does.

    The request is built before the clock starts (its raw arrays are in memory when it
    does); the deadline is set to the clock's start + ``budget.wall_time_ms``. The clock
    stops when the route is returned and snapshotted (JAX arrays waited for, an
    initialised PyTorch CUDA context synchronised): ``latency_ms`` equals ``returned_ms``,
    and the legality check and recosting that follow are ``validation_recost_ms``.
    """
    budget = budget or BudgetSpec()
    wall = budget.wall_time_ms
    request = build_request(task, budget, None)
    t0 = clock()
    if wall is not None:
        set_deadline(request, t0 + wall / 1000.0)
    outcome = call_planner(planner, lambda: request)
    t_ret = clock()
    return finish_record(task, budget, outcome, t0, t_ret, clock, recost_inside=False)
