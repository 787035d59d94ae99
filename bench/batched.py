"""The exact planner as a batch planner: ``ExactPlanner.plan_batch`` per batch against the
batch-one ``ExactPlanner.plan`` per request, same tasks, one process (in-process part).

On ``--n`` tasks of the ``--resolution`` (256) test split of a cohort (the shipped one, or
``--dataset-path``, e.g. a ``python -m cli make-cohort`` output; task ``i`` is scene
``i mod S`` of the split's ``S`` scenes under the cost model and variant ``(i + i // S)
mod 6`` of the six, so a batch mixes cost models and variants), for each batch size of
``--batch-sizes``:

* **batched**: the tasks in order, ``batch_size`` at a time (the last batch padded with
  copies of its first task, :func:`passage_jax.protocol.batch.batch_of`), timed as the
  batched procedure times a batch: the batch's arrays are put on the device (float64)
  and ready before the clock starts; the clock stops when every route is on the host
  (``jax.block_until_ready``, then ``jax.device_get``). ``--warmup`` untimed batches
  first (they compile); ``--rounds`` passes over the tasks. Reported: ms per batch
  (p50, p95) and the amortised ms per scene (all timed batches' time over the scenes
  they planned);
* **batch-one**: ``plan`` per request (the request built outside the clock), after
  ``--warmup`` untimed requests, ``--rounds`` passes: ms per request (p50, mean), the
  peer a user would otherwise call;
* the ratio batch-one ms per scene (mean) over batched ms per scene, per batch size,
  and a check that every batched route (and status) equals the batch-one route of its
  task (``routes identical``; a difference is printed and makes the exit status 1).

The machine line comes first, the peak RSS of the process (``resource.getrusage``)
last.

    python bench/batched.py --quick                   # 8 tasks, batch sizes 1 and 8 (< 1 minute)
    python bench/batched.py                           # 64 tasks, batch sizes 1, 8, 64
    python bench/batched.py --n 128 --batch-sizes 1 16 128 --dataset-path /tmp/cohort
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

import jax
import numpy as np

from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.planners.exact import ExactPlanner
from passage_jax.precision import kernel_x64
from passage_jax.protocol import build_request
from passage_jax.protocol.batch import batch_of, scene_routes

#: The six (cost model, variant) pairs a task cycles through.
COMBOS = tuple((o, v) for v in VARIANTS for o in OBJECTIVES)


def machine_line() -> str:
    return (f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs  "
            f"python {platform.python_version()}, jax {jax.__version__} on "
            f"{jax.devices()[0].platform} ({jax.devices()[0].device_kind})")


def load_bench_tasks(root, resolution: int, split: str, n: int) -> list:
    """``n`` tasks of the split: task ``i`` is scene ``i mod S`` under the pair
    ``COMBOS[(i + i // S) mod 6]``."""
    from passage_jax.data import load_scenes  # noqa: PLC0415
    from passage_jax.data.validate import DataError  # noqa: PLC0415

    try:
        scenes = load_scenes(root, resolution, split, n_samples=None)
    except DataError as e:
        raise SystemExit(f"cannot read the {resolution}x{resolution} {split} split: {e}") from None
    if not scenes:
        raise SystemExit(f"no {resolution}x{resolution} {split} scenes under {root}")
    if n > len(scenes) * len(COMBOS):
        raise SystemExit(f"--n {n}: the split has {len(scenes)} scenes, "
                         f"{len(scenes) * len(COMBOS)} tasks at most")
    s = len(scenes)
    return [scenes[i % s].task(*COMBOS[(i + i // s) % len(COMBOS)]) for i in range(n)]


def _pct(ms, q) -> float:
    return float(np.percentile(np.asarray(ms), q))


def time_batch_one(planner: ExactPlanner, tasks: list, warmup: int, rounds: int):
    """ms per ``plan`` call (timed calls only) and each task's (status, route)."""
    requests = [build_request(t, include_tensor=False) for t in tasks]
    for i in range(warmup):
        planner.plan(requests[i % len(requests)])
    ms, results = [], []
    for r in range(rounds):
        for req in requests:
            t0 = time.perf_counter()
            res = planner.plan(req)
            ms.append((time.perf_counter() - t0) * 1e3)
            if r == 0:
                results.append((res.status, res.path))
    return ms, results


def _on_device(batch):
    """The batch's arrays on the default device, float64 kept, and ready."""
    with kernel_x64():
        return jax.block_until_ready(jax.device_put(batch))


def time_batched(planner: ExactPlanner, tasks: list, batch_size: int, warmup: int, rounds: int,
                 pixel_size_m: float):
    """ms per timed batch and each task's (status, route) of the last round."""
    chunks = [tasks[lo:lo + batch_size] for lo in range(0, len(tasks), batch_size)]
    batches = [batch_of(c, batch_size, pixel_size_m) for c in chunks]
    for i in range(warmup):
        jax.device_get(planner.plan_batch(_on_device(batches[i % len(batches)])))
    ms, results = [], []
    for _ in range(rounds):
        results = []
        for chunk, batch in zip(chunks, batches):
            dev = _on_device(batch)
            t0 = time.perf_counter()
            routes = jax.device_get(jax.block_until_ready(planner.plan_batch(dev)))
            ms.append((time.perf_counter() - t0) * 1e3)
            for status, route, problem in scene_routes(routes, len(chunk)):
                if problem is not None:
                    raise SystemExit(f"plan_batch returned a bad entry: {problem}")
                results.append((status, route))
    return ms, results


def same_routes(a: list, b: list) -> list[int]:
    """Indices of the tasks whose (status, route) differ."""
    out = []
    for i, ((sa, ra), (sb, rb)) in enumerate(zip(a, b)):
        same_route = (ra is None and rb is None) or (
            ra is not None and rb is not None and np.array_equal(ra, rb))
        if sa != sb or not same_route:
            out.append(i)
    return out


def in_process(tasks: list, batch_sizes: list[int], warmup: int, rounds: int,
               pixel_size_m: float = 30.0) -> bool:
    """The in-process comparison (module docstring); prints its table, returns whether
    every batched route equals the batch-one route."""
    planner = ExactPlanner()
    one_ms, one_res = time_batch_one(planner, tasks, warmup, rounds)
    one_scene = float(np.mean(one_ms))
    statuses = {}
    for s, _ in one_res:
        statuses[s] = statuses.get(s, 0) + 1
    print(f"batch-one plan: {len(one_ms)} timed requests  p50 {_pct(one_ms, 50):.2f} ms  "
          f"mean {one_scene:.2f} ms  statuses {statuses}")
    print(f"{'batch':>6}{'batches':>9}{'p50 ms':>10}{'p95 ms':>10}{'ms/scene':>10}"
          f"{'batch-one/batched':>19}  routes")
    all_same = True
    for bs in batch_sizes:
        ms, res = time_batched(planner, tasks, bs, warmup, rounds, pixel_size_m)
        per_scene = float(np.sum(ms)) / (len(tasks) * rounds)
        diff = same_routes(res, one_res)
        all_same &= not diff
        verdict = "identical" if not diff else f"DIFFER at tasks {diff[:8]}"
        print(f"{bs:>6}{len(ms):>9}{_pct(ms, 50):>10.2f}{_pct(ms, 95):>10.2f}{per_scene:>10.2f}"
              f"{one_scene / per_scene:>19.2f}  {verdict}")
    return all_same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=64, help="tasks (default 64)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--dataset-path", type=Path, default=None,
                    help="cohort root (default: the shipped cohort)")
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--split", default="test")
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches / requests first")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes over the tasks")
    ap.add_argument("--quick", action="store_true",
                    help="8 tasks, batch sizes 1 and 8")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batch_sizes = 8, [1, 8]
    if args.n < 1 or args.rounds < 1 or args.warmup < 0 or min(args.batch_sizes) < 1:
        ap.error("--n, --rounds and the batch sizes must be >= 1, --warmup >= 0")
    print(machine_line(), flush=True)
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415

    root = args.dataset_path or shipped_cohort_root()
    tasks = load_bench_tasks(root, args.resolution, args.split, args.n)
    print(f"cohort {root}: {len(tasks)} tasks of {args.resolution}x{args.resolution} "
          f"({args.split}); warm-up {args.warmup}, rounds {args.rounds}", flush=True)
    ok = in_process(tasks, args.batch_sizes, args.warmup, args.rounds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"routes identical to batch-one: {'yes' if ok else 'NO'}")
    print(f"peak RSS: {peak:.0f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
