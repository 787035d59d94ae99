"""The reading fast paths: a tensor's planes checked in a few passes (the same verdict
and message as the detailed checks), markers found in flat index order, and the
packages' names imported on first use (a command loads only what it uses)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from passage_jax.data.codec import encode_tensor
from passage_jax.data.scene import elevation_bounds, elevation_metres
from passage_jax.data.validate import DataError, RowRef, decode_checked, decode_planes, marker_cells
from passage_jax.exports import lazy_exports

N = 16
REF = RowRef(file="part-00000.parquet", row=3, id="s-3")


def _tensor(rng) -> np.ndarray:
    t = np.zeros((N, N, 3), np.float32)
    t[..., 0] = rng.random((N, N), dtype=np.float32)
    t[..., 2] = rng.random((N, N)) < 0.2
    t[2, 3, 1], t[11, 7, 1] = 1, -1
    t[2, 3, 2] = t[11, 7, 2] = 0
    return t


def _message(fn, blob) -> str | None:
    try:
        fn(blob, N, REF)
    except DataError as e:
        return str(e)
    return None


BREAKS = {
    "nan elevation": lambda t: t.__setitem__((4, 5, 0), np.nan),
    "inf marker": lambda t: t.__setitem__((0, 1, 1), np.inf),
    "nan obstacle": lambda t: t.__setitem__((9, 9, 2), np.nan),
    "e below 0": lambda t: t.__setitem__((1, 1, 0), -1e-7),
    "e above 1": lambda t: t.__setitem__((15, 0, 0), 1.0000001),
    "obstacle 0.5": lambda t: t.__setitem__((3, 3, 2), 0.5),
    "obstacle -1": lambda t: t.__setitem__((3, 4, 2), -1.0),
    "marker 2": lambda t: t.__setitem__((6, 6, 1), 2.0),
    "marker 0.5 and e nan": lambda t: (t.__setitem__((6, 6, 1), 0.5), t.__setitem__((7, 7, 0), np.nan)),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_planes_fail_with_the_detailed_checks_message(name):
    t = _tensor(np.random.default_rng(7))
    BREAKS[name](t)
    blob = encode_tensor(t)
    want = _message(decode_checked, blob)
    assert want is not None and "s-3" in want and "part-00000" in want
    assert _message(decode_planes, blob) == want


def test_planes_of_a_good_tensor_are_its_channels():
    rng = np.random.default_rng(11)
    for _ in range(5):
        t = _tensor(rng)
        t[0, 0, 0], t[0, 1, 0], t[5, 5, 2] = 0.0, 1.0, -0.0  # the bounds and a negative zero pass
        e, m, o, e_min, e_max = decode_planes(encode_tensor(t), N, REF)
        full = decode_checked(encode_tensor(t), N, REF)
        for k, plane in enumerate((e, m, o)):
            assert plane.flags.c_contiguous and plane.dtype == np.float32
            np.testing.assert_array_equal(plane, full[..., k])
        assert (e_min, e_max) == (full[..., 0].min(), full[..., 0].max()) == (0.0, 1.0)


@pytest.mark.parametrize("lo, hi", [(-431.0, 8848.0), (12.5, 12.5), (900.0, -3.25),
                                    (0.1, 0.30000000000000004), (-1e-300, 1e300)])
def test_elevation_bounds_are_the_extremes_of_the_plane_in_metres(lo, hi):
    """min and max of ``elevation_metres(e)`` from e's two extremes, bit for bit (the
    grid table of scoring uses them instead of two passes over the float64 grid)."""
    rng = np.random.default_rng(5)
    cal = {"min": lo, "max": hi}
    for _ in range(50):
        e = rng.random((N, N), dtype=np.float32) ** rng.uniform(0.1, 4)
        z = elevation_metres(e, cal)
        got = elevation_bounds(e.min(), e.max(), cal)
        assert got == (z.min(), z.max())
        assert all(type(b) is float for b in got)


def test_scenes_read_keep_their_bounds_and_the_grid_table_agrees():
    """Every shipped scene keeps the extremes of its grid in metres; the grid table's crop
    statistics with them equal those computed from the grid (a scene that keeps none,
    and one whose grid was replaced, take the computing path)."""
    import dataclasses

    from passage_jax.data import load_tasks, shipped_cohort_root
    from passage_jax.metrics.host_inputs import task_table

    for res in (64, 256):
        tasks = load_tasks(shipped_cohort_root(), res, "test", "elevation", n_samples=6)
        for t in tasks:
            z = t.elevation_m
            assert t.scene.kept_elevation_bounds(z) == (z.min(), z.max())
            assert t.scene.kept_elevation_bounds(z.copy()) is None
        bare = [dataclasses.replace(t, scene=dataclasses.replace(t.scene)) for t in tasks]
        assert all(b.scene.kept_elevation_bounds(b.elevation_m) is None for b in bare)
        kept, computed = task_table(tasks).grids.stats, task_table(bare).grids.stats
        want = np.array([[z.min(), z.max() - z.min(), max(abs(z.min()), abs(z.max()))]
                         for z in (t.elevation_m for t in tasks)])
        np.testing.assert_array_equal(kept, want)
        np.testing.assert_array_equal(computed, want)


def test_marker_cells_and_their_errors():
    m = np.zeros((N, N), np.float32)
    m[2, 3], m[11, 7] = 1, -1
    assert marker_cells(m, REF) == ((2, 3), (11, 7))
    m[0, 9] = 1
    with pytest.raises(DataError, match=r"marker \+1 is marked 2 times, at \[\(0, 9\), \(2, 3\)\]"):
        marker_cells(m, REF)
    m[:] = 0
    m[4, 4] = 1
    with pytest.raises(DataError, match="marker -1 is missing"):
        marker_cells(m, REF)


def test_lazy_exports_bind_on_first_use_and_refuse_unknown_names():
    import types

    mod = types.ModuleType("pkg_for_test")
    sys.modules["pkg_for_test"] = mod
    try:
        mod.__getattr__, mod.__dir__, mod.__all__ = lazy_exports(
            "pkg_for_test", {"json": ("dumps", "loads"), "math": ("hypot",)})
        assert mod.__all__ == ["dumps", "loads", "hypot"]
        assert "hypot" not in vars(mod)
        import math

        assert mod.hypot is math.hypot and vars(mod)["hypot"] is math.hypot
        with pytest.raises(AttributeError, match="has no attribute 'nope'"):
            mod.nope  # noqa: B018
        assert {"dumps", "loads", "hypot"} <= set(dir(mod))
    finally:
        del sys.modules["pkg_for_test"]
    with pytest.raises(ValueError, match="'x' is exported by a and b"):
        lazy_exports("p", {"a": ("x",), "b": ("x",)})


def test_scoring_imports_neither_the_audit_nor_the_notebooks():
    code = ("import sys; import passage_jax.evaluate.score; from passage_jax.data import open_tasks; "
            "print(sorted(m for m in ('passage_jax.data.audit', 'passage_jax.evaluate.analyze', "
            "'passage_jax.evaluate.compare', 'scipy.spatial') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    # every re-exported name still resolves
    import pkgutil
    import types

    import passage_jax.data as data
    import passage_jax.evaluate as evaluate

    for pkg in (data, evaluate):
        lazy = set(pkg.__all__) - set(vars(pkg))
        # a name that is also a submodule cannot be lazy: importing the module would
        # bind the module, not the name, on the package
        clash = lazy & {m.name for m in pkgutil.iter_modules(pkg.__path__)}
        assert not clash, clash
        for name in pkg.__all__:
            assert not isinstance(getattr(pkg, name), types.ModuleType), name
    import passage_jax.evaluate.sidecar  # noqa: F401  (the module of the same name)

    assert callable(evaluate.sidecar) and not isinstance(evaluate.sidecar, types.ModuleType)
