import hashlib
import json

import pytest

from passage_jax.stats.roster import Roster, RosterError, read_roster, roster_from_tiles, write_roster


def test_roundtrip_v2_and_hash(tmp_path):
    tiles = [{"lat": 35, "lon": -120, "tiles": [[35, -120]]}, None, {"lat": 44, "lon": 7}]
    r = roster_from_tiles(["a", "b", "c"], tiles, "main_tile_5deg")
    assert r.blocks == ["5deg:+35:-120", "unplaced", "5deg:+40:+5"] and r.unplaced_block == "unplaced"
    path = tmp_path / "sub" / "roster.json"
    digest = write_roster(path, r)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    obj = json.loads(path.read_text())
    assert obj["format"] == "passage-roster-v2" and obj["block_rule"] == "main_tile_5deg"
    assert obj["tasks"][1] == {"task_id": "b", "block": "unplaced"}
    back = read_roster(path, sha256=digest.upper())
    assert back.task_ids == r.task_ids and back.blocks == r.blocks and back.footprint_required is False
    assert back.block_map()["c"] == "5deg:+40:+5"
    assert not list(path.parent.glob(".*tmp"))  # atomic write leaves no temp file


def test_wrong_hash_refused(tmp_path):
    path = tmp_path / "r.json"
    write_roster(path, Roster("passage-roster-v1", ["a", "b"], ["x", None]))
    with pytest.raises(RosterError, match="sha256 is .* expected 00+; refusing"):
        read_roster(path, sha256="0" * 64)
    path.write_text(path.read_text().replace('"x"', '"y"'))
    good = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(RosterError, match="refusing"):
        read_roster(path, sha256=good)


def test_bare_list_is_v1(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"task_id": "a", "block": "k"}, {"task_id": "b", "block": None}]))
    r = read_roster(path)
    assert r.format == "passage-roster-v1" and r.blocks == ["k", None]


@pytest.mark.parametrize("obj, msg", [
    ({"format": "passage-roster-v3", "tasks": []}, "format"),
    ({"format": "passage-roster-v1", "tasks": [{"task_id": "a", "block": "k"}] * 2}, "more than once"),
    ({"format": "passage-roster-v1", "tasks": [{"task_id": "a"}]}, r"tasks\[0\]"),
    ({"format": "passage-roster-v2", "block_rule": "main_tile_5deg", "block_rule_version": 1,
      "footprint_required": False, "unplaced_block": None,
      "tasks": [{"task_id": "a", "block": None}]}, r"tasks\[0\].block"),
    ({"format": "passage-roster-v2", "block_rule": "main_tile_5deg", "block_rule_version": 1,
      "footprint_required": True, "unplaced_block": "unplaced",
      "tasks": [{"task_id": "a", "block": "unplaced"}]}, "no unplaced block"),
    ({"format": "passage-roster-v2", "block_rule": "nearest", "block_rule_version": 1,
      "footprint_required": False, "unplaced_block": None, "tasks": []}, "block_rule"),
    ({"format": "passage-roster-v2", "block_rule": "union_5deg", "block_rule_version": 1,
      "footprint_required": False, "tasks": []}, "missing fields"),
])
def test_invalid_rosters(tmp_path, obj, msg):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(RosterError, match=msg):
        read_roster(path)


def test_footprint_required_refuses_tileless():
    with pytest.raises(RosterError, match="task 'b' has no tile"):
        roster_from_tiles(["a", "b"], [{"lat": 1, "lon": 1}, None], "union_5deg", footprint_required=True)
