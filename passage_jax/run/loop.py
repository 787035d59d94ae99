"""The complete-request run loop: admission, timed series, run folders (SPEC §7).

``run_spec(spec, output)`` admits the run (nothing is called before every
admission check passed), then for each seed builds the planner (construction
is not timed), runs one cold pass over the tasks, ``latency_warmup`` recorded
warm-up passes and ``latency_repeats`` measured warm repeats, one request at a
time, and writes ``<output>/seed-<seed>/`` (see :mod:`passage_jax.protocol.records`
and ``docs/runner.md`` for the formats). A seed folder is assembled under a
temporary name and moved into place when complete.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import jax
import numpy as np
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from passage_jax.contract import IN_PROCESS_TIMING_PROFILE
from passage_jax.fileio import (
    atomic_write_json,
    atomic_write_npz,
    atomic_write_text,
    sha256_file,
    to_json,
    utc_now,
)
from passage_jax.protocol.adapters import load_planner
from passage_jax.protocol.records import (
    RECORD_KEYS,
    REFERENCES_FORMAT,
    RUN_FORMAT,
    PathsWriter,
    code_hash,
    pack_routes,
    package_versions,
)
from passage_jax.run import admission as adm
from passage_jax.run.spec import RunSpec, load_spec
from passage_jax.run.timing import execute

__all__ = ["RunError", "OutputFolderTaken", "run_spec", "run_seed", "passes", "holds_run", "spec_and_output",
           "references_arrays", "SERIES"]

SERIES = ("cold", "warmup", "warm")


class RunError(RuntimeError):
    """The run cannot proceed (output folder taken, planner construction failed ...)."""


class OutputFolderTaken(RunError, FileExistsError):
    """The output folder exists and is not empty (it may hold a run)."""


def holds_run(folder) -> str | None:
    """Why ``folder`` cannot receive a new run (it exists and is not empty), or None."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return f"{folder} exists and is not a folder"
    if folder.is_dir():
        entries = sorted(p.name for p in folder.iterdir())
        if entries:
            what = "already holds a run" if any(e.startswith("seed-") or e == "run.json"
                                                for e in entries) else "is not empty"
            return f"output folder {folder} {what} ({', '.join(entries[:5])}); choose a new folder"
    return None


def spec_and_output(spec: RunSpec | str | os.PathLike, output) -> tuple[RunSpec, Path]:
    """The spec (loaded and validated when given as a path) and the output folder, which
    must be new or empty (:class:`OutputFolderTaken` otherwise)."""
    if not isinstance(spec, RunSpec):
        spec = load_spec(spec)
    output = Path(output)
    why = holds_run(output)
    if why:
        raise OutputFolderTaken(why)
    return spec, output


def passes(spec: RunSpec) -> list[tuple[str, int]]:
    """The timing series as (series, repeat index) passes, in execution order."""
    return ([("cold", 0)] + [("warmup", i) for i in range(spec.latency_warmup)]
            + [("warm", i) for i in range(spec.latency_repeats)])


def references_arrays(admitted: adm.Admitted) -> dict:
    refs, tasks = admitted.references, admitted.tasks
    coords, offsets = pack_routes(refs.routes)
    rel_coords, rel_offsets = pack_routes([t.route for t in tasks])
    n = len(tasks)
    tiles = [json.dumps(t.scene.metadata.get("tile"), sort_keys=True)
             if t.scene.metadata.get("tile") is not None else "" for t in tasks]
    return {
        "format": np.array(REFERENCES_FORMAT),
        "policy": np.array(refs.policy),
        "cohort_id": np.array(refs.cohort_id or ""),
        "identity": np.array(refs.identity()),
        "resolution": np.array(admitted.spec.resolution, np.int64),
        "split": np.array(admitted.spec.split),
        "task_index": np.arange(n, dtype=np.int64),
        "sample_id": np.asarray(refs.sample_id, dtype=str),
        "objective": np.asarray([t.objective for t in tasks], dtype=str),
        "variant": np.asarray([t.variant for t in tasks], dtype=str),
        "cost_weight": np.asarray([t.weight for t in tasks], np.float64),
        "start": np.asarray([t.scene.start for t in tasks], np.int32).reshape(n, 2),
        "goal": np.asarray([t.scene.goal for t in tasks], np.int32).reshape(n, 2),
        "c_star": refs.c_star,
        "qualified": refs.qualified,
        "released_cost": refs.released_cost,
        "solver": np.asarray(refs.solver, dtype=str),
        "reason": np.asarray(refs.reason, dtype=str),
        "solver_work": refs.work,
        "route_coords": coords,
        "route_offsets": offsets,
        "released_coords": rel_coords,
        "released_offsets": rel_offsets,
        "input_sha256": np.asarray(admitted.input_hashes(), dtype=str),
        "tile_json": np.asarray(tiles, dtype=str),
    }


def _progress(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), transient=False)


def _device_ctx(device):
    if device is None:
        return contextlib.nullcontext()
    return jax.default_device(device)


def run_seed(admitted: adm.Admitted, seed: int, folder: Path, progress=None,
             planner=None, code: dict | None = None) -> dict:
    """Run every pass for one seed and write its files into ``folder`` (created)."""
    spec = admitted.spec
    kwargs = spec.kwargs_for_seed(seed)
    started = utc_now()
    t0 = time.monotonic()
    if planner is None:
        try:
            planner = load_planner(spec.inference, spec.inference_format, kwargs)
        except Exception as e:  # noqa: BLE001
            raise RunError(f"seed {seed}: building the planner {spec.inference} failed: "
                           f"{type(e).__name__}: {e}") from e
    construction_ms = (time.monotonic() - t0) * 1000.0
    tasks = admitted.tasks
    plan = passes(spec)
    writer = PathsWriter()
    lines = []
    counts: dict = {}
    bar = None
    if progress is not None:
        bar = progress.add_task(f"{spec.method_name} seed {seed}", total=len(plan) * len(tasks))
    with _device_ctx(admitted.device):
        for series, rep in plan:
            for ti, task in enumerate(tasks):
                rec, snap = execute(planner, task, spec.budget)
                idx = writer.add(*snap)
                rec.update(record=idx, seed=int(seed), series=series, repeat=rep, task_index=ti,
                           sample_id=task.id,
                           quality=series == "warm" and rep == spec.quality_repeat_index)
                ordered = {k: rec.get(k) for k in RECORD_KEYS}
                lines.append(json.dumps(ordered, default=_json_num, allow_nan=False))
                counts.setdefault(series, {}).setdefault(rec["status"], 0)
                counts[series][rec["status"]] += 1
                if bar is not None:
                    progress.update(bar, advance=1, description=(
                        f"{spec.method_name} seed {seed} {series}#{rep}"))
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "requests.jsonl", "\n".join(lines) + ("\n" if lines else ""))
    writer.write(folder / "paths.npz")
    atomic_write_npz(folder / "references.npz", references_arrays(admitted))
    files = {name: sha256_file(folder / name)
             for name in ("requests.jsonl", "paths.npz", "references.npz")}
    refs = admitted.references
    manifest = {
        "format": RUN_FORMAT,
        "seed": int(seed),
        "method_name": spec.method_name,
        "spec": spec.to_dict(),
        "spec_sha256": spec.sha256(),
        "spec_source": spec.source,
        "inference_kwargs": kwargs,
        "planner": {**admitted.entry, "name": getattr(planner, "name", None),
                    "construction_ms": construction_ms},
        "checkpoints": admitted.checkpoints.get(str(seed), {}),
        "runtime_bundle": admitted.runtime_bundle,
        "component_control": spec.component_control,
        "code": code or code_hash(),
        "data": {
            "dataset_root": str(Path(admitted.root).resolve()),
            "dataset_path": spec.dataset_path,
            "dataset_repo": spec.dataset_repo,
            "dataset_revision": spec.dataset_revision,
            "resolution": spec.resolution, "split": spec.split,
            "n_samples": spec.n_samples, "n_tasks": len(tasks),
            "cost_model": spec.cost_model, "task_variant": spec.task_variant,
            "shards": admitted.shards,
            "sample_ids": admitted.sample_ids,
            "tasks_sha256": _tasks_sha(admitted),
        },
        "references": {
            "policy": refs.policy, "cohort_id": refs.cohort_id,
            "reference_max_expansions": refs.max_expansions,
            "identity": refs.identity(), "n_qualified": int(refs.qualified.sum()),
            "solvers": sorted(set(refs.solver)),
        },
        "timing": {
            "profile": IN_PROCESS_TIMING_PROFILE,
            "latency_warmup": spec.latency_warmup, "latency_repeats": spec.latency_repeats,
            "quality_repeat_index": spec.quality_repeat_index,
            "passes": [list(p) for p in plan],
            "timer": "time.monotonic; covers input preparation, planning, device sync, route "
                     "snapshot, legality check and recosting; deadline judged at snapshot",
        },
        "budget": spec.budget.to_dict(),
        "hardware": adm.hardware(),
        "device": None if admitted.device is None else str(admitted.device),
        "versions": package_versions(),
        "n_records": len(lines),
        "status_counts": counts,
        "files": files,
        "started_utc": started,
        "finished_utc": utc_now(),
    }
    atomic_write_json(folder / "manifest.json", manifest)
    return manifest


def _tasks_sha(admitted) -> str:
    h = hashlib.sha256()
    for sid, ih in zip(admitted.sample_ids, admitted.input_hashes()):
        h.update(f"{sid}:{ih}\n".encode())
    return h.hexdigest()


def _json_num(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def run_spec(spec: RunSpec | str | os.PathLike, output, progress: bool | None = None,
             admitted: adm.Admitted | None = None, log=None) -> dict:
    """Admit and run ``spec``, writing ``<output>/seed-<seed>/`` per seed and
    ``<output>/run.json``. Refuses an output folder that is not empty."""
    spec, output = spec_and_output(spec, output)
    if admitted is None:
        admitted = adm.admit(spec)
    if progress is None:
        progress = os.isatty(2)
    output.mkdir(parents=True, exist_ok=True)
    code = code_hash()
    summaries = {}
    with _progress(progress) as prog:
        for seed in spec.seeds:
            final = output / f"seed-{seed}"
            tmp = output / f".seed-{seed}.partial-{os.getpid()}"
            try:
                m = run_seed(admitted, seed, tmp, prog, code=code)
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            summaries[str(seed)] = {"folder": final.name, "status_counts": m["status_counts"],
                                    "n_records": m["n_records"]}
            if log:
                log(f"seed {seed}: {m['n_records']} records -> {final}")
    summary = {"format": RUN_FORMAT, "method_name": spec.method_name, "spec": spec.to_dict(),
               "spec_sha256": spec.sha256(), "seeds": list(spec.seeds), "per_seed": summaries,
               "code": code, "finished_utc": utc_now()}
    atomic_write_text(output / "run.json", to_json(summary) + "\n")
    return summary

