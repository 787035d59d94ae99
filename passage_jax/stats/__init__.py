"""Statistics: block bootstrap, seed-mean contrasts, Holm, verdicts, randomization test, blocks, rosters."""

from .blocks import BLOCK_RULES, assign_blocks, block_census

__all__ = ["BLOCK_RULES", "assign_blocks", "block_census"]
