"""The one escaping rule for text the evaluator writes into Markdown, HTML or a figure.

Every name, path, planner-returned string and anything read from a file that lands on a
page (``report.md``, ``report.html``, the leaderboard's ``index.html``, the attribution
Markdown) goes through one of these, never into an f-string of Markdown as it is:

* :func:`md_code`: a code span that cannot be closed from inside: its fence is one
  backtick longer than the longest backtick run in the text (CommonMark), padded with a
  space where the text begins or ends with a backtick or a space;
* :func:`md_text`: plain text: Markdown syntax backslash-escaped (``\\`` ``*`` ``[`` ``]``
  ``!`` ``|`` ``~`` ``#`` ``$`` and backticks; ``_`` unless it stands between two letters
  or digits, where CommonMark never reads it as emphasis; ``-`` ``+`` ``=`` and an
  ordered-list marker at its start), HTML written as entities (``&`` ``<`` ``>``), so no
  ``<`` from the data reaches the Markdown and no viewer sees a tag;
* :func:`md_url`: a link or image destination, percent-encoded (the HTML renderer decodes
  it with :func:`url_path`);
* :func:`md_cell`: a table cell (every ``|`` escaped; :func:`markdown_table` applies it);
* :func:`figure_text`: a figure's title or legend (matplotlib's ``$`` math escaped, a control
  character as its Python escape).

In the Markdown ones a control character (a newline, carriage return, tab excepted) becomes its
visible Unicode control picture (``\\n`` -> ``␊``, :func:`visible`), so no text starts a new
Markdown line. The HTML pages are rendered with raw HTML disabled and embed images only
from the page's own folder (:mod:`~passage_jax.evaluate.report._html`); docs/scoring.md,
"Text on the pages".
"""
from __future__ import annotations

import re
from urllib.parse import quote, unquote

__all__ = ["visible", "md_text", "md_code", "md_url", "md_cell", "url_path", "figure_text",
           "MD_ESCAPED"]

#: the characters :func:`md_text` backslash-escapes wherever they stand (``_`` too, unless
#: it stands between two letters or digits)
MD_ESCAPED = frozenset("\\`*[]!|~#$")
#: a control character (C0 but tab, DEL, the C1 block, Unicode line and paragraph separators)
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f\x80-\x9f\u2028\u2029]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
#: what makes a block when it starts a line: a list, heading underline or ordered-list marker
_LINE_START = re.compile(r"^([-+=])|^(\d+)([.)])")


def _picture(m: re.Match) -> str:
    c = ord(m.group(0))
    if c < 0x20:
        return chr(0x2400 + c)
    return "\u2421" if c == 0x7F else "\ufffd"


def visible(x) -> str:
    """``str(x)`` with every control character (tab excepted) as its visible control picture
    (``\\n`` -> ``␊``, ``\\r`` -> ``␍``, DEL -> ``␡``; C1 and line separators -> ``�``)."""
    return _CONTROL.sub(_picture, str(x))


def _intraword(s: str, i: int) -> bool:
    """Whether ``s[i]`` stands between two letters or digits."""
    return 0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()


def md_text(x) -> str:
    """``x`` as plain Markdown text that reads literally in any viewer and renders literally
    to HTML: Markdown syntax backslash-escaped, ``& < >`` as entities, control characters
    visible (:func:`visible`)."""
    s = visible(x)
    out = []
    for i, ch in enumerate(s):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in MD_ESCAPED or (ch == "_" and not _intraword(s, i)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    s = "".join(out)
    return _LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1)
                           else m.group(2) + "\\" + m.group(3), s, count=1)


def md_code(x) -> str:
    """``x`` as an inline code span that nothing inside it can close: a fence of one backtick
    more than the longest backtick run in the text, a space inside each fence when the text
    begins or ends with a backtick or a space (CommonMark strips exactly one), control
    characters visible. In a table cell its ``|`` are escaped by :func:`md_cell`."""
    s = visible(x)
    runs = [len(r) for r in re.findall("`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    if not s:
        return "` `"
    if s[0] in "` " or s[-1] in "` ":
        s = f" {s} "
    return f"{fence}{s}{fence}"


def md_url(path) -> str:
    """A link or image destination for the relative path ``path``: percent-encoded (``/``
    kept), so no character of it ends the destination or the link."""
    return quote(str(path), safe="/")


def url_path(src: str) -> str:
    """The relative path a destination written by :func:`md_url` names."""
    return unquote(src)


def md_cell(x) -> str:
    """A table cell: every ``|`` escaped (inside a code span too: GFM tables split the row
    before inline parsing and drop one backslash before each escaped pipe)."""
    return visible(x).replace("|", "\\|")


def figure_text(x) -> str:
    """A figure's title or legend text as written: matplotlib's math delimiter ``$``
    escaped, a control character as its Python escape (``\\n``: the figure fonts lack the
    control pictures)."""
    s = _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), str(x))
    return s.replace("$", r"\$")
