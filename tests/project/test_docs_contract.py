"""The documentation is self-contained: README.md, docs/*.md, configs/*.yaml and the
notebooks' markdown cells refer to nothing outside the repository, and every relative
Markdown link in README.md and docs/*.md points at a file that exists (and, for a link
into a Markdown page, at one of its headings)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONTRACT = ROOT / "docs" / "contract.md"

#: mentions of documents that live outside the repository
OUTSIDE = [re.compile(p) for p in (
    r"\.\./shared", r"shared/SPEC", r"SPEC\.md", r"DESIGN\.md", r"seeds/",
    r"\bSPEC §", r"\bseed 00\d\b",
)]
#: the sections every reference to the contract may rely on
CONTRACT_SECTIONS = (
    "1-released-scenes", "2-graph-and-cost-models", "3-references", "4-decoded-path-metrics",
    "5-statistics", "6-planner-protocol", "7-runner-files-and-cli", "8-real-terrain-cohorts",
    "9-learned-planners-and-tiled-inference",
)

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`+[^`\n]*`+")
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _outside_mentions(text: str) -> list[str]:
    found = []
    for i, line in enumerate(text.splitlines(), 1):
        if any(pattern.search(line) for pattern in OUTSIDE):
            found.append(f"line {i}: {line.strip()[:160]}")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: inline markup gone, lower case, punctuation
    dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page (repeated headings get -1, -2, ...)."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for m in _HEADING.finditer(text):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """Relative link targets of a Markdown page (code blocks and code spans left out)."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    return [t for t in _LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, https:, mailto:, ...


def test_slug_follows_github():
    assert slug("5. Statistics") == "5-statistics"
    assert slug("7. Runner, files and CLI") == "7-runner-files-and-cli"
    assert slug("### `seed-<seed>/manifest.json`".lstrip("# ")) == "seed-seedmanifestjson"
    assert slug("Admission (before any planner call)") == "admission-before-any-planner-call"
    assert slug("Baselines (`passage_jax.planners.<name>:make_planner`)") == \
        "baselines-passage_jaxplannersnamemake_planner"


@pytest.mark.parametrize("path", PAGES + CONFIGS, ids=_rel)
def test_no_reference_outside_the_repository(path):
    found = _outside_mentions(path.read_text(encoding="utf-8"))
    assert not found, f"{_rel(path)} refers to documents outside the repository: {found}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_rel)
def test_notebook_markdown_refers_to_nothing_outside(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    found = _outside_mentions(text)
    assert not found, f"{_rel(path)} markdown refers to documents outside the repository: {found}"


def test_contract_has_its_sections():
    have = anchors(CONTRACT)
    missing = [a for a in CONTRACT_SECTIONS if a not in have]
    assert not missing, f"docs/contract.md lacks the sections {missing}"


@pytest.mark.parametrize("path", PAGES, ids=_rel)
def test_relative_links_resolve(path):
    broken = []
    for target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            broken.append(f"{target}: no file {_rel(dest)}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {_rel(dest)}")
    assert not broken, f"{_rel(path)} has broken links: {broken}"


def test_contract_is_linked_from_the_readme():
    assert "docs/contract.md" in {t.partition("#")[0] for t in links(ROOT / "README.md")}
