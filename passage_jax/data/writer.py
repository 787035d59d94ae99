"""Writer for the PASSAGE v1.0 shard layout (contract §1)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from passage_jax.data.codec import encode_tensor
from passage_jax.data.scene import ROUTE_COLUMNS, canonical_split
from passage_jax.fileio import atomic_write_bytes

__all__ = ["ROUTE_TYPE", "shard_schema", "rows_to_table", "atomic_write_table", "write_split"]

ROUTE_TYPE = pa.list_(pa.list_(pa.int32()))


def shard_schema() -> pa.Schema:
    """The columns a shard is written with (contract §1), in order."""
    fields = [pa.field("id", pa.string()), pa.field("tensor", pa.binary())]
    fields += [pa.field(col, ROUTE_TYPE) for col in ROUTE_COLUMNS.values()]
    fields += [pa.field("metadata", pa.string())]
    return pa.schema(fields)


def _route_value(route) -> list:
    a = np.asarray(route)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"route must have shape (L, 2), got {a.shape}")
    return a.astype(np.int32).tolist()


def rows_to_table(rows: list[dict]) -> pa.Table:
    """rows: dicts with ``id`` (str), ``tensor`` ((N, N, 3) float32 array or encoded
    bytes), ``routes`` ({(objective, variant): (L, 2) ints}) and ``metadata`` (dict)."""
    cols: dict[str, list] = {name: [] for name in shard_schema().names}
    for r in rows:
        cols["id"].append(str(r["id"]))
        t = r["tensor"]
        cols["tensor"].append(t if isinstance(t, (bytes, bytearray)) else encode_tensor(t))
        for key, col in ROUTE_COLUMNS.items():
            cols[col].append(_route_value(r["routes"][key]))
        cols["metadata"].append(json.dumps(r["metadata"], sort_keys=True))
    return pa.table(cols, schema=shard_schema())


def atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` as one zstd-compressed Parquet file, atomically."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    atomic_write_bytes(path, sink.getvalue().to_pybytes())


def write_split(root, resolution: int, split: str, rows: list[dict],
                rows_per_shard: int = 64, overwrite: bool = False) -> list[Path]:
    """Write ``rows`` as ``<root>/<N>x<N>/<split>/part-XXXXX.parquet`` shards, in order.

    Refuses a split folder that already holds shards unless ``overwrite``.
    """
    split = canonical_split(split)
    folder = Path(root) / f"{resolution}x{resolution}" / split
    if folder.exists() and any(folder.glob("*.parquet")) and not overwrite:
        raise FileExistsError(f"{folder} already holds shards; refusing to overwrite")
    if overwrite and folder.exists():
        for old in folder.glob("*.parquet"):
            old.unlink()
    paths = []
    for i in range(0, max(len(rows), 1), rows_per_shard):
        chunk = rows[i:i + rows_per_shard]
        if not chunk:
            break
        path = folder / f"part-{i // rows_per_shard:05d}.parquet"
        atomic_write_table(rows_to_table(chunk), path)
        paths.append(path)
    return paths
