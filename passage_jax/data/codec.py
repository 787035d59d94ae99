"""Tensor codec: one Zstandard frame of a little-endian float32 (N, N, 3) array.

A tensor blob must be exactly one Zstandard frame and nothing else: no skippable
frame, no second frame, no trailing bytes. Everything is checked from the frame
header and the block headers *before* anything is decompressed (declared content
size, window size, the frame's exact length), and decompression never produces
more than N*N*3*4 (+1 probe) bytes, so a decompression bomb or an oversized frame
is refused cheaply.
"""
from __future__ import annotations

import io
import threading

import numpy as np
import zstandard

__all__ = [
    "CHANNELS", "MAX_WINDOW_BYTES", "TensorError", "expected_nbytes", "max_blob_bytes", "frame_length",
    "encode_tensor", "decode_tensor",
]

CHANNELS = 3
_DTYPE = np.dtype("<f4")
_MAGIC = b"\x28\xb5\x2f\xfd"
_SKIPPABLE = range(0x184D2A50, 0x184D2A60)
_BLOCK_MAX = 128 * 1024
#: Largest back-reference window a tensor frame may declare (zstd's level-19 window);
#: a frame of an N x N x 3 tensor larger than this may use a window of its own size.
MAX_WINDOW_BYTES = 1 << 23


#: each thread's decompressors, one per window limit: a decompression context is reused
#: rather than made per tensor (a fresh context allocates its window buffer anew, about a
#: third of the time of decoding a 256² tensor); a context is not shared between threads
_LOCAL = threading.local()


def _decompressor(max_window: int) -> zstandard.ZstdDecompressor:
    """This thread's decompressor for ``max_window`` (each use starts a new stream)."""
    cache = getattr(_LOCAL, "by_window", None)
    if cache is None:
        cache = _LOCAL.by_window = {}
    d = cache.get(max_window)
    if d is None:
        d = cache[max_window] = zstandard.ZstdDecompressor(max_window_size=max_window)
    return d


class TensorError(ValueError):
    """A tensor blob is malformed (wrong size, not a Zstandard frame, ...)."""


def expected_nbytes(n: int) -> int:
    return n * n * CHANNELS * _DTYPE.itemsize


def max_blob_bytes(n: int) -> int:
    """Most bytes a tensor blob for resolution ``n`` may hold: twice the raw size plus
    a little (a Zstandard frame of incompressible data is the raw size plus block
    headers); a longer blob is refused before its blocks are walked."""
    return 2 * expected_nbytes(n) + 4096


def encode_tensor(arr: np.ndarray, level: int = 10) -> bytes:
    """Compress an (N, N, 3) array as one Zstandard frame (content size and checksum
    declared, so a flipped byte is caught on decode)."""
    a = np.ascontiguousarray(arr, dtype=_DTYPE)
    if a.ndim != 3 or a.shape[0] != a.shape[1] or a.shape[2] != CHANNELS:
        raise TensorError(f"tensor must have shape (N, N, 3), got {a.shape}")
    compressor = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
    return compressor.compress(a.tobytes())


def _check_magic(blob: bytes) -> None:
    if len(blob) >= 4 and int.from_bytes(blob[:4], "little") in _SKIPPABLE:
        raise TensorError("tensor starts with a skippable Zstandard frame; exactly one data frame "
                          "is allowed")
    if blob[:4] != _MAGIC:
        raise TensorError(f"tensor is not a Zstandard frame (it starts with {blob[:4].hex() or 'nothing'}, "
                          f"not the frame magic {_MAGIC.hex()})")


def frame_length(blob: bytes) -> int:
    """Bytes of the Zstandard frame at the start of ``blob``, from its frame header and
    block headers (nothing is decompressed); TensorError if the frame is truncated or
    a block header is malformed."""
    try:
        pos = zstandard.frame_header_size(blob)
    except zstandard.ZstdError as e:
        raise TensorError(f"tensor frame header is malformed: {e}") from None
    checksum = 4 if blob[4] & 0x04 else 0
    while True:
        if pos + 3 > len(blob):
            raise TensorError(f"tensor frame does not decompress: it is truncated (a block header at "
                              f"byte {pos} runs past the {len(blob)}-byte blob)")
        header = int.from_bytes(blob[pos:pos + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise TensorError(f"tensor frame has a block of the reserved type at byte {pos}")
        if kind == 2 and size > _BLOCK_MAX:
            raise TensorError(f"tensor frame has a {size}-byte compressed block at byte {pos}, more "
                              f"than the {_BLOCK_MAX} a block may hold")
        pos += 3 + (1 if kind == 1 else size)
        if last:
            break
    end = pos + checksum
    if end > len(blob):
        raise TensorError(f"tensor frame does not decompress: it is truncated (it needs {end} bytes, "
                          f"the blob holds {len(blob)})")
    return end


def _check_frame(blob: bytes, n: int) -> None:
    """Header checks of the one frame a tensor blob holds, before any decompression."""
    want = expected_nbytes(n)
    _check_magic(blob)
    try:
        params = zstandard.get_frame_parameters(blob)
    except zstandard.ZstdError as e:
        raise TensorError(f"tensor is not a Zstandard frame: {e}") from None
    declared = params.content_size
    if declared not in (0, zstandard.CONTENTSIZE_UNKNOWN) and declared != want:
        raise TensorError(
            f"tensor frame declares {declared} bytes; a {n}x{n}x3 float32 tensor needs {want}")
    window = max(MAX_WINDOW_BYTES, want)
    if params.window_size > window:
        raise TensorError(f"tensor frame declares a {params.window_size}-byte window, more than the "
                          f"{window} allowed for a {n}x{n}x3 float32 tensor")
    end = frame_length(blob)
    if end < len(blob):
        rest = blob[end:]
        what = ("a second Zstandard frame" if rest[:4] == _MAGIC
                or (len(rest) >= 4 and int.from_bytes(rest[:4], "little") in _SKIPPABLE)
                else "trailing data")
        raise TensorError(f"tensor blob holds {len(rest)} byte(s) of {what} after its {end}-byte "
                          f"Zstandard frame; exactly one frame and nothing else is allowed")


def decode_tensor(blob: bytes, n: int) -> np.ndarray:
    """Decode a tensor blob for resolution ``n``.

    The blob must be exactly one Zstandard frame (see the module docstring); its
    declared content size, window and length are checked *before* anything is
    allocated for it, and decompression never produces more than N*N*3*4 (+1 probe)
    bytes.
    """
    want = expected_nbytes(n)
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TensorError(f"tensor is {type(blob).__name__}, not bytes")
    size = memoryview(blob).nbytes
    if size > max_blob_bytes(n):
        raise TensorError(f"tensor blob is {size} bytes, more than the {max_blob_bytes(n)} a "
                          f"frame of a {n}x{n}x3 float32 tensor can need")
    blob = bytes(blob)
    _check_frame(blob, n)
    try:
        decompressor = _decompressor(max(MAX_WINDOW_BYTES, want))
        reader = decompressor.stream_reader(io.BytesIO(blob), read_across_frames=False)
        raw = reader.read(want + 1)
    except zstandard.ZstdError as e:
        raise TensorError(f"tensor frame does not decompress: {e}") from None
    if len(raw) != want:
        what = "more than" if len(raw) > want else f"{len(raw)} bytes, not"
        raise TensorError(f"tensor decompresses to {what} the {want} bytes of a {n}x{n}x3 float32 tensor")
    return np.frombuffer(raw, dtype=_DTYPE).reshape(n, n, CHANNELS)
