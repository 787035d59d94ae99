"""Self-contained HTML pages: the report's Markdown rendered to one ``.html`` file.

:func:`markdown_page` converts Markdown with markdown-it-py (CommonMark plus tables; raw
HTML in the Markdown is escaped, never passed through), embeds every image the Markdown
links as a ``data:image/png;base64`` URI read from the file beside it, and wraps the result
in a page with inline CSS and a small inline script that sorts any table by a click on a
column header (numbers numerically, text alphabetically, cells without a value last;
a second click reverses; cells without a value are ``n/a``, ``not reported``,
``unavailable``, ``baseline``, ``—`` or empty, or a failure: ``failed (…)``,
``— (… failed)``, ``failure-coded``). The page loads nothing from elsewhere: no stylesheet,
script, font or image outside the file.

Every table fits the window's width down to 1,280 px: header and body cells wrap between
words (a number is never split), and a table's first column (the method, metric or seed
label) may also break inside a long name; a table that still cannot fit scrolls in its own
box, never the page.

:func:`write_report_html` writes the page of a report Markdown file beside it
(``python -m cli report --html``); :mod:`passage_jax.evaluate.leaderboard` builds its page
with :func:`html_page`.

**Images only from the page's own folder.** An image reference is embedded only when it is
a relative path (percent-decoded) that, symlinks resolved, names a file inside the folder
the page is written from (``base``) with an embeddable suffix; any other reference (an
absolute path, ``..`` out of the folder, a symlink pointing out, a URL or ``data:`` URI)
is refused with :class:`ReportHtmlError` naming it, before anything of it is read
(docs/scoring.md, "Text on the pages").
"""
from __future__ import annotations

import base64
import html
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from passage_jax.evaluate.text_safety import url_path, visible
from passage_jax.fileio import atomic_write_text

__all__ = ["markdown_page", "html_page", "markdown_body", "write_report_html", "ReportHtmlError",
           "SORT_SCRIPT", "IMAGE_TYPES", "embeddable_image"]

#: file suffix -> MIME type of the images a page may embed
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg",
               ".jpeg": "image/jpeg"}


class ReportHtmlError(RuntimeError):
    """The page cannot be built (an image the Markdown links is missing, not embeddable, or
    outside the page's own folder)."""


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;
max-width:1400px;padding:0 1em;color:#1a1a1a;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ccc;padding-bottom:.2em}
h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd}
code{background:#f3f3f3;padding:0 .25em;border-radius:3px;font-size:.92em}
.table-wrap{overflow-x:auto;margin:.6em 0}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
td:first-child{overflow-wrap:anywhere}
th{background:#eef1f5;cursor:pointer;user-select:none}
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
  // a failure-coded figure ("failed (4/6 tasks)", "\u2014 (A failed)", "failure-coded")
  var FAILURE = /^(failed\b|failure-coded|\u2014 \()/;
  function empty(t) { return PLACEHOLDERS.indexOf(t) >= 0 || FAILURE.test(t); }
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
      return empty(t) || key(t) !== null;
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


def embeddable_image(src: str, base) -> Path:
    """The file the image reference ``src`` (a Markdown destination) names inside the folder
    ``base``, symlinks resolved; :class:`ReportHtmlError` naming ``src`` for any reference
    that is not a relative path to a file there with an embeddable suffix. Reads nothing of
    the file."""
    folder = Path(base).resolve()
    parts = urlsplit(src)
    rel = url_path(parts.path)
    if (not rel or parts.scheme or parts.netloc or parts.query or parts.fragment
            or rel.startswith(("/", "\\")) or PurePosixPath(rel).is_absolute()
            or Path(rel).is_absolute() or "\x00" in rel):
        raise ReportHtmlError(f"image reference {visible(src)!r} refused: a page embeds only "
                              f"images given by a relative path inside its own folder {folder}")
    path = (folder / rel).resolve()
    if path == folder or folder not in path.parents:
        raise ReportHtmlError(f"image reference {visible(src)!r} refused: it leads out of the "
                              f"page's own folder {folder} (a page embeds only images inside it)")
    if path.suffix.lower() not in IMAGE_TYPES:
        raise ReportHtmlError(f"image reference {visible(src)!r}: cannot embed an image of type "
                              f"{path.suffix!r} (embeddable: {', '.join(sorted(IMAGE_TYPES))})")
    if not path.is_file():
        raise ReportHtmlError(f"image reference {visible(src)!r}: not found in {folder}; nothing "
                              f"external is linked from the page, so every figure must lie "
                              f"beside the report")
    return path


def _data_uri(path: Path) -> str:
    kind = IMAGE_TYPES[path.suffix.lower()]
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def markdown_body(md: str, base: Path) -> str:
    """The HTML body of Markdown ``md``: every image embedded as a data URI of the file it
    names inside the folder ``base`` (any other image reference refused:
    :func:`embeddable_image`), every table wrapped so that a wide one scrolls; a link is kept
    as written (markdown-it refuses ``javascript:`` and similar destinations)."""
    mdi = _markdown_it()
    tokens = mdi.parse(md)
    images = [child for tok in tokens for child in tok.children or () if child.type == "image"]
    paths = [embeddable_image(str(c.attrGet("src") or ""), base) for c in images]  # all checked first
    for child, path in zip(images, paths):
        child.attrSet("src", _data_uri(path))
    body = mdi.renderer.render(tokens, mdi.options, {})
    return body.replace("<table>", '<div class="table-wrap"><table>').replace(
        "</table>", "</table></div>")


def html_page(title: str, body: str, css: str = "") -> str:
    """A complete page: ``body`` (HTML) with the inline style (plus ``css``) and sort script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(visible(title))}</title>\n<style>{_CSS}{css}</style>\n</head>\n<body>\n"
            f"{body}\n<p class=\"note\">Click a column header to sort the table by it; click "
            f"again to reverse.</p>\n<script>{SORT_SCRIPT}</script>\n</body>\n</html>\n")


def _title(md: str, default: str) -> str:
    """The text a reader sees in the first level-1 heading (escapes and code marks undone)."""
    tokens = _markdown_it().parse(md)
    for i, tok in enumerate(tokens[:-1]):
        if tok.type == "heading_open" and tok.tag == "h1":
            text = "".join(c.content for c in tokens[i + 1].children or ()
                           if c.type in ("text", "code_inline"))
            return text.strip() or default
    return default


def markdown_page(md: str, base: Path, title: str | None = None) -> str:
    """The self-contained page of Markdown ``md`` (images inside the folder ``base``)."""
    return html_page(title or _title(md, "report"), markdown_body(md, base))


def write_report_html(md_path, html_path=None) -> Path:
    """Write the page of the report Markdown file ``md_path`` to ``html_path`` (default: the
    same name with ``.html``), atomically; returns its path."""
    md_path = Path(md_path)
    html_path = Path(html_path) if html_path is not None else md_path.with_suffix(".html")
    md = md_path.read_text(encoding="utf-8")
    atomic_write_text(html_path, markdown_page(md, md_path.parent))
    return html_path
