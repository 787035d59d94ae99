import itertools
import math
import random

import pytest

from passage_jax.stats.blocks import assign_blocks, block_census


def tile(lat, lon, tiles=None):
    return {"source": "test", "lat": lat, "lon": lon,
            "tiles": [[lat, lon]] if tiles is None else tiles}


def test_main_tile_cells_including_negative_coordinates():
    tiles = [tile(35, -120), tile(39, -116), tile(40, -116), tile(-1, -1), tile(0, 0), None,
             tile(-5, 179)]
    got = assign_blocks(tiles, "main_tile_5deg")
    assert got == ["5deg:+35:-120", "5deg:+35:-120", "5deg:+40:-120", "5deg:-5:-5",
                   "5deg:+0:+0", None, "5deg:-5:+175"]
    # independent formula
    for t, lab in zip(tiles, got):
        if t is not None:
            assert lab == f"5deg:{math.floor(t['lat'] / 5) * 5:+d}:{math.floor(t['lon'] / 5) * 5:+d}"


def naive_union(tiles):
    """Fixed-point merging of cell sets (independent of union-find)."""
    groups = []  # list of (set of cells, set of scene indices)
    for i, t in enumerate(tiles):
        if t is None:
            continue
        cells = {(math.floor(t["lat"] / 5) * 5, math.floor(t["lon"] / 5) * 5)}
        cells |= {(math.floor(a / 5) * 5, math.floor(b / 5) * 5) for a, b in t["tiles"]}
        groups.append((cells, {i}))
    changed = True
    while changed:
        changed = False
        for a, b in itertools.combinations(range(len(groups)), 2):
            if groups[a][0] & groups[b][0]:
                groups[a] = (groups[a][0] | groups[b][0], groups[a][1] | groups[b][1])
                del groups[b]
                changed = True
                break
    out = [None] * len(tiles)
    for cells, members in groups:
        lo = min(cells)
        for i in members:
            out[i] = f"u5deg:{lo[0]:+d}:{lo[1]:+d}"
    return out


def test_union_is_transitive_and_order_independent():
    # scene 0 spans cells (35,-120)/(35,-115); scene 1 spans (35,-115)/(40,-115);
    # scene 2 only (40,-115) -> all three join transitively; scene 3 is apart.
    tiles = [
        tile(39, -116, [[39, -116], [39, -115]]),
        tile(39, -111, [[39, -111], [40, -111]]),
        tile(44, -113),
        tile(10, 10),
        None,
    ]
    got = assign_blocks(tiles, "union_5deg")
    assert got[:3] == ["u5deg:+35:-120"] * 3
    assert got[3] == "u5deg:+10:+10" and got[4] is None
    assert got == naive_union(tiles)
    # main-tile rule keeps them apart
    assert len(set(assign_blocks(tiles, "main_tile_5deg")[:3])) == 3
    # labels do not depend on scene order
    perm = [3, 2, 4, 0, 1]
    got_p = assign_blocks([tiles[p] for p in perm], "union_5deg")
    assert got_p == [got[p] for p in perm]


def test_union_random_against_naive():
    rng = random.Random(5)
    for _ in range(20):
        tiles = []
        for _ in range(30):
            if rng.random() < 0.1:
                tiles.append(None)
                continue
            lat, lon = rng.randint(-20, 20), rng.randint(-30, 30)
            extra = [[lat + rng.randint(0, 1), lon + rng.randint(0, 1)] for _ in range(rng.randint(0, 3))]
            tiles.append(tile(lat, lon, [[lat, lon]] + extra))
        assert assign_blocks(tiles, "union_5deg") == naive_union(tiles)


@pytest.mark.parametrize("bad, msg, rules", [
    ({"lat": "x", "lon": 3}, "scene 1: tile field 'lat'", ("main_tile_5deg", "union_5deg")),
    ({"lon": 3}, "scene 1: tile lacks", ("main_tile_5deg", "union_5deg")),
    ({"lat": 3, "lon": 300}, "scene 1: tile field 'lon'", ("main_tile_5deg", "union_5deg")),
    ({"lat": 3, "lon": 3, "tiles": [[1]]}, r"scene 1: tile field 'tiles\[0\]'", ("union_5deg",)),
    ("tile", "scene 1: metadata.tile must be a dict", ("main_tile_5deg", "union_5deg")),
])
def test_bad_tiles_raise(bad, msg, rules):
    for rule in rules:
        with pytest.raises(ValueError, match=msg):
            assign_blocks([tile(1, 1), bad], rule)


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown block rule"):
        assign_blocks([tile(1, 1)], "country")


def test_census():
    labels = ["a"] * 3 + ["b"] * 3 + ["c"] + [None] * 3
    c = block_census(labels)
    assert c["n_tasks"] == 10 and c["n_blocks"] == 3 and c["n_unplaced"] == 3
    assert c["largest_block"] == "a" and c["largest_share"] == pytest.approx(0.3)
    assert c["block_sizes"] == {"a": 3, "b": 3, "c": 1}
    assert c["adequate"] is False and "30" in c["criterion"]
    # 40 equal blocks of 3 tasks -> adequate (share 2.5 %)
    good = [f"b{i}" for i in range(40) for _ in range(3)]
    g = block_census(good)
    assert g["adequate"] is True and g["largest_share"] == pytest.approx(1 / 40)
    # 30 blocks but one holds 11 % -> not adequate
    skew = [f"b{i}" for i in range(29)] * 3 + ["big"] * 11
    s = block_census(skew)
    assert s["n_blocks"] == 30 and s["largest_block"] == "big"
    assert s["largest_share"] == pytest.approx(11 / 98) and s["adequate"] is False
    e = block_census([None, None])
    assert e["n_blocks"] == 0 and e["largest_block"] is None and e["adequate"] is False
