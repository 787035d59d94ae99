"""Statistics: block bootstrap, seed-mean contrasts, Holm, verdicts, randomization test, blocks, rosters."""

from .blocks import BLOCK_RULES, BLOCK_RULE_VERSION, assign_blocks, block_census
from .bootstrap import (DEFAULT_SEEDS, BootstrapResult, SeedMeanResult, multiplicity_matrix,
                        paired_bootstrap, percentile_interval, seed_mean_bootstrap)
from .compare import (Comparison, Decision, HolmRecord, compare_primary_metrics, decide,
                      holm_bonferroni, metric_vote)
from .primary import DIRECTIONS, PRIMARY_METRICS
from .randomization import RandomizationResult, block_randomization_test
from .roster import Roster, RosterError, read_roster, roster_from_tiles, write_roster

__all__ = [
    "BLOCK_RULES", "BLOCK_RULE_VERSION", "assign_blocks", "block_census",
    "DEFAULT_SEEDS", "BootstrapResult", "SeedMeanResult", "multiplicity_matrix",
    "paired_bootstrap", "percentile_interval", "seed_mean_bootstrap",
    "Comparison", "Decision", "HolmRecord", "compare_primary_metrics", "decide",
    "holm_bonferroni", "metric_vote", "DIRECTIONS", "PRIMARY_METRICS",
    "RandomizationResult", "block_randomization_test",
    "Roster", "RosterError", "read_roster", "roster_from_tiles", "write_roster",
]
