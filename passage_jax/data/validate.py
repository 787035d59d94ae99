"""Validation of released scenes (contract §1).

Every check of contract §1 for one shard row lives in :func:`validate_row`, which turns
a raw row into a :class:`~passage_jax.data.scene.Scene` or raises
:class:`DataError` naming the file, row and scene id. Nothing is skipped,
repaired or replaced.

Order of the checks (the first failing one is reported):

1. ``id``: a string of exactly 10 ASCII digits;
2. ``metadata``: JSON text of at most :data:`MAX_METADATA_BYTES` bytes nested at
   most :data:`MAX_METADATA_DEPTH` deep (both checked before it is parsed), an
   object with ``index``, ``resolution`` (= N), ``split`` (= the split folder,
   aliases allowed), ``calibration {min, max}`` and
   ``solvers {elevation|slope_uphill|energy: {weight, solver, heuristic}}``, each
   weight in [0, :data:`~passage_jax.checks.MAX_COST_WEIGHT`] and the scene's largest
   edge cost at most :data:`MAX_EDGE_COST` (``slope_uphill``'s grows with the relief), so
   that no edge or route cost overflows; optional ``markers`` and ``tile`` are checked
   when present, and ``crop``, ``obstacles`` and ``source`` must be objects when present;
3. ``tensor``: exactly one Zstandard frame of exactly N*N*3 float32 and nothing
   after it (declared and actual size, checked before decompressing), all values
   finite, ``e`` in [0, 1], obstacles in {0, 1};
4. markers: only 0/+1/-1, exactly one +1 and one -1; the sign convention from
   ``metadata.markers`` or else detected from the released routes; neither marker
   on an obstacle;
5. the six released routes, in column order (objectives × free, obstacles): in
   bounds, 8-connected, no repeated consecutive cell, start → goal, and an
   ``*_obstacles`` route never on an obstacle; a route holds at most N*N cells.

Anything else that goes wrong while a row is checked is still reported as a
:class:`DataError` naming the row, never as another exception.

Two checks need more than one row and are made by the reader after the row
itself validated: ids are unique within a resolution
(:func:`duplicate_id_problem`), and every scene of a split uses the same marker
convention (:func:`convention_problem`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, NamedTuple

import numpy as np

from passage_jax.checks import MAX_COST_WEIGHT, cap_text, is_int, is_number
from passage_jax.data.codec import TensorError, decode_tensor
from passage_jax.data.scene import (
    DEFAULT_MARKERS,
    ROUTE_COLUMNS,
    Scene,
    canonical_split,
    elevation_metres,
    keep_elevation_bounds,
)
from passage_jax.graph import OBJECTIVES, route_problem
from passage_jax.graph.spec import GraphSpec

__all__ = [
    "REQUIRED_COLUMNS", "REQUIRED_METADATA", "OBJECT_METADATA", "SOLVER_KEYS", "FLIPPED_MARKERS",
    "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH", "MAX_EDGE_COST", "DataError", "RowRef", "check_id",
    "json_depth",
    "parse_metadata", "decode_checked", "decode_planes", "Planes", "marker_cells", "detect_marker_convention",
    "route_array", "validate_row", "SCENE_COLUMNS", "declares_markers", "duplicate_id_problem",
    "marker_convention", "convention_problem",
]

#: Columns every shard must have (extra columns such as ``image_astar_*`` are ignored).
REQUIRED_COLUMNS = ("id", "tensor", *ROUTE_COLUMNS.values(), "metadata")
#: The columns of a scene without its released routes (a read that does not need them:
#: :func:`validate_row` with ``released_routes=False``).
SCENE_COLUMNS = ("id", "tensor", "metadata")
REQUIRED_METADATA = ("index", "resolution", "split", "calibration", "solvers")
#: Optional metadata keys that must hold a JSON object (or null) when present.
OBJECT_METADATA = ("crop", "obstacles", "source")
#: Largest ``metadata`` text accepted, in UTF-8 bytes (checked before parsing).
MAX_METADATA_BYTES = 1 << 20
#: Deepest nesting of arrays and objects accepted in ``metadata`` (checked before parsing).
MAX_METADATA_DEPTH = 64
SOLVER_KEYS = ("weight", "solver", "heuristic")
#: The largest edge cost a scene may have under any objective (``slope_uphill``'s steepest
#: edge costs ``d + w * relief**2 / d`` at the 30 m orthogonal step): a route through every
#: cell of an N x N grid then costs at most N**2 * 1e20, finite in float64 and in float32
#: (3.4e38) up to N = 10**9, so no cost, reference or regret overflows to inf.
MAX_EDGE_COST = 1e20
FLIPPED_MARKERS = {"start": -1, "goal": 1}
_ID_RE = re.compile(r"[0-9]{10}")
_JSON_SPECIAL = re.compile(r'[\[\]{}"\\]')
#: Characters of a value's repr kept in a message.
_SHOW = 120


class DataError(ValueError):
    """A dataset root, shard or scene is missing or malformed."""


@dataclasses.dataclass(frozen=True)
class RowRef:
    """Where a row lives, for error messages."""

    file: str
    row: int
    id: Any = None

    def __str__(self) -> str:
        plain = isinstance(self.id, str) and len(self.id) <= 64 and self.id.isprintable()
        sid = self.id if plain else _short(self.id)
        return f"{self.file} row {self.row} scene {sid}"


def _short(value) -> str:
    """``repr(value)``, cut to a few dozen characters for a one-line message."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # e.g. an int over the digit limit
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _SHOW else f"{text[:_SHOW]}... ({len(text)} characters)"


def _fail(ref: RowRef, msg: str) -> DataError:
    return DataError(f"{ref}: {msg}")


def _is_number(v) -> bool:
    """A finite number, not a bool (an integer beyond float range is not one)."""
    if not is_number(v):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


# --------------------------------------------------------------------------- #
# metadata
# --------------------------------------------------------------------------- #

def json_depth(text: str, limit: int) -> int:
    """Deepest nesting of arrays and objects in JSON ``text``, found by scanning the
    brackets outside strings (no recursion, no parsing); the scan stops as soon as
    the depth passes ``limit`` and returns that depth."""
    depth = deepest = 0
    in_string, escaped = False, -1
    for m in _JSON_SPECIAL.finditer(text):
        i = m.start()
        if i == escaped:
            continue
        c = text[i]
        if in_string:
            if c == "\\":
                escaped = i + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth > limit:
                    break
        elif c in "]}":
            depth -= 1
    return deepest


def _metadata_text(raw, ref: RowRef) -> str:
    """The ``metadata`` column value as text within the size and depth bounds."""
    if raw is None:
        raise _fail(ref, "metadata is null")
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_METADATA_BYTES:
            raise _fail(ref, f"metadata is {len(raw)} bytes, more than the {MAX_METADATA_BYTES} "
                             f"allowed")
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _fail(ref, f"metadata is not UTF-8 text: {e}") from None
    if not isinstance(raw, str):
        raise _fail(ref, f"metadata must be a JSON string, got {type(raw).__name__}")
    if len(raw) * 4 > MAX_METADATA_BYTES:  # a character is at most 4 UTF-8 bytes
        size = len(raw.encode("utf-8", "surrogatepass"))
        if size > MAX_METADATA_BYTES:
            raise _fail(ref, f"metadata is {size} bytes, more than the {MAX_METADATA_BYTES} allowed")
    # the text's opening brackets bound its depth (those inside strings only add to the
    # count): the scan runs only where the count could exceed the limit
    bound = raw.count("[") + raw.count("{")
    if bound > MAX_METADATA_DEPTH and json_depth(raw, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise _fail(ref, f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep")
    return raw


def _load_json(raw: str, ref: RowRef):
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise _fail(ref, f"metadata is not valid JSON: {e}") from None
    except RecursionError:
        raise _fail(ref, "metadata is nested too deeply to parse") from None
    except ValueError as e:  # e.g. an integer literal over Python's digit limit
        raise _fail(ref, f"metadata cannot be parsed: {' '.join(str(e).split())}") from None


def parse_metadata(raw, resolution: int, split: str, ref: RowRef) -> dict:
    """Parse and check the ``metadata`` JSON string; returns the dict."""
    md = _load_json(_metadata_text(raw, ref), ref)
    if not isinstance(md, dict):
        raise _fail(ref, f"metadata must be a JSON object, got {type(md).__name__}")
    missing = [k for k in REQUIRED_METADATA if k not in md]
    if missing:
        raise _fail(ref, f"metadata lacks required key(s) {missing}")
    if not is_int(md["index"]):
        raise _fail(ref, f"metadata.index must be an integer, got {_short(md['index'])}")
    if not is_int(md["resolution"]) or md["resolution"] != resolution:
        raise _fail(ref, f"metadata.resolution is {_short(md['resolution'])}, but the shard lies in "
                         f"the {resolution}x{resolution} folder")
    try:
        md_split = canonical_split(md["split"]) if isinstance(md["split"], str) else None
    except ValueError:
        md_split = None
    if md_split != split:
        raise _fail(ref, f"metadata.split is {_short(md['split'])}, but the shard lies in the "
                         f"{split!r} split folder")
    _check_calibration(md["calibration"], ref)
    _check_solvers(md["solvers"], ref)
    _check_edge_costs(md, ref)
    if "markers" in md:
        m = md["markers"]
        pair = (m.get("start"), m.get("goal")) if isinstance(m, dict) else None
        if pair not in ((1, -1), (-1, 1)) or any(isinstance(v, bool) for v in pair):
            raise _fail(ref, f"metadata.markers must hold start and goal as +1/-1 of opposite "
                             f"signs (e.g. {DEFAULT_MARKERS}), got {_short(m)}")
    if md.get("tile") is not None:
        _check_tile(md["tile"], ref)
    for key in OBJECT_METADATA:
        if md.get(key) is not None and not isinstance(md[key], dict):
            raise _fail(ref, f"metadata.{key} must be an object, got {type(md[key]).__name__} "
                             f"{_short(md[key])}")
    return md


def _check_calibration(cal, ref: RowRef) -> None:
    if not isinstance(cal, dict) or not {"min", "max"} <= set(cal):
        raise _fail(ref, f"metadata.calibration must be {{min, max}}, got {_short(cal)}")
    lo, hi = cal["min"], cal["max"]
    if not (_is_number(lo) and _is_number(hi)) or not hi > lo:
        raise _fail(ref, f"metadata.calibration needs finite numbers with max > min, got {_short(cal)}")
    if not math.isfinite(float(hi) - float(lo)):
        raise _fail(ref, f"metadata.calibration range max - min overflows, got {_short(cal)}")


def _check_solvers(solvers, ref: RowRef) -> None:
    if not isinstance(solvers, dict):
        raise _fail(ref, f"metadata.solvers must be an object, got {_short(solvers)}")
    for obj in OBJECTIVES:
        s = solvers.get(obj)
        if not isinstance(s, dict):
            raise _fail(ref, f"metadata.solvers lacks the objective {obj!r}")
        miss = [k for k in SOLVER_KEYS if k not in s]
        if miss:
            raise _fail(ref, f"metadata.solvers.{obj} lacks key(s) {miss}")
        w = s["weight"]
        if not _is_number(w) or not 0 <= w <= MAX_COST_WEIGHT:
            raise _fail(ref, f"metadata.solvers.{obj}.weight must be a finite number in [0, "
                             f"{cap_text(MAX_COST_WEIGHT)}] (a larger weight makes edge and route "
                             f"costs overflow), got {_short(w)}")


def _check_edge_costs(md: dict, ref: RowRef) -> None:
    """The scene's largest edge cost under each objective is at most :data:`MAX_EDGE_COST`:
    ``d + w`` for ``elevation`` and ``energy`` (their climb term is normalised by the
    relief), ``d + w * relief**2 / d`` for ``slope_uphill`` at the shortest step ``d``."""
    cal = md["calibration"]
    relief = float(cal["max"]) - float(cal["min"])
    d = GraphSpec().pixel_size_m
    for obj in OBJECTIVES:
        w = float(md["solvers"][obj]["weight"])
        if w == 0.0:
            continue
        top = d * math.sqrt(2.0) + w if obj != "slope_uphill" else d + w * (relief / d) * (relief / d) * d
        if not math.isfinite(top) or top > MAX_EDGE_COST:
            raise _fail(ref, f"metadata.solvers.{obj}.weight {_short(md['solvers'][obj]['weight'])} "
                             f"with the calibration relief {relief:g} m gives edge costs up to "
                             f"{top:.3g}, over the bound {MAX_EDGE_COST:g} (route costs would "
                             f"overflow); lower the weight or fix metadata.calibration")


def _check_tile(tile, ref: RowRef) -> None:
    if not isinstance(tile, dict):
        raise _fail(ref, f"metadata.tile must be an object, got {_short(tile)}")
    for key, bound in (("lat", 90), ("lon", 180)):
        v = tile.get(key)
        if not _is_number(v) or abs(v) > bound:
            raise _fail(ref, f"metadata.tile.{key} must be a coordinate, got {_short(v)}")
    tiles = tile.get("tiles")
    if tiles is None:
        return
    if not isinstance(tiles, list):
        raise _fail(ref, f"metadata.tile.tiles must be a list of [lat, lon], got {_short(tiles)}")
    for j, p in enumerate(tiles):
        if (not isinstance(p, list) or len(p) != 2 or not all(_is_number(x) for x in p)
                or abs(p[0]) > 90 or abs(p[1]) > 180):
            raise _fail(ref, f"metadata.tile.tiles[{j}] must be [lat, lon], got {_short(p)}")


# --------------------------------------------------------------------------- #
# tensor and markers
# --------------------------------------------------------------------------- #

def decode_checked(blob, resolution: int, ref: RowRef) -> np.ndarray:
    """Decode the tensor and check finite values, e in [0, 1], obstacles in {0, 1}."""
    t = _decoded(blob, resolution, ref)
    _tensor_problem(t, ref)
    return t


class Planes(NamedTuple):
    """A decoded tensor's three channels, each a contiguous (N, N) float32 array, and
    the least and greatest normalised elevation (the range check's by-products)."""

    e: np.ndarray
    markers: np.ndarray
    obstacles: np.ndarray
    e_min: np.float32
    e_max: np.float32


def decode_planes(blob, resolution: int, ref: RowRef) -> Planes:
    """The tensor decoded into its three channels (e, markers, obstacles), each a
    contiguous (N, N) float32 array, checked as :func:`decode_checked` checks it (and
    failing with the same message): a few passes over the planes when the tensor is
    good, the detailed checks only to name what is wrong with one that is not. The
    minimum and maximum of e that the check took come with them (:class:`Planes`)."""
    t = _decoded(blob, resolution, ref)
    e, m, o = (np.ascontiguousarray(t[..., k]) for k in range(3))
    # e in [0, 1] (NaN fails both comparisons), o in {0, 1}, m in {0, +1, -1}: every
    # cell of o and of m counted in exactly one of its allowed values
    e_min, e_max = e.min(), e.max()
    good = bool(e_min >= 0) and bool(e_max <= 1)
    good = good and np.count_nonzero(o == 1) + np.count_nonzero(o == 0) == o.size
    good = good and (np.count_nonzero(m == 0) + np.count_nonzero(m == 1)
                     + np.count_nonzero(m == -1)) == m.size
    if not good:
        _tensor_problem(t, ref)  # raises, naming the first problem
    return Planes(e, m, o, e_min, e_max)


def _decoded(blob, resolution: int, ref: RowRef) -> np.ndarray:
    if blob is None:
        raise _fail(ref, "tensor is null")
    try:
        return decode_tensor(blob, resolution)
    except TensorError as e:
        raise _fail(ref, str(e)) from None


def _tensor_problem(t: np.ndarray, ref: RowRef) -> None:
    """Raise naming the first problem of the decoded tensor ``t`` (non-finite values,
    then e outside [0, 1], then obstacles, then markers), if it has one."""
    bad = ~np.isfinite(t)
    if bad.any():
        r, c, ch = (int(x) for x in np.argwhere(bad)[0])
        raise _fail(ref, f"tensor has {int(bad.sum())} non-finite value(s); first at "
                         f"(row {r}, col {c}, channel {ch}): {t[r, c, ch]}")
    e = t[..., 0]
    out = (e < 0) | (e > 1)
    if out.any():
        r, c = (int(x) for x in np.argwhere(out)[0])
        raise _fail(ref, f"normalised elevation e must be in [0, 1]; {int(out.sum())} cell(s) "
                         f"outside, first at ({r}, {c}): {float(e[r, c])!r}")
    o = t[..., 2]
    bad_o = (o != 0) & (o != 1)
    if bad_o.any():
        r, c = (int(x) for x in np.argwhere(bad_o)[0])
        raise _fail(ref, f"obstacle channel must be 0 or 1; first other value at ({r}, {c}): "
                         f"{float(o[r, c])!r}")
    m = t[..., 1]
    bad_m = (m != 0) & (m != 1) & (m != -1)
    if bad_m.any():
        r, c = (int(x) for x in np.argwhere(bad_m)[0])
        raise _fail(ref, f"marker channel must hold only 0, +1, -1; found {float(m[r, c])!r} "
                         f"at ({r}, {c})")


def marker_cells(markers: np.ndarray, ref: RowRef) -> tuple[tuple[int, int], tuple[int, int]]:
    """Cells of the +1 and the -1 marker; exactly one of each is required."""
    markers = np.asarray(markers)
    cells = {}
    for sign, name in ((1, "+1"), (-1, "-1")):
        flat = np.flatnonzero(markers == sign)
        if len(flat) != 1:
            where = np.column_stack(np.unravel_index(flat[:4], markers.shape))
            what = "missing" if len(flat) == 0 else (
                f"marked {len(flat)} times, at {[tuple(map(int, w)) for w in where]}")
            raise _fail(ref, f"marker {name} is {what}; exactly one start and one goal "
                             f"marker are required")
        r, c = np.unravel_index(int(flat[0]), markers.shape)
        cells[sign] = (int(r), int(c))
    return cells[1], cells[-1]


def detect_marker_convention(plus, minus, routes: dict, ref: RowRef) -> dict:
    """Sign convention implied by the released routes (first cell start, last cell goal).

    Each route endpoint votes for the assignment it agrees with; the one with more
    votes wins. No votes for either, or a tie, is an error: the markers and the
    routes cannot both be right.
    """
    votes = {"standard": 0, "flipped": 0}
    for r in routes.values():
        if len(r) == 0:
            continue
        first, last = tuple(int(x) for x in r[0]), tuple(int(x) for x in r[-1])
        votes["standard"] += (first == plus) + (last == minus)
        votes["flipped"] += (first == minus) + (last == plus)
    if votes["standard"] > votes["flipped"]:
        return dict(DEFAULT_MARKERS)
    if votes["flipped"] > votes["standard"]:
        return dict(FLIPPED_MARKERS)
    raise _fail(ref, f"marker convention: the +1 marker at {plus} and the -1 marker at {minus} "
                     f"match the released routes' endpoints under neither sign assignment "
                     f"(votes {votes})")


# --------------------------------------------------------------------------- #
# routes
# --------------------------------------------------------------------------- #

def route_array(value, column: str, ref: RowRef, max_cells: int | None = None) -> np.ndarray:
    """A released route cell list as an (L, 2) int64 array (no rounding, no repair);
    a route of more than ``max_cells`` cells is refused before it is converted."""
    if value is None:
        raise _fail(ref, f"route {column} is null")
    try:
        cells = list(value)
        if max_cells is not None and len(cells) > max_cells:
            raise ValueError(f"it holds {len(cells)} cells, more than the {max_cells} cells of "
                             f"the grid")
        if any(c is None for c in cells):
            raise ValueError("a cell is null")
        rows = [list(c) for c in cells]
        if any(len(c) != 2 for c in rows):
            raise ValueError("every cell must be [row, col]")
        if any(not is_int(x) for c in rows for x in c):
            bad = next(x for c in rows for x in c if not is_int(x))
            raise ValueError(f"coordinates must be integers, found {_short(bad)}")
        a = np.array(rows, dtype=np.int64).reshape(len(rows), 2)
    except (TypeError, ValueError) as e:
        raise _fail(ref, f"route {column} is malformed: {e}") from None
    return a


def _route_from_any(value, column: str, ref: RowRef, max_cells: int) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype.kind in "iu":
        if len(value) > max_cells:
            raise _fail(ref, f"route {column} is malformed: it holds {len(value)} cells, more than "
                             f"the {max_cells} cells of the grid")
        return value.astype(np.int64)
    return route_array(value, column, ref, max_cells)


# --------------------------------------------------------------------------- #
# the row
# --------------------------------------------------------------------------- #

def check_id(value, ref: RowRef) -> str:
    if not isinstance(value, str):
        raise _fail(ref, f"id must be a string, got {type(value).__name__} {_short(value)}")
    if not _ID_RE.fullmatch(value):
        raise _fail(ref, f"id {_short(value)} is not a 10-digit zero-padded string")
    return value


def validate_row(row: dict, resolution: int, split: str, file: str = "<memory>",
                 row_index: int = -1, *, released_routes: bool = True) -> Scene:
    """Validate one raw shard row and build its :class:`Scene`.

    ``row`` maps column names to Python values as pyarrow gives them (``id`` str,
    ``tensor`` bytes, route columns lists of ``[row, col]``, ``metadata`` JSON str).
    Raises :class:`DataError` naming ``file``, ``row_index`` and the scene id, for
    every problem of the row (an unexpected failure of a check included).
    """
    split = canonical_split(split)
    ref = RowRef(str(file), int(row_index), row.get("id"))
    try:
        return _validated(row, resolution, split, (file, row_index, ref), released_routes)
    except DataError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError,
            RecursionError, MemoryError) as e:
        why = " ".join(str(e).split())[:200]
        raise _fail(ref, f"the row cannot be checked: {type(e).__name__}: {why}") from None


def _validated(row: dict, resolution: int, split: str, where: tuple, released_routes: bool) -> Scene:
    """The checks of :func:`validate_row`, in order (``where``: file, row index, RowRef)."""
    file, row_index, ref = where
    missing = [c for c in (REQUIRED_COLUMNS if released_routes else SCENE_COLUMNS) if c not in row]
    if missing:
        raise _fail(ref, f"missing column(s) {missing}")
    sid = check_id(row["id"], ref)
    md = parse_metadata(row["metadata"], resolution, split, ref)
    e, markers, obstacle_plane, e_min, e_max = decode_planes(row["tensor"], resolution, ref)
    plus, minus = marker_cells(markers, ref)
    routes = _released_routes(row, resolution, ref) if released_routes else {}
    if "markers" in md:
        conv = {"start": int(md["markers"]["start"]), "goal": int(md["markers"]["goal"])}
    elif released_routes:
        conv = detect_marker_convention(plus, minus, routes, ref)
    else:
        raise _fail(ref, "metadata declares no markers, and the released routes that imply "
                         "the marker convention were not read")
    start, goal = (plus, minus) if conv["start"] == 1 else (minus, plus)
    obstacles = obstacle_plane == 1
    for name, cell in (("start", start), ("goal", goal)):
        if obstacles[cell]:
            raise _fail(ref, f"the {name} marker at {cell} lies on an obstacle")
    shape = (resolution, resolution)
    for (obj, var), r in routes.items():
        prob = route_problem(r, start, goal, obstacles if var == "obstacles" else None, shape=shape)
        if prob is not None:
            raise _fail(ref, f"route {ROUTE_COLUMNS[(obj, var)]}: {prob}")
    md = dict(md)
    md.setdefault("markers", dict(conv))
    scene = Scene(
        id=sid, resolution=resolution, split=split, elevation_norm=e,
        elevation_m=elevation_metres(e, md["calibration"]), obstacles=obstacles,
        start=start, goal=goal,
        routes={k: r.astype(np.int32) for k, r in routes.items()},
        metadata=md, file=str(file), row=int(row_index),
    )
    keep_elevation_bounds(scene, e_min, e_max)  # the grid table of scoring reads them
    return scene


def _released_routes(row: dict, resolution: int, ref: RowRef) -> dict:
    cells = resolution * resolution
    return {key: _route_from_any(row[col], col, ref, cells) for key, col in ROUTE_COLUMNS.items()}


def declares_markers(metadata_text) -> bool:
    """Whether a ``metadata`` value is a JSON object with a ``markers`` key (the marker
    convention declared; a scene without it takes the convention from its released routes).
    Anything unreadable is False: the full read reports it."""
    if not isinstance(metadata_text, str) or len(metadata_text) > MAX_METADATA_BYTES:
        return False
    try:
        md = json.loads(metadata_text)
    except (ValueError, RecursionError):
        return False
    return isinstance(md, dict) and "markers" in md


def duplicate_id_problem(sid: str, here: tuple, places: list) -> str | None:
    """Message if ``sid`` occurs at another place in the resolution, else None.

    ``places`` lists every (split, file, row) holding the id; ``here`` is this row's.
    """
    others = [p for p in places if tuple(p) != tuple(here)]
    if not others:
        return None
    s, f, r = others[0]
    more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
    return (f"id {sid} is not unique within the resolution: it also occurs in split {s!r}, "
            f"{f} row {r}{more}")


def marker_convention(scene: Scene) -> str:
    """``"+1=start"`` or ``"-1=start"`` for a validated scene."""
    return "+1=start" if scene.metadata["markers"]["start"] == 1 else "-1=start"


def convention_problem(conv: str, expected: str, where_expected: str) -> str | None:
    """Message if a scene's marker convention differs from the split's, else None."""
    if conv == expected:
        return None
    return (f"marker convention {conv} differs from {expected} used by {where_expected}; "
            f"a split uses one convention, so one of these scenes has swapped markers")
