"""Live execution (contract §7): run specs, admission, timed batch-one requests, run
folders and conformance checks.

``run_spec(spec, output)`` admits a spec and writes one ``seed-<seed>/`` folder per
seed (formats in :mod:`passage_jax.protocol.records`; every record is made durable in
a journal as it completes, and ``run_spec(..., resume=True)`` continues a killed
run; ``progress=`` takes a callable that receives :class:`ProgressEvent` values);
:mod:`passage_jax.evaluate` scores those folders offline and never imports this package.

Four subpackages, each reached through its ``__init__``, arrows pointing down:
:mod:`~passage_jax.run.specification` (the spec; no JAX),
:mod:`~passage_jax.run.record` (the seed manifest),
:mod:`~passage_jax.run.admission` (what a run checks before the first planner call) and
:mod:`~passage_jax.run.execution` (one seed from its folder to its files, its requests
timed through an executor). Above them :mod:`~passage_jax.run.resume` (what a resumed run
keeps), :mod:`~passage_jax.run.loop` (``run_spec``: the launch's records, the output
folder, the seeds), :mod:`~passage_jax.run.gate` (the test admission gate) and
:mod:`~passage_jax.run.conform`; beneath everything :mod:`~passage_jax.run.context`,
:mod:`~passage_jax.run.progress` and :mod:`~passage_jax.run.errors`.
"""
import sys
import types

from passage_jax.exports import lazy_exports

# re-exports, by module: each module is imported when one of its names is first used, so
# ``passage_jax.run.specification`` (the spec check, which the CLI runs before anything loads JAX)
# imports no executor, kernel or JAX
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "passage_jax.run.specification": (
        "RunSpec", "SpecError", "load_spec", "parse_spec", "DEFAULTS", "KNOWN", "REQUIRED",
        "STARTER_SPEC",
    ),
    "passage_jax.run.errors": ("RunError", "OutputFolderTaken", "ResumeError"),
    "passage_jax.run.admission": ("Admitted", "AdmissionError", "References", "admit"),
    "passage_jax.run.execution": ("execute", "block_until_ready", "passes"),
    "passage_jax.run.loop": ("holds_run", "run_seed", "run_spec"),
    "passage_jax.run.conform": ("conform",),
    "passage_jax.run.progress": ("ProgressEvent",),
})


class _Package(types.ModuleType):
    """This package, whose ``conform`` stays the function when its module of the same name,
    :mod:`passage_jax.run.conform`, is imported (the import binds a submodule on its
    package; the function is what the name meant when every name was imported up front)."""

    def __setattr__(self, name, value):
        if name == "conform" and isinstance(value, types.ModuleType):
            value = value.conform
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
