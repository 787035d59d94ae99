"""Shipped terrain bundle: provenance hashes, values against the source members,
georeference sanity."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import passage_jax.data.terrain as terrain
from passage_jax.data.terrain import RASTERS, TerrainError, load_raster

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "passage_jax" / "data" / "terrain"
PROV = json.loads((BUNDLE / "provenance.json").read_text())
#: Where the pinned downloads may be found (the member checks skip without them).
DOWNLOAD_DIRS = [Path("/tmp/dl"), REPO / "downloads"]


def _build_module():
    spec = importlib.util.spec_from_file_location("build_terrain", REPO / "scripts" / "build_terrain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_seven_rasters_with_complete_provenance():
    assert set(RASTERS) == {"anatolia", "gironde", "grand_canyon", "carrizo", "jacksboro", "aletsch",
                            "minnesota"}
    for key, r in PROV["rasters"].items():
        assert r["key"] == key
        for field in ("package", "version", "member", "member_sha256", "shape", "native_cell_m",
                      "bounds", "main_tile", "scale_m", "z_min_m", "z_max_m", "attribution"):
            assert r[field] not in (None, "", []), (key, field)
        if r["package"] != "matplotlib":
            assert len(r["download_sha256"]) == 64


def test_bundle_hashes_match_provenance():
    total = 0
    for key, r in PROV["rasters"].items():
        path = BUNDLE / r["bundle_file"]
        assert _sha(path) == r["bundle_sha256"], key
        total += path.stat().st_size
    assert total < 4 * 2 ** 20  # the bundle stays small


def test_download_pins_match_the_build_script():
    build = _build_module()
    for r in PROV["rasters"].values():
        if r["package"] == "matplotlib":
            continue
        dist = build.DISTS[r["package"]]
        assert (r["version"], r["download_sha256"]) == (dist["version"], dist["sha256"])


@pytest.mark.parametrize("key", sorted(PROV["rasters"]))
def test_load_raster_shape_range_and_quantum(key):
    z, info = load_raster(key)
    r = PROV["rasters"][key]
    assert z.dtype == np.float64 and list(z.shape) == r["shape"] == info["shape"]
    assert np.isfinite(z).all()
    half = r["scale_m"] / 2 + 1e-9
    assert abs(z.min() - r["z_min_m"]) <= half and abs(z.max() - r["z_max_m"]) <= half
    # every value lies on the stored quantum grid
    q = (z - r["offset_m"]) / r["scale_m"]
    assert np.allclose(q, np.round(q), atol=1e-6)
    # the returned array is the caller's copy
    z[0, 0] += 1.0
    assert load_raster(key)[0][0, 0] != z[0, 0]


def test_jacksboro_matches_matplotlib_sample_exactly():
    import matplotlib

    path = Path(matplotlib.get_data_path()) / "sample_data" / "jacksboro_fault_dem.npz"
    r = PROV["rasters"]["jacksboro"]
    assert _sha(path) == r["member_sha256"]
    with np.load(path) as d:
        raw = d["elevation"].astype(np.float64)
    z, _ = load_raster("jacksboro")
    np.testing.assert_array_equal(z, raw)


def _find_download(filename: str) -> Path | None:
    for d in DOWNLOAD_DIRS:
        if (d / filename).exists():
            return d / filename
    return None


@pytest.mark.parametrize("key", ["minnesota", "aletsch", "grand_canyon"])
def test_load_raster_matches_member_in_download(key):
    tifffile = pytest.importorskip("tifffile")
    r = PROV["rasters"][key]
    archive = _find_download(r["download"])
    if archive is None:
        pytest.skip(f"{r['download']} not downloaded")
    assert _sha(archive) == r["download_sha256"]
    raw_bytes = zipfile.ZipFile(archive).read(r["member"])
    assert hashlib.sha256(raw_bytes).hexdigest() == r["member_sha256"]
    raw = tifffile.imread(io.BytesIO(raw_bytes)).astype(np.float64)
    z, _ = load_raster(key)
    assert np.abs(z - raw).max() <= r["scale_m"] / 2 + 1e-6
    if r["scale_m"] == 1.0 and r["offset_m"] == 0.0:
        np.testing.assert_array_equal(z, raw)


def test_altered_bundle_is_refused(tmp_path, monkeypatch):
    for f in BUNDLE.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    b = bytearray((tmp_path / "minnesota.npz").read_bytes())
    b[len(b) // 2] ^= 0x01
    (tmp_path / "minnesota.npz").write_bytes(bytes(b))
    monkeypatch.setattr(terrain, "BUNDLE_DIR", tmp_path)
    terrain._load_checked.cache_clear()
    try:
        with pytest.raises(TerrainError, match="minnesota.npz: sha256"):
            load_raster("minnesota")
        (tmp_path / "carrizo.npz").unlink()
        with pytest.raises(TerrainError, match="missing"):
            load_raster("carrizo")
    finally:
        terrain._load_checked.cache_clear()


def test_unknown_key_is_refused():
    with pytest.raises(TerrainError, match="unknown raster 'everest'"):
        load_raster("everest")


def test_georeference_is_real_geography():
    # The regions of DATA_SOURCES.md: (lat, lon) of a point inside each raster.
    inside = {"anatolia": (39.6, 40.4), "gironde": (45.3, -1.2), "grand_canyon": (36.2, -113.0),
              "carrizo": (35.3, -119.84), "jacksboro": (36.6, -84.2), "aletsch": (46.45, 8.0),
              "minnesota": (46.506, -93.92)}
    cells5 = set()
    for key, (lat, lon) in inside.items():
        b = PROV["rasters"][key]["bounds"]
        assert b["lat_min"] <= lat <= b["lat_max"] and b["lon_min"] <= lon <= b["lon_max"], key
        t = PROV["rasters"][key]["main_tile"]
        centre = ((b["lat_min"] + b["lat_max"]) / 2, (b["lon_min"] + b["lon_max"]) / 2)
        assert t == [math.floor(centre[0]), math.floor(centre[1])]
        cells5.add((t[0] // 5, t[1] // 5))
    assert len(cells5) == 7  # seven distinct 5-degree block cells


def test_native_cell_sizes():
    cell = {k: r["native_cell_m"] for k, r in PROV["rasters"].items()}
    assert cell["carrizo"] == pytest.approx(2.0) and cell["minnesota"] == pytest.approx(1.0)
    assert cell["aletsch"] == pytest.approx(200.0)
    # 3 arc-second cells: ~92.5 m north-south, 3" x cos(lat) east-west
    dy, dx = PROV["rasters"]["anatolia"]["native_cell_yx_m"]
    assert dy == pytest.approx(92.5, abs=0.5) and dx == pytest.approx(92.6 * math.cos(math.radians(39.58)),
                                                                      abs=0.5)
    assert cell["grand_canyon"] == pytest.approx(76.437 * math.cos(math.radians(36.17)), abs=0.3)


def test_coordinate_conversions_known_points():
    b = _build_module()
    # On the central meridian, the UTM northing of 45 N is 0.9996 x the GRS80 meridian arc.
    lon, lat = b.utm_to_lonlat(500000.0, 0.9996 * 4984944.378, 15)
    assert lon == pytest.approx(-93.0, abs=1e-9) and lat == pytest.approx(45.0, abs=1e-5)
    # swisstopo's worked example: E 2 700 000, N 1 100 000 -> 46 02' 38.87", 8 43' 49.79"
    lon, lat = b.lv95_to_lonlat(2700000.0, 1100000.0)
    assert lat == pytest.approx(46 + 2 / 60 + 38.87 / 3600, abs=2e-5)
    assert lon == pytest.approx(8 + 43 / 60 + 49.79 / 3600, abs=2e-5)
    lon, lat = b.webmercator_to_lonlat(0.0, 0.0)
    assert (lon, lat) == (0.0, 0.0)
    lon, lat = b.webmercator_to_lonlat(20037508.342789244, 0.0)
    assert lon == pytest.approx(180.0)


def test_nodata_is_refused():
    b = _build_module()
    z = np.ones((4, 4), np.float32)
    z[2, 1] = -9999
    with pytest.raises(SystemExit, match="row 2, col 1"):
        b.check_nodata("demo", z)
    z[2, 1] = np.nan
    with pytest.raises(SystemExit, match="nodata"):
        b.check_nodata("demo", z)
    b.check_nodata("demo", np.ones((4, 4), np.int16))
