"""Admission: everything a run checks before the first planner call
(:mod:`~passage_jax.run.admission.checks`), with an earlier run's references taken after
verifying them (:mod:`~passage_jax.run.admission.reused_references`) and a session
profile's warm-up scene (:mod:`~passage_jax.run.admission.warmup_scene`); and the test
admission gate a ``split_role: test`` spec passes before it runs
(:mod:`~passage_jax.run.admission.gate`)."""
from passage_jax.run.admission.checks import (
    CHECKPOINT_KEY,
    AdmissionError,
    Admitted,
    References,
    admit,
    checkpoint_files,
)
from passage_jax.run.admission.gate import (
    CONDITIONS,
    NOT_AN_ENTRY,
    OVERRIDE_FLAG,
    RECEIPT_FORMAT,
    GateResult,
    TestAdmissionRefused,
    admit_test,
    default_receipt,
    is_learned,
    require_admission,
)
from passage_jax.run.admission.reused_references import ReusedReferences, earlier_seed_folder
from passage_jax.run.admission.warmup_scene import WARMUP_SPLIT, WarmupSceneError, warmup_task

__all__ = ["CHECKPOINT_KEY", "AdmissionError", "Admitted", "References", "admit",
           "checkpoint_files", "CONDITIONS", "NOT_AN_ENTRY", "OVERRIDE_FLAG", "RECEIPT_FORMAT",
           "GateResult", "TestAdmissionRefused", "admit_test", "default_receipt", "is_learned",
           "require_admission", "ReusedReferences", "earlier_seed_folder", "WARMUP_SPLIT",
           "WarmupSceneError", "warmup_task"]
