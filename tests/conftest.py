import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# The fixtures and helper modules (tests/fixtures/: planners named ``module:factory`` in
# specs, shard writers, the shared scored runs) are imported by their plain module names,
# here and in the worker processes the tests start (they inherit this sys.path).
FIXTURES = Path(__file__).resolve().parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

# Tests see several CPU devices so sharded kernels are exercised as on a mesh.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")


# --------------------------------------------------------------------------- #
# The test mode without float64: PASSAGE_JAX_NO_X64=1 python -m pytest ...
# (kernels run in float32; passage_jax.precision). A test that checks float64-only
# behaviour carries @pytest.mark.needs_float64("why") and is skipped in that mode
# with its reason; what it covers is checked against the float64 path, at the
# stated float32 tolerances, by tests/test_no_x64.py.
# --------------------------------------------------------------------------- #

# --------------------------------------------------------------------------- #
# One persistent compilation cache for the whole session, the CLI subprocesses the
# tests start included (they inherit the JAX_* settings from the environment): a
# kernel one test compiled is not compiled again by another process. A fresh folder
# per session unless PASSAGE_JAX_CACHE_DIR names one to keep.
# --------------------------------------------------------------------------- #

_SESSION_CACHE = None


def _session_cache():
    global _SESSION_CACHE
    from passage_jax.compilation import CACHE_DIR_ENV, enable_persistent_cache  # noqa: PLC0415

    if not os.environ.get(CACHE_DIR_ENV):
        _SESSION_CACHE = tempfile.mkdtemp(prefix="passage_jax_test_cache_")
        os.environ[CACHE_DIR_ENV] = _SESSION_CACHE
    enable_persistent_cache(environ=True)


#: most pytest-xdist workers ``-n auto`` starts (each imports JAX with four host devices)
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): one worker per core, at most :data:`MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def pytest_unconfigure(config):
    if _SESSION_CACHE:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_configure(config):
    _session_cache()
    config.addinivalue_line(
        "markers", "needs_float64(reason): checks float64-only behaviour; skipped under "
                   "PASSAGE_JAX_NO_X64=1 with the reason")


def pytest_collection_modifyitems(config, items):
    from passage_jax.precision import no_x64  # noqa: PLC0415 (imports JAX only once XLA_FLAGS is set)

    if not no_x64():
        return
    for item in items:
        mark = item.get_closest_marker("needs_float64")
        if mark is not None:
            why = mark.args[0] if mark.args else mark.kwargs.get("reason", "float64 only")
            item.add_marker(pytest.mark.skip(reason=f"PASSAGE_JAX_NO_X64=1: {why}"))
