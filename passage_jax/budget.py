"""The declared limits of one request (contract §6): :class:`BudgetSpec`, the work counter
each limit requires (:data:`LIMIT_COUNTER`) and :class:`ProtocolError`.

A leaf module (it imports no stage): the run spec's check
(:mod:`passage_jax.run.specification`) validates a spec's ``budget`` with it before anything
loads JAX. :mod:`passage_jax.protocol.contracts` re-exports every name.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

__all__ = ["ProtocolError", "BudgetSpec", "LIMIT_COUNTER"]

#: BudgetSpec limit -> the work counter it requires.
LIMIT_COUNTER = {
    "max_expansions": "expansions",
    "max_queue_operations": "queue_operations",
    "max_live_states": "live_states",
}


class ProtocolError(ValueError):
    """A planner result (or a request/budget) violates the protocol."""


def _opt_positive_int(name, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) <= 0:
        raise ProtocolError(f"BudgetSpec.{name}={v!r} must be a positive integer or null")
    return int(v)


@dataclasses.dataclass(frozen=True)
class BudgetSpec:
    """Declared limits of one request; ``None`` means no limit."""

    wall_time_ms: float | None = None
    max_expansions: int | None = None
    max_queue_operations: int | None = None
    max_live_states: int | None = None

    def __post_init__(self):
        w = self.wall_time_ms
        if w is not None:
            if isinstance(w, bool) or not isinstance(w, (int, float, np.number)) \
                    or not math.isfinite(float(w)) or float(w) <= 0:
                raise ProtocolError(f"BudgetSpec.wall_time_ms={w!r} must be a positive number or null")
            object.__setattr__(self, "wall_time_ms", float(w))
        for name in LIMIT_COUNTER:
            object.__setattr__(self, name, _opt_positive_int(name, getattr(self, name)))

    @classmethod
    def from_dict(cls, d: Mapping | None) -> BudgetSpec:
        d = dict(d or {})
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ProtocolError(f"budget: unknown key(s) {unknown}; known: "
                                f"{[f.name for f in dataclasses.fields(cls)]}")
        return cls(**d)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def limits(self) -> dict:
        """The configured work limits, {limit name: value}."""
        return {k: getattr(self, k) for k in LIMIT_COUNTER if getattr(self, k) is not None}
