"""One timed request: the complete procedure from input preparation to recosting.

``execute(planner, task, budget)`` starts the clock, builds the request
(input preparation; the absolute deadline is ``start + budget.wall_time_ms``),
calls the planner, waits for any JAX arrays in its result
(``block_until_ready``), snapshots the route to host memory, then checks
legality and recosts it, and stops the clock. The deadline is judged at the
moment the route snapshot is complete (the planner's work is finished then);
a return after the deadline is ``timeout`` even with a legal route.

Status precedence: planner exception -> ``runtime_error`` (``oom`` for memory
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

from passage_jax.graph.routes import route_cost, route_problem
from passage_jax.protocol.contracts import (
    BudgetSpec,
    PlanResult,
    ProtocolError,
    budget_problem,
    normalise_result,
)
from passage_jax.protocol.records import ROUTE_FORMAT_CODE, ROUTE_FORMATS, snapshot_route
from passage_jax.protocol.requests import build_request

__all__ = ["execute", "block_until_ready"]


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
    text = f"{type(e).__name__}: {e}"
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def execute(planner, task, budget: BudgetSpec | None = None, clock=time.monotonic) -> tuple:
    """Run one request; returns ``(record, snapshot)``.

    ``record`` is a JSON-ready dict (status, latency and deadline figures, work,
    stage work, precision, peaks, route format and length, legality problem,
    recomputed cost, error); ``snapshot`` is ``snapshot_route``'s tuple.
    """
    budget = budget or BudgetSpec()
    wall = budget.wall_time_ms
    rec: dict = {"reported_status": None, "error": None, "error_type": None, "problem": None,
                 "work": {}, "stage_work": {}, "precision": None, "resource_peaks": {},
                 "route_cost": None, "sync_arrays": 0}
    snap = (ROUTE_FORMAT_CODE["none"], None, None, None)  # until the planner returns
    t0 = clock()
    deadline = None if wall is None else t0 + wall / 1000.0
    status = None
    result = None
    try:
        request = build_request(task, budget, deadline)
        raw = planner.raw(request) if hasattr(planner, "raw") else planner(request)
        rec["sync_arrays"] = block_until_ready(raw.__dict__ if isinstance(raw, PlanResult) else raw)
        result = normalise_result(raw)
        snap = snapshot_route(result.path)
    except ProtocolError as e:
        status = "runtime_error"
        rec.update(error=f"protocol: {e}", error_type="ProtocolError")
    except Exception as e:  # noqa: BLE001  (a planner failure is recorded, never fatal)
        status = "oom" if _is_oom(e) else "runtime_error"
        tb = traceback.format_exception_only(type(e), e)
        rec.update(error="".join(tb).strip()[-2000:], error_type=type(e).__name__)
    t_ret = clock()
    if result is not None:
        rec.update(reported_status=result.status, work=result.work, stage_work=result.stage_work,
                   precision=result.precision, resource_peaks=result.resource_peaks)
        if result.message:
            rec["message"] = result.message[-2000:]
    # legality and recosting (inside the timer)
    fmt, route, _, _ = snap
    if route is not None:
        rec["problem"] = route_problem(route, task.scene.start, task.scene.goal, task.obstacles)
        if rec["problem"] is None:
            rec["route_cost"] = route_cost(route, task.elevation_m, task.objective, task.weight)
    elif ROUTE_FORMATS[fmt] != "none":
        rec["problem"] = f"malformed route ({ROUTE_FORMATS[fmt]}: {snap[3]})"
    t_end = clock()

    late = deadline is not None and t_ret > deadline
    if status is None:
        if late:
            status = "timeout"
        else:
            bp = budget_problem(result, budget)
            if bp is not None:
                status, reason = bp
                rec["error"] = reason
                rec["error_type"] = "BudgetError" if status == "budget_exhausted" else "ProtocolError"
            elif result.status == "ok" and (rec["problem"] is not None or route is None):
                status = "invalid_path"
                if route is None and rec["problem"] is None:
                    rec["problem"] = "status ok without a route"
            else:
                status = result.status
    rec["status"] = status
    rec["latency_ms"] = (t_end - t0) * 1000.0
    rec["returned_ms"] = (t_ret - t0) * 1000.0
    rec["deadline_ms"] = wall
    rec["late"] = bool(late)
    rec["overrun_ms"] = max(0.0, (t_ret - deadline) * 1000.0) if deadline is not None else None
    rec["route_format"] = ROUTE_FORMATS[fmt]
    rec["route_len"] = None if route is None else int(len(route))
    if rec["route_cost"] is not None and not math.isfinite(rec["route_cost"]):
        rec["route_cost"] = None
    return rec, snap

