"""What every seed of one launch shares."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from passage_jax.protocol.records import code_hash
from passage_jax.run.progress import ProgressCallback, progress_callback

__all__ = ["RunContext"]


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The admitted run (an :class:`~passage_jax.run.admission.Admitted`), the evaluator's code
    hash, the launch's records that every seed manifest repeats (the run's provenance and its
    inference protocol, :mod:`passage_jax.run.loop`; None in a process that writes no
    manifest), the progress callback (anything not callable: none) and the log (a callable
    taking one line, or None)."""

    admitted: Any
    code: dict
    provenance: dict | None = None
    protocol: dict | None = None
    progress: ProgressCallback | None = None
    log: Callable[[str], None] | None = None

    def __post_init__(self):
        object.__setattr__(self, "progress", progress_callback(self.progress))

    @classmethod
    def of(cls, admitted, code: dict | None = None, **fields) -> RunContext:
        """A context whose code hash is taken now when ``code`` is not given."""
        return cls(admitted, code or code_hash(), **fields)

    @property
    def spec(self):
        return self.admitted.spec

    def say(self, message: str) -> None:
        """Pass ``message`` to the log, if there is one."""
        if self.log:
            self.log(message)
