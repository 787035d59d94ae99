"""The console tables of ``score`` and ``compare`` say what their figures are over: geometry
over each method's own valid routes (n valid / n), why an interval is missing, and the
success-conditional regret beside a regret figure the failure penalty dominates.

The greedy walker fails the ``trap`` scene of the tiny cohort (``no_path``) and BFS solves
all three, so greedy's regret p90 is pulled up by the penalty 999999."""
import fixtures_runner as F
import numpy as np
import pytest

from cli.__main__ import main
from cli.console import contrast_footnotes, interval_reason, pulled_up, quality_of, success_regret
from passage_jax.run import parse_spec, run_spec


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    out = tmp_path_factory.mktemp("runs")
    for name in ("greedy", "bfs"):
        spec = parse_spec(F.spec_dict(root, method_name=name,
                                      inference=f"passage_jax.planners.{name}:make_planner",
                                      latency_warmup=0, latency_repeats=1, quality_repeat_index=0))
        run_spec(spec, out / name)
    return out


@pytest.fixture(scope="module")
def scored(runs):
    from passage_jax.evaluate import score_run

    for name in ("greedy", "bfs"):
        score_run(runs / name, force=True)
    return runs


def _expected_success_regret(folder):
    rows = quality_of(folder)
    reg = np.asarray(rows["regret"])[np.asarray(rows["success"], bool)]
    return len(reg), float(np.median(reg)), float(np.quantile(reg, 0.9))


def test_score_table_footnotes(runs, capsys):
    assert main(["score", "--run", str(runs / "greedy"), "--force"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines; compare the words
    assert ("ASSD mean and H95 mean are over each seed's own valid routes (n valid / n: 1234: 2/3)"
            in out)
    n, med, p90 = _expected_success_regret(runs / "greedy" / "seed-1234")
    assert n == 2
    assert ("seed 1234: regret_p90 (8.000e+05) is raised by the failure penalty 999999 (1 of 3 "
            "tasks failed); success-conditional regret over its 2 successful task(s): median "
            f"{med:.4f}, p90 {p90:.4f}." in out)
    assert main(["score", "--run", str(runs / "bfs"), "--force"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(n valid / n: 1234: 3/3)" in out and "raised by the failure penalty" not in out


def test_compare_table_footnotes(scored, tmp_path, capsys):
    cmp = tmp_path / "cmp.json"
    assert main(["compare", "--score", str(scored / "greedy"), "--score", str(scored / "bfs"),
                 "--output", str(cmp), "--n-bootstrap", "200"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("assd_mean and h95_mean compare each method over its own valid routes (n valid / n "
            "per pair: 1234: A 2/3, B 3/3, both 2)" in out)
    # the tiny cohort's scenes share one geographic block: no interval, and the console says why
    assert ("interval n/a for every contrast: uncertainty unknown: 1 known block(s); at least two "
            "are needed." in out)
    na, med_a, p90_a = _expected_success_regret(scored / "greedy" / "seed-1234")
    assert ("regret_p90: the contrast is dominated by failures (a failed task's regret is the "
            "penalty 999999; A 1234: 1/3 failed, B 1234: 0/3 failed)" in out)
    assert f"A median {med_a:.4f}, p90 {p90_a:.4f} over its successes (2)" in out
    assert "A − B over the tasks both solved (2): median" in out


def test_success_regret_and_pulled_up_by_hand():
    rows = {"regret": np.array([0.0, 0.2, 999999.0, 0.1]), "success": np.array([1, 1, 0, 1], bool)}
    s = success_regret(rows)
    assert s == {"n": 3, "median": 0.1, "p90": pytest.approx(0.18)}
    p90_all = float(np.quantile(rows["regret"], 0.9))  # interpolates towards the penalty
    assert p90_all > 1e5 and pulled_up(p90_all, rows)
    assert not pulled_up(float(np.median(rows["regret"])), rows)  # 0.15: below the worst success
    assert not pulled_up(0.2, {"regret": rows["regret"][[0, 1, 3]], "success": np.ones(3, bool)})
    assert pulled_up(999999.0, None) and not pulled_up(0.5, None)


def test_interval_reasons():
    blocks = {"uncertainty_status": "unknown", "reason": "1 known block(s); at least two are needed"}
    assert interval_reason({"delta": 1.0, "ci_available": True, "ci_low": 0.0, "ci_high": 2.0}) is None
    assert interval_reason({"delta": None, "ci_available": False, "reason": "empty both-valid "
                            "intersection for ['1234']"}) == "empty both-valid intersection for ['1234']"
    assert interval_reason({"delta": 1.0, "ci_available": False, "n_undefined_draws": 30,
                            "n_bootstrap": 200}).startswith("30/200 bootstrap draws undefined")
    assert interval_reason({"delta": 1.0, "ci_available": False, "ci_low": None}, blocks) == \
        "uncertainty unknown: 1 known block(s); at least two are needed"
    res = {"contrasts": {"success_rate": {"delta": 0.0, "ci_available": False, "ci_low": None},
                         "assd_mean": {"delta": None, "ci_available": False, "reason": "r"}},
           "blocks": blocks, "pairs": [], "methods": {"A": {"per_seed": {}}, "B": {"per_seed": {}}},
           "runs": {"A": {"folders": {}}, "B": {"folders": {}}}}
    lines = contrast_footnotes(res)
    assert lines == ["interval n/a for success_rate: uncertainty unknown: 1 known block(s); at "
                     "least two are needed.", "interval n/a for assd_mean: r."]
