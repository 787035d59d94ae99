"""What a seed folder says about itself: the seed manifest and the arrays of
``references.npz`` (:mod:`~passage_jax.run.record.manifest`). The run's own records (the
launch record, the provenance, the run identity, the output folder and its lock) are
:mod:`passage_jax.run.loop`'s; a seed's journal, state and files are
:mod:`passage_jax.run.execution.seed`'s."""
from passage_jax.run.record.manifest import (
    SeedFiles,
    hardware,
    references_arrays,
    references_npz,
    seed_manifest,
    vector_isa,
)

__all__ = ["SeedFiles", "seed_manifest", "hardware", "vector_isa", "references_arrays", "references_npz"]
