"""What a run folder says about itself: the run identity (what a resume must find
unchanged, stored in ``run_started.json``) and the seed manifest (``manifest.json``)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from pathlib import Path

import jax

from passage_jax.compilation import compile_stats
from passage_jax.contract import timing_boundary
from passage_jax.fileio import jsonable, sha256_file, utc_now
from passage_jax.protocol.batch import batch_timing
from passage_jax.protocol.records import RUN_FORMAT, input_hash, package_versions
from passage_jax.protocol.runfolder import JOURNAL
from passage_jax.run.context import RunContext
from passage_jax.run.record.journal import SYNC_INTERVAL_S
from passage_jax.run.record.launch_record import run_protocol
from passage_jax.run.record.provenance import run_provenance
from passage_jax.run.record.seed_state import Build, SeedState
from passage_jax.run.specification import passes

__all__ = ["run_identity", "tasks_sha256", "tasks_sha256_of", "SeedFiles", "seed_manifest",
           "hardware", "cpu_settings", "vector_isa", "THREAD_VARIABLES"]

_COMPILATION_SCOPE = ("the run's process (admission, references and in-process planners; "
                      "a supervised worker's compilations are its own)")


def tasks_sha256(admitted) -> str:
    """sha256 over the tasks' ``sample_id:input_hash`` lines, in task order."""
    return tasks_sha256_of(admitted.sample_ids, admitted.input_hashes())


def tasks_sha256_of(sample_ids, input_hashes) -> str:
    """:func:`tasks_sha256` of the tasks' ids and input hashes, in task order."""
    h = hashlib.sha256()
    for sid, ih in zip(sample_ids, input_hashes):
        h.update(f"{sid}:{ih}\n".encode())
    return h.hexdigest()


def run_identity(admitted, code: dict, prov: dict | None = None) -> dict:
    """What a resumed run must share with the stored one: spec hash, data (shards by
    name, sha256 and rows; sample ids; tasks hash), references identity, planner entry,
    checkpoints, runtime bundle, code hash, the calibration decisions and roster
    (:mod:`passage_jax.run.record.provenance`), and a session profile's warm-up scene (id and input
    hash)."""
    spec = admitted.spec
    prov = prov or {}
    return jsonable({
        "calibration_decisions": prov.get("calibration_decisions"),
        "roster": prov.get("roster"),
        "spec_sha256": spec.sha256(),
        "data": {"shards": [{"name": s["name"], "sha256": s["sha256"], "rows_used": s["rows_used"]}
                            for s in admitted.shards],
                 "sample_ids": admitted.sample_ids, "tasks_sha256": tasks_sha256(admitted)},
        "references": {"identity": admitted.references.identity(),
                       "policy": admitted.references.policy},
        "planner": {"inference": admitted.entry.get("inference"),
                    "module_sha256": admitted.entry.get("module_sha256"),
                    "qualname": admitted.entry.get("qualname")},
        "checkpoints": admitted.checkpoints,
        "runtime_bundle": (admitted.runtime_bundle or {}).get("files"),
        "code_sha256": code["sha256"],
        "warmup_scene": _warmup_identity(admitted),
    })


def _warmup_identity(admitted) -> dict | None:
    w = admitted.warmup
    return None if w is None else {"sample_id": w.id, "input_sha256": input_hash(w)}


@dataclasses.dataclass(frozen=True)
class SeedFiles:
    """The files of a finished seed as built from its journal: the number of records,
    the status counts per series, the sha256 of each seed file and the journal's path."""

    n_records: int
    status_counts: dict
    files: dict
    journal: Path
    batches: dict = dataclasses.field(default_factory=dict)  #: the batched procedure's, if any


def seed_manifest(ctx: RunContext, seed: int, state: SeedState, made: SeedFiles) -> dict:
    """The seed's ``manifest.json``."""
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
        "inference_protocol": run_protocol(spec),
        "provenance": ctx.provenance or run_provenance(spec, admitted.sample_ids),
        "code": ctx.code,
        "data": _data(admitted),
        "references": _references(admitted.references),
        "timing_profile": spec.timing_profile,
        "timing_boundary": timing_boundary(spec.timing_profile, spec.execution),
        "timing": _timing(spec, first),
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
                                  f"{SYNC_INTERVAL_S} s and at the seed's end"},
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


def _timing(spec, first: Build | None) -> dict:
    return {
        "profile": None if first is None else first.profile,
        "latency_warmup": spec.latency_warmup, "latency_repeats": spec.latency_repeats,
        "quality_repeat_index": spec.quality_repeat_index,
        "passes": [list(p) for p in passes(spec)],
        "timer": None if first is None else first.timer,
    }


def _session(admitted, state: SeedState) -> dict | None:
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


def _batched(admitted, state: SeedState, made: SeedFiles) -> dict:
    """The ``batched`` block of the batched procedure: its timing
    (:func:`passage_jax.protocol.batch.batch_timing` of the seed's batches), the warm-up
    batches and one entry per planner build (as a session's)."""
    spec = admitted.spec
    sessions = state.sessions
    return {**batch_timing(made.batches, spec.batch_size), "batch_warmup": spec.batch_warmup,
            "warmup_scene": None if admitted.warmup is None else admitted.warmup.id,
            "warmup_split": "validation", "builds": sessions}


def _resume(state: SeedState) -> dict:
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
