"""Dataset audit: validate every scene of a dataset root and summarise it (SPEC §1, §3, §5).

Per resolution and split: scene counts; every scene valid or not (the first error
of each failing scene, naming file, row and id); obstacle coverage and released
route lengths (cells) as min/median/max; the block census under both block rules
of SPEC §5 (computed over the valid scenes of the split); and, with ``qualify``,
reference qualification of every valid scene's six tasks (SPEC §3: value
iteration cross-checked by A*, released route legal and optimal).

:func:`audit_dataset` returns the facts as one JSON-ready dict
(``{"scenes": [...], "summary": {...}}``, NaN written as ``None``); a layout problem
(missing root, resolution or split folder, unknown split) raises
:class:`~passage_jax.data.validate.DataError`. Row problems never raise: they are
the audit's findings.
"""
from __future__ import annotations

import numpy as np

from passage_jax.data.reader import dataset_root, id_places, present_splits, scan_split, scene_summary
from passage_jax.data.scene import canonical_split
from passage_jax.data.validate import DataError
from passage_jax.fileio import jsonable
from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.reference import qualify_scene
from passage_jax.stats.blocks import BLOCK_RULES, assign_blocks, block_census

__all__ = ["audit_dataset", "qualify_scene_tasks", "summary3"]


def summary3(values) -> dict | None:
    """min / median / max (NumPy's linear median) of ``values``, or None when empty."""
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())}


def qualify_scene_tasks(scene, max_expansions=None) -> dict:
    """``{"<objective>/<variant>": Qualification.to_dict()}`` for one valid scene: value
    iteration, cross-checked by the independent A* (SPEC §3)."""
    return {k: q.to_dict() for k, q in
            qualify_scene(scene, max_expansions=max_expansions, cross_check=True).items()}


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
            "n_scenes_qualified": sum(
                all(q.get("qualified") for q in r.info["references"].values()) for r in valid),
        }
    return s


def audit_dataset(root, resolutions, splits=None, workers: int = 4, qualify: bool = True,
                  max_expansions=None) -> dict:
    """Scan the dataset and return ``{"scenes": [...], "summary": {...}}`` (JSON-ready).

    ``root`` is a dataset root (``"shipped"`` names the shipped cohort);
    ``resolutions`` the N of the ``<N>x<N>`` folders to audit; ``splits`` the split
    names (aliases accepted; default: every split folder present). With ``qualify``
    each valid scene's six references are qualified (``max_expansions`` bounds the
    A* cross-check); its entry gains ``"references"`` and failing tasks are listed
    in ``summary["unqualified"]``. Raises :class:`DataError` for layout problems.
    """
    root = dataset_root(root)

    def on_scene(scene):
        info = scene_summary(scene)
        if qualify:
            info["references"] = qualify_scene_tasks(scene, max_expansions)
        return info

    scenes_out: list[dict] = []
    per_res: dict = {}
    for n in resolutions:
        present = present_splits(root, n)
        chosen = _chosen_splits(root, n, splits)
        index = id_places(root, n)  # ids over every split folder of the resolution
        per_split = {}
        for split in chosen:
            reports = scan_split(root, n, split, on_scene=on_scene, workers=workers, id_index=index)
            valid = [r for r in reports if r.valid]
            tiles = [r.info["tile"] for r in valid]
            labels = {rule: assign_blocks(tiles, rule) for rule in BLOCK_RULES}
            label_of = {id(r): {rule: labels[rule][i] for rule in BLOCK_RULES}
                        for i, r in enumerate(valid)}
            no_blocks = {rule: None for rule in BLOCK_RULES}  # an invalid scene has no block
            scenes_out.extend(_scene_entry(r, n, split, label_of.get(id(r), no_blocks))
                              for r in reports)
            per_split[split] = _split_summary(reports, valid, labels, qualify)
        per_res[str(n)] = {"splits_present": present, "splits": per_split}
    failing = [{k: e[k] for k in ("id", "resolution", "split", "file", "row", "error")}
               for e in scenes_out if not e["valid"]]
    summary = {
        "dataset_path": str(root),
        "resolutions": per_res,
        "n_scenes": len(scenes_out),
        "n_valid": len(scenes_out) - len(failing),
        "n_invalid": len(failing),
        "all_valid": not failing,
        "failing": failing,
        "reference_qualification": "checked" if qualify else "not run",
        "unqualified": [
            {"id": e["id"], "resolution": e["resolution"], "split": e["split"], "task": k,
             "reason": q.get("reason")}
            for e in scenes_out if e.get("references")
            for k, q in e["references"].items() if not q.get("qualified")
        ],
    }
    return jsonable({"scenes": scenes_out, "summary": summary})
