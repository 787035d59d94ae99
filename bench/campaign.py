"""Benchmark: the headline-scale campaign (run, admission, score, compare, audit) against N.

The paper's headline workload is 40,000 test scenes at 256x256 under three seeds.
This script builds N-scene 256x256 test cohorts from the shipped rasters, runs every
step of the campaign at each N in a fresh subprocess, measures its wall-clock time
and its exact peak RSS, fits ``time ~ a + b*N`` and ``peak ~ a + b*N`` per step and
extrapolates to 40,000 scenes x three seeds.

Cohort. Crops of the shipped rasters (``passage_jax.data.terrain``) are drawn in a
seeded order; each crop carries ``--scenes-per-crop`` scenes, each with its own
start, goal and superellipse obstacles (the shipped maker's placement rules,
``passage_jax.data.cohort``). All six released routes (three objectives x free /
obstacles) are labelled exactly with SciPy's ``csgraph.dijkstra``, as the shipped
maker does, but the three free-terrain graphs of a crop are built once and each
obstacle graph is the free graph without the edges into obstacle cells (moves check
their destination only, SPEC §2), so the tie-breaks and the labels are those of
``scipy_task_graph``. Every label is rebuilt from the predecessors, checked legal
and recosted (``LABEL_RTOL``); the first scene of every shard is also labelled with
``cohort.solve_label`` (its own graph) and must give the same routes and c*. Shards
of ``--rows-per-shard`` scenes are built in ``--workers`` processes. Scenes are
checked pairwise distinct (tensor hashes). The cohort is cached under
``--work DIR`` as ``cohort-<res>-n<N>-s<seed>/`` and reused by later runs.

Scale tests (``build_cohort(..., mirror=True)``, used by ``bench/resolutions.py``): at a
resolution larger than every shipped raster (2,048 and 4,096; the largest raster,
gironde, is 1142x1093), a crop is a window of the plane tiled with mirrored copies of a
raster (:func:`mirror_window`, ``numpy.pad(..., mode="symmetric")`` extended without
end), cut from the rasters whose smaller side is at least a quarter of the resolution
(the largest raster when none is). Such a cohort is a *scale-test cohort*: its folder
ends in ``-scale``, its record (``campaign_cohort.json``) says ``scale_test`` and every
scene's ``metadata.source.scale_test`` says how it was tiled. Mirrored terrain repeats
itself and has artificial ridges and valleys at the seams: it measures time and memory,
never quality; its scores are not results.

Steps, each ``python -m cli ...`` in a fresh process started by a small wrapper
that reports the wall-clock time and the child's ``ru_maxrss`` from ``wait4``
(the exact peak RSS of that command; VmHWM polled from /proc is kept as a cross-check):
``admission`` (``run --dry-run``), ``run_exact`` and ``run_bfs`` (one seed each,
configs/exact.yaml and configs/bfs.yaml as models), ``score_exact``, ``score_bfs``,
``compare`` (exact vs BFS) and ``audit`` (``--json``, qualification on).

Projection to 40,000 scenes x 3 seeds: admission and audit run once; a three-seed
run admits once and runs each seed, ``admission + 3 * (run - admission)``; score
scores three seeds, ``3 * score``; one compare over 3 seeds x 2 methods costs
what the fit gives at ``3 * 40,000`` scenes (linear in its records). Peaks: run and
score handle one seed at a time (peak at 40,000), compare holds all three seeds
(peak at 120,000).

    python bench/campaign.py                    # N = 500, 2000, 8000
    python bench/campaign.py --quick            # N = 50, 200, 800
    python bench/campaign.py --sizes 100 400 --work /tmp/campaign --json-out campaign.json
Last line: ``projected: <hours> h for 40000 scenes x 3 seeds; peak <GB> GB (fits 24 GB: yes|no)``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import scipy.sparse
import scipy.sparse.csgraph

from passage_jax.data.cohort import (
    CELL_SIZE_M,
    DEFAULT_WEIGHTS,
    GENERATOR,
    CohortError,
    Crop,
    Labels,
    crop_tile,
    eligible_rasters,
    place_scene,
    scene_row,
    solve_label,
)
from passage_jax.data.scene import (
    PASSAGE_CALIBRATION,
    SPLITS,
    canonical_split,
    elevation_metres,
    normalise_elevation,
)
from passage_jax.data.terrain import RASTERS, load_raster
from passage_jax.data.writer import atomic_write_table, rows_to_table
from passage_jax.fileio import atomic_write_json, read_document
from passage_jax.graph import OBJECTIVES, VARIANTS
from passage_jax.reference.csgraph import scipy_task_graph
from passage_jax.run.specification import DEFAULTS as SPEC_DEFAULTS

__all__ = [
    "HEADLINE_SCENES", "HEADLINE_SEEDS", "MEMORY_LIMIT_GB", "STEPS", "CAMPAIGN_STEPS",
    "SCALE_TEST_NOTE", "drop_edges_into", "mirror_window", "scale_test_rasters", "needs_mirror",
    "build_shard", "build_cohort", "cohort_folder",
    "fit_line", "project", "measure_command", "main",
]

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HEADLINE_SCENES = 40_000
HEADLINE_SEEDS = 3
MEMORY_LIMIT_GB = 24.0
STEPS = ("admission", "run_exact", "run_greedy", "run_bfs", "score_exact", "score_greedy",
         "score_bfs", "compare", "audit")
#: the steps of the headline exact-planner campaign (the projected total)
CAMPAIGN_STEPS = ("admission", "run_exact", "score_exact", "compare")
_MARKER = "campaign_cohort.json"
_MAX_SCENE_TRIES = 200
_MAX_OBSTACLE_TRIES = 30
_MAX_CROP_TRIES = 50
#: what a scale-test (mirrored) scene and cohort say of themselves
SCALE_TEST_NOTE = ("scale test only: mirrored tiling of a shipped raster, not real terrain at this "
                   "size; its scores are not results")
#: a scale-test crop is cut from rasters whose smaller side is at least resolution / this
_MIRROR_COPIES = 4

# --------------------------------------------------------------------------- #
# The cohort builder
# --------------------------------------------------------------------------- #


def drop_edges_into(graph: scipy.sparse.csr_matrix, blocked: np.ndarray) -> scipy.sparse.csr_matrix:
    """``graph`` without its edges whose destination cell is blocked, entries kept in order
    (the obstacle graph of a task is its free graph so thinned: moves check their destination)."""
    keep = ~np.asarray(blocked, bool).ravel()[graph.indices]
    # kept entries up to each position: never more than nnz, so the index dtype holds them
    cum = np.concatenate([np.zeros(1, graph.indptr.dtype), np.cumsum(keep, dtype=graph.indptr.dtype)])
    indptr = cum[graph.indptr]
    return scipy.sparse.csr_matrix((graph.data[keep], graph.indices[keep], indptr),
                                   shape=graph.shape)


def mirror_window(z: np.ndarray, row0: int, col0: int, n: int) -> np.ndarray:
    """The ``n`` x ``n`` window at (``row0``, ``col0``) of the plane tiled with mirrored
    copies of ``z`` (H x W): cell (i, j) is ``z[m(row0 + i, H), m(col0 + j, W)]`` where
    ``m(k, L)`` is ``k mod 2L`` folded back into ``[0, L)`` (``2L - 1 - k`` past ``L``),
    so the plane repeats with periods 2H and 2W and each copy mirrors its neighbours
    (``numpy.pad(z, ..., mode="symmetric")`` continued without end). ``row0`` and
    ``col0`` are non-negative; a contiguous copy is returned."""
    z = np.asarray(z)
    if z.ndim != 2 or min(z.shape) < 1:
        raise CohortError(f"mirror_window: a 2-D raster is needed, got shape {z.shape}")
    if row0 < 0 or col0 < 0 or n < 1:
        raise CohortError(f"mirror_window: row0, col0 >= 0 and n >= 1 needed, got {row0}, {col0}, {n}")

    def fold(start: int, length: int) -> np.ndarray:
        k = (start + np.arange(n, dtype=np.int64)) % (2 * length)
        return np.where(k < length, k, 2 * length - 1 - k)

    return np.ascontiguousarray(z[np.ix_(fold(row0, z.shape[0]), fold(col0, z.shape[1]))])


def scale_test_rasters(n: int) -> list[str]:
    """The rasters a scale-test crop of side ``n`` is cut from (when no shipped raster
    is ``n`` x ``n``): those whose smaller side is at least ``n / 4`` (at most four
    mirrored copies across a crop), else the largest raster (by cells)."""
    sizes = {k: load_raster(k)[1]["shape"] for k in RASTERS}
    keys = [k for k, (h, w) in sizes.items() if _MIRROR_COPIES * min(h, w) >= n]
    return keys or [max(sizes, key=lambda k: (sizes[k][0] * sizes[k][1], k))]


def _crop(seed: int, n: int, split_ix: int, crop: int, order: list, loaded: dict,
          mirror: bool = False) -> dict:
    key = order[crop % len(order)]
    z_raster, info = loaded[key]
    h, w = z_raster.shape
    rng = np.random.default_rng([seed, n, split_ix, 0, crop])
    for _ in range(_MAX_CROP_TRIES):
        if mirror:  # any window of the mirrored plane (periods 2h, 2w)
            row0, col0 = int(rng.integers(2 * h)), int(rng.integers(2 * w))
            window = mirror_window(z_raster, row0, col0, n)
        else:
            row0, col0 = int(rng.integers(h - n + 1)), int(rng.integers(w - n + 1))
            window = z_raster[row0:row0 + n, col0:col0 + n]
        e = normalise_elevation(window, PASSAGE_CALIBRATION)
        if not (e.min() >= 0.0 and e.max() <= 1.0):
            raise CohortError(f"{key}: crop at ({row0}, {col0}) leaves the calibration range")
        z = elevation_metres(e, PASSAGE_CALIBRATION)  # what a reader reconstructs
        if z.max() > z.min():
            break
    else:
        raise CohortError(f"{key}: no {n}x{n} crop with relief after {_MAX_CROP_TRIES} tries")
    free = np.zeros((n, n), bool)
    graphs = {obj: scipy_task_graph(z, free, obj, DEFAULT_WEIGHTS[obj], CELL_SIZE_M)
              for obj in OBJECTIVES}
    return {"key": key, "info": info, "row0": row0, "col0": col0, "e": e, "z": z,
            "graphs": graphs, "mirror": bool(mirror)}


def _scene(c: dict, rng, n: int, split: str, *, index: int, seed: int, coverage_max: float,
           min_sep: int, check: bool) -> dict:
    z = c["z"]
    for _ in range(_MAX_SCENE_TRIES):
        placed = place_scene(rng, n, min_sep, coverage_max)
        if placed is not None:
            break
    else:
        raise CohortError(f"{c['key']}: no acceptable scene on the crop at ({c['row0']}, "
                          f"{c['col0']}) after {_MAX_SCENE_TRIES} tries")
    start, goal, obst = placed.start, placed.goal, placed.obstacles
    routes, c_star = {}, {}
    free = np.zeros_like(obst)
    for obj in OBJECTIVES:
        wt = DEFAULT_WEIGHTS[obj]
        for var in VARIANTS:
            blocked = obst if var == "obstacles" else free
            g = drop_edges_into(c["graphs"][obj], obst) if var == "obstacles" else c["graphs"][obj]
            cs, route = solve_label(z, blocked, start, goal, obj, wt, graph=g)
            if check:  # the shipped maker's own labelling, graph built afresh
                cs2, route2 = solve_label(z, blocked, start, goal, obj, wt)
                if cs2 != cs or not np.array_equal(route, route2):
                    raise CohortError(f"scene {index}: label {obj}/{var} differs from "
                                      f"cohort.solve_label ({cs!r} vs {cs2!r})")
            routes[(obj, var)] = route
            c_star[f"{obj}/{var}"] = cs
    crop = Crop(c["key"], c["info"], c["row0"], c["col0"], c["e"])
    if not c["mirror"]:
        return scene_row(crop, placed, Labels(routes, c_star), split=split, index=index, seed=seed,
                         generator=f"{GENERATOR} (bench/campaign.py)")
    row = scene_row(crop, placed, Labels(routes, c_star), split=split, index=index, seed=seed,
                    generator=f"{GENERATOR} (bench/campaign.py, scale test: mirrored tiling)")
    md = row["metadata"]
    h, w = c["info"]["shape"]
    # the window lies on mirrored copies of the raster: its tiles are the raster's own
    md["tile"] = crop_tile(c["info"], 0, 0, h, w)
    md["source"]["scale_test"] = {
        "tiling": "mirror", "raster_shape": [int(h), int(w)],
        "window": "row0/col0 of metadata.crop are on the plane tiled with mirrored copies of "
                  "the raster (periods 2x its rows and columns; bench/campaign.py mirror_window)",
        "note": SCALE_TEST_NOTE}
    return row


def build_shard(folder, shard: int, first: int, count: int, *, n: int, split: str, seed: int,
                scenes_per_crop: int = 4, coverage_max: float = 0.3, check: bool = True,
                mirror: bool = False) -> dict:
    """Build scenes ``first .. first + count - 1`` and write them as
    ``<folder>/part-<shard>.parquet``. Scene ``i`` sits on crop ``i // scenes_per_crop``;
    crops and scenes draw from their own seeded generators, so a scene does not depend
    on how the cohort is cut into shards. ``check`` relabels the shard's first scene with
    ``cohort.solve_label``. ``mirror``: where no shipped raster is ``n`` x ``n``, cut
    scale-test crops from mirrored tilings (:func:`scale_test_rasters`,
    :func:`mirror_window`; each scene labelled so). Returns the tensor hashes and the
    rasters used."""
    split = canonical_split(split)
    split_ix = SPLITS.index(split)
    keys, _ = eligible_rasters(n)
    tiled = bool(mirror) and not keys
    if tiled:
        keys = scale_test_rasters(n)
    if not keys:
        raise CohortError(f"no shipped raster can serve {n}x{n} crops (a scale test may tile "
                          "them: build_cohort(..., mirror=True))")
    order = [keys[j] for j in np.random.default_rng([seed, n, split_ix, 2]).permutation(len(keys))]
    loaded = {k: load_raster(k) for k in keys}
    min_sep = math.ceil(n / 3)
    rows, hashes, crop, current = [], [], None, None
    for i in range(first, first + count):
        if i // scenes_per_crop != crop:
            crop = i // scenes_per_crop
            current = _crop(seed, n, split_ix, crop, order, loaded, mirror=tiled)
        rng = np.random.default_rng([seed, n, split_ix, 1, i])
        row = _scene(current, rng, n, split, index=i, seed=seed, coverage_max=coverage_max,
                     min_sep=min_sep, check=check and i == first)
        hashes.append(hashlib.sha256(row["tensor"].tobytes()).hexdigest())
        rows.append(row)
    path = Path(folder) / f"part-{shard:05d}.parquet"
    atomic_write_table(rows_to_table(rows), path)
    return {"shard": shard, "hashes": hashes,
            "rasters": [r["metadata"]["source"]["raster"] for r in rows]}


def _shard_job(job: dict) -> dict:
    return build_shard(**job)


def cohort_folder(work, n_scenes: int, seed: int, resolution: int = 256,
                  scale_test: bool = False) -> Path:
    """The cache folder of a cohort: ``<work>/cohort-<res>-n<N>-s<seed>`` (a dataset root;
    ``-scale`` appended for a scale-test cohort of mirrored tilings)."""
    return Path(work) / f"cohort-{resolution}-n{n_scenes}-s{seed}{'-scale' if scale_test else ''}"


def needs_mirror(resolution: int) -> bool:
    """No shipped raster is ``resolution`` x ``resolution``: a cohort at that size can
    only be a scale test of mirrored tilings."""
    return not eligible_rasters(int(resolution))[0]


def build_cohort(work, n_scenes: int, *, seed: int = 0, resolution: int = 256, split: str = "test",
                 workers: int = 2, rows_per_shard: int = 64, scenes_per_crop: int = 4,
                 coverage_max: float = 0.3, mirror: bool = False, log=None) -> dict:
    """The cached ``n_scenes``-scene cohort under ``work`` (built when absent, else reused).

    ``mirror``: where no shipped raster is ``resolution`` x ``resolution``, build a
    scale-test cohort of mirrored tilings (the module docstring) instead of refusing;
    its summary and record then carry ``scale_test`` (a note saying it measures time and
    memory, never quality). Returns its summary (``root``, build seconds, rasters used,
    ``reused``). A cohort whose scenes are not pairwise distinct is refused
    (CohortError)."""
    if int(n_scenes) != n_scenes or n_scenes < 1:
        raise CohortError(f"n_scenes must be a positive integer, got {n_scenes!r}")
    if int(resolution) != resolution or resolution < 8:
        raise CohortError(f"resolution must be an integer >= 8, got {resolution!r}")
    split = canonical_split(split)
    tiled = bool(mirror) and needs_mirror(resolution)
    root = cohort_folder(work, n_scenes, seed, resolution, scale_test=tiled)
    wanted = {"n_scenes": int(n_scenes), "seed": int(seed), "resolution": int(resolution),
              "split": split, "rows_per_shard": int(rows_per_shard),
              "scenes_per_crop": int(scenes_per_crop), "coverage_max": float(coverage_max)}
    if tiled:
        wanted["scale_test"] = {"tiling": "mirror", "rasters": scale_test_rasters(resolution),
                                "note": SCALE_TEST_NOTE}
    marker = root / _MARKER
    if marker.exists():
        done = read_document(marker, CohortError, "cohort record")
        if {k: done.get(k) for k in wanted} != wanted:
            raise CohortError(f"{root} holds another cohort ({marker}); remove it or pick --work")
        return {**done, "root": str(root), "reused": True}
    partial = root.with_name(root.name + ".partial")
    if partial.exists():  # an interrupted build of this very cohort
        shutil.rmtree(partial)
    folder = partial / f"{resolution}x{resolution}" / split
    folder.mkdir(parents=True)
    jobs = [{"folder": str(folder), "shard": k, "first": f,
             "count": min(rows_per_shard, n_scenes - f), "n": int(resolution), "split": split,
             "seed": int(seed), "scenes_per_crop": int(scenes_per_crop),
             "coverage_max": float(coverage_max), "mirror": tiled}
            for k, f in enumerate(range(0, n_scenes, rows_per_shard))]
    larger = _larger_cohort(work, wanted)
    if larger is not None:
        return _derive_cohort(larger, jobs, wanted, partial, root, workers=workers)
    t0 = time.perf_counter()
    results = []
    if workers > 1 and len(jobs) > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(workers, len(jobs))) as pool:
            for r in pool.imap_unordered(_shard_job, jobs):
                results.append(r)
                if log:
                    log(f"cohort n={n_scenes}: {len(results)}/{len(jobs)} shards")
    else:
        for job in jobs:
            results.append(_shard_job(job))
    seconds = time.perf_counter() - t0
    hashes = [h for r in sorted(results, key=lambda r: r["shard"]) for h in r["hashes"]]
    if len(set(hashes)) != len(hashes):
        raise CohortError(f"cohort n={n_scenes} seed={seed}: {len(hashes) - len(set(hashes))} "
                          "scene(s) repeat another scene")
    used: dict[str, int] = {}
    for r in results:
        for k in r["rasters"]:
            used[k] = used.get(k, 0) + 1
    summary = {**wanted, "build_s": seconds, "workers": int(workers), "rasters": used,
               "shards": len(jobs)}
    atomic_write_json(partial / _MARKER, summary)
    if root.exists():
        shutil.rmtree(root)
    partial.rename(root)
    return {**summary, "root": str(root), "reused": False}


def _larger_cohort(work, wanted: dict) -> Path | None:
    """A finished cohort under ``work`` of the same seed, resolution, split and build
    settings as ``wanted`` but more scenes (the smallest such), or None."""
    best = None
    tail = "-scale" if "scale_test" in wanted else ""
    for marker in Path(work).glob(f"cohort-{wanted['resolution']}-n*-s{wanted['seed']}{tail}/{_MARKER}"):
        try:
            done = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        same = all(done.get(k) == v for k, v in wanted.items() if k != "n_scenes")
        if same and int(done.get("n_scenes", 0)) > wanted["n_scenes"]:
            if best is None or done["n_scenes"] < best[0]:
                best = (done["n_scenes"], marker.parent)
    return None if best is None else best[1]


def _derive_cohort(larger: Path, jobs: list, wanted: dict, partial: Path, root: Path, *,
                   workers: int) -> dict:
    """The first ``n_scenes`` scenes of the finished ``larger`` cohort: its whole shards
    hard-linked (the same files), a last partial shard built again (a scene does not
    depend on how the cohort is cut into shards, so these are the same scenes). The
    larger cohort's scenes were checked pairwise distinct, so its prefix is."""
    t0 = time.perf_counter()
    sub = f"{wanted['resolution']}x{wanted['resolution']}/{wanted['split']}"
    rest = []
    for job in jobs:
        name = f"part-{job['shard']:05d}.parquet"
        if job["count"] == wanted["rows_per_shard"]:
            os.link(larger / sub / name, Path(job["folder"]) / name)
        else:
            rest.append(job)
    for job in rest:
        _shard_job(job)
    used: dict[str, int] = {}
    for f in sorted(Path(jobs[0]["folder"]).glob("part-*.parquet")):
        for text in pq.read_table(f, columns=["metadata"]).column("metadata").to_pylist():
            k = json.loads(text)["source"]["raster"]
            used[k] = used.get(k, 0) + 1
    summary = {**wanted, "build_s": time.perf_counter() - t0, "workers": int(workers), "rasters": used,
               "shards": len(jobs), "derived_from": str(larger)}
    atomic_write_json(partial / _MARKER, summary)
    if root.exists():
        shutil.rmtree(root)
    partial.rename(root)
    return {**summary, "root": str(root), "reused": False}


# --------------------------------------------------------------------------- #
# Fits and projection
# --------------------------------------------------------------------------- #


def fit_line(ns, ys) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y ~ a + b*N`` (one point: a = 0, b = y/N)."""
    x = np.asarray(ns, np.float64)
    y = np.asarray(ys, np.float64)
    if x.size != y.size or x.size == 0:
        raise ValueError(f"fit_line needs as many N as values (got {x.size} and {y.size})")
    if x.size == 1:
        return 0.0, float(y[0] / x[0])
    a, b = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), y, rcond=None)[0]
    return float(a), float(b)


def project(rows: list[dict], n_target: int = HEADLINE_SCENES, seeds: int = HEADLINE_SEEDS,
            limit_gb: float = MEMORY_LIMIT_GB, pass_scale: float = 1.0) -> dict:
    """Extrapolate measured ``rows`` ({n, step, seconds, peak_gb}) to ``n_target`` scenes x
    ``seeds`` seeds under the assumptions of the module docstring. ``pass_scale`` is the
    number of request passes of the projected protocol over the measured one: the request
    time of run and score steps (run minus admission; score) scales by it. Returns per-step
    fits, projected seconds and peaks, the exact-planner campaign's total time
    (:data:`CAMPAIGN_STEPS`) and largest peak, and whether that peak fits. A projection
    never falls below the step's largest measurement (a falling fit is noise)."""
    fits, floor = {}, {}
    for step in STEPS:
        pts = [r for r in rows if r["step"] == step]
        if not pts:
            continue
        ns = [r["n"] for r in pts]
        fits[step] = {"time": fit_line(ns, [r["seconds"] for r in pts]),
                      "peak": fit_line(ns, [r["peak_gb"] for r in pts])}
        floor[step] = {"time": max(r["seconds"] for r in pts), "peak": max(r["peak_gb"] for r in pts)}

    def at(step, kind, n):  # never below the largest measurement (a falling fit is noise)
        a, b = fits[step][kind]
        return max(a + b * n, floor[step][kind])

    seconds, peaks = {}, {}
    for step in fits:
        n_eff = seeds * n_target if step == "compare" else n_target
        peaks[step] = at(step, "peak", n_eff)
        if step.startswith("run_"):
            adm = at("admission", "time", n_target) if "admission" in fits else 0.0
            seconds[step] = adm + seeds * pass_scale * max(at(step, "time", n_target) - adm, 0.0)
        elif step.startswith("score_"):
            seconds[step] = seeds * pass_scale * at(step, "time", n_target)
        else:
            seconds[step] = at(step, "time", n_eff)
    # the run step includes its own admission: the campaign counts admission once
    camp = [s for s in CAMPAIGN_STEPS if s in seconds and s != "admission"]
    total = float(sum(seconds[s] for s in camp))
    peak = max((peaks[s] for s in CAMPAIGN_STEPS if s in peaks), default=float("nan"))
    return {"n_target": n_target, "seeds": seeds, "pass_scale": pass_scale, "fits": fits,
            "seconds": seconds, "peak_gb": peaks, "campaign_steps": list(CAMPAIGN_STEPS),
            "total_s": total, "max_peak_gb": peak, "fits_limit": bool(peak <= limit_gb),
            "limit_gb": limit_gb}


# --------------------------------------------------------------------------- #
# Measuring one command
# --------------------------------------------------------------------------- #

# The wrapper imports nothing heavy: the command it forks inherits its small address
# space, so the command's ru_maxrss is the command's own peak.
_WRAPPER = r"""
import json, os, subprocess, sys, time
out, log, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
with open(log, "wb") as lf:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
    polled = 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        v = hwm(p.pid)
        polled = max(polled, v or 0)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
rc = os.waitstatus_to_exitcode(status)
with open(out, "w") as f:
    json.dump({"rc": rc, "wall_s": wall, "maxrss_kb": ru.ru_maxrss, "vmhwm_polled_kb": polled}, f)
"""


def measure_command(cmd: list, log: Path, *, env=None) -> dict:
    """Run ``cmd`` in a fresh process (through the wrapper); its wall seconds, exit status
    and peak RSS (``wait4`` ru_maxrss, KiB; and the polled VmHWM). Output goes to ``log``."""
    log = Path(log)
    out = log.with_suffix(".measure.json")
    subprocess.run([sys.executable, "-c", _WRAPPER, str(out), str(log), *map(str, cmd)],
                   check=True, env=env)
    res = json.loads(out.read_text())
    out.unlink()
    return res


# --------------------------------------------------------------------------- #
# The campaign
# --------------------------------------------------------------------------- #


def _spec(model: str, root: Path, n: int, *, resolution: int, seed: int, warmup: int,
          repeats: int, out: Path) -> Path:
    spec = read_document(REPO / "configs" / f"{model}.yaml", ValueError, "spec", yaml_allowed=True)
    spec.update({"resolution": resolution, "dataset_path": str(root), "split": "test",
                 "n_samples": n, "seeds": [seed], "latency_warmup": warmup,
                 "latency_repeats": repeats, "results_root": str(out.parent)})
    path = out.parent / f"spec-{model}-n{n}.json"
    atomic_write_json(path, spec)
    return path


def _steps(root: Path, n: int, case: Path, *, resolution: int, seed: int, warmup: int,
           repeats: int, bfs: bool = True, audit: bool = True) -> list:
    cli = [sys.executable, "-m", "cli"]

    def spec(model):
        return _spec(model, root, n, resolution=resolution, seed=seed, warmup=warmup,
                     repeats=repeats, out=case / model)
    sx, sg = spec("exact"), spec("greedy")
    steps = [
        ("admission", cli + ["run", "--spec", sx, "--output", case / "dry", "--dry-run",
                             "--no-progress"]),
        ("run_exact", cli + ["run", "--spec", sx, "--output", case / "exact", "--no-progress"]),
        ("run_greedy", cli + ["run", "--spec", sg, "--output", case / "greedy", "--no-progress"]),
    ]
    if bfs:
        steps.append(("run_bfs", cli + ["run", "--spec", spec("bfs"), "--output", case / "bfs",
                                        "--no-progress"]))
    steps += [("score_exact", cli + ["score", "--run", case / "exact"]),
              ("score_greedy", cli + ["score", "--run", case / "greedy"])]
    if bfs:
        steps.append(("score_bfs", cli + ["score", "--run", case / "bfs"]))
    steps.append(("compare", cli + ["compare", "--score", case / "exact", "--score", case / "greedy",
                                    "--output", case / "compare.json"]))
    if audit:
        steps.append(("audit", cli + ["audit", "--dataset-path", root, "--resolution",
                                      str(resolution), "--split", "test", "--json",
                                      case / "audit.json"]))
    return steps


def _ratio(by: dict, step: str, big: int, small: int) -> str:
    if (step, big) in by and (step, small) in by:
        return f"{by[(step, big)] / by[(step, small)]:.2f}"
    return "n/a"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 50, 200, 800")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                    help="cohort sizes (default 500 2000 8000)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/passage_campaign"),
                    help="folder for cohorts (cached by N and seed), run folders and logs")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the figures as JSON")
    ap.add_argument("--resolution", type=int, default=256, help="scene side (default 256)")
    ap.add_argument("--cohort-seed", type=int, default=0, help="seed of the cohorts (default 0)")
    ap.add_argument("--seed", type=int, default=1234, help="the one run seed per measurement")
    ap.add_argument("--workers", type=int, default=2, help="cohort builder processes")
    ap.add_argument("--latency-warmup", type=int, default=None,
                    help="spec latency_warmup (default: the spec default)")
    ap.add_argument("--latency-repeats", type=int, default=None,
                    help="spec latency_repeats (default: the spec default)")
    ap.add_argument("--cohort-only", action="store_true", help="build (or reuse) the cohorts only")
    ap.add_argument("--bfs-max", type=int, default=500,
                    help="run BFS only up to this N (pure-Python search, ~1 s a request at 256x256)")
    ap.add_argument("--audit-max", type=int, default=2000, help="run the audit only up to this N")
    args = ap.parse_args(argv)
    sizes = args.sizes or ((50, 200, 800) if args.quick else (500, 2000, 8000))
    # the configs pin 1/1 for quick demos; the campaign times with the spec defaults unless told
    warmup = SPEC_DEFAULTS["latency_warmup"] if args.latency_warmup is None else args.latency_warmup
    repeats = (SPEC_DEFAULTS["latency_repeats"] if args.latency_repeats is None
               else args.latency_repeats)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs  python {platform.python_version()}")
    print(f"sizes {list(sizes)} at {args.resolution}x{args.resolution}; run seed {args.seed}; "
          f"latency_warmup {warmup}, latency_repeats {repeats}; work {work}")
    cohorts = {}
    for n in sizes:
        c = build_cohort(work, n, seed=args.cohort_seed, resolution=args.resolution,
                         workers=args.workers)
        cohorts[n] = c
        how = "reused" if c["reused"] else "built"
        print(f"cohort n={n}: {how} ({c['build_s']:.1f} s to build with {c['workers']} workers, "
              f"{c['build_s'] / n * 1000:.1f} ms/scene) {c['root']}", flush=True)
    if args.cohort_only:
        print("cohorts ready")
        return 0

    rows = []
    print(f"{'N':>6} {'step':<12} {'seconds':>9} {'peak RSS GB':>12} {'s/scene':>9}", flush=True)
    for n in sizes:
        case = work / f"case-{args.resolution}-n{n}-s{args.cohort_seed}-seed{args.seed}"
        if case.exists():
            shutil.rmtree(case)
        case.mkdir(parents=True)
        for step, cmd in _steps(Path(cohorts[n]["root"]), n, case, resolution=args.resolution,
                                seed=args.seed, warmup=warmup, repeats=repeats,
                                bfs=n <= args.bfs_max, audit=n <= args.audit_max):
            log = case / f"{step}.log"
            m = measure_command(cmd, log, env=env)
            if m["rc"] not in (0,):
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"{step} at N={n} exited {m['rc']} ({log}):\n{tail}")
            row = {"n": n, "step": step, "seconds": m["wall_s"], "peak_gb": m["maxrss_kb"] / 2**20,
                   "vmhwm_polled_gb": m["vmhwm_polled_kb"] / 2**20, "per_scene_s": m["wall_s"] / n}
            rows.append(row)
            print(f"{n:>6} {step:<12} {row['seconds']:9.2f} {row['peak_gb']:12.3f} "
                  f"{row['per_scene_s']:9.4f}", flush=True)

    canonical = 1 + SPEC_DEFAULTS["latency_warmup"] + SPEC_DEFAULTS["latency_repeats"]
    measured = 1 + warmup + repeats
    proj = project(rows, pass_scale=canonical / measured)
    print(f"\nrequest passes: measured {measured} (cold + {warmup} warm-up + {repeats} warm), "
          f"projected {canonical} (the spec defaults): request time x {canonical / measured:.2f}")
    print(f"\nfits (a + b*N) and projection to {HEADLINE_SCENES} scenes x {HEADLINE_SEEDS} seeds:")
    print(f"{'step':<12} {'a s':>8} {'b s/scene':>10} {'a GB':>7} {'b MB/scene':>11} "
          f"{'proj. h':>8} {'proj. peak GB':>14}")
    for step, f in proj["fits"].items():
        (ta, tb), (pa, pb) = f["time"], f["peak"]
        print(f"{step:<12} {ta:8.2f} {tb:10.4f} {pa:7.3f} {pb * 1024:11.3f} "
              f"{proj['seconds'][step] / 3600:8.2f} {proj['peak_gb'][step]:14.2f}")
    print("assumptions: admission and audit once; run = admission + 3 x passes x (run - admission); "
          "score = 3 x passes x score; compare once at 3 x 40000 records (linear); run/score peaks "
          "per seed, compare peak at 120000 records; campaign total = "
          + " + ".join(CAMPAIGN_STEPS[1:]) + " (each run admits once)")
    by = {(r["step"], r["n"]): r["peak_gb"] for r in rows}
    lo, hi = min(sizes), max(sizes)
    for step in ("admission", "run_exact", "run_greedy", "run_bfs", "score_exact", "score_greedy",
                 "score_bfs"):
        print(f"peak ratio {step}: {hi}/{lo} = {_ratio(by, step, hi, lo)}; "
              f"8000/500 = {_ratio(by, step, 8000, 500)}; 2000/200 = {_ratio(by, step, 2000, 200)} "
              "(target <= 1.25)")
    if args.json_out:
        atomic_write_json(args.json_out, {
            "machine": platform.machine(), "cpus": os.cpu_count(), "sizes": list(sizes),
            "resolution": args.resolution, "seed": args.seed, "latency_warmup": warmup,
            "latency_repeats": repeats,
            "cohorts": {str(n): c for n, c in cohorts.items()}, "rows": rows, "projection": proj})
    fits = "yes" if proj["fits_limit"] else "no"
    print(f"projected: {proj['total_s'] / 3600:.2f} h for the exact-planner campaign of "
          f"{HEADLINE_SCENES} scenes x {HEADLINE_SEEDS} seeds; peak {proj['max_peak_gb']:.2f} GB (fits "
          f"{MEMORY_LIMIT_GB:.0f} GB: {fits})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
