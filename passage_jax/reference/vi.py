"""Exact value iteration on the 8-connected grid (SPEC §3.1), one scene at a time.

``V(u) = min_k C[k, u] + V(u + MOVES[k])`` with ``V(goal) = 0``, where
``C[k, r, c]`` is the cost of the move from ``(r, c)`` by ``MOVES[k]``
(``passage_jax.graph.edge_cost_field_by_index``; ``+inf`` if illegal).

The solver is written for ONE scene and vmapped once (:func:`vi_kernel`):

* :class:`SceneInputs` — a scene's arrays (elevation, obstacles, start, goal,
  cost-model index, weight), a pytree;
* :class:`SolverConfig` — static settings (sweep budget, check interval, strategy,
  pixel size), hashable;
* :func:`init` builds the scene's :class:`GridProblem` (edge costs, the cost planes of
  the directional sweeps, goal mask; constant while solving) and the initial
  :class:`SolverState` (values, sweep counters, phase, change flag);
* :func:`step` runs one block of ``check_every`` sweeps of the state's phase;
  :func:`terminate` says whether the phase is over (a block changed nothing, or the
  next block would pass the budget);
* :func:`solve_scene` runs both phases and post-processes the state into a
  :class:`VIOutput` (device arrays, status as int codes, optional padded route).

Two phases, each a ``lax.while_loop`` over :func:`step` (for a batch in lock step,
one loop over the vmapped :func:`step`, see ``_run_phase_lockstep``):

1. **Directional sweeps** (strategy ``"sweep"``, fast sweeping, the default): four
   ``lax.scan``s per sweep, over rows top->bottom and bottom->top and over columns
   left->right and right->left; each line relaxes the three moves whose successor
   lies in the previous line, with the additions in Dijkstra's order
   (``C + V(next)``), so straight and diagonal stretches of a route propagate
   across the whole grid in one sweep and the sweep count follows the route's
   turns, not its cells. The phase stops when a sweep changes nothing.
2. **Exact finish**: plain Bellman (Jacobi) sweeps ``V <- T(V)``
   (:func:`passage_jax.graph.bellman_backup`, 0 at the goal) until a sweep changes
   nothing at all. ``T`` has a unique fixed point in floating point (every step
   costs more than zero), so the result is the value a Dijkstra search from the
   goal with the same additions computes, independent of the sweep order.

Strategy ``"jacobi"`` skips phase 1 (exact Bellman sweeps from the start: as many
sweeps as the longest optimal route has cells); it is kept as the measured
comparison (``bench/reference.py --compare-jacobi``, docs/reference.md).

Routes descend ``V`` with :func:`passage_jax.graph.descent_policy` (the first move in
``MOVES`` order among the exact minima). :func:`solve_batch` is the host entry point:
it validates a batch, splits it into calls of at most ``rung_below(VI_CALL_CELLS //
(H * W))`` scenes (1,024 at 64², 64 at 256²), pads each call up to a rung of the one
ladder of :mod:`passage_jax.shapes` (:func:`call_sizes`), runs :func:`vi_kernel` under
``jax.enable_x64(True)`` and returns a :class:`VIResult` of NumPy arrays with status
names. **Compilations:** one kernel per (grid size, rung, solver settings, routes,
precision): solving any number of scenes of one size, in any number of chunks, compiles
at most as many kernels as there are rungs up to the cap (7 at 256², 11 at 128², 15 at
64²), and chunks of one size share one (a pipeline of equal chunks: at most two, the
full chunks' rung and the last chunk's).

Two arithmetic paths (``precision``, :func:`resolve_precision`): ``"float64"`` as
above, and ``"double_float"`` for backends without float64: the edge costs are
computed in float64 on the host and split into float32 pairs
(:func:`double_float_inputs`), the same sweeps, convergence tests and descent run on
:class:`~passage_jax.reference.dfloat.DFloat` pairs with x64 off, and c* comes back
as float64 (``hi + lo``). The algorithm is written once; ``_FloatOps`` and
``_PairOps`` supply its additions, minima and comparisons.
"""
from __future__ import annotations

import dataclasses
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from passage_jax import precision as _precision
from passage_jax.graph import MODEL_INDEX, MODEL_NAMES, MOVES, edge_cost_field_by_index, edge_cost_field_np
from passage_jax.graph.grid import bellman_backup, cell_mask, descent_policy
from passage_jax.reference.dfloat import (
    ADD_RTOL,
    SPLIT_RTOL,
    DFloat,
    df_add,
    df_bellman_backup,
    df_descent_policy,
    df_isfinite,
    df_isinf,
    df_less,
    df_minimum,
    df_not_equal,
    df_where,
    split_float64,
    split_traced,
    to_float64,
)
from passage_jax.shapes import rung, rung_below

__all__ = [
    "STATUS_NAMES", "STATUS_OK", "STATUS_UNREACHABLE", "STATUS_BUDGET", "STRATEGIES",
    "SceneInputs", "SolverConfig", "GridProblem", "SolverState", "VIOutput", "VIResult",
    "init", "step", "terminate", "solve_scene", "vi_kernel", "solve_batch", "descend_route",
    "PRECISIONS", "PRECISION_RTOL", "PRECISION_ENV", "NO_X64_ENV", "resolve_precision", "no_x64",
    "double_float_inputs", "VI_CALL_CELLS", "call_sizes",
]

STATUS_NAMES = ("ok", "unreachable", "budget_exhausted")
STATUS_OK, STATUS_UNREACHABLE, STATUS_BUDGET = 0, 1, 2
#: Sweep strategies kept by measurement (docs/reference.md): fast sweeping (default)
#: and plain Jacobi (the comparison).
STRATEGIES = ("sweep", "jacobi")

_DIRECTIONAL, _EXACT = "directional", "exact"

# --------------------------------------------------------------------------- #
# Precision: which arithmetic computes c*
# --------------------------------------------------------------------------- #

#: The two arithmetic paths: float64 (needs x64) and double-float (float32 pairs,
#: runs with x64 off; :mod:`passage_jax.reference.dfloat`).
PRECISIONS = ("float64", "double_float")
#: Stated relative tolerance of c* per path: a bound on the rounding error of a
#: route's cost summed in the path's arithmetic, per step 2**-53 (float64) and
#: ``_PAIR_STEP_RTOL`` = 4 * 2**-48 (double-float), held for routes of up to ~9000
#: (float64) and ~7000 (double-float) steps.
PRECISION_RTOL = {"float64": 1e-12, "double_float": 1e-10}
#: Environment variable read at each solve: "auto" (default), "float64" or "double_float".
PRECISION_ENV = "PASSAGE_JAX_REFERENCE_PRECISION"
#: Environment variable: "1" runs the reference solver without float64 (no scoped
#: ``jax.enable_x64``; "auto" then means double-float; "float64" is refused). The switch
#: is shared with every stage: :mod:`passage_jax.precision`.
NO_X64_ENV = _precision.NO_X64_ENV
#: Platforms without float64 arithmetic.
_NO_FLOAT64_PLATFORMS = _precision.NO_FLOAT64_PLATFORMS
#: The double-float path's per-step relative error bound (split + sum), 4 * 2**-48.
_PAIR_STEP_RTOL = SPLIT_RTOL + ADD_RTOL


def no_x64() -> bool:
    """``PASSAGE_JAX_NO_X64`` is set (:func:`passage_jax.precision.no_x64`, re-exported)."""
    return _precision.no_x64()


def resolve_precision(precision: str = "auto", platform: str | None = None) -> str:
    """The arithmetic a solve uses: ``precision`` when it is ``"float64"`` or
    ``"double_float"``; for ``"auto"`` the environment variable ``PASSAGE_JAX_REFERENCE_PRECISION``
    (read now), and when that is ``"auto"`` too, ``"double_float"`` if the platform
    (``platform``, default: the default backend) has no float64 or ``PASSAGE_JAX_NO_X64``
    is set, else ``"float64"``. ValueError for an unknown value (naming the variable when
    it came from the environment) and for ``"float64"`` under ``PASSAGE_JAX_NO_X64``."""
    known = ("auto",) + PRECISIONS
    if precision not in known:
        raise ValueError(f"unknown reference precision {precision!r}; known: {list(known)}")
    source = "precision argument"
    if precision == "auto":
        precision = os.environ.get(PRECISION_ENV, "auto").strip() or "auto"
        source = f"environment variable {PRECISION_ENV}"
        if precision not in known:
            raise ValueError(f"{source}={precision!r} is not one of {list(known)}")
    off = no_x64()
    if precision == "auto":
        platform = jax.default_backend() if platform is None else platform
        no_f64 = off or str(platform).lower() in _NO_FLOAT64_PLATFORMS
        return "double_float" if no_f64 else "float64"
    if precision == "float64" and off:
        raise ValueError(f"reference precision 'float64' ({source}) needs x64, and "
                         f"{NO_X64_ENV} is set; use 'double_float' or 'auto'")
    return precision


# --------------------------------------------------------------------------- #
# Pytrees
# --------------------------------------------------------------------------- #

@struct.dataclass
class SceneInputs:
    """One scene's inputs (add a leading batch axis to every field for a batch).

    elevation_m (H, W) float; obstacles (H, W) bool; start, goal (2,) int32 (row, col);
    model_index () int32 (``MODEL_INDEX``); weight () float; edge_costs: None, or the
    double-float path's edge costs, a :class:`~passage_jax.reference.dfloat.DFloat` of
    (8, H, W) float32 halves computed in float64 on the host (:func:`double_float_inputs`;
    then elevation_m, model_index and weight may be None: that path reads only
    edge_costs, start and goal).
    """

    elevation_m: jax.Array | None
    obstacles: jax.Array
    start: jax.Array
    goal: jax.Array
    model_index: jax.Array | None
    weight: jax.Array | None
    edge_costs: DFloat | None = None


@dataclasses.dataclass(frozen=True)
class SolverConfig:
    """Static solver settings (hashable, so a jit static argument).

    max_sweeps: budget on the total sweeps of both phases; check_every: sweeps per
    block (convergence is checked on a block's last sweep); strategy: one of
    ``STRATEGIES``; pixel_size_m: cell size of the edge costs; precision: ``"auto"``
    or one of ``PRECISIONS`` (resolved by :func:`resolve_precision` when a solve starts).
    """

    max_sweeps: int = 4096
    check_every: int = 2
    strategy: str = "sweep"
    pixel_size_m: float = 30.0
    precision: str = "auto"

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; known: {STRATEGIES}")
        if self.precision not in ("auto",) + PRECISIONS:
            raise ValueError(f"unknown reference precision {self.precision!r}; known: "
                             f"{['auto', *PRECISIONS]}")
        if int(self.check_every) < 1:
            raise ValueError(f"check_every={self.check_every!r} must be >= 1")


@struct.dataclass
class GridProblem:
    """What the sweeps read and never change: edge costs (8, H, W), the cost planes of
    the four fast-sweeping scans (per scan three (n, m) planes in scan order; empty for
    ``"jacobi"``) and the goal mask (H, W). Costs are arrays (float64 path) or
    :class:`~passage_jax.reference.dfloat.DFloat` pairs (double-float path)."""

    edge_costs: jax.Array
    sweep_costs: tuple
    goal_mask: jax.Array


@struct.dataclass
class SolverState:
    """Device state of one scene's solve.

    values (H, W): current cost-to-go estimate (non-increasing in phase 1; an array,
    or a ``DFloat`` pair on the double-float path);
    sweeps (): sweeps run so far (both phases); directional_sweeps (): of those, the
    phase-1 sweeps; changed (): the last block's last sweep changed a value (True
    before the first block of a phase); phase (static): ``"directional"`` or ``"exact"``.
    """

    values: jax.Array
    sweeps: jax.Array
    directional_sweeps: jax.Array
    changed: jax.Array
    phase: str = struct.field(pytree_node=False, default=_EXACT)


@struct.dataclass
class VIOutput:
    """Device result of :func:`solve_scene` (a leading batch axis from :func:`vi_kernel`).

    values (H, W) cost-to-go (+inf where the goal cannot be reached); c_star ()
    ``V[start]`` (+inf when unreachable, NaN when the budget ran out first); sweeps ()
    total sweeps; directional_sweeps () of those, phase-1 sweeps; converged () bool;
    status () int32 code (``STATUS_NAMES``); route (max_len, 2) int32 padded with -1
    and route_length () int32 (0 unless ``ok``), or None without routes. On the
    double-float path values and c_star are ``DFloat`` pairs (``np.asarray`` gives
    float64).
    """

    values: jax.Array
    c_star: jax.Array
    sweeps: jax.Array
    directional_sweeps: jax.Array
    converged: jax.Array
    status: jax.Array
    route: jax.Array | None = None
    route_length: jax.Array | None = None


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


# --------------------------------------------------------------------------- #
# Fast sweeping: a scan over the rows (or columns) in one direction relaxes the
# three moves whose successor lies in the previous line, so diagonal and straight
# stretches of a route propagate across the grid in one scan, with the additions
# in Dijkstra's order (exact).
# --------------------------------------------------------------------------- #

_FS_SCANS = (
    # (transposed: scan over columns, reverse, ((k, lateral offset of the successor), ...))
    (False, False, ((0, -1), (1, 0), (2, 1))),   # top -> bottom: successors in row r-1
    (False, True, ((5, -1), (6, 0), (7, 1))),    # bottom -> top: successors in row r+1
    (True, False, ((0, -1), (3, 0), (5, 1))),    # left -> right: successors in column c-1
    (True, True, ((2, -1), (4, 0), (7, 1))),     # right -> left: successors in column c+1
)


class _FloatOps:
    """The arithmetic of the float64 path (plain arrays of any float dtype)."""

    add = staticmethod(jnp.add)
    minimum = staticmethod(jnp.minimum)
    isinf = staticmethod(jnp.isinf)
    isfinite = staticmethod(jnp.isfinite)
    backup = staticmethod(bellman_backup)
    descent_policy = staticmethod(descent_policy)

    @staticmethod
    def inf_like(x):
        return jnp.full_like(x, jnp.inf)

    @staticmethod
    def any_less(a, b):
        return jnp.any(a < b)

    @staticmethod
    def any_ne(a, b):
        return jnp.any(a != b)

    @staticmethod
    def zero_where(mask, x):
        return jnp.where(mask, jnp.zeros_like(x), x)

    @staticmethod
    def nan_unless(ok, x):
        return jnp.where(ok, x, jnp.nan)


class _PairOps:
    """The arithmetic of the double-float path (``DFloat`` pairs of float32)."""

    add = staticmethod(df_add)
    minimum = staticmethod(df_minimum)
    isinf = staticmethod(df_isinf)
    isfinite = staticmethod(df_isfinite)
    backup = staticmethod(df_bellman_backup)
    descent_policy = staticmethod(df_descent_policy)

    @staticmethod
    def inf_like(x):
        return DFloat(jnp.full_like(x.hi, jnp.inf), jnp.zeros_like(x.lo))

    @staticmethod
    def any_less(a, b):
        return jnp.any(df_less(a, b))

    @staticmethod
    def any_ne(a, b):
        return jnp.any(df_not_equal(a, b))

    @staticmethod
    def zero_where(mask, x):
        return df_where(mask, DFloat(jnp.zeros_like(x.hi), jnp.zeros_like(x.lo)), x)

    @staticmethod
    def nan_unless(ok, x):
        nan = jnp.full_like(x.hi, jnp.nan)
        return DFloat(jnp.where(ok, x.hi, nan), jnp.where(ok, x.lo, nan))


def _ops_of(values):
    return _PairOps if isinstance(values, DFloat) else _FloatOps


def _tmap(f, *trees):
    return jax.tree_util.tree_map(f, *trees)


def _lateral(prev, dl, ops=_FloatOps):
    """prev[j + dl] along a line, +inf outside."""
    if dl == 0:
        return prev
    edge = ops.inf_like(_tmap(lambda a: a[:1], prev))
    if dl < 0:
        return _tmap(lambda e, p: jnp.concatenate([e, p[:-1]]), edge, prev)
    return _tmap(lambda e, p: jnp.concatenate([p[1:], e]), edge, prev)


def _sweep_costs(edge_costs):
    """Per scan, its three cost planes in scan order, each (n, m) (transposed and
    reversed once, so a sweep moves only V). Separate planes scanned along with the
    lines are measured ~1.7x faster than one (n, 3, m) array, one scene at a time or
    vmapped."""
    out = []
    for transposed, reverse, moves in _FS_SCANS:
        planes = []
        for k, _ in moves:
            a = edge_costs[k].T if transposed else edge_costs[k]
            planes.append(a[::-1] if reverse else a)
        out.append(tuple(planes))
    return tuple(out)


def _fast_sweep(values, sweep_costs):
    """One fast sweep (4 line scans) of one scene's (H, W) values."""
    ops = _ops_of(values)
    for (transposed, reverse, moves), planes in zip(_FS_SCANS, sweep_costs):
        lines = values.T if transposed else values
        if reverse:
            lines = lines[::-1]
        offsets = [dl for _, dl in moves]

        def relax_line(prev, xs, offsets=offsets):
            v, a = xs
            new = v
            for j, dl in enumerate(offsets):
                new = ops.minimum(new, ops.add(a[j], _lateral(prev, dl, ops)))
            return new, new

        init = ops.inf_like(lines[0])
        _, out = jax.lax.scan(relax_line, init, (lines, planes))
        if reverse:
            out = out[::-1]
        values = out.T if transposed else out
    return values


def _exact_sweep(values, problem: GridProblem):
    """The Bellman operator T: min_k C[k] + V(u + MOVES[k]); 0 at the goal."""
    ops = _ops_of(values)
    best = ops.backup(values, problem.edge_costs)
    return ops.zero_where(problem.goal_mask, best)


# --------------------------------------------------------------------------- #
# init / step / terminate
# --------------------------------------------------------------------------- #

def _pair_edge_costs(scene: SceneInputs, config: SolverConfig) -> DFloat:
    """The double-float path's (8, H, W) edge costs: ``scene.edge_costs`` (float32
    pairs made on the host), or, for a float64 ``elevation_m`` (the caller's x64),
    the field computed in float64 and split here."""
    if scene.edge_costs is not None:
        ec = scene.edge_costs
        for name, half in (("hi", ec.hi), ("lo", ec.lo)):
            if jnp.result_type(half) != jnp.float32:
                raise ValueError(f"SceneInputs.edge_costs.{name} must be float32, got "
                                 f"{jnp.result_type(half)}")
        return DFloat(jnp.asarray(ec.hi), jnp.asarray(ec.lo))
    if scene.elevation_m is not None and jnp.result_type(scene.elevation_m) == jnp.float64:
        z = jnp.asarray(scene.elevation_m)
        return split_traced(edge_cost_field_by_index(
            z, scene.obstacles, scene.model_index, jnp.asarray(scene.weight, z.dtype),
            config.pixel_size_m))
    dtype = None if scene.elevation_m is None else jnp.result_type(scene.elevation_m)
    raise ValueError("the double-float path needs SceneInputs.edge_costs (edge costs computed "
                     "in float64 on the host and split into float32 pairs, see "
                     f"double_float_inputs) or a float64 elevation_m; got elevation_m {dtype}")


def init(scene: SceneInputs, config: SolverConfig) -> tuple[GridProblem, SolverState]:
    """The scene's constant :class:`GridProblem` and its initial :class:`SolverState`
    (``V = 0`` at the goal, +inf elsewhere; phase 1 unless the strategy is ``"jacobi"``).
    ``config.precision`` (resolved now when ``"auto"``) picks the float64 path (edge
    costs from ``elevation_m`` in its dtype) or the double-float path (pairs)."""
    goal = jnp.asarray(scene.goal, jnp.int32)
    if resolve_precision(config.precision) == "double_float":
        edge_costs = _pair_edge_costs(scene, config)
        goal_mask = cell_mask(edge_costs.shape[-2:], goal)
        values = DFloat(jnp.where(goal_mask, jnp.float32(0.0), jnp.float32(jnp.inf)),
                        jnp.zeros(goal_mask.shape, jnp.float32))
    else:
        if scene.elevation_m is None:
            raise ValueError("the float64 path needs SceneInputs.elevation_m, model_index and "
                             "weight (these inputs carry only double-float edge costs)")
        z = jnp.asarray(scene.elevation_m)
        edge_costs = edge_cost_field_by_index(z, scene.obstacles, scene.model_index,
                                              jnp.asarray(scene.weight, z.dtype),
                                              config.pixel_size_m)
        goal_mask = cell_mask(z.shape, goal)
        values = jnp.where(goal_mask, 0.0, jnp.inf).astype(z.dtype)
    directional = config.strategy == "sweep"
    problem = GridProblem(edge_costs=edge_costs,
                          sweep_costs=_sweep_costs(edge_costs) if directional else (),
                          goal_mask=goal_mask)
    zero = jnp.zeros((), jnp.int32)
    state = SolverState(values=values, sweeps=zero,
                        directional_sweeps=zero, changed=jnp.asarray(True),
                        phase=_DIRECTIONAL if directional else _EXACT)
    return problem, state


def step(problem: GridProblem, state: SolverState, config: SolverConfig) -> SolverState:
    """One block of ``config.check_every`` sweeps of the state's phase; ``changed`` is
    whether the block's last sweep changed a value."""
    ops = _ops_of(state.values)
    if state.phase == _DIRECTIONAL:
        def sweep(v):
            return _fast_sweep(v, problem.sweep_costs)

        def changed(prev, new):
            # monotone non-increasing; an inf -> finite change always counts
            return ops.any_less(new, prev)
    else:
        def sweep(v):
            return _exact_sweep(v, problem)

        def changed(prev, new):
            return ops.any_ne(new, prev)

    n = int(config.check_every)
    v = jax.lax.fori_loop(0, n - 1, lambda i, v: sweep(v), state.values)
    new = sweep(v)
    sweeps = state.sweeps + n
    directional = state.directional_sweeps + (n if state.phase == _DIRECTIONAL else 0)
    return state.replace(values=new, sweeps=sweeps, directional_sweeps=directional,
                         changed=changed(v, new))


def terminate(state: SolverState, config: SolverConfig) -> jax.Array:
    """The phase is over: its last block changed nothing, or one more block would
    pass ``config.max_sweeps``."""
    return ~state.changed | (state.sweeps + config.check_every > config.max_sweeps)


def _run_phase(problem, state, config):
    return jax.lax.while_loop(lambda s: ~terminate(s, config),
                              lambda s: step(problem, s, config), state)


def _run_phase_lockstep(problem, state, config):
    """:func:`_run_phase` for a batch of scenes (leading axis): the vmapped :func:`step`
    runs for every scene while any scene is active; a terminated scene keeps its
    counters.

    ``jax.vmap(_run_phase)`` would select every scene's values between old and new
    after each block, as much memory traffic as a third of a sweep (measured 1.4x
    slower lock step on CPU). Instead, the first loop does not select values: a scene
    that stopped because a block changed nothing is at a fixed point of its sweeps, so
    stepping it again leaves its values as they are. It ends when a scene is stopped
    by the budget while others still run (phase-1 sweep counts differ between
    scenes); only the second loop, for that rare case, selects values.
    """
    batched_step = jax.vmap(partial(step, config=config), in_axes=(_problem_axes(config), 0))

    def advance(s, select_values):
        active = ~terminate(s, config)
        new = batched_step(problem, s)

        def keep(n, o):
            return jnp.where(jnp.reshape(active, active.shape + (1,) * (n.ndim - 1)), n, o)

        values = _tmap(keep, new.values, s.values) if select_values else new.values
        return new.replace(values=values, sweeps=keep(new.sweeps, s.sweeps),
                           directional_sweeps=keep(new.directional_sweeps, s.directional_sweeps),
                           changed=keep(new.changed, s.changed))

    def running(s):
        return jnp.any(~terminate(s, config))

    def none_stopped_by_budget(s):
        return ~jnp.any(terminate(s, config) & s.changed)

    state = jax.lax.while_loop(lambda s: running(s) & none_stopped_by_budget(s),
                               lambda s: advance(s, False), state)
    return jax.lax.while_loop(running, lambda s: advance(s, True), state)


def _problem_axes(config: SolverConfig) -> GridProblem:
    """Batch axes of a lock-step :class:`GridProblem`: the sweep planes carry the batch
    on axis 1, (n, B, m), where ``lax.scan`` of a vmapped sweep wants it (axis 0
    would cost a transpose of every plane on every sweep)."""
    planes = ((1, 1, 1),) * len(_FS_SCANS) if config.strategy == "sweep" else ()
    return GridProblem(edge_costs=0, sweep_costs=planes, goal_mask=0)


def _solve(problem, state, config, run_phase):
    """Phase 1 (``"sweep"``), then the exact phase, with the phase driver ``run_phase``."""
    if state.phase == _DIRECTIONAL:
        state = run_phase(problem, state, config)
        # the exact phase starts as "changed"; after a phase 1 stopped by the budget
        # it cannot run a block either, so the scene ends unconverged
        state = state.replace(phase=_EXACT, changed=jnp.ones_like(state.changed))
    return run_phase(problem, state, config)


def _finish(scene: SceneInputs, problem: GridProblem, state: SolverState, *, with_routes: bool,
            max_len: int | None) -> VIOutput:
    """Post-process one scene's final state: c*, status and the optional route."""
    ops = _ops_of(state.values)
    converged = ~state.changed
    start = jnp.asarray(scene.start, jnp.int32)
    v_start = state.values[start[0], start[1]]
    status = jnp.where(~converged, STATUS_BUDGET,
                       jnp.where(ops.isinf(v_start), STATUS_UNREACHABLE, STATUS_OK))
    out = VIOutput(values=state.values, c_star=ops.nan_unless(converged, v_start),
                   sweeps=state.sweeps, directional_sweeps=state.directional_sweeps,
                   converged=converged, status=status.astype(jnp.int32))
    if not with_routes:
        return out
    h, w = state.values.shape[-2:]
    route, length = _descend(problem.edge_costs, state.values, start,
                             jnp.asarray(scene.goal, jnp.int32), h * w if max_len is None else max_len)
    return out.replace(route=route, route_length=jnp.where(status == STATUS_OK, length, 0))


def _with_precision(config: SolverConfig, precision: str) -> SolverConfig:
    """``config`` with its precision resolved: the ``precision`` argument unless it is
    ``"auto"``, else ``config.precision`` (see :func:`resolve_precision`)."""
    chosen = config.precision if precision == "auto" else precision
    return dataclasses.replace(config, precision=resolve_precision(chosen))


def solve_scene(scene: SceneInputs, config: SolverConfig = SolverConfig(), *,
                with_routes: bool = False, max_len: int | None = None,
                precision: str = "auto") -> VIOutput:
    """Solve one scene: :func:`init`, phase 1 (``"sweep"``), the exact phase, then
    c*, status and (``with_routes``) the descent route padded to ``max_len`` cells
    (``H*W`` by default). Pure; ``vmap`` it for a batch (:func:`vi_kernel`).
    ``precision``: ``"auto"`` (``config.precision``, then :func:`resolve_precision`),
    ``"float64"`` or ``"double_float"``."""
    config = _with_precision(config, precision)
    problem, state = init(scene, config)
    state = _solve(problem, state, config, _run_phase)
    return _finish(scene, problem, state, with_routes=with_routes, max_len=max_len)


def _solve_lockstep(scenes: SceneInputs, config: SolverConfig, *, with_routes: bool,
                    max_len: int | None) -> VIOutput:
    """:func:`solve_scene` for a batch in lock step: init, step and finish are the
    per-scene functions vmapped; one loop drives all scenes (see the note in
    :func:`vi_kernel`)."""
    axes = _problem_axes(config)
    problem, state = jax.vmap(partial(init, config=config), out_axes=(axes, 0))(scenes)
    state = _solve(problem, state, config, _run_phase_lockstep)
    finish = partial(_finish, with_routes=with_routes, max_len=max_len)
    return jax.vmap(finish, in_axes=(0, axes, 0))(scenes, problem, state)


def vi_kernel(scenes: SceneInputs, config: SolverConfig = SolverConfig(), *,
              with_routes: bool = False, max_len: int | None = None,
              chunk: int | None = None, precision: str = "auto", live=None) -> VIOutput:
    """:func:`solve_scene` over a batch of scenes (every field of ``scenes`` has a
    leading axis B), jitted. float64 needs x64; double-float runs with x64 off.

    ``chunk``: None solves the whole batch in lock step (one ``vmap``; best on
    accelerators); an int k solves chunks of k scenes one after another with
    ``lax.map``, each chunk stopping at its own convergence and staying in cache
    (best on CPU, k=1: one scene at a time, unbatched). ``precision`` as in
    :func:`solve_scene`, resolved at each call (before the jit cache). ``live``: None
    (every scene is solved) or a (B,) bool array; with ``chunk=1`` a scene that is not
    live (a padding row) is not solved at all and its outputs are zeros (in lock step
    every scene is solved). Returns a batched :class:`VIOutput` (status as int codes).
    """
    return _vi_kernel(scenes, live, _with_precision(config, precision), with_routes=with_routes,
                      max_len=max_len, chunk=chunk)


@partial(jax.jit, static_argnames=("config", "with_routes", "max_len", "chunk"))
def _vi_kernel(scenes: SceneInputs, live, config: SolverConfig, *, with_routes: bool,
               max_len: int | None, chunk: int | None) -> VIOutput:
    solve = partial(solve_scene, config=config, with_routes=with_routes, max_len=max_len)
    if chunk is None or 1 < jnp.shape(scenes.start)[0] <= chunk:
        return _solve_lockstep(scenes, config, with_routes=with_routes, max_len=max_len)
    if live is None or chunk != 1:
        return jax.lax.map(solve, scenes, batch_size=None if chunk == 1 else chunk)
    # one scene at a time: a padding row skips the solve (zeros of the solve's output types)
    blank = jax.eval_shape(solve, _tmap(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), scenes))

    def one(item):
        scene, is_live = item
        return jax.lax.cond(is_live, solve,
                            lambda _: _tmap(lambda t: jnp.zeros(t.shape, t.dtype), blank), scene)

    return jax.lax.map(one, (scenes, jnp.asarray(live, bool)))


# --------------------------------------------------------------------------- #
# Route extraction by descent
# --------------------------------------------------------------------------- #

def _descend(edge_costs, values, start, goal, max_len):
    """One scene's route by descent from ``start``: (max_len, 2) int32 padded with -1
    and its length (0 when the start's value is not finite or the goal is not reached
    within ``max_len`` cells)."""
    ops = _ops_of(values)
    move, backup = ops.descent_policy(values, edge_costs)
    moves = jnp.asarray(MOVES, jnp.int32)
    route = jnp.full((max_len, 2), -1, jnp.int32).at[0].set(start)
    finite = ops.isfinite(values[start[0], start[1]])
    active = finite & ~jnp.all(start == goal)

    def body(s):
        u, n, route, active = s
        ok = active & ops.isfinite(backup[u[0], u[1]])
        v = jnp.where(ok, u + moves[move[u[0], u[1]]], u)
        i = jnp.minimum(n, max_len - 1)
        route = route.at[i].set(jnp.where(ok, v, route[i]))
        n = n + ok.astype(jnp.int32)
        return v, n, route, ok & ~jnp.all(v == goal) & (n < max_len)

    u, n, route, _ = jax.lax.while_loop(lambda s: s[3], body,
                                        (start, jnp.ones((), jnp.int32), route, active))
    n = jnp.where(jnp.all(u == goal) & finite, n, 0)
    return jnp.where((jnp.arange(max_len) < n)[:, None], route, -1), n


# --------------------------------------------------------------------------- #
# Host entry points
# --------------------------------------------------------------------------- #

#: Grid cells per value-iteration kernel call and device: a call holds at most
#: ``rung_below(VI_CALL_CELLS // (H * W))`` scenes (1,024 at 64², 256 at 128², 64 at 256²,
#: 4 at 1024²), the same cap as a chunk of scenes held in memory (``CHUNK_CELLS``).
VI_CALL_CELLS = 1 << 22


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


def _padded_inputs(z, obst, start, goal, midx, w, n) -> SceneInputs:
    """The batch padded to ``n`` scenes with trivial ones: the first scene's elevation,
    model and weight, every cell blocked but (0, 0), which is both start and goal (they
    converge in one check block)."""
    pad = n - z.shape[0]

    def padb(a, fill=None):
        if not pad:
            return a
        extra = np.repeat(a[:1], pad, axis=0)
        if fill is not None:
            extra[...] = fill
        return np.concatenate([a, extra])

    pad_obst = np.ones(obst.shape[1:], bool)
    pad_obst[0, 0] = False
    return SceneInputs(elevation_m=padb(z), obstacles=padb(obst, pad_obst),
                       start=padb(start.astype(np.int32), 0), goal=padb(goal.astype(np.int32), 0),
                       model_index=padb(midx), weight=padb(np.asarray(w, np.float64)))


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


def _host_batch(elevation_m, obstacles, start, goal, model_index, weight):
    z = np.asarray(elevation_m, np.float64)
    obst = np.asarray(obstacles).astype(bool)
    start = np.asarray(start, np.int64).reshape(-1, 2)
    goal = np.asarray(goal, np.int64).reshape(-1, 2)
    B = z.shape[0] if z.ndim == 3 else -1
    midx = _model_indices(model_index, B)
    w = np.broadcast_to(np.asarray(weight, np.float64), (B,)) if B > 0 else np.asarray(weight)
    _check_inputs(z, obst, start, goal, midx, np.asarray(w))
    return z, obst, start, goal, midx, w


def double_float_inputs(elevation_m, obstacles, start, goal, model_index, weight, *,
                        pixel_size_m: float = 30.0) -> SceneInputs:
    """Host-built :class:`SceneInputs` of a batch for the double-float path (NumPy
    arrays; arguments as :func:`solve_batch`): edge costs computed in float64 and split
    into float32 pairs (``edge_costs``), obstacles, start and goal; elevation_m,
    model_index and weight are None. Pass them to :func:`vi_kernel` /
    :func:`solve_scene` with ``precision="double_float"`` under x64 off."""
    z, obst, start, goal, midx, w = _host_batch(elevation_m, obstacles, start, goal,
                                                model_index, weight)
    scenes = _padded_inputs(z, obst, start, goal, midx, w, z.shape[0])
    return _pair_inputs(scenes, z.shape[0], float(pixel_size_m))


def solve_batch(elevation_m, obstacles, start, goal, model_index, weight, *, max_sweeps=4096,
                check_every=2, strategy="sweep", sharding=None, bucket=True, routes=False,
                pixel_size_m=30.0, chunk="auto", precision="auto") -> VIResult:
    """Host entry point: exact value iteration on a batch of same-size scenes.

    ``model_index`` may be ints (``MODEL_INDEX``) or model names; ``weight`` one
    per scene or one for all. ``sharding`` (e.g. a ``NamedSharding`` over the batch
    axis) places the inputs. With ``bucket`` (default) the batch runs in the calls of
    :func:`call_sizes`: at most ``rung_below(VI_CALL_CELLS // (H * W))`` scenes per call
    and device, each call padded with trivial blocked scenes up to a rung of the one
    ladder of :mod:`passage_jax.shapes` (1, 2, 4, ..., 64, 96, 128, 192, ...; a multiple
    of the sharding's device count), so any number of scenes of one size compiles at
    most one kernel per rung up to that cap, the same rungs for every chunk; solved one
    at a time (CPU), a padding scene is skipped, and in lock step it converges in one
    block. ``bucket=False``: one call of exactly the batch (padded only to the device
    count). Every call is dispatched before any result is fetched. ``chunk="auto"``
    solves scenes one at a time on CPU and the whole call in lock step elsewhere or when
    sharded (see :func:`vi_kernel`). Always returns a :class:`VIResult`;
    ``routes=True`` fills its ``routes``. Results do not depend on the padding or the
    split into calls.

    ``precision`` (:func:`resolve_precision`, read at each call; ``"auto"`` defers to
    the environment variable ``PASSAGE_JAX_REFERENCE_PRECISION``): ``"float64"`` runs
    the kernel under ``jax.enable_x64(True)``; ``"double_float"`` computes the edge
    costs in float64 on the host, splits them into float32 pairs and runs the kernel
    under ``jax.enable_x64(False)``; values and c* come back as float64 either way,
    and ``VIResult.precision`` / ``precision_rtol`` say which path computed them.
    """
    precision = resolve_precision(precision)
    config = SolverConfig(max_sweeps=int(max_sweeps), check_every=int(check_every),
                          strategy=strategy, pixel_size_m=float(pixel_size_m),
                          precision=precision)
    z, obst, start, goal, midx, w = _host_batch(elevation_m, obstacles, start, goal,
                                                model_index, weight)
    B = z.shape[0]
    nd = sharding.num_devices if sharding is not None and hasattr(sharding, "num_devices") else 1
    sizes = (call_sizes(B, z.shape[1] * z.shape[2], nd) if bucket else []) or [-(-B // nd) * nd]
    if chunk == "auto":
        devs = sharding.device_set if sharding is not None else jax.devices()
        on_cpu = all(d.platform == "cpu" for d in devs)
        # sharded batches stay vectorised across devices
        chunk = 1 if on_cpu and sharding is None else None
    parts, lo = [], 0
    with jax.enable_x64(precision == "float64"):
        for size in sizes:  # every call dispatched before any result is fetched
            hi = min(B, lo + size)
            scenes = _padded_inputs(z[lo:hi], obst[lo:hi], start[lo:hi], goal[lo:hi],
                                    midx[lo:hi], w[lo:hi], size)
            if precision == "double_float":
                scenes = _pair_inputs(scenes, hi - lo, config.pixel_size_m)
            if sharding is not None:
                scenes = jax.device_put(scenes, sharding)
            live = np.arange(size) < hi - lo
            parts.append((hi - lo, vi_kernel(scenes, config, with_routes=bool(routes), chunk=chunk,
                                              live=live)))
            lo = hi
        outs = [_tmap(lambda a, k=k: a[:k], jax.device_get(o)) for k, o in parts]
    out = _tmap(lambda *a: a[0] if len(a) == 1 else np.concatenate(a), *outs)
    values, c_star = out.values, out.c_star
    if precision == "double_float":
        values, c_star = to_float64(values), to_float64(c_star)
    status = tuple(STATUS_NAMES[int(s)] for s in out.status)
    route_list = None
    if routes:
        rts, lens = out.route, out.route_length
        route_list = [rts[i, : lens[i]].astype(np.int32) if status[i] == "ok" and lens[i] > 0
                      else None for i in range(B)]
    return VIResult(values=values, c_star=c_star, sweeps=out.sweeps,
                    directional_sweeps=out.directional_sweeps,
                    converged=out.converged, status=status, routes=route_list,
                    precision=precision, precision_rtol=PRECISION_RTOL[precision])


_descend_jit = jax.jit(_descend, static_argnums=4)


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
    """:func:`_descend` in NumPy (the same float64 additions and tie-break)."""
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
