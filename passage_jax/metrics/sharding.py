"""Where :func:`~passage_jax.metrics.score_routes` runs: the batch-axis placement
of its kernel calls and the names of the devices it uses."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = ["resolve_sharding", "sharding_devices"]


def resolve_sharding(sharding):
    """The batch-axis placement ``score_routes`` uses for ``sharding``: None
    (unsharded, the default device), a ``jax.sharding.Sharding`` as given, or
    for ``"auto"`` a ``NamedSharding`` over all local devices of the default
    backend on a 1-D ``("batch",)`` mesh when there is more than one, else None.
    """
    if sharding is None:
        return None
    if isinstance(sharding, str):
        if sharding != "auto":
            raise ValueError(f"sharding must be None, 'auto' or a jax.sharding.Sharding, "
                             f"got {sharding!r}")
        devices = jax.local_devices()
        if len(devices) < 2:
            return None
        return NamedSharding(Mesh(np.array(devices), ("batch",)), PartitionSpec("batch"))
    if not isinstance(sharding, jax.sharding.Sharding):
        raise ValueError(f"sharding must be None, 'auto' or a jax.sharding.Sharding, "
                         f"got {type(sharding).__name__}")
    return sharding


def sharding_devices(sharding) -> list[str]:
    """Names of the devices ``score_routes(..., sharding=sharding)`` runs on,
    ordered by device id (the default device when unsharded)."""
    s = resolve_sharding(sharding)
    devices = sorted(s.device_set, key=lambda d: d.id) if s is not None else [jax.devices()[0]]
    return [f"{d.platform}:{d.id}" for d in devices]
