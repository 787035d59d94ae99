"""Where a kernel's split axis lives: the one reading of every ``sharding=`` argument.

A ``sharding=`` argument is ``None`` (the default device, nothing split), ``"auto"`` (a 1-D
mesh over every local device of the default backend when there are two or more, else
``None``), ``"global"`` where a caller accepts it (the same over every device of every
process of a multi-process launch: ``jax.devices()``; in a single process it is ``"auto"``)
or a ``jax.sharding.Sharding``, used as given.

:func:`resolve_sharding` turns the argument into a ``Sharding`` or ``None`` (scoring's batch
axis, value iteration's scenes). :func:`resolve_placement` also checks that the sharding splits
only axis 0 of the arrays it places and gives a :class:`Placement`: the split sharding, the
replicated one on the same devices, the number of pieces, and the transfers (the bootstrap's
draws axis). Leaf module: imports JAX and NumPy only.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

__all__ = ["Placement", "resolve_sharding", "resolve_placement", "device_count", "device_names",
           "put", "fetch"]


def _forms(modes: Sequence[str]) -> str:
    return ", ".join(["None", *(repr(m) for m in modes)]) + " or a jax.sharding.Sharding"


def resolve_sharding(sharding, *, axes: Sequence[str] = ("batch",),
                     modes: Sequence[str] = ("auto",)) -> Sharding | None:
    """``sharding`` as a ``jax.sharding.Sharding`` or ``None``.

    ``axes`` names the axes of the arrays placed (axis 0 is split; the mesh of a mode string
    is 1-D over ``axes[0]``, its spec ``PartitionSpec(axes[0], None, ...)`` of ``len(axes)``
    entries); ``modes`` are the strings accepted (``"auto"``, ``"global"``). Anything else
    raises ``ValueError`` naming the accepted forms.
    """
    if sharding is None:
        return None
    if isinstance(sharding, str):
        if sharding not in modes:
            raise ValueError(f"sharding must be {_forms(modes)}, got {sharding!r}")
        devices = jax.devices() if sharding == "global" else jax.local_devices()
        if len(devices) < 2:
            return None
        mesh = Mesh(np.asarray(devices), (axes[0],))
        return NamedSharding(mesh, PartitionSpec(axes[0], *([None] * (len(axes) - 1))))
    if not isinstance(sharding, Sharding):
        raise ValueError(f"sharding must be {_forms(modes)}, got {type(sharding).__name__}")
    return sharding


def device_count(sharding) -> int:
    """How many devices a resolved ``sharding`` spans (1 for ``None``)."""
    return 1 if sharding is None else int(sharding.num_devices)


def device_names(sharding) -> list[str]:
    """``platform:id`` of the devices of a resolved ``sharding`` by device id (the default
    device for ``None``)."""
    devices = sorted(sharding.device_set, key=lambda d: d.id) if sharding is not None else [jax.devices()[0]]
    return [f"{d.platform}:{d.id}" for d in devices]


def _split_count(sharding: Sharding, axes: Sequence[str]) -> int:
    """Pieces ``sharding`` cuts axis 0 of a ``len(axes)``-D array into; it must split no other axis."""
    nd = int(sharding.num_devices)
    rank = len(axes)
    try:
        shard = sharding.shard_shape((nd,) * rank)
    except Exception as e:  # a sharding for arrays of another rank
        raise ValueError(f"sharding does not apply to a {rank}-D ({', '.join(axes)}) array: {e}") from None
    split = [k for k in range(1, rank) if shard[k] != nd]
    if split:
        raise ValueError(f"sharding must split only the {axes[0]} axis (axis 0) of the "
                         f"({', '.join(axes)}) {'matrix' if rank == 2 else 'array'}; "
                         f"it splits axis {split[0]} ({sharding})")
    return nd // int(shard[0])


def _replicated(sharding: Sharding) -> Sharding:
    """Whole copies on the devices of ``sharding``."""
    if int(sharding.num_devices) == 1:
        return sharding
    if not isinstance(sharding, NamedSharding):
        raise ValueError("a multi-device sharding must be a jax.sharding.NamedSharding "
                         f"(e.g. NamedSharding(Mesh(devices, ('draws',)), PartitionSpec('draws', None))), "
                         f"got {type(sharding).__name__}")
    return NamedSharding(sharding.mesh, PartitionSpec())


@dataclass(frozen=True)
class Placement:
    """A checked placement: ``split`` cuts axis 0 of the placed arrays into ``n_shards`` pieces
    (callers pad that axis to a multiple of it); ``replicated`` keeps whole copies on the same
    devices."""
    split: Sharding
    replicated: Sharding
    n_shards: int

    @property
    def num_devices(self) -> int:
        return int(self.split.num_devices)

    @property
    def fully_addressable(self) -> bool:
        """Every device belongs to this process (else each process places its own pieces)."""
        return bool(self.split.is_fully_addressable)


def resolve_placement(sharding, *, axes: Sequence[str] = ("batch",),
                      modes: Sequence[str] = ("auto",)) -> Placement | None:
    """:func:`resolve_sharding`, checked for splitting only axis 0 of ``len(axes)``-D arrays
    (a multi-device sharding must be a ``NamedSharding``: its mesh gives the replicated
    placement); ``None`` when nothing is split."""
    s = resolve_sharding(sharding, axes=axes, modes=modes)
    if s is None:
        return None
    n_shards = _split_count(s, axes)
    return Placement(split=s, replicated=_replicated(s), n_shards=n_shards)


def put(a, placement: Placement | None, *, replicated: bool = False) -> jax.Array:
    """``a`` (the same on every process) on the devices of ``placement``: split along axis 0,
    or whole on each with ``replicated``; the default device for ``None``."""
    if placement is None:
        return jax.numpy.asarray(a)
    target = placement.replicated if replicated else placement.split
    if placement.fully_addressable:
        return jax.device_put(a, target)
    a = np.asarray(a)
    return jax.make_array_from_callback(a.shape, target, lambda index: a[index])


def fetch(x: jax.Array, placement: Placement | None) -> np.ndarray:
    """Every element of ``x`` on this process (an all-gather across processes when the
    placement spans other processes' devices)."""
    if placement is None or placement.fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
