"""The read stage of scoring: everything a score reads from a run folder, read and
checked in one place.

* :class:`RunFolder` is a finished run: its ``run.json`` (written last by ``run``; it
  declares the seeds) and ``run_started.json`` (the run identity), checked, and the
  ``seed-<seed>/`` folders they declare, each checked to belong to the run.
* :class:`SeedFolder` is one seed's folder: its manifest (checked against its parent run),
  and :meth:`SeedFolder.read_inputs`, which verifies the run files against the manifest's
  hashes and reads the records (:mod:`~passage_jax.evaluate.run_records`), the routes
  (``paths.npz``, read by seeking) and the references into one frozen :class:`SeedInputs`.

The scenes are reloaded from the run's dataset by :mod:`~passage_jax.evaluate.run_scenes`;
the npz and document readers here (:func:`read_json`, :func:`read_doc`, :func:`load_npz`)
are the ones every evaluation command uses.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from passage_jax.data.strata import SCENE_STRATIFIERS
from passage_jax.evaluate.run_records import RecordColumns
from passage_jax.evaluate.score_format import (
    OUTPUTS,
    RECEIPT,
    RUN_INPUTS,
    RUN_STARTED,
    RUN_STARTED_FORMAT,
    RUN_SUMMARY,
    ForeignSeed,
    RunIncomplete,
    ScoreError,
    dig,
    is_int,
    short,
    typed,
)
from passage_jax.fileio import read_document, sha256_file
from passage_jax.protocol.records import (
    RUN_FORMAT,
    PathsReader,
    npz_errors,
    open_npz,
    references_identity,
    unpack_routes,
)

__all__ = ["RunFolder", "SeedFolder", "SeedInputs", "References", "seed_folders", "check_seed_folder",
           "is_scored", "read_doc", "read_json", "load_npz", "verify_run_files", "references_from_npz",
           "refuse_links_out", "SEED_FILES"]

#: the files of a seed folder that scoring reads or writes
SEED_FILES = ("manifest.json", *RUN_INPUTS, *OUTPUTS)


# --------------------------------------------------------------------------- #
# documents and archives
# --------------------------------------------------------------------------- #

def read_doc(path, error=ScoreError, label: str = "", yaml_allowed: bool = False):
    """:func:`passage_jax.fileio.read_document`, a file that is not UTF-8 text also raising
    ``error`` naming it."""
    p = Path(path)
    where = f"{label} {p}" if label else str(p)
    try:
        return read_document(p, error, label, yaml_allowed=yaml_allowed)
    except UnicodeDecodeError as e:
        raise error(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path, error=ScoreError, label: str = "") -> dict:
    """A JSON object file; ``error`` naming the file when it is missing, not UTF-8, not
    JSON or not an object."""
    doc = read_doc(path, error, label)
    if not isinstance(doc, dict):
        where = f"{label} {Path(path)}" if label else str(Path(path))
        raise error(f"{where}: not a JSON object (got {type(doc).__name__})")
    return doc


def load_npz(path) -> dict:
    """Every array of an ``.npz`` (``allow_pickle=False``); :class:`ScoreError` naming
    the file (and the member) when it cannot be read."""
    out = {}
    try:
        with npz_errors(path, error=ScoreError), open_npz(path, ScoreError) as z:
            for k in z.files:
                with npz_errors(path, k, error=ScoreError):
                    out[k] = z[k]
    except OSError as e:
        raise ScoreError(f"{path}: cannot read: {e}") from None
    return out


def refuse_links_out(root, paths) -> None:
    """Every one of ``paths`` must lie inside folder ``root`` once symbolic links are
    resolved (``root`` itself resolved too: the folder the user named may be a link); a
    path that leads out of it (a seed folder or a file that is a symbolic link elsewhere)
    raises :class:`ScoreError` naming it and its target, before anything is read or
    written through it."""
    base = Path(root).resolve()
    for p in paths:
        p = Path(p)
        real = p.resolve()
        if real != base and not real.is_relative_to(base):
            raise ScoreError(f"{p}: a symbolic link to {real}, outside the run folder {base}; "
                             f"score reads and writes only inside the folder it is given")


def _refuse_seed_links_out(root, folder: Path) -> None:
    """The seed folder ``folder`` and its :data:`SEED_FILES` lie inside ``root``."""
    refuse_links_out(root, [folder, *(folder / n for n in SEED_FILES)])


def is_scored(folder) -> bool:
    """Whether seed folder ``folder`` is scored: its ``score_receipt.json`` exists (the
    receipt is written last; outputs without one are a score that did not finish)."""
    return (Path(folder) / RECEIPT).exists()


# --------------------------------------------------------------------------- #
# the run
# --------------------------------------------------------------------------- #

#: (field, its path in the manifest, its path in the run identity of run_started.json)
#: checked for every seed folder of a run
_IDENTITY_FIELDS = (
    ("data.sample_ids", ("data", "sample_ids"), ("data", "sample_ids")),
    ("data.tasks_sha256", ("data", "tasks_sha256"), ("data", "tasks_sha256")),
    ("data.shards", ("data", "shards"), ("data", "shards")),
    ("references.identity", ("references", "identity"), ("references", "identity")),
    ("references.policy", ("references", "policy"), ("references", "policy")),
    ("planner.module_sha256", ("planner", "module_sha256"), ("planner", "module_sha256")),
    ("planner.qualname", ("planner", "qualname"), ("planner", "qualname")),
    ("code.sha256", ("code", "sha256"), ("code_sha256",)),
)


def _shards(shards):
    if not isinstance(shards, list):
        return shards
    return sorted((str(dig(s, "name")), str(dig(s, "sha256"))) for s in shards)


def _partial_note(path: Path, seed) -> str:
    partial = [n for n in (f".seed-{seed}.partial",) if (path / n).exists()]
    return f" ({path / partial[0]} exists: the seed is still being written or was interrupted)" \
        if partial else ""


def _unfinished(path: Path) -> ScoreError:
    """What to raise for a folder without ``run.json``: an unfinished run, or no run."""
    summary = path / RUN_SUMMARY
    partial = sorted(p.name for p in path.glob(".seed-*.partial"))
    started = (path / RUN_STARTED).is_file()
    seeds = sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.startswith("seed-"))
    if started or partial:
        what = ", ".join(([RUN_STARTED] if started else []) + partial)
        return RunIncomplete(f"{summary}: file not found: the run is unfinished or still being "
                             f"written ({what} present); let it finish, or finish it with "
                             f"`run --resume`")
    if seeds:
        return RunIncomplete(f"{summary}: file not found: {path} holds {', '.join(seeds[:3])} but "
                             f"the run did not finish (run.json is written last); finish it with "
                             f"`run --resume`, or score one seed folder directly")
    return ScoreError(f"{path}: neither a seed folder (manifest.json) nor a run folder "
                      f"({RUN_SUMMARY} with seed-<seed>/ subfolders)")


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """A finished run folder: what its ``run.json`` (and ``run_started.json`` when present)
    declare, checked (:meth:`read`)."""

    path: Path
    method_name: str
    spec_sha256: str
    seeds: tuple
    code_sha256: str | None = None
    #: the run identity of ``run_started.json`` (None without one)
    identity: dict | None = None

    @property
    def where(self) -> str:
        return str(self.path / RUN_SUMMARY)

    @property
    def identity_where(self) -> str:
        return str(self.path / RUN_STARTED)

    @classmethod
    def read(cls, path) -> RunFolder:
        """The run records of ``path``, checked; :class:`RunIncomplete` naming what is
        missing otherwise."""
        path = Path(path)
        summary = path / RUN_SUMMARY
        refuse_links_out(path, [summary, path / RUN_STARTED])
        if not summary.is_file():
            raise _unfinished(path)
        run = read_json(summary, RunIncomplete)
        if run.get("format") != RUN_FORMAT:
            raise RunIncomplete(f"{summary}: format {run.get('format')!r} is not {RUN_FORMAT}")
        typed(run, "method_name", str, summary)
        typed(run, "spec_sha256", str, summary)
        seeds = typed(run, "seeds", list, summary)
        if not seeds or not all(is_int(x) for x in seeds) or len(set(seeds)) != len(seeds):
            raise RunIncomplete(f"{summary}: seeds must be a non-empty list of distinct integers, got "
                                f"{short(seeds)}")
        code = run.get("code")
        return cls(path=path, method_name=run["method_name"], spec_sha256=run["spec_sha256"],
                   seeds=tuple(int(x) for x in seeds),
                   code_sha256=code.get("sha256") if isinstance(code, dict) else None,
                   identity=cls._identity(path, run))

    @staticmethod
    def _identity(path: Path, run: dict) -> dict | None:
        started = path / RUN_STARTED
        if not started.is_file():
            return None
        st = read_json(started, RunIncomplete)
        if st.get("format") != RUN_STARTED_FORMAT:
            raise RunIncomplete(f"{started}: format {st.get('format')!r} is not {RUN_STARTED_FORMAT}")
        for k in ("method_name", "spec_sha256", "seeds"):
            if st.get(k) != run.get(k):
                raise ForeignSeed(f"{path / RUN_SUMMARY}: {k} {short(run.get(k))} differs from "
                                  f"{started}'s {short(st.get(k))}; the two records are of different runs")
        return typed(st, "identity", dict, started)

    @classmethod
    def of_seed(cls, folder) -> RunFolder | None:
        """The run holding seed folder ``folder``, or None when its parent holds no
        ``run.json`` (a seed folder on its own)."""
        parent = Path(folder).resolve().parent
        return cls.read(parent) if (parent / RUN_SUMMARY).is_file() else None

    def seed_folders(self) -> list[SeedFolder]:
        """Exactly the seed folders ``run.json`` declares, in seed order, each checked to
        belong to the run; a missing one, or one the run does not declare, refused."""
        seeds = list(self.seeds)
        folders = []
        for seed in seeds:
            folder = self.path / f"seed-{seed}"
            _refuse_seed_links_out(self.path, folder)
            if not folder.is_dir():
                raise RunIncomplete(f"{folder}: not found, but {self.where} declares seed {seed} "
                                    f"(seeds {seeds}){_partial_note(self.path, seed)}; rebuild it "
                                    f"with `run --resume`")
            if not (folder / "manifest.json").is_file():
                raise RunIncomplete(f"{folder / 'manifest.json'}: file not found: seed {seed} of the "
                                    f"run is incomplete{_partial_note(self.path, seed)}; rebuild it "
                                    f"with `run --resume`")
            self.check_manifest(folder, read_json(folder / "manifest.json"), seed)
            folders.append(folder)
        names = {f.name for f in folders}
        extra = sorted(p.name for p in self.path.iterdir() if p.is_dir() and p.name.startswith("seed-")
                       and p.name not in names)
        if extra:
            raise ForeignSeed(f"{self.path / extra[0]}: not a seed of this run ({self.where} "
                              f"declares seeds {seeds}); move it out of the run folder")
        return [SeedFolder(f) for f in sorted(folders, key=lambda f: int(f.name[5:]))]

    def check_manifest(self, folder: Path, manifest: dict, seed: int) -> None:
        """The seed folder's manifest must be the run's: seed, method name, spec hash, code
        and the fields of the run identity (:data:`_IDENTITY_FIELDS`)."""
        where = folder / "manifest.json"
        got = manifest.get("seed")
        if not is_int(got) or int(got) != seed:
            raise ForeignSeed(f"{where}: seed {short(got)} is not the folder's seed {seed}; the "
                              f"folder does not belong to this run")
        for k in ("method_name", "spec_sha256"):
            if manifest.get(k) != getattr(self, k):
                raise ForeignSeed(f"{where}: {k} {short(manifest.get(k))} differs from the run's "
                                  f"{short(getattr(self, k))} ({self.where}); the seed folder does "
                                  f"not belong to this run")
        if self.code_sha256 is not None and dig(manifest, "code", "sha256") != self.code_sha256:
            raise ForeignSeed(f"{where}: code.sha256 {short(dig(manifest, 'code', 'sha256'))} differs "
                              f"from the run's {short(self.code_sha256)} ({self.where}); the seed "
                              f"folder does not belong to this run")
        if self.identity is None:
            return
        for label, in_manifest, in_identity in _IDENTITY_FIELDS:
            mine, theirs = dig(manifest, *in_manifest), dig(self.identity, *in_identity)
            if label == "data.shards":
                mine, theirs = _shards(mine), _shards(theirs)
            if theirs is not None and mine != theirs:
                raise ForeignSeed(f"{where}: {label} {short(mine)} differs from the run identity's "
                                  f"{short(theirs)} ({self.identity_where}); the seed folder does "
                                  f"not belong to this run")


def seed_folders(path) -> list[Path]:
    """The seed folders of ``path``: itself when it holds a ``manifest.json`` (checked
    against its parent run when the parent holds one), else the ``seed-<seed>/`` folders
    that the run's ``run.json`` declares, in seed order, each checked to belong to the
    run (:func:`check_seed_folder`). A run folder without ``run.json``, a declared seed
    whose folder or manifest is missing, and a ``seed-*`` folder the run does not declare
    are refused by name (:class:`RunIncomplete`, :class:`ForeignSeed`)."""
    path = Path(path)
    if not path.is_dir():
        raise ScoreError(f"{path}: not a folder")
    if (path / "manifest.json").is_file() or (path / "manifest.json").is_symlink():
        _refuse_seed_links_out(path, path)
        check_seed_folder(path)
        return [path]
    return [s.path for s in RunFolder.read(path).seed_folders()]


def check_seed_folder(folder) -> dict:
    """The manifest of seed folder ``folder``, checked against its parent run when the
    parent holds a ``run.json`` (:class:`ForeignSeed` naming the field otherwise)."""
    folder = Path(folder)
    manifest = read_json(folder / "manifest.json")
    run = RunFolder.of_seed(folder)
    if run is not None:
        seed = folder.name[5:] if folder.name.startswith("seed-") else None
        if seed is None or not seed.lstrip("-").isdigit():
            raise ForeignSeed(f"{folder}: a seed folder of the run in {folder.resolve().parent} must be "
                              f"named seed-<seed>")
        if int(seed) not in run.seeds:
            raise ForeignSeed(f"{folder}: not a seed of this run ({run.where} declares seeds "
                              f"{list(run.seeds)})")
        run.check_manifest(folder, manifest, int(seed))
    return manifest


# --------------------------------------------------------------------------- #
# one seed folder
# --------------------------------------------------------------------------- #

def verify_run_files(folder: Path, manifest: dict) -> dict:
    """Check the run files against the hashes in the manifest; returns them."""
    recorded = manifest.get("files") or {}
    if not isinstance(recorded, dict):
        raise ScoreError(f"{folder / 'manifest.json'}: field 'files' must be an object of sha256 "
                         f"hashes, got {type(recorded).__name__}")
    hashes = {}
    for name in RUN_INPUTS:
        p = folder / name
        if not p.is_file():
            raise ScoreError(f"{p}: file not found")
        h = sha256_file(p)
        if not isinstance(recorded.get(name), str):
            raise ScoreError(f"{folder / 'manifest.json'}: files.{name} (sha256) is not recorded")
        if h != recorded[name]:
            raise ScoreError(f"{p}: sha256 {h} differs from the manifest's {recorded[name]}; "
                             f"the run files were changed after the run")
        hashes[name] = h
    return hashes


#: references.npz members that scoring reads
_REFERENCE_MEMBERS = ("sample_id", "c_star", "qualified", "route_coords", "route_offsets", "objective",
                      "variant", "cost_weight", "input_sha256", "tile_json", "identity")


def references_from_npz(ref: dict, where: str) -> dict:
    """The checked core of ``references.npz`` (ids, c*, qualified flags, routes, the
    identity recomputed from them); :class:`ScoreError` naming the file otherwise."""
    missing = [k for k in _REFERENCE_MEMBERS if k not in ref]
    if missing:
        raise ScoreError(f"{where}: missing arrays {missing}")
    ids = [str(s) for s in ref["sample_id"]]
    routes = unpack_routes(ref["route_coords"], ref["route_offsets"])
    if len(routes) != len(ids):
        raise ScoreError(f"{where}: {len(routes)} reference routes for {len(ids)} tasks")
    ident = references_identity(ids, ref["c_star"], ref["route_coords"], ref["route_offsets"],
                                ref["qualified"])
    if ident != str(ref["identity"]):
        raise ScoreError(f"{where}: reference identity {ident} does not match the recorded "
                         f"{ref['identity']}")
    return {"sample_id": ids, "c_star": np.asarray(ref["c_star"], np.float64),
            "qualified": np.asarray(ref["qualified"], bool), "routes": routes,
            "identity": ident}


def _recorded_strata(ref: dict, n: int, path) -> np.ndarray | None:
    """``scene_strata`` of ``references.npz`` checked: (n, 5) float64 with the field names
    ``scene_strata_fields`` equal to SCENE_STRATIFIERS; None when the run has none."""
    if "scene_strata" not in ref:
        return None
    fields = [str(x) for x in np.asarray(ref.get("scene_strata_fields", []), dtype=str).reshape(-1)]
    if fields != list(SCENE_STRATIFIERS):
        raise ScoreError(f"{path}: scene_strata_fields {fields} are not {list(SCENE_STRATIFIERS)}")
    rows = ref["scene_strata"]
    if rows.shape != (n, len(SCENE_STRATIFIERS)) or rows.dtype != np.float64:
        raise ScoreError(f"{path}: scene_strata has shape {rows.shape} and dtype {rows.dtype}, not "
                         f"({n}, {len(SCENE_STRATIFIERS)}) float64")
    return rows


@dataclasses.dataclass(frozen=True)
class References:
    """The run's qualified references (``references.npz``), checked: per task its scene id,
    c*, qualification, reference route, and the identity the run recorded for it (input
    hash, objective, variant, cost weight, tile)."""

    sample_id: list
    c_star: np.ndarray
    qualified: np.ndarray
    routes: list
    identity: str
    objective: list
    variant: list
    cost_weight: np.ndarray
    input_sha256: list
    tile_json: np.ndarray
    policy: str
    #: (T, 5) the scene stratifiers admission measured (SCENE_STRATIFIERS' order), or None
    #: for a run written before admission recorded them
    scene_strata: np.ndarray | None = None

    @classmethod
    def read(cls, path: Path) -> References:
        ref = load_npz(path)
        core = references_from_npz(ref, str(path))
        return cls(**core, objective=[str(x) for x in ref["objective"]],
                   variant=[str(x) for x in ref["variant"]],
                   cost_weight=np.asarray(ref["cost_weight"], np.float64),
                   input_sha256=[str(x) for x in ref["input_sha256"]], tile_json=ref["tile_json"],
                   policy=str(ref.get("policy", "")),
                   scene_strata=_recorded_strata(ref, len(core["sample_id"]), path))

    def __len__(self) -> int:
        return len(self.sample_id)


@dataclasses.dataclass(frozen=True)
class SeedInputs:
    """Everything scoring reads from a seed folder, verified (:meth:`SeedFolder.read_inputs`):
    the manifest, the sha256 of the manifest and the run files, the quality repeat and the
    declared warm-up passes, the records as columns, the routes (read by seeking) and the
    references."""

    folder: Path
    manifest: dict
    input_hashes: dict
    quality_repeat: int
    warmup_declared: int
    records: RecordColumns
    paths: PathsReader
    refs: References

    @property
    def where(self) -> str:
        return str(self.folder)

    @property
    def n_tasks(self) -> int:
        return len(self.refs)


@dataclasses.dataclass(frozen=True)
class SeedFolder:
    """One ``seed-<seed>/`` folder of a run (or a seed folder on its own)."""

    path: Path

    def is_scored(self) -> bool:
        return is_scored(self.path)

    def manifest(self) -> dict:
        """``manifest.json``, checked against the parent run (:func:`check_seed_folder`)."""
        if not (self.path / "manifest.json").is_file():
            raise ScoreError(f"{self.path / 'manifest.json'}: file not found: {self.path} is not a "
                             f"seed folder of a finished run")
        return check_seed_folder(self.path)

    def read_inputs(self) -> SeedInputs:
        """The folder's :class:`SeedInputs`: the manifest, the run files checked against its
        hashes, then read and checked against each other."""
        _refuse_seed_links_out(self.path, self.path)
        folder, manifest = self.path, self.manifest()
        hashes = {"manifest.json": sha256_file(folder / "manifest.json")}
        q_index, warmup = _manifest_timing(manifest, folder / "manifest.json")
        hashes.update(verify_run_files(folder, manifest))
        records = RecordColumns(folder / "requests.jsonl", str(folder), q_index)
        paths = self._paths()
        refs = References.read(folder / "references.npz")
        _check_consistency(records, paths.index, refs, manifest, str(folder))
        return SeedInputs(folder=folder, manifest=manifest, input_hashes=hashes, quality_repeat=q_index,
                          warmup_declared=warmup, records=records, paths=paths, refs=refs)

    def _paths(self) -> PathsReader:
        try:
            return PathsReader(self.path / "paths.npz")
        except (KeyError, ValueError, OSError) as e:
            text, where = str(e), str(self.path / "paths.npz")
            raise ScoreError(text if where in text else f"{where}: {text}") from None


def _manifest_timing(manifest: dict, where) -> tuple[int, int]:
    """The quality repeat index and the number of warm-up passes the run declared
    (``timing``, else ``spec``), checked to be integers."""
    timing = manifest.get("timing") if isinstance(manifest.get("timing"), dict) else {}
    spec = manifest.get("spec") if isinstance(manifest.get("spec"), dict) else {}
    out = []
    for k in ("quality_repeat_index", "latency_warmup"):
        src, name = (timing, f"timing.{k}") if k in timing else (spec, f"spec.{k}")
        if k not in src:
            raise ScoreError(f"{where}: field timing.{k} (or spec.{k}) is missing")
        if not is_int(src[k]) or src[k] < 0:
            raise ScoreError(f"{where}: field {name} must be a non-negative integer, got "
                             f"{short(src[k])}")
        out.append(int(src[k]))
    return out[0], out[1]


def _check_consistency(records: RecordColumns, paths: dict, refs: References, manifest: dict,
                       where: str) -> None:
    """The records, routes and references of one run agree: one route per record, the
    manifest's record count, records in order, each naming a task of the run by index
    and scene id."""
    n = len(records)
    if len(paths["route_format"]) != n:
        raise ScoreError(f"{where}: paths.npz holds {len(paths['route_format'])} routes for "
                         f"{n} records")
    if manifest.get("n_records") is not None and manifest["n_records"] != n:
        raise ScoreError(f"{where}: manifest says {manifest['n_records']} records, "
                         f"requests.jsonl has {n}")
    order = np.arange(n, dtype=np.int64)
    bad = np.flatnonzero((records.record != order) | (np.asarray(paths["record_index"]) != order))
    if bad.size:
        raise ScoreError(f"{where}: record {int(bad[0])} is out of order")
    ti, n_tasks = records.task_index, len(refs)
    if len(ti) and (ti.min() < 0 or ti.max() >= n_tasks):
        raise ScoreError(f"{where}: a record's task_index is outside [0, {n_tasks})")
    ref_ids = np.asarray(refs.sample_id, dtype=str)
    bad = np.flatnonzero(records.sample_id != ref_ids[ti])
    if bad.size:
        i = int(bad[0])
        raise ScoreError(f"{where}: record {i}: sample_id {records.sample_id[i]} is not task "
                         f"{ti[i]}'s scene {ref_ids[ti[i]]}")
