"""Benchmark: seed-mean block bootstrap of the six primary metrics.

Ours: passage_jax.stats (one multiplicity matrix, means by matrix products, weighted order
statistics from cumulative weights). Peer: a plain NumPy loop that materialises every resample
(np.percentile / np.mean per seed, method and metric), timed on a subset of draws and scaled.
Both use the same multiplicity rows; the first peer draws are checked against ours.

    python bench/stats.py            # 40,000 tasks, 200 blocks, 3 seeds, 10,000 draws
    python bench/stats.py --quick    # small sizes, about a minute on a 2-core CPU
    python bench/stats.py --shard    # ours with sharding="auto": draws split over all local
                                     # devices of the default backend (one device: unsharded)
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np

from passage_jax.contract import DEFAULT_SEEDS as SEEDS
from passage_jax.contract import METRIC_SPEC, PRIMARY_METRICS
from passage_jax.stats.compare import primary_seed_mean_draws
from passage_jax.stats.draws import MultiplicityStream, draw_placement


def make_data(n, K, rng):
    data = {}
    for mth, shift in (("A", 0.0), ("B", 0.02)):
        data[mth] = {}
        for s in SEEDS:
            valid = rng.random(n) < 0.85
            data[mth][s] = {
                "regret": np.where(valid, rng.gamma(2.0, 0.02, n) + shift, 999999.0),
                "assd": np.where(valid, rng.random(n), np.nan),
                "h95": np.where(valid, 3 * rng.random(n), np.nan),
                "success": valid.astype(float),
                "obstacle_violation": ((~valid) & (rng.random(n) < 0.5)).astype(float),
            }
    blocks = rng.integers(0, K, n).astype(np.int32)
    blocks[:K] = np.arange(K)  # every block observed
    return data, blocks


def peer_draws(data, blocks, K, mult):
    """Materialise each resample and reduce it with NumPy, draw by draw."""
    members = [np.flatnonzero(blocks == k) for k in range(K)]
    out = np.empty((mult.shape[0], len(PRIMARY_METRICS)))
    for d, mrow in enumerate(mult):
        idx = np.concatenate([members[k] for k in np.repeat(np.arange(K), mrow)])
        vals = []
        for metric in PRIMARY_METRICS:
            f, q, _ = METRIC_SPEC[metric]
            cs = []
            for s in SEEDS:
                t = []
                for mth in ("A", "B"):
                    x = data[mth][s][f][idx]
                    x = x[np.isfinite(x)]
                    t.append(np.mean(x) if q is None else np.percentile(x, 100 * q))
                cs.append(t[0] - t[1])
            vals.append(np.mean(cs))
        out[d] = vals
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shard", action="store_true",
                    help='run ours with sharding="auto" (draws split over all local devices)')
    args = ap.parse_args()
    sharding = "auto" if args.shard else None
    place = draw_placement(sharding)
    n_shards = 1 if place is None else place[2]
    if args.quick:
        n, K, D, D_peer = 8000, 100, 2000, 60
    else:
        n, K, D, D_peer = 40000, 200, 10000, 300
    rng = np.random.default_rng(0)
    data, blocks = make_data(n, K, rng)
    seed = 1234

    # first call compiles; the second, timed, is the figure
    t0 = time.perf_counter()
    primary_seed_mean_draws(data, blocks, K, D, seed=seed, seeds=SEEDS, sharding=sharding)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = primary_seed_mean_draws(data, blocks, K, D, seed=seed, seeds=SEEDS, sharding=sharding)
    t_ours = time.perf_counter() - t0
    ours_sm = np.stack([np.mean(ours[m][0] - ours[m][1], axis=1) for m in PRIMARY_METRICS], axis=1)

    mult = MultiplicityStream(K, seed).next(D_peer)
    t0 = time.perf_counter()
    peer = peer_draws(data, blocks, K, mult)
    t_peer_sub = time.perf_counter() - t0
    t_peer = t_peer_sub * D / D_peer
    err = float(np.max(np.abs(peer - ours_sm[:D_peer]) / np.maximum(1.0, np.abs(peer))))

    print(f"machine: {platform.processor() or platform.machine()}, jax {jax.__version__} "
          f"({jax.default_backend()})")
    how = (f"sharded over {n_shards} devices" if n_shards > 1 else
           "unsharded (one device: --shard takes the same path)" if args.shard else "unsharded")
    print(f"devices: {jax.local_device_count()} local {jax.default_backend()}; draws {how}")
    print(f"tasks {n}, blocks {K}, seeds {len(SEEDS)}, metrics {len(PRIMARY_METRICS)}, draws {D}")
    print(f"{'implementation':<44}{'seconds':>12}")
    print(f"{'passage_jax.stats, first call (compiles)':<44}{t_cold:>12.3f}")
    print(f"{'passage_jax.stats (multiplicity matrix)':<44}{t_ours:>12.3f}")
    print(f"{'NumPy materialised loop (scaled from ' + str(D_peer) + ')':<44}{t_peer:>12.3f}")
    print(f"max relative difference on the first {D_peer} draws: {err:.2e}")
    assert err < 1e-10, "kernel and NumPy loop disagree"
    print(f"speedup: {t_peer / t_ours:.1f}")


if __name__ == "__main__":
    main()
