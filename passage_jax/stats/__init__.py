"""Statistics stage: block bootstrap, seed-mean contrasts, Holm, verdicts, the block
randomization test, geographic blocks and frozen rosters.

Contract: inputs are per-task arrays over one ordered task roster (see
:mod:`passage_jax.stats.primary`); results are dataclasses with ``to_dict()``; each entry
point's options are a frozen dataclass of :mod:`passage_jax.stats.options` (``options=``, or
its fields as keywords). The stage imports only leaf modules (:mod:`passage_jax.contract`,
:mod:`passage_jax.checks`, :mod:`passage_jax.fileio`, :mod:`passage_jax.placement`,
:mod:`passage_jax.precision`, :mod:`passage_jax.reduce`), never another stage.
``DEFAULT_SEEDS``, ``PRIMARY_METRICS``, ``DIRECTIONS`` and ``METRIC_SPEC`` are the
contract's, re-exported here.

Modules: ``kernels`` (jitted resampling kernels), ``draws`` (multiplicity matrices and the
draws of many series under one matrix, placed on devices), ``options`` (the options
dataclasses and shared checks), ``bootstrap`` (paired / seed-mean bootstrap and their
results), ``primary`` (validation of the six-metric inputs), ``compare`` (Holm, votes,
verdict, ``compare_primary_metrics``), ``randomization`` (block randomization test),
``blocks`` (block rules, census), ``roster`` (roster files).
"""
from __future__ import annotations

from passage_jax.contract import DEFAULT_SEEDS, DIRECTIONS, METRIC_SPEC, PRIMARY_METRICS
from passage_jax.stats.blocks import BLOCK_RULE_VERSION, BLOCK_RULES, assign_blocks, block_census
from passage_jax.stats.bootstrap import (
    BootstrapResult,
    SeedMeanResult,
    observed_statistic,
    paired_bootstrap,
    parse_statistic,
    percentile_interval,
    seed_mean_bootstrap,
    seed_mean_result,
    stat_name,
)
from passage_jax.stats.compare import (
    Comparison,
    Decision,
    HolmRecord,
    compare_primary_metrics,
    decide,
    holm_bonferroni,
    metric_vote,
)
from passage_jax.stats.draws import multiplicity_matrix
from passage_jax.stats.options import (
    BootstrapOptions,
    ComparisonOptions,
    DrawOptions,
    RandomizationOptions,
    ResultOptions,
)
from passage_jax.stats.randomization import RandomizationResult, block_randomization_test
from passage_jax.stats.roster import (
    Roster,
    RosterError,
    check_derived,
    derive_roster,
    read_roster,
    roster_from_tiles,
    write_roster,
)

__all__ = [
    "BLOCK_RULES", "BLOCK_RULE_VERSION", "assign_blocks", "block_census",
    "DEFAULT_SEEDS", "BootstrapResult", "SeedMeanResult", "multiplicity_matrix",
    "paired_bootstrap", "percentile_interval", "seed_mean_bootstrap", "parse_statistic",
    "observed_statistic", "stat_name", "seed_mean_result",
    "Comparison", "Decision", "HolmRecord", "compare_primary_metrics", "decide",
    "holm_bonferroni", "metric_vote", "DIRECTIONS", "METRIC_SPEC", "PRIMARY_METRICS",
    "RandomizationResult", "block_randomization_test",
    "Roster", "RosterError", "read_roster", "roster_from_tiles", "write_roster", "derive_roster",
    "check_derived",
    "BootstrapOptions", "ComparisonOptions", "DrawOptions", "RandomizationOptions", "ResultOptions",
]
