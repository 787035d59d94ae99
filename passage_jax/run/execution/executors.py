"""Executors: where a planner runs and who owns the request timer.

:class:`InProcessExecutor` calls the planner in the run's own process
(:func:`passage_jax.run.execution.timing.execute`; deadlines are cooperative; its records
carry ``worker: None``). :class:`~passage_jax.run.execution.supervised.SupervisedExecutor`
builds and calls the planner in a worker process while the parent owns the timer
and the deadline (:mod:`passage_jax.run.execution.supervised`; the worker's side in
:mod:`passage_jax.run.execution.worker`, the sweep of the processes a worker started in
:mod:`passage_jax.run.execution.worker_processes`). The session timing profiles have their own
executors (:mod:`passage_jax.run.execution.sessions`). :func:`open_executor` opens the one a
run spec asks for.
"""
from __future__ import annotations

import time
from typing import Protocol

from passage_jax.contract import IN_PROCESS_TIMING_PROFILE, NATIVE_SESSION_PROFILE
from passage_jax.protocol.contracts import BudgetSpec
from passage_jax.run.execution.batches import BatchExecutor
from passage_jax.run.execution.devices import placement
from passage_jax.run.execution.planner_build import build_planner
from passage_jax.run.execution.sessions import (
    InProcessContext,
    NativeSessionExecutor,
    SupervisedSessionExecutor,
)
from passage_jax.run.execution.supervised import SupervisedExecutor
from passage_jax.run.execution.timing import execute
from passage_jax.run.execution.worker import device_scope

__all__ = ["Executor", "InProcessExecutor", "open_executor", "IN_PROCESS_TIMER"]

#: The in-process timing boundary (manifest ``timing.timer``).
IN_PROCESS_TIMER = ("time.monotonic; covers input preparation, planning, device sync, route "
                    "snapshot, legality check and recosting; deadline judged at snapshot")


class Executor(Protocol):
    """Runs one timed request at a time; see :func:`open_executor`."""

    profile: str
    timer: str
    construction_ms: float
    planner_name: str | None
    stats: dict  # executor counters the manifest may record

    def execute(self, task, budget) -> tuple[dict, tuple]: ...

    def close(self) -> None: ...


class InProcessExecutor(InProcessContext):
    """The planner built (or given) in this process; :func:`run.timing.execute` per request."""

    profile = IN_PROCESS_TIMING_PROFILE
    timer = IN_PROCESS_TIMER

    def __init__(self, inference: str | None = None, inference_format: str = "request",
                 kwargs: dict | None = None, *, device=None, planner=None):
        t0 = time.monotonic()
        if planner is None:
            if inference is None:
                raise ValueError("InProcessExecutor needs an inference entry point or a planner")
            planner = build_planner(inference, inference_format, kwargs)
        self.construction_ms = (time.monotonic() - t0) * 1000.0
        self.planner = planner
        self.planner_name = getattr(planner, "name", None)
        self.device = device
        self.where = placement(device)
        self.stats: dict = {"requests": 0}

    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        with device_scope(self.device):
            rec, snap = execute(self.planner, task, budget)
        rec.update(self.where, worker=None)
        self.stats["requests"] += 1
        return rec, snap


def open_executor(spec, seed: int, *, device=None, planner=None, warmup_tasks=None):
    """The executor for ``spec`` (a :class:`~passage_jax.run.specification.RunSpec`) and ``seed``
    (its kwargs are ``spec.kwargs_for_seed(seed)``): supervised when
    ``spec.execution == "supervised"``, otherwise in-process; under a session timing
    profile its session executor (:mod:`passage_jax.run.execution.sessions`), whose warm-up task
    is ``warmup_tasks[0]``; under the batched procedure its
    :class:`~passage_jax.run.execution.batches.BatchExecutor`. ``device``: the JAX device
    admission chose (None: the default). ``planner``: an already-built planner (in-process only). Raises
    :class:`PlannerBuildError` when the planner cannot be built."""
    kwargs = spec.kwargs_for_seed(seed)
    execution = getattr(spec, "execution", "in_process")
    if getattr(spec, "batched", False):
        if not warmup_tasks:
            raise ValueError(f"timing_profile {spec.timing_profile} needs its warm-up task")
        return BatchExecutor(spec.inference, kwargs, batch_size=spec.batch_size, device=device,
                             planner=planner, warmup=(warmup_tasks[0], spec.batch_warmup))
    if getattr(spec, "session_profile", False):
        return _open_session(spec, kwargs, device=device, planner=planner, warmup_tasks=warmup_tasks)
    if execution == "supervised":
        if planner is not None:
            raise ValueError("a built planner object cannot be moved into a supervised worker; "
                             "give the spec's inference entry point instead")
        return SupervisedExecutor(spec.inference, spec.inference_format, kwargs, device=device,
                                  memory_mb=spec.worker_memory_mb, grace_ms=spec.worker_grace_ms,
                                  warmup=spec.worker_warmup, warmup_tasks=warmup_tasks)
    if execution != "in_process":
        raise ValueError(f"execution {execution!r} is not one of in_process, supervised")
    return InProcessExecutor(spec.inference, spec.inference_format, kwargs, device=device, planner=planner)


def _open_session(spec, kwargs: dict, *, device, planner, warmup_tasks):
    """The session executor of a session timing profile (its warm-up not yet run)."""
    if not warmup_tasks:
        raise ValueError(f"timing_profile {spec.timing_profile} needs its warm-up task")
    warmup = (warmup_tasks[0], spec.session_warmup)
    if spec.timing_profile == NATIVE_SESSION_PROFILE:
        return NativeSessionExecutor(spec.inference, spec.inference_format, kwargs, device=device,
                                     planner=planner, warmup=warmup)
    if planner is not None:
        raise ValueError("a built planner object cannot be moved into a supervised worker; "
                         "give the spec's inference entry point instead")
    return SupervisedSessionExecutor(spec.inference, spec.inference_format, kwargs,
                                     profile=spec.timing_profile, warmup=warmup, device=device,
                                     memory_mb=spec.worker_memory_mb, grace_ms=spec.worker_grace_ms)
