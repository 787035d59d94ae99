"""Tensor codec and calibration to metres."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import zstandard

from passage_jax.data.codec import TensorError, decode_tensor, encode_tensor, expected_nbytes
from passage_jax.data.scene import PASSAGE_CALIBRATION, elevation_metres, normalise_elevation


def test_round_trip_is_bit_exact():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 16, 3)).astype(np.float32)
    a[0, 0, 0] = np.float32(1e-38)  # a tiny value survives
    blob = encode_tensor(a)
    b = decode_tensor(blob, 16)
    assert b.dtype == np.dtype("<f4") and b.shape == (16, 16, 3)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_frame_is_little_endian_c_order_float32():
    a = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3)
    raw = zstandard.ZstdDecompressor().decompress(encode_tensor(a))
    assert len(raw) == expected_nbytes(2) == 48
    assert struct.unpack("<12f", raw) == tuple(float(i) for i in range(12))
    # a big-endian input is converted, not reinterpreted
    b = decode_tensor(encode_tensor(a.astype(">f4")), 2)
    np.testing.assert_array_equal(b, a)


def test_undeclared_size_frame_of_right_length_decodes():
    a = np.ones((4, 4, 3), np.float32)
    blob = zstandard.ZstdCompressor(write_content_size=False).compress(a.tobytes())
    np.testing.assert_array_equal(decode_tensor(blob, 4), a)


@pytest.mark.parametrize("blob", [b"", b"not zstd at all", None])
def test_garbage_is_refused(blob):
    with pytest.raises(TensorError):
        decode_tensor(blob, 4)


def test_encode_refuses_wrong_shape():
    with pytest.raises(TensorError):
        encode_tensor(np.zeros((4, 5, 3), np.float32))


def test_metres_reconstruction_float64():
    cal = dict(PASSAGE_CALIBRATION)
    e = np.array([[0.0, 1.0], [0.1, 0.123456789]], np.float32)
    z = elevation_metres(e, cal)
    assert z.dtype == np.float64
    # hand arithmetic: e is first widened exactly to float64, then scaled
    span = 8767.0 - (-430.0)  # 9197.0
    want = [[-430.0, 8767.0],
            [-430.0 + float(np.float32(0.1)) * span, -430.0 + float(np.float32(0.123456789)) * span]]
    assert z.tolist() == want
    # computing in float32 instead would differ noticeably
    z32 = np.float32(-430.0) + e * np.float32(span)
    assert not np.array_equal(z, z32.astype(np.float64))


def test_normalise_inverts_metres_to_float32_precision():
    cal = {"min": -430.0, "max": 8767.0}
    z = np.array([[-430.0, 0.0], [1234.5, 8767.0]])
    e = normalise_elevation(z, cal)
    assert e.dtype == np.float32
    np.testing.assert_allclose(elevation_metres(e, cal), z, atol=9197.0 * 2 ** -24)


def test_a_failed_decode_leaves_the_thread_able_to_decode():
    """The decompression context is reused within a thread: a frame that fails midway
    (corrupt block, bad checksum, too much output) must not leak into the next decode,
    on this thread or another."""
    import threading

    rng = np.random.default_rng(5)
    good = rng.random((8, 8, 3)).astype(np.float32)
    blob = encode_tensor(good)
    corrupt = bytearray(blob)
    corrupt[len(corrupt) // 2] ^= 0xFF  # inside the compressed block (the checksum catches it)
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(8 * 8 * 3 * 4 + 64))
    for bad in (bytes(corrupt), bomb):
        with pytest.raises(TensorError):
            decode_tensor(bad, 8)
        np.testing.assert_array_equal(decode_tensor(blob, 8), good)
    out = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, decode_tensor(blob, 8)))
               for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(v, good) for v in out.values()) and len(out) == 4
