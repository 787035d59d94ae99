"""The learned planner's value-iteration head (``decoders.bellman_backups``) against the
NumPy loop a user would write, same fields, one process.

On the shipped 256x256 calibration scenes (elevation cost, obstacles) each scene's field
(the shipped ``value256ft-1234`` network's) goes through k Bellman backups twice: by the
jitted kernel (``passage_jax.learned.decoders.bellman_backups``, warm: one untimed call per
k first) and by a plain NumPy loop (per backup, per move, a shifted array and a minimum;
0 at the goal). The two must agree exactly (the same float64 arithmetic in the same
order); the script stops otherwise. It prints the median wall time per call of each, their
ratio, and the operations per call (16 k H W)::

    python bench/bellman_head.py                 # k = 16, 32, 64 on 8 scenes
    python bench/bellman_head.py --k 64 --n 24
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learned import build_request, load_material  # noqa: E402

from passage_jax.data import shipped_cohort_root  # noqa: E402
from passage_jax.graph.moves import MOVES  # noqa: E402
from passage_jax.learned.decoders import bellman_backups, request_cost_field  # noqa: E402
from passage_jax.learned.guide import load_guide  # noqa: E402
from passage_jax.protocol import BudgetSpec  # noqa: E402


def numpy_backups(field, cost, goal, k):
    """The peer: k Jacobi backups in NumPy, one shifted neighbour array per move."""
    h, w = field.shape
    f = field
    for _ in range(k):
        p = np.pad(f, 1, constant_values=np.inf)
        best = np.full_like(f, np.inf)
        for m, (dr, dc) in enumerate(MOVES.tolist()):
            best = np.minimum(best, cost[m] + p[1 + dr:1 + dr + h, 1 + dc:1 + dc + w])
        best[goal] = 0.0
        f = best
    return f


def _median_ms(fn, repeats, *fn_args, **fn_kwargs):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*fn_args, **fn_kwargs)
        times.append((time.perf_counter() - t0) * 1000.0)
    return float(np.median(times))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--n", type=int, default=8, help="calibration scenes")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    tasks, _ = load_material(shipped_cohort_root(), 256, "calibration", args.n)
    guide = load_guide("shipped:value256ft-1234")
    scenes = []
    for t in tasks:
        req = build_request(t, budget=BudgetSpec())
        scenes.append((req, guide(req), request_cost_field(req)))
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}; {len(scenes)} scenes of 256x256")
    print(f"{'k':>4}{'MFLOP':>8}{'kernel ms':>11}{'numpy ms':>10}{'numpy/kernel':>14}")
    for k in args.k:
        bellman_backups(scenes[0][1], scenes[0][0], backups=k, cost_field=scenes[0][2])  # compile
        kern, peer = [], []
        for req, field, cost in scenes:
            a = bellman_backups(field, req, backups=k, cost_field=cost)
            b = numpy_backups(field, cost, tuple(req.goal), k)
            if not np.array_equal(a, b):
                raise SystemExit(f"kernel and NumPy loop disagree on {req.sample_id} at k={k}")
            kern.append(_median_ms(bellman_backups, args.repeats, field, req, backups=k, cost_field=cost))
            peer.append(_median_ms(numpy_backups, args.repeats, field, cost, tuple(req.goal), k))
        km, pm = float(np.median(kern)), float(np.median(peer))
        print(f"{k:>4}{16 * k * 256 * 256 / 1e6:>8.1f}{km:>11.2f}{pm:>10.2f}{pm / km:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
