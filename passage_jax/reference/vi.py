"""Batched float64 value iteration on the 8-connected grid (SPEC §3.1).

``V(u) = min_k C[k, u] + V(u + MOVES[k])`` with ``V(goal) = 0``, where
``C[k, r, c]`` is the cost of the move from ``(r, c)`` by ``MOVES[k]``
(``passage_jax.graph.edge_cost_field_by_index``; ``+inf`` if illegal).

Two phases run inside one ``lax.while_loop`` each:

1. **Directional sweeps.** The default strategy ``"sweep"`` (fast sweeping) runs
   four ``lax.scan``s per sweep, over rows top->bottom and bottom->top and over
   columns left->right and right->left; each line relaxes the three moves whose
   successor lies in the previous line, with the additions in Dijkstra's order
   (``C + V(next)``), so straight and diagonal stretches of a route propagate
   across the whole grid in one sweep and the sweep count follows the route's
   turns, not its cells. ``"sequential"`` relaxes each of the 8 moves in turn
   along whole lines (rows, columns, both diagonals) with a sequential scan;
   ``"scan"`` does the same with a min-plus ``lax.associative_scan``, which
   reassociates the float additions so values can keep moving by an ulp: its
   phase stops when no cell changed by more than ``scan_rtol`` (relative).
   The exact strategies stop when a sweep changes nothing.
2. **Exact finish**: plain Bellman (Jacobi) sweeps ``V <- T(V)`` with the
   additions in Dijkstra's order, until a sweep changes nothing at all. ``T``
   has a unique fixed point in floating point (every step costs more than
   zero), so the result is the value a Dijkstra search from the goal with the
   same additions computes, independent of the sweep order.

Strategy ``"jacobi"`` skips phase 1 (exact Bellman sweeps from the start:
as many sweeps as the longest optimal route has cells). Convergence is checked
every ``check_every`` sweeps. Kernels are pure and jittable; the batch axis can
be sharded by the caller (``sharding=``) and runs unchanged on any device count.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.graph import MOVES, MODEL_INDEX, edge_cost_field_by_index

STATUS_NAMES = ("ok", "unreachable", "budget_exhausted")
STATUS_OK, STATUS_UNREACHABLE, STATUS_BUDGET = 0, 1, 2
STRATEGIES = ("sweep", "scan", "sequential", "jacobi")

_INF = np.inf


class VIResult(NamedTuple):
    """Batched value-iteration result.

    V: (B, H, W) cost-to-go (``+inf`` where the goal cannot be reached);
    c_star: (B,) ``V[start]`` (``+inf`` when unreachable, NaN when the sweep budget
    ran out first); sweeps: (B,) total sweeps until that scene stopped changing;
    scan_sweeps: (B,) of those, directional sweeps; converged: (B,) bool;
    status: (B,) int codes (``STATUS_NAMES``) in the kernel, names on the host.
    """

    V: object
    c_star: object
    sweeps: object
    scan_sweeps: object
    converged: object
    status: object
    route: object = None
    route_len: object = None


# --------------------------------------------------------------------------- #
# Line relaxation: along axis 1 of (B, n, m) arrays, forward direction:
#   V'[i] = min(V[i], A[i] + V'[i-1])   (V'[-1] = +inf)
# --------------------------------------------------------------------------- #

def _minplus_combine(x, y):
    """Compose the maps f(t) = min(b, a + t): x holds earlier lines, y later ones."""
    xa, xb = x
    ya, yb = y
    return xa + ya, jnp.minimum(yb, ya + xb)


def _relax_forward_assoc(V, A):
    _, b = jax.lax.associative_scan(_minplus_combine, (A, V), axis=1)
    return b


def _relax_forward_seq(V, A):
    def step(prev, ab):
        a, b = ab
        new = jnp.minimum(b, a + prev)
        return new, new

    init = jnp.full_like(V[:, 0], jnp.inf)
    _, out = jax.lax.scan(step, init, (jnp.moveaxis(A, 1, 0), jnp.moveaxis(V, 1, 0)))
    return jnp.moveaxis(out, 0, 1)


def _skew(x, fill):
    """(B, H, W) -> (B, H, W+H-1) with S[:, r, r + c] = x[:, r, c] (anti-diagonals
    become columns); ``fill`` elsewhere."""
    b, h, w = x.shape
    p = jnp.pad(x, ((0, 0), (0, 0), (0, h)), constant_values=fill)
    return p.reshape(b, h * (w + h))[:, : h * (w + h - 1)].reshape(b, h, w + h - 1)


def _unskew(s, w):
    b, h, _ = s.shape
    p = jnp.pad(s.reshape(b, -1), ((0, 0), (0, h)), constant_values=0)
    return p.reshape(b, h, w + h)[:, :, :w]


def _relax_move(V, A, dr, dc, relax):
    """Relax V along the move (dr, dc): V'(u) = min(V(u), A(u) + V'(u + (dr, dc)))."""
    w = V.shape[2]
    if dr == 0:  # horizontal: columns become axis 1
        V, A = jnp.swapaxes(V, 1, 2), jnp.swapaxes(A, 1, 2)
        rev = dc > 0
        out = _directed(V, A, rev, relax)
        return jnp.swapaxes(out, 1, 2)
    if dc == 0:  # vertical
        return _directed(V, A, dr > 0, relax)
    # diagonal: (dr, dc) with dr == dc lies on a main diagonal; flip columns so it
    # becomes an anti-diagonal, then skew anti-diagonals into columns of S.
    flip = dr == dc
    if flip:
        V, A = V[:, :, ::-1], A[:, :, ::-1]
    S = _directed(_skew(V, _INF), _skew(A, _INF), dr > 0, relax)
    out = _unskew(S, w)
    return out[:, :, ::-1] if flip else out


def _directed(V, A, reverse, relax):
    if reverse:
        return relax(V[:, ::-1], A[:, ::-1])[:, ::-1]
    return relax(V, A)


def _scan_sweep(V, C, relax):
    """One directional sweep: the 8 moves in MOVES order, each over whole lines."""
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        V = _relax_move(V, C[:, k], dr, dc, relax)
    return V


# Fast sweeping: a scan over the rows (or columns) in one direction relaxes the
# three moves whose successor lies in the previous line, so diagonal and straight
# stretches of a route propagate across the grid in one scan, with the additions
# in Dijkstra's order (exact).
_FS_SCANS = (
    # (axis, reverse, ((k, lateral offset of the successor), ...))
    (1, False, ((0, -1), (1, 0), (2, 1))),   # top -> bottom: successors in row r-1
    (1, True, ((5, -1), (6, 0), (7, 1))),    # bottom -> top: successors in row r+1
    (2, False, ((0, -1), (3, 0), (5, 1))),   # left -> right: successors in column c-1
    (2, True, ((2, -1), (4, 0), (7, 1))),    # right -> left: successors in column c+1
)


def _lateral(prev, dl):
    """prev[..., j + dl] with +inf outside."""
    if dl == 0:
        return prev
    edge = jnp.full_like(prev[:, :1], jnp.inf)
    if dl < 0:
        return jnp.concatenate([edge, prev[:, :-1]], axis=1)
    return jnp.concatenate([prev[:, 1:], edge], axis=1)


def _fs_prepare(C):
    """Per scan, its three cost planes laid out for ``lax.scan``: (n, 3, B, m),
    already transposed and reversed, so a sweep moves only V."""
    out = []
    for axis, reverse, moves in _FS_SCANS:
        A = jnp.stack([C[:, k] for k, _ in moves], axis=1)  # (B, 3, H, W)
        if axis == 2:
            A = jnp.swapaxes(A, 2, 3)
        A = jnp.moveaxis(A, 2, 0)  # (n, B, 3, m)
        A = jnp.swapaxes(A, 1, 2)  # (n, 3, B, m)
        out.append(A[::-1] if reverse else A)
    return out


def _fs_sweep(V, prepared):
    """One fast sweep (4 line scans); V is (B, H, W)."""
    for (axis, reverse, moves), A in zip(_FS_SCANS, prepared):
        Vt = jnp.swapaxes(V, 1, 2) if axis == 2 else V
        Vt = jnp.moveaxis(Vt, 1, 0)  # (n, B, m)
        if reverse:
            Vt = Vt[::-1]
        offs = [dl for _, dl in moves]

        def step(prev, xs, offs=offs):
            v, a = xs  # (B, m), (3, B, m)
            new = v
            for j, dl in enumerate(offs):
                new = jnp.minimum(new, a[j] + _lateral(prev, dl))
            return new, new

        init = jnp.full_like(Vt[0], jnp.inf)
        _, out = jax.lax.scan(step, init, (Vt, A))
        if reverse:
            out = out[::-1]
        out = jnp.moveaxis(out, 0, 1)
        V = jnp.swapaxes(out, 1, 2) if axis == 2 else out
    return V


def _shift(V, dr, dc):
    """out[:, r, c] = V[:, r + dr, c + dc] (+inf outside)."""
    h, w = V.shape[1:]
    p = jnp.pad(V, ((0, 0), (1, 1), (1, 1)), constant_values=jnp.inf)
    return p[:, 1 + dr:1 + dr + h, 1 + dc:1 + dc + w]


def _bellman(V, C, goal_mask):
    """Exact Bellman operator T: min_k C[k] + V(u + MOVES[k]); 0 at the goal."""
    best = None
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        cand = C[:, k] + _shift(V, dr, dc)
        best = cand if best is None else jnp.minimum(best, cand)
    return jnp.where(goal_mask, jnp.zeros_like(best), best)


def _phase(V, sweeps_done, budget, sweep_fn, changed_fn, check_every):
    """Run ``sweep_fn`` in blocks of ``check_every`` until no scene changed
    (``changed_fn(prev, new)`` per scene, on the block's last sweep) or the
    total sweep count would pass ``budget``. Returns V, per-scene sweep count at
    which the scene was last seen changing, per-scene done flags, total sweeps."""
    B = V.shape[0]

    def cond(state):
        _, _, done, total = state
        return jnp.logical_and(~jnp.all(done), total + check_every <= budget)

    def body(state):
        V, last, done, total = state
        V = jax.lax.fori_loop(0, check_every - 1, lambda i, v: sweep_fn(v), V)
        Vn = sweep_fn(V)
        total = total + check_every
        changed = changed_fn(V, Vn)
        last = jnp.where(done, last, total)
        done = done | ~changed
        return Vn, last, done, total

    init = (V, jnp.zeros((B,), jnp.int32), jnp.zeros((B,), bool), sweeps_done)
    return jax.lax.while_loop(cond, body, init)


def _reduce_hw(x):
    return jnp.any(x, axis=(1, 2))


@partial(jax.jit, static_argnames=("max_sweeps", "check_every", "strategy", "scan_rtol",
                                   "pixel_size_m", "with_routes", "max_len", "chunk"))
def vi_kernel(elevation_m, obstacles, start, goal, model_index, weight, *, max_sweeps=4096,
              check_every=2, strategy="sweep", scan_rtol=1e-12, pixel_size_m=30.0,
              with_routes=False, max_len=None, chunk=None):
    """Pure batched value iteration; see the module docstring.

    elevation_m (B, H, W) float, obstacles (B, H, W) bool, start/goal (B, 2) int,
    model_index (B,) int (``MODEL_INDEX``), weight (B,) float. float64 needs x64.
    ``chunk``: None solves the whole batch in lock step (one vectorised loop; best
    on accelerators); an int k (dividing B) solves chunks of k scenes one after
    another with ``lax.map``, each chunk stopping at its own convergence and
    staying in cache (best on CPU, k=1). Returns a :class:`VIResult` of arrays
    (status as int codes).
    """
    kw = dict(max_sweeps=max_sweeps, check_every=check_every, strategy=strategy,
              scan_rtol=scan_rtol, pixel_size_m=pixel_size_m, with_routes=with_routes,
              max_len=max_len)
    args = (jnp.asarray(elevation_m), obstacles, start, goal, model_index, weight)
    B = args[0].shape[0]
    if chunk is None or chunk >= B:
        return _vi_batch(*args, **kw)
    if B % chunk:
        raise ValueError(f"chunk={chunk} must divide the batch size {B}")
    split = [jnp.reshape(jnp.asarray(a), (B // chunk, chunk) + jnp.shape(a)[1:]) for a in args]
    out = jax.lax.map(lambda xs: _vi_batch(*xs, **kw), tuple(split))
    return jax.tree_util.tree_map(lambda a: jnp.reshape(a, (B,) + a.shape[2:]), out)


def _vi_batch(elevation_m, obstacles, start, goal, model_index, weight, *, max_sweeps,
              check_every, strategy, scan_rtol, pixel_size_m, with_routes, max_len):
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; known: {STRATEGIES}")
    z = jnp.asarray(elevation_m)
    B, H, W = z.shape
    C = jax.vmap(lambda zz, oo, mm, ww: edge_cost_field_by_index(zz, oo, mm, ww, pixel_size_m))(
        z, obstacles, model_index, jnp.asarray(weight, z.dtype))
    start = jnp.asarray(start, jnp.int32)
    goal = jnp.asarray(goal, jnp.int32)
    rr = jnp.arange(H)[None, :, None]
    cc = jnp.arange(W)[None, None, :]
    goal_mask = (rr == goal[:, 0, None, None]) & (cc == goal[:, 1, None, None])
    V0 = jnp.where(goal_mask, 0.0, jnp.inf).astype(z.dtype)
    zero = jnp.zeros((), jnp.int32)

    if strategy == "jacobi":
        scan_last = jnp.zeros((B,), jnp.int32)
        V1, scan_total = V0, zero
        scan_ok = jnp.ones((B,), bool)
    else:
        relax = _relax_forward_assoc if strategy == "scan" else _relax_forward_seq
        tol = scan_rtol if strategy == "scan" else 0.0
        if strategy == "sweep":
            prepared = _fs_prepare(C)
            sweep_fn = lambda v: _fs_sweep(v, prepared)  # noqa: E731
        else:
            sweep_fn = lambda v: _scan_sweep(v, C, relax)  # noqa: E731

        def scan_changed(prev, new):
            # monotone non-increasing; an inf -> finite change always counts
            return _reduce_hw(new < prev - tol * jnp.abs(new))

        V1, scan_last, scan_ok, scan_total = _phase(
            V0, zero, max_sweeps, sweep_fn, scan_changed, check_every)

    def exact_changed(prev, new):
        return _reduce_hw(new != prev)

    V2, fin_last, fin_ok, total = _phase(
        V1, scan_total, max_sweeps, lambda v: _bellman(v, C, goal_mask), exact_changed,
        check_every)
    converged = scan_ok & fin_ok
    # per scene: its own directional sweeps plus the exact sweeps it needed
    sweeps = scan_last + jnp.where(fin_ok, fin_last, total) - scan_total
    scan_sweeps = jnp.where(scan_ok, scan_last, scan_total)
    bidx = jnp.arange(B)
    v_start = V2[bidx, start[:, 0], start[:, 1]]
    status = jnp.where(~converged, STATUS_BUDGET,
                       jnp.where(jnp.isinf(v_start), STATUS_UNREACHABLE, STATUS_OK))
    c_star = jnp.where(converged, v_start, jnp.nan)
    route = route_len = None
    if with_routes:
        L = H * W if max_len is None else max_len
        route, route_len = _descend(C, V2, start, goal, L)
        route_len = jnp.where(status == STATUS_OK, route_len, 0)
    return VIResult(V2, c_star, sweeps, scan_sweeps, converged, status.astype(jnp.int32),
                    route, route_len)


# --------------------------------------------------------------------------- #
# Route extraction by descent
# --------------------------------------------------------------------------- #

def _policy(C, V):
    """Descent policy: (B, H, W) first k (MOVES order) among the exact minima of
    C[k, u] + V[u + MOVES[k]], and that minimum."""
    best = kbest = None
    for k, (dr, dc) in enumerate(MOVES.tolist()):
        q = C[:, k] + _shift(V, dr, dc)
        if best is None:
            best, kbest = q, jnp.zeros(q.shape, jnp.int32)
        else:
            better = q < best  # strict: the earlier k wins ties
            best = jnp.where(better, q, best)
            kbest = jnp.where(better, k, kbest)
    return kbest, best


def _descend(C, V, start, goal, max_len):
    """Batched route by descent from ``start``: (B, max_len, 2) int32 routes padded
    with -1 and (B,) lengths (0 when the start's value is not finite or the goal
    is not reached within ``max_len`` cells)."""
    B = V.shape[0]
    kbest, best = _policy(C, V)
    moves = jnp.asarray(MOVES)
    bidx = jnp.arange(B)
    route = jnp.full((B, max_len, 2), -1, jnp.int32).at[:, 0].set(start)
    finite = jnp.isfinite(V[bidx, start[:, 0], start[:, 1]])
    active = finite & ~jnp.all(start == goal, axis=1)

    def cond(s):
        return jnp.any(s[3])

    def body(s):
        u, n, route, active = s
        k = kbest[bidx, u[:, 0], u[:, 1]]
        ok = active & jnp.isfinite(best[bidx, u[:, 0], u[:, 1]])
        v = jnp.where(ok[:, None], u + moves[k], u)
        route = route.at[bidx, jnp.minimum(n, max_len - 1)].set(
            jnp.where(ok[:, None], v, route[bidx, jnp.minimum(n, max_len - 1)]))
        n = n + ok.astype(jnp.int32)
        active = ok & ~jnp.all(v == goal, axis=1) & (n < max_len)
        return v, n, route, active

    init = (start, jnp.ones((B,), jnp.int32), route, active)
    u, n, route, _ = jax.lax.while_loop(cond, body, init)
    reached = jnp.all(u == goal, axis=1) & finite
    n = jnp.where(reached, n, 0)
    route = jnp.where((jnp.arange(max_len)[None, :] < n[:, None])[..., None], route, -1)
    return route, n


# --------------------------------------------------------------------------- #
# Host entry points
# --------------------------------------------------------------------------- #

def _bucket(n: int) -> int:
    """Next power of two >= n (batch sizes are padded to it to limit recompiles)."""
    return 1 << max(0, int(n) - 1).bit_length()


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


def solve_batch(elevation_m, obstacles, start, goal, model_index, weight, *, max_sweeps=4096,
                check_every=2, strategy="sweep", scan_rtol=1e-12, sharding=None, bucket=True,
                routes=False, pixel_size_m=30.0, chunk="auto"):
    """Host entry point: float64 value iteration on a batch of same-size scenes.

    ``model_index`` may be ints (``MODEL_INDEX``) or model names. ``sharding``
    (e.g. a ``NamedSharding`` over the batch axis) places the inputs; the batch is
    padded to a power of two (``bucket``) with copies of the first scene to limit
    recompiles. ``chunk="auto"`` solves scenes one at a time on CPU and the whole
    batch in lock step elsewhere (see :func:`vi_kernel`). Returns a :class:`VIResult` of NumPy arrays with ``status`` as a
    tuple of names; with ``routes=True`` returns ``(result, [route (L, 2) int32 or
    None per scene])``.
    """
    z = np.asarray(elevation_m, np.float64)
    obst = np.asarray(obstacles).astype(bool)
    start = np.asarray(start, np.int64).reshape(-1, 2)
    goal = np.asarray(goal, np.int64).reshape(-1, 2)
    B = z.shape[0] if z.ndim == 3 else -1
    midx = _model_indices(model_index, B)
    w = np.broadcast_to(np.asarray(weight, np.float64), (B,)) if B > 0 else np.asarray(weight)
    _check_inputs(z, obst, start, goal, midx, np.asarray(w))
    n = _bucket(B) if bucket else B
    if sharding is not None and hasattr(sharding, "num_devices"):
        nd = sharding.num_devices
        n = -(-n // nd) * nd
    pad = n - B

    def padb(a, fill=None):
        if not pad:
            return a
        extra = np.repeat(a[:1], pad, axis=0)
        if fill is not None:
            extra[...] = fill
        return np.concatenate([a, extra])

    # padding scenes are trivial (every cell blocked but (0, 0), which is both
    # start and goal), so they converge in one check block
    pad_obst = np.ones(obst.shape[1:], bool)
    pad_obst[0, 0] = False
    args = [padb(z), padb(obst, pad_obst), padb(start.astype(np.int32), 0),
            padb(goal.astype(np.int32), 0), padb(midx), padb(np.asarray(w, np.float64))]
    if chunk == "auto":
        devs = sharding.device_set if sharding is not None else jax.devices()
        chunk = 1 if all(d.platform == "cpu" for d in devs) else None
        if chunk is not None and sharding is not None:
            chunk = None  # keep sharded batches vectorised across devices
    with jax.enable_x64(True):
        if sharding is not None:
            args = [jax.device_put(a, sharding) for a in args]
        res = vi_kernel(*args, max_sweeps=int(max_sweeps), check_every=int(check_every),
                        strategy=strategy, scan_rtol=float(scan_rtol),
                        pixel_size_m=float(pixel_size_m), with_routes=bool(routes), chunk=chunk)
        out = VIResult(
            V=np.asarray(res.V)[:B], c_star=np.asarray(res.c_star)[:B],
            sweeps=np.asarray(res.sweeps)[:B], scan_sweeps=np.asarray(res.scan_sweeps)[:B],
            converged=np.asarray(res.converged)[:B],
            status=tuple(STATUS_NAMES[int(s)] for s in np.asarray(res.status)[:B]))
        if not routes:
            return out
        rts, lens = np.asarray(res.route)[:B], np.asarray(res.route_len)[:B]
    route_list = [rts[i, : lens[i]].astype(np.int32) if out.status[i] == "ok" and lens[i] > 0
                  else None for i in range(B)]
    return out, route_list


def descend_route(C, V, start, goal) -> np.ndarray | None:
    """Host descent on one scene's field ``C`` (8, H, W) and ``V`` (H, W):
    (L, 2) int32 route, or None when the start cannot reach the goal."""
    with jax.enable_x64(True):
        r, n = jax.jit(_descend, static_argnums=4)(
            jnp.asarray(C)[None], jnp.asarray(V)[None], jnp.asarray(start, jnp.int32)[None],
            jnp.asarray(goal, jnp.int32)[None], int(np.prod(np.shape(V))))
        r, n = np.asarray(r)[0], int(n[0])
    return r[:n].astype(np.int32) if n > 0 else None
