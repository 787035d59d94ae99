"""Kernels called through their exported modules (passage_jax.compilation.ExportedKernel).

Where the persistent compilation cache is on, the score kernel runs through an exported
module kept on disk, so that a later process neither traces nor lowers it. Checked here:
its results are the jitted kernel's bit for bit on real scenes; a second process (a fresh
kernel object) reads the file and never calls the kernel's Python code; a damaged or
foreign file, other code, other shapes or static arguments get a module of their own;
arguments already on devices, a switched-off cache and a missing ``flatbuffers`` take the
jitted kernel; the folder stays under its bound.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from passage_jax import compilation
from passage_jax.compilation import ExportedKernel
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.metrics import METRIC_KEYS, score_routes
from passage_jax.metrics import kernels as kernels_mod
from passage_jax.reference import TASK_KEYS
from passage_jax.testing import candidate_set


def test_the_plain_install_requires_flatbuffers():
    """The installed distribution's own metadata (what `pip install -e .` resolved)."""
    requires = importlib.metadata.requires("passage_jax") or []
    plain = [r for r in requires if "extra ==" not in r]
    assert any(re.match(r"flatbuffers\b", r) for r in plain), plain


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder of exported modules of this test's own."""
    d = tmp_path / "exported"
    monkeypatch.setattr(compilation, "exported_dir", lambda: d)
    return d


class _Counted:
    """A kernel's Python function that counts how often it is traced."""

    def __init__(self):
        self.calls = 0

    def __call__(self, pair, table, *, scale: float):
        self.calls += 1
        x, y = pair
        return x * scale + table["w"].sum(), jnp.cumsum(y, axis=0) - table["w"][0]


def _kernel(fun):
    jitted = jax.jit(fun, static_argnames=("scale",))
    return ExportedKernel(fun, jitted, "toy")


def _args(n=5, seed=0):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((n, 3)), rng.integers(0, 9, (n, 2)).astype(np.int32)),
            {"w": rng.standard_normal(4)})


def _equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_later_process_reads_the_module_and_never_traces(folder):
    fun = _Counted()
    args = _args()
    want = jax.jit(_Counted(), static_argnames=("scale",))(*args, scale=2.0)
    _equal(_kernel(fun)(*args, scale=2.0), want)
    assert fun.calls == 1  # traced once, to export it
    files = sorted(folder.glob("toy-*.jaxexport"))
    assert len(files) == 1
    again = _Counted()
    k = _kernel(again)  # a fresh kernel object: what a later process has
    for _ in range(2):
        _equal(k(*args, scale=2.0), want)
    assert again.calls == 0  # the module came from the file
    assert sorted(folder.glob("toy-*.jaxexport")) == files


def test_other_shapes_static_arguments_and_code_get_modules_of_their_own(folder, monkeypatch):
    fun = _Counted()
    k = _kernel(fun)
    k(*_args(5), scale=2.0)
    k(*_args(5), scale=3.0)  # another static argument
    k(*_args(7), scale=2.0)  # another shape
    assert fun.calls == 3 and len(list(folder.glob("toy-*.jaxexport"))) == 3
    _equal(_kernel(_Counted())(*_args(7, seed=4), scale=3.0),
           jax.jit(_Counted(), static_argnames=("scale",))(*_args(7, seed=4), scale=3.0))
    monkeypatch.setattr(compilation, "_code_digest", lambda: "other code")
    other = _Counted()
    _kernel(other)(*_args(5), scale=2.0)
    assert other.calls == 1 and len(list(folder.glob("toy-*.jaxexport"))) == 5


def test_a_damaged_or_foreign_file_is_exported_again(folder):
    args = _args()
    want = jax.jit(_Counted(), static_argnames=("scale",))(*args, scale=2.0)
    _kernel(_Counted())(*args, scale=2.0)
    [path] = folder.glob("toy-*.jaxexport")
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # cut short
    fun = _Counted()
    _equal(_kernel(fun)(*args, scale=2.0), want)
    assert fun.calls == 1  # exported again ...
    _readable(path, args, want)  # ... and written again
    # a module of other shapes under this name (a file copied by hand)
    _kernel(_Counted())(*_args(9), scale=2.0)
    [foreign] = [p for p in folder.glob("toy-*.jaxexport") if p != path]
    path.write_bytes(foreign.read_bytes())
    fun = _Counted()
    _equal(_kernel(fun)(*args, scale=2.0), want)
    assert fun.calls == 1
    _readable(path, args, want)


def _readable(path, args, want):
    """``path`` holds the module of ``args``: a fresh kernel reads it and never traces."""
    assert path.is_file()
    fresh = _Counted()
    _equal(_kernel(fresh)(*args, scale=2.0), want)
    assert fresh.calls == 0


def test_device_arrays_a_cache_switched_off_and_no_flatbuffers_take_the_jitted_kernel(folder, monkeypatch):
    args = _args()
    on_device = jax.device_put(args)
    fun = _Counted()
    k = _kernel(fun)
    _equal(k(*on_device, scale=2.0), k.jitted(*args, scale=2.0))
    assert not folder.exists()  # nothing exported
    monkeypatch.setattr(compilation, "exported_dir", lambda: None)
    _equal(k(*args, scale=2.0), k.jitted(*args, scale=2.0))
    assert not folder.exists()
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "flatbuffers", None)  # hidden: not installed
    assert compilation.exported_dir() is None


def test_the_folder_stays_under_its_bound(folder, monkeypatch):
    k = _kernel(_Counted())
    k(*_args(3), scale=2.0)
    one = next(folder.glob("toy-*.jaxexport")).stat().st_size
    monkeypatch.setattr(compilation, "MAX_EXPORTED_BYTES", int(2.5 * one))
    for n in (4, 5, 6):
        k(*_args(n), scale=2.0)
        assert len(list(folder.glob("toy-*.jaxexport"))) <= 2
    newest = _Counted()
    _kernel(newest)(*_args(6), scale=2.0)  # the last one written is kept
    assert newest.calls == 0


@pytest.fixture(scope="module")
def material():
    """Tasks of shipped 64² and 128² scenes (all six task keys), each with a candidate of
    varied kind (exact, another objective's route, detoured, broken)."""
    root = shipped_cohort_root()
    scenes = [s for n in (64, 128) for s in load_scenes(root, n, "test", n_samples=6, workers=0)]
    rng = np.random.default_rng(39)
    tasks, cands, c_star = [], [], []
    for i in range(36):
        s = scenes[i % len(scenes)]
        key = TASK_KEYS[i % len(TASK_KEYS)]
        t = s.task(*key.split("/"))
        tasks.append(t)
        cands.append(candidate_set(s, t.objective, t.variant, rng, 8)[i % 8])
        c_star.append(s.metadata["c_star"][key])
    return tasks, cands, np.asarray(c_star, np.float64)


def test_the_score_kernel_through_its_modules_gives_the_jitted_kernels_results(material, folder,
                                                                                monkeypatch):
    tasks, cands, c_star = material
    ok = np.ones(len(tasks), bool)
    refs = [t.route for t in tasks]
    exported = kernels_mod.score_tasks_packed_exported
    monkeypatch.setattr(exported, "_calls", {})  # this test's modules only
    through = score_routes(cands, tasks, c_star, ok, references=refs)
    assert list(folder.glob("score_tasks_packed-*.jaxexport"))  # the modules were used
    traced = []
    monkeypatch.setattr(exported, "fun", lambda *a, **k: traced.append(1))
    monkeypatch.setattr(exported, "_calls", {})  # a later process: from the files
    again = score_routes(cands, tasks, c_star, ok, references=refs)
    assert not traced
    monkeypatch.setattr(compilation, "exported_dir", lambda: None)
    jitted = score_routes(cands, tasks, c_star, ok, references=refs)
    for k in METRIC_KEYS + ("malformed",):
        np.testing.assert_array_equal(through[k], jitted[k], err_msg=k)
        np.testing.assert_array_equal(again[k], jitted[k], err_msg=k)
    assert 0 < jitted["valid_path"].sum() < len(tasks)


def test_a_module_that_cannot_be_written_is_used_all_the_same(folder):
    """An output of a pytree type JAX cannot serialize: the module is not kept, and the
    calls give the jitted kernel's results."""
    from passage_jax.metrics.types import Route

    def fun(x):
        return Route(cells=x[:, :2].astype(np.int32), length=x[:, 2].astype(np.int32))

    k = ExportedKernel(fun, jax.jit(fun), "route")
    x = np.arange(12.0).reshape(4, 3)
    _equal(k(x), k.jitted(x))
    _equal(k(x), k.jitted(x))
    assert not list(folder.glob("route-*.jaxexport"))
