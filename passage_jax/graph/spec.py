"""GraphSpec and the fixed 8-neighbour move table (SPEC §2)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

#: The 8 moves as (d_row, d_col), in the fixed order that is also the tie-break.
MOVES = np.array(
    [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)],
    dtype=np.int32,
)
#: True for the diagonal moves of ``MOVES``.
DIAGONAL = np.array([abs(dr) + abs(dc) == 2 for dr, dc in MOVES])
#: Step length of each move in pixels (1 or sqrt(2)).
STEP_PIXELS = np.where(DIAGONAL, math.sqrt(2.0), 1.0)

OBJECTIVES = ("elevation", "slope_uphill", "energy")
"""The three objectives of PASSAGE v1.0 (SPEC §2 names)."""
VARIANTS = ("free", "obstacles")
#: Column-name stem of each objective in released shards (`slope` for `slope_uphill`).
OBJECTIVE_COLUMN = {"elevation": "elevation", "slope_uphill": "slope", "energy": "energy"}


def move_index(d_row: int, d_col: int) -> int:
    """Index of the move (d_row, d_col) in ``MOVES``; ValueError if it is not a move."""
    for k, (dr, dc) in enumerate(MOVES):
        if dr == d_row and dc == d_col:
            return k
    raise ValueError(f"({d_row}, {d_col}) is not one of the 8 moves")


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
        from passage_jax.graph.costs import COST_MODELS  # local: avoid import cycle

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
