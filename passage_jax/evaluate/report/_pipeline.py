"""Markdown report of a comparison, with route and regret figures (docs/scoring.md;
docs/contract.md §7).

``write_report(compare_json, output_md)`` reads the file written by
``compare``, reloads the two runs' persisted routes and references (and the
scenes' terrain, hash-checked, for the route figure) and writes:

* ``<output>.md``: per-method six-metric tables per seed, the contrasts with
  their intervals, valid-route denominators and the both-valid geometry
  intersection, latency, the component figures (and the component-attribution
  table when the runs declare ``component_control``), block census, limits and
  ODD bins;
* ``<stem>_routes.png``: candidate A, candidate B and the reference route over
  a hillshaded elevation map with the obstacles, for a few tasks (those where
  the two methods' regrets differ most, then the first tasks);
* ``<stem>_regret.png``: the distribution of all-task regret per method
  (empirical CDF of the finite, non-censored regrets on a symmetric-log axis,
  with the number of failures, whose regret is 999999, stated);
* ``<stem>.html`` (with ``html=True``, ``report --html``): the same content as one
  self-contained page, figures inline and tables sortable by a click on a header.

All or nothing: every file is first written into a hidden staging folder beside the report
(``.<stem>.*.partial``) and moved into place only when all of them were built; a report that
fails leaves no file of its own behind (nor a folder it created), so the rerun needs no
``--force``. Every text from the comparison file is escaped on its way into the Markdown
(:mod:`~passage_jax.evaluate.text_safety`), and the page embeds images only from the
report's own folder (:mod:`~passage_jax.evaluate.report._html`).

Also :func:`metrics_rows` and :data:`METRICS_COLUMNS`: the six-metric table of
``score`` and ``bench`` as data (``cli/console.py`` draws it).

The pieces: the comparison file is read and checked by
:mod:`~passage_jax.evaluate.report._input`, the Markdown written section by section by
:mod:`~passage_jax.evaluate.report._markdown`, the figures drawn by
:mod:`~passage_jax.evaluate.report._figures`; their public names are importable from here.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from passage_jax.contract import PRIMARY_METRICS, PRIMARY_SHORT
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.report._figures import regret_figure, route_figure
from passage_jax.evaluate.report._html import ReportHtmlError, write_report_html
from passage_jax.evaluate.report._input import ReportError, ReportExists, read_comparison
from passage_jax.evaluate.report._markdown import render_markdown
from passage_jax.evaluate.score import ScoreError
from passage_jax.fileio import atomic_write_text
from passage_jax.protocol.records import RecordFileError
from passage_jax.protocol.runfolder import SEED_FOLDER_PREFIX

__all__ = [
    "write_report", "html_path_of", "check_report_name", "METRICS_COLUMNS", "metrics_rows",
]


# --------------------------------------------------------------------------- #
# console table (score, bench), as data
# --------------------------------------------------------------------------- #

def metrics_rows(scores: dict) -> list[list[str]]:
    """The six-metric table of scored seeds (name -> ``metrics.json``) as text cells under
    :data:`METRICS_COLUMNS`: one row per seed, then their seed mean when there are several."""
    rows = []
    for name, m in scores.items():
        p = m["primary"]
        label = str(name).removeprefix(SEED_FOLDER_PREFIX)
        rows.append([label] + [_fmt(p[k]) for k in PRIMARY_METRICS]
                    + [f"{m['n_path_valid']}/{m['n_tasks']}"])
    if len(scores) > 1:
        mean = []
        for k in PRIMARY_METRICS:
            vals = [m["primary"][k] for m in scores.values() if m["primary"][k] is not None]
            mean.append(_fmt(float(np.mean(vals))) if vals else "n/a")
        rows.append(["seed mean"] + mean + [""])
    return rows


METRICS_COLUMNS = ("seed",) + PRIMARY_SHORT + ("valid/tasks",)


# --------------------------------------------------------------------------- #
# the report
# --------------------------------------------------------------------------- #

def _refuse_folders(paths) -> None:
    folders = [p for p in paths if p.is_dir()]
    if folders:
        raise ReportError(f"{folders[0]} is a folder; the report's files must be new or existing "
                          f"files (a folder is never replaced, with or without --force)")


#: the names a Markdown report may not take: ``--output`` always names the Markdown file
#: (``--html`` writes the page beside it), so an HTML name would hold Markdown
HTML_SUFFIXES = (".html", ".htm")


def check_report_name(output) -> Path:
    """``output`` as a Path when it can name the Markdown report; :class:`ReportError` (before
    anything is written) when its name ends ``.html`` or ``.htm``, with or without ``--html``."""
    output = Path(output)
    if output.suffix.lower() in HTML_SUFFIXES:
        md = output.with_suffix(".md").name
        raise ReportError(f"{output}: --output names the Markdown report, not the page: give a "
                          f"Markdown name (e.g. --output {md}) and pass --html to also write the "
                          f"page beside it as {output.with_suffix('.html').name}")
    return output


def html_path_of(output) -> Path:
    """Where ``report --html`` writes the page of the report ``output``: the same name with
    ``.html`` (refused when ``output`` is itself an ``.html`` file: :func:`check_report_name`)."""
    return check_report_name(output).with_suffix(".html")


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    out = []
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders this call created (deepest first), where they are still empty."""
    for f in folders:
        try:
            f.rmdir()
        except OSError:
            return


def write_report(compare_json, output, n_route_tasks: int = 4, force: bool = False,
                 html: bool = False) -> dict:
    """Write the Markdown report of the comparison file ``compare_json`` to ``output`` and its
    figures beside it; returns their paths. A malformed comparison file (not JSON, not an
    object, a field missing or of the wrong type) raises :class:`ReportError` naming the file
    and the field; existing outputs are replaced only with ``force`` (never a folder).
    ``html``: also write the self-contained page (:func:`html_path_of`; figures inline,
    sortable tables; :mod:`~passage_jax.evaluate.report._html`). All or nothing: the files are
    built in a staging folder beside ``output`` and moved into place only once every one of
    them is built; on any failure nothing this call wrote is left behind."""
    compare_json, output = Path(compare_json), check_report_name(output)
    page = html_path_of(output) if html else None
    cmp = read_comparison(compare_json)
    trail = cmp._trail
    stem = output.stem
    figs = {"routes": output.with_name(f"{stem}_routes.png"),
            "regret": output.with_name(f"{stem}_regret.png")}
    outputs = [output, *figs.values()] + ([page] if page else [])
    _refuse_folders(outputs)
    existing = [p for p in outputs if p.exists()]
    if existing and not force:
        raise ReportExists(f"{existing[0]} exists; choose a new report name")
    created = _missing_folders(output.parent)
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{stem}.", suffix=".partial", dir=output.parent))
        try:
            _build(cmp, stage, output, page, figs, n_route_tasks, compare_json, trail)
            for final in outputs:  # every file built: move them into place
                os.replace(stage / final.name, final)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    except BaseException:
        _remove_empty(created)
        raise
    out = {"report": str(output), **{k: str(v) for k, v in figs.items()}}
    if page is not None:
        out["html"] = str(page)
    return out


def _build(cmp, stage: Path, output: Path, page, figs: dict, n_route_tasks: int,
           compare_json: Path, trail) -> None:
    """Write the report's files into the staging folder ``stage`` under their final names."""
    try:
        md = render_markdown(cmp, {k: v.name for k, v in figs.items()})
        route_figure(cmp, stage / figs["routes"].name, n_route_tasks)
        regret_figure(cmp, stage / figs["regret"].name)
    except (ScoreError, RecordFileError) as e:
        raise ReportError(str(e)) from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        near = f" near field {trail[0]!r}" if trail else ""
        raise ReportError(f"{compare_json}: malformed comparison file{near}: {type(e).__name__}: "
                          f"{e}") from None
    atomic_write_text(stage / output.name, md)
    if page is not None:
        try:
            write_report_html(stage / output.name, stage / page.name)
        except ReportHtmlError as e:
            raise ReportError(str(e)) from None
