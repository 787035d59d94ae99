import os

import pytest

# Tests see several CPU devices so sharded kernels are exercised as on a mesh.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")


# --------------------------------------------------------------------------- #
# The test mode without float64: PASSAGE_JAX_NO_X64=1 python -m pytest ...
# (kernels run in float32; passage_jax.precision). A test that checks float64-only
# behaviour carries @pytest.mark.needs_float64("why") and is skipped in that mode
# with its reason; what it covers is checked against the float64 path, at the
# stated float32 tolerances, by tests/test_no_x64.py.
# --------------------------------------------------------------------------- #

def pytest_configure(config):
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
