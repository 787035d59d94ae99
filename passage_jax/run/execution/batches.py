"""The batched procedure's executor (timing profile ``batched_v1``; docs/runner.md, "The
batched procedure").

The planner is built once per seed (construction not timed, but recorded) and must have
``plan_batch`` (:mod:`passage_jax.protocol.batch`); one with ``plan`` alone is refused
(:class:`~passage_jax.run.execution.planner_build.PlannerBuildError`). :meth:`BatchExecutor.open_session`
runs ``batch_warmup`` untimed batches of the warm-up scene (the validation scene the
session profiles warm up on; each batch timed for the manifest), then
:meth:`BatchExecutor.execute_batch` times one batch of tasks in roster order: its
:class:`~passage_jax.protocol.batch.PlanBatch` is built and put in device memory (and
waited for) before the clock starts; the clock stops when every route is on the host
(the planner's arrays waited for, then fetched). Each scene's route is then checked and
recosted as a batch-one route (outside the clock: ``validation_recost_ms``), and its
record carries the batch's figures (``batch_first``, ``batch_size``, ``batch_live``,
``batch_ms``) and no per-request latency (``latency_ms`` null).

Where the process has several devices of its default backend (and the spec names no
``device``), each batch is split along its batch axis over all of them
(:func:`batch_sharding`; a ``batch_size`` they do not divide stays on one device): the
planner's jitted ``plan_batch`` then runs partitioned. The build's entry names them
(``batch_devices``).

A planner failure in ``plan_batch`` (an exception, a result that is not a
:class:`~passage_jax.protocol.batch.BatchRoutes`) fails every scene of its batch with
``runtime_error`` (or ``oom``) naming it; a scene's malformed entry fails that scene
alone; the run goes on either way.
"""
from __future__ import annotations

import time

import jax

from passage_jax.contract import BATCHED_PROFILE
from passage_jax.placement import device_count, device_names, resolve_sharding
from passage_jax.precision import kernel_x64
from passage_jax.protocol.batch import BatchProtocolError, batch_of, plan_batch_of, scene_routes
from passage_jax.protocol.contracts import BudgetSpec, PlanResult
from passage_jax.protocol.records import snapshot_route
from passage_jax.run.execution import interrupts
from passage_jax.run.execution.devices import placement, session_hardware
from passage_jax.run.execution.planner_build import PlannerBuildError, build_planner
from passage_jax.run.execution.sessions import InProcessContext, Session
from passage_jax.run.execution.timing import _failure, _is_oom, _name, empty_outcome, finish_record
from passage_jax.run.execution.worker import device_scope

__all__ = ["BatchExecutor", "BATCH_TIMER"]

#: The batched procedure's timing boundary (manifest ``timing.timer``).
BATCH_TIMER = ("time.monotonic per batch; starts with the batch's raw arrays (PlanBatch) in "
               "device memory, covers plan_batch, the device sync and the routes' transfer to the "
               "host; legality check and recosting follow per scene outside it "
               "(validation_recost_ms); batch_ms per batch, per_scene_ms = batch_ms / live scenes")


def batch_sharding(device, batch_size: int):
    """Where a batch is placed: split along its batch axis over this process's devices of
    the default backend (a 1-D ``("batch",)`` mesh, as ``score`` places its kernel calls)
    when there are several, no ``device`` was named and ``batch_size`` divides among
    them; else None (the one device)."""
    if device is not None:
        return None
    sharding = resolve_sharding("auto", axes=("batch",))
    if sharding is None or batch_size % device_count(sharding):
        return None
    return sharding


class BatchExecutor(InProcessContext):
    """``batched_v1``: the planner's ``plan_batch`` over ``batch_size`` tasks at a time,
    warmed up by :meth:`open_session` (``warmup``: ``(warm-up task, batch_warmup)``)."""

    profile = BATCHED_PROFILE
    timer = BATCH_TIMER

    def __init__(self, inference: str | None, kwargs: dict | None = None, *, batch_size: int,
                 device=None, planner=None, warmup=None, clock=time.monotonic):
        self.warmup_task, calls = warmup
        self.batch_size = int(batch_size)
        self.clock = clock
        t0 = time.monotonic()
        if planner is None:
            if inference is None:
                raise ValueError("BatchExecutor needs an inference entry point or a planner")
            planner = build_planner(inference, "request", kwargs)
        self.construction_ms = (time.monotonic() - t0) * 1000.0
        self.plan_batch = plan_batch_of(planner)
        if self.plan_batch is None:
            raise PlannerBuildError(
                f"{inference or type(planner).__name__}: the planner has no plan_batch, so it cannot "
                f"run under timing_profile {BATCHED_PROFILE} (docs/protocol.md, \"Batches\"); a "
                f"planner with plan alone runs under the batch-one profiles")
        self.planner = planner
        self.planner_name = getattr(planner, "name", None)
        self.device = device
        self.where = placement(device)
        self.sharding = batch_sharding(device, self.batch_size)
        self.session = Session(self.construction_ms,
                               {**self.where, "hardware": session_hardware(device),
                                "batch_devices": device_names(self.sharding) if self.sharding
                                else [self.where["device"]]}, int(calls))
        self.stats: dict = {"requests": 0, "batches": 0, "warmup_batches": 0}

    def open_session(self, budget: BudgetSpec | None = None) -> dict:
        """Run the ``batch_warmup`` untimed batches of the warm-up task; the session entry
        (``warmup_ms``: each warm-up batch's time)."""
        for _ in range(self.session.warmup_calls):
            outcome, ms = self._call([self.warmup_task])
            self.session.called(ms)
            self.session.warmup_ms.append(round(ms, 3))
            self.session.warmup_failures += int(outcome["error"] is not None)
            self.stats["warmup_batches"] += 1
        return self.session.to_dict()

    def _call(self, tasks: list) -> tuple[dict, float]:
        """One timed call of ``plan_batch`` on ``tasks``: ``({"routes": host BatchRoutes or
        None, "error", "error_type", "status"}, ms)``."""
        out = {"routes": None, "error": None, "error_type": None, "status": None}
        batch = batch_of(tasks, self.batch_size)
        with device_scope(self.device), kernel_x64():
            where = self.device if self.sharding is None else self.sharding
            placed = jax.block_until_ready(jax.device_put(batch, where))
            with interrupts.planner_call():
                t0 = self.clock()
                try:
                    routes = jax.device_get(jax.block_until_ready(self.plan_batch(placed)))
                    out["routes"] = routes
                except BaseException as e:  # noqa: BLE001  (a planner failure is recorded, never fatal)
                    interrupts.raise_if_received()
                    out.update(status="oom" if _is_oom(e) else "runtime_error", error=_failure(e),
                               error_type=_name(e))
                ms = (self.clock() - t0) * 1000.0
                interrupts.raise_if_received()
        return out, ms

    def execute_batch(self, tasks: list, first_record: int) -> list[tuple[dict, tuple]]:
        """The records and route snapshots of ``tasks`` (at most ``batch_size``, in roster
        order; the first one's record index ``first_record``) from one timed batch."""
        outcome, ms = self._call(tasks)
        self.session.called(ms)
        scenes = [(None, None, None)] * len(tasks)
        if outcome["routes"] is not None:
            try:
                scenes = scene_routes(outcome["routes"], len(tasks))
            except BatchProtocolError as e:
                outcome.update(status="runtime_error", error=f"protocol: {e}", error_type="ProtocolError")
        out = []
        for task, (status, route, problem) in zip(tasks, scenes):
            one = {**empty_outcome(), "status": outcome["status"], "error": outcome["error"],
                   "error_type": outcome["error_type"]}
            if outcome["status"] is None and problem is not None:
                one.update(status="runtime_error", error=f"protocol: {problem}", error_type="ProtocolError")
            elif outcome["status"] is None:
                one["result"] = PlanResult(path=route, status=status)
                one["snap"] = snapshot_route(route)
            rec, snap = finish_record(task, BudgetSpec(), one, 0.0, 0.0, self.clock, recost_inside=False)
            rec.update(self.where, worker=None, warm_complete=self.session.warm_complete,
                       latency_ms=None, returned_ms=None, batch_first=int(first_record),
                       batch_size=self.batch_size, batch_live=len(tasks), batch_ms=ms)
            out.append((rec, snap))
        self.stats["requests"] += len(tasks)
        self.stats["batches"] += 1
        return out
