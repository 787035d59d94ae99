"""Tiny hand-built scenes for the data-stage tests.

A scene is an N x N grid (N = 8 by default) with start (1, 1) and goal
(N-2, N-2). The ``*_obstacles`` routes run down the diagonal; the ``*_free``
routes run along row 1 and then down column N-2, crossing the obstacle at
(1, N-2) (legal for the free variant). A second obstacle sits at (N-2, 1).
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from passage_jax.data.codec import encode_tensor
from passage_jax.data.scene import PASSAGE_CALIBRATION, ROUTE_COLUMNS
from passage_jax.data.writer import write_split
from passage_jax.graph import OBJECTIVES

WEIGHTS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}


def diagonal_route(n: int) -> np.ndarray:
    return np.array([(i, i) for i in range(1, n - 1)], np.int32)


def free_route(n: int) -> np.ndarray:
    cells = [(1, c) for c in range(1, n - 1)] + [(r, n - 2) for r in range(2, n - 1)]
    return np.array(cells, np.int32)


def make_row(index: int, n: int = 8, split: str = "test", seed: int = 0, flipped: bool = False,
             markers_key: bool = True, tile=(36, -112)) -> dict:
    """One valid writer row (``write_split`` format)."""
    rng = np.random.default_rng(1000 * seed + index)
    t = np.zeros((n, n, 3), np.float32)
    t[..., 0] = rng.uniform(0.05, 0.25, (n, n)).astype(np.float32)
    s, g = (1, 1), (n - 2, n - 2)
    sign = -1.0 if flipped else 1.0
    t[s + (1,)] = sign
    t[g + (1,)] = -sign
    t[1, n - 2, 2] = 1.0
    t[n - 2, 1, 2] = 1.0
    routes = {}
    for obj in OBJECTIVES:
        routes[(obj, "obstacles")] = diagonal_route(n)
        routes[(obj, "free")] = free_route(n)
    md = {
        "index": index, "resolution": n, "split": split,
        "calibration": dict(PASSAGE_CALIBRATION),
        "solvers": {o: {"weight": WEIGHTS[o], "solver": "astar", "heuristic": "euclidean"}
                    for o in OBJECTIVES},
        "obstacles": {"coverage": 2 / (n * n), "target": 0.03, "n_shapes": 2},
        "fixture": True,
    }
    if markers_key:
        md["markers"] = {"start": int(sign), "goal": int(-sign)}
    if tile is not None:
        lat, lon = tile
        md["tile"] = {"source": "test", "lat": lat, "lon": lon, "tiles": [[lat, lon]]}
    return {"id": f"{index:010d}", "tensor": t, "routes": routes, "metadata": md}


def make_rows(count: int, start_index: int = 0, **kw) -> list[dict]:
    return [make_row(start_index + i, **kw) for i in range(count)]


def write_rows(root, rows, resolution: int = 8, split: str = "test", rows_per_shard: int = 64):
    return write_split(root, resolution, split, rows, rows_per_shard=rows_per_shard, overwrite=True)


def write_dataset(root, count: int = 5, resolution: int = 8, split: str = "test",
                  rows_per_shard: int = 2, start_index: int = 0, **kw):
    rows = make_rows(count, start_index=start_index, n=resolution, split=split, **kw)
    return write_rows(root, rows, resolution, split, rows_per_shard)


def mutated(row: dict) -> dict:
    """A deep copy of a row, safe to corrupt."""
    r = copy.deepcopy(row)
    r["tensor"] = np.array(row["tensor"], copy=True)
    return r


def foreign_table(rows: list[dict], route_type=None, image_columns: bool = True,
                  drop_markers_key: bool = True) -> pa.Table:
    """A table as a separate SPEC §1 writer might produce it: different column order,
    int64 routes, extra ``image_astar_*`` columns, no ``metadata.markers``."""
    route_type = pa.int64() if route_type is None else route_type
    cols: dict[str, list] = {"metadata": [], "id": [], "tensor": []}
    for col in reversed(list(ROUTE_COLUMNS.values())):
        cols[col] = []
    for r in rows:
        md = dict(r["metadata"])
        if drop_markers_key:
            md.pop("markers", None)
        cols["metadata"].append(json.dumps(md))
        cols["id"].append(r["id"])
        t = r["tensor"]
        cols["tensor"].append(t if isinstance(t, bytes) else encode_tensor(t, level=3))
        for key, col in ROUTE_COLUMNS.items():
            cols[col].append(np.asarray(r["routes"][key]).tolist())
    fields = []
    for name in cols:
        if name.startswith("path_astar_"):
            fields.append(pa.field(name, pa.list_(pa.list_(route_type))))
        elif name == "tensor":
            fields.append(pa.field(name, pa.binary()))
        else:
            fields.append(pa.field(name, pa.string()))
    table = pa.table(cols, schema=pa.schema(fields))
    if image_columns:
        for obj in ("elevation", "slope", "energy"):
            table = table.append_column(f"image_astar_{obj}",
                                        pa.array([b"\x89PNG fake"] * len(rows), pa.binary()))
    return table


def write_foreign(root, rows, resolution: int = 8, split: str = "test", name="shard-a.parquet",
                  row_group_size: int = 1, **kw):
    folder = root / f"{resolution}x{resolution}" / split
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(foreign_table(rows, **kw), path, row_group_size=row_group_size)
    return path
