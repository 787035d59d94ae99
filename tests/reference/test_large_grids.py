"""The host edge-cost field and the SciPy graph at large grids: the same numbers as
independent constructions (a cell-by-cell loop, SciPy's own coordinate-form build) and
bounded temporaries (traced peak allocations against the result's size)."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import scipy.sparse

from passage_jax.graph import MOVES, edge_cost_field_np
from passage_jax.graph.costs import MODEL_NAMES
from passage_jax.reference import scipy_graph, scipy_task_graph

__all__: list[str] = []


def _loop_field(z, obstacles, model: str, weight: float, pixel: float = 30.0) -> np.ndarray:
    """The edge-cost field cell by cell in Python floats, from the formulas of contract §2."""
    h, w = z.shape
    zmin, zmax = float(z.min()), float(z.max())
    rng_, max_abs = zmax - zmin, max(abs(zmin), abs(zmax))
    out = np.full((8, h, w), np.inf)
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        d = (math.sqrt(2.0) if dr and dc else 1.0) * pixel
        for r in range(h):
            for c in range(w):
                rv, cv = r + dr, c + dc
                if not (0 <= rv < h and 0 <= cv < w) or obstacles[rv, cv]:
                    continue
                zu, zv = float(z[r, c]), float(z[rv, cv])
                if model == "distance":
                    cost = d
                elif model == "elevation":
                    cost = d + (weight * abs(zv - zu) / rng_ if rng_ > 0 else 0.0)
                elif model == "absolute_elevation":
                    cost = d + (weight * abs(zv) / max_abs if max_abs > 0 else 0.0)
                elif model == "slope_uphill":
                    g = max((zv - zu) / d, 0.0)
                    cost = d * (1.0 + weight * g * g)
                else:  # energy
                    cost = d + (weight * max(zv - zu, 0.0) / rng_ if rng_ > 0 else 0.0)
                out[k, r, c] = cost
    return out


def _coo_graph(field: np.ndarray) -> scipy.sparse.csr_matrix:
    """SciPy's own build: one coordinate entry per finite field entry, then ``tocsr``."""
    _, h, w = field.shape
    rows, cols, vals = [], [], []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        for r in range(h):
            for c in range(w):
                if np.isfinite(field[k, r, c]):
                    rows.append(r * w + c)
                    cols.append((r + dr) * w + c + dc)
                    vals.append(field[k, r, c])
    return scipy.sparse.csr_matrix((np.asarray(vals, np.float64), (rows, cols)), shape=(h * w, h * w))


def _peak_bytes(fn, *args):
    tracemalloc.start()
    try:
        out = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (6, 1), (7, 9), (12, 12)])
@pytest.mark.parametrize("model", MODEL_NAMES)
def test_field_equals_the_cell_loop(shape, model):
    rng = np.random.default_rng(sum(shape) + len(model))
    z = rng.normal(100.0, 40.0, shape)
    obst = rng.uniform(size=shape) < 0.25
    got = edge_cost_field_np(z, obst, model, 10.0)
    want = _loop_field(z, obst, model, 10.0)
    assert got.shape == want.shape and got.dtype == np.float64
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-15, atol=0)


def test_flat_crop_field_is_the_step_lengths():
    z = np.full((5, 4), 12.5)
    for model in ("elevation", "energy", "slope_uphill"):
        f = edge_cost_field_np(z, np.zeros((5, 4), bool), model, 62.4)
        want = _loop_field(z, np.zeros((5, 4), bool), "distance", 0.0)
        assert np.array_equal(f, want), model


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (2, 2), (9, 13), (40, 23)])
def test_graph_is_scipys_own_build(shape):
    rng = np.random.default_rng(shape[0] * 31 + shape[1])
    z = rng.normal(0.0, 50.0, shape)
    obst = rng.uniform(size=shape) < 0.3
    obst[0, 0] = False
    field = edge_cost_field_np(z, obst, "energy", 62.4)
    got, want = scipy_graph(field), _coo_graph(field)
    assert got.shape == want.shape
    for name in ("data", "indices", "indptr"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got.has_canonical_format


def test_graph_of_a_walled_grid_and_the_task_graph():
    # every cell an obstacle but one: the only edges are the 8 moves into it (moves
    # check their destination only)
    obst = np.ones((4, 5), bool)
    obst[2, 3] = False
    g = scipy_task_graph(np.zeros((4, 5)), obst, "distance", 0.0)
    assert g.shape == (20, 20) and g.nnz == 8
    assert set(g.indices.tolist()) == {2 * 5 + 3}
    assert sorted(np.repeat(np.arange(20), np.diff(g.indptr)).tolist()) == [7, 8, 9, 12, 14, 17, 18, 19]
    rng = np.random.default_rng(5)
    z = rng.normal(0.0, 30.0, (11, 8))
    o = rng.uniform(size=(11, 8)) < 0.2
    a = scipy_task_graph(z, o, "slope_uphill", 10.0)
    b = _coo_graph(_loop_field(z, o, "slope_uphill", 10.0))
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.indptr, b.indptr)
    np.testing.assert_allclose(a.data, b.data, rtol=1e-15, atol=0)


def test_field_and_graph_temporaries_are_bounded():
    # 256x256: the stacked field formulas peaked at 4x the field, the coordinate-form
    # graph at 5.7x the graph; at 4,096x4,096 (a 1 GiB field) that was 4 and 9 GiB
    n = 256
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 50.0, (n, n))
    obst = rng.uniform(size=(n, n)) < 0.2
    field, peak = _peak_bytes(edge_cost_field_np, z, obst, "energy", 62.4)
    assert peak <= 2.0 * field.nbytes, peak / field.nbytes
    g, peak = _peak_bytes(scipy_graph, field)
    size = g.data.nbytes + g.indices.nbytes + g.indptr.nbytes
    assert peak <= 2.5 * size, peak / size


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_field_is_bit_for_bit_the_stacked_form(model):
    """The move-at-a-time field equals the stacked (8, H, W) computation exactly (the
    references and every recorded c* were made with that form)."""
    from passage_jax.graph.costs import _edge_cost_field

    rng = np.random.default_rng(7)
    z = rng.normal(300.0, 120.0, (33, 29))
    obst = rng.uniform(size=z.shape) < 0.2
    got = edge_cost_field_np(z, obst, model, 7.5)
    want = _edge_cost_field(z, obst, model, 7.5, 30.0, np, np.float64)
    assert np.array_equal(got.view(np.uint64), np.asarray(want).view(np.uint64))
