"""Admission: everything a run checks before the first planner call (:func:`admit`, after
the two checks it may lean on: reused references and the warm-up scene).

**Reused references.** References taken from an earlier run over the same tasks (the spec's
``references_from``).

Qualifying the references is most of admission's time (value iteration on every task).
Runs of several planners over one roster qualify the same references again and again;
a spec naming an earlier, finished run (``references_from: <run folder or seed
folder>``) takes that run's ``references.npz`` instead, once every check below holds:

* the earlier run folder is verified as every reader of a run folder verifies it
  (:mod:`passage_jax.protocol.runfolder`): finished (``run.json``), with a
  ``run_started.json``, every seed folder's manifest carrying the run identity, every run
  file the sha256 its manifest records, the identity recomputed from ``references.npz``'s
  arrays equal to the one it stores, the manifest's and ``run_started.json``'s, nothing in
  the folders but what a finished run holds, and no link out of them;
* it was qualified under the same settings: reference policy, cohort id, CPU-search
  budget, resolution, split, cost model, task variant;
* it holds the same tasks, in the same order: as this admission reads each task, its scene
  id, input hash (elevation, obstacles, start, goal), objective, variant and weight equal
  the earlier run's, and the shards this run reads have the names and sha256 the earlier
  run recorded (so the released routes, the reference routes of ``released_labels``, are
  the same bytes);
* a random sample of its references is what admission's own qualification gives: at
  least :data:`SAMPLE_MIN` tasks (all of them when there are fewer, one in
  :data:`SAMPLE_PER` of a larger run), drawn with a fresh seed, are qualified again with the
  exact reference solver as they are read (admission's qualifier), and each must qualify,
  with the same c* within :data:`SAMPLE_RTOL` relative and the same reference route cell for
  cell. A forged ``references.npz`` whose hashes and identities were all rewritten to
  match is caught here.

The scene stratifiers the earlier run measured at admission come along (measured here
when the earlier run predates them). Any difference refuses the run
(:class:`AdmissionError` naming the file and the field);
nothing is recomputed silently. The manifest's ``references`` block records
``reused_from`` (the folder, the file's sha256, the identity, and under ``recomputed`` the
sample's seed, tasks, tolerance and largest relative c* difference).

**The warm-up scene.** The warm-up scene of a session timing profile (contract §7, Timing
profiles).

A session (``native_raw_path_persistent_v1``, ``supervised_service_v1``,
``supervised_service_rewarm_v1``) runs ``session_warmup`` untimed calls on one scene of
the dataset root's ``validation`` split at the run's resolution that is not a task of
the run: the spec's ``warmup_scene`` (a sample id), or by default the first validation
scene, in the split's stored order, whose id is not in the roster. The warm-up task is
built like any task (the run's objective, task variant and released weight; the run's
budget applies to its calls); it is never recorded as a request and never scored.

**The checks.** Admission: everything a run checks before the first planner call.

1. the spec is valid (``spec.py``);
2. the data loads and validates (``passage_jax.data``), the stated weight (if
   any) equals the released one;
3. every task's reference is qualified under the spec's policy
   (``passage_jax.reference``); a task that cannot be qualified fails admission,
   naming the scene;
4. the planner entry point imports; declared checkpoint files exist (their
   hashes are recorded); a ``runtime_bundle_manifest`` verifies;
5. the requested device exists;
6. under a session timing profile, the warm-up scene is found outside the roster
   (this module).

With ``references_from`` (an earlier run over the same tasks) step 3 takes that run's
qualified references after verifying its folder and qualifying a random sample of them
again (this module).

Nothing here calls the planner."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
import os
import re
import secrets
import stat
import sys
from pathlib import Path

import jax
import numpy as np

from passage_jax import cluster
from passage_jax.data import (
    DataError,
    TaskStream,
    check_weight,
    iter_scenes,
    open_tasks,
    present_splits,
    resolve_dataset_root,
)
from passage_jax.data.grid_store import store_mode
from passage_jax.data.scene import Task
from passage_jax.data.strata import SCENE_STRATIFIERS, strata_rows
from passage_jax.fileio import read_document, sha256_file
from passage_jax.graph.routes import route_cost
from passage_jax.protocol.adapters import import_entry, is_factory
from passage_jax.protocol.records import input_hash, pack_routes, references_identity, unpack_routes
from passage_jax.protocol.runfolder import (
    MANIFEST,
    REFERENCES,
    RUN_STARTED,
    RUN_SUMMARY,
    FolderError,
    RunRecords,
    VerifiedSeed,
    seed_folder_name,
    seed_of_folder,
)
from passage_jax.reference import qualify_scenes, solve_tasks
from passage_jax.run.specification import SPEC_MAX_BYTES, RunSpec, shown

__all__ = ["ReusedReferences", "earlier_seed_folder", "earlier_seed", "sample_tasks", "sample_seed",
           "SAMPLE_MIN", "SAMPLE_PER", "SAMPLE_RTOL", "WARMUP_SPLIT", "WarmupSceneError", "warmup_task",
           "Admitted", "AdmissionError", "References", "admit", "CHECKPOINT_KEY",
           "checkpoint_files"]


# ---- reused references ---------------------------------------------------------------------

#: manifest ``data`` fields that must equal this run's spec
_DATA_FIELDS = ("resolution", "split", "cost_model", "task_variant")
#: manifest ``references`` fields that must equal this run's spec
_POLICY_FIELDS = (("policy", "reference_policy"), ("cohort_id", "reference_cohort_id"),
                  ("reference_max_expansions", "reference_max_expansions"))
#: the reused references recomputed at admission: at least this many tasks (all when fewer)
SAMPLE_MIN = 4
#: ... and one task in this many of a larger run
SAMPLE_PER = 1000
#: a recomputed c* must equal the reused one within this relative tolerance (or the
#: arithmetic path's own stated tolerance, when that is larger)
SAMPLE_RTOL = 1e-9


def sample_seed() -> int:
    """A fresh seed for the sample of recomputed references (the same on every process of
    a launch: process 0's): not derivable from the folder, so a forger cannot tell which
    tasks will be recomputed."""
    seed = secrets.randbits(32)
    return int(cluster.gather_shares(seed, what="references_from: the sample's seed")[0])


def sample_tasks(n: int, seed: int) -> list[int]:
    """The task indices recomputed out of ``n``: ``max(SAMPLE_MIN, ceil(n / SAMPLE_PER))``
    of them (all when ``n`` is smaller), drawn without replacement with ``seed``, sorted."""
    k = min(n, max(SAMPLE_MIN, math.ceil(n / SAMPLE_PER)))
    rng = np.random.default_rng(seed)
    return sorted(int(i) for i in rng.choice(n, size=k, replace=False))


def _named(path, error) -> Path:
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise error(f"references_from: {path!r} names no folder; give a finished run folder or "
                    f"one of its seed folders (or null to qualify the references here)")
    return Path(path).expanduser()


def earlier_seed(path, error) -> VerifiedSeed:
    """The verified seed folder whose references are taken: ``path`` itself when it holds a
    ``manifest.json`` (a seed folder of a finished run), else the first seed its
    ``run.json`` declares. The whole run folder is verified first
    (:meth:`~passage_jax.protocol.runfolder.RunRecords.seed_folders`), and it must hold a
    ``run_started.json`` (the identity the references are checked back to). An empty path
    names nothing: it is refused, never taken for the working directory."""
    path = _named(path, error)
    seed_folder = (path / MANIFEST).is_file() or (path / MANIFEST).is_symlink()
    run_folder = path.resolve().parent if seed_folder else path
    if not (run_folder / RUN_SUMMARY).is_file():
        if seed_folder:
            raise error(f"references_from: {path} is a seed folder, but {run_folder} holds no "
                        f"{RUN_SUMMARY}; name a seed folder of a finished run (its references are "
                        f"checked back to the run's {RUN_STARTED})")
        raise error(f"references_from: {path} is neither a finished run folder ({RUN_SUMMARY}) nor a "
                    f"seed folder ({MANIFEST} and {REFERENCES})")
    try:
        run = RunRecords.read(run_folder)
        if run.identity is None:
            raise FolderError(f"{run.identity_where}: file not found: the references cannot be "
                              f"checked back to the run identity")
        seed = seed_of_folder(path, run) if seed_folder else run.seeds[0]
        verified = run.seed_folders()
    except FolderError as e:
        raise error(f"references_from: {e}") from None
    return next(v for v in verified if v.path.name == seed_folder_name(seed))


def earlier_seed_folder(path, error) -> Path:
    """The folder of :func:`earlier_seed`."""
    return earlier_seed(path, error).path


class ReusedReferences:
    """Stands in for admission's qualifier (the same calls): the earlier run's references,
    checked against each chunk of tasks as it is read (:meth:`__call__`; the sampled tasks
    qualified again with ``qualifier``, admission's own) and returned by :meth:`finish` as
    :class:`References`."""

    def __init__(self, spec, references_cls, error, qualifier):
        self.spec, self.references_cls, self.error = spec, references_cls, error
        self.qualifier = qualifier
        earlier = earlier_seed(spec.references_from, error)
        self.folder = earlier.path
        self.manifest = self._manifest(earlier.manifest)
        self.npz_path = self.folder / REFERENCES
        self.npz_sha256 = earlier.hashes[REFERENCES]
        with np.load(self.npz_path, allow_pickle=False) as z:
            self.arrays = {k: z[k] for k in z.files}
        self._check_settings()
        self.failures: list[str] = []
        self.seen = 0
        # the scene stratifiers: the earlier run's, or measured here (a run from before
        # admission recorded them)
        fields = [str(x) for x in self.arrays.get("scene_strata_fields", np.array([], str)).reshape(-1)]
        self.strata = (self.arrays["scene_strata"] if fields == list(SCENE_STRATIFIERS) else None)
        self.measured: dict[int, np.ndarray] = {}
        # the sample qualified again: its seed and tasks, each task's relative c* difference
        # and solvers, and what differed
        self.seed = sample_seed()
        self.sample = sample_tasks(len(self.arrays["sample_id"]), self.seed)
        self.recomputed: dict[int, tuple[float, float, str]] = {}
        self.differences: list[str] = []
        self._routes = None

    def _manifest(self, m: dict) -> dict:
        where = self.folder / MANIFEST
        if not all(isinstance(m.get(k), dict) for k in ("files", "references", "data")):
            raise self.error(f"references_from: {where} has no files/references/data blocks")
        return m

    def _check_settings(self) -> None:
        spec, data, refs = self.spec, self.manifest["data"], self.manifest["references"]
        where = self.folder / MANIFEST
        for k in _DATA_FIELDS:
            if data.get(k) != getattr(spec, k):
                raise self.error(f"references_from: {where}: data.{k} is {data.get(k)!r}, this "
                                 f"run's {k} is {getattr(spec, k)!r}")
        for k, attr in _POLICY_FIELDS:
            if refs.get(k) != getattr(spec, attr):
                raise self.error(f"references_from: {where}: references.{k} is {refs.get(k)!r}, "
                                 f"this run's {attr} is {getattr(spec, attr)!r}")

    def __call__(self, first: int, tasks: list) -> None:
        a = self.arrays
        n = len(a["sample_id"])
        picked = []
        for i, t in enumerate(tasks, start=first):
            if i >= n:
                self.failures.append(f"task {i} (scene {t.id}): the earlier run has {n} tasks")
                return
            why = None
            if t.id != str(a["sample_id"][i]):
                why = f"scene id differs from the earlier run's {a['sample_id'][i]}"
            elif input_hash(t) != str(a["input_sha256"][i]):
                why = "input hash (elevation, obstacles, start, goal) differs from the earlier run's"
            elif (t.objective != str(a["objective"][i]) or t.variant != str(a["variant"][i])
                  or float(t.weight) != float(a["cost_weight"][i])):
                why = "objective/variant/weight differ from the earlier run's"
            if why:
                self.failures.append(f"task {i} (scene {t.id}): {why}")
            elif i in self.sample:
                picked.append((i, t))
        if picked:
            self._recompute(picked)
        if self.strata is None:
            self.measured[first] = strata_rows(tasks)
        self.seen = max(self.seen, first + len(tasks))

    def _recompute(self, picked: list) -> None:
        """Qualify the sampled tasks of a chunk again (admission's qualifier, the exact
        reference solver) and compare with the earlier run's: qualified, c* within
        :data:`SAMPLE_RTOL` relative, the reference route cell for cell."""
        a = self.arrays
        if self._routes is None:
            self._routes = unpack_routes(a["route_coords"], a["route_offsets"])
        q = self.qualifier(self.spec)
        q(0, [t for _, t in picked])
        c = q.cols
        for j, (i, t) in enumerate(picked):
            old, new = float(a["c_star"][i]), float(c["c_star"][j])
            rtol = max(SAMPLE_RTOL, float(a["precision_rtol"]), float(c["precision"][j][1]))
            rel = abs(new - old) / max(abs(new), np.finfo(np.float64).tiny)
            self.recomputed[i] = (rel, rtol, c["solver"][j])
            mine, theirs = np.asarray(c["routes"][j], np.int64), np.asarray(self._routes[i], np.int64)
            if not c["qualified"][j]:
                self.differences.append(f"task {i} (scene {t.id}): the reference does not qualify "
                                        f"when recomputed ({c['reason'][j]})")
            elif not rel <= rtol:
                self.differences.append(f"task {i} (scene {t.id}): c* {old!r} differs from the "
                                        f"recomputed {new!r} (relative {rel:.3g} > {rtol:g})")
            elif mine.shape != theirs.shape or not np.array_equal(mine, theirs):
                self.differences.append(f"task {i} (scene {t.id}): the reference route "
                                        f"({len(theirs)} cells) differs from the recomputed one "
                                        f"({len(mine)} cells)")

    def share(self) -> tuple:
        return self.seen, self.failures, self.measured, self.recomputed, self.differences

    def merge(self, shares: list) -> None:
        self.seen = max(s[0] for s in shares)
        self.failures = [f for s in shares for f in s[1]]
        self.measured = {k: v for s in shares for k, v in s[2].items()}
        self.recomputed = {k: v for s in shares for k, v in s[3].items()}
        self.differences = [d for s in shares for d in s[4]]

    def _scene_strata(self, n: int) -> np.ndarray:
        if self.strata is not None:
            return np.asarray(self.strata, np.float64)
        return np.concatenate([self.measured[k] for k in sorted(self.measured)]).reshape(
            n, len(SCENE_STRATIFIERS))

    def check_shards(self, shards: list) -> None:
        """This run's shard identity (name, sha256) equals the earlier run's."""
        mine = [(s["name"], s["sha256"]) for s in shards]
        theirs = [(s.get("name"), s.get("sha256")) for s in self.manifest["data"].get("shards") or []]
        if mine != theirs:
            diff = next(((m, t) for m, t in zip(mine, theirs) if m != t), None)
            raise self.error(f"references_from: the shards read differ from the earlier run's "
                             f"({len(mine)} vs {len(theirs)} shards; first difference {diff})")

    def finish(self):
        a, refs = self.arrays, self.manifest["references"]
        n = len(a["sample_id"])
        if self.failures:
            more = f" (and {len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
            raise self.error(f"references_from {self.folder}: " + "; ".join(self.failures[:3]) + more)
        if self.seen != n:
            raise self.error(f"references_from {self.folder}: this run has {self.seen} tasks, the "
                             f"earlier run {n}")
        if self.differences:
            more = f" (and {len(self.differences) - 3} more)" if len(self.differences) > 3 else ""
            raise self.error(f"references_from: {self.npz_path}: " + "; ".join(self.differences[:3])
                             + more + "; the references are not what the exact reference solver "
                             "gives, and are refused")
        missed = sorted(set(self.sample) - set(self.recomputed))
        if missed:
            raise self.error(f"references_from: {self.npz_path}: the sampled task(s) {missed[:5]} "
                             f"were not recomputed")
        out = self.references_cls(
            sample_id=[str(x) for x in a["sample_id"]], c_star=np.asarray(a["c_star"], np.float64),
            routes=[np.asarray(r, np.int32) for r in unpack_routes(a["route_coords"], a["route_offsets"])],
            released_cost=np.asarray(a["released_cost"], np.float64),
            qualified=np.asarray(a["qualified"], bool), solver=[str(x) for x in a["solver"]],
            reason=[str(x) for x in a["reason"]], work=np.asarray(a["solver_work"], np.int64),
            policy=str(a["policy"]), cohort_id=refs.get("cohort_id"),
            max_expansions=refs.get("reference_max_expansions"), precision=str(a["precision"]),
            precision_rtol=float(a["precision_rtol"]), scene_strata=self._scene_strata(n))
        if out.identity() != str(a["identity"]) or out.identity() != refs.get("identity"):
            raise self.error(f"references_from: {self.npz_path}: the identity of its arrays "
                             f"{out.identity()} differs from the one recorded "
                             f"({a['identity']}, manifest {refs.get('identity')})")
        if not bool(np.all(out.qualified)):
            raise self.error(f"references_from: {self.npz_path}: not every reference is qualified")
        out.reused_from = {"folder": str(self.folder.resolve()), "references_sha256": self.npz_sha256,
                           "identity": out.identity(), "recomputed": self._recomputed()}
        return out

    def _recomputed(self) -> dict:
        """What the manifest records of the sample qualified again."""
        rows = [self.recomputed[i] for i in self.sample]
        return {"seed": self.seed, "task_index": list(self.sample),
                "sample_id": [str(self.arrays["sample_id"][i]) for i in self.sample],
                "rtol": max((r[1] for r in rows), default=SAMPLE_RTOL),
                "max_relative_difference": max((r[0] for r in rows), default=0.0),
                "solvers": sorted({r[2] for r in rows})}


# ---- the warm-up scene ---------------------------------------------------------------------

#: the split the warm-up scene comes from
WARMUP_SPLIT = "validation"


class WarmupSceneError(ValueError):
    """No usable warm-up scene (the message is one line naming ``warmup_scene``)."""


def _where(root, resolution: int) -> str:
    return f"{Path(root)}/{resolution}x{resolution}/{WARMUP_SPLIT}"


def warmup_task(spec, root, roster_ids) -> Task:
    """The warm-up task of ``spec`` (a session profile) read from ``root``; ``roster_ids``:
    the sample ids of the run's tasks. :class:`WarmupSceneError` when the root has no
    validation split at the run's resolution, the named scene is not in it or is a task
    of the run, or every validation scene is a task of the run."""
    n = spec.resolution
    roster = set(roster_ids)
    named = spec.warmup_scene
    try:
        if WARMUP_SPLIT not in present_splits(root, n):
            raise WarmupSceneError(f"warmup_scene: the dataset root {root} has no {WARMUP_SPLIT} split "
                                   f"at {n}x{n}; timing_profile {spec.timing_profile} warms up on a "
                                   f"{WARMUP_SPLIT} scene outside the roster")
        if named is not None and named in roster:
            raise WarmupSceneError(f"warmup_scene: {named!r} is a task of the run (in the roster); the "
                                   f"warm-up scene must be outside it")
        for scene in iter_scenes(root, n, WARMUP_SPLIT, None, workers=2, check_unique_ids=False):
            if (scene.id == named) if named is not None else (scene.id not in roster):
                check_weight(scene, spec.cost_model, spec.cost_weight)
                return scene.task(spec.cost_model, spec.task_variant)
    except DataError as e:
        raise WarmupSceneError(f"warmup_scene: {_where(root, n)}: {e}") from None
    if named is not None:
        raise WarmupSceneError(f"warmup_scene: no scene {named!r} in {_where(root, n)}")
    raise WarmupSceneError(f"warmup_scene: every scene of {_where(root, n)} is a task of the run; a "
                           f"session needs a warm-up scene outside the roster")


# ---- the checks ----------------------------------------------------------------------------

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
    precision: str = "float64"  # the arithmetic path that produced c* (every task's)
    precision_rtol: float = 1e-12  # its stated relative tolerance on c*
    #: where the references were taken from (``references_from``), None when qualified here
    reused_from: dict | None = None
    #: (T, 5) the tasks' scene stratifiers (:data:`~passage_jax.data.strata.SCENE_STRATIFIERS`),
    #: measured as admission reads them, kept in references.npz for scoring
    scene_strata: np.ndarray | None = None
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
    tasks: TaskStream  # compact task facts; grids re-read in chunks
    shards: list  # [{path, sha256, rows}]
    references: References
    entry: dict  # identity of the planner entry point
    checkpoints: dict  # seed -> {key: {path, sha256}}
    runtime_bundle: dict | None
    device: object  # jax device or None
    warmup: object = None  # the session profiles' warm-up Task (never a roster task), or None

    @property
    def sample_ids(self) -> list:
        return list(self.tasks.ids)

    def input_hashes(self) -> list:
        """Per-task input hashes (taken when the tasks were read)."""
        return list(self.tasks.input_hashes)


def resolve_root(spec: RunSpec) -> Path:
    try:
        if spec.dataset_path is not None:
            # a dataset_repo without a revision next to a local path is provenance only
            return resolve_dataset_root(dataset_path=spec.dataset_path)
        return resolve_dataset_root(dataset_repo=spec.dataset_repo,
                                    dataset_revision=spec.dataset_revision,
                                    resolution=spec.resolution, split=spec.split)
    except DataError as e:
        raise AdmissionError(f"data: {e}") from None


def open_admitted_tasks(spec: RunSpec, root: Path, on_chunk=None, chunk: int | None = None,
                        keep_grids: bool = False) -> TaskStream:
    """The spec's tasks as a :class:`~passage_jax.data.TaskStream` (one read of the shards,
    ``on_chunk(first, tasks)`` per chunk during it; ``keep_grids``: the decoded grids kept
    for the seeds' passes, :mod:`passage_jax.data.grid_store`, unless its mode is ``off``);
    AdmissionError for data problems (and a mode it does not know)."""
    try:
        keep_grids = keep_grids and store_mode() != "off"
        tasks = open_tasks(root, spec.resolution, spec.split, spec.cost_model, spec.task_variant,
                           n_samples=spec.n_samples, weight=spec.cost_weight, chunk=chunk,
                           on_chunk=on_chunk, keep_grids=keep_grids)
    except (DataError, ValueError) as e:
        raise AdmissionError(f"data: {e}") from None
    if not len(tasks):
        raise AdmissionError(f"data: {root} {spec.resolution}x{spec.resolution}/{spec.split} "
                             f"holds no scenes")
    ids = tasks.ids
    if len(set(ids)) != len(ids):
        seen, dup = set(), set()
        for i in ids:
            (dup if i in seen else seen).add(i)
        raise AdmissionError(f"data: duplicate scene id(s) {sorted(dup)[:5]} in the admitted tasks")
    return tasks


def shard_identity(tasks: TaskStream) -> list:
    return [{"path": f, "name": Path(f).name, "sha256": sha256_file(f), "rows_used": n}
            for f, n in tasks.shard_rows()]


class _Qualifier:
    """Qualifies the references chunk by chunk as the tasks are read (admission keeps one
    chunk of grids at a time); :meth:`finish` checks them all and returns References."""

    def __init__(self, spec: RunSpec):
        self.spec = spec
        self.key = f"{spec.cost_model}/{spec.task_variant}"
        # value iteration solves every task; a declared CPU budget adds the independent
        # CPU search as a cross-check within that budget
        self.cross = spec.reference_max_expansions is not None
        self.cols: dict[str, list] = {k: [] for k in ("sample_id", "c_star", "released_cost", "solver",
                                                        "reason", "work", "routes", "qualified",
                                                        "precision", "strata")}
        self.failures: list[str] = []

    def __call__(self, first: int, tasks: list) -> None:
        spec, key = self.spec, self.key
        try:
            quals = qualify_scenes([t.scene for t in tasks], spec.reference_policy,
                                   reference_cohort_id=spec.reference_cohort_id, solver="vi",
                                   max_expansions=spec.reference_max_expansions,
                                   cross_check=self.cross, keys=[key])
        except Exception as e:  # noqa: BLE001
            raise AdmissionError(f"references: qualification failed: {type(e).__name__}: {e}") from None
        routes = (_solver_routes(tasks) if spec.reference_policy == "independent_analytic_reference"
                  else [np.asarray(t.route, np.int32) for t in tasks])
        c = self.cols
        c["strata"].extend(strata_rows(tasks))
        for t, q, route in zip(tasks, quals, routes):
            if key not in q:
                raise AdmissionError(f"references: scene {t.id}: no qualification for {key}")
            qi = q[key]
            if not qi.qualified:
                self.failures.append(f"scene {t.id} ({t.scene.where}) {key}: {qi.reason}")
            c["sample_id"].append(t.id)
            c["c_star"].append(float(qi.c_star))
            c["released_cost"].append(route_cost(t.route, t.elevation_m, t.objective, t.weight))
            c["solver"].append(str(qi.solver) + ("+cross_check" if self.cross else ""))
            c["reason"].append("" if qi.reason is None else str(qi.reason))
            c["work"].append(int(qi.work) if qi.work is not None else -1)
            c["routes"].append(route)
            c["qualified"].append(bool(qi.qualified))
            c["precision"].append((qi.precision, float(qi.precision_rtol)))

    def share(self) -> tuple:
        """What this process qualified (columns and failures), to gather."""
        return self.cols, self.failures

    def merge(self, shares: list) -> None:
        """Take the gathered shares, in process (= task) order, as the columns."""
        self.cols = {k: [v for cols, _ in shares for v in cols[k]] for k in self.cols}
        self.failures = [f for _, fails in shares for f in fails]

    def finish(self) -> References:
        spec, c = self.spec, self.cols
        if self.failures:
            more = f" (and {len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
            raise AdmissionError("references: reference not qualified for "
                                 + "; ".join(self.failures[:3]) + more
                                 + " — the run is refused; the candidate is never penalised for it")
        cs = np.asarray(c["c_star"], np.float64)
        if not np.all(np.isfinite(cs)) or np.any(cs < 0):
            bad = [c["sample_id"][i] for i in np.flatnonzero(~np.isfinite(cs) | (cs < 0))]
            raise AdmissionError(f"references: non-finite or negative c* for scene(s) {bad[:5]}")
        paths = sorted(set(c["precision"]))
        if len(paths) > 1:  # one setting per run: a mix means the environment changed mid-way
            raise AdmissionError(f"references: c* came from several arithmetic paths {paths}")
        path, rtol = paths[0] if paths else ("float64", 1e-12)
        return References(sample_id=c["sample_id"], c_star=cs, routes=c["routes"],
                          released_cost=np.asarray(c["released_cost"], np.float64),
                          qualified=np.asarray(c["qualified"], bool), solver=c["solver"],
                          reason=c["reason"], work=np.asarray(c["work"], np.int64),
                          policy=spec.reference_policy, cohort_id=spec.reference_cohort_id,
                          max_expansions=spec.reference_max_expansions, precision=path,
                          precision_rtol=rtol,
                          scene_strata=np.asarray(c["strata"], np.float64).reshape(len(cs), -1))


def _qualify_share(qualifier: _Qualifier, tasks: TaskStream) -> tuple:
    """Qualify this process's share of the chunks (contiguous whole chunks, re-read from
    the shards: each chunk is one batch, as in a single process); returns the share's
    columns and failures. An error names the chunk's tasks and scenes."""
    mine = cluster.chunk_share(len(tasks), tasks.chunk)
    first = mine.start
    try:
        for first, chunk in tasks.chunks(mine.start, mine.stop):
            try:
                qualifier(first, chunk)
            except AdmissionError as e:
                raise AdmissionError(f"tasks {first}-{first + len(chunk) - 1} (scenes {chunk[0].id} "
                                     f"to {chunk[-1].id}): {e}") from None
    except DataError as e:
        raise AdmissionError(f"data: task {first} onwards: {e}") from None
    finally:
        tasks.release()
    return qualifier.share()


def _describe(e: Exception) -> str:
    return str(e) if isinstance(e, AdmissionError) else f"{type(e).__name__}: {e}"


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
                kind = _path_kind(v)
                if CHECKPOINT_KEY.search(key) and kind is None:
                    raise AdmissionError(f"checkpoint: seed {seed}: inference_kwargs.{name}="
                                         f"{shown(v)} is not an existing file")
                if kind == "file":
                    files[name] = {"path": str(Path(v).resolve()), "sha256": sha256_file(v)}
                elif CHECKPOINT_KEY.search(key) and kind == "dir":
                    files[name] = {"path": str(Path(v).resolve()), "sha256": _dir_sha256(Path(v))}
        out[str(seed)] = files
    return out


def _path_kind(v) -> str | None:
    """``"file"``, ``"dir"`` or ``"other"`` when ``v`` is a string naming an existing path,
    else None (not a string, too long to be a path, a NUL byte, a path the OS refuses)."""
    if not isinstance(v, str) or not v or len(v) >= 4096 or "\0" in v:
        return None
    try:
        st = os.stat(v)
    except (OSError, ValueError):
        return None
    return "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"


def _shipped_checkpoint(v: str, seed, name: str) -> str:
    """The metadata file of a ``"shipped:<seed>"`` checkpoint (it records the
    parameter file's sha256, so hashing it pins the parameters)."""
    # the learned package (Flax) is imported only by a spec that names a shipped network
    from passage_jax.learned.guide import shipped_checkpoint  # noqa: PLC0415 (Flax only when needed)

    try:
        return str(shipped_checkpoint(v.split(":", 1)[1]))
    except (ValueError, FileNotFoundError) as e:
        raise AdmissionError(f"checkpoint: seed {seed}: inference_kwargs.{name}={shown(v)}: {e}") from None


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
    data = read_document(p, AdmissionError, "runtime_bundle_manifest", max_bytes=16 * SPEC_MAX_BYTES)
    if not isinstance(data, dict) or data.get("schema") != "passage-runtime-bundle-v1":
        raise AdmissionError(f"runtime_bundle_manifest {p}: schema must be 'passage-runtime-bundle-v1'")
    files = data.get("files")
    if not isinstance(files, list) or not files:
        raise AdmissionError(f"runtime_bundle_manifest {p}: 'files' must be a non-empty list")
    checked = []
    for i, f in enumerate(files):
        if not isinstance(f, dict) or set(f) != {"path", "sha256"}:
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] must be {{path, sha256}}")
        if not isinstance(f["path"], str) or _path_kind(str(p.parent / f["path"])) != "file":
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] {shown(f['path'])} is not "
                                 f"a readable file")
        fp = (p.parent / f["path"]).resolve()
        got = sha256_file(fp)
        if got != str(f["sha256"]).lower():
            raise AdmissionError(f"runtime_bundle_manifest {p}: files[{i}] {shown(f['path'])}: sha256 "
                                 f"{got} != declared {shown(f['sha256'])}")
        checked.append({"path": f["path"], "sha256": got})
    return {"manifest": str(p.resolve()), "manifest_sha256": sha256_file(p), "files": checked}


def select_device(name):
    """The spec's device: the first of this process's devices of that platform (in a
    multi-process launch each process runs on its own), or None for the default."""
    if name is None:
        return None
    platform_name = {"gpu": "gpu", "cuda": "gpu", "rocm": "gpu"}.get(name, name)
    try:
        devs = jax.local_devices(backend=platform_name)
    except RuntimeError as e:
        raise AdmissionError(f"device {name!r} is not available: {e}") from None
    if not devs:
        raise AdmissionError(f"device {name!r} is not available")
    return devs[0]


def admit(spec: RunSpec, qualify: bool = True, *, chunk: int | None = None) -> Admitted:
    """Run every admission check; returns what the run needs or raises AdmissionError.

    The tasks are read once, ``chunk`` scenes at a time; each chunk's references are
    qualified as it is read, and only the compact task facts are kept
    (:class:`~passage_jax.data.TaskStream`): admission's peak memory is two chunks of
    grids (the one being qualified and the next, read ahead), whatever the number of
    scenes.

    In a multi-process launch (:mod:`passage_jax.cluster`) every process reads the
    tasks' compact facts, qualifies its contiguous share of the chunks, and the shares
    are gathered in task order: every process returns the same References as a
    single-process admission; a process whose share fails fails the admission on
    every process, naming it."""
    entry = entry_identity(spec)
    checkpoints = checkpoint_files(spec)
    bundle = verify_runtime_bundle(spec.runtime_bundle_manifest)
    device = select_device(spec.device)
    root = resolve_root(spec)
    reused = (ReusedReferences(spec, References, AdmissionError, _Qualifier) if spec.references_from
              else None)
    qualifier = reused or _Qualifier(spec)
    if cluster.process_count() == 1:
        tasks = open_admitted_tasks(spec, root, on_chunk=qualifier, chunk=chunk, keep_grids=True)
        tasks.release()
    else:
        held: dict = {}

        def read() -> str:
            held["tasks"] = open_admitted_tasks(spec, root, chunk=chunk, keep_grids=True)
            held["tasks"].release()
            return hashlib.sha256("\n".join(held["tasks"].input_hashes).encode()).hexdigest()

        seen = cluster.run_share(read, what="admission: reading the tasks", error=AdmissionError,
                                 describe=_describe)
        if len(set(seen)) > 1:
            other = next(i for i, h in enumerate(seen) if h != seen[0])
            raise AdmissionError(f"data: process {other} read other tasks than process 0 from "
                                 f"{root} (every process must see the same dataset)")
        tasks = held["tasks"]
        qualifier.merge(cluster.run_share(_qualify_share, qualifier, tasks,
                                          what="admission: qualifying the references",
                                          error=AdmissionError, describe=_describe))
    shards = shard_identity(tasks)
    refs = qualifier.finish()
    if reused is not None:  # after the tasks' own checks, which name the first task that differs
        reused.check_shards(shards)
    warmup = None
    if spec.one_pass:  # a session's warm-up calls, the batched procedure's warm-up batches
        try:
            warmup = warmup_task(spec, root, tasks.ids)
        except WarmupSceneError as e:
            raise AdmissionError(str(e)) from None
    return Admitted(spec=spec, root=root, tasks=tasks, shards=shards, references=refs,
                    entry=entry, checkpoints=checkpoints, runtime_bundle=bundle, device=device,
                    warmup=warmup)
