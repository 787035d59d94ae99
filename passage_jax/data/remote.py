"""Choosing the dataset root: a local folder, or a pinned hub snapshot (contract §1).

A hub snapshot is selected by ``dataset_repo`` (``owner/name``) and
``dataset_revision``, which must be exactly 40 hexadecimal characters (a full
commit hash). Branch names, tags, short hashes and anything else are refused
*before* any download is attempted. A local root that does not exist is an
error, never a reason to fall back to the hub or to synthetic data.

When the resolution and split are known, only ``<N>x<N>/<split>/*.parquet`` is
requested from the hub (the reader reads no file at the dataset root), into the
standard Hugging Face cache unless ``cache_dir`` is given. After the download the
snapshot folder is checked like a local root: it must hold the requested split's
shards. With ``HF_HUB_OFFLINE=1`` only the local cache is consulted, and a
revision that is not cached is an error naming the repo and revision.
"""
from __future__ import annotations

import re
from pathlib import Path

from passage_jax.checks import is_full_commit, is_int
from passage_jax.data.layout import dataset_root
from passage_jax.data.scene import canonical_split
from passage_jax.data.validate import DataError

__all__ = ["check_revision", "check_repo", "hub_patterns", "check_snapshot", "hub_download",
           "resolve_dataset_root"]

_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def check_revision(revision) -> str:
    """The revision if it is exactly 40 hex characters; DataError otherwise."""
    if not is_full_commit(revision):
        raise DataError(
            f"dataset_revision must be a full commit hash of exactly 40 hexadecimal characters, "
            f"got {revision!r}; branch names, tags and short hashes are refused")
    return revision.lower()


def check_repo(repo) -> str:
    if not isinstance(repo, str) or not _REPO_RE.fullmatch(repo):
        raise DataError(f"dataset_repo must look like 'owner/name', got {repo!r}")
    return repo


def _check_selection(resolution, split) -> tuple[int | None, str | None]:
    if resolution is not None and (not is_int(resolution) or resolution <= 0):
        raise DataError(f"resolution must be a positive integer, got {resolution!r}")
    if split is not None:
        try:
            split = canonical_split(split)
        except ValueError as e:
            raise DataError(str(e)) from None
    return resolution, split


def hub_patterns(resolution=None, split=None) -> list[str] | None:
    """``allow_patterns`` for a download of one resolution and/or split; None (the whole
    snapshot) when neither is given. Only the shard files the reader opens are named."""
    resolution, split = _check_selection(resolution, split)
    if resolution is None and split is None:
        return None
    folder = f"{resolution}x{resolution}" if resolution is not None else "*x*"
    return [f"{folder}/{split or '*'}/*.parquet"]


def check_snapshot(root, repo: str, revision: str, resolution=None, split=None) -> Path:
    """``root`` if it is a folder holding the requested shards; DataError naming the repo,
    the revision and what is missing otherwise."""
    resolution, split = _check_selection(resolution, split)
    where = f"dataset_repo {repo!r} at revision {revision}"
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{where}: the downloaded snapshot {root} is not a folder")
    if resolution is None and split is None:
        return root
    pattern = hub_patterns(resolution, split)[0]
    if not any(p.is_file() for p in root.glob(pattern)):
        raise DataError(f"{where}: the snapshot {root} holds no {pattern} (the requested "
                        f"resolution/split is missing from this revision)")
    return root


def _offline(hub) -> bool:
    constants = getattr(hub, "constants", None)
    probe = getattr(constants, "is_offline_mode", None)
    return bool(probe() if callable(probe) else getattr(constants, "HF_HUB_OFFLINE", False))


def hub_download(repo: str, revision: str, cache_dir=None, *, resolution=None, split=None) -> Path:
    """Download a dataset snapshot (only the requested resolution/split when given) and
    check it holds that split's shards; only called with a checked repo and revision.

    ``cache_dir`` None is the standard Hugging Face cache (``HF_HUB_CACHE``). With
    ``HF_HUB_OFFLINE=1`` the snapshot must already be cached; nothing else is used.
    """
    patterns = hub_patterns(resolution, split)
    try:
        import huggingface_hub  # noqa: PLC0415 (optional: huggingface_hub, only for hub snapshots)
    except ImportError:
        raise DataError(
            f"dataset_repo {repo!r} at revision {revision}: hub access is not available in this "
            f"build (the optional package huggingface_hub is not installed: pip install "
            f"'passage_jax[hub]'); or download the snapshot yourself and pass its folder as "
            f"dataset_path") from None
    try:
        path = huggingface_hub.snapshot_download(
            repo_id=repo, repo_type="dataset", revision=revision, cache_dir=cache_dir,
            allow_patterns=patterns)
    except Exception as e:  # network, auth, missing revision: all reported, never replaced
        why = " ".join(str(e).split())
        if _offline(huggingface_hub):
            raise DataError(
                f"dataset_repo {repo!r} at revision {revision}: not available in the local hub "
                f"cache and HF_HUB_OFFLINE is set, so nothing is downloaded ({type(e).__name__}: "
                f"{why})") from e
        raise DataError(f"dataset_repo {repo!r} at revision {revision}: download failed: "
                        f"{type(e).__name__}: {why}") from e
    return check_snapshot(path, repo, revision, resolution, split)


def resolve_dataset_root(dataset_path=None, dataset_repo=None, dataset_revision=None,
                         cache_dir=None, downloader=None, *, resolution=None, split=None) -> Path:
    """The local folder to read scenes from.

    Exactly one of ``dataset_path`` or ``dataset_repo`` must be given. With
    ``dataset_repo`` the revision is checked before ``downloader`` (default
    :func:`hub_download`) is called; given ``resolution`` and/or ``split``, only those
    shards are downloaded (``downloader(repo, revision, cache_dir, resolution=...,
    split=...)``) and the snapshot must hold them. ``dataset_path="shipped"`` names the
    real-terrain cohort shipped inside the package (:func:`shipped_cohort_root`),
    wherever the package is installed; a folder literally named ``shipped`` can be
    given as ``./shipped``.
    """
    if dataset_repo is None and dataset_revision is not None:
        raise DataError("dataset_revision is given without dataset_repo")
    if dataset_path is not None and dataset_repo is not None:
        raise DataError("give either dataset_path or dataset_repo (+ dataset_revision), not both")
    if dataset_repo is not None:
        repo = check_repo(dataset_repo)
        rev = check_revision(dataset_revision)
        resolution, split = _check_selection(resolution, split)
        fetch = downloader or hub_download
        if resolution is None and split is None:
            path = fetch(repo, rev, cache_dir)
        else:
            path = fetch(repo, rev, cache_dir, resolution=resolution, split=split)
        return check_snapshot(path, repo, rev, resolution, split)
    if dataset_path is None:
        raise DataError("no dataset given: set dataset_path, or dataset_repo and dataset_revision")
    return dataset_root(dataset_path)
