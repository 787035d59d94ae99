"""Exact value iteration on the 8-connected grid (contract §3.1): the kernel, one scene at a time.

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
``MOVES`` order among the exact minima). Two arithmetic paths (``precision``,
:func:`passage_jax.precision.resolve_reference_precision`): ``"float64"`` (x64 on) and
``"double_float"`` (x64 off: the edge costs come as float32 pairs, the same sweeps,
convergence tests and descent run on :class:`~passage_jax.reference.dfloat.DFloat`
pairs); :mod:`passage_jax.reference.vi_ops` supplies each path's arithmetic. The host
driver (validation, padding, calls of stable shapes, NumPy results) is
:mod:`passage_jax.reference.vi`.
"""
from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
from flax import struct

from passage_jax.graph import MOVES, edge_cost_field_by_index
from passage_jax.graph.grid import cell_mask
from passage_jax.precision import REFERENCE_PRECISIONS as PRECISIONS
from passage_jax.precision import resolve_reference_precision as resolve_precision
from passage_jax.reference.dfloat import DFloat, split_traced
from passage_jax.reference.vi_ops import FloatOps, ops_of, tmap

__all__ = [
    "STATUS_NAMES", "STATUS_OK", "STATUS_UNREACHABLE", "STATUS_BUDGET", "STRATEGIES",
    "SceneInputs", "SolverConfig", "GridProblem", "SolverState", "VIOutput",
    "init", "step", "terminate", "solve_scene", "vi_kernel", "descend",
]

STATUS_NAMES = ("ok", "unreachable", "budget_exhausted")
STATUS_OK, STATUS_UNREACHABLE, STATUS_BUDGET = 0, 1, 2
#: Sweep strategies kept by measurement (docs/reference.md): fast sweeping (default)
#: and plain Jacobi (the comparison).
STRATEGIES = ("sweep", "jacobi")

_DIRECTIONAL, _EXACT = "directional", "exact"

# --------------------------------------------------------------------------- #
# Pytrees
# --------------------------------------------------------------------------- #

@struct.dataclass
class SceneInputs:
    """One scene's inputs (add a leading batch axis to every field for a batch).

    elevation_m (H, W) float; obstacles (H, W) bool; start, goal (2,) int32 (row, col);
    model_index () int32 (``MODEL_INDEX``); weight () float; edge_costs: None, or the
    double-float path's edge costs, a :class:`~passage_jax.reference.dfloat.DFloat` of
    (8, H, W) float32 halves computed in float64 on the host
    (:func:`~passage_jax.reference.vi.double_float_inputs`; then elevation_m, model_index
    and weight may be None: that path reads only edge_costs, start and goal).
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



def _lateral(prev, dl, ops=FloatOps):
    """prev[j + dl] along a line, +inf outside."""
    if dl == 0:
        return prev
    edge = ops.inf_like(tmap(lambda a: a[:1], prev))
    if dl < 0:
        return tmap(lambda e, p: jnp.concatenate([e, p[:-1]]), edge, prev)
    return tmap(lambda e, p: jnp.concatenate([p[1:], e]), edge, prev)


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
    ops = ops_of(values)
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
    ops = ops_of(values)
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
    ops = ops_of(state.values)
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

        values = tmap(keep, new.values, s.values) if select_values else new.values
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
    ops = ops_of(state.values)
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
    route, length = descend(problem.edge_costs, state.values, start,
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
    blank = jax.eval_shape(solve, tmap(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), scenes))

    def one(item):
        scene, is_live = item
        return jax.lax.cond(is_live, solve,
                            lambda _: tmap(lambda t: jnp.zeros(t.shape, t.dtype), blank), scene)

    return jax.lax.map(one, (scenes, jnp.asarray(live, bool)))


# --------------------------------------------------------------------------- #
# Route extraction by descent
# --------------------------------------------------------------------------- #

def descend(edge_costs, values, start, goal, max_len):
    """One scene's route by descent from ``start``: (max_len, 2) int32 padded with -1
    and its length (0 when the start's value is not finite or the goal is not reached
    within ``max_len`` cells)."""
    ops = ops_of(values)
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
