"""Where a request runs: the fields every record carries (``process_index``, ``host``,
``device``) and the label of a JAX device."""
from __future__ import annotations

import os
import platform
import socket

import jax

from passage_jax import cluster

__all__ = ["placement", "device_label", "session_hardware", "local_position"]


def _default_device():
    """This process's default device: its first local one (in a multi-process launch
    ``jax.devices()`` lists every process's devices, process 0's first)."""
    return jax.local_devices()[0]


def device_label(device=None) -> str:
    """The JAX device a request runs on, as ``str(device)`` (``cpu:0``); None: the default."""
    return str(device if device is not None else _default_device())


def local_position(device) -> int:
    """The position of ``device`` among this process's devices of its platform (its id
    in a single process; what a worker process, which sees only this host's devices,
    finds it by)."""
    ids = [d.id for d in jax.local_devices(backend=device.platform)]
    return ids.index(device.id) if device.id in ids else int(device.id)


def placement(device=None) -> dict:
    """Where a request runs: ``process_index`` (this process's index in the launch,
    :func:`passage_jax.cluster.process_index`), ``host`` (``socket.gethostname()``) and
    ``device`` (:func:`device_label`, or the label itself when ``device`` is a string)."""
    label = device if isinstance(device, str) else device_label(device)
    return {"process_index": int(cluster.process_index()), "host": socket.gethostname(),
            "device": label}


def session_hardware(device=None) -> dict:
    """What a session's hardware is, for comparing sessions: the machine type, CPU count
    and the JAX device's kind (None: the default device)."""
    d = device if device is not None else _default_device()
    return {"machine": platform.machine(), "cpu_count": os.cpu_count(),
            "device_kind": getattr(d, "device_kind", None)}
