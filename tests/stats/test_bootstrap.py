import numpy as np
import pytest

from passage_jax.stats.bootstrap import encode_blocks, paired_bootstrap, seed_mean_bootstrap
from passage_jax.stats.draws import MultiplicityStream, multiplicity_matrix, resample_draws
from passage_jax.testing import kernel_tol

RTOL = kernel_tol(1e-12)


def materialise(x, block_index, mrow):
    """The resample for one draw: every task of block k repeated mrow[k] times."""
    idx = np.concatenate([np.repeat(np.flatnonzero(block_index == k), c) for k, c in enumerate(mrow)]
                         + [np.zeros(0, int)])
    return x[idx]


def naive_reduce(r, q):
    r = r[np.isfinite(r)]
    if r.size == 0:
        return np.nan
    return np.mean(r) if q is None else np.percentile(r, 100 * q) if q in (0.5, 0.9) else np.quantile(r, q)


def naive_draws(x, block_index, mult, q):
    return np.array([naive_reduce(materialise(x, block_index, m), q) for m in mult])


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=kernel_tol(1e-13), equal_nan=True)


def test_multiplicity_rows_sum_to_blocks_and_stream_is_chunk_invariant():
    full = multiplicity_matrix(7, 50, seed=3)
    assert full.shape == (50, 7) and (full.sum(1) == 7).all() and full.min() >= 0
    s = MultiplicityStream(7, 3)
    np.testing.assert_array_equal(np.concatenate([s.next(13), s.next(1), s.next(36)]), full)


@pytest.mark.parametrize("segment", ["auto", None, 32])
@pytest.mark.parametrize("use_blocks", [True, False])
def test_kernel_matches_materialised_resample(segment, use_blocks):
    rng = np.random.default_rng(11)
    n = 300
    x = np.round(rng.gamma(2.0, size=n), 2)  # ties on purpose
    x[rng.random(n) < 0.05] = 999999.0
    y = rng.normal(size=n)
    y[rng.random(n) < 0.3] = np.nan          # omitted subset
    if use_blocks:
        bi, labels = encode_blocks([f"b{k}" for k in rng.integers(0, 9, n)], n)
        K = len(labels)
    else:
        bi, K = np.arange(n, dtype=np.int32), n
    D = 40
    mult = multiplicity_matrix(K, D, seed=5)
    qs = (0.5, 0.9, 0.0, 1.0, 0.37)
    md, qd = resample_draws(bi, K, [x, y], [x, y], qs, D, mult=mult, chunk=7, segment=segment)
    for j, v in enumerate([x, y]):
        close(md[:, j], naive_draws(v, bi, mult, None))
        for t, q in enumerate(qs):
            close(qd[:, j, t], naive_draws(v, bi, mult, q))
    # the seeded stream gives the same draws as the explicit matrix
    md2, qd2 = resample_draws(bi, K, [x, y], [x, y], qs, D, seed=5, segment=segment)
    close(md2, md)
    close(qd2, qd)


def test_two_level_path_is_used_and_exact_on_larger_roster():
    rng = np.random.default_rng(2)
    n, K = 6000, 20
    bi = rng.integers(0, K, n).astype(np.int32)
    x = rng.lognormal(size=n)
    mult = multiplicity_matrix(K, 12, seed=9)
    from passage_jax.stats.draws import _segment_for
    assert _segment_for(n, K, 4) is not None
    _, qd = resample_draws(bi, K, [], [x], (0.5, 0.9), 12, mult=mult)
    for t, q in enumerate((0.5, 0.9)):
        close(qd[:, 0, t], naive_draws(x, bi, mult, q))


@pytest.mark.parametrize("stat, q", [("mean", None), ("median", 0.5), ("p90", 0.9)])
@pytest.mark.parametrize("with_blocks", [True, False])
def test_paired_bootstrap_against_naive(stat, q, with_blocks):
    rng = np.random.default_rng(4)
    n = 120
    a = rng.normal(1.0, size=n)
    b = rng.normal(0.7, size=n)
    labels = [f"t{k}" for k in rng.integers(0, 6, n)] if with_blocks else None
    bi, lab = encode_blocks(labels, n)
    K = n if lab is None else len(lab)
    res = paired_bootstrap(a, b, stat, blocks=labels, n_bootstrap=60, seed=21, return_draws=True)
    mult = multiplicity_matrix(K, 60, seed=21)
    ref = naive_draws(a, bi, mult, q) - naive_draws(b, bi, mult, q)
    close(res.draws, ref)
    lo, hi = np.quantile(ref, [0.025, 0.975])
    assert res.ci_available
    tol = kernel_tol(1e-12)
    assert res.ci_low == pytest.approx(lo, rel=tol) and res.ci_high == pytest.approx(hi, rel=tol)
    est = (np.mean(a) - np.mean(b)) if q is None else np.quantile(a, q) - np.quantile(b, q)
    assert res.delta == pytest.approx(est, rel=kernel_tol(1e-12))


def test_omit_nan_and_unavailable_interval():
    # block "x" holds the only finite value of a; a draw without block x empties a's subset
    a = np.array([1.0, np.nan, np.nan, np.nan])
    b = np.array([0.5, 0.1, 0.2, 0.3])
    blocks = ["x", "y", "y", "z"]
    with pytest.raises(ValueError, match="task 1 is nan"):
        paired_bootstrap(a, b, blocks=blocks, n_bootstrap=10)
    res = paired_bootstrap(a, b, "median", blocks=blocks, n_bootstrap=200, seed=0,
                           nan_policy="omit", return_draws=True)
    assert res.n_a == 1 and res.n_b == 4 and res.delta == pytest.approx(1.0 - 0.25)
    assert not res.ci_available and np.isnan(res.ci_low) and res.n_undefined_draws > 0
    assert res.draws.shape == (200,)  # no draw dropped
    bi, lab = encode_blocks(blocks, 4)
    mult = multiplicity_matrix(3, 200, seed=0)
    ref = naive_draws(a, bi, mult, 0.5) - naive_draws(b, bi, mult, 0.5)
    close(res.draws, ref)
    assert res.n_undefined_draws == int(np.isnan(ref).sum()) == int((mult[:, 0] == 0).sum())


def test_seed_mean_shares_draws_across_seeds():
    rng = np.random.default_rng(8)
    n = 90
    seeds = (1234, 2026, 3407)
    A = {s: rng.gamma(2, size=n) for s in seeds}
    B = {s: rng.gamma(2.2, size=n) for s in seeds}
    A[2026][:5] = np.nan
    blocks = [f"g{k}" for k in rng.integers(0, 7, n)]
    res = seed_mean_bootstrap(A, B, "p90", blocks=blocks, n_bootstrap=50, seed=3, nan_policy="omit",
                              return_draws=True)
    bi, lab = encode_blocks(blocks, n)
    mult = multiplicity_matrix(len(lab), 50, seed=3)
    per = [naive_draws(A[s], bi, mult, 0.9) - naive_draws(B[s], bi, mult, 0.9) for s in seeds]
    close(res.draws, np.mean(per, axis=0))
    for s, p in zip(seeds, per):
        close(res.per_seed[s].draws, p)
    est = np.mean([np.nanquantile(A[s], 0.9) - np.quantile(B[s], 0.9) for s in seeds])
    assert res.delta == pytest.approx(est, rel=kernel_tol(1e-12))
    assert res.per_seed[2026].n_a == n - 5 and res.n_a == 3 * n - 5
    with pytest.raises(ValueError, match="seeds"):
        seed_mean_bootstrap({1234: A[1234]}, B, blocks=blocks)


def test_bad_inputs():
    with pytest.raises(ValueError, match="statistic"):
        paired_bootstrap([1.0, 2.0], [1.0, 2.0], "mode")
    with pytest.raises(ValueError, match="b: 1 tasks, expected 2"):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="task 1 has no block"):
        paired_bootstrap([1.0, 2.0], [1.0, 2.0], blocks=["a", None])
    with pytest.raises(ValueError, match="alpha"):
        paired_bootstrap([1.0, 2.0], [1.0, 2.0], alpha=1.5)


def trimmed_mean(x):
    """A statistic the string forms do not offer: mean without the smallest and largest value."""
    s = np.sort(x)
    return float(np.mean(s[1:-1])) if s.size > 2 else float(np.mean(s))


@pytest.mark.parametrize("with_blocks", [True, False])
def test_callable_statistic_against_materialised_numpy(with_blocks):
    rng = np.random.default_rng(31)
    n = 80
    a = rng.gamma(2.0, size=n)
    b = rng.gamma(2.3, size=n)
    labels = [f"t{k}" for k in rng.integers(0, 7, n)] if with_blocks else None
    bi, lab = encode_blocks(labels, n)
    K = n if lab is None else len(lab)
    D = 40
    res = paired_bootstrap(a, b, trimmed_mean, blocks=labels, n_bootstrap=D, seed=13,
                           return_draws=True)
    mult = multiplicity_matrix(K, D, seed=13)
    ref = np.array([trimmed_mean(materialise(a, bi, m)) - trimmed_mean(materialise(b, bi, m))
                    for m in mult])
    close(res.draws, ref)
    lo, hi = np.quantile(ref, [0.025, 0.975])
    assert res.ci_available and res.ci_low == pytest.approx(lo, rel=kernel_tol(1e-12))
    assert res.ci_high == pytest.approx(hi, rel=kernel_tol(1e-12))
    assert res.delta == pytest.approx(trimmed_mean(a) - trimmed_mean(b), rel=kernel_tol(1e-12))
    assert res.statistic == "callable(trimmed_mean)" and res.n_a == n and res.n_b == n


@pytest.mark.parametrize("fn, name", [(np.median, "median"), (np.mean, "mean")])
def test_callable_numpy_reductions_equal_the_string_statistics(fn, name):
    rng = np.random.default_rng(5)
    n = 150
    a, b = rng.normal(size=n), rng.normal(0.2, size=n)
    blocks = [f"g{k}" for k in rng.integers(0, 9, n)]
    fast = paired_bootstrap(a, b, name, blocks=blocks, n_bootstrap=70, seed=2, return_draws=True)
    slow = paired_bootstrap(a, b, fn, blocks=blocks, n_bootstrap=70, seed=2, return_draws=True)
    close(slow.draws, fast.draws)
    assert slow.ci_low == pytest.approx(fast.ci_low, rel=kernel_tol(1e-12))
    assert slow.ci_high == pytest.approx(fast.ci_high, rel=kernel_tol(1e-12))
    assert slow.delta == pytest.approx(fast.delta, rel=kernel_tol(1e-12))


def test_callable_statistic_omit_keeps_undefined_draws():
    a = np.array([1.0, np.nan, np.nan, np.nan])
    b = np.array([0.5, 0.1, 0.2, 0.3])
    blocks = ["x", "y", "y", "z"]
    res = paired_bootstrap(a, b, np.max, blocks=blocks, n_bootstrap=120, seed=4, nan_policy="omit",
                           return_draws=True)
    mult = multiplicity_matrix(3, 120, seed=4)
    assert res.draws.shape == (120,) and not res.ci_available
    assert res.n_undefined_draws == int((mult[:, 0] == 0).sum()) > 0
    defined = mult[:, 0] > 0
    bi, _ = encode_blocks(blocks, 4)
    ref = np.array([1.0 - np.max(materialise(b, bi, m)) for m in mult[defined]])
    close(res.draws[defined], ref)
    assert res.delta == pytest.approx(1.0 - 0.5)
    with pytest.raises(ValueError, match="must return a scalar"):
        paired_bootstrap(b, b, lambda x: x[:2], n_bootstrap=3)
    with pytest.raises(ValueError, match="task 1 is nan"):
        paired_bootstrap(a, b, np.max, blocks=blocks, n_bootstrap=3)
