"""censored_cost: the seed's k_factor against a NumPy computation (jitted and eager)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from passage_jax.contract import CENSOR_FACTOR
from passage_jax.metrics import censored_cost


def numpy_censored(cost, valid, c_star, k):
    return np.where(valid, cost, k * c_star)


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("k", [None, 10.0, 2.5e3])
def test_censored_cost_matches_numpy(jit, k):
    rng = np.random.default_rng(3)
    n = 50
    c_star = rng.uniform(1.0, 500.0, n)
    c_star[[3, 7]] = [np.nan, np.inf]
    cost = c_star * rng.uniform(1.0, 1.5, n)
    valid = rng.random(n) < 0.6
    valid[3] = valid[7] = False
    kw = {} if k is None else {"k_factor": k}
    fn = jax.jit(censored_cost) if jit else censored_cost
    with jax.enable_x64(True):
        got = np.asarray(fn(cost, valid, c_star, **kw))
    ref = numpy_censored(cost, valid, c_star, CENSOR_FACTOR if k is None else k)
    np.testing.assert_allclose(got, ref, rtol=1e-15, equal_nan=True)
    # failures cost k * c*, successes keep their cost; non-finite c* stays non-finite
    assert not np.isfinite(got[[3, 7]]).any()
    assert np.all(got[valid] == cost[valid])


def test_default_keeps_contract_factor_and_bad_k_raises():
    with jax.enable_x64(True):
        got = np.asarray(censored_cost(np.array([5.0, 5.0]), np.array([True, False]),
                                       np.array([4.0, 4.0])))
    assert got.tolist() == [5.0, 4.0e6]
    for bad in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="k_factor"):
            censored_cost(np.ones(2), np.ones(2, bool), np.ones(2), k_factor=bad)
