"""What README.md, docs/runner.md and docs/protocol.md state about the shipped specs, the
main job's report path and what a route is agrees with the configs and the code."""
from pathlib import Path

import numpy as np
import pytest

from passage_jax.graph.routes import route_problem
from passage_jax.protocol.records import ROUTE_FORMATS, snapshot_route
from passage_jax.run.specification.parse import load_spec

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RUNNER = " ".join((ROOT / "docs" / "runner.md").read_text().split())
PROTOCOL = " ".join((ROOT / "docs" / "protocol.md").read_text().split())
CONFIGS = {p.stem: load_spec(p) for p in sorted((ROOT / "configs").glob("*.yaml"))
           if not p.stem.startswith("train_")}


def test_runner_md_scene_counts_match_the_configs():
    for name in ("exact", "bounded", "bfs", "greedy"):
        assert CONFIGS[name].n_samples == 8 and CONFIGS[name].cost_model == "energy", name
    assert "`configs/{exact,bounded,bfs,greedy}.yaml` (the first 8 scenes, cost model `energy`)" in RUNNER
    learned = [n for n in CONFIGS if n.startswith(("quickstart", "learned_"))]
    assert len(learned) >= 6
    for name in learned:
        assert CONFIGS[name].n_samples == 24 and CONFIGS[name].cost_model == "elevation", name
    assert "(all 24 scenes, cost model `elevation`)" in RUNNER
    assert CONFIGS["exact256_session"].n_samples is None and CONFIGS["exact256_session"].resolution == 256
    for spec in CONFIGS.values():
        assert spec.resolution in (64, 256) and spec.split == "test" and spec.seeds == (1234, 2026, 3407)


def test_runner_md_procedure_limits_match_the_configs():
    budgets = {n: s.budget.max_expansions for n, s in CONFIGS.items() if s.budget.max_expansions}
    assert budgets == {"bounded": 20000, "learned_bounded_repair": 2048,
                       "learned_prediction_free": 2048, "learned256_bounded_repair": 32768,
                       "learned256_prediction_free": 32768}
    assert "`learned256_prediction_free.yaml` (`max_expansions:\n32768`" in \
        (ROOT / "docs" / "runner.md").read_text()
    for name, spec in CONFIGS.items():
        if not spec.one_pass:  # a session or the batched procedure times each task once
            assert (spec.latency_warmup, spec.latency_repeats, spec.quality_repeat_index) == (1, 1, 0), name


def test_readme_names_the_main_jobs_report_path():
    """``bench --spec configs/quickstart.yaml --against ...`` writes into
    ``<results_root>/<method_name>-<UTC time>/`` (``default_output``) and the report under
    ``report/report.md`` there (``cli.bench.against``)."""
    import inspect

    import cli.bench as bench

    q = CONFIGS["quickstart"]
    path = f"{q.results_root}/{q.method_name}-<UTC time>/report/report.md"
    assert path == "outputs/quickstart/learned_quickstart-<UTC time>/report/report.md"
    assert f"`{path}`" in README
    assert 'output / "report" / "report.md"' in inspect.getsource(bench.against)
    assert "24 test scenes at 64×64 under the `elevation` cost model, three seeds" in " ".join(README.split())


@pytest.mark.parametrize("route, legal", [
    ([(1, 1), (2, 2), (3, 2)], True),                    # diagonal and straight steps
    ([(1, 1), (2, 2), (1, 1), (2, 2), (3, 2)], True),    # a later revisit (a loop) is legal
    ([(1, 1), (1, 1), (2, 2), (3, 2)], False),           # a repeated consecutive cell
    ([(1, 1), (3, 2)], False),                           # a gap
    ([(2, 2), (3, 2)], False),                           # does not start at the start
    ([(1, 1), (2, 2)], False),                           # does not end at the goal
])
def test_protocol_md_route_rules_are_the_codes(route, legal):
    assert (route_problem(np.array(route), (1, 1), (3, 2), shape=(5, 5)) is None) is legal
    assert "A repeated consecutive cell (`(3, 4), (3, 4)`) is illegal" in PROTOCOL
    assert "coming back to a cell later (a loop) is legal" in PROTOCOL


def test_protocol_md_malformed_formats_are_the_codes():
    cases = {"none": None, "float": np.array([[1.0, 1.0], [2.0, 2.0]]),
             "shape": np.array([1, 2, 3]), "int_range": np.array([[2 ** 40, 0], [0, 0]]),
             "object": [[1, 2], [3]]}
    for name, route in cases.items():
        assert ROUTE_FORMATS[snapshot_route(route)[0]] == name, name
        assert (f"(`{name}`)" if name != "none" else "`None` (`route_format` `none`)") in PROTOCOL, name
    assert ROUTE_FORMATS[snapshot_route([[1, 1], [2, 2]])[0]] == "int"
    assert ROUTE_FORMATS[snapshot_route(np.zeros((0, 2), np.int64))[0]] == "int"
    assert "an empty `(0, 2)` array is integer, so invalid rather than malformed" in PROTOCOL
