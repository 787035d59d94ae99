"""leaderboard: the ranking and the contrasts against the baseline, read back against the
comparison files and the scored runs' own metrics; incomparable entries refused by name;
report links relative to the page; an earlier leaderboard kept unless --force."""
from __future__ import annotations

import json
from argparse import ArgumentParser
from pathlib import Path

import fixtures_runner as F
import numpy as np
import pytest
from score_support import runs

from cli import leaderboard as cli_leaderboard
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.leaderboard import (
    LeaderboardError,
    LeaderboardExists,
    leaderboard,
    render_leaderboard_markdown,
    write_leaderboard,
)
from passage_jax.evaluate.report import write_report
from tests.evaluate.report.test_html import md_tables, parse_page


def _seed_mean(run: Path, key: str) -> float:
    """The seed mean of a primary metric, from the run's metrics.json files."""
    vals = [json.loads((f / "metrics.json").read_text())["primary"][key]
            for f in sorted(run.glob("seed-*"))]
    return float(np.mean(vals))


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    R = runs()
    tmp = tmp_path_factory.mktemp("leaderboard")
    bench = tmp / "bench"  # a `bench --against` style folder: compare.json and report/
    bench.mkdir()
    cmp = compare_runs(R["exact"], R["bfs"], bench / "compare.json", n_bootstrap=100)
    write_report(bench / "compare.json", bench / "report" / "report.md", n_route_tasks=2,
                 html=True)
    return {"R": R, "tmp": tmp, "bench": bench, "cmp": cmp}


def test_ranking_and_contrasts_match_the_inputs(boards, tmp_path):
    R, cmp = boards["R"], boards["cmp"]
    out = write_leaderboard([boards["bench"], R["greedy"]], tmp_path / "lb", n_bootstrap=100)
    board = out["board"]
    # default baseline: run B of the first comparison
    assert board["baseline"]["method_name"] == "bfs"
    names = {"exact": R["exact"], "bfs": R["bfs"], "greedy": R["greedy"]}
    want = sorted(names, key=lambda n: (_seed_mean(names[n], "regret_median"),
                                        -_seed_mean(names[n], "success_rate")))
    assert [r["method_name"] for r in board["rows"]] == want
    rows = {r["method_name"]: r for r in board["rows"]}
    for n, run in names.items():
        assert rows[n]["figures"]["regret_median"] == pytest.approx(_seed_mean(run, "regret_median"))
        assert rows[n]["figures"]["success_rate"] == pytest.approx(_seed_mean(run, "success_rate"))
    # exact vs bfs from the comparison file (exact is its A: no reorientation)
    c = cmp["contrasts"]["regret_median"]
    got = rows["exact"]["contrasts"]["regret_median"]
    assert (got["delta"], got["ci_low"], got["ci_high"]) == (c["delta"], c["ci_low"], c["ci_high"])
    assert rows["exact"]["contrast_source"].endswith("compare.json")
    # greedy: no comparison given pairs it with bfs, so it is compared in memory
    ref = compare_runs(R["greedy"], R["bfs"], None, n_bootstrap=100)
    g = rows["greedy"]["contrasts"]["success_rate"]
    assert rows["greedy"]["contrast_source"] == "in memory"
    assert g["delta"] == pytest.approx(ref["contrasts"]["success_rate"]["delta"])
    assert rows["bfs"]["baseline"] and rows["bfs"]["contrasts"] is None
    # the report link is relative to the page and reaches the comparison's report
    link = rows["exact"]["report"]
    assert not Path(link).is_absolute()
    target = (boards["bench"] / "report" / "report.html").resolve()
    assert (Path(out["index"]).parent / link).resolve() == target
    assert rows["greedy"]["report"] is None
    # the page's table is the Markdown's table, in rank order
    page = parse_page(Path(out["index"]).read_text())
    (table,) = md_tables(render_leaderboard_markdown(board))
    assert page.tables[0]["header"] == table["header"]
    assert [r[1] for r in page.tables[0]["rows"]] == [r[1] for r in table["rows"]]
    assert [r[1].split(" (")[0] for r in page.tables[0]["rows"]] == want
    assert f'href="{link}"' in Path(out["index"]).read_text()


def test_baseline_as_run_a_is_reoriented(boards):
    board = leaderboard([boards["bench"]], baseline="exact", n_bootstrap=50)
    rows = {r["method_name"]: r for r in board["rows"]}
    c = boards["cmp"]["contrasts"]["regret_median"]
    got = rows["bfs"]["contrasts"]["regret_median"]  # bfs − exact = −(exact − bfs)
    assert got["delta"] == pytest.approx(-c["delta"])
    assert got["ci_low"] == pytest.approx(-c["ci_high"]) and got["ci_high"] == pytest.approx(-c["ci_low"])
    with pytest.raises(LeaderboardError, match="no entry has that method_name"):
        leaderboard([boards["bench"]], baseline="nope")


def test_incomparable_entries_refused_by_name(boards, tmp_path):
    doc = json.loads((boards["bench"] / "compare.json").read_text())
    # a comparison file whose setting was edited no longer states its runs: refused by field
    for field, change in (("identity.timing_profile.profile", lambda d: d["identity"][
            "timing_profile"].update(profile="supervised_ipc_v1")),
                          ("identity.data.resolution", lambda d: d["identity"]["data"].update(
                              resolution=128)),
                          ("identity.data.cost_model", lambda d: d["identity"]["data"].update(
                              cost_model="slope"))):
        other = json.loads(json.dumps(doc))
        change(other)
        bad = tmp_path / f"other_{field.replace('.', '_')}.json"
        bad.write_text(json.dumps(other))
        with pytest.raises(LeaderboardError, match=f"field '{field}' is .* but the runs it names "
                                                   f"give") as e:
            leaderboard([boards["bench"] / "compare.json", bad])
        assert str(e.value).startswith(str(bad))
    # a run of another timing profile is incomparable: both entries and the field named
    other = F.edited_copy(boards["R"]["greedy"], tmp_path / "g-prof",
                          lambda m: m.update(timing_profile="supervised_service_v1"))
    with pytest.raises(LeaderboardError, match="incomparable entries.*timing profile") as e:
        leaderboard([boards["bench"] / "compare.json", other])
    assert str(other) in str(e.value) and "compare.json" in str(e.value)
    with pytest.raises(LeaderboardError, match="not a passage-jax-compare-v1"):
        (tmp_path / "x.json").write_text("{}")
        leaderboard([tmp_path / "x.json"])
    with pytest.raises(LeaderboardError, match="neither a comparison"):
        leaderboard([tmp_path])


def test_existing_leaderboard_kept_and_cli(boards, tmp_path):
    p = ArgumentParser()
    cli_leaderboard.register(p)
    args = p.parse_args([str(boards["bench"]), "--output", str(tmp_path / "lb"),
                         "--n-bootstrap", "20"])
    assert cli_leaderboard.main(args) == 0
    first = (tmp_path / "lb" / "index.html").read_text()
    with pytest.raises(LeaderboardExists):
        write_leaderboard([boards["bench"]], tmp_path / "lb")
    assert cli_leaderboard.main(args) == 2
    assert (tmp_path / "lb" / "index.html").read_text() == first
    args.force = True
    assert cli_leaderboard.main(args) == 0
    data = json.loads((tmp_path / "lb" / "leaderboard.json").read_text())
    assert data["format"] == "passage-jax-leaderboard-v1" and len(data["rows"]) == 2
