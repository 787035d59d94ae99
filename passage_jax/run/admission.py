"""Admission: everything a run checks before the first planner call.

1. the spec is valid (``spec.py``);
2. the data loads and validates (``passage_jax.data``), the stated weight (if
   any) equals the released one;
3. every task's reference is qualified under the spec's policy
   (``passage_jax.reference``); a task that cannot be qualified fails admission,
   naming the scene;
4. the planner entry point imports; declared checkpoint files exist (their
   hashes are recorded); a ``runtime_bundle_manifest`` verifies;
5. the requested device exists.

Nothing here calls the planner.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import os
import platform
import re
import sys
from pathlib import Path

import jax
import numpy as np

from passage_jax.data import DataError, load_tasks, resolve_dataset_root
from passage_jax.fileio import read_document, sha256_file
from passage_jax.graph.routes import route_cost
from passage_jax.learned.guide import shipped_checkpoint
from passage_jax.protocol.adapters import import_entry, is_factory
from passage_jax.protocol.records import input_hash, pack_routes, references_identity
from passage_jax.reference import qualify_scenes, solve_tasks
from passage_jax.run.spec import RunSpec

__all__ = ["Admitted", "AdmissionError", "References", "admit", "hardware", "CHECKPOINT_KEY"]


class AdmissionError(RuntimeError):
    """The run cannot start (bad data, unqualified reference, missing checkpoint ...)."""


#: inference_kwargs keys whose values must name existing files.
CHECKPOINT_KEY = re.compile(r"(checkpoint|ckpt|params_path|weights_path|params_file)", re.I)


@dataclasses.dataclass
class References:
    """Per-task qualified references (evaluator-owned; never given to planners)."""

    sample_id: list
    c_star: np.ndarray  # float64 (T,)
    routes: list  # reference route used for geometry, (L, 2) int32
    released_cost: np.ndarray  # float64 (T,), recomputed cost of the released route
    qualified: np.ndarray  # bool (T,)
    solver: list
    reason: list
    work: np.ndarray  # int64 (T,), solver work (VI sweeps), -1 unknown
    policy: str
    cohort_id: str | None
    max_expansions: int | None
    _identity: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def identity(self) -> str:
        """Hash of the references (computed once: the run loop asks for it per seed)."""
        if self._identity is None:
            coords, offsets = pack_routes(self.routes)
            self._identity = references_identity(self.sample_id, self.c_star, coords, offsets,
                                                 self.qualified)
        return self._identity


@dataclasses.dataclass
class Admitted:
    spec: RunSpec
    root: Path
    tasks: list
    shards: list  # [{path, sha256, rows}]
    references: References
    entry: dict  # identity of the planner entry point
    checkpoints: dict  # seed -> {key: {path, sha256}}
    runtime_bundle: dict | None
    device: object  # jax device or None
    _input_hashes: list | None = dataclasses.field(default=None, init=False, repr=False,
                                                   compare=False)

    @property
    def sample_ids(self) -> list:
        return [t.id for t in self.tasks]

    def input_hashes(self) -> list:
        """Per-task input hashes (computed once: each hashes a task's full grids)."""
        if self._input_hashes is None:
            self._input_hashes = [input_hash(t) for t in self.tasks]
        return list(self._input_hashes)


def resolve_root(spec: RunSpec) -> Path:
    try:
        if spec.dataset_path is not None:
            # a dataset_repo without a revision next to a local path is provenance only
            return resolve_dataset_root(dataset_path=spec.dataset_path)
        return resolve_dataset_root(dataset_repo=spec.dataset_repo,
                                    dataset_revision=spec.dataset_revision)
    except DataError as e:
        raise AdmissionError(f"data: {e}") from None


def load_admitted_tasks(spec: RunSpec, root: Path) -> list:
    try:
        tasks = load_tasks(root, spec.resolution, spec.split, spec.cost_model, spec.task_variant,
                           n_samples=spec.n_samples, weight=spec.cost_weight)
    except (DataError, ValueError) as e:
        raise AdmissionError(f"data: {e}") from None
    if not tasks:
        raise AdmissionError(f"data: {root} {spec.resolution}x{spec.resolution}/{spec.split} "
                             f"holds no scenes")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise AdmissionError(f"data: duplicate scene id(s) {dup[:5]} in the admitted tasks")
    return tasks


def shard_identity(tasks) -> list:
    files, rows = [], {}
    for t in tasks:
        f = t.scene.file
        if f not in rows:
            files.append(f)
            rows[f] = 0
        rows[f] += 1
    return [{"path": f, "name": Path(f).name, "sha256": sha256_file(f), "rows_used": rows[f]}
            for f in files]


def qualify_references(spec: RunSpec, tasks) -> References:
    """Qualify each task's reference; AdmissionError naming the first scene that fails."""
    key_of = f"{spec.cost_model}/{spec.task_variant}"
    # value iteration solves every task; a declared CPU budget adds the independent
    # CPU search as a cross-check within that budget
    cross = spec.reference_max_expansions is not None
    try:
        quals = qualify_scenes([t.scene for t in tasks], spec.reference_policy,
                               reference_cohort_id=spec.reference_cohort_id, solver="vi",
                               max_expansions=spec.reference_max_expansions, cross_check=cross,
                               keys=[key_of])
    except Exception as e:  # noqa: BLE001
        raise AdmissionError(f"references: qualification failed: {type(e).__name__}: {e}") from None
    c_star, released_cost, solver, reason, work, routes, qualified = [], [], [], [], [], [], []
    failures = []
    for t, q in zip(tasks, quals):
        if key_of not in q:
            raise AdmissionError(f"references: scene {t.id}: no qualification for {key_of}")
        qi = q[key_of]
        if not qi.qualified:
            failures.append(f"scene {t.id} ({t.scene.where}) {key_of}: {qi.reason}")
        c_star.append(float(qi.c_star))
        released_cost.append(route_cost(t.route, t.elevation_m, t.objective, t.weight))
        solver.append(str(qi.solver) + ("+cross_check" if cross else ""))
        reason.append("" if qi.reason is None else str(qi.reason))
        work.append(int(qi.work) if qi.work is not None else -1)
        routes.append(np.asarray(t.route, np.int32))
        qualified.append(bool(qi.qualified))
    if failures:
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        raise AdmissionError("references: reference not qualified for "
                             + "; ".join(failures[:3]) + more
                             + " — the run is refused; the candidate is never penalised for it")
    if spec.reference_policy == "independent_analytic_reference":
        routes = _solver_routes(tasks)
    c = np.asarray(c_star, np.float64)
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        bad = [tasks[i].id for i in np.flatnonzero(~np.isfinite(c) | (c < 0))]
        raise AdmissionError(f"references: non-finite or negative c* for scene(s) {bad[:5]}")
    return References(sample_id=[t.id for t in tasks], c_star=c, routes=routes,
                      released_cost=np.asarray(released_cost, np.float64),
                      qualified=np.asarray(qualified, bool), solver=solver, reason=reason,
                      work=np.asarray(work, np.int64), policy=spec.reference_policy,
                      cohort_id=spec.reference_cohort_id,
                      max_expansions=spec.reference_max_expansions)


def _solver_routes(tasks) -> list:
    sols = solve_tasks(tasks)
    out = []
    for t, s in zip(tasks, sols):
        if s.status != "ok" or s.route is None:
            raise AdmissionError(f"references: scene {t.id}: the exact solver found no route "
                                 f"({s.status})")
        out.append(np.asarray(s.route, np.int32))
    return out


def entry_identity(spec: RunSpec) -> dict:
    try:
        obj = import_entry(spec.inference)
    except (ImportError, ValueError) as e:
        raise AdmissionError(f"planner: {e}") from None
    mod = sys.modules[spec.inference.split(":")[0]]
    src = getattr(mod, "__file__", None)
    return {"inference": spec.inference, "module_file": src,
            "module_sha256": sha256_file(src) if src and Path(src).is_file() else None,
            "kind": "factory" if is_factory(obj) else "plan_callable",
            "qualname": getattr(obj, "__qualname__", type(obj).__name__),
            "signature": _signature(obj)}


def _signature(obj) -> str | None:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def checkpoint_files(spec: RunSpec) -> dict:
    """Per seed, hashes of the files named by inference_kwargs; a key that names a
    checkpoint (``*checkpoint*``, ``*ckpt*``, ``params_path`` ...) must exist."""
    out = {}
    for seed in spec.seeds:
        kw = spec.kwargs_for_seed(seed)
        files = {}
        for key, val in kw.items():
            vals = val if isinstance(val, (list, tuple)) else [val]
            for j, v in enumerate(vals):
                name = key if len(vals) == 1 else f"{key}[{j}]"
                if CHECKPOINT_KEY.search(key) and isinstance(v, str) and v.startswith("shipped:"):
                    v = _shipped_checkpoint(v, seed, name)
                if CHECKPOINT_KEY.search(key):
                    if not isinstance(v, str) or not Path(v).exists():
                        raise AdmissionError(f"checkpoint: seed {seed}: inference_kwargs.{name}="
                                             f"{v!r} is not an existing file")
                if isinstance(v, str) and len(v) < 4096 and Path(v).is_file():
                    files[name] = {"path": str(Path(v).resolve()), "sha256": sha256_file(v)}
                elif isinstance(v, str) and CHECKPOINT_KEY.search(key) and Path(v).is_dir():
                    files[name] = {"path": str(Path(v).resolve()), "sha256": _dir_sha256(Path(v))}
        out[str(seed)] = files
    return out


def _shipped_checkpoint(v: str, seed, name: str) -> str:
    """The metadata file of a ``"shipped:<seed>"`` checkpoint (it records the
    parameter file's sha256, so hashing it pins the parameters)."""
    try:
        return str(shipped_checkpoint(v.split(":", 1)[1]))
    except (ValueError, FileNotFoundError) as e:
        raise AdmissionError(f"checkpoint: seed {seed}: inference_kwargs.{name}={v!r}: {e}") from None


def _dir_sha256(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + b"\0")
            h.update(sha256_file(p).encode())
    return h.hexdigest()


def verify_runtime_bundle(path) -> dict | None:
    if path is None:
        return None
    p = Path(path)
    data = read_document(p, AdmissionError, "runtime_bundle_manifest")
    if not isinstance(data, dict) or data.get("schema") != "passage-runtime-bundle-v1":
        raise AdmissionError(f"runtime_bundle_manifest {p}: schema must be 'passage-runtime-bundle-v1'")
    files = data.get("files")
    if not isinstance(files, list) or not files:
        raise AdmissionError(f"runtime_bundle_manifest {p}: 'files' must be a non-empty list")
    checked = []
    for i, f in enumerate(files):
        if not isinstance(f, dict) or set(f) != {"path", "sha256"}:
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] must be {{path, sha256}}")
        fp = (p.parent / f["path"]).resolve()
        if not fp.is_file():
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] {f['path']} is not readable")
        got = sha256_file(fp)
        if got != str(f["sha256"]).lower():
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] {f['path']}: sha256 "
                                 f"{got} != declared {f['sha256']}")
        checked.append({"path": f["path"], "sha256": got})
    return {"manifest": str(p.resolve()), "manifest_sha256": sha256_file(p), "files": checked}


def select_device(name):
    if name is None:
        return None
    platform_name = {"gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}.get(name, name)
    try:
        devs = jax.devices(platform_name)
    except RuntimeError as e:
        raise AdmissionError(f"device {name!r} is not available: {e}") from None
    if not devs:
        raise AdmissionError(f"device {name!r} is not available")
    return devs[0]


def admit(spec: RunSpec, qualify: bool = True) -> Admitted:
    """Run every admission check; returns what the run needs or raises AdmissionError."""
    entry = entry_identity(spec)
    checkpoints = checkpoint_files(spec)
    bundle = verify_runtime_bundle(spec.runtime_bundle_manifest)
    device = select_device(spec.device)
    root = resolve_root(spec)
    tasks = load_admitted_tasks(spec, root)
    shards = shard_identity(tasks)
    refs = qualify_references(spec, tasks)
    return Admitted(spec=spec, root=root, tasks=tasks, shards=shards, references=refs,
                    entry=entry, checkpoints=checkpoints, runtime_bundle=bundle, device=device)


def hardware() -> dict:
    return {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(),
            "jax_devices": [str(d) for d in jax.devices()],
            "device_kinds": sorted({d.device_kind for d in jax.devices()})}
