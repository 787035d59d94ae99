"""The shipped configs parse, admit, and the exact baseline is exact on real terrain."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from passage_jax.data import resolve_dataset_root, shipped_cohort_root
from passage_jax.graph import route_cost
from passage_jax.protocol.records import load_paths, read_requests, route_of
from passage_jax.run import load_spec, run_spec
from passage_jax.run.admission.checks import entry_identity

REPO = Path(__file__).resolve().parents[2]
# run specs only: configs/train_*.yaml are training configurations (passage_jax.learned.train)
CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if not p.name.startswith("train_"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_is_valid(path, monkeypatch):
    monkeypatch.chdir(REPO)
    spec = load_spec(path)
    assert resolve_dataset_root(dataset_path=spec.dataset_path) == shipped_cohort_root()
    assert spec.seeds == (1234, 2026, 3407)
    entry_identity(spec)  # the planner imports


def test_exact_and_bfs_on_shipped_cohort(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    from passage_jax.run.admission.checks import admit

    spec = dataclasses.replace(load_spec(REPO / "configs" / "exact.yaml"), n_samples=2,
                               seeds=(1234,), latency_warmup=0)
    admitted = admit(spec)
    run_spec(spec, tmp_path / "exact", progress=False, admitted=admitted)
    bspec = dataclasses.replace(spec, inference="passage_jax.planners.bfs:make_planner")
    run_spec(bspec, tmp_path / "bfs", progress=False,
             admitted=dataclasses.replace(admitted, spec=bspec, entry=entry_identity(bspec)))
    c_star = admitted.references.c_star
    for name, check in (("exact", lambda c, cs: c == pytest.approx(cs, rel=1e-9)),
                        ("bfs", lambda c, cs: c >= cs * (1 - 1e-9))):
        folder = tmp_path / name / "seed-1234"
        recs = read_requests(folder / "requests.jsonl")
        paths = load_paths(folder / "paths.npz")
        assert len(recs) == 2 * 2 and all(r["status"] == "ok" for r in recs)
        for r in recs:
            t = admitted.tasks[r["task_index"]]
            c = route_cost(route_of(paths, r["record"]), t.elevation_m, t.objective, t.weight)
            assert check(c, c_star[r["task_index"]])
    bfs_costs = [r["route_cost"] for r in read_requests(tmp_path / "bfs/seed-1234/requests.jsonl")]
    assert max(np.asarray(bfs_costs[:2]) / c_star) > 1.0  # fewest steps is not cheapest
