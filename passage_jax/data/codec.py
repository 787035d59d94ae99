"""Tensor codec: one Zstandard frame of a little-endian float32 (N, N, 3) array."""
from __future__ import annotations

import io

import numpy as np
import zstandard

__all__ = ["CHANNELS", "TensorError", "expected_nbytes", "encode_tensor", "decode_tensor"]

CHANNELS = 3
_DTYPE = np.dtype("<f4")


class TensorError(ValueError):
    """A tensor blob is malformed (wrong size, not a Zstandard frame, ...)."""


def expected_nbytes(n: int) -> int:
    return n * n * CHANNELS * _DTYPE.itemsize


def encode_tensor(arr: np.ndarray, level: int = 10) -> bytes:
    """Compress an (N, N, 3) array as one Zstandard frame (content size and checksum
    declared, so a flipped byte is caught on decode)."""
    a = np.ascontiguousarray(arr, dtype=_DTYPE)
    if a.ndim != 3 or a.shape[0] != a.shape[1] or a.shape[2] != CHANNELS:
        raise TensorError(f"tensor must have shape (N, N, 3), got {a.shape}")
    compressor = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
    return compressor.compress(a.tobytes())


def decode_tensor(blob: bytes, n: int) -> np.ndarray:
    """Decode a tensor blob for resolution ``n``.

    The frame's declared content size is checked *before* anything is allocated for
    it, and decompression never produces more than N*N*3*4 (+1 probe) bytes, so a
    decompression bomb or an oversized frame is refused cheaply.
    """
    want = expected_nbytes(n)
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TensorError(f"tensor is {type(blob).__name__}, not bytes")
    blob = bytes(blob)
    try:
        params = zstandard.get_frame_parameters(blob)
    except zstandard.ZstdError as e:
        raise TensorError(f"tensor is not a Zstandard frame: {e}") from None
    declared = params.content_size
    if declared not in (0, zstandard.CONTENTSIZE_UNKNOWN) and declared != want:
        raise TensorError(
            f"tensor frame declares {declared} bytes; a {n}x{n}x3 float32 tensor needs {want}")
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob), read_across_frames=False)
        raw = reader.read(want + 1)
    except zstandard.ZstdError as e:
        raise TensorError(f"tensor frame does not decompress: {e}") from None
    if len(raw) != want:
        what = "more than" if len(raw) > want else f"{len(raw)} bytes, not"
        raise TensorError(f"tensor decompresses to {what} the {want} bytes of a {n}x{n}x3 float32 tensor")
    return np.frombuffer(raw, dtype=_DTYPE).reshape(n, n, CHANNELS)
