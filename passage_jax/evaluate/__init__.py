"""Offline evaluation (SPEC §4, §5, §7): score run folders from what they persisted,
summarise latency, compare two scored runs, write reports and the bench sidecar.

It reads the records of :mod:`passage_jax.protocol.records` and never imports
:mod:`passage_jax.run` (nor does ``run`` import it); ``python -m cli bench`` composes
the two.
"""
from passage_jax.evaluate.analyze import (
    ANALYSIS_FORMAT,
    AnalyzeError,
    AnalyzeOptions,
    MissingDependency,
    StagingExists,
    analyze_notebooks,
)
from passage_jax.evaluate.compare import (
    COMPARE_FORMAT,
    CompareError,
    CompareOptions,
    InvalidResamples,
    OutputExists,
    compare_runs,
)
from passage_jax.evaluate.latency import censored_latency_block, interpolated_percentiles, series_latency
from passage_jax.evaluate.report import (
    METRICS_COLUMNS,
    ReportError,
    ReportExists,
    metrics_rows,
    render_markdown,
    write_report,
)
from passage_jax.evaluate.score import (
    PER_SAMPLE_FIELDS,
    AlreadyScored,
    DatasetNotFound,
    ScoreError,
    ScoreOutdated,
    load_score,
    score_folder,
    score_run,
    seed_folders,
)
from passage_jax.evaluate.sidecar import SIDECAR_FORMAT, default_output, sidecar

__all__ = [
    "score_run", "score_folder", "load_score", "seed_folders", "PER_SAMPLE_FIELDS", "ScoreError",
    "AlreadyScored", "DatasetNotFound", "ScoreOutdated", "series_latency",
    "censored_latency_block", "interpolated_percentiles", "compare_runs", "CompareError",
    "OutputExists", "InvalidResamples", "COMPARE_FORMAT", "write_report", "render_markdown",
    "METRICS_COLUMNS", "metrics_rows", "ReportError", "ReportExists", "sidecar", "default_output",
    "SIDECAR_FORMAT", "analyze_notebooks", "ANALYSIS_FORMAT", "AnalyzeError", "MissingDependency",
    "StagingExists", "CompareOptions", "AnalyzeOptions",
]
