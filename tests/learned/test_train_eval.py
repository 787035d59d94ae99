"""The training log's validation metrics come from ``evaluate_batch`` (the batch planner
and the metric kernels in one compiled call): they equal the accumulator path the log
used before on the same routes (greedy descent on the network's field, scored by
``score_tasks`` and folded into ``PathMetrics``), and every logged entry carries them."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import edge_cost_field_by_index
from passage_jax.learned.model import log_ratio_to_cost
from passage_jax.learned.train import (
    PIXEL_SIZE_M,
    TrainConfig,
    _features,
    _materials,
    _octile,
    eval_set,
    evaluate_params,
    greedy_decode,
    train,
)
from passage_jax.metrics import PathMetrics, Route, TaskArrays, score_tasks

TINY = dict(name="tiny", resolution=16, n_train=8, n_eval=6, steps=20, batch=4, learning_rate=1e-2,
            warmup_steps=1, width=4, dilations=(1, 2), eval_every=10, seed=11)


@pytest.fixture(scope="module")
def trained():
    config = TrainConfig(**TINY)
    result = train(config)
    _, eval_m = _materials(config, None)
    return result, eval_m


def _accumulated(module, params, m, max_length):
    """The former evaluation: greedy descent, score_tasks on float32 TaskArrays, PathMetrics."""
    z = jnp.asarray(m.elevation, jnp.float32)
    ob, goal, start = jnp.asarray(m.obstacles), jnp.asarray(m.goal), jnp.asarray(m.start)
    midx, w = jnp.asarray(m.model_index), jnp.asarray(m.weight, jnp.float32)
    u = module.apply(params, _features(z, ob, goal, midx, w))
    h = jnp.where(ob, jnp.inf, log_ratio_to_cost(u, _octile(goal, z.shape[1:]), PIXEL_SIZE_M))
    c = jax.vmap(lambda a, b, k, x: edge_cost_field_by_index(a, b, k, x, PIXEL_SIZE_M))(z, ob, midx, w)
    routes, lengths = jax.vmap(lambda a, b, s, g: greedy_decode(a, b, s, g, max_length))(h, c, start, goal)
    tasks = TaskArrays(elevation=z, obstacles=ob, start=start, goal=goal, cost_model=midx, weight=w,
                       c_star=jnp.asarray(m.c_star, jnp.float32))
    refs = Route(jnp.asarray(m.routes), jnp.asarray(m.route_length))
    per = score_tasks(Route(routes, lengths), refs, tasks)
    return jax.device_get(PathMetrics.empty(64).update(per).compute())


def test_logged_metrics_equal_the_accumulator_on_the_same_routes(trained):
    result, m = trained
    n = np.asarray(m.elevation).shape[-1]
    got = evaluate_params(result.module, result.params, eval_set(m))
    want = _accumulated(result.module, result.params, m, 4 * n)
    for k in ("success_rate", "regret_median", "regret_p90", "obstacle_violation_rate", "n_tasks",
              "n_path_valid"):
        assert float(got[k]) == pytest.approx(float(want[k]), rel=1e-6, abs=1e-7, nan_ok=True), k
    for k in ("assd_mean", "h95_mean"):
        assert float(got[k]) == pytest.approx(float(want[k]), rel=1e-5, nan_ok=True), k
    assert got["n_tasks"] == TINY["n_eval"]


def test_every_evaluation_is_logged(trained):
    result, _ = trained
    steps = [e["step"] for e in result.history]
    assert steps == [0, 10, 20]
    for e in result.history:
        assert 0.0 <= e["success_rate"] <= 1.0 and "regret_median" in e and "regret_p90" in e
