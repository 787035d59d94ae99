"""Host entry point: ragged, possibly malformed routes -> per-task metric arrays.

The shell normalises each candidate (without rounding or clipping anything),
groups tasks by grid shape, buckets route lengths to powers of two so a large
batch compiles only a handful of times, pads, runs the jitted
:data:`~passage_jax.metrics.kernels.score_batch` under scoped float64, and
scatters the results back into task order.
"""
from __future__ import annotations

from collections import defaultdict

import jax
import numpy as np

from passage_jax.graph.costs import MODEL_INDEX
from passage_jax.graph.routes import route_problem
from passage_jax.graph.costs import crop_stats
from passage_jax.metrics.kernels import METRIC_KEYS, score_batch_gathered

#: Smallest padded route length (shorter routes share this bucket).
MIN_BUCKET = 32
#: Upper bounds on one kernel call's working set (elements).
_MAX_PAIR_ELEMS = 1 << 25  # tasks * La * Lb (int32 squared distances)
_MAX_BATCH = 512
#: Padded batch sizes (a chunk is padded to the first that holds it).
_BATCH_SIZES = (8, 16, 32, 64, 128, 256, 512)
_INT32 = np.iinfo(np.int32)

_DTYPES = {
    "connected_path": bool, "obstacle_traversals": np.int64, "obstacle_violation": bool,
    "valid_path": bool, "success": bool,
}


def normalise_candidate(route):
    """(cells (L, 2) int32, reason) for a candidate route.

    ``reason`` is None for a well-formed route (possibly empty, possibly out of
    bounds or disconnected: those are judged by the kernels) and a string
    otherwise; a malformed route is returned as an empty array. Malformed means:
    None, not convertible to an array, not of shape (L, 2), a non-integer dtype
    (floats, even integral ones such as 3.0, bools, objects), or a coordinate
    outside the int32 range. Nothing is rounded or clipped.
    """
    empty = np.zeros((0, 2), np.int32)
    if route is None:
        return empty, "route is None"
    try:
        a = np.asarray(route)
    except (ValueError, TypeError) as e:  # ragged nested lists and the like
        return empty, f"route is not an array: {e}"
    if a.size == 0:
        return empty, None
    if a.ndim != 2 or a.shape[1] != 2:
        return empty, f"route must have shape (L, 2), got {a.shape}"
    if a.dtype.kind not in "iu":
        return empty, f"route coordinates must be integers, got dtype {a.dtype}"
    if a.dtype.kind == "u":
        if int(a.max()) > _INT32.max:
            return empty, "route coordinate beyond the int32 range"
    elif int(a.min()) < _INT32.min or int(a.max()) > _INT32.max:
        return empty, "route coordinate beyond the int32 range"
    return np.ascontiguousarray(a, dtype=np.int32), None


def _bucket(n: int) -> int:
    return max(MIN_BUCKET, 1 << max(int(n) - 1, 0).bit_length())


def _reference_array(task, ref, i):
    where = f"task {i} (scene {task.id}, {task.objective}/{task.variant})"
    problem = route_problem(ref, task.scene.start, task.scene.goal, task.obstacles)
    if problem is not None:
        raise ValueError(f"{where}: reference route is not a legal route: {problem}")
    return np.asarray(ref, np.int32)


def score_routes(candidates, tasks, c_star, request_ok, references=None,
                 pixel_size_m: float = 30.0) -> dict:
    """Score candidate routes against their tasks (SPEC §4).

    Parameters
    ----------
    candidates : sequence of length N; each a ragged route (anything: malformed
        input makes that route invalid, see :func:`normalise_candidate`).
    tasks : sequence of N :class:`passage_jax.data.scene.Task`; the cost model
        is ``task.objective`` with ``task.weight``; obstacles are
        ``task.obstacles`` (cleared for the free variant).
    c_star : (N,) float64 exact optimal costs.
    request_ok : (N,) bool, True iff the request ended with status ``ok``
        before its deadline.
    references : optional N reference routes for the geometry (default
        ``task.route``); a reference that is not a legal route raises
        ValueError naming the task.

    Returns a dict of (N,) NumPy arrays keyed by ``METRIC_KEYS`` plus
    ``malformed`` (bool) and ``problem`` (object array of str/None: why a
    candidate was malformed).
    """
    n = len(tasks)
    if len(candidates) != n:
        raise ValueError(f"{len(candidates)} candidates for {n} tasks")
    c_star = np.asarray(c_star, np.float64).reshape(-1)
    request_ok = np.asarray(request_ok).reshape(-1)
    if c_star.shape[0] != n:
        raise ValueError(f"c_star has {c_star.shape[0]} entries for {n} tasks")
    if request_ok.shape[0] != n:
        raise ValueError(f"request_ok has {request_ok.shape[0]} entries for {n} tasks")
    if request_ok.dtype != bool:
        raise ValueError(f"request_ok must be bool, got dtype {request_ok.dtype}")
    if references is None:
        references = [t.route for t in tasks]
    elif len(references) != n:
        raise ValueError(f"{len(references)} references for {n} tasks")

    cands, problems, refs = [], [], []
    for i, (cand, task, ref) in enumerate(zip(candidates, tasks, references)):
        if task.objective not in MODEL_INDEX:
            raise ValueError(f"task {i} (scene {task.id}): unknown cost model {task.objective!r}")
        a, why = normalise_candidate(cand)
        cands.append(a)
        problems.append(why)
        refs.append(_reference_array(task, ref, i))

    groups = defaultdict(list)
    for i, task in enumerate(tasks):
        shape = tuple(np.shape(task.obstacles))
        groups[(shape, _bucket(len(cands[i])), _bucket(len(refs[i])))].append(i)

    out = {k: np.empty(n, _DTYPES.get(k, np.float64)) for k in METRIC_KEYS}
    stats_cache = {}  # crop statistics per elevation grid (the array is kept alive with them)
    with jax.enable_x64(True):
        for (shape, la, lb), idx in sorted(groups.items()):
            h, w = shape
            chunk = max(1, min(_MAX_BATCH, _MAX_PAIR_ELEMS // (la * lb)))
            chunk = 1 << (chunk.bit_length() - 1)
            # tasks of one scene together, so a chunk holds few distinct grids
            for s in range(0, len(idx), chunk):
                part = idx[s:s + chunk]
                size = next((b for b in _BATCH_SIZES if b >= len(part) and b <= chunk), chunk)
                res = _run_chunk(part, size, shape, la, lb, cands, refs, tasks, c_star,
                                 request_ok, problems, pixel_size_m, stats_cache)
                for k in METRIC_KEYS:
                    out[k][part] = res[k][:len(part)]
    out["malformed"] = np.array([p is not None for p in problems], bool)
    out["problem"] = np.array(problems, dtype=object)
    return out


def _run_chunk(part, size, shape, la, lb, cands, refs, tasks, c_star, request_ok, problems,
               pixel_size_m, stats_cache):
    h, w = shape
    cand = np.zeros((size, la, 2), np.int32)
    ref = np.zeros((size, lb, 2), np.int32)
    cl = np.zeros(size, np.int32)
    rl = np.zeros(size, np.int32)
    starts = np.zeros((size, 2), np.int32)
    goals = np.zeros((size, 2), np.int32)
    on_obst = np.zeros((size, la), bool)
    zc = np.zeros((size, la), np.float64)
    stats = np.zeros((3, size), np.float64)
    model = np.zeros(size, np.int32)
    weight = np.zeros(size, np.float64)
    cs = np.ones(size, np.float64)
    ok = np.zeros(size, bool)
    wf = np.zeros(size, bool)
    for j, i in enumerate(part):
        t = tasks[i]
        a = cands[i]
        cand[j, :len(a)] = a
        cl[j] = len(a)
        if len(a):
            # read the grid at in-bounds cells only; out-of-bounds cells stay masked
            inb = (a[:, 0] >= 0) & (a[:, 0] < h) & (a[:, 1] >= 0) & (a[:, 1] < w)
            rr, cc = a[inb, 0], a[inb, 1]
            on_obst[j, :len(a)][inb] = np.asarray(t.obstacles, bool)[rr, cc]
            zc[j, :len(a)][inb] = t.elevation_m[rr, cc]
        key = id(t.scene.elevation_m)
        if key not in stats_cache:
            stats_cache[key] = (t.scene.elevation_m, np.array(crop_stats(
                np.asarray(t.elevation_m, np.float64), np), np.float64))
        stats[:, j] = stats_cache[key][1]
        ref[j, :len(refs[i])] = refs[i]
        rl[j] = len(refs[i])
        starts[j] = t.scene.start
        goals[j] = t.scene.goal
        model[j] = MODEL_INDEX[t.objective]
        weight[j] = t.weight
        cs[j] = c_star[i]
        ok[j] = request_ok[i]
        wf[j] = problems[i] is None
    res = score_batch_gathered(cand, cl, ref, rl, starts, goals, shape, on_obst, zc, stats[0],
                               stats[1], stats[2], model, weight, cs, ok, wf,
                               pixel_size_m=float(pixel_size_m))
    return {k: np.asarray(v) for k, v in jax.device_get(res).items()}
