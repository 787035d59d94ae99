"""Compilation: the persistent compilation cache and counting what compiles.

**Persistent cache.** JAX can keep compiled executables on disk and reuse them in
the next process (``jax_compilation_cache_dir``). Every ``python -m cli`` command
switches it on (:func:`enable_persistent_cache`) in a per-user folder,
``$PASSAGE_JAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/passage_jax/jax``, else
``~/.cache/passage_jax/jax``; ``PASSAGE_JAX_NO_COMPILE_CACHE=1`` switches it off.
The library itself never changes JAX's global configuration on import: a script or
a notebook opts in with one call, ``passage_jax.compilation.enable_persistent_cache()``.
The cache is bounded (:data:`MAX_CACHE_BYTES`, least recently used entries evicted),
and with a bound JAX guards the folder with a file lock (the ``filelock`` package, a
runtime dependency), so the processes of a multi-process launch (and concurrent
commands) share one folder safely. Where ``filelock`` is missing anyway (an install
with ``--no-deps``) the cache is switched on unbounded rather than left unreadable, and
:func:`cache_problems` (shown by ``doctor``) says so.

**Counting.** :func:`compile_stats` reads JAX's own monitoring events: every
executable JAX builds or fetches from the cache (``backend_compile``), the cache hits
among them, and the seconds spent (tracing, lowering, compiling). A
:class:`CompileCounter` gives the numbers for one block of code; ``score`` and
``run`` record them in their files, so a change that compiles once per chunk shows
in the outputs.

**Exported kernels.** A jitted kernel is traced and lowered anew in every process, even
when its executable then comes from the persistent cache: about 0.9-1.1 s of tracing
and 0.3 s of lowering for the seven kernel shapes of a ``score`` at 256 x 256 on a
two-core CPU (bench/RESULTS.md). :class:`ExportedKernel` calls a kernel through its exported module
(``jax.export``: StableHLO, serialized with the ``flatbuffers`` package) kept in
``exported/`` of the persistent cache's folder, one file a shape; a later process
deserializes it and compiles it (from the persistent cache) without tracing or
lowering the kernel's Python code. The file's name is a digest of everything the
module depends on: the kernel's name and static arguments, the shapes, dtypes and tree
of its arguments, the package's source (:func:`passage_jax.protocol.records.code_hash`),
the JAX and jaxlib releases, the backend, the device kind, the float64 switch and the
compiler options; a file that does not read back, or describes other arguments, is
exported again. It is on where the persistent cache is; a call whose arguments are
not all host (NumPy) arrays (a batch already placed on devices, or split over several)
and an install without ``flatbuffers`` call the jitted kernel as before. Results are
the jitted kernel's, bit for bit (tested). The folder is bounded
(:data:`MAX_EXPORTED_BYTES`, oldest files removed first).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import threading
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "NO_CACHE_ENV", "MAX_CACHE_BYTES", "MIN_COMPILE_SECS",
           "default_cache_dir", "enable_persistent_cache", "persistent_cache_dir", "cache_usage",
           "cache_problems",
           "CompileStats", "CompileCounter", "compile_stats", "ExportedKernel", "EXPORTED_DIR",
           "MAX_EXPORTED_BYTES", "exported_dir"]

CACHE_DIR_ENV = "PASSAGE_JAX_CACHE_DIR"
NO_CACHE_ENV = "PASSAGE_JAX_NO_COMPILE_CACHE"
#: bound of the cache folder (entries beyond it are evicted, least recently used first)
MAX_CACHE_BYTES = 4 << 30
#: executables that compile faster than this are not worth a disk entry
MIN_COMPILE_SECS = 0.05
#: the folder of exported kernels inside the persistent cache's folder
EXPORTED_DIR = "exported"
#: bound of that folder (a kernel's module is about 25 kB a shape)
MAX_EXPORTED_BYTES = 64 << 20

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_TRACE = "/jax/core/compile/jaxpr_trace_duration"
_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_CACHE_MISS = "/jax/compilation_cache/cache_misses"


def default_cache_dir() -> Path:
    """The per-user cache folder (``$PASSAGE_JAX_CACHE_DIR``, else the XDG cache home)."""
    env = os.environ.get(CACHE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "passage_jax" / "jax"


def _switched_off() -> bool:
    return os.environ.get(NO_CACHE_ENV, "") not in ("", "0")


def enable_persistent_cache(path=None, *, max_bytes: int = MAX_CACHE_BYTES,
                            min_compile_secs: float = MIN_COMPILE_SECS,
                            environ: bool = False) -> Path | None:
    """Switch JAX's persistent compilation cache on in ``path`` (default
    :func:`default_cache_dir`); returns the folder, or None when
    ``PASSAGE_JAX_NO_COMPILE_CACHE`` is set or the folder cannot be made (the cache
    is an optimisation: without it everything still works, compiling anew).

    Call it before the first computation: JAX reads these settings when it first
    compiles. With ``environ`` the same settings are also put in ``os.environ``
    (``JAX_COMPILATION_CACHE_DIR`` ...), for the processes this one starts.
    """
    if _switched_off():
        return None
    import jax  # noqa: PLC0415 (the cache is opt-in; importing this module does not load JAX)

    folder = Path(path).expanduser() if path is not None else default_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            return None
    except OSError:
        return None
    if not _has_filelock():
        max_bytes = -1  # JAX reads no entry of a bounded cache without filelock: unbounded
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_compilation_cache_max_size", int(max_bytes))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if environ:
        os.environ.update({"JAX_COMPILATION_CACHE_DIR": str(folder),
                           "JAX_COMPILATION_CACHE_MAX_SIZE": str(int(max_bytes)),
                           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(float(min_compile_secs)),
                           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"})
    _listen()
    return folder


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # hidden (sys.modules[name] = None) or broken
        return False


def _has_filelock() -> bool:
    return _has_module("filelock")


def cache_problems(path=None) -> list[str]:
    """Why the persistent cache would not work in this environment (an empty list when
    it would, or when it is switched off on purpose): ``filelock`` missing (JAX then
    cannot read the entries of a bounded cache; this module falls back to an unbounded
    one), or a folder that cannot be made or written."""
    if _switched_off():
        return []
    folder = Path(path).expanduser() if path is not None else default_cache_dir()
    problems = []
    if not _has_filelock():
        problems.append("the filelock package is not installed: the cache runs unbounded "
                        "(pip install 'filelock>=3.12' bounds it)")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        problems.append(f"{folder} cannot be written: every command compiles anew "
                        f"(set {CACHE_DIR_ENV} to a writable folder)")
    return problems


def persistent_cache_dir() -> Path | None:
    """The folder JAX's persistent cache uses in this process, or None when it is off."""
    import jax  # noqa: PLC0415 (see enable_persistent_cache)

    d = jax.config.jax_compilation_cache_dir
    return Path(d) if d else None


def cache_usage(path=None) -> dict:
    """Entries and bytes in a cache folder (default :func:`default_cache_dir`)."""
    folder = Path(path) if path is not None else default_cache_dir()
    n = size = 0
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_file() and p.name.endswith("-cache"):
                n += 1
                size += p.stat().st_size
    return {"path": str(folder), "exists": folder.is_dir(), "entries": n, "bytes": size,
            "switched_off": _switched_off()}


@dataclasses.dataclass(frozen=True)
class CompileStats:
    """Executables built or fetched (``compilations``), how many of those came from the
    persistent cache (``cache_hits``), and the seconds spent compiling (fetches
    included), lowering and tracing."""

    compilations: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    compile_s: float = 0.0
    lower_s: float = 0.0
    trace_s: float = 0.0
    traces: int = 0

    def __sub__(self, other: CompileStats) -> CompileStats:
        return CompileStats(**{f.name: getattr(self, f.name) - getattr(other, f.name)
                               for f in dataclasses.fields(self)})

    @property
    def compiled(self) -> int:
        """Executables compiled anew (not fetched from the persistent cache)."""
        return self.compilations - self.cache_hits

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(compiled=self.compiled, compile_s=round(self.compile_s, 3),
                 lower_s=round(self.lower_s, 3), trace_s=round(self.trace_s, 3))
        return d


_lock = threading.Lock()
_totals = {f.name: 0 for f in dataclasses.fields(CompileStats)}
_listening = False


def _on_duration(event: str, secs: float, **_kw) -> None:
    key = {_BACKEND_COMPILE: ("compilations", "compile_s"), _LOWER: (None, "lower_s"),
           _TRACE: ("traces", "trace_s")}.get(event)
    if key is None:
        return
    with _lock:
        if key[0]:
            _totals[key[0]] += 1
        _totals[key[1]] += float(secs)


def _on_event(event: str, **_kw) -> None:
    key = {_CACHE_HIT: "cache_hits", _CACHE_MISS: "cache_misses"}.get(event)
    if key is not None:
        with _lock:
            _totals[key] += 1


def _listen() -> None:
    global _listening
    with _lock:
        if _listening:
            return
        _listening = True
    import jax.monitoring as mon  # noqa: PLC0415 (see enable_persistent_cache)

    mon.register_event_duration_secs_listener(_on_duration)
    mon.register_event_listener(_on_event)


def compile_stats() -> CompileStats:
    """What this process compiled since counting began (the first call of this module's
    functions that loads JAX)."""
    _listen()
    with _lock:
        return CompileStats(**_totals)


class CompileCounter:
    """The :class:`CompileStats` of a block::

        with CompileCounter() as c:
            ...
        c.stats.compilations
    """

    def __init__(self):
        self._start = None
        self.stats = CompileStats()

    def __enter__(self) -> CompileCounter:
        self._start = compile_stats()
        return self

    def __exit__(self, *exc) -> None:
        self.stats = compile_stats() - self._start


def exported_dir() -> Path | None:
    """The folder :class:`ExportedKernel` keeps its modules in: ``exported/`` of the
    persistent cache's folder; None when the cache is off or ``flatbuffers`` (which
    serializes them) is not installed."""
    cache = persistent_cache_dir()
    if cache is None or not _has_module("flatbuffers"):
        return None
    return cache / EXPORTED_DIR


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    from passage_jax.protocol.records import code_hash  # noqa: PLC0415 (reads the sources)

    return code_hash()["sha256"]


class ExportedKernel:
    """``kernel(*args, **static)`` through exported modules kept on disk (see the module's
    docstring): ``fun`` is the kernel's Python function, ``jitted`` its ``jax.jit`` (with
    ``static`` as static arguments and ``compiler_options``), which serves every call
    the exported path does not take. ``name`` names the kernel in the files."""

    def __init__(self, fun, jitted, name: str, compiler_options: dict | None = None):
        self.fun, self.jitted, self.name = fun, jitted, str(name)
        self.compiler_options = dict(compiler_options or {})
        self._calls: dict = {}
        self._locks: dict = {}

    def __call__(self, *args, **static):
        import jax  # noqa: PLC0415 (see enable_persistent_cache)
        import numpy as np  # noqa: PLC0415

        leaves, tree = jax.tree.flatten(args)
        folder = exported_dir()
        if folder is None or not leaves or not all(type(x) is np.ndarray for x in leaves):
            return self.jitted(*args, **static)
        shapes = tuple((x.shape, x.dtype.str) for x in leaves)
        key = (tree, shapes, tuple(sorted(static.items())), bool(jax.config.jax_enable_x64))
        call = self._calls.get(key)
        if call is None:
            with self._locks.setdefault(key, threading.Lock()):  # one key at a time, keys in parallel
                call = self._calls.get(key)
                if call is None:
                    call = self._calls[key] = self._load_or_export(folder, leaves, tree, static)
        return call(*leaves)

    def _digest(self, leaves, tree, static) -> str:
        import jax  # noqa: PLC0415
        import jaxlib  # noqa: PLC0415

        device = jax.devices()[0]
        facts = {"format": 1, "kernel": self.name, "static": sorted((k, repr(v)) for k, v in static.items()),
                 "tree": str(tree), "args": [[list(x.shape), x.dtype.str] for x in leaves],
                 "code": _code_digest(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
                 "backend": jax.default_backend(), "device_kind": device.device_kind,
                 "x64": bool(jax.config.jax_enable_x64), "options": sorted(self.compiler_options.items())}
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()

    def _load_or_export(self, folder: Path, leaves, tree, static):
        """The jitted call of the exported module of these arguments: read from
        ``folder``, else exported (and written there, a failed write ignored)."""
        import jax  # noqa: PLC0415

        path = folder / f"{self.name}-{self._digest(leaves, tree, static)[:40]}.jaxexport"
        # as a call sees them: without float64, float64 host arrays enter as float32
        avals = [jax.ShapeDtypeStruct(x.shape, jax.dtypes.canonicalize_dtype(x.dtype)) for x in leaves]
        exp = _read_exported(path, avals)
        if exp is None:
            def flat(*xs):
                return self.fun(*jax.tree.unflatten(tree, xs), **static)

            exp = jax.export.export(jax.jit(flat))(*avals)
            _write_exported(path, exp)
        return jax.jit(exp.call, compiler_options=self.compiler_options or None)


def _read_exported(path: Path, avals):
    """The exported module in ``path`` when it reads back and takes ``avals``; else None."""
    import jax  # noqa: PLC0415

    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        exp = jax.export.deserialize(bytearray(data))
        ok = (len(exp.in_avals) == len(avals)
              and all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(exp.in_avals, avals))
              and tuple(exp.platforms) == (jax.export.default_export_platform(),)
              and exp.nr_devices == 1)
    except Exception:  # noqa: BLE001 - a damaged or foreign file is exported again
        return None
    if not ok:
        return None
    try:
        os.utime(path)  # recently used: the last to be evicted
    except OSError:
        pass
    return exp


def _write_exported(path: Path, exp) -> None:
    """Write ``exp`` to ``path`` (atomically), then keep the folder under
    :data:`MAX_EXPORTED_BYTES`; the exported module is an optimisation, so a module that
    cannot be serialized (an output tree of a type JAX does not know how to write) or a
    write that fails is not kept, and the calls of this process use it all the same."""
    from passage_jax.fileio import atomic_write_bytes  # noqa: PLC0415

    try:
        data = bytes(exp.serialize())
    except Exception:  # noqa: BLE001 - e.g. an output tree JAX cannot serialize: not kept
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
        files = []
        for p in path.parent.iterdir():
            if p.is_file() and p.suffix == ".jaxexport":
                st = p.stat()
                files.append((st.st_mtime, st.st_size, p))
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files, key=lambda f: f[0]):
            if total <= MAX_EXPORTED_BYTES:
                break
            if p != path:
                p.unlink(missing_ok=True)
                total -= size
    except OSError:
        pass
