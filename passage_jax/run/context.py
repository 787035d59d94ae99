"""What every seed of one launch shares."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from passage_jax.protocol.records import code_hash
from passage_jax.run.admission import Admitted
from passage_jax.run.errors import RunError
from passage_jax.run.progress import ProgressCallback, progress_callback
from passage_jax.run.provenance import ProvenanceError, provenance

__all__ = ["RunContext"]


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The admitted run, the evaluator's code hash, the run's provenance record (None: the
    manifest computes it), the progress callback (anything not callable: none) and the
    log (a callable taking one line, or None)."""

    admitted: Admitted
    code: dict
    provenance: dict | None = None
    progress: ProgressCallback | None = None
    log: Callable[[str], None] | None = None

    def __post_init__(self):
        object.__setattr__(self, "progress", progress_callback(self.progress))

    @classmethod
    def of(cls, admitted: Admitted, code: dict | None = None, **fields) -> RunContext:
        """A context whose code hash is taken now when ``code`` is not given."""
        return cls(admitted, code or code_hash(), **fields)

    @classmethod
    def for_launch(cls, admitted: Admitted, progress=None, log=None) -> RunContext:
        """The context of a launch: the code hash and the provenance record are taken now
        (:class:`RunError` naming the provenance input that is missing or does not fit)."""
        code = code_hash()
        try:
            prov = provenance(admitted.spec, admitted.sample_ids)
        except ProvenanceError as e:
            raise RunError(str(e)) from None
        return cls(admitted, code, prov, progress, log)

    @property
    def spec(self):
        return self.admitted.spec

    def say(self, message: str) -> None:
        """Pass ``message`` to the log, if there is one."""
        if self.log:
            self.log(message)
