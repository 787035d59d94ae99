"""Cost models, legality masks and recosting against hand arithmetic on a 3x3 grid
and an independent plain-Python loop (docs/contract.md §2)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import (
    DIAGONAL,
    MODEL_INDEX,
    MOVES,
    STEP_PIXELS,
    bellman_backup,
    cell_mask,
    descent_policy,
    edge_cost_field,
    edge_cost_field_batched,
    edge_cost_field_np,
    legal_move_mask,
    move_index,
    move_values,
    neighbours,
    route_cost,
    route_length_pixels,
    route_step_costs,
    shift,
)

INF = math.inf
C = 30.0                   # cardinal step, metres
D = 30.0 * math.sqrt(2.0)  # diagonal step, 42.42640687119285...

# z in metres; crop min 0, crop range 100, max |z| 100
Z = np.array([[0.0, 10.0, 20.0],
              [30.0, 40.0, 50.0],
              [60.0, 70.0, 100.0]])
W = 2.0

# From the centre (1, 1), z = 40, the 8 moves in the fixed order reach
#   k: (-1,-1) (-1,0) (-1,1) (0,-1) (0,1) (1,-1) (1,0) (1,1)
#   z:    0     10     20     30     50    60     70    100
#   dz:  -40   -30    -20    -10    +10   +20    +30   +60
#   d:    D     C      D      C      C     D      C     D
CENTRE = {
    "distance": [D, C, D, C, C, D, C, D],
    # d + 2 |dz| / 100
    "elevation": [D + 0.8, C + 0.6, D + 0.4, C + 0.2, C + 0.2, D + 0.4, C + 0.6, D + 1.2],
    # d + 2 |z_v| / 100
    "absolute_elevation": [D + 0.0, C + 0.2, D + 0.4, C + 0.6, C + 1.0, D + 1.2, C + 1.4, D + 2.0],
    # d (1 + 2 max(dz/d, 0)^2) = d + 2 dz^2 / d uphill, d downhill:
    #   k4: 30 + 2*100/30 = 36.666..., k5: D + 800/D, k6: 30 + 2*900/30 = 90, k7: D + 7200/D
    "slope_uphill": [D, C, D, C, 30.0 + 200.0 / 30.0, D + 800.0 / D, 90.0, D + 7200.0 / D],
    # d + 2 max(dz, 0) / 100
    "energy": [D, C, D, C, C + 0.2, D + 0.4, C + 0.6, D + 1.2],
}


def _fields(z, obstacles, model, w):
    """The NumPy field, the JAX float64 field and the JAX float32 field."""
    a = edge_cost_field_np(z, obstacles, model, w)
    with jax.enable_x64(True):
        b = np.asarray(edge_cost_field(jnp.asarray(z, jnp.float64), jnp.asarray(obstacles),
                                       model, jnp.float64(w)))
        assert b.dtype == np.float64
    c = np.asarray(edge_cost_field(jnp.asarray(z, jnp.float32), jnp.asarray(obstacles), model,
                                   jnp.float32(w)))
    assert c.dtype == np.float32
    return a, b, c


@pytest.mark.parametrize("model", sorted(CENTRE))
def test_centre_costs_by_hand(model):
    obst = np.zeros((3, 3), bool)
    for f, rtol in zip(_fields(Z, obst, model, W), (1e-12, 1e-12, 1e-6)):
        np.testing.assert_allclose(f[:, 1, 1], CENTRE[model], rtol=rtol)


def test_corner_cell_costs_by_hand():
    # from (0, 0), z = 0: only (0,1) [k4, dz=10], (1,0) [k6, dz=30], (1,1) [k7, dz=40] exist
    f = edge_cost_field_np(Z, np.zeros((3, 3), bool), "energy", W)
    want = [INF, INF, INF, INF, C + 0.2, INF, C + 0.6, D + 0.8]
    np.testing.assert_allclose(f[:, 0, 0], want, rtol=1e-12)
    f = edge_cost_field_np(Z, np.zeros((3, 3), bool), "slope_uphill", W)
    want = [INF, INF, INF, INF, 30.0 + 200.0 / 30.0, INF, 90.0, D + 2 * 1600.0 / D]
    np.testing.assert_allclose(f[:, 0, 0], want, rtol=1e-12)


@pytest.mark.parametrize("model,k,forward,backward", [
    # (1,1) -> (2,2) by k7 (dz = +60) and back (2,2) -> (1,1) by k0 (dz = -60)
    ("slope_uphill", 7, D + 7200.0 / D, D),
    ("energy", 7, D + 1.2, D),
    # (1,1) -> (1,2) by k4 (dz = +10), back by k3
    ("slope_uphill", 4, 30.0 + 200.0 / 30.0, C),
    ("energy", 4, C + 0.2, C),
])
def test_uphill_models_are_asymmetric(model, k, forward, backward):
    f = edge_cost_field_np(Z, np.zeros((3, 3), bool), model, W)
    dr, dc = MOVES[k]
    back = 7 - k  # MOVES is symmetric about its middle: MOVES[7 - k] = -MOVES[k]
    assert tuple(MOVES[back]) == (-dr, -dc)
    assert f[k, 1, 1] == pytest.approx(forward, rel=1e-12)
    assert f[back, 1 + dr, 1 + dc] == pytest.approx(backward, rel=1e-12)
    assert forward > backward


def test_elevation_model_is_symmetric():
    f = edge_cost_field_np(Z, np.zeros((3, 3), bool), "elevation", W)
    assert f[7, 1, 1] == f[0, 2, 2] == pytest.approx(D + 1.2, rel=1e-12)


@pytest.mark.parametrize("level", [7.0, 0.0, -12.5])
def test_flat_crop_rule(level):
    z = np.full((3, 3), level)
    obst = np.zeros((3, 3), bool)
    d = [D, C, D, C, C, D, C, D]
    for model in ("distance", "elevation", "energy", "slope_uphill"):
        for f in _fields(z, obst, model, W)[:2]:
            np.testing.assert_array_equal(f[:, 1, 1], d)  # normalised terms are exactly 0
    # absolute elevation normalises by max |z|, which is only zero on a crop at sea level
    want = d if level == 0.0 else [x + W for x in d]  # |z_v| / max|z| = 1
    for f in _fields(z, obst, "absolute_elevation", W)[:2]:
        np.testing.assert_allclose(f[:, 1, 1], want, rtol=1e-12)
        assert np.isfinite(f[:, 1, 1]).all()


def test_crop_stats_include_obstacle_cells():
    # the 100 m cell is an obstacle but still sets the crop range
    obst = np.zeros((3, 3), bool)
    obst[2, 2] = True
    f = edge_cost_field_np(Z, obst, "elevation", W)
    assert f[4, 1, 1] == pytest.approx(C + 0.2, rel=1e-12)  # 2*10/100, not 2*10/70
    assert f[7, 1, 1] == INF


def test_legal_move_mask_and_corner_squeeze():
    # obstacles at (0,1) and (1,0) touch at a corner between (0,0) and (1,1)
    obst = np.zeros((3, 3), bool)
    obst[0, 1] = obst[1, 0] = True
    m = legal_move_mask(obst)
    assert m.shape == (8, 3, 3) and m.dtype == bool
    # from (0,0): right and down are blocked, the diagonal squeeze to (1,1) is legal
    assert m[:, 0, 0].tolist() == [False, False, False, False, False, False, False, True]
    # and back from (1,1) to (0,0)
    assert m[0, 1, 1]
    # from (1,1): the two obstacle cells are illegal, the other six legal
    assert m[:, 1, 1].tolist() == [True, False, True, False, True, True, True, True]
    # from (2,2): up-left, up, left in bounds; nothing else
    assert m[:, 2, 2].tolist() == [True, True, False, True, False, False, False, False]
    # independent count: a move is legal iff the destination is in bounds and free
    want = np.zeros((8, 3, 3), bool)
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        for r in range(3):
            for c in range(3):
                rr, cc = r + dr, c + dc
                want[k, r, c] = 0 <= rr < 3 and 0 <= cc < 3 and not obst[rr, cc]
    np.testing.assert_array_equal(m, want)
    np.testing.assert_array_equal(np.asarray(legal_move_mask(jnp.asarray(obst), jnp)), want)
    f = edge_cost_field_np(Z, obst, "distance", 0.0)
    np.testing.assert_array_equal(np.isfinite(f), want)


def test_batched_field_mixes_models():
    zs = np.stack([Z, Z[::-1], np.full((3, 3), 5.0)])
    obst = np.zeros((3, 3, 3), bool)
    obst[1, 0, 0] = True
    models = ["slope_uphill", "energy", "elevation"]
    ws = [W, 3.0, 1.0]
    with jax.enable_x64(True):
        got = np.asarray(edge_cost_field_batched(
            jnp.asarray(zs), jnp.asarray(obst),
            jnp.asarray([MODEL_INDEX[m] for m in models]), jnp.asarray(ws)))
    for i in range(3):
        np.testing.assert_allclose(got[i], edge_cost_field_np(zs[i], obst[i], models[i], ws[i]),
                                   rtol=1e-12)
    np.testing.assert_allclose(got[0][:, 1, 1], CENTRE["slope_uphill"], rtol=1e-12)


def _plain_cost(route, z, model, w, px=30.0):
    """Independent plain-Python route cost, accumulated start to goal."""
    flat = [v for row in z for v in row]
    zmin, zmax = min(flat), max(flat)
    rng, mabs = zmax - zmin, max(abs(v) for v in flat)
    total = 0.0
    for (r0, c0), (r1, c1) in zip(route[:-1], route[1:]):
        d = px * (math.sqrt(2.0) if (r0 != r1 and c0 != c1) else 1.0)
        dz = z[r1][c1] - z[r0][c0]
        if model == "distance":
            step = d
        elif model == "elevation":
            step = d + (w * abs(dz) / rng if rng > 0 else 0.0)
        elif model == "absolute_elevation":
            step = d + (w * abs(z[r1][c1]) / mabs if mabs > 0 else 0.0)
        elif model == "slope_uphill":
            g = max(dz / d, 0.0)
            step = d * (1.0 + w * g * g)
        elif model == "energy":
            step = d + (w * max(dz, 0.0) / rng if rng > 0 else 0.0)
        total += step
    return total


def _random_walk(rng, n, length):
    moves = MOVES.tolist()
    r, c = int(rng.integers(n)), int(rng.integers(n))
    out = [(r, c)]
    while len(out) < length:
        dr, dc = moves[int(rng.integers(8))]
        if 0 <= r + dr < n and 0 <= c + dc < n:
            r, c = r + dr, c + dc
            out.append((r, c))
    return out


@pytest.mark.parametrize("model", sorted(CENTRE))
def test_route_cost_matches_plain_loop(model):
    rng = np.random.default_rng(11)
    z = rng.uniform(-50.0, 900.0, (12, 12))
    for _trial in range(5):
        route = _random_walk(rng, 12, 40)
        w = float(rng.uniform(0.5, 70.0))
        got = route_cost(np.array(route), z, model, w)
        want = _plain_cost(route, z.tolist(), model, w)
        assert got == pytest.approx(want, rel=1e-12)
        steps = route_step_costs(np.array(route), z, model, w)
        assert steps.shape == (39,) and (steps >= 30.0 - 1e-12).all()  # at least the step length


def test_route_cost_on_3x3_by_hand():
    # (0,0) -> (1,1) -> (2,2) -> (2,1): energy, w = 2
    #   +40 diag: D + 0.8; +60 diag: D + 1.2; -30 card: 30
    route = np.array([(0, 0), (1, 1), (2, 2), (2, 1)])
    assert route_cost(route, Z, "energy", W) == pytest.approx(2 * D + 32.0, rel=1e-12)
    # slope_uphill: D + 2*1600/D, D + 7200/D, 30
    assert route_cost(route, Z, "slope_uphill", W) == pytest.approx(
        2 * D + 3200.0 / D + 7200.0 / D + 30.0, rel=1e-12)
    assert route_length_pixels(route) == pytest.approx(2 * math.sqrt(2.0) + 1.0)
    with pytest.raises(ValueError):
        route_cost(np.array([(0, 0), (2, 2)]), Z, "energy", W)


# --------------------------------------------------------------------------- #
# the shipped real-terrain cohort
# --------------------------------------------------------------------------- #

def _numpy_route_cost(route, z, model, w, px=30.0):
    """Independent vectorised NumPy recosting (own formulas, sequential sum)."""
    r = np.asarray(route, np.int64)
    zu = z[r[:-1, 0], r[:-1, 1]]
    zv = z[r[1:, 0], r[1:, 1]]
    diag = np.abs(np.diff(r, axis=0)).sum(axis=1) == 2
    d = np.where(diag, px * np.sqrt(2.0), px)
    dz = zv - zu
    rng = z.max() - z.min()
    if model == "elevation":
        step = d + (w * np.abs(dz) / rng if rng > 0 else 0.0)
    elif model == "slope_uphill":
        step = d * (1.0 + w * np.maximum(dz / d, 0.0) ** 2)
    elif model == "energy":
        step = d + (w * np.maximum(dz, 0.0) / rng if rng > 0 else 0.0)
    else:
        raise AssertionError(model)
    total = 0.0
    for s in step.tolist():
        total += s
    return total


def _cohort_scenes():
    from passage_jax.data import load_scenes, present_splits, shipped_cohort_root
    root = shipped_cohort_root()
    if not root.is_dir():
        pytest.skip("the shipped cohort is not built")
    out = []
    for n in (64, 128, 256):
        if not (root / f"{n}x{n}").is_dir():
            continue
        for split in present_splits(root, n):
            out.extend(load_scenes(root, n, split, n_samples=None))
    return out


def test_recost_every_released_route_of_the_shipped_cohort():
    from passage_jax.graph import OBJECTIVES, VARIANTS, GraphSpec
    scenes = _cohort_scenes()
    assert scenes
    n_routes = n_cstar = 0
    for s in scenes:
        for obj in OBJECTIVES:
            w = s.weight(obj)
            for var in VARIANTS:
                route = s.routes[(obj, var)]
                got = route_cost(route, s.elevation_m, obj, w)
                want = _numpy_route_cost(route, s.elevation_m, obj, w)
                assert got == pytest.approx(want, rel=1e-12), (s.where, obj, var)
                n_routes += 1
                c_star = s.metadata.get("c_star", {}).get(f"{obj}/{var}")
                if c_star is not None:  # the exact label's cost, as the cohort recorded it
                    assert GraphSpec(obj, w).costs_agree(got, c_star), (s.where, obj, var, got, c_star)
                    n_cstar += 1
    assert n_routes == 6 * len(scenes)


# --------------------------------------------------------------------------- #
# move table and grid operators (passage_jax.graph.moves, passage_jax.graph.grid)
# --------------------------------------------------------------------------- #

def test_move_table():
    assert [move_index(int(dr), int(dc)) for dr, dc in MOVES] == list(range(8))
    with pytest.raises(ValueError, match="not one of the 8 moves"):
        move_index(0, 0)
    assert DIAGONAL.tolist() == [True, False, True, False, False, True, False, True]
    np.testing.assert_array_equal(STEP_PIXELS, np.where(DIAGONAL, math.sqrt(2.0), 1.0))


def test_spec_and_costs_import_without_each_other():
    """graph.spec and graph.costs do not import each other's module at import time in a
    cycle: each imports cleanly first in a fresh interpreter."""
    import subprocess
    import sys
    for mod in ("passage_jax.graph.spec", "passage_jax.graph.costs", "passage_jax.graph.grid"):
        subprocess.run([sys.executable, "-c", f"import {mod}"], check=True)


@pytest.mark.parametrize("offset", [(-1, -1), (0, 1), (1, 0), (2, -1), (0, 0)])
def test_shift_matches_plain_loop(offset):
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 5))
    dr, dc = offset
    want = np.full_like(a, -7.0)
    for r in range(4):
        for c in range(5):
            if 0 <= r + dr < 4 and 0 <= c + dc < 5:
                want[r, c] = a[r + dr, c + dc]
    np.testing.assert_array_equal(shift(a, dr, dc, -7.0, np), want)
    with jax.enable_x64(True):
        np.testing.assert_array_equal(np.asarray(shift(jnp.asarray(a), dr, dc, -7.0)), want)
        # leading batch axes are carried along
        batched = np.asarray(shift(jnp.asarray(np.stack([a, 2 * a])), dr, dc, -7.0))
    np.testing.assert_array_equal(batched[1], np.where(want == -7.0, -7.0, 2 * want))


def test_neighbours_and_bellman_backup_by_hand():
    # 2x2 grid, V = [[0, 1], [2, 3]], every move costs 10 (off-grid moves +inf)
    v = np.array([[0.0, 1.0], [2.0, 3.0]])
    nb = neighbours(v, np.inf, np)
    assert nb.shape == (8, 2, 2)
    # from (0, 0): only (0, +1) -> 1, (+1, -1) off grid, (+1, 0) -> 2, (+1, +1) -> 3
    assert nb[:, 0, 0].tolist() == [INF, INF, INF, INF, 1.0, INF, 2.0, 3.0]
    c = np.where(np.isfinite(nb), 10.0, np.inf)
    np.testing.assert_array_equal(bellman_backup(v, c, np), [[11.0, 10.0], [10.0, 10.0]])
    np.testing.assert_array_equal(np.asarray(bellman_backup(jnp.asarray(v), jnp.asarray(c))),
                                  [[11.0, 10.0], [10.0, 10.0]])


def test_descent_policy_tie_break_and_unreachable():
    # from (1, 1) of a flat 3x3 grid towards V = 0 at (2, 2) through two equal choices
    v = np.array([[4.0, 3.0, 2.0], [3.0, 2.0, 1.0], [2.0, 1.0, 0.0]])
    c = np.where(np.isfinite(neighbours(v, np.inf, np)), 1.0, np.inf)
    c[7, 1, 1] = 2.0  # the diagonal now ties with (0, +1) and (+1, 0): 1 + 1 = 2 + 0
    move, backup = descent_policy(jnp.asarray(v), jnp.asarray(c))
    assert int(move[1, 1]) == move_index(0, 1)  # the first of the ties in MOVES order
    assert float(backup[1, 1]) == 2.0
    np.testing.assert_array_equal(np.asarray(move), descent_policy(v, c, np)[0])
    # a cell without a legal move backs up +inf
    c[:, 0, 0] = np.inf
    _, backup = descent_policy(v, c, np)
    assert backup[0, 0] == np.inf and cell_mask((3, 3), (0, 2), np).sum() == 1


def test_descent_policy_equals_argmin_of_move_values():
    """The move-by-move policy equals argmin/min over the stacked move values, ties and
    NaN included (a NaN counts as the minimum, as in argmin)."""
    rng = np.random.default_rng(5)
    v = rng.integers(0, 4, (6, 7)).astype(float)  # many ties
    v[2, 3] = np.nan
    c = rng.integers(1, 3, (8, 6, 7)).astype(float)
    c[:, 0, 0] = np.inf
    q = np.asarray(move_values(v, c, np))
    move, backup = descent_policy(jnp.asarray(v, jnp.float32), jnp.asarray(c, jnp.float32))
    np.testing.assert_array_equal(np.asarray(move), np.argmin(q, axis=0))
    np.testing.assert_array_equal(np.asarray(backup), np.min(q, axis=0))
    np.testing.assert_array_equal(np.asarray(bellman_backup(jnp.asarray(v), jnp.asarray(c))),
                                  np.min(q, axis=0))
