"""The route tie rule (docs/reference.md § Route extraction): a move whose total
``C[k, u] + V(u + MOVES[k])`` lies within ``TIE_RTOL * |best|`` of the cell's best total is
tied with it, and the tie goes to the earliest move in ``MOVES`` order — on every path
(NumPy, jnp float64, double-float pairs; one scene, a batch, chunked, lock step).

Checked on hand-made totals (exact ties, near-ties inside and outside the tolerance) and
on a scene whose optimal routes are many: float noise far below the tolerance, and a
field computed independently (SciPy's Dijkstra, another order of additions), give the
same route as the clean field; the strict comparison (``rtol=0``) is shown to differ
there, so the scene does exercise the rule.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from passage_jax.graph import MOVES, TIE_RTOL, descent_policy, edge_cost_field_np, move_index
from passage_jax.reference import scipy_graph, solve_batch
from passage_jax.reference.dfloat import df_descent_policy, split_float64

N = 20
START, GOAL = (2, 1), (17, 12)


def _policies(v, c):
    """(move, backup) of the three implementations of the rule on float64 ``v`` and ``c``."""
    out = {"numpy": descent_policy(v, c, np)}
    with jax.enable_x64(True):
        m, b = descent_policy(jnp.asarray(v), jnp.asarray(c))
        out["jnp_float64"] = (np.asarray(m), np.asarray(b))
    m, b = df_descent_policy(split_float64(v), split_float64(c))
    out["double_float"] = (np.asarray(m), np.asarray(b.hi, np.float64) + np.asarray(b.lo, np.float64))
    return out


def _one_cell(totals):
    """A 3x3 field whose centre's eight move totals are ``totals`` (V = 0 around it)."""
    v = np.zeros((3, 3))
    v[1, 1] = 1e9
    c = np.full((8, 3, 3), np.inf)
    c[:, 1, 1] = totals
    return v, c


@pytest.mark.parametrize("scale", [1.0, 1234.5678, 3.2e6])
def test_exact_and_near_ties_go_to_the_earliest_move(scale):
    k1, k2 = move_index(0, 1), move_index(1, 1)  # k1 < k2 in MOVES order
    base = np.full(8, 2.0 * scale)
    cases = {
        "exact tie": (1.0, 1.0, k1),
        "later move smaller by 0.1 tol": (1.0, 1.0 - 0.1 * TIE_RTOL, k1),
        "later move larger by 0.1 tol": (1.0, 1.0 + 0.1 * TIE_RTOL, k1),
        "later move smaller by 10 tol": (1.0, 1.0 - 10 * TIE_RTOL, k2),
        "earlier move larger by 10 tol": (1.0 + 10 * TIE_RTOL, 1.0, k2),
    }
    for name, (a, b, expected) in cases.items():
        totals = base.copy()
        totals[k1], totals[k2] = a * scale, b * scale
        v, c = _one_cell(totals)
        for path, (move, backup) in _policies(v, c).items():
            assert int(move[1, 1]) == expected, (name, path)
            assert backup[1, 1] == pytest.approx(min(a, b) * scale, rel=1e-14), (name, path)


def test_no_legal_move_and_nan_keep_their_rules():
    v, c = _one_cell(np.full(8, np.inf))
    for path, (move, backup) in _policies(v, c).items():
        assert int(move[1, 1]) == 0 and backup[1, 1] == np.inf, path
    totals = np.full(8, 5.0)
    totals[3] = np.nan
    v, c = _one_cell(totals)
    move, backup = descent_policy(v, c, np)
    assert int(move[1, 1]) == 3 and np.isnan(backup[1, 1])  # a NaN counts as the minimum


def _plateau(noise_m=0.0, seed=0):
    """A flat plateau (many equal-cost routes) with a hill and a pit at its corners that
    fix the crop's relief; ``noise_m`` metres of uniform noise on the plateau."""
    z = np.full((N, N), 800.0)
    z[-3:, :3] = 900.0
    z[:3, -3:] = 700.0
    plateau = np.ones((N, N), bool)
    plateau[-3:, :3] = plateau[:3, -3:] = False
    rng = np.random.default_rng(seed)
    z[plateau] += noise_m * rng.random(int(plateau.sum()))
    return z


def _route_np(v, c, rtol=TIE_RTOL):
    """The descent written out cell by cell in NumPy from a value field."""
    move, _ = descent_policy(v, c, np, rtol=rtol)
    u, route = START, [START]
    while u != GOAL:
        dr, dc = MOVES[int(move[u])].tolist()
        u = (u[0] + dr, u[1] + dc)
        route.append(u)
        assert len(route) <= N * N
    return np.asarray(route)


def _routes_by_path(z, model, weight):
    """The reference route of one scene by every solver path (a batch of two copies)."""
    zz, ob = np.stack([z, z]), np.zeros((2, N, N), bool)
    args = (zz, ob, [START] * 2, [GOAL] * 2, [model] * 2, [weight] * 2)
    out = {}
    for precision in ("float64", "double_float"):
        for chunk in (1, None):
            r = solve_batch(*args, routes=True, precision=precision, chunk=chunk, bucket=False)
            out[precision, chunk] = [np.asarray(x) for x in r.routes]
    one = solve_batch(z[None], ob[:1], [START], [GOAL], [model], [weight], routes=True)
    out["single"] = [np.asarray(one.routes[0])]
    return out


def _rule_route(z, model, weight, rtol=TIE_RTOL):
    """The rule's route on a field computed independently of the solver: SciPy's
    Dijkstra to the goal (its own order of additions), descended in NumPy."""
    c = edge_cost_field_np(z, np.zeros((N, N), bool), model, weight)
    idx = np.arange(N * N).reshape(N, N)
    v = sp_dijkstra(scipy_graph(c).T.tocsr(), directed=True, indices=int(idx[GOAL])).reshape(N, N)
    return _route_np(v, c, rtol)


# the noise (1e-10 m on the plateau) moves edge costs by ~2e-10 relative under the
# elevation and energy models: far below the tolerance's effect on a route, far above
# float64's resolution; slope_uphill charges only the climb, so the noise there does
# not reorder equal routes even under the strict comparison (not a useful case)
@pytest.mark.parametrize("model,weight", [("elevation", 62.4), ("energy", 62.4)])
def test_route_does_not_depend_on_float_noise(model, weight):
    expected = _rule_route(_plateau(), model, weight)
    noisy = _plateau(noise_m=1e-10, seed=3)
    np.testing.assert_array_equal(_rule_route(noisy, model, weight), expected)
    # the strict comparison follows the noise: the scene exercises the rule
    assert not np.array_equal(_rule_route(noisy, model, weight, rtol=0.0), expected)


def test_every_solver_path_gives_the_rule_route():
    """float64 and double-float, one at a time and in lock step, a batch and a single
    scene: the clean and the noisy plateau give the route of the independent field."""
    expected = _rule_route(_plateau(), "elevation", 62.4)
    for z in (_plateau(), _plateau(noise_m=1e-10, seed=3)):
        for path, routes in _routes_by_path(z, "elevation", 62.4).items():
            for r in routes:
                np.testing.assert_array_equal(r, expected, err_msg=str(path))
