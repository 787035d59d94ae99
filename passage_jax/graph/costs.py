"""Cost-model registry and the edge-cost field kernels (contract §2).

Every formula is written once, against an array namespace ``xp`` (NumPy or
``jax.numpy``), so the float64 host recoster, the CPU exact search and the JAX
kernels share one definition. A corrected formula is a one-place change here.
Neighbour gathers come from :mod:`passage_jax.graph.grid`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph.grid import neighbours, shift
from passage_jax.graph.moves import MOVES, STEP_PIXELS

__all__ = [
    "CostModel", "CropStats", "COST_MODELS", "MODEL_NAMES", "MODEL_INDEX", "get_cost_model",
    "crop_stats", "step_cost", "legal_move_mask", "edge_cost_field", "edge_cost_field_np",
    "edge_cost_field_by_index", "edge_cost_field_batched",
]


class CropStats(NamedTuple):
    """Whole-crop statistics the normalised terms use (obstacle cells included)."""

    crop_min: object
    crop_range: object
    crop_max_abs: object


def crop_stats(z, xp=np) -> CropStats:
    """min, max - min and max |z| over the whole crop (last two axes)."""
    zmin = xp.min(z, axis=(-2, -1))
    zmax = xp.max(z, axis=(-2, -1))
    return CropStats(zmin, zmax - zmin, xp.max(xp.abs(z), axis=(-2, -1)))


def crop_stats_from_bounds(zmin, zmax) -> CropStats:
    """:func:`crop_stats` of a grid whose least and greatest values are ``zmin`` and
    ``zmax`` (a reader took them), bit for bit: max |z| over the grid is max(|zmin|,
    |zmax|)."""
    lo, hi = np.float64(zmin), np.float64(zmax)
    return CropStats(lo, hi - lo, np.maximum(abs(lo), abs(hi)))


def _normalised(num, den, xp):
    """num / den, and exactly 0 where den == 0 (the flat-crop rule)."""
    safe = xp.where(den > 0, den, 1.0)
    return xp.where(den > 0, num / safe, 0.0)


def _distance(d, z_u, z_v, w, st, xp):
    return d + 0.0 * z_v


def _elevation(d, z_u, z_v, w, st, xp):
    return d + _normalised(w * xp.abs(z_v - z_u), st.crop_range, xp)


def _absolute_elevation(d, z_u, z_v, w, st, xp):
    return d + _normalised(w * xp.abs(z_v), st.crop_max_abs, xp)


def _slope_uphill(d, z_u, z_v, w, st, xp):
    grade = xp.maximum((z_v - z_u) / d, 0.0)
    return d * (1.0 + w * grade * grade)


def _energy(d, z_u, z_v, w, st, xp):
    return d + _normalised(w * xp.maximum(z_v - z_u, 0.0), st.crop_range, xp)


@dataclasses.dataclass(frozen=True)
class CostModel:
    name: str
    step_cost: Callable  # (d, z_u, z_v, w, CropStats, xp) -> cost
    default_weight: float
    symmetric: bool
    formula: str


COST_MODELS: dict[str, CostModel] = {
    m.name: m
    for m in (
        CostModel("distance", _distance, 0.0, True, "d"),
        CostModel("elevation", _elevation, 62.4, True, "d + w*|dz|/crop_range"),
        CostModel("absolute_elevation", _absolute_elevation, 62.4, False,
                  "d + w*|z[v]|/crop_max_abs"),
        CostModel("slope_uphill", _slope_uphill, 10.0, False, "d*(1 + w*max(dz/d, 0)**2)"),
        CostModel("energy", _energy, 62.4, False, "d + w*max(dz, 0)/crop_range"),
    )
}
#: Stable integer ids (registry order) for kernels that select a model per scene.
MODEL_NAMES: tuple[str, ...] = tuple(COST_MODELS)
MODEL_INDEX = {name: i for i, name in enumerate(MODEL_NAMES)}


def get_cost_model(name: str) -> CostModel:
    try:
        return COST_MODELS[name]
    except KeyError:
        raise ValueError(f"unknown cost model {name!r}; known: {sorted(COST_MODELS)}") from None


def step_cost(model: str, d, z_u, z_v, w, stats: CropStats, xp=np):
    """Cost of moves of length ``d`` metres from elevation ``z_u`` to ``z_v``."""
    return get_cost_model(model).step_cost(d, z_u, z_v, w, stats, xp)


# --------------------------------------------------------------------------- #
# Edge-cost fields: C[k, r, c] = cost of moving from (r, c) by MOVES[k];
# +inf where the destination is out of bounds or an obstacle.
# --------------------------------------------------------------------------- #

def legal_move_mask(obstacles, xp=np):
    """(8, H, W) bool: the move from (r, c) by MOVES[k] lands in bounds on a free cell.

    Diagonal moves check their destination only (contract §2 ``destination_only``).
    """
    blocked = xp.asarray(obstacles).astype(bool)
    return ~neighbours(blocked, True, xp)


def _edge_cost_field(z, obstacles, model: str, weight, pixel_size_m, xp, dtype):
    z = xp.asarray(z, dtype=dtype)
    stats = crop_stats(z, xp)
    zv = neighbours(z, 0.0, xp)
    d = xp.asarray(STEP_PIXELS * pixel_size_m, dtype=dtype)[:, None, None]
    w = xp.asarray(weight, dtype=dtype)
    cost = get_cost_model(model).step_cost(d, z[None], zv, w, stats, xp)
    return xp.where(legal_move_mask(obstacles, xp), cost, xp.asarray(np.inf, dtype=dtype))


def edge_cost_field_np(z, obstacles, model: str, weight: float, pixel_size_m: float = 30.0):
    """NumPy float64 edge-cost field (host reference implementation).

    The same formulas as :func:`edge_cost_field`, computed one move at a time into the
    (8, H, W) result, so the temporaries are a few (H, W) planes rather than (8, H, W)
    stacks (at 4,096² the result is 1 GiB; the stacked form peaked at about four
    times that). Every entry is the same sequence of float64 operations as in the
    stacked form, so the field is bit for bit the same."""
    z = np.asarray(z, np.float64)
    if z.ndim != 2:
        return _edge_cost_field(z, obstacles, model, weight, pixel_size_m, np, np.float64)
    cost_model = get_cost_model(model)
    stats = crop_stats(z, np)
    blocked = np.asarray(obstacles).astype(bool)
    d = STEP_PIXELS * pixel_size_m
    w = np.asarray(weight, dtype=np.float64)
    out = np.empty((len(MOVES),) + z.shape, np.float64)
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        zv = shift(z, dr, dc, 0.0, np)
        cost = cost_model.step_cost(np.float64(d[k]), z, zv, w, stats, np)
        legal = ~shift(blocked, dr, dc, True, np)
        np.copyto(out[k], np.where(legal, cost, np.inf))
    return out


def edge_cost_field(z, obstacles, model: str, weight, pixel_size_m: float = 30.0):
    """JAX edge-cost field for one scene (H, W) -> (8, H, W), in ``z``'s dtype.

    Pure and jittable (``model`` and ``pixel_size_m`` static); batch with ``vmap``
    or use :func:`edge_cost_field_batched`. float64 needs x64 enabled.
    """
    z = jnp.asarray(z)
    return _edge_cost_field(z, obstacles, model, weight, pixel_size_m, jnp, z.dtype)


def edge_cost_field_by_index(z, obstacles, model_index, weight, pixel_size_m: float = 30.0):
    """Like :func:`edge_cost_field`, with the model chosen by a traced integer id
    (``MODEL_INDEX``), so one batch may mix cost models."""
    branches = [
        (lambda name: (lambda zz, oo, ww: edge_cost_field(zz, oo, name, ww, pixel_size_m)))(n)
        for n in MODEL_NAMES
    ]
    return jax.lax.switch(model_index, branches, jnp.asarray(z), obstacles, weight)


@jax.jit
def edge_cost_field_batched(z, obstacles, model_index, weight):
    """Batched field: z (B, H, W), obstacles (B, H, W), model_index (B,), weight (B,)
    -> (B, 8, H, W); 30 m pixels."""
    return jax.vmap(edge_cost_field_by_index)(z, obstacles, model_index, weight)
