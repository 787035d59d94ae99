"""Frozen task rosters (``passage-roster-v1`` / ``passage-roster-v2``) with sha256 sealing.

File format (UTF-8 JSON object, written with ``indent=1`` and a trailing newline)::

    {"format": "passage-roster-v1",
     "tasks": [{"task_id": "scene-1/elevation/free", "block": "5deg:+35:-120"}, ...]}

    {"format": "passage-roster-v2",
     "block_rule": "main_tile_5deg", "block_rule_version": 1,
     "footprint_required": false, "unplaced_block": "unplaced",
     "tasks": [{"task_id": ..., "block": ...}, ...]}

v1 blocks are strings or ``null`` (unknown); a bare JSON list of task records is read as v1.
v2 blocks are strings; tasks without a footprint share the single block named by
``unplaced_block`` (``null`` when there is none, required when ``footprint_required``).
The hash covers the exact bytes of the file (:func:`passage_jax.fileio.sha256_bytes`); files
are written atomically by :func:`passage_jax.fileio.atomic_write_bytes`.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from passage_jax.contract import UNPLACED
from passage_jax.fileio import atomic_write_bytes, sha256_bytes, sha256_file
from passage_jax.stats.blocks import BLOCK_RULE_VERSION, BLOCK_RULES, assign_blocks

ROSTER_FORMATS = ("passage-roster-v1", "passage-roster-v2")

__all__ = ["ROSTER_FORMATS", "Roster", "RosterError", "read_roster", "write_roster",
           "roster_from_tiles", "derive_roster", "check_derived", "file_sha256"]


class RosterError(ValueError):
    """A roster file or roster that breaks the format (names the file and the task)."""


@dataclass
class Roster:
    format: str
    task_ids: list
    blocks: list
    block_rule: str | None = None
    block_rule_version: int | None = None
    footprint_required: bool | None = None
    unplaced_block: str | None = None
    sha256: str | None = None
    parent: dict | None = None  # a derived roster: {"sha256": the parent file's sha256}

    @property
    def sealed(self) -> bool:
        """v2 rosters state their block rule and are sealed; v1 rosters are unsealed."""
        return self.format != "passage-roster-v1"

    def block_map(self) -> dict:
        return dict(zip(self.task_ids, self.blocks))

    def to_json(self) -> dict:
        tasks = [{"task_id": t, "block": b} for t, b in zip(self.task_ids, self.blocks)]
        head = {"format": self.format}
        if self.parent is not None:
            head["parent"] = dict(self.parent)
        if self.format == "passage-roster-v1":
            return {**head, "tasks": tasks}
        return {**head, "block_rule": self.block_rule,
                "block_rule_version": self.block_rule_version,
                "footprint_required": self.footprint_required,
                "unplaced_block": self.unplaced_block, "tasks": tasks}


#: Hex sha256 of a file's bytes (the shared helper, under the name this module published).
file_sha256 = sha256_file


def _validate(r: Roster, where: str) -> Roster:
    if r.format not in ROSTER_FORMATS:
        raise RosterError(f"{where}: format {r.format!r} is not one of {ROSTER_FORMATS}")
    seen = set()
    for i, t in enumerate(r.task_ids):
        if not isinstance(t, str) or not t:
            raise RosterError(f"{where}: tasks[{i}].task_id must be a non-empty string, got {t!r}")
        if t in seen:
            raise RosterError(f"{where}: tasks[{i}].task_id {t!r} appears more than once")
        seen.add(t)
    v2 = r.format == "passage-roster-v2"
    for i, b in enumerate(r.blocks):
        if b is None and not v2:
            continue
        if not isinstance(b, str) or not b:
            raise RosterError(f"{where}: tasks[{i}].block must be a non-empty string"
                              f"{'' if v2 else ' or null'}, got {b!r}")
    if v2:
        if r.block_rule not in BLOCK_RULES:
            raise RosterError(f"{where}: block_rule {r.block_rule!r} is not one of {BLOCK_RULES}")
        if isinstance(r.block_rule_version, bool) or not isinstance(r.block_rule_version, int):
            raise RosterError(f"{where}: block_rule_version must be an integer, got {r.block_rule_version!r}")
        if not isinstance(r.footprint_required, bool):
            raise RosterError(f"{where}: footprint_required must be true or false")
        u = r.unplaced_block
        if u is not None and (not isinstance(u, str) or not u):
            raise RosterError(f"{where}: unplaced_block must be a non-empty string or null, got {u!r}")
        if r.footprint_required and u is not None:
            raise RosterError(f"{where}: footprint_required is true, so there can be no unplaced block")
        if u is not None and u not in r.blocks:
            raise RosterError(f"{where}: unplaced_block {u!r} names no task's block")
        if u is None and UNPLACED in r.blocks:
            raise RosterError(f"{where}: block {UNPLACED!r} used but unplaced_block is null")
    if r.parent is not None:
        ps = r.parent.get("sha256") if isinstance(r.parent, dict) else None
        if not isinstance(r.parent, dict) or set(r.parent) != {"sha256"} or not isinstance(ps, str) \
                or len(ps) != 64 or any(c not in "0123456789abcdef" for c in ps):
            raise RosterError(f"{where}: parent must be {{\"sha256\": <64 lowercase hex>}}, "
                              f"got {r.parent!r}")
    return r


def read_roster(path, sha256: str | None = None, parent: Roster | None = None) -> Roster:
    """Read and validate a roster; with ``sha256``, refuse a file whose hash differs. With
    ``parent``, the roster must be derived from it (:func:`check_derived`)."""
    path = Path(path)
    raw = path.read_bytes()
    digest = sha256_bytes(raw)
    if sha256 is not None and digest != str(sha256).strip().lower():
        raise RosterError(f"roster {path}: sha256 is {digest}, expected {sha256}; refusing the file")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RosterError(f"roster {path}: not valid UTF-8 JSON ({e})") from None
    where = f"roster {path}"
    if isinstance(obj, list):
        obj = {"format": "passage-roster-v1", "tasks": obj}
    if not isinstance(obj, dict):
        raise RosterError(f"{where}: expected a JSON object")
    fmt = obj.get("format")
    if fmt not in ROSTER_FORMATS:
        raise RosterError(f"{where}: format {fmt!r} is not one of {ROSTER_FORMATS}")
    allowed = {"format", "tasks"} | ({"block_rule", "block_rule_version", "footprint_required",
                                      "unplaced_block"} if fmt == "passage-roster-v2" else set())
    extra = set(obj) - allowed - {"parent"}
    missing = allowed - set(obj)
    if extra or missing:
        raise RosterError(f"{where}: unexpected fields {sorted(extra)} / missing fields {sorted(missing)}")
    tasks = obj["tasks"]
    if not isinstance(tasks, list):
        raise RosterError(f"{where}: 'tasks' must be a list")
    ids, blocks = [], []
    for i, t in enumerate(tasks):
        if not isinstance(t, dict) or set(t) != {"task_id", "block"}:
            raise RosterError(f"{where}: tasks[{i}] must be an object with exactly task_id and block")
        ids.append(t["task_id"])
        blocks.append(t["block"])
    r = Roster(format=fmt, task_ids=ids, blocks=blocks, block_rule=obj.get("block_rule"),
               block_rule_version=obj.get("block_rule_version"),
               footprint_required=obj.get("footprint_required"),
               unplaced_block=obj.get("unplaced_block"), sha256=digest, parent=obj.get("parent"))
    r = _validate(r, where)
    if parent is not None:
        check_derived(r, parent, where)
    return r


def derive_roster(parent: Roster, task_ids: Sequence[str]) -> Roster:
    """A roster of ``task_ids`` (a subset of ``parent``'s, in the order given) that keeps the
    parent's block for every task and records the parent's sha256 (the parent must have been
    read from or written to a file). The block rule and format are the parent's."""
    if parent.sha256 is None:
        raise RosterError("the parent roster has no sha256: read it from its file or write it first")
    blocks = parent.block_map()
    missing = [t for t in task_ids if t not in blocks]
    if missing:
        raise RosterError(f"task {missing[0]!r} is not in the parent roster ({len(missing)} such tasks)")
    kept = [blocks[t] for t in task_ids]
    unplaced = parent.unplaced_block if parent.unplaced_block in kept else None
    r = Roster(format=parent.format, task_ids=list(task_ids), blocks=kept,
               block_rule=parent.block_rule, block_rule_version=parent.block_rule_version,
               footprint_required=parent.footprint_required, unplaced_block=unplaced,
               parent={"sha256": parent.sha256})
    return _validate(r, "derived roster")


def check_derived(child: Roster, parent: Roster, where: str = "roster") -> None:
    """RosterError unless ``child`` names ``parent`` (by sha256) as its parent and keeps the
    parent's block of each of its tasks."""
    if child.parent is None:
        raise RosterError(f"{where}: records no parent roster")
    if child.parent.get("sha256") != parent.sha256:
        raise RosterError(f"{where}: its parent sha256 {child.parent.get('sha256')} is not "
                          f"{parent.sha256}")
    blocks = parent.block_map()
    for i, (t, b) in enumerate(zip(child.task_ids, child.blocks)):
        if t not in blocks:
            raise RosterError(f"{where}: tasks[{i}] {t!r} is not in the parent roster")
        if blocks[t] != b:
            raise RosterError(f"{where}: tasks[{i}] {t!r} has block {b!r}; the parent gives "
                              f"{blocks[t]!r} (a derived roster keeps its parent's blocks)")


def write_roster(path, roster: Roster) -> str:
    """Validate and write ``roster`` atomically (temp file + rename); return the file's sha256."""
    path = Path(path)
    _validate(roster, f"roster {path}")
    data = (json.dumps(roster.to_json(), indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    atomic_write_bytes(path, data)
    digest = sha256_bytes(data)
    roster.sha256 = digest
    return digest


def roster_from_tiles(task_ids: Sequence[str], tiles: Sequence[dict | None], rule: str,
                      footprint_required: bool = False) -> Roster:
    """A v2 roster from each task's ``metadata.tile``; tile-less tasks go to block 'unplaced'
    (refused when ``footprint_required``)."""
    task_ids = list(task_ids)
    tiles = list(tiles)
    if len(task_ids) != len(tiles):
        raise RosterError(f"{len(task_ids)} task ids but {len(tiles)} tiles")
    labels = assign_blocks(tiles, rule)
    missing = [t for t, lab in zip(task_ids, labels) if lab is None]
    if missing and footprint_required:
        raise RosterError(f"task {missing[0]!r} has no tile but a footprint is required "
                          f"({len(missing)} such tasks)")
    blocks = [UNPLACED if lab is None else lab for lab in labels]
    r = Roster(format="passage-roster-v2", task_ids=task_ids, blocks=blocks, block_rule=rule,
               block_rule_version=BLOCK_RULE_VERSION, footprint_required=bool(footprint_required),
               unplaced_block=UNPLACED if missing else None)
    return _validate(r, "roster")
