"""The SciPy graph of a scene: an edge-cost field as a ``scipy.sparse`` matrix.

Node ``r * W + c`` is cell ``(r, c)``; the edge ``u -> u + MOVES[k]`` carries
``C[k, u]`` for every finite entry of the (8, H, W) field, entered move by move in
``MOVES`` order and cells in row-major order (so ``scipy.sparse.csgraph`` searches
break ties the same way on every call). Used by the cohort maker's exact labels, the
scored-route test material, the tests and ``bench/reference.py`` as the independent
SciPy check of the JAX value iteration.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from passage_jax.graph import MOVES, edge_cost_field_np

__all__ = ["scipy_graph", "scipy_task_graph"]

#: grid cells per block of :func:`scipy_graph` (its temporaries are a few such blocks)
_BLOCK_CELLS = 1 << 16


def scipy_graph(cost_field) -> scipy.sparse.csr_matrix:
    """Directed ``(H*W, H*W)`` CSR graph of the finite entries of an (8, H, W) field.

    ValueError if a finite edge cost is not positive: csgraph reads an explicit zero
    as "no edge" (every registry cost is at least the step length, so this never
    happens for a valid field). Transpose (``.T.tocsr()``) for cost-to-go searches
    from the goal.

    The matrix is written in CSR form directly, a block of grid rows at a time: row
    ``u`` holds the finite moves of cell ``u`` in ``MOVES`` order, which is the order
    of their destination columns (``MOVES`` is sorted by (d_row, d_col)), so it is
    the canonical matrix (sorted, no duplicates) that SciPy builds from the same
    entries in coordinate form, index dtype included, without that form's
    temporaries (about 12 bytes an edge beyond the result's own 12).
    """
    cost_field = np.asarray(cost_field, np.float64)
    _, h, w = cost_field.shape
    n = h * w
    finite = np.isfinite(cost_field)
    counts = finite.sum(axis=0, dtype=np.int64).ravel()
    nnz = int(counts.sum())
    big = max(nnz, n) > np.iinfo(np.int32).max
    index_dtype = np.int64 if big else np.int32
    indptr = np.zeros(n + 1, index_dtype)
    np.cumsum(counts, out=indptr[1:])
    del counts
    data = np.empty(nnz, np.float64)
    indices = np.empty(nnz, index_dtype)
    offsets = (MOVES[:, 0].astype(np.int64) * w + MOVES[:, 1]).astype(index_dtype)
    block = max(1, _BLOCK_CELLS // max(1, w))  # grid rows per block
    for r0 in range(0, h, block):
        r1 = min(h, r0 + block)
        ok = finite[:, r0:r1].reshape(len(MOVES), -1).T  # (cells, 8): cell-major, move-minor
        lo, hi = int(indptr[r0 * w]), int(indptr[r1 * w])
        data[lo:hi] = cost_field[:, r0:r1].reshape(len(MOVES), -1).T[ok]
        cells = np.arange(r0 * w, r1 * w, dtype=index_dtype)
        indices[lo:hi] = (cells[:, None] + offsets[None, :])[ok]
    if nnz and not data.min() > 0:
        raise ValueError(f"non-positive edge cost {data.min()}")
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(n, n), copy=False)


def scipy_task_graph(z, obstacles, model: str, weight: float,
                     pixel_size_m: float = 30.0) -> scipy.sparse.csr_matrix:
    """:func:`scipy_graph` of the float64 NumPy edge-cost field of one task."""
    return scipy_graph(edge_cost_field_np(z, obstacles, model, weight, pixel_size_m))
