"""Self-contained HTML pages: the report's Markdown rendered to one ``.html`` file.

:func:`markdown_page` converts Markdown with markdown-it-py (CommonMark plus tables; raw
HTML in the Markdown is escaped, never passed through), embeds every image the Markdown
links as a ``data:image/png;base64`` URI read from the file beside it, and wraps the result
in a page with inline CSS and a small inline script that sorts any table by a click on a
column header (numbers numerically, text alphabetically, cells without a value last;
a second click reverses; cells without a value are ``n/a``, ``not reported``,
``unavailable``, ``baseline``, ``—`` or empty). The page loads nothing from elsewhere: no stylesheet, script,
font or image outside the file.

:func:`write_report_html` writes the page of a report Markdown file beside it
(``python -m cli report --html``); :mod:`passage_jax.evaluate.leaderboard` builds its page
with :func:`html_page`.
"""
from __future__ import annotations

import base64
import html
from pathlib import Path

from passage_jax.fileio import atomic_write_text

__all__ = ["markdown_page", "html_page", "markdown_body", "write_report_html", "ReportHtmlError",
           "SORT_SCRIPT", "IMAGE_TYPES"]

#: file suffix -> MIME type of the images a page may embed
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg",
               ".jpeg": "image/jpeg"}


class ReportHtmlError(RuntimeError):
    """The page cannot be built (an image the Markdown links is missing or not embeddable)."""


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1400px;padding:0 1em;color:#1a1a1a;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ccc;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
code{background:#f3f3f3;padding:0 .25em;border-radius:3px;font-size:.92em}
.table-wrap{overflow-x:auto;margin:.6em 0}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#eef1f5;cursor:pointer;user-select:none;white-space:nowrap}
th:hover{background:#dde3ea}
th.sort-asc::after{content:" \\25B2";font-size:.75em}
th.sort-desc::after{content:" \\25BC";font-size:.75em}
th:not(.sort-asc):not(.sort-desc)::after{content:" \\21C5";font-size:.75em;color:#999}
tr:nth-child(even) td{background:#fafafa}
img{max-width:100%;height:auto;border:1px solid #ddd}
.note{color:#555;font-size:.9em}
"""

#: the inline script: a click on a table header sorts that table's body by the column
SORT_SCRIPT = r"""
(function () {
  "use strict";
  // cells that hold no value: sorted last in a numeric column, whatever the direction
  var PLACEHOLDERS = ["", "n/a", "not reported", "\u2014", "baseline", "unavailable"];
  function key(text) {
    var t = text.replace(/\u2212/g, "-").replace(/^[\s\u2265\u2264<>=~\[(]+/, "").trim();
    var m = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?/i.exec(t);
    return m ? parseFloat(m[0]) : null;
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var rows = Array.prototype.slice.call(body.rows);
    var cells = rows.map(function (r) {
      var c = r.cells[col];
      return c ? c.textContent.trim() : "";
    });
    var numeric = cells.every(function (t) {
      return PLACEHOLDERS.indexOf(t) >= 0 || key(t) !== null;
    }) && cells.some(function (t) { return key(t) !== null; });
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var order = rows.map(function (r, i) { return i; });
    order.sort(function (i, j) {
      var a = numeric ? key(cells[i]) : cells[i], b = numeric ? key(cells[j]) : cells[j];
      var ea = (a === null || a === ""), eb = (b === null || b === "");
      if (ea || eb) { return ea === eb ? i - j : (ea ? 1 : -1); }
      var d = numeric ? a - b : a.localeCompare(b, undefined, {numeric: true});
      if (d === 0) { return i - j; }
      return asc ? d : -d;
    });
    order.forEach(function (i) { body.appendChild(rows[i]); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
      h.classList.remove("sort-asc", "sort-desc");
    });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    th.classList.add(asc ? "sort-asc" : "sort-desc");
  }
  document.querySelectorAll("table").forEach(function (table) {
    if (!table.tHead) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.title = "sort by this column";
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
})();
"""


def _markdown_it():
    try:
        from markdown_it import MarkdownIt  # noqa: PLC0415 (only the HTML pages need it)
    except ImportError as e:  # pragma: no cover - rich depends on markdown-it-py
        raise ReportHtmlError("the HTML page needs markdown-it-py (installed with rich): "
                              f"pip install markdown-it-py ({e})") from None
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _data_uri(path: Path) -> str:
    kind = IMAGE_TYPES.get(path.suffix.lower())
    if kind is None:
        raise ReportHtmlError(f"{path}: cannot embed an image of type {path.suffix!r} "
                              f"(embeddable: {', '.join(sorted(IMAGE_TYPES))})")
    if not path.is_file():
        raise ReportHtmlError(f"{path}: image linked by the report not found; nothing external is "
                              f"linked from the page, so every figure must lie beside the report")
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def markdown_body(md: str, base: Path) -> str:
    """The HTML body of Markdown ``md``: images (relative to folder ``base``) embedded as data
    URIs, every table wrapped so that a wide one scrolls; a link is kept as written."""
    mdi = _markdown_it()
    tokens = mdi.parse(md)
    for tok in tokens:
        for child in tok.children or ():
            if child.type == "image":
                src = str(child.attrGet("src") or "")
                if not src.startswith("data:"):
                    child.attrSet("src", _data_uri(Path(base) / src))
    body = mdi.renderer.render(tokens, mdi.options, {})
    return body.replace("<table>", '<div class="table-wrap"><table>').replace(
        "</table>", "</table></div>")


def html_page(title: str, body: str, css: str = "") -> str:
    """A complete page: ``body`` (HTML) with the inline style (plus ``css``) and sort script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}{css}</style>\n</head>\n<body>\n"
            f"{body}\n<p class=\"note\">Click a column header to sort the table by it; click "
            f"again to reverse.</p>\n<script>{SORT_SCRIPT}</script>\n</body>\n</html>\n")


def _title(md: str, default: str) -> str:
    for line in md.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return default


def markdown_page(md: str, base: Path, title: str | None = None) -> str:
    """The self-contained page of Markdown ``md`` (images relative to ``base``)."""
    return html_page(title or _title(md, "report"), markdown_body(md, base))


def write_report_html(md_path, html_path=None) -> Path:
    """Write the page of the report Markdown file ``md_path`` to ``html_path`` (default: the
    same name with ``.html``), atomically; returns its path."""
    md_path = Path(md_path)
    html_path = Path(html_path) if html_path is not None else md_path.with_suffix(".html")
    md = md_path.read_text(encoding="utf-8")
    atomic_write_text(html_path, markdown_page(md, md_path.parent))
    return html_path
