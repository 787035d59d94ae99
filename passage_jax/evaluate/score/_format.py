"""What a score is, shared by every stage of scoring (:mod:`passage_jax.evaluate.score`):
the names of the run-folder files scoring reads, the formats and fields of the files it
writes, its errors, and the checks of one JSON value that the readers apply.

The stages, in order: read (:mod:`~passage_jax.evaluate.score._folder`, with the records of
:mod:`~passage_jax.evaluate.score._records` and the scenes of
:mod:`~passage_jax.evaluate.score._scenes`), batch (:mod:`~passage_jax.evaluate.score._batch`),
kernel (:mod:`~passage_jax.evaluate.score._kernel`), collect
(:mod:`~passage_jax.evaluate.score._collect`), write (:mod:`~passage_jax.evaluate.score._write`);
reading a score back is :mod:`~passage_jax.evaluate.score._load`.
"""
from __future__ import annotations

import json

from passage_jax.checks import is_int, is_number
from passage_jax.protocol.runfolder import (
    PATHS,
    REFERENCES,
    REQUESTS,
    SCORE_OUTPUTS,
)

__all__ = [
    "ScoreError", "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "RunIncomplete", "ForeignSeed",
    "SCORE_SHARDING", "METRIC_CONTRACT", "SCORE_FORMAT", "RECEIPT_FORMAT", "BLOCK_RULE", "OUTPUTS",
    "SERIES", "RUN_INPUTS", "PER_SAMPLE_FIELDS", "PER_SAMPLE_SCALARS", "STRATIFIERS", "is_number_or_none",
    "is_index", "short", "dig", "typed"
]

#: Scoring spreads each kernel call over every local device of the default backend
#: (one device: the plain path); the devices used are recorded in score_receipt.json.
SCORE_SHARDING = "auto"

METRIC_CONTRACT = "passage-qualified-complete-v1"
#: v2: 0-d quality_repeat_index, precision statements; v3: the timing profile's name and
#: boundary (``timing_profile``, ``timing_boundary``) and the ``validation_recost_ms`` block
SCORE_FORMAT = "passage-jax-score-v3"
#: v2: the ``compilation`` block (what scoring the folder compiled)
RECEIPT_FORMAT = "passage-jax-score-receipt-v3"
BLOCK_RULE = "main_tile_5deg"
#: the run folder's file names, from their one owner (``passage_jax.protocol.runfolder``)
OUTPUTS = SCORE_OUTPUTS
#: the series of the timing passes, as the records name them
SERIES = ("cold", "warmup", "warm")
RUN_INPUTS = (REQUESTS, PATHS, REFERENCES)
#: per_sample.npz row fields (all of length n_rows), in the order they are written; the
#: file also holds the 0-d :data:`PER_SAMPLE_SCALARS`
PER_SAMPLE_FIELDS = (
    "reference_qualified", "sample_id", "cluster_id", "repeat_index",
    "primary_quality", "regret", "assd", "h95", "path_iou", "success", "valid_path",
    "connected_path", "obstacle_violation", "obstacle_traversals", "predicted_cost",
    "oracle_cost", "latency_ms", "status", "record_index", "task_index", "route_format",
    "route_length", "malformed", "stratum_obstacle_coverage", "stratum_start_goal_distance_px",
    "stratum_reference_length_px", "stratum_relief_m", "stratum_elevation_median_m",
    "stratum_superellipse_exponent", "route_stage",
)
#: per_sample.npz 0-d arrays (read with ``.item()``)
PER_SAMPLE_SCALARS = ("metric_contract", "quality_repeat_index", "block_rule")
#: numeric per-task stratifiers available to ``compare --odd-spec``
STRATIFIERS = ("obstacle_coverage", "start_goal_distance_px", "reference_length_px", "relief_m",
               "elevation_median_m", "superellipse_exponent")


class ScoreError(RuntimeError):
    """The run folder cannot be scored (missing/tampered files, data changed ...)."""


class AlreadyScored(ScoreError):
    """The seed folder already holds score outputs (scoring again must be asked for)."""


class DatasetNotFound(ScoreError):
    """The dataset the run recorded is not where the run found it."""


class ScoreOutdated(ScoreError):
    """A scored folder's outputs or manifest no longer match its score receipt."""


class RunIncomplete(ScoreError):
    """The run folder is not finished (no ``run.json``; still being written, or a seed
    it declares is missing or incomplete)."""


class ForeignSeed(ScoreError):
    """A seed folder does not belong to the run it sits in (its manifest's method name,
    seed, spec hash, code or run identity differ from the run's, or the run does not
    declare it)."""


# --------------------------------------------------------------------------- #
# one JSON value
# --------------------------------------------------------------------------- #



def is_number_or_none(v) -> bool:
    return v is None or is_number(v)


def is_index(v) -> bool:
    """An integer that fits an int64 column with room to spare."""
    return is_int(v) and -(2 ** 62) < v < 2 ** 62


def short(v) -> str:
    """``v`` as JSON, cut to 80 characters: what an error message echoes of a value."""
    t = json.dumps(v, sort_keys=True, default=str)
    return t if len(t) <= 80 else t[:77] + "..."


def dig(doc, *keys):
    """``doc[k0][k1]...``, or None where a level is missing or not an object."""
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def typed(doc: dict, key: str, kind, where, error=ScoreError):
    """``doc[key]``, which must be of type ``kind`` (``int``: an integer, not a bool;
    ``float``: any real number, not a bool); ``error`` naming the file and field otherwise."""
    if key not in doc:
        raise error(f"{where}: field {key!r} is missing")
    v = doc[key]
    ok = is_int(v) if kind is int else is_number(v) if kind is float else isinstance(v, kind)
    if not ok:
        name = kind.__name__ if kind not in (int, float) else "an integer" if kind is int else "a number"
        raise error(f"{where}: field {key!r} must be {name}, got {type(v).__name__} {short(v)}")
    return v
