"""What a run writes and keeps: the output folder and its lock
(:mod:`~passage_jax.run.record.folder`), the journal of records
(:mod:`~passage_jax.run.record.journal`), a seed's state
(:mod:`~passage_jax.run.record.seed_state`), the launch record
(:mod:`~passage_jax.run.record.launch_record`), the run's provenance
(:mod:`~passage_jax.run.record.provenance`), the identities and the seed manifest
(:mod:`~passage_jax.run.record.manifest`), a seed's files built from its journal
(:mod:`~passage_jax.run.record.seed_files`) and what a resume keeps
(:mod:`~passage_jax.run.record.resume`)."""
from passage_jax.run.record.folder import (
    create_folder,
    holds_records,
    holds_run,
    local_root,
    locked,
    output_folder,
    refuse_inside_dataset,
    remove_created,
    remove_temporaries,
    spec_and_output,
    undo_launch,
)
from passage_jax.run.record.journal import (
    SYNC_INTERVAL_S,
    Journal,
    JournalError,
    scan_journal,
)
from passage_jax.run.record.launch_record import run_protocol, write_resolved_protocol
from passage_jax.run.record.manifest import (
    hardware,
    run_identity,
    seed_manifest,
    tasks_sha256,
    tasks_sha256_of,
)
from passage_jax.run.record.provenance import (
    ProvenanceError,
    calibration_record,
    canonical_json_sha256,
    evaluator_commit,
    run_provenance,
    test_admission_recorded,
)
from passage_jax.run.record.resume import (
    finished_summary,
    keep_completed_seed,
    refuse_differences,
    refuse_other_spec,
    stored_run,
)
from passage_jax.run.record.seed_files import (
    clear_leftovers,
    finish_seed,
    references_arrays,
)
from passage_jax.run.record.seed_state import (
    Build,
    SeedState,
    load_state,
    save_state,
)

__all__ = ["create_folder", "holds_records", "holds_run",
           "local_root", "locked", "output_folder", "refuse_inside_dataset", "remove_created",
           "remove_temporaries", "spec_and_output", "undo_launch",
           "SYNC_INTERVAL_S", "Journal", "JournalError", "scan_journal", "run_protocol",
           "write_resolved_protocol", "hardware", "run_identity", "seed_manifest", "tasks_sha256",
           "tasks_sha256_of", "ProvenanceError", "calibration_record", "canonical_json_sha256",
           "evaluator_commit", "run_provenance", "test_admission_recorded", "finished_summary",
           "keep_completed_seed", "refuse_differences", "refuse_other_spec", "stored_run",
           "clear_leftovers", "finish_seed", "references_arrays",
           "Build", "SeedState", "load_state", "save_state"]
