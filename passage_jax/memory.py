"""Returning freed heap memory to the operating system between chunks.

A long run allocates and frees many same-sized buffers from several threads (the
shard decoders, XLA's thread pools). glibc's allocator keeps a heap arena per
thread and rarely gives their free pages back, so a process's resident memory
creeps up with the number of scenes although the live data is bounded (measured:
about 85 kB a request at 256 x 256). :func:`trim_heap` asks the C library to return
free pages (``malloc_trim(0)``, every arena); the streaming readers call it each time
they drop a chunk. It is a no-op where the C library has no ``malloc_trim``.
"""
from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["trim_heap"]


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


def trim_heap() -> bool:
    """Return free heap pages to the operating system; True when the C library did."""
    return bool(_TRIM(0)) if _TRIM is not None else False
