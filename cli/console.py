"""Console rendering of library results (rich tables): the library returns data, the
command line draws it."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

__all__ = ["print_metrics_table"]


def print_metrics_table(scores: dict, title: str = "six primary metrics", console=None) -> Table:
    """The six primary metrics of each scored seed (and their seed mean) as a rich table,
    from :func:`passage_jax.evaluate.metrics_rows`."""
    from passage_jax.evaluate import METRICS_COLUMNS, metrics_rows  # noqa: PLC0415 (CLI start-up)

    t = Table(title=title)
    for c in METRICS_COLUMNS:
        t.add_column(c, justify="left" if c == "seed" else "right", no_wrap=True)
    for row in metrics_rows(scores):
        t.add_row(*row)
    if console is None:
        console = Console()
        console.width = max(console.width, 120)
    console.print(t)
    return t
