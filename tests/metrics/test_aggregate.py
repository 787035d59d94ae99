"""Primary aggregates (docs/contract.md §4), the training-loop accumulator and the shared
masked reducers (passage_jax.reduce) against NumPy."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.metrics import PathMetrics, primary_metrics, primary_metrics_jax
from passage_jax.reduce import masked_mean, masked_percentile, percentile_of_sorted


def synthetic_per_task(n, seed=0):
    rng = np.random.default_rng(seed)
    conn = rng.random(n) < 0.85
    trav = np.where(rng.random(n) < 0.2, rng.integers(1, 30, n), 0)
    viol = trav > 0
    ok = rng.random(n) < 0.95
    valid = conn & ~viol & ok
    reg = np.where(valid, rng.exponential(0.05, n), 999999.0)
    reg[valid & (rng.random(n) < 0.05)] = -1e-13  # sub-zero numerical noise
    assd = np.where(valid, rng.random(n) * 0.1, np.nan)
    h95 = np.where(valid, rng.random(n) * 5, np.nan)
    return {"connected_path": conn, "obstacle_traversals": trav, "obstacle_violation": viol,
            "valid_path": valid, "success": valid, "regret": reg, "assd": assd, "h95": h95,
            "path_iou": np.where(valid, rng.random(n), np.nan)}


def np_primary(pt, mask):
    r = pt["regret"][mask]
    r = r[~np.isnan(r)]
    v = pt["valid_path"][mask]
    viol = pt["obstacle_violation"][mask]
    g = np.exp(np.mean(np.log(1 + np.maximum(r, -1 + 1e-12)))) - 1
    return {
        "regret_median": np.median(r), "regret_p90": np.percentile(r, 90),
        "assd_mean": np.mean(pt["assd"][mask][v]), "h95_mean": np.mean(pt["h95"][mask][v]),
        "success_rate": np.mean(pt["success"][mask]),
        "obstacle_violation_rate": np.mean(viol),
        "n_tasks": int(mask.sum()), "n_path_valid": int(v.sum()),
        "connected_rate": np.mean(pt["connected_path"][mask]),
        "mean_traversals_given_violation": (np.mean(pt["obstacle_traversals"][mask][viol])
                                            if viol.any() else np.nan),
        "regret_summary": {"median": np.median(r), "p90": np.percentile(r, 90),
                           "p95": np.percentile(r, 95), "mean": np.mean(r), "geomean": g},
    }


def assert_close_dict(got, want, rtol=1e-12):
    for k, v in want.items():
        if isinstance(v, dict):
            assert_close_dict(got[k], v, rtol)
        else:
            np.testing.assert_allclose(float(got[k]), float(v), rtol=rtol, err_msg=k)


@pytest.mark.parametrize("n,seed", [(1, 0), (7, 1), (500, 2)])
def test_primary_metrics_match_numpy(n, seed):
    pt = synthetic_per_task(n, seed)
    if n == 1:
        pt["valid_path"][:] = pt["success"][:] = True
        pt["connected_path"][:] = True
        pt["obstacle_violation"][:] = False
        pt["obstacle_traversals"][:] = 0
        pt["assd"][:] = 0.1
        pt["h95"][:] = 1.0
        pt["regret"][:] = 0.2
    got = primary_metrics(pt)
    want = np_primary(pt, np.ones(n, bool))
    assert_close_dict(got, want)
    assert got["n_regret_undefined"] == 0


def test_primary_metrics_mask_and_nan_regret():
    pt = synthetic_per_task(300, 3)
    pt["regret"][:5] = np.nan  # c* <= 0
    mask = np.random.default_rng(0).random(300) < 0.7
    got = primary_metrics(pt, valid_mask=mask)
    assert_close_dict(got, np_primary(pt, mask))
    assert got["n_regret_undefined"] == int(mask[:5].sum())
    # the jitted reducer on padded arrays: padding rows hold garbage and are masked out
    padded = {k: np.concatenate([v[mask], v[:50]]) for k, v in pt.items()}
    pmask = np.r_[np.ones(mask.sum(), bool), np.zeros(50, bool)]
    with jax.enable_x64(True):
        res = jax.device_get(primary_metrics_jax(padded, pmask))
    assert_close_dict(res, np_primary(pt, mask))


def test_primary_metrics_empty_and_bad_input():
    pt = {k: v[:0] for k, v in synthetic_per_task(3).items()}
    got = primary_metrics(pt)
    assert got["n_tasks"] == 0 and np.isnan(got["success_rate"]) and np.isnan(got["regret_median"])
    with pytest.raises(ValueError, match="valid_mask"):
        primary_metrics(synthetic_per_task(4), valid_mask=np.ones(3, bool))
    bad = synthetic_per_task(4)
    del bad["assd"]
    with pytest.raises(ValueError, match="assd"):
        primary_metrics(bad)


def _batches(pt, size):
    n = len(pt["regret"])
    for s in range(0, n, size):
        part = {k: v[s:s + size] for k, v in pt.items()}
        m = np.ones(len(part["regret"]), bool)
        pad = size - len(m)
        if pad:
            part = {k: np.concatenate([v, pt[k][:pad]]) for k, v in part.items()}  # garbage rows
            m = np.r_[m, np.zeros(pad, bool)]
        yield part, m


def test_accumulator_across_jitted_steps_matches_host():
    pt = synthetic_per_task(203, 4)
    want = np_primary(pt, np.ones(203, bool))

    @jax.jit
    def step(acc, batch, mask):
        return acc.update(batch, mask)

    with jax.enable_x64(True):
        acc = PathMetrics.empty(capacity=256, dtype=jnp.float64)
        for batch, m in _batches(pt, 32):
            acc = step(acc, batch, m)
        got = jax.device_get(jax.jit(PathMetrics.compute)(acc))
    assert bool(got["regret_quantiles_exact"])
    assert_close_dict(got, want, rtol=1e-11)


def test_accumulator_merge_and_from_batch():
    pt = synthetic_per_task(120, 5)
    with jax.enable_x64(True):
        a = PathMetrics.from_batch({k: v[:50] for k, v in pt.items()}, capacity=128)
        b = PathMetrics.from_batch({k: v[50:] for k, v in pt.items()}, capacity=128)
        got = jax.device_get(a.merge(b).compute())
        got_ba = jax.device_get(b.merge(a).compute())
    want = np_primary(pt, np.ones(120, bool))
    assert_close_dict(got, want, rtol=1e-11)
    assert_close_dict(got_ba, want, rtol=1e-11)


def test_accumulator_overflow_reports_no_quantiles():
    pt = synthetic_per_task(100, 6)
    with jax.enable_x64(True):
        acc = PathMetrics.empty(capacity=64, dtype=jnp.float64)
        for batch, m in _batches(pt, 40):
            acc = acc.update(batch, m)
        got = jax.device_get(acc.compute())
    assert not bool(got["regret_quantiles_exact"])
    assert np.isnan(got["regret_median"]) and np.isnan(got["regret_summary"]["p95"])
    want = np_primary(pt, np.ones(100, bool))
    # sums and counts stay exact
    for k in ("success_rate", "assd_mean", "h95_mean", "mean_traversals_given_violation"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-11)
    np.testing.assert_allclose(got["regret_summary"]["geomean"], want["regret_summary"]["geomean"],
                               rtol=1e-11)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_reducers_equal_numpy(jit):
    """NumPy's default linear percentile and the mean of a masked selection
    (ties, n = 1 and an empty mask included): exactly when run eagerly, to an
    ulp or two when jitted (XLA may fuse the interpolation's multiply-add)."""
    rng = np.random.default_rng(9)
    pct = jax.jit(masked_percentile) if jit else masked_percentile
    srt = jax.jit(percentile_of_sorted, static_argnames=("value",)) if jit else percentile_of_sorted
    mean = jax.jit(masked_mean) if jit else masked_mean
    with jax.enable_x64(True):
        for n, ties in ((1, False), (2, False), (37, False), (200, True)):
            x = rng.normal(size=n) * 10
            if ties:
                x = np.round(x)
            mask = rng.random(n) < 0.7
            mask[0] = True
            for q in (0.0, 5.0, 50.0, 90.0, 95.0, 100.0, 33.3):
                want = np.percentile(x[mask], q)
                xs = np.sort(np.where(mask, x, np.inf))
                for got in (float(pct(x, mask, q)), float(srt(xs, int(mask.sum()), q))):
                    if jit:
                        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-14)
                    else:
                        assert got == want, (n, q)
            assert float(mean(x, mask)) == pytest.approx(np.mean(x[mask]), rel=1e-15)
        # a monotone map applied to the two order statistics only
        d2 = np.sort(rng.integers(0, 50, 40))
        got = percentile_of_sorted(d2, 40, 95.0, lambda v: jnp.sqrt(v.astype(jnp.float64)))
        assert float(got) == np.percentile(np.sqrt(d2.astype(np.float64)), 95)
        empty = np.zeros(5, bool)
        assert np.isnan(float(pct(np.arange(5.0), empty, 50.0)))
        assert np.isnan(float(mean(np.arange(5.0), empty)))
