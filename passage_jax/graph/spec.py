"""GraphSpec: the graph a scene is planned on (contract §2); the objective names are
re-exported from :mod:`passage_jax.contract`.

The move table lives in :mod:`passage_jax.graph.moves`, the cost-model registry in
:mod:`passage_jax.graph.costs`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from passage_jax.graph.costs import COST_MODELS
from passage_jax.graph.moves import STEP_PIXELS

__all__ = ["GraphSpec"]



@dataclasses.dataclass(frozen=True)
class GraphSpec:
    """The graph a scene is planned on. Only the PASSAGE values are supported."""

    cost_model: str = "elevation"
    cost_weight: float = 62.4
    connectivity: int = 8
    diagonal_policy: str = "destination_only"
    pixel_size_m: float = 30.0
    obstacle_policy: str = "blocked"
    coordinate_order: str = "row_col"
    rtol: float = 1e-7
    atol: float = 1e-6

    def __post_init__(self):
        fixed = {
            "connectivity": 8,
            "diagonal_policy": "destination_only",
            "obstacle_policy": "blocked",
            "coordinate_order": "row_col",
        }
        for name, want in fixed.items():
            got = getattr(self, name)
            if got != want:
                raise ValueError(f"GraphSpec.{name}={got!r} is not supported (only {want!r})")
        if self.cost_model not in COST_MODELS:
            raise ValueError(
                f"GraphSpec.cost_model={self.cost_model!r} is unknown; "
                f"known: {sorted(COST_MODELS)}"
            )
        if not (math.isfinite(self.pixel_size_m) and self.pixel_size_m > 0):
            raise ValueError(f"GraphSpec.pixel_size_m={self.pixel_size_m!r} must be positive")
        if not (math.isfinite(float(self.cost_weight)) and float(self.cost_weight) >= 0):
            raise ValueError(f"GraphSpec.cost_weight={self.cost_weight!r} must be finite and >= 0")
        if self.rtol < 0 or self.atol < 0:
            raise ValueError("GraphSpec.rtol and atol must be >= 0")

    @property
    def step_lengths_m(self) -> np.ndarray:
        """Step length in metres of each move of ``MOVES`` (float64, shape (8,))."""
        return STEP_PIXELS * self.pixel_size_m

    def costs_agree(self, a: float, c_star: float) -> bool:
        """The qualification rule |a - c*| <= atol + rtol * c*."""
        return abs(a - c_star) <= self.atol + self.rtol * abs(c_star)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
