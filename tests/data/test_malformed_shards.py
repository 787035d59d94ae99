"""Hostile shards: every malformed row, tensor frame, metadata value, shard file or dataset
path is one named error (file, row, scene id) from the reader and one finding from the
audit, never a traceback; the audit's ``--json`` and make-cohort's ``--out`` refuse what
is already there."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from fixtures_data import make_rows

from cli.__main__ import main as cli_main
from passage_jax.data import DataError, load_scenes, scan_split
from passage_jax.data.codec import TensorError, decode_tensor, encode_tensor
from passage_jax.data.validate import MAX_METADATA_BYTES, MAX_METADATA_DEPTH, json_depth
from passage_jax.data.writer import atomic_write_table, rows_to_table

N = 8
BAD_ROW = 1
BAD_ID = f"{BAD_ROW:010d}"


# --------------------------------------------------------------------------- helpers

def _write(root, *, metadata=None, tensor=None, column=None, rows=None, name="part-00000.parquet"):
    """Three valid rows through the project's writer, row 1 then given a raw ``metadata``
    string and/or ``tensor`` blob (or a whole ``column`` replaced); returns the shard."""
    table = rows_to_table(make_rows(3) if rows is None else rows)
    for col, value, kind in (("metadata", metadata, pa.string()), ("tensor", tensor, pa.binary())):
        if value is not None:
            values = table.column(col).to_pylist()
            values[BAD_ROW] = value
            table = table.set_column(table.schema.get_field_index(col), col, pa.array(values, kind))
    if column is not None:
        col, arr = column
        table = table.set_column(table.schema.get_field_index(col), col, arr)
    path = root / f"{N}x{N}" / "test" / name
    atomic_write_table(table, path)
    return path


def _load_error(root) -> str:
    with pytest.raises(DataError) as ei:
        load_scenes(root, N, "test", n_samples=None, workers=2)
    msg = str(ei.value)
    assert "\n" not in msg and len(msg) < 1000, msg
    return msg


def _assert_names_row(msg: str, path, row: int = BAD_ROW, sid: str = BAD_ID) -> None:
    assert f"{path} row {row} scene {sid}:" in msg, msg


def _audit(root, out, *extra):
    rc = cli_main(["audit", "--dataset-path", str(root), "--resolution", str(N), "--json", str(out),
                   "--workers", "2", "--no-qualify", *extra])
    return rc, (json.loads(out.read_text()) if rc != 2 and out.is_file() else None)


def _metadata(index: int = BAD_ROW) -> dict:
    return make_rows(1, start_index=index)[0]["metadata"]


def _frame(content: bytes = b"", *, declared: int | None = None, blocks: int = 1) -> bytes:
    """A hand-made Zstandard frame: ``blocks`` RLE blocks of 128 KiB zeros (a decompression
    bomb when many), optionally declaring ``declared`` content bytes."""
    if declared is None:
        header = b"\x28\xb5\x2f\xfd" + bytes([0x00, 7 << 3])  # no size, 128 KiB window
    else:
        header = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + struct.pack("<Q", declared)
    body = b""
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        body += (last | (1 << 1) | ((128 * 1024) << 3)).to_bytes(3, "little") + b"\x00"
    return header + body + content


# --------------------------------------------------------------------------- metadata

@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 100_000 + "1" + "}" * 100_000,
], ids=["arrays", "objects"])
def test_deeply_nested_metadata_is_a_named_row_error(tmp_path, text):
    path = _write(tmp_path, metadata=text)
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert f"nested more than {MAX_METADATA_DEPTH} levels deep" in msg
    reports = scan_split(tmp_path, N, "test", workers=2)
    assert [r.valid for r in reports] == [True, False, True]
    assert reports[1].error == msg


def test_audit_reports_deep_metadata_as_a_finding(tmp_path, capsys):
    path = _write(tmp_path / "d", metadata="[" * 100_000 + "]" * 100_000)
    rc, rep = _audit(tmp_path / "d", tmp_path / "a.json")
    assert rc == 1
    [bad] = rep["summary"]["failing"]
    assert (bad["file"], bad["row"], bad["id"]) == (str(path), BAD_ROW, BAD_ID)
    assert "nested more than 64 levels deep" in bad["error"]
    assert f"invalid scene {BAD_ID}" in capsys.readouterr().err


def test_metadata_over_the_size_cap(tmp_path):
    md = _metadata()
    md["note"] = "x" * (MAX_METADATA_BYTES + 10)
    path = _write(tmp_path, metadata=json.dumps(md))
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert f"more than the {MAX_METADATA_BYTES} allowed" in msg


def test_metadata_integer_over_the_digit_limit(tmp_path):
    text = json.dumps(_metadata())[:-1] + ', "huge": ' + "9" * 5000 + "}"
    path = _write(tmp_path, metadata=text)
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert "metadata cannot be parsed" in msg and "digits" in msg


def test_json_depth_skips_brackets_inside_strings():
    assert json_depth('{"a": "[[[[{{{{", "b": [1, [2]]}', 64) == 3
    assert json_depth('["\\\\", "\\"[[["]', 64) == 1
    assert json_depth("[" * 10_000, 64) == 65  # stops just past the limit


def _with(path_keys, value) -> dict:
    md = _metadata()
    d = md
    for k in path_keys[:-1]:
        d = d[k]
    d[path_keys[-1]] = value
    return md


@pytest.mark.parametrize("keys, value, expected", [
    (("calibration",), [0, 1], "metadata.calibration must be {min, max}"),
    (("calibration",), {"min": -1e308, "max": 1e308}, "metadata.calibration range max - min overflows"),
    (("calibration", "max"), 10 ** 400, "metadata.calibration needs finite numbers"),
    (("solvers", "energy", "weight"), "62.4", "metadata.solvers.energy.weight must be a finite number"),
    (("solvers",), ["elevation"], "metadata.solvers must be an object"),
    (("crop",), [0, 0, 8, 8], "metadata.crop must be an object"),
    (("obstacles",), "many", "metadata.obstacles must be an object"),
    (("source",), 7, "metadata.source must be an object"),
    (("tile", "tiles"), [[36, -112]] * 50_000 + [["x", 1]], "metadata.tile.tiles[50000] must be"),
    (("markers",), list(range(100_000)), "metadata.markers must hold start and goal"),
], ids=["cal-list", "cal-overflow", "cal-huge-int", "weight-string", "solvers-list", "crop-list",
        "obstacles-string", "source-int", "huge-tiles", "huge-markers"])
def test_metadata_fields_of_unexpected_types(tmp_path, keys, value, expected):
    path = _write(tmp_path, metadata=json.dumps(_with(keys, value)))
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert expected in msg
    assert len(msg) < len(str(path)) + 400  # a huge value is cut short in the message


# --------------------------------------------------------------------------- tensor frames

def _blob(row: int = BAD_ROW) -> bytes:
    return encode_tensor(make_rows(1, start_index=row)[0]["tensor"])


@pytest.mark.parametrize("kind, expected", [
    ("trailing", r"4 byte\(s\) of trailing data after its \d+-byte Zstandard frame"),
    ("two_frames", r"of a second Zstandard frame after its \d+-byte Zstandard frame"),
    ("skippable_after", r"of a second Zstandard frame after"),
    ("skippable_first", r"starts with a skippable Zstandard frame"),
    ("huge_declared", r"declares 1099511627776 bytes"),
    ("bomb", r"decompresses to more than the 768 bytes"),
    ("huge_window", r"declares a \d+-byte window, more than the 8388608 allowed"),
    ("oversized_blob", r"tensor blob is \d+ bytes, more than the 5632"),
    ("not_zstd", r"tensor is not a Zstandard frame \(it starts with 504b0304"),
], ids=["trailing", "two_frames", "skippable_after", "skippable_first", "huge_declared", "bomb",
        "huge_window", "oversized_blob", "not_zstd"])
def test_tensor_blob_must_be_exactly_one_bounded_frame(tmp_path, kind, expected):
    import re

    blob = _blob()
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"abcd"
    bad = {
        "trailing": blob + b"junk",
        "two_frames": blob + blob,
        "skippable_after": blob + skippable,
        "skippable_first": skippable + blob,
        "huge_declared": _frame(declared=1 << 40),
        "bomb": _frame(blocks=1000),
        "huge_window": b"\x28\xb5\x2f\xfd" + bytes([0x00, 14 << 3]) + _frame()[6:],
        "oversized_blob": blob + b"\x00" * 6000,
        "not_zstd": b"PK\x03\x04" + blob,
    }[kind]
    with pytest.raises(TensorError, match=expected):
        decode_tensor(bad, N)
    path = _write(tmp_path, tensor=bad)
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert re.search(expected, msg), msg


def test_valid_frames_of_other_encoders_still_decode():
    t = make_rows(1)[0]["tensor"]
    raw = np.ascontiguousarray(t, "<f4").tobytes()
    for kw in ({"level": 1}, {"level": 19, "write_content_size": False},
               {"level": 3, "write_checksum": True}):
        blob = zstandard.ZstdCompressor(**kw).compress(raw)
        np.testing.assert_array_equal(decode_tensor(blob, N), t)
    stream = zstandard.ZstdCompressor(level=3).compressobj()  # streamed: size unknown
    blob = stream.compress(raw) + stream.flush()
    np.testing.assert_array_equal(decode_tensor(blob, N), t)


def test_audit_reports_every_bad_frame_with_file_row_and_id(tmp_path):
    rows = make_rows(4)
    blobs = [encode_tensor(r["tensor"]) for r in rows]
    table = rows_to_table(rows)
    tensors = [blobs[0], blobs[1] + b"junk", blobs[2] + blobs[2], _frame(declared=1 << 40)]
    table = table.set_column(table.schema.get_field_index("tensor"), "tensor",
                             pa.array(tensors, pa.binary()))
    path = tmp_path / "d" / f"{N}x{N}" / "test" / "part-00000.parquet"
    atomic_write_table(table, path)
    rc, rep = _audit(tmp_path / "d", tmp_path / "a.json")
    assert rc == 1
    failing = rep["summary"]["failing"]
    assert [(f["file"], f["row"], f["id"]) for f in failing] == [
        (str(path), i, f"{i:010d}") for i in (1, 2, 3)]
    assert "trailing data" in failing[0]["error"]
    assert "second Zstandard frame" in failing[1]["error"]
    assert "declares 1099511627776 bytes" in failing[2]["error"]


# --------------------------------------------------------------------------- routes, ids, columns

def test_route_longer_than_the_grid_is_refused_before_conversion(tmp_path):
    rows = make_rows(3)
    rows[BAD_ROW]["routes"][("energy", "free")] = np.array([(1, 1), (1, 2)] * 40, np.int32)
    path = _write(tmp_path, rows=rows)
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert "route path_astar_energy_free is malformed: it holds 80 cells, more than the 64" in msg


def test_unprintable_id_keeps_the_message_on_one_line(tmp_path):
    ids = pa.array(["0000000000", "00000\n0001" + "9" * 500, "0000000002"], pa.string())
    path = _write(tmp_path, column=("id", ids))
    msg = _load_error(tmp_path)
    assert f"{path} row 1 scene '00000\\n0001" in msg and "characters)" in msg


def test_invalid_utf8_column_is_a_row_error_and_an_audit_finding(tmp_path):
    table = rows_to_table(make_rows(3))
    md = table.column("metadata").combine_chunks()
    validity, offsets, data = md.buffers()
    data = bytearray(data.to_pybytes())
    start = int(np.frombuffer(offsets, np.int32)[md.offset + BAD_ROW])
    data[start + 3] = 0xFF
    bad = pa.Array.from_buffers(pa.string(), len(md), [validity, offsets, pa.py_buffer(bytes(data))])
    table = table.set_column(table.schema.get_field_index("metadata"), "metadata", bad)
    path = tmp_path / f"{N}x{N}" / "test" / "part-00000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    msg = _load_error(tmp_path)
    _assert_names_row(msg, path)
    assert "column metadata cannot be read: UnicodeDecodeError" in msg
    reports = scan_split(tmp_path, N, "test", workers=0)
    assert [r.valid for r in reports] == [True, False, True]
    assert reports[1].error == msg


@pytest.mark.parametrize("col, arr, expected", [
    ("id", pa.array([0, 1, 2]), "scene 1: id must be a string, got int 1"),
    ("tensor", pa.array(["a", "b", "c"]), "scene 0000000001: tensor is str, not bytes"),
    ("metadata", pa.array([{"a": 1}] * 3), "scene 0000000001: metadata must be a JSON string, got dict"),
    ("path_astar_elevation_free", pa.array([[1, 2]] * 3), "route path_astar_elevation_free is malformed"),
], ids=["id-int", "tensor-str", "metadata-struct", "route-flat"])
def test_wrong_column_types_are_named(tmp_path, col, arr, expected):
    path = _write(tmp_path, column=(col, arr))
    with pytest.raises(DataError) as ei:
        load_scenes(tmp_path, N, "test", n_samples=None, workers=0)
    assert str(ei.value).startswith(f"{path} row 0 scene ")
    reports = scan_split(tmp_path, N, "test", workers=0)
    assert not any(r.valid for r in reports)
    assert expected in reports[1].error and str(path) in reports[1].error


# --------------------------------------------------------------------------- shard files

def _shard_variants(folder):
    """Four broken ``*.parquet`` entries next to a valid shard."""
    good = folder / "a-good.parquet"
    atomic_write_table(rows_to_table(make_rows(1)), good)
    (folder / "b-text.parquet").write_text("not parquet at all\n" * 20)
    data = good.read_bytes()
    (folder / "c-truncated.parquet").write_bytes(data[: len(data) // 2])
    (folder / "d-folder.parquet").mkdir()
    os.symlink(folder / "e-loop.parquet", folder / "e-loop.parquet")
    return ["b-text", "c-truncated", "d-folder", "e-loop"]


def test_broken_shard_files_are_named_not_skipped(tmp_path):
    folder = tmp_path / "d" / f"{N}x{N}" / "test"
    folder.mkdir(parents=True)
    bad = _shard_variants(folder)
    with pytest.raises(DataError, match=r"b-text\.parquet: not a readable Parquet file"):
        load_scenes(tmp_path / "d", N, "test", n_samples=None)
    rc, rep = _audit(tmp_path / "d", tmp_path / "a.json")
    assert rc == 1
    failing = rep["summary"]["failing"]
    assert [os.path.basename(f["file"]) for f in failing] == [f"{b}.parquet" for b in bad]
    assert all(f["row"] == -1 and "not a readable Parquet file" in f["error"] for f in failing)
    assert "Too many levels of symbolic links" in failing[-1]["error"]
    assert rep["summary"]["n_valid"] == 1


# --------------------------------------------------------------------------- dataset paths

def test_symlink_loop_dataset_path_is_named_as_a_loop(tmp_path, capsys):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    with pytest.raises(DataError, match=rf"dataset root {loop} is a symbolic link loop and cannot be "
                                        r"resolved \(Too many levels of symbolic links\)"):
        load_scenes(loop, N, "test")
    rc, rep = _audit(loop, tmp_path / "a.json")
    assert rc == 2 and rep is None
    err = capsys.readouterr().err
    assert f"{loop} is a symbolic link loop" in err and "does not exist" not in err


def test_dangling_and_looping_layout_folders(tmp_path, capsys):
    dangling = tmp_path / "gone"
    os.symlink(tmp_path / "nowhere", dangling)
    with pytest.raises(DataError, match=rf"{dangling} is a symbolic link to .*nowhere, which does not"):
        load_scenes(dangling, N, "test")
    _write(tmp_path / "d")
    split = tmp_path / "d" / f"{N}x{N}" / "validation"
    os.symlink(split, split)
    with pytest.raises(DataError, match=rf"split folder {split} is a symbolic link loop"):
        load_scenes(tmp_path / "d", N, "val")
    rc, _ = _audit(tmp_path / "d", tmp_path / "a.json")  # every split: the loop is not skipped
    assert rc == 2 and f"split folder {split} is a symbolic link loop" in capsys.readouterr().err


# --------------------------------------------------------------------------- audit --json

def test_audit_json_refuses_an_existing_file_unless_forced(tmp_path, capsys):
    _write(tmp_path / "d")
    out = tmp_path / "a.json"
    out.write_text("keep me")
    rc, _ = _audit(tmp_path / "d", out)
    assert rc == 2 and out.read_text() == "keep me"
    err = capsys.readouterr().err
    assert f"audit: {out} exists" in err and "--force" in err
    rc, rep = _audit(tmp_path / "d", out, "--force")
    assert rc == 0 and rep["summary"]["all_valid"]
    folder = tmp_path / "folder.json"
    folder.mkdir()
    rc, _ = _audit(tmp_path / "d", folder, "--force")
    assert rc == 2 and f"audit: --json {folder} is a folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- make-cohort --out

def _make_cohort(out, *extra):
    return cli_main(["make-cohort", "--out", str(out), "--resolution", "32", "--split", "test",
                     "--n-scenes", "1", "--no-progress", *extra])


def test_make_cohort_refuses_a_non_empty_split_folder_by_name(tmp_path, capsys):
    split = tmp_path / "c" / "32x32" / "test"
    split.mkdir(parents=True)
    (split / "notes.txt").write_text("mine")
    assert _make_cohort(tmp_path / "c") == 2
    assert f"{split} is not empty (it holds notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in split.iterdir()) == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    assert _make_cohort(tmp_path / "file") == 2
    assert f"{tmp_path / 'file'} exists and is not a folder" in capsys.readouterr().err


def test_make_cohort_geo_refuses_before_writing_either_root(tmp_path, capsys):
    taken = tmp_path / "g" / "matched_random" / "32x32" / "test"
    taken.mkdir(parents=True)
    (taken / "part-00000.parquet").write_bytes(b"old")
    assert _make_cohort(tmp_path / "g", "--geo-holdout", "carrizo") == 2
    assert f"{taken} already holds shards" in capsys.readouterr().err
    assert not (tmp_path / "g" / "holdout").exists()


def test_make_cohort_shipped_refuses_a_non_empty_root(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "manifest.json").write_text("{}")
    assert cli_main(["make-cohort", "--shipped", "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    assert f"{tmp_path / 's'} is not empty (it holds manifest.json)" in capsys.readouterr().err
    assert (tmp_path / "s" / "manifest.json").read_text() == "{}"


# --------------------------------------------------------------------------- run admission

def test_run_admission_names_file_row_and_id(tmp_path, capsys):
    import fixtures_runner as F

    rows = F.write_cohort(tmp_path / "d")
    table = rows_to_table(rows[:2])
    md = table.column("metadata").to_pylist()
    md[BAD_ROW] = "[" * 100_000 + "]" * 100_000
    table = table.set_column(table.schema.get_field_index("metadata"), "metadata",
                             pa.array(md, pa.string()))
    shard = tmp_path / "d" / f"{F.N}x{F.N}" / "test" / "part-00000.parquet"
    atomic_write_table(table, shard)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(F.spec_dict(tmp_path / "d")))
    out = tmp_path / "run"
    assert cli_main(["run", "--spec", str(spec), "--output", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{shard} row {BAD_ROW} scene {BAD_ID}: metadata is nested more than 64 levels deep" in err
    assert "Traceback" not in err and "RecursionError" not in err
    assert not (out / "run.json").exists()


def test_run_names_a_symlink_loop_dataset_path(tmp_path, capsys):
    import fixtures_runner as F

    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(F.spec_dict(loop)))
    assert cli_main(["run", "--spec", str(spec), "--output", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"dataset root {loop} is a symbolic link loop" in err and "does not exist" not in err
    assert not (tmp_path / "run").exists()
