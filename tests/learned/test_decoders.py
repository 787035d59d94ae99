"""Decoders and the learned planner on hand-made fields (passage_jax.learned.decoders,
passage_jax.learned.planner): exact cost-to-go fields from SciPy's Dijkstra, fields
with a pit, budgets, stage accounting, protocol validation and the runner."""
import fixtures_runner as F
import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import GraphSpec, edge_cost_field_np, route_cost, route_problem
from passage_jax.graph.moves import MOVES
from passage_jax.learned.decoders import (
    bellman_backups,
    bounded_repair,
    check_field,
    corridor_refine,
    direct,
    exact_fallback,
    octile_field,
    prediction_free,
    request_cost_field,
)
from passage_jax.learned.planner import LearnedPlanner, guide_from_flax, make_planner
from passage_jax.protocol import BudgetSpec, PlanRequest, as_planner, build_request, load_planner
from passage_jax.protocol.contracts import normalise_result
from passage_jax.reference.search import search
from passage_jax.run.execution.timing import execute
from passage_jax.testing import cost_to_go, exact_route, make_scene

MODELS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}
#: the stage spellings the planner tests use (passage_jax.learned.stages)
DESCENT, EXACT = {"descent": {}}, {"exact": {}}


def _astar(**settings):
    return {"guided_astar": settings}


def _request(seed, n=32, model="elevation", budget=None):
    scene, _ = make_scene(np.random.default_rng(seed), n, f"s{seed}")
    w = MODELS[model]
    return PlanRequest(sample_id=scene.id, elevation=scene.elevation_m, obstacles=scene.obstacles,
                       start=scene.start, goal=scene.goal, cost_model=model, cost_weight=w,
                       graph=GraphSpec(cost_model=model, cost_weight=w),
                       budget=budget or BudgetSpec())


def _perfect(request):
    """Exact cost-to-go (SciPy Dijkstra on the reversed graph), independent of the decoders."""
    cost = edge_cost_field_np(request.elevation, request.obstacles, request.cost_model,
                              request.cost_weight)
    return cost_to_go(cost, request.goal)


def _c_star(request):
    return exact_route(request.elevation, request.obstacles, request.start, request.goal,
                       request.cost_model, request.cost_weight)[0]


def _pit(request, depth=1e7, sigma=2.0):
    """The exact field minus a deep Gaussian pit on the optimal route, a third of the
    way from the start: a local minimum away from the goal. Still admissible."""
    v = _perfect(request)
    _, route = exact_route(request.elevation, request.obstacles, request.start, request.goal,
                           request.cost_model, request.cost_weight)
    pr, pc = route[len(route) // 3]
    rr, cc = np.mgrid[0:v.shape[0], 0:v.shape[1]]
    return v - depth * np.exp(-((rr - pr) ** 2 + (cc - pc) ** 2) / (2 * sigma ** 2)), (pr, pc)


def _legal_cost(request, path):
    assert route_problem(path, request.start, request.goal, request.obstacles) is None
    return route_cost(path, request.elevation, request.graph)


@pytest.fixture(scope="module")
def req():
    return _request(3)


@pytest.mark.parametrize("seed,model", [(1, "elevation"), (2, "slope_uphill"), (5, "energy")])
def test_direct_on_the_exact_field_is_optimal(seed, model):
    r = _request(seed, model=model)
    out = direct(_perfect(r), r)
    assert out.status == "ok" and out.message is None
    assert _legal_cost(r, out.path) == pytest.approx(_c_star(r), rel=1e-9)
    assert out.work == {"expansions": len(out.path) - 1, "queue_operations": 0, "live_states": 1}


def test_direct_fails_cleanly_in_a_pit_and_repair_succeeds(req):
    field, pit = _pit(req)
    out = direct(field, req)
    assert out.status == "no_path" and out.path is None
    assert "revisited" in out.message
    walked = out.walked
    assert len(walked) <= req.shape[0] * req.shape[1]
    assert len({tuple(c) for c in walked.tolist()}) == len(walked)  # never loops
    assert max(abs(walked[-1][0] - pit[0]), abs(walked[-1][1] - pit[1])) <= 2  # ended in the pit
    assert out.work["expansions"] == len(walked)
    # the pit field stays admissible (it only lowers the exact field): A* stays optimal
    rep = bounded_repair(field, req, max_expansions=10_000)
    assert rep.status == "ok"
    assert _legal_cost(req, rep.path) == pytest.approx(_c_star(req), rel=1e-9)
    # starting from the failed descent keeps its prefix, never repeats a cell
    rep2 = bounded_repair(field, req, max_expansions=10_000, start_from="failed_direct",
                          prefix=walked)
    assert rep2.status == "ok"
    assert _legal_cost(req, rep2.path) >= _c_star(req) * (1 - 1e-12)
    assert len({tuple(c) for c in rep2.path.tolist()}) == len(rep2.path)
    assert rep2.work["expansions"] > 0


def test_direct_stuck_and_step_limit(req):
    field = np.full(req.shape, np.inf)
    field[req.start] = 0.0
    out = direct(field, req)
    assert out.status == "no_path" and "stuck at" in out.message
    assert out.work["expansions"] == 1
    out = direct(_perfect(req), req, max_steps=3)
    assert out.status == "budget_exhausted" and out.work["expansions"] == 3
    assert "step limit 3" in out.message and len(out.walked) == 4


def test_field_checks_name_the_field(req):
    with pytest.raises(ValueError, match="field shape"):
        direct(np.zeros((3, 3)), req)
    bad = _perfect(req)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="field has 1 NaN"):
        check_field(bad, req)
    with pytest.raises(ValueError, match="prefix"):
        bounded_repair(_perfect(req), req, max_expansions=10, start_from="failed_direct")
    with pytest.raises(ValueError, match="start_from"):
        bounded_repair(_perfect(req), req, max_expansions=10, start_from="middle")


def test_prediction_free_needs_more_expansions_at_equal_success():
    for seed in (3, 4):
        r = _request(seed)
        guided = bounded_repair(_perfect(r), r, max_expansions=5000)
        control = prediction_free(r, max_expansions=5000)
        assert guided.status == control.status == "ok"
        c = _c_star(r)
        # both guides are admissible: both routes are optimal
        assert _legal_cost(r, guided.path) == pytest.approx(c, rel=1e-9)
        assert _legal_cost(r, control.path) == pytest.approx(c, rel=1e-9)
        assert control.work["expansions"] > guided.work["expansions"]
        # with the exact field A* expands little beyond the route itself
        assert guided.work["expansions"] <= 3 * len(guided.path)


def test_octile_field_is_admissible(req):
    oct_ = octile_field(req)
    v = _perfect(req)
    free = np.isfinite(v)
    assert np.all(oct_[free] <= v[free] * (1 + 1e-12))
    assert oct_[req.goal] == 0.0
    # independent formula: 30 m pixels, unit step cost per metre
    dr, dc = abs(req.start[0] - req.goal[0]), abs(req.start[1] - req.goal[1])
    want = 30.0 * (max(dr, dc) + (np.sqrt(2) - 1) * min(dr, dc))
    assert oct_[req.start] == pytest.approx(want, rel=1e-12)


def test_search_takes_a_heuristic_field(req):
    exact = search(req.elevation, req.obstacles, req.start, req.goal, req.cost_model,
                   req.cost_weight, heuristic=_perfect(req))
    plain = search(req.elevation, req.obstacles, req.start, req.goal, req.cost_model,
                   req.cost_weight, heuristic=True)
    assert exact.cost == pytest.approx(plain.cost, rel=1e-12) == pytest.approx(_c_star(req), rel=1e-9)
    assert exact.expansions < plain.expansions
    with pytest.raises(ValueError, match="heuristic field"):
        search(req.elevation, req.obstacles, req.start, req.goal, req.cost_model,
               req.cost_weight, heuristic=np.zeros((2, 2)))


def test_budget_exhaustion(req):
    out = bounded_repair(np.zeros(req.shape), req, max_expansions=3)
    assert out.status == "budget_exhausted" and out.path is None
    assert out.work["expansions"] == 3 and "budget of 3" in out.message
    assert prediction_free(req, max_expansions=2).status == "budget_exhausted"


@pytest.mark.parametrize("solver", ["astar", "value_iteration"])
def test_exact_fallback_is_optimal(solver):
    r = _request(7, n=24, model="slope_uphill")
    out = exact_fallback(r, solver=solver)
    assert out.status == "ok"
    assert _legal_cost(r, out.path) == pytest.approx(_c_star(r), rel=1e-9)
    if solver == "astar":
        assert out.work["expansions"] > 0
    else:
        assert out.work == {}  # value iteration has no search counters


def _check_accounting(res, stages, route_stage):
    norm = normalise_result(res)
    assert set(norm.stage_work) == set(stages)
    for counters in norm.stage_work.values():
        assert all(isinstance(v, int) and v >= 0 for v in counters.values())
    assert norm.work["expansions"] == sum(c["expansions"] for c in norm.stage_work.values())
    assert norm.work["queue_operations"] == sum(c["queue_operations"] for c in norm.stage_work.values())
    assert norm.work["live_states"] == max(c["live_states"] for c in norm.stage_work.values())
    assert norm.route_stage == route_stage
    assert set(norm.resource_peaks) == {"forward_ms", "decode_ms"}
    return norm


class _Counting:
    """A guide returning a fixed field per request, counting its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, request):
        self.calls += 1
        return self.fn(request)


def test_planner_stage_accounting(req):
    c = _c_star(req)
    pit = _Counting(lambda r: _pit(r)[0])

    res = _check_accounting(LearnedPlanner(pit, stages=[DESCENT]).plan(req), ["primary"], None)
    assert res.status == "no_path" and res.path is None and "primary: descent revisited" in res.message

    res = _check_accounting(LearnedPlanner(pit, stages=[DESCENT, _astar(max_expansions=5000)]).plan(req),
                            ["primary", "repair"], "repair")
    assert res.status == "ok" and _legal_cost(req, res.path) == pytest.approx(c, rel=1e-9)

    res = _check_accounting(LearnedPlanner(pit, stages=[DESCENT, _astar(max_expansions=1), EXACT]).plan(req),
                            ["primary", "repair", "fallback"], "fallback")
    assert res.status == "ok" and _legal_cost(req, res.path) == pytest.approx(c, rel=1e-9)
    assert pit.calls == 3  # one forward per request

    perfect = _Counting(_perfect)
    res = _check_accounting(LearnedPlanner(perfect, stages=[DESCENT, _astar(), EXACT]).plan(req),
                            ["primary"], "primary")
    assert res.status == "ok" and res.precision == "fp64" and res.message is None

    # the control: the same stages on the octile field; a checkpoint given to it is not loaded
    res = normalise_result(LearnedPlanner("octile", stages=[DESCENT, _astar(max_expansions=5000)]).plan(req))
    same = make_planner(guide="octile", checkpoint="/no/such/checkpoint",
                        stages=[DESCENT, _astar(max_expansions=5000)]).plan(req)
    assert np.array_equal(same.path, res.path) and same.stage_work == res.stage_work
    assert res.status == "ok" and res.precision == "fp64"
    if res.route_stage == "repair":  # octile A* from the start is optimal
        assert set(res.stage_work) == {"primary", "repair"}
        assert _legal_cost(req, res.path) == pytest.approx(c, rel=1e-9)
    else:
        assert res.route_stage == "primary" and set(res.stage_work) == {"primary"}
        assert _legal_cost(req, res.path) >= c * (1 - 1e-12)


def test_guided_astar_is_the_guided_search_alone(req):
    """stages [guided_astar]: one primary stage, the guided bounded A* from the start
    (bounded_repair's repair machinery) with no descent before it."""
    c = _c_star(req)
    field, _ = _pit(req)
    pit = _Counting(lambda r: field)
    res = _check_accounting(LearnedPlanner(pit, stages=[_astar(max_expansions=5000)]).plan(req),
                            ["primary"], "primary")
    assert pit.calls == 1 and res.status == "ok"
    same = bounded_repair(field, req, max_expansions=5000)
    assert res.stage_work["primary"] == same.work and np.array_equal(res.path, same.path)
    # descent then repair spends the descent's steps first: its repair stage alone is the same
    # search, so the guided search alone expands fewer cells in all than descent + repair
    br = normalise_result(LearnedPlanner(pit, stages=[DESCENT, _astar(max_expansions=5000)]).plan(req))
    assert br.stage_work["repair"] == same.work
    assert res.work["expansions"] == br.work["expansions"] - br.stage_work["primary"]["expansions"]
    # on the exact field the guided search is optimal
    res = normalise_result(LearnedPlanner(_perfect, stages=[_astar()]).plan(req))
    assert res.status == "ok" and _legal_cost(req, res.path) == pytest.approx(c, rel=1e-9)
    # the tighter of its own limit and the request budget
    tight = PlanRequest(**{**{k: getattr(req, k) for k in ("sample_id", "elevation", "obstacles", "start",
                                                           "goal", "cost_model", "cost_weight", "graph")},
                           "budget": BudgetSpec(max_expansions=3)})
    res = normalise_result(LearnedPlanner(pit, stages=[_astar(max_expansions=5000)]).plan(tight))
    assert res.status == "budget_exhausted" and res.work["expansions"] == 3
    with pytest.raises(ValueError, match="needs a descent stage before it"):
        LearnedPlanner(pit, stages=[_astar(start_from="failed_direct")])
    assert [s.key for s in make_planner(guide=pit, stages=[_astar()]).stages] == ["guided_astar"]


def test_planner_shares_the_request_budget(req):
    field, _ = _pit(req)
    budget = BudgetSpec(max_expansions=40)
    r = PlanRequest(**{**{k: getattr(req, k) for k in ("sample_id", "elevation", "obstacles", "start",
                                                        "goal", "cost_model", "cost_weight", "graph")},
                       "budget": budget})
    res = normalise_result(LearnedPlanner(lambda q: field, stages=[DESCENT, _astar()]).plan(r))
    primary = res.stage_work["primary"]["expansions"]
    assert res.status == "budget_exhausted"
    assert res.stage_work["repair"]["expansions"] == 40 - primary
    assert res.work["expansions"] == 40


def test_make_planner_kwargs():
    with pytest.raises(TypeError, match=r"unknown inference_kwargs \['beam'\]"):
        make_planner(stages=[DESCENT], beam=3)
    with pytest.raises(ValueError, match="unknown stage 'beam'"):
        make_planner(guide=_perfect, stages=[{"beam": {}}])
    with pytest.raises(ValueError, match="guide='network'"):
        make_planner(guide="network")
    with pytest.raises(ValueError, match="need a guide"):
        make_planner(stages=[DESCENT, _astar()])
    with pytest.raises(ValueError, match="max_expansions"):
        make_planner(guide=_perfect, stages=[DESCENT, _astar(max_expansions=0)])
    with pytest.raises(ValueError, match="not both"):
        make_planner(guide=_perfect, checkpoint="shipped:1234")
    # the control needs no guide; a checkpoint given to it is not loaded
    p = make_planner(checkpoint="/no/such/checkpoint", guide="octile",
                     stages=[DESCENT, _astar(max_expansions=9)])
    assert p.guide is None and p.octile and p.stages[1].max_expansions == 9


class _Identity(nn.Module):
    """A 1x1 convolution: the user's "network" reading its first input channel."""

    @nn.compact
    def __call__(self, x):
        return nn.Conv(1, (1, 1))(x)[..., 0]


def test_guide_from_flax(req):
    v = _perfect(req)
    mod = _Identity()
    params = {"params": {"Conv_0": {"kernel": jnp.ones((1, 1, 1, 1)), "bias": jnp.zeros((1,))}}}
    guide = guide_from_flax(mod, params, lambda r: np.where(np.isfinite(v), v, 1e9)[..., None])
    field = guide(req)
    free = np.isfinite(v) & ~req.obstacles
    assert field.dtype == np.float64 and np.allclose(field[free], v[free], rtol=1e-6)
    assert np.all(np.isinf(field[req.obstacles]))  # the guide marks obstacle cells
    res = LearnedPlanner(guide, stages=[DESCENT]).plan(req)
    assert res.status == "ok" and res.precision == "fp32"
    assert _legal_cost(req, res.path) <= _c_star(req) * (1 + 1e-6)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("cohort")
    F.write_cohort(root)
    return F.load(root)


def test_planner_runs_through_the_runner(tasks):
    trap = tasks[1]
    assert tuple(trap.scene.start) == F.START
    req = build_request(trap)
    c_star = _c_star(req)
    p = as_planner(make_planner(guide=_perfect, stages=[DESCENT, _astar(max_expansions=500)]))
    rec, snap = execute(p, trap)
    assert rec["status"] == "ok" and rec["route_stage"] == "primary"
    assert rec["route_cost"] == pytest.approx(c_star, rel=1e-9)
    # the prediction-free control: the octile descent is caught by the trap, the repair goes round
    stages = [{"descent": {}}, {"guided_astar": {"max_expansions": 500}}]
    p = load_planner("passage_jax.learned.planner:make_planner",  # as a run spec names it
                     inference_kwargs={"guide": "octile", "stages": stages})
    rec, snap = execute(p, trap, BudgetSpec(max_expansions=1000))
    assert rec["status"] == "ok" and rec["route_stage"] == "repair"
    assert set(rec["stage_work"]) == {"primary", "repair"}
    assert rec["route_cost"] == pytest.approx(c_star, rel=1e-9)
    # the direct decoder alone on the same trap fails cleanly
    rec, _ = execute(as_planner(make_planner(guide=octile_field, stages=[DESCENT])), trap)
    assert rec["status"] == "no_path" and rec["route_stage"] is None


def test_failed_direct_repair_cuts_the_walked_loop():
    z = np.zeros((8, 8))
    r = PlanRequest(sample_id="open", elevation=z, obstacles=np.zeros((8, 8), bool), start=(3, 3),
                    goal=(3, 7), cost_model="distance", cost_weight=0.0,
                    graph=GraphSpec(cost_model="distance", cost_weight=0.0))
    walked = np.array([(3, 3), (3, 2), (3, 1)])  # a descent that went the wrong way
    out = bounded_repair(octile_field(r), r, max_expansions=100, start_from="failed_direct",
                         prefix=walked)
    assert out.status == "ok"
    # the tail from (3, 1) runs back through (3, 2) and (3, 3): the join cuts the detour
    assert out.path.tolist() == [[3, 3], [3, 4], [3, 5], [3, 6], [3, 7]]
    assert _legal_cost(r, out.path) == pytest.approx(4 * 30.0, rel=1e-12)


def test_weight_mixes_the_guide_with_the_octile_bound(req):
    """guided_astar.weight w: the guided A* stages search on w * guide + (1 - w) * octile, computed
    here by hand; w = 0 is the prediction-free control's search, w = 1 the guide's own;
    the descent follows the guide whatever w is."""
    field, _ = _pit(req)
    bound = octile_field(req)
    for w in (0.0, 0.5, 1.0):
        res = normalise_result(LearnedPlanner(lambda q: field, stages=[_astar(max_expansions=5000, weight=w)])
                               .plan(req))
        infinite = np.isinf(field) | np.isinf(bound)
        mixed = np.full(field.shape, np.inf)
        mixed[~infinite] = w * field[~infinite] + (1 - w) * bound[~infinite]
        same = bounded_repair(mixed, req, max_expansions=5000)
        assert res.stage_work["primary"] == same.work and np.array_equal(res.path, same.path)
    zero = normalise_result(LearnedPlanner(lambda q: field, stages=[_astar(weight=0.0, max_expansions=5000)])
                            .plan(req))
    control = prediction_free(req, max_expansions=5000)
    assert zero.stage_work["primary"] == control.work and np.array_equal(zero.path, control.path)
    # bounded_repair: the descent on the guide itself, the repair on the mixture
    half = normalise_result(LearnedPlanner(lambda q: field, stages=[DESCENT, _astar(weight=0.5,
                                                                             max_expansions=5000)]).plan(req))
    one = normalise_result(LearnedPlanner(lambda q: field, stages=[DESCENT, _astar(max_expansions=5000)])
                           .plan(req))
    assert half.stage_work["primary"] == one.stage_work["primary"]
    for bad in (-0.1, 1.5, "0.5", True, float("nan")):
        with pytest.raises(ValueError, match="guided_astar.weight"):
            make_planner(guide=_perfect, stages=[_astar(weight=bad)])


def test_route_cost_on_is_the_graphs_route_cost(req):
    from passage_jax.learned.decoders import request_cost_field, route_cost_on  # noqa: PLC0415

    path = direct(_perfect(req), req).path
    assert route_cost_on(path, request_cost_field(req)) == pytest.approx(_legal_cost(req, path), rel=1e-12)
    assert route_cost_on(path[:1], request_cost_field(req)) == 0.0


def test_accept_ratio_rejects_a_descent_over_the_bound(req):
    """accept_ratio r: a descent route costing more than r x the octile bound at the start
    is rejected (no_path, only the start kept); at or above its own ratio it is accepted,
    unchanged; the planner then repairs it, for the control as well."""
    field = _perfect(req)
    c_star, bound = _c_star(req), float(octile_field(req)[req.start])
    q = c_star / bound
    assert q > 1.01  # elevation: the straight line is not enough on this scene
    plain = direct(field, req)
    keep = direct(field, req, accept_ratio=q * (1 + 1e-9))
    assert keep.status == "ok" and np.array_equal(keep.path, plain.path) and keep.work == plain.work
    drop = direct(field, req, accept_ratio=q * (1 - 1e-6))
    assert drop.status == "no_path" and drop.path is None and "rejected" in drop.message
    assert drop.work == plain.work and drop.walked.tolist() == [list(req.start)]
    strict = {"descent": {"accept_ratio": 1.0}}
    res = normalise_result(LearnedPlanner(lambda r: field, stages=[strict, _astar(max_expansions=5000)])
                           .plan(req))
    assert res.route_stage == "repair" and sorted(res.stage_work) == ["primary", "repair"]
    assert _legal_cost(req, res.path) == pytest.approx(c_star, rel=1e-9)  # A* on the exact field
    assert res.stage_work["primary"] == plain.work
    # with a stage after it, the repair's route (c* > the bound) is tested and rejected too
    fb = normalise_result(LearnedPlanner(lambda r: field, stages=[
        strict, _astar(max_expansions=5000, accept_ratio=1.0), EXACT]).plan(req))
    assert fb.route_stage == "fallback" and sorted(fb.stage_work) == ["fallback", "primary", "repair"]
    assert fb.stage_work["repair"] == res.stage_work["repair"]
    assert _legal_cost(req, fb.path) == pytest.approx(c_star, rel=1e-9)
    loose = q * (1 + 1e-9)
    fb_ok = normalise_result(LearnedPlanner(lambda r: field, stages=[
        {"descent": {"accept_ratio": loose}}, _astar(max_expansions=5000, accept_ratio=loose), EXACT])
        .plan(req))
    assert fb_ok.route_stage == "primary" and np.array_equal(fb_ok.path, plain.path)
    ctrl = normalise_result(LearnedPlanner("octile", stages=[strict, _astar(max_expansions=50000)]).plan(req))
    assert ctrl.route_stage == "repair"
    alone = normalise_result(LearnedPlanner(lambda r: field, stages=[strict]).plan(req))
    assert alone.status == "no_path" and "rejected" in alone.message and alone.route_stage is None
    for bad in (0.99, float("nan"), float("inf"), "1.2", True):
        with pytest.raises(ValueError, match="accept_ratio"):
            make_planner(guide=_perfect, stages=[{"descent": {"accept_ratio": bad}}])
        with pytest.raises(ValueError, match="guided_astar.accept_ratio"):
            make_planner(guide=_perfect, stages=[_astar(accept_ratio=bad)])
    # the guided A* alone is tested the same way: its route (c* > the bound) is rejected
    ga = normalise_result(LearnedPlanner(lambda r: field, stages=[_astar(accept_ratio=1.0)]).plan(req))
    assert ga.status == "no_path" and ga.route_stage is None and "guided A* reached the goal" in ga.message


def _corridor_c_star(request, route, radius):
    """c* through the cells within Chebyshev distance ``radius`` of ``route``, by SciPy's
    Dijkstra with every other cell made an obstacle (the graph lets a diagonal pass
    between two blocked cells, so only a move's own cells matter)."""
    rr, cc = np.mgrid[0:request.shape[0], 0:request.shape[1]]
    cheb = np.min(np.maximum(np.abs(rr[..., None] - route[:, 0]), np.abs(cc[..., None] - route[:, 1])),
                  axis=-1)
    return exact_route(request.elevation, request.obstacles | (cheb > radius), request.start,
                       request.goal, request.cost_model, request.cost_weight)[0]


def _detour(request):
    """A legal, costly route: the exact route from the start to a far corner, then on to
    the goal (cells may repeat where the two legs cross)."""
    far = max(((0, 0), (0, request.shape[1] - 1), (request.shape[0] - 1, 0),
               (request.shape[0] - 1, request.shape[1] - 1)),
              key=lambda p: np.hypot(*np.subtract(p, request.start))
              + np.hypot(*np.subtract(p, request.goal)))
    far = tuple(int(v) for v in np.argwhere(~request.obstacles)[
        np.argmin(np.abs(np.argwhere(~request.obstacles) - far).sum(axis=1))])
    args = (request.elevation, request.obstacles)
    a = exact_route(*args, request.start, far, request.cost_model, request.cost_weight)[1]
    b = exact_route(*args, far, request.goal, request.cost_model, request.cost_weight)[1]
    return np.concatenate([a, b[1:]])


@pytest.mark.parametrize("seed,model", [(3, "elevation"), (2, "slope_uphill"), (5, "energy")])
def test_corridor_refine_is_the_exact_best_route_in_the_corridor(seed, model):
    r = _request(seed, model=model)
    from passage_jax.learned.decoders import request_cost_field, route_cost_on  # noqa: PLC0415

    cf = request_cost_field(r)
    detour = _detour(r)
    before = route_cost_on(detour, cf)
    costs = []
    for radius in (1, 2, 4):
        out = corridor_refine(detour, r, radius=radius)
        assert out.status == "ok" and out.message is None
        cost = _legal_cost(r, out.path)
        assert cost == pytest.approx(_corridor_c_star(r, detour, radius), rel=1e-9)
        assert cost < before and out.work["expansions"] > 0
        costs.append(cost)
    assert costs[0] >= costs[1] >= costs[2] >= _c_star(r) * (1 - 1e-12)
    # a corridor covering the whole grid holds the optimum
    whole = corridor_refine(detour, r, radius=r.shape[0])
    assert _legal_cost(r, whole.path) == pytest.approx(_c_star(r), rel=1e-9)


def test_corridor_refine_keeps_a_route_it_cannot_improve(req):
    best = exact_route(req.elevation, req.obstacles, req.start, req.goal, req.cost_model, req.cost_weight)[1]
    out = corridor_refine(best, req, radius=2)
    assert np.array_equal(out.path, best) and "no cheaper route" in out.message
    short = corridor_refine(_detour(req), req, radius=2, max_expansions=3)
    assert np.array_equal(short.path, _detour(req)) and short.work["expansions"] == 3
    assert "budget_exhausted" in short.message
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="radius"):
            corridor_refine(best, req, radius=bad)
    with pytest.raises(ValueError, match="start to its goal"):
        corridor_refine(best[:-1], req, radius=2)


def test_refine_radius_in_the_planner(req):
    """refine_radius: each guided stage ends with the corridor search, whose work it is
    charged; the route never costs more than the unrefined one; a request budget spent
    inside the refinement keeps the unrefined route."""
    from passage_jax.learned.decoders import request_cost_field, route_cost_on  # noqa: PLC0415

    cf = request_cost_field(req)
    from scipy import ndimage  # noqa: PLC0415

    smooth = ndimage.gaussian_filter(np.random.default_rng(0).standard_normal(req.shape), 2)
    noisy = _perfect(req) * (1 + 0.1 * smooth / smooth.std())  # a field off by ~10 %, smoothly
    plain = direct(noisy, req, cost_field=cf)
    assert plain.status == "ok"
    base = route_cost_on(plain.path, cf)
    assert base > _c_star(req) * 1.01  # the noise costs something to refine away
    refined = [{"descent": {"refine_radius": 2}}]
    res = normalise_result(LearnedPlanner(lambda r: noisy, stages=refined).plan(req))
    ref = corridor_refine(plain.path, req, radius=2, cost_field=cf)
    assert res.route_stage == "primary" and np.array_equal(res.path, ref.path)
    assert res.stage_work["primary"]["expansions"] == plain.work["expansions"] + ref.work["expansions"]
    assert _legal_cost(req, res.path) == pytest.approx(_corridor_c_star(req, plain.path, 2), rel=1e-9)
    assert _legal_cost(req, res.path) < base
    # the acceptance test sees the refined cost: a ratio between the two costs keeps it
    bound = float(octile_field(req)[req.start])
    mid = 0.5 * (base + _legal_cost(req, res.path)) / bound
    kept = normalise_result(LearnedPlanner(lambda r: noisy, stages=[
        {"descent": {"refine_radius": 2, "accept_ratio": mid}}, _astar(refine_radius=2, accept_ratio=mid),
        EXACT]).plan(req))
    assert kept.route_stage == "primary" and np.array_equal(kept.path, ref.path)
    unref = normalise_result(LearnedPlanner(lambda r: noisy, stages=[
        {"descent": {"accept_ratio": mid}}, _astar(accept_ratio=mid), EXACT]).plan(req))
    assert unref.route_stage in ("repair", "fallback") and "repair" in unref.stage_work  # rejected
    # a budget spent inside the refinement: the unrefined descent is returned, within budget
    limit = plain.work["expansions"] + 5
    tight = _request(3, budget=BudgetSpec(max_expansions=limit))
    cut = normalise_result(LearnedPlanner(lambda r: noisy, stages=refined).plan(tight))
    assert np.array_equal(cut.path, plain.path) and cut.work["expansions"] == limit
    for bad in (0, -2, 1.5, "2"):
        with pytest.raises(ValueError, match="refine_radius"):
            make_planner(guide=_perfect, stages=[{"descent": {"refine_radius": bad}}])


def _escape_walk(field, request, limit):
    """The descent with escapes, written out independently: at each cell the legal
    neighbour of least step + field (first of MOVES on ties); where that cell was
    visited, the least among the unvisited ones, ``limit`` times at most."""
    cost = edge_cost_field_np(request.elevation, request.obstacles, request.cost_model,
                              request.cost_weight)
    moves = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]  # MOVES' order
    cur, cells, escapes = tuple(request.start), [tuple(request.start)], 0
    while cur != tuple(request.goal):
        options = [(cost[k, cur[0], cur[1]] + field[cur[0] + dr, cur[1] + dc], k, (cur[0] + dr, cur[1] + dc))
                   for k, (dr, dc) in enumerate(moves) if np.isfinite(cost[k, cur[0], cur[1]])]
        best = min(options)[2]
        if best in cells:
            fresh = [o for o in options if o[2] not in cells]
            if not fresh or (limit is not None and escapes >= limit):
                return None, cells, escapes
            best = min(fresh)[2]
            escapes += 1
        cur = best
        cells.append(cur)
    return np.asarray(cells), cells, escapes


def test_direct_escapes_a_pit_like_the_written_out_walk(req):
    """max_escapes: where the Bellman choice was visited the walk takes the best unvisited
    neighbour, at most that many times; the strict descent (0) fails in the pit, the
    escaping one leaves it, on a legal route that never repeats a cell."""
    field, _ = _pit(req, depth=1e4)
    strict = direct(field, req)
    zero = direct(field, req, max_escapes=0)
    assert strict.status == "no_path" and zero.message == strict.message
    assert np.array_equal(zero.walked, strict.walked)
    path, cells, used = _escape_walk(field, req, None)
    assert path is not None and used > 0  # this pit needs escapes, and they suffice
    free = direct(field, req, max_escapes=None)
    assert free.status == "ok" and np.array_equal(free.path, path)
    assert len({tuple(c) for c in free.path.tolist()}) == len(free.path)
    assert _legal_cost(req, free.path) >= _c_star(req) * (1 - 1e-12)
    assert free.work["expansions"] == len(free.path) - 1
    assert direct(field, req, max_escapes=used).status == "ok"
    short = direct(field, req, max_escapes=used - 1)
    ref_path, ref_cells, _ = _escape_walk(field, req, used - 1)
    assert ref_path is None and short.status == "no_path" and "escape(s) spent" in short.message
    assert short.walked.tolist() == [list(c) for c in ref_cells]
    # on the exact field no escape is ever taken: the same optimal route
    assert np.array_equal(direct(_perfect(req), req, max_escapes=None).path, direct(_perfect(req), req).path)
    # a pit too wide to leave: the walk winds into it until no unvisited neighbour is left
    deep, _ = _pit(req)
    trapped = direct(deep, req, max_escapes=None)
    ref_path, ref_cells, _ = _escape_walk(deep, req, None)
    assert ref_path is None and trapped.status == "no_path" and "no unvisited neighbour" in trapped.message
    assert trapped.walked.tolist() == [list(c) for c in ref_cells]
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_escapes"):
            direct(field, req, max_escapes=bad)


def test_max_escapes_in_the_planner(req):
    """The planner's max_escapes reaches every descent (direct's, the first stage of the
    compositions); guided_astar has no descent and refuses it."""
    field, _ = _pit(req, depth=1e4)
    free = {"descent": {"max_escapes": None}}
    res = normalise_result(LearnedPlanner(lambda r: field, stages=[free]).plan(req))
    assert res.status == "ok" and np.array_equal(res.path, direct(field, req, max_escapes=None).path)
    fb = normalise_result(LearnedPlanner(lambda r: field, stages=[free, _astar(), EXACT]).plan(req))
    assert fb.route_stage == "primary" and np.array_equal(fb.path, res.path)
    strict = normalise_result(LearnedPlanner(lambda r: field, stages=[DESCENT, _astar(), EXACT]).plan(req))
    assert strict.route_stage == "repair"
    for bad in (-1, 0.5, "none"):
        with pytest.raises(ValueError, match="max_escapes"):
            make_planner(guide=_perfect, stages=[{"descent": {"max_escapes": bad}}])
    with pytest.raises(ValueError, match="no setting"):  # guided A* has no descent to escape
        make_planner(guide=_perfect, stages=[_astar(max_escapes=2)])
    assert make_planner(guide=_perfect, stages=[free]).stages[0].max_escapes is None


def _written_out_backup(values, cost, goal):
    """One Bellman backup cell by cell, neighbour by neighbour (independent of the kernel)."""
    h, w = values.shape
    out = np.full((h, w), np.inf)
    for r in range(h):
        for c in range(w):
            for k, (dr, dc) in enumerate(MOVES.tolist()):
                rr, cc = r + dr, c + dc
                if 0 <= rr < h and 0 <= cc < w:
                    out[r, c] = min(out[r, c], cost[k, r, c] + values[rr, cc])
    out[goal] = 0.0
    return out


def test_bellman_backups_are_the_written_out_operator():
    r = _request(7, n=12)
    cost = request_cost_field(r)
    field = np.random.default_rng(0).uniform(0, 5000, r.shape)
    field[r.obstacles] = np.inf
    expect = field.copy()
    for k in range(1, 6):
        expect = _written_out_backup(expect, cost, tuple(r.goal))
        got = bellman_backups(field, r, backups=k)
        assert np.array_equal(np.isinf(got), np.isinf(expect))
        np.testing.assert_allclose(got[np.isfinite(got)], expect[np.isfinite(expect)], rtol=1e-12)
    assert np.array_equal(bellman_backups(field, r, backups=0), field)
    for bad in (-1, 1.5, None, True):
        with pytest.raises(ValueError, match="backups"):
            bellman_backups(field, r, backups=bad)


def test_bellman_backups_make_an_overestimate_exact_within_k_steps(req):
    """The exact cost-to-go is the fixed point; a field above it everywhere becomes exact
    on every cell whose optimal descent reaches the goal in at most k steps, and never
    drops below it (T is monotone)."""
    v = _perfect(req)
    cost = request_cost_field(req)
    np.testing.assert_allclose(bellman_backups(v, req, backups=3)[np.isfinite(v)], v[np.isfinite(v)],
                               rtol=1e-12)
    steps = np.full(v.shape, -1)  # steps of the greedy descent on v (an optimal route)
    steps[tuple(req.goal)] = 0
    order = np.argsort(np.where(np.isfinite(v), v, np.inf), axis=None)
    for flat in order:
        cell = np.unravel_index(flat, v.shape)
        if not np.isfinite(v[cell]) or cell == tuple(req.goal):
            continue
        q = [cost[k][cell] + (v[cell[0] + dr, cell[1] + dc] if 0 <= cell[0] + dr < v.shape[0]
                              and 0 <= cell[1] + dc < v.shape[1] else np.inf)
             for k, (dr, dc) in enumerate(MOVES.tolist())]
        k = int(np.argmin(q))
        steps[cell] = steps[cell[0] + MOVES[k][0], cell[1] + MOVES[k][1]] + 1
    over = np.where(np.isfinite(v), v * 1.3 + 500.0, np.inf)
    over[tuple(req.goal)] = 0.0
    for k in (4, 12):
        got = bellman_backups(over, req, backups=k)
        near = np.isfinite(v) & (steps <= k)
        np.testing.assert_allclose(got[near], v[near], rtol=1e-12)
        assert (got[np.isfinite(v)] >= v[np.isfinite(v)] * (1 - 1e-12)).all()
        assert (got[np.isfinite(v) & (steps > k)] > v[np.isfinite(v) & (steps > k)]).any()


def test_backups_in_the_planner(req):
    """The planner's backups reach every stage's field (the control's octile field too) and
    are recorded beside the work, not in it."""
    field, _ = _pit(req, depth=1000)  # a pit the descent cannot leave, filled by 40 backups
    assert direct(field, req).status == "no_path"
    assert direct(bellman_backups(field, req, backups=20), req).status == "no_path"
    n = 40
    swept = bellman_backups(field, req, backups=n)
    res = normalise_result(LearnedPlanner(lambda r: field, stages=[{"backups": n}, DESCENT]).plan(req))
    want = direct(swept, req)
    assert res.status == want.status == "ok" and np.array_equal(res.path, want.path)
    assert res.work["expansions"] == want.work["expansions"]
    assert res.resource_peaks["backup_cell_updates"] == n * field.size
    assert res.resource_peaks["backups_ms"] >= 0
    pf = normalise_result(LearnedPlanner("octile", stages=[{"backups": n}, DESCENT,
                                                           _astar(max_expansions=4096)]).plan(req))
    pf_want = direct(bellman_backups(octile_field(req), req, backups=n), req)
    if pf_want.status == "ok":
        assert pf.route_stage == "primary" and np.array_equal(pf.path, pf_want.path)
    else:
        assert pf.route_stage == "repair"
    plain = normalise_result(LearnedPlanner(lambda r: field, stages=[DESCENT]).plan(req))
    assert "backup_cell_updates" not in plain.resource_peaks
    for bad in (-1, 0.5, None, "8"):
        with pytest.raises(ValueError, match="backups"):
            make_planner(guide=_perfect, stages=[{"backups": bad}, DESCENT])
    assert make_planner(guide=_perfect, stages=[{"backups": 3}, _astar()]).backups == 3
