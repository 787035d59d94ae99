"""The small value checks every stage uses: an integer that is not a bool, a finite
number, each with a bound, and the one error message that names the value.

``True`` is an ``int`` in Python; a count, a seed or a size given as ``True`` is a
mistake, so these checks refuse bools. NumPy integers and floats are accepted.

The one bound on a cost weight lives here too (:data:`MAX_COST_WEIGHT`): the dataset's
validation and the run spec both refuse a weight above it, so no edge cost overflows.
"""
from __future__ import annotations

import math
import numbers
import re

__all__ = ["is_int", "is_number", "require_int", "require_number", "shown", "is_full_commit",
           "MAX_COST_WEIGHT", "cap_problem", "cap_text"]

#: The largest cost weight (``metadata.solvers.<objective>.weight``, the spec's
#: ``cost_weight``): 16,000 times the largest released weight (62.4). Under it an edge of
#: the ``elevation`` and ``energy`` objectives costs at most ``d + w`` (about 1e6), so a
#: route of every cell of a 16,384² grid stays below 3e14, finite and exact to well under a
#: metre in float64 and finite in float32; ``slope_uphill`` also needs the scene's relief
#: (:func:`passage_jax.data.validate` bounds its largest edge cost).
MAX_COST_WEIGHT = 1e6

_SHOWN = 120
_FULL_COMMIT = re.compile(r"[0-9a-fA-F]{40}")


def is_int(v) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A real number (Python or NumPy int or float), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def shown(v) -> str:
    """``repr(v)`` on one line, cut to a readable length (what an error echoes)."""
    t = " ".join(repr(v).split())
    return t if len(t) <= _SHOWN else t[:_SHOWN - 3] + "..."


def _bounds(low, high) -> str:
    if low is not None and high is not None:
        return f" in [{low}, {high}]"
    if low is not None:
        return f" >= {low}"
    if high is not None:
        return f" <= {high}"
    return ""


def require_int(v, name: str, *, low=None, high=None, error=ValueError) -> int:
    """``v`` as an ``int`` when it is an integer (not a bool) within ``[low, high]``;
    otherwise ``error("<name> must be an integer[ >= low], got <v>")``."""
    if not is_int(v) or (low is not None and v < low) or (high is not None and v > high):
        raise error(f"{name} must be an integer{_bounds(low, high)}, got {shown(v)}")
    return int(v)


def require_number(v, name: str, *, low=None, high=None, finite: bool = True,
                   error=ValueError) -> float:
    """``v`` as a ``float`` when it is a real number (not a bool), finite unless
    ``finite=False``, within ``[low, high]``; otherwise ``error`` naming it."""
    ok = is_number(v) and (not finite or math.isfinite(float(v)))
    if ok and ((low is not None and v < low) or (high is not None and v > high)):
        ok = False
    if not ok:
        kind = "a finite number" if finite else "a number"
        raise error(f"{name} must be {kind}{_bounds(low, high)}, got {shown(v)}")
    return float(v)


def cap_problem(key: str, v, cap) -> str | None:
    """``"<key>: <v> exceeds its cap <cap>"`` when number ``v`` is over ``cap`` (None when
    it is not): the refusal that names the key, the value and the cap."""
    if is_number(v) and v > cap:
        return f"{key}: {shown(v)} exceeds its cap {cap_text(cap)}"
    return None


def cap_text(cap) -> str:
    """A cap as a message shows it: ``1,000``, ``1,000,000`` (an integral float without
    its ``.0``), ``0.5``."""
    if is_int(cap) or (is_number(cap) and float(cap).is_integer()):
        return f"{int(cap):,}"
    return f"{float(cap):g}"


def is_full_commit(v) -> bool:
    """Whether ``v`` is a full 40-hex-character commit hash (either case): a dataset
    revision or an evaluator commit that names immutable content."""
    return isinstance(v, str) and _FULL_COMMIT.fullmatch(v) is not None
