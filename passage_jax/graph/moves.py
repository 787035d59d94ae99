"""The fixed 8-neighbour move table (contract §2).

``MOVES[k]`` is the k-th move as ``(d_row, d_col)``; its order is also the
tie-break everywhere a choice among moves is made (descent, search).
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["MOVES", "DIAGONAL", "STEP_PIXELS", "move_index"]

#: The 8 moves as (d_row, d_col), in the fixed order that is also the tie-break.
MOVES = np.array(
    [(-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)],
    dtype=np.int32,
)
#: True for the diagonal moves of ``MOVES``.
DIAGONAL = np.array([abs(dr) + abs(dc) == 2 for dr, dc in MOVES])
#: Step length of each move in pixels (1 or sqrt(2)).
STEP_PIXELS = np.where(DIAGONAL, math.sqrt(2.0), 1.0)


def move_index(d_row: int, d_col: int) -> int:
    """Index of the move (d_row, d_col) in ``MOVES``; ValueError if it is not a move."""
    for k, (dr, dc) in enumerate(MOVES):
        if dr == d_row and dc == d_col:
            return k
    raise ValueError(f"({d_row}, {d_col}) is not one of the 8 moves")
