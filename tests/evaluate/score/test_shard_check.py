"""``score`` checks each shard of the run's dataset against the sha256 the run recorded
just before the read opens it (on the reading thread, so hashing overlaps decoding): a
shard that changed is refused by name wherever it lies in the split, no row of it is
decoded first, a missing one is refused before anything is read, and the receipt's
hashes are the recorded ones in the run's order."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from fixtures_data import write_dataset

from passage_jax.data import open_tasks
from passage_jax.data.reader import iter_raw_rows
from passage_jax.evaluate import ScoreError
from passage_jax.evaluate.score._scenes import open_run_tasks
from passage_jax.fileio import sha256_file

N, COUNT, PER_SHARD = 8, 5, 2  # three shards: 2 + 2 + 1 rows


def _run_of(root):
    """A run's manifest and references for the whole split of ``root``, built here from
    the shards' bytes and a read of the tasks (what admission records)."""
    folder = root / f"{N}x{N}" / "test"
    shards = sorted(folder.glob("*.parquet"))
    tasks = list(open_tasks(root, N, "test", "energy", "obstacles", n_samples=None))
    manifest = {"data": {"dataset_root": str(root), "resolution": N, "split": "test", "cost_model": "energy",
                         "task_variant": "obstacles", "n_samples": None,
                         "shards": [{"name": p.name, "sha256": sha256_file(p)} for p in shards],
                         "sample_ids": [t.id for t in tasks]}}
    refs = {"sample_id": [t.id for t in tasks], "input_sha256": [t.input_sha256 for t in tasks],
            "objective": [t.objective for t in tasks], "variant": [t.variant for t in tasks],
            "cost_weight": [float(t.weight) for t in tasks]}
    return shards, manifest, refs


@pytest.fixture
def dataset(tmp_path):
    write_dataset(tmp_path, count=COUNT, resolution=N, rows_per_shard=PER_SHARD)
    return tmp_path


def test_the_hook_sees_each_shard_before_its_rows(dataset):
    seen = []
    for raw in iter_raw_rows(dataset, N, "test", on_shard=lambda p: seen.append(("shard", p.name))):
        seen.append(("row", raw.file.rsplit("/", 1)[-1]))
    names = [p.name for p in sorted((dataset / f"{N}x{N}" / "test").glob("*.parquet"))]
    want = []
    for i, name in enumerate(names):
        want += [("shard", name)] + [("row", name)] * min(PER_SHARD, COUNT - PER_SHARD * i)
    assert seen == want


def test_unchanged_shards_give_the_recorded_hashes_in_order(dataset):
    shards, manifest, refs = _run_of(dataset)
    chunks = []
    tasks, root, hashes = open_run_tasks(manifest, refs, "w", on_chunk=lambda f, ts: chunks.append(f),
                                         chunk=2, check="hash")
    assert list(hashes.items()) == [(p.name, sha256_file(p)) for p in shards]
    assert chunks == [0, 2, 4] and tasks.ids == manifest["data"]["sample_ids"]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_changed_shard_is_refused_before_its_rows_are_used(dataset, which):
    shards, manifest, refs = _run_of(dataset)
    pq.write_table(pq.read_table(shards[which]), shards[which], compression="gzip")  # same rows
    chunks = []
    with pytest.raises(ScoreError, match=rf"w: shard .*{shards[which].name}: sha256 .* differs from "
                                         r"the .* recorded by the run; the data changed"):
        open_run_tasks(manifest, refs, "w", on_chunk=lambda f, ts: chunks.append((f, len(ts))),
                       chunk=1, check="hash")
    # no scene of the changed shard (or after it) reached the scorer
    assert sum(n for _f, n in chunks) <= PER_SHARD * which


def test_a_missing_shard_is_refused_before_anything_is_read(dataset):
    shards, manifest, refs = _run_of(dataset)
    shards[2].unlink()
    chunks = []
    with pytest.raises(ScoreError, match=rf"w: shard .*{shards[2].name} is missing"):
        open_run_tasks(manifest, refs, "w", on_chunk=lambda f, ts: chunks.append(f), chunk=1)
    assert chunks == []


def test_chosen_run_tasks_decode_only_those_and_check_them_against_the_run(dataset, monkeypatch):
    """A figure's few tasks: the run's tasks at the given indices, equal to the streamed
    ones, only their rows decoded, each refused by name when it is not the recorded one."""
    from passage_jax.data import reader
    from passage_jax.evaluate.score import chosen_run_tasks

    _, manifest, refs = _run_of(dataset)
    streamed = list(open_tasks(dataset, N, "test", "energy", "obstacles", n_samples=None))
    decoded = []
    real = reader._validate_raw
    monkeypatch.setattr(reader, "_validate_raw",
                        lambda raw, *a, **k: decoded.append(raw.row) or real(raw, *a, **k))
    got = chosen_run_tasks(manifest, refs, [4, 1], "w")
    assert sorted(got) == [1, 4] and len(decoded) == 2
    for i, t in got.items():
        s = streamed[i]
        assert (t.id, t.input_sha256, t.objective, t.variant) == (s.id, s.input_sha256, s.objective,
                                                                  s.variant)
        assert (t.elevation_m == s.elevation_m).all() and (t.obstacles == s.obstacles).all()
    assert chosen_run_tasks(manifest, refs, [], "w") == {}
    other = dict(refs, input_sha256=list(refs["input_sha256"]))
    other["input_sha256"][1] = "0" * 64
    with pytest.raises(ScoreError, match=rf"w: .*scene {refs['sample_id'][1]} is not the run's task 1"):
        chosen_run_tasks(manifest, other, [1], "w")
    with pytest.raises(ScoreError, match=r"task 5 asked for; the run has 5"):
        chosen_run_tasks(manifest, refs, [5], "w")
