"""How ``score`` vouches for the scenes it reloads: by provenance where the run was admitted
by this evaluator (its source hash and decoding packages), each task's input hash computed
and compared otherwise or when asked (``check="hash"``, ``score --hash-inputs``); the same
outputs either way, and the receipt says which check was made."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fixtures_data import make_rows, write_rows

from passage_jax.data import DataError, open_tasks
from passage_jax.evaluate import ScoreError
from passage_jax.evaluate.score._scenes import DECODE_PACKAGES, input_check
from passage_jax.protocol.records import code_hash, package_versions


def _unscored(src, dest):
    shutil.copytree(src, dest)
    for seed in dest.glob("seed-*"):
        for name in ("score_receipt.json", "metrics.json", "per_sample.npz"):
            (seed / name).unlink()
    return dest


def _manifest(**change) -> dict:
    m = {"code": code_hash(), "versions": package_versions()}
    m.update(change)
    return m


def test_the_check_follows_the_runs_provenance():
    here = package_versions()
    assert input_check(_manifest()) == "provenance"
    assert input_check(_manifest(), "hash") == "hash"
    assert input_check(_manifest(), "provenance") == "provenance"
    other_code = _manifest(code={**code_hash(), "sha256": "0" * 64})
    assert input_check(other_code) == "hash"
    for pkg in DECODE_PACKAGES:
        assert input_check(_manifest(versions={**here, pkg: "0.0.1"})) == "hash", pkg
    # a package that does not decode the scenes does not matter
    assert input_check(_manifest(versions={**here, "rich": "0.0.1"})) == "provenance"
    assert input_check({"versions": here}) == "hash"  # no code recorded
    assert input_check({"code": code_hash()}) == "hash"  # no versions recorded
    with pytest.raises(ScoreError, match="provenance input check needs"):
        input_check(other_code, "provenance")
    with pytest.raises(ValueError, match="input check must be one of"):
        input_check(_manifest(), "none")


def test_default_score_hashes_nothing_and_equals_the_hashing_score(tmp_path, monkeypatch):
    """A run admitted by this code: the default score computes no input hash and writes
    the same per_sample.npz and metrics.json bytes as one that hashes every task (the
    receipts say which); a run recorded by other code is hashed by default."""
    from score_support import runs  # noqa: PLC0415

    import passage_jax.data.scene as scene  # noqa: PLC0415
    import passage_jax.evaluate.score as score  # noqa: PLC0415
    import passage_jax.evaluate.score._scenes as run_scenes  # noqa: PLC0415

    src = runs()["exact"]
    seeds = sorted(p.name for p in src.glob("seed-*"))
    n_tasks = len(json.loads((src / seeds[0] / "manifest.json").read_text())["data"]["sample_ids"])
    calls = []
    real = scene.planner_input_sha256
    monkeypatch.setattr(scene, "planner_input_sha256", lambda *a: calls.append(1) or real(*a))

    default = _unscored(src, tmp_path / "default")
    score.score_run(default)
    assert calls == []
    hashed = _unscored(src, tmp_path / "hashed")
    score.score_run(hashed, check="hash")
    assert len(calls) == n_tasks  # each task once, for both seeds
    for s in seeds:
        for name in ("per_sample.npz", "metrics.json"):
            assert (default / s / name).read_bytes() == (hashed / s / name).read_bytes(), (s, name)
        got = {d: json.loads((f / s / "score_receipt.json").read_text())["input_check"]
               for d, f in (("default", default), ("hashed", hashed))}
        assert got == {"default": "provenance", "hashed": "hash"}

    calls.clear()
    monkeypatch.setattr(run_scenes, "code_hash", lambda: {"sha256": "f" * 64})
    foreign = _unscored(src, tmp_path / "foreign")
    score.score_run(foreign)
    assert len(calls) == n_tasks
    for s in seeds:
        assert json.loads((foreign / s / "score_receipt.json").read_text())["input_check"] == "hash"


def test_a_changed_shard_is_refused_under_either_check(tmp_path):
    """The shards' sha256 are checked whatever the input check: a shard whose bytes changed
    since the run stops the score by name."""
    from score_support import runs  # noqa: PLC0415

    import passage_jax.evaluate.score as score  # noqa: PLC0415

    src = runs()["exact"]
    seed = sorted(src.glob("seed-*"))[0]
    manifest = json.loads((seed / "manifest.json").read_text())
    shard_dir = runs()["cohort"] / "64x64" / "test"
    shard = shard_dir / manifest["data"]["shards"][0]["name"]
    copy = tmp_path / "cohort" / "64x64" / "test"
    shutil.copytree(shard_dir, copy)
    (copy / shard.name).write_bytes(shard.read_bytes() + b"\0")
    for check in (None, "hash"):
        run = _unscored(src, tmp_path / f"run-{check}")
        with pytest.raises(ScoreError, match=rf"{shard.name}.*sha256"):
            score.score_run(run, dataset_path=tmp_path / "cohort", check=check)


def test_a_stream_opened_without_hashes_is_read_once_only(tmp_path):
    write_rows(tmp_path, make_rows(4, n=8), 8, "test", rows_per_shard=2)
    seen = []
    stream = open_tasks(tmp_path, 8, "test", "elevation", chunk=2, hash_inputs=False,
                        on_chunk=lambda first, tasks: seen.extend(t.id for t in tasks))
    assert seen == stream.ids and len(seen) == 4
    assert all(s.input_sha256 is None for s in stream.stubs)
    with pytest.raises(DataError, match="opened without their input hashes"):
        list(stream)
    with pytest.raises(DataError, match="opened without their input hashes"):
        stream.input_hashes  # noqa: B018
    hashed = open_tasks(tmp_path, 8, "test", "elevation", chunk=2)
    assert [t.input_sha256 for t in hashed] == hashed.input_hashes
    assert len(set(hashed.input_hashes)) == 4 and all(len(h) == 64 for h in hashed.input_hashes)
    np.testing.assert_array_equal(hashed[0].elevation_m, next(iter(hashed)).elevation_m)
