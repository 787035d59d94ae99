"""Offline scoring of a run folder: read what the run persisted, batch it, score it on device,
collect and write ``per_sample.npz``, ``metrics.json`` and the receipt; load and verify a
score (docs/scoring.md, "score").

The pipeline, one module a stage, top to bottom: :mod:`._pipeline` (``score_run``,
``score_folder``: the orchestration), :mod:`._load` (``load_score``), :mod:`._write`,
:mod:`._collect`, :mod:`._verify`, :mod:`._kernel`, :mod:`._batch`, :mod:`._folder` (the
seed folder read), :mod:`._scenes`, :mod:`._records`, :mod:`._timing` and :mod:`._format`
(file formats and errors). This module is the package's only public face.
"""
from __future__ import annotations

from passage_jax.evaluate.score._collect import (
    timing_profile,
)
from passage_jax.evaluate.score._folder import (
    check_seed_folder,
    is_scored,
    load_npz,
    read_doc,
    read_json,
    seed_folders,
)
from passage_jax.evaluate.score._format import (
    BLOCK_RULE,
    METRIC_CONTRACT,
    OUTPUTS,
    PER_SAMPLE_FIELDS,
    PER_SAMPLE_SCALARS,
    RECEIPT_FORMAT,
    RUN_INPUTS,
    SCORE_FORMAT,
    STRATIFIERS,
    AlreadyScored,
    DatasetNotFound,
    ForeignSeed,
    RunIncomplete,
    ScoreError,
    ScoreOutdated,
)
from passage_jax.evaluate.score._load import (
    Score,
    load_score,
)
from passage_jax.evaluate.score._pipeline import (
    score_folder,
    score_run,
)
from passage_jax.evaluate.score._records import (
    RECORD_FIELDS,
    RecordColumns,
    check_record,
    references_from_npz,
)
from passage_jax.evaluate.score._scenes import (
    chosen_run_tasks,
    open_run_tasks,
    reload_tasks,
)
from passage_jax.evaluate.score._verify import (
    Partial,
    check_numbers,
    difference_text,
    first_difference,
)
from passage_jax.protocol.runfolder import RECEIPT, RUN_STARTED, RUN_SUMMARY

__all__ = [
    "score_run", "score_folder", "load_score", "Score", "seed_folders", "timing_profile", "reload_tasks",
    "open_run_tasks", "chosen_run_tasks", "RecordColumns", "check_record", "RECORD_FIELDS", "is_scored",
    "check_seed_folder", "read_json", "read_doc", "load_npz", "references_from_npz",
    "check_numbers", "Partial", "difference_text", "first_difference", "ScoreError",
    "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "RunIncomplete", "ForeignSeed",
    "PER_SAMPLE_FIELDS", "PER_SAMPLE_SCALARS", "STRATIFIERS", "METRIC_CONTRACT", "SCORE_FORMAT",
    "RECEIPT_FORMAT", "BLOCK_RULE", "OUTPUTS", "RECEIPT", "RUN_SUMMARY", "RUN_STARTED",
    "RUN_INPUTS",
]
