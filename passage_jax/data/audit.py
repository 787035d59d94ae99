"""Dataset audit: validate every scene of a dataset root and summarise it (contract §1, §3, §5).

Per resolution and split: scene counts; every scene valid or not (the first error
of each failing scene, naming file, row and id); obstacle coverage and released
route lengths (cells) as min/median/max; the block census under both block rules
of contract §5 (computed over the valid scenes of the split); and, with ``qualify``,
reference qualification of every valid scene's six tasks (contract §3: value
iteration cross-checked by A*, released route legal and optimal).

Qualification is bounded by default: the A* cross-check of each task gets an
expansion budget (:data:`DEFAULT_EXPANSIONS_PER_CELL` x N², see
:func:`resolve_budget`) and value iteration its sweep budget. A task whose solve
runs out is *censored*: neither qualified nor a failure, counted and listed apart
from the unqualified tasks. Valid scenes are qualified in chunks of a few scenes
(one batched value-iteration call per chunk, :func:`chunk_scenes`) as the scan
streams them; a chunk's grids are dropped once its facts are recorded, so memory
stays bounded whatever the number of scenes.

:func:`audit_dataset` returns the facts as one JSON-ready dict
(``{"scenes": [...], "summary": {...}}``, NaN written as ``None``); a layout problem
(missing root, resolution or split folder, unknown split) raises
:class:`~passage_jax.data.validate.DataError`. Row problems never raise: they are
the audit's findings.
"""
from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pyarrow.parquet as pq

from passage_jax import cluster
from passage_jax.checks import is_int
from passage_jax.data.reader import (
    DECODE_WORKERS,
    READ_ERRORS,
    dataset_root,
    id_places,
    present_splits,
    scan_split,
    scene_summary,
    shard_files,
)
from passage_jax.data.scene import canonical_split
from passage_jax.data.validate import DataError
from passage_jax.fileio import jsonable
from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.reference import TASK_KEYS, qualify_scenes
from passage_jax.reference.qualify import DEFAULT_MAX_SWEEPS
from passage_jax.stats.blocks import BLOCK_RULES, assign_blocks, block_census

__all__ = [
    "DEFAULT_EXPANSIONS_PER_CELL", "CHUNK_CELLS", "MAX_CHUNK_SCENES", "audit_dataset",
    "chunk_scenes", "qualify_chunk", "qualify_scene_tasks", "resolve_budget", "summary3",
]

#: Default A* cross-check budget per task, in expansions per grid cell (N x N grid).
#: A* with its consistent heuristic expands a cell at most once (reopening only on a
#: last-ulp inconsistency), so a regular solve never needs more than N² expansions;
#: the budget caps a pathological one.
DEFAULT_EXPANSIONS_PER_CELL = 1
#: Grid cells (tasks x N²) qualified together in one chunk: one value-iteration batch.
CHUNK_CELLS = 1 << 22
#: Most scenes in one chunk.
MAX_CHUNK_SCENES = 64


def summary3(values) -> dict | None:
    """min / median / max (NumPy's linear median) of ``values``, or None when empty."""
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())}


def resolve_budget(budget, resolution: int) -> int | None:
    """The A* expansion budget per task at ``resolution``: ``"default"`` is
    ``DEFAULT_EXPANSIONS_PER_CELL * N²``, an int is taken as given (at least 1),
    ``None`` is unbounded."""
    if budget is None:
        return None
    if isinstance(budget, str):
        if budget != "default":
            raise ValueError(f"audit budget must be 'default', a positive integer or None, "
                             f"got {budget!r}")
        return max(1, int(DEFAULT_EXPANSIONS_PER_CELL * int(resolution) ** 2))
    if not is_int(budget) or budget < 1:
        raise ValueError(f"audit budget must be 'default', a positive integer or None, "
                         f"got {budget!r}")
    return int(budget)


def chunk_scenes(resolution: int) -> int:
    """Scenes qualified together at ``resolution``: ``CHUNK_CELLS`` grid cells of
    tasks, at least 1 and at most ``MAX_CHUNK_SCENES`` scenes."""
    per_scene = len(TASK_KEYS) * int(resolution) ** 2
    return max(1, min(MAX_CHUNK_SCENES, CHUNK_CELLS // per_scene))


def qualify_chunk(scenes, max_expansions=None) -> list[dict]:
    """Per scene, ``{"<objective>/<variant>": Qualification.to_dict()}``: value
    iteration batched over every task of ``scenes``, cross-checked by the
    independent A* within ``max_expansions`` per task (None: unbounded); a solve
    that runs out of its budget censors the task (contract §3)."""
    scenes = list(scenes)
    if not scenes:
        return []
    quals = qualify_scenes(scenes, max_expansions=max_expansions, cross_check=True,
                           censor=True, batch_size=len(TASK_KEYS) * len(scenes))
    return [{k: q.to_dict() for k, q in d.items()} for d in quals]


def qualify_scene_tasks(scene, max_expansions=None) -> dict:
    """:func:`qualify_chunk` of one scene."""
    return qualify_chunk([scene], max_expansions)[0]


class _Chunks:
    """Collects valid scenes as the scan hands them over (from its decode threads)
    and qualifies them ``size`` at a time, writing each scene's result into its
    facts dict; a qualified chunk's scenes are released."""

    def __init__(self, size: int, max_expansions):
        self.size, self.max_expansions = size, max_expansions
        self.pending: list = []
        self.lock = threading.Lock()

    def add(self, scene, info: dict) -> None:
        with self.lock:
            self.pending.append((scene, info))
            if len(self.pending) >= self.size:
                self._run()

    def flush(self) -> None:
        with self.lock:
            self._run()

    def _run(self) -> None:
        chunk, self.pending = self.pending, []
        for (_, info), refs in zip(chunk, qualify_chunk([s for s, _ in chunk],
                                                        self.max_expansions)):
            info["references"] = refs


def _row_offsets(root, n: int, split: str) -> tuple[dict, int]:
    """Per shard file (as the scan names it), the split-wide index of its row 0, and the
    rows of the split (from the Parquet footers; an unreadable file counts no rows: its
    rows never reach qualification)."""
    offsets, total = {}, 0
    for path in shard_files(root, n, split):
        offsets[str(path)] = total
        try:
            total += int(pq.ParquetFile(path).metadata.num_rows)
        except READ_ERRORS:
            pass
    return offsets, total


def _chosen_splits(root, n: int, splits) -> list[str]:
    """The requested splits in canonical form, or every split folder present."""
    if splits is None:
        chosen = present_splits(root, n)
        if not chosen:
            raise DataError(f"{root / f'{n}x{n}'} holds no split folders")
        return chosen
    try:
        return list(dict.fromkeys(canonical_split(s) for s in splits))
    except ValueError as e:
        raise DataError(str(e)) from None


def _scene_entry(r, n: int, split: str, blocks: dict) -> dict:
    """One row of ``scenes``: where the row lives, its verdict and its facts."""
    entry = {
        "id": r.id if isinstance(r.id, str) else (None if r.id is None else repr(r.id)),
        "resolution": n, "split": split, "file": r.file, "row": r.row,
        "valid": r.valid, "error": r.error, "blocks": blocks,
    }
    if r.valid:
        entry["obstacle_coverage"] = r.info["obstacle_coverage"]
        entry["route_cells"] = r.info["route_cells"]
        entry["markers"] = r.info["markers"]
        if "references" in r.info:
            entry["references"] = r.info["references"]
    return entry


def _split_summary(reports: list, valid: list, labels: dict, qualify: bool) -> dict:
    """Counts, coverage and route-length summaries, block census and qualification
    counts of one split."""
    route_cells = {
        f"{o}/{v}": summary3([r.info["route_cells"][f"{o}/{v}"] for r in valid])
        for o in OBJECTIVES for v in VARIANTS
    }
    s = {
        "n_scenes": len(reports),
        "n_valid": len(valid),
        "n_invalid": len(reports) - len(valid),
        "obstacle_coverage": summary3([r.info["obstacle_coverage"] for r in valid]),
        "route_cells": route_cells,
        "blocks": {rule: block_census(labels[rule]) for rule in BLOCK_RULES},
    }
    if qualify:
        quals = [q for r in valid for q in r.info["references"].values()]
        s["qualification"] = {
            "n_tasks": len(quals),
            "n_qualified": sum(bool(q.get("qualified")) for q in quals),
            "n_censored": sum(bool(q.get("censored")) for q in quals),
            "n_scenes_qualified": sum(
                all(q.get("qualified") for q in r.info["references"].values()) for r in valid),
        }
    return s


def _censored_entry(e: dict, task: str, q: dict, max_expansions) -> dict:
    """Where a censored task is and which budget its solve ran out of."""
    by_vi = q.get("censored_by") == q.get("solver")
    return {"id": e["id"], "resolution": e["resolution"], "split": e["split"], "task": task,
            "solver": q.get("censored_by"),
            "budget": DEFAULT_MAX_SWEEPS if by_vi else max_expansions,
            "work": q.get("work") if by_vi else q.get("cross_work"),
            "work_unit": "sweeps" if by_vi else "expansions"}


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How the audit scans and qualifies: decode ``workers``, whether to ``qualify``, the
    ``budget`` as given and the A* expansion budget it makes per resolution (``budgets``),
    and the scenes qualified together (``chunk_size``; None: :func:`chunk_scenes`)."""

    workers: int
    qualify: bool
    budget: object
    budgets: dict
    chunk_size: int | None

    def size(self, n: int) -> int:
        return self.chunk_size or chunk_scenes(n)

    def max_expansions(self, n: int) -> int | None:
        return self.budgets[int(n)]


@dataclasses.dataclass(frozen=True)
class _SplitAudit:
    """One split's share of the audit: its ``scenes`` entries, its censored tasks and its
    summary."""

    entries: list
    censored: list
    summary: dict


def _scan(root, n: int, split: str, index: dict, plan: _Plan) -> list:
    """Row reports of one split; with ``plan.qualify``, each valid scene's info gains its
    ``references`` (this process qualifies its share of the rows, the shares are gathered)."""
    qualify = plan.qualify
    many = qualify and cluster.process_count() > 1
    mine = range(0, 0)
    offsets: dict = {}
    if many:
        offsets, total = _row_offsets(root, n, split)
        mine = cluster.process_share(total)
    chunks = _Chunks(plan.size(n), plan.max_expansions(n))

    def on_scene(scene):
        info = scene_summary(scene)
        if qualify and (not many or (scene.file in offsets and offsets[scene.file] + scene.row in mine)):
            chunks.add(scene, info)
        return info

    def scan():
        reports = scan_split(root, n, split, on_scene=on_scene, workers=plan.workers, id_index=index)
        chunks.flush()
        return reports

    if not many:
        return scan()
    held: dict = {}

    def share():
        held["reports"] = scan()
        return {(r.file, r.row): r.info["references"] for r in held["reports"]
                if r.info is not None and "references" in r.info}

    where = f"audit {n}x{n}/{split}: qualifying rows {mine.start}-{mine.stop - 1}"
    refs: dict = {}
    for part in cluster.run_share(share, what=where,
                                  describe=lambda e: f"{where}: {type(e).__name__}: {e}"):
        refs.update(part)
    reports = held["reports"]
    for r in reports:
        if r.info is not None and (r.file, r.row) in refs:
            r.info["references"] = refs[(r.file, r.row)]
    return reports


def _audit_split(root, n: int, split: str, index: dict, plan: _Plan) -> _SplitAudit:
    """Scan (and qualify) one split; its entries carry the block labels of the valid scenes."""
    reports = _scan(root, n, split, index, plan)
    valid = [r for r in reports if r.valid]
    tiles = [r.info["tile"] for r in valid]
    labels = {rule: assign_blocks(tiles, rule) for rule in BLOCK_RULES}
    label_of = {id(r): {rule: labels[rule][i] for rule in BLOCK_RULES}
                for i, r in enumerate(valid)}
    no_blocks = {rule: None for rule in BLOCK_RULES}  # an invalid scene has no block
    entries = [_scene_entry(r, n, split, label_of.get(id(r), no_blocks)) for r in reports]
    censored = [_censored_entry(e, k, q, plan.max_expansions(n))
                for e in entries if e.get("references")
                for k, q in e["references"].items() if q.get("censored")]
    return _SplitAudit(entries, censored, _split_summary(reports, valid, labels, plan.qualify))


def _audit_summary(root, resolutions, per_res: dict, scenes: list, censored: list,
                   plan: _Plan) -> dict:
    """The audit's ``summary``: counts, failing rows, the budget, unqualified and censored tasks."""
    budget = plan.budget
    failing = [{k: e[k] for k in ("id", "resolution", "split", "file", "row", "error")}
               for e in scenes if not e["valid"]]
    return {
        "dataset_path": str(root),
        "resolutions": per_res,
        "n_scenes": len(scenes),
        "n_valid": len(scenes) - len(failing),
        "n_invalid": len(failing),
        "all_valid": not failing,
        "failing": failing,
        "reference_qualification": "checked" if plan.qualify else "not run",
        "reference_budget": {
            "mode": ("unbounded" if budget is None else
                     "default" if isinstance(budget, str) else "fixed"),
            "max_expansions": {str(n): plan.max_expansions(n) for n in resolutions},
            "default_rule": f"{DEFAULT_EXPANSIONS_PER_CELL} x N*N A* expansions per task",
            "max_sweeps": DEFAULT_MAX_SWEEPS,
        },
        "unqualified": [
            {"id": e["id"], "resolution": e["resolution"], "split": e["split"], "task": k,
             "reason": q.get("reason")}
            for e in scenes if e.get("references")
            for k, q in e["references"].items()
            if not q.get("qualified") and not q.get("censored")
        ],
        "n_censored": len(censored),
        "censored": censored,
    }


def audit_dataset(root, resolutions, splits=None, workers: int = DECODE_WORKERS, qualify: bool = True, *,
                  budget="default", chunk_size: int | None = None) -> dict:
    """Scan the dataset and return ``{"scenes": [...], "summary": {...}}`` (JSON-ready).

    ``root`` is a dataset root (``"shipped"`` names the shipped cohort);
    ``resolutions`` the N of the ``<N>x<N>`` folders to audit; ``splits`` the split
    names (aliases accepted; default: every split folder present). With ``qualify``
    each valid scene's six references are qualified; its entry gains
    ``"references"``, failing tasks are listed in ``summary["unqualified"]`` and
    censored ones in ``summary["censored"]``. ``budget`` bounds the A* cross-check
    of each task: ``"default"`` (``DEFAULT_EXPANSIONS_PER_CELL`` x N²), a positive
    int of expansions, or None (unbounded). ``chunk_size`` scenes are qualified
    together (default :func:`chunk_scenes`). Raises :class:`DataError` for layout
    problems, ValueError for a bad ``budget`` or ``chunk_size``.

    In a multi-process launch (:mod:`passage_jax.cluster`) every process validates
    every row (cheap) and qualifies the valid scenes of its contiguous share of each
    split's rows; the qualifications are gathered and every process returns the same
    facts as a single-process audit. A process whose share fails fails the audit on
    every process (:class:`~passage_jax.cluster.ShareFailed`, naming it).
    """
    root = dataset_root(root)
    budgets = {int(n): resolve_budget(budget, n) for n in resolutions}
    if chunk_size is not None and (not is_int(chunk_size) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    plan = _Plan(workers, qualify, budget, budgets, chunk_size)
    scenes: list[dict] = []
    censored: list[dict] = []
    per_res: dict = {}
    for n in resolutions:
        present = present_splits(root, n)
        chosen = _chosen_splits(root, n, splits)
        index = id_places(root, n)  # ids over every split folder of the resolution
        per_split = {}
        for split in chosen:
            done = _audit_split(root, n, split, index, plan)
            scenes.extend(done.entries)
            censored.extend(done.censored)
            per_split[split] = done.summary
        per_res[str(n)] = {"splits_present": present, "splits": per_split}
    summary = _audit_summary(root, resolutions, per_res, scenes, censored, plan)
    return jsonable({"scenes": scenes, "summary": summary})
