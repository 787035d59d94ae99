"""Data stage: PASSAGE v1.0 shards (codec, writer, validating streaming reader),
scenes and tasks, dataset-root resolution (contract §1) and the dataset audit.

The shipped terrain (``passage_jax.data.terrain``) and the cohort maker
(``passage_jax.data.cohort``) are imported from their modules.
"""
# re-exports, one name a line (the import layout every package __init__ shares)
from passage_jax.data.audit import audit_dataset
from passage_jax.data.codec import TensorError, decode_tensor, encode_tensor, expected_nbytes
from passage_jax.data.layout import present_splits, shard_files, shipped_cohort_root, split_folder
from passage_jax.data.read_ahead import ReadAhead
from passage_jax.data.reader import (
    DEFAULT_N_SAMPLES,
    RowReport,
    check_weight,
    id_places,
    iter_raw_rows,
    iter_scene_batches,
    iter_scenes,
    load_scenes,
    load_tasks,
    scan_split,
    scene_summary,
)
from passage_jax.data.remote import check_revision, resolve_dataset_root
from passage_jax.data.scene import (
    PASSAGE_CALIBRATION,
    ROUTE_COLUMNS,
    SPLIT_ALIASES,
    SPLITS,
    Scene,
    Task,
    canonical_split,
    elevation_metres,
    normalise_elevation,
    route_column,
    task_input_hash,
)
from passage_jax.data.stream import (
    CHUNK_CELLS,
    ReadOptions,
    TaskStream,
    TaskStub,
    chunk_scenes,
    open_tasks,
)
from passage_jax.data.validate import DataError, validate_row
from passage_jax.data.writer import write_split

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    # scenes and tasks
    "Scene", "Task", "SPLITS", "SPLIT_ALIASES", "canonical_split", "ROUTE_COLUMNS", "route_column",
    "PASSAGE_CALIBRATION", "elevation_metres", "normalise_elevation", "task_input_hash",
    # shard codec, validation, writing
    "TensorError", "encode_tensor", "decode_tensor", "expected_nbytes", "DataError", "validate_row",
    "write_split",
    # dataset roots and reading
    "resolve_dataset_root", "check_revision", "shipped_cohort_root", "present_splits",
    "split_folder", "shard_files", "id_places", "iter_raw_rows", "iter_scenes",
    "iter_scene_batches", "load_scenes", "load_tasks", "check_weight", "DEFAULT_N_SAMPLES",
    # tasks held compactly, grids read in chunks
    "TaskStream", "TaskStub", "open_tasks", "ReadOptions", "CHUNK_CELLS", "chunk_scenes", "ReadAhead",
    # whole-split scans and the audit
    "RowReport", "scan_split", "scene_summary", "audit_dataset",
]
