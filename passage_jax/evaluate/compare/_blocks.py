"""The geographic blocks of a comparison: from the tasks' ``metadata.tile`` under
``main_tile_5deg``, or from a sealed roster that both runs were admitted with.

A task without a block identity leaves the uncertainty unknown (only a sealed roster may
gather such tasks into one declared unplaced block); at least two known blocks are needed
for an interval.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from passage_jax.contract import UNPLACED
from passage_jax.evaluate.compare._errors import CompareError, RosterHashMissing, RosterMismatch
from passage_jax.fileio import jsonable
from passage_jax.stats import RosterError, block_census, read_roster

__all__ = ["bound_roster", "blocks_for", "run_blocks", "first_diff"]


def first_diff(a: list, b: list, name_a: str = "A", name_b: str = "B") -> str:
    """Where two ordered id lists first differ, in words."""
    if len(a) != len(b):
        return f"{name_a} has {len(a)} tasks, {name_b} has {len(b)}"
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"position {i}: {name_a} {a[i]!r}, {name_b} {b[i]!r}"


def _recorded_rosters(A, B) -> dict:
    recorded = {}
    for side, S in (("A", A), ("B", B)):
        for seed, sc in S.seeds.items():
            r = (sc.manifest.get("provenance") or {}).get("roster")
            recorded[f"{side} seed {seed}"] = None if r is None else (r.get("sha256"), r.get("path"))
    return recorded


def bound_roster(A, B, roster=None, roster_sha256=None) -> tuple:
    """The roster to use: every seed of both runs must have been admitted with the same
    roster (or none: :class:`RosterMismatch` otherwise); the recorded roster is used when
    none is given, and a given one must be it. Returns ``(roster, sha256, origin)`` with
    origin ``"recorded"``, ``"given"`` or None (no roster)."""
    recorded = _recorded_rosters(A, B)
    shas = {v[0] if v else None for v in recorded.values()}
    if len(shas) > 1:
        listed = "; ".join(f"{k}: {'no roster' if v is None else v[0][:12]}" for k, v in recorded.items())
        raise RosterMismatch(f"the runs were admitted with different rosters ({listed}); compare "
                             f"runs bound to one roster")
    (sha,) = shas
    if sha is None:
        return roster, roster_sha256, ("given" if roster is not None else None)
    path = next(v[1] for v in recorded.values() if v)
    if roster is None:
        if not Path(path).is_file():
            raise RosterMismatch(f"the runs were admitted with roster {path} (sha256 {sha}), which "
                                 f"is no longer there; give it with --roster and its sha256")
        return path, sha, "recorded"
    if roster_sha256 is not None and str(roster_sha256).lower() != sha:
        raise RosterMismatch(f"roster sha256 {roster_sha256} is not the roster the runs were admitted "
                             f"with ({path}, sha256 {sha})")
    return roster, roster_sha256, "given"


def _roster_blocks(ids: list, roster, roster_sha256) -> tuple[list, list, dict]:
    """``(blocks, labels, source)`` of a sealed roster over the runs' ordered ids."""
    if roster_sha256 is None:
        raise RosterHashMissing(f"roster {roster} is given without its sealed sha256")
    try:
        r = read_roster(roster, sha256=roster_sha256)
    except (RosterError, OSError) as e:
        raise CompareError(str(e)) from None
    if [str(t) for t in r.task_ids] != list(ids):
        raise CompareError(f"roster {roster}: its task ids are not the runs' ordered sample "
                           f"ids (" + first_diff([str(t) for t in r.task_ids], ids,
                                                 "the roster", "the runs") + ")")
    # the roster's unplaced block (and the conventional name "unplaced") is one shared
    # resampling block but no geographic identity; it is labelled UNPLACED so that every
    # consumer (census, ODD bins, compare_primary_metrics) counts it as unknown alike
    unplaced = {r.unplaced_block, UNPLACED} - {None}
    blocks = [UNPLACED if b in unplaced else b for b in r.blocks]
    labels = [None if b is None or b == UNPLACED else b for b in blocks]
    src = {"source": "roster", "roster": str(Path(roster).resolve()), "sha256": r.sha256,
           "format": r.format, "rule": r.block_rule, "rule_version": r.block_rule_version,
           "sealed": r.sealed, "parent": r.parent,
           "label": "sealed roster" if r.sealed else "unsealed roster (passage-roster-v1: no "
                                                     "declared block rule)"}
    return blocks, labels, src


def blocks_for(ids: list, clusters: np.ndarray, roster=None, roster_sha256=None) -> dict:
    """The blocks record: its source, ``labels`` (the resampling block of each task), the
    census, ``uncertainty_status`` (``available`` or ``unknown``) and the ``reason``."""
    if roster is None:
        labels = [None if str(c) == UNPLACED else str(c) for c in clusters]
        src = {"source": "metadata.tile", "rule": "main_tile_5deg"}
        # a task without a tile has no block identity: uncertainty is unknown (only a
        # sealed roster may gather such tasks into one declared unplaced block)
        blocks = list(labels)
    else:
        blocks, labels, src = _roster_blocks(ids, roster, roster_sha256)
    census = block_census(labels)
    unknown = any(b is None for b in blocks)
    known = {b for b in labels if b is not None}
    status = "available" if (not unknown and len(known) >= 2) else "unknown"
    reason = None
    if unknown:
        reason = "some tasks have no block identity"
    elif len(known) < 2:
        reason = f"{len(known)} known block(s); at least two are needed"
    return {**src, "labels": blocks, "census": jsonable(census), "uncertainty_status": status,
            "reason": reason}


def run_blocks(A, B, ids: list, clusters: np.ndarray, options) -> dict:
    """The blocks record of two loaded runs under ``options`` (a
    :class:`~passage_jax.evaluate.compare._options.CompareOptions`: its roster), with the
    roster's ``roster_origin``."""
    roster, roster_sha256, origin = bound_roster(A, B, options.roster, options.roster_sha256)
    blk = blocks_for(ids, clusters, roster, roster_sha256)
    blk["roster_origin"] = origin
    return blk
