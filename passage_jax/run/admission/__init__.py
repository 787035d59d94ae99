"""Admission: everything a run checks before the first planner call, an earlier run's
references taken after verifying them and a session profile's warm-up scene
(:mod:`~passage_jax.run.admission.checks`). The test admission gate a ``split_role: test``
spec passes before it runs is :mod:`passage_jax.run.gate`."""
from passage_jax.run.admission.checks import (
    CHECKPOINT_KEY,
    WARMUP_SPLIT,
    AdmissionError,
    Admitted,
    References,
    ReusedReferences,
    WarmupSceneError,
    admit,
    checkpoint_files,
    earlier_seed_folder,
    warmup_task,
)

__all__ = ["ReusedReferences", "earlier_seed_folder", "WARMUP_SPLIT", "WarmupSceneError", "warmup_task",
           "Admitted", "AdmissionError", "References", "admit", "CHECKPOINT_KEY", "checkpoint_files"]
