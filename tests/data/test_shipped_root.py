"""``shipped`` names the cohort inside the package wherever it is installed."""
from __future__ import annotations

import os

import pytest

from passage_jax.data import DataError, load_scenes, resolve_dataset_root, shipped_cohort_root


def test_shipped_names_the_packaged_cohort(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # far from the repository
    root = resolve_dataset_root(dataset_path="shipped")
    assert root == shipped_cohort_root() and (root / "64x64" / "test").is_dir()
    a = load_scenes("shipped", 64, "test", n_samples=2)
    b = load_scenes(shipped_cohort_root(), 64, "test", n_samples=2)
    assert [s.id for s in a] == [s.id for s in b]
    assert all((x.elevation_m == y.elevation_m).all() for x, y in zip(a, b))


def test_a_local_folder_named_shipped_needs_a_path_prefix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        resolve_dataset_root(dataset_path=os.path.join(".", "shipped"))
