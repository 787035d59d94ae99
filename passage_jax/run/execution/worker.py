"""The supervised worker process: start-up, the request loop, and tasks across the pipe.

:func:`worker_main` is the target of a worker started with the ``spawn`` method by
:class:`~passage_jax.run.execution.sessions.SupervisedExecutor`. It arms the death signal
(the worker dies with its parent), isolates itself (own session and process group,
child subreaper of everything it starts, ``PASSAGE_JAX_WORKER=<token>`` in its
environment, a watchdog outside the session), builds the planner once, then answers
``("plan", id, payload, budget, deadline)`` messages with the outcome of
:func:`~passage_jax.run.execution.timing.call_planner` (the route travels as its snapshot; the
parent finishes the record) until told to ``stop`` or its pipe closes. Whatever the
planner raises, ``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` included, is
that request's ``runtime_error`` and the worker serves on
(:func:`passage_jax.run.execution.interrupts.contain_all`).

:func:`task_payload` is what crosses the pipe for one task: the ordinary inputs and
the allowlisted metadata only (never the released routes or the weights table);
:func:`task_from_payload` rebuilds the task in the worker.
"""
from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import traceback

import jax
import numpy as np

from passage_jax.data.scene import Scene, Task
from passage_jax.protocol.adapters import load_planner
from passage_jax.protocol.contracts import METADATA_ALLOWLIST, BudgetSpec, PlanResult
from passage_jax.protocol.records import ROUTE_FORMAT_CODE
from passage_jax.protocol.requests import build_request
from passage_jax.run.execution import interrupts
from passage_jax.run.execution.timing import call_planner
from passage_jax.run.execution.worker_processes import WORKER_TOKEN_ENV, watchdog_source

__all__ = ["worker_main", "task_payload", "task_from_payload", "device_scope", "default_device",
           "device_label"]

_WATCHDOG: list = []


def device_scope(device):
    """``jax.default_device(device)``, or nothing for None (the default device)."""
    return contextlib.nullcontext() if device is None else jax.default_device(device)


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


def _die_with_parent():
    """Linux: the worker gets SIGKILL when its parent dies (a killed run leaves no worker)."""
    try:
        import ctypes  # noqa: PLC0415 (worker start-up, Linux only)

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001  (not Linux: the worker still exits on EOF)
        pass


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


def _start_watchdog(token: str) -> int | None:
    """The watchdog (outside the worker's session, without the token); its pid, or None."""
    src = watchdog_source()
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
    return _start_watchdog(token)


def _resolve_device(desc):
    if desc is None:
        return None
    platform, dev_id = desc
    for d in jax.devices(platform):
        if d.id == dev_id:
            return d
    raise RuntimeError(f"device {platform}:{dev_id} is not available in the worker "
                       f"(devices: {[str(d) for d in jax.devices()]})")


def _answer(planner, device, msg) -> dict:
    """The outcome of one ``plan`` message, with the route dropped from the result
    (it travels as the snapshot)."""
    _, _, payload, budget_dict, deadline = msg
    task = task_from_payload(payload)
    budget = BudgetSpec.from_dict(budget_dict)
    with device_scope(device):
        out = call_planner(planner, lambda t=task, b=budget, d=deadline: build_request(t, b, d))
    res = out["result"]
    if res is not None:
        out["result"] = PlanResult(path=None, status=res.status, work=res.work,
                                   stage_work=res.stage_work, precision=res.precision,
                                   resource_peaks=res.resource_peaks, message=res.message,
                                   route_stage=res.route_stage)
    return out


def _send_outcome(conn, req_id, out: dict) -> None:
    try:
        conn.send(("done", req_id, out))
    except (EOFError, OSError):
        raise  # the pipe itself is gone: the worker ends
    except BaseException as e:  # noqa: BLE001  (a result field that cannot be pickled)
        try:
            text = f"{type(e).__name__}: {e}"
        except BaseException:  # noqa: BLE001  (its __str__ raised)
            text = type(e).__name__
        bad = dict(out, result=None, snap=(ROUTE_FORMAT_CODE["none"], None, None, None),
                   status="runtime_error", error_type="ProtocolError",
                   error=f"protocol: the result cannot be sent to the parent: {text}")
        conn.send(("done", req_id, bad))


def worker_main(conn, config: dict) -> None:
    """Worker loop: build the planner once, then answer requests until told to stop."""
    _die_with_parent()
    if not _pid_exists(config.get("parent_pid")):
        os._exit(1)  # the parent died before the death signal was armed
    watchdog = _isolate(config.get("token"))
    interrupts.contain_all()  # no run here: whatever a planner raises is its failure
    sys.path[:] = list(config["sys_path"])
    try:
        device = _resolve_device(config["device"])
        with device_scope(device):
            planner = load_planner(config["inference"], config["inference_format"], config["kwargs"])
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        try:
            text = "".join(traceback.format_exception_only(type(e), e)).strip()[-2000:]
        except BaseException:  # noqa: BLE001  (its __str__ raised)
            text = ""
        with contextlib.suppress(EOFError, OSError):  # the parent is gone: nothing to tell
            conn.send(("build_error", f"{type(e).__name__}: {text}"))
        return
    try:
        conn.send(("ready", {"pid": os.getpid(), "name": getattr(planner, "name", None),
                             "watchdog": watchdog, "device": device_label(device)}))
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                return
            _send_outcome(conn, msg[1], _answer(planner, device, msg))
    except (EOFError, OSError):
        return  # the parent closed the pipe (it stopped, or was stopped): the worker ends quietly


def default_device():
    """This process's default device: its first local one (in a multi-process launch
    ``jax.devices()`` lists every process's devices, process 0's first)."""
    return jax.local_devices()[0]


def device_label(device=None) -> str:
    """The JAX device a request runs on, as ``str(device)`` (``cpu:0``); None: the default."""
    return str(device if device is not None else default_device())
