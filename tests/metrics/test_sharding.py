"""score_routes and the metric kernels on a batch axis sharded over several devices.

tests/conftest.py gives the CPU backend 4 devices; scoring sharded over them
must give the unsharded results (flags and counts exactly; floats to a few
ulp, the same spread a different batch size gives on one device), and the
kernels must really run on all 4 devices.
"""
import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

import passage_jax.data as data
import passage_jax.metrics.host_stream as host_stream
from passage_jax.graph import MODEL_INDEX, route_cost
from passage_jax.metrics import (
    METRIC_KEYS,
    Route,
    TaskArrays,
    primary_metrics_jax,
    resolve_sharding,
    score_routes,
    score_tasks,
    sharding_devices,
)
from passage_jax.testing import candidate_set

N_DEV = 4
pytestmark = pytest.mark.skipif(
    jax.device_count() != N_DEV,
    reason=f"needs {N_DEV} devices (tests/conftest.py sets XLA_FLAGS="
           f"--xla_force_host_platform_device_count={N_DEV} before JAX starts); "
           f"found {jax.device_count()}")

#: why a test is skipped under PASSAGE_JAX_NO_X64=1 (tests/conftest.py)
GEOMETRY_F64 = ("float64 geometry to 1e-12 (the float32 geometry is checked against the float64 "
                "path within GEOMETRY_RTOL_FLOAT32 in tests/test_no_x64.py)")
FLOATS = ("predicted_cost", "regret", "assd", "h95", "path_iou")


def batch_sharding():
    return NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), PartitionSpec("batch"))


def assert_same(a, b, where="", dtypes=True):
    """Every per-task field equal: flags, counts and malformed exactly, floats
    with NaN in the same places and otherwise within 1e-12 (regret near 0 is an
    absolute quantity: atol)."""
    assert set(a) == set(b)
    for k in METRIC_KEYS + ("malformed",):
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.shape == y.shape and (x.dtype == y.dtype or not dtypes), (where, k)
        if k in FLOATS:
            assert np.array_equal(np.isnan(x), np.isnan(y)), (where, k)
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12, err_msg=f"{where} {k}")
        else:
            assert np.array_equal(x, y), (where, k)
    assert list(a["problem"]) == list(b["problem"]), where


@pytest.fixture(scope="module")
def material():
    """Candidates on the shipped cohort's 64-pixel test scenes: exact, other
    objective, detoured and broken routes, plus malformed and out-of-bounds
    ones, a failed request and a non-positive c*; 4k + 3 tasks."""
    scenes = data.load_scenes(data.shipped_cohort_root(), 64, "test")
    assert scenes
    rng = np.random.default_rng(7)
    tasks, cstar, cands = [], [], []
    for scene in scenes[:6]:
        for (obj, var) in sorted(scene.routes):
            task = scene.task(obj, var)
            for c in candidate_set(scene, obj, var, rng, 8):
                tasks.append(task)
                cstar.append(scene.metadata["c_star"][f"{obj}/{var}"])
                cands.append(c)
    t0 = tasks[0]
    extra = [None, np.array([[0.0, 1.0]]), np.array([[-1, 0], [0, 0]], np.int32),
             np.zeros((0, 2), np.int32), t0.route]
    for c in extra:
        tasks.append(t0)
        cstar.append(cstar[0])
        cands.append(c)
    n = len(tasks)
    n -= (n - 3) % N_DEV  # a batch size that is not a multiple of the devices
    tasks, cands = tasks[-n:], cands[-n:]
    cstar = np.array(cstar[-n:], np.float64)
    cstar[-1] = 0.0  # regret undefined (NaN) for an otherwise valid route
    ok = np.ones(n, bool)
    ok[1] = False
    assert n % N_DEV == 3
    base = score_routes(cands, tasks, cstar, ok)
    return tasks, cands, cstar, ok, base


def test_unsharded_reference_is_meaningful(material):
    """The comparison covers valid, invalid, malformed and NaN-regret rows, and
    the valid rows' costs equal an independent recosting (graph stage, NumPy)."""
    tasks, cands, cstar, ok, base = material
    valid = base["valid_path"]
    assert 0.3 < valid.mean() < 0.95
    assert base["malformed"].sum() >= 2 and np.isnan(base["regret"]).sum() >= 1
    assert (~base["connected_path"]).sum() >= 5
    for i in np.flatnonzero(valid)[:40]:
        t = tasks[i]
        want = route_cost(cands[i], t.elevation_m, t.objective, t.weight)
        np.testing.assert_allclose(base["predicted_cost"][i], want, rtol=1e-12)


def test_named_sharding_matches_unsharded_and_runs_on_all_devices(material, monkeypatch):
    tasks, cands, cstar, ok, base = material
    seen = []
    packed = host_stream.score_tasks_packed_exported

    def spy(*args, **kw):
        res = packed(*args, **kw)
        cells = args[0].cells
        seen.append((cells.shape[0], cells.sharding, res[0].sharding, res[1].sharding))
        return res

    monkeypatch.setattr(host_stream, "score_tasks_packed_exported", spy)
    got = score_routes(cands, tasks, cstar, ok, sharding=batch_sharding())
    assert_same(base, got, "NamedSharding")
    assert len(seen) >= 2  # several buckets
    devices = set(jax.devices())
    for rows, s_in, s_flags, s_values in seen:
        assert rows % N_DEV == 0
        for s in (s_in, s_flags, s_values):
            assert s.device_set == devices
            # each device holds a quarter of the batch rows, not a replica
            assert s.shard_shape((rows, 2))[0] == rows // N_DEV


def test_auto_matches_unsharded(material, monkeypatch):
    tasks, cands, cstar, ok, base = material
    s = resolve_sharding("auto")
    assert isinstance(s, NamedSharding) and s.num_devices == N_DEV
    assert s.spec == PartitionSpec("batch")
    assert sharding_devices("auto") == [f"cpu:{d.id}" for d in jax.devices()]
    assert sharding_devices(None) == [f"cpu:{jax.devices()[0].id}"]
    got = score_routes(cands, tasks, cstar, ok, sharding="auto")
    assert_same(base, got, "auto")
    # with one local device, "auto" is the unsharded path
    monkeypatch.setattr(jax, "local_devices", lambda: jax.devices()[:1])
    assert resolve_sharding("auto") is None


@pytest.mark.parametrize("n", [1, 3, 6])
def test_fewer_tasks_than_devices_and_ragged_tail(material, n):
    """Padding rows (a batch smaller than, or not a multiple of, the device
    count) never change a result."""
    tasks, cands, cstar, ok, base = material
    pick = np.arange(n) * 7 % len(tasks)
    got = score_routes([cands[i] for i in pick], [tasks[i] for i in pick], cstar[pick], ok[pick],
                       sharding=batch_sharding())
    assert_same({k: v[pick] for k, v in base.items()}, got, f"n={n}")


def test_single_device_sharding_and_bad_values(material):
    tasks, cands, cstar, ok, base = material
    got = score_routes(cands[:9], tasks[:9], cstar[:9], ok[:9],
                       sharding=SingleDeviceSharding(jax.devices()[0]))
    assert_same({k: v[:9] for k, v in base.items()}, got, "single device")
    with pytest.raises(ValueError, match="'auto'"):
        score_routes(cands[:2], tasks[:2], cstar[:2], ok[:2], sharding="all")
    with pytest.raises(ValueError, match="int"):
        score_routes(cands[:2], tasks[:2], cstar[:2], ok[:2], sharding=4)


@pytest.mark.needs_float64(GEOMETRY_F64)
def test_score_tasks_and_reducer_on_sharded_inputs(material):
    """The padded full-grid kernel and the jittable reducer take sharded inputs
    and give the unsharded answer (and host score_routes' answer)."""
    tasks, cands, cstar, ok, base = material
    pick = np.arange(11)  # not a multiple of 4: padded here by hand with copies
    B, L = 12, 128
    rows = np.r_[pick, pick[:1]]
    cand = np.zeros((B, L, 2), np.int32)
    ref = np.zeros((B, L, 2), np.int32)
    cl = np.zeros(B, np.int32)
    rl = np.zeros(B, np.int32)
    for j, i in enumerate(rows):
        c = np.asarray(cands[i]) if not base["malformed"][i] else np.zeros((0, 2), np.int32)
        assert len(c) <= L and len(tasks[i].route) <= L
        cand[j, :len(c)], cl[j] = c, len(c)
        r = tasks[i].route
        ref[j, :len(r)], rl[j] = r, len(r)
    t = [tasks[i] for i in rows]
    task = TaskArrays(
        elevation=np.stack([x.elevation_m for x in t]),
        obstacles=np.stack([np.asarray(x.obstacles, bool) for x in t]),
        start=np.array([x.scene.start for x in t], np.int32),
        goal=np.array([x.scene.goal for x in t], np.int32),
        cost_model=np.array([MODEL_INDEX[x.objective] for x in t], np.int32),
        weight=np.array([x.weight for x in t], np.float64), c_star=cstar[rows])
    args = (Route(cand, cl), Route(ref, rl), task, ok[rows], ~base["malformed"][rows])
    with jax.enable_x64(True):
        plain = jax.device_get(score_tasks(*args)).to_dict()
        placed = jax.device_put(args, batch_sharding())
        out = score_tasks(*placed)
        assert out.regret.sharding.device_set == set(jax.devices())
        sharded = jax.device_get(out).to_dict()
        mask = np.arange(B) < len(pick)
        per = {k: plain[k] for k in plain}
        red_plain = jax.device_get(primary_metrics_jax(per, mask))
        red_sharded = jax.device_get(primary_metrics_jax(
            jax.device_put(per, batch_sharding()), jax.device_put(mask, batch_sharding())))
    assert_same({**plain, "malformed": base["malformed"][rows], "problem": rows},
                {**sharded, "malformed": base["malformed"][rows], "problem": rows}, "score_tasks")
    want = {k: v[pick] for k, v in base.items()}
    got = {k: v[:len(pick)] for k, v in sharded.items()}
    got.update(malformed=want["malformed"], problem=want["problem"])
    assert_same(want, got, "score_tasks vs score_routes", dtypes=False)
    for k, v in red_plain.items():
        if k == "regret_summary":
            for kk in v:
                np.testing.assert_allclose(red_sharded[k][kk], v[kk], rtol=1e-12, err_msg=kk)
        else:
            np.testing.assert_allclose(red_sharded[k], v, rtol=1e-12, err_msg=k)
    # the reducer counts only the first 11 rows (the copy of row 0 is masked out)
    assert int(red_sharded["n_tasks"]) == len(pick)
    assert int(red_sharded["n_path_valid"]) == int(base["valid_path"][pick].sum())
