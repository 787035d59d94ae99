"""The read stage of scoring: everything a score reads from a run folder, read and
checked in one place.

* :func:`verified_seed_folders` is a finished run: its ``run.json`` (written last by
  ``run``; it declares the seeds) and ``run_started.json`` (the run identity), checked, and
  the ``seed-<seed>/`` folders they declare, each verified
  (:func:`~passage_jax.protocol.runfolder.verify_run_folder`).
* :class:`SeedFolder` is one seed's folder: :meth:`SeedFolder.verify` holds it to be what a
  finished run left, and :meth:`SeedFolder.read_inputs` reads the routes (``paths.npz``,
  read by seeking), the references and the records into one frozen :class:`SeedInputs`
  (their contents checked by :mod:`~passage_jax.evaluate.score._records`).

The verification is the one every reader of a run folder uses
(:mod:`passage_jax.protocol.runfolder`: links out of the folder, entries that are not
part of a finished run, the identity chain back to ``run_started.json``, the manifest's
hashes); here its refusals are :class:`ScoreError` (:class:`RunIncomplete`,
:class:`ForeignSeed`). ``compare``, ``trust``, the leaderboard, the attribution table and
``check-entry`` read runs through :func:`seed_folders` too.

The scenes are reloaded from the run's dataset by :mod:`~passage_jax.evaluate.score._scenes`;
the npz and document readers here (:func:`read_json`, :func:`read_doc`, :func:`load_npz`)
are the ones every evaluation command uses.
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from passage_jax.evaluate.score._format import (
    OUTPUTS,
    RUN_INPUTS,
    ForeignSeed,
    RunIncomplete,
    ScoreError,
    is_int,
    short,
)
from passage_jax.evaluate.score._records import RecordColumns, References, check_consistency
from passage_jax.fileio import read_document
from passage_jax.protocol.records import PathsReader, npz_errors, open_npz
from passage_jax.protocol.runfolder import (
    MANIFEST,
    PATHS,
    RECEIPT,
    REFERENCES,
    REQUESTS,
    FolderError,
    FolderForeign,
    FolderIncomplete,
    RunRecords,
    VerifiedSeed,
    run_file_hashes,
    seed_of_folder,
    verify_run_folder,
    verify_seed_folder,
)
from passage_jax.protocol.runfolder import refuse_links_out as check_links

__all__ = ["SeedFolder", "SeedInputs", "seed_folders", "check_seed_folder",
           "is_scored", "read_doc", "read_json", "load_npz", "verify_run_files",
           "refuse_links_out", "SEED_FILES", "verified_seed_folders", "folder_errors"]

#: the files of a seed folder that scoring reads or writes
SEED_FILES = (MANIFEST, *RUN_INPUTS, *OUTPUTS)


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


@contextlib.contextmanager
def folder_errors():
    """A refusal of the run-folder verification (:mod:`passage_jax.protocol.runfolder`)
    raised inside the block becomes the score error of its kind: :class:`RunIncomplete`,
    :class:`ForeignSeed`, else :class:`ScoreError` (the message unchanged)."""
    try:
        yield
    except FolderIncomplete as e:
        raise RunIncomplete(str(e)) from None
    except FolderForeign as e:
        raise ForeignSeed(str(e)) from None
    except FolderError as e:
        raise ScoreError(str(e)) from None


def refuse_links_out(root, paths) -> None:
    """Every one of ``paths`` must lie inside folder ``root`` once symbolic links are
    resolved (:func:`passage_jax.protocol.runfolder.refuse_links_out`); :class:`ScoreError`
    naming the path that leads out and its target otherwise."""
    with folder_errors():
        check_links(root, paths)


def is_scored(folder) -> bool:
    """Whether seed folder ``folder`` is scored: its ``score_receipt.json`` exists (the
    receipt is written last; outputs without one are a score that did not finish)."""
    return (Path(folder) / RECEIPT).exists()


# --------------------------------------------------------------------------- #
# the run
# --------------------------------------------------------------------------- #

def verified_seed_folders(path) -> list[SeedFolder]:
    """The seed folders of ``path``, verified
    (:func:`~passage_jax.protocol.runfolder.verify_run_folder`): itself when it holds a
    ``manifest.json`` (checked as a seed of its parent run when the parent holds a
    ``run.json``), else the ``seed-<seed>/`` folders the run's ``run.json`` declares, in
    seed order. Each carries what was verified."""
    path = Path(path)
    if not path.is_dir():
        raise ScoreError(f"{path}: not a folder")
    with folder_errors():
        return [SeedFolder(v.path, v) for v in verify_run_folder(path)]


def seed_folders(path) -> list[Path]:
    """The seed folders of ``path`` (:func:`verified_seed_folders`): itself when it holds a
    ``manifest.json``, else the ``seed-<seed>/`` folders that the run's ``run.json``
    declares, in seed order. The folders, their entries and their files are verified
    before anything is read from them: a run folder without ``run.json``, a declared seed
    whose folder or manifest is missing, a ``seed-*`` folder the run does not declare, a
    manifest of another run, a run file whose hash is not the manifest's, an entry that is
    not part of a finished run or a link out of the folder are refused by name
    (:class:`RunIncomplete`, :class:`ForeignSeed`, :class:`ScoreError`)."""
    return [s.path for s in verified_seed_folders(path)]


def check_seed_folder(folder) -> dict:
    """The manifest of seed folder ``folder``, checked against its parent run when the
    parent holds a ``run.json`` (:class:`ForeignSeed` naming the field otherwise)."""
    folder = Path(folder)
    manifest = read_json(folder / MANIFEST)
    with folder_errors():
        run = RunRecords.of_seed(folder)
        if run is not None:
            run.check_manifest(folder, manifest, seed_of_folder(folder, run))
    return manifest


# --------------------------------------------------------------------------- #
# one seed folder
# --------------------------------------------------------------------------- #

def verify_run_files(folder: Path, manifest: dict) -> dict:
    """Check the run files against the hashes in the manifest; returns them
    (:func:`passage_jax.protocol.runfolder.run_file_hashes`, a refusal a
    :class:`ScoreError`)."""
    with folder_errors():
        return run_file_hashes(Path(folder), manifest)


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
    """One ``seed-<seed>/`` folder of a run (or a seed folder on its own); ``verified``: what
    :func:`verified_seed_folders` held of it (None: verified when its inputs are read)."""

    path: Path
    verified: VerifiedSeed | None = dataclasses.field(default=None, compare=False, repr=False)

    def is_scored(self) -> bool:
        return is_scored(self.path)

    def manifest(self) -> dict:
        """``manifest.json``, checked against the parent run (:func:`check_seed_folder`)."""
        if not (self.path / MANIFEST).is_file():
            raise ScoreError(f"{self.path / MANIFEST}: file not found: {self.path} is not a "
                             f"seed folder of a finished run")
        return check_seed_folder(self.path)

    def verify(self) -> VerifiedSeed:
        """The folder verified (:func:`passage_jax.protocol.runfolder.verify_seed_folder`:
        links, listed contents, manifest against the parent run, hashes, references
        identity); a refusal a :class:`ScoreError`."""
        if self.verified is not None:
            return self.verified
        with folder_errors():
            return verify_seed_folder(self.path)

    def read_inputs(self) -> SeedInputs:
        """The folder's :class:`SeedInputs`, in one sequence: the folder verified
        (:meth:`verify`), the manifest's timing, the routes' index (``paths.npz``) and the
        arrays of ``references.npz`` read here, then the records and the references read
        and checked against each other (:mod:`~passage_jax.evaluate.score._records`)."""
        v = self.verify()
        folder, manifest = self.path, v.manifest
        q_index, warmup = _manifest_timing(manifest, folder / MANIFEST)
        paths = self._paths()
        ref = load_npz(folder / REFERENCES)
        records = RecordColumns(folder / REQUESTS, str(folder), q_index)
        refs = References.of_arrays(ref, folder / REFERENCES)
        check_consistency(records, paths.index, refs, manifest, str(folder))
        return SeedInputs(folder=folder, manifest=manifest, input_hashes=dict(v.hashes),
                          quality_repeat=q_index, warmup_declared=warmup, records=records,
                          paths=paths, refs=refs)

    def _paths(self) -> PathsReader:
        try:
            return PathsReader(self.path / PATHS)
        except (KeyError, ValueError, OSError) as e:
            text, where = str(e), str(self.path / PATHS)
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
