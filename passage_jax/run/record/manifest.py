"""What a seed folder says about itself: the seed manifest (``manifest.json``) and the
arrays of ``references.npz``, both built by :func:`passage_jax.run.execution.seed.finish_seed`
when the seed completes.

**The seed manifest.** What a run folder says about itself: the run identity (what a resume
must find unchanged, stored in ``run_started.json``) and the seed manifest
(``manifest.json``).

**The references.** The arrays of ``references.npz`` (:func:`references_arrays`), taken from
the compact task facts admission kept (no grid is read), compressed once per run
(:func:`references_npz`); the format is :mod:`passage_jax.protocol.records`'s."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
from pathlib import Path

import jax
import numpy as np

from passage_jax import fileio
from passage_jax.compilation import compile_stats
from passage_jax.contract import timing_boundary
from passage_jax.data.strata import SCENE_STRATIFIERS
from passage_jax.fileio import sha256_file, utc_now
from passage_jax.protocol.batch import batch_timing
from passage_jax.protocol.records import (
    REFERENCES_FORMAT,
    RUN_FORMAT,
    pack_routes,
    package_versions,
    tasks_sha256,
)
from passage_jax.protocol.runfolder import JOURNAL
from passage_jax.run.context import RunContext

__all__ = ["SeedFiles", "seed_manifest", "hardware", "cpu_settings", "vector_isa", "THREAD_VARIABLES",
           "references_arrays", "references_npz"]


# ---- the seed manifest ---------------------------------------------------------------------

_COMPILATION_SCOPE = ("the run's process (admission, references and in-process planners; "
                      "a supervised worker's compilations are its own)")


@dataclasses.dataclass(frozen=True)
class SeedFiles:
    """The files of a finished seed as built from its journal: the number of records,
    the status counts per series, the sha256 of each seed file and the journal's path."""

    n_records: int
    status_counts: dict
    files: dict
    journal: Path
    sync_interval_s: float  #: how often the journal was fsynced (at most)
    passes: list  #: the seed's passes, ``[series, repeat index]`` in execution order
    batches: dict = dataclasses.field(default_factory=dict)  #: the batched procedure's, if any


def seed_manifest(ctx: RunContext, seed: int, state, made: SeedFiles) -> dict:
    """The seed's ``manifest.json``: the launch's context ``ctx``, the seed's ``state`` (a
    :class:`passage_jax.run.execution.seed.SeedState`, whose module calls this) and the
    files ``made`` from its journal."""
    spec, admitted = ctx.spec, ctx.admitted
    first = state.first_build
    return {
        "format": RUN_FORMAT,
        "seed": int(seed),
        "method_name": spec.method_name,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "spec_source": spec.source,
        "inference_kwargs": spec.kwargs_for_seed(seed),
        "planner": {**admitted.entry, "name": None if first is None else first.planner_name,
                    "construction_ms": None if first is None else first.construction_ms},
        "checkpoints": admitted.checkpoints.get(str(seed), {}),
        "runtime_bundle": admitted.runtime_bundle,
        "component_control": spec.component_control,
        "inference_protocol": ctx.protocol,
        "provenance": ctx.provenance,
        "code": ctx.code,
        "data": _data(admitted),
        "references": _references(admitted.references),
        "timing_profile": spec.timing_profile,
        "timing_boundary": timing_boundary(spec.timing_profile, spec.execution),
        "timing": _timing(spec, first, made.passes),
        "session": _session(admitted, state),
        **({"batched": _batched(admitted, state, made)} if spec.batched else {}),
        "budget": spec.budget.to_dict(),
        "hardware": hardware(),
        "cpu": cpu_settings(),
        "device": None if admitted.device is None else str(admitted.device),
        "versions": package_versions(),
        "n_records": made.n_records,
        "status_counts": made.status_counts,
        "files": made.files,
        "journal": {"file": JOURNAL, "sha256": sha256_file(made.journal),
                    "entries": made.n_records,
                    "durability": f"each record flushed as it completes, fsynced within "
                                  f"{made.sync_interval_s} s and at the seed's end"},
        "resume": _resume(state),
        "compilation": {"process": compile_stats().to_dict(), "scope": _COMPILATION_SCOPE},
        "started_utc": state.started_utc,
        "finished_utc": utc_now(),
    }


def _data(admitted) -> dict:
    spec = admitted.spec
    return {
        "dataset_root": str(Path(admitted.root).resolve()),
        "dataset_path": spec.dataset_path,
        "dataset_repo": spec.dataset_repo,
        "dataset_revision": spec.dataset_revision,
        "resolution": spec.resolution, "split": spec.split,
        "n_samples": spec.n_samples, "n_tasks": len(admitted.tasks),
        "cost_model": spec.cost_model, "task_variant": spec.task_variant,
        "shards": admitted.shards,
        "sample_ids": admitted.sample_ids,
        "tasks_sha256": tasks_sha256(admitted),
        # where the seeds' tasks came from: the grids kept at admission, or (None, or a
        # problem) re-reads of the shards
        "kept_grids": None if getattr(admitted.tasks, "store", None) is None
        else admitted.tasks.store.record(),
    }


def _references(refs) -> dict:
    return {
        "policy": refs.policy, "cohort_id": refs.cohort_id,
        "reference_max_expansions": refs.max_expansions,
        "identity": refs.identity(), "n_qualified": int(refs.qualified.sum()),
        "solvers": sorted(set(refs.solver)),
        "precision": refs.precision, "precision_rtol": refs.precision_rtol,
        "reused_from": refs.reused_from,
    }


def _timing(spec, first, passes: list) -> dict:
    return {
        "profile": None if first is None else first.profile,
        "latency_warmup": spec.latency_warmup, "latency_repeats": spec.latency_repeats,
        "quality_repeat_index": spec.quality_repeat_index,
        "passes": passes,
        "timer": None if first is None else first.timer,
    }


def _session(admitted, state) -> dict | None:
    """The ``session`` block of a session timing profile (None under the default one): the
    warm-up scene and calls, and one entry per session (planner build; a resume starts a
    new session, which runs its warm-up again)."""
    spec = admitted.spec
    if not spec.session_profile:
        return None
    sessions = state.sessions
    return {"profile": spec.timing_profile,
            "warmup_scene": None if admitted.warmup is None else admitted.warmup.id,
            "warmup_split": "validation", "warmup_calls": spec.session_warmup,
            "sessions": sessions, "n_sessions": len(sessions),
            "identical_hardware": len({json.dumps(s.get("hardware"), sort_keys=True)
                                       for s in sessions}) <= 1}


def _batched(admitted, state, made: SeedFiles) -> dict:
    """The ``batched`` block of the batched procedure: its timing
    (:func:`passage_jax.protocol.batch.batch_timing` of the seed's batches), the warm-up
    batches and one entry per planner build (as a session's)."""
    spec = admitted.spec
    sessions = state.sessions
    return {**batch_timing(made.batches, spec.batch_size), "batch_warmup": spec.batch_warmup,
            "warmup_scene": None if admitted.warmup is None else admitted.warmup.id,
            "warmup_split": "validation", "builds": sessions}


def _resume(state) -> dict:
    return {
        "resumed": bool(state.resumes),
        "recovered_records": max((r["recovered_records"] for r in state.resumes), default=0),
        "resumes": list(state.resumes),
        "builds": [b.to_dict() for b in state.builds],
        "repairs": list(state.repairs),
    }


#: the environment variables that set how many threads the numerical libraries use
THREAD_VARIABLES = ("XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def _cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere ``platform.processor()``, or None)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


#: the vector extensions :func:`vector_isa` tells apart, widest first (``/proc/cpuinfo`` flags)
_VECTOR_FLAGS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse2", "sse2"))


def vector_isa() -> str | None:
    """The widest vector extension of an x86 CPU (``avx512``, ``avx2``, ``avx`` or
    ``sse2``, from ``/proc/cpuinfo``'s flags); on another machine its architecture
    (``platform.machine()``); None when neither can be read. XLA's CPU backend chooses its
    code and its convolution kernels by it, so a network's last bits, and a route that
    follows them, can differ between two CPUs under one JAX release (docs/learned.md)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                flags = set(value.split())
                return next((name for flag, name in _VECTOR_FLAGS if flag in flags), None)
    except OSError:
        pass
    return platform.machine() or None


def cpu_settings() -> dict:
    """The CPU that served the run and its thread settings: the model, its vector
    extension (:func:`vector_isa`), the CPUs this process may run on, and the threading
    variables of the environment (None: unset). A planner's latency on a CPU depends on
    them; they are recorded, not compared."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {"model": _cpu_model(), "vector_isa": vector_isa(), "usable_cpus": usable,
            "thread_variables": {k: os.environ.get(k) for k in THREAD_VARIABLES}}


def hardware() -> dict:
    """The machine the run runs on: platform, Python, CPUs and JAX's backend and devices."""
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(),
            "jax_devices": [str(d) for d in jax.devices()],
            "device_kinds": sorted({d.device_kind for d in jax.devices()})}


# ---- the references ------------------------------------------------------------------------

#: the files of a finished seed that the manifest hashes (built from the journal)


def references_arrays(admitted) -> dict:
    """The arrays of ``references.npz`` (from the compact task facts: no grids are read).
    Route cells are stored as int16 when the grid fits (every reference and released
    route is a legal in-grid route); readers widen them to int32."""
    refs, stubs = admitted.references, admitted.tasks.stubs
    cell = np.int16 if admitted.spec.resolution <= np.iinfo(np.int16).max else np.int32
    coords, offsets = pack_routes(refs.routes)
    rel_coords, rel_offsets = pack_routes([t.route for t in stubs])
    n = len(stubs)
    tiles = [json.dumps(t.tile, sort_keys=True) if t.tile is not None else "" for t in stubs]
    return {
        "format": np.array(REFERENCES_FORMAT),
        "policy": np.array(refs.policy),
        "cohort_id": np.array(refs.cohort_id or ""),
        "identity": np.array(refs.identity()),
        "precision": np.array(refs.precision),
        "precision_rtol": np.array(refs.precision_rtol, np.float64),
        "resolution": np.array(admitted.spec.resolution, np.int64),
        "split": np.array(admitted.spec.split),
        "task_index": np.arange(n, dtype=np.int64),
        "sample_id": np.asarray(refs.sample_id, dtype=str),
        "objective": np.asarray([t.objective for t in stubs], dtype=str),
        "variant": np.asarray([t.variant for t in stubs], dtype=str),
        "cost_weight": np.asarray([t.weight for t in stubs], np.float64),
        "start": np.asarray([t.start for t in stubs], np.int32).reshape(n, 2),
        "goal": np.asarray([t.goal for t in stubs], np.int32).reshape(n, 2),
        "c_star": refs.c_star,
        "qualified": refs.qualified,
        "released_cost": refs.released_cost,
        "solver": np.asarray(refs.solver, dtype=str),
        "reason": np.asarray(refs.reason, dtype=str),
        "solver_work": refs.work,
        "route_coords": coords.astype(cell),
        "route_offsets": offsets,
        "released_coords": rel_coords.astype(cell),
        "released_offsets": rel_offsets,
        "input_sha256": np.asarray(admitted.input_hashes(), dtype=str),
        "tile_json": np.asarray(tiles, dtype=str),
        **_strata_members(refs),
    }


def references_npz(admitted) -> bytes:
    """``references.npz`` of the run (:func:`references_arrays`, compressed): the same for
    every seed, so built once per admission and kept on it."""
    kept = getattr(admitted, "_references_npz", None)
    if kept is None:
        kept = admitted._references_npz = fileio.npz_bytes(references_arrays(admitted))
    return kept


def _strata_members(refs) -> dict:
    """The scene stratifiers admission measured (``scene_strata`` and their names), or
    nothing when the references carry none."""
    if refs.scene_strata is None:
        return {}
    return {"scene_strata": np.asarray(refs.scene_strata, np.float64),
            "scene_strata_fields": np.asarray(SCENE_STRATIFIERS, dtype=str)}
