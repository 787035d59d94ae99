"""Hostile text on the pages: run folder names, method names, a compare folder name and a
planner-returned precision string built to close a code span or a link and inject an image,
a reference definition or raw HTML (inline ``![x](/abs)``, reference-style ``![x][r]`` with
``[r]: /abs``, ``<img src=/abs>``, an svg, a ``../`` path out of the folder, backtick runs of
length 1-3, newlines, ``<script>``). No page written by ``report --html`` or ``leaderboard``
holds a byte of the secret files placed outside every named folder (neither their base64 nor
their marker); ``report.md`` holds no raw HTML from the data (parsed with raw HTML enabled:
no HTML token, no ``<`` outside a code span, no image but the report's own figures); the
pages show the names literally. The HTML renderer embeds images only from the page's own
folder and refuses any other reference by name, before reading it; a failed ``report
--html`` leaves nothing behind (docs/scoring.md, "Text on the pages")."""
from __future__ import annotations

import base64
import json
import shutil
import textwrap
from argparse import ArgumentParser
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fixtures_runner import renamed_copy
from markdown_it import MarkdownIt
from score_support import runs, spec_dict

from cli import report as cli_report
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.leaderboard import write_leaderboard
from passage_jax.evaluate.report import ReportError, write_report
from tests.evaluate.report.test_html import parse_page

MARK = b"PASSAGE-SECRET-CONTENT-5d41402a"
PNG = b"\x89PNG\r\n\x1a\n" + MARK + b"\x00" * 64
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><text>' + MARK + b"</text></svg>"
#: where a relative reference out of a page's folder lands: pages are written two folders
#: below the test's root (``w/<case>/report.md``, ``lb/out/index.html``), the secrets in
#: ``<root>/secret/``
RELATIVE = "../../secret/secret.png"


def families(png: str, svg: str) -> dict:
    """name -> hostile text (``png``/``svg``: the secret files' absolute paths)."""
    return {
        "inline image": f"r`![x]({png})`",
        "reference image": f"r`![x][r]`\n\n[r]: {png}\n",
        "raw img tag": f"r`<img src={png}>`",
        "svg": f"r`![x]({svg})`",
        "relative path": f"r`![x]({RELATIVE})`",
        "backticks 2": f"r``![x]({png})``",
        "backticks 3": f"r```![x]({png})```",
        "newline": f"r\n![x]({png})\n",
        "script": "r`<script>alert(1)</script>`",
        "onerror": "r`<img src=x onerror=alert(1)>`",
    }


def shown(text: str) -> str:
    """How a page shows a text: each newline as the control picture ␊."""
    return text.replace("\r", "\u240d").replace("\n", "\u240a")


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)


def page_text(html: str) -> str:
    p = _Text()
    p.feed(html)
    return "".join(p.parts)


def assert_no_secret(text: str, where) -> None:
    for blob in (PNG, SVG):
        assert base64.b64encode(blob).decode() not in text, where
    assert MARK.decode() not in text, where
    assert "data:image/svg" not in text, where


def assert_markdown_inert(md: str, figures=()) -> None:
    """Parsed with raw HTML enabled: no HTML token, every ``<`` inside a code span, and no
    image but ``figures``."""
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(md)
    code_lt, images = 0, []
    for tok in tokens:
        assert tok.type not in ("html_block", "html_inline"), tok
        for c in tok.children or ():
            assert c.type not in ("html_block", "html_inline"), c
            if c.type == "code_inline":
                code_lt += c.content.count("<")
            if c.type == "image":
                images.append(c.attrGet("src"))
    assert md.count("<") == code_lt
    assert sorted(images) == sorted(figures)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Per family: a copy of the exact run in a folder named by it, compared with bfs (the
    family also as A's method name), its report with --html; and a leaderboard of them."""
    R = runs()
    root = tmp_path_factory.mktemp("hostile_pages")
    (root / "secret").mkdir()
    png, svg = root / "secret" / "secret.png", root / "secret" / "secret.svg"
    png.write_bytes(PNG)
    svg.write_bytes(SVG)
    fam = families(str(png), str(svg))
    cases = {}
    for i, (key, name) in enumerate(fam.items()):
        run = Path(str(root / "runs" / f"c{i}") + "/" + name)
        renamed_copy(R["exact"], run, name)
        case = root / "w" / f"c{i}"
        case.mkdir(parents=True)
        compare_runs(run, R["bfs"], case / "compare.json", n_bootstrap=20)
        doc = json.loads((case / "compare.json").read_text())
        out = write_report(case / "compare.json", case / "report.md", n_route_tasks=1, html=True)
        cases[key] = {"name": name, "run": run, "path": doc["runs"]["A"]["path"], "out": out}
    # a compare folder whose name closes the leaderboard's report link
    link = Path(str(root / "w" / "link") + "/" + f"l)![x]({png})")
    link.mkdir(parents=True)
    shutil.copy(root / "w" / "c0" / "compare.json", link / "compare.json")
    write_report(link / "compare.json", link / "report.md", n_route_tasks=1, html=True)
    inputs = [link] + [root / "w" / f"c{i}" for i in range(len(fam))]  # link first: its report
    lb = write_leaderboard(inputs, root / "lb" / "out", n_bootstrap=20)
    return {"R": R, "root": root, "png": png, "svg": svg, "cases": cases, "lb": lb}


def test_report_pages_hold_no_secret_and_show_names(hostile):
    for key, c in hostile["cases"].items():
        md = Path(c["out"]["report"]).read_text()
        page = Path(c["out"]["html"]).read_text()
        assert_no_secret(page, key)
        assert_no_secret(md, key)
        assert_markdown_inert(md, ["report_routes.png", "report_regret.png"])
        # the page: the figures are the report's own, the names shown as they are
        p = parse_page(page)
        assert len(p.images) == 2 and all(i["src"].startswith("data:image/png;base64,")
                                          for i in p.images)
        text = page_text(page)
        assert f"Comparison: {shown(c['name'])} (A) vs bfs (B)" in text, key
        assert shown(c["path"]) in text, key
        assert p.tables[0]["rows"][0][0] == f"A: {shown(c['name'])}", key
        assert "<script>alert" not in page and "<img src=x" not in page, key


def test_leaderboard_page_holds_no_secret_and_shows_names(hostile):
    index = Path(hostile["lb"]["index"]).read_text()
    assert_no_secret(index, "index.html")
    p = parse_page(index)
    assert not p.images and "<script>alert" not in index and "<img src=x" not in index
    names = {r[1] for r in p.tables[0]["rows"]}
    for key, c in hostile["cases"].items():
        assert shown(c["name"]) in names, key
    # the report link of the hostile compare folder: one link, to that folder's page
    links = [h for h in p.links if h and "report" in h]
    assert any(h.endswith("/report.html") and "%21%5Bx%5D" in h for h in links), links


def test_leaderboard_baseline_path_and_planner_precision(hostile, tmp_path, monkeypatch):
    """A baseline in a hostile folder (its path on the page) and a planner whose returned
    precision string is an image reference to the secret."""
    from passage_jax.evaluate.score import score_run
    from passage_jax.run import parse_spec, run_spec

    png = hostile["png"]
    mod = tmp_path / "mods" / "hostile_precision_planner.py"
    mod.parent.mkdir()
    mod.write_text(textwrap.dedent(f"""\
        from passage_jax.planners.bfs import make_planner as _bfs

        def make_planner(**kw):
            inner = _bfs(**kw)

            class P:
                def plan(self, request):
                    res = inner.plan(request)
                    res.precision = {f"![p]({png})<img src={png}>"!r}
                    return res
            return P()
        """))
    monkeypatch.syspath_prepend(str(mod.parent))
    R = hostile["R"]
    run = tmp_path / "precision_run"
    spec = spec_dict("bfs", R["cohort"], inference="hostile_precision_planner:make_planner",
                     method_name="precise")
    run_spec(parse_spec(spec), run, progress=False)
    score_run(run)
    base = hostile["cases"]["inline image"]["run"]
    out = write_leaderboard([base, run], hostile["root"] / "lb" / "two", n_bootstrap=20)
    index = Path(out["index"]).read_text()
    assert_no_secret(index, "index.html")
    text = page_text(index)
    assert str(base.resolve()) in text
    assert f"![p]({png})<img src={png}>" in text
    assert not parse_page(index).images


def test_attribution_page_holds_no_secret(hostile, tmp_path):
    from passage_jax.evaluate.attribution import write_attribution_report
    from passage_jax.evaluate.report._html import write_report_html

    c = hostile["cases"]["reference image"]
    md_path = tmp_path / "a" / "attribution.md"
    write_attribution_report([c["run"]], md_path)
    md = md_path.read_text()
    assert_markdown_inert(md)
    page = write_report_html(md_path).read_text()
    assert_no_secret(page, "attribution.html")
    assert shown(str(c["run"].resolve())) in page_text(page)


# --------------------------------------------------------------------------- #
# the HTML renderer: images only from the page's own folder, refused by name unread
# --------------------------------------------------------------------------- #

def _reads(monkeypatch) -> list:
    read = []
    orig = Path.read_bytes

    def spy(self):
        read.append(Path(self).resolve())
        return orig(self)
    monkeypatch.setattr(Path, "read_bytes", spy)
    return read


def test_renderer_refuses_images_outside_the_folder(tmp_path, monkeypatch):
    from passage_jax.evaluate.report._html import ReportHtmlError, markdown_body

    secret = tmp_path / "secret" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(PNG)
    (tmp_path / "secret" / "s.svg").write_bytes(SVG)
    page = tmp_path / "a" / "b"
    page.mkdir(parents=True)
    (page / "fig.png").write_bytes(b"\x89PNG\r\n\x1a\nown figure")
    (page / "sub").mkdir()
    (page / "sub" / "f g.png").write_bytes(b"\x89PNG\r\n\x1a\nsub figure")
    (page / "link.png").symlink_to(secret)
    read = _reads(monkeypatch)
    for ref, md in (("abs", f"![x]({secret})"),
                    ("reference", f"![x][r]\n\n[r]: {secret}\n"),
                    ("svg", f"![x]({tmp_path / 'secret' / 's.svg'})"),
                    ("relative", "![x](../../secret/secret.png)"),
                    ("dot-dot inside", "![x](sub/../../../secret/secret.png)"),
                    ("encoded", "![x](..%2F..%2Fsecret%2Fsecret.png)"),
                    ("symlink out", "![x](link.png)"),
                    ("http", "![x](http://example.com/x.png)"),
                    ("data", "![x](data:image/png;base64,AAAA)")):
        with pytest.raises(ReportHtmlError, match="image reference") as e:
            markdown_body(md, page)
        assert "\n" not in str(e.value), ref
        assert secret.resolve() not in read, ref
    assert "<img" not in markdown_body(f"![x](file://{secret})", page)  # no image at all
    assert secret.resolve() not in read
    # the page's own figures, in a subfolder and with a space in the name, are embedded
    body = markdown_body("![a](fig.png) ![b](sub/f%20g.png)", page)
    assert base64.b64encode(b"\x89PNG\r\n\x1a\nown figure").decode() in body
    assert base64.b64encode(b"\x89PNG\r\n\x1a\nsub figure").decode() in body


def test_failed_html_report_leaves_nothing_and_cli_names_the_reference(hostile, tmp_path,
                                                                        monkeypatch, capsys):
    """An image the page would have to fetch from outside its folder: refused (exit 2, one
    line naming it), and nothing of the report left: the rerun needs no --force."""
    from passage_jax.evaluate.report import _pipeline as report_mod

    cmp = hostile["root"] / "w" / "c0" / "compare.json"
    real = report_mod.render_markdown
    monkeypatch.setattr(report_mod, "render_markdown",
                        lambda c, figs: real(c, figs) + f"\n![leak]({hostile['png']})\n")
    out = tmp_path / "new" / "deeper" / "report.md"
    with pytest.raises(ReportError, match="image reference"):
        write_report(cmp, out, n_route_tasks=1, html=True)
    assert not (tmp_path / "new").exists()
    p = ArgumentParser()
    cli_report.register(p)
    args = p.parse_args(["--compare", str(cmp), "--output", str(tmp_path / "r.md"), "--html"])
    assert cli_report.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(hostile["png"]) in err and err.startswith("report: ")
    assert sorted(x.name for x in tmp_path.iterdir()) == []
    # a failure while drawing a figure: nothing left either
    monkeypatch.setattr(report_mod, "render_markdown", real)
    monkeypatch.setattr(report_mod, "regret_figure",
                        lambda c, path: (_ for _ in ()).throw(ValueError("broken figure")))
    with pytest.raises(ReportError, match="broken figure"):
        write_report(cmp, tmp_path / "r.md", n_route_tasks=1, html=True)
    assert sorted(x.name for x in tmp_path.iterdir()) == []
    monkeypatch.undo()
    res = write_report(cmp, tmp_path / "r.md", n_route_tasks=1, html=True)  # no --force needed
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(
        Path(v).name for v in res.values())


# --------------------------------------------------------------------------- #
# the rule itself: every hostile text reads back literally
# --------------------------------------------------------------------------- #

HOSTILE = ["a`b", "a``b", "a```b", "`x`", "``", "r`![x](/p.png)`", "x\ny\r\nz", "<script>x</script>",
           "&lt;b&gt;", "a|b\\|c", "\\", "_x_", "bounded_repair", "*b*", "[l](u)", "1. x", "- x",
           "# h", "> q", "$m$", "~~s~~", "", " a ", "\x00\x07\x7f", "![x][r]\n\n[r]: /p.png"]


def _inline_text(md: str) -> list[str]:
    """The text a reader sees in each inline block of ``md`` (tables' cells one by one)."""
    out = []
    for tok in MarkdownIt("commonmark", {"html": True}).enable("table").parse(md):
        assert tok.type not in ("html_block", "html_inline")
        if tok.type == "inline":
            assert all(c.type in ("text", "code_inline", "softbreak") for c in tok.children), \
                [c.type for c in tok.children]
            out.append("".join(c.content for c in tok.children))
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_text_and_code_read_back_literally(text):
    from passage_jax.evaluate.attribution import markdown_table
    from passage_jax.evaluate.text_safety import md_code, md_text, visible

    want = visible(text)
    assert "\n" not in want and "\r" not in want and "<" not in md_text(text)
    if want.strip():
        assert _inline_text(f"- {md_text(text)}\n") == [want.strip()]
    assert _inline_text(f"x {md_text(text)} y\n") == [f"x {want} y".strip()]
    assert _inline_text(f"x {md_code(text)} y\n") == [f"x {want or ' '} y"]
    table = markdown_table(["a", "b"], [[md_text(text), md_code(text)]])
    assert _inline_text(table + "\n")[2:] == [want.strip(), want or " "]


def test_code_fence_longer_than_any_backtick_run():
    from passage_jax.evaluate.text_safety import md_code

    assert md_code("a`b") == "``a`b``"
    assert md_code("a``b```c") == "````a``b```c````"
    assert md_code("`x") == "`` `x ``"
