"""The processes a supervised worker started, found in ``/proc`` and killed together.

A worker runs in its own session and process group, is the child subreaper of
everything it starts and marks its environment with ``PASSAGE_JAX_WORKER=<token>``
(:mod:`passage_jax.run.execution.worker`). :func:`kill_worker_processes` collects every
process that descends from the worker, shares its session or process group, or
carries its token; it freezes them with SIGSTOP (collecting again until nothing new
appears) and then kills them all with SIGKILL. The watchdog (a bare interpreter per
worker, outside its session, :func:`watchdog_source`) runs the same sweep when the
worker disappears without the parent. :func:`worker_processes` lists a worker's
descendants and :func:`rss_mb` reads one process's resident memory, for the memory
cap.
"""
from __future__ import annotations

import inspect
import os
import signal
import time

__all__ = ["WORKER_TOKEN_ENV", "worker_processes", "kill_worker_processes", "watchdog_source", "rss_mb"]

#: Environment variable a worker sets to its token; every program the planner starts inherits it.
WORKER_TOKEN_ENV = "PASSAGE_JAX_WORKER"
_SWEEP_ROUNDS = 50
_WATCH_POLL_S = 0.1


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


def watchdog_source() -> str | None:
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


def rss_mb(pid: int) -> float | None:
    """The resident memory of process ``pid`` in MiB (``/proc/<pid>/status`` VmRSS), or
    None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None
