"""Markdown and HTML reports of a comparison, with route and regret figures (docs/scoring.md,
"report").

:mod:`._pipeline` writes a report (``write_report``) from :mod:`._input` (the comparison
read back and verified), :mod:`._markdown`, :mod:`._figures` and :mod:`._html`. This module
is the package's only public face.
"""
from __future__ import annotations

from passage_jax.evaluate.report._figures import (
    regret_figure,
    route_figure,
)
from passage_jax.evaluate.report._html import (
    ReportHtmlError,
    html_page,
    markdown_body,
    write_report_html,
)
from passage_jax.evaluate.report._input import (
    COMPARE_FIELDS,
    ReportError,
    ReportExists,
    read_comparison,
)
from passage_jax.evaluate.report._markdown import (
    components_section,
    endpoint,
    failed_delta,
    regret_failed,
    render_markdown,
)
from passage_jax.evaluate.report._pipeline import (
    METRICS_COLUMNS,
    check_report_name,
    html_path_of,
    metrics_rows,
    write_report,
)

__all__ = [
    "write_report", "write_report_html", "render_markdown", "read_comparison", "html_path_of",
    "check_report_name", "metrics_rows", "METRICS_COLUMNS", "COMPARE_FIELDS", "components_section",
    "route_figure", "regret_figure", "html_page", "markdown_body", "endpoint", "failed_delta",
    "regret_failed", "ReportError", "ReportExists", "ReportHtmlError",
]
