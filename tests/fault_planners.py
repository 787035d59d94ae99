"""Misbehaving planners for the fault-injection tests and ``bench/faults.py``.

Each factory returns a plan callable that misbehaves on the requests whose
``sample_id`` is in ``ids`` (every request except the untimed warm-up requests,
whose ids start with ``warmup-``, when ``ids`` is None) and otherwise answers
with the breadth-first baseline. Importable as ``fault_planners:<factory>``
(``tests/`` on ``sys.path``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from passage_jax.planners.bfs import BFSPlanner

__all__ = ["make_hang", "make_sleeper", "make_exit", "make_segv", "make_hog", "make_looper",
           "make_huge", "make_raiser", "make_mixed", "make_flax", "make_spawner", "start_child",
           "looping_route", "LOOP_CELLS", "FAULTS", "CHILD_KINDS"]

#: Length of the looping route of :func:`make_looper`.
LOOP_CELLS = 100_000


def _hit(request, ids) -> bool:
    if ids is None:
        return not str(request.sample_id).startswith("warmup-")
    return str(request.sample_id) in set(map(str, ids))


def _wrap(fault, ids):
    inner = BFSPlanner()

    def plan(request):
        if _hit(request, ids):
            return fault(request, inner)
        return inner.plan(request)

    return plan


def make_hang(ids=None):
    """Never returns (a busy loop holding the interpreter)."""
    def fault(request, inner):
        while True:
            pass
    return _wrap(fault, ids)


def make_sleeper(ids=None, sleep_ms: float = 1000.0):
    """Plans a legal route, then sleeps ``sleep_ms`` before answering."""
    def fault(request, inner):
        res = inner.plan(request)
        time.sleep(sleep_ms / 1000.0)
        return res
    return _wrap(fault, ids)


def make_exit(ids=None, code: int = 3):
    """Ends the process at once (``os._exit``), no reply."""
    def fault(request, inner):
        os._exit(code)
    return _wrap(fault, ids)


def make_segv(ids=None):
    """Sends itself SIGSEGV (as a crashing native extension would)."""
    def fault(request, inner):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10.0)
    return _wrap(fault, ids)


def make_hog(ids=None, chunk_mb: int = 32, max_mb: int = 3072):
    """Allocates (and touches) memory ``chunk_mb`` at a time; raises MemoryError
    itself at ``max_mb`` so it never exhausts an unguarded machine."""
    def fault(request, inner):
        held = []
        while len(held) * chunk_mb < max_mb:
            held.append(np.ones(chunk_mb << 17))  # chunk_mb MiB of float64
            time.sleep(0.002)
        raise MemoryError(f"hog: allocated {max_mb} MiB")
    return _wrap(fault, ids)


def looping_route(route, n: int = LOOP_CELLS) -> np.ndarray:
    """``route`` (start .. goal) preceded by back-and-forth steps between the start
    and the route's second cell, to ``n`` cells (``n - 1`` when the padding is odd):
    every step is a legal move and the route still runs from start to goal."""
    r = np.asarray(route, np.int64)
    k = max(0, (n - len(r)) // 2)
    osc = np.tile(np.stack([r[0], r[1]]), (k, 1))
    return np.concatenate([osc, r])


def make_looper(ids=None, n: int = LOOP_CELLS):
    """Returns a legal but looping route of ``n`` cells (a decoder stuck on a plateau)."""
    def fault(request, inner):
        res = inner.plan(request)
        res.path = looping_route(res.path, n)
        return res
    return _wrap(fault, ids)


def make_huge(ids=None):
    """Returns a route with 2**40 as a coordinate (status ok)."""
    def fault(request, inner):
        res = inner.plan(request)
        p = np.asarray(res.path, np.int64).copy()
        p[len(p) // 2, 0] = 2 ** 40
        res.path = p
        return res
    return _wrap(fault, ids)


def make_raiser(ids=None):
    """Raises an ordinary exception."""
    def fault(request, inner):
        raise RuntimeError(f"planner failure on {request.sample_id}")
    return _wrap(fault, ids)


#: What :func:`start_child` can start.
CHILD_KINDS = ("plain", "session", "daemon", "hog")
_SLEEP = "import time; time.sleep(600)"
# a double fork: the middle process starts the grandchild in its own session and exits
_DAEMON = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-I', '-S', '-c', sys.argv[1]], "
           "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
           "stderr=subprocess.DEVNULL); print(p.pid, flush=True)")


def start_child(kind: str, child_mb: int = 0) -> list:
    """Starts one process of ``kind`` and returns the pids it left running:
    ``plain`` a sleeping child; ``session`` the same with ``start_new_session=True``;
    ``daemon`` a double-forked sleeper in its own session whose parent has exited;
    ``hog`` a child that touches ``child_mb`` MiB of memory and holds it, sleeping."""
    py = [sys.executable, "-I", "-S", "-c"]
    quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if kind == "daemon":
        out = subprocess.run(py + [_DAEMON, _SLEEP], capture_output=True, text=True, check=True, timeout=60)
        return [int(out.stdout.split()[0])]
    if kind == "hog":
        src = f"b = bytearray({int(child_mb)} << 20); b[::4096] = b'x' * len(b[::4096]); {_SLEEP}"
        return [subprocess.Popen(py + [src], **quiet).pid]
    if kind not in ("plain", "session"):
        raise ValueError(f"child kind {kind!r} is not one of {CHILD_KINDS}")
    return [subprocess.Popen(py + [_SLEEP], start_new_session=kind == "session", **quiet).pid]


def make_spawner(ids=None, *, pid_dir: str, children=("plain",), then: str = "hang", child_mb: int = 0):
    """Starts processes (``children``: kinds of :func:`start_child`), writes their
    pids, one a line, to ``<pid_dir>/<sample_id>.pids``, then ``then``: ``hang``
    (sleeps forever), ``exit`` (``os._exit(3)``) or ``return`` (the BFS route; the
    processes live on)."""
    def fault(request, inner):
        pids = [pid for kind in children for pid in start_child(kind, child_mb)]
        path = Path(pid_dir) / f"{request.sample_id}.pids"
        path.with_suffix(".tmp").write_text("".join(f"{p}\n" for p in pids))
        path.with_suffix(".tmp").replace(path)
        if then == "exit":
            os._exit(3)
        if then == "return":
            return inner.plan(request)
        while True:
            time.sleep(0.05)
    return _wrap(fault, ids)


#: fault name -> (factory name, status every faulty request must get under supervised execution)
FAULTS = {
    "hang": ("make_hang", "timeout"),
    "sleep": ("make_sleeper", "timeout"),
    "exit": ("make_exit", "runtime_error"),
    "segv": ("make_segv", "runtime_error"),
    "memory": ("make_hog", "oom"),
    "loop": ("make_looper", "ok"),
    "huge": ("make_huge", "invalid_path"),
    "raise": ("make_raiser", "runtime_error"),
    "orphans": ("make_spawner", "timeout"),
}


def make_mixed(faults: dict):
    """One planner for many faults: ``faults`` maps a sample id to ``[factory name,
    kwargs]`` (e.g. ``{"0000000001": ["make_exit", {"code": 3}]}``); other ids get BFS."""
    table = {str(k): globals()[name](ids=[k], **(kw or {})) for k, (name, kw) in faults.items()}
    inner = BFSPlanner()

    def plan(request):
        fn = table.get(str(request.sample_id))
        return fn(request) if fn is not None else inner.plan(request)

    return plan


def make_flax(features: int = 4):
    """A Flax planner (module + params + decoder): a Dense layer over the input tensor
    on the default JAX device, decoded into the BFS route; the message names the
    device the forward pass ran on."""
    import flax.linen as nn  # noqa: PLC0415 (optional dependency, only this planner needs it)
    import jax  # noqa: PLC0415

    from passage_jax.protocol import FlaxPlanner  # noqa: PLC0415

    module = nn.Dense(features)
    params = module.init(jax.random.PRNGKey(0), np.zeros((1, 3), np.float32))
    inner = BFSPlanner()

    def decoder(request, out):
        res = inner.plan(request)
        res.message = f"forward on {sorted(str(d) for d in out.devices())}; sum {float(out.sum()):.3f}"
        return res

    return FlaxPlanner(module, params, decoder)
