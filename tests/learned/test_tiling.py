"""Tiled inference (``passage_jax.learned.tiling``) against a plain NumPy implementation
written here with explicit loops over tiles, and functions of known output."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax.graph import GraphSpec
from passage_jax.learned.guide import load_guide
from passage_jax.learned.model import HFLIP_SIGNS, features, octile_grid
from passage_jax.learned.planner import make_planner
from passage_jax.learned.tiling import (
    CANONICAL_TILING,
    tile_origins,
    tile_weights,
    tiled_apply,
    tiling_protocol,
)
from passage_jax.protocol import BudgetSpec, PlanRequest
from passage_jax.testing import make_scene

RNG = np.random.default_rng(12)


# ---- independent NumPy reference -------------------------------------------------------

def _np_origins(n, tile, stride):
    if n <= tile:
        return [0]
    out = []
    o = 0
    while o + tile <= n:
        out.append(o)
        o += stride
    if out[-1] + tile != n:
        out.append(n - tile)
    return out


def _np_window(tile, blend):
    if blend == "uniform":
        return np.ones((tile, tile))
    h = np.hanning(tile)
    h = np.where(h < 1e-3, 1e-3, h)
    w = np.zeros((tile, tile))
    for a in range(tile):
        for b in range(tile):
            w[a, b] = h[a] * h[b]
    return w


def _np_tiled(fn, x, tile, stride, hflip, blend, stitch, signs=None):
    """fn maps one (tile, tile, C) array to (tile, tile, K), float64 throughout; signs
    multiply the channels of a reflected tile."""
    h, w, _ = x.shape
    hp, wp = max(h, tile), max(w, tile)
    xp = np.pad(x, ((0, hp - h), (0, wp - w), (0, 0)), mode="edge")
    rows, cols = _np_origins(hp, tile, stride), _np_origins(wp, tile, stride)
    outs = {}
    for r in rows:
        for c in cols:
            t = xp[r:r + tile, c:c + tile]
            o = fn(t)
            if hflip:
                m = t[:, ::-1] if signs is None else t[:, ::-1] * np.asarray(signs)
                o = 0.5 * (o + fn(m)[:, ::-1])
            outs[(r, c)] = o
    k = next(iter(outs.values())).shape[-1]
    res = np.zeros((hp, wp, k))
    if stitch == "hard":
        for i in range(hp):
            for j in range(wp):
                best, best_d = None, None
                for r in rows:  # row-major tile order; strict < keeps the lowest index on ties
                    for c in cols:
                        d = (i - (r + (tile - 1) / 2)) ** 2 + (j - (c + (tile - 1) / 2)) ** 2
                        if best_d is None or d < best_d:
                            best, best_d = (r, c), d
                r, c = best
                res[i, j] = outs[(r, c)][i - r, j - c]
        return res[:h, :w]
    win = _np_window(tile, blend)
    acc = np.zeros((hp, wp))
    for (r, c), o in outs.items():
        res[r:r + tile, c:c + tile] += win[:, :, None] * o
        acc[r:r + tile, c:c + tile] += win
    return (res / np.maximum(acc, 1e-6)[:, :, None])[:h, :w]


# ---- functions of known output ----------------------------------------------------------

def _nonlocal_np(t):
    # position-dependent and mixing neighbours: differs between tiles and orientations
    a = t[..., 0] * (1.0 + np.arange(t.shape[1])[None, :] / 10.0)
    b = np.roll(t[..., 1], 1, axis=0) - t[..., 0] ** 2
    return np.stack([a, b, a * b], axis=-1)


def _nonlocal_jax(batch):
    cols = 1.0 + jnp.arange(batch.shape[2])[None, None, :] / 10.0
    a = batch[..., 0] * cols
    b = jnp.roll(batch[..., 1], 1, axis=1) - batch[..., 0] ** 2
    return jnp.stack([a, b, a * b], axis=-1)


def _jtiled(fn, x, **kw):
    run = jax.jit(lambda v: tiled_apply(fn, v, **kw))  # eager agreement: test_jit_and_eager_agree
    return np.asarray(run(jnp.asarray(x, jnp.float32)), dtype=np.float64)


CASES = [
    # (H, W, tile, stride): divisible, not divisible, smaller than tile, mixed
    (16, 16, 8, 4),
    (13, 19, 8, 4),
    (11, 9, 6, 5),
    (5, 7, 8, 4),
    (5, 20, 8, 3),
    (8, 8, 8, 4),
]


@pytest.mark.parametrize("h,w,tile,stride", CASES)
@pytest.mark.parametrize("hflip,blend", [(True, "hann"), (False, "uniform"), (False, "hann")])
def test_matches_numpy_reference_fields(h, w, tile, stride, hflip, blend):
    x = RNG.normal(size=(h, w, 2))
    got = _jtiled(_nonlocal_jax, x, tile=tile, stride=stride, hflip=hflip, blend=blend)
    want = _np_tiled(_nonlocal_np, x, tile, stride, hflip, blend, "fields")
    assert got.shape == (h, w, 3)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("h,w,tile,stride", CASES)
@pytest.mark.parametrize("hflip", [True, False])
def test_matches_numpy_reference_hard(h, w, tile, stride, hflip):
    x = RNG.normal(size=(h, w, 2))
    got = _jtiled(_nonlocal_jax, x, tile=tile, stride=stride, hflip=hflip, stitch="hard")
    want = _np_tiled(_nonlocal_np, x, tile, stride, hflip, "hann", "hard")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_hard_stitch_differs_from_fields_for_nonlocal_function():
    x = RNG.normal(size=(13, 19, 2))
    hard = _jtiled(_nonlocal_jax, x, tile=8, stride=4, hflip=False, stitch="hard")
    soft = _jtiled(_nonlocal_jax, x, tile=8, stride=4, hflip=False, stitch="fields")
    assert np.abs(hard - soft).max() > 1e-2


def test_origins():
    assert tile_origins(16, 8, 4).tolist() == [0, 4, 8]
    assert tile_origins(13, 8, 4).tolist() == [0, 4, 5]
    assert tile_origins(8, 8, 4).tolist() == [0]
    assert tile_origins(5, 8, 4).tolist() == [0]
    assert tile_origins(20, 8, 3).tolist() == [0, 3, 6, 9, 12]
    for n, t, s in [(37, 8, 3), (100, 16, 8), (9, 6, 5)]:
        assert tile_origins(n, t, s).tolist() == _np_origins(n, t, s)


@pytest.mark.parametrize("h,w,tile,stride", CASES)
@pytest.mark.parametrize("blend", ["hann", "uniform"])
def test_constant_reconstructs_exactly(h, w, tile, stride, blend):
    def const(b):
        return jnp.full(b.shape[:3] + (2,), 3.25, b.dtype)

    got = _jtiled(const, np.zeros((h, w, 1)), tile=tile, stride=stride, blend=blend)
    np.testing.assert_allclose(got, 3.25, rtol=1e-6, atol=0)


@pytest.mark.parametrize("tile,stride", [(4, 2), (6, 1), (8, 4), (8, 7), (16, 8), (5, 3)])
@pytest.mark.parametrize("stitch", ["fields", "hard"])
def test_pointwise_independent_of_tiling(tile, stride, stitch):
    x = RNG.normal(size=(14, 11, 2))

    def pointwise(b):
        return jnp.stack([jnp.tanh(b[..., 0]) * b[..., 1], b[..., 0] + 2.0], axis=-1)

    want = np.stack([np.tanh(x[..., 0]) * x[..., 1], x[..., 0] + 2.0], axis=-1)
    got = _jtiled(pointwise, x, tile=tile, stride=stride, stitch=stitch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_single_tile_equals_plain_call():
    x = jnp.asarray(RNG.normal(size=(8, 8, 2)), jnp.float32)
    plain = np.asarray(_nonlocal_jax(x[None]))[0]
    got = np.asarray(tiled_apply(_nonlocal_jax, x, tile=8, stride=4, hflip=False))
    np.testing.assert_allclose(got, plain, rtol=1e-6, atol=1e-6)
    # the plain call is not reflection-equivariant, so hflip must change this one
    flipped = np.asarray(tiled_apply(_nonlocal_jax, x, tile=8, stride=4, hflip=True))
    assert np.abs(flipped - plain).max() > 1e-2


def test_hflip_changes_nothing_for_reflection_equivariant_function():
    x = RNG.normal(size=(13, 19, 2))

    def equivariant(b):  # symmetric 3-tap blur along width with reflect padding, plus a square
        p = jnp.pad(b, ((0, 0), (0, 0), (1, 1), (0, 0)), mode="reflect")
        blur = 0.25 * p[:, :, :-2] + 0.5 * p[:, :, 1:-1] + 0.25 * p[:, :, 2:]
        return jnp.concatenate([blur, b[..., :1] ** 2], axis=-1)

    a = _jtiled(equivariant, x, tile=8, stride=4, hflip=True)
    b = _jtiled(equivariant, x, tile=8, stride=4, hflip=False)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    want = _np_tiled(lambda t: np.asarray(equivariant(jnp.asarray(t)[None]))[0], x, 8, 4, True, "hann",
                     "fields")
    np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("h,w,tile,stride", CASES + [(64, 64, 16, 8), (33, 47, 16, 8)])
@pytest.mark.parametrize("blend", ["hann", "uniform"])
def test_weights_positive_and_floor_only_where_needed(h, w, tile, stride, blend):
    acc = tile_weights((h, w), tile=tile, stride=stride, blend=blend)
    want = np.zeros((max(h, tile), max(w, tile)))
    win = _np_window(tile, blend)
    for r in _np_origins(max(h, tile), tile, stride):
        for c in _np_origins(max(w, tile), tile, stride):
            want[r:r + tile, c:c + tile] += win
    np.testing.assert_allclose(acc, want[:h, :w], rtol=1e-12, atol=0)
    assert (acc > 0).all()
    # the 1e-6 floor only bites at cells covered solely by the floored corner of one Hann tile
    below = acc < 1e-6 * (1 + 1e-9)
    if blend == "uniform":
        assert not below.any()
    else:
        assert acc.min() >= 1e-6 * (1 - 1e-9)
        assert below[0, 0]
        interior = np.ones_like(below)
        interior[0, :] = interior[-1, :] = interior[:, 0] = interior[:, -1] = False
        assert not (below & interior).any()


def test_jit_and_eager_agree():
    x = jnp.asarray(RNG.normal(size=(13, 19, 2)), jnp.float32)
    for stitch in ("fields", "hard"):
        kw = dict(tile=8, stride=4, hflip=True, blend="hann", stitch=stitch)
        eager = np.asarray(tiled_apply(_nonlocal_jax, x, **kw))
        jitted = np.asarray(jax.jit(lambda v, kw=kw: tiled_apply(_nonlocal_jax, v, **kw))(x))
        np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)


def test_one_batched_call():
    calls = []

    def counting(b):
        calls.append(b.shape)
        return b[..., :1] * 2.0

    x = jnp.asarray(RNG.normal(size=(13, 19, 2)), jnp.float32)
    tiled_apply(counting, x, tile=8, stride=4, hflip=True)
    # 2 row origins (0, 4, 5) x (0, 4, 8, 11) = 3 x 4 tiles, both orientations, one call
    assert calls == [(24, 8, 8, 2)]


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(tile=0, stride=1), "tile"),
        (dict(tile=8, stride=0), "stride"),
        (dict(tile=8, stride=9), "stride"),
        (dict(tile=8, stride=4, blend="gauss"), "blend"),
        (dict(tile=8, stride=4, stitch="logits"), "stitch"),
    ],
)
def test_bad_settings_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        tiled_apply(_nonlocal_jax, jnp.zeros((8, 8, 2)), **kw)


def test_bad_input_shape():
    with pytest.raises(ValueError, match="x must"):
        tiled_apply(_nonlocal_jax, jnp.zeros((8, 8)), tile=4, stride=2)
    with pytest.raises(ValueError, match="apply_fn"):
        tiled_apply(lambda b: b[:, :2], jnp.zeros((8, 8, 2)), tile=4, stride=2)


def test_protocol():
    p = tiling_protocol(64)
    assert p == {"name": "passage_jax_tiled_v1", "tile": 64, "stride": 32, "hflip": True,
                 "blend": "hann", "stitch": "fields", "canonical": True}
    assert CANONICAL_TILING["name"] == p["name"]
    assert tiling_protocol(64, 32, True, "hann", "fields")["canonical"]
    for args in [(64, 16), (64, 32, False), (64, 32, True, "uniform"), (64, 32, True, "hann", "hard"),
                 (63, 31), (63,)]:
        q = tiling_protocol(*args)
        assert not q["canonical"], args
        assert q["name"] == "passage_jax_tiled_v1_noncanonical"
    with pytest.raises(ValueError, match="stride"):
        tiling_protocol(64, 65)
    with pytest.raises(ValueError, match="hflip"):
        tiling_protocol(64, 32, "yes")


# ---- the learned planner through tiled inference ---------------------------------------

def _scene_request(seed, n):
    scene, _ = make_scene(np.random.default_rng(seed), n, f"t{seed}")
    return PlanRequest(sample_id=scene.id, elevation=scene.elevation_m, obstacles=scene.obstacles,
                       start=scene.start, goal=scene.goal, cost_model="elevation", cost_weight=62.4,
                       graph=GraphSpec(cost_model="elevation", cost_weight=62.4), budget=BudgetSpec())


def test_network_guide_tiled_matches_independent_reconstruction():
    plain = load_guide("shipped:1234")
    req = _scene_request(5, 48)
    # a single tile covering the scene without flip is the plain call
    one = load_guide("shipped:1234", tiling={"tile": 48, "hflip": False})
    np.testing.assert_allclose(one(req), plain(req), rtol=1e-5)
    # canonical 32-tiling: the raw field is reconstructed as the NumPy reference does, then
    # turned into a cost-to-go exactly as the untiled guide turns its own output
    tiled = load_guide("shipped:1234", tiling=tiling_protocol(32))
    assert tiled.tiling["canonical"] and tiled.tiling["stride"] == 16
    x = np.asarray(features(req), np.float64)

    def net(t):
        return np.asarray(plain.apply_batch(t[None].astype(np.float32))[0], np.float64)[..., None]

    raw = _np_tiled(net, x, 32, 16, True, "hann", "fields", signs=HFLIP_SIGNS)[..., 0]
    oct_ = np.asarray(octile_grid(req.shape, req.goal, jnp.float32), np.float64)
    want = np.exp(raw) * oct_ * float(req.graph.pixel_size_m)
    want[req.goal] = 0.0
    want[np.asarray(req.obstacles, bool)] = np.inf
    got = tiled(req)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4)
    assert np.abs(got[fin] - plain(req)[fin]).max() > 0  # tiling does change the field


def test_make_planner_tile_plans_and_rejects_misuse():
    req = _scene_request(6, 40)
    planner = make_planner(checkpoint="shipped:1234", tile=32, stride=8, stitch="hard",
                           stages=[{"descent": {}}, {"guided_astar": {}}, {"exact": {}}])
    assert planner.guide.tiling == tiling_protocol(32, 8, True, "hann", "hard")
    assert not planner.guide.tiling["canonical"]
    res = planner.plan(req)
    path = np.asarray(res.path)
    assert res.status == "ok" and tuple(path[0]) == tuple(req.start) and tuple(path[-1]) == tuple(req.goal)
    assert (np.abs(np.diff(path, axis=0)).max(axis=1) == 1).all()  # 8-connected steps
    assert not np.asarray(req.obstacles, bool)[path[:, 0], path[:, 1]].any()
    with pytest.raises(ValueError, match="without tile"):
        make_planner(checkpoint="shipped:1234", stride=8)
    with pytest.raises(ValueError, match="stride"):
        make_planner(checkpoint="shipped:1234", tile=32, stride=40)
    with pytest.raises(ValueError, match="tiling"):
        load_guide("shipped:1234", tiling={"stride": 4})


def test_the_reflected_tile_is_the_reflected_scene():
    """hflip reflects the guide's inputs as the mirrored scene would give them: features of
    the request mirrored along its width are the reflected features with goal_dx negated
    (HFLIP_SIGNS), so one flipped tile covering the scene averages the network on the
    scene and on its mirror image, computed here from the mirrored request itself."""
    import dataclasses  # noqa: PLC0415
    req = _scene_request(7, 32)
    w = req.shape[1]
    mirror = dataclasses.replace(req, elevation=req.elevation[:, ::-1].copy(),
                                 obstacles=req.obstacles[:, ::-1].copy(),
                                 start=(req.start[0], w - 1 - req.start[1]),
                                 goal=(req.goal[0], w - 1 - req.goal[1]))
    x, xm = np.asarray(features(req)), np.asarray(features(mirror))
    np.testing.assert_allclose(xm, x[:, ::-1] * np.asarray(HFLIP_SIGNS), atol=1e-6)
    assert np.abs(x[..., 3]).max() > 0  # goal_dx is not all zero, so the sign matters
    plain = load_guide("shipped:1234")
    flipped = load_guide("shipped:1234", tiling={"tile": 32, "hflip": True})
    raw = 0.5 * (np.asarray(plain.apply_batch(x[None])[0], np.float64)
                 + np.asarray(plain.apply_batch(xm[None])[0], np.float64)[:, ::-1])
    want = np.exp(raw) * np.asarray(octile_grid(req.shape, req.goal, jnp.float32), np.float64) * 30.0
    got = flipped(req)
    fin = np.isfinite(got) & (got > 0)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4)
    with pytest.raises(ValueError, match="hflip_signs"):
        tiled_apply(lambda b: b[..., :1], jnp.zeros((8, 8, 3)), tile=8, stride=4, hflip_signs=(1.0, -1.0))
