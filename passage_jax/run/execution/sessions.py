"""The session timing profiles' executors: one persistent planner session per seed.

Under ``native_raw_path_persistent_v1`` (:class:`NativeSessionExecutor`, in the run's
process) and ``supervised_service_v1`` / ``supervised_service_rewarm_v1``
(:class:`SupervisedSessionExecutor`, in a supervised worker) the planner is built once
(construction is not timed, but recorded), :meth:`open_session` runs ``session_warmup``
untimed calls on the warm-up task (:mod:`passage_jax.run.admission.warmup_scene`; each call timed
for the manifest's ``session`` block), and every timed request follows:

* native: the request is built before the clock starts and the clock stops when the
  route is returned and snapshotted (:func:`passage_jax.run.execution.timing.execute_session`);
* service: the task's payload is built before the clock starts; the timed value is the
  parent's wall time from sending the request to receiving the route snapshot (IPC
  inside);

in both the legality check and recosting follow outside ``latency_ms``
(``validation_recost_ms``). A record's ``warm_complete`` says whether the session (or
worker) serving it completed its ``session_warmup`` calls, ``session_warmup >= 1``. A
replaced worker is not warmed again under ``supervised_service_v1`` (its requests are
not warm-complete); under ``supervised_service_rewarm_v1`` it runs the ``session_warmup``
calls again before its next timed request (``rewarm_calls``).

:class:`Session` holds what the manifest's ``session.sessions`` entry of one planner
build says (:meth:`Session.to_dict`).
"""
from __future__ import annotations

import dataclasses
import time

from passage_jax.contract import NATIVE_SESSION_PROFILE, SUPERVISED_SERVICE_REWARM_PROFILE
from passage_jax.protocol.contracts import BudgetSpec
from passage_jax.protocol.requests import build_request
from passage_jax.run.execution.devices import placement, session_hardware
from passage_jax.run.execution.planner_build import build_planner
from passage_jax.run.execution.supervised import SupervisedExecutor
from passage_jax.run.execution.timing import call_planner, execute_session
from passage_jax.run.execution.worker import device_scope

__all__ = ["Session", "InProcessContext", "NativeSessionExecutor", "SupervisedSessionExecutor",
           "NATIVE_SESSION_TIMER", "SERVICE_SESSION_TIMER"]

#: The native session's timing boundary (manifest ``timing.timer``).
NATIVE_SESSION_TIMER = ("time.monotonic; starts with the request's raw arrays built in memory "
                        "(deadline = start + wall_time_ms), covers planning, device sync and the "
                        "route snapshot; legality check and recosting follow outside it "
                        "(validation_recost_ms); deadline judged at snapshot")
#: The supervised service session's timing boundary (manifest ``timing.timer``).
SERVICE_SESSION_TIMER = ("time.monotonic in the parent process; covers sending the request to the "
                         "worker process (IPC), input preparation, planning and device sync in the "
                         "worker and the route snapshot's return (IPC); legality check and recosting "
                         "in the parent follow outside it (validation_recost_ms); deadline judged "
                         "when the snapshot arrives")


@dataclasses.dataclass
class Session:
    """One persistent session (one planner build): where it ran, its construction, its
    warm-up calls and, for a supervised service, its worker replacements and re-warm
    calls. ``first_call_ms`` is the session's first call (its first warm-up call, or its
    first timed request without a warm-up)."""

    construction_ms: float
    where: dict
    warmup_calls: int
    warmup_ms: list = dataclasses.field(default_factory=list)
    warmup_failures: int = 0
    first_call_ms: float | None = None
    replacements: int = 0
    rewarm_calls: int = 0

    @property
    def warm_complete(self) -> bool:
        """Whether the session's first planner completed its ``session_warmup`` calls (>= 1)."""
        return self.warmup_calls >= 1 and len(self.warmup_ms) == self.warmup_calls \
            and not self.warmup_failures

    def called(self, ms: float) -> None:
        if self.first_call_ms is None:
            self.first_call_ms = float(ms)

    def to_dict(self) -> dict:
        first = self.first_call_ms
        return {**self.where, "construction_ms": self.construction_ms, "first_call_ms": first,
                "cold_start_ms": None if first is None else self.construction_ms + first,
                "warmup_ms": list(self.warmup_ms), "warmup_failures": self.warmup_failures,
                "warm_complete": self.warm_complete, "replacements": self.replacements,
                "rewarm_calls": self.rewarm_calls}


def _warmup_call(planner, task, budget: BudgetSpec) -> tuple[float, bool]:
    """One untimed warm-up call (its deadline the budget's); its time (ms) and whether
    the planner raised."""
    wall = budget.wall_time_ms
    t0 = time.monotonic()
    deadline = None if wall is None else t0 + wall / 1000.0
    out = call_planner(planner, lambda: build_request(task, budget, deadline))
    return (time.monotonic() - t0) * 1000.0, out["status"] is not None


class InProcessContext:
    """An executor of the run's own process as a context manager (``with`` closes it;
    closing has nothing to release)."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NativeSessionExecutor(InProcessContext):
    """``native_raw_path_persistent_v1``: the planner built once in this process, warmed up
    by :meth:`open_session`, then :func:`~passage_jax.run.execution.timing.execute_session` per
    request."""

    profile = NATIVE_SESSION_PROFILE
    timer = NATIVE_SESSION_TIMER

    def __init__(self, inference: str | None, inference_format: str = "request",
                 kwargs: dict | None = None, *, device=None, planner=None, warmup=None):
        """``warmup``: ``(warm-up task, session_warmup)``."""
        self.warmup_task, calls = warmup
        t0 = time.monotonic()
        if planner is None:
            if inference is None:
                raise ValueError("NativeSessionExecutor needs an inference entry point or a planner")
            planner = build_planner(inference, inference_format, kwargs)
        self.construction_ms = (time.monotonic() - t0) * 1000.0
        self.planner = planner
        self.planner_name = getattr(planner, "name", None)
        self.device = device
        self.where = placement(device)
        self.session = Session(self.construction_ms, {**self.where, "hardware": session_hardware(device)},
                               int(calls))
        self.stats: dict = {"requests": 0, "warmup_requests": 0}

    def open_session(self, budget: BudgetSpec | None = None) -> dict:
        """Run the ``session_warmup`` untimed calls on the warm-up task; the session entry."""
        budget = budget or BudgetSpec()
        with device_scope(self.device):
            for _ in range(self.session.warmup_calls):
                ms, raised = _warmup_call(self.planner, self.warmup_task, budget)
                self.session.called(ms)
                self.session.warmup_ms.append(round(ms, 3))
                self.stats["warmup_requests"] += 1
                self.stats["warmup_errors"] = self.stats.get("warmup_errors", 0) + int(raised)
        return self.session.to_dict()

    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        with device_scope(self.device):
            rec, snap = execute_session(self.planner, task, budget)
        self.session.called(rec["latency_ms"])
        rec.update(self.where, worker=None, warm_complete=self.session.warm_complete)
        self.stats["requests"] += 1
        return rec, snap



class SupervisedSessionExecutor(SupervisedExecutor):
    """``supervised_service_v1`` / ``supervised_service_rewarm_v1``: a
    :class:`~passage_jax.run.execution.supervised.SupervisedExecutor` whose workers warm up on the
    warm-up task (``session_warmup`` calls; a replacement only under the re-warm profile),
    with the legality check and recosting outside the timed value."""

    timer = SERVICE_SESSION_TIMER
    recost_inside = False
    payload_before_clock = True

    def __init__(self, inference: str, inference_format: str = "request", kwargs: dict | None = None,
                 *, profile: str, warmup, **options):
        """``warmup``: ``(warm-up task, session_warmup)``; ``options``: the
        :class:`SupervisedExecutor` options (device, memory_mb, grace_ms)."""
        task, calls = warmup
        self.profile = profile
        self.rewarm = profile == SUPERVISED_SERVICE_REWARM_PROFILE
        self.session: Session | None = None
        super().__init__(inference, inference_format, kwargs, warmup=int(calls), warmup_tasks=[task],
                         **options)
        where = {**placement(self.device_label), "hardware": session_hardware(options.get("device"))}
        self.session = Session(self.construction_ms, where, int(calls))

    def open_session(self, budget: BudgetSpec | None = None) -> dict:
        """Warm the first worker up (``session_warmup`` calls); the session entry."""
        self._ready_worker(self.warmup_tasks[0], budget or BudgetSpec())
        return self.session.to_dict()

    def _warm(self, w, budget: BudgetSpec):
        """Run the warm-up calls on worker ``w``; the worker to serve with (a replacement,
        unwarmed, when a warm-up call hung, died or ran out of memory)."""
        first = w.index == 0
        for _ in range(self.warmup):
            t0 = time.monotonic()
            reply = self._send_and_wait(w, self.warmup_tasks[0], budget, warm=True)
            ms = (time.monotonic() - t0) * 1000.0
            self.stats["warmup_requests"] += 1
            if self.session is not None:
                self.session.called(ms)
                if first:
                    self.session.warmup_ms.append(round(ms, 3))
                else:
                    self.session.rewarm_calls += 1
            if reply.kind != "msg":
                if self.session is not None and first:
                    self.session.warmup_failures += 1
                return self._replace_unwarmed(w)
            w.warmup += 1
        return w

    def _ready_worker(self, like, budget: BudgetSpec):
        """The current worker, or a fresh one: the first warmed up, a replacement warmed up
        again only under the re-warm profile."""
        w = self._worker
        if w is not None and not w.proc.is_alive():
            self._lose_worker(w, "crashes")
            w = None
        if w is None:
            w = self._start_worker()
        if w.warmed:
            return w
        w.warmed = True
        if w.index > 0 and not self.rewarm:
            return w
        return self._warm(w, budget)

    def _start_worker(self):
        w = super()._start_worker()
        if self.session is not None and w.index > 0:
            self.session.replacements += 1
        return w

    def warm_complete(self, info: dict) -> bool:
        return self.warmup >= 1 and info["warmup"] == self.warmup

    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        rec, snap = super().execute(task, budget)
        if self.session is not None:
            self.session.called(rec["latency_ms"])
        return rec, snap
