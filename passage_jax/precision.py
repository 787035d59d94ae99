"""Which floating precision the evaluator's kernels run in (one switch for every stage).

The kernels (metrics, statistics, trust axes, the reference solver) run in float64 where
the backend has it. Without float64 (TPUs; or the test mode ``PASSAGE_JAX_NO_X64=1``,
which runs them with x64 off on any backend) they run in float32, and what must stay
exact is done on the host in float64 or in error-free float32 arithmetic (the stage
docs, section "Without float64", say what runs where and state the tolerances).

* :func:`no_x64` — the environment variable ``PASSAGE_JAX_NO_X64`` (read at each call);
* :func:`float64_available` — float64 kernels are possible here (variable unset and a
  platform with float64);
* :func:`kernel_x64` — the context manager every host entry point wraps its kernels in:
  ``jax.enable_x64(True)`` where float64 is available, else ``jax.enable_x64(False)``;
* :func:`kernel_precision` / :func:`kernel_dtype` — ``"float64"`` or ``"float32"`` (to
  state in results) and the matching NumPy dtype for host arrays bound for the kernels;
* :func:`pairwise_sum` — a jittable pairwise (cascade) sum whose rounding error grows
  with ``log2 n`` instead of ``n``, for float32 reductions over tasks or cells;
* :func:`resolve_reference_precision` — the arithmetic the exact reference solver
  (:mod:`passage_jax.reference.vi`) computes c* in: ``"float64"`` or ``"double_float"``
  (float32 pairs), from its argument, the environment variable
  ``PASSAGE_JAX_REFERENCE_PRECISION`` and this module's switch.

A leaf module: it imports only JAX and NumPy.
"""
from __future__ import annotations

import contextlib
import os

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["NO_X64_ENV", "NO_FLOAT64_PLATFORMS", "PRECISIONS", "no_x64", "float64_available",
           "kernel_x64", "kernel_precision", "kernel_dtype", "pairwise_sum",
           "REFERENCE_PRECISIONS", "REFERENCE_PRECISION_ENV", "resolve_reference_precision"]

#: Environment variable: "1" (or "true"/"yes") runs every kernel without float64.
NO_X64_ENV = "PASSAGE_JAX_NO_X64"
#: Platforms without float64 arithmetic.
NO_FLOAT64_PLATFORMS = ("tpu",)
#: The two kernel precisions :func:`kernel_precision` states.
PRECISIONS = ("float64", "float32")
#: The reference solver's two arithmetic paths: float64 (needs x64) and double-float
#: (float32 pairs, runs with x64 off; :mod:`passage_jax.reference.dfloat`).
REFERENCE_PRECISIONS = ("float64", "double_float")
#: Environment variable read at each reference solve: "auto" (default), "float64" or
#: "double_float".
REFERENCE_PRECISION_ENV = "PASSAGE_JAX_REFERENCE_PRECISION"


def no_x64() -> bool:
    """``PASSAGE_JAX_NO_X64`` is set ("1"/"true"/"yes"; "", "0", "false", "no" is off);
    ValueError naming the variable for any other value."""
    raw = os.environ.get(NO_X64_ENV, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ValueError(f"environment variable {NO_X64_ENV}={raw!r} is not one of 1, 0, true, "
                     "false, yes, no")


def float64_available(platform: str | None = None) -> bool:
    """True unless ``PASSAGE_JAX_NO_X64`` is set or ``platform`` (default: JAX's default
    backend) has no float64 (:data:`NO_FLOAT64_PLATFORMS`)."""
    if no_x64():
        return False
    platform = jax.default_backend() if platform is None else platform
    return str(platform).lower() not in NO_FLOAT64_PLATFORMS


def kernel_precision(platform: str | None = None) -> str:
    """``"float64"`` where :func:`float64_available`, else ``"float32"``: the precision the
    kernels run in, as results state it."""
    return "float64" if float64_available(platform) else "float32"


def kernel_dtype(platform: str | None = None) -> np.dtype:
    """The NumPy floating dtype of :func:`kernel_precision`."""
    return np.dtype(kernel_precision(platform))


@contextlib.contextmanager
def kernel_x64(platform: str | None = None):
    """Scope for running kernels: x64 on where float64 is available, explicitly off
    otherwise (so a process that enabled x64 globally still gets the float32 kernels
    :func:`kernel_precision` states). The x64 state is part of JAX's jit cache key:
    a kernel traced in one mode is never reused in the other."""
    with jax.enable_x64(float64_available(platform)):
        yield


def pairwise_sum(x, axis: int = -1):
    """Sum of ``x`` along ``axis`` by pairwise (cascade) summation, in ``x``'s dtype.

    The axis is zero-padded to a power of two and halved ``log2 n`` times (each half
    added elementwise to the other), so the rounding error is at most about
    ``ceil(log2 n) * eps * sum|x|`` whatever order XLA would pick for a plain reduction.
    Jittable; an empty axis sums to 0."""
    x = jnp.asarray(x)
    x = jnp.moveaxis(x, axis, -1)
    n = x.shape[-1]
    if n == 0:
        return jnp.zeros(x.shape[:-1], x.dtype)
    size = 1 << (n - 1).bit_length()
    if size != n:
        x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (size - n,), x.dtype)], axis=-1)
    while size > 1:
        size //= 2
        x = x[..., :size] + x[..., size:]
    return x[..., 0]


def resolve_reference_precision(precision: str = "auto", platform: str | None = None) -> str:
    """The arithmetic a reference solve uses: ``precision`` when it is ``"float64"`` or
    ``"double_float"``; for ``"auto"`` the environment variable ``PASSAGE_JAX_REFERENCE_PRECISION``
    (read now), and when that is ``"auto"`` too, ``"double_float"`` if the platform
    (``platform``, default: the default backend) has no float64 or ``PASSAGE_JAX_NO_X64``
    is set, else ``"float64"``. ValueError for an unknown value (naming the variable when
    it came from the environment) and for ``"float64"`` under ``PASSAGE_JAX_NO_X64``."""
    known = ("auto",) + REFERENCE_PRECISIONS
    if precision not in known:
        raise ValueError(f"unknown reference precision {precision!r}; known: {list(known)}")
    source = "precision argument"
    if precision == "auto":
        precision = os.environ.get(REFERENCE_PRECISION_ENV, "auto").strip() or "auto"
        source = f"environment variable {REFERENCE_PRECISION_ENV}"
        if precision not in known:
            raise ValueError(f"{source}={precision!r} is not one of {list(known)}")
    off = no_x64()
    if precision == "auto":
        platform = jax.default_backend() if platform is None else platform
        no_f64 = off or str(platform).lower() in NO_FLOAT64_PLATFORMS
        return "double_float" if no_f64 else "float64"
    if precision == "float64" and off:
        raise ValueError(f"reference precision 'float64' ({source}) needs x64, and "
                         f"{NO_X64_ENV} is set; use 'double_float' or 'auto'")
    return precision
