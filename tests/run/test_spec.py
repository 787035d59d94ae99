"""Run-spec validation: clear errors naming the key; defaults; starter template."""
import json

import pytest
import yaml

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.run.specification.parse import STARTER_SPEC, SpecError, load_spec, parse_spec

BASE = {"method_name": "m", "inference": "passage_jax.planners.bfs:make_planner",
        "resolution": 64, "cost_model": "energy", "split": "val", "dataset_path": "data"}


def _spec(**over):
    d = dict(BASE)
    d.update(over)
    return {k: v for k, v in d.items() if v is not ...}


def test_defaults():
    s = parse_spec(_spec())
    assert s.split == "validation" and s.seeds == DEFAULT_SEEDS
    assert s.inference_format == "request" and s.task_variant == "obstacles"
    assert s.latency_warmup == 5 and s.latency_repeats == 3 and s.quality_repeat_index == 0  # seed 000
    assert s.budget.limits() == {} and s.reference_policy == "released_labels"
    assert s.n_samples == 1024


def test_unknown_and_missing_keys_are_named():
    with pytest.raises(SpecError, match=r"unknown key\(s\) \['latency_repeat'\]"):
        parse_spec(_spec(latency_repeat=2))
    with pytest.raises(SpecError, match=r"missing required key\(s\) \['inference'\]"):
        parse_spec(_spec(inference=...))
    with pytest.raises(SpecError, match="dataset_path"):
        parse_spec(_spec(dataset_path=...))


@pytest.mark.parametrize("key,value,needle", [
    ("resolution", "64", "resolution"),
    ("cost_model", "distance", "cost_model"),
    ("split", "dev", "split"),
    ("task_variant", "walls", "task_variant"),
    ("n_samples", 0, "n_samples"),
    ("seeds", [1, 1], "seeds"),
    ("seeds", [], "seeds"),
    ("inference", "no_colon", "inference"),
    ("inference_format", "image", "inference_format"),
    ("latency_repeats", 0, "latency_repeats"),
    ("quality_repeat_index", 3, "quality_repeat_index"),
    ("budget", {"max_expansions": -1}, "budget"),
    ("budget", {"expansions": 1}, "budget"),
    ("reference_policy", "whatever", "reference_policy"),
    ("reference_policy", "independent_analytic_reference", "reference_cohort_id"),
    ("reference_max_expansions", 0, "reference_max_expansions"),
    ("dataset_revision", "abc", "dataset_revision"),
    ("inference_kwargs_by_seed", {"99": {}}, "inference_kwargs_by_seed"),
    ("device", "npu", "device"),
    ("cost_weight", "x", "cost_weight"),
])
def test_bad_values_name_the_key(key, value, needle):
    with pytest.raises(SpecError, match=needle):
        parse_spec(_spec(**{key: value}))


def test_budget_consistency():
    with pytest.raises(SpecError, match="exceeds budget.max_expansions"):
        parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"max_expansions": 11}))
    with pytest.raises(SpecError, match="seed 2026"):
        parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"max_expansions": 5},
                         inference_kwargs_by_seed={2026: {"max_expansions": 50}}))
    s = parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"max_expansions": 5},
                         inference_kwargs_by_seed={"2026": {"max_expansions": 7}}))
    assert s.kwargs_for_seed(2026) == {"max_expansions": 7}
    assert s.kwargs_for_seed(1234) == {"max_expansions": 5}
    # the learned planner's stage budget (stages: [..., {guided_astar: {max_expansions: n}}]) as well
    repair = [{"descent": {}}, {"guided_astar": {"max_expansions": 11}}]
    with pytest.raises(SpecError, match=r"inference_kwargs stages\[1\]\.guided_astar\.max_expansions=11 "
                                        r"\(seed \d+\) exceeds budget\.max_expansions=10"):
        parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"stages": repair}))
    alone = [{"guided_astar": {"max_expansions": 50}}]
    with pytest.raises(SpecError, match=r"stages\[0\]\.guided_astar\.max_expansions=50 \(seed 2026\)"):
        parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"stages": repair[:1]},
                         inference_kwargs_by_seed={2026: {"stages": alone}}))
    fits = [{"backups": 64}, {"descent": {}}, {"guided_astar": {"max_expansions": 10}}, {"exact": {}}]
    assert parse_spec(_spec(budget={"max_expansions": 10}, inference_kwargs={"stages": fits})) \
        .inference_kwargs["stages"] == fits


def test_remote_source_rules():
    rev = "a" * 40
    s = parse_spec(_spec(dataset_path=None, dataset_repo="org/ds", dataset_revision=rev))
    assert s.dataset_revision == rev
    with pytest.raises(SpecError, match="dataset_repo"):
        parse_spec(_spec(dataset_path=None, dataset_repo="org/ds"))
    with pytest.raises(SpecError, match="choose one"):
        parse_spec(_spec(dataset_repo="org/ds", dataset_revision=rev))
    # a repo name next to a local path, without a revision, is provenance only
    assert parse_spec(_spec(dataset_repo="org/ds")).dataset_path == "data"


def test_component_control():
    ok = {"variant": "bounded_repair", "guide": "learned", "checkpoint_id": "c",
          "machinery_id": "m", "primary_learned": True}
    assert parse_spec(_spec(component_control=ok)).component_control == ok
    with pytest.raises(SpecError, match="machinery_id"):
        parse_spec(_spec(component_control={**ok, "machinery_id": None}))
    with pytest.raises(SpecError, match="primary learned"):
        parse_spec(_spec(component_control={"variant": "exact_fallback", "guide": "none",
                                            "machinery_id": "m", "primary_learned": True}))
    with pytest.raises(SpecError, match="unknown key"):
        parse_spec(_spec(component_control={**ok, "colour": 1}))


def test_load_yaml_json_and_starter(tmp_path):
    y = tmp_path / "s.yaml"
    y.write_text(yaml.safe_dump(_spec()))
    j = tmp_path / "s.json"
    j.write_text(json.dumps(_spec()))
    assert load_spec(y).to_dict() == load_spec(j).to_dict()
    assert load_spec(y).sha256() == load_spec(j).sha256()
    bad = tmp_path / "b.yaml"
    bad.write_text("method_name: [unclosed")
    with pytest.raises(SpecError, match="cannot parse"):
        load_spec(bad)
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "none.yaml")
    starter = parse_spec(yaml.safe_load(STARTER_SPEC))
    assert starter.inference == "passage_jax.planners.bounded:make_planner"
    assert starter.budget.max_expansions is None and starter.inference_kwargs["max_expansions"] == 20000
