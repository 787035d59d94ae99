"""Learned planners (docs/contract.md §9): a Flax value-field network, its training, checkpoints
and guides.

Stage rules: ``learned`` imports ``graph``, ``reference``, ``metrics``, ``protocol``,
``data`` (training material only) and the leaf modules; ``run`` and ``evaluate`` may
import it. See ``docs/learned.md``.
"""
from passage_jax.learned.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from passage_jax.learned.decoders import (
    DecodeResult,
    bellman_backups,
    bounded_repair,
    direct,
    exact_fallback,
    octile_field,
    prediction_free,
)
from passage_jax.learned.guide import NetworkGuide, load_guide, shipped_checkpoint
from passage_jax.learned.model import FEATURE_NAMES, ValueFieldNet, feature_grid, features
from passage_jax.learned.planner import LearnedPlanner, guide_from_flax, make_planner
from passage_jax.learned.stages import Backups, Descent, Exact, GuidedAStar
from passage_jax.learned.tiling import CANONICAL_TILING, tiled_apply, tiling_protocol

# re-export block: the package's public names, each defined once in its module
__all__ = [
    "CHECKPOINT_FORMAT", "Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint",
    "NetworkGuide", "load_guide", "shipped_checkpoint",
    "FEATURE_NAMES", "ValueFieldNet", "feature_grid", "features",
    "DecodeResult", "direct", "bounded_repair", "prediction_free", "exact_fallback", "octile_field",
    "bellman_backups",
    "LearnedPlanner", "make_planner", "guide_from_flax", "Backups", "Descent", "GuidedAStar", "Exact",
    "CANONICAL_TILING", "tiled_apply", "tiling_protocol",
]
