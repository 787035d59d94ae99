"""``python -m cli report --compare F --output R.md``: Markdown report with figures.

``python -m cli report --attribution RUN [RUN ...] --output R.md``: the component-attribution
table of any number of scored runs (``passage_jax.evaluate.attribution``).

``--html`` also writes the same content as one self-contained page beside the Markdown
(``<name>.html``: figures inline, every table sortable by a click on its header).
``--output`` always names the Markdown file: a name ending ``.html`` or ``.htm`` is refused,
with or without ``--html``, before anything is written (exit 2)."""
from __future__ import annotations

import sys

from cli import inputs
from cli.console import say


def register(p):
    p.add_argument("--compare", help="comparison JSON written by `compare`")
    p.add_argument("--attribution", nargs="+", metavar="RUN",
                   help="scored run folders: write their component-attribution table instead")
    p.add_argument("--output", required=True,
                   help="Markdown file to write; figures go beside it as <stem>_*.png")
    p.add_argument("--route-tasks", type=int, default=4, help="tasks in the route figure")
    p.add_argument("--html", action="store_true",
                   help="also write <name>.html beside the Markdown: one self-contained page "
                        "(figures inline, tables sortable by clicking a header)")
    p.add_argument("--force", action="store_true", help="replace existing report files")


def check(args) -> None:
    """Before JAX loads: the comparison file or the scored runs named exist."""
    inputs.require_file(args.compare, "comparison file")
    for run in args.attribution or ():
        inputs.require_folder(run, "--attribution run")


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.evaluate import ReportError, ReportExists, write_report  # noqa: PLC0415 (CLI start-up)
    from passage_jax.evaluate.attribution import (  # noqa: PLC0415 (CLI start-up)
        AttributionError,
        AttributionExists,
        write_attribution_report,
    )
    from passage_jax.evaluate.report import (  # noqa: PLC0415 (CLI start-up)  # noqa: PLC0415 (CLI start-up)
        ReportHtmlError,
        check_report_name,
        html_path_of,
        write_report_html,
    )

    if (args.compare is None) == (args.attribution is None):
        say("report: give either --compare F or --attribution RUN [RUN ...]", sys.stderr)
        return 2
    try:
        check_report_name(args.output)  # an .html name would hold Markdown: refused, nothing written
    except ReportError as e:
        say(f"report: {e}", sys.stderr)
        return 2
    if args.attribution:
        try:
            page = html_path_of(args.output) if args.html else None
            if page is not None and page.exists() and not args.force:
                raise ReportExists(f"{page} exists; choose a new report name")
            write_attribution_report(args.attribution, args.output, force=args.force)
            if page is not None:
                write_report_html(args.output, page)
        except (AttributionError, ReportError, ReportHtmlError) as e:
            exists = isinstance(e, (AttributionExists, ReportExists))
            flag = " (or pass --force to replace it)" if exists else ""
            say(f"report: {e}{flag}", sys.stderr)
            return 2
        say(args.output)
        if page is not None:
            say(page)
        return 0
    try:
        out = write_report(args.compare, args.output, n_route_tasks=args.route_tasks,
                           force=args.force, html=args.html)
    except ReportError as e:
        flag = " (or pass --force to replace it)" if isinstance(e, ReportExists) else ""
        say(f"report: {e}{flag}", sys.stderr)
        return 2
    for v in out.values():
        say(v)
    return 0
