"""Executors: where a planner runs and who owns the request timer.

:class:`InProcessExecutor` calls the planner in the run's own process
(:func:`passage_jax.run.timing.execute`; deadlines are cooperative).
:class:`SupervisedExecutor` builds and calls the planner in a worker process
started with the ``spawn`` method (no inherited JAX state; the model loads once
per worker) while the parent owns the timer and the deadline:

* the parent starts the clock, sends the task's ordinary inputs to the worker,
  which builds the request (:func:`~passage_jax.protocol.requests.build_request`),
  calls the planner, waits for its device arrays and sends back the route
  snapshot; the parent then checks legality and recosts
  (:func:`~passage_jax.run.timing.finish_record`), so the status precedence is
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
with SIGKILL. A small watchdog process per worker (outside its session) does
the same sweep when the worker disappears without the parent, e.g. when the
run itself is SIGKILLed. The memory cap counts the resident memory of the
worker and of every process it started. A process that leaves the worker's
tree, session and group and clears its environment (or replaces it with one
without the token) is not found; an adopted orphan that exits stays a zombie
of its worker until the worker ends.

Every record of a supervised request carries ``worker`` (pid, worker index,
timed requests served, warm-up requests run, whether it replaced a lost
worker); in-process records carry ``worker: None``.
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import inspect
import multiprocessing
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from typing import Protocol

import jax
import numpy as np

from passage_jax.contract import IN_PROCESS_TIMING_PROFILE, SUPERVISED_TIMING_PROFILE
from passage_jax.data.scene import PASSAGE_CALIBRATION, Scene, Task, normalise_elevation
from passage_jax.protocol.adapters import load_planner
from passage_jax.protocol.contracts import METADATA_ALLOWLIST, BudgetSpec, PlanResult
from passage_jax.protocol.records import ROUTE_FORMAT_CODE
from passage_jax.protocol.requests import build_request
from passage_jax.run.timing import call_planner, execute, finish_record

__all__ = ["Executor", "InProcessExecutor", "SupervisedExecutor", "PlannerBuildError", "open_executor",
           "IN_PROCESS_TIMER", "SUPERVISED_TIMER", "warmup_task", "WORKER_START_TIMEOUT_S",
           "WARMUP_MIN_WAIT_S", "RSS_POLL_S", "TREE_POLL_S", "WORKER_TOKEN_ENV", "task_payload",
           "task_from_payload", "worker_processes", "kill_worker_processes"]

#: The in-process timing boundary (manifest ``timing.timer``).
IN_PROCESS_TIMER = ("time.monotonic; covers input preparation, planning, device sync, route "
                    "snapshot, legality check and recosting; deadline judged at snapshot")
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
#: Environment variable a worker sets to its token; every program the planner starts inherits it.
WORKER_TOKEN_ENV = "PASSAGE_JAX_WORKER"
_IDLE_POLL_S = 0.25
_SWEEP_ROUNDS = 50
_WATCH_POLL_S = 0.1


class PlannerBuildError(RuntimeError):
    """Building the planner failed (the message names the entry point and the exception)."""


class Executor(Protocol):
    """Runs one timed request at a time; see :func:`open_executor`."""

    profile: str
    timer: str
    construction_ms: float
    planner_name: str | None
    stats: dict  # executor counters the manifest may record

    def execute(self, task, budget) -> tuple[dict, tuple]: ...

    def close(self) -> None: ...


def _device_ctx(device):
    return contextlib.nullcontext() if device is None else jax.default_device(device)


class InProcessExecutor:
    """The planner built (or given) in this process; :func:`run.timing.execute` per request."""

    profile = IN_PROCESS_TIMING_PROFILE
    timer = IN_PROCESS_TIMER

    def __init__(self, inference: str | None = None, inference_format: str = "request",
                 kwargs: dict | None = None, *, device=None, planner=None):
        t0 = time.monotonic()
        if planner is None:
            if inference is None:
                raise ValueError("InProcessExecutor needs an inference entry point or a planner")
            try:
                planner = load_planner(inference, inference_format, kwargs or {})
            except Exception as e:  # noqa: BLE001  (reported with the entry point)
                raise PlannerBuildError(f"building the planner {inference} failed: "
                                        f"{type(e).__name__}: {e}") from e
        self.construction_ms = (time.monotonic() - t0) * 1000.0
        self.planner = planner
        self.planner_name = getattr(planner, "name", None)
        self.device = device
        self.stats: dict = {"requests": 0}

    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        with _device_ctx(self.device):
            rec, snap = execute(self.planner, task, budget)
        rec["worker"] = None
        self.stats["requests"] += 1
        return rec, snap

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------- #
# tasks across the process boundary
# --------------------------------------------------------------------------- #

def task_payload(task) -> dict:
    """What the worker needs to build the request for ``task``: ordinary inputs and
    the allowlisted metadata only (never the released routes or the weights table)."""
    s = task.scene
    md = {k: copy.deepcopy(s.metadata[k]) for k in METADATA_ALLOWLIST if k in s.metadata}
    return {"id": s.id, "resolution": s.resolution, "split": s.split,
            "elevation_norm": s.elevation_norm, "elevation_m": s.elevation_m,
            "scene_obstacles": s.obstacles, "obstacles": task.obstacles,
            "start": tuple(int(v) for v in s.start), "goal": tuple(int(v) for v in s.goal),
            "metadata": md, "objective": task.objective, "variant": task.variant,
            "weight": float(task.weight)}


def task_from_payload(p: dict) -> Task:
    scene = Scene(id=p["id"], resolution=p["resolution"], split=p["split"],
                  elevation_norm=p["elevation_norm"], elevation_m=p["elevation_m"],
                  obstacles=p["scene_obstacles"], start=p["start"], goal=p["goal"], routes={},
                  metadata=p["metadata"])
    return Task(scene=scene, objective=p["objective"], variant=p["variant"], obstacles=p["obstacles"],
                route=np.zeros((0, 2), np.int32), weight=p["weight"])


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


# --------------------------------------------------------------------------- #
# the processes a worker started
# --------------------------------------------------------------------------- #
# Only os, signal and time (and the constants above) in the next five functions:
# the watchdog runs their source in a bare interpreter (``python -I -S``).

def _proc_table() -> dict:
    """pid -> (state, ppid, process group, session) of every process in ``/proc``
    ({} where there is no ``/proc``)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            rest = data[data.rindex(b")") + 2:].split()
            table[int(name)] = (rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3]))
        except (OSError, ValueError, IndexError):
            continue
    return table


def _has_token(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _tree_members(root: int, token, root_alive: bool) -> set:
    """The live processes of worker ``root``: its descendants, the members of its
    session and process group, and every process whose environment carries
    ``token``; ``root`` itself when ``root_alive`` (started and not yet reaped)."""
    table = _proc_table()
    entry = table.get(root)
    found = set()
    if root_alive or entry is None or entry[0] == "Z":  # else the pid is another process's now
        found.update(p for p, (_, _, pgrp, sid) in table.items() if p != root and root in (pgrp, sid))
    if token:
        marker = f"{WORKER_TOKEN_ENV}={token}".encode()
        found.update(p for p in table if p != root and p not in found and _has_token(p, marker))
    kids = {}
    for p, (_, ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(p)
    stack = list(found) + ([root] if root_alive else [])
    while stack:
        for c in kids.get(stack.pop(), ()):
            if c != root and c not in found:
                found.add(c)
                stack.append(c)
    if root_alive:
        found.add(root)
    found.discard(os.getpid())
    return {p for p in found if p in table and table[p][0] != "Z"}


def _kill_tree(root: int, token, root_alive: bool, spare_root: bool = False) -> set:
    """Freeze every process of worker ``root`` (:func:`_tree_members`) with SIGSTOP,
    collecting again until no new one appears, then SIGKILL them all; ``spare_root``:
    leave the worker itself running. Returns the pids signalled."""
    stopped = set()
    for _ in range(_SWEEP_ROUNDS):
        new = _tree_members(root, token, root_alive) - stopped
        if spare_root:
            new.discard(root)
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass
        stopped |= new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return stopped


def _watch(worker_pid: int, token) -> None:
    """The watchdog's loop: once the worker is gone (this process is re-parented),
    kill whatever it left behind."""
    while os.getppid() == worker_pid:
        time.sleep(_WATCH_POLL_S)
    _kill_tree(worker_pid, token, False)


def _watchdog_source() -> str | None:
    """The watchdog program (``argv``: worker pid, token), or None when the source
    of its functions is not available."""
    try:
        body = "\n\n".join(inspect.getsource(f) for f in (_proc_table, _has_token, _tree_members,
                                                         _kill_tree, _watch))
    except (OSError, TypeError):
        return None
    head = (f"import os, signal, sys, time\nWORKER_TOKEN_ENV = {WORKER_TOKEN_ENV!r}\n"
            f"_SWEEP_ROUNDS = {_SWEEP_ROUNDS!r}\n_WATCH_POLL_S = {_WATCH_POLL_S!r}\n\n")
    return head + body + "\n\n_watch(int(sys.argv[1]), sys.argv[2])\n"


def _children(pid: int) -> list:
    out = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def worker_processes(pid: int) -> list:
    """The descendants of process ``pid`` (``/proc/<pid>/task/*/children``, or a
    ``/proc`` scan where the kernel has no children files); [] without ``/proc``."""
    if os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        step = _children
    else:
        kids: dict = {}
        for p, (_, ppid, _, _) in _proc_table().items():
            kids.setdefault(ppid, []).append(p)

        def step(p):
            return kids.get(p, [])
    out, seen, stack = [], {pid}, [pid]
    while stack:
        for c in step(stack.pop()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                stack.append(c)
    return out


def kill_worker_processes(pid: int, token: str | None, alive: bool, spare_worker: bool = False) -> set:
    """Kill every process worker ``pid`` started: its descendants (a worker is the
    child subreaper of its tree), its session and process group, and every process
    whose environment has ``PASSAGE_JAX_WORKER=<token>``; all are frozen (SIGSTOP)
    before any is killed (SIGKILL). ``alive``: the worker is started and not yet
    reaped (then it is killed too unless ``spare_worker``). Returns the pids signalled."""
    return _kill_tree(pid, token, alive, spare_root=spare_worker)


# --------------------------------------------------------------------------- #
# the worker process
# --------------------------------------------------------------------------- #

def _die_with_parent():
    """Linux: the worker gets SIGKILL when its parent dies (a killed run leaves no worker)."""
    try:
        import ctypes  # noqa: PLC0415 (worker start-up, Linux only)

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001  (not Linux: the worker still exits on EOF)
        pass


_WATCHDOG: list = []


def _pid_exists(pid) -> bool:
    """Whether process ``pid`` exists (True for None: nothing to check)."""
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _isolate(token: str | None) -> int | None:
    """Worker start-up: its own session and process group, the child subreaper of
    everything it starts (Linux), ``PASSAGE_JAX_WORKER=<token>`` in its environment
    and the watchdog (outside the session, without the token). Returns the
    watchdog's pid (None when it could not start)."""
    with contextlib.suppress(OSError):
        os.setsid()
    try:
        import ctypes  # noqa: PLC0415 (worker start-up, Linux only)

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001  (not Linux: the session, group and token remain)
        pass
    if not token:
        return None
    os.environ[WORKER_TOKEN_ENV] = token
    src = _watchdog_source()
    if src is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != WORKER_TOKEN_ENV}
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", src, str(os.getpid()), token], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        return None
    _WATCHDOG.append(proc)
    return proc.pid


def _resolve_device(desc):
    if desc is None:
        return None
    platform, dev_id = desc
    for d in jax.devices(platform):
        if d.id == dev_id:
            return d
    raise RuntimeError(f"device {platform}:{dev_id} is not available in the worker "
                       f"(devices: {[str(d) for d in jax.devices()]})")


def _worker_main(conn, config: dict) -> None:
    """Worker loop: build the planner once, then answer requests until told to stop."""
    _die_with_parent()
    if not _pid_exists(config.get("parent_pid")):
        os._exit(1)  # the parent died before the death signal was armed
    watchdog = _isolate(config.get("token"))
    sys.path[:] = list(config["sys_path"])
    try:
        device = _resolve_device(config["device"])
        with _device_ctx(device):
            planner = load_planner(config["inference"], config["inference_format"], config["kwargs"])
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        text = "".join(traceback.format_exception_only(type(e), e)).strip()[-2000:]
        conn.send(("build_error", f"{type(e).__name__}: {text}"))
        return
    conn.send(("ready", {"pid": os.getpid(), "name": getattr(planner, "name", None), "watchdog": watchdog}))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        _, req_id, payload, budget_dict, deadline = msg
        task = task_from_payload(payload)
        budget = BudgetSpec.from_dict(budget_dict)
        with _device_ctx(device):
            out = call_planner(planner, lambda t=task, b=budget, d=deadline: build_request(t, b, d))
        res = out["result"]
        if res is not None:
            out["result"] = PlanResult(path=None, status=res.status, work=res.work,
                                       stage_work=res.stage_work, precision=res.precision,
                                       resource_peaks=res.resource_peaks, message=res.message,
                                       route_stage=res.route_stage)
        try:
            conn.send(("done", req_id, out))
        except Exception as e:  # noqa: BLE001  (an unpicklable result field)
            bad = dict(out, result=None, snap=(ROUTE_FORMAT_CODE["none"], None, None, None),
                       status="runtime_error", error_type="ProtocolError",
                       error=f"protocol: the result cannot be sent to the parent: {type(e).__name__}: {e}")
            conn.send(("done", req_id, bad))


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _exit_reason(code) -> str:
    if code is None:
        return "the worker closed its pipe"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _kill_live_workers():  # runs before multiprocessing joins its children at exit
    for w in list(_LIVE):
        w.kill()


class _Worker:
    def __init__(self, ctx, config: dict, index: int):
        self.token = f"{os.getpid()}-{index}-{secrets.token_hex(8)}"
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, dict(config, token=self.token)),
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
        _LIVE.add(self)

    def processes(self) -> list:
        """The processes the worker started (not its watchdog), refreshed every
        :data:`TREE_POLL_S`."""
        now = time.monotonic()
        if now - self._tree_t >= TREE_POLL_S:
            self._tree = [p for p in worker_processes(self.pid) if p != self.watchdog]
            self._tree_t = now
        return self._tree

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
        _LIVE.discard(self)

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
                        "device": None if device is None else (device.platform, int(device.id))}
        self._ctx = multiprocessing.get_context("spawn")
        self._worker: _Worker | None = None
        self._n_workers = 0
        self._req_id = 0
        self._lock = threading.Lock()
        self.planner_name: str | None = None
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
        kind, value = self._await(w, t0 + WORKER_START_TIMEOUT_S, req_id=None)
        if kind == "msg" and value[0] == "ready":
            self.planner_name = value[1].get("name")
            w.watchdog = value[1].get("watchdog")
            self._worker = w
            self.stats["worker_start_ms"].append(round((time.monotonic() - t0) * 1000.0, 3))
            return w
        w.kill()
        if kind == "msg":
            why = value[1]
        elif kind == "timeout":
            why = f"the worker was not ready within {WORKER_START_TIMEOUT_S:.0f} s"
        else:
            why = value
        raise PlannerBuildError(f"building the planner {self.inference} in a worker process failed: {why}")

    def _lose_worker(self, w: _Worker, counter: str | None):
        w.kill()
        if counter:
            self.stats[counter] += 1
        if self._worker is w:
            self._worker = None

    def _await(self, w: _Worker, limit: float, req_id):
        """Wait for ``w``'s next message until monotonic ``limit``. Returns
        ``("msg", message)``, ``("timeout", None)``, ``("died", reason)`` or
        ``("oom", reason)`` (the worker is killed for the last)."""
        slice_s = RSS_POLL_S if self.memory_mb else _IDLE_POLL_S
        while True:
            left = limit - time.monotonic()
            if left <= 0:
                return "timeout", None
            ready = w.conn.poll(min(left, slice_s))
            if ready:
                try:
                    msg = w.conn.recv()
                except (EOFError, OSError):
                    w.proc.join(2.0)
                    return "died", _exit_reason(w.proc.exitcode)
                if req_id is not None and (msg[0] != "done" or msg[1] != req_id):
                    continue  # a stale reply
                over = self._over_memory(w)
                return ("oom", over) if over else ("msg", msg)
            if not w.proc.is_alive():
                if w.conn.poll(0):
                    continue
                return "died", _exit_reason(w.proc.exitcode)
            over = self._over_memory(w)
            if over:
                return "oom", over

    def _over_memory(self, w: _Worker) -> str | None:
        if not self.memory_mb:
            return None
        rss = _rss_mb(w.pid)
        if rss is None:
            return None
        kids = [m for m in (_rss_mb(p) for p in w.processes()) if m is not None]
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
            kind, _ = self._send_and_wait(w, wt, budget, warm=True)
            self.stats["warmup_requests"] += 1
            if kind != "msg":  # the warm-up itself hung, died or ran out of memory
                self.stats["warmup_failures"] += 1
                self._lose_worker(w, None)
                w = self._start_worker()
                w.warmed = True  # served unwarmed (worker.warmup == 0)
                return w
            w.warmup += 1
        return w

    def _send_and_wait(self, w: _Worker, task, budget: BudgetSpec, warm: bool = False, t0=None):
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
            w.conn.send(("plan", rid, task_payload(task), budget.to_dict(), deadline))
        except (OSError, ValueError):
            w.proc.join(2.0)
            return "died", _exit_reason(w.proc.exitcode)
        return self._await(w, limit, rid)

    # -------------------------------------------------------------- requests
    def execute(self, task, budget: BudgetSpec | None = None) -> tuple[dict, tuple]:
        """One timed request in the worker; returns ``(record, snapshot)`` as
        :func:`run.timing.execute` does (plus ``record["worker"]``)."""
        budget = budget or BudgetSpec()
        if budget.wall_time_ms is None:
            raise ValueError("supervised execution needs budget.wall_time_ms (the parent's deadline)")
        with self._lock:
            w = self._ready_worker(task, budget)
            t0 = time.monotonic()
            kind, value = self._send_and_wait(w, task, budget, t0=t0)
            t_ret = time.monotonic()
            w.requests += 1
            self.stats["requests"] += 1
            info = {"pid": w.pid, "index": w.index, "requests": w.requests, "warmup": w.warmup,
                    "restarted": w.index > 0}
            lost = None
            if kind == "msg":
                outcome = value[2]
            else:
                outcome = {"result": None, "snap": (ROUTE_FORMAT_CODE["none"], None, None, None),
                           "sync_arrays": 0, "returned": False}
                w.kill()  # now: a killed request takes no more CPU, nor do the processes it started
                if kind == "timeout":
                    grace_ms = self.grace_s * 1000.0
                    outcome.update(status="timeout", error_type="WorkerTimeout",
                                   error=f"no reply within budget.wall_time_ms={budget.wall_time_ms:g} + "
                                         f"worker_grace_ms={grace_ms:g}; worker {w.pid} killed (SIGKILL)"
                                         f"{w.killed_note()}")
                    lost = "timeouts_killed"
                elif kind == "oom":
                    outcome.update(status="oom", error_type="WorkerMemoryLimit",
                                   error=f"{value}; worker {w.pid} killed (SIGKILL){w.killed_note()}")
                    lost = "oom_kills"
                else:
                    outcome.update(status="runtime_error", error_type="WorkerDied",
                                   error=f"worker process {w.pid} died during the request ({value})"
                                         f"{w.killed_note(died=True)}")
                    lost = "crashes"
            rec, snap = finish_record(task, budget, outcome, t0, t_ret)
            rec["worker"] = info
            if lost:
                self._lose_worker(w, lost)
            return rec, snap

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


def open_executor(spec, seed: int, *, device=None, planner=None, warmup_tasks=None):
    """The executor for ``spec`` (a :class:`~passage_jax.run.spec.RunSpec`) and ``seed``
    (its kwargs are ``spec.kwargs_for_seed(seed)``): supervised when
    ``spec.execution == "supervised"``, otherwise in-process. ``device``: the JAX
    device admission chose (None: the default). ``planner``: an already-built
    planner (in-process only). Raises :class:`PlannerBuildError` when the planner
    cannot be built."""
    kwargs = spec.kwargs_for_seed(seed)
    execution = getattr(spec, "execution", "in_process")
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
