"""Geographic blocks for resampling: block rules from ``metadata.tile`` and the block census.

``metadata.tile`` is ``{source, lat, lon, tiles: [[lat, lon], ...]}`` where ``lat, lon`` is the
integer south-west corner of the scene's main 1 degree tile and ``tiles`` lists every 1 degree
tile the crop touches.

Rules
-----
``main_tile_5deg``
    The 5 degree cell holding the main tile: ``(floor(lat / 5) * 5, floor(lon / 5) * 5)``.
    Label ``"5deg:+35:-120"``.
``union_5deg``
    Every scene contributes the 5 degree cells of its main tile and of all its ``tiles``.
    Scenes whose cell sets share a cell are joined, transitively, over the whole roster
    (connected components, union-find). The label names the smallest member cell in
    (lat, lon) order: ``"u5deg:+35:-120"``. Labels do not depend on scene order.

A scene whose tile is ``None`` is unplaced and gets the label ``None`` (a roster names its
block :data:`passage_jax.contract.UNPLACED`).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

BLOCK_RULES = ("main_tile_5deg", "union_5deg")
BLOCK_RULE_VERSION = 1
CELL_DEGREES = 5
ADEQUATE_MIN_BLOCKS = 30
ADEQUATE_MAX_SHARE = 0.10
ADEQUACY_CRITERION = (
    f">= {ADEQUATE_MIN_BLOCKS} blocks and no block above "
    f"{ADEQUATE_MAX_SHARE:.0%} of tasks (proposal; reported, not enforced)"
)

__all__ = [
    "BLOCK_RULES",
    "BLOCK_RULE_VERSION",
    "ADEQUACY_CRITERION",
    "assign_blocks",
    "block_census",
    "cell_of",
    "cell_label",
]


def _coord(value: Any, name: str, where: str, bound: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: tile field {name!r} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or abs(v) > bound:
        raise ValueError(f"{where}: tile field {name!r}={value!r} is not a valid coordinate")
    return v


def cell_of(lat: float, lon: float) -> tuple[int, int]:
    """South-west corner of the 5 degree cell holding the point/tile corner ``(lat, lon)``."""
    return (
        int(math.floor(lat / CELL_DEGREES)) * CELL_DEGREES,
        int(math.floor(lon / CELL_DEGREES)) * CELL_DEGREES,
    )


def cell_label(cell: tuple[int, int], prefix: str = "5deg") -> str:
    return f"{prefix}:{cell[0]:+d}:{cell[1]:+d}"


def _main_cell(tile: dict, where: str) -> tuple[int, int]:
    if "lat" not in tile or "lon" not in tile:
        raise ValueError(f"{where}: tile lacks 'lat'/'lon' (keys: {sorted(tile)})")
    return cell_of(_coord(tile["lat"], "lat", where, 90), _coord(tile["lon"], "lon", where, 180))


def _all_cells(tile: dict, where: str) -> list[tuple[int, int]]:
    cells = [_main_cell(tile, where)]
    extra = tile.get("tiles")
    if extra is None:
        return cells
    if not isinstance(extra, (list, tuple)):
        raise ValueError(f"{where}: tile field 'tiles' must be a list of [lat, lon], got {extra!r}")
    for j, pair in enumerate(extra):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"{where}: tile field 'tiles[{j}]' must be [lat, lon], got {pair!r}")
        cells.append(cell_of(_coord(pair[0], f"tiles[{j}][0]", where, 90),
                             _coord(pair[1], f"tiles[{j}][1]", where, 180)))
    return cells


def assign_blocks(tiles: Sequence[dict | None], rule: str) -> list[str | None]:
    """Block label per scene (``None`` for a scene without a tile) under ``rule``.

    ``tiles`` is the list of ``metadata.tile`` dicts (or ``None``), one per scene, in roster
    order. Malformed tiles raise ``ValueError`` naming the scene index and field.
    """
    if rule not in BLOCK_RULES:
        raise ValueError(f"unknown block rule {rule!r}; expected one of {BLOCK_RULES}")
    tiles = list(tiles)
    for i, t in enumerate(tiles):
        if t is not None and not isinstance(t, dict):
            raise ValueError(f"scene {i}: metadata.tile must be a dict or None, got {type(t).__name__}")
    if rule == "main_tile_5deg":
        return [None if t is None else cell_label(_main_cell(t, f"scene {i}"))
                for i, t in enumerate(tiles)]

    # union_5deg: union-find over cells; each scene links all its cells together.
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def find(c):
        root = c
        while parent[root] != root:
            root = parent[root]
        while parent[c] != root:  # path compression
            parent[c], c = root, parent[c]
        return root

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            # keep the smaller cell as root so the label is the component minimum
            if rb < ra:
                ra, rb = rb, ra
            parent[rb] = ra

    scene_cells: list[list[tuple[int, int]] | None] = []
    for i, t in enumerate(tiles):
        if t is None:
            scene_cells.append(None)
            continue
        cells = _all_cells(t, f"scene {i}")
        for c in cells:
            parent.setdefault(c, c)
        for c in cells[1:]:
            union(cells[0], c)
        scene_cells.append(cells)
    return [None if cells is None else cell_label(find(cells[0]), "u5deg") for cells in scene_cells]


def block_census(labels: Iterable[str | None]) -> dict:
    """Count blocks and the largest block's share of all tasks (unplaced tasks included).

    Returns ``n_tasks``, ``n_blocks`` (known blocks), ``largest_block``, ``largest_share``,
    ``n_unplaced``, ``block_sizes`` (label -> count, sorted by label), ``adequate`` (>= 30
    blocks and largest share <= 10 %) and ``criterion``. Adequacy is reported only.
    """
    labels = list(labels)
    for i, lab in enumerate(labels):
        if lab is not None and not isinstance(lab, str):
            raise ValueError(f"task {i}: block label must be a str or None, got {lab!r}")
    n_tasks = len(labels)
    counts = Counter(lab for lab in labels if lab is not None)
    n_unplaced = n_tasks - sum(counts.values())
    if counts:
        # deterministic tie-break: the largest count, then the smallest label
        largest_block, largest = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        largest_share = largest / n_tasks
    else:
        largest_block, largest_share = None, float("nan")
    n_blocks = len(counts)
    adequate = bool(n_blocks >= ADEQUATE_MIN_BLOCKS and largest_share <= ADEQUATE_MAX_SHARE)
    return {
        "n_tasks": n_tasks,
        "n_blocks": n_blocks,
        "largest_block": largest_block,
        "largest_share": largest_share,
        "n_unplaced": n_unplaced,
        "block_sizes": dict(sorted(counts.items())),
        "adequate": adequate,
        "criterion": ADEQUACY_CRITERION,
    }
