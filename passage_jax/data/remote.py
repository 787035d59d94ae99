"""Choosing the dataset root: a local folder, or a pinned hub snapshot (SPEC §1).

A hub snapshot is selected by ``dataset_repo`` (``owner/name``) and
``dataset_revision``, which must be exactly 40 hexadecimal characters (a full
commit hash). Branch names, tags, short hashes and anything else are refused
*before* any download is attempted. A local root that does not exist is an
error, never a reason to fall back to the hub or to synthetic data.
"""
from __future__ import annotations

import re
from pathlib import Path

from passage_jax.data.reader import dataset_root
from passage_jax.data.validate import DataError

__all__ = ["check_revision", "check_repo", "hub_download", "resolve_dataset_root"]

_REVISION_RE = re.compile(r"[0-9a-fA-F]{40}")
_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def check_revision(revision) -> str:
    """The revision if it is exactly 40 hex characters; DataError otherwise."""
    if not isinstance(revision, str) or not _REVISION_RE.fullmatch(revision):
        raise DataError(
            f"dataset_revision must be a full commit hash of exactly 40 hexadecimal characters, "
            f"got {revision!r}; branch names, tags and short hashes are refused")
    return revision.lower()


def check_repo(repo) -> str:
    if not isinstance(repo, str) or not _REPO_RE.fullmatch(repo):
        raise DataError(f"dataset_repo must look like 'owner/name', got {repo!r}")
    return repo


def hub_download(repo: str, revision: str, cache_dir=None) -> Path:
    """Download a dataset snapshot; only called with a checked repo and revision."""
    try:
        import huggingface_hub  # noqa: PLC0415 (optional: huggingface_hub, only for hub snapshots)
    except ImportError:
        raise DataError(
            f"dataset_repo {repo!r} at revision {revision}: hub access is not available in this "
            f"build (the optional package huggingface_hub is not installed); download the "
            f"snapshot yourself and pass its folder as dataset_path") from None
    try:
        path = huggingface_hub.snapshot_download(
            repo_id=repo, repo_type="dataset", revision=revision, cache_dir=cache_dir)
    except Exception as e:  # network, auth, missing revision: all reported, never replaced
        raise DataError(f"dataset_repo {repo!r} at revision {revision}: download failed: {e}") from e
    return Path(path)


def resolve_dataset_root(dataset_path=None, dataset_repo=None, dataset_revision=None,
                         cache_dir=None, downloader=None) -> Path:
    """The local folder to read scenes from.

    Exactly one of ``dataset_path`` or ``dataset_repo`` must be given. With
    ``dataset_repo`` the revision is checked before ``downloader`` (default
    :func:`hub_download`) is called. ``dataset_path="shipped"`` names the real-terrain
    cohort shipped inside the package (:func:`shipped_cohort_root`), wherever the
    package is installed; a folder literally named ``shipped`` can be given as
    ``./shipped``.
    """
    if dataset_repo is None and dataset_revision is not None:
        raise DataError("dataset_revision is given without dataset_repo")
    if dataset_path is not None and dataset_repo is not None:
        raise DataError("give either dataset_path or dataset_repo (+ dataset_revision), not both")
    if dataset_repo is not None:
        repo = check_repo(dataset_repo)
        rev = check_revision(dataset_revision)
        return Path((downloader or hub_download)(repo, rev, cache_dir))
    if dataset_path is None:
        raise DataError("no dataset given: set dataset_path, or dataset_repo and dataset_revision")
    return dataset_root(dataset_path)
