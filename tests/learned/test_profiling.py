"""Timing helpers (bench/learned_profiling.py): structure and invariants only; no
test asserts how long anything takes."""
import math
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import GraphSpec
from passage_jax.learned.guide import NetworkGuide
from passage_jax.learned.model import N_FEATURES, ValueFieldNet
from passage_jax.learned.planner import LearnedPlanner
from passage_jax.protocol import PlanRequest
from passage_jax.testing import make_scene

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # a benchmark module
from learned_profiling import (  # noqa: E402
    BOUNDARIES,
    PrecomputedGuide,
    Timing,
    dtype_agreement,
    parameter_count,
    peak_memory_bytes,
    summarise,
    time_decoder,
    time_forward,
    time_guide,
    time_plan,
    timing_report,
    with_dtype,
)

N = 24
#: a descent with a guided A* repair (passage_jax.learned.stages)
REPAIR = [{"descent": {}}, {"guided_astar": {"max_expansions": 2000}}]


def _request(seed):
    scene, _ = make_scene(np.random.default_rng(seed), N, f"t{seed}")
    return PlanRequest(sample_id=scene.id, elevation=scene.elevation_m, obstacles=scene.obstacles,
                       start=scene.start, goal=scene.goal, cost_model="elevation", cost_weight=62.4,
                       graph=GraphSpec(cost_model="elevation", cost_weight=62.4))


@pytest.fixture(scope="module")
def requests():
    return [_request(s) for s in (1, 2)]


@pytest.fixture(scope="module")
def guide():
    module = ValueFieldNet(width=4, dilations=(1,))
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, N_FEATURES)))
    return NetworkGuide(module, params)


def test_summarise_known_answer():
    t = summarise("forward", "float32", [0.004, 0.001, 0.003, 0.002])
    assert isinstance(t, Timing)
    assert t.n == 4 and t.dtype == "float32" and t.boundary == BOUNDARIES["forward"]
    assert t.median_ms == pytest.approx(2.5)
    assert t.p90_ms == pytest.approx(3.7)  # linear: 3 + 0.7 * (4 - 3)
    assert t.to_dict()["median_ms"] == pytest.approx(2.5)
    with pytest.raises(ValueError, match="stage"):
        summarise("backward", None, [0.1])
    with pytest.raises(ValueError, match="seconds"):
        summarise("forward", None, [])
    with pytest.raises(ValueError, match="seconds"):
        summarise("forward", None, [math.nan])


def test_parameter_count_matches_a_hand_count(guide):
    # 3x3 conv C -> 4, one 3x3 residual conv 4 -> 4, a 1x1 head 4 -> 1 (each with a bias)
    want = (9 * N_FEATURES * 4 + 4) + (9 * 4 * 4 + 4) + (4 * 1 + 1)
    assert parameter_count(guide) == want
    assert parameter_count(guide.params) == want

    class Two(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(nn.Dense(5)(x))

    p = Two().init(jax.random.PRNGKey(1), jnp.zeros((1, 2)))
    assert parameter_count(p) == (2 * 5 + 5) + (5 * 3 + 3)
    assert parameter_count(lambda r: None) is None  # a plain callable guide has no parameters


def test_bfloat16_really_computes_in_bfloat16_and_stays_close(guide, requests):
    g16 = with_dtype(guide, "bfloat16")
    assert g16.dtype == "bfloat16" and g16.module.dtype == jnp.bfloat16
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree_util.tree_leaves(g16.params))
    g32 = with_dtype(guide, "float32")
    a, b = g32(requests[0]), g16(requests[0])
    free = np.isfinite(a) & (a > 0)
    assert np.array_equal(np.isfinite(a), np.isfinite(b))
    assert not np.array_equal(a[free], b[free])  # the cast changed the arithmetic
    np.testing.assert_allclose(b[free], a[free], rtol=0.05)
    ag = dtype_agreement(guide, requests, "bfloat16")
    assert ag["n_cells"] == sum(int((np.isfinite(g32(r)) & (g32(r) > 0)).sum()) for r in requests)
    assert 0 < ag["median_rel_diff"] <= ag["max_rel_diff"] < 0.05
    with pytest.raises(ValueError, match="dtype"):
        with_dtype(guide, "float16")
    with pytest.raises(TypeError, match="network guide"):
        with_dtype(lambda r: None, "float32")


def test_precomputed_guide_reproduces_the_plan(guide, requests):
    planner = LearnedPlanner(guide, stages=REPAIR)
    fixed = LearnedPlanner(PrecomputedGuide.from_guide(guide, requests), stages=REPAIR)
    for r in requests:
        a, b = planner.plan(r), fixed.plan(r)
        assert a.status == b.status and a.stage_work == b.stage_work
        assert (a.path is None) == (b.path is None)
        if a.path is not None:
            np.testing.assert_array_equal(a.path, b.path)
    with pytest.raises(KeyError, match="no precomputed field"):
        PrecomputedGuide([requests[0]], [guide(requests[0])])(requests[1])
    with pytest.raises(ValueError, match="shape"):
        PrecomputedGuide([requests[0]], [np.zeros((3, 3))])


def test_timings_have_the_declared_structure(guide, requests):
    planner = LearnedPlanner(guide)
    for t, stage, dtype in ((time_forward(guide, requests, dtype="bfloat16", repeats=2), "forward",
                             "bfloat16"),
                            (time_guide(guide, requests, repeats=2), "guide", "float32"),
                            (time_plan(planner, requests, repeats=2), "forward_decoder", "float32"),
                            (time_decoder(planner, requests, repeats=2), "decoder", "float32")):
        assert t.stage == stage and t.dtype == dtype and t.n == 2 * len(requests)
        assert 0 <= t.median_ms <= t.p90_ms < math.inf
    with pytest.raises(ValueError, match="repeats"):
        time_plan(planner, requests, repeats=0)
    with pytest.raises(ValueError, match="empty"):
        time_plan(planner, [], repeats=1)


def test_timing_report_lists_every_part(guide, requests):
    rep = timing_report(LearnedPlanner(guide), requests[:1], repeats=1, warmup=1)
    got = [(t["stage"], t["dtype"]) for t in rep["timings"]]
    assert got == [("forward", "float32"), ("guide", "float32"), ("forward_decoder", "float32"),
                   ("forward", "bfloat16"), ("guide", "bfloat16"), ("forward_decoder", "bfloat16"),
                   ("decoder", "float32")]
    assert rep["param_count"] == parameter_count(guide)
    assert [a["dtype"] for a in rep["agreement"]] == ["bfloat16"]
    assert rep["peak_memory_bytes"] == peak_memory_bytes()
    # a prediction-free planner has no guide: only the plan and the decoder are timed
    rep = timing_report(LearnedPlanner("octile", stages=REPAIR), requests[:1], repeats=1)
    assert [t["stage"] for t in rep["timings"]] == ["forward_decoder", "decoder"]
    assert rep["param_count"] is None


class _Device:
    def __init__(self, stats):
        self._stats = stats

    def memory_stats(self):
        return self._stats


def test_peak_memory_is_reported_or_none():
    assert peak_memory_bytes(_Device(None)) is None
    assert peak_memory_bytes(_Device({"bytes_in_use": 5})) is None
    assert peak_memory_bytes(_Device({"peak_bytes_in_use": 1234, "bytes_in_use": 5})) == 1234
    dev = jax.devices()[0]
    stats = dev.memory_stats()
    want = None if not stats or "peak_bytes_in_use" not in stats else int(stats["peak_bytes_in_use"])
    got = peak_memory_bytes(dev)
    assert (got is None) == (want is None)
    if got is not None:
        assert got >= want
