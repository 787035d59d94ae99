"""The learned planner as a batch planner (:meth:`LearnedPlanner.plan_batch
<passage_jax.learned.planner.LearnedPlanner>`, docs/protocol.md "Batches"): the guide's
field, the Bellman backups and the descent with its escapes for every scene of a
:class:`~passage_jax.protocol.batch.PlanBatch` in one jitted function of ``(params, batch)``
(:func:`plan_batch_kernel`; ``docs/learned.md``, "The batched planner").

What one call computes:

1. **The edge costs** of every scene (:func:`edge_costs`) and **the field**: for the network
   guide the network inputs (:func:`network_inputs`), the network
   (:func:`~passage_jax.learned.guide.network_apply`) and the cost-to-go
   ``exp(u) * octile * pixel_size_m``, +inf on obstacles, 0 at the goal
   (:func:`network_field`); for the octile guide the octile distance times the smallest
   step cost per metre (:func:`octile_guide_field`).
2. **The backups**: the batch-one backup kernel
   (:func:`passage_jax.learned.decoders.bellman_backups`'s) on the scenes' fields.
3. **The descent** (:func:`descend`): one :func:`jax.lax.while_loop` over the batch whose
   body is the one-step function of a scene, vmapped; a visited mask and a route buffer of
   ``H * W`` cells per scene; the loop runs until every scene has stopped.

Steps 1 and 2 run on the whole batch at once, or (``BatchConfig.per_scene``, what the
planner chooses on CPU) one scene after another inside the call, a padding row skipped:
on a CPU a scene's working set then stays in cache (the U-Net's forward measured 26 ms a
256x256 scene one at a time against 48 ms in a batch of 64 on two cores). A batch split
along its batch axis over several devices is planned one call a device, each on its own rows
(:func:`device_parts`, :func:`join_parts`): the host steps below stall inside one call
partitioned over the CPU backend's devices. Any other batch on several devices is gathered
onto one first (:func:`on_one_device`).

**Equality with the batch-one planner.** Per live scene, with float64 kernels, the route
and status are those :meth:`LearnedPlanner.plan` returns for that scene's request, cell for
cell: every value the descent compares is bit for bit the batch-one value. Where XLA's
arithmetic would differ from what the batch-one planner computes, the batch takes the
batch-one arithmetic:

* the network inputs are computed per scene (:func:`jax.lax.map` of
  :func:`~passage_jax.learned.model.feature_grid`), as the batch-one guide's jitted
  function computes them; vmapped, XLA fuses the cost-model branches of the slope channels
  differently and some of their values move by an ulp;
* the network runs at batch 1 on the CPU (the per-scene path): on an AVX2 CPU XLA runs
  another convolution kernel for a whole batch, whose output differs in its last bits
  (on an AVX-512 CPU the output at batch 1, 8 and 24 is the same; both tested);
* ``exp`` of the network output is NumPy's, taken on the host inside the call
  (:func:`jax.pure_callback`) as the batch-one guide takes it: XLA's float64 ``exp``
  differs from NumPy's in the last bit on about 15 % of the values;
* the float64 edge costs: left to itself XLA turns a division by a scene's constant into
  a multiplication by its reciprocal and contracts ``a * b + c`` into a fused
  multiply-add, and its costs differ from ``edge_cost_field_np``'s in the last bit (on 0.6 %
  of the moves of the shipped 256x256 scenes under ``elevation``, 18 % under
  ``absolute_elevation``). Every operand of the registry's formulas is therefore a full
  materialised array (no broadcast constant to divide by), which makes XLA's costs the
  NumPy ones for the models whose formulas have no multiplication feeding an addition
  (:data:`XLA_EXACT_MODELS`); the others (``slope_uphill``) are computed by
  ``edge_cost_field_np`` itself on the host inside the call (the figures measured with JAX
  0.10 on an x86-64 CPU; the tests check every model bit for bit on JAX 0.10 and 0.12);
* the octile distances are read from a table the batch-one function
  (:func:`~passage_jax.learned.model.octile_grid` on the host) computed;
* the backups are additions and minima and the descent's ``step + field`` a single
  addition, exact in any order of fusion; its choices are comparisons.

This needs float64 kernels (:func:`passage_jax.precision.float64_available`); without
them (``PASSAGE_JAX_NO_X64=1``) the field, the costs and the descent are float32 and the
routes may differ from the batch-one planner's, which descends in float64 on the host.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph.costs import MODEL_NAMES, CropStats, crop_stats, edge_cost_field_np, get_cost_model
from passage_jax.graph.grid import shift
from passage_jax.graph.moves import MOVES, STEP_PIXELS
from passage_jax.learned.decoders import _backups_kernel
from passage_jax.learned.guide import NetworkGuide, network_apply
from passage_jax.learned.model import feature_grid, features, octile_grid
from passage_jax.learned.stages import flow
from passage_jax.protocol.batch import BATCH_STATUS_CODE, BatchRoutes, PlanBatch, check_batch

__all__ = ["XLA_EXACT_MODELS", "BatchConfig", "batch_refusal", "check_batch", "edge_costs",
           "octile_scales", "network_inputs", "network_forward", "network_field", "octile_guide_field",
           "descend", "batch_fields", "device_parts", "join_parts", "on_one_device",
           "plan_batch_kernel"]

_OK = BATCH_STATUS_CODE["ok"]
_NO_PATH = BATCH_STATUS_CODE["no_path"]
_BUDGET = BATCH_STATUS_CODE["budget_exhausted"]
_RUNNING = -1
#: each move's cell in the 3x3 window around a cell (row, column)
_WIN_R = MOVES[:, 0] + 1
_WIN_C = MOVES[:, 1] + 1


@dataclasses.dataclass(frozen=True)
class BatchConfig:
    """What the batched kernel computes (hashable: the jit's static argument). ``guide``:
    ``"network"`` or ``"octile"``; for the network, its Flax ``module``, compute ``dtype``
    and ``output`` (:class:`~passage_jax.learned.guide.NetworkGuide`); ``backups`` (k) and
    the descent's ``max_escapes`` (None: no limit) and ``max_steps`` (None: H·W);
    ``per_scene``: the dense stages (network inputs, network, field, edge costs, backups)
    one scene at a time in the call, padding rows skipped, instead of on the whole batch
    at once (the descent is batched either way)."""

    guide: str
    backups: int = 0
    max_escapes: int | None = 0
    max_steps: int | None = None
    per_scene: bool = False
    module: object = None
    dtype: str = "float32"
    output: str = "log_ratio"


def batch_refusal(guide, octile: bool, stages) -> str | None:
    """Why a learned planner of this guide and these stages cannot plan a batch (None when
    it can). A batch runs ``[backups] descent`` with the descent's ``max_escapes`` and
    ``max_steps`` only, on the octile field or a :class:`~passage_jax.learned.guide.NetworkGuide`
    with the default network inputs and no tiling."""
    keys = [s.key for s in stages]
    shown = flow([{s.key: s.k} if s.key == "backups" else
                  {s.key: {f.name: getattr(s, f.name) for f in dataclasses.fields(s)
                           if getattr(s, f.name) != f.default}} for s in stages])
    searches = [s for s in stages if s.key != "backups"]
    if keys[-1:] != ["descent"] or len(searches) != 1:
        return (f"stages {shown} cannot be batched: a batch runs [backups] descent (no guided "
                f"A* or exact stage)")
    d = searches[0]
    extra = [k for k in ("refine_radius", "accept_ratio") if getattr(d, k) is not None]
    if extra:
        return (f"stages {shown} cannot be batched: the batched descent takes max_escapes and "
                f"max_steps only, not {', '.join(extra)}")
    if octile:
        return None
    if not isinstance(guide, NetworkGuide):
        return (f"the guide {guide!r} cannot be batched: a batch needs a NetworkGuide (a "
                f"checkpoint) or the octile guide")
    if guide.tiling is not None:
        return f"the guide {guide!r} is tiled; a batch applies the network to whole scenes only"
    if guide.feature_fn is not features:
        return (f"the guide {guide!r} reads its own feature_fn; a batch computes the default "
                f"network inputs (passage_jax.learned.model.features)")
    return None


# --------------------------------------------------------------------------- #
# The batch-one planner's NumPy arithmetic: on the host inside the call (callbacks), or
# in XLA where XLA computes it bit for bit (the edge costs of XLA_EXACT_MODELS)
# --------------------------------------------------------------------------- #

def _to_device(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a`` in ``dtype`` for a callback's result; float64 as its two uint32 halves
    (``(..., 2)``; :func:`_from_host` joins them). The callback runs on a thread of its
    own, whose x64 setting may be off: JAX would narrow a float64 array to float32 there,
    on the way in as on the way out."""
    a = np.asarray(a, dtype, order="C")
    if dtype == np.float64:
        return a.reshape(a.shape + (1,)).view(np.uint32)
    return a


def _host_shape(shape, dtype):
    """The ``jax.ShapeDtypeStruct`` :func:`_to_device` gives for ``shape`` and ``dtype``."""
    if np.dtype(dtype) == np.float64:
        return jax.ShapeDtypeStruct(tuple(shape) + (2,), np.uint32)
    return jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))


def _from_host(x, dtype):
    """A callback result of :func:`_to_device` as a ``dtype`` array (traced)."""
    return jax.lax.bitcast_convert_type(x, jnp.float64) if np.dtype(dtype) == np.float64 else x


def _to_host(x):
    """A traced array for a callback: float64 as its uint32 halves (see :func:`_to_device`;
    :func:`_on_host` joins them)."""
    return jax.lax.bitcast_convert_type(x, jnp.uint32) if x.dtype == jnp.float64 else x


def _on_host(a, dtype) -> np.ndarray:
    """A callback argument of :func:`_to_host` as the ``dtype`` array it was."""
    a = np.asarray(a, order="C")
    if np.dtype(dtype) == np.float64:
        return a.view(np.float64).reshape(a.shape[:-1])
    return a


#: The cost models whose float64 edge costs XLA computes bit for bit as ``edge_cost_field_np``
#: once every operand is a full array (:func:`_xla_costs`): no multiplication feeds an
#: addition in their formulas, so nothing can be contracted into a fused multiply-add.
#: The others (``slope_uphill``: ``d * (1 + w * g * g)``) are computed on the host.
XLA_EXACT_MODELS = ("distance", "elevation", "absolute_elevation", "energy")


def _full(v, shape, dtype):
    """``v`` broadcast to ``shape`` and materialised (:func:`jax.lax.optimization_barrier`),
    so XLA's simplifier sees no broadcast constant to divide by: it would replace the
    division by a multiplication with the reciprocal, which rounds differently."""
    return jax.lax.optimization_barrier(jnp.broadcast_to(jnp.asarray(v, dtype), shape))


def _xla_costs(name: str, z, obstacles, weight, pixel_size_m: float):
    """(8, H, W) edge costs of one scene under the registry's formula of ``name`` (one of
    :data:`XLA_EXACT_MODELS`), in ``z``'s dtype: ``edge_cost_field_np``'s operations, move
    by move, on full arrays."""
    shape, dt = z.shape, z.dtype
    stats = CropStats(*(_full(v, shape, dt) for v in crop_stats(z, jnp)))
    w = _full(weight, shape, dt)
    blocked = jnp.asarray(obstacles).astype(bool)
    model = get_cost_model(name)
    out = []
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        d = _full(STEP_PIXELS[k] * pixel_size_m, shape, dt)
        cost = model.step_cost(d, z, shift(z, dr, dc, 0.0, jnp), w, stats, jnp)
        out.append(jnp.where(~shift(blocked, dr, dc, True, jnp), cost, jnp.asarray(jnp.inf, dt)))
    return jnp.stack(out)


def _host_costs(z, obstacles, model, weight, *, pixel_size_m: float, dtype: np.dtype):
    """One scene's ``edge_cost_field_np`` on the host (a callback of :func:`_costs_one`)."""
    z, weight = _on_host(z, dtype), _on_host(weight, dtype)
    costs = edge_cost_field_np(np.asarray(z, np.float64), obstacles, MODEL_NAMES[int(model)],
                               float(weight), pixel_size_m)
    return _to_device(costs, dtype)


def _costs_one(z, obstacles, model_index, weight, pixel_size_m: float):
    """(8, H, W) edge costs of one scene: in XLA for the models of
    :data:`XLA_EXACT_MODELS`, by ``edge_cost_field_np`` on the host for the others."""
    dtype = np.dtype(z.dtype)
    h, w = z.shape

    def branch(name):
        if name in XLA_EXACT_MODELS:
            return lambda: _xla_costs(name, z, obstacles, weight, pixel_size_m)
        fn = functools.partial(_host_costs, pixel_size_m=float(pixel_size_m), dtype=dtype)
        return lambda: _from_host(jax.pure_callback(fn, _host_shape((len(MOVES), h, w), dtype), _to_host(z),
                                                    obstacles, model_index, _to_host(weight)), dtype)
    return jax.lax.switch(model_index, [branch(n) for n in MODEL_NAMES])


def _scale_one(costs, pixel_size_m: float):
    """:func:`~passage_jax.learned.decoders.octile_scale` of one scene's costs (8, H, W)."""
    dt = costs.dtype
    lengths = _full(jnp.asarray(STEP_PIXELS * pixel_size_m, dt)[:, None, None], costs.shape, dt)
    per_metre = costs / lengths
    finite = jnp.isfinite(per_metre)
    low = jnp.min(jnp.where(finite, per_metre, jnp.inf))
    return jnp.where(jnp.any(finite), jnp.maximum(jnp.zeros((), dt), low), jnp.ones((), dt))


def octile_scales(costs, pixel_size_m: float = 30.0):
    """(B,) :func:`~passage_jax.learned.decoders.octile_scale` of each scene's edge costs
    (B, 8, H, W), the smallest step cost per metre, in the costs' dtype: exact divisions
    by full arrays of the step lengths, a minimum. Jittable (``pixel_size_m`` static)."""
    return jax.lax.map(lambda c: _scale_one(c, pixel_size_m), costs)


def edge_costs(elevation, obstacles, cost_model, cost_weight, pixel_size_m: float = 30.0):
    """(B, 8, H, W) edge costs of a batch (elevation (B, H, W), each scene's model index and
    weight), scene after scene, in the elevation's dtype. In float64 they are bit for bit the
    batch-one planner's (``edge_cost_field_np``): computed by XLA for the models of
    :data:`XLA_EXACT_MODELS`, by ``edge_cost_field_np`` itself on the host
    (:func:`jax.pure_callback`) for the others. Jittable (``pixel_size_m`` static)."""
    dt = jnp.asarray(elevation).dtype

    def one(args):
        z, ob, m, w = args
        return _costs_one(z, ob, m, jnp.asarray(w, dt), pixel_size_m)
    return jax.lax.map(one, (jnp.asarray(elevation), jnp.asarray(obstacles),
                             jnp.asarray(cost_model, jnp.int32), jnp.asarray(cost_weight, dt)))


def _host_exp(u, dtype):
    """NumPy's ``exp`` of ``u`` taken in float64 (the batch-one guide's), for :func:`_exp`."""
    return _to_device(np.exp(np.asarray(u, np.float64)), dtype)


def _exp(u, dtype):
    """``exp(float64(u))`` by NumPy on the host (:func:`jax.pure_callback`), in ``dtype``."""
    dtype = np.dtype(dtype)
    e = jax.pure_callback(functools.partial(_host_exp, dtype=dtype), _host_shape(u.shape, dtype), u)
    return _from_host(e, dtype)


# --------------------------------------------------------------------------- #
# The field
# --------------------------------------------------------------------------- #

def network_inputs(batch: PlanBatch):
    """(B, H, W, C) float32 network inputs of a batch, scene after scene, as
    :func:`passage_jax.learned.model.features` computes them for one request (float32
    elevation and weight)."""
    def one(args):
        z, ob, goal, m, w = args
        return feature_grid(z, ob, goal, m, w, batch.pixel_size_m)
    z32 = jnp.asarray(batch.elevation).astype(jnp.float32)
    w32 = jnp.asarray(batch.cost_weight).astype(jnp.float32)
    return jax.lax.map(one, (z32, jnp.asarray(batch.obstacles), jnp.asarray(batch.goal, jnp.int32),
                             jnp.asarray(batch.cost_model, jnp.int32), w32))


def _by_scene(fn, batch: PlanBatch, per_scene: bool, fill):
    """``fn(batch)`` (a pytree of arrays with a leading batch axis): on the whole batch, or
    (``per_scene``) one scene at a time (:func:`jax.lax.map` of ``fn`` on one-scene
    batches), a padding row skipped (``fill``, one scene's arrays, in its place)."""
    if not per_scene:
        return fn(batch)

    def one(row: PlanBatch):
        single = jax.tree_util.tree_map(lambda a: a[None], row)
        work = lambda: jax.tree_util.tree_map(lambda a: a[0], fn(single))  # noqa: E731
        return jax.lax.cond(row.live, work, lambda: fill)
    return jax.lax.map(one, batch)


def _forward(config: BatchConfig, params, batch: PlanBatch):
    return network_apply(config.module, config.dtype, params, network_inputs(batch))


@functools.partial(jax.jit, static_argnames="config")
def network_forward(params, batch: PlanBatch, *, config: BatchConfig):
    """(B, H, W) float32 raw network output of a batch: its inputs (:func:`network_inputs`)
    through the guide's forward (:func:`~passage_jax.learned.guide.network_apply` of
    ``config.module`` in ``config.dtype``), on the whole batch or (``config.per_scene``)
    scene after scene with padding rows skipped (0 there), as :func:`plan_batch_kernel`
    runs it: the planner's forward on its own, jitted."""
    h, w = np.shape(batch.elevation)[1:]
    return _by_scene(functools.partial(_forward, config, params), batch, config.per_scene,
                     jnp.zeros((h, w), jnp.float32))


def _octile_table(shape, dtype) -> np.ndarray:
    """``octile_grid``'s value at every (|d_row|, |d_col|) of a grid of ``shape``, computed
    on the host by the batch-one function itself."""
    return octile_grid(shape, (0, 0), dtype, xp=np)


def _octile(goal, shape, dtype):
    """(B, H, W) octile distance in cells to each scene's goal, read from the host table
    (bit for bit ``octile_grid(shape, goal, dtype, xp=np)``)."""
    table = jnp.asarray(_octile_table(shape, dtype))
    rr = jnp.arange(shape[0])[None, :, None]
    cc = jnp.arange(shape[1])[None, None, :]
    dy = jnp.abs(goal[:, 0, None, None] - rr)
    dx = jnp.abs(goal[:, 1, None, None] - cc)
    return table[dy, dx]


def _goal_mask(goal, shape):
    rr = jnp.arange(shape[0])[None, :, None]
    cc = jnp.arange(shape[1])[None, None, :]
    return (rr == goal[:, 0, None, None]) & (cc == goal[:, 1, None, None])


def network_field(out, batch: PlanBatch, output: str, dtype):
    """(B, H, W) cost-to-go of the raw network output ``out`` (B, H, W) float32, as
    :class:`~passage_jax.learned.guide.NetworkGuide` turns one scene's: ``output=
    "log_ratio"``: ``exp(u) * octile * pixel_size_m`` (``exp`` on the host: NumPy's, as the
    batch-one guide's); ``"cost_to_go"``: ``out`` itself; non-finite values +inf, 0 at the
    goal, +inf on obstacles, in ``dtype``."""
    shape = out.shape[1:]
    goal = jnp.asarray(batch.goal, jnp.int32)
    if output == "log_ratio":
        e = _exp(out, dtype)
        oct_ = _octile(goal, shape, np.float32).astype(dtype)
        field = e * oct_ * jnp.asarray(batch.pixel_size_m, dtype)
    else:
        field = out.astype(dtype)
    field = jnp.where(jnp.isfinite(field), field, jnp.inf)
    field = jnp.where(_goal_mask(goal, shape), jnp.zeros((), dtype), field)
    return jnp.where(jnp.asarray(batch.obstacles, bool), jnp.asarray(jnp.inf, dtype), field)


def octile_guide_field(costs, goal, pixel_size_m: float):
    """(B, H, W) prediction-free field of every scene, as
    :func:`~passage_jax.learned.decoders.octile_field`: the octile distance in metres (from
    the host table) times the scene's :func:`octile_scales`, in the costs' dtype."""
    dtype = np.dtype(costs.dtype)
    octile = _octile(jnp.asarray(goal, jnp.int32), costs.shape[2:], dtype)
    return octile * jnp.asarray(pixel_size_m, dtype) * octile_scales(costs, pixel_size_m)[:, None, None]


# --------------------------------------------------------------------------- #
# The descent
# --------------------------------------------------------------------------- #

class _Walk(NamedTuple):
    """One scene's descent: its current cell, the cells written, the route buffer, the
    visited mask (padded by one cell), steps taken, escapes left, status (-1: running)."""

    cur: jax.Array
    n: jax.Array
    cells: jax.Array
    seen: jax.Array
    steps: jax.Array
    escapes: jax.Array
    status: jax.Array


def _choice(q, ok):
    """The first move of least ``q`` among ``ok`` (strictly below +inf), and whether any."""
    masked = jnp.where(ok, q, jnp.inf)
    k = jnp.argmin(masked)
    return k, jnp.any(ok)


def _step(walk: _Walk, field_pad, costs, goal, limit) -> _Walk:
    """One step of one scene's descent (:func:`passage_jax.learned.decoders.direct`'s loop
    body); a scene that stopped stays as it is (its last cell written again)."""
    r, c = walk.cur[0], walk.cur[1]
    running = walk.status == _RUNNING
    at_goal = (r == goal[0]) & (c == goal[1])
    over = walk.steps >= limit
    go = running & ~at_goal & ~over
    f = jax.lax.dynamic_slice(field_pad, (r, c), (3, 3))[_WIN_R, _WIN_C]
    seen = jax.lax.dynamic_slice(walk.seen, (r, c), (3, 3))[_WIN_R, _WIN_C]
    step = jax.lax.dynamic_slice(costs, (jnp.zeros((), r.dtype), r, c), (len(MOVES), 1, 1))[:, 0, 0]
    q = step + f
    ok = (step != jnp.inf) & (q < jnp.inf)
    best, has_best = _choice(q, ok)
    fresh, has_fresh = _choice(q, ok & ~seen)
    revisit = seen[best]
    escape = revisit & (walk.escapes > 0) & has_fresh
    moved = go & has_best & (~revisit | escape)
    k = jnp.where(escape, fresh, best)
    nxt = jnp.where(moved, walk.cur + jnp.asarray(MOVES)[k], walk.cur)
    stopped = jnp.where(at_goal, _OK, jnp.where(over, _BUDGET, jnp.where(moved, _RUNNING, _NO_PATH)))
    status = jnp.where(running, stopped, walk.status)
    at = jnp.where(moved, walk.n, walk.n - 1)
    cells = jax.lax.dynamic_update_slice(walk.cells, nxt[None, :], (at, jnp.zeros((), at.dtype)))
    seen_mask = jax.lax.dynamic_update_slice(walk.seen, jnp.ones((1, 1), bool), (nxt[0] + 1, nxt[1] + 1))
    return _Walk(nxt, walk.n + moved.astype(jnp.int32), cells, seen_mask,
                 walk.steps + go.astype(jnp.int32), walk.escapes - (moved & escape).astype(jnp.int32),
                 status.astype(jnp.int32))


def descend(field, costs, start, goal, live, *, max_escapes: int | None = 0,
            max_steps: int | None = None) -> BatchRoutes:
    """Greedy descent of every scene of a batch (:func:`passage_jax.learned.decoders.direct`'s
    rules): ``field`` (B, H, W) and ``costs`` (B, 8, H, W) in one dtype, ``start`` and
    ``goal`` (B, 2), ``live`` (B,) bool (a scene not live is not walked: status
    ``no_path``, no route). From the start, the legal move of least ``step + field`` (the
    first of ``MOVES`` on ties); where that cell was visited, the best unvisited one
    instead while escapes are left (``max_escapes``, None: no limit), else ``no_path``;
    ``no_path`` when no legal move has a finite value; ``budget_exhausted`` after
    ``max_steps`` steps (None: H·W). One :func:`jax.lax.while_loop` over the batch, the
    one-step function vmapped, until every scene has stopped; jittable (the limits static).
    Returns :class:`~passage_jax.protocol.batch.BatchRoutes` with ``cells`` (B, H·W, 2)."""
    b, h, w = field.shape
    limit = h * w if max_steps is None else int(max_steps)
    escapes = h * w if max_escapes is None else int(max_escapes)
    start = jnp.asarray(start, jnp.int32)
    goal = jnp.asarray(goal, jnp.int32)
    field_pad = jnp.pad(field, ((0, 0), (1, 1), (1, 1)), constant_values=jnp.inf)
    rows = jnp.arange(b)
    cells = jnp.zeros((b, h * w, 2), jnp.int32).at[:, 0].set(start)
    seen = jnp.zeros((b, h + 2, w + 2), bool).at[rows, start[:, 0] + 1, start[:, 1] + 1].set(True)
    walk = _Walk(cur=start, n=jnp.ones(b, jnp.int32), cells=cells, seen=seen,
                 steps=jnp.zeros(b, jnp.int32), escapes=jnp.full(b, escapes, jnp.int32),
                 status=jnp.where(jnp.asarray(live, bool), _RUNNING, _NO_PATH).astype(jnp.int32))
    step = jax.vmap(_step, in_axes=(0, 0, 0, 0, None))
    walk = jax.lax.while_loop(lambda wk: jnp.any(wk.status == _RUNNING),
                              lambda wk: step(wk, field_pad, costs, goal, limit), walk)
    length = jnp.where(walk.status == _OK, walk.n, 0).astype(jnp.int32)
    return BatchRoutes(cells=walk.cells, length=length, status=walk.status)


# --------------------------------------------------------------------------- #
# The whole batch
# --------------------------------------------------------------------------- #

def _dense(config: BatchConfig, params, batch: PlanBatch):
    """The field after the backups (B, H, W) and the edge costs (B, 8, H, W) of a batch,
    in the elevation's dtype."""
    dt = jnp.asarray(batch.elevation).dtype
    costs = edge_costs(jnp.asarray(batch.elevation), jnp.asarray(batch.obstacles),
                       jnp.asarray(batch.cost_model, jnp.int32), jnp.asarray(batch.cost_weight, dt),
                       batch.pixel_size_m)
    if config.guide == "octile":
        field = octile_guide_field(costs, batch.goal, batch.pixel_size_m)
    else:
        field = network_field(_forward(config, params, batch), batch, config.output, dt)
    if config.backups:
        goal = _goal_mask(jnp.asarray(batch.goal, jnp.int32), field.shape[1:])
        field = _backups_kernel(field, costs, goal, config.backups)
    return field, costs


def _fields(config: BatchConfig, params, batch: PlanBatch):
    h, w = np.shape(batch.elevation)[1:]
    dt = jnp.asarray(batch.elevation).dtype
    fill = (jnp.full((h, w), jnp.inf, dt), jnp.full((len(MOVES), h, w), jnp.inf, dt))
    return _by_scene(functools.partial(_dense, config, params), batch, config.per_scene, fill)


@functools.partial(jax.jit, static_argnames="config")
def batch_fields(params, batch: PlanBatch, *, config: BatchConfig):
    """``(field, costs)`` of a batch as :func:`plan_batch_kernel`'s descent reads them: the
    guide's field after ``config.backups`` backups (B, H, W) and the edge costs
    (B, 8, H, W), in the elevation's dtype (+inf in a padding row skipped per scene).
    Jitted (``config`` static)."""
    return _fields(config, params, batch)


def _kernel(config: BatchConfig, params, batch: PlanBatch) -> BatchRoutes:
    field, costs = _fields(config, params, batch)
    return descend(field, costs, batch.start, batch.goal, batch.live, max_escapes=config.max_escapes,
                   max_steps=config.max_steps)


def device_parts(batch: PlanBatch) -> tuple[list, object] | None:
    """Where ``batch`` is split along its batch axis over several devices (a
    ``NamedSharding`` whose mesh axis partitions axis 0 only, as the batched procedure
    places a batch where the process has several devices): ``(parts, sharding)``, each part
    the :class:`PlanBatch` of one device's rows (its arrays that device's shards, no copy),
    in batch order, and the batch's sharding (:func:`join_parts` puts the parts' routes back
    under it). None for any other batch (on one device, replicated, split otherwise, or over
    another process's devices too)."""
    sharding = getattr(batch.elevation, "sharding", None)
    if not _rows_split(sharding, None) or len(sharding.device_set) < 2 or \
            not sharding.is_fully_addressable:
        return None
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    rows, per_leaf = None, []
    for leaf in leaves:
        if not _rows_split(getattr(leaf, "sharding", None), sharding):
            return None
        shards = sorted(leaf.addressable_shards, key=lambda sh: sh.index[0].start or 0)
        spans = [(sh.index[0].start or 0, sh.device) for sh in shards]
        if rows is not None and spans != rows:
            return None
        rows = spans
        per_leaf.append([sh.data for sh in shards])
    parts = [jax.tree_util.tree_unflatten(treedef, [arrays[k] for arrays in per_leaf])
             for k in range(len(rows))]
    return parts, sharding


def _rows_split(sharding, like) -> bool:
    """Whether ``sharding`` is a ``NamedSharding`` that splits axis 0 along a mesh axis and
    nothing else (with ``like``: the same mesh and axis as ``like``)."""
    if not isinstance(sharding, jax.sharding.NamedSharding) or not sharding.spec or \
            sharding.spec[0] is None or any(p is not None for p in sharding.spec[1:]):
        return False
    return like is None or (sharding.mesh == like.mesh and sharding.spec[0] == like.spec[0])


def join_parts(routes: list, sharding) -> BatchRoutes:
    """The parts' :class:`BatchRoutes` (each on its device, in batch order) as one, its
    arrays split along the batch axis under ``sharding``'s mesh as the batch was."""
    def join(*arrays):
        shape = (sum(a.shape[0] for a in arrays),) + arrays[0].shape[1:]
        spec = jax.sharding.PartitionSpec(sharding.spec[0], *([None] * (len(shape) - 1)))
        return jax.make_array_from_single_device_arrays(
            shape, jax.sharding.NamedSharding(sharding.mesh, spec), list(arrays))
    return jax.tree_util.tree_map(join, *routes)


def on_one_device(batch: PlanBatch) -> PlanBatch:
    """``batch`` with its arrays on one device: a batch on several devices that
    :func:`device_parts` does not split (replicated, or split along another axis) is
    gathered onto the first of them; any other batch is returned as it is."""
    devices = getattr(getattr(batch.elevation, "sharding", None), "device_set", None)
    if not devices or len(devices) < 2:
        return batch
    return jax.device_put(batch, min(devices, key=lambda d: d.id))


@functools.partial(jax.jit, static_argnames="config")
def plan_batch_kernel(params, batch: PlanBatch, *, config: BatchConfig) -> BatchRoutes:
    """The routes of every scene of ``batch`` (see the module text): the field of
    ``config.guide`` (the network of ``config.module`` with ``params``, or the octile
    field; ``params`` None), the edge costs, ``config.backups`` Bellman backups and the
    descent, in one jitted call (``config`` static; run it under x64 for float64, on a
    batch on one device: :func:`on_one_device`)."""
    return _kernel(config, params, batch)
