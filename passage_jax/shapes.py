"""Padded shapes: the one ladder every padded size climbs, so a run compiles a bounded
number of kernels.

JAX compiles a jitted function once per input shape. Every size passage_jax pads to
is a *rung* of one fixed ladder (:func:`rung`):

    1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, ...

doubling up to 64, then half octaves (x1.5 from a power of two, x4/3 back to the next
one). Padding to the next rung wastes less than half of the size below 64 and at most
a third beyond, and there are about ``2 * log2(n)`` rungs up to ``n``. The ladder is the
same for every call, chunk and process, so the same sizes meet the same compiled
kernel:

* route lengths in the metric kernels (:mod:`passage_jax.metrics.host`): the longer
  of a task's two routes, from ``least=32`` (32, 64, 96, 128, 192, ...); each length
  rung runs in calls of one fixed batch size, so scoring compiles at most one kernel
  per length rung whatever the number of tasks, scenes or chunks;
* batches of scenes in value iteration (:func:`passage_jax.reference.vi.solve_batch`):
  a batch is padded up to a rung and split into calls of at most a fixed number of
  scenes per resolution (a rung itself), so solving any number of scenes of one size
  compiles at most one kernel per rung up to that cap.

A leaf module: it imports nothing of passage_jax (and not JAX).
"""
from __future__ import annotations

import numpy as np

__all__ = ["FINE_FROM", "rung", "rung_below", "rungs", "rungs_of"]

#: From this size on the ladder climbs in half octaves (below it, it doubles).
FINE_FROM = 64


def _next(b: int) -> int:
    if b < FINE_FROM:
        return b * 2
    return b * 3 // 2 if b & (b - 1) == 0 else b * 4 // 3


def rung(n: int, least: int = 1) -> int:
    """The smallest rung of the ladder that is >= ``n`` and >= ``least`` (``least`` is
    itself rounded up to a rung)."""
    n = max(int(n), int(least), 1)
    b = 1
    while b < n:
        b = _next(b)
    return b


def rung_below(n: int, least: int = 1) -> int:
    """The largest rung <= ``n`` (at least ``rung(least)``): the fixed size of a call
    whose budget allows ``n`` rows."""
    floor = rung(least)
    b = floor
    while _next(b) <= n:
        b = _next(b)
    return b


def rungs(upto: int, least: int = 1) -> tuple[int, ...]:
    """The rungs from ``rung(least)`` up to ``rung(upto, least)``, ascending."""
    top = rung(upto, least)
    out = [rung(least)]
    while out[-1] < top:
        out.append(_next(out[-1]))
    return tuple(out)


def rungs_of(sizes, least: int = 1) -> np.ndarray:
    """:func:`rung` of each entry of the integer array ``sizes`` (vectorised)."""
    sizes = np.asarray(sizes, np.int64)
    if sizes.size == 0:
        return np.zeros(sizes.shape, np.int64)
    ladder = np.asarray(rungs(int(sizes.max()), least), np.int64)
    return ladder[np.searchsorted(ladder, np.maximum(sizes, 1), side="left")]
