"""Returning freed heap memory to the operating system between chunks.

A long run allocates and frees many same-sized buffers from several threads (the
shard decoders, XLA's thread pools). glibc's allocator keeps a heap arena per
thread and rarely gives their free pages back, so a process's resident memory
creeps up with the number of scenes although the live data is bounded (measured:
about 85 kB a request at 256 x 256). :func:`trim_heap` asks the C library to return
free pages (``malloc_trim(0)``, every arena); the streaming readers call it each time
they drop a chunk, and it trims on every :data:`TRIM_EVERY`-th call: a trim hands back
pages the next chunk's buffers (the same sizes) would take again, and each page handed
back is faulted in again (measured on a score of 8,000 scenes at 256²: trimming on every
chunk, 2.5 million page faults and 16 s of system time; never, 0.2 million and 6 s, with a
peak 4 % higher). A chunk holds about the same number of grid cells at every resolution
(:func:`passage_jax.data.chunk_scenes`), so this trims once per eight chunks' worth of
buffers. It is a no-op where the C library has no ``malloc_trim``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import itertools

__all__ = ["trim_heap", "TRIM_EVERY"]

#: :func:`trim_heap` trims on every this-many-th call (the first call included)
TRIM_EVERY = 8
_CALLS = itertools.count()


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        fn = getattr(libc, "malloc_trim", None)
    except OSError:
        return None
    if fn is not None:
        fn.argtypes = [ctypes.c_size_t]
        fn.restype = ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def trim_heap(force: bool = False) -> bool:
    """Return free heap pages to the operating system on every :data:`TRIM_EVERY`-th call
    (on this one with ``force``); True when the C library did."""
    if next(_CALLS) % TRIM_EVERY and not force:
        return False
    return bool(_TRIM(0)) if _TRIM is not None else False
