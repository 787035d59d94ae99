"""``python -m cli make-cohort``: cut real-terrain scenes, solve exact labels, write shards."""
from __future__ import annotations

import sys
import time
from pathlib import Path


def register(parser) -> None:
    parser.add_argument("--out", required=True, type=Path, help="dataset root to write into")
    parser.add_argument("--resolution", required=True, type=int, help="crop size N (scenes are N x N)")
    parser.add_argument("--split", required=True,
                        help="train, validation (val), calibration (calib) or test")
    parser.add_argument("--n-scenes", required=True, type=int, help="number of scenes to write")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    parser.add_argument("--coverage-max", type=float, default=0.3,
                        help="largest obstacle coverage, at most 0.3 (default: %(default)s)")
    parser.add_argument("--rasters", nargs="+", default=None, metavar="KEY",
                        help="shipped rasters to cut from (default: all)")
    parser.add_argument("--rows-per-shard", type=int, default=64, help="default: %(default)s")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args) -> int:
    from rich.console import Console

    from passage_jax.data.cohort import CohortError, eligible_rasters, make_cohort
    from passage_jax.data.terrain import RASTERS, TerrainError

    err = Console(stderr=True)
    if args.rasters is not None:
        unknown = [k for k in args.rasters if k not in RASTERS]
        if unknown:
            err.print(f"error: unknown raster(s) {unknown}; shipped: {list(RASTERS)}")
            return 2
    t0 = time.perf_counter()
    try:
        for key, why in eligible_rasters(args.resolution, args.rasters)[1].items():
            err.print(f"skipping raster {key} at this resolution: {why}")
        summary = make_cohort(args.out, args.resolution, args.split, args.n_scenes, seed=args.seed,
                              coverage_max=args.coverage_max, rasters=args.rasters,
                              rows_per_shard=args.rows_per_shard, progress=not args.no_progress)
    except (CohortError, TerrainError, FileExistsError, ValueError) as e:
        err.print(f"error: {e}")
        return 2
    n = summary["resolution"]
    print(f"wrote {summary['n_scenes']} scenes to {Path(args.out) / f'{n}x{n}' / summary['split']} "
          f"in {time.perf_counter() - t0:.1f} s; rasters: "
          + ", ".join(f"{k} {v}" for k, v in sorted(summary["rasters"].items())))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
