"""The learned planner as a batch planner (passage_jax.learned.batched, ``LearnedPlanner.plan_batch``):
per scene the batch-one planner's route and status, cell for cell. Checked against ``plan`` on
the shipped 256x256 cohort (all 24 tasks, the three shipped value256ft checkpoints, batches of 1,
8, 16 with padding, the network on whole batches, a batch placed over several devices), on 64x64
tasks mixing the cost models and variants (the 64x64 network and the octile guide), against the
batch-one pieces one at a time (network output at any batch size, the field, the edge costs of
every cost model, the backed-up field) and against the Python descent ``direct`` on hand-made
and random fields with hand-worked answers (escape taken, escapes spent, stuck, no unvisited
neighbour, step limit, ties); planners whose stages cannot be batched have no plan_batch, and
the runner refuses them; a batched run scores what a batch-one run of the same planner scores;
the shipped configs/learned256_direct_batched.yaml is learned256_direct under batched_v1."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.data import load_scenes, load_tasks, shipped_cohort_root
from passage_jax.graph import OBJECTIVES, VARIANTS, GraphSpec, edge_cost_field_np, route_problem
from passage_jax.graph.costs import MODEL_NAMES
from passage_jax.learned.batched import (
    batch_fields,
    descend,
    edge_costs,
    network_field,
    network_forward,
    octile_scales,
    plan_batch_kernel,
)
from passage_jax.learned.decoders import bellman_backups, direct, octile_scale, request_cost_field
from passage_jax.learned.guide import SHIPPED_DIR
from passage_jax.learned.model import features
from passage_jax.learned.planner import LearnedPlanner, guide_from_flax, make_planner
from passage_jax.precision import NO_X64_ENV, kernel_x64
from passage_jax.protocol import BudgetSpec, PlanRequest, build_request
from passage_jax.protocol.batch import BATCH_STATUS_CODE, batch_of, plan_batch_of, scene_routes
from passage_jax.run.record import vector_isa

REPO = Path(__file__).resolve().parents[2]
SEEDS = (1234, 2026, 3407)
DIRECT = [{"backups": 32}, {"descent": {"max_escapes": 4}}]  # configs/learned256_direct.yaml
#: the (cost model, variant) pairs a released task can have
COMBOS = [(o, v) for v in VARIANTS for o in OBJECTIVES]

needs_checkpoints = pytest.mark.skipif(
    not all((SHIPPED_DIR / f"value256ft-{s}.json").is_file() for s in SEEDS),
    reason=f"the shipped value256ft checkpoints are not in {SHIPPED_DIR}")
pytestmark = pytest.mark.needs_float64("the batched routes equal the batch-one float64 descent's")


# --------------------------------------------------------------------------- helpers

def _same(result, entry) -> bool:
    """Whether a batch-one PlanResult and a scene_routes entry give one status and route."""
    status, route, problem = entry
    if problem is not None or result.status != status:
        return False
    if result.path is None or route is None:
        return result.path is None and route is None
    return np.array_equal(np.asarray(result.path, np.int32), route)


def _batched(planner, tasks, size, **kernel):
    """Every task's scene_routes entry, ``size`` tasks a batch (the last padded)."""
    out = []
    for lo in range(0, len(tasks), size):
        chunk = tasks[lo:lo + size]
        batch = batch_of(chunk, size)
        if kernel:
            with kernel_x64():
                routes = plan_batch_kernel(None if planner.octile else planner.guide.params, batch,
                                           config=dataclasses.replace(planner.batch_config(), **kernel))
        else:
            routes = planner.plan_batch(batch)
        out += scene_routes(jax.device_get(routes), len(chunk))
    return out


def _differing(planner, tasks, requests, size, **kernel) -> list[int]:
    one = [planner.plan(r) for r in requests]
    return [i for i, (r, e) in enumerate(zip(one, _batched(planner, tasks, size, **kernel)))
            if not _same(r, e)]


@pytest.fixture(scope="module")
def cohort256():
    tasks = load_tasks(shipped_cohort_root(), 256, "test", "elevation", "obstacles", n_samples=24)
    assert len(tasks) == 24
    return tasks, [build_request(t, include_tensor=False) for t in tasks]


@pytest.fixture(scope="module")
def planners256():
    return {seed: make_planner(guide="learned", checkpoint=f"shipped:value256ft-{seed}", stages=DIRECT)
            for seed in SEEDS}


@pytest.fixture(scope="module")
def mixed64():
    """12 tasks of the shipped 64x64 test split cycling the released cost models and variants."""
    scenes = load_scenes(shipped_cohort_root(), 64, "test", n_samples=12)
    tasks = [s.task(*COMBOS[i % len(COMBOS)]) for i, s in enumerate(scenes)]
    return tasks, [build_request(t, include_tensor=False) for t in tasks]


# --------------------------------------------------------------------------- the shipped 256x256 cohort

@needs_checkpoints
@pytest.mark.parametrize("seed", SEEDS)
def test_plan_batch_gives_plans_routes_on_the_shipped_cohort(seed, cohort256, planners256):
    """All 24 tasks, batches of 1, 8 and 16 (the second one half padding), and the network on
    the whole batch of 24 at once instead of scene by scene: every route and status is plan's."""
    tasks, requests = cohort256
    planner = planners256[seed]
    one = [planner.plan(r) for r in requests]
    assert sum(r.status == "ok" for r in one) >= 18  # routes to compare, and failures too
    assert {r.status for r in one} == {"ok", "no_path"}
    for size in (1, 8, 16):
        got = _batched(planner, tasks, size)
        assert [i for i, (r, e) in enumerate(zip(one, got)) if not _same(r, e)] == [], size
    whole = _batched(planner, tasks, 24, per_scene=False)
    assert [i for i, (r, e) in enumerate(zip(one, whole)) if not _same(r, e)] == []


@needs_checkpoints
def test_a_batch_split_over_devices_gives_the_same_routes(cohort256, planners256):
    """A batch placed along its batch axis over several devices (as the batched procedure
    places it where the process has several) is planned on each device for its own rows: the
    routes of a single device, and they come back split over the same devices."""
    devices = jax.devices()
    if len(devices) < 2 or 8 % len(devices):
        pytest.skip("needs several devices dividing 8 (tests/conftest.py gives the CPU four)")
    tasks, requests = cohort256
    planner = planners256[SEEDS[0]]
    mesh = jax.sharding.Mesh(np.asarray(devices), ("batch",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
    with kernel_x64():
        placed = jax.device_put(batch_of(tasks[:8], 8), sharding)
    routes = planner.plan_batch(placed)
    assert routes.cells.sharding.device_set == set(devices)
    assert [s.device for s in routes.length.addressable_shards] == list(devices)
    got = scene_routes(jax.device_get(routes), 8)
    assert all(_same(planner.plan(r), e) for r, e in zip(requests[:8], got))


@needs_checkpoints
def test_the_network_output_does_not_depend_on_the_batch_size(cohort256, planners256):
    """Bit for bit on an AVX-512 CPU. On an AVX2 CPU XLA runs another convolution kernel
    for a batch than for one scene, and the whole batch's output differs in its last bits
    (within float32 rounding, checked); there the per-scene path, the CPU's default, runs
    the network at batch 1, as the batch-one planner does (docs/learned.md)."""
    tasks, requests = cohort256
    x = np.stack([features(r) for r in requests])
    for planner in planners256.values():
        alone = np.stack([np.asarray(planner.guide.apply_batch(x[i:i + 1])[0]) for i in range(24)])
        for got in (np.asarray(planner.guide.apply_batch(x)), np.asarray(planner.guide.apply_batch(x[:8]))):
            if vector_isa() == "avx512":
                assert np.array_equal(alone[:len(got)], got)
            else:
                np.testing.assert_allclose(got, alone[:len(got)], rtol=2e-6, atol=1e-7)


@needs_checkpoints
def test_the_field_and_the_backed_up_field_are_the_batch_one_planners(cohort256, planners256):
    """Bit for bit: the network field (NumPy's exp, the host octile table) against the
    guide's, and the field after 32 backups with the edge costs against bellman_backups' on
    edge_cost_field_np's."""
    tasks, requests = cohort256
    planner = planners256[SEEDS[1]]
    batch = batch_of(tasks, 24)
    config = planner.batch_config()
    with kernel_x64():
        out = network_forward(planner.guide.params, batch, config=config)
        field = np.asarray(jax.jit(lambda o, b: network_field(o, b, "log_ratio", np.float64))(out, batch))
        backed, costs = (np.asarray(a) for a in batch_fields(planner.guide.params, batch, config=config))
    for i, r in enumerate(requests):
        guided = planner.guide(r)
        assert np.array_equal(field[i], guided), i
        cf = request_cost_field(r)
        assert np.array_equal(costs[i], cf), i
        assert np.array_equal(backed[i], bellman_backups(guided, r, backups=32, cost_field=cf)), i


def _grids(rng, n=24, size=32):
    """Hand-made elevation grids: shipped-like terrain, a flat crop (range 0), negative
    heights, a tilted plane, with obstacles."""
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            z = rng.normal(0, 40, (size, size)).cumsum(0).cumsum(1) / 10 + 500
        elif kind == 1:
            z = np.full((size, size), 123.25)
        elif kind == 2:
            z = rng.uniform(-300, -10, (size, size))
        else:
            z = np.add.outer(np.arange(size) * 3.7, np.arange(size) * -1.3)
        out.append((z, rng.random((size, size)) < 0.1 * (i % 3)))
    return out


def test_the_edge_costs_are_numpys_for_every_cost_model():
    """edge_costs in float64 against edge_cost_field_np (and octile_scale), bit for bit, every
    model of the registry (a batch mixing them), weights including 0, flat crops, negative
    heights, obstacles and the shipped terrain."""
    rng = np.random.default_rng(7)
    grids = _grids(rng)
    scenes = load_scenes(shipped_cohort_root(), 256, "test", n_samples=2)
    big = [(s.elevation_m, s.obstacles) for s in scenes]
    for cases in (grids, big):
        z = np.stack([c[0] for c in cases])
        ob = np.stack([c[1] for c in cases])
        models = np.arange(len(cases), dtype=np.int32) % len(MODEL_NAMES)
        weights = np.asarray([(0.0, 62.4, 10.0, 3.3)[i % 4] for i in range(len(cases))])
        with kernel_x64():
            got = np.asarray(jax.jit(lambda *a: edge_costs(*a, 30.0))(z, ob, models, weights))
            scale = np.asarray(jax.jit(lambda c: octile_scales(c, 30.0))(got))
        assert got.dtype == scale.dtype == np.float64
        for i in range(len(cases)):
            want = edge_cost_field_np(z[i], ob[i], MODEL_NAMES[models[i]], weights[i], 30.0)
            assert np.array_equal(got[i], want), (i, MODEL_NAMES[models[i]])
            assert scale[i] == octile_scale(want, 30.0)


# --------------------------------------------------------------------------- 64x64: cost models, guides

@pytest.mark.parametrize("guide, stages", [
    ("learned", [{"backups": 8}, {"descent": {"max_escapes": 4}}]),
    ("learned", [{"descent": {"max_escapes": None, "max_steps": 40}}]),
    ("learned", [{"descent": {}}]),
    ("octile", [{"backups": 16}, {"descent": {"max_escapes": 2}}]),
    ("octile", [{"descent": {"max_escapes": None}}]),
])
def test_plan_batch_on_mixed_cost_models_and_variants(guide, stages, mixed64):
    """The 64x64 network (ValueFieldNet) and the octile guide on batches mixing the released
    cost models and both variants (batches of 5: the last one padded)."""
    if guide == "learned" and not (SHIPPED_DIR / "value64-1234.json").is_file():
        pytest.skip("the shipped value64 checkpoint is not there")
    tasks, requests = mixed64
    kw = {"checkpoint": "shipped:1234"} if guide == "learned" else {}
    planner = make_planner(guide=guide, stages=stages, **kw)
    assert _differing(planner, tasks, requests, 5) == []


class _OctileNet(nn.Module):
    """A network that reads the cost-to-go off its inputs: 1.1 x the octile channel in
    metres, plus 40 m per unit of the mean slope channel (no parameters to train)."""

    @nn.compact
    def __call__(self, x):
        bias = self.param("bias", nn.initializers.zeros, ())
        return (x[..., 4] * 64.0 * 30.0 * 1.1 + 40.0 * x[..., 5] + bias).astype(jnp.float32)


def test_plan_batch_with_a_guide_that_predicts_the_cost_to_go(mixed64):
    """A NetworkGuide of one's own module with the default inputs and output="cost_to_go"."""
    tasks, requests = mixed64
    module = _OctileNet()
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 64, 64, 7)))
    guide = guide_from_flax(module, params, features, output="cost_to_go")
    planner = LearnedPlanner(guide, stages=[{"backups": 2}, {"descent": {"max_escapes": 8}}])
    assert planner.batch_refusal is None
    assert _differing(planner, tasks, requests, 4) == []
    assert sum(planner.plan(r).status == "ok" for r in requests) >= 6


# --------------------------------------------------------------------------- the descent

def _request(z, obstacles, start, goal, model="distance", weight=0.0):
    return PlanRequest(sample_id="hand", elevation=np.asarray(z, np.float64),
                       obstacles=np.asarray(obstacles, bool), start=start, goal=goal, cost_model=model,
                       cost_weight=weight, graph=GraphSpec(cost_model=model, cost_weight=weight),
                       budget=BudgetSpec())


def _descend(cases, **limits):
    """descend() on hand-made (request, field) cases in one batch (one live=False row at
    the end): each case's (status, route)."""
    fields = np.stack([f for _, f in cases] + [cases[0][1]])
    costs = np.stack([request_cost_field(r) for r, _ in cases] + [request_cost_field(cases[0][0])])
    start = np.asarray([r.start for r, _ in cases] + [cases[0][0].start], np.int32)
    goal = np.asarray([r.goal for r, _ in cases] + [cases[0][0].goal], np.int32)
    live = np.asarray([True] * len(cases) + [False])
    with kernel_x64():
        out = jax.device_get(jax.jit(lambda *a: descend(*a, **limits))(fields, costs, start, goal, live))
    got = scene_routes(out, len(cases) + 1)
    assert got[-1][:2] == ("no_path", None)  # the padding row is not walked
    return [(s, r) for s, r, _ in got[:-1]]


def _check_against_direct(cases, got, **limits):
    for (req, field), (status, route) in zip(cases, got):
        want = direct(field, req, **limits)
        assert status == want.status
        if want.path is None:
            assert route is None
        else:
            assert np.array_equal(route, want.path)


#: a corridor along row 1 of a 3x7 grid (rows 0 and 2 blocked), start (1, 0), goal (1, 6)
CORRIDOR = np.zeros((3, 7), bool)
CORRIDOR[[0, 2]] = True


def _corridor(values):
    f = np.full((3, 7), 500.0)
    f[1] = values
    return f


def test_descent_on_hand_made_fields():
    """Hand-worked answers (distance costs: 30 m a straight step, 42.43 m a diagonal one),
    the same as direct's."""
    flat = np.zeros((3, 7))
    req = _request(flat, CORRIDOR, (1, 0), (1, 6))
    row = [(1, c) for c in range(7)]
    ties = np.full((3, 7), 50.0)
    ties[0, 1] = ties[1, 0] = 0.0
    cases = {
        "exact": (req, _corridor([180, 150, 120, 90, 60, 30, 0])),
        # (1, 2) prefers (1, 1), visited: one escape to (1, 3)
        "pit": (req, _corridor([100, 10, 50, 40, 30, 20, 0])),
        # (1, 2), (1, 3) and (1, 4) each prefer the cell behind: three escapes
        "three_pits": (req, _corridor([100, 10, 50, 20, 60, 30, 0])),
        # no finite value ahead: stuck at the start
        "stuck": (req, _corridor([100, np.inf, 50, 40, 30, 20, 0])),
        # (1, 0) pulls the walk back from (1, 1); the only neighbour of (1, 0) is visited
        "dead_end": (_request(flat, CORRIDOR, (1, 1), (1, 6)), _corridor([0, 50, 60, 30, 20, 10, 0])),
        "at_goal": (_request(flat, CORRIDOR, (1, 6), (1, 6)), _corridor([180, 150, 120, 90, 60, 30, 0])),
        # no obstacles: from (1, 1) up (-1, 0) and left (0, -1) tie at 30 + 0; the first of
        # MOVES, up, wins; from (0, 1) the diagonal to the goal (1, 0)
        "ties": (_request(flat, np.zeros((3, 7), bool), (1, 1), (1, 0)), ties),
    }
    names = list(cases)
    for limits, want in [
        ({"max_escapes": 0}, {"exact": ("ok", row), "pit": ("no_path", None), "three_pits": ("no_path", None),
                              "stuck": ("no_path", None), "dead_end": ("no_path", None),
                              "at_goal": ("ok", [(1, 6)]), "ties": ("ok", [(1, 1), (0, 1), (1, 0)])}),
        ({"max_escapes": 1}, {"pit": ("ok", row), "three_pits": ("no_path", None),
                              "dead_end": ("no_path", None)}),
        ({"max_escapes": 3}, {"pit": ("ok", row), "three_pits": ("ok", row)}),
        ({"max_escapes": None}, {"pit": ("ok", row), "three_pits": ("ok", row), "dead_end": ("no_path", None),
                                 "stuck": ("no_path", None)}),
        ({"max_escapes": 4, "max_steps": 5}, {"exact": ("budget_exhausted", None),
                                              "pit": ("budget_exhausted", None),
                                              "at_goal": ("ok", [(1, 6)])}),
        ({"max_escapes": 4, "max_steps": 6}, {"exact": ("ok", row), "pit": ("ok", row),
                                              "three_pits": ("ok", row)}),
    ]:
        got = dict(zip(names, _descend([cases[n] for n in names], **limits)))
        for name, (status, route) in want.items():
            assert got[name][0] == status, (limits, name)
            if route is None:
                assert got[name][1] is None, (limits, name)
            else:
                assert got[name][1].tolist() == [list(c) for c in route], (limits, name)
        _check_against_direct([cases[n] for n in names], [got[n] for n in names], **limits)


@pytest.mark.parametrize("limits", [{"max_escapes": 0}, {"max_escapes": 3}, {"max_escapes": None},
                                    {"max_escapes": 2, "max_steps": 12}])
def test_descent_on_random_fields_is_directs(limits):
    """Random terrain, obstacles and fields (noisy cost-to-go with pits, +inf cells, exact
    ties on integer-valued fields) on 12x12 grids under the elevation and slope models:
    every status and route is direct's."""
    rng = np.random.default_rng(11)
    cases = []
    for i in range(48):
        z = rng.normal(0, 5, (12, 12)).cumsum(0)
        ob = rng.random((12, 12)) < 0.15
        free = np.argwhere(~ob)
        s, g = (tuple(int(v) for v in free[j]) for j in rng.choice(len(free), 2, replace=False))
        model, w = (("elevation", 62.4), ("slope_uphill", 10.0), ("distance", 0.0))[i % 3]
        req = _request(z, ob, s, g, model, w)
        dist = np.hypot(*(np.indices((12, 12)) - np.asarray(g)[:, None, None])) * 30.0
        if i % 4 == 0:
            field = np.round(dist / 30.0) * 30.0  # integer-valued: exact ties
        else:
            field = dist * rng.uniform(0.5, 1.5, dist.shape)
        field[rng.random(field.shape) < 0.05] = np.inf
        field[g] = 0.0
        cases.append((req, field))
    got = _descend(cases, **limits)
    _check_against_direct(cases, got, **limits)
    statuses = {s for s, _ in got}
    assert "ok" in statuses and "no_path" in statuses


# --------------------------------------------------------------------------- which planners batch

@pytest.mark.parametrize("kwargs, why", [
    ({"stages": [{"descent": {"accept_ratio": 1.4}}]}, "not accept_ratio"),
    ({"stages": [{"backups": 4}, {"descent": {"refine_radius": 2}}]}, "not refine_radius"),
    ({"stages": [{"descent": {}}, {"guided_astar": {"max_expansions": 100}}]}, "no guided A"),
    ({"stages": [{"guided_astar": {}}]}, "no guided A"),
    ({"stages": [{"descent": {}}, {"exact": {}}]}, "no guided A\\* or exact stage"),
    ({"checkpoint": "shipped:1234", "tile": 32, "stages": [{"descent": {}}]}, "is tiled"),
])
def test_planners_whose_stages_cannot_be_batched_have_no_plan_batch(kwargs, why):
    planner = make_planner(guide=kwargs.pop("guide", "learned" if "checkpoint" in kwargs else "octile"),
                           **kwargs)
    assert not hasattr(planner, "plan_batch") and plan_batch_of(planner) is None
    assert planner.batch_refusal is not None
    with pytest.raises(AttributeError, match=f"learned planner has no plan_batch: .*{why}"):
        planner.plan_batch  # noqa: B018
    with pytest.raises(ValueError, match=why):
        planner.batch_config()


def test_a_callable_guide_has_no_plan_batch():
    planner = LearnedPlanner(lambda request: np.zeros(request.shape), stages=[{"descent": {}}])
    assert plan_batch_of(planner) is None
    assert "a batch needs a NetworkGuide" in planner.batch_refusal
    assert callable(plan_batch_of(make_planner(guide="octile", stages=[{"descent": {}}])))


def test_plan_batch_checks_the_batch(mixed64):
    tasks, _ = mixed64
    planner = make_planner(guide="octile", stages=[{"descent": {}}])
    batch = batch_of(tasks[:2], 2)
    with pytest.raises(ValueError, match=r"PlanBatch.elevation must be float64 metres, got float32"):
        planner.plan_batch(dataclasses.replace(batch, elevation=batch.elevation.astype(np.float32)))
    with pytest.raises(ValueError, match=r"PlanBatch.goal must have shape \(2, 2\)"):
        planner.plan_batch(dataclasses.replace(batch, goal=batch.goal[:1]))


def test_without_float64_plan_batch_gives_legal_routes(mixed64, monkeypatch):
    """PASSAGE_JAX_NO_X64=1: float32 kernels; the routes are legal (and may differ from plan's)."""
    tasks, requests = mixed64
    monkeypatch.setenv(NO_X64_ENV, "1")
    planner = make_planner(guide="octile", stages=[{"backups": 4}, {"descent": {"max_escapes": 2}}])
    got = _batched(planner, tasks, 6)
    assert any(s == "ok" for s, _, _ in got)
    for t, (status, route, problem) in zip(tasks, got):
        assert problem is None and status in BATCH_STATUS_CODE
        if status == "ok":
            assert route_problem(route, t.scene.start, t.scene.goal, t.obstacles) is None


# --------------------------------------------------------------------------- the runner, the shipped spec

def _spec(**over) -> dict:
    d = {"method_name": "learned_batched", "inference": "passage_jax.learned.planner:make_planner",
         "inference_kwargs": {"guide": "learned", "checkpoint": "shipped:1234",
                              "stages": [{"backups": 8}, {"descent": {"max_escapes": 4}}]},
         "resolution": 64, "cost_model": "elevation", "split": "test", "task_variant": "obstacles",
         "n_samples": 10, "seeds": [1234], "dataset_path": "shipped", "timing_profile": "batched_v1",
         "batch_size": 4, "batch_warmup": 1}
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


def test_a_batched_run_scores_what_the_batch_one_run_scores(tmp_path):
    """The learned planner under batched_v1 (batches of 4, split over the tests' four
    devices; the last one half padding) and under the batch-one session profile: the same
    routes, statuses and quality."""
    from passage_jax.evaluate import score_run
    from passage_jax.evaluate.score import load_score
    from passage_jax.protocol.records import read_requests
    from passage_jax.run import parse_spec, run_spec

    runs = {"batched": tmp_path / "batched", "one": tmp_path / "one"}
    run_spec(parse_spec(_spec()), runs["batched"], progress=False)
    run_spec(parse_spec(_spec(timing_profile="native_raw_path_persistent_v1", batch_size=None,
                              batch_warmup=None, session_warmup=1)), runs["one"], progress=False)
    for folder in runs.values():
        score_run(folder)
    recs = {k: read_requests(v / "seed-1234" / "requests.jsonl") for k, v in runs.items()}
    assert [r["status"] for r in recs["batched"]] == [r["status"] for r in recs["one"]]
    assert [r["route_cost"] for r in recs["batched"]] == [r["route_cost"] for r in recs["one"]]
    assert {r["status"] for r in recs["batched"]} >= {"ok"}
    a, b = (np.load(v / "seed-1234" / "paths.npz") for v in runs.values())
    assert np.array_equal(a["coords"], b["coords"]) and np.array_equal(a["offsets"], b["offsets"])
    scores = {k: load_score(v / "seed-1234").metrics for k, v in runs.items()}
    assert scores["batched"]["primary"] == scores["one"]["primary"]


def test_the_runner_refuses_a_learned_planner_that_cannot_batch(tmp_path):
    from passage_jax.run import parse_spec, run_spec
    from passage_jax.run.errors import RunError

    kwargs = {"guide": "learned", "checkpoint": "shipped:1234",
              "stages": [{"descent": {}}, {"guided_astar": {"max_expansions": 64}}]}
    with pytest.raises(RunError, match="the planner has no plan_batch, so it cannot run under "
                                       "timing_profile batched_v1"):
        run_spec(parse_spec(_spec(inference_kwargs=kwargs)), tmp_path / "r", progress=False)


def test_the_shipped_batched_spec_is_the_direct_spec_under_batched_v1():
    from passage_jax.run import load_spec

    batched = load_spec(REPO / "configs" / "learned256_direct_batched.yaml")
    direct_spec = load_spec(REPO / "configs" / "learned256_direct.yaml")
    assert batched.batched and (batched.batch_size, batched.batch_warmup) == (64, 2)
    assert batched.timing_profile == "batched_v1" and batched.method_name == "learned256_direct_batched"
    a, b = batched.to_dict(), direct_spec.to_dict()
    timing = {"method_name", "results_root", "timing_profile", "batch_size", "batch_warmup",
              "latency_warmup", "worker_warmup", "warmup_scene"}
    assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
    for seed in SEEDS:
        assert batched.kwargs_for_seed(seed) == direct_spec.kwargs_for_seed(seed)
    # it quotes the hash of the calibration decisions it was frozen with, as learned256_direct
    import json

    from passage_jax.run.loop import canonical_json_sha256
    cal = json.loads((REPO / "configs" / "learned256_calibration.json").read_text())
    quoted = f"canonical-JSON sha256 {canonical_json_sha256(cal)}"
    for name in ("learned256_direct", "learned256_direct_batched"):
        assert quoted in (REPO / "configs" / f"{name}.yaml").read_text()
    if (SHIPPED_DIR / "value256ft-1234.json").is_file():
        assert callable(plan_batch_of(make_planner(**batched.kwargs_for_seed(1234))))


def test_a_route_through_every_free_cell_and_the_step_limit():
    """A serpentine corridor whose route visits every free cell (16 steps; the field falls
    10 a step, so no diagonal cuts a corner): ok with no max_steps (H*W) and with 16,
    budget_exhausted with 15, as direct."""
    h, w = 5, 5
    ob = np.zeros((h, w), bool)
    ob[1, :4] = True
    ob[3, 1:] = True
    order = [(0, c) for c in range(5)] + [(1, 4)] + [(2, c) for c in range(4, -1, -1)] + \
        [(3, 0)] + [(4, c) for c in range(5)]
    assert len(order) == len(set(order)) == int((~ob).sum()) == 17
    field = np.full((h, w), np.inf)
    for i, cell in enumerate(order):
        field[cell] = (len(order) - 1 - i) * 10.0
    req = _request(np.zeros((h, w)), ob, order[0], order[-1])
    for limits, status in [({}, "ok"), ({"max_steps": 16}, "ok"), ({"max_steps": 15}, "budget_exhausted")]:
        got = _descend([(req, field)], max_escapes=0, **limits)
        assert got[0][0] == status
        if status == "ok":
            assert got[0][1].tolist() == [list(c) for c in order]
        _check_against_direct([(req, field)], got, max_escapes=0, **limits)
