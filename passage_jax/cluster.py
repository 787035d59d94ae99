"""Multi-process launches on JAX's distributed runtime: who this process is, which share
of the work it does, and how the shares come back together.

A launch of ``audit``, ``run`` (its admission's reference qualification; under a session
timing profile also its planner requests) or ``score`` may span several processes, on
one host or many (``docs/distributed.md``). Every process runs the same command;
:func:`init_from_args` joins them through
``jax.distributed.initialize`` (settings from flags, ``PASSAGE_JAX_*`` variables, or a
launcher JAX detects: SLURM, Open MPI). Then:

* :func:`process_share` gives each process a contiguous range of items (chunks of
  tasks, rows of a split): process ``i`` of ``P`` takes ``[n*i // P, n*(i+1) // P)``,
  so process order is item order (:func:`chunk_share` and :func:`chunk_share_from` share
  out whole chunks of items);
* :func:`gather_shares` collects one payload per process, in process order, on every
  process (``multihost_utils.process_allgather`` of fixed-size padded byte arrays: a
  first all-gather of the lengths, a second of the payloads padded to the longest).
  A process whose share raised sends the failure instead of a payload, and every
  process then raises it, naming the process; a process that dies makes the others'
  collective fail, which is raised naming the processes that never reached the gather;
* :func:`is_writer` is true on process 0 only: it alone writes outputs, after every
  share has arrived.

The gather goes through the collectives rather than files in the output folder:
processes on different hosts need not share a filesystem, nothing is written before
every share arrived, and the runtime reports a peer that died. Payloads are pickled
(they travel only between the processes of one launch, which already run the same
code); each is a few bytes per task.

Without a multi-process launch (the default) everything here is the identity: one
process, one share holding every item, :func:`gather_shares` returns ``[payload]``
and exceptions propagate unchanged.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import sys

import jax
import numpy as np
from jax._src import distributed as _jax_distributed
from jax.experimental import multihost_utils

__all__ = [
    "ENV_COORDINATOR", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID", "ClusterError", "PeerLost", "ShareFailed",
    "Launch", "launch_settings", "init_from_args", "initialize", "process_index", "process_count",
    "process_share", "chunk_share", "chunk_share_from", "gather_shares", "run_share", "is_writer",
    "barrier", "abandon",
]

ENV_COORDINATOR = "PASSAGE_JAX_COORDINATOR"
ENV_NUM_PROCESSES = "PASSAGE_JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "PASSAGE_JAX_PROCESS_ID"
#: Launchers whose variables ``jax.distributed.initialize()`` reads by itself:
#: (name, variables that must be set, variable holding the process count).
_LAUNCHERS = (
    ("SLURM", ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
               "SLURM_LOCALID"), "SLURM_NTASKS"),
    ("Open MPI", ("OMPI_MCA_orte_hnp_uri", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                  "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_SIZE"),
)


class ClusterError(RuntimeError):
    """A multi-process launch cannot start, or a process of it failed or vanished."""


class PeerLost(ClusterError):
    """A process of the launch died or became unreachable during a gather; the runtime
    cannot shut down in order (end the process with :func:`abandon`)."""


class ShareFailed(ClusterError):
    """A process's share raised; the message names the process (and the scene where known)."""

    def __init__(self, message: str, process: int, original: str):
        super().__init__(message)
        self.process = process
        self.original = original


@dataclasses.dataclass(frozen=True)
class Launch:
    """How this process was launched: ``source`` is ``"single"`` (no distributed runtime),
    ``"flags"``, ``"environment"`` (PASSAGE_JAX_*) or a launcher's name."""

    source: str
    num_processes: int = 1
    process_id: int = 0
    coordinator: str | None = None


@dataclasses.dataclass(frozen=True)
class _Failure:
    process: int
    message: str


_STATE = {"launch": Launch("single"), "gathers": 0}


def _int(value, name: str, low: int) -> int:
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ClusterError(f"{name} must be an integer, got {value!r}") from None
    if v < low:
        raise ClusterError(f"{name} must be at least {low}, got {v}")
    return v


def launch_settings(coordinator=None, num_processes=None, process_id=None, *,
                    environ=None) -> Launch:
    """The launch this process belongs to, from (first found) the explicit arguments
    (command-line flags), the ``PASSAGE_JAX_COORDINATOR`` / ``_NUM_PROCESSES`` /
    ``_PROCESS_ID`` variables, ``JAX_COORDINATOR_ADDRESS`` with those two counts, or a
    launcher that ``jax.distributed.initialize()`` detects (SLURM, Open MPI) with more
    than one task. None of them: a single-process launch. ClusterError when the
    settings are incomplete or inconsistent."""
    env = os.environ if environ is None else environ
    given = (coordinator, num_processes, process_id)
    if any(v is not None for v in given):
        source = "flags"
    else:
        coordinator = env.get(ENV_COORDINATOR) or None
        num_processes = env.get(ENV_NUM_PROCESSES) or None
        process_id = env.get(ENV_PROCESS_ID) or None
        source = "environment"
        if coordinator is None and (num_processes is not None or process_id is not None):
            coordinator = env.get("JAX_COORDINATOR_ADDRESS") or None
    if coordinator is None and num_processes is None and process_id is None:
        for name, needed, count in _LAUNCHERS:
            if all(k in env for k in needed) and _int(env[count], count, 1) > 1:
                return Launch(name, _int(env[count], count, 1), -1, None)
        return Launch("single")
    missing = [n for n, v in (("coordinator (HOST:PORT)", coordinator),
                              ("number of processes", num_processes),
                              ("process id", process_id)) if v is None]
    if missing:
        how = ("--coordinator, --num-processes and --process-id" if source == "flags" else
               f"{ENV_COORDINATOR}, {ENV_NUM_PROCESSES} and {ENV_PROCESS_ID}")
        raise ClusterError(f"a multi-process launch needs {how}; missing: {', '.join(missing)}")
    n = _int(num_processes, "the number of processes", 1)
    i = _int(process_id, "the process id", 0)
    if i >= n:
        raise ClusterError(f"process id {i} is outside [0, {n}) for {n} processes")
    host, sep, port = str(coordinator).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"coordinator must be HOST:PORT, got {coordinator!r}")
    return Launch(source, n, i, str(coordinator))


def initialize(launch: Launch, *, timeout_s: int = 300) -> Launch:
    """Join the distributed runtime described by ``launch`` (nothing for a single process).
    Sets the CPU collectives to gloo when JAX has none configured, starts the runtime and
    connects every pair of processes with a first all-gather (so that a process dying
    later is seen by the others at once). Returns the launch with the process id and
    count the runtime reports."""
    if _STATE["launch"].source != "single":
        return _STATE["launch"]
    if launch.source == "single":
        return launch
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        if launch.coordinator is None:  # a launcher: JAX reads its variables
            jax.distributed.initialize(initialization_timeout=timeout_s)
        else:
            jax.distributed.initialize(launch.coordinator, launch.num_processes, launch.process_id,
                                       initialization_timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 (the runtime raises several types)
        where = launch.coordinator or f"the {launch.source} launcher's coordinator"
        who = f"process {launch.process_id}" if launch.process_id >= 0 else "this process"
        raise ClusterError(f"{who}: joining the launch at {where} "
                           f"failed: {type(e).__name__}: {e}") from None
    done = Launch(launch.source, jax.process_count(), jax.process_index(),
                  launch.coordinator or getattr(_client_state(), "coordinator_address", None))
    _STATE["launch"] = done
    if done.num_processes != launch.num_processes and launch.coordinator is not None:
        raise ClusterError(f"the runtime reports {done.num_processes} processes, the launch "
                           f"declared {launch.num_processes}")
    gather_shares(done.process_id, what="connecting the processes")
    return done


def init_from_args(args=None, *, environ=None) -> Launch:
    """:func:`launch_settings` from an argparse namespace's ``coordinator``,
    ``num_processes`` and ``process_id`` (absent attributes count as not given) and the
    environment, then :func:`initialize`."""
    get = (lambda k: getattr(args, k, None)) if args is not None else (lambda k: None)
    launch = launch_settings(get("coordinator"), get("num_processes"), get("process_id"),
                             environ=environ)
    return initialize(launch)


def _client_state():
    """The runtime's client state (its key-value store serves diagnostics only)."""
    return getattr(_jax_distributed, "global_state", None)


def process_index() -> int:
    """This process's index in the launch (0 without one)."""
    return _STATE["launch"].process_id if _STATE["launch"].source != "single" else 0


def process_count() -> int:
    """Processes in the launch (1 without one)."""
    return _STATE["launch"].num_processes if _STATE["launch"].source != "single" else 1


def is_writer() -> bool:
    """True on the process that writes the launch's outputs (process 0)."""
    return process_index() == 0


def process_share(n_items: int, *, process: int | None = None, processes: int | None = None) -> range:
    """The contiguous items ``[n*i // P, n*(i+1) // P)`` of process ``i`` of ``P``
    (default: this process of this launch). Shares of consecutive processes are
    consecutive; together they cover ``range(n_items)`` once."""
    n = int(n_items)
    p = process_count() if processes is None else int(processes)
    i = process_index() if process is None else int(process)
    if n < 0 or p < 1 or not 0 <= i < p:
        raise ValueError(f"no share {i} of {p} for {n} items")
    return range(n * i // p, n * (i + 1) // p)


def chunk_share(n_items: int, chunk: int) -> range:
    """This process's items when whole chunks of ``chunk`` items are shared out: the
    :func:`process_share` of the ``ceil(n_items / chunk)`` chunks, as item indices. A
    chunk is never split, so each is processed as one batch, as in a single process."""
    n, c = int(n_items), int(chunk)
    mine = process_share(-(-n // c))
    return range(min(n, mine.start * c), min(n, mine.stop * c))


def chunk_share_from(first: int, n_items: int, chunk: int, *, process: int | None = None,
                     processes: int | None = None) -> range:
    """The items of ``[first, n_items)`` of process ``i`` of ``P`` (default: this process of
    this launch) when the whole chunks of ``chunk`` items that hold them are shared out
    (:func:`process_share` of those chunks; the first one clipped at ``first``). With
    ``first = 0`` this is :func:`chunk_share`: chunks keep their boundaries whatever
    ``first`` is, so each is still one batch."""
    f, n, c = int(first), int(n_items), int(chunk)
    if c < 1 or not 0 <= f <= n:
        raise ValueError(f"no chunk share of items [{f}, {n}) in chunks of {c}")
    lo = f // c
    mine = process_share(-(-n // c) - lo, process=process, processes=processes)
    return range(min(n, max(f, (lo + mine.start) * c)), min(n, max(f, (lo + mine.stop) * c)))


def _missing_processes(tag: str) -> list[int]:
    """Processes that did not announce reaching gather ``tag`` (the coordinator's
    key-value store; empty when it cannot be asked)."""
    state = _client_state()
    client = getattr(state, "client", None)
    if client is None:
        return []
    out = []
    for i in range(process_count()):
        try:
            if client.key_value_try_get(f"passage_jax/{tag}/{i}") is None:
                out.append(i)
        except Exception:  # noqa: BLE001 (absent key, or the coordinator itself is gone)
            out.append(i)
    return out


def _announce(tag: str) -> None:
    client = getattr(_client_state(), "client", None)
    if client is not None:
        try:
            client.key_value_set(f"passage_jax/{tag}/{process_index()}", "here")
        except Exception:  # noqa: BLE001 (diagnostics only)
            pass


def gather_shares(payload, *, what: str = "shares", error=None) -> list:
    """Every process's ``payload``, in process order, on every process (every process
    of the launch must call it, the same number of times). A payload that is a failure
    (:func:`run_share`) raises ``error`` (default :class:`ShareFailed`) on every process,
    naming the process; a process that died raises :class:`ClusterError` naming the
    processes that never reached this gather (:class:`PeerLost`)."""
    if process_count() == 1:
        if isinstance(payload, _Failure):
            raise (error or _share_failed)(payload.message)
        return [payload]
    _STATE["gathers"] += 1
    tag = f"gather-{_STATE['gathers']}"
    _announce(tag)
    blob = np.frombuffer(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    try:
        lengths = np.asarray(multihost_utils.process_allgather(np.array([blob.size], np.int64)))
        lengths = lengths.reshape(process_count())
        buf = np.zeros(max(1, int(lengths.max())), np.uint8)
        buf[:blob.size] = blob
        blobs = np.asarray(multihost_utils.process_allgather(buf)).reshape(process_count(), -1)
    except Exception as e:  # noqa: BLE001 (the collectives raise the runtime's error types)
        gone = [i for i in _missing_processes(tag) if i != process_index()]
        who = (f"process(es) {', '.join(map(str, gone))} of {process_count()} never reached it "
               f"(failed, killed or unreachable)" if gone else
               "a peer process failed, was killed or became unreachable")
        raise PeerLost(f"process {process_index()}: {what}: the launch failed: {who} "
                           f"({type(e).__name__}: {' '.join(str(e).split())[:300]}); nothing "
                           f"was written") from None
    out = [pickle.loads(blobs[i, :int(lengths[i])].tobytes()) for i in range(process_count())]
    failed = [(i, p) for i, p in enumerate(out) if isinstance(p, _Failure)]
    if failed:
        i, f = failed[0]
        more = (f" (and process(es) {', '.join(str(j) for j, _ in failed[1:])})"
                if len(failed) > 1 else "")
        msg = f"process {i} of {process_count()}{more}: {f.message}"
        if error is None:
            raise ShareFailed(msg, i, f.message)
        raise error(msg)
    return out


def _share_failed(message: str) -> ShareFailed:
    return ShareFailed(message, process_index(), message)


def run_share(fn, *args, what: str = "shares", error=None, describe=None, **kwargs) -> list:
    """``fn(*args, **kwargs)`` on this process's share, then :func:`gather_shares` of its
    result. Without a launch, exceptions propagate unchanged. In one, an exception is
    sent to the others as the share's failure (``describe(e)`` or ``"<Type>: <message>"``)
    so that every process raises it (``error`` or :class:`ShareFailed`) naming this
    process: no process waits forever for a share that will not come."""
    if process_count() == 1:
        return [fn(*args, **kwargs)]
    try:
        result = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (sent to every process, raised there)
        text = describe(e) if describe is not None else f"{type(e).__name__}: {e}"
        result = _Failure(process_index(), text)
    return gather_shares(result, what=what, error=error)


def barrier(name: str) -> None:
    """Every process waits here for the others (nothing without a launch)."""
    if process_count() > 1:
        multihost_utils.sync_global_devices(name)


def abandon(code: int) -> None:
    """End this process now with ``code`` after a peer died (flushing the standard
    streams): the runtime's orderly shutdown would wait for the dead process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))
