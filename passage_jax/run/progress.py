"""Progress of a run as events: the library reports, the command line draws.

``run_spec(..., progress=callback)`` calls ``callback(event)`` with a
:class:`ProgressEvent` when a seed starts executing requests and after each
request; anything that is not callable means no progress is reported.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

__all__ = ["ProgressEvent", "ProgressCallback", "progress_callback"]


@dataclasses.dataclass(frozen=True)
class ProgressEvent:
    """``done`` of ``total`` requests of ``seed`` of ``method`` are durable; ``series`` and
    ``repeat`` name the pass of the last request (None in the event that opens a seed)."""

    method: str
    seed: int
    done: int
    total: int
    series: str | None = None
    repeat: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


ProgressCallback = Callable[[ProgressEvent], None]


def progress_callback(progress) -> ProgressCallback | None:
    """``progress`` when it is callable, else None (``False``, ``None`` and ``True`` report
    nothing: drawing progress is the command line's choice)."""
    return progress if callable(progress) else None
