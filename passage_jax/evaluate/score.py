"""Offline scoring of a run folder (SPEC §4, §7).

``score_run(path)`` scores every ``seed-<seed>/`` folder of a run (or one seed
folder) from what the run persisted: the routes in ``paths.npz``, the terminal
records in ``requests.jsonl`` and the qualified references in
``references.npz``. The planner is never called again. Scenes are reloaded
from the dataset recorded in ``manifest.json`` only for their elevation and
obstacles, after checking the shard hashes and every task's input hash
against what the run recorded; any mismatch is an error.

Per seed folder it writes, each atomically:

* ``per_sample.npz``: one row per task x warm repeat (plain arrays, loads
  with ``allow_pickle=False``), see :data:`PER_SAMPLE_FIELDS`;
* ``metrics.json``: the six primary metrics of the quality repeat and their
  companions, the quality of every other pass, latency per series (legacy
  interpolated percentiles and the ``passage-censored-latency/v1`` block),
  precision, the status/route divergence counts and the ``components`` block
  (:mod:`passage_jax.evaluate.components`: which stage produced each route, per-stage work);
* ``score_receipt.json`` (written last): hashes of every input and output,
  versions, evaluator source hash and time.

An existing score is never overwritten unless ``force=True``
(:class:`AlreadyScored` otherwise).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from passage_jax import cluster
from passage_jax.contract import IN_PROCESS_TIMING_PROFILE, PRIMARY_METRICS, UNPLACED
from passage_jax.data import DataError, chunk_scenes, open_tasks, resolve_dataset_root
from passage_jax.evaluate.components import component_summary, route_stage_column
from passage_jax.evaluate.latency import series_latency
from passage_jax.fileio import (
    atomic_write_json,
    atomic_write_npz,
    check_sha256,
    jsonable,
    read_document,
    sha256_file,
    utc_now,
)
from passage_jax.graph.routes import route_length_pixels
from passage_jax.metrics import primary_metrics, score_routes, sharding_devices
from passage_jax.metrics.aggregate import precision_statement
from passage_jax.protocol.contracts import STATUSES
from passage_jax.protocol.records import (
    ROUTE_FORMAT_CODE,
    PathsReader,
    code_hash,
    input_hash,
    package_versions,
    references_identity,
    unpack_routes,
)
from passage_jax.stats import assign_blocks, block_census

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    "score_run", "score_folder", "load_score", "seed_folders", "timing_profile", "reload_tasks",
    "open_run_tasks", "RecordColumns",
    "ScoreError", "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "PER_SAMPLE_FIELDS",
    "PER_SAMPLE_SCALARS", "STRATIFIERS", "METRIC_CONTRACT", "SCORE_FORMAT", "RECEIPT_FORMAT",
    "BLOCK_RULE", "OUTPUTS",
    "RUN_INPUTS",
]

#: Scoring spreads each kernel call over every local device of the default backend
#: (one device: the plain path); the devices used are recorded in score_receipt.json.
SCORE_SHARDING = "auto"

METRIC_CONTRACT = "passage-qualified-complete-v1"
SCORE_FORMAT = "passage-jax-score-v2"  # v2: 0-d quality_repeat_index, precision statements
RECEIPT_FORMAT = "passage-jax-score-receipt-v1"
BLOCK_RULE = "main_tile_5deg"
OUTPUTS = ("per_sample.npz", "metrics.json", "score_receipt.json")
RUN_INPUTS = ("requests.jsonl", "paths.npz", "references.npz")
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


# --------------------------------------------------------------------------- #
# locating and reading a run
# --------------------------------------------------------------------------- #

def seed_folders(path) -> list[Path]:
    """The seed folders of ``path``: itself when it holds a ``manifest.json``,
    else its ``seed-<seed>/`` subfolders in seed order."""
    path = Path(path)
    if not path.is_dir():
        raise ScoreError(f"{path}: not a folder")
    if (path / "manifest.json").is_file():
        return [path]
    subs = [p for p in path.iterdir() if p.is_dir() and p.name.startswith("seed-")
            and (p / "manifest.json").is_file()]
    if not subs:
        raise ScoreError(f"{path}: neither a seed folder (manifest.json) nor a run folder "
                         f"with seed-<seed>/ subfolders")

    def key(p):
        try:
            return int(p.name[5:])
        except ValueError:
            raise ScoreError(f"{p}: folder name is not seed-<integer>") from None
    return sorted(subs, key=key)


def read_json(path) -> dict:
    return read_document(path, ScoreError)


def load_npz(path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise ScoreError(f"{path}: cannot read: {e}") from None


def verify_run_files(folder: Path, manifest: dict) -> dict:
    """Check the run files against the hashes in the manifest; returns them."""
    recorded = manifest.get("files") or {}
    hashes = {}
    for name in RUN_INPUTS:
        p = folder / name
        if not p.is_file():
            raise ScoreError(f"{p}: file not found")
        h = sha256_file(p)
        if name not in recorded:
            raise ScoreError(f"{folder / 'manifest.json'}: files.{name} (sha256) is not recorded")
        if h != recorded[name]:
            raise ScoreError(f"{p}: sha256 {h} differs from the manifest's {recorded[name]}; "
                             f"the run files were changed after the run")
        hashes[name] = h
    return hashes


def references_from_npz(ref: dict, where: str) -> dict:
    need = ("sample_id", "c_star", "qualified", "route_coords", "route_offsets", "objective",
            "variant", "cost_weight", "input_sha256", "tile_json", "identity")
    missing = [k for k in need if k not in ref]
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


# --------------------------------------------------------------------------- #
# reloading the scenes
# --------------------------------------------------------------------------- #

def dataset_root(manifest: dict, override=None) -> Path:
    data = manifest.get("data") or {}
    cands = [override] if override is not None else [data.get("dataset_root"),
                                                     data.get("dataset_path")]
    for c in cands:
        if c and Path(c).is_dir():
            return Path(c)
    if override is None and data.get("dataset_repo") and data.get("dataset_revision"):
        # a hub run: the pinned snapshot, fetched (or found in the cache) for its split only
        try:
            return resolve_dataset_root(dataset_repo=data["dataset_repo"],
                                        dataset_revision=data["dataset_revision"],
                                        resolution=int(data["resolution"]), split=str(data["split"]))
        except DataError as e:
            raise DatasetNotFound(f"dataset of the run not found locally, and the hub snapshot "
                                  f"failed: {e}") from None
    raise DatasetNotFound(f"dataset of the run not found (tried {[c for c in cands if c]}); "
                          f"a copy elsewhere can be named (its hashes are checked)")


def open_run_tasks(manifest: dict, refs: dict, where: str, dataset_path=None, on_chunk=None, *,
                   chunk: int | None = None) -> tuple:
    """The run's tasks as a :class:`~passage_jax.data.TaskStream`, read once in chunks and
    checked against the run (shard hashes; per task: id, input hash, objective, variant,
    weight); ``on_chunk(first, tasks)`` is called for each checked chunk during that read.
    Returns (tasks, root, shard hashes)."""
    data = manifest.get("data") or {}
    for k in ("resolution", "split", "cost_model", "task_variant", "shards", "sample_ids"):
        if k not in data:
            raise ScoreError(f"{where}: manifest data.{k} is missing")
    root = dataset_root(manifest, dataset_path)
    res, split = int(data["resolution"]), str(data["split"])
    shard_dir = root / f"{res}x{res}" / split
    shard_hashes = {
        s["name"]: check_sha256(shard_dir / s["name"], s["sha256"], ScoreError, what=f"{where}: shard",
                                recorded_by="the run", remedy="; the data changed since the run")
        for s in data["shards"]}
    run_ids = list(data["sample_ids"])
    if run_ids != refs["sample_id"]:
        raise ScoreError(f"{where}: the manifest's scene ids {run_ids[:3]}... differ from the "
                         f"references' {refs['sample_id'][:3]}...")

    def check(first, tasks):
        for i, t in enumerate(tasks, start=first):
            if i >= len(run_ids) or t.id != run_ids[i]:
                raise ScoreError(f"{where}: reloaded scene {i} is {t.id}, the run's is "
                                 f"{run_ids[i] if i < len(run_ids) else 'absent'}")
            if Path(t.scene.file).name not in shard_hashes:
                raise ScoreError(f"{where}: scene {t.id} comes from {t.scene.file}, a shard the "
                                 f"run did not record")
            got = input_hash(t)  # the identity the run recorded at admission
            if got != refs["input_sha256"][i]:
                raise ScoreError(f"{where}: task {i} (scene {t.id}): input hash {got} differs "
                                 f"from the run's {refs['input_sha256'][i]}")
            if (t.objective != refs["objective"][i] or t.variant != refs["variant"][i]
                    or float(t.weight) != float(refs["cost_weight"][i])):
                raise ScoreError(f"{where}: task {i} (scene {t.id}): objective/variant/weight "
                                 f"differ from the run's references")
        if on_chunk is not None:
            on_chunk(first, tasks)

    try:
        tasks = open_tasks(root, res, split, data["cost_model"], data["task_variant"],
                           n_samples=data.get("n_samples"), chunk=chunk, on_chunk=check)
    except (DataError, ValueError) as e:
        raise ScoreError(f"{where}: reloading the scenes failed: {e}") from None
    if tasks.ids != run_ids:
        raise ScoreError(f"{where}: reloaded {len(tasks)} scenes, the run has {len(run_ids)}")
    return tasks, root, shard_hashes


def reload_tasks(manifest: dict, refs: dict, where: str, dataset_path=None) -> tuple:
    """Tasks of the run in memory, reloaded and checked; returns (tasks, root, shard
    hashes). For a few tasks (figures); scoring streams them (:func:`open_run_tasks`)."""
    tasks, root, shard_hashes = open_run_tasks(manifest, refs, where, dataset_path)
    return list(tasks), root, shard_hashes


class RecordColumns:
    """The fields of ``requests.jsonl`` that scoring uses, held as columns (a few tens of
    bytes per record, whatever the number of passes): record, series, repeat, task index,
    sample id, status, latency, deadline, route format and stage, and the planner's
    reported precisions; the ``work`` and ``stage_work`` of the headline quality
    repeat's records only (the components block reads those)."""

    def __init__(self, path, where: str, quality_repeat: int):
        cols: dict[str, list] = {k: [] for k in ("record", "series", "repeat", "task_index",
                                                  "sample_id", "status", "latency_ms",
                                                  "deadline_ms", "route_format", "route_stage")}
        self.work: dict[int, dict] = {}
        self.precisions: set = set()
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ScoreError(f"{path} line {line_no}: not JSON: {e}") from None
                if not isinstance(rec, dict):
                    raise ScoreError(f"{path} line {line_no}: not a JSON object")
                i = len(cols["record"])
                for k in ("record", "series", "repeat", "task_index", "sample_id", "status"):
                    if k not in rec:
                        raise ScoreError(f"{where}: requests.jsonl record {i}: missing field {k!r}")
                if rec["status"] not in STATUSES:
                    raise ScoreError(f"{where}: record {i}: unknown status {rec['status']!r}")
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

    def __len__(self) -> int:
        return len(self.record)

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


# --------------------------------------------------------------------------- #
# scoring
# --------------------------------------------------------------------------- #

def cluster_ids(tile_json) -> list[str]:
    tiles = [json.loads(s) if str(s) else None for s in tile_json]
    return [UNPLACED if b is None else b for b in assign_blocks(tiles, BLOCK_RULE)]


def _strata(tasks, ref_routes) -> dict:
    out = {k: np.empty(len(tasks), np.float64) for k in STRATIFIERS}
    for i, t in enumerate(tasks):
        out["obstacle_coverage"][i] = float(np.mean(np.asarray(t.obstacles, bool)))
        (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
        out["start_goal_distance_px"][i] = math.hypot(r1 - r0, c1 - c0)
        out["reference_length_px"][i] = route_length_pixels(ref_routes[i])
        out["relief_m"][i] = float(np.ptp(t.elevation_m))
        out["elevation_median_m"][i] = float(np.median(t.elevation_m))
        out["superellipse_exponent"][i] = _mean_exponent(t)
    return out


def _mean_exponent(task) -> float:
    """Mean super-ellipse exponent of the scene's obstacle shapes (``metadata.obstacles.
    superellipse_exponents``); NaN for the free variant, a scene without shapes, or one
    whose metadata does not record them."""
    if task.variant == "free":
        return math.nan
    exps = ((task.scene.metadata.get("obstacles") or {}).get("superellipse_exponents"))
    if not isinstance(exps, list) or not exps:
        return math.nan
    try:
        return float(np.mean(np.asarray(exps, np.float64)))
    except (TypeError, ValueError):
        return math.nan


def _check_records(records: RecordColumns, paths, manifest, where):
    n = len(records)
    if len(paths["route_format"]) != n:
        raise ScoreError(f"{where}: paths.npz holds {len(paths['route_format'])} routes for "
                         f"{n} records")
    if manifest.get("n_records") is not None and manifest["n_records"] != n:
        raise ScoreError(f"{where}: manifest says {manifest['n_records']} records, "
                         f"requests.jsonl has {n}")
    order = np.arange(n, dtype=np.int64)
    bad = np.flatnonzero((records.record != order) | (np.asarray(paths["record_index"]) != order))
    if bad.size:
        raise ScoreError(f"{where}: record {int(bad[0])} is out of order")


def quality_summary(per_task: dict, mask, qualified) -> dict:
    sub = {k: np.asarray(v)[mask] for k, v in per_task.items()
           if isinstance(v, np.ndarray) and v.dtype.kind != "O"}
    m = primary_metrics(sub, valid_mask=np.asarray(qualified)[mask])
    return jsonable(m)


def score_folder(folder, force: bool = False, dataset_path=None, *, chunk: int | None = None) -> dict:
    """Score one seed folder; returns the metrics dict (also written).

    The scenes are read ``chunk`` at a time; each chunk's records over every pass are
    scored while it is held, and the routes are read from ``paths.npz`` by seeking: peak
    memory is one chunk of grids and its routes plus the per-record columns, whatever
    the number of scenes. The results do not depend on ``chunk``.

    In a multi-process launch (:mod:`passage_jax.cluster`) each process scores its
    contiguous share of the chunks (the others' chunks are read, not scored), the
    per-record results are gathered in task order, and process 0 alone writes the
    files, after every share arrived: they equal a single-process score's."""
    folder = Path(folder)
    where = str(folder)
    existing = [n for n in OUTPUTS if (folder / n).exists()]
    if existing and not force:
        raise AlreadyScored(f"{where} is already scored ({', '.join(existing)})")
    manifest = read_json(folder / "manifest.json")
    input_hashes = {"manifest.json": sha256_file(folder / "manifest.json")}
    input_hashes.update(verify_run_files(folder, manifest))
    timing = manifest.get("timing") or {}
    q_index = int(timing.get("quality_repeat_index", manifest["spec"]["quality_repeat_index"]))
    warmup_declared = int(timing.get("latency_warmup", manifest["spec"]["latency_warmup"]))
    records = RecordColumns(folder / "requests.jsonl", where, q_index)
    try:
        paths = PathsReader(folder / "paths.npz")
    except (KeyError, ValueError, OSError) as e:
        raise ScoreError(f"{folder / 'paths.npz'}: {e}") from None
    ref_npz = load_npz(folder / "references.npz")
    refs = references_from_npz(ref_npz, str(folder / "references.npz"))
    refs.update(objective=[str(x) for x in ref_npz["objective"]],
                variant=[str(x) for x in ref_npz["variant"]],
                cost_weight=np.asarray(ref_npz["cost_weight"], np.float64),
                input_sha256=[str(x) for x in ref_npz["input_sha256"]])
    _check_records(records, paths.index, manifest, where)
    T = len(refs["sample_id"])

    # score every record (cold, warm-up and warm passes alike), one chunk of tasks at a
    # time while the scenes are read: each chunk's records over every pass
    ti = records.task_index
    if len(ti) and (ti.min() < 0 or ti.max() >= T):
        raise ScoreError(f"{where}: a record's task_index is outside [0, {T})")
    ref_ids = np.asarray(refs["sample_id"], dtype=str)
    bad = np.flatnonzero(records.sample_id != ref_ids[ti])
    if bad.size:
        i = int(bad[0])
        raise ScoreError(f"{where}: record {i}: sample_id {records.sample_id[i]} is not task "
                         f"{ti[i]}'s scene {ref_ids[ti[i]]}")
    status = records.status
    by_task = np.argsort(ti, kind="stable")
    first_record = np.searchsorted(ti[by_task], np.arange(T + 1))
    per: dict = {}
    rlen = np.full(len(records), -1, np.int64)
    strata = {k: np.empty(T, np.float64) for k in STRATIFIERS}

    # whole chunks per process: a chunk is scored as one batch, as in a single process
    size = chunk or chunk_scenes(int((manifest.get("data") or {}).get("resolution") or 1))
    mine = cluster.chunk_share(T, size)
    at: list = []  # the chunk being scored: (first, last task, first and last scene)

    def score_chunk(first, tasks):
        if first not in mine:
            return  # another process's chunk
        at[:] = [first, first + len(tasks) - 1, tasks[0].id, tasks[-1].id]
        for k, v in _strata(tasks, refs["routes"][first:first + len(tasks)]).items():
            strata[k][first:first + len(tasks)] = v
        idx = np.sort(by_task[first_record[first]:first_record[first + len(tasks)]])
        cands = paths.routes_at(idx)
        res = score_routes(cands, [tasks[j - first] for j in ti[idx]], refs["c_star"][ti[idx]],
                           status[idx] == "ok", references=[refs["routes"][j] for j in ti[idx]],
                           sharding=SCORE_SHARDING)
        for k, v in res.items():
            v = np.asarray(v)
            if v.dtype.kind == "O":
                continue  # why a candidate was malformed: in the run's records already
            if k not in per:
                per[k] = np.zeros(len(records), v.dtype)
            per[k][idx] = v
        # only an exact integer route has a length in cells; a malformed route that still
        # has an (L, 2) shape (float coordinates) is -1 like any other malformed one
        is_int = paths.route_format[idx] == ROUTE_FORMAT_CODE["int"]
        rlen[idx] = np.where(is_int, [0 if c is None else len(c) for c in cands], -1)

    def score_share():
        _tasks, root, shard_hashes = open_run_tasks(manifest, refs, where, dataset_path, score_chunk,
                                                    chunk=chunk)
        return root, shard_hashes

    def describe(e):
        text = str(e) if isinstance(e, ScoreError) else f"{type(e).__name__}: {e}"
        if at and not isinstance(e, ScoreError):
            text = f"{where}: tasks {at[0]}-{at[1]} (scenes {at[2]} to {at[3]}): {text}"
        return text

    if cluster.process_count() == 1:
        root, shard_hashes = score_share()
    else:
        def share():
            root, shard_hashes = score_share()
            lo, hi = first_record[mine.start], first_record[mine.stop]
            idx = np.sort(by_task[lo:hi])
            return {"root": root, "shard_hashes": shard_hashes, "idx": idx, "rlen": rlen[idx],
                    "per": {k: v[idx] for k, v in per.items()},
                    "strata": {k: v[mine.start:mine.stop] for k, v in strata.items()},
                    "tasks": mine}

        shares = cluster.run_share(share, what=f"scoring {where}", error=ScoreError,
                                   describe=describe)
        root, shard_hashes = shares[cluster.process_index()]["root"], shares[0]["shard_hashes"]
        for sh in shares:
            for k, v in sh["per"].items():
                if k not in per:
                    per[k] = np.zeros(len(records), v.dtype)
                per[k][sh["idx"]] = v
            rlen[sh["idx"]] = sh["rlen"]
            for k, v in sh["strata"].items():
                strata[k][sh["tasks"].start:sh["tasks"].stop] = v
    if not per:  # a run without records (no tasks) cannot be scored
        raise ScoreError(f"{where}: no records to score")
    series, repeat = records.series, records.repeat
    qualified = refs["qualified"][ti]

    # per_sample: warm rows (task x repeat), repeat-major
    warm = np.flatnonzero(series == "warm")
    warm = warm[np.lexsort((ti[warm], repeat[warm]))]
    n_rep = len(set(repeat[warm].tolist()))
    if len(warm) != n_rep * T or q_index not in set(repeat[warm].tolist()):
        raise ScoreError(f"{where}: warm records do not form {T} tasks x repeats with quality "
                         f"repeat {q_index}")
    clusters = np.asarray(cluster_ids(ref_npz["tile_json"]), dtype=str)
    lat = records.latency_ms
    fmt = records.route_format
    rows = {
        "metric_contract": np.array(METRIC_CONTRACT),
        "reference_qualified": qualified[warm],
        "sample_id": np.asarray([refs["sample_id"][j] for j in ti[warm]], dtype=str),
        "cluster_id": clusters[ti[warm]],
        "repeat_index": repeat[warm],
        "quality_repeat_index": np.array(q_index, np.int64),  # 0-d: one per file
        "primary_quality": repeat[warm] == q_index,
        "regret": per["regret"][warm].astype(np.float64),
        "assd": per["assd"][warm].astype(np.float64),
        "h95": per["h95"][warm].astype(np.float64),
        "path_iou": per["path_iou"][warm].astype(np.float64),
        "success": per["success"][warm].astype(bool),
        "valid_path": per["valid_path"][warm].astype(bool),
        "connected_path": per["connected_path"][warm].astype(bool),
        "obstacle_violation": per["obstacle_violation"][warm].astype(bool),
        "obstacle_traversals": per["obstacle_traversals"][warm].astype(np.int64),
        "predicted_cost": per["predicted_cost"][warm].astype(np.float64),
        "oracle_cost": refs["c_star"][ti[warm]],
        "latency_ms": lat[warm],
        "status": status[warm],
        "record_index": warm.astype(np.int64),
        "task_index": ti[warm],
        "route_format": fmt[warm],
        "route_length": rlen[warm],
        "malformed": per["malformed"][warm].astype(bool),
        "block_rule": np.array(BLOCK_RULE),
    }
    for k in STRATIFIERS:
        rows[f"stratum_{k}"] = strata[k][ti[warm]]
    rows["route_stage"] = route_stage_column(records.stage_records(warm))

    # quality per pass; headline = quality repeat
    passes = []
    for s in ("cold", "warmup", "warm"):
        for rp in sorted(set(repeat[series == s].tolist())):
            passes.append((s, rp))
    quality = {}
    for s, rp in passes:
        m = (series == s) & (repeat == rp)
        quality[f"{s}#{rp}"] = quality_summary(per, m, qualified)
    headline_mask = (series == "warm") & (repeat == q_index)
    headline = quality[f"warm#{q_index}"]
    # components over the headline's rows: the quality repeat's reference-qualified tasks
    comp_idx = np.flatnonzero(headline_mask & qualified)
    try:
        components = component_summary(records.stage_records(comp_idx),
                                       per["success"][comp_idx].astype(bool))
    except ValueError as e:
        raise ScoreError(f"{where}: {e}") from None

    # latency per series
    latency = {}
    for s in ("cold", "warmup", "warm"):
        idx = np.flatnonzero(series == s)
        if idx.size == 0:
            continue
        latency[s] = series_latency(records.latency_records(idx), per["success"][idx].astype(bool),
                                    warm=(s == "warm" and warmup_declared > 0))
    ok = status == "ok"
    divergence = {
        "status_ok_route_invalid": int(np.sum(ok & ~per["valid_path"].astype(bool))),
        "status_not_ok_route_connected_legal": int(np.sum(
            ~ok & per["connected_path"].astype(bool) & ~per["obstacle_violation"].astype(bool))),
    }
    precisions = sorted(records.precisions)
    status_counts = {}
    for s in ("cold", "warmup", "warm"):
        vals, cnt = np.unique(status[series == s], return_counts=True)
        if len(vals):
            status_counts[s] = {str(v): int(c) for v, c in zip(vals, cnt)}
    metrics = {
        "format": SCORE_FORMAT,
        "metric_contract": METRIC_CONTRACT,
        "method_name": manifest.get("method_name"),
        "seed": manifest.get("seed"),
        "quality_repeat_index": q_index,
        "n_tasks": T,
        "n_reference_qualified": int(refs["qualified"].sum()),
        "primary": {k: headline[k] for k in PRIMARY_METRICS},
        "n_path_valid": headline["n_path_valid"],
        "connected_rate": headline["connected_rate"],
        "mean_traversals_given_violation": headline["mean_traversals_given_violation"],
        "regret_summary": headline["regret_summary"],
        "n_regret_undefined": headline["n_regret_undefined"],
        "quality": headline,
        "quality_by_pass": quality,
        "status_counts": status_counts,
        "status_route_divergence": divergence,
        "latency": latency,
        "latency_warm_quality_repeat": series_latency(
            records.latency_records(np.flatnonzero(headline_mask)),
            per["success"][headline_mask].astype(bool), warm=warmup_declared > 0),
        "block_rule": BLOCK_RULE,
        "block_census": _census(clusters),
        "precision": {"scoring": scoring_precision(),
                      "references": {"path": (manifest.get("references") or {}).get("precision",
                                                                                    "float64"),
                                     "rtol": (manifest.get("references") or {}).get(
                                         "precision_rtol", 1e-12)},
                      "planner_reported": precisions or None},
        "references": {"identity": refs["identity"], "policy": str(ref_npz.get("policy", ""))},
        "timing_profile": timing_profile(manifest),
        "components": components,
    }
    metrics = jsonable(metrics)
    if not cluster.is_writer():
        return metrics  # process 0 writes the files

    atomic_write_npz(folder / "per_sample.npz", rows)
    atomic_write_json(folder / "metrics.json", metrics)
    input_hashes["shards"] = shard_hashes
    receipt = {
        "format": RECEIPT_FORMAT,
        "metric_contract": METRIC_CONTRACT,
        "run_folder": str(folder.resolve()),
        "dataset_root": str(Path(root).resolve()),
        "inputs": input_hashes,
        "outputs": {n: sha256_file(folder / n) for n in ("per_sample.npz", "metrics.json")},
        "evaluator": code_hash(),
        "versions": package_versions(),
        "devices": sharding_devices(SCORE_SHARDING),
        "scored_utc": utc_now(),
        "forced": bool(existing),
    }
    atomic_write_json(folder / "score_receipt.json", receipt)
    return metrics


def _census(clusters) -> dict:
    c = block_census([None if x == UNPLACED else str(x) for x in clusters])
    return jsonable(c)


def scoring_precision() -> dict:
    """What the scoring kernels ran in: float64, or (no float64 on the backend, or
    ``PASSAGE_JAX_NO_X64``) float32 geometry with costs and regret in float64 on the
    host (:func:`passage_jax.metrics.aggregate.precision_statement`)."""
    return jsonable(precision_statement())


def timing_profile(manifest: dict) -> dict:
    """The timing profile of a run: its name (``timing.profile`` in the manifest;
    runs written before it was recorded use this runner's in-process
    complete-request profile) and its timer boundary."""
    t = manifest.get("timing") or {}
    return {"profile": t.get("profile", IN_PROCESS_TIMING_PROFILE),
            "runner_format": manifest.get("format"),
            "timer": t.get("timer")}


def score_run(path, force: bool = False, dataset_path=None, log=None, *,
              chunk: int | None = None) -> dict:
    """Score every seed folder of ``path``; returns {seed folder name: metrics}."""
    out = {}
    folders = seed_folders(path)
    if not force:
        done = [f for f in folders if any((f / n).exists() for n in OUTPUTS)]
        if done:
            raise AlreadyScored(f"{done[0]} is already scored")
    for f in folders:
        out[f.name] = score_folder(f, force=force, dataset_path=dataset_path, chunk=chunk)
        if log:
            log(f"scored {f}")
    return out


def load_score(folder, verify: bool = True) -> dict:
    """Read a scored seed folder: manifest, metrics, receipt and per_sample arrays.
    With ``verify``, the outputs must match the receipt's hashes."""
    folder = Path(folder)
    for n in OUTPUTS:
        if not (folder / n).is_file():
            raise ScoreError(f"{folder} is not scored ({n} missing)")
    receipt = read_json(folder / "score_receipt.json")
    if verify:
        for n, h in receipt.get("outputs", {}).items():
            got = sha256_file(folder / n)
            if got != h:
                raise ScoreOutdated(f"{folder / n}: sha256 {got} differs from the score "
                                    f"receipt's {h}; the folder needs scoring again")
        if sha256_file(folder / "manifest.json") != receipt["inputs"]["manifest.json"]:
            raise ScoreOutdated(f"{folder / 'manifest.json'} changed after scoring; the folder "
                                f"needs scoring again")
    per = load_npz(folder / "per_sample.npz")
    if str(per.get("metric_contract")) != METRIC_CONTRACT:
        raise ScoreError(f"{folder / 'per_sample.npz'}: metric_contract "
                         f"{per.get('metric_contract')!r} is not {METRIC_CONTRACT}")
    return {"folder": folder, "manifest": read_json(folder / "manifest.json"),
            "metrics": read_json(folder / "metrics.json"), "receipt": receipt,
            "per_sample": per}
