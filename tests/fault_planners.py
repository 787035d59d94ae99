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
import time

import numpy as np

from passage_jax.planners.bfs import BFSPlanner

__all__ = ["make_hang", "make_sleeper", "make_exit", "make_segv", "make_hog", "make_looper",
           "make_huge", "make_raiser", "make_mixed", "make_flax", "looping_route", "LOOP_CELLS", "FAULTS"]

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
