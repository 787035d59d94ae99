"""A user's paired-statistics walkthrough runs on this evaluator's files.

The walkthrough's code is kept as written; only the import line names this package
(``passage_eval`` -> ``passage_jax.stats``). It reads the scored
``per_sample.npz`` of three-seed runs of two planners, checks the pairing, computes
the six contrasts and applies the supplied paired-test evidence with Holm.
"""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from score_support import copy_cohort, spec_dict

from passage_jax.contract import DEFAULT_SEEDS, PRIMARY_METRICS
from passage_jax.evaluate.score import score_run
from passage_jax.run import parse_spec, run_spec

WALKTHROUGH = '''
from pathlib import Path
import numpy as np
from passage_jax.stats import DEFAULT_SEEDS, compare_primary_metrics

def load_primary(run_directory):
    with np.load(Path(run_directory) / "per_sample.npz", allow_pickle=False) as data:
        assert data["metric_contract"].item() == "passage-qualified-complete-v1"
        assert data["reference_qualified"].all()
        selected = data["primary_quality"]
        assert selected.dtype.kind == "b"
        assert np.array_equal(selected, data["repeat_index"] == data["quality_repeat_index"].item())
        columns = {
            field: data[field][selected].copy()
            for field in ("regret", "assd", "h95", "success",
                          "obstacle_violation", "valid_path")
        }
        columns["task_id"] = data["sample_id"][selected].copy()
        blocks = data["cluster_id"][selected].copy()
    return columns, blocks


A, B, geographic_blocks = {}, {}, None
for training_seed in DEFAULT_SEEDS:
    A[training_seed], blocks_A = load_primary(runs_A[training_seed])
    B[training_seed], blocks_B = load_primary(runs_B[training_seed])
    assert np.array_equal(A[training_seed]["task_id"], B[training_seed]["task_id"])
    assert np.array_equal(blocks_A, blocks_B)
    if geographic_blocks is None:
        geographic_blocks = blocks_A
    else:
        assert np.array_equal(geographic_blocks, blocks_A)

comparison = compare_primary_metrics(
    A, B, blocks=geographic_blocks,
    n_bootstrap=10_000, alpha=0.05, seed=1234,
)
for metric, record in comparison.deltas.items():
    print(metric, record.delta, record.ci_low, record.ci_high,
          "finite outcomes A/B:", record.n_a, record.n_b)
    for training_seed, seed_record in record.per_seed.items():
        print(training_seed, seed_record.delta,
              seed_record.ci_low, seed_record.ci_high,
              seed_record.n_a, seed_record.n_b)
print(comparison.inference_status)  # test_not_provided

import json

test_evidence = json.loads(Path("paired-test-evidence.json").read_text())
confirmed = compare_primary_metrics(
    A, B, blocks=geographic_blocks,
    n_bootstrap=10_000, alpha=0.05, seed=1234,
    p_values=test_evidence["p_values"],
    paired_test=test_evidence["paired_test"],
    test_assumptions=test_evidence["test_assumptions"],
)
print(confirmed.inference_status, confirmed.decision.value, confirmed.votes)
'''


@pytest.fixture(scope="module")
def three_seed_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seed003")
    cohort = copy_cohort(tmp / "cohort")
    out = {}
    for method in ("exact", "greedy"):
        spec = spec_dict(method, cohort, seeds=DEFAULT_SEEDS, n_samples=12, latency_warmup=0)
        run_spec(parse_spec(spec), tmp / method, progress=False)
        score_run(tmp / method)
        out[method] = {s: str(tmp / method / f"seed-{s}") for s in DEFAULT_SEEDS}
    return out


def test_seed003_walkthrough_runs_unchanged(three_seed_runs, tmp_path, monkeypatch, capsys):
    # p-values of a declared test, as the walkthrough's section 4 supplies them
    p = dict(zip(PRIMARY_METRICS, (0.001, 0.2, 0.004, 0.03, 0.5, 0.01)))
    (tmp_path / "paired-test-evidence.json").write_text(json.dumps(
        {"p_values": p, "paired_test": "block randomization",
         "test_assumptions": "exchangeable geographic blocks"}))
    monkeypatch.chdir(tmp_path)
    env = {"runs_A": three_seed_runs["exact"], "runs_B": three_seed_runs["greedy"]}
    exec(textwrap.dedent(WALKTHROUGH), env)  # noqa: S102 (the documented client code)
    out = capsys.readouterr().out
    assert "test_not_provided" in out
    comparison, confirmed = env["comparison"], env["confirmed"]
    assert set(comparison.deltas) == set(PRIMARY_METRICS)
    # the contrasts are those of the per-sample arrays: success rate by hand
    A, B = env["A"], env["B"]
    want = np.mean([A[s]["success"].mean() - B[s]["success"].mean() for s in DEFAULT_SEEDS])
    assert comparison.deltas["success_rate"].delta == pytest.approx(want, abs=1e-12)
    # Holm at 0.05 over the six p-values, by hand: sorted 0.001, 0.004, 0.01, 0.03, 0.2, 0.5
    # against 0.05/6, 0.05/5, 0.05/4, 0.05/3: the first three reject, 0.03 > 0.0167 stops
    rejected = {k for k, v in confirmed.holm.items() if v.reject}
    assert rejected == {PRIMARY_METRICS[0], PRIMARY_METRICS[2], PRIMARY_METRICS[5]}
    assert confirmed.inference_status != "test_not_provided" and confirmed.decision is not None
