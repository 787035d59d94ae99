"""Score and comparison files are re-derived when read, not trusted: a ``metrics.json``
edited after scoring (its receipt's hash updated to match) must equal what its
``per_sample.npz`` and manifest give; a comparison file must state its runs as they are;
every number read is finite and in its domain. Each forgery is refused by ``compare``,
``leaderboard`` and ``report`` (library and CLI) in one line naming the file and the field,
and honest inputs read back as before."""
from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

import pytest
from score_support import runs

from cli.__main__ import main as cli_main
from passage_jax.evaluate.compare import CompareError, compare_runs
from passage_jax.evaluate.leaderboard import LeaderboardError, leaderboard
from passage_jax.evaluate.report import ReportError, write_report
from passage_jax.evaluate.score import ScoreError, load_score
from passage_jax.evaluate.score._verify import check_numbers, derived_metrics, first_difference
from passage_jax.fileio import sha256_file

B = 20  # bootstrap draws: enough to write a comparison file


@pytest.fixture(scope="module")
def S(tmp_path_factory):
    """Copies of the cached greedy (one seed, four of six tasks failed) and exact (two
    seeds) runs, and a comparison file of each against bfs."""
    R = runs()
    tmp = tmp_path_factory.mktemp("trust")
    greedy, exact = tmp / "greedy", tmp / "exact"
    shutil.copytree(R["greedy"], greedy)
    shutil.copytree(R["exact"], exact)
    compare_runs(greedy, R["bfs"], tmp / "greedy_cmp.json", n_bootstrap=B)
    compare_runs(exact, R["bfs"], tmp / "exact_cmp.json", n_bootstrap=B)
    return {"R": R, "tmp": tmp, "greedy": greedy, "exact": exact,
            "greedy_cmp": tmp / "greedy_cmp.json", "exact_cmp": tmp / "exact_cmp.json"}


def cli(argv, capsys) -> tuple[int, str]:
    rc = cli_main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def set_path(doc: dict, path: str, value) -> None:
    keys = path.split(".")
    for k in keys[:-1]:
        doc = doc[k]
    doc[keys[-1]] = value


@contextlib.contextmanager
def forged_metrics(seed: Path, path: str, value=None, literal: str | None = None):
    """``metrics.json`` of ``seed`` with field ``path`` set to ``value`` (or to the JSON text
    ``literal``: ``NaN``, ``1e400`` ...), its receipt's hash updated to match; both files
    restored afterwards."""
    saved = {n: (seed / n).read_bytes() for n in ("metrics.json", "score_receipt.json")}
    try:
        doc = json.loads(saved["metrics.json"])
        set_path(doc, path, "@@forged@@" if literal is not None else value)
        text = json.dumps(doc)
        if literal is not None:
            text = text.replace('"@@forged@@"', literal)
        (seed / "metrics.json").write_text(text)
        rec = json.loads(saved["score_receipt.json"])
        rec["outputs"]["metrics.json"] = sha256_file(seed / "metrics.json")
        (seed / "score_receipt.json").write_text(json.dumps(rec))
        yield
    finally:
        for n, data in saved.items():
            (seed / n).write_bytes(data)


def forged_compare(src: Path, dest: Path, path: str, value=None, literal: str | None = None) -> Path:
    doc = json.loads(src.read_text())
    set_path(doc, path, "@@forged@@" if literal is not None else value)
    text = json.dumps(doc)
    if literal is not None:
        text = text.replace('"@@forged@@"', literal)
    dest.write_text(text)
    return dest


def field_named(path: str) -> str:
    return re.escape(f"field '{path}'")


# --------------------------------------------------------------------------- #
# honest inputs
# --------------------------------------------------------------------------- #

def test_honest_scores_equal_what_their_rows_give(S):
    for run in (S["greedy"], S["exact"], S["R"]["bfs"]):
        for seed in sorted(run.glob("seed-*")):
            score = load_score(seed)
            want = derived_metrics(score.per_sample)
            assert first_difference(score.metrics, want) is None
            # the rows give the headline, every warm pass, the warm latency and the census
            assert want["primary"] == {k: score.metrics["primary"][k] for k in want["primary"]}
            assert set(want["quality_by_pass"]) == {k for k in score.metrics["quality_by_pass"]
                                                    if k.startswith("warm#")}
            check_numbers(score.metrics, seed / "metrics.json")
    for cmp in (S["greedy_cmp"], S["exact_cmp"]):
        check_numbers(json.loads(cmp.read_text()), cmp)


def test_honest_inputs_still_work(S, tmp_path, capsys):
    out = write_report(S["exact_cmp"], tmp_path / "r" / "report.md", n_route_tasks=1)
    assert Path(out["report"]).is_file()
    board = leaderboard([S["exact_cmp"], S["greedy"]], n_bootstrap=B)
    assert [r["method_name"] for r in board["rows"]] == ["exact", "bfs", "greedy"]
    rc, err = cli(["compare", "--score", S["greedy"], "--score", S["R"]["bfs"], "--output",
                   tmp_path / "c.json", "--bootstrap-resamples", B], capsys)  # the former spelling
    assert rc == 0, err


# --------------------------------------------------------------------------- #
# forged metrics.json (receipt hash updated)
# --------------------------------------------------------------------------- #

#: (field, value or None, JSON literal or None, words of the refusal)
METRICS_FORGERIES = [
    ("primary.regret_median", 0.0, None, "but per_sample.npz gives 999999.0"),
    ("primary.success_rate", 0.5, None, "but per_sample.npz gives"),
    ("regret_summary.mean", 0.25, None, "but per_sample.npz gives"),
    ("latency.warm.interpolated.p50", 0.001, None, "but per_sample.npz gives"),
    ("latency_warm_quality_repeat.censored.n_successes", 6, None, "but per_sample.npz gives 2"),
    ("status_counts.warm.ok", 6, None, "but per_sample.npz gives 2"),
    ("status_counts.warm.timeout", 1, None, "but per_sample.npz gives no such field"),
    ("components.n_success", 6, None, "but per_sample.npz gives 2"),
    ("block_census.n_blocks", 1, None, "but per_sample.npz gives"),
    ("method_name", "exact", None, 'but manifest.json gives "greedy"'),
    ("seed", 2026, None, "but manifest.json gives 1234"),
    ("timing_profile.profile", "supervised_service_v1", None, "but manifest.json gives"),
    ("primary.regret_median", None, "NaN", "not a finite number"),
    ("primary.assd_mean", None, "Infinity", "not a finite number"),
    ("latency.cold.interpolated.p95", None, "-Infinity", "not a finite number"),
    ("n_path_valid", None, "1e400", "not a finite number"),
    ("quality_by_pass.cold#0.regret_summary.p90", None, "1e400", "not a finite number"),
    ("components.work.expansions.median", None, "NaN", "not a finite number"),
    ("n_tasks", -3, None, "must be a count (an integer >= 0), got -3"),
    ("quality_by_pass.cold#0.n_path_valid", -1, None, "must be a count"),
    ("validation_recost_ms.recorded", 2.5, None, "must be a count"),
    ("primary.success_rate", 1.5, None, "must be a rate in [0, 1], got 1.5"),
    ("components.stage_ran.primary.rate", -0.1, None, "must be a rate in [0, 1]"),
]


@pytest.mark.parametrize("field, value, literal, words", METRICS_FORGERIES,
                         ids=[f"{f}={lit or v}" for f, v, lit, _ in METRICS_FORGERIES])
def test_forged_metrics_refused_by_every_reader(S, tmp_path, field, value, literal, words):
    seed = S["greedy"] / "seed-1234"
    where = re.escape(str(seed / "metrics.json"))
    pattern = f"^{where}: {field_named(field)}.*{re.escape(words)}"
    with forged_metrics(seed, field, value, literal):
        with pytest.raises(ScoreError, match=pattern):
            load_score(seed)
        out = tmp_path / "c.json"
        with pytest.raises(CompareError, match=pattern):
            compare_runs(S["greedy"], S["R"]["bfs"], out, n_bootstrap=B)
        assert not out.exists()  # nothing of the forged file is copied into a comparison
        for inputs in ([S["greedy"], S["R"]["bfs"]], [S["greedy_cmp"]]):
            with pytest.raises(LeaderboardError, match=pattern.lstrip("^")):
                leaderboard(inputs, n_bootstrap=B)
        with pytest.raises(ReportError, match=pattern.lstrip("^")):
            write_report(S["greedy_cmp"], tmp_path / "r" / "report.md", n_route_tasks=1)
        assert not (tmp_path / "r").exists()


def test_forged_metrics_refused_on_the_command_line(S, tmp_path, capsys):
    """The issue's case: greedy's regret median forged to 0.0 would rank it first; every
    command refuses it in one line, exit 2."""
    seed = S["greedy"] / "seed-1234"
    with forged_metrics(seed, "primary.regret_median", 0.0):
        for argv in (["compare", "--score", S["greedy"], "--score", S["R"]["bfs"], "--output",
                      tmp_path / "c.json", "--n-bootstrap", B],
                     ["leaderboard", S["greedy"], S["R"]["bfs"], "--output", tmp_path / "lb"],
                     ["report", "--compare", S["greedy_cmp"], "--output", tmp_path / "r.md"]):
            rc, err = cli(argv, capsys)
            line = one_line(err)
            assert rc == 2, err
            assert f"{seed / 'metrics.json'}: field 'primary.regret_median' is 0.0" in line
        assert not any(tmp_path.iterdir())
    with forged_metrics(seed, "n_tasks", None, "NaN"):
        rc, err = cli(["leaderboard", S["greedy"], S["R"]["bfs"], "--output", tmp_path / "lb"],
                      capsys)
        assert rc == 2 and "field 'n_tasks' is NaN: not a finite number" in one_line(err)


# --------------------------------------------------------------------------- #
# forged comparison files
# --------------------------------------------------------------------------- #

#: (field, value or None, JSON literal or None, words of the refusal)
COMPARE_FORGERIES = [
    ("runs.A.method_name", "learned", None, 'but the runs it names give "exact"'),
    ("methods.A.method_name", "learned", None, 'but the runs it names give "exact"'),
    ("identity.data.cost_model", "slope", None, 'but the runs it names give "energy"'),
    ("identity.data.resolution", 128, None, "but the runs it names give 64"),
    ("identity.tasks_sha256", "0" * 64, None, "but the runs it names give"),
    ("identity.references.identity", "0" * 64, None, "but the runs it names give"),
    ("identity.timing_profile.profile", "supervised_service_v1", None, "but the runs it names"),
    ("runs.A.seeds", [1234], None, "but the runs it names give [1234, 2026]"),
    ("runs.B.path", None, None, "which cannot be read back as a scored run"),
    ("methods.A.per_seed.1234.primary.regret_median", 0.5, None, "but the runs it names give"),
    ("methods.B.per_seed.2026.n_path_valid", 1, None, "but the runs it names give"),
    ("procedure_limits.A.latency_warmup", 0, None, "but the runs it names give 1"),
    ("identity.n_tasks", -3, None, "must be a count (an integer >= 0), got -3"),
    ("valid_route_denominators.1234.n_valid_a", -1, None, "must be a count"),
    ("methods.A.per_seed.1234.primary.success_rate", 1.5, None, "must be a rate in [0, 1]"),
    ("contrasts.success_rate.delta", 1.5, None, "must lie in [-1, 1]"),
    ("contrasts.regret_median.delta", None, "NaN", "not a finite number"),
    ("contrasts.regret_median.ci_high", None, "1e400", "not a finite number"),
    ("latency_contrast.delta", None, "-Infinity", "not a finite number"),
]


@pytest.mark.parametrize("field, value, literal, words", COMPARE_FORGERIES,
                         ids=[f"{f}={lit or v}" for f, v, lit, _ in COMPARE_FORGERIES])
def test_forged_comparison_refused_by_report_and_leaderboard(S, tmp_path, field, value,
                                                             literal, words):
    if field == "runs.B.path":
        value = str(tmp_path / "gone")
    bad = forged_compare(S["exact_cmp"], tmp_path / "cmp.json", field, value, literal)
    name = "runs.B.path" if field == "runs.B.path" else field
    pattern = f"^{re.escape(str(bad))}: {field_named(name)}.*{re.escape(words)}"
    with pytest.raises(ReportError, match=pattern):
        write_report(bad, tmp_path / "r" / "report.md", n_route_tasks=1)
    assert not (tmp_path / "r").exists()
    with pytest.raises(LeaderboardError, match=pattern):
        leaderboard([bad], n_bootstrap=B)


def test_forged_comparison_refused_on_the_command_line(S, tmp_path, capsys):
    bad = forged_compare(S["exact_cmp"], tmp_path / "cmp.json", "runs.A.method_name", "learned")
    for argv in (["report", "--compare", bad, "--output", tmp_path / "r.md"],
                 ["leaderboard", bad, "--output", tmp_path / "lb"]):
        rc, err = cli(argv, capsys)
        assert rc == 2, err
        assert f"{bad}: field 'runs.A.method_name' is \"learned\"" in one_line(err)
    bad = forged_compare(S["exact_cmp"], tmp_path / "inf.json", "bootstrap.alpha", None, "Infinity")
    rc, err = cli(["report", "--compare", bad, "--output", tmp_path / "r.md"], capsys)
    assert rc == 2 and "field 'bootstrap.alpha' is Infinity" in one_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.json", "inf.json"]


def test_a_comparison_whose_run_changed_since(S, tmp_path):
    """A comparison file is read against its runs as they are now: the same scores in
    another folder are still its runs; a seed folder swapped for another method's is not."""
    bad = tmp_path / "exact_cmp.json"
    doc = json.loads(S["exact_cmp"].read_text())
    run = tmp_path / "exact"
    shutil.copytree(S["exact"], run)
    doc["runs"]["A"]["path"] = str(run.resolve())
    doc["runs"]["A"]["folders"] = {k: str(run.resolve() / Path(v).name)
                                   for k, v in doc["runs"]["A"]["folders"].items()}
    bad.write_text(json.dumps(doc))
    assert len(leaderboard([bad], n_bootstrap=B)["rows"]) == 2
    shutil.rmtree(run / "seed-2026")
    shutil.copytree(S["R"]["bfs"] / "seed-2026", run / "seed-2026")
    with pytest.raises(LeaderboardError, match=f"^{re.escape(str(bad))}: field 'runs.A.path'"):
        leaderboard([bad], n_bootstrap=B)


# --------------------------------------------------------------------------- #
# the number rules
# --------------------------------------------------------------------------- #

@pytest.mark.parametrize("doc, words", [
    ({"a": [{"n_x": 1.0}]}, "field 'a[0].n_x' must be a count"),
    ({"n_x": True}, "field 'n_x' must be a count"),
    ({"status_counts": {"warm": {"ok": -2}}}, "field 'status_counts.warm.ok' must be a count"),
    ({"block_sizes": {"b": 0.5}}, "field 'block_sizes.b' must be a count"),
    ({"repeats_per_scene": {"min": -1}}, "field 'repeats_per_scene.min' must be a count"),
    ({"p_values": {"regret_median": 1.2}}, "field 'p_values.regret_median' must be a rate"),
    ({"x": {"fallback_rate": 2}}, "field 'x.fallback_rate' must be a rate"),
    ({"largest_share": -0.5}, "field 'largest_share' must be a rate"),
    ({"success_rate": {"per_seed": {"1": {"ci_low": -1.5}}}}, "must lie in [-1, 1]"),
    ({"regret_median": {"ci_low": 2.0, "ci_high": 1.0}}, "field 'regret_median.ci_low' is 2.0, above"),
    ({"x": 10 ** 400}, "field 'x' is"),
])
def test_number_rules(doc, words):
    with pytest.raises(ScoreError, match=re.escape(words)):
        check_numbers(doc, "f.json")


def test_number_rules_leave_other_numbers_alone():
    check_numbers({"regret_median": {"delta": -5.0, "ci_low": -7.0, "ci_high": 3.0},
                   "seed": -4, "max": 1e300, "status_counts": None, "n_x": None,
                   "legal_route_stage_counts": {"primary": None}, "success_rate": None,
                   "p50": -0.0, "label": "NaN"}, "f.json")
