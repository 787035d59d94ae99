"""Benchmark: kernel compilations of chunked scoring and value iteration (issue 22, stable shapes).

A run is scored and its references solved chunk by chunk (``passage_jax.data.chunk_scenes``:
64 scenes at 256², 1,024 at 64²). Before issue 22 each chunk's route-length buckets ran in
calls sized to the chunk (up to eight batch shapes per bucket), so most chunks compiled new
kernels; now every call of a length rung has one fixed size and value-iteration batches
are padded up to rungs of one ladder (``passage_jax.shapes``), so the kernels compile once
and every later chunk reuses them.

Material: shipped real-terrain scenes of one resolution (all splits, reused cyclically up
to ``--scenes``; task keys in turn), two records per scene as in a cold + warm run (a
candidate of varied kind and length: exact, another objective's route, detoured, broken;
and the exact route), scored in chunks of ``--chunk`` scenes with ``score_routes`` as
``python -m cli score`` does; then the chunks' references solved by value iteration as
admission does (``qualify_scenes``, one task key per scene, no cross-check). Each stage
runs twice in this process after ``jax.clear_caches()``: with the shapes before issue 22
(the legacy policy, installed by replacing the two call-plan helpers
``passage_jax.metrics.host._call_plan`` and ``passage_jax.reference.vi.call_sizes``) and
with the current ones. Flags, counts and NaNs of both are checked identical and floats
equal to 1e-12 (a float sum's order follows the call's batch shape, so a few records
differ in the last bits); c* identical. It also counts the records whose metrics differ
between their chunk and one call of every record: before, some; now, none (a call's
shape no longer depends on the chunk).

    python bench/compile_counts.py --quick   # 64², 200 scenes (400 records), chunks of 64
    python bench/compile_counts.py           # 256², 400 scenes (800 records), chunks of 64

Last line: ``speedup: <compilations before / compilations now>`` of the scoring stage.
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import time

import jax
import numpy as np

import passage_jax.data as data
from passage_jax.compilation import CompileCounter
from passage_jax.metrics import METRIC_KEYS, host, score_routes
from passage_jax.reference import TASK_KEYS, qualify_scenes, vi
from passage_jax.shapes import rung_below, rungs
from passage_jax.testing import candidate_set


def legacy_call_plan(length, n, n_dev=1, pairwise=True):
    """The metric kernels' call sizes before issue 22: the calls of a bucket evenly filled
    and rounded up to an eighth of the largest call (up to eight shapes per bucket,
    chosen by how many tasks the chunk has in it)."""
    per_task = length * length if pairwise else length
    most = max(1, min(host._MAX_BATCH, (host._PAIR_BUDGET if pairwise else host._CELL_BUDGET) // per_task))
    if n_dev > 1:
        most = -(-most // 8) * 8 * n_dev
    calls = -(-n // most)
    step = max(1, most // 8)
    per_call = -(-n // calls)
    size = min(most, -(-per_call // step) * step)
    return size, -(-n // size)


def legacy_call_sizes(n_scenes, cells, n_dev=1):
    """Value iteration's batch before issue 22: one call, padded to a power of two."""
    n = 1 << max(0, int(n_scenes) - 1).bit_length()
    return [-(-n // n_dev) * n_dev]


@contextlib.contextmanager
def shapes(legacy: bool):
    saved = host._call_plan, vi.call_sizes
    if legacy:
        host._call_plan, vi.call_sizes = legacy_call_plan, legacy_call_sizes
    try:
        yield
    finally:
        host._call_plan, vi.call_sizes = saved


def material(res: int, n_scenes: int, seed: int = 0):
    root = data.shipped_cohort_root()
    pool = [s for split in ("test", "validation", "calibration")
            for s in data.load_scenes(root, res, split, n_samples=None)]
    rng = np.random.default_rng(seed)
    scenes, keys, tasks, cands, c_star = [], [], [], [], []
    for i in range(n_scenes):
        s = pool[i % len(pool)]
        key = TASK_KEYS[(i + i // len(pool)) % len(TASK_KEYS)]
        t = s.task(*key.split("/"))
        scenes.append(s)
        keys.append(key)
        alt = candidate_set(s, t.objective, t.variant, rng, 8)[i % 8]
        for c in (alt, np.asarray(t.route, np.int32)):  # cold and warm records
            tasks.append(t)
            cands.append(c)
            c_star.append(s.metadata["c_star"][key])
    return scenes, keys, tasks, cands, np.asarray(c_star, np.float64), len(pool)


def score_stage(tasks, cands, c_star, n_scenes, chunk):
    ok = np.ones(len(tasks), bool)
    per_chunk, outs = [], []
    t0 = time.perf_counter()
    with CompileCounter() as total:
        for lo in range(0, n_scenes, chunk):
            p = slice(2 * lo, 2 * min(n_scenes, lo + chunk))
            with CompileCounter() as c:
                outs.append(score_routes(cands[p], tasks[p], c_star[p], ok[p],
                                         references=[t.route for t in tasks[p]]))
            per_chunk.append(c.stats.compilations)
    wall = time.perf_counter() - t0
    out = {k: np.concatenate([o[k] for o in outs]) for k in METRIC_KEYS}
    return total.stats, per_chunk, wall, out


def vi_stage(scenes, keys, chunk):
    per_chunk, c_star = [], []
    t0 = time.perf_counter()
    with CompileCounter() as total:
        for lo in range(0, len(scenes), chunk):
            # admission: one task key per run (here the chunk's first scene's key)
            key = keys[lo]
            with CompileCounter() as c:
                q = qualify_scenes(scenes[lo:lo + chunk], keys=[key], cross_check=False)
            per_chunk.append(c.stats.compilations)
            c_star += [d[key].c_star for d in q]
    return total.stats, per_chunk, time.perf_counter() - t0, np.asarray(c_star)


def _differing(a, b) -> int:
    """Records whose float metrics are not bit-identical (NaN equals NaN)."""
    bad = np.zeros(len(a["regret"]), bool)
    for k in ("predicted_cost", "regret", "assd", "h95", "path_iou"):
        bad |= ~((a[k] == b[k]) | (np.isnan(a[k]) & np.isnan(b[k])))
    return int(bad.sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64², 200 scenes instead of 256², 400")
    ap.add_argument("--resolution", type=int, default=None)
    ap.add_argument("--scenes", type=int, default=None)
    ap.add_argument("--chunk", type=int, default=64, help="scenes per chunk (default 64)")
    ap.add_argument("--no-vi", action="store_true", help="skip the value-iteration stage")
    args = ap.parse_args(argv)
    res = args.resolution or (64 if args.quick else 256)
    n_scenes = args.scenes or (200 if args.quick else 400)

    scenes, keys, tasks, cands, c_star, pool = material(res, n_scenes)
    n_chunks = -(-n_scenes // args.chunk)
    lengths = [max(len(np.asarray(c).reshape(-1, 2)), len(t.route)) for c, t in zip(cands, tasks)]
    present = sorted({host._bucket(v) for v in lengths})
    cap = rung_below(vi.VI_CALL_CELLS // (res * res))
    print(f"platform: {platform.processor() or platform.machine()}, {jax.devices()[0].platform}, "
          f"jax {jax.__version__}")
    print(f"material: {n_scenes} scenes at {res}² ({pool} shipped, reused), {len(tasks)} records, "
          f"{n_chunks} chunks of {args.chunk} scenes; route-length rungs present {present}")
    print(f"stated bound: scoring <= 1 kernel per length rung (<= {len(rungs(host.LONG_ROUTE, 32))} "
          f"for routes <= {host.LONG_ROUTE} cells; here {len(present)}); value iteration <= 1 per "
          f"batch rung up to {cap} scenes ({len(rungs(cap))} rungs at {res}²)")
    print()
    print(f"{'stage':<38}{'compilations':>13}{'compile s':>11}{'trace s':>9}{'wall s':>8}  per chunk")
    results = {}
    for stage in ("score", "vi"):
        if stage == "vi" and args.no_vi:
            continue
        for legacy in (True, False):
            jax.clear_caches()
            with shapes(legacy):
                if stage == "score":
                    stats, per, wall, out = score_stage(tasks, cands, c_star, n_scenes, args.chunk)
                    # the same records in one call: does a record's result depend on its chunk?
                    whole = score_routes(cands, tasks, c_star, np.ones(len(tasks), bool),
                                         references=[t.route for t in tasks])
                    out = out, _differing(out, whole)
                else:
                    stats, per, wall, out = vi_stage(scenes, keys, args.chunk)
            results[stage, legacy] = stats, out
            label = f"{'score_routes' if stage == 'score' else 'qualify_scenes (VI)'}, " + (
                "before (legacy)" if legacy else "now")
            print(f"{label:<38}{stats.compilations:>13}{stats.compile_s:>11.2f}{stats.trace_s:>9.2f}"
                  f"{wall:>8.2f}  {per}")
    print()
    (old, old_vs_whole), (new, new_vs_whole) = results["score", True][1], results["score", False][1]
    for k in METRIC_KEYS:  # flags, counts and NaNs identical; floats to a few ulp
        a, b = old[k], new[k]
        if a.dtype.kind == "f":
            assert np.array_equal(np.isnan(a), np.isnan(b)), k
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=k)
        else:
            assert np.array_equal(a, b), k
    print(f"metrics before vs now: flags, counts and NaNs identical; floats within 1e-12 "
          f"({_differing(old, new)} of {len(tasks)} records differ in the last bits: a sum's order "
          f"follows the call's batch shape)")
    print(f"records whose metrics differ between their chunk and one call of all records: "
          f"before {old_vs_whole}, now {new_vs_whole}")
    if not args.no_vi:
        assert np.array_equal(results["vi", True][1], results["vi", False][1])
        print("c* before vs now: identical")
    before, now = results["score", True][0], results["score", False][0]
    print(f"score compile seconds saved: {before.compile_s - now.compile_s:.1f} "
          f"(tracing {before.trace_s - now.trace_s:.1f})")
    print(f"speedup: {before.compilations / max(now.compilations, 1):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
