"""The reads `score` makes cheaper, checked against the full read and plain NumPy/hashlib:
scenes without their released routes (shards whose rows declare their markers), the
stratifiers measured on the reading thread, and the input hash over the arrays' own
buffers."""
from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from fixtures_data import make_rows, mutated, write_rows

from passage_jax.data import DataError, iter_scenes, open_tasks
from passage_jax.data.strata import SCENE_STRATIFIERS, scene_strata
from passage_jax.data.validate import declares_markers, validate_row
from passage_jax.data.writer import rows_to_table
from passage_jax.evaluate.score._kernel import SceneStrata, task_strata
from passage_jax.fileio import array_sha256


def _same_scene(a, b):
    assert (a.id, a.file, a.row, a.start, a.goal) == (b.id, b.file, b.row, b.start, b.goal)
    np.testing.assert_array_equal(a.elevation_m, b.elevation_m)
    np.testing.assert_array_equal(a.obstacles, b.obstacles)
    assert a.metadata == b.metadata


@pytest.mark.parametrize("flipped", [False, True])
def test_read_without_routes_equals_full_read_but_routes(tmp_path, flipped):
    write_rows(tmp_path, make_rows(7, n=8, flipped=flipped), 8, "test", rows_per_shard=3)
    full = list(iter_scenes(tmp_path, 8, "test", None, workers=0))
    lean = list(iter_scenes(tmp_path, 8, "test", None, workers=0, released_routes=False))
    assert len(full) == len(lean) == 7
    for a, b in zip(full, lean):
        _same_scene(a, b)
        assert len(a.routes) == 6 and b.routes == {}


def test_shard_without_declared_markers_is_read_in_full(tmp_path):
    # the first shard's rows declare no markers: their convention comes from the routes
    rows = make_rows(3, n=8, markers_key=False, flipped=True) + make_rows(3, 3, n=8, flipped=True)
    write_rows(tmp_path, rows, 8, "test", rows_per_shard=3)
    lean = list(iter_scenes(tmp_path, 8, "test", None, workers=0, released_routes=False))
    full = list(iter_scenes(tmp_path, 8, "test", None, workers=0))
    assert [len(s.routes) for s in lean] == [6, 6, 6, 0, 0, 0]
    for a, b in zip(full, lean):
        _same_scene(a, b)
    assert lean[0].metadata["markers"] == {"start": -1, "goal": 1}  # from the routes


def test_lean_read_still_checks_the_grids(tmp_path):
    bad = mutated(make_rows(1, n=8)[0])
    t = bad["tensor"].copy()
    t[2, 3, 2] = 0.5  # an obstacle value other than 0 or 1
    bad["tensor"] = t
    write_rows(tmp_path, [bad], 8, "test")
    with pytest.raises(DataError, match="obstacle channel must be 0 or 1"):
        list(iter_scenes(tmp_path, 8, "test", None, workers=0, released_routes=False))


def test_validate_row_without_routes_needs_declared_markers():
    raw = rows_to_table(make_rows(1, n=8, markers_key=False)).to_pylist()[0]
    raw = {k: v for k, v in raw.items() if k in ("id", "tensor", "metadata")}
    with pytest.raises(DataError, match="declares no markers"):
        validate_row(raw, 8, "test", "f.parquet", 0, released_routes=False)


@pytest.mark.parametrize("text,want", [('{"markers": {"start": 1, "goal": -1}}', True),
                                       ('{"index": 1, "x": {"markers": 1}}', False),
                                       ("[1, 2]", False), ("not json", False), (None, False)])
def test_declares_markers(text, want):
    assert declares_markers(text) is want


def test_open_tasks_lean_gives_tasks_without_route_and_same_hashes(tmp_path):
    write_rows(tmp_path, make_rows(5, n=8), 8, "test", rows_per_shard=2)
    seen = {}
    lean = open_tasks(tmp_path, 8, "test", "elevation", chunk=2, released_routes=False,
                      on_read=lambda i, t: seen.setdefault(i, t.id))
    full = open_tasks(tmp_path, 8, "test", "elevation", chunk=2)
    assert lean.ids == full.ids and lean.input_hashes == full.input_hashes
    assert seen == dict(enumerate(full.ids))  # each task once, in order, on the reading thread
    assert all(t.route is None for t in lean) and all(t.route is not None for t in full)


def _strata_numpy(task):
    """The stratifiers as written before they moved to the reading thread."""
    exps = (task.scene.metadata.get("obstacles") or {}).get("superellipse_exponents")
    exp = (math.nan if task.variant == "free" or not isinstance(exps, list) or not exps
           else float(np.mean(exps)))
    (r0, c0), (r1, c1) = task.scene.start, task.scene.goal
    return (float(np.mean(np.asarray(task.obstacles, bool))), math.hypot(r1 - r0, c1 - c0),
            float(np.ptp(task.elevation_m)), float(np.median(task.elevation_m)), exp)


def test_scene_strata_equal_the_numpy_formulas(tmp_path):
    rows = make_rows(6, n=8)
    rows[2]["metadata"]["obstacles"]["superellipse_exponents"] = [2.0, 3.5]
    write_rows(tmp_path, rows, 8, "test")
    tasks = list(open_tasks(tmp_path, 8, "test", "elevation", chunk=3))
    for t in tasks:
        got, want = scene_strata(t), _strata_numpy(t)
        assert np.array_equal(np.array(got), np.array(want), equal_nan=True)  # bit for bit
    assert scene_strata(tasks[2])[-1] == 2.75
    table = SceneStrata(range(2, 6))
    for i, t in enumerate(tasks):
        table.measure(i, t)  # tasks 0 and 1 are another process's: not measured
    refs = [t.route for t in tasks]
    pre = task_strata(tasks[2:5], refs[2:5], table.of(range(2, 5)))
    here = task_strata(tasks[2:5], refs[2:5])
    for k in here:
        np.testing.assert_array_equal(pre[k], here[k])
    assert set(SCENE_STRATIFIERS) < set(here)


@pytest.mark.parametrize("a", [np.arange(35.0).reshape(5, 7), np.arange(48.0).reshape(8, 6)[:, ::2],
                               np.array(3.0), np.zeros((0, 2), np.int32), np.array(["ab", "c"], "U32"),
                               np.array([True, False]), np.asfortranarray(np.ones((3, 4)))])
def test_array_sha256_hashes_the_bytes_tobytes_gives(a):
    c = np.ascontiguousarray(a)
    want = hashlib.sha256(f"{c.dtype.str}{c.shape}".encode() + c.tobytes()).hexdigest()
    assert array_sha256(a) == want


def _unscored_copy(src, dest):
    import shutil  # noqa: PLC0415

    shutil.copytree(src, dest)
    for seed in dest.glob("seed-*"):
        for name in ("score_receipt.json", "metrics.json", "per_sample.npz"):
            (seed / name).unlink()
    return dest


def test_seeds_of_a_run_are_scored_from_one_read_and_equal_alone(tmp_path, monkeypatch):
    """score_run reads the scenes once for the seeds that share their tasks; every output
    equals the seed scored on its own (score_folder), byte for byte."""
    from score_support import runs  # noqa: PLC0415

    import passage_jax.evaluate.score._pipeline as score  # noqa: PLC0415

    src = runs()["exact"]
    together = _unscored_copy(src, tmp_path / "together")
    alone = _unscored_copy(src, tmp_path / "alone")
    reads = []
    real = score.open_run_tasks
    monkeypatch.setattr(score, "open_run_tasks", lambda *a, **k: reads.append(a[2]) or real(*a, **k))
    seeds = sorted(p.name for p in together.glob("seed-*"))
    assert len(seeds) == 2
    score.score_run(together)
    assert len(reads) == 1  # one read for both seeds
    for s in seeds:
        score.score_folder(alone / s)
    assert len(reads) == 3
    for s in seeds:
        for name in ("per_sample.npz", "metrics.json"):
            assert (together / s / name).read_bytes() == (alone / s / name).read_bytes(), (s, name)
        receipt = json.loads((together / s / "score_receipt.json").read_text())
        assert receipt["outputs"] == json.loads((alone / s / "score_receipt.json").read_text())["outputs"]


def test_a_stream_rereads_without_the_route_columns_and_keeps_the_released_route(tmp_path):
    """A pass over an opened stream re-reads the grids only: each task's released route is
    the opening read's (the stub's array itself), equal to a plain full read's."""
    write_rows(tmp_path, make_rows(5, n=8), 8, "test", rows_per_shard=2)
    stream = open_tasks(tmp_path, 8, "test", "elevation", chunk=2)
    full = list(iter_scenes(tmp_path, 8, "test", None, workers=0))
    for i, task in enumerate(stream):
        assert task.route is stream.stubs[i].route  # not decoded again
        np.testing.assert_array_equal(task.route, full[i].routes[("elevation", "obstacles")])
        assert list(task.scene.routes) == [("elevation", "obstacles")]  # this task's only


def test_admission_records_the_strata_and_score_uses_them(tmp_path, monkeypatch):
    """references.npz keeps the scene stratifiers admission measured (equal to the plain
    NumPy formulas on the reloaded tasks); score takes them (measuring nothing), and a run
    without them (written before) is measured on the read, to the same bytes."""
    import dataclasses  # noqa: PLC0415

    from score_support import runs  # noqa: PLC0415

    import passage_jax.evaluate.score._kernel as score_kernel  # noqa: PLC0415
    import passage_jax.evaluate.score._pipeline as score  # noqa: PLC0415
    import passage_jax.evaluate.score._records as score_records  # noqa: PLC0415
    from passage_jax.evaluate.score._folder import load_npz  # noqa: PLC0415
    from passage_jax.evaluate.score._scenes import reload_tasks  # noqa: PLC0415

    src = runs()["exact"]
    seed = sorted(p.name for p in src.glob("seed-*"))[0]
    z = np.load(src / seed / "references.npz")
    assert list(z["scene_strata_fields"]) == list(SCENE_STRATIFIERS)
    refs = score_records.References.of_arrays(load_npz(src / seed / "references.npz"),
                                              src / seed / "references.npz")
    manifest = json.loads((src / seed / "manifest.json").read_text())
    tasks, _, _ = reload_tasks(manifest, refs, "test")
    want = np.array([_strata_numpy(t) for t in tasks])
    assert np.array_equal(z["scene_strata"], want, equal_nan=True)

    recorded = _unscored_copy(src, tmp_path / "recorded")

    def no_measuring(task):
        raise AssertionError("a stratifier was measured although the run recorded them")

    monkeypatch.setattr(score_kernel, "scene_strata", no_measuring)
    score.score_folder(recorded / seed)
    monkeypatch.undo()

    measured = _unscored_copy(src, tmp_path / "measured")
    of_arrays = score_records.References.of_arrays
    monkeypatch.setattr(score_records.References, "of_arrays",
                        classmethod(lambda cls, ref, p: dataclasses.replace(of_arrays(ref, p),
                                                                            scene_strata=None)))
    calls = []
    real = score_kernel.scene_strata
    monkeypatch.setattr(score_kernel, "scene_strata", lambda t: calls.append(1) or real(t))
    score.score_folder(measured / seed)
    assert len(calls) == len(tasks)
    for name in ("per_sample.npz", "metrics.json"):
        assert (recorded / seed / name).read_bytes() == (measured / seed / name).read_bytes(), name


def test_recorded_strata_of_another_shape_or_names_are_refused(tmp_path):
    from passage_jax.evaluate.score._format import ScoreError  # noqa: PLC0415
    from passage_jax.evaluate.score._records import _recorded_strata  # noqa: PLC0415

    good = {"scene_strata": np.zeros((3, 5)), "scene_strata_fields": np.array(SCENE_STRATIFIERS)}
    assert _recorded_strata(good, 3, "r.npz").shape == (3, 5)
    assert _recorded_strata({}, 3, "r.npz") is None
    with pytest.raises(ScoreError, match=r"r\.npz: scene_strata has shape \(3, 5\).*not \(4, 5\)"):
        _recorded_strata(good, 4, "r.npz")
    with pytest.raises(ScoreError, match="r.npz: scene_strata_fields"):
        _recorded_strata({**good, "scene_strata_fields": np.array(SCENE_STRATIFIERS[::-1])}, 3, "r.npz")
