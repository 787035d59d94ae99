"""Canonical tiled inference: apply a tile-sized network to a scene of any size.

``tiled_apply`` cuts a ``(H, W, C)`` input into overlapping square tiles, runs every
tile (and, with ``hflip``, its reflection along the width axis) through ``apply_fn`` in
one batched call, fuses the two orientations 1:1 on the fields, and reconstructs the
``(H, W, K)`` field by window-weighted averaging (``stitch="fields"``) or by taking each
cell from the tile whose centre is nearest (``stitch="hard"``). Every index, window and
weight depends only on the static shape and settings, so the function traces under
``jax.jit`` for a given shape. See ``docs/learned.md`` ("Tiled inference").

Conventions fixed here:

* tile origins along an axis of length ``n >= tile``: ``0, stride, 2*stride, ...`` while
  the tile fits, plus ``n - tile`` when the last one does not reach the far edge;
* an axis shorter than ``tile`` is padded at its far end (bottom / right) by edge
  replication (``numpy.pad`` mode ``"edge"``) to ``tile``, and the result cropped back;
* tiles are numbered row-major over (row origin, column origin);
* ``stitch="hard"``: nearest tile centre in Euclidean distance, centre of the tile at
  origin ``o`` being ``o + (tile - 1) / 2``; ties go to the lowest tile index. The
  distance is separable, so the owner is the nearest row origin crossed with the
  nearest column origin, and the owning tile always contains the cell.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from passage_jax.checks import is_int

__all__ = [
    "CANONICAL_TILING",
    "BLENDS",
    "STITCHES",
    "WEIGHT_FLOOR",
    "WINDOW_FLOOR",
    "tile_origins",
    "tile_window",
    "tile_weights",
    "tiled_apply",
    "tiling_protocol",
]

CANONICAL_TILING: dict[str, Any] = {
    "name": "passage_jax_tiled_v1",
    "stride": "tile/2",
    "hflip": True,
    "blend": "hann",
    "stitch": "fields",
}
BLENDS = ("hann", "uniform")
STITCHES = ("fields", "hard")
WINDOW_FLOOR = 1e-3
WEIGHT_FLOOR = 1e-6


def _check_settings(tile: Any, stride: Any, blend: Any, stitch: Any) -> None:
    if not is_int(tile) or tile < 1:
        raise ValueError(f"tile must be a positive integer, got {tile!r}")
    if not is_int(stride) or not 1 <= stride <= tile:
        raise ValueError(f"stride must be an integer in [1, tile={tile}], got {stride!r}")
    if blend not in BLENDS:
        raise ValueError(f"blend must be one of {BLENDS}, got {blend!r}")
    if stitch not in STITCHES:
        raise ValueError(f"stitch must be one of {STITCHES}, got {stitch!r}")


def tile_origins(n: int, tile: int, stride: int) -> np.ndarray:
    """Tile origins along an axis of length ``n`` (``[0]`` when ``n <= tile``)."""
    if n <= tile:
        return np.zeros(1, dtype=np.int64)
    origins = list(range(0, n - tile + 1, stride))
    if origins[-1] + tile < n:
        origins.append(n - tile)
    return np.asarray(origins, dtype=np.int64)


def tile_window(tile: int, blend: str = "hann") -> np.ndarray:
    """The ``(tile, tile)`` float64 blending window (Hann floored at 1e-3, or ones)."""
    if blend == "hann":
        h = np.maximum(np.hanning(tile), WINDOW_FLOOR)
        return np.outer(h, h)
    if blend == "uniform":
        return np.ones((tile, tile))
    raise ValueError(f"blend must be one of {BLENDS}, got {blend!r}")


def _layout(shape: tuple[int, int], tile: int, stride: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    hp, wp = max(shape[0], tile), max(shape[1], tile)
    return tile_origins(hp, tile, stride), tile_origins(wp, tile, stride), hp, wp


def tile_weights(shape: tuple[int, int], *, tile: int, stride: int, blend: str = "hann") -> np.ndarray:
    """Accumulated window weight ``sum_t w_t(x)`` per cell of the (padded, then cropped)
    scene, float64 and before the 1e-6 floor; ``tiled_apply`` divides by its floor."""
    _check_settings(tile, stride, blend, "fields")
    ro, co, hp, wp = _layout((int(shape[0]), int(shape[1])), tile, stride)
    win = tile_window(tile, blend)
    acc = np.zeros((hp, wp))
    for r in ro:
        for c in co:
            acc[r:r + tile, c:c + tile] += win
    return acc[: shape[0], : shape[1]]


def _nearest_owner(n: int, origins: np.ndarray, tile: int) -> np.ndarray:
    centres = origins + (tile - 1) / 2.0
    dist = np.abs(np.arange(n)[:, None] - centres[None, :])
    return np.argmin(dist, axis=1)  # argmin returns the first (lowest) index on ties


def _tile_fields(apply_fn, tiles, hflip: bool, hflip_signs):
    """``apply_fn`` on the (n, tile, tile, C) tiles, fused 1:1 with its output on the
    reflected tiles (their channels times ``hflip_signs``) when ``hflip``."""
    if not hflip:
        return jnp.asarray(apply_fn(tiles))
    n = tiles.shape[0]
    mirrored = tiles[:, :, ::-1, :]
    if hflip_signs is not None:
        signs = np.asarray(hflip_signs, np.float64).reshape(-1)
        if signs.shape != (tiles.shape[3],):
            raise ValueError(f"hflip_signs must have one factor per channel ({tiles.shape[3]}), "
                             f"got shape {signs.shape}")
        mirrored = mirrored * jnp.asarray(signs, dtype=tiles.dtype)
    out = jnp.asarray(apply_fn(jnp.concatenate([tiles, mirrored], axis=0)))
    return 0.5 * (out[:n] + out[n:, :, ::-1, :])


def tiled_apply(
    apply_fn: Callable[[Any], Any],
    x: Any,
    *,
    tile: int,
    stride: int,
    hflip: bool = True,
    blend: str = "hann",
    stitch: str = "fields",
    hflip_signs: Any = None,
) -> Any:
    """Apply ``apply_fn`` ((n, tile, tile, C) -> (n, tile, tile, K)) to ``x`` (H, W, C)
    tile by tile and return the reconstructed (H, W, K) field (see the module doc).
    ``hflip_signs`` (None, or C factors) multiplies the channels of the reflected tiles,
    so that a channel that changes sign under the reflection (a signed column offset)
    describes the reflected tile (None: the channels are reflected as they are)."""
    _check_settings(tile, stride, blend, stitch)
    if getattr(x, "ndim", None) != 3:
        raise ValueError(f"x must have shape (H, W, C), got shape {getattr(x, 'shape', None)}")
    h, w = int(x.shape[0]), int(x.shape[1])
    if h < 1 or w < 1:
        raise ValueError(f"x must have H, W >= 1, got shape {tuple(x.shape)}")
    ro, co, hp, wp = _layout((h, w), tile, stride)
    x = jnp.asarray(x)
    if (hp, wp) != (h, w):
        x = jnp.pad(x, ((0, hp - h), (0, wp - w), (0, 0)), mode="edge")
    # static gather indices: tile t = (i, j) row-major covers rows ro[i] + a, cols co[j] + b
    tr = np.repeat(ro, len(co))
    tc = np.tile(co, len(ro))
    n = tr.size
    rows = tr[:, None] + np.arange(tile)[None, :]  # (n, tile)
    cols = tc[:, None] + np.arange(tile)[None, :]  # (n, tile)
    tiles = x[rows[:, :, None], cols[:, None, :]]  # (n, tile, tile, C)
    fields = _tile_fields(apply_fn, tiles, hflip, hflip_signs)
    if fields.ndim != 4 or fields.shape[:3] != (n, tile, tile):
        raise ValueError(
            f"apply_fn must return shape (n, {tile}, {tile}, K), got {tuple(fields.shape)}"
        )
    k = fields.shape[3]
    if stitch == "hard":
        orow = _nearest_owner(hp, ro, tile)  # (hp,) index into ro
        ocol = _nearest_owner(wp, co, tile)  # (wp,) index into co
        owner = orow[:, None] * len(co) + ocol[None, :]  # (hp, wp) tile index
        ar = np.arange(hp)[:, None] - ro[orow][:, None]
        ac = np.arange(wp)[None, :] - co[ocol][None, :]
        ar, ac = np.broadcast_to(ar, (hp, wp)), np.broadcast_to(ac, (hp, wp))
        full = fields[owner, ar, ac]  # (hp, wp, K)
        return full[:h, :w]
    win = jnp.asarray(tile_window(tile, blend), dtype=fields.dtype)
    num = jnp.zeros((hp, wp, k), dtype=fields.dtype)
    num = num.at[rows[:, :, None], cols[:, None, :]].add(fields * win[None, :, :, None])
    acc = np.zeros((hp, wp))
    wnp = tile_window(tile, blend)
    for r, c in zip(tr, tc, strict=True):
        acc[r:r + tile, c:c + tile] += wnp
    den = jnp.asarray(np.maximum(acc, WEIGHT_FLOOR), dtype=fields.dtype)
    return (num / den[:, :, None])[:h, :w]


def tiling_protocol(
    tile: int,
    stride: int | None = None,
    hflip: bool = True,
    blend: str = "hann",
    stitch: str = "fields",
) -> dict[str, Any]:
    """The resolved tiling protocol as a JSON-ready dict with a ``canonical`` flag.

    ``stride=None`` resolves to ``tile // 2`` (at least 1). Canonical means exactly
    ``CANONICAL_TILING``: stride = tile / 2 (an even tile), hflip on, Hann, fields; the
    name is then ``passage_jax_tiled_v1``, otherwise ``passage_jax_tiled_v1_noncanonical``.
    """
    if stride is None:
        stride = max(1, int(tile) // 2) if is_int(tile) else stride
    _check_settings(tile, stride, blend, stitch)
    if not isinstance(hflip, (bool, np.bool_)):
        raise ValueError(f"hflip must be a bool, got {hflip!r}")
    canonical = (
        tile % 2 == 0
        and int(stride) * 2 == int(tile)
        and bool(hflip) is CANONICAL_TILING["hflip"]
        and blend == CANONICAL_TILING["blend"]
        and stitch == CANONICAL_TILING["stitch"]
    )
    name = CANONICAL_TILING["name"] + ("" if canonical else "_noncanonical")
    return {
        "name": name,
        "tile": int(tile),
        "stride": int(stride),
        "hflip": bool(hflip),
        "blend": blend,
        "stitch": stitch,
        "canonical": bool(canonical),
    }
