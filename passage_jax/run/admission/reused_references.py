"""References taken from an earlier run over the same tasks (the spec's ``references_from``).

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
(:class:`~passage_jax.run.admission.checks.AdmissionError` naming the file and the field);
nothing is recomputed silently. The manifest's ``references`` block records
``reused_from`` (the folder, the file's sha256, the identity, and under ``recomputed`` the
sample's seed, tasks, tolerance and largest relative c* difference).
"""
from __future__ import annotations

import math
import secrets
from pathlib import Path

import numpy as np

from passage_jax import cluster
from passage_jax.data.strata import SCENE_STRATIFIERS, strata_rows
from passage_jax.protocol.records import input_hash, unpack_routes
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

__all__ = ["ReusedReferences", "earlier_seed_folder", "earlier_seed", "sample_tasks", "sample_seed",
           "SAMPLE_MIN", "SAMPLE_PER", "SAMPLE_RTOL"]

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
    :class:`~passage_jax.run.admission.checks.References`."""

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
