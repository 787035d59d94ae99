"""The pytrees the metric kernels exchange (``flax.struct.dataclass``, frozen).

* :class:`Route` — a padded route: ``cells`` (L, 2) int32 ``(row, col)`` and a
  scalar ``length``; rows at or beyond ``length`` are padding, never read.
* :class:`TaskArrays` — one task with its full grids: elevation, obstacles,
  start, goal, cost-model id, weight and c*.
* :class:`TaskAtCandidate` — the same task with its grids already read at the
  candidate route's cells (the grid size is data, not shape), as the host entry
  point sends it: O(L) per task instead of O(H * W).
* :class:`RouteMetrics` — every contract §4 per-task metric of one candidate route.

The task and metric types are keyword-only (``TaskArrays(elevation=..., ...)``).
The two task types answer the same questions (:meth:`~TaskArrays.grid_shape`,
:meth:`~TaskArrays.cells_in_grid`, :meth:`~TaskArrays.obstacle_at`,
:meth:`~TaskArrays.elevation_at`, :meth:`~TaskArrays.crop_stats`), so one
per-task kernel, :func:`passage_jax.metrics.kernels.score_task`, serves both.
Every type is a pytree: a batch is the same type with a leading axis on every
leaf, and ``jax.vmap``, ``jax.tree_util.tree_map`` and ``jax.device_put`` work
on it directly.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph import CropStats, crop_stats

__all__ = ["Route", "TaskArrays", "TaskAtCandidate", "RouteMetrics", "METRIC_KEYS",
           "PACKED_INT_KEYS", "PACKED_FLOAT_KEYS", "in_bounds", "gather_cells", "metric_dict"]

#: Per-task metric names, in :class:`RouteMetrics` field order.
METRIC_KEYS = ("connected_path", "obstacle_traversals", "obstacle_violation", "valid_path",
               "success", "predicted_cost", "regret", "assd", "h95", "path_iou")
#: Columns of :meth:`RouteMetrics.packed`'s int32 array (``success`` equals ``valid_path``).
PACKED_INT_KEYS = ("connected_path", "obstacle_traversals", "obstacle_violation", "valid_path")
#: Columns of :meth:`RouteMetrics.packed`'s float array.
PACKED_FLOAT_KEYS = ("predicted_cost", "regret", "assd", "h95", "path_iou")


def in_bounds(cells, shape):
    """(..., L) bool: each ``(row, col)`` of ``cells`` lies inside a grid of
    ``shape`` (H, W); ``shape`` may be static ints or traced scalars."""
    h, w = shape
    r, c = cells[..., 0], cells[..., 1]
    return (r >= 0) & (r < h) & (c >= 0) & (c < w)


@flax.struct.dataclass
class Route:
    """A padded route: ``cells`` (L, 2) int32 and ``length`` () int32."""

    cells: jax.Array
    length: jax.Array

    @classmethod
    def pad(cls, cells, max_length: int) -> Route:
        """Host-side: a NumPy-backed route with ``cells`` (n, 2) padded with zeros
        to ``max_length`` rows (n <= max_length)."""
        cells = np.asarray(cells, np.int32).reshape(-1, 2)
        if len(cells) > max_length:
            raise ValueError(f"route of {len(cells)} cells does not fit {max_length} rows")
        out = np.zeros((max_length, 2), np.int32)
        out[:len(cells)] = cells
        return cls(out, np.int32(len(cells)))

    def live(self):
        """(L,) bool: the rows that are cells (``index < length``)."""
        return jnp.arange(self.cells.shape[-2]) < self.length


def gather_cells(grid, cells, ok):
    """``grid[cells]`` (L,) where ``ok``; the index is clamped only to keep the
    gather in range, and the result must be masked by ``ok`` by the caller."""
    h, w = grid.shape
    r = jnp.where(ok, cells[:, 0], 0)
    c = jnp.where(ok, cells[:, 1], 0)
    return grid[jnp.clip(r, 0, h - 1), jnp.clip(c, 0, w - 1)]


@flax.struct.dataclass(kw_only=True)
class TaskArrays:
    """One task with its full grids.

    ``elevation`` (H, W) float (its dtype is the task's floating dtype: costs,
    regret and geometry are computed in it), ``obstacles`` (H, W) bool,
    ``start``/``goal`` (2,) int32, ``cost_model`` () int32 id of
    ``passage_jax.graph.MODEL_INDEX``, ``weight`` () and ``c_star`` () floats.
    """

    elevation: jax.Array
    obstacles: jax.Array
    start: jax.Array
    goal: jax.Array
    cost_model: jax.Array
    weight: jax.Array
    c_star: jax.Array

    @property
    def dtype(self):
        return jnp.asarray(self.elevation).dtype

    def grid_shape(self):
        """(H, W) as static ints."""
        return jnp.shape(self.elevation)

    def cells_in_grid(self, route: Route):
        """(L,) bool: live cells of ``route`` inside the grid."""
        return route.live() & in_bounds(route.cells, self.grid_shape())

    def obstacle_at(self, route: Route, ok):
        """(L,) bool: an obstacle at each cell where ``ok``, False elsewhere."""
        return gather_cells(jnp.asarray(self.obstacles).astype(bool), route.cells, ok) & ok

    def elevation_at(self, route: Route, ok):
        """(L,) elevation at each cell where ``ok`` (anything elsewhere: mask it)."""
        return gather_cells(jnp.asarray(self.elevation), route.cells, ok)

    def crop_stats(self) -> CropStats:
        """Whole-crop statistics of the elevation (``passage_jax.graph.crop_stats``)."""
        return crop_stats(jnp.asarray(self.elevation), jnp)


@flax.struct.dataclass(kw_only=True)
class TaskAtCandidate:
    """One task with its grids read at one candidate route's cells.

    ``grid_shape_hw`` (2,) int32 is the grid's (H, W); ``obstacle_cells`` (L,)
    bool and ``elevation_cells`` (L,) float are the obstacle flag and elevation
    at each in-bounds live cell of the candidate (anything elsewhere: masked);
    ``crop`` holds the whole grid's :class:`~passage_jax.graph.CropStats`. The
    remaining fields are those of :class:`TaskArrays`. Only the candidate it was
    read for can be scored against it.
    """

    grid_shape_hw: jax.Array
    obstacle_cells: jax.Array
    elevation_cells: jax.Array
    crop: CropStats
    # the task's own fields, as in TaskArrays: each type lists its whole pytree in one place
    start: jax.Array
    goal: jax.Array
    cost_model: jax.Array
    weight: jax.Array
    c_star: jax.Array

    @property
    def dtype(self):
        return jnp.asarray(self.elevation_cells).dtype

    def grid_shape(self):
        """(H, W) as two (possibly traced) int32 scalars."""
        return self.grid_shape_hw[0], self.grid_shape_hw[1]

    def cells_in_grid(self, route: Route):
        return route.live() & in_bounds(route.cells, self.grid_shape())

    def obstacle_at(self, route: Route, ok):
        del route  # already read at the candidate's cells
        return jnp.asarray(self.obstacle_cells, bool) & ok

    def elevation_at(self, route: Route, ok):
        del route, ok
        return jnp.asarray(self.elevation_cells)

    def crop_stats(self) -> CropStats:
        return self.crop


@flax.struct.dataclass(kw_only=True)
class RouteMetrics:
    """The contract §4 per-task metrics of one candidate route (or a batch of them:
    a leading axis on every field). Field names are :data:`METRIC_KEYS`;
    ``success`` equals ``valid_path``; geometry (``assd``, ``h95``,
    ``path_iou``) is NaN unless the route is valid."""

    connected_path: jax.Array
    obstacle_traversals: jax.Array
    obstacle_violation: jax.Array
    valid_path: jax.Array
    success: jax.Array
    predicted_cost: jax.Array
    regret: jax.Array
    assd: jax.Array
    h95: jax.Array
    path_iou: jax.Array

    def to_dict(self) -> dict:
        """``{name: array}`` keyed by :data:`METRIC_KEYS`."""
        return {k: getattr(self, k) for k in METRIC_KEYS}

    def packed(self):
        """((..., 4) int32 in :data:`PACKED_INT_KEYS` order, (..., 5) floats in
        :data:`PACKED_FLOAT_KEYS` order): the whole result in two arrays."""
        flags = jnp.stack([getattr(self, k).astype(jnp.int32) for k in PACKED_INT_KEYS], axis=-1)
        values = jnp.stack([getattr(self, k) for k in PACKED_FLOAT_KEYS], axis=-1)
        return flags, values


def metric_dict(per_task) -> dict:
    """``per_task`` as a mapping: a :class:`RouteMetrics` becomes its
    :meth:`~RouteMetrics.to_dict`, a mapping is returned as is."""
    return per_task.to_dict() if isinstance(per_task, RouteMetrics) else per_task
