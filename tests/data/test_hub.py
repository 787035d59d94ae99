"""Hub snapshots, offline: a Hugging Face cache laid out on disk exactly as huggingface_hub
lays it out (``datasets--owner--name/{blobs,refs,snapshots/<rev>/...}``, blobs named by
their SHA-256, snapshot entries relative symlinks to them) holding the shipped cohort's
64x64 test shards, read with HF_HUB_OFFLINE set."""
from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest

from passage_jax.data import DataError, load_tasks, resolve_dataset_root, shipped_cohort_root
from passage_jax.data.remote import hub_download, hub_patterns

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants  # noqa: E402
from huggingface_hub.file_download import repo_folder_name  # noqa: E402

REPO = "passage-test/passage-cohort"
REV = "0123456789abcdef0123456789abcdef01234567"
OTHER_REV = "fedcba9876543210fedcba9876543210fedcba98"


def build_cache(cache, repo=REPO, rev=REV, folders=("64x64/test",)):
    """The hub cache of ``repo`` at ``rev`` holding ``folders`` of the shipped cohort."""
    storage = cache / f"datasets--{repo.replace('/', '--')}"
    assert storage.name == repo_folder_name(repo_id=repo, repo_type="dataset")  # hub's own naming
    (storage / "blobs").mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(rev)  # no trailing newline, as the hub writes it
    snapshot = storage / "snapshots" / rev
    files = []
    for folder in folders:
        for src in sorted((shipped_cohort_root() / folder).glob("*.parquet")):
            blob = storage / "blobs" / hashlib.sha256(src.read_bytes()).hexdigest()
            shutil.copyfile(src, blob)
            link = snapshot / folder / src.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
            files.append(f"{folder}/{src.name}")
    return storage, snapshot, files


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # read once at import


def test_cached_revision_resolves_to_its_snapshot_and_reads_like_the_shipped_cohort(tmp_path, offline):
    _, snapshot, files = build_cache(tmp_path)
    assert files and all(os.path.islink(snapshot / f) for f in files)
    root = resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, cache_dir=tmp_path,
                                resolution=64, split="test")
    assert root.resolve() == snapshot.resolve()
    got = load_tasks(root, 64, "test", "elevation")
    want = load_tasks(shipped_cohort_root(), 64, "test", "elevation")
    assert len(got) == len(want) == 24
    assert [t.id for t in got] == [t.id for t in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.elevation_m, b.elevation_m)
        np.testing.assert_array_equal(a.obstacles, b.obstacles)
        np.testing.assert_array_equal(a.route, b.route)


def test_whole_snapshot_without_selection(tmp_path, offline):
    _, snapshot, _ = build_cache(tmp_path)
    root = resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV.upper(), cache_dir=tmp_path)
    assert root.resolve() == snapshot.resolve()


def test_revision_not_in_the_cache_is_refused_offline(tmp_path, offline):
    build_cache(tmp_path)
    with pytest.raises(DataError) as e:
        resolve_dataset_root(dataset_repo=REPO, dataset_revision=OTHER_REV, cache_dir=tmp_path,
                             resolution=64, split="test")
    msg = str(e.value)
    assert OTHER_REV in msg and REPO in msg and "HF_HUB_OFFLINE" in msg
    with pytest.raises(DataError, match=f"{REPO}.*{OTHER_REV}"):  # no selection: same rule
        hub_download(REPO, OTHER_REV, tmp_path)
    other_repo = "passage-test/absent"
    with pytest.raises(DataError, match=f"{other_repo}.*{REV}"):
        hub_download(other_repo, REV, tmp_path, resolution=64, split="test")


def test_cached_snapshot_without_the_requested_split_is_refused(tmp_path, offline):
    build_cache(tmp_path)  # holds 64x64/test only
    for resolution, split, missing in [(128, "test", "128x128/test/*.parquet"),
                                       (64, "val", "64x64/validation/*.parquet")]:
        with pytest.raises(DataError) as e:
            resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, cache_dir=tmp_path,
                                 resolution=resolution, split=split)
        assert REPO in str(e.value) and REV in str(e.value) and missing in str(e.value)


def test_allow_patterns_name_only_the_requested_split(tmp_path, monkeypatch):
    """A recording snapshot_download sees exactly the arguments of a restricted download."""
    _, snapshot, _ = build_cache(tmp_path)
    calls = []

    def record(**kwargs):
        calls.append(kwargs)
        return str(snapshot)

    monkeypatch.setattr(hf, "snapshot_download", record)
    root = resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, resolution=64, split="test")
    assert root == snapshot
    assert calls == [{"repo_id": REPO, "repo_type": "dataset", "revision": REV, "cache_dir": None,
                      "allow_patterns": ["64x64/test/*.parquet"]}]
    calls.clear()
    resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, cache_dir=tmp_path)
    assert calls[0]["allow_patterns"] is None and calls[0]["cache_dir"] == tmp_path  # whole snapshot
    # the patterns select the split's shards and nothing else of a full release layout
    from huggingface_hub.utils import filter_repo_objects
    layout = ["README.md", "manifest.json", "64x64/test/part-00000.parquet",
              "64x64/test/part-00001.parquet", "64x64/validation/part-00000.parquet",
              "128x128/test/part-00000.parquet", "64x64/train/part-00000.parquet"]
    assert list(filter_repo_objects(layout, allow_patterns=hub_patterns(64, "test"))) == [
        "64x64/test/part-00000.parquet", "64x64/test/part-00001.parquet"]
    assert list(filter_repo_objects(layout, allow_patterns=hub_patterns(64, "val"))) == [
        "64x64/validation/part-00000.parquet"]


def test_selection_is_checked_before_any_download(monkeypatch):
    calls = []
    monkeypatch.setattr(hf, "snapshot_download", lambda **kw: calls.append(kw))
    with pytest.raises(DataError, match="resolution"):
        resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, resolution=0, split="test")
    with pytest.raises(DataError, match="unknown split"):
        resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, resolution=64, split="tset")
    assert calls == []


def test_custom_downloader_receives_the_selection_and_is_verified(tmp_path):
    calls = []

    def fake(repo, revision, cache_dir, *, resolution, split):
        calls.append((repo, revision, cache_dir, resolution, split))
        return tmp_path  # empty: must be refused

    with pytest.raises(DataError, match="holds no 64x64/calibration"):
        resolve_dataset_root(dataset_repo=REPO, dataset_revision=REV, downloader=fake,
                             resolution=64, split="calib")
    assert calls == [(REPO, REV, None, 64, "calibration")]
