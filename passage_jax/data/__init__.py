"""Data stage: PASSAGE v1.0 shards (codec, writer, validating streaming reader),
scenes and tasks, dataset-root resolution (SPEC §1)."""
from passage_jax.data.codec import TensorError, decode_tensor, encode_tensor, expected_nbytes  # noqa: F401
from passage_jax.data.scene import (  # noqa: F401
    PASSAGE_CALIBRATION, ROUTE_COLUMNS, SPLIT_ALIASES, SPLITS, Scene, Task, canonical_split,
    elevation_metres, normalise_elevation, route_column,
)
from passage_jax.data.validate import DataError, validate_row  # noqa: F401
from passage_jax.data.reader import (  # noqa: F401
    DEFAULT_N_SAMPLES, check_weight, id_places, iter_raw_rows, iter_scene_batches, iter_scenes,
    load_scenes, load_tasks, present_splits, RowReport, scan_split, scene_summary, shard_files,
    shipped_cohort_root, split_folder,
)
from passage_jax.data.remote import check_revision, resolve_dataset_root  # noqa: F401
