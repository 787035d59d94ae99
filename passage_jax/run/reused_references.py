"""References taken from an earlier run over the same tasks (the spec's ``references_from``).

Qualifying the references is most of admission's time (value iteration on every task).
Runs of several planners over one roster qualify the same references again and again;
a spec naming an earlier, finished run (``references_from: <run folder or seed
folder>``) takes that run's ``references.npz`` instead, once every check below holds:

* the earlier seed folder is finished: its ``manifest.json`` records the sha256 of its
  ``references.npz``, and the file has it; the identity recomputed from its arrays equals
  the manifest's ``references.identity``;
* it was qualified under the same settings: reference policy, cohort id, CPU-search
  budget, resolution, split, cost model, task variant;
* it holds the same tasks, in the same order: as this admission reads each task, its scene
  id, input hash (elevation, obstacles, start, goal), objective, variant and weight equal
  the earlier run's, and the shards this run reads have the names and sha256 the earlier
  run recorded (so the released routes, the reference routes of ``released_labels``, are
  the same bytes).

The scene stratifiers the earlier run measured at admission come along (measured here
when the earlier run predates them). Any difference refuses the run
(:class:`~passage_jax.run.admission.AdmissionError` naming the file and the field);
nothing is recomputed silently. The manifest's ``references`` block records
``reused_from`` (the folder, the file's sha256 and the identity).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from passage_jax.data.strata import SCENE_STRATIFIERS, strata_rows
from passage_jax.fileio import sha256_file
from passage_jax.protocol.records import input_hash, unpack_routes

__all__ = ["ReusedReferences", "earlier_seed_folder"]

#: manifest ``data`` fields that must equal this run's spec
_DATA_FIELDS = ("resolution", "split", "cost_model", "task_variant")
#: manifest ``references`` fields that must equal this run's spec
_POLICY_FIELDS = (("policy", "reference_policy"), ("cohort_id", "reference_cohort_id"),
                  ("reference_max_expansions", "reference_max_expansions"))


def earlier_seed_folder(path, error) -> Path:
    """The seed folder whose references are taken: ``path`` itself when it holds a
    ``manifest.json`` and ``references.npz``, else the first seed its ``run.json`` lists. An
    empty path names nothing: it is refused, never taken for the working directory."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise error(f"references_from: {path!r} names no folder; give a finished run folder or "
                    f"one of its seed folders (or null to qualify the references here)")
    path = Path(path).expanduser()
    if (path / "manifest.json").is_file() and (path / "references.npz").is_file():
        return path
    run = path / "run.json"
    if not run.is_file():
        raise error(f"references_from: {path} is neither a finished run folder (run.json) nor a "
                    f"seed folder (manifest.json and references.npz)")
    try:
        seeds = json.loads(run.read_text())["seeds"]
        folder = path / f"seed-{int(seeds[0])}"
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise error(f"references_from: {run}: cannot read its seeds ({type(e).__name__}: {e})") from None
    if not (folder / "manifest.json").is_file() or not (folder / "references.npz").is_file():
        raise error(f"references_from: {folder} has no manifest.json and references.npz (the run "
                    f"is not finished)")
    return folder


class ReusedReferences:
    """Stands in for admission's qualifier (the same calls): the earlier run's references,
    checked against each chunk of tasks as it is read (:meth:`__call__`) and returned by
    :meth:`finish` as :class:`~passage_jax.run.admission.References`."""

    def __init__(self, spec, references_cls, error):
        self.spec, self.references_cls, self.error = spec, references_cls, error
        self.folder = earlier_seed_folder(spec.references_from, error)
        self.manifest = self._manifest()
        self.npz_path = self.folder / "references.npz"
        self.npz_sha256 = self._checked_sha256()
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

    def _manifest(self) -> dict:
        where = self.folder / "manifest.json"
        try:
            m = json.loads(where.read_text())
        except (OSError, ValueError) as e:
            raise self.error(f"references_from: {where}: {type(e).__name__}: {e}") from None
        if not isinstance(m, dict) or not all(isinstance(m.get(k), dict)
                                              for k in ("files", "references", "data")):
            raise self.error(f"references_from: {where} has no files/references/data blocks")
        return m

    def _checked_sha256(self) -> str:
        want = self.manifest["files"].get("references.npz")
        got = sha256_file(self.npz_path)
        if got != want:
            raise self.error(f"references_from: {self.npz_path}: sha256 {got} differs from the one "
                             f"its manifest records ({want}); the file changed after the run")
        return got

    def _check_settings(self) -> None:
        spec, data, refs = self.spec, self.manifest["data"], self.manifest["references"]
        where = self.folder / "manifest.json"
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
        if self.strata is None:
            self.measured[first] = strata_rows(tasks)
        self.seen = max(self.seen, first + len(tasks))

    def share(self) -> tuple:
        return self.seen, self.failures, self.measured

    def merge(self, shares: list) -> None:
        self.seen = max(s for s, _, _ in shares)
        self.failures = [f for _, fails, _ in shares for f in fails]
        self.measured = {k: v for _, _, m in shares for k, v in m.items()}

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
                           "identity": out.identity()}
        return out
