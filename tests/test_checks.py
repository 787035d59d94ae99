"""passage_jax.checks: integers that are not bools, finite numbers, bounds, and the
error that names the value."""
import math

import numpy as np
import pytest

from passage_jax.checks import is_int, is_number, require_int, require_number, shown


@pytest.mark.parametrize("v, want", [(3, True), (np.int64(3), True), (True, False), (3.0, False),
                                     ("3", False), (None, False)])
def test_is_int(v, want):
    assert is_int(v) is want


@pytest.mark.parametrize("v, want", [(3, True), (2.5, True), (np.float32(1), True), (False, False),
                                     ("1", False), (math.nan, True)])
def test_is_number(v, want):
    assert is_number(v) is want


def test_require_int_bounds_and_message():
    assert require_int(np.int32(5), "chunk", low=1) == 5 and type(require_int(5, "x")) is int
    with pytest.raises(ValueError, match=r"^chunk must be an integer >= 1, got 0$"):
        require_int(0, "chunk", low=1)
    with pytest.raises(TypeError, match=r"seed must be an integer in \[0, 9\], got True"):
        require_int(True, "seed", low=0, high=9, error=TypeError)


def test_require_number_finite_and_cut_value():
    assert require_number(2, "w", low=0) == 2.0
    with pytest.raises(ValueError, match="w must be a finite number >= 0, got nan"):
        require_number(math.nan, "w", low=0)
    assert require_number(math.inf, "w", finite=False) == math.inf
    with pytest.raises(ValueError) as e:
        require_number("x" * 1000, "w")
    assert len(str(e.value)) < 200 and str(e.value).endswith("...")
    assert shown("a\nb") == "'a\\nb'"
