"""Trust stage: stability, geographic, domain-edge (ODD boundary) and efficiency axes.

Contract: each axis is a jittable kernel on arrays plus a host function returning an
:class:`AxisResult` (value, threshold, fires, available, details) under the definitions and
thresholds of docs/trust.md § Axes; :func:`trust_table` tabulates them over scored runs
already read from their folders. The stage imports only :mod:`passage_jax.metrics`,
:mod:`passage_jax.stats` and the leaf modules (``contract``, ``fileio``, ``reduce``).

Modules: ``axes`` (kernels and axis functions), ``table`` (the table over scored runs).
"""
from __future__ import annotations

from passage_jax.trust.axes import (
    DEFAULT_TOP_QUANTILE,
    EFFICIENCY_THRESHOLD,
    FIELD_DIRECTIONS,
    STABILITY_THRESHOLD,
    AxisResult,
    boundary_delta,
    coefficient_of_variation,
    efficiency_axis,
    geographic_axis,
    higher_is_better,
    mean_difference,
    odd_boundary_axis,
    speedup,
    stability_axis,
)
from passage_jax.trust.table import (
    TRUST_FORMAT,
    TrustError,
    device_identity,
    quality_rows,
    stratifier_names,
    trust_table,
)

__all__ = [
    "AxisResult", "DEFAULT_TOP_QUANTILE", "EFFICIENCY_THRESHOLD", "FIELD_DIRECTIONS",
    "STABILITY_THRESHOLD", "boundary_delta", "coefficient_of_variation", "efficiency_axis",
    "geographic_axis", "higher_is_better", "mean_difference", "odd_boundary_axis", "speedup",
    "stability_axis", "TRUST_FORMAT", "TrustError", "device_identity", "quality_rows",
    "stratifier_names", "trust_table",
]
