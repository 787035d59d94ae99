"""The run folder: every file name of a run, seed and score folder (the layout, spelled
only here), and one verification of a finished run folder, for every reader of one.

``score``, ``compare``, ``trust``, ``check-entry`` and the other evaluation commands
(:mod:`passage_jax.evaluate`), and a run that takes an earlier run's references
(``references_from``, :mod:`passage_jax.run.admission.checks`), read a run folder only
after :meth:`RunRecords.seed_folders` (a run folder) or :func:`verify_seed_folder` (one seed
folder) held that it is what a finished run left:

* **inside the folder**: every entry of the run folder and of each seed folder lies inside
  the run folder once symbolic links are resolved (:func:`refuse_links_out`), so nothing is
  read or written through a link that leads out;
* **its listed contents and nothing else**: the run folder holds :data:`RUN_FOLDER_FILES`,
  the records of its launches (:data:`RUN_FOLDER_PATTERNS`) and the seed folders its
  ``run.json`` declares; a seed folder holds :data:`SEED_FOLDER_FILES` (docs/runner.md,
  "What a run folder holds"). Anything else (a file a planner wrote there, a folder, a
  temporary file of a write that was killed) is refused by name;
* **one run**: ``run.json`` and ``run_started.json`` name the same method, spec and seeds,
  and every seed folder's manifest carries the folder's seed, the run's method name, spec
  hash and code hash and the run identity of ``run_started.json`` (:data:`IDENTITY_FIELDS`);
* **the manifest's hashes**: the run files (``requests.jsonl``, ``paths.npz``,
  ``references.npz``) and the journal have the sha256 the manifest records, and the
  references identity recomputed from ``references.npz``'s arrays equals the one the file
  stores and the manifest's: the chain runs from the arrays to ``run_started.json``.

A refusal is a :class:`FolderError` on one line naming the file and the field
(:class:`FolderIncomplete`: the run is unfinished or a seed it declares is missing;
:class:`FolderForeign`: a seed folder or record of another run); each reader raises it as
its own error class.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from passage_jax.checks import is_int
from passage_jax.fileio import read_document, sha256_file
from passage_jax.protocol.records import RUN_FORMAT, npz_errors, open_npz, references_identity

__all__ = ["FolderError", "FolderIncomplete", "FolderForeign", "RUN_SUMMARY", "RUN_STARTED",
           "RUN_STARTED_FORMAT", "RESOLVED_PROTOCOL", "SIDECAR", "MANIFEST", "REQUESTS", "PATHS",
           "REFERENCES", "RUN_FILES", "JOURNAL", "SEED_STATE", "LOCK", "PER_SAMPLE", "METRICS", "RECEIPT",
           "SCORE_OUTPUTS", "RUN_FOLDER_FILES", "seed_folder_name", "partial_seed_folder_name",
           "launch_record_name", "RUN_FOLDER_PATTERNS", "SEED_FOLDER_FILES", "IDENTITY_FIELDS", "RunRecords",
           "VerifiedSeed", "SEED_FOLDER_PREFIX", "SEED_FOLDER_GLOB", "PARTIAL_SEED_PREFIX",
           "PARTIAL_SEED_SUFFIX", "is_partial_seed_folder_name", "refuse_links_out", "verify_seed_folder",
           "verify_run_folder", "seed_of_folder", "run_file_hashes", "remove_temporaries",
           "is_protocol_file", "launch_index"]

# --------------------------------------------------------------------------- #
# the layout: every file name of a run folder, a seed folder and what score writes
# (docs/runner.md, "What a run folder holds"); the only place they are spelled
# --------------------------------------------------------------------------- #

#: the run's summary, written last: the finished marker, which declares the seeds
RUN_SUMMARY = "run.json"
#: written by ``run`` after admission: the run identity a resume must find unchanged
RUN_STARTED = "run_started.json"
RUN_STARTED_FORMAT = "passage-jax-run-started-v1"
#: the latest launch's record (each launch also keeps ``resolved_protocol.<n>.json``)
RESOLVED_PROTOCOL = "resolved_protocol.json"
#: the bench command's record of the run it made
SIDECAR = "sidecar.json"
#: a seed's manifest: identities, settings, hashes of the run files
MANIFEST = "manifest.json"
#: a seed's run files: the request records, the routes, the exact references
REQUESTS = "requests.jsonl"
PATHS = "paths.npz"
REFERENCES = "references.npz"
#: the run files of a seed folder, hashed by its manifest (``files``)
RUN_FILES = (REQUESTS, PATHS, REFERENCES)
#: the record journal the run files were built from, hashed by the manifest (``journal``)
JOURNAL = "records.journal"
#: the state of a seed in progress, kept by ``run`` (``passage_jax.run.execution.seed``)
SEED_STATE = "seed_state.json"
#: the lock file held while a process runs the folder
LOCK = ".run.lock"
#: what ``score`` writes into a seed folder: per-sample arrays, the seed's metrics and the
#: receipt, whose presence makes a seed folder scored (written last)
PER_SAMPLE = "per_sample.npz"
METRICS = "metrics.json"
RECEIPT = "score_receipt.json"
SCORE_OUTPUTS = (PER_SAMPLE, METRICS, RECEIPT)

#: the files a finished run folder may hold besides its seed folders: the run records, the
#: latest launch record, the bench sidecar, and the lock a running ``run`` holds
RUN_FOLDER_FILES = (RUN_SUMMARY, RUN_STARTED, RESOLVED_PROTOCOL, SIDECAR, LOCK)
#: the records of each launch (``resolved_protocol.<n>.json``)
RUN_FOLDER_PATTERNS = (re.compile(r"resolved_protocol\.\d+\.json"),)
#: the files a seed folder may hold: the manifest, the run files, the journal and the seed's
#: state (kept by ``run``), and the outputs of ``score``
SEED_FOLDER_FILES = (MANIFEST, *RUN_FILES, JOURNAL, SEED_STATE, *SCORE_OUTPUTS)


#: a seed folder is ``seed-<seed>``; while ``run`` writes it, ``.seed-<seed>.partial``
SEED_FOLDER_PREFIX = "seed-"
PARTIAL_SEED_PREFIX, PARTIAL_SEED_SUFFIX = ".seed-", ".partial"
#: the glob of a run folder's seed folders
SEED_FOLDER_GLOB = f"{SEED_FOLDER_PREFIX}*"


def seed_folder_name(seed: int) -> str:
    """A seed folder's name in its run folder."""
    return f"{SEED_FOLDER_PREFIX}{seed}"


def partial_seed_folder_name(seed: int) -> str:
    """The name a seed folder has while ``run`` writes it (renamed when the seed finishes)."""
    return f"{PARTIAL_SEED_PREFIX}{seed}{PARTIAL_SEED_SUFFIX}"


def is_partial_seed_folder_name(name: str) -> bool:
    """Whether ``name`` is a seed folder's name while ``run`` writes it."""
    return name.startswith(PARTIAL_SEED_PREFIX) and name.endswith(PARTIAL_SEED_SUFFIX)


def launch_record_name(index: int) -> str:
    """The record of launch ``index`` (matched by :data:`RUN_FOLDER_PATTERNS`)."""
    return f"resolved_protocol.{index}.json"


#: (field, its path in the manifest, its path in the run identity of run_started.json)
#: checked for every seed folder of a run
IDENTITY_FIELDS = (
    ("data.sample_ids", ("data", "sample_ids"), ("data", "sample_ids")),
    ("data.tasks_sha256", ("data", "tasks_sha256"), ("data", "tasks_sha256")),
    ("data.shards", ("data", "shards"), ("data", "shards")),
    ("references.identity", ("references", "identity"), ("references", "identity")),
    ("references.policy", ("references", "policy"), ("references", "policy")),
    ("planner.module_sha256", ("planner", "module_sha256"), ("planner", "module_sha256")),
    ("planner.qualname", ("planner", "qualname"), ("planner", "qualname")),
    ("code.sha256", ("code", "sha256"), ("code_sha256",)),
)

#: the members of references.npz its identity is computed from
_IDENTITY_MEMBERS = ("sample_id", "c_star", "route_coords", "route_offsets", "qualified", "identity")
_TEMPORARY = re.compile(r"\..+\.tmp-\d+")


class FolderError(ValueError):
    """A run folder or seed folder is not what a finished run left (names the file and
    the field)."""


class FolderIncomplete(FolderError):
    """The run is not finished (no ``run.json``; still being written), or a seed it
    declares is missing or incomplete."""


class FolderForeign(FolderError):
    """A seed folder does not belong to the run it sits in (its manifest's method name,
    seed, spec hash, code or run identity differ from the run's, or the run does not
    declare it)."""


def _short(v) -> str:
    t = json.dumps(v, sort_keys=True, default=str)
    return t if len(t) <= 80 else t[:77] + "..."


def _dig(doc, *keys):
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def _read_json(path: Path, error=FolderError) -> dict:
    doc = read_document(path, error)
    if not isinstance(doc, dict):
        raise error(f"{path}: not a JSON object (got {type(doc).__name__})")
    return doc


def _read_records(summary: Path, started: Path) -> tuple[dict, dict | None]:
    """``run.json`` and, when present, ``run_started.json``, each a JSON object
    (:class:`FolderIncomplete` naming the file otherwise)."""
    records = []
    for path in (summary, started):
        doc = read_document(path, FolderIncomplete) if path == summary or path.is_file() else None
        if doc is not None and not isinstance(doc, dict):
            raise FolderIncomplete(f"{path}: not a JSON object (got {type(doc).__name__})")
        records.append(doc)
    return records[0], records[1]


def _type_error(doc: dict, key: str, kind, where) -> str:
    """What is wrong with field ``key`` of ``doc`` (read from ``where``), which must be of
    ``kind``: missing, or of another type."""
    if key not in doc:
        return f"{where}: field {key!r} is missing"
    return (f"{where}: field {key!r} must be {kind.__name__}, got {type(doc[key]).__name__} "
            f"{_short(doc[key])}")


# --------------------------------------------------------------------------- #
# inside the folder, and nothing unlisted
# --------------------------------------------------------------------------- #

def refuse_links_out(root, paths) -> None:
    """Every one of ``paths`` must lie inside folder ``root`` once symbolic links are
    resolved (``root`` itself resolved too: the folder the user named may be a link); a
    path that leads out of it (a seed folder or a file that is a symbolic link elsewhere)
    raises :class:`FolderError` naming it and its target, before anything is read or
    written through it."""
    base = Path(root).resolve()
    for p in paths:
        p = Path(p)
        real = p.resolve()
        if real != base and not real.is_relative_to(base):
            raise FolderError(f"{p}: a symbolic link to {real}, outside the run folder {base}; "
                              f"nothing is read or written through it")


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError as e:
        raise FolderError(f"{folder}: cannot be listed: {e.strerror or e}") from None


def _unlisted(p: Path, what: str) -> FolderError:
    why = ("a temporary file of a write that was killed; remove it" if _TEMPORARY.fullmatch(p.name)
           else "move it out of the folder")
    return FolderError(f"{p}: not part of a finished {what} (docs/runner.md, \"What a run folder "
                       f"holds\"): {why}")


def _check_listed(entries: list[Path], files, patterns, folders, what: str) -> None:
    """Each entry is a listed file (``files``, or a name one of ``patterns`` matches) that
    is a file, or one of ``folders`` that is a folder; :class:`FolderError` naming the first
    entry that is not."""
    for p in entries:
        if p.name in folders:
            if not p.is_dir():
                raise FolderError(f"{p}: not a folder (a {what} holds its seed folders here)")
            continue
        if p.name not in files and not any(r.fullmatch(p.name) for r in patterns):
            raise _unlisted(p, what)
        if not p.is_file():
            raise FolderError(f"{p}: not a file (a {what} holds a file of this name)")


# --------------------------------------------------------------------------- #
# the run records
# --------------------------------------------------------------------------- #

def _partial_note(path: Path, seed) -> str:
    partial = path / partial_seed_folder_name(seed)
    return (f" ({partial} exists: the seed is still being written or was interrupted)"
            if partial.exists() else "")


def _unfinished(path: Path) -> FolderError:
    """What to raise for a folder without ``run.json``: an unfinished run, or no run."""
    summary = path / RUN_SUMMARY
    partial = sorted(p.name for p in path.glob(f"{PARTIAL_SEED_PREFIX}*{PARTIAL_SEED_SUFFIX}"))
    started = (path / RUN_STARTED).is_file()
    seeds = sorted(p.name for p in path.iterdir() if p.is_dir() and p.name.startswith(SEED_FOLDER_PREFIX))
    if started or partial:
        what = ", ".join(([RUN_STARTED] if started else []) + partial)
        return FolderIncomplete(f"{summary}: file not found: the run is unfinished or still being "
                                f"written ({what} present); let it finish, or finish it with "
                                f"`run --resume`")
    if seeds:
        return FolderIncomplete(f"{summary}: file not found: {path} holds {', '.join(seeds[:3])} but "
                                f"the run did not finish (run.json is written last); finish it with "
                                f"`run --resume`, or score one seed folder directly")
    return FolderError(f"{path}: neither a seed folder (manifest.json) nor a run folder "
                       f"({RUN_SUMMARY} with seed-<seed>/ subfolders)")


def _shards(shards):
    if not isinstance(shards, list):
        return shards
    return sorted((str(_dig(s, "name")), str(_dig(s, "sha256"))) for s in shards)


@dataclasses.dataclass(frozen=True)
class RunRecords:
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
    def read(cls, path):
        """The run records of ``path``, checked; :class:`FolderIncomplete` naming what is
        missing otherwise. Top to bottom: both records inside the folder, ``run.json``
        present (else what is unfinished, :func:`_unfinished`), both read
        (:func:`_read_records`), then ``run.json``'s fields and ``run_started.json``'s
        against them."""
        path = Path(path)
        summary, started = path / RUN_SUMMARY, path / RUN_STARTED
        refuse_links_out(path, [summary, started])
        if not summary.is_file():
            raise _unfinished(path)
        run, st = _read_records(summary, started)
        if run.get("format") != RUN_FORMAT:
            raise FolderIncomplete(f"{summary}: format {run.get('format')!r} is not {RUN_FORMAT}")
        for key, kind in (("method_name", str), ("spec_sha256", str), ("seeds", list)):
            if key not in run or not isinstance(run[key], kind):
                raise FolderError(_type_error(run, key, kind, summary))
        seeds = run["seeds"]
        if not seeds or not all(is_int(x) for x in seeds) or len(set(seeds)) != len(seeds):
            raise FolderIncomplete(f"{summary}: seeds must be a non-empty list of distinct integers, "
                                   f"got {_short(seeds)}")
        identity = None
        if st is not None:  # the run identity, of the same run
            if st.get("format") != RUN_STARTED_FORMAT:
                raise FolderIncomplete(f"{started}: format {st.get('format')!r} is not "
                                       f"{RUN_STARTED_FORMAT}")
            for k in ("method_name", "spec_sha256", "seeds"):
                if st.get(k) != run.get(k):
                    raise FolderForeign(f"{summary}: {k} {_short(run.get(k))} differs from "
                                        f"{started}'s {_short(st.get(k))}; the two records are of "
                                        f"different runs")
            identity = st.get("identity")
            if not isinstance(identity, dict):
                raise FolderError(_type_error(st, "identity", dict, started))
        code = run.get("code")
        return cls(path=path, method_name=run["method_name"], spec_sha256=run["spec_sha256"],
                   seeds=tuple(int(x) for x in seeds),
                   code_sha256=code.get("sha256") if isinstance(code, dict) else None,
                   identity=identity)

    @classmethod
    def of_seed(cls, folder):
        """The run holding seed folder ``folder``, or None when its parent holds no
        ``run.json`` (a seed folder on its own)."""
        parent = Path(folder).resolve().parent
        return cls.read(parent) if (parent / RUN_SUMMARY).is_file() else None

    def seed_folders(self) -> list[VerifiedSeed]:
        """Exactly the seed folders ``run.json`` declares, in seed order, each verified
        (links, listed contents, manifest against the run, hashes, references identity);
        then the run folder's own entries (:meth:`check_contents`). A missing seed, one the
        run does not declare, and an unlisted entry are refused by name."""
        seeds = list(self.seeds)
        verified = []
        for seed in seeds:
            folder = self.path / seed_folder_name(seed)
            refuse_links_out(self.path, [folder])
            if not folder.is_dir():
                raise FolderIncomplete(f"{folder}: not found, but {self.where} declares seed {seed} "
                                       f"(seeds {seeds}){_partial_note(self.path, seed)}; rebuild it "
                                       f"with `run --resume`")
            verified.append(_verify_seed(folder, self, seed))
        self.check_contents()
        return sorted(verified, key=lambda v: int(v.path.name[5:]))

    def check_contents(self) -> None:
        """The run folder holds only its listed files (:data:`RUN_FOLDER_FILES`,
        :data:`RUN_FOLDER_PATTERNS`) and the seed folders ``run.json`` declares (a seed
        folder that is a link to a folder inside the run folder brings that folder's name
        along), each inside it once links are resolved; a ``seed-*`` folder the run does not
        declare is :class:`FolderForeign`."""
        entries = _entries(self.path)
        refuse_links_out(self.path, entries)
        declared = {seed_folder_name(s) for s in self.seeds}
        extra = [p for p in entries if p.name.startswith(SEED_FOLDER_PREFIX) and p.name not in declared]
        if extra:
            raise FolderForeign(f"{extra[0]}: not a seed of this run ({self.where} declares seeds "
                                f"{list(self.seeds)}); move it out of the run folder")
        base = self.path.resolve()
        folders = set(declared)
        for name in declared:  # a declared seed linked to a folder inside the run folder
            p = self.path / name
            if p.is_symlink() and p.resolve().parent == base:
                folders.add(p.resolve().name)
        _check_listed(entries, RUN_FOLDER_FILES, RUN_FOLDER_PATTERNS, folders, "run folder")

    def check_manifest(self, folder: Path, manifest: dict, seed: int) -> None:
        """The seed folder's manifest must be the run's: seed, method name, spec hash, code
        and the fields of the run identity (:data:`IDENTITY_FIELDS`)."""
        where = folder / MANIFEST
        got = manifest.get("seed")
        if not is_int(got) or int(got) != seed:
            raise FolderForeign(f"{where}: seed {_short(got)} is not the folder's seed {seed}; the "
                                f"folder does not belong to this run")
        for k in ("method_name", "spec_sha256"):
            if manifest.get(k) != getattr(self, k):
                raise FolderForeign(f"{where}: {k} {_short(manifest.get(k))} differs from the run's "
                                    f"{_short(getattr(self, k))} ({self.where}); the seed folder "
                                    f"does not belong to this run")
        if self.code_sha256 is not None and _dig(manifest, "code", "sha256") != self.code_sha256:
            raise FolderForeign(f"{where}: code.sha256 {_short(_dig(manifest, 'code', 'sha256'))} "
                                f"differs from the run's {_short(self.code_sha256)} ({self.where}); "
                                f"the seed folder does not belong to this run")
        if self.identity is None:
            return
        for label, in_manifest, in_identity in IDENTITY_FIELDS:
            mine, theirs = _dig(manifest, *in_manifest), _dig(self.identity, *in_identity)
            if label == "data.shards":
                mine, theirs = _shards(mine), _shards(theirs)
            if theirs is not None and mine != theirs:
                raise FolderForeign(f"{where}: {label} {_short(mine)} differs from the run "
                                    f"identity's {_short(theirs)} ({self.identity_where}); the seed "
                                    f"folder does not belong to this run")


# --------------------------------------------------------------------------- #
# one seed folder
# --------------------------------------------------------------------------- #

@dataclasses.dataclass(frozen=True)
class VerifiedSeed:
    """A verified seed folder: its manifest, and the sha256 of the manifest and of the run
    files (what a score receipt records as its inputs)."""

    path: Path
    manifest: dict
    hashes: dict


def seed_of_folder(folder: Path, run: RunRecords) -> int:
    """The seed of ``folder`` (named ``seed-<seed>``), which ``run`` must declare;
    :class:`FolderForeign` otherwise."""
    seed = (folder.name[len(SEED_FOLDER_PREFIX):] if folder.name.startswith(SEED_FOLDER_PREFIX)
            else None)
    if seed is None or not seed.lstrip("-").isdigit():
        raise FolderForeign(f"{folder}: a seed folder of the run in {folder.resolve().parent} must "
                            f"be named seed-<seed>")
    if int(seed) not in run.seeds:
        raise FolderForeign(f"{folder}: not a seed of this run ({run.where} declares seeds "
                            f"{list(run.seeds)})")
    return int(seed)


def verify_seed_folder(folder) -> VerifiedSeed:
    """Seed folder ``folder`` verified. When its parent holds a ``run.json``, the folder is
    checked as one of that run's seeds (named ``seed-<seed>``, declared, its manifest the
    run's) and the run folder's own entries are checked too; a seed folder on its own is
    checked as far as it goes (its entries, its manifest's hashes and references)."""
    folder = Path(folder)
    run = RunRecords.of_seed(folder)
    seed = None if run is None else seed_of_folder(folder, run)
    out = _verify_seed(folder, run, seed)
    if run is not None:
        run.check_contents()
    return out


def verify_run_folder(path) -> list[VerifiedSeed]:
    """The verified seed folders of ``path``: itself when it holds a ``manifest.json``
    (:func:`verify_seed_folder`), else those of the finished run folder ``path``
    (:meth:`RunRecords.seed_folders`)."""
    path = Path(path)
    if not path.is_dir():
        raise FolderError(f"{path}: not a folder")
    if (path / MANIFEST).is_file() or (path / MANIFEST).is_symlink():
        return [verify_seed_folder(path)]
    return RunRecords.read(path).seed_folders()


def _verify_seed(folder: Path, run: RunRecords | None, seed: int | None) -> VerifiedSeed:
    """The checks of one seed folder (of ``run`` when given), in order: its entries inside
    the folder and listed, the manifest present and (against the run) the run's, then the
    files the manifest vouches for (:func:`_check_seed_files`)."""
    root = run.path if run is not None else folder
    entries = _entries(folder)
    refuse_links_out(root, [folder, *entries])
    where = folder / MANIFEST
    if not where.is_file():
        if run is None:
            raise FolderError(f"{where}: file not found: {folder} is not a seed folder of a "
                              f"finished run")
        raise FolderIncomplete(f"{where}: file not found: seed {seed} of the run is incomplete"
                               f"{_partial_note(run.path, seed)}; rebuild it with `run --resume`")
    _check_listed(entries, SEED_FOLDER_FILES, (), (), "seed folder")
    manifest = _read_json(where)
    if run is not None:
        run.check_manifest(folder, manifest, seed)
    return VerifiedSeed(path=folder, manifest=manifest, hashes=_check_seed_files(folder, manifest))


def run_file_hashes(folder: Path, manifest: dict) -> dict:
    """The run files checked against the hashes in the manifest; returns them."""
    recorded = manifest.get("files") or {}
    if not isinstance(recorded, dict):
        raise FolderError(f"{folder / MANIFEST}: field 'files' must be an object of sha256 hashes, "
                          f"got {type(recorded).__name__}")
    hashes = {}
    for name in RUN_FILES:
        p = folder / name
        if not p.is_file():
            raise FolderError(f"{p}: file not found")
        if not isinstance(recorded.get(name), str):
            raise FolderError(f"{folder / MANIFEST}: files.{name} (sha256) is not recorded")
        h = sha256_file(p)
        if h != recorded[name]:
            raise FolderError(f"{p}: sha256 {h} differs from the manifest's {recorded[name]}; the "
                              f"run files were changed after the run")
        hashes[name] = h
    return hashes


def _check_seed_files(folder: Path, manifest: dict) -> dict:
    """The files of seed folder ``folder`` that its manifest vouches for, each read once, in
    order: the run files hashed against the manifest's ``files`` (:func:`run_file_hashes`),
    the manifest hashed, the journal (when the folder keeps it and the manifest records its
    hash) against ``journal.sha256``; then the references identity recomputed from
    ``references.npz``'s arrays, which must equal the one the file stores and the
    manifest's ``references.identity``. Returns the sha256 of the manifest and of the run
    files (what a score receipt records as its inputs)."""
    want = _dig(manifest, "journal", "sha256")
    recorded = _dig(manifest, "references", "identity")
    run_files = run_file_hashes(folder, manifest)
    hashes = {MANIFEST: sha256_file(folder / MANIFEST), **run_files}
    journal = folder / JOURNAL
    if isinstance(want, str) and journal.is_file():
        got = sha256_file(journal)
        if got != want:
            raise FolderError(f"{journal}: sha256 {got} differs from the manifest's journal.sha256 "
                              f"{want}; the journal was changed after the run")
    path = folder / REFERENCES
    arrays = {}
    with npz_errors(path, error=FolderError), open_npz(path, FolderError) as z:
        missing = [k for k in _IDENTITY_MEMBERS if k not in z.files]
        if missing:
            raise FolderError(f"{path}: missing arrays {missing}")
        for k in _IDENTITY_MEMBERS:
            with npz_errors(path, k, error=FolderError):
                arrays[k] = z[k]
    got = references_identity(arrays["sample_id"], arrays["c_star"], arrays["route_coords"],
                              arrays["route_offsets"], arrays["qualified"])
    stored = str(arrays["identity"])
    if got != stored:
        raise FolderError(f"{path}: reference identity {got} does not match the recorded {stored}")
    if recorded != got:
        raise FolderError(f"{path}: reference identity {got} differs from the manifest's "
                          f"references.identity {_short(recorded)} ({folder / MANIFEST})")
    return hashes


def is_protocol_file(name: str) -> bool:
    """Whether a file name is a resolved-protocol record (or a temporary of one)."""
    base = name.lstrip(".").split(".tmp-")[0]
    return base == RESOLVED_PROTOCOL or bool(_LAUNCH_FILE.match(base))


def remove_temporaries(folder: Path) -> None:
    """Remove the temporary files of interrupted atomic writes in ``folder``."""
    for p in folder.iterdir():
        if _is_temporary(p):
            p.unlink()


#: a launch record's name, its index captured
_LAUNCH_FILE = re.compile("^" + re.escape(launch_record_name(0)).replace("0", r"(\d+)") + "$")


def launch_index(output) -> int:
    """The index of the next launch in ``output`` (0 for the first)."""
    output = Path(output)
    if not output.is_dir():
        return 0
    found = [int(m.group(1)) for p in output.iterdir() if (m := _LAUNCH_FILE.match(p.name))]
    return max(found, default=-1) + 1


def _is_temporary(p: Path) -> bool:
    """A temporary file of an interrupted atomic write (``.<name>.tmp-<pid>``)."""
    return p.is_file() and p.name.startswith(".") and ".tmp-" in p.name
