"""The six primary metrics: validation of the per-seed inputs of a paired comparison.

The metric names, reductions, directions and per-task fields are the contract's
(:mod:`passage_jax.contract`).

Input format (``A`` and ``B`` alike): a mapping training seed -> per-task record::

    {1234: {"task_id": [...], "regret": (n,), "assd": (n,), "h95": (n,),
            "success": (n,), "obstacle_violation": (n,), "valid_path": (n,) optional},
     2026: {...}, 3407: {...}}

``task_id`` is the ordered roster (unique strings; identical for every seed and both methods).
``regret`` is finite for every task (failures keep their censored regret). ``assd`` and ``h95``
are NaN exactly for tasks without a valid path. ``success`` and ``obstacle_violation`` are
booleans (or 0/1). If ``valid_path`` is present, geometry must be finite exactly where it is
true.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from passage_jax.contract import (
    DEFAULT_SEEDS,
    GEOMETRY_FIELDS,
    PER_TASK_FIELDS,
    UNPLACED,
)
from passage_jax.stats.bootstrap import encode_blocks

#: The per-task fields behind the primary metrics (the contract's ``PER_TASK_FIELDS``).
FIELDS = PER_TASK_FIELDS

__all__ = ["FIELDS", "validate_primary"]


def _seed_key(k):
    if isinstance(k, bool):
        return None
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, str) and k.strip().isdigit():
        return int(k)
    return None


def _method(X, name, seeds):
    if not isinstance(X, Mapping):
        raise ValueError(f"{name}: expected a mapping training seed -> per-task record")
    out = {}
    for k, v in X.items():
        s = _seed_key(k)
        if s is None:
            raise ValueError(f"{name}: seed key {k!r} is not an integer seed")
        if s in out:
            raise ValueError(f"{name}: seed {s} given twice")
        out[s] = v
    if set(out) != set(seeds):
        raise ValueError(f"{name}: seeds {sorted(out)} but exactly {list(seeds)} are required")
    return {s: out[s] for s in seeds}


def _task_ids(rec, where):
    if "task_id" not in rec:
        raise ValueError(f"{where}: missing 'task_id'")
    ids = [str(t) for t in np.asarray(rec["task_id"], dtype=object).ravel()]
    return ids


def _field(rec, f, n, where):
    if f not in rec:
        raise ValueError(f"{where}: missing metric field {f!r} (need all of {PER_TASK_FIELDS})")
    x = np.asarray(rec[f])
    if x.ndim != 1 or x.shape[0] != n:
        raise ValueError(f"{where}.{f}: expected shape ({n},), got {x.shape}")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{where}.{f}: expected numbers, got dtype {x.dtype}")
    x = x.astype(np.float64)
    if f in ("success", "obstacle_violation", "valid_path"):
        bad = np.flatnonzero(~np.isin(x, (0.0, 1.0)))
        if bad.size:
            raise ValueError(f"{where}.{f}: task {bad[0]} has {x[bad[0]]}, expected a boolean")
    elif f == "regret":
        bad = np.flatnonzero(~np.isfinite(x))
        if bad.size:
            raise ValueError(f"{where}.regret: task {bad[0]} is {x[bad[0]]}; regret must be finite "
                             "for every task (failures keep their censored regret)")
    else:
        bad = np.flatnonzero(np.isinf(x))
        if bad.size:
            raise ValueError(f"{where}.{f}: task {bad[0]} is infinite (NaN marks an invalid path)")
    return x


def _check_roster(ids, where, ref_ids, ref_from) -> None:
    """A roster must be the first one read, identically ordered; the first has unique ids."""
    if ref_ids is None:
        if len(set(ids)) != len(ids):
            seen = set()
            dup = next(t for t in ids if t in seen or seen.add(t))
            raise ValueError(f"{where}.task_id: task {dup!r} appears more than once")
        return
    if ids != ref_ids:
        if len(ids) != len(ref_ids):
            raise ValueError(f"{where}.task_id: {len(ids)} tasks, {ref_from} has {len(ref_ids)}")
        i = next(i for i, (x, y) in enumerate(zip(ids, ref_ids)) if x != y)
        raise ValueError(f"{where}.task_id: position {i} is {ids[i]!r}, {ref_from} has "
                         f"{ref_ids[i]!r} (rosters must be identical and identically ordered)")


def _record(rec, ids, where) -> dict[str, np.ndarray]:
    """The checked per-task fields of one method and seed (geometry finite exactly where
    ``valid_path``, when given)."""
    n = len(ids)
    cols = {f: _field(rec, f, n, where) for f in PER_TASK_FIELDS}
    if "valid_path" in rec:
        v = _field(rec, "valid_path", n, where).astype(bool)
        for g in GEOMETRY_FIELDS:
            mism = np.flatnonzero(np.isfinite(cols[g]) != v)
            if mism.size:
                raise ValueError(f"{where}.{g}: task {ids[mism[0]]!r} is "
                                 f"{'finite' if v[mism[0]] == 0 else 'NaN'} but valid_path is "
                                 f"{bool(v[mism[0]])}")
    return cols


def _block_index(blocks, ref_ids):
    """(block index, labels) of the roster; at least two known blocks."""
    n = len(ref_ids)
    if isinstance(blocks, Mapping):
        missing = [t for t in ref_ids if t not in blocks]
        if missing:
            raise ValueError(f"blocks: task {missing[0]!r} has no block ({len(missing)} missing)")
        blocks = [blocks[t] for t in ref_ids]
    if blocks is None:
        raise ValueError("blocks are required: unknown blocks cannot be replaced by task ids")
    blocks = list(blocks)
    for i, b in enumerate(blocks):
        if b is None:
            raise ValueError(f"blocks: task {ref_ids[i] if i < n else i!r} has no block label")
    idx, labels = encode_blocks(blocks, n)
    known = [lab for lab in labels if lab != UNPLACED]
    if len(known) < 2:
        raise ValueError(f"blocks: {len(known)} known block(s); at least two are required")
    return idx, labels


def validate_primary(A, B, blocks, task_ids=None, seeds: Sequence[int] = DEFAULT_SEEDS):
    """Check the comparison inputs; return (data, block_index, labels, ids).

    ``data[method][seed][field]`` are float64 arrays; ``block_index`` (n,) int32 into the
    sorted ``labels``. Raises ``ValueError`` naming the method, seed, field and task.
    """
    seeds = tuple(seeds)
    methods = {"A": _method(A, "A", seeds), "B": _method(B, "B", seeds)}
    ref_ids = None if task_ids is None else [str(t) for t in task_ids]
    ref_from = "task_ids"
    data: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    for mname, per_seed in methods.items():
        data[mname] = {}
        for s, rec in per_seed.items():
            where = f"{mname}[{s}]"
            if not isinstance(rec, Mapping):
                raise ValueError(f"{where}: expected a mapping of per-task arrays")
            ids = _task_ids(rec, where)
            _check_roster(ids, where, ref_ids, ref_from)
            if ref_ids is None:
                ref_ids, ref_from = ids, where
            data[mname][s] = _record(rec, ids, where)
    if ref_ids is not None and task_ids is not None and len(set(ref_ids)) != len(ref_ids):
        raise ValueError("task_ids: duplicate task ids")
    if len(ref_ids) == 0:
        raise ValueError("no tasks")
    idx, labels = _block_index(blocks, ref_ids)
    return data, idx, labels, ref_ids
