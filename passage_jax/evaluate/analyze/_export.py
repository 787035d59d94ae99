"""The export of an analysis (:mod:`passage_jax.evaluate.analyze`): copies of the source
notebooks, the read-only staged snapshot of the analysed shards (hardlinks, else reflinks;
an ordinary copy only when asked for), and the export's three states (notebook readiness,
Parquet staging, publication admission), recorded apart; and the analysis' errors.
"""
from __future__ import annotations

import errno
import importlib
import os
import shutil
import stat
from pathlib import Path

from passage_jax.fileio import atomic_write_bytes, sha256_file

__all__ = ["AnalyzeError", "MissingDependency", "StagingExists", "StagingRefused", "DATA_FOLDER",
           "SOURCES_FOLDER", "STAGING_METHODS", "stage_shards", "copy_source_notebooks",
           "export_states"]

#: the packages of the ``analyze`` extra
_NOTEBOOK_PACKAGES = ("nbformat", "nbclient", "ipykernel")
#: the staged read-only snapshot of the analysed shards, ``<staging_root>/data/<N>x<N>/<split>/``
DATA_FOLDER = "data"
#: copies of the source notebooks (templates) the export was made from
SOURCES_FOLDER = "source_notebooks"
#: how a shard is staged: a hardlink or a reflink (both tried, in this order), or, only when
#: asked for (``copy=True``, ``--copy``), an ordinary copy
STAGING_METHODS = ("hardlink", "reflink", "copy")
_FICLONE = 0x40049409  # linux/fs.h: share the source's extents (a reflink)


class AnalyzeError(RuntimeError):
    """The analysis cannot be prepared (templates, staging root, dataset)."""


class MissingDependency(AnalyzeError):
    """A package of the ``analyze`` extra is not installed."""


class StagingExists(AnalyzeError):
    """The staging root already holds an analysis."""


class StagingRefused(AnalyzeError):
    """A shard can be neither hardlinked nor reflinked into the staging root and no
    ordinary copy was asked for (or there is not room for one)."""


def _require(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingDependency(f"the analysis notebooks need {name!r} (one of "
                                f"{', '.join(_NOTEBOOK_PACKAGES)}), which is not installed: {e}") from None


# --------------------------------------------------------------------------- #
# the export: source notebooks and the staged read-only shard snapshot
# --------------------------------------------------------------------------- #

def _why(e: OSError) -> str:
    code = errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else "?"
    return f"{e.strerror or e} [{code}]"


def _reflink(src: Path, dst: Path) -> None:
    """``dst`` as a reflink of ``src`` (the FICLONE ioctl); OSError when the file system
    cannot (``dst`` is then removed)."""
    import fcntl  # noqa: PLC0415 (POSIX only)

    try:
        with open(src, "rb") as fs, open(dst, "xb") as fd:
            fcntl.ioctl(fd.fileno(), _FICLONE, fs.fileno())
    except OSError:
        dst.unlink(missing_ok=True)
        raise


def _read_only(path: Path) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    os.chmod(path, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _stage_one(src: Path, dst: Path, allow_copy: bool) -> str:
    """Stage ``src`` at ``dst``: a hardlink, else a reflink, else (``allow_copy``) a copy;
    the staged file is made read-only. StagingRefused names both refusals."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
        method = "hardlink"
    except OSError as e_link:
        try:
            _reflink(src, dst)
            method = "reflink"
        except OSError as e_ref:
            if not allow_copy:
                raise StagingRefused(
                    f"cannot stage shard {src} at {dst}: hardlink refused ({_why(e_link)}), reflink "
                    f"refused ({_why(e_ref)}); the dataset is never copied silently: stage on the "
                    f"dataset's file system, or pass --copy (copy=True) for an ordinary copy"
                ) from None
            tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
            method = "copy"
    _read_only(dst)
    return method


def stage_shards(plan, *, copy: bool = False) -> dict:
    """Stage every shard of the analysed resolutions under ``<staging_root>/data/`` (same
    relative paths as in the dataset root), read-only, and check each staged file (a
    hardlink: the same inode; a reflink or copy: the same sha256). Returns the manifest's
    ``parquet_staging`` state. A hardlink shares its inode with the dataset's file: making
    it read-only makes that file read-only. With ``copy`` an ordinary copy is made where
    neither link is possible, after checking the free space for every shard."""
    data = plan.staging_root / DATA_FOLDER
    files = [(f["path"], f["sha256"], f["bytes"]) for n in plan.resolutions
             for split in plan.identities[n]["splits"].values() for f in split]
    if copy:
        need = sum(b for _, _, b in files)
        data.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(data).free
        if free < need:
            raise StagingRefused(f"staging {data}: an ordinary copy needs {need:,} bytes, {free:,} "
                                 f"are free")
    made, entries = [], []
    try:
        for rel, digest, size in files:
            src, dst = plan.root / rel, data / rel
            method = _stage_one(src, dst, copy)
            made.append(dst)
            st_src, st_dst = os.stat(src), os.stat(dst)
            same = ((st_src.st_ino, st_src.st_dev) == (st_dst.st_ino, st_dst.st_dev)
                    if method == "hardlink" else sha256_file(dst) == digest)
            if not same:
                raise StagingRefused(f"staged shard {dst} is not {src} ({method})")
            entries.append({"path": f"{DATA_FOLDER}/{rel}", "source": str(src), "sha256": digest,
                            "bytes": size, "method": method, "inode": st_dst.st_ino,
                            "read_only": not (st_dst.st_mode & 0o222)})
    except BaseException:
        for dst in made:
            dst.unlink(missing_ok=True)
        shutil.rmtree(data, ignore_errors=True)  # cleared by plan_analysis: nothing else is there
        raise
    methods = sorted({e["method"] for e in entries})
    return {"state": "staged", "root": str(data),
            "method": methods[0] if len(methods) == 1 else "mixed", "methods": methods,
            "copy_allowed": bool(copy), "n_files": len(entries),
            "bytes": sum(e["bytes"] for e in entries),
            "read_only": all(e["read_only"] for e in entries), "verified": True, "files": entries}


def copy_source_notebooks(plan) -> list:
    """Copy each template into ``<staging_root>/source_notebooks/`` (atomically) and
    return ``[{notebook, path, sha256}]`` (each copy checked against its template)."""
    out = []
    for stem, template in plan.templates.items():
        dst = plan.staging_root / SOURCES_FOLDER / template.name
        data = template.read_bytes()
        atomic_write_bytes(dst, data)
        digest = sha256_file(dst)
        if digest != sha256_file(template):
            raise AnalyzeError(f"source notebook copy {dst} differs from {template}")
        out.append({"notebook": stem, "path": f"{SOURCES_FOLDER}/{template.name}",
                    "template": str(template), "sha256": digest})
    return out


def _clear_export(staging_root: Path) -> None:
    """Remove the staged snapshot and source copies of an earlier analysis (``force``)."""
    for name in (DATA_FOLDER, SOURCES_FOLDER):
        folder = staging_root / name
        if folder.is_dir():
            shutil.rmtree(folder)


def export_states(manifest: dict, staging_root: Path, executed: bool) -> dict:
    """The export's three states, recorded apart: ``notebooks`` (readiness and execution),
    ``parquet_staging`` (how the shards were staged) and ``publication`` (whether the
    export may be published: every notebook executed, every code cell run without an
    error output, the staged snapshot verified read-only, the producing identities
    recorded; otherwise the reasons)."""
    nbs = manifest["notebooks"]
    counts = {k: sum(e["status"] == k for e in nbs) for k in ("executed", "failed", "not_executed")}
    ready = sum(bool(e.get("ready")) for e in nbs)
    state = ("failed" if counts["failed"] else "executed" if counts["executed"] == len(nbs)
             else "ready" if ready == len(nbs) else "incomplete")
    notebooks = {"state": state, "total": len(nbs), "ready": ready, **counts}
    reasons = []
    if not executed:
        reasons.append("the notebooks were not executed (--execute)")
    for e in nbs:
        if e["status"] == "failed":
            reasons.append(f"{e['path']} failed at cell {e['error']['cell_index']}")
        elif e["status"] == "executed":
            reasons.extend(_cell_problems(staging_root / e["path"], e["path"]))
    staging = manifest.get("parquet_staging") or {}
    if not (staging.get("state") == "staged" and staging.get("verified") and staging.get("read_only")):
        reasons.append("the Parquet snapshot is not staged, verified and read-only")
    if not (manifest.get("evaluator", {}).get("code_hash") and manifest.get("data", {}).get("resolutions")):
        reasons.append("the producing identities (evaluator code hash, data) are not recorded")
    publication = {"state": "not_admitted" if reasons else "admitted", "reasons": reasons}
    return {"notebooks": notebooks, "parquet_staging": {k: staging.get(k) for k in
                                                        ("state", "method", "read_only", "verified")},
            "publication": publication}


def _cell_problems(path: Path, name: str) -> list:
    nbformat = _require("nbformat")
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as e:
        return [f"{name}: cannot be read back ({e})"]
    out = []
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    unrun = [i for i in code if nb.cells[i].execution_count is None]
    if unrun:
        out.append(f"{name}: code cell(s) {unrun[:5]} not executed")
    errs = [i for i in code if any(o.get("output_type") == "error" for o in nb.cells[i].outputs)]
    if errs:
        out.append(f"{name}: error output in cell(s) {errs[:5]}")
    return out
