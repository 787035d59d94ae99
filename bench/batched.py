"""Batch planners against their batch-one selves: ``plan_batch`` per batch against ``plan`` per
request, same tasks, one process (in-process parts), and the batched procedure against a
batch-one session, run by run (``--run-level``).

**Exact part** (``--part exact`` or ``all``; ``--part none`` runs neither in-process
part). The exact planner on ``--n`` tasks of the ``--resolution`` (256) test split of a
cohort (the shipped one, or ``--dataset-path``, e.g. a ``python -m cli make-cohort``
output; task ``i`` is scene ``i mod S`` of the split's ``S`` scenes under the cost model
and variant ``(i + i // S) mod 6`` of the six, so a batch mixes cost models and variants),
for each batch size of ``--batch-sizes``:

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

**Learned part** (``--part learned`` or ``all``). The planner of
``configs/learned256_direct_batched.yaml`` (the shipped U-Net of ``--seed``, 32 backups, the
descent with 4 escapes; ``LearnedPlanner.plan_batch``, docs/learned.md "The batched
planner") on the first ``--learned-n`` scenes (default: all) of the split, under the spec's
cost model and variant (elevation, obstacles), for each batch size of ``--learned-batch-sizes``
(default 1, 8, 64), each batch timed as above:

* **forward**: the network alone on the batch, the jitted forward the batch planner runs
  (:func:`passage_jax.learned.batched.network_forward`: the network inputs and the U-Net,
  scene by scene on a CPU), ms per scene;
* **plan_batch**: the whole batch planner (forward, field, edge costs, backups, descent),
  ms per scene, and its ratio to the forward's;
* **batch-one**: ``plan`` per request in the same process, ms per scene, and its ratio to
  ``plan_batch``'s; routes checked equal as above;
* with ``--split-devices``, a second ``plan_batch`` row per batch size the process's devices
  divide: each batch split along its batch axis over them, as the batched procedure places
  it (the CPU backend gets K devices from ``XLA_FLAGS=--xla_force_host_platform_device_count=K``).

**Run level** (``--run-level``, off by default). ``python -m cli run`` of the batch-one
learned direct spec under ``native_raw_path_persistent_v1`` (a session: ``--session-warmup``
untimed calls, then one timed request per scene) and of the batched spec (batches of
``--run-batch-size``, 64), on the same ``--learned-n`` scenes of the cohort, seed ``--seed``,
then ``python -m cli score`` of both. Per run: the per-scene wall time of its timed pass (the
session: its build's ``requests_wall_ms`` over the scenes, planner and evaluator together;
the batched run: the manifest's ``batched`` block, the batches' time over the scenes, and its
build's ``requests_wall_ms`` over the scenes too) and the ratio of the two; the scored
per-task quality of both must be equal (the records' statuses and route costs, every array
of ``per_sample.npz`` but the latency and ``route_stage``, which a batch route does not
name), else the exit status is 1. The runs are written under ``--run-dir`` (default a temporary folder).

The machine line comes first, the peak RSS of the process (``resource.getrusage``) last.

    python bench/batched.py --quick                   # both parts, 8 tasks, batch sizes 1 and 8 (< 1 minute)
    python bench/batched.py                           # exact: 64 tasks, 1/8/64; learned: 24 scenes, 1/8/64
    python bench/batched.py --part learned --dataset-path /tmp/cohort --learned-n 2000 --run-level
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python bench/batched.py --part learned --split-devices
    python bench/batched.py --part none --dataset-path /tmp/cohort --run-level --seed 2026
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.placement import device_count, resolve_sharding
from passage_jax.planners.exact import ExactPlanner
from passage_jax.precision import kernel_x64
from passage_jax.protocol import build_request
from passage_jax.protocol.batch import batch_of, scene_routes

#: The six (cost model, variant) pairs a task cycles through.
COMBOS = tuple((o, v) for v in VARIANTS for o in OBJECTIVES)
REPO = Path(__file__).resolve().parents[1]
#: The batched learned spec and its batch-one twin.
BATCHED_SPEC = REPO / "configs" / "learned256_direct_batched.yaml"
DIRECT_SPEC = REPO / "configs" / "learned256_direct.yaml"


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


def time_batch_one(planner, tasks: list, warmup: int, rounds: int):
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


def _on_device(batch, sharding=None):
    """The batch's arrays on the default device (or placed by ``sharding``), float64 kept,
    and ready."""
    with kernel_x64():
        return jax.block_until_ready(jax.device_put(batch, sharding))


def time_batched(planner, tasks: list, batch_size: int, warmup: int, rounds: int,
                 pixel_size_m: float, sharding=None):
    """ms per timed batch of ``planner.plan_batch`` and each task's (status, route) of the
    last round (``sharding``: where each batch is placed; None: the default device)."""
    chunks = [tasks[lo:lo + batch_size] for lo in range(0, len(tasks), batch_size)]
    batches = [batch_of(c, batch_size, pixel_size_m) for c in chunks]
    for i in range(warmup):
        jax.device_get(planner.plan_batch(_on_device(batches[i % len(batches)], sharding)))
    ms, results = [], []
    for _ in range(rounds):
        results = []
        for chunk, batch in zip(chunks, batches):
            dev = _on_device(batch, sharding)
            t0 = time.perf_counter()
            routes = jax.device_get(jax.block_until_ready(planner.plan_batch(dev)))
            ms.append((time.perf_counter() - t0) * 1e3)
            for status, route, problem in scene_routes(routes, len(chunk)):
                if problem is not None:
                    raise SystemExit(f"plan_batch returned a bad entry: {problem}")
                results.append((status, route))
    return ms, results


def batch_one(planner, tasks: list, warmup: int, rounds: int):
    """:func:`time_batch_one`, its line printed (p50, mean, statuses); ``(ms, results,
    mean ms)``."""
    ms, results = time_batch_one(planner, tasks, warmup, rounds)
    mean = float(np.mean(ms))
    statuses: dict = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    print(f"batch-one plan: {len(ms)} timed requests  p50 {_pct(ms, 50):.2f} ms  "
          f"mean {mean:.2f} ms  statuses {statuses}", flush=True)
    return ms, results, mean


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
    one_ms, one_res, one_scene = batch_one(planner, tasks, warmup, rounds)
    print(f"{'batch':>6}{'batches':>9}{'p50 ms':>10}{'p95 ms':>10}{'ms/scene':>10}"
          f"{'batch-one/batched':>19}  routes")
    all_same = True
    for bs in batch_sizes:
        ms, per_scene, verdict, same = _batched_pass(planner, tasks, bs, warmup, rounds, pixel_size_m,
                                                     one_res)
        all_same &= same
        print(f"{bs:>6}{len(ms):>9}{_pct(ms, 50):>10.2f}{_pct(ms, 95):>10.2f}{per_scene:>10.2f}"
              f"{one_scene / per_scene:>19.2f}  {verdict}")
    return all_same


def _batched_pass(planner, tasks: list, batch_size: int, warmup: int, rounds: int,
                  pixel_size_m: float, one_res: list, sharding=None) -> tuple:
    """One batch size's timed passes of ``planner.plan_batch``: (ms per batch, ms per scene,
    the routes' verdict against the batch-one routes ``one_res``, whether they are equal)."""
    ms, res = time_batched(planner, tasks, batch_size, warmup, rounds, pixel_size_m, sharding)
    per_scene = float(np.sum(ms)) / (len(tasks) * rounds)
    diff = same_routes(res, one_res)
    return ms, per_scene, "identical" if not diff else f"DIFFER at tasks {diff[:8]}", not diff


def time_calls(fn, tasks: list, batch_size: int, warmup: int, rounds: int, pixel_size_m: float):
    """ms per timed batch of ``fn(batch)`` (any jitted function of a PlanBatch), timed as
    :func:`time_batched` times ``plan_batch``."""
    chunks = [tasks[lo:lo + batch_size] for lo in range(0, len(tasks), batch_size)]
    batches = [batch_of(c, batch_size, pixel_size_m) for c in chunks]
    for i in range(warmup):
        jax.device_get(fn(_on_device(batches[i % len(batches)])))
    ms = []
    for _ in range(rounds):
        for batch in batches:
            dev = _on_device(batch)
            t0 = time.perf_counter()
            jax.device_get(jax.block_until_ready(fn(dev)))
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def learned_planner(seed: int):
    """The planner of the batched learned spec for ``seed`` (its batch-one twin's too)."""
    from passage_jax.learned.planner import make_planner
    from passage_jax.run import load_spec

    return make_planner(**load_spec(BATCHED_SPEC).kwargs_for_seed(seed))


def load_learned_tasks(root, resolution: int, split: str, n: int | None) -> list:
    """The first ``n`` scenes of the split (None: all) under the batched spec's cost model and
    variant."""
    from passage_jax.data import load_tasks
    from passage_jax.data.validate import DataError
    from passage_jax.run import load_spec

    spec = load_spec(BATCHED_SPEC)
    try:
        tasks = load_tasks(root, resolution, split, spec.cost_model, spec.task_variant, n_samples=n)
    except DataError as e:
        raise SystemExit(f"cannot read the {resolution}x{resolution} {split} split: {e}") from None
    if not tasks:
        raise SystemExit(f"no {resolution}x{resolution} {split} scenes under {root}")
    return tasks


def learned_in_process(tasks: list, batch_sizes: list[int], warmup: int, rounds: int, seed: int,
                       pixel_size_m: float = 30.0, split: bool = False) -> bool:
    """The learned in-process comparison (module docstring); prints its table, returns whether
    every batched route equals the batch-one route."""
    from passage_jax.learned.batched import network_forward

    planner = learned_planner(seed)
    config = planner.batch_config()
    how = "scene by scene" if config.per_scene else "on the whole batch"
    print(f"learned planner: {planner!r}; dense stages {how}", flush=True)
    one_ms, one_res, one_scene = batch_one(planner, tasks, warmup, rounds)
    print(f"{'batch':>6}{'batches':>9}{'forward ms/scene':>18}{'plan_batch p50 ms':>19}"
          f"{'ms/scene':>10}{'plan_batch/forward':>20}{'batch-one/batched':>19}  routes")
    all_same = True
    for bs in batch_sizes:
        forward = lambda b: network_forward(planner.guide.params, b, config=config)  # noqa: E731
        with kernel_x64():
            fwd_ms = time_calls(forward, tasks, bs, warmup, rounds, pixel_size_m)
        fwd_scene = float(np.sum(fwd_ms)) / (len(tasks) * rounds)
        ms, per_scene, verdict, same = _batched_pass(planner, tasks, bs, warmup, rounds, pixel_size_m,
                                                     one_res)
        all_same &= same
        print(f"{bs:>6}{len(ms):>9}{fwd_scene:>18.2f}{_pct(ms, 50):>19.2f}{per_scene:>10.2f}"
              f"{per_scene / fwd_scene:>20.2f}{one_scene / per_scene:>19.2f}  {verdict}", flush=True)
        sharding = resolve_sharding("auto", axes=("batch",)) if split else None
        if sharding is not None and bs % device_count(sharding) == 0:
            ms, split_scene, verdict, same = _batched_pass(planner, tasks, bs, warmup, rounds,
                                                           pixel_size_m, one_res, sharding)
            all_same &= same
            print(f"{bs:>6}{len(ms):>9}{'':>18}{_pct(ms, 50):>19.2f}{split_scene:>10.2f}"
                  f"{split_scene / fwd_scene:>20.2f}{one_scene / split_scene:>19.2f}  {verdict}"
                  f"  (split over {len(sharding.device_set)} devices; one device: "
                  f"{per_scene:.2f} ms/scene)", flush=True)
    return all_same


#: :func:`_write_spec`: leave the key out of the spec
DROP = object()


def _write_spec(path: Path, base: Path, **over) -> Path:
    """``base`` (a YAML spec) with ``over`` applied (:data:`DROP` leaves a key out; None is
    null), written to ``path``; ``inference_kwargs_by_seed`` kept for the spec's seeds."""
    import yaml

    d = yaml.safe_load(base.read_text())
    for k, v in over.items():
        if v is DROP:
            d.pop(k, None)
        else:
            d[k] = v
    if d.get("inference_kwargs_by_seed"):
        d["inference_kwargs_by_seed"] = {s: d["inference_kwargs_by_seed"][s] for s in d["seeds"]}
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def _cli(*args) -> float:
    """``python -m cli <args>`` from the repository root; its wall seconds (SystemExit on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cli", *args, "--no-progress"] if args[0] == "run"
                          else [sys.executable, "-m", "cli", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"python -m cli {' '.join(args)} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return time.perf_counter() - t0


def run_level(root, n: int | None, seed: int, batch_size: int, session_warmup: int,
              run_dir: Path | None) -> bool:
    """The run-level comparison (module docstring); prints it, returns whether the scored
    per-task quality of the two runs is equal."""
    from passage_jax.protocol.records import read_requests

    work = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="bench_batched_"))
    work.mkdir(parents=True, exist_ok=True)
    common = {"dataset_path": str(root), "n_samples": n, "seeds": [seed]}  # n None: the whole split
    specs = {
        "session": _write_spec(work / "session.yaml", DIRECT_SPEC, **common,
                               method_name="learned256_direct_session",
                               timing_profile="native_raw_path_persistent_v1",
                               session_warmup=session_warmup, latency_warmup=DROP, latency_repeats=DROP,
                               quality_repeat_index=DROP),
        "batched": _write_spec(work / "batched.yaml", BATCHED_SPEC, **common, batch_size=batch_size),
    }
    out = {}
    for name, spec in specs.items():
        folder = work / name
        if folder.exists():
            raise SystemExit(f"{folder} exists: give --run-dir a new folder")
        run_s = _cli("run", "--spec", str(spec), "--output", str(folder))
        score_s = _cli("score", "--run", str(folder))
        seed_dir = folder / f"seed-{seed}"
        manifest = json.loads((seed_dir / "manifest.json").read_text())
        recs = read_requests(seed_dir / "requests.jsonl")
        builds = manifest["resume"]["builds"]
        wall = sum(float(b.get("requests_wall_ms") or 0.0) for b in builds)
        out[name] = {"folder": folder, "manifest": manifest, "records": recs, "n": len(recs),
                     "wall_per_scene": wall / max(len(recs), 1), "run_s": run_s, "score_s": score_s,
                     "per_sample": dict(np.load(seed_dir / "per_sample.npz", allow_pickle=False))}
    s, b = out["session"], out["batched"]
    block = b["manifest"]["batched"]
    batched_per_scene = block["batch_ms"]["mean"] * block["n_batches"] / max(block["n_scenes"], 1)
    print(f"run level: {s['n']} scenes, seed {seed}, runs in {work}")
    print(f"  session (native_raw_path_persistent_v1): {s['wall_per_scene']:.2f} ms/scene wall of the "
          f"timed pass (requests_wall_ms / scenes; run {s['run_s']:.0f} s, score {s['score_s']:.0f} s)")
    print(f"  batched (batched_v1, batches of {batch_size}): {batched_per_scene:.2f} ms/scene in plan_batch "
          f"(batched block: {block['n_batches']} batches, per_scene_ms p50 "
          f"{block['per_scene_ms']['p50']:.2f}); "
          f"{b['wall_per_scene']:.2f} ms/scene wall of the timed pass with the evaluator "
          f"(run {b['run_s']:.0f} s, score {b['score_s']:.0f} s)")
    print(f"  session wall / batched plan_batch per scene: {s['wall_per_scene'] / batched_per_scene:.2f}x; "
          f"session wall / batched wall: {s['wall_per_scene'] / max(b['wall_per_scene'], 1e-9):.2f}x")
    same = [r["status"] for r in s["records"]] == [r["status"] for r in b["records"]] and \
        [r["route_cost"] for r in s["records"]] == [r["route_cost"] for r in b["records"]]
    keys = sorted(set(s["per_sample"]) & set(b["per_sample"]))
    # not quality: the timing, and route_stage (a batch planner's route names no stage)
    timing = [k for k in keys if "latency" in k or k.endswith("_ms") or k == "route_stage"]
    def equal(k):
        x, y = s["per_sample"][k], b["per_sample"][k]
        return np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
    differ = [k for k in keys if k not in timing and not equal(k)]
    same &= not differ
    ok = sum(r["status"] == "ok" for r in b["records"])
    print(f"  per-task quality equal: {'yes' if same else 'NO'} ({ok}/{b['n']} ok; statuses and route "
          f"costs of the records, {len(keys) - len(timing)} per_sample.npz arrays (not {', '.join(timing)})"
          f"{'; differ: ' + ', '.join(differ) if differ else ''})")
    return same


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("all", "exact", "learned", "none"), default="all",
                    help="the in-process part(s) to run (default both; none: --run-level alone)")
    ap.add_argument("--n", type=int, default=64, help="exact part: tasks (default 64)")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64], help="exact part")
    ap.add_argument("--learned-n", type=int, default=None,
                    help="learned part and run level: the first N scenes of the split (default all)")
    ap.add_argument("--learned-batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--seed", type=int, default=1234, help="learned: the shipped checkpoint's seed")
    ap.add_argument("--dataset-path", type=Path, default=None,
                    help="cohort root (default: the shipped cohort)")
    ap.add_argument("--resolution", type=int, default=256)
    ap.add_argument("--split", default="test")
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches / requests first")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes over the tasks")
    ap.add_argument("--run-level", action="store_true",
                    help="also python -m cli run + score of the batch-one session and the batched spec")
    ap.add_argument("--run-batch-size", type=int, default=64)
    ap.add_argument("--session-warmup", type=int, default=16)
    ap.add_argument("--run-dir", type=Path, default=None, help="run level: a new folder for the runs")
    ap.add_argument("--split-devices", action="store_true",
                    help="learned part: also each batch split over this process's devices, as the "
                         "batched procedure places it (give the CPU K devices with XLA_FLAGS="
                         "--xla_force_host_platform_device_count=K)")
    ap.add_argument("--quick", action="store_true",
                    help="8 tasks, batch sizes 1 and 8, one round, one warm-up (both parts)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.batch_sizes = 8, [1, 8]
        args.learned_n, args.learned_batch_sizes = 8, [1, 8]
        args.rounds, args.warmup = 1, 1
    sizes = args.batch_sizes + args.learned_batch_sizes + [args.run_batch_size]
    if args.n < 1 or args.rounds < 1 or args.warmup < 0 or min(sizes) < 1 or \
            (args.learned_n is not None and args.learned_n < 1):
        ap.error("--n, --learned-n, --rounds and the batch sizes must be >= 1, --warmup >= 0")
    print(machine_line(), flush=True)
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415

    root = args.dataset_path or shipped_cohort_root()
    ok = True
    if args.part in ("all", "exact"):
        tasks = load_bench_tasks(root, args.resolution, args.split, args.n)
        print(f"exact: cohort {root}: {len(tasks)} tasks of {args.resolution}x{args.resolution} "
              f"({args.split}); warm-up {args.warmup}, rounds {args.rounds}", flush=True)
        ok &= in_process(tasks, args.batch_sizes, args.warmup, args.rounds)
    if args.part in ("all", "learned"):
        tasks = load_learned_tasks(root, args.resolution, args.split, args.learned_n)
        print(f"learned: cohort {root}: {len(tasks)} scenes of {args.resolution}x{args.resolution} "
              f"({args.split}, {tasks[0].objective}, {tasks[0].variant}); seed {args.seed}; "
              f"warm-up {args.warmup}, rounds {args.rounds}", flush=True)
        ok &= learned_in_process(tasks, args.learned_batch_sizes, args.warmup, args.rounds, args.seed,
                                 split=args.split_devices)
    if args.run_level:
        ok &= run_level(root, args.learned_n, args.seed, args.run_batch_size, args.session_warmup,
                        args.run_dir)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"routes identical to batch-one: {'yes' if ok else 'NO'}")
    print(f"peak RSS: {peak:.0f} MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
