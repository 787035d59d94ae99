"""``python -m cli audit`` on shards from a separate writer of docs/contract.md §1 and on corrupted
copies of them."""
from __future__ import annotations

import json

import numpy as np
import pytest
from fixtures_data import make_rows, mutated, write_dataset, write_foreign

from cli.__main__ import main as cli_main
from passage_jax.data.codec import encode_tensor

N = 8


def _audit(tmp_path, *extra):
    out = tmp_path / "audit.json"
    rc = cli_main(["audit", "--dataset-path", str(tmp_path / "data"), "--resolution", str(N),
                   "--json", str(out), "--force", "--workers", "2", "--no-qualify", *extra])
    report = json.loads(out.read_text()) if out.exists() else None
    return rc, report


def _foreign_dataset(tmp_path, rows=None):
    rows = make_rows(5) if rows is None else rows
    # two shards, several row groups each, int64 routes, image columns, no metadata.markers
    write_foreign(tmp_path / "data", rows[:3], name="train-0000.parquet", row_group_size=2)
    write_foreign(tmp_path / "data", rows[3:], name="train-0001.parquet", row_group_size=1)
    return rows


def test_audit_accepts_separate_writer_shards(tmp_path, capsys):
    rows = make_rows(5)
    for i, r in enumerate(rows):  # give two scenes another 1° tile in another 5° cell
        if i >= 3:
            r["metadata"]["tile"] = {"source": "t", "lat": 46, "lon": 7,
                                     "tiles": [[46, 7], [45, 7]]}
    _foreign_dataset(tmp_path, rows)
    rc, rep = _audit(tmp_path)
    assert rc == 0, capsys.readouterr()
    assert [s["id"] for s in rep["scenes"]] == [r["id"] for r in rows]
    assert all(s["valid"] and s["error"] is None for s in rep["scenes"])
    # tile (36, -112) lies in the 5° cell with south-west corner (35, -115);
    # (46, 7) and (45, 7) both lie in the cell (45, 5)
    assert rep["scenes"][0]["blocks"] == {"main_tile_5deg": "5deg:+35:-115",
                                          "union_5deg": "u5deg:+35:-115"}
    assert rep["scenes"][4]["blocks"]["main_tile_5deg"] == "5deg:+45:+5"
    s = rep["summary"]["resolutions"][str(N)]["splits"]["test"]
    assert (s["n_scenes"], s["n_valid"], s["n_invalid"]) == (5, 5, 0)
    assert s["blocks"]["main_tile_5deg"]["n_blocks"] == 2
    assert s["blocks"]["main_tile_5deg"]["largest_share"] == pytest.approx(3 / 5)
    # route lengths: 6 cells on the diagonal, 11 along the free detour (by construction)
    assert s["route_cells"]["energy/obstacles"] == {"min": 6, "median": 6, "max": 6}
    assert s["route_cells"]["slope_uphill/free"] == {"min": 11, "median": 11, "max": 11}
    assert rep["summary"]["all_valid"] and rep["summary"]["failing"] == []
    assert all(s["markers"] == {"start": 1, "goal": -1} for s in rep["scenes"])


def test_audit_coverage_summary_matches_numpy(tmp_path):
    rows = make_rows(4)
    extra = [0, 3, 5, 9]  # extra obstacle cells on row 0 (off every route)
    for r, k in zip(rows, extra):
        r["tensor"][0, :k, 2] = 1.0
    _foreign_dataset(tmp_path, rows)
    rc, rep = _audit(tmp_path)
    assert rc == 0
    cov = np.array([(2 + min(k, N)) / (N * N) for k in extra])
    got = rep["summary"]["resolutions"][str(N)]["splits"]["test"]["obstacle_coverage"]
    assert got == pytest.approx({"min": cov.min(), "median": float(np.median(cov)),
                                 "max": cov.max()})
    assert [s["obstacle_coverage"] for s in rep["scenes"]] == pytest.approx(list(cov))


def _nan(r):
    r["tensor"][3, 3, 0] = np.nan


def _truncate(r):
    blob = encode_tensor(r["tensor"])
    r["tensor"] = blob[:-20]


def _oversize(r):
    r["tensor"] = encode_tensor(np.zeros((N + 2, N + 2, 3), np.float32))


def _through_obstacle(r):
    r["tensor"][2, 2, 2] = 1.0


def _gap(r):
    k = ("elevation", "obstacles")
    r["routes"][k] = np.delete(r["routes"][k], 1, axis=0)


def _not_at_goal(r):
    k = ("slope_uphill", "free")
    r["routes"][k] = r["routes"][k][:-2]


def _no_start(r):
    r["tensor"][1, 1, 1] = 0.0


def _two_goals(r):
    r["tensor"][4, 2, 1] = -1.0


def _marker_on_obstacle(r):
    r["tensor"][1, 1, 2] = 1.0


def _bad_metadata(r):
    del r["metadata"]["calibration"]


def _e_out_of_range(r):
    r["tensor"][5, 0, 0] = 1.25


def _swap_markers(r):
    # the shards carry no metadata.markers: only the other scenes reveal the swap
    r["tensor"][1, 1, 1], r["tensor"][N - 2, N - 2, 1] = -1.0, 1.0


CORRUPTIONS = {
    "swapped_markers": (_swap_markers, "marker convention -1=start differs from +1=start"),
    "nan": (_nan, "non-finite"),
    "truncated": (_truncate, "tensor"),
    "oversized": (_oversize, "declares"),
    "through_obstacle": (_through_obstacle, "is an obstacle"),
    "gap": (_gap, "gap"),
    "not_at_goal": (_not_at_goal, "not at the goal"),
    "no_start": (_no_start, "is missing"),
    "two_goals": (_two_goals, "marked 2 times"),
    "marker_on_obstacle": (_marker_on_obstacle, "lies on an obstacle"),
    "bad_metadata": (_bad_metadata, "calibration"),
    "e_out_of_range": (_e_out_of_range, "[0, 1]"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_audit_rejects_corrupted_copy_naming_the_scene(tmp_path, capsys, name):
    corrupt, phrase = CORRUPTIONS[name]
    rows = make_rows(5)
    bad = mutated(rows[3])
    corrupt(bad)
    rows[3] = bad
    _foreign_dataset(tmp_path, rows)
    rc, rep = _audit(tmp_path)
    assert rc == 1
    by_id = {s["id"]: s for s in rep["scenes"]}
    assert [k for k, s in by_id.items() if not s["valid"]] == ["0000000003"]
    err = by_id["0000000003"]["error"]
    assert "scene 0000000003" in err and "train-0001.parquet row 0" in err and phrase in err, err
    assert by_id["0000000003"]["blocks"] == {"main_tile_5deg": None, "union_5deg": None}
    assert rep["summary"]["failing"][0]["id"] == "0000000003"
    assert "invalid scene 0000000003" in capsys.readouterr().err


def test_audit_flags_duplicate_ids_across_splits(tmp_path):
    write_dataset(tmp_path / "data", count=3, split="test")
    write_dataset(tmp_path / "data", count=2, split="calibration", start_index=2)
    rc, rep = _audit(tmp_path)
    assert rc == 1
    bad = [(s["split"], s["id"]) for s in rep["scenes"] if not s["valid"]]
    assert sorted(bad) == [("calibration", "0000000002"), ("test", "0000000002")]
    # only the test split is audited, but the duplicate in calibration still counts
    rc, rep = _audit(tmp_path, "--split", "test")
    assert rc == 1 and [s["id"] for s in rep["scenes"] if not s["valid"]] == ["0000000002"]


def test_audit_missing_layout_is_exit_2(tmp_path, capsys):
    rc, rep = _audit(tmp_path)
    assert rc == 2 and rep is None
    assert "does not exist" in capsys.readouterr().err
    write_dataset(tmp_path / "data", count=1, split="test")
    rc, _ = _audit(tmp_path, "--split", "val")
    assert rc == 2
    assert "validation does not exist" in capsys.readouterr().err


def test_audit_dataset_library_raises_on_layout_and_matches_the_cli(tmp_path):
    from passage_jax.data import DataError, audit_dataset
    from passage_jax.data.audit import summary3

    with pytest.raises(DataError, match="does not exist"):
        audit_dataset(tmp_path / "data", [N], qualify=False)
    _foreign_dataset(tmp_path)
    with pytest.raises(DataError, match="unknown split"):
        audit_dataset(tmp_path / "data", [N], splits=["dev"], qualify=False)
    rep = audit_dataset(tmp_path / "data", [N], qualify=False, workers=0)
    rc, cli_rep = _audit(tmp_path)
    assert rc == 0 and rep == cli_rep
    assert summary3([]) is None
    assert summary3([3, 1, 2, 10]) == {"min": 1.0, "median": 2.5, "max": 10.0}


def test_audit_missing_column_names_each_scene(tmp_path):
    import pyarrow.parquet as pq
    from fixtures_data import foreign_table
    rows = make_rows(2)
    folder = tmp_path / "data" / f"{N}x{N}" / "test"
    folder.mkdir(parents=True)
    pq.write_table(foreign_table(rows).drop_columns(["tensor"]), folder / "x.parquet")
    rc, rep = _audit(tmp_path)
    assert rc == 1
    assert [s["id"] for s in rep["scenes"]] == ["0000000000", "0000000001"]
    assert all("missing required column(s) ['tensor']" in s["error"] for s in rep["scenes"])
    assert "x.parquet row 1 scene 0000000001" in rep["scenes"][1]["error"]


def test_audit_json_is_written_atomically(tmp_path):
    _foreign_dataset(tmp_path)
    rc, rep = _audit(tmp_path)
    assert rc == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.json", "data"]
    assert set(rep) == {"scenes", "summary"}
    assert set(rep["scenes"][0]) >= {"id", "resolution", "split", "valid", "error", "blocks"}


def _flip(path, start, count):
    b = bytearray(path.read_bytes())
    for i in range(start, start + count):
        b[i] ^= 0xFF
    path.write_bytes(bytes(b))


def test_audit_byte_corruption_inside_a_shard(tmp_path):
    import pyarrow.parquet as pq
    rows = make_rows(6)
    p = write_foreign(tmp_path / "data", rows, row_group_size=2, image_columns=False)
    col = pq.ParquetFile(p).metadata.row_group(1).column(2)
    assert col.path_in_schema == "tensor"
    start = col.dictionary_page_offset or col.data_page_offset
    _flip(p, start + 60, 30)  # inside the tensor blobs of rows 2 and 3
    rc, rep = _audit(tmp_path)
    assert rc == 1
    bad = [s for s in rep["scenes"] if not s["valid"]]
    assert [s["id"] for s in bad] == ["0000000002", "0000000003"]
    assert all(f"scene {s['id']}" in s["error"] for s in bad)


def test_audit_unreadable_page_names_the_scenes(tmp_path):
    import pyarrow.parquet as pq
    rows = make_rows(3)
    p = write_foreign(tmp_path / "data", rows, row_group_size=3, image_columns=False)
    col = pq.ParquetFile(p).metadata.row_group(0).column(2)
    _flip(p, col.dictionary_page_offset or col.data_page_offset, 8)  # the page header
    rc, rep = _audit(tmp_path)
    assert rc == 1
    assert [s["id"] for s in rep["scenes"]] == [r["id"] for r in rows]
    for s in rep["scenes"]:
        assert not s["valid"] and f"row {s['row']} scene {s['id']}: cannot read the shard" in s["error"]


def test_audit_truncated_file(tmp_path, capsys):
    rows = make_rows(3)
    p = write_foreign(tmp_path / "data", rows)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    rc, rep = _audit(tmp_path)
    assert rc == 1 and len(rep["scenes"]) == 1
    assert "not a readable Parquet file" in rep["scenes"][0]["error"]
