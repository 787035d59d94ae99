"""report --html: one self-contained page with the content of report.md (tables read back
against the Markdown's, figures inline and identical to the PNGs beside it, nothing
external), and a real headless browser loading it and the leaderboard page: no console
errors, every figure decoded, a click on a header sorting the table, and at a 1,280 px
window no table wider than the viewport (many methods, long names, a failing method).
Failure-coded regrets are shown as failures on every page, never as the code itself."""
from __future__ import annotations

import base64
import json
import re
import shutil
from argparse import ArgumentParser
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from fixtures_runner import renamed_copy
from score_support import runs

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
    compare_runs(R["exact"], R["bfs"], cmp, n_bootstrap=100)
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
    lb = write_leaderboard([report_pages["cmp"], R["greedy"]], tmp_path / "lb", n_bootstrap=50)
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
        # greedy's median is failure-coded: shown as a failure, sorted last both ways
        nums = sorted((v for v in before if _key(v) is not None), key=_key)
        failed = [v for v in before if _key(v) is None]
        assert failed and all(v.startswith("failed") for v in failed)
        assert asc == nums + failed and desc == nums[::-1] + failed and len(before) == 3
        ranks = [r["method_name"] for r in lb["board"]["rows"]]
        driver.get(Path(lb["index"]).as_uri())
        table = driver.find_elements("css selector", "table")[0]
        shown = [t.split(" (baseline)")[0] for t in _column(driver, table, 1)]
        assert shown == ranks
    finally:
        driver.quit()


# --------------------------------------------------------------------------- #
# wide material: many methods, long names, a method whose regret is failure-coded
# --------------------------------------------------------------------------- #

LONG = "learned_value_field_unet_with_bounded_repair_and_exact_fallback_variant"


@pytest.fixture(scope="module")
def wide_pages(tmp_path_factory):
    """greedy (4 of its 6 tasks failed: regret median and p90 are the failure regret) against
    bfs, with a long name; its report (Markdown and page); and a leaderboard of it, exact
    and six more long-named methods paired with bfs."""
    R = runs()
    tmp = tmp_path_factory.mktemp("wide")
    bench = tmp / "bench"
    bench.mkdir()
    greedy = renamed_copy(R["greedy"], tmp / "greedy", f"greedy_{LONG}")
    compare_runs(greedy, R["bfs"], bench / "compare.json", n_bootstrap=200)
    doc = json.loads((bench / "compare.json").read_text())
    rep = write_report(bench / "compare.json", bench / "report" / "report.md", n_route_tasks=2,
                       html=True)
    inputs = [bench, R["exact"]]
    for i in range(6):
        run = renamed_copy(R["greedy"], tmp / f"run_{i}", f"{LONG}_{i}")
        inputs.append(tmp / f"cmp_{i}.json")
        compare_runs(run, R["bfs"], inputs[-1], n_bootstrap=200)
    from passage_jax.evaluate.leaderboard import write_leaderboard

    lb = write_leaderboard(inputs, tmp / "lb", n_bootstrap=50)
    return {"report": Path(rep["report"]), "html": Path(rep["html"]), "index": Path(lb["index"]),
            "board": lb["board"], "doc": doc}


def _text(path: Path) -> str:
    """A page's text without its inline images (base64 data could hold any digits)."""
    return re.sub(r"data:image/[a-z+]+;base64,[A-Za-z0-9+/=]+", "", path.read_text())


def test_failure_coded_values_shown_as_failures(wide_pages):
    """No page prints the failure regret (999999) or a Δ or interval made of it (1.000e+06,
    5.000e+05): a regret figure that reaches a failed task reads "failed", its Δ "—" with the
    side that failed, an interval endpoint made of it "failure-coded"."""
    for key in ("index", "html", "report"):
        text = _text(wide_pages[key])
        for code in ("999999", "999,999", "1.000e+06", "e+05", "1e+06"):
            assert code not in text, (key, code)
    # the leaderboard: greedy's seed-mean regret median is the failure regret
    page = parse_page(wide_pages["index"].read_text())
    header = page.tables[0]["header"]
    rows = {r[1]: dict(zip(header, r)) for r in page.tables[0]["rows"]}
    greedy = rows[f"greedy_{LONG}"]
    assert greedy["regret median"] == "failed (67% of tasks)"
    assert greedy["Δ regret median [interval]"] == "— (method failed)"
    assert greedy["success rate"] == "0.3333"
    assert rows["exact"]["regret median"] == "0.0000"
    assert rows["exact"]["Δ regret median [interval]"].startswith("-0.2634 [")
    assert [r["method_name"] for r in wide_pages["board"]["rows"]][:2] == ["exact", "bfs"]
    # the report: metric values, the contrasts and their intervals, the components table
    md_page = parse_page(wide_pages["html"].read_text())
    metrics, contrasts = md_page.tables[0], md_page.tables[1]
    a = dict(zip(metrics["header"], metrics["rows"][0]))
    assert a["regret_median"] == a["regret_p90"] == "failed (4/6 tasks)"
    assert a["valid / tasks"] == "2 / 6"
    b = dict(zip(metrics["header"], metrics["rows"][1]))
    assert b["regret_median"] == "0.2634"
    by_metric = {r[0]: dict(zip(contrasts["header"], r)) for r in contrasts["rows"]}
    for k in ("regret_median", "regret_p90"):
        assert by_metric[k]["Δ"] == "— (A failed)" and by_metric[k]["Δ seed 1234"] == "— (A failed)"
        assert by_metric[k]["interval"] == "— (failure-coded)"
    assert by_metric["success_rate"]["Δ"] == "-0.6667"
    comp = next(t for t in md_page.tables if "no stage" in t["header"])
    c = dict(zip(comp["header"], comp["rows"][0]))
    assert c["regret median"] == c["regret p90"] == "failed (4/6 tasks)"
    assert md_tables(wide_pages["report"].read_text())[0]["rows"][0][2] == "failed (4/6 tasks)"


def test_failure_rule_against_numpy():
    """A regret quantile is failure-coded exactly when NumPy's quantile of the per-task
    regrets (failures at the failure regret) lies above every legal route's regret."""
    from passage_jax.contract import FAILURE_REGRET
    from passage_jax.evaluate.report._markdown import reaches_failures

    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        n = int(rng.integers(1, 40))
        f = int(rng.integers(0, n + 1))
        reg = np.concatenate([rng.gamma(1.0, 0.2, n - f), np.full(f, FAILURE_REGRET)])
        top = reg[: n - f].max() if f < n else -np.inf
        for q in (0.5, 0.9):
            want = bool(np.quantile(reg, q) > top + 1e-9 * max(1.0, abs(top) if f < n else 1.0))
            assert reaches_failures(q, n, f) == want, (n, f, q)
            seen.add(want)
    assert seen == {True, False}
    # by hand: 6 tasks, 4 failed (the median is the failure regret); 4 tasks, 2 failed (the
    # median interpolates half way to it); 5 tasks, 2 failed (the median is a legal route's)
    assert reaches_failures(0.5, 6, 4) and reaches_failures(0.5, 4, 2)
    assert not reaches_failures(0.5, 5, 2) and not reaches_failures(0.9, 10, 0)
    assert reaches_failures(0.9, 10, 1) and not reaches_failures(0.9, 11, 1)


def test_tables_fit_a_1280_px_window(wide_pages):
    """At a 1,280 px window the page does not scroll sideways and every table's right edge
    lies within the viewport: the leaderboard of many long-named methods and the report with
    its 14-column components table."""
    driver = _browser()
    try:
        driver.set_window_size(1280, 900)
        for key in ("index", "html"):
            driver.get(wide_pages[key].as_uri())
            got = driver.execute_script(
                "return {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,"
                " tables: Array.from(document.querySelectorAll('table')).map(t => ({"
                "  right: t.getBoundingClientRect().right, scroll: t.scrollWidth,"
                "  wrap: t.parentElement.scrollWidth - t.parentElement.clientWidth,"
                "  head: t.tHead.rows[0].cells[0].textContent.trim()}))};")
            assert 1200 <= got["inner"] <= 1280, got["inner"]
            assert got["scroll"] <= got["inner"], (key, got)
            assert len(got["tables"]) >= (1 if key == "index" else 8)
            for t in got["tables"]:
                assert t["right"] <= got["inner"] and t["wrap"] <= 0, (key, t, got["inner"])
            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            assert not errors, errors
    finally:
        driver.quit()
