"""The collect stage of scoring: the batches' scores gathered into per-record columns
(:class:`Collector`, across processes in a multi-process launch), then the two outputs
of a seed folder built from them (:func:`collect_outputs`): the ``per_sample.npz`` rows
(task x warm repeat, repeat-major) and the ``metrics.json`` document."""
from __future__ import annotations

import dataclasses
import json

import numpy as np

from passage_jax.contract import BATCHED_PROFILE, PRIMARY_METRICS, UNPLACED
from passage_jax.evaluate.components import component_summary, route_stage_column
from passage_jax.evaluate.latency import series_latency, validation_recost_block
from passage_jax.evaluate.score._folder import SeedInputs
from passage_jax.evaluate.score._format import (
    BLOCK_RULE,
    METRIC_CONTRACT,
    SCORE_FORMAT,
    SERIES,
    STRATIFIERS,
    ScoreError,
    is_index,
)
from passage_jax.evaluate.score._kernel import BatchScores
from passage_jax.evaluate.score._timing import recost_inside_latency, run_timing
from passage_jax.fileio import jsonable
from passage_jax.metrics import primary_metrics
from passage_jax.metrics.aggregate import precision_statement
from passage_jax.protocol.batch import batch_timing
from passage_jax.protocol.runfolder import MANIFEST, REFERENCES
from passage_jax.stats import assign_blocks, block_census

__all__ = ["Collector", "Collected", "Share", "ScoreOutputs", "collect_outputs", "warm_rows",
           "task_clusters", "per_sample_rows", "metrics_document", "quality_summary", "cluster_ids",
           "timing_profile", "scoring_precision", "warm_requests", "validation_recost",
           "HEADLINE_COMPANIONS"]


@dataclasses.dataclass(frozen=True)
class Share:
    """One process's scores, sent to the others in a multi-process launch: its records,
    its tasks, and their columns."""

    records: np.ndarray
    tasks: range
    fields: dict
    route_length: np.ndarray
    strata: dict


@dataclasses.dataclass(frozen=True)
class Collected:
    """Every record's scores (the kernel's numeric fields and the route length) and every
    task's stratifiers, in record and task order."""

    fields: dict
    route_length: np.ndarray
    strata: dict


class Collector:
    """Gathers :class:`~passage_jax.evaluate.score._kernel.BatchScores` into columns of
    ``n_records`` records and ``n_tasks`` tasks. A kernel field's column takes the dtype
    of its first batch."""

    def __init__(self, n_records: int, n_tasks: int):
        self.n_records = n_records
        self._fields: dict = {}
        self._route_length = np.full(n_records, -1, np.int64)
        self._strata = {k: np.empty(n_tasks, np.float64) for k in STRATIFIERS}

    def _put(self, records, fields: dict) -> None:
        for k, v in fields.items():
            if k not in self._fields:
                self._fields[k] = np.zeros(self.n_records, v.dtype)
            self._fields[k][records] = v

    def add(self, scores: BatchScores) -> None:
        for k, v in scores.strata.items():
            self._strata[k][scores.tasks.start:scores.tasks.stop] = v
        self._put(scores.records, scores.fields)
        self._route_length[scores.records] = scores.route_length

    def share(self, records: np.ndarray, tasks: range) -> Share:
        """This process's columns: ``records`` (ascending) and ``tasks``."""
        return Share(records=records, tasks=tasks, fields={k: v[records] for k, v in self._fields.items()},
                     route_length=self._route_length[records],
                     strata={k: v[tasks.start:tasks.stop] for k, v in self._strata.items()})

    def merge(self, shares) -> None:
        """Every process's :class:`Share`, in process order."""
        for sh in shares:
            self._put(sh.records, sh.fields)
            self._route_length[sh.records] = sh.route_length
            for k, v in sh.strata.items():
                self._strata[k][sh.tasks.start:sh.tasks.stop] = v

    def collected(self, where: str) -> Collected:
        if not self._fields:  # a run without records (no tasks) cannot be scored
            raise ScoreError(f"{where}: no records to score")
        return Collected(fields=dict(self._fields), route_length=self._route_length,
                         strata=dict(self._strata))


@dataclasses.dataclass(frozen=True)
class ScoreOutputs:
    """A seed folder's score: the ``per_sample.npz`` arrays and the ``metrics.json``
    document (JSON-ready)."""

    rows: dict
    metrics: dict


def collect_outputs(inputs: SeedInputs, collected: Collected) -> ScoreOutputs:
    """The outputs of a seed folder from its inputs and its records' scores."""
    warm = warm_rows(inputs)
    clusters = task_clusters(inputs)
    rows = per_sample_rows(inputs, collected, warm, clusters)
    return ScoreOutputs(rows=rows, metrics=metrics_document(inputs, collected, clusters))


def warm_rows(inputs: SeedInputs) -> np.ndarray:
    """The warm records, repeat-major then task order: the rows of ``per_sample.npz``;
    they must form every task x repeat, the quality repeat among them."""
    rec, n_tasks, q_index = inputs.records, inputs.n_tasks, inputs.quality_repeat
    ti, repeat = rec.task_index, rec.repeat
    warm = np.flatnonzero(rec.series == "warm")
    warm = warm[np.lexsort((ti[warm], repeat[warm]))]
    n_rep = len(set(repeat[warm].tolist()))
    if len(warm) != n_rep * n_tasks or q_index not in set(repeat[warm].tolist()):
        raise ScoreError(f"{inputs.where}: warm records do not form {n_tasks} tasks x repeats with "
                         f"quality repeat {q_index}")
    return warm


def cluster_ids(tile_json) -> list[str]:
    """The geographic block (:data:`~passage_jax.evaluate.score._format.BLOCK_RULE`) of each
    task's tile (JSON text; ``unplaced`` without one)."""
    tiles = [json.loads(s) if str(s) else None for s in tile_json]
    return [UNPLACED if b is None else b for b in assign_blocks(tiles, BLOCK_RULE)]


def task_clusters(inputs: SeedInputs) -> np.ndarray:
    """:func:`cluster_ids` of the run's references, :class:`ScoreError` naming the member
    when they are not JSON tiles."""
    try:
        return np.asarray(cluster_ids(inputs.refs.tile_json), dtype=str)
    except (ValueError, TypeError, AttributeError) as e:
        raise ScoreError(f"{inputs.folder / REFERENCES} (member 'tile_json'): not the JSON tiles "
                         f"of the tasks ({type(e).__name__}: {e})") from None


#: the kernel's per-record fields that are per_sample.npz rows, in their order, and their dtypes
_KERNEL_ROWS = (("regret", np.float64), ("assd", np.float64), ("h95", np.float64),
                ("path_iou", np.float64), ("success", bool), ("valid_path", bool),
                ("connected_path", bool), ("obstacle_violation", bool),
                ("obstacle_traversals", np.int64), ("predicted_cost", np.float64))


def per_sample_rows(inputs: SeedInputs, collected: Collected, warm: np.ndarray,
                    clusters: np.ndarray) -> dict:
    """The ``per_sample.npz`` arrays: one row per warm record ``warm``
    (:data:`~passage_jax.evaluate.score._format.PER_SAMPLE_FIELDS`) and the 0-d scalars."""
    rec, refs, per = inputs.records, inputs.refs, collected.fields
    ti, repeat, q_index = rec.task_index, rec.repeat, inputs.quality_repeat
    tw = ti[warm]
    rows = {
        "metric_contract": np.array(METRIC_CONTRACT),
        "reference_qualified": refs.qualified[ti][warm],
        "sample_id": np.asarray([refs.sample_id[j] for j in tw], dtype=str),
        "cluster_id": clusters[tw],
        "repeat_index": repeat[warm],
        "quality_repeat_index": np.array(q_index, np.int64),  # 0-d: one per file
        "primary_quality": repeat[warm] == q_index,
    }
    for k, dtype in _KERNEL_ROWS:
        rows[k] = per[k][warm].astype(dtype)
    rows.update({
        "oracle_cost": refs.c_star[tw],
        "latency_ms": rec.latency_ms[warm],
        "status": rec.status[warm],
        "record_index": warm.astype(np.int64),
        "task_index": tw,
        "route_format": rec.route_format[warm],
        "route_length": collected.route_length[warm],
        "malformed": per["malformed"][warm].astype(bool),
        "block_rule": np.array(BLOCK_RULE),
    })
    for k in STRATIFIERS:
        rows[f"stratum_{k}"] = collected.strata[k][tw]
    rows["route_stage"] = route_stage_column(rec.stage_records(warm))
    return rows


# --------------------------------------------------------------------------- #
# metrics.json
# --------------------------------------------------------------------------- #

def quality_summary(per_task: dict, mask, qualified) -> dict:
    """:func:`passage_jax.metrics.primary_metrics` of the records ``mask`` (JSON-ready)."""
    sub = {k: np.asarray(v)[mask] for k, v in per_task.items()
           if isinstance(v, np.ndarray) and v.dtype.kind != "O"}
    m = primary_metrics(sub, valid_mask=np.asarray(qualified)[mask])
    return jsonable(m)


def _quality_by_pass(inputs: SeedInputs, per: dict) -> dict:
    """Quality of every pass (``cold#0``, ``warmup#i``, ``warm#i``), each on its own."""
    rec = inputs.records
    series, repeat = rec.series, rec.repeat
    qualified = inputs.refs.qualified[rec.task_index]
    quality = {}
    for s in SERIES:
        for rp in sorted(set(repeat[series == s].tolist())):
            quality[f"{s}#{rp}"] = quality_summary(per, (series == s) & (repeat == rp), qualified)
    return quality


def _components(inputs: SeedInputs, per: dict, headline_mask: np.ndarray) -> dict:
    """The components block over the headline's rows: the quality repeat's
    reference-qualified tasks."""
    qualified = inputs.refs.qualified[inputs.records.task_index]
    comp_idx = np.flatnonzero(headline_mask & qualified)
    try:
        return component_summary(inputs.records.stage_records(comp_idx),
                                 per["success"][comp_idx].astype(bool))
    except ValueError as e:
        raise ScoreError(f"{inputs.where}: {e}") from None


def warm_requests(inputs: SeedInputs, idx: np.ndarray):
    """Which of the records ``idx`` count as warm for the censored block's flag: the
    records' ``warm_complete`` when the run recorded it; for runs written before it was
    recorded, every record when all of ``idx`` are of the ``warm`` series of a run that
    declared at least one warm-up pass, else none (a bool)."""
    rec = inputs.records
    if rec.warm_recorded:
        return rec.warm_complete[idx] == 1
    return bool(inputs.warmup_declared > 0 and np.all(rec.series[idx] == "warm"))


def _latency(inputs: SeedInputs, per: dict) -> dict:
    """Latency per series (``cold``, ``warmup``, ``warm``) present in the records (a run
    under a session timing profile holds the ``warm`` series only)."""
    rec, latency = inputs.records, {}
    for s in SERIES:
        idx = np.flatnonzero(rec.series == s)
        if idx.size == 0:
            continue
        latency[s] = series_latency(rec.latency_records(idx), per["success"][idx].astype(bool),
                                    warm=warm_requests(inputs, idx))
    return latency


def validation_recost(inputs: SeedInputs, timing: dict) -> dict:
    """The ``validation_recost_ms`` block over the ``warm`` series (the measured requests,
    every repeat), stating the run's timing profile and boundary and whether the profile
    counts the time inside ``latency_ms``."""
    rec = inputs.records
    idx = np.flatnonzero(rec.series == "warm")
    return validation_recost_block(rec.validation_recost_ms[idx], profile=timing["profile"],
                                   boundary=timing["timing_boundary"],
                                   inside_latency=recost_inside_latency(timing["profile"]))


def _batched(inputs: SeedInputs) -> dict:
    """The batched procedure's timing block, from the records' batch figures
    (:func:`passage_jax.protocol.batch.batch_timing`: ``batch_ms`` and the amortised
    ``per_scene_ms``); the declared batch size is the manifest's."""
    spec = inputs.manifest.get("spec") if isinstance(inputs.manifest.get("spec"), dict) else {}
    size = spec.get("batch_size")
    return batch_timing(inputs.records.batches(inputs.where), size if is_index(size) else None)


def _status_counts(inputs: SeedInputs) -> dict:
    rec, out = inputs.records, {}
    for s in SERIES:
        vals, cnt = np.unique(rec.status[rec.series == s], return_counts=True)
        if len(vals):
            out[s] = {str(v): int(c) for v, c in zip(vals, cnt)}
    return out


def _divergence(inputs: SeedInputs, per: dict) -> dict:
    """Records whose status and route disagree."""
    ok = inputs.records.status == "ok"
    return {
        "status_ok_route_invalid": int(np.sum(ok & ~per["valid_path"].astype(bool))),
        "status_not_ok_route_connected_legal": int(np.sum(
            ~ok & per["connected_path"].astype(bool) & ~per["obstacle_violation"].astype(bool))),
    }


def _precision(inputs: SeedInputs) -> dict:
    refs = inputs.manifest.get("references") or {}
    return {"scoring": scoring_precision(),
            "references": {"path": refs.get("precision", "float64"),
                           "rtol": refs.get("precision_rtol", 1e-12)},
            "planner_reported": sorted(inputs.records.precisions) or None}


def metrics_document(inputs: SeedInputs, collected: Collected, clusters: np.ndarray) -> dict:
    """The ``metrics.json`` document (JSON-ready): the quality repeat's six primary metrics
    and their companions, every pass's quality, status counts and divergence, latency,
    the block census, precision, references, timing profile and components."""
    rec, per, manifest, q_index = inputs.records, collected.fields, inputs.manifest, inputs.quality_repeat
    quality = _quality_by_pass(inputs, per)
    headline_mask = (rec.series == "warm") & (rec.repeat == q_index)
    headline = quality[f"warm#{q_index}"]
    components = _components(inputs, per, headline_mask)
    timing = timing_profile(manifest, inputs.folder / MANIFEST)
    batched = timing["profile"] == BATCHED_PROFILE  # batches are timed, never requests
    latency, divergence = ({} if batched else _latency(inputs, per)), _divergence(inputs, per)
    status_counts = _status_counts(inputs)
    headline_idx = np.flatnonzero(headline_mask)
    metrics = {
        "format": SCORE_FORMAT,
        "metric_contract": METRIC_CONTRACT,
        "method_name": manifest.get("method_name"),
        "seed": manifest.get("seed"),
        "quality_repeat_index": q_index,
        "n_tasks": inputs.n_tasks,
        "n_reference_qualified": int(inputs.refs.qualified.sum()),
        "primary": {k: headline[k] for k in PRIMARY_METRICS},
        **{k: headline[k] for k in HEADLINE_COMPANIONS},
        "quality": headline,
        "quality_by_pass": quality,
        "status_counts": status_counts,
        "status_route_divergence": divergence,
        "latency": latency,
        "latency_warm_quality_repeat": None if batched else series_latency(
            rec.latency_records(headline_idx), per["success"][headline_idx].astype(bool),
            warm=warm_requests(inputs, headline_idx)),
        **({"batched": _batched(inputs)} if batched else {}),
        "block_rule": BLOCK_RULE,
        "block_census": jsonable(block_census([None if x == UNPLACED else str(x) for x in clusters])),
        "precision": _precision(inputs),
        "references": {"identity": inputs.refs.identity, "policy": inputs.refs.policy},
        "timing_profile": timing,
        "timing_boundary": timing["timing_boundary"],
        "validation_recost_ms": validation_recost(inputs, timing),
        "components": components,
    }
    return jsonable(metrics)


#: the headline quality's fields written beside ``primary`` at the top of metrics.json
HEADLINE_COMPANIONS = ("n_path_valid", "connected_rate", "mean_traversals_given_violation",
                        "regret_summary", "n_regret_undefined")


def scoring_precision() -> dict:
    """What the scoring kernels ran in: float64, or (no float64 on the backend, or
    ``PASSAGE_JAX_NO_X64``) float32 geometry with costs and regret in float64 on the
    host (:func:`passage_jax.metrics.aggregate.precision_statement`)."""
    return jsonable(precision_statement())


def timing_profile(manifest: dict, where=MANIFEST) -> dict:
    """The timing profile of a run (:func:`~passage_jax.evaluate.score._timing.run_timing`):
    ``profile`` (the manifest's ``timing_profile``; runs written before it was recorded
    read as ``complete_request_v1``), ``timing_boundary`` (the manifest's, else
    ``timing.profile``), the timer text and the runner's format."""
    return run_timing(manifest, where)
