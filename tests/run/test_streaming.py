"""Bounded-memory execution: tasks read in chunks, streamed run files, chunked scoring.

A chunked run and score must equal an unchunked one on the shipped cohort; the task
stream must hand out the same tasks as loading them whole, in any access order, and
refuse data changed under it; the streamed file formats must read back exactly.
"""
from __future__ import annotations

import json
import shutil
import zipfile

import numpy as np
import pytest

from passage_jax.data import DataError, load_tasks, open_tasks, shipped_cohort_root
from passage_jax.fileio import NpzMember, NpzStreamWriter, atomic_file
from passage_jax.protocol.records import PathsReader, PathsWriter, load_paths, route_of, snapshot_route
from passage_jax.run.admission import checks as admission
from passage_jax.run.loop import run_spec
from passage_jax.run.specification.parse import load_spec

ROOT = shipped_cohort_root()


# --------------------------------------------------------------------------- #
# the task stream
# --------------------------------------------------------------------------- #

def _same_task(a, b):
    assert a.id == b.id and a.objective == b.objective and a.variant == b.variant
    assert np.array_equal(a.elevation_m, b.elevation_m)
    assert np.array_equal(a.obstacles, b.obstacles)
    assert np.array_equal(a.route, b.route)
    assert a.scene.start == b.scene.start and a.scene.goal == b.scene.goal


def test_stream_hands_out_the_loaded_tasks_in_any_order():
    whole = load_tasks(ROOT, 64, "test", "energy", "free", n_samples=None)
    seen = []
    stream = open_tasks(ROOT, 64, "test", "energy", "free", n_samples=None, chunk=5,
                        on_chunk=lambda first, ts: seen.append((first, [t.id for t in ts])))
    assert len(stream) == len(whole) == 24
    # the opening read visits every task once, in chunks of 5, in order
    assert [f for f, _ in seen] == [0, 5, 10, 15, 20]
    assert [i for _, ids in seen for i in ids] == [t.id for t in whole]
    for i in (3, 17, 2, 23, 0, 9):  # backwards jumps restart the reader
        _same_task(stream[i], whole[i])
    assert stream.reads >= 3
    for a, b in zip(stream, whole):
        _same_task(a, b)
    assert [t.id for t in stream[4:8]] == [t.id for t in whole[4:8]]
    assert stream.stubs[7].input_sha256 == stream.input_hashes[7]
    assert np.array_equal(stream.stubs[7].route, whole[7].route)
    with pytest.raises(IndexError):
        stream[24]


def test_stream_refuses_a_shard_changed_after_opening(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(ROOT / "64x64", root / "64x64")
    stream = open_tasks(root, 64, "test", "elevation", n_samples=None, chunk=4)
    # the same rows in reverse order: every row still valid, task 0 is another scene
    import pyarrow.parquet as pq

    (shard,) = sorted((root / "64x64" / "test").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), shard)
    with pytest.raises(DataError, match="data changed"):
        stream[0]


# --------------------------------------------------------------------------- #
# streamed files
# --------------------------------------------------------------------------- #

def test_npz_stream_writer_and_member_reads(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 5, size=(101, 2)).astype(np.int32)
    b = rng.normal(size=37)
    p = tmp_path / "x.npz"
    with atomic_file(p) as f, NpzStreamWriter(f) as z:
        z.add("name", np.array("hello"))
        z.add_pieces("a", np.int32, a.shape, [a[:10], a[10:11], a[11:]])
        with z.member("b", np.float64, b.shape) as m:
            for v in b:
                m.write([v])
    with np.load(p, allow_pickle=False) as z:
        assert np.array_equal(z["a"], a) and np.array_equal(z["b"], b) and str(z["name"]) == "hello"
    with zipfile.ZipFile(p) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
    m = NpzMember(p, "a")
    for lo, hi in ((0, 0), (0, 101), (7, 19), (100, 101), (95, 200)):
        assert np.array_equal(m.rows(lo, hi), a[lo:hi])
    with pytest.raises(ValueError, match="exceed"):
        with atomic_file(tmp_path / "y.npz") as f, NpzStreamWriter(f) as z:
            z.add_pieces("a", np.int32, (3, 2), [a[:4]])
    assert not (tmp_path / "y.npz").exists()
    with pytest.raises(ValueError, match="needs"):
        with atomic_file(tmp_path / "z.npz") as f, NpzStreamWriter(f) as z:
            z.add_pieces("a", np.int32, (3, 2), [a[:2]])
    assert not (tmp_path / "z.npz").exists()
    # a compressed npz (older files) still reads, whole
    np.savez_compressed(tmp_path / "c.npz", a=a)
    assert np.array_equal(NpzMember(tmp_path / "c.npz", "a").rows(5, 9), a[5:9])


def test_paths_reader_equals_load_paths(tmp_path):
    rng = np.random.default_rng(1)
    returned = [rng.integers(0, 9, size=(int(rng.integers(0, 6)), 2)) for _ in range(20)]
    returned[3] = None
    returned[5] = np.array([[0.5, 1.0], [2.0, 3.0]])  # float: malformed, kept raw
    returned[8] = np.arange(6).reshape(3, 2, 1)  # wrong shape
    returned[11] = "not a route"
    w = PathsWriter()
    for r in returned:
        w.add(*snapshot_route(r))
    w.write(tmp_path / "paths.npz")
    d = load_paths(tmp_path / "paths.npz")
    rd = PathsReader(tmp_path / "paths.npz")
    want = [route_of(d, i) for i in range(20)]
    got = rd.routes_at([0, 1, 2, 3, 5, 8, 9, 11, 12, 19]) + rd.routes(4, 5)
    for g, i in zip(got, [0, 1, 2, 3, 5, 8, 9, 11, 12, 19, 4]):
        if want[i] is None:
            assert g is None
        else:
            assert g.dtype == want[i].dtype and np.array_equal(g, want[i])
    assert want[5].dtype == np.float64 and np.array_equal(want[5], returned[5])
    assert want[8].shape == (3, 2, 1)


# --------------------------------------------------------------------------- #
# a chunked run and score equal an unchunked one
# --------------------------------------------------------------------------- #

QUALITY = ("reference_qualified", "sample_id", "cluster_id", "repeat_index", "primary_quality",
           "regret", "assd", "h95", "path_iou", "success", "valid_path", "connected_path",
           "obstacle_violation", "obstacle_traversals", "predicted_cost", "oracle_cost", "status",
           "record_index", "task_index", "route_format", "route_length", "malformed",
           "stratum_obstacle_coverage", "stratum_start_goal_distance_px",
           "stratum_reference_length_px", "stratum_relief_m", "route_stage")


def _spec(tmp_path, name):
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"""
method_name: {name}
inference: passage_jax.planners.bfs:make_planner
dataset_path: shipped
resolution: 64
split: test
cost_model: slope_uphill
task_variant: obstacles
n_samples: 24
seeds: [0]
latency_warmup: 0
latency_repeats: 2
""")
    return load_spec(p)


def _npz(path):
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_chunked_run_and_score_equal_unchunked(tmp_path):
    from passage_jax.evaluate.score import score_folder, score_run

    spec = _spec(tmp_path, "bfs_chunks")
    outs = {}
    for chunk in (5, 256):
        admitted = admission.admit(spec, chunk=chunk)
        out = tmp_path / f"run{chunk}"
        run_spec(spec, out, progress=False, admitted=admitted)
        score_run(out, chunk=chunk)
        outs[chunk] = out / "seed-0"
    a, b = (_npz(outs[c] / "per_sample.npz") for c in (5, 256))
    for k in QUALITY:
        assert np.array_equal(a[k], b[k]), k
    ma, mb = (json.loads((outs[c] / "metrics.json").read_text()) for c in (5, 256))
    for k in ("primary", "quality", "quality_by_pass", "status_counts", "status_route_divergence",
              "block_census", "references", "n_tasks", "components"):
        assert ma[k] == mb[k], k
    ra, rb = (_npz(outs[c] / "references.npz") for c in (5, 256))
    for k in ra:
        assert np.array_equal(ra[k], rb[k]), k
    ja = [json.loads(x) for x in (outs[5] / "requests.jsonl").read_text().splitlines()]
    assert len(ja) == 3 * 24 and [r["record"] for r in ja] == list(range(72))  # cold + 2 warm
    # the same run folder scored with another chunk: identical outputs, latency included
    per_before = (outs[5] / "per_sample.npz").read_bytes()
    metrics_before = (outs[5] / "metrics.json").read_text()
    score_folder(outs[5], force=True, chunk=3)
    assert (outs[5] / "per_sample.npz").read_bytes() == per_before
    assert (outs[5] / "metrics.json").read_text() == metrics_before
    # the routes as streamed into paths.npz are those of the journal-free in-memory writer
    d = load_paths(outs[5] / "paths.npz")
    for i, r in enumerate(ja):
        route = route_of(d, i)
        assert (route is None) == (r["route_len"] is None or r["route_format"] != "int")
        if route is not None:
            assert len(route) == r["route_len"]


TIMES = ("latency_ms", "returned_ms", "validation_recost_ms", "overrun_ms")


def test_seeds_on_kept_grids_equal_seeds_on_re_read_shards(tmp_path, monkeypatch):
    """The grids admission keeps (passage_jax.data.grid_store) give every seed the tasks a
    re-read of the shards gives: the same records but their times, the same routes."""
    import passage_jax.run.admission.checks as checks_mod

    spec = _spec(tmp_path, "bfs_kept")
    kept = tmp_path / "kept"
    run_spec(spec, kept, progress=False)
    real = checks_mod.open_tasks
    monkeypatch.setattr(checks_mod, "open_tasks", lambda *a, **k: real(*a, **{**k, "keep_grids": False}))
    reread = tmp_path / "reread"
    run_spec(spec, reread, progress=False)
    ma = json.loads((kept / "seed-0" / "manifest.json").read_text())
    mb = json.loads((reread / "seed-0" / "manifest.json").read_text())
    kept_grids = ma["data"]["kept_grids"]
    assert {k: kept_grids[k] for k in ("scenes", "bytes", "problem")} == {
        "scenes": 24, "bytes": 24 * 21 * 64 * 64, "problem": None}
    assert kept_grids["parts_in_memory"] + kept_grids["parts_on_disk"] == 1  # a chunk of 1,024
    assert mb["data"]["kept_grids"] is None
    ra, rb = ([json.loads(x) for x in (f / "seed-0" / "requests.jsonl").read_text().splitlines()]
              for f in (kept, reread))
    assert len(ra) == len(rb) == 72  # cold + 2 warm passes
    for x, y in zip(ra, rb):
        assert {k: v for k, v in x.items() if k not in TIMES} == {k: v for k, v in y.items()
                                                                  if k not in TIMES}
    pa, pb = (_npz(f / "seed-0" / "paths.npz") for f in (kept, reread))
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    build = json.loads((kept / "seed-0" / "seed_state.json").read_text())["builds"][-1]
    assert build["requests_wall_ms"] >= sum(r["latency_ms"] for r in ra)
