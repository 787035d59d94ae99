"""The real elevation rasters the project ships (see ``ATTRIBUTION.md`` here).

Each raster is stored as ``<key>.npz`` holding one int16 array ``q``; metres are
``offset_m + scale_m * q`` (``scale_m`` 1 m for the native-integer SRTM-like
rasters, finer for the float lidar/grid rasters so their low relief is not
terraced). ``provenance.json`` records, per raster, the source package, version,
member path, the sha256 of the download, of the member and of the bundle file,
the georeference (corner lat/lon, bounds, the main 1-degree tile) and the native
cell size. ``scripts/build_terrain.py`` rebuilds the bundle.
"""
from __future__ import annotations

import copy
import functools
import json
import zipfile
from pathlib import Path

import numpy as np

from passage_jax.fileio import check_sha256

__all__ = ["RASTERS", "BUNDLE_DIR", "TerrainError", "load_raster", "raster_info", "provenance"]

BUNDLE_DIR = Path(__file__).resolve().parent
PROVENANCE_FILE = BUNDLE_DIR / "provenance.json"


class TerrainError(ValueError):
    """The shipped terrain bundle is missing, altered or asked for an unknown key."""


@functools.lru_cache(maxsize=1)
def _provenance() -> dict:
    try:
        return json.loads(PROVENANCE_FILE.read_text())
    except FileNotFoundError:
        raise TerrainError(f"{PROVENANCE_FILE} is missing; rebuild with scripts/build_terrain.py") from None


def provenance() -> dict:
    """A copy of the bundle's ``provenance.json``."""
    return copy.deepcopy(_provenance())


#: Keys of the shipped rasters (sorted).
RASTERS: tuple[str, ...] = tuple(_provenance()["rasters"])


def raster_info(key: str) -> dict:
    """Provenance and georeference of one raster (a copy; no pixel data is read)."""
    rasters = _provenance()["rasters"]
    if key not in rasters:
        raise TerrainError(f"unknown raster {key!r}; shipped rasters: {list(rasters)}")
    return copy.deepcopy(rasters[key])


@functools.cache
def _load_checked(key: str) -> np.ndarray:
    info = raster_info(key)
    path = BUNDLE_DIR / info["bundle_file"]
    check_sha256(path, info["bundle_sha256"], TerrainError, what="terrain bundle",
                 recorded_by="provenance.json", remedy="; rebuild it with scripts/build_terrain.py")
    try:
        with np.load(path, allow_pickle=False) as d:
            q = d["q"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise TerrainError(f"{path}: cannot read array 'q': {e}") from None
    if q.dtype != np.int16 or list(q.shape) != list(info["shape"]):
        raise TerrainError(f"{path}: array 'q' is {q.dtype} {q.shape}, provenance says int16 "
                           f"{tuple(info['shape'])}")
    z = np.float64(info["offset_m"]) + q.astype(np.float64) * np.float64(info["scale_m"])
    z.setflags(write=False)
    return z


def load_raster(key: str) -> tuple[np.ndarray, dict]:
    """Elevation of a shipped raster in metres (float64, (rows, cols)) and its info.

    The bundle file's sha256 is checked against ``provenance.json`` first; a
    mismatch is a :class:`TerrainError`. The info dict holds the provenance entry:
    ``key``, ``package``, ``version``, ``member``, ``shape``, ``native_cell_m``,
    ``native_cell_yx_m``, ``bounds`` (lat/lon), ``corners_lat_lon``,
    ``main_tile`` ([lat, lon] south-west corner), ``scale_m``, ``offset_m``, ...
    The returned array is a fresh writable copy.
    """
    z = _load_checked(key)
    return z.copy(), raster_info(key)

