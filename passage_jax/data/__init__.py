"""Data stage: PASSAGE v1.0 shards (codec, writer, validating streaming reader),
scenes and tasks, dataset-root resolution (contract §1) and the dataset audit.

The shipped terrain (``passage_jax.data.terrain``) and the cohort maker
(``passage_jax.data.cohort``) are imported from their modules.
"""
from passage_jax.exports import lazy_exports

# re-exports, by module: each module is imported when one of its names is first used
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "passage_jax.data.audit": ("audit_dataset",),
    "passage_jax.data.codec": ("TensorError", "decode_tensor", "encode_tensor", "expected_nbytes"),
    "passage_jax.data.layout": (
        "present_splits", "shard_files", "shipped_cohort_root", "split_folder",
    ),
    "passage_jax.data.read_ahead": ("ReadAhead",),
    "passage_jax.data.reader": (
        "DEFAULT_N_SAMPLES", "RowReport", "check_weight", "id_places", "iter_raw_rows",
        "iter_scene_batches", "iter_scenes", "load_scenes", "load_tasks", "scan_split",
        "scene_summary", "scenes_at",
    ),
    "passage_jax.data.remote": ("check_revision", "resolve_dataset_root"),
    "passage_jax.data.scene": (
        "PASSAGE_CALIBRATION", "ROUTE_COLUMNS", "SPLIT_ALIASES", "SPLITS", "Scene", "Task",
        "canonical_split", "elevation_metres", "normalise_elevation", "route_column",
        "task_input_hash",
    ),
    "passage_jax.data.stream": (
        "CHUNK_CELLS", "ReadOptions", "TaskStream", "TaskStub", "chunk_scenes", "open_tasks",
    ),
    "passage_jax.data.validate": ("DataError", "validate_row"),
    "passage_jax.data.writer": ("write_split",),
})
