"""One test per validation defect (docs/contract.md §1): each must raise DataError naming the
file, the row and the scene id."""
from __future__ import annotations

import re

import numpy as np
import pytest
import zstandard
from fixtures_data import make_row, make_rows, mutated, write_dataset, write_rows

from passage_jax.data import DataError, load_scenes, load_tasks, validate_row
from passage_jax.data.codec import encode_tensor
from passage_jax.data.remote import check_revision, resolve_dataset_root
from passage_jax.data.writer import rows_to_table

N = 8


def _write_with_bad(tmp_path, bad_row, position=2, count=4):
    """Write ``count`` rows in shards of 2 with ``bad_row`` at ``position``; return its file."""
    rows = make_rows(count)
    rows[position] = bad_row
    paths = write_rows(tmp_path, rows, rows_per_shard=2)
    return paths[position // 2], position % 2, bad_row["id"]


def _expect(tmp_path, bad_row, pattern, position=2):
    path, row, sid = _write_with_bad(tmp_path, bad_row, position)
    with pytest.raises(DataError) as ei:
        load_scenes(tmp_path, N, "test", n_samples=None)
    msg = str(ei.value)
    assert path.name in msg and f"row {row} " in msg and f"scene {sid}" in msg, msg
    assert re.search(pattern, msg), msg
    return msg


def test_valid_fixture_loads(tmp_path):
    write_dataset(tmp_path, count=4)
    scenes = load_scenes(tmp_path, N, "test", n_samples=None)
    assert [s.id for s in scenes] == [f"{i:010d}" for i in range(4)]


def test_truncated_tensor(tmp_path):
    r = mutated(make_row(2))
    blob = encode_tensor(r["tensor"])
    r["tensor"] = blob[: len(blob) // 2]
    _expect(tmp_path, r, r"tensor (decompresses to \d+ bytes|frame does not decompress)")


def test_tensor_with_too_few_bytes(tmp_path):
    r = mutated(make_row(2))
    raw = np.ascontiguousarray(r["tensor"], "<f4").tobytes()[:-4]
    r["tensor"] = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    _expect(tmp_path, r, r"tensor decompresses to \d+ bytes")


def test_oversized_tensor_declared(tmp_path):
    r = mutated(make_row(2))
    r["tensor"] = encode_tensor(np.zeros((N + 1, N + 1, 3), np.float32))
    _expect(tmp_path, r, r"declares \d+ bytes")


def test_oversized_tensor_undeclared(tmp_path):
    r = mutated(make_row(2))
    raw = np.zeros((N + 4, N + 4, 3), "<f4").tobytes()
    r["tensor"] = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    _expect(tmp_path, r, r"more than")


def test_nan_elevation(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][3, 4, 0] = np.nan
    _expect(tmp_path, r, r"non-finite.*\(row 3, col 4, channel 0\)")


@pytest.mark.parametrize("value", [1.5, -0.01])
def test_elevation_out_of_unit_interval(tmp_path, value):
    r = mutated(make_row(2))
    r["tensor"][2, 5, 0] = value
    _expect(tmp_path, r, r"\[0, 1\].*\(2, 5\)")


def test_obstacle_value_not_binary(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][4, 5, 2] = 0.5
    _expect(tmp_path, r, r"obstacle channel")


def test_missing_start_marker(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][1, 1, 1] = 0.0
    _expect(tmp_path, r, r"marker \+1 is missing")


def test_duplicated_goal_marker(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][3, 5, 1] = -1.0
    _expect(tmp_path, r, r"marker -1 is marked 2 times")


def test_marker_value_not_allowed(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][3, 5, 1] = 0.5
    _expect(tmp_path, r, r"only 0, \+1, -1")


def test_marker_on_obstacle(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][N - 2, N - 2, 2] = 1.0
    _expect(tmp_path, r, r"goal marker at \(6, 6\) lies on an obstacle")


def test_route_through_obstacle(tmp_path):
    r = mutated(make_row(2))
    r["tensor"][3, 3, 2] = 1.0  # on the diagonal obstacles routes
    _expect(tmp_path, r, r"path_astar_elevation_obstacles: cell 2 \(3, 3\) is an obstacle")


def test_free_route_may_cross_obstacles(tmp_path):
    # the *_free routes cross the obstacle at (1, N-2) by construction
    write_dataset(tmp_path, count=1)
    s = load_scenes(tmp_path, N, "test")[0]
    fr = s.routes[("energy", "free")]
    assert s.obstacles[fr[:, 0], fr[:, 1]].any()


def test_route_with_gap(tmp_path):
    r = mutated(make_row(2))
    route = r["routes"][("slope_uphill", "obstacles")]
    r["routes"][("slope_uphill", "obstacles")] = np.delete(route, 2, axis=0)
    _expect(tmp_path, r, r"path_astar_slope_obstacles: step 1 .*gap")


def test_route_with_repeated_cell(tmp_path):
    r = mutated(make_row(2))
    route = r["routes"][("energy", "free")]
    r["routes"][("energy", "free")] = np.insert(route, 3, route[3], axis=0)
    _expect(tmp_path, r, r"path_astar_energy_free: cell 4 .* repeats the previous cell")


def test_route_not_ending_at_goal(tmp_path):
    r = mutated(make_row(2))
    r["routes"][("elevation", "free")] = r["routes"][("elevation", "free")][:-1]
    _expect(tmp_path, r, r"path_astar_elevation_free: route ends at \(5, 6\), not at the goal")


def test_route_not_starting_at_start(tmp_path):
    r = mutated(make_row(2))
    r["routes"][("energy", "obstacles")] = r["routes"][("energy", "obstacles")][1:]
    _expect(tmp_path, r, r"path_astar_energy_obstacles: route starts at \(2, 2\)")


def test_route_out_of_bounds(tmp_path):
    r = mutated(make_row(2))
    route = r["routes"][("energy", "obstacles")]
    r["routes"][("energy", "obstacles")] = np.concatenate([route, [[7, 7], [8, 8]]])
    _expect(tmp_path, r, r"out of bounds")


def test_bad_id(tmp_path):
    r = mutated(make_row(2))
    r["id"] = "42"
    _expect(tmp_path, r, r"not a 10-digit")


def test_metadata_missing_solver_key(tmp_path):
    r = mutated(make_row(2))
    del r["metadata"]["solvers"]["energy"]["heuristic"]
    _expect(tmp_path, r, r"metadata.solvers.energy lacks key\(s\) \['heuristic'\]")


def test_metadata_resolution_mismatch(tmp_path):
    r = mutated(make_row(2))
    r["metadata"]["resolution"] = 16
    _expect(tmp_path, r, r"metadata.resolution is 16")


def test_metadata_not_json(tmp_path):
    rows = make_rows(3)
    table = rows_to_table(rows)
    md = table.column("metadata").to_pylist()
    md[1] = md[1][:-3]
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = table.set_column(table.schema.get_field_index("metadata"), "metadata",
                             pa.array(md, pa.string()))
    folder = tmp_path / f"{N}x{N}" / "test"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-00000.parquet")
    with pytest.raises(DataError,
                       match=r"part-00000.parquet row 1 scene 0000000001: metadata is not valid JSON"):
        load_scenes(tmp_path, N, "test")


def test_missing_column(tmp_path):
    import pyarrow.parquet as pq
    rows = make_rows(2)
    table = rows_to_table(rows).drop_columns(["path_astar_energy_free"])
    folder = tmp_path / f"{N}x{N}" / "test"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "part-00000.parquet")
    with pytest.raises(DataError,
                       match=r"part-00000.parquet.*missing required column.*path_astar_energy_free"):
        load_scenes(tmp_path, N, "test")


def test_weight_mismatch(tmp_path):
    write_dataset(tmp_path, count=3)
    tasks = load_tasks(tmp_path, N, "test", "slope_uphill", weight=10.0)
    assert [t.weight for t in tasks] == [10.0] * 3
    with pytest.raises(DataError, match=r"part-00000.parquet row 0 scene 0000000000: requested "
                                        r"weight 10.5 for objective 'slope_uphill' differs"):
        load_tasks(tmp_path, N, "test", "slope_uphill", weight=10.5)


def test_weight_mismatch_names_the_scene_that_differs(tmp_path):
    rows = make_rows(3)
    rows[2]["metadata"]["solvers"]["energy"]["weight"] = 50.0
    write_rows(tmp_path, rows, rows_per_shard=2)
    with pytest.raises(DataError, match=r"part-00001.parquet row 0 scene 0000000002"):
        load_tasks(tmp_path, N, "test", "energy", weight=62.4)


def test_missing_root(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_scenes(tmp_path / "nowhere", N, "test")


def test_missing_split(tmp_path):
    write_dataset(tmp_path, count=2, split="test")
    with pytest.raises(DataError, match=r"split folder .*validation does not exist"):
        load_scenes(tmp_path, N, "val")


def test_missing_resolution(tmp_path):
    write_dataset(tmp_path, count=2)
    with pytest.raises(DataError, match=r"16x16 does not exist"):
        load_scenes(tmp_path, 16, "test")


def test_empty_split_folder(tmp_path):
    (tmp_path / f"{N}x{N}" / "test").mkdir(parents=True)
    with pytest.raises(DataError, match="no \\*.parquet shards"):
        load_scenes(tmp_path, N, "test")


def test_duplicate_id_within_split(tmp_path):
    rows = make_rows(4)
    rows[3]["id"] = rows[0]["id"]
    write_rows(tmp_path, rows, rows_per_shard=2)
    with pytest.raises(DataError, match=r"part-00000.parquet row 0 scene 0000000000: id "
                                        r"0000000000 is not unique.*part-00001.parquet row 1"):
        load_scenes(tmp_path, N, "test")


def test_duplicate_id_across_splits(tmp_path):
    write_dataset(tmp_path, count=3, split="test")
    write_dataset(tmp_path, count=2, split="validation", start_index=2)  # id 2 again
    with pytest.raises(DataError, match=r"scene 0000000002: id 0000000002 is not unique.*"
                                        r"split 'validation'"):
        load_scenes(tmp_path, N, "test")
    with pytest.raises(DataError, match=r"validation.*row 0 scene 0000000002.*split 'test'"):
        load_scenes(tmp_path, N, "validation")


def test_error_reported_in_file_order(tmp_path):
    rows = make_rows(6)
    rows[1]["tensor"][0, 0, 0] = np.nan
    rows[4]["tensor"][0, 0, 0] = 2.0
    write_rows(tmp_path, rows, rows_per_shard=2)
    for workers in (0, 3):
        with pytest.raises(DataError, match=r"row 1 scene 0000000001"):
            load_scenes(tmp_path, N, "test", workers=workers)


def test_cap_stops_before_a_bad_row(tmp_path):
    rows = make_rows(4)
    rows[3]["tensor"][0, 0, 0] = np.nan
    write_rows(tmp_path, rows, rows_per_shard=2)
    assert len(load_scenes(tmp_path, N, "test", n_samples=3)) == 3
    with pytest.raises(DataError):
        load_scenes(tmp_path, N, "test", n_samples=4)


@pytest.mark.parametrize("rev", [
    "main", "v1.0", "a" * 39, "a" * 41, "g" * 40, "0123456789abcdef0123456789abcdef0123456 ",
    None, 1234567890, "refs/heads/main",
])
def test_bad_revision_refused_before_download(rev):
    calls = []
    with pytest.raises(DataError, match="40 hexadecimal"):
        resolve_dataset_root(dataset_repo="owner/passage", dataset_revision=rev,
                             downloader=lambda *a: calls.append(a))
    assert calls == []


def test_good_revision_reaches_the_downloader(tmp_path):
    calls = []
    rev = "0123456789ABCDEF0123456789abcdef01234567"
    assert check_revision(rev) == rev.lower()

    def fake(repo, revision, cache_dir):
        calls.append((repo, revision))
        return tmp_path

    assert resolve_dataset_root(dataset_repo="owner/passage", dataset_revision=rev,
                                downloader=fake) == tmp_path
    assert calls == [("owner/passage", rev.lower())]


def test_hub_unavailable_is_a_clear_error(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails
    with pytest.raises(DataError, match="hub access is not available"):
        resolve_dataset_root(dataset_repo="owner/passage", dataset_revision="f" * 40)


def test_local_root_missing_is_never_a_fallback(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        resolve_dataset_root(dataset_path=tmp_path / "absent")
    with pytest.raises(DataError, match="not both"):
        resolve_dataset_root(dataset_path=tmp_path, dataset_repo="o/n", dataset_revision="f" * 40)


def test_validate_row_directly():
    row = make_row(7)
    from passage_jax.data.writer import rows_to_table
    raw = rows_to_table([row]).to_pylist()[0]
    s = validate_row(raw, N, "test", "mem.parquet", 0)
    assert s.id == "0000000007" and s.start == (1, 1) and s.goal == (6, 6)
    raw["metadata"] = raw["metadata"].replace('"split": "test"', '"split": "train"')
    with pytest.raises(DataError, match=r"mem.parquet row 0 scene 0000000007: metadata.split"):
        validate_row(raw, N, "test", "mem.parquet", 0)


@pytest.mark.parametrize("text, deep", [
    ('{"a": "' + "[" * 100 + '"}', False),  # many brackets, all inside a string
    ("[" * 64 + "]" * 64, False),           # exactly the limit
    ("[" * 65 + "]" * 65, True),            # one past it
    ('{"a": [' * 40 + "1" + "]}" * 40, True),  # 80 levels, objects and arrays
])
def test_metadata_depth_is_bounded_outside_strings(text, deep):
    from passage_jax.data.validate import MAX_METADATA_DEPTH, RowRef, _metadata_text, json_depth

    ref = RowRef("f.parquet", 3, "s")
    assert (json_depth(text, 10_000) > MAX_METADATA_DEPTH) == deep  # the full scan's answer
    if deep:
        with pytest.raises(DataError, match="nested more than 64 levels deep"):
            _metadata_text(text, ref)
    else:
        assert _metadata_text(text, ref) == text
