"""Checkpoints: Flax msgpack parameters plus a JSON metadata file with their sha256.

A checkpoint is two files side by side:

* the parameters, serialised with ``flax.serialization.msgpack_serialize`` (the
  Flax ecosystem's own format; ``flax.serialization.msgpack_restore`` reads it);
* the metadata JSON: ``format``, ``params_file`` (the parameter file's name,
  relative to the JSON), ``params_sha256``, ``model`` (the module description of
  :func:`~passage_jax.learned.model.module_config`), and whatever the writer adds
  (training config, seed, step, metrics, time).

:func:`load_checkpoint` accepts the JSON, the parameter file (its sibling
``<stem>.json`` or ``checkpoint.json`` is the metadata) or a folder holding
``checkpoint.json``; it refuses a parameter file whose sha256 differs from the
recorded one, or that does not decode to the recorded module's parameter tree,
naming the file. Both files are written atomically.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.fileio import (
    atomic_write_bytes,
    atomic_write_json,
    check_sha256,
    jsonable,
    sha256_bytes,
)
from passage_jax.learned.model import N_FEATURES, module_config, module_from_config

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "Checkpoint", "save_checkpoint",
           "resolve_checkpoint", "load_checkpoint"]

CHECKPOINT_FORMAT = "passage_jax.value_field/1"


class CheckpointError(ValueError):
    """A checkpoint cannot be read: missing file, bad metadata, sha256 or tree mismatch."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the module, its parameters, the metadata, the parameter
    file's sha256 (``checkpoint_id``) and the metadata file's path."""

    module: object
    params: dict
    metadata: dict
    checkpoint_id: str
    path: Path


def save_checkpoint(path, module, params, metadata: dict | None = None) -> Path:
    """Write ``params`` next to the metadata JSON ``path`` (``<stem>.msgpack``; a
    folder ``path`` gets ``params.msgpack`` and ``checkpoint.json``). Returns the
    JSON path; its ``params_sha256`` is the parameter file's sha256."""
    path = Path(path)
    if path.suffix != ".json":
        json_path, params_path = path / "checkpoint.json", path / "params.msgpack"
    else:
        json_path = path
        params_path = path.with_suffix(".msgpack")
    host = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), jax.device_get(params))
    data = flax.serialization.msgpack_serialize(host)
    atomic_write_bytes(params_path, data)
    meta = dict(metadata or {})
    meta.update(format=CHECKPOINT_FORMAT, params_file=params_path.name,
                params_sha256=sha256_bytes(data), params_bytes=len(data),
                model=module_config(module))
    atomic_write_json(json_path, jsonable(meta))  # NaN metrics -> null (strict JSON)
    return json_path


def resolve_checkpoint(path) -> Path:
    """The metadata JSON of a checkpoint given as JSON, parameter file or folder."""
    p = Path(path)
    if p.is_dir():
        p = p / "checkpoint.json"
    elif p.suffix != ".json":
        sib = p.with_suffix(".json")
        p = sib if sib.exists() else p.parent / "checkpoint.json"
    if not p.is_file():
        raise CheckpointError(f"checkpoint metadata {p} does not exist (given {path})")
    return p


def _abstract_params(module):
    x = jax.ShapeDtypeStruct((1, 8, 8, N_FEATURES), jnp.float32)
    return jax.eval_shape(module.init, jax.random.PRNGKey(0), x)


def load_checkpoint(path, dtype=jnp.float32) -> Checkpoint:
    """Read and check a checkpoint (see the module docstring)."""
    json_path = resolve_checkpoint(path)
    try:
        meta = json.loads(json_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{json_path}: unreadable checkpoint metadata ({e})") from None
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if fmt != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{json_path}: format {fmt!r} is not {CHECKPOINT_FORMAT!r}")
    for key in ("params_file", "params_sha256", "model"):
        if key not in meta:
            raise CheckpointError(f"{json_path}: metadata lacks {key!r}")
    params_path = json_path.parent / str(meta["params_file"])
    digest = check_sha256(params_path, meta["params_sha256"], CheckpointError,
                 what="checkpoint parameter file", recorded_by=json_path.name)
    try:
        module = module_from_config(meta["model"], dtype=dtype)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{json_path}: bad model description ({e})") from None
    try:
        params = flax.serialization.msgpack_restore(params_path.read_bytes())
    except Exception as e:  # msgpack raises several unrelated types on bad bytes
        raise CheckpointError(f"checkpoint parameter file {params_path} does not decode ({e})") from None
    want = _abstract_params(module)
    got_shapes = jax.tree_util.tree_map(lambda a: tuple(np.shape(a)), params)
    want_shapes = jax.tree_util.tree_map(lambda a: tuple(a.shape), want)
    if got_shapes != want_shapes:
        raise CheckpointError(f"checkpoint parameter file {params_path} does not hold the parameters "
                              f"of {meta['model']}")
    params = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), params)
    return Checkpoint(module=module, params=params, metadata=meta, checkpoint_id=digest,
                      path=json_path)
