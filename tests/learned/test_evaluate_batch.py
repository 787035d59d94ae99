"""``evaluate_batch``: a batch planner and the metric kernels in one compiled call. Its
primary metrics equal ``score``'s on the same routes (a batched run of the exact planner,
scored by the runner's own path), inside a jitted optax training step too; padding and
truncation are counted as documented."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from passage_jax.data import load_tasks, shipped_cohort_root
from passage_jax.evaluate import score_run
from passage_jax.evaluate.score import load_score
from passage_jax.learned.evaluate_batch import evaluate_batch, evaluation_cohort
from passage_jax.planners.exact import batch_planner_fn
from passage_jax.precision import kernel_x64
from passage_jax.protocol.records import unpack_routes
from passage_jax.run import parse_spec, run_spec

N = 10


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A batched run of the exact planner on N shipped 64x64 tasks, scored."""
    out = tmp_path_factory.mktemp("eb") / "run"
    spec = {"method_name": "exact_batched", "inference": "passage_jax.planners.exact:make_planner",
            "resolution": 64, "cost_model": "energy", "split": "test", "task_variant": "obstacles",
            "n_samples": N, "seeds": [1234], "dataset_path": "shipped",
            "timing_profile": "batched_v1", "batch_size": 4}
    run_spec(parse_spec(spec), out, progress=False)
    score_run(out)
    seed = out / "seed-1234"
    refs = np.load(seed / "references.npz")
    tasks = load_tasks(shipped_cohort_root(), 64, "test", "energy", "obstacles", n_samples=N)
    assert [t.id for t in tasks] == [str(s) for s in refs["sample_id"]]
    return {"tasks": tasks, "c_star": refs["c_star"], "qualified": refs["qualified"],
            "routes": unpack_routes(refs["route_coords"], refs["route_offsets"]),
            "metrics": load_score(seed).metrics}


def _cohort(run, **kw):
    return evaluation_cohort(run["tasks"], run["c_star"], run["routes"], run["qualified"], **kw)


def _evaluate(cohort, **kw):
    fn = batch_planner_fn()
    with kernel_x64():
        return jax.device_get(jax.jit(lambda c: evaluate_batch(fn, None, c, **kw))(cohort))


KEYS = ("regret_median", "regret_p90", "assd_mean", "h95_mean", "success_rate",
        "obstacle_violation_rate")


def test_metrics_equal_the_scores_of_the_same_routes(run):
    got = _evaluate(_cohort(run))
    want = run["metrics"]
    assert int(got["n_truncated"]) == 0 and int(got["n_tasks"]) == want["n_tasks"] == N
    assert int(got["n_path_valid"]) == want["n_path_valid"]
    for k in KEYS:
        assert float(got[k]) == pytest.approx(want["primary"][k], rel=1e-9, abs=1e-12), k
    assert float(got["connected_rate"]) == pytest.approx(want["connected_rate"], rel=1e-12)


def test_padding_rows_do_not_count(run):
    a = _evaluate(_cohort(run))
    b = _evaluate(_cohort(run, batch_size=16))  # six padding rows
    assert int(b["n_tasks"]) == N
    for k in KEYS:
        assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-12, abs=1e-15), k


def test_a_route_longer_than_the_cap_is_counted_and_fails(run):
    lengths = np.array([len(r) for r in run["routes"]])
    cap = int(np.sort(lengths)[N // 2])  # exact routes: about half are longer
    got = _evaluate(_cohort(run), max_route_len=cap)
    # the exact planner's routes are the references' here (same field, same descent)
    longer = int(np.sum(lengths > cap))
    assert longer > 0 and int(got["n_truncated"]) == longer
    assert float(got["success_rate"]) == pytest.approx((N - longer) / N)


def test_inside_a_jitted_training_step(run):
    """An optax step that updates its parameters and evaluates the cohort in one compiled
    call: the parameters move, and the metrics are the scores'."""
    cohort = _cohort(run)
    fn = batch_planner_fn()
    tx = optax.sgd(0.1)
    params = {"w": jnp.zeros(3)}

    @jax.jit
    def step(params, opt_state, cohort):
        loss, grads = jax.value_and_grad(lambda p: jnp.sum((p["w"] - 1.0) ** 2))(params)
        updates, opt_state = tx.update(grads, opt_state)
        metrics = evaluate_batch(fn, params, cohort)
        return optax.apply_updates(params, updates), opt_state, loss, metrics

    with kernel_x64():
        params2, _, loss, metrics = step(params, tx.init(params), cohort)
    assert float(loss) == pytest.approx(3.0)
    np.testing.assert_allclose(np.asarray(params2["w"]), 0.2)
    for k in KEYS:
        assert float(metrics[k]) == pytest.approx(run["metrics"]["primary"][k], rel=1e-9, abs=1e-12)
