"""Supervised execution: the planner in a worker process, the timer and deadline in the parent.

:class:`SupervisedExecutor` builds and calls the planner in a worker process
started with the ``spawn`` method (no inherited JAX state; the model loads once
per worker; :mod:`passage_jax.run.execution.worker`) while the parent owns the timer and
the deadline:

* the parent starts the clock, sends the task's ordinary inputs to the worker,
  which builds the request (:func:`~passage_jax.protocol.requests.build_request`),
  calls the planner, waits for its device arrays and sends back the route
  snapshot; the parent then checks legality and recosts
  (:func:`~passage_jax.run.execution.timing.finish_record`), so the status precedence is
  the in-process runner's;
* no reply by the deadline (``budget.wall_time_ms``) plus ``worker_grace_ms``:
  the request is ``timeout``, the worker is killed (SIGKILL) and replaced before
  the next request;
* the worker dies (segfault, ``os._exit``, killed by the OS): ``runtime_error``
  naming the exit code or signal;
* the resident memory of the worker and of the processes it started
  (``/proc/<pid>/status`` VmRSS, summed; polled every 10 ms while a request
  runs and checked when its reply arrives) passes ``worker_memory_mb``:
  ``oom``, the worker is killed; a ``MemoryError`` (or an
  XLA out-of-memory error) raised in the planner is ``oom`` as in-process;
* each fresh worker first runs ``worker_warmup`` untimed warm-up requests on a
  synthetic scene that cannot be in a roster (or on ``warmup_tasks``); they are
  counted in :attr:`SupervisedExecutor.stats`, never recorded as tasks.

Processes a planner starts die with its worker. Each worker runs in its own
session and process group (``setsid``), is the child subreaper of everything
it starts (Linux ``PR_SET_CHILD_SUBREAPER``: an orphaned grandchild, such as a
double-forked daemon, is re-parented to the worker, not to init) and marks
its environment with ``PASSAGE_JAX_WORKER=<token>``, which every program the
planner starts inherits. Whenever a worker is killed (timeout, memory cap),
found dead (crash) or stopped (executor close, interpreter exit), the parent
first collects from ``/proc`` every process that descends from the worker,
shares its session or process group, or carries its token, including
``start_new_session=True`` children and daemons; it freezes them with
SIGSTOP (collecting again until nothing new appears) and then kills them all
with SIGKILL (:mod:`passage_jax.run.execution.worker_processes`). A small watchdog process
per worker (outside its session) does the same sweep when the worker disappears
without the parent, e.g. when the run itself is SIGKILLed. The memory cap counts
the resident memory of the worker and of every process it started. A process that
leaves the worker's tree, session and group and clears its environment (or
replaces it with one without the token) is not found; an adopted orphan that
exits stays a zombie of its worker until the worker ends.

Every record of a supervised request carries ``worker`` (pid, worker index,
timed requests served, warm-up requests run, whether it replaced a lost
worker).
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import os
import secrets
import signal
import sys
import threading
import time
import weakref

import numpy as np

from passage_jax.contract import SUPERVISED_TIMING_PROFILE
from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, Task, normalise_elevation
from passage_jax.protocol.contracts import BudgetSpec
from passage_jax.protocol.records import ROUTE_FORMAT_CODE
from passage_jax.run.execution.devices import local_position, placement
from passage_jax.run.execution.planner_build import PlannerBuildError
from passage_jax.run.execution.timing import finish_record
from passage_jax.run.execution.worker import task_payload, worker_main
from passage_jax.run.execution.worker_processes import kill_worker_processes, rss_mb, worker_processes

__all__ = ["SupervisedExecutor", "SUPERVISED_TIMER", "warmup_task", "WORKER_START_TIMEOUT_S",
           "WARMUP_MIN_WAIT_S", "RSS_POLL_S", "TREE_POLL_S", "LIVE_WORKERS", "kill_live_workers"]

#: The supervised timing boundary (manifest ``timing.timer``).
SUPERVISED_TIMER = ("time.monotonic in the parent process; covers sending the task to the worker "
                    "process (IPC), input preparation, planning and device sync in the worker, the "
                    "route snapshot and its return to the parent (IPC), legality check and "
                    "recosting in the parent; deadline judged when the snapshot arrives; a request "
                    "without a reply by deadline + worker_grace_ms is killed and recorded timeout")
#: Longest wait for a fresh worker to import and build the planner.
WORKER_START_TIMEOUT_S = 600.0
#: Shortest wait for an untimed warm-up request (it may compile); the wait is the
#: larger of this and ten times deadline + grace.
WARMUP_MIN_WAIT_S = 60.0
#: Interval of the resident-memory watch while a request runs.
RSS_POLL_S = 0.01
#: Interval at which the list of processes a worker started is refreshed for the memory cap.
TREE_POLL_S = 0.1
_IDLE_POLL_S = 0.25
_NO_ROUTE = (ROUTE_FORMAT_CODE["none"], None, None, None)


def warmup_task(like, index: int = 0) -> Task:
    """A synthetic warm-up task shaped like ``like`` (same grid size, dtypes,
    objective, weight and variant) that cannot be a roster scene: a smooth
    tilted plane without obstacles (its shape and start/goal cells vary with
    ``index``), start and goal at opposite corners, id ``warmup-<index>``."""
    n_r, n_c = like.scene.elevation_m.shape
    r, c = np.mgrid[0:n_r, 0:n_c].astype(np.float64)
    z = 1000.0 + (3.0 + index % 3) * r + 2.0 * c
    cal = like.scene.metadata.get("calibration") or PASSAGE_CALIBRATION
    try:
        e = normalise_elevation(z, cal)
    except Exception:  # noqa: BLE001  (an unusual calibration: fall back to the default)
        cal = PASSAGE_CALIBRATION
        e = normalise_elevation(z, cal)
    corners = ((0, 0), (n_r - 1, n_c - 1)) if index % 2 == 0 else ((n_r - 1, 0), (0, n_c - 1))
    md = {"resolution": like.scene.resolution, "split": "warmup", "calibration": dict(cal)}
    if "markers" in like.scene.metadata:
        md["markers"] = dict(like.scene.metadata["markers"])
    zeros = np.zeros((n_r, n_c), bool)
    scene = Scene(id=f"warmup-{index}", resolution=like.scene.resolution, split="warmup",
                  elevation_norm=np.asarray(e, np.float32),
                  elevation_m=np.asarray(z, like.scene.elevation_m.dtype), obstacles=zeros,
                  start=corners[0], goal=corners[1], routes={}, metadata=md)
    return Task(scene=scene, objective=like.objective, variant=like.variant, obstacles=zeros,
                route=np.zeros((0, 2), np.int32), weight=float(like.weight))


def _exit_reason(code) -> str:
    if code is None:
        return "the worker closed its pipe"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


#: The workers of this process not yet killed (the exit hook kills them).
LIVE_WORKERS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def kill_live_workers():  # runs before multiprocessing joins its children at exit
    """Kill every live worker of this process and the processes it started."""
    for w in list(LIVE_WORKERS):
        w.kill()


@dataclasses.dataclass(frozen=True)
class _Reply:
    """What waiting on a worker gave: ``msg`` (``value`` the message), ``timeout``,
    ``died`` or ``oom`` (``value`` the reason)."""

    kind: str
    value: object = None


class _Worker:
    """The parent's handle on one worker process and the processes it started."""

    def __init__(self, ctx, config: dict, index: int):
        self.token = f"{os.getpid()}-{index}-{secrets.token_hex(8)}"
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=worker_main, args=(child, dict(config, token=self.token)),
                                name=f"passage-worker-{index}")
        self.index = index
        self.requests = 0
        self.warmup = 0
        self.warmed = False  # warm-up done (or given up)
        self.watchdog: int | None = None
        self.swept: set = set()  # pids of the worker's own processes killed with it
        self._done = False
        self._tree: list = []
        self._tree_t = -1.0
        self.proc.start()
        child.close()
        self.pid = self.proc.pid
        LIVE_WORKERS.add(self)

    def info(self) -> dict:
        """The record's ``worker`` field."""
        return {"pid": self.pid, "index": self.index, "requests": self.requests, "warmup": self.warmup,
                "restarted": self.index > 0}

    def processes(self) -> list:
        """The processes the worker started (not its watchdog), refreshed every
        :data:`TREE_POLL_S`."""
        now = time.monotonic()
        if now - self._tree_t >= TREE_POLL_S:
            self._tree = [p for p in worker_processes(self.pid) if p != self.watchdog]
            self._tree_t = now
        return self._tree

    def gone(self) -> _Reply:
        """The worker's exit, once it has closed its pipe."""
        self.proc.join(2.0)
        return _Reply("died", _exit_reason(self.proc.exitcode))

    def kill(self):
        """Kill the worker and every process it started (once; later calls do nothing)."""
        if self._done:
            return
        alive = self.proc.exitcode is None
        signalled = kill_worker_processes(self.pid, self.token, alive)
        if alive:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        self.proc.join(5.0)
        self.swept = signalled - {self.pid, self.watchdog}
        self._done = True
        with contextlib.suppress(OSError):
            self.conn.close()
        LIVE_WORKERS.discard(self)

    def stop(self):
        """Kill the processes the worker started, let the worker exit, then sweep again."""
        if self._done:
            return
        if self.proc.exitcode is None:
            kill_worker_processes(self.pid, self.token, True, spare_worker=True)
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(("stop",))
        self.proc.join(2.0)
        self.kill()

    def killed_note(self, died: bool = False) -> str:
        """What :meth:`kill` did to the worker's own processes, for the record's error."""
        n = len(self.swept)
        if not n:
            return ""
        what = f"the {n} process{'es' if n > 1 else ''} it started"
        return f"; {what} killed (SIGKILL)" if died else f", with {what}"


class SupervisedExecutor:
    """The planner in a spawned worker process; the parent owns timer and deadline.

    ``memory_mb``: resident-memory cap of the worker (None: none); ``grace_ms``:
    wait past the deadline before a request is given up and the worker killed;
    ``warmup``: untimed warm-up requests per fresh worker; ``warmup_tasks``:
    optional tasks used for them instead of the synthetic warm-up scene (they must
    not be roster tasks). The first worker starts here (construction is untimed:
    ``construction_ms`` covers spawn, imports and building the planner).
    """

    profile = SUPERVISED_TIMING_PROFILE
    timer = SUPERVISED_TIMER
    #: the legality check and recosting are inside ``latency_ms``
    recost_inside = True
    #: the task's payload is built before the clock starts (else after, inside the timer)
    payload_before_clock = False

    def __init__(self, inference: str, inference_format: str = "request", kwargs: dict | None = None,
                 *, device=None, memory_mb: int | None = None, grace_ms: float = 200.0,
                 warmup: int = 1, warmup_tasks=None):
        self.inference = inference
        self.memory_mb = memory_mb
        self.grace_s = float(grace_ms) / 1000.0
        self.warmup = int(warmup)
        self.warmup_tasks = list(warmup_tasks) if warmup_tasks else None
        self._config = {"inference": inference, "inference_format": inference_format,
                        "kwargs": dict(kwargs or {}), "sys_path": list(sys.path), "parent_pid": os.getpid(),
                        "device": None if device is None else (device.platform, local_position(device))}
        self._ctx = multiprocessing.get_context("spawn")
        self._worker: _Worker | None = None
        self._n_workers = 0
        self._req_id = 0
        self._lock = threading.Lock()
        self.planner_name: str | None = None
        self.device_label: str | None = None  # the JAX device a worker reported
        self.stats: dict = {"workers_started": 0, "requests": 0, "timeouts_killed": 0, "crashes": 0,
                            "oom_kills": 0, "warmup_requests": 0, "warmup_failures": 0,
                            "worker_start_ms": []}
        t0 = time.monotonic()
        self._start_worker()
        self.construction_ms = (time.monotonic() - t0) * 1000.0

    # ---------------------------------------------------------------- workers
    def _start_worker(self) -> _Worker:
        t0 = time.monotonic()
        w = _Worker(self._ctx, self._config, self._n_workers)
        self._n_workers += 1
        self.stats["workers_started"] += 1
        reply = self._await(w, t0 + WORKER_START_TIMEOUT_S, req_id=None)
        if reply.kind == "msg" and reply.value[0] == "ready":
            self.planner_name = reply.value[1].get("name")
            self.device_label = reply.value[1].get("device")
            w.watchdog = reply.value[1].get("watchdog")
            self._worker = w
            self.stats["worker_start_ms"].append(round((time.monotonic() - t0) * 1000.0, 3))
            return w
        w.kill()
        if reply.kind == "msg":
            why = reply.value[1]
        elif reply.kind == "timeout":
            why = f"the worker was not ready within {WORKER_START_TIMEOUT_S:.0f} s"
        else:
            why = reply.value
        raise PlannerBuildError(f"building the planner {self.inference} in a worker process failed: {why}")

    def _lose_worker(self, w: _Worker, counter: str | None):
        w.kill()
        if counter:
            self.stats[counter] += 1
        if self._worker is w:
            self._worker = None

    def _await(self, w: _Worker, limit: float, req_id) -> _Reply:
        """Wait for ``w``'s next message until monotonic ``limit`` (the worker is
        killed for an ``oom`` reply)."""
        slice_s = RSS_POLL_S if self.memory_mb else _IDLE_POLL_S
        while True:
            left = limit - time.monotonic()
            if left <= 0:
                return _Reply("timeout")
            if w.conn.poll(min(left, slice_s)):
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    return w.gone()
                if req_id is not None and (msg[0] != "done" or msg[1] != req_id):
                    continue  # a stale reply
                over = self._over_memory(w)
                return _Reply("oom", over) if over else _Reply("msg", msg)
            if not w.proc.is_alive():
                if w.conn.poll(0):
                    continue
                return _Reply("died", _exit_reason(w.proc.exitcode))
            over = self._over_memory(w)
            if over:
                return _Reply("oom", over)

    def _over_memory(self, w: _Worker) -> str | None:
        if not self.memory_mb:
            return None
        rss = rss_mb(w.pid)
        if rss is None:
            return None
        kids = [m for m in (rss_mb(p) for p in w.processes()) if m is not None]
        total = rss + sum(kids)
        if total > self.memory_mb:
            who = f" (the worker and {len(kids)} process{'es' if len(kids) > 1 else ''} it started)" \
                if kids else ""
            return f"worker resident memory {total:.0f} MiB{who} passed worker_memory_mb={self.memory_mb}"
        return None

    def _ready_worker(self, like, budget: BudgetSpec) -> _Worker:
        """The current worker, or a fresh one after its untimed warm-up."""
        w = self._worker
        if w is not None and not w.proc.is_alive():
            self._lose_worker(w, "crashes")  # died between requests
            w = None
        if w is None:
            w = self._start_worker()
        if w.warmed:
            return w
        w.warmed = True
        for i in range(self.warmup):
            wt = (self.warmup_tasks[i % len(self.warmup_tasks)] if self.warmup_tasks
                  else warmup_task(like, i))
            reply = self._send_and_wait(w, wt, budget, warm=True)
            self.stats["warmup_requests"] += 1
            if reply.kind != "msg":  # the warm-up itself hung, died or ran out of memory
                return self._replace_unwarmed(w)
            w.warmup += 1
        return w

    def _replace_unwarmed(self, w: _Worker) -> _Worker:
        """``w``, whose warm-up call failed, lost; a replacement that serves unwarmed
        (``worker.warmup == 0``)."""
        self.stats["warmup_failures"] += 1
        self._lose_worker(w, None)
        w = self._start_worker()
        w.warmed = True
        return w

    def _send_and_wait(self, w: _Worker, task, budget: BudgetSpec, warm: bool = False, t0=None,
                       payload: dict | None = None) -> _Reply:
        self._req_id += 1
        rid = self._req_id
        t0 = time.monotonic() if t0 is None else t0
        wall = budget.wall_time_ms
        deadline = t0 + wall / 1000.0
        if warm:
            limit = t0 + max(WARMUP_MIN_WAIT_S, 10.0 * (wall / 1000.0 + self.grace_s))
        else:
            limit = deadline + self.grace_s
        try:
            payload = task_payload(task) if payload is None else payload
            w.conn.send(("plan", rid, payload, budget.to_dict(), deadline))
        except (OSError, ValueError):
            return w.gone()
        return self._await(w, limit, rid)

    # -------------------------------------------------------------- requests
    def _given_up(self, w: _Worker, reply: _Reply, budget: BudgetSpec) -> tuple[dict, str]:
        """The outcome of a request without a reply (the worker is killed now: a killed
        request takes no more CPU, nor do the processes it started) and the counter
        of the loss."""
        outcome = {"result": None, "snap": _NO_ROUTE, "sync_arrays": 0, "returned": False}
        w.kill()
        if reply.kind == "timeout":
            grace_ms = self.grace_s * 1000.0
            outcome.update(status="timeout", error_type="WorkerTimeout",
                           error=f"no reply within budget.wall_time_ms={budget.wall_time_ms:g} + "
                                 f"worker_grace_ms={grace_ms:g}; worker {w.pid} killed (SIGKILL)"
                                 f"{w.killed_note()}")
            return outcome, "timeouts_killed"
        if reply.kind == "oom":
            outcome.update(status="oom", error_type="WorkerMemoryLimit",
                           error=f"{reply.value}; worker {w.pid} killed (SIGKILL){w.killed_note()}")
            return outcome, "oom_kills"
        outcome.update(status="runtime_error", error_type="WorkerDied",
                       error=f"worker process {w.pid} died during the request ({reply.value})"
                             f"{w.killed_note(died=True)}")
        return outcome, "crashes"

    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        """One timed request in the worker; returns ``(record, snapshot)`` as
        :func:`run.timing.execute` does (plus ``record["worker"]``)."""
        budget = budget or BudgetSpec()
        if budget.wall_time_ms is None:
            raise ValueError("supervised execution needs budget.wall_time_ms (the parent's deadline)")
        payload = task_payload(task) if self.payload_before_clock else None
        with self._lock:
            w = self._ready_worker(task, budget)
            t0 = time.monotonic()
            reply = self._send_and_wait(w, task, budget, t0=t0, payload=payload)
            t_ret = time.monotonic()
            w.requests += 1
            self.stats["requests"] += 1
            info = w.info()
            if reply.kind == "msg":
                outcome, lost = reply.value[2], None
            else:
                outcome, lost = self._given_up(w, reply, budget)
            rec, snap = finish_record(task, budget, outcome, t0, t_ret,
                                      recost_inside=self.recost_inside)
            rec.update(placement(self.device_label), worker=info,
                       warm_complete=self.warm_complete(info))
            if lost:
                self._lose_worker(w, lost)
            return rec, snap

    def warm_complete(self, info: dict) -> bool | None:
        """A record's ``warm_complete`` as the executor decides it (None: the series decides,
        as under the default timing profile)."""
        return None

    def close(self) -> None:
        w, self._worker = self._worker, None
        if w is not None:
            w.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()
