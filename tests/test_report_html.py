"""report --html: one self-contained page with the content of report.md (tables read back
against the Markdown's, figures inline and identical to the PNGs beside it, nothing
external), and a real headless browser loading it and the leaderboard page: no console
errors, every figure decoded, a click on a header sorting the table."""
from __future__ import annotations

import base64
import re
import shutil
from argparse import ArgumentParser
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_score_support import runs

from cli import report as cli_report
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.report import ReportError, html_path_of, write_report


class _Page(HTMLParser):
    """Tables (header cells, body rows), images, links and scripts of a page."""

    def __init__(self):
        super().__init__()
        self.tables, self.images, self.links, self.scripts, self.links_css = [], [], [], [], []
        self._cell = None
        self._row = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"header": [], "rows": []})
        elif tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(a)
        elif tag == "a":
            self.links.append(a.get("href"))
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "link":
            self.links_css.append(a)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            t = self.tables[-1]
            if self._in_head:
                t["header"] = self._row
            else:
                t["rows"].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse_page(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    return p


def md_tables(md: str) -> list[dict]:
    """The Markdown's tables as the text a reader sees (inline code and bold marks dropped)."""
    def cells(line):
        parts = re.split(r"(?<!\\)\|", line.strip()[1:-1])
        return [c.strip().replace("\\|", "|").replace("**", "").replace("`", "") for c in parts]
    out, lines = [], md.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            t = {"header": cells(lines[i]), "rows": []}
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                t["rows"].append(cells(lines[i]))
                i += 1
            out.append(t)
        else:
            i += 1
    return out


@pytest.fixture(scope="module")
def report_pages(tmp_path_factory):
    R = runs()
    tmp = tmp_path_factory.mktemp("report_html")
    cmp = tmp / "cmp.json"
    compare_runs(R["exact"], R["bfs"], cmp, n_resamples=100)
    out = write_report(cmp, tmp / "rep" / "report.md", n_route_tasks=2, html=True)
    return {"cmp": cmp, "out": out, "tmp": tmp, "runs": R}


def test_html_has_the_markdown_content_and_inline_figures(report_pages):
    out = report_pages["out"]
    md = Path(out["report"]).read_text()
    page_text = Path(out["html"]).read_text()
    assert Path(out["html"]) == html_path_of(out["report"])
    page = parse_page(page_text)
    want = md_tables(md)
    assert len(want) >= 6 and len(page.tables) == len(want)
    for got, exp in zip(page.tables, want):
        assert got["header"] == exp["header"]
        assert got["rows"] == exp["rows"]
    # every figure the Markdown links is inline, byte for byte the PNG beside the report
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert linked == ["report_routes.png", "report_regret.png"]
    assert len(page.images) == len(linked)
    for img, name in zip(page.images, linked):
        src = img["src"]
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == (Path(out["report"]).parent / name).read_bytes()
    # nothing external: no stylesheet link, no script or image from elsewhere
    assert not page.links_css and all("src" not in s for s in page.scripts)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page_text)
    for h in ("Six primary metrics per method", "Procedure limits", "Geographic blocks"):
        assert f"<h2>{h}</h2>" in page_text


def test_html_refusals_and_cli(report_pages, tmp_path):
    cmp = report_pages["cmp"]
    with pytest.raises(ReportError, match="exists"):
        write_report(cmp, Path(report_pages["out"]["report"]), html=True)
    with pytest.raises(ReportError, match="names the Markdown report"):
        write_report(cmp, tmp_path / "r.html", html=True)
    # an existing page alone blocks a new report of that name
    (tmp_path / "solo.html").write_text("earlier")
    with pytest.raises(ReportError, match="solo.html exists"):
        write_report(cmp, tmp_path / "solo.md", html=True)
    assert not (tmp_path / "solo.md").exists()
    p = ArgumentParser()
    cli_report.register(p)
    assert cli_report.main(p.parse_args(["--compare", str(cmp), "--output",
                                         str(tmp_path / "c" / "r.md"), "--html"])) == 0
    assert (tmp_path / "c" / "r.html").is_file() and (tmp_path / "c" / "r_routes.png").is_file()


# --------------------------------------------------------------------------- #
# a real browser
# --------------------------------------------------------------------------- #

def _browser():
    """A headless Chromium driven by selenium, or a skip naming what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    driver_bin = shutil.which("chromedriver")
    if browser is None or driver_bin is None:
        pytest.skip(f"no headless browser: chromium {browser or 'not found'}, chromedriver "
                    f"{driver_bin or 'not found'} (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1200,1600"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(executable_path=driver_bin), options=opts)
    except Exception as e:  # a browser that cannot start here is a skip, not a failure
        pytest.skip(f"headless chromium did not start: {type(e).__name__}: {str(e)[:200]}")


def _column(driver, table, col):
    return driver.execute_script(
        "return Array.from(arguments[0].tBodies[0].rows).map(r => r.cells[arguments[1]].textContent.trim());",
        table, col)


def _key(text):
    m = re.match(r"[\s≥\[(]*([-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?)", text.replace("−", "-"), re.I)
    return float(m.group(1)) if m else None


def _check_page(driver, url, table_index, header):
    driver.get(url)
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    imgs = driver.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);")
    assert all(c and w > 0 and h > 0 for c, w, h in imgs), imgs
    tables = driver.find_elements("css selector", "table")
    table = tables[table_index]
    ths = table.find_elements("css selector", "thead th")
    col = [t.text.strip() for t in ths].index(header)
    before = _column(driver, table, col)
    ths[col].click()
    asc = _column(driver, table, col)
    ths[col].click()
    desc = _column(driver, table, col)
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    return imgs, before, asc, desc


def test_browser_renders_and_sorts(report_pages, tmp_path):
    from passage_jax.evaluate.leaderboard import write_leaderboard

    R = report_pages["runs"]
    lb = write_leaderboard([report_pages["cmp"], R["greedy"]], tmp_path / "lb", n_resamples=50)
    driver = _browser()
    try:
        # the report: the six-metric table sorted by regret_median
        page = Path(report_pages["out"]["html"])
        imgs, before, asc, desc = _check_page(driver, page.as_uri(), 0, "regret_median")
        assert len(imgs) == 2
        keys = [_key(v) for v in before]
        assert sorted(asc, key=_key) == asc and [_key(v) for v in asc] == sorted(keys)
        assert [_key(v) for v in desc] == sorted(keys, reverse=True) and desc != before
        # a text column: the method names sort alphabetically, a second click reverses
        driver.get(page.as_uri())
        table = driver.find_elements("css selector", "table")[0]
        th = table.find_elements("css selector", "thead th")[0]
        names = _column(driver, table, 0)
        th.click()
        assert _column(driver, table, 0) == sorted(names)
        th.click()
        assert _column(driver, table, 0) == sorted(names, reverse=True) != names
        # the leaderboard: reversing the rank order by the regret column
        imgs, before, asc, desc = _check_page(driver, Path(lb["index"]).as_uri(), 0,
                                              "regret median")
        want = sorted(before, key=_key)
        assert asc == want and desc == want[::-1] != before and len(before) == 3
        ranks = [r["method_name"] for r in lb["board"]["rows"]]
        driver.get(Path(lb["index"]).as_uri())
        table = driver.find_elements("css selector", "table")[0]
        shown = [t.split(" (baseline)")[0] for t in _column(driver, table, 1)]
        assert shown == ranks
    finally:
        driver.quit()
