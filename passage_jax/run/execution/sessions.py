"""The executors that serve a seed's requests, and who owns the request timer: in the run's
process, in a supervised worker process, as a persistent session (the session timing
profiles) or a batch at a time (the batched procedure); where each request runs and how
the planner is built. :func:`open_executor`, at the end, opens the one a run spec asks
for.

**Where a request runs.** Where a request runs: the fields every record carries
(``process_index``, ``host``, ``device``) and the label of a JAX device.

**The planner's construction.** Building a planner in the run's own process, with the error
that names its entry point.

**The supervised executor.** Supervised execution: the planner in a worker process, the
timer and deadline in the parent.

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

**Sessions.** The session timing profiles' executors: one persistent planner session per
seed.

Under ``native_raw_path_persistent_v1`` (:class:`NativeSessionExecutor`, in the run's
process) and ``supervised_service_v1`` / ``supervised_service_rewarm_v1``
(:class:`SupervisedSessionExecutor`, in a supervised worker) the planner is built once
(construction is not timed, but recorded), :meth:`open_session` runs ``session_warmup``
untimed calls on the warm-up task (:mod:`passage_jax.run.admission.checks`; each call timed
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

**The batched procedure.** The batched procedure's executor (timing profile ``batched_v1``;
docs/runner.md, "The batched procedure").

The planner is built once per seed (construction not timed, but recorded) and must have
``plan_batch`` (:mod:`passage_jax.protocol.batch`); one with ``plan`` alone is refused
(:class:`PlannerBuildError`). :meth:`BatchExecutor.open_session`
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

**The executor of a seed.** Executors: where a planner runs and who owns the request timer.

:class:`InProcessExecutor` calls the planner in the run's own process
(:func:`passage_jax.run.execution.timing.execute`; deadlines are cooperative; its records
carry ``worker: None``). :class:`SupervisedExecutor`
builds and calls the planner in a worker process while the parent owns the timer
and the deadline (above; the worker's side in
:mod:`passage_jax.run.execution.worker`, the sweep of the processes a worker started in
:mod:`passage_jax.run.execution.worker_processes`). The session timing profiles have their own
executors (above). :func:`open_executor` opens the one a
run spec asks for."""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import os
import platform
import secrets
import signal
import socket
import sys
import threading
import time
import weakref
from typing import Protocol

import jax
import numpy as np

from passage_jax import cluster
from passage_jax.contract import (
    BATCHED_PROFILE,
    IN_PROCESS_TIMING_PROFILE,
    NATIVE_SESSION_PROFILE,
    SUPERVISED_SERVICE_REWARM_PROFILE,
    SUPERVISED_TIMING_PROFILE,
)
from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, Task, normalise_elevation
from passage_jax.placement import device_count, device_names, resolve_sharding
from passage_jax.precision import kernel_x64
from passage_jax.protocol.adapters import load_planner
from passage_jax.protocol.batch import BatchProtocolError, batch_of, plan_batch_of, scene_routes
from passage_jax.protocol.contracts import BudgetSpec, PlanResult
from passage_jax.protocol.records import ROUTE_FORMAT_CODE, snapshot_route
from passage_jax.protocol.requests import build_request
from passage_jax.run.execution import interrupts
from passage_jax.run.execution.timing import (
    _failure,
    _is_oom,
    _name,
    call_planner,
    empty_outcome,
    execute,
    execute_session,
    finish_record,
)
from passage_jax.run.execution.worker import (
    default_device,
    device_label,
    device_scope,
    task_payload,
    worker_main,
)
from passage_jax.run.execution.worker_processes import kill_worker_processes, rss_mb, worker_processes

__all__ = ["placement", "session_hardware", "local_position", "PlannerBuildError", "build_planner",
           "SupervisedExecutor", "SUPERVISED_TIMER", "synthetic_warmup_task", "WORKER_START_TIMEOUT_S",
           "WARMUP_MIN_WAIT_S", "RSS_POLL_S", "TREE_POLL_S", "LIVE_WORKERS", "kill_live_workers", "Session",
           "InProcessContext", "NativeSessionExecutor", "SupervisedSessionExecutor", "NATIVE_SESSION_TIMER",
           "SERVICE_SESSION_TIMER", "BatchExecutor", "BATCH_TIMER", "Executor", "InProcessExecutor",
           "open_executor", "IN_PROCESS_TIMER"]


# ---- where a request runs ------------------------------------------------------------------

def local_position(device) -> int:
    """The position of ``device`` among this process's devices of its platform (its id
    in a single process; what a worker process, which sees only this host's devices,
    finds it by)."""
    ids = [d.id for d in jax.local_devices(backend=device.platform)]
    return ids.index(device.id) if device.id in ids else int(device.id)


def placement(device=None) -> dict:
    """Where a request runs: ``process_index`` (this process's index in the launch,
    :func:`passage_jax.cluster.process_index`), ``host`` (``socket.gethostname()``) and
    ``device`` (:func:`device_label`, or the label itself when ``device`` is a string)."""
    label = device if isinstance(device, str) else device_label(device)
    return {"process_index": int(cluster.process_index()), "host": socket.gethostname(),
            "device": label}


def session_hardware(device=None) -> dict:
    """What a session's hardware is, for comparing sessions: the machine type, CPU count
    and the JAX device's kind (None: the default device)."""
    d = device if device is not None else default_device()
    return {"machine": platform.machine(), "cpu_count": os.cpu_count(),
            "device_kind": getattr(d, "device_kind", None)}


# ---- the planner's construction ------------------------------------------------------------

class PlannerBuildError(RuntimeError):
    """Building the planner failed (the message names the entry point and the exception)."""


def build_planner(inference: str, inference_format: str = "request", kwargs: dict | None = None):
    """The planner of entry point ``inference`` (:func:`~passage_jax.protocol.adapters.load_planner`);
    any failure, ``SystemExit`` and ``KeyboardInterrupt`` included, is a
    :class:`PlannerBuildError` naming the entry point and the exception (the evaluator's
    own SIGINT/SIGTERM stops the run: :mod:`passage_jax.run.execution.interrupts`)."""
    with interrupts.planner_call():
        try:
            planner = load_planner(inference, inference_format, kwargs or {})
        except BaseException as e:  # noqa: BLE001  (reported with the entry point)
            interrupts.raise_if_received()
            try:
                text = f"{type(e).__name__}: {e}"
            except BaseException:  # noqa: BLE001  (its __str__ raised)
                text = type(e).__name__
            raise PlannerBuildError(f"building the planner {inference} failed: {text}") from e
        interrupts.raise_if_received()  # a signal the construction swallowed
    return planner


def _planner_in_process(who: str, inference: str | None, inference_format: str = "request",
                       kwargs: dict | None = None, planner=None) -> tuple[object, float]:
    """``planner`` when given, else the one :func:`build_planner` builds from ``inference``,
    and the construction's wall time in ms; ValueError naming the executor ``who`` when
    neither is given."""
    t0 = time.monotonic()
    if planner is None:
        if inference is None:
            raise ValueError(f"{who} needs an inference entry point or a planner")
        planner = build_planner(inference, inference_format, kwargs)
    return planner, (time.monotonic() - t0) * 1000.0


# ---- the supervised executor ---------------------------------------------------------------

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


def synthetic_warmup_task(like, index: int = 0) -> Task:
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

    def _live_worker(self) -> _Worker:
        """The current worker, or a fresh one where there is none or it died between
        requests (counted as a crash)."""
        w = self._worker
        if w is not None and not w.proc.is_alive():
            self._lose_worker(w, "crashes")
            w = None
        return w if w is not None else self._start_worker()

    def _ready_worker(self, like, budget: BudgetSpec) -> _Worker:
        """The current worker, or a fresh one after its untimed warm-up."""
        w = self._live_worker()
        if w.warmed:
            return w
        w.warmed = True
        for i in range(self.warmup):
            wt = (self.warmup_tasks[i % len(self.warmup_tasks)] if self.warmup_tasks
                  else synthetic_warmup_task(like, i))
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


# ---- sessions ------------------------------------------------------------------------------

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
        planner, self.construction_ms = _planner_in_process(
            "NativeSessionExecutor", inference, inference_format, kwargs, planner)
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
    :class:`SupervisedExecutor` whose workers warm up on the
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
        w = self._live_worker()
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


# ---- the batched procedure -----------------------------------------------------------------

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
        planner, self.construction_ms = _planner_in_process(
            "BatchExecutor", inference, "request", kwargs, planner)
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


# ---- the executor of a seed ----------------------------------------------------------------

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
        planner, self.construction_ms = _planner_in_process(
            "InProcessExecutor", inference, inference_format, kwargs, planner)
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
    profile its session executor (this module), whose warm-up task
    is ``warmup_tasks[0]``; under the batched procedure its
    :class:`BatchExecutor`. ``device``: the JAX device
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
