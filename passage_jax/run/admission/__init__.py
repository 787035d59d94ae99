"""Admission: everything a run checks before the first planner call, an earlier run's
references taken after verifying them and a session profile's warm-up scene
(:mod:`~passage_jax.run.admission.checks`). The test admission gate a ``split_role: test``
spec passes before it runs is :mod:`passage_jax.run.gate`."""
from passage_jax.run.admission.checks import (
    CHECKPOINT_KEY,
    SAMPLE_MIN,
    SAMPLE_PER,
    SAMPLE_RTOL,
    WARMUP_SPLIT,
    AdmissionError,
    Admitted,
    References,
    ReusedReferences,
    WarmupSceneError,
    admit,
    earlier_seed,
    earlier_seed_folder,
    sample_seed,
    sample_tasks,
    warmup_task,
)

__all__ = ["ReusedReferences", "earlier_seed_folder", "earlier_seed", "sample_tasks", "sample_seed",
           "SAMPLE_MIN", "SAMPLE_PER", "SAMPLE_RTOL", "WARMUP_SPLIT", "WarmupSceneError", "warmup_task",
           "Admitted", "AdmissionError", "References", "admit", "CHECKPOINT_KEY"]
