"""Where :func:`~passage_jax.metrics.score_routes` runs: the batch-axis placement
of its kernel calls and the names of the devices it uses (read by
:mod:`passage_jax.placement`)."""
from __future__ import annotations

from passage_jax import placement

#: The mesh axis of the scoring batch.
BATCH_AXES = ("batch",)

__all__ = ["resolve_sharding", "sharding_devices", "BATCH_AXES"]


def resolve_sharding(sharding):
    """The batch-axis placement ``score_routes`` uses for ``sharding``: None
    (unsharded, the default device), a ``jax.sharding.Sharding`` as given, or
    for ``"auto"`` a ``NamedSharding`` over all local devices of the default
    backend on a 1-D ``("batch",)`` mesh when there is more than one, else None.
    """
    return placement.resolve_sharding(sharding, axes=BATCH_AXES, modes=("auto",))


def sharding_devices(sharding) -> list[str]:
    """Names of the devices ``score_routes(..., sharding=sharding)`` runs on,
    ordered by device id (the default device when unsharded)."""
    return placement.device_names(resolve_sharding(sharding))
