"""Field diagnostics against SciPy and plain NumPy loops."""
import math

import jax
import numpy as np
import pytest
import scipy.ndimage
import scipy.sparse.csgraph

from passage_jax.graph import MOVES, edge_cost_field, edge_cost_field_np
from passage_jax.metrics import (
    bellman_residual,
    boundary_f_score,
    descent_direction_agreement,
    expansions_ratio,
    fallback_free_rate,
    neighbour_ranking_agreement,
    ssi_mae,
    start_goal_connected,
)
from passage_jax.metrics.fields import component_count
from passage_jax.reference.csgraph import scipy_graph
from passage_jax.testing import terrain_crop


@pytest.fixture(scope="module")
def field_scene():
    rng = np.random.default_rng(11)
    n = 24
    z, _ = terrain_crop(rng, n)
    obst = rng.random((n, n)) < 0.15
    goal = (3, 20)
    obst[goal] = False
    obst[15:20, 2:7] = True  # an enclosed pocket: (17, 4) cannot reach the goal
    obst[17, 4] = False
    cost = edge_cost_field_np(z, obst, "energy", 62.4)
    # exact cost-to-go: Dijkstra from the goal on the reversed graph
    v = scipy.sparse.csgraph.dijkstra(scipy_graph(cost).T.tocsr(), indices=goal[0] * n + goal[1])
    v = v.reshape(n, n)
    v[obst] = np.inf  # obstacle cells are never reached (moves into them are illegal)
    return z, obst, goal, cost, v


def np_backup(v, cost):
    h, w = v.shape
    out = np.full((h, w), np.inf)
    arg = np.zeros((h, w), int)
    for r in range(h):
        for c in range(w):
            best = np.inf
            for k, (dr, dc) in enumerate(MOVES):
                rr, cc = r + dr, c + dc
                if 0 <= rr < h and 0 <= cc < w:
                    q = cost[k, r, c] + v[rr, cc]
                    if q < best:
                        best, arg[r, c] = q, k
            out[r, c] = best
    return out, arg


def test_bellman_residual(field_scene):
    z, obst, goal, cost, vstar = field_scene
    reach = np.isfinite(vstar)
    assert 0.5 < reach.mean() < 1
    with jax.enable_x64(True):
        c = edge_cost_field(z, obst, "energy", 62.4)
        np.testing.assert_allclose(np.asarray(c), cost, rtol=1e-12)
        r0 = float(bellman_residual(np.where(reach, vstar, 0.0), c, goal, reach))
        assert r0 < 1e-12  # the exact field satisfies the Bellman equation
        noisy = np.where(reach, vstar * (1 + 0.05 * np.random.default_rng(0).random(vstar.shape)), 0)
        got = float(bellman_residual(noisy, c, goal, reach))
    backup, _ = np_backup(noisy, cost)
    cells = reach.copy()
    cells[goal] = False
    cells &= np.isfinite(backup)
    want = np.mean(np.abs(noisy - backup)[cells]) / np.mean(np.abs(noisy[reach]))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got > 1e-3


def test_descent_direction_agreement(field_scene):
    z, obst, goal, cost, vstar = field_scene
    reach = np.isfinite(vstar)
    v = np.where(reach, vstar, 1e9)
    noisy = v + np.random.default_rng(1).normal(0, 200.0, v.shape)
    with jax.enable_x64(True):
        c = edge_cost_field(z, obst, "energy", 62.4)
        assert float(descent_direction_agreement(v, v, c, goal, reach)) == 1.0
        got = float(descent_direction_agreement(noisy, v, c, goal, reach))
    _, a_pred = np_backup(noisy, cost)
    _, a_true = np_backup(v, cost)
    cells = reach.copy()
    cells[goal] = False
    np.testing.assert_allclose(got, np.mean((a_pred == a_true)[cells]), rtol=1e-12)
    assert 0 < got < 1


def test_ssi_mae():
    rng = np.random.default_rng(2)
    t = rng.random((16, 16)) * 100
    m = rng.random((16, 16)) < 0.8
    with jax.enable_x64(True):
        assert float(ssi_mae(0.3 * t - 7, t, m)) < 1e-10
        p = t + rng.normal(0, 5, t.shape)
        got = float(ssi_mae(p, t, m))
        const = float(ssi_mae(np.ones_like(t), t, m))
    (a, b), *_ = np.linalg.lstsq(np.c_[p[m], np.ones(m.sum())], t[m], rcond=None)
    np.testing.assert_allclose(got, np.mean(np.abs(a * p[m] + b - t[m])), rtol=1e-10)
    np.testing.assert_allclose(const, np.mean(np.abs(t[m] - t[m].mean())), rtol=1e-12)


def test_neighbour_ranking_agreement():
    rng = np.random.default_rng(3)
    t = rng.integers(0, 6, (12, 10)).astype(float)  # ties occur and are skipped
    p = t + rng.normal(0, 0.8, t.shape)
    m = rng.random(t.shape) < 0.85
    got = float(neighbour_ranking_agreement(p, t, m, margin=0.5))
    agree = count = 0
    h, w = t.shape
    for r in range(h):
        for c in range(w):
            for dr, dc in ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < h and 0 <= cc < w and m[r, c] and m[rr, cc] and abs(t[rr, cc] - t[r, c]) > 0.5:
                    count += 1
                    agree += np.sign(p[rr, cc] - p[r, c]) == np.sign(t[rr, cc] - t[r, c])
    np.testing.assert_allclose(got, agree / count, rtol=1e-6)  # each pair counted twice above
    assert float(neighbour_ranking_agreement(2 * t + 1, t, m)) == 1.0
    assert float(neighbour_ranking_agreement(-t, t, m)) == 0.0


@pytest.mark.parametrize("tol", [0, 1, 2, 2.5])
def test_boundary_f_score_vs_distance_transform(tol):
    rng = np.random.default_rng(4)
    gt = scipy.ndimage.binary_dilation(rng.random((20, 20)) < 0.03)
    gt = gt & ~scipy.ndimage.binary_erosion(gt)
    pred = np.roll(gt, 1, axis=1) | (rng.random((20, 20)) < 0.02)
    got = float(boundary_f_score(pred, gt, tol))
    d_gt = scipy.ndimage.distance_transform_edt(~gt)
    d_pr = scipy.ndimage.distance_transform_edt(~pred)
    p = np.sum(pred & (d_gt <= tol)) / pred.sum()
    r = np.sum(gt & (d_pr <= tol)) / gt.sum()
    want = 2 * p * r / (p + r) if p + r else 0.0
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_boundary_f_score_edge_cases():
    e = np.zeros((5, 5), bool)
    one = e.copy()
    one[2, 2] = True
    assert np.isnan(float(boundary_f_score(e, e, 1)))
    assert float(boundary_f_score(one, e, 1)) == 0.0
    assert float(boundary_f_score(one, one, 0)) == 1.0


@pytest.mark.parametrize("seed,p", [(0, 0.3), (1, 0.5), (2, 0.6)])
def test_component_count_vs_scipy_label(seed, p):
    rng = np.random.default_rng(seed)
    m = rng.random((33, 29)) < p
    lab, n = scipy.ndimage.label(m, structure=np.ones((3, 3)))
    cc = jax.jit(component_count)
    assert int(cc(m)) == n
    starts = np.argwhere(m)[rng.choice(m.sum(), 6)]
    sgc = jax.jit(start_goal_connected)
    for s, g in zip(starts[:3], starts[3:]):
        assert bool(sgc(m, s, g)) == (lab[tuple(s)] == lab[tuple(g)])
    off = np.argwhere(~m)[0]
    assert not bool(sgc(m, off, starts[0]))


def test_component_count_spiral():
    # a long snake needs many propagation steps; pointer jumping must still converge
    n = 31
    m = np.zeros((n, n), bool)
    m[::4, :] = True
    m[1::4, -1] = m[2::4, -1] = True
    m[3::4, 0] = True
    extra = m.copy()
    extra[-1, :] = False
    extra[-1, 5] = True
    for mask in (m, extra):
        assert int(component_count(mask)) == scipy.ndimage.label(mask, np.ones((3, 3)))[1]


def test_expansions_ratio_and_fallback_free_rate():
    rng = np.random.default_rng(5)
    p = rng.integers(1, 1000, 50).astype(float)
    a = rng.integers(0, 1000, 50).astype(float)
    a[:3] = 0
    with jax.enable_x64(True):
        got = jax.device_get(expansions_ratio(p, a))
        ok = a > 0
        r = p[ok] / a[ok]
        np.testing.assert_allclose(got["median"], np.median(r), rtol=1e-12)
        np.testing.assert_allclose(got["p90"], np.percentile(r, 90), rtol=1e-12)
        np.testing.assert_allclose(got["geomean"], math.exp(np.mean(np.log(r))), rtol=1e-12)
        assert np.isnan(got["per_task"][:3]).all()
        f = rng.random(40) < 0.3
        np.testing.assert_allclose(float(fallback_free_rate(f)), 1 - f.mean(), rtol=1e-12)
        assert np.isnan(float(fallback_free_rate(f[:0])))
