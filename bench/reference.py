"""Exact-reference throughput: batched JAX value iteration vs SciPy csgraph Dijkstra
(and scikit-image MCP_Geometric when installed), same real-terrain tasks, one process.

Prints a table and ends with ``speedup: <ratio>`` = JAX scenes/s at the largest
batch over SciPy scenes/s (graph build included), at 256x256.

Rows ``<batch> (double_float)`` time the double-float path (float32 pairs, x64 off;
host edge costs and their split included) on the same tasks, with its ratio to the
main rows' path and the host split time per scene; ``--no-double-float`` drops them.

    python bench/reference.py --quick     # ~1 minute on a 2-core CPU
    python bench/reference.py             # full sizes (64..1024, batch 1/16/256)
"""
from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np
from scipy.sparse.csgraph import dijkstra as sp_dijkstra

from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.precision import REFERENCE_PRECISIONS as PRECISIONS
from passage_jax.reference import STRATEGIES, scipy_task_graph, solve_batch
from passage_jax.reference.vi import double_float_inputs

WEIGHTS = {"elevation": 62.4, "slope_uphill": 10.0, "energy": 62.4}


class Item:
    """One task as plain arrays."""

    def __init__(self, z, obstacles, start, goal, model, weight, label):
        self.z, self.obstacles, self.start, self.goal = z, obstacles, start, goal
        self.model, self.weight, self.label = model, weight, label


def cohort_items(res: int, limit: int):
    from passage_jax.data import load_scenes, shipped_cohort_root
    root = shipped_cohort_root()
    items = []
    for split in ("test", "validation", "calibration"):
        if not (root / f"{res}x{res}" / split).is_dir():
            continue
        for s in load_scenes(root, res, split, n_samples=None):
            for o in OBJECTIVES:
                for v in VARIANTS:
                    t = s.task(o, v)
                    items.append(Item(s.elevation_m, t.obstacles, s.start, s.goal, o, t.weight,
                                      f"cohort {s.id}"))
                    if len(items) >= limit:
                        return items
    return items


def raster_items(res: int, limit: int, seed: int = 0):
    """Crops cut directly from the shipped rasters (for sizes the cohort lacks):
    free variant, start and goal near opposite corners, objectives in turn."""
    from passage_jax.data.terrain import RASTERS, load_raster
    rng = np.random.default_rng(seed)
    items = []
    for key in RASTERS:
        z, _ = load_raster(key)
        if min(z.shape) < res:
            continue
        for _ in range(3):
            r0 = int(rng.integers(0, z.shape[0] - res + 1))
            c0 = int(rng.integers(0, z.shape[1] - res + 1))
            crop = np.ascontiguousarray(z[r0:r0 + res, c0:c0 + res], np.float64)
            m = OBJECTIVES[len(items) % 3]
            s = tuple(int(v) for v in rng.integers(0, res // 8, 2))
            g = tuple(int(v) for v in res - 1 - rng.integers(0, res // 8, 2))
            items.append(Item(crop, np.zeros((res, res), bool), s, g, m, WEIGHTS[m],
                              f"{key} crop ({r0},{c0})"))
            if len(items) >= limit:
                return items
    return items


def scipy_graph(it: Item):
    """The task's graph (``passage_jax.reference.scipy_task_graph``) and its node ids."""
    h, w = it.z.shape
    return scipy_task_graph(it.z, it.obstacles, it.model, it.weight), np.arange(h * w).reshape(h, w)


def run_scipy(items):
    """(scenes/s with build, scenes/s without, c* list)."""
    t_build = t_solve = 0.0
    out = []
    for it in items:
        t0 = time.perf_counter()
        g, idx = scipy_graph(it)
        t1 = time.perf_counter()
        d = sp_dijkstra(g, directed=True, indices=int(idx[it.start]))
        t2 = time.perf_counter()
        t_build += t1 - t0
        t_solve += t2 - t1
        out.append(float(d[idx[it.goal]]))
    n = len(items)
    return n / (t_build + t_solve), n / t_solve, out


def run_mcp(items):
    try:
        from skimage.graph import MCP_Geometric
    except ImportError:
        return None, None
    # MCP_Geometric uses node costs (mean of the two ends x length), not our edge
    # costs: timed for throughput only, its c* is not comparable.
    t0 = time.perf_counter()
    for it in items:
        cost = np.where(it.obstacles, np.inf, 1.0 + np.abs(np.gradient(it.z)[0]))
        m = MCP_Geometric(cost, fully_connected=True)
        m.find_costs([it.start], [it.goal])
    return len(items) / (time.perf_counter() - t0), None


def _batch_args(items, b: int):
    sel = [items[i % len(items)] for i in range(b)]
    return (np.stack([i.z for i in sel]), np.stack([i.obstacles for i in sel]),
            [i.start for i in sel], [i.goal for i in sel], [i.model for i in sel],
            [i.weight for i in sel])


def run_jax(items, b: int, strategy: str, sharding=None, precision: str = "float64"):
    """Time one batch of ``b`` tasks (cycling through ``items``) after a warm-up."""
    args = _batch_args(items, b)
    solve_batch(*args, strategy=strategy, sharding=sharding, precision=precision)  # compile
    t0 = time.perf_counter()
    res = solve_batch(*args, strategy=strategy, sharding=sharding, precision=precision)
    dt = time.perf_counter() - t0
    return b / dt, res


def host_split_seconds(items, b: int) -> float:
    """Seconds per scene of the double-float path's host work: float64 edge costs and
    their split into float32 pairs."""
    args = _batch_args(items, b)
    t0 = time.perf_counter()
    double_float_inputs(*args)
    return (time.perf_counter() - t0) / b


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, about a minute on CPU")
    ap.add_argument("--strategy", default="sweep", choices=STRATEGIES,
                    help="value-iteration strategy")
    ap.add_argument("--compare-jacobi", action="store_true",
                    help="also time plain Jacobi at batch 16 (sweep-strategy evidence)")
    ap.add_argument("--precision", default="float64", choices=PRECISIONS,
                    help="arithmetic of the main rows (double_float where float64 is missing)")
    ap.add_argument("--no-double-float", action="store_true",
                    help="skip the double-float rows")
    a = ap.parse_args(argv)
    if a.quick:
        plan = [(64, (1, 16), 8), (256, (1, 16), 4)]
    else:
        plan = [(64, (1, 16, 256), 32), (128, (1, 16, 256), 32), (256, (1, 16, 256), 32),
                (512, (1, 16), 8), (1024, (1, 4), 4)]
    dev = jax.devices()[0]
    print(f"# machine: {platform.processor() or platform.machine()}, {len(jax.devices())} "
          f"{dev.platform} device(s) ({dev.device_kind}); jax {jax.__version__}; {a.precision}")
    print(f"# strategy: {a.strategy}; scenes = tasks (one objective x variant of a crop)")
    if not a.no_double_float:
        print(f"# '<batch> (double_float)' rows: float32 pairs, x64 off; last field: {a.precision} "
              "sc/s over double_float sc/s and the host split (float64 costs -> pairs) per scene")
    hdr = ("res", "source", "batch", "jax sc/s", "scipy+build sc/s", "scipy sc/s", "mcp sc/s",
           "sweeps med/max", "max rel dc*")
    print(" | ".join(hdr))
    speed_ref = None
    df_ref = None
    for res, batches, n_peer in plan:
        try:
            items = cohort_items(res, max(n_peer, 16))
            source = "cohort"
        except Exception:
            items = []
        if len(items) < 1:
            try:
                items = raster_items(res, max(n_peer, 16))
                source = "raster crops"
            except Exception as e:  # noqa: BLE001
                print(f"{res} | skipped: no terrain ({e})")
                continue
        if not items:
            print(f"{res} | skipped: no raster is {res} cells wide")
            continue
        peer = items[:n_peer]
        sp_build, sp_solve, sp_c = run_scipy(peer)
        mcp, _ = run_mcp(peer)
        for b in batches:
            try:
                jsps, r = run_jax(items, b, a.strategy, precision=a.precision)
            except (MemoryError, RuntimeError) as e:  # XLA out of memory
                print(f"{res} | {source} | {b} | out of memory ({type(e).__name__})")
                continue
            k = min(len(peer), b)
            dc = np.max(np.abs(r.c_star[:k] - np.asarray(sp_c[:k])) / np.asarray(sp_c[:k]))
            sw = f"{int(np.median(r.sweeps))}/{int(r.sweeps.max())}"
            print(f"{res} | {source} | {b} | {jsps:.2f} | {sp_build:.2f} | {sp_solve:.2f} | "
                  f"{'n/a' if mcp is None else f'{mcp:.2f}'} | {sw} | {dc:.2e}")
            if res == 256:
                speed_ref = (jsps, sp_build)
            if a.no_double_float or a.precision == "double_float":
                continue
            try:
                dsps, rd = run_jax(items, b, a.strategy, precision="double_float")
            except (MemoryError, RuntimeError) as e:  # XLA out of memory
                print(f"{res} | {source} | {b} (double_float) | out of memory ({type(e).__name__})")
                continue
            split_ms = 1e3 * host_split_seconds(items, b)
            dd = np.max(np.abs(rd.c_star[:k] - np.asarray(sp_c[:k])) / np.asarray(sp_c[:k]))
            sw = f"{int(np.median(rd.sweeps))}/{int(rd.sweeps.max())}"
            print(f"{res} | {source} | {b} (double_float) | {dsps:.2f} | | | | {sw} | {dd:.2e} | "
                  f"ratio {jsps / dsps:.2f}x; host split {split_ms:.2f} ms/scene")
            if res == 256:
                df_ref = (jsps, dsps)
        if a.compare_jacobi and 16 in batches:
            jsps, r = run_jax(items, 16, "jacobi")
            print(f"{res} | {source} | 16 (jacobi) | {jsps:.2f} | | | | "
                  f"{int(np.median(r.sweeps))}/{int(r.sweeps.max())} |")
    if df_ref is not None:
        print(f"double_float: {df_ref[1]:.2f} sc/s at 256 (largest batch), {a.precision} over "
              f"double_float {df_ref[0] / df_ref[1]:.3f}x")
    if speed_ref is None:
        print("speedup: nan")
        return 1
    print(f"speedup: {speed_ref[0] / speed_ref[1]:.3f}")
    return 0


if __name__ == "__main__":
    with jax.enable_x64(True):
        raise SystemExit(main())
