"""Offline evaluation (docs/scoring.md; docs/contract.md §4, §5, §7): score run folders
from what they persisted, summarise latency, compare two scored runs, write reports and the
bench sidecar; one subpackage a concern (``score``, ``compare``, ``report``,
``attribution``, ``analyze``), each with its ``__init__`` as its public face.

It reads the records of :mod:`passage_jax.protocol.records` and never imports
:mod:`passage_jax.run` (nor does ``run`` import it); ``python -m cli bench`` composes
the two.
"""
# ``sidecar`` is also the name of its module: bound here, or importing the module would
# replace the function on the package (tests/evaluate/test_read_fast_paths.py checks for these)
from passage_jax.evaluate.sidecar import SIDECAR_FORMAT, default_output, sidecar
from passage_jax.exports import lazy_exports

# re-exports, by module: each module is imported when one of its names is first used
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "passage_jax.evaluate.analyze": (
        "ANALYSIS_FORMAT", "AnalyzeError", "AnalyzeOptions", "MissingDependency", "StagingExists",
        "analyze_notebooks",
    ),
    "passage_jax.evaluate.compare": (
        "COMPARE_FORMAT", "CompareError", "CompareOptions", "InvalidResamples", "OutputExists",
        "compare_runs",
    ),
    "passage_jax.evaluate.latency": (
        "censored_latency_block", "interpolated_percentiles", "series_latency",
    ),
    "passage_jax.evaluate.report": (
        "METRICS_COLUMNS", "ReportError", "ReportExists", "metrics_rows", "render_markdown",
        "write_report",
    ),
    "passage_jax.evaluate.score": (
        "PER_SAMPLE_FIELDS", "AlreadyScored", "DatasetNotFound", "ScoreError", "ScoreOutdated",
        "load_score", "score_folder", "score_run", "seed_folders",
    ),
})
__all__ += ["SIDECAR_FORMAT", "default_output", "sidecar"]
