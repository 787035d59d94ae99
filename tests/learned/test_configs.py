"""The learned run specs (configs/learned_*.yaml at 64x64, configs/learned256_*.yaml at
256x256): they parse, declare a consistent component_control, with the shipped
checkpoints plan a shipped test request, and the 256x256 specs carry the operating point
frozen on the calibration split (configs/learned256_calibration.json)."""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.fileio import sha256_file
from passage_jax.graph import route_cost, route_problem
from passage_jax.learned.guide import SHIPPED_DIR
from passage_jax.learned.planner import make_planner
from passage_jax.learned.stages import legacy_form, parse_stages
from passage_jax.protocol import build_request
from passage_jax.reference.search import search
from passage_jax.run import load_spec
from passage_jax.run.admission.checks import AdmissionError, checkpoint_files

REPO = Path(__file__).resolve().parents[2]
DECODERS = ("direct", "bounded_repair", "prediction_free", "exact_fallback")
SEEDS = (1234, 2026, 3407)
#: spec prefix -> (resolution, checkpoint family, checkpoint reference of a seed)
FAMILIES = {"learned": (64, "value64", "shipped:{seed}"),
            "learned256": (256, "value256ft", "shipped:value256ft-{seed}")}
CALIBRATION = REPO / "configs" / "learned256_calibration.json"
#: each composition's stage keys after the optional backups, and its guide
STAGE_KEYS = {"direct": ["descent"], "bounded_repair": ["descent", "guided_astar"],
              "prediction_free": ["descent", "guided_astar"],
              "exact_fallback": ["descent", "guided_astar", "exact"]}


def _spec(dec, prefix="learned"):
    return load_spec(REPO / "configs" / f"{prefix}_{dec}.yaml")


def _keys(kw):
    return [s.key for s in parse_stages(kw["stages"]) if s.key != "backups"]


def _search(kw):
    """The guided A* stage of a spec's kwargs."""
    return next(s for s in parse_stages(kw["stages"]) if s.key == "guided_astar")


def _shipped_present():
    return all((SHIPPED_DIR / f"{fam}-{s}.json").is_file() for _, fam, _ in FAMILIES.values()
               for s in SEEDS)


needs_checkpoints = pytest.mark.skipif(
    not _shipped_present(),
    reason=f"the shipped checkpoints value64/value256ft-<seed>.json are not in {SHIPPED_DIR} yet")


@pytest.mark.parametrize("prefix", FAMILIES)
@pytest.mark.parametrize("dec", DECODERS)
def test_learned_config_parses(dec, prefix):
    spec = _spec(dec, prefix)
    res, _, ref = FAMILIES[prefix]
    assert spec.method_name == f"{prefix}_{dec}"
    assert spec.inference == "passage_jax.learned.planner:make_planner"
    assert (spec.resolution, spec.split, spec.cost_model, spec.task_variant, spec.n_samples) == \
        (res, "test", "elevation", "obstacles", 24)
    assert spec.seeds == SEEDS and spec.dataset_path == "shipped"
    assert spec.component_control["variant"] == dec
    for seed in SEEDS:
        kw = spec.kwargs_for_seed(seed)
        assert kw["guide"] == ("octile" if dec == "prediction_free" else "learned")
        assert _keys(kw) == STAGE_KEYS[dec]
        if dec == "prediction_free":  # the control never loads a network
            assert "checkpoint" not in kw
        else:
            assert kw["checkpoint"] == ref.format(seed=seed)


@pytest.mark.parametrize("prefix", FAMILIES)
def test_component_controls_are_consistent(prefix):
    specs = {d: _spec(d, prefix) for d in DECODERS}
    cc = {d: s.component_control for d, s in specs.items()}
    assert [cc[d]["guide"] for d in DECODERS] == ["learned", "learned", "prediction_free", "learned"]
    # the guided repair and its control: the same machinery and the same budget
    assert cc["bounded_repair"]["machinery_id"] == cc["prediction_free"]["machinery_id"] is not None
    assert specs["bounded_repair"].budget == specs["prediction_free"].budget
    assert specs["bounded_repair"].budget.max_expansions is not None
    for seed in SEEDS:
        assert _search(specs["bounded_repair"].kwargs_for_seed(seed)).max_expansions == \
            _search(specs["prediction_free"].kwargs_for_seed(seed)).max_expansions
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
@pytest.mark.parametrize("prefix", FAMILIES)
def test_admission_hashes_the_shipped_checkpoint_of_each_seed(prefix):
    _, fam, _ = FAMILIES[prefix]
    files = checkpoint_files(_spec("bounded_repair", prefix))
    for seed in SEEDS:
        f = files[str(seed)]["checkpoint"]
        path = SHIPPED_DIR / f"{fam}-{seed}.json"
        assert Path(f["path"]) == path.resolve() and f["sha256"] == sha256_file(path)


@needs_checkpoints
def test_the_256_specs_carry_the_operating_point_frozen_on_calibration():
    """configs/learned256_calibration.json (bench/calibrate_learned.py): made on the
    calibration split with shipped checkpoints, its decision picked by its own rule from
    its own sweep, and the specs' network, refine_radius, accept_ratio, guide_weight,
    max_escapes, backups and repair budget are the decided ones (the direct spec's backups
    and max_escapes its own decision): each spec's stages are those of the decided point
    (the calibration names it in the planner's former flat keywords)."""
    cal = json.loads(CALIBRATION.read_text())
    assert cal["format"] == "passage-jax-learned-calibration-v5"
    assert cal["split"] == "calibration" and cal["resolution"] == 256 and cal["seeds"] == list(SEEDS)
    for family, by_seed in cal["checkpoints"].items():  # every candidate calibrated is shipped
        for seed in SEEDS:
            assert by_seed[str(seed)] == sha256_file(SHIPPED_DIR / f"{family}-{seed}.msgpack")
    import sys  # noqa: PLC0415
    sys.path.insert(0, str(REPO / "bench"))
    from calibrate_learned import decide, decide_direct  # noqa: PLC0415
    decided = cal["decided"]
    assert decided == decide(cal["sweep"], cal["max_regret"])
    assert cal["decided_direct"] == {"family": decided["family"], **decide_direct(cal["sweep_direct"])}
    assert {r["family"] for r in cal["sweep_direct"]} == {decided["family"]}
    assert FAMILIES["learned256"][1] == decided["family"]
    specs = {d: _spec(d, "learned256") for d in DECODERS}
    point = {k: decided[k] for k in ("guide_weight", "max_expansions", "accept_ratio", "refine_radius",
                                     "max_escapes", "backups")}
    direct_point = {k: cal["decided_direct"][k] for k in ("max_escapes", "backups")}
    for seed in SEEDS:
        for d in ("bounded_repair", "exact_fallback", "prediction_free", "direct"):
            kw = specs[d].kwargs_for_seed(seed)
            want = legacy_form({"decoder": d, **(direct_point if d == "direct" else point)})
            assert kw["guide"] == want.get("guide", "learned")
            assert parse_stages(kw["stages"]) == parse_stages(want["stages"])
            if d != "prediction_free":
                assert kw["checkpoint"] == f"shipped:{decided['family']}-{seed}"
        for s in parse_stages(specs["direct"].kwargs_for_seed(seed)["stages"]):  # a descent alone
            assert getattr(s, "accept_ratio", None) is None and getattr(s, "refine_radius", None) is None
    assert specs["bounded_repair"].budget.max_expansions == decided["max_expansions"]
    from passage_jax.run.loop import canonical_json_sha256  # noqa: PLC0415
    quoted = f"canonical-JSON sha256 {canonical_json_sha256(cal)}"
    for d in DECODERS:  # each spec quotes the hash of the decisions it was frozen with
        assert quoted in (REPO / "configs" / f"learned256_{d}.yaml").read_text()


@pytest.fixture(scope="module")
def shipped_requests():
    return {res: build_request(load_scenes(shipped_cohort_root(), res, "test", n_samples=1)[0]
                               .task("elevation", "obstacles")) for res in (64, 256)}


@pytest.mark.parametrize("prefix", FAMILIES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dec", DECODERS)
def test_learned_config_plans_a_shipped_request(dec, seed, prefix, shipped_requests):
    res_n, fam, _ = FAMILIES[prefix]
    if not (SHIPPED_DIR / f"{fam}-{seed}.json").is_file():
        pytest.skip(f"the shipped checkpoint {fam}-{seed}.json is not in {SHIPPED_DIR} yet")
    r = shipped_requests[res_n]
    c_star = search(r.elevation, r.obstacles, r.start, r.goal, r.cost_model, r.cost_weight).cost
    assert np.isfinite(c_star)
    spec = _spec(dec, prefix)
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
        assert planner.guide.checkpoint_id == sha256_file(SHIPPED_DIR / f"{fam}-{seed}.msgpack")


def test_the_calibration_rules_on_hand_made_rows():
    """bench/calibrate_learned.py's rules: exact_fallback's least median work among the
    candidates within the regret target (else the least regret; ties: less regret, then
    fewer backups), the budget of best bounded_repair success at that point; direct's most
    successful (backups, max_escapes) among those within twice the strict descent's regret
    on the network's field (ties: fewer backups, then fewer escapes, None counting most)."""
    import sys  # noqa: PLC0415
    sys.path.insert(0, str(REPO / "bench"))
    from calibrate_learned import decide, decide_direct  # noqa: PLC0415

    def row(decoder, esc, success, regret, work, budget=100, backups=0):
        return {"decoder": decoder, "family": "f", "refine_radius": None, "accept_ratio": None,
                "guide_weight": 1.0, "max_escapes": esc, "backups": backups, "max_expansions": budget,
                "n": 10, "success": success, "regret_mean_ok": regret, "work_median": work,
                "work_mean": work}
    rows = [row("exact_fallback", 0, 1.0, 0.002, 900), row("exact_fallback", 4, 1.0, 0.0029, 500),
            row("exact_fallback", 8, 1.0, 0.004, 100), row("exact_fallback", None, 0.9, 0.0, 50),
            row("bounded_repair", 4, 0.8, 0.01, 500, 100), row("bounded_repair", 4, 0.9, 0.01, 600, 200)]
    assert decide(rows, 0.003) == {"family": "f", "refine_radius": None, "accept_ratio": None,
                                   "guide_weight": 1.0, "max_escapes": 4, "backups": 0,
                                   "max_expansions": 200}
    assert decide(rows, 0.001)["max_escapes"] == 0  # none within: the least regret
    tie = rows + [row("exact_fallback", 4, 1.0, 0.0029, 500, backups=16),
                  row("exact_fallback", 0, 1.0, 0.001, 400, backups=64)]
    assert decide(tie, 0.003)["backups"] == 64  # less work wins over fewer backups
    assert decide(tie[:-1], 0.003)["backups"] == 0  # equal work and regret: fewer backups
    direct = [row("direct", 0, 0.5, 0.05, 100), row("direct", 4, 0.7, 0.09, 100),
              row("direct", 16, 0.7, 0.08, 100), row("direct", None, 0.9, 0.2, 100)]
    assert decide_direct(direct) == {"backups": 0, "max_escapes": 4}  # None is past twice 0.05
    assert decide_direct(direct[:1] + direct[3:]) == {"backups": 0, "max_escapes": 0}
    more = direct + [row("direct", 4, 0.7, 0.02, 100, backups=32), row("direct", 0, 0.95, 0.101, 100,
                                                                       backups=64)]
    assert decide_direct(more) == {"backups": 0, "max_escapes": 4}  # 64's regret is past the cap
    more[-1]["regret_mean_ok"] = 0.1
    assert decide_direct(more) == {"backups": 64, "max_escapes": 0}
    with pytest.raises(SystemExit):
        decide_direct(direct[1:])
