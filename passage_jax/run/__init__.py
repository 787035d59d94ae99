"""Live execution (contract §7): run specs, admission, timed batch-one requests, run
folders and conformance checks.

``run_spec(spec, output)`` admits a spec and writes one ``seed-<seed>/`` folder per
seed (formats in :mod:`passage_jax.protocol.records`; every record is made durable in
a journal as it completes, and ``run_spec(..., resume=True)`` continues a killed
run; ``progress=`` takes a callable that receives :class:`ProgressEvent` values);
:mod:`passage_jax.evaluate` scores those folders offline and never imports this package.
"""
from passage_jax.run.admission import AdmissionError, Admitted, References, admit
from passage_jax.run.conform import conform
from passage_jax.run.loop import (
    OutputFolderTaken,
    ResumeError,
    RunError,
    holds_run,
    passes,
    run_seed,
    run_spec,
)
from passage_jax.run.progress import ProgressEvent
from passage_jax.run.spec import (
    DEFAULTS,
    KNOWN,
    REQUIRED,
    STARTER_SPEC,
    RunSpec,
    SpecError,
    load_spec,
    parse_spec,
)
from passage_jax.run.timing import block_until_ready, execute

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    "RunSpec", "SpecError", "load_spec", "parse_spec", "DEFAULTS", "KNOWN", "REQUIRED",
    "STARTER_SPEC", "Admitted", "AdmissionError", "References", "admit", "execute",
    "block_until_ready", "RunError", "OutputFolderTaken", "ResumeError", "holds_run", "passes",
    "run_seed", "run_spec", "conform", "ProgressEvent",
]
