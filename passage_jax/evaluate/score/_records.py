"""The run's records and references as scoring reads them (part of the read stage,
:mod:`passage_jax.evaluate.score._folder`, which reads the files): ``requests.jsonl``,
every line checked (:func:`check_record`) and the fields scoring uses held as columns
(:class:`RecordColumns`); the arrays of ``references.npz`` checked (:class:`References`,
:func:`references_from_npz`); and the records, routes and references of one run held to
agree (:func:`check_consistency`).

The timing-profile fields (``validation_recost_ms``, ``warm_complete``, ``process_index``,
``host``, ``device``, ``torch_synchronized``) are optional: runs written before they were
recorded have none, and read as "not recorded" (NaN, or -1 for ``warm_complete``)."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from passage_jax.checks import is_number
from passage_jax.data.strata import SCENE_STRATIFIERS
from passage_jax.evaluate.score._format import SERIES, ScoreError, is_index, is_number_or_none, short
from passage_jax.protocol.contracts import STAGES, STATUSES
from passage_jax.protocol.records import ROUTE_FORMATS, references_identity, unpack_routes
from passage_jax.protocol.runfolder import PATHS, REQUESTS

__all__ = ["RecordColumns", "RECORD_FIELDS", "check_record", "record_lines", "References",
           "references_from_npz", "check_consistency"]


def _is_counters(v) -> bool:
    return v is None or (isinstance(v, dict) and all(is_number_or_none(x) for x in v.values()))


def _is_duration_or_none(v) -> bool:
    return v is None or (is_number(v) and math.isfinite(v) and v >= 0)


def _is_bool_or_none(v) -> bool:
    return v is None or isinstance(v, bool)


def _is_stage_counters(v) -> bool:
    return v is None or (isinstance(v, dict) and all(_is_counters(x) for x in v.values()))


#: requests.jsonl fields that scoring reads: (field, required, check, what it must be)
RECORD_FIELDS = (
    ("record", True, is_index, "an integer"),
    ("series", True, lambda v: isinstance(v, str) and v in SERIES, f"one of {list(SERIES)}"),
    ("repeat", True, is_index, "an integer"),
    ("task_index", True, is_index, "an integer"),
    ("sample_id", True, lambda v: isinstance(v, str), "a string"),
    ("status", True, lambda v: isinstance(v, str) and v in STATUSES, f"one of {list(STATUSES)}"),
    ("latency_ms", False, is_number_or_none, "a number or null"),
    ("batch_first", False, lambda v: v is None or is_index(v), "an integer or null"),
    ("batch_size", False, lambda v: v is None or (is_index(v) and v >= 1), "a positive integer or null"),
    ("batch_live", False, lambda v: v is None or (is_index(v) and v >= 1), "a positive integer or null"),
    ("batch_ms", False, _is_duration_or_none, "a finite non-negative number or null"),
    ("deadline_ms", False, is_number_or_none, "a number or null"),
    ("route_format", False, lambda v: v is None or (isinstance(v, str) and v in ROUTE_FORMATS.values()),
     f"one of {list(ROUTE_FORMATS.values())} or null"),
    ("route_stage", False, lambda v: v is None or (isinstance(v, str) and v in STAGES),
     f"one of {list(STAGES)} or null"),
    ("precision", False, lambda v: v is None or isinstance(v, str), "a string or null"),
    ("work", False, _is_counters, "a mapping of counters (numbers or null) or null"),
    ("stage_work", False, _is_stage_counters,
     "a mapping of stages to mappings of counters (numbers or null) or null"),
    ("validation_recost_ms", False, _is_duration_or_none, "a finite non-negative number or null"),
    ("warm_complete", False, _is_bool_or_none, "true, false or null"),
    ("torch_synchronized", False, _is_bool_or_none, "true, false or null"),
    ("process_index", False, lambda v: v is None or is_index(v), "an integer or null"),
    ("host", False, lambda v: v is None or isinstance(v, str), "a string or null"),
    ("device", False, lambda v: v is None or isinstance(v, str), "a string or null"),
)


def check_record(rec, path, line_no: int) -> dict:
    """One parsed line of ``requests.jsonl``: a JSON object whose fields that scoring reads
    (:data:`RECORD_FIELDS`) are present and of their types; :class:`ScoreError` naming the
    file, line and field otherwise."""
    if not isinstance(rec, dict):
        raise ScoreError(f"{path} line {line_no}: not a JSON object (got {type(rec).__name__})")
    for k, required, ok, what in RECORD_FIELDS:
        if k not in rec:
            if required:
                raise ScoreError(f"{path} line {line_no}: field {k!r} is missing")
            continue
        if not ok(rec[k]):
            raise ScoreError(f"{path} line {line_no}: field {k!r} must be {what}, got "
                             f"{type(rec[k]).__name__} {short(rec[k])}")
    return rec


def record_lines(path):
    """(line number, checked record) of every non-blank line of ``requests.jsonl``."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ScoreError(f"{path} line {line_no}: not UTF-8 text ({e.reason})") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScoreError(f"{path} line {line_no}: not JSON: {e}") from None
            yield line_no, check_record(rec, path, line_no)


#: the record fields held as columns
_COLUMNS = ("record", "series", "repeat", "task_index", "sample_id", "status", "latency_ms",
            "deadline_ms", "route_format", "route_stage", "validation_recost_ms", "warm_complete",
            "batch_first", "batch_live", "batch_ms")


class RecordColumns:
    """The fields of ``requests.jsonl`` that scoring uses, held as columns (a few tens of
    bytes per record, whatever the number of passes): record, series, repeat, task index,
    sample id, status, latency, deadline, route format and stage, the legality check and
    recosting time (``validation_recost_ms``, NaN where not recorded), whether the request
    ran after a complete declared warm-up (``warm_complete``: 1, 0, or -1 where not
    recorded), and the planner's reported precisions; the ``work`` and ``stage_work`` of the headline quality
    repeat's records only (the components block reads those). Every record is checked
    (:func:`check_record`)."""

    def __init__(self, path, where: str, quality_repeat: int):
        cols: dict[str, list] = {k: [] for k in _COLUMNS}
        self.work: dict[int, dict] = {}
        self.precisions: set = set()
        for _line_no, rec in record_lines(path):
            i = len(cols["record"])
            for k in cols:
                cols[k].append(rec.get(k))
            if rec.get("precision"):
                self.precisions.add(str(rec["precision"]))
            if rec["series"] == "warm" and rec["repeat"] == quality_repeat:
                self.work[i] = {k: rec.get(k) for k in ("work", "stage_work", "route_stage")}
        self.record = np.asarray(cols["record"], np.int64)
        self.series = np.asarray(cols["series"], dtype=str)
        self.repeat = np.asarray(cols["repeat"], np.int64)
        self.task_index = np.asarray(cols["task_index"], np.int64)
        self.sample_id = np.asarray(cols["sample_id"], dtype=str)
        self.status = np.asarray(cols["status"], dtype=str)
        self.latency_ms = _float_column(cols["latency_ms"])
        self.deadline_ms = _float_column(cols["deadline_ms"])
        self.route_format = np.asarray([str(v or "") for v in cols["route_format"]], dtype=str)
        self.route_stage = [v for v in cols["route_stage"]]
        self.validation_recost_ms = _float_column(cols["validation_recost_ms"])
        self.warm_complete = np.asarray([-1 if v is None else int(bool(v))
                                         for v in cols["warm_complete"]], np.int8)
        # the batched procedure's batch of each record (-1 / NaN: none)
        self.batch_first = np.asarray([-1 if v is None else int(v) for v in cols["batch_first"]], np.int64)
        self.batch_live = np.asarray([0 if v is None else int(v) for v in cols["batch_live"]], np.int64)
        self.batch_ms = _float_column(cols["batch_ms"])

    def batches(self, where: str) -> dict:
        """{first record: (batch_ms, live scenes)} of the batched procedure's batches; every
        record of a batch must state the same figures, and the batch must hold exactly its
        ``batch_live`` records (:class:`ScoreError` naming the batch otherwise)."""
        out: dict = {}
        count: dict = {}
        for i in np.flatnonzero(self.batch_first >= 0):
            key = int(self.batch_first[i])
            got = (float(self.batch_ms[i]), int(self.batch_live[i]))
            if np.isnan(got[0]) or got[1] < 1:
                raise ScoreError(f"{where}: record {int(self.record[i])} names batch {key} without its "
                                 f"batch_ms and batch_live")
            if out.setdefault(key, got) != got:
                raise ScoreError(f"{where}: the records of batch {key} disagree on its figures "
                                 f"({out[key]} and {got})")
            count[key] = count.get(key, 0) + 1
        for key, (_ms, live) in out.items():
            if count[key] != live:
                raise ScoreError(f"{where}: batch {key} states {live} live scenes but {count[key]} "
                                 f"records belong to it")
        return out

    def __len__(self) -> int:
        return len(self.record)

    @property
    def warm_recorded(self) -> bool:
        """Whether the run recorded ``warm_complete`` (on any of its records)."""
        return bool(np.any(self.warm_complete >= 0))

    def latency_records(self, idx) -> list[dict]:
        """The fields the latency summaries read, for records ``idx``."""
        return [{"latency_ms": _none_if_nan(self.latency_ms[i]), "status": str(self.status[i]),
                 "sample_id": str(self.sample_id[i]),
                 "deadline_ms": _none_if_nan(self.deadline_ms[i])} for i in idx]

    def stage_records(self, idx) -> list[dict]:
        """``route_stage`` (and for headline records ``work`` / ``stage_work``) of ``idx``."""
        return [self.work.get(int(i)) or {"route_stage": self.route_stage[i]} for i in idx]


def _float_column(values) -> np.ndarray:
    return np.asarray([np.nan if v is None else float(v) for v in values], np.float64)


def _none_if_nan(v):
    return None if np.isnan(v) else float(v)


#: references.npz members that scoring reads
_REFERENCE_MEMBERS = ("sample_id", "c_star", "qualified", "route_coords", "route_offsets", "objective",
                      "variant", "cost_weight", "input_sha256", "tile_json", "identity")


def references_from_npz(ref: dict, where: str) -> dict:
    """The checked core of ``references.npz`` (ids, c*, qualified flags, routes, the
    identity recomputed from them); :class:`ScoreError` naming the file otherwise."""
    missing = [k for k in _REFERENCE_MEMBERS if k not in ref]
    if missing:
        raise ScoreError(f"{where}: missing arrays {missing}")
    ids = [str(s) for s in ref["sample_id"]]
    routes = unpack_routes(ref["route_coords"], ref["route_offsets"])
    if len(routes) != len(ids):
        raise ScoreError(f"{where}: {len(routes)} reference routes for {len(ids)} tasks")
    ident = references_identity(ids, ref["c_star"], ref["route_coords"], ref["route_offsets"],
                                ref["qualified"])
    if ident != str(ref["identity"]):
        raise ScoreError(f"{where}: reference identity {ident} does not match the recorded "
                         f"{ref['identity']}")
    return {"sample_id": ids, "c_star": np.asarray(ref["c_star"], np.float64),
            "qualified": np.asarray(ref["qualified"], bool), "routes": routes,
            "identity": ident}


def _recorded_strata(ref: dict, n: int, path) -> np.ndarray | None:
    """``scene_strata`` of ``references.npz`` checked: (n, 5) float64 with the field names
    ``scene_strata_fields`` equal to SCENE_STRATIFIERS; None when the run has none."""
    if "scene_strata" not in ref:
        return None
    fields = [str(x) for x in np.asarray(ref.get("scene_strata_fields", []), dtype=str).reshape(-1)]
    if fields != list(SCENE_STRATIFIERS):
        raise ScoreError(f"{path}: scene_strata_fields {fields} are not {list(SCENE_STRATIFIERS)}")
    rows = ref["scene_strata"]
    if rows.shape != (n, len(SCENE_STRATIFIERS)) or rows.dtype != np.float64:
        raise ScoreError(f"{path}: scene_strata has shape {rows.shape} and dtype {rows.dtype}, not "
                         f"({n}, {len(SCENE_STRATIFIERS)}) float64")
    return rows


@dataclasses.dataclass(frozen=True)
class References:
    """The run's qualified references (``references.npz``), checked: per task its scene id,
    c*, qualification, reference route, and the identity the run recorded for it (input
    hash, objective, variant, cost weight, tile)."""

    sample_id: list
    c_star: np.ndarray
    qualified: np.ndarray
    routes: list
    identity: str
    objective: list
    variant: list
    cost_weight: np.ndarray
    input_sha256: list
    tile_json: np.ndarray
    policy: str
    #: (T, 5) the scene stratifiers admission measured (SCENE_STRATIFIERS' order), or None
    #: for a run written before admission recorded them
    scene_strata: np.ndarray | None = None

    @classmethod
    def of_arrays(cls, ref: dict, path) -> References:
        """The references held by ``ref``, the arrays of ``references.npz`` at ``path``,
        checked (:func:`references_from_npz`, :func:`_recorded_strata`)."""
        core = references_from_npz(ref, str(path))
        return cls(**core, objective=[str(x) for x in ref["objective"]],
                   variant=[str(x) for x in ref["variant"]],
                   cost_weight=np.asarray(ref["cost_weight"], np.float64),
                   input_sha256=[str(x) for x in ref["input_sha256"]], tile_json=ref["tile_json"],
                   policy=str(ref.get("policy", "")),
                   scene_strata=_recorded_strata(ref, len(core["sample_id"]), path))

    def __len__(self) -> int:
        return len(self.sample_id)


def check_consistency(records: RecordColumns, paths: dict, refs: References, manifest: dict,
                       where: str) -> None:
    """The records, routes and references of one run agree: one route per record, the
    manifest's record count, records in order, each naming a task of the run by index
    and scene id."""
    n = len(records)
    if len(paths["route_format"]) != n:
        raise ScoreError(f"{where}: {PATHS} holds {len(paths['route_format'])} routes for "
                         f"{n} records")
    if manifest.get("n_records") is not None and manifest["n_records"] != n:
        raise ScoreError(f"{where}: manifest says {manifest['n_records']} records, "
                         f"{REQUESTS} has {n}")
    order = np.arange(n, dtype=np.int64)
    bad = np.flatnonzero((records.record != order) | (np.asarray(paths["record_index"]) != order))
    if bad.size:
        raise ScoreError(f"{where}: record {int(bad[0])} is out of order")
    ti, n_tasks = records.task_index, len(refs)
    if len(ti) and (ti.min() < 0 or ti.max() >= n_tasks):
        raise ScoreError(f"{where}: a record's task_index is outside [0, {n_tasks})")
    ref_ids = np.asarray(refs.sample_id, dtype=str)
    bad = np.flatnonzero(records.sample_id != ref_ids[ti])
    if bad.size:
        i = int(bad[0])
        raise ScoreError(f"{where}: record {i}: sample_id {records.sample_id[i]} is not task "
                         f"{ti[i]}'s scene {ref_ids[ti[i]]}")
