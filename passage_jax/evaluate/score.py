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

A seed folder is scored when its ``score_receipt.json`` exists: that is the last file a
score writes (an earlier score's receipt is removed before the new outputs are written), so
outputs left without a receipt by a score that was killed or failed are stale and are
scored again. An existing score (its receipt) is never overwritten unless ``force=True``
(:class:`AlreadyScored` otherwise).

A run folder is scored only when it is finished: ``run.json`` (written last by ``run``)
declares its seeds, and exactly those ``seed-<seed>/`` folders are scored; each one's
manifest must belong to the run (method name, seed, spec hash, code and the run identity
of ``run_started.json``). Anything else is refused by name (:class:`RunIncomplete`,
:class:`ForeignSeed`).
"""
from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path

import numpy as np

from passage_jax import cluster
from passage_jax.contract import IN_PROCESS_TIMING_PROFILE, PRIMARY_METRICS, UNPLACED
from passage_jax.data import DataError, chunk_scenes, open_tasks, resolve_dataset_root, shipped_cohort_root
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
from passage_jax.protocol.contracts import STAGES, STATUSES
from passage_jax.protocol.records import (
    ROUTE_FORMAT_CODE,
    ROUTE_FORMATS,
    RUN_FORMAT,
    PathsReader,
    code_hash,
    input_hash,
    npz_errors,
    open_npz,
    package_versions,
    references_identity,
    unpack_routes,
)
from passage_jax.stats import assign_blocks, block_census

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    "score_run", "score_folder", "load_score", "seed_folders", "timing_profile", "reload_tasks",
    "open_run_tasks", "RecordColumns", "check_record", "RECORD_FIELDS", "is_scored", "check_seed_folder",
    "read_json", "read_doc", "load_npz",
    "ScoreError", "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "RunIncomplete", "ForeignSeed",
    "PER_SAMPLE_FIELDS",
    "PER_SAMPLE_SCALARS", "STRATIFIERS", "METRIC_CONTRACT", "SCORE_FORMAT", "RECEIPT_FORMAT",
    "BLOCK_RULE", "OUTPUTS", "RECEIPT", "RUN_SUMMARY", "RUN_STARTED",
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
#: the file whose presence makes a seed folder scored (written last)
RECEIPT = "score_receipt.json"
#: written last by ``run``: the run is finished; it declares the seeds
RUN_SUMMARY = "run.json"
#: written by ``run`` after admission: the run identity a resume must find unchanged
RUN_STARTED = "run_started.json"
RUN_STARTED_FORMAT = "passage-jax-run-started-v1"
#: the series of the timing passes, as the records name them
SERIES = ("cold", "warmup", "warm")
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


class RunIncomplete(ScoreError):
    """The run folder is not finished (no ``run.json``; still being written, or a seed
    it declares is missing or incomplete)."""


class ForeignSeed(ScoreError):
    """A seed folder does not belong to the run it sits in (its manifest's method name,
    seed, spec hash, code or run identity differ from the run's, or the run does not
    declare it)."""


# --------------------------------------------------------------------------- #
# locating and reading a run
# --------------------------------------------------------------------------- #

def seed_folders(path) -> list[Path]:
    """The seed folders of ``path``: itself when it holds a ``manifest.json`` (checked
    against its parent run when the parent holds one), else the ``seed-<seed>/`` folders
    that the run's ``run.json`` declares, in seed order, each checked to belong to the
    run (:func:`check_seed_folder`). A run folder without ``run.json``, a declared seed
    whose folder or manifest is missing, and a ``seed-*`` folder the run does not declare
    are refused by name (:class:`RunIncomplete`, :class:`ForeignSeed`)."""
    path = Path(path)
    if not path.is_dir():
        raise ScoreError(f"{path}: not a folder")
    if (path / "manifest.json").is_file():
        check_seed_folder(path)
        return [path]
    run = _run_records(path)
    seeds = run["seeds"]
    folders = []
    for seed in seeds:
        folder = path / f"seed-{seed}"
        if not folder.is_dir():
            raise RunIncomplete(f"{folder}: not found, but {path / RUN_SUMMARY} declares seed {seed} "
                                f"(seeds {seeds}){_partial_note(path, seed)}; rebuild it with "
                                f"`run --resume`")
        if not (folder / "manifest.json").is_file():
            raise RunIncomplete(f"{folder / 'manifest.json'}: file not found: seed {seed} of the run "
                                f"is incomplete{_partial_note(path, seed)}; rebuild it with "
                                f"`run --resume`")
        _check_manifest(folder, read_json(folder / "manifest.json"), run, seed)
        folders.append(folder)
    extra = sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.startswith("seed-")
                   and p.name not in {f.name for f in folders})
    if extra:
        raise ForeignSeed(f"{path / extra[0]}: not a seed of this run ({path / RUN_SUMMARY} declares "
                          f"seeds {seeds}); move it out of the run folder")
    return sorted(folders, key=lambda f: int(f.name[5:]))


def _partial_note(path: Path, seed=None) -> str:
    names = [f".seed-{seed}.partial"] if seed is not None else []
    partial = [n for n in names if (path / n).exists()]
    return f" ({path / partial[0]} exists: the seed is still being written or was interrupted)" \
        if partial else ""


def _run_records(path: Path) -> dict:
    """``run.json`` of a finished run folder (and its ``run_started.json`` when present),
    checked; :class:`RunIncomplete` naming what is missing otherwise."""
    summary = path / RUN_SUMMARY
    if not summary.is_file():
        partial = sorted(p.name for p in path.glob(".seed-*.partial"))
        started = (path / RUN_STARTED).is_file()
        seeds = sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.startswith("seed-"))
        if started or partial:
            what = ", ".join(([RUN_STARTED] if started else []) + partial)
            raise RunIncomplete(f"{summary}: file not found: the run is unfinished or still being "
                                f"written ({what} present); let it finish, or finish it with "
                                f"`run --resume`")
        if seeds:
            raise RunIncomplete(f"{summary}: file not found: {path} holds {', '.join(seeds[:3])} but "
                                f"the run did not finish (run.json is written last); finish it with "
                                f"`run --resume`, or score one seed folder directly")
        raise ScoreError(f"{path}: neither a seed folder (manifest.json) nor a run folder "
                         f"({RUN_SUMMARY} with seed-<seed>/ subfolders)")
    run = read_json(summary, RunIncomplete)
    if run.get("format") != RUN_FORMAT:
        raise RunIncomplete(f"{summary}: format {run.get('format')!r} is not {RUN_FORMAT}")
    _typed(run, "method_name", str, summary)
    _typed(run, "spec_sha256", str, summary)
    seeds = _typed(run, "seeds", list, summary)
    if not seeds or not all(_is_int(x) for x in seeds) or len(set(seeds)) != len(seeds):
        raise RunIncomplete(f"{summary}: seeds must be a non-empty list of distinct integers, got "
                            f"{_short(seeds)}")
    out = {"where": str(summary), "method_name": run["method_name"],
           "spec_sha256": run["spec_sha256"], "seeds": [int(x) for x in seeds],
           "code_sha256": (run.get("code") or {}).get("sha256") if isinstance(run.get("code"), dict)
           else None, "identity": None}
    started = path / RUN_STARTED
    if started.is_file():
        st = read_json(started, RunIncomplete)
        if st.get("format") != RUN_STARTED_FORMAT:
            raise RunIncomplete(f"{started}: format {st.get('format')!r} is not {RUN_STARTED_FORMAT}")
        for k in ("method_name", "spec_sha256", "seeds"):
            if st.get(k) != run.get(k):
                raise ForeignSeed(f"{summary}: {k} {_short(run.get(k))} differs from {started}'s "
                                  f"{_short(st.get(k))}; the two records are of different runs")
        out["identity"] = _typed(st, "identity", dict, started)
        out["identity_where"] = str(started)
    return out


def _parent_run(folder: Path) -> dict | None:
    """The run records of the folder holding seed folder ``folder``, or None when that
    folder holds no ``run.json`` (a seed folder on its own)."""
    parent = folder.resolve().parent
    if not (parent / RUN_SUMMARY).is_file():
        return None
    return _run_records(parent)


def check_seed_folder(folder) -> dict:
    """The manifest of seed folder ``folder``, checked against its parent run when the
    parent holds a ``run.json`` (:class:`ForeignSeed` naming the field otherwise)."""
    folder = Path(folder)
    manifest = read_json(folder / "manifest.json")
    run = _parent_run(folder)
    if run is not None:
        seed = folder.name[5:] if folder.name.startswith("seed-") else None
        if seed is None or not seed.lstrip("-").isdigit():
            raise ForeignSeed(f"{folder}: a seed folder of the run in {folder.resolve().parent} must be "
                              f"named seed-<seed>")
        if int(seed) not in run["seeds"]:
            raise ForeignSeed(f"{folder}: not a seed of this run ({run['where']} declares seeds "
                              f"{run['seeds']})")
        _check_manifest(folder, manifest, run, int(seed))
    return manifest


#: (field, its path in the manifest, its path in the run identity of run_started.json)
#: checked for every seed folder of a run
_IDENTITY_FIELDS = (
    ("data.sample_ids", ("data", "sample_ids"), ("data", "sample_ids")),
    ("data.tasks_sha256", ("data", "tasks_sha256"), ("data", "tasks_sha256")),
    ("data.shards", ("data", "shards"), ("data", "shards")),
    ("references.identity", ("references", "identity"), ("references", "identity")),
    ("references.policy", ("references", "policy"), ("references", "policy")),
    ("planner.module_sha256", ("planner", "module_sha256"), ("planner", "module_sha256")),
    ("planner.qualname", ("planner", "qualname"), ("planner", "qualname")),
    ("code.sha256", ("code", "sha256"), ("code_sha256",)),
)


def _check_manifest(folder: Path, manifest: dict, run: dict, seed: int) -> None:
    """The seed folder's manifest must be the run's: seed, method name, spec hash, code
    and the fields of the run identity (:data:`_IDENTITY_FIELDS`)."""
    where = folder / "manifest.json"
    got = manifest.get("seed")
    if not _is_int(got) or int(got) != seed:
        raise ForeignSeed(f"{where}: seed {_short(got)} is not the folder's seed {seed}; the folder "
                          f"does not belong to this run")
    for k, label in (("method_name", "method_name"), ("spec_sha256", "spec_sha256")):
        if manifest.get(k) != run[k]:
            raise ForeignSeed(f"{where}: {label} {_short(manifest.get(k))} differs from the run's "
                              f"{_short(run[k])} ({run['where']}); the seed folder does not belong "
                              f"to this run")
    if run.get("code_sha256") is not None and _dig(manifest, "code", "sha256") != run["code_sha256"]:
        raise ForeignSeed(f"{where}: code.sha256 {_short(_dig(manifest, 'code', 'sha256'))} differs from "
                          f"the run's {_short(run['code_sha256'])} ({run['where']}); the seed folder "
                          f"does not belong to this run")
    ident = run.get("identity")
    if ident is None:
        return
    for label, in_manifest, in_identity in _IDENTITY_FIELDS:
        mine, theirs = _dig(manifest, *in_manifest), _dig(ident, *in_identity)
        if label == "data.shards":
            mine, theirs = _shards(mine), _shards(theirs)
        if theirs is not None and mine != theirs:
            raise ForeignSeed(f"{where}: {label} {_short(mine)} differs from the run identity's "
                              f"{_short(theirs)} ({run['identity_where']}); the seed folder does not "
                              f"belong to this run")


def _dig(doc, *keys):
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _shards(shards):
    if not isinstance(shards, list):
        return shards
    return sorted((str(_dig(s, "name")), str(_dig(s, "sha256"))) for s in shards)


def _short(v) -> str:
    t = json.dumps(v, sort_keys=True, default=str)
    return t if len(t) <= 80 else t[:77] + "..."


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _typed(doc: dict, key: str, kind, where, error=ScoreError):
    """``doc[key]``, which must be of type ``kind`` (``int``: an integer, not a bool;
    ``float``: any real number, not a bool); ``error`` naming the file and field otherwise."""
    if key not in doc:
        raise error(f"{where}: field {key!r} is missing")
    v = doc[key]
    ok = _is_int(v) if kind is int else _is_number(v) if kind is float else isinstance(v, kind)
    if not ok:
        name = kind.__name__ if kind not in (int, float) else "an integer" if kind is int else "a number"
        raise error(f"{where}: field {key!r} must be {name}, got {type(v).__name__} {_short(v)}")
    return v


def is_scored(folder) -> bool:
    """Whether seed folder ``folder`` is scored: its ``score_receipt.json`` exists (the
    receipt is written last; outputs without one are a score that did not finish)."""
    return (Path(folder) / RECEIPT).exists()


def read_doc(path, error=ScoreError, label: str = "", yaml_allowed: bool = False):
    """:func:`passage_jax.fileio.read_document`, a file that is not UTF-8 text also raising
    ``error`` naming it."""
    p = Path(path)
    where = f"{label} {p}" if label else str(p)
    try:
        return read_document(p, error, label, yaml_allowed=yaml_allowed)
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path, error=ScoreError, label: str = "") -> dict:
    """A JSON object file; ``error`` naming the file when it is missing, not UTF-8, not
    JSON or not an object."""
    doc = read_doc(path, error, label)
    if not isinstance(doc, dict):
        where = f"{label} {Path(path)}" if label else str(Path(path))
        raise error(f"{where}: not a JSON object (got {type(doc).__name__})")
    return doc


def load_npz(path) -> dict:
    """Every array of an ``.npz`` (``allow_pickle=False``); :class:`ScoreError` naming
    the file (and the member) when it cannot be read."""
    out = {}
    try:
        with npz_errors(path, error=ScoreError), open_npz(path, ScoreError) as z:
            for k in z.files:
                with npz_errors(path, k, error=ScoreError):
                    out[k] = z[k]
    except OSError as e:
        raise ScoreError(f"{path}: cannot read: {e}") from None
    return out


def verify_run_files(folder: Path, manifest: dict) -> dict:
    """Check the run files against the hashes in the manifest; returns them."""
    recorded = manifest.get("files") or {}
    if not isinstance(recorded, dict):
        raise ScoreError(f"{folder / 'manifest.json'}: field 'files' must be an object of sha256 "
                         f"hashes, got {type(recorded).__name__}")
    hashes = {}
    for name in RUN_INPUTS:
        p = folder / name
        if not p.is_file():
            raise ScoreError(f"{p}: file not found")
        h = sha256_file(p)
        if not isinstance(recorded.get(name), str):
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

def _candidate_root(c) -> Path:
    """A dataset root as given: ``"shipped"`` names the cohort shipped in the package
    (:func:`passage_jax.data.shipped_cohort_root`), as in a run spec's ``dataset_path``."""
    return shipped_cohort_root() if str(c) == "shipped" else Path(c).expanduser()


def dataset_root(manifest: dict, override=None) -> Path:
    """The dataset root to reload the scenes from: ``override`` when given, else the
    run's recorded root, else its ``dataset_path`` (``"shipped"`` resolved), else the
    run's pinned hub snapshot; :class:`DatasetNotFound` when none is there."""
    data = manifest.get("data") or {}
    cands = [override] if override is not None else [data.get("dataset_root"),
                                                     data.get("dataset_path")]
    for c in cands:
        if c and isinstance(c, (str, Path)) and _candidate_root(c).is_dir():
            return _candidate_root(c)
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
    if not isinstance(data, dict):
        raise ScoreError(f"{where}: manifest field 'data' must be an object, got {type(data).__name__}")
    for k in ("resolution", "split", "cost_model", "task_variant", "shards", "sample_ids"):
        if k not in data:
            raise ScoreError(f"{where}: manifest data.{k} is missing")
    _check_data_fields(data, where)
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


def _check_data_fields(data: dict, where: str) -> None:
    """The manifest's ``data`` fields that reloading the scenes reads, of their types."""
    kinds = {"resolution": (_is_int, "an integer"), "split": (lambda v: isinstance(v, str), "a string"),
             "cost_model": (lambda v: isinstance(v, str), "a string"),
             "task_variant": (lambda v: isinstance(v, str), "a string"),
             "n_samples": (lambda v: v is None or _is_int(v), "an integer or null"),
             "sample_ids": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                            "a list of strings"),
             "shards": (lambda v: isinstance(v, list) and all(
                 isinstance(x, dict) and isinstance(x.get("name"), str) and isinstance(x.get("sha256"), str)
                 for x in v), "a list of {name, sha256} objects")}
    for k, (ok, what) in kinds.items():
        if k in data and not ok(data[k]):
            raise ScoreError(f"{where}: manifest data.{k} must be {what}, got {_short(data[k])}")


def reload_tasks(manifest: dict, refs: dict, where: str, dataset_path=None) -> tuple:
    """Tasks of the run in memory, reloaded and checked; returns (tasks, root, shard
    hashes). For a few tasks (figures); scoring streams them (:func:`open_run_tasks`)."""
    tasks, root, shard_hashes = open_run_tasks(manifest, refs, where, dataset_path)
    return list(tasks), root, shard_hashes


def _is_index(v) -> bool:
    return _is_int(v) and -(2 ** 62) < v < 2 ** 62


def _is_number_or_none(v) -> bool:
    return v is None or _is_number(v)


def _is_counters(v) -> bool:
    return v is None or (isinstance(v, dict) and all(_is_number_or_none(x) for x in v.values()))


def _is_stage_counters(v) -> bool:
    return v is None or (isinstance(v, dict) and all(_is_counters(x) for x in v.values()))


#: requests.jsonl fields that scoring reads: (field, required, check, what it must be)
RECORD_FIELDS = (
    ("record", True, _is_index, "an integer"),
    ("series", True, lambda v: isinstance(v, str) and v in SERIES, f"one of {list(SERIES)}"),
    ("repeat", True, _is_index, "an integer"),
    ("task_index", True, _is_index, "an integer"),
    ("sample_id", True, lambda v: isinstance(v, str), "a string"),
    ("status", True, lambda v: isinstance(v, str) and v in STATUSES, f"one of {list(STATUSES)}"),
    ("latency_ms", False, _is_number_or_none, "a number or null"),
    ("deadline_ms", False, _is_number_or_none, "a number or null"),
    ("route_format", False, lambda v: v is None or (isinstance(v, str) and v in ROUTE_FORMATS.values()),
     f"one of {list(ROUTE_FORMATS.values())} or null"),
    ("route_stage", False, lambda v: v is None or (isinstance(v, str) and v in STAGES),
     f"one of {list(STAGES)} or null"),
    ("precision", False, lambda v: v is None or isinstance(v, str), "a string or null"),
    ("work", False, _is_counters, "a mapping of counters (numbers or null) or null"),
    ("stage_work", False, _is_stage_counters,
     "a mapping of stages to mappings of counters (numbers or null) or null"),
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
                             f"{type(rec[k]).__name__} {_short(rec[k])}")
    return rec


def _record_lines(path):
    """(line number, parsed record) of every non-blank line of ``requests.jsonl``."""
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


class RecordColumns:
    """The fields of ``requests.jsonl`` that scoring uses, held as columns (a few tens of
    bytes per record, whatever the number of passes): record, series, repeat, task index,
    sample id, status, latency, deadline, route format and stage, and the planner's
    reported precisions; the ``work`` and ``stage_work`` of the headline quality
    repeat's records only (the components block reads those). Every record is checked
    (:func:`check_record`)."""

    def __init__(self, path, where: str, quality_repeat: int):
        cols: dict[str, list] = {k: [] for k in ("record", "series", "repeat", "task_index",
                                                  "sample_id", "status", "latency_ms",
                                                  "deadline_ms", "route_format", "route_stage")}
        self.work: dict[int, dict] = {}
        self.precisions: set = set()
        for _line_no, rec in _record_lines(path):
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
    existed = is_scored(folder)
    if existed and not force:
        raise AlreadyScored(f"{where} is already scored ({RECEIPT} exists)")
    if not (folder / "manifest.json").is_file():
        raise ScoreError(f"{folder / 'manifest.json'}: file not found: {where} is not a seed folder "
                         f"of a finished run")
    manifest = check_seed_folder(folder)
    input_hashes = {"manifest.json": sha256_file(folder / "manifest.json")}
    q_index, warmup_declared = _manifest_timing(manifest, folder / "manifest.json")
    input_hashes.update(verify_run_files(folder, manifest))
    records = RecordColumns(folder / "requests.jsonl", where, q_index)
    try:
        paths = PathsReader(folder / "paths.npz")
    except (KeyError, ValueError, OSError) as e:
        text = str(e)
        raise ScoreError(text if str(folder / "paths.npz") in text else f"{folder / 'paths.npz'}: {text}") \
            from None
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
    try:
        clusters = np.asarray(cluster_ids(ref_npz["tile_json"]), dtype=str)
    except (ValueError, TypeError, AttributeError) as e:
        raise ScoreError(f"{folder / 'references.npz'} (member 'tile_json'): not the JSON tiles of "
                         f"the tasks ({type(e).__name__}: {e})") from None
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

    # the receipt is written last, and an earlier one removed first: a score stopped
    # anywhere in between leaves the folder not scored (and scored again without --force)
    (folder / RECEIPT).unlink(missing_ok=True)
    _fsync_dir(folder)
    atomic_write_npz(folder / "per_sample.npz", rows)
    atomic_write_json(folder / "metrics.json", metrics)
    _fsync_dir(folder)
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
        "forced": bool(existed),
    }
    atomic_write_json(folder / "score_receipt.json", receipt)
    return metrics


def _fsync_dir(folder: Path) -> None:
    """Make the renames and removals in ``folder`` durable (in the order they were made)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _manifest_timing(manifest: dict, where) -> tuple[int, int]:
    """The quality repeat index and the number of warm-up passes the run declared
    (``timing``, else ``spec``), checked to be integers."""
    timing = manifest.get("timing") if isinstance(manifest.get("timing"), dict) else {}
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    out = []
    for k in ("quality_repeat_index", "latency_warmup"):
        src, name = (timing, f"timing.{k}") if k in timing else (spec, f"spec.{k}")
        if k not in src:
            raise ScoreError(f"{where}: field timing.{k} (or spec.{k}) is missing")
        if not _is_int(src[k]) or src[k] < 0:
            raise ScoreError(f"{where}: field {name} must be a non-negative integer, got "
                             f"{_short(src[k])}")
        out.append(int(src[k]))
    return out[0], out[1]


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
    """Score every seed folder of ``path`` (:func:`seed_folders`: exactly the seeds its
    ``run.json`` declares, each checked to belong to the run); returns {seed folder name:
    metrics}.

    A seed folder is scored when its ``score_receipt.json`` exists (:func:`is_scored`).
    Without ``force``: when every seed is scored, :class:`AlreadyScored`; otherwise the
    seeds without a receipt are scored (outputs a stopped score left behind are replaced)
    and the scored ones are kept, their outputs verified against their receipts
    (:func:`load_score`, :class:`ScoreOutdated` when they no longer match)."""
    out = {}
    folders = seed_folders(path)
    done = [] if force else [f for f in folders if is_scored(f)]
    if done and len(done) == len(folders):
        raise AlreadyScored(f"{done[0]} is already scored ({RECEIPT} exists)")
    for f in folders:
        if f in done:
            out[f.name] = load_score(f)["metrics"]
            if log:
                log(f"kept {f} (already scored)")
            continue
        out[f.name] = score_folder(f, force=force, dataset_path=dataset_path, chunk=chunk)
        if log:
            log(f"scored {f}")
    return out


#: metrics.json fields that compare, report and trust read: (field, check, what)
_METRICS_FIELDS = (
    ("format", lambda v: v == SCORE_FORMAT, f"{SCORE_FORMAT!r}"),
    ("primary", lambda v: isinstance(v, dict) and all(
        k in v and _is_number_or_none(v[k]) for k in PRIMARY_METRICS),
     f"an object of the six primary metrics {list(PRIMARY_METRICS)} (numbers or null)"),
    ("n_tasks", _is_int, "an integer"),
    ("n_path_valid", _is_int, "an integer"),
    ("connected_rate", _is_number_or_none, "a number or null"),
    ("mean_traversals_given_violation", _is_number_or_none, "a number or null"),
    ("regret_summary", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("status_counts", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("latency", lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(x, dict) for x in v.values())), "an object of series objects or null"),
    ("latency_warm_quality_repeat", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("components", lambda v: v is None or _is_components(v),
     "a passage-components-v1 object (n_rows, rates, work and stage_work counters) or null"),
    ("timing_profile", lambda v: v is None or isinstance(v, dict), "an object or null"),
)


def _is_counter_summary(v) -> bool:
    return (isinstance(v, dict) and _is_number_or_none(v.get("median")) and _is_number_or_none(v.get("p90"))
            and _is_int(v.get("n_reported", 0)))


def _is_components(c) -> bool:
    """The structure of a ``components`` block that compare, report and the attribution
    table read (:func:`passage_jax.evaluate.components.component_summary`)."""
    if not isinstance(c, dict) or not _is_int(c.get("n_rows")):
        return False
    rates = ("direct_success_rate", "repair_rate", "fallback_rate", "no_route_stage_rate",
             "fallback_frequency")
    if not all(_is_number_or_none(c.get(k)) for k in rates):
        return False
    work, stage_work = c.get("work", {}), c.get("stage_work", {})
    if not isinstance(work, dict) or not all(_is_counter_summary(v) for v in work.values()):
        return False
    return isinstance(stage_work, dict) and all(
        isinstance(sw, dict) and _is_int(sw.get("n_rows_ran", 0))
        and all(_is_counter_summary(v) for k, v in sw.items() if k != "n_rows_ran")
        for sw in stage_work.values())
#: manifest.json fields that compare, report and trust read
_MANIFEST_FIELDS = (
    ("seed", _is_int, "an integer"),
    ("method_name", lambda v: v is None or isinstance(v, str), "a string"),
    ("data", lambda v: isinstance(v, dict), "an object"),
    ("references", lambda v: v is None or isinstance(v, dict), "an object"),
    ("timing", lambda v: v is None or isinstance(v, dict), "an object"),
    ("budget", lambda v: v is None or isinstance(v, dict), "an object"),
    ("provenance", lambda v: v is None or isinstance(v, dict), "an object"),
)


def _check_fields(doc: dict, fields, where, required: bool = True) -> None:
    for k, ok, what in fields:
        if k not in doc:
            if required:
                raise ScoreError(f"{where}: field {k!r} is missing")
            continue
        if not ok(doc[k]):
            raise ScoreError(f"{where}: field {k!r} must be {what}, got {_short(doc[k])}")


def _check_per_sample(per: dict, where) -> None:
    """Every per_sample.npz row field and scalar present, the rows one-dimensional and of
    one length, the scalars 0-d."""
    missing = [k for k in (*PER_SAMPLE_FIELDS, *PER_SAMPLE_SCALARS) if k not in per]
    if missing:
        raise ScoreError(f"{where}: missing arrays {missing}")
    if np.ndim(per["sample_id"]) != 1:
        raise ScoreError(f"{where}: member 'sample_id' is not one-dimensional")
    n = len(per["sample_id"])
    bad = [k for k in PER_SAMPLE_FIELDS if np.shape(per[k]) != (n,)]
    if bad:
        raise ScoreError(f"{where}: member {bad[0]!r} has shape {np.shape(per[bad[0]])}, not ({n},) "
                         f"like the other row fields")
    scalars = [k for k in PER_SAMPLE_SCALARS if np.ndim(per[k]) != 0]
    if scalars:
        raise ScoreError(f"{where}: member {scalars[0]!r} is not a 0-d array")


def load_score(folder, verify: bool = True) -> dict:
    """Read a scored seed folder: manifest, metrics, receipt and per_sample arrays.

    A folder is scored when its ``score_receipt.json`` exists, as for ``score``
    (:func:`is_scored`); without it the folder is not scored (whatever other outputs a
    stopped score left). With ``verify``, the outputs and the manifest must match the
    receipt's hashes (:class:`ScoreOutdated` otherwise). Every file must be readable and of
    the structure compare, report and trust read (:class:`ScoreError` naming the file and
    field otherwise)."""
    folder = Path(folder)
    if not is_scored(folder):
        raise ScoreError(f"{folder} is not scored ({RECEIPT} missing)")
    receipt = read_json(folder / RECEIPT)
    outputs, inputs = receipt.get("outputs"), receipt.get("inputs")
    if not isinstance(outputs, dict) or not all(isinstance(v, str) for v in outputs.values()):
        raise ScoreError(f"{folder / RECEIPT}: field 'outputs' must be an object of sha256 hashes")
    if not isinstance(inputs, dict) or not isinstance(inputs.get("manifest.json"), str):
        raise ScoreError(f"{folder / RECEIPT}: field 'inputs' must be an object with the sha256 of "
                         f"manifest.json")
    for n in OUTPUTS:
        if not (folder / n).is_file():
            raise ScoreOutdated(f"{folder} is not scored completely ({n} missing, {RECEIPT} "
                                f"present); the folder needs scoring again")
    if verify:
        for n, h in outputs.items():
            got = sha256_file(folder / n)
            if got != h:
                raise ScoreOutdated(f"{folder / n}: sha256 {got} differs from the score "
                                    f"receipt's {h}; the folder needs scoring again")
        if sha256_file(folder / "manifest.json") != inputs["manifest.json"]:
            raise ScoreOutdated(f"{folder / 'manifest.json'} changed after scoring; the folder "
                                f"needs scoring again")
    per = load_npz(folder / "per_sample.npz")
    if str(per.get("metric_contract")) != METRIC_CONTRACT:
        raise ScoreError(f"{folder / 'per_sample.npz'}: metric_contract "
                         f"{per.get('metric_contract')!r} is not {METRIC_CONTRACT}")
    _check_per_sample(per, folder / "per_sample.npz")
    manifest = read_json(folder / "manifest.json")
    _check_fields(manifest, _MANIFEST_FIELDS[:1], folder / "manifest.json")
    _check_fields(manifest, _MANIFEST_FIELDS[1:], folder / "manifest.json", required=False)
    _check_data_fields(manifest.get("data") or {}, str(folder / "manifest.json"))
    metrics = read_json(folder / "metrics.json")
    _check_fields(metrics, _METRICS_FIELDS[:7], folder / "metrics.json")
    _check_fields(metrics, _METRICS_FIELDS[7:], folder / "metrics.json", required=False)
    return {"folder": folder, "manifest": manifest, "metrics": metrics, "receipt": receipt,
            "per_sample": per}
