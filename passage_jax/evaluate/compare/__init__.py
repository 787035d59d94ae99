"""Paired comparison of two scored runs (docs/scoring.md, "compare").

:mod:`._pipeline` orchestrates (``compare_runs``); the steps below it, one module each:
:mod:`._options`, :mod:`._checks` (the two runs loaded and checked), :mod:`._pairing`,
:mod:`._blocks`, :mod:`._primary`, :mod:`._contrasts`, :mod:`._odd`; :mod:`._verify`
re-derives a comparison file; :mod:`._errors`. This module is the package's only public face.
"""
from __future__ import annotations

from passage_jax.evaluate.compare._blocks import (
    blocks_for,
)
from passage_jax.evaluate.compare._checks import (
    Side,
    check_identity,
    check_limits,
    load_side,
)
from passage_jax.evaluate.compare._contrasts import (
    ESTIMATE_KEYS,
    latency_contrast,
)
from passage_jax.evaluate.compare._errors import (
    CompareError,
    InvalidResamples,
    LimitsDiffer,
    NoncanonicalPairing,
    OutputExists,
    OutputIsFolder,
    PrecisionMismatch,
    RosterHashMissing,
    RosterMismatch,
    TestEvidenceError,
)
from passage_jax.evaluate.compare._odd import (
    ODD_FORMAT,
    bin_index,
    read_odd_spec,
)
from passage_jax.evaluate.compare._options import (
    DEFAULT_RESAMPLES,
    PAIRED_TESTS,
    CompareOptions,
)
from passage_jax.evaluate.compare._pairing import (
    QUALITY_FIELDS,
    quality_rows,
)
from passage_jax.evaluate.compare._pipeline import (
    COMPARE_FORMAT,
    Comparison,
    compare_runs,
)
from passage_jax.evaluate.compare._primary import (
    EVIDENCE_KEYS,
    read_test_evidence,
)
from passage_jax.evaluate.compare._verify import (
    verify_comparison,
)

__all__ = [
    "compare_runs", "Comparison", "CompareOptions", "verify_comparison", "load_side", "Side",
    "quality_rows", "QUALITY_FIELDS", "bin_index", "blocks_for", "check_identity", "check_limits",
    "latency_contrast", "read_test_evidence", "read_odd_spec", "COMPARE_FORMAT", "ODD_FORMAT",
    "DEFAULT_RESAMPLES", "PAIRED_TESTS", "EVIDENCE_KEYS", "ESTIMATE_KEYS", "CompareError",
    "InvalidResamples", "LimitsDiffer", "NoncanonicalPairing", "OutputExists", "OutputIsFolder",
    "PrecisionMismatch", "RosterHashMissing", "RosterMismatch", "TestEvidenceError",
]
