"""``python -m cli make-cohort``: cut real-terrain scenes, solve exact labels, write shards.

The work is :func:`passage_jax.data.cohort.make_cohort` (one split) or, with
``--shipped``, :func:`passage_jax.data.cohort.build_shipped_cohort` (the cohort
shipped inside the package); this command parses the arguments and shows progress.

Every folder the command would write is checked before anything is written: a
split folder that is not empty (with ``--shipped``: a dataset root that is not
empty), or an ``--out`` that is a file, is refused by name, so a refused command
leaves nothing behind and a completed one never wrote into data that was there.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from cli.console import say
from passage_jax.data.cohort import (
    GEO_SPLIT_ROOTS,
    SHIPPED_ROOT,
    SHIPPED_SEED,
    CohortError,
    build_shipped_cohort,
    eligible_rasters,
    make_cohort,
    make_geo_splits,
)
from passage_jax.data.scene import canonical_split
from passage_jax.data.terrain import RASTERS, TerrainError

#: Arguments one split needs (``--shipped`` fixes them itself).
_SPLIT_ARGS = ("out", "resolution", "split", "n_scenes")


def register(parser) -> None:
    parser.add_argument("--out", type=Path, default=None,
                        help="dataset root to write into (with --shipped: default the package's cohort "
                             "folder)")
    parser.add_argument("--resolution", type=int, default=None, help="crop size N (scenes are N x N)")
    parser.add_argument("--split", default=None,
                        help="train, validation (val), calibration (calib) or test")
    parser.add_argument("--n-scenes", type=int, default=None, help="number of scenes to write")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"random seed (default: 0; with --shipped {SHIPPED_SEED})")
    parser.add_argument("--coverage-max", type=float, default=0.3,
                        help="largest obstacle coverage, at most 0.3 (default: %(default)s)")
    parser.add_argument("--rasters", nargs="+", default=None, metavar="KEY",
                        help="shipped rasters to cut from (default: all)")
    parser.add_argument("--rows-per-shard", type=int, default=64, help="default: %(default)s")
    parser.add_argument("--geo-holdout", nargs="+", default=None, metavar="KEY",
                        help="write the geographic trust axis's two cohorts under --out: holdout/ "
                             "from these rasters, matched_random/ from every other raster (same "
                             "generator, seed and size)")
    parser.add_argument("--shipped", action="store_true",
                        help="rebuild the cohort shipped inside the package (64, 128, 256; splits "
                             "validation, calibration, test) and its manifest.json")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


class _Err:
    """Messages to stderr, one plain line each (never wrapped, no markup)."""

    def print(self, message: str) -> None:
        say(message, sys.stderr)


class _Bars:
    """A rich progress bar per ``<N>x<N> <split>`` label: the ``progress`` callback."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, int] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if label not in self.tasks:
            self.tasks[label] = self.progress.add_task(label, total=total)
        self.progress.update(self.tasks[label], completed=done)


def _progress_bar(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), disable=not enabled)


def _entries(folder: Path) -> list[str]:
    """Names in ``folder`` (none if it does not exist); a file in its place is refused."""
    if not folder.exists() and not folder.is_symlink():
        return []
    if not folder.is_dir():
        raise CohortError(f"{folder} exists and is not a folder; refusing to write a cohort there")
    return sorted(p.name for p in folder.iterdir())


def _refuse_taken(folder: Path) -> None:
    """CohortError naming ``folder`` if it already holds anything."""
    names = _entries(folder)
    if any(n.endswith(".parquet") for n in names):
        raise CohortError(f"{folder} already holds shards; refusing to overwrite")
    if names:
        shown = names[:5] + (["..."] if len(names) > 5 else [])
        raise CohortError(f"{folder} is not empty (it holds {', '.join(shown)}); refusing to "
                          f"write into it")


def _split_target(root, resolution: int, split: str) -> Path:
    return Path(root) / f"{resolution}x{resolution}" / canonical_split(split)


def _check_targets(args) -> None:
    """Refuse, before anything is written, every folder this command would write into
    that already holds something (CohortError or ValueError naming it)."""
    if args.shipped:
        root = SHIPPED_ROOT if args.out is None else Path(args.out)
        _refuse_taken(root)
        return
    _entries(Path(args.out))  # a file named --out is refused
    if args.geo_holdout is not None:
        for name in GEO_SPLIT_ROOTS:
            _refuse_taken(_split_target(Path(args.out) / name, args.resolution, args.split))
    else:
        _refuse_taken(_split_target(args.out, args.resolution, args.split))


def _shipped(args, err: _Err) -> int:
    out = SHIPPED_ROOT if args.out is None else args.out
    seed = SHIPPED_SEED if args.seed is None else args.seed
    command = "python -m cli make-cohort --shipped" + (
        "" if args.out is None else f" --out {args.out}") + (
        "" if args.seed is None else f" --seed {args.seed}")
    try:
        _check_targets(args)
        with _progress_bar(not args.no_progress) as bar:
            manifest = build_shipped_cohort(out, seed, progress=_Bars(bar), command=command)
    except (CohortError, TerrainError, FileExistsError, ValueError) as e:
        err.print(f"make-cohort: {e}")
        return 2
    for s in manifest["splits"]:
        say(f"{s['resolution']}x{s['resolution']} {s['split']}: {s['n_scenes']} scenes {s['rasters']}")
    return 0


def _geo(args, err: _Err, t0: float) -> int:
    try:
        _check_targets(args)
        with _progress_bar(not args.no_progress) as bar:
            res = make_geo_splits(args.out, args.resolution, args.n_scenes, args.geo_holdout,
                                  seed=0 if args.seed is None else args.seed, split=args.split,
                                  coverage_max=args.coverage_max, progress=_Bars(bar))
    except (CohortError, TerrainError, FileExistsError, ValueError) as e:
        err.print(f"make-cohort: {e}")
        return 2
    for name, sm in res["splits"].items():
        say(f"{name}: {sm['n_scenes']} scenes in {sm['root']} from "
            + ", ".join(f"{k} {v}" for k, v in sorted(sm["rasters"].items())))
    say(f"done in {time.perf_counter() - t0:.1f} s; run and score the planner on both roots, then "
        f"python -m cli trust --holdout RUN --random-split RUN")
    return 0


def main(args) -> int:
    err = _Err()
    if args.shipped:
        return _shipped(args, err)
    missing = ["--" + a.replace("_", "-") for a in _SPLIT_ARGS if getattr(args, a) is None]
    if missing:
        err.print(f"make-cohort: {', '.join(missing)} required (or --shipped)")
        return 2
    if args.rasters is not None:
        unknown = [k for k in args.rasters if k not in RASTERS]
        if unknown:
            err.print(f"make-cohort: unknown raster(s) {unknown}; shipped: {list(RASTERS)}")
            return 2
    t0 = time.perf_counter()
    if args.geo_holdout is not None:
        return _geo(args, err, t0)
    try:
        _check_targets(args)
        for key, why in eligible_rasters(args.resolution, args.rasters)[1].items():
            err.print(f"skipping raster {key} at this resolution: {why}")
        with _progress_bar(not args.no_progress) as bar:
            summary = make_cohort(args.out, args.resolution, args.split, args.n_scenes,
                                  seed=0 if args.seed is None else args.seed,
                                  coverage_max=args.coverage_max, rasters=args.rasters,
                                  rows_per_shard=args.rows_per_shard, progress=_Bars(bar))
    except (CohortError, TerrainError, FileExistsError, ValueError) as e:
        err.print(f"make-cohort: {e}")
        return 2
    n = summary["resolution"]
    say(f"wrote {summary['n_scenes']} scenes to {Path(args.out) / f'{n}x{n}' / summary['split']} "
        f"in {time.perf_counter() - t0:.1f} s; rasters: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["rasters"].items())))
    return 0
