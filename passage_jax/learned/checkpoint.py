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

:func:`save_checkpoint` (and :func:`check_checkpoint_target`, which it calls first)
refuses, naming the file or folder: a target that already holds either file unless
``overwrite=True``; a folder target that is a file, a ``.msgpack`` target, a target
whose folder cannot be created or written; and, even with ``overwrite``, any target
inside the package's shipped checkpoint folder (:data:`SHIPPED_CHECKPOINT_DIR`, whose
files' sha256 the configs record).
"""
from __future__ import annotations

import dataclasses
import json
import os
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

__all__ = ["CHECKPOINT_FORMAT", "SHIPPED_CHECKPOINT_DIR", "CheckpointError", "Checkpoint",
           "checkpoint_files", "check_checkpoint_target", "save_checkpoint", "resolve_checkpoint",
           "load_checkpoint"]

CHECKPOINT_FORMAT = "passage_jax.value_field/1"
#: The package's shipped checkpoints: configs record their sha256, so nothing writes here.
SHIPPED_CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
_SHIPPED_PARTS = ("passage_jax", "learned", "checkpoints")


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


def checkpoint_files(path) -> tuple[Path, Path]:
    """The (metadata JSON, parameter file) pair a checkpoint at ``path`` is written as:
    ``<stem>.json`` and ``<stem>.msgpack`` for a ``.json`` path, else ``checkpoint.json``
    and ``params.msgpack`` inside the folder ``path``."""
    path = Path(path)
    if path.suffix == ".json":
        return path, path.with_suffix(".msgpack")
    return path / "checkpoint.json", path / "params.msgpack"


def _inside_shipped(folder: Path) -> bool:
    """Whether ``folder`` is, or lies inside, a shipped checkpoint folder (the installed
    package's, or a source checkout's ``passage_jax/learned/checkpoints``)."""
    real = folder.resolve()
    for f in (real, *real.parents):
        if f == SHIPPED_CHECKPOINT_DIR or f.parts[-3:] == _SHIPPED_PARTS:
            return True
    return False


def _check_folder(folder: Path) -> None:
    """Refuse a checkpoint folder that is a file, sits under a file, or cannot be written
    (the nearest existing folder above it is the one checked)."""
    for f in (folder, *folder.parents):
        if not f.exists():
            continue
        if not f.is_dir():
            what = "is a file" if f == folder else f"lies under {f}, which is a file"
            raise CheckpointError(f"checkpoint folder {folder} {what}, not a folder")
        if not os.access(f, os.W_OK | os.X_OK):
            what = "is not writable" if f == folder else f"cannot be created: {f} is not writable"
            raise CheckpointError(f"checkpoint folder {folder} {what}")
        return


def check_checkpoint_target(path, *, overwrite: bool = False) -> tuple[Path, Path]:
    """Check that a checkpoint can be written at ``path`` (see :func:`checkpoint_files`)
    before any work is done; returns the (metadata JSON, parameter file) pair.

    Raises :class:`CheckpointError` naming the file or folder when ``path`` ends in
    ``.msgpack``, lies inside :data:`SHIPPED_CHECKPOINT_DIR` (even with ``overwrite``),
    its folder is a file or not writable, either file is a folder, or either file
    exists and ``overwrite`` is false."""
    if Path(path).suffix == ".msgpack":
        raise CheckpointError(f"checkpoint path {path} ends in .msgpack: give the metadata .json path "
                              "(its parameters go to <stem>.msgpack beside it) or a folder")
    json_path, params_path = checkpoint_files(path)
    folder = json_path.parent
    if _inside_shipped(folder):
        raise CheckpointError(f"checkpoint {json_path} is inside the package's shipped checkpoint "
                              f"folder {SHIPPED_CHECKPOINT_DIR} (configs record those files' sha256); "
                              "write it elsewhere")
    _check_folder(folder)
    for p in (json_path, params_path):
        if p.is_dir():
            raise CheckpointError(f"checkpoint file {p} is a folder")
        if (p.exists() or p.is_symlink()) and not overwrite:
            raise CheckpointError(f"checkpoint file {p} already exists; refusing to replace it "
                                  "(train --force, or overwrite=True, replaces it)")
    return json_path, params_path


def save_checkpoint(path, module, params, metadata: dict | None = None, *,
                    overwrite: bool = False) -> Path:
    """Write ``params`` next to the metadata JSON ``path`` (``<stem>.msgpack``; a
    folder ``path`` gets ``params.msgpack`` and ``checkpoint.json``). Returns the
    JSON path; its ``params_sha256`` is the parameter file's sha256. The target is
    checked first by :func:`check_checkpoint_target` (an existing checkpoint is
    replaced only with ``overwrite=True``)."""
    json_path, params_path = check_checkpoint_target(path, overwrite=overwrite)
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
    # the smallest input the module takes: a U-Net needs sides divisible by 2**levels
    side = max(8, 2 ** int(getattr(module, "levels", 0)))
    x = jax.ShapeDtypeStruct((1, side, side, N_FEATURES), jnp.float32)
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
