"""The learned planner's stage list (passage_jax.learned.stages): the order grammar, stage
compositions against expectations computed apart (SciPy's exact cost-to-go, the decoders
called one by one) on hand-made grids, the former flat keys refused with their stages
written out, and the shipped specs' stage lists giving the routes recorded with the former
keys (tests/fixtures/golden/learned_stage_routes.json)."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.graph import GraphSpec, edge_cost_field_np
from passage_jax.learned.decoders import bellman_backups, bounded_repair, direct, octile_field
from passage_jax.learned.guide import load_guide
from passage_jax.learned.planner import LearnedPlanner, make_planner
from passage_jax.learned.stages import (
    GRAMMAR,
    Backups,
    Descent,
    Exact,
    GuidedAStar,
    legacy_form,
    parse_stages,
)
from passage_jax.protocol import BudgetSpec, PlanRequest, build_request
from passage_jax.protocol.contracts import normalise_result
from passage_jax.run import load_spec
from passage_jax.run.record import vector_isa
from passage_jax.testing import cost_to_go, exact_route, make_scene

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "golden" / "learned_stage_routes.json"


def _request(seed=3, n=32, budget=None):
    scene, _ = make_scene(np.random.default_rng(seed), n, f"s{seed}")
    return PlanRequest(
        sample_id=scene.id,
        elevation=scene.elevation_m,
        obstacles=scene.obstacles,
        start=scene.start,
        goal=scene.goal,
        cost_model="elevation",
        cost_weight=62.4,
        graph=GraphSpec(cost_model="elevation", cost_weight=62.4),
        budget=budget or BudgetSpec(),
    )


def _exact_field(r):
    return cost_to_go(edge_cost_field_np(r.elevation, r.obstacles, r.cost_model, r.cost_weight), r.goal)


def _c_star(r):
    return exact_route(r.elevation, r.obstacles, r.start, r.goal, r.cost_model, r.cost_weight)[0]


def _pit(r, depth=1e7):
    """The exact field with a deep pit on the optimal route a third of the way: a descent
    falls in and stops."""
    v = _exact_field(r)
    route = exact_route(r.elevation, r.obstacles, r.start, r.goal, r.cost_model, r.cost_weight)[1]
    pr, pc = route[len(route) // 3]
    rr, cc = np.mgrid[0 : v.shape[0], 0 : v.shape[1]]
    return np.where(np.isfinite(v), v - depth * np.exp(-((rr - pr) ** 2 + (cc - pc) ** 2) / 8.0), v)


def _cost(r, path):
    from passage_jax.graph import route_cost  # noqa: PLC0415

    return route_cost(path, r.elevation, r.graph)


# ---- the grammar -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys",
    [
        ["descent"],
        ["guided_astar"],
        ["backups", "descent"],
        ["descent", "guided_astar"],
        ["descent", "exact"],
        ["guided_astar", "guided_astar", "exact"],
        ["backups", "descent", "guided_astar", "exact"],
    ],
)
def test_the_grammar_admits(keys):
    stages = parse_stages([{k: 3 if k == "backups" else {}} for k in keys])
    assert [s.key for s in stages] == keys


@pytest.mark.parametrize(
    "keys",
    [
        ["exact"],
        ["backups"],
        ["descent", "descent"],
        ["descent", "backups"],
        ["exact", "descent"],
        ["descent", "exact", "guided_astar"],
        ["guided_astar", "guided_astar", "guided_astar"],
        ["backups", "backups", "descent"],
        ["descent", "guided_astar", "exact", "exact"],
    ],
)
def test_the_grammar_refuses_with_one_message(keys):
    with pytest.raises(ValueError) as e:
        parse_stages([{k: 3 if k == "backups" else {}} for k in keys])
    assert str(e.value) == f"learned planner: stages {keys} do not follow {GRAMMAR}"


def test_stage_settings_are_checked_where_they_are_written():
    assert parse_stages([{"descent": None}, {"exact": {}}]) == (Descent(), Exact())
    assert parse_stages([Backups(2), {"guided_astar": {"weight": 0.5}}]) == (
        Backups(2),
        GuidedAStar(weight=0.5),
    )
    with pytest.raises(ValueError, match="needs a descent stage before it"):
        parse_stages([{"guided_astar": {"start_from": "failed_direct"}}])
    assert (
        parse_stages([{"descent": {}}, {"guided_astar": {"start_from": "failed_direct"}}])[1].start_from
        == "failed_direct"
    )
    with pytest.raises(ValueError, match=r"stage exact has no setting \['max_expansions'\]"):
        parse_stages([{"descent": {}}, {"exact": {"max_expansions": 5}}])
    with pytest.raises(ValueError, match="one key"):
        parse_stages([{"descent": {}, "exact": {}}])
    with pytest.raises(ValueError, match="non-empty list"):
        parse_stages([])
    with pytest.raises(ValueError, match="exact.solver"):
        Exact("dijkstra")


# ---- compositions on hand-made grids ----------------------------------------------------


def test_compositions_against_the_exact_cost_and_the_decoders_one_by_one():
    r = _request()
    c = _c_star(r)
    pit = _pit(r)
    # a descent on the exact field is optimal and ends the composition
    res = normalise_result(
        LearnedPlanner(_exact_field, stages=[{"descent": {}}, {"guided_astar": {}}, {"exact": {}}]).plan(r)
    )
    assert res.route_stage == "primary" and list(res.stage_work) == ["primary"]
    assert _cost(r, res.path) == pytest.approx(c, rel=1e-9)
    # in the pit the descent fails; the guided A* (admissible field) repairs it optimally
    want_descent = direct(pit, r)
    want_repair = bounded_repair(pit, r, max_expansions=5000)
    assert want_descent.status == "no_path" and want_repair.status == "ok"
    res = normalise_result(
        LearnedPlanner(
            lambda q: pit, stages=[{"descent": {}}, {"guided_astar": {"max_expansions": 5000}}]
        ).plan(r)
    )
    assert res.route_stage == "repair" and np.array_equal(res.path, want_repair.path)
    assert res.stage_work == {"primary": want_descent.work, "repair": want_repair.work}
    assert _cost(r, res.path) == pytest.approx(c, rel=1e-9)
    # every guided route rejected (c* is over the octile bound): the exact solver's route
    assert c > float(octile_field(r)[r.start])
    res = normalise_result(
        LearnedPlanner(
            lambda q: pit,
            stages=[
                {"descent": {"accept_ratio": 1.0}},
                {"guided_astar": {"accept_ratio": 1.0}},
                {"exact": {}},
            ],
        ).plan(r)
    )
    assert res.route_stage == "fallback" and list(res.stage_work) == ["primary", "repair", "fallback"]
    assert _cost(r, res.path) == pytest.approx(c, rel=1e-9)
    # backups come first and every stage reads the backed-up field
    swept = bellman_backups(pit, r, backups=6)
    res = normalise_result(
        LearnedPlanner(lambda q: pit, stages=[{"backups": 6}, {"guided_astar": {"weight": 0.5}}]).plan(r)
    )
    bound = octile_field(r)
    mixed = np.where(np.isinf(swept) | np.isinf(bound), np.inf, 0.5 * swept + 0.5 * bound)
    want = bounded_repair(mixed, r, max_expansions=None)
    assert res.route_stage == "primary" and np.array_equal(res.path, want.path)
    assert (
        res.stage_work["primary"] == want.work and res.resource_peaks["backup_cell_updates"] == 6 * pit.size
    )
    # the octile guide is the same stage list on the octile field
    res = normalise_result(LearnedPlanner("octile", stages=[{"backups": 6}, {"descent": {}}]).plan(r))
    want = direct(bellman_backups(bound, r, backups=6), r)
    assert res.status == want.status and res.stage_work["primary"] == want.work


def test_one_budget_for_the_whole_request():
    r = _request(budget=BudgetSpec(max_expansions=40))
    pit = _pit(r)
    res = normalise_result(
        LearnedPlanner(lambda q: pit, stages=[{"descent": {}}, {"guided_astar": {}}]).plan(r)
    )
    primary = res.stage_work["primary"]["expansions"]
    assert res.status == "budget_exhausted" and res.stage_work["repair"]["expansions"] == 40 - primary
    # the stage's own budget, when tighter
    res = normalise_result(
        LearnedPlanner(lambda q: pit, stages=[{"descent": {}}, {"guided_astar": {"max_expansions": 7}}]).plan(
            r
        )
    )
    assert res.stage_work["repair"]["expansions"] == 7


# ---- the former flat keys -------------------------------------------------------------------


@pytest.mark.parametrize(
    "old,new",
    [
        (
            {
                "decoder": "exact_fallback",
                "max_expansions": 32768,
                "guide_weight": 1.0,
                "accept_ratio": 1.4,
                "backups": 64,
            },
            "{stages: [{backups: 64}, {descent: {accept_ratio: 1.4}}, {guided_astar: {max_expansions: 32768, "
            "accept_ratio: 1.4}}, {exact: {}}]}",
        ),
        (
            {"decoder": "prediction_free", "max_expansions": 2048, "guide_weight": 0.3},
            "{guide: octile, stages: [{descent: {}}, {guided_astar: {max_expansions: 2048}}]}",
        ),
        (
            {"decoder": "guided_astar", "max_expansions": 100, "guide_weight": 0.5},
            "{stages: [{guided_astar: {max_expansions: 100, weight: 0.5}}]}",
        ),
        (
            {
                "decoder": "bounded_repair",
                "refine_radius": 2,
                "max_escapes": None,
                "start_from": "failed_direct",
            },
            "{stages: [{descent: {max_escapes: null, refine_radius: 2}}, {guided_astar: {refine_radius: 2, "
            "start_from: failed_direct}}]}",
        ),
        ({"max_escapes": 4, "backups": 32}, "{stages: [{backups: 32}, {descent: {max_escapes: 4}}]}"),
    ],
)
def test_the_former_keys_are_refused_with_their_stages(old, new):
    with pytest.raises(ValueError) as e:
        make_planner(checkpoint="shipped:1234", **old)
    msg = str(e.value)
    assert "former flat form" in msg and "[backups] (descent | guided_astar) [guided_astar] [exact]" in msg
    assert msg.endswith(f"inference_kwargs: {new}")
    assert sorted(old) == sorted(eval(msg.split("inference_kwargs ")[1].split(" are")[0]))  # noqa: S307
    parse_stages(legacy_form(old)["stages"])  # the form printed is a valid one


def test_a_former_key_with_a_value_it_never_took_is_refused_all_the_same():
    with pytest.raises(
        ValueError,
        match=r"inference_kwargs \['decoder'\] are the former flat form; the "
        r"planner takes guide",
    ):
        make_planner(decoder="beam")


# ---- the shipped specs keep their routes -----------------------------------------------------

#: the variants recorded besides the shipped specs, in the stage form (64x64 cohort, guide shipped:1234)
VARIANTS = {
    "w05": ({"stages": [{"descent": {}}, {"guided_astar": {"max_expansions": 2048, "weight": 0.5}}]}, {}),
    "fb_r2_a12": (
        {
            "stages": [
                {"descent": {"refine_radius": 2, "accept_ratio": 1.2}},
                {"guided_astar": {"max_expansions": 512, "refine_radius": 2, "accept_ratio": 1.2}},
                {"exact": {}},
            ]
        },
        {},
    ),
    "br_mix": (
        {
            "stages": [
                {"backups": 2},
                {"descent": {"accept_ratio": 1.1, "refine_radius": 1, "max_escapes": 3}},
                {
                    "guided_astar": {
                        "max_expansions": 1024,
                        "refine_radius": 1,
                        "weight": 0.8,
                        "start_from": "failed_direct",
                    }
                },
            ]
        },
        {},
    ),
    "direct_esc": (
        {"stages": [{"descent": {"max_escapes": None, "accept_ratio": 1.3, "max_steps": 200}}]},
        {},
    ),
    "gastar": ({"stages": [{"backups": 4}, {"guided_astar": {"max_expansions": 1024, "weight": 0.7}}]}, {}),
    "pf": (
        {
            "guide": "octile",
            "stages": [
                {"backups": 8},
                {"descent": {"refine_radius": 2, "accept_ratio": 1.2}},
                {"guided_astar": {"max_expansions": 1024, "refine_radius": 2}},
            ],
        },
        {},
    ),
    "fb_vi": (
        {
            "stages": [
                {"descent": {"max_steps": 30}},
                {"guided_astar": {"max_expansions": 64}},
                {"exact": {"solver": "value_iteration"}},
            ]
        },
        {},
    ),
    "br_budget": (
        {
            "stages": [
                {"descent": {"refine_radius": 3}},
                {"guided_astar": {"max_expansions": 2048, "refine_radius": 3}},
            ]
        },
        {"max_expansions": 300},
    ),
}
RECORDINGS = json.loads(GOLDEN.read_text())["recordings"]
#: the routes that do not read the learned field (the octile guide) are the same in every
#: recording (tested below), so they are compared against the first one everywhere
RECORDED = RECORDINGS[0]["runs"]


def here() -> dict:
    """What a recording is made under: the JAX release and the CPU's vector extension."""
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "vector_isa": vector_isa()}


def _recorded_here(name: str) -> list:
    """The recorded routes of ``name`` on the learned field under this JAX release and CPU
    vector extension: the network's last bits (and a route that follows them) differ
    between XLA releases and between CPUs of one release (AVX-512 against AVX2); skipped
    where no recording was made (``python -m tests.learned.record_stage_routes`` makes one).
    The octile-guide routes are compared everywhere."""
    now = here()
    for rec in RECORDINGS:
        if rec["recorded_with"] == now:
            return rec["runs"][name]
    pytest.skip(f"routes on the learned field were recorded under "
                f"{[r['recorded_with'] for r in RECORDINGS]}; this is {now}")


def test_the_octile_routes_agree_in_every_recording():
    """The recordings differ only where a route reads the learned field."""
    octile = [n for n in RECORDED if _kwargs(n)[0].get("guide") == "octile"]
    assert octile  # the control is recorded
    for rec in RECORDINGS[1:]:
        assert {n: rec["runs"][n] for n in octile} == {n: RECORDED[n] for n in octile}


def _kwargs(name: str) -> tuple[dict, dict]:
    """The planner keywords (seed 1234) and request budget of a recorded run."""
    if name in VARIANTS:
        return VARIANTS[name]
    spec = load_spec(REPO / "configs" / f"{name}.yaml")
    return spec.kwargs_for_seed(1234), spec.budget


def _digest(res):
    return {
        "status": res.status,
        "route_stage": res.route_stage,
        "message": res.message,
        "stage_work": {k: {kk: int(vv) for kk, vv in (v or {}).items()} for k, v in res.stage_work.items()},
        "path_sha256": None
        if res.path is None
        else hashlib.sha256(np.asarray(res.path, np.int32).tobytes()).hexdigest(),
    }


def _requests(resolution, n, budget):
    scenes = load_scenes(shipped_cohort_root(), resolution, "test", n_samples=n)
    return [build_request(s.task("elevation", "obstacles"), budget=budget) for s in scenes]


def recorded_digests(name: str, n: int | None = None) -> list:
    """The digests of the routes of a recorded run (``n`` requests: as many as recorded)."""
    kw, budget = _kwargs(name)
    if name in VARIANTS:
        guide = {} if kw.get("guide") == "octile" else {"guide": load_guide("shipped:1234")}
        planner, resolution, budget = make_planner(**kw, **guide), 64, BudgetSpec(**budget)
    else:
        planner = make_planner(**kw)
        resolution = load_spec(REPO / "configs" / f"{name}.yaml").resolution
    n = len(RECORDED[name]) if n is None else n
    return [_digest(planner.plan(q)) for q in _requests(resolution, n, budget)]


def _want(name: str) -> list:
    return RECORDED[name] if _kwargs(name)[0].get("guide") == "octile" else _recorded_here(name)


@pytest.mark.parametrize("name", sorted(set(RECORDED) - set(VARIANTS)))
def test_the_shipped_specs_give_the_recorded_routes(name):
    assert recorded_digests(name) == _want(name)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_variants_give_the_recorded_routes(name):
    assert recorded_digests(name) == _want(name)
