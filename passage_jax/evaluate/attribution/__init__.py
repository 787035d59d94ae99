"""Component-attribution table over any number of scored runs (docs/scoring.md, "Component
attribution"): :mod:`._table` builds and writes it, :mod:`._search` reads the search
figures of each run. This module is the package's only public face.
"""
from __future__ import annotations

from passage_jax.evaluate.attribution._table import (
    ATTRIBUTION_FORMAT,
    CONTROL_SPECS,
    REQUIRED_CONTROLS,
    ROW_FIGURES,
    AttributionError,
    AttributionExists,
    attribution_flags,
    attribution_rows,
    attribution_table,
    format_number,
    markdown_table,
    render_attribution_markdown,
    run_entry,
    write_attribution_report,
)

__all__ = [
    "attribution_table", "attribution_rows", "attribution_flags", "run_entry",
    "render_attribution_markdown", "write_attribution_report", "format_number", "markdown_table",
    "AttributionError", "AttributionExists", "ATTRIBUTION_FORMAT", "REQUIRED_CONTROLS",
    "ROW_FIGURES", "CONTROL_SPECS",
]
