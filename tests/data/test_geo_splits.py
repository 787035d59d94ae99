"""The geographic trust axis's two cohorts: a regional hold-out and a matched random split."""
from __future__ import annotations

import pytest

from passage_jax.data import load_scenes
from passage_jax.data.cohort import CohortError, eligible_rasters, make_geo_splits
from passage_jax.data.terrain import RASTERS


def test_holdout_and_matched_random_split(tmp_path):
    keys = eligible_rasters(32)[0]
    held = keys[:2]
    res = make_geo_splits(tmp_path / "geo", 32, 6, held, seed=3)
    assert res["holdout_rasters"] == held and set(res["random_rasters"]) == set(keys) - set(held)
    hold = load_scenes(tmp_path / "geo" / "holdout", 32, "test", n_samples=None)
    rand = load_scenes(tmp_path / "geo" / "matched_random", 32, "test", n_samples=None)
    assert len(hold) == len(rand) == 6
    # every hold-out scene comes from a held-out raster, no random-split scene does
    assert {s.metadata["source"]["raster"] for s in hold} <= set(held)
    assert not {s.metadata["source"]["raster"] for s in rand} & set(held)
    # the same generator: coverage within the same bound, same separation rule
    for s in hold + rand:
        assert s.metadata["obstacles"]["coverage"] <= 0.3
        assert max(abs(s.start[0] - s.goal[0]), abs(s.start[1] - s.goal[1])) >= 32 // 3
    with pytest.raises(CohortError, match="unknown raster"):
        make_geo_splits(tmp_path / "bad", 32, 2, ["atlantis"])
    with pytest.raises(CohortError, match="nothing is left"):
        make_geo_splits(tmp_path / "all", 32, 2, list(RASTERS))


def test_cli_geo_holdout(tmp_path, capsys):
    from cli.__main__ import main

    key = eligible_rasters(32)[0][0]
    assert main(["make-cohort", "--out", str(tmp_path / "g"), "--resolution", "32", "--split",
                 "test", "--n-scenes", "2", "--geo-holdout", key, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "holdout: 2 scenes" in out and "matched_random: 2 scenes" in out
    assert (tmp_path / "g" / "holdout" / "32x32" / "test").is_dir()
