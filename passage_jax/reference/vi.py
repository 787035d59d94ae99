"""Exact value iteration on a batch of scenes: the host driver (contract §3.1).

The kernel (pytrees, the per-scene init / step / terminate state machine, the sweeps,
the descent) is :mod:`passage_jax.reference.vi_kernel`; this module validates a batch,
pads it into calls of stable shapes, runs the kernel and returns NumPy results. Every
name of the kernel is importable from here too.

* :func:`solve_batch` — the host entry point: it validates a batch
  (:func:`host_batch`), splits it into calls of at most ``rung_below(VI_CALL_CELLS //
  (H * W))`` scenes (1,024 at 64², 64 at 256²), pads each call up to a rung of the one
  ladder of :mod:`passage_jax.shapes` (:func:`call_sizes`), runs
  :func:`~passage_jax.reference.vi_kernel.vi_kernel` under ``jax.enable_x64`` and returns
  a :class:`VIResult` of NumPy arrays with status names. Its settings are one
  :class:`SolveOptions` (``options=``), or the same names as keywords.
* :func:`descend_route` — one scene's route by descent on a host field (JAX, or NumPy
  without x64).

**Compilations:** one kernel per (grid size, rung, solver settings, routes,
precision): solving any number of scenes of one size, in any number of chunks, compiles
at most as many kernels as there are rungs up to the cap (7 at 256², 11 at 128², 15 at
64²), and chunks of one size share one (a pipeline of equal chunks: at most two, the
full chunks' rung and the last chunk's).

Two arithmetic paths (``precision``, :func:`resolve_precision`, which is
:func:`passage_jax.precision.resolve_reference_precision`): ``"float64"`` as above, and
``"double_float"`` for backends without float64: the edge costs are computed in float64
on the host and split into float32 pairs (:func:`double_float_inputs`), the kernel runs
on :class:`~passage_jax.reference.dfloat.DFloat` pairs with x64 off, and c* comes back
as float64 (``hi + lo``).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax import precision as _precision
from passage_jax.checks import require_int
from passage_jax.graph import MODEL_INDEX, MODEL_NAMES, MOVES, edge_cost_field_np
from passage_jax.graph.grid import descent_policy
from passage_jax.options import merge_options
from passage_jax.placement import device_count, resolve_sharding
from passage_jax.precision import resolve_reference_precision as resolve_precision
from passage_jax.reference.dfloat import ADD_RTOL, SPLIT_RTOL, DFloat, split_float64, to_float64
from passage_jax.reference.vi_kernel import (
    STATUS_NAMES,
    SceneInputs,
    SolverConfig,
    VIOutput,
    descend,
    vi_kernel,
)
from passage_jax.reference.vi_ops import tmap
from passage_jax.shapes import rung, rung_below

__all__ = [
    "VIResult", "solve_batch", "descend_route", "PRECISION_RTOL", "NO_X64_ENV", "no_x64",
    "double_float_inputs", "VI_CALL_CELLS", "call_sizes", "SolveOptions", "HostBatch", "host_batch"
]

#: Stated relative tolerance of c* per path: a bound on the rounding error of a
#: route's cost summed in the path's arithmetic, per step 2**-53 (float64) and
#: ``_PAIR_STEP_RTOL`` = 4 * 2**-48 (double-float), held for routes of up to ~9000
#: (float64) and ~7000 (double-float) steps.
PRECISION_RTOL = {"float64": 1e-12, "double_float": 1e-10}
#: Environment variable: "1" runs the reference solver without float64 (no scoped
#: ``jax.enable_x64``; "auto" then means double-float; "float64" is refused). The switch
#: is shared with every stage: :mod:`passage_jax.precision`.
NO_X64_ENV = _precision.NO_X64_ENV
#: The double-float path's per-step relative error bound (split + sum), 4 * 2**-48.
_PAIR_STEP_RTOL = SPLIT_RTOL + ADD_RTOL
#: Grid cells per value-iteration kernel call and device: a call holds at most
#: ``rung_below(VI_CALL_CELLS // (H * W))`` scenes (1,024 at 64², 256 at 128², 64 at 256²,
#: 4 at 1024²), the same cap as a chunk of scenes held in memory (``CHUNK_CELLS``).
VI_CALL_CELLS = 1 << 22


def no_x64() -> bool:
    """``PASSAGE_JAX_NO_X64`` is set (:func:`passage_jax.precision.no_x64`, re-exported)."""
    return _precision.no_x64()


@dataclasses.dataclass(frozen=True)
class VIResult:
    """Host solution of :func:`solve_batch` (NumPy arrays, B scenes).

    values (B, H, W) float64 cost-to-go; c_star (B,) float64; sweeps (B,) int32;
    directional_sweeps (B,) int32; converged (B,) bool; status: one name of
    ``STATUS_NAMES`` per scene; routes: with ``routes=True`` a list of (L, 2) int32
    routes (None where the status is not ``ok``), else None; precision: the path that
    computed c* (``"float64"`` or ``"double_float"``); precision_rtol: its stated
    relative tolerance on c* (``PRECISION_RTOL``).
    """

    values: np.ndarray
    c_star: np.ndarray
    sweeps: np.ndarray
    directional_sweeps: np.ndarray
    converged: np.ndarray
    status: tuple[str, ...]
    routes: list[np.ndarray | None] | None = None
    precision: str = "float64"
    precision_rtol: float = PRECISION_RTOL["float64"]



@dataclasses.dataclass(frozen=True)
class SolveOptions:
    """Settings of :func:`solve_batch` (validated here, once).

    max_sweeps, check_every, strategy, pixel_size_m and precision: the solver's
    (:class:`~passage_jax.reference.vi_kernel.SolverConfig`; ``precision`` is resolved
    at each solve, :func:`resolve_precision`). sharding: None, or e.g. a
    ``NamedSharding`` over the batch axis that places the inputs. bucket: calls of
    :func:`call_sizes` (True) or one call of exactly the batch. routes: fill
    ``VIResult.routes``. chunk: ``"auto"``, None (lock step) or a positive int (scenes
    per ``lax.map`` step, see :func:`~passage_jax.reference.vi_kernel.vi_kernel`).
    """

    max_sweeps: int = 4096
    check_every: int = 2
    strategy: str = "sweep"
    sharding: object = None
    bucket: bool = True
    routes: bool = False
    pixel_size_m: float = 30.0
    chunk: int | str | None = "auto"
    precision: str = "auto"

    def __post_init__(self):
        for name, kind in (("max_sweeps", int), ("check_every", int), ("pixel_size_m", float),
                           ("bucket", bool), ("routes", bool)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        if self.chunk != "auto" and self.chunk is not None:
            object.__setattr__(self, "chunk", require_int(self.chunk, "chunk", low=1))
        self.solver_config(self.precision)  # strategy, precision and check_every

    def solver_config(self, precision: str) -> SolverConfig:
        """The kernel's static settings with ``precision``."""
        return SolverConfig(max_sweeps=self.max_sweeps, check_every=self.check_every,
                            strategy=self.strategy, pixel_size_m=self.pixel_size_m,
                            precision=precision)

    def kernel_chunk(self) -> int | None:
        """``chunk`` with ``"auto"`` resolved: one scene at a time on CPU (unsharded),
        the whole call in lock step elsewhere or when sharded."""
        if self.chunk != "auto":
            return self.chunk
        devs = self.sharding.device_set if self.sharding is not None else jax.devices()
        on_cpu = all(d.platform == "cpu" for d in devs)
        # sharded batches stay vectorised across devices
        return 1 if on_cpu and self.sharding is None else None


def call_sizes(n_scenes: int, cells: int, n_dev: int = 1) -> list[int]:
    """Padded scenes of each kernel call :func:`solve_batch` makes for ``n_scenes``
    scenes of ``cells`` grid cells on ``n_dev`` devices: full calls of the cap
    ``rung_below(VI_CALL_CELLS // cells)`` scenes per device, then the rest padded up to
    its rung of the ladder of :mod:`passage_jax.shapes` (powers of two up to 64, then
    half octaves), times ``n_dev``. The sizes are rungs whatever the batch, so solving any
    number of scenes of one size compiles at most one kernel per rung up to the cap
    (7 rungs at 256², 11 at 128², 15 at 64²), and chunks of one size share one."""
    n_dev = max(1, int(n_dev))
    cap = rung_below(max(1, VI_CALL_CELLS // max(1, int(cells))))
    per_dev = -(-int(n_scenes) // n_dev)
    full, rest = divmod(per_dev, cap)
    return [cap * n_dev] * full + ([rung(rest) * n_dev] if rest else [])


def _check_inputs(z, obstacles, start, goal, model_index, weight):
    if z.ndim != 3:
        raise ValueError(f"elevation_m must have shape (B, H, W), got {z.shape}")
    B, H, W = z.shape
    if obstacles.shape != z.shape:
        raise ValueError(f"obstacles shape {obstacles.shape} != elevation shape {z.shape}")
    for name, a in (("start", start), ("goal", goal)):
        if a.shape != (B, 2):
            raise ValueError(f"{name} must have shape ({B}, 2), got {a.shape}")
        bad = np.flatnonzero((a[:, 0] < 0) | (a[:, 0] >= H) | (a[:, 1] < 0) | (a[:, 1] >= W))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"batch item {i}: {name} {tuple(a[i])} is outside the {H}x{W} grid")
        on = np.flatnonzero(obstacles[np.arange(B), a[:, 0], a[:, 1]])
        if on.size:
            i = int(on[0])
            raise ValueError(f"batch item {i}: {name} {tuple(a[i])} is on an obstacle")
    if model_index.shape != (B,) or weight.shape != (B,):
        raise ValueError(f"model_index and weight must have shape ({B},)")
    bad = np.flatnonzero((model_index < 0) | (model_index >= len(MODEL_INDEX)))
    if bad.size:
        raise ValueError(f"batch item {int(bad[0])}: model_index {model_index[bad[0]]} is unknown")
    bad = np.flatnonzero(~np.isfinite(weight) | (weight < 0))
    if bad.size:
        raise ValueError(f"batch item {int(bad[0])}: weight {weight[bad[0]]} must be finite, >= 0")
    bad = np.flatnonzero(~np.all(np.isfinite(z), axis=(1, 2)))
    if bad.size:
        raise ValueError(f"batch item {int(bad[0])}: elevation has non-finite values")


def _model_indices(model_index, B):
    if isinstance(model_index, str):
        model_index = [model_index] * B
    out = []
    for m in np.atleast_1d(np.asarray(model_index, dtype=object)).tolist():
        if isinstance(m, str):
            if m not in MODEL_INDEX:
                raise ValueError(f"unknown cost model {m!r}; known: {sorted(MODEL_INDEX)}")
            out.append(MODEL_INDEX[m])
        else:
            out.append(int(m))
    if len(out) == 1 and B > 1:
        out = out * B
    return np.asarray(out, np.int32)


@dataclasses.dataclass(frozen=True)
class HostBatch:
    """A validated batch of same-size scenes on the host (:func:`host_batch`): elevation_m
    (B, H, W) float64, obstacles (B, H, W) bool, start and goal (B, 2) int64,
    model_index (B,) int32, weight (B,) float64."""

    elevation_m: np.ndarray
    obstacles: np.ndarray
    start: np.ndarray
    goal: np.ndarray
    model_index: np.ndarray
    weight: np.ndarray

    @property
    def size(self) -> int:
        return self.elevation_m.shape[0]

    @property
    def cells(self) -> int:
        return self.elevation_m.shape[1] * self.elevation_m.shape[2]

    def rows(self, lo: int, hi: int) -> HostBatch:
        """Scenes ``lo`` to ``hi`` (exclusive)."""
        return HostBatch(*(getattr(self, f.name)[lo:hi] for f in dataclasses.fields(self)))

    def padded(self, n: int) -> SceneInputs:
        """The batch padded to ``n`` scenes with trivial ones: the first scene's elevation,
        model and weight, every cell blocked but (0, 0), which is both start and goal
        (they converge in one check block)."""
        pad = n - self.size

        def padb(a, fill=None):
            if not pad:
                return a
            extra = np.repeat(a[:1], pad, axis=0)
            if fill is not None:
                extra[...] = fill
            return np.concatenate([a, extra])

        pad_obst = np.ones(self.obstacles.shape[1:], bool)
        pad_obst[0, 0] = False
        return SceneInputs(elevation_m=padb(self.elevation_m), obstacles=padb(self.obstacles, pad_obst),
                           start=padb(self.start.astype(np.int32), 0),
                           goal=padb(self.goal.astype(np.int32), 0),
                           model_index=padb(self.model_index),
                           weight=padb(np.asarray(self.weight, np.float64)))


def host_batch(elevation_m, obstacles, start, goal, model_index, weight) -> HostBatch:
    """The arguments of :func:`solve_batch` as a checked :class:`HostBatch`; ValueError
    naming the batch item (``batch item i: ...``) of the first bad scene."""
    z = np.asarray(elevation_m, np.float64)
    obst = np.asarray(obstacles).astype(bool)
    start = np.asarray(start, np.int64).reshape(-1, 2)
    goal = np.asarray(goal, np.int64).reshape(-1, 2)
    B = z.shape[0] if z.ndim == 3 else -1
    midx = _model_indices(model_index, B)
    w = np.broadcast_to(np.asarray(weight, np.float64), (B,)) if B > 0 else np.asarray(weight)
    _check_inputs(z, obst, start, goal, midx, np.asarray(w))
    return HostBatch(z, obst, start, goal, midx, w)


def _pair_inputs(scenes: SceneInputs, n_real: int, pixel_size_m: float) -> SceneInputs:
    """The double-float inputs of a (padded) NumPy batch: each real scene's edge costs
    computed in float64 on the host (``edge_cost_field_np``) and split into float32
    pairs; padding scenes (every move blocked) get +inf pairs."""
    n, h, w = scenes.elevation_m.shape
    hi = np.full((n, len(MOVES), h, w), np.inf, np.float32)
    lo = np.zeros((n, len(MOVES), h, w), np.float32)
    for i in range(n_real):
        field = edge_cost_field_np(scenes.elevation_m[i], scenes.obstacles[i],
                                   MODEL_NAMES[int(scenes.model_index[i])],
                                   float(scenes.weight[i]), pixel_size_m)
        pair = split_float64(field, where=f"batch item {i}: edge costs")
        hi[i], lo[i] = pair.hi, pair.lo
    return scenes.replace(elevation_m=None, model_index=None, weight=None,
                          edge_costs=DFloat(hi, lo))


def double_float_inputs(elevation_m, obstacles, start, goal, model_index, weight, *,
                        pixel_size_m: float = 30.0) -> SceneInputs:
    """Host-built :class:`SceneInputs` of a batch for the double-float path (NumPy
    arrays; arguments as :func:`solve_batch`): edge costs computed in float64 and split
    into float32 pairs (``edge_costs``), obstacles, start and goal; elevation_m,
    model_index and weight are None. Pass them to :func:`vi_kernel` /
    :func:`solve_scene` with ``precision="double_float"`` under x64 off."""
    batch = host_batch(elevation_m, obstacles, start, goal, model_index, weight)
    return _pair_inputs(batch.padded(batch.size), batch.size, float(pixel_size_m))


def solve_batch(elevation_m, obstacles, start, goal, model_index, weight, *,
                options: SolveOptions | None = None, **overrides) -> VIResult:
    """Host entry point: exact value iteration on a batch of same-size scenes.

    ``model_index`` may be ints (``MODEL_INDEX``) or model names; ``weight`` one
    per scene or one for all. The settings are ``options`` (a :class:`SolveOptions`)
    with any of its fields given as keywords on top (``max_sweeps=4096``,
    ``check_every=2``, ``strategy="sweep"``, ``sharding=None``, ``bucket=True``,
    ``routes=False``, ``pixel_size_m=30.0``, ``chunk="auto"``, ``precision="auto"``);
    an unknown keyword is a TypeError naming it.

    ``sharding`` (e.g. a ``NamedSharding`` over the batch axis) places the inputs. With
    ``bucket`` (default) the batch runs in the calls of :func:`call_sizes`: at most
    ``rung_below(VI_CALL_CELLS // (H * W))`` scenes per call and device, each call padded
    with trivial blocked scenes up to a rung of the one ladder of :mod:`passage_jax.shapes`
    (1, 2, 4, ..., 64, 96, 128, 192, ...; a multiple of the sharding's device count), so
    any number of scenes of one size compiles at most one kernel per rung up to that cap,
    the same rungs for every chunk; solved one at a time (CPU), a padding scene is
    skipped, and in lock step it converges in one block. ``bucket=False``: one call of
    exactly the batch (padded only to the device count). Every call is dispatched before
    any result is fetched. ``chunk="auto"`` solves scenes one at a time on CPU and the
    whole call in lock step elsewhere or when sharded (see :func:`vi_kernel`). Always
    returns a :class:`VIResult`; ``routes=True`` fills its ``routes``. Results do not
    depend on the padding or the split into calls.

    ``precision`` (:func:`resolve_precision`, read at each call; ``"auto"`` defers to
    the environment variable ``PASSAGE_JAX_REFERENCE_PRECISION``): ``"float64"`` runs
    the kernel under ``jax.enable_x64(True)``; ``"double_float"`` computes the edge
    costs in float64 on the host, splits them into float32 pairs and runs the kernel
    under ``jax.enable_x64(False)``; values and c* come back as float64 either way,
    and ``VIResult.precision`` / ``precision_rtol`` say which path computed them.
    """
    opts = merge_options(SolveOptions, options, overrides, "solve_batch")
    precision = resolve_precision(opts.precision)
    config = opts.solver_config(precision)
    batch = host_batch(elevation_m, obstacles, start, goal, model_index, weight)
    B, sharding = batch.size, resolve_sharding(opts.sharding, modes=())
    nd = device_count(sharding)
    sizes = (call_sizes(B, batch.cells, nd) if opts.bucket else []) or [-(-B // nd) * nd]
    chunk = opts.kernel_chunk()
    with jax.enable_x64(precision == "float64"):
        parts = [_dispatch(batch.rows(lo, lo + size), size, config, opts, chunk)
                 for lo, size in zip(np.cumsum([0] + sizes[:-1]).tolist(), sizes)]
        outs = [tmap(lambda a, k=k: a[:k], jax.device_get(o)) for k, o in parts]
    return _result(outs, precision, opts.routes)


def _dispatch(rows: HostBatch, size: int, config: SolverConfig, opts: SolveOptions,
              chunk: int | None) -> tuple[int, VIOutput]:
    """One kernel call of ``rows`` padded to ``size`` scenes (dispatched, not fetched):
    (real scenes, the call's device output)."""
    scenes = rows.padded(size)
    if config.precision == "double_float":
        scenes = _pair_inputs(scenes, rows.size, config.pixel_size_m)
    if opts.sharding is not None:
        scenes = jax.device_put(scenes, opts.sharding)
    live = np.arange(size) < rows.size
    return rows.size, vi_kernel(scenes, config, with_routes=opts.routes, chunk=chunk, live=live)


def _result(outs: list, precision: str, routes: bool) -> VIResult:
    """The host :class:`VIResult` of the calls' fetched outputs (real scenes only)."""
    out = tmap(lambda *a: a[0] if len(a) == 1 else np.concatenate(a), *outs)
    values, c_star = out.values, out.c_star
    if precision == "double_float":
        values, c_star = to_float64(values), to_float64(c_star)
    status = tuple(STATUS_NAMES[int(s)] for s in out.status)
    route_list = None
    if routes:
        rts, lens = out.route, out.route_length
        route_list = [rts[i, : lens[i]].astype(np.int32) if status[i] == "ok" and lens[i] > 0
                      else None for i in range(len(status))]
    return VIResult(values=values, c_star=c_star, sweeps=out.sweeps,
                    directional_sweeps=out.directional_sweeps,
                    converged=out.converged, status=status, routes=route_list,
                    precision=precision, precision_rtol=PRECISION_RTOL[precision])


_descend_jit = jax.jit(descend, static_argnums=4)


def descend_route(C, V, start, goal) -> np.ndarray | None:
    """Host descent on one scene's field ``C`` (8, H, W) and ``V`` (H, W):
    (L, 2) int32 route, or None when the start cannot reach the goal. float64 (in
    NumPy when ``PASSAGE_JAX_NO_X64`` is set)."""
    if no_x64():
        return _descend_np(np.asarray(C, np.float64), np.asarray(V, np.float64),
                           tuple(int(v) for v in start), tuple(int(v) for v in goal))
    with jax.enable_x64(True):
        r, n = _descend_jit(jnp.asarray(C), jnp.asarray(V), jnp.asarray(start, jnp.int32),
                            jnp.asarray(goal, jnp.int32), int(np.prod(np.shape(V))))
        r, n = np.asarray(r), int(n)
    return r[:n].astype(np.int32) if n > 0 else None


def _descend_np(C, V, start, goal):
    """:func:`~passage_jax.reference.vi_kernel.descend` in NumPy (the same float64
    additions and tie-break)."""
    move, backup = descent_policy(V, C, xp=np)
    u, route = start, [start]
    if not np.isfinite(V[u]):
        return None
    while u != goal and len(route) < V.size:
        if not np.isfinite(backup[u]):
            return None
        dr, dc = MOVES[int(move[u])].tolist()
        u = (u[0] + dr, u[1] + dc)
        route.append(u)
    return np.asarray(route, np.int32) if u == goal else None
