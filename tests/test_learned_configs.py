"""The learned run specs (configs/learned_*.yaml): they parse, declare a consistent
component_control, and with the shipped checkpoints plan a shipped test request."""
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.fileio import sha256_file
from passage_jax.graph import route_cost, route_problem
from passage_jax.learned.guide import SHIPPED_DIR
from passage_jax.learned.planner import make_planner
from passage_jax.protocol import build_request
from passage_jax.reference.search import search
from passage_jax.run import load_spec
from passage_jax.run.admission import AdmissionError, checkpoint_files

REPO = Path(__file__).resolve().parents[1]
DECODERS = ("direct", "bounded_repair", "prediction_free", "exact_fallback")
SEEDS = (1234, 2026, 3407)


def _spec(dec):
    return load_spec(REPO / "configs" / f"learned_{dec}.yaml")


def _shipped_present():
    return all((SHIPPED_DIR / f"value64-{s}.json").is_file() for s in SEEDS)


needs_checkpoints = pytest.mark.skipif(
    not _shipped_present(),
    reason=f"the shipped checkpoints value64-<seed>.json are not in {SHIPPED_DIR} yet")


@pytest.mark.parametrize("dec", DECODERS)
def test_learned_config_parses(dec):
    spec = _spec(dec)
    assert spec.method_name == f"learned_{dec}"
    assert spec.inference == "passage_jax.learned.planner:make_planner"
    assert (spec.resolution, spec.split, spec.cost_model, spec.task_variant, spec.n_samples) == \
        (64, "test", "elevation", "obstacles", 24)
    assert spec.seeds == SEEDS and spec.dataset_path == "shipped"
    assert spec.component_control["variant"] == dec
    for seed in SEEDS:
        kw = spec.kwargs_for_seed(seed)
        assert kw["decoder"] == dec
        if dec == "prediction_free":  # the control never loads a network
            assert "checkpoint" not in kw
        else:
            assert kw["checkpoint"] == f"shipped:{seed}"


def test_component_controls_are_consistent():
    specs = {d: _spec(d) for d in DECODERS}
    cc = {d: s.component_control for d, s in specs.items()}
    assert [cc[d]["guide"] for d in DECODERS] == ["learned", "learned", "prediction_free", "learned"]
    # the guided repair and its control: the same machinery and the same budget
    assert cc["bounded_repair"]["machinery_id"] == cc["prediction_free"]["machinery_id"] is not None
    assert specs["bounded_repair"].budget == specs["prediction_free"].budget
    assert specs["bounded_repair"].budget.max_expansions is not None
    for seed in SEEDS:
        assert specs["bounded_repair"].kwargs_for_seed(seed)["max_expansions"] == \
            specs["prediction_free"].kwargs_for_seed(seed)["max_expansions"]
    # the fallback reuses that machinery and is never a primary learned result
    assert cc["exact_fallback"]["machinery_id"] == cc["bounded_repair"]["machinery_id"]
    assert cc["exact_fallback"]["primary_learned"] is False
    assert cc["prediction_free"]["primary_learned"] is False
    assert cc["direct"]["primary_learned"] is cc["bounded_repair"]["primary_learned"] is True
    # one checkpoint identity across the learned variants
    ids = {cc[d]["checkpoint_id"] for d in ("direct", "bounded_repair", "exact_fallback")}
    assert len(ids) == 1 and None not in ids
    assert cc["prediction_free"]["checkpoint_id"] is None


def test_admission_refuses_a_missing_shipped_seed():
    spec = _spec("direct")
    bad = dataclasses.replace(spec, inference_kwargs_by_seed={1234: {"checkpoint": "shipped:99"}},
                              seeds=(1234,))
    with pytest.raises(AdmissionError, match=r"seed 1234: inference_kwargs.checkpoint='shipped:99'"):
        checkpoint_files(bad)


@needs_checkpoints
def test_admission_hashes_the_shipped_checkpoint_of_each_seed():
    files = checkpoint_files(_spec("bounded_repair"))
    for seed in SEEDS:
        f = files[str(seed)]["checkpoint"]
        path = SHIPPED_DIR / f"value64-{seed}.json"
        assert Path(f["path"]) == path.resolve() and f["sha256"] == sha256_file(path)


@pytest.fixture(scope="module")
def shipped_request():
    scene = load_scenes(shipped_cohort_root(), 64, "test", n_samples=1)[0]
    return build_request(scene.task("elevation", "obstacles"))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dec", DECODERS)
def test_learned_config_plans_a_shipped_request(dec, seed, shipped_request):
    if not (SHIPPED_DIR / f"value64-{seed}.json").is_file():
        pytest.skip(f"the shipped checkpoint value64-{seed}.json is not in {SHIPPED_DIR} yet")
    r = shipped_request
    c_star = search(r.elevation, r.obstacles, r.start, r.goal, r.cost_model, r.cost_weight).cost
    assert np.isfinite(c_star)
    spec = _spec(dec)
    planner = make_planner(**spec.kwargs_for_seed(seed))
    res = planner.plan(r)
    assert res.stage_work["primary"]["expansions"] >= 1
    if res.status == "ok":
        assert route_problem(res.path, r.start, r.goal, r.obstacles) is None
        assert route_cost(res.path, r.elevation, r.graph) >= c_star * (1 - 1e-9)
        assert res.route_stage in res.stage_work
        if res.route_stage == "fallback":  # the exact solver's route is optimal
            assert route_cost(res.path, r.elevation, r.graph) == pytest.approx(c_star, rel=1e-9)
    else:
        assert dec in ("direct", "bounded_repair", "prediction_free")
        assert res.status in ("no_path", "budget_exhausted") and res.path is None
        assert res.route_stage is None
    if dec == "exact_fallback":
        assert res.status == "ok"
    if spec.budget.max_expansions is not None:
        total = sum(w["expansions"] for w in res.stage_work.values())
        assert total <= spec.budget.max_expansions
    if dec != "prediction_free":
        assert planner.guide.checkpoint_id == sha256_file(SHIPPED_DIR / f"value64-{seed}.msgpack")
