"""Timing a learned planner by parts: the forward/decoder split (docs/learned.md, "Timing";
docs/contract.md, "Timing a learned planner by parts"). Used by ``bench/learned.py``.

The whole-request latency the runner records (``run``) answers "how long does a
request take"; these helpers answer "where does the time go", on a list of
:class:`~passage_jax.protocol.PlanRequest` and batch one, each a separate boundary:

* ``forward`` — the bare network: the jitted ``module.apply`` on inputs already
  prepared and placed on the device, stopped by ``block_until_ready``. Only for a
  network guide (an object with ``module`` and ``params``, as
  :class:`~passage_jax.learned.guide.NetworkGuide`).
* ``guide`` — the guide call ``guide(request) -> (H, W)`` field: input
  preparation, forward, transfer to the host and the map to a cost-to-go. For a
  plain callable guide this is the only forward measurement.
* ``forward_decoder`` — the whole ``LearnedPlanner.plan(request)``.
* ``decoder`` — ``plan`` with the guide replaced by a
  :class:`PrecomputedGuide` that returns fields computed beforehand: every decoder
  stage (descent, repair, fallback) and nothing of the network.

Each measurement is a :class:`Timing` (median and p90 in milliseconds over every
timed call, the number of calls, the compute dtype and the boundary). A network is
timed per dtype (``float32``, ``bfloat16``): :func:`with_dtype` casts the
parameters and inputs (and the module's own ``dtype`` field when it has one, so a
linen module really computes in that dtype). :func:`parameter_count` counts the
parameters; :func:`peak_memory_bytes` reads the device's peak memory from
``device.memory_stats()`` and is ``None`` where the backend reports none (the CPU
backend): never an estimate. Nothing here asserts a time; the numbers are
measured on whatever machine runs them.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from passage_jax.learned.guide import NetworkGuide
from passage_jax.learned.model import features, param_count

__all__ = ["TIMING_DTYPES", "BOUNDARIES", "Timing", "summarise", "with_dtype", "prepared_inputs",
           "PrecomputedGuide", "time_forward", "time_guide", "time_plan", "time_decoder",
           "dtype_agreement", "parameter_count", "peak_memory_bytes", "timing_report"]

#: Compute dtypes a network is timed in.
TIMING_DTYPES = ("float32", "bfloat16")
#: What each measurement's timer contains.
BOUNDARIES = {
    "forward": "jitted module.apply on prepared device inputs, block_until_ready",
    "guide": "guide(request): input preparation, forward, host transfer, cost-to-go map",
    "forward_decoder": "LearnedPlanner.plan(request): guide call and every decoder stage",
    "decoder": "LearnedPlanner.plan(request) on precomputed fields: decoder stages only",
}
_JNP_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@dataclasses.dataclass(frozen=True)
class Timing:
    """One measurement: ``stage`` (a key of :data:`BOUNDARIES`), the compute
    ``dtype`` of the guide, ``n`` timed calls, their ``median_ms`` and ``p90_ms``
    (NumPy's linear percentile) and the ``boundary`` text."""

    stage: str
    dtype: str | None
    n: int
    median_ms: float
    p90_ms: float
    boundary: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def summarise(stage: str, dtype: str | None, seconds: Sequence[float]) -> Timing:
    """A :class:`Timing` from the measured durations in seconds."""
    if stage not in BOUNDARIES:
        raise ValueError(f"stage {stage!r} is not one of {sorted(BOUNDARIES)}")
    s = np.asarray(seconds, np.float64)
    if s.ndim != 1 or s.size == 0 or not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"seconds must be a non-empty list of finite durations >= 0, got {s!r}")
    ms = s * 1000.0
    return Timing(stage=stage, dtype=dtype, n=int(s.size), median_ms=float(np.median(ms)),
                  p90_ms=float(np.percentile(ms, 90)), boundary=BOUNDARIES[stage])


def _check_dtype(dtype: str) -> None:
    if dtype not in _JNP_DTYPES:
        raise ValueError(f"dtype must be one of {list(TIMING_DTYPES)}, got {dtype!r}")


def _is_network(guide) -> bool:
    return hasattr(guide, "module") and hasattr(guide, "params")


def _require_network(guide, what: str) -> None:
    if not _is_network(guide):
        raise TypeError(f"{what} needs a network guide (an object with .module and .params, "
                        f"such as NetworkGuide), got {type(guide).__name__}")


def with_dtype(guide, dtype: str) -> NetworkGuide:
    """The network guide ``guide`` computing in ``dtype``: parameters and inputs cast,
    and a module with a ``dtype`` field cloned with it (a linen module otherwise
    casts bfloat16 parameters back to its own float32)."""
    _check_dtype(dtype)
    _require_network(guide, "with_dtype")
    module = guide.module
    if hasattr(module, "dtype") and hasattr(module, "clone"):
        module = module.clone(dtype=_JNP_DTYPES[dtype])
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), guide.params)
    return NetworkGuide(module, params, dtype=dtype, output=getattr(guide, "output", "log_ratio"),
                        feature_fn=getattr(guide, "feature_fn", features),
                        checkpoint_id=getattr(guide, "checkpoint_id", None),
                        tiling=getattr(guide, "tiling", None))


def prepared_inputs(guide, requests) -> list:
    """The network inputs of ``requests``, (1, H, W, C) each, in the guide's dtype
    and on the device (what :func:`time_forward` times the network on)."""
    _require_network(guide, "prepared_inputs")
    fn = getattr(guide, "feature_fn", features)
    dt = _JNP_DTYPES.get(str(getattr(guide, "dtype", "float32")), jnp.float32)
    out = [jax.device_put(jnp.asarray(np.asarray(fn(r))[None], dt)) for r in requests]
    jax.block_until_ready(out)
    return out


def _apply_fn(guide) -> Callable:
    if hasattr(guide, "apply_batch"):
        return guide.apply_batch
    apply = jax.jit(guide.module.apply)
    return lambda x: apply(guide.params, x)


def _timed(call: Callable, items, *, repeats: int, warmup: int) -> list[float]:
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    items = list(items)
    if not items:
        raise ValueError("requests must not be empty")
    for _ in range(warmup):
        for it in items:
            call(it)
    out = []
    for _ in range(repeats):
        for it in items:
            t0 = time.perf_counter()
            call(it)
            out.append(time.perf_counter() - t0)
    return out


def time_forward(guide, requests, *, dtype: str = "float32", repeats: int = 3,
                 warmup: int = 1) -> Timing:
    """The bare forward of a network guide in ``dtype`` (inputs prepared beforehand;
    ``warmup`` passes over ``requests`` compile every shape first)."""
    g = with_dtype(guide, dtype)
    xs = prepared_inputs(g, requests)
    apply = _apply_fn(g)
    return summarise("forward", dtype,
                     _timed(lambda x: jax.block_until_ready(apply(x)), xs, repeats=repeats,
                            warmup=warmup))


def _dtype_of(guide) -> str | None:
    d = getattr(guide, "dtype", None)
    return None if d is None else str(d)


def time_guide(guide, requests, *, repeats: int = 3, warmup: int = 1) -> Timing:
    """The guide call ``guide(request)`` (any callable guide)."""
    if not callable(guide):
        raise TypeError(f"guide must be callable request -> field, got {type(guide).__name__}")
    return summarise("guide", _dtype_of(guide), _timed(guide, requests, repeats=repeats, warmup=warmup))


def time_plan(planner, requests, *, repeats: int = 3, warmup: int = 1) -> Timing:
    """Forward + decoder: the whole ``planner.plan(request)``."""
    return summarise("forward_decoder", _dtype_of(getattr(planner, "guide", None)),
                     _timed(planner.plan, requests, repeats=repeats, warmup=warmup))


class PrecomputedGuide:
    """A guide that returns fields computed beforehand: ``fields[i]`` for
    ``requests[i]`` (matched by object identity, so it answers only the requests it
    was built from). ``from_guide`` runs a guide once on each request."""

    def __init__(self, requests, fields, *, dtype: str | None = None):
        requests, fields = list(requests), list(fields)
        if len(requests) != len(fields):
            raise ValueError(f"PrecomputedGuide: {len(requests)} requests but {len(fields)} fields")
        self._requests = requests  # keeps the identities alive
        self._fields = {}
        for r, f in zip(requests, fields):
            a = np.asarray(f, np.float64)
            if a.shape != r.shape:
                raise ValueError(f"PrecomputedGuide: field of {r.sample_id} has shape {a.shape}, "
                                 f"request grid {r.shape}")
            a.setflags(write=False)
            self._fields[id(r)] = a
        self.dtype = dtype

    @classmethod
    def from_guide(cls, guide, requests) -> PrecomputedGuide:
        requests = list(requests)
        return cls(requests, [guide(r) for r in requests], dtype=_dtype_of(guide))

    def __call__(self, request) -> np.ndarray:
        try:
            return self._fields[id(request)].copy()
        except KeyError:
            raise KeyError(f"PrecomputedGuide: no precomputed field for request "
                           f"{getattr(request, 'sample_id', request)!r}") from None


def time_decoder(planner, requests, *, repeats: int = 3, warmup: int = 1) -> Timing:
    """The decoder alone: ``planner`` (a LearnedPlanner-like object with a ``guide``
    attribute) re-run with its guide's fields computed beforehand."""
    requests = list(requests)
    guide = getattr(planner, "guide", None)
    fixed = copy.copy(planner)
    if guide is not None:
        fixed.guide = PrecomputedGuide.from_guide(guide, requests)
    return summarise("decoder", _dtype_of(guide),
                     _timed(fixed.plan, requests, repeats=repeats, warmup=warmup))


def dtype_agreement(guide, requests, dtype: str = "bfloat16") -> dict:
    """How far the guide's fields in ``dtype`` are from its float32 fields: the
    median and maximum relative difference over the finite cells of every request,
    and the number of cells compared."""
    g32, gd = with_dtype(guide, "float32"), with_dtype(guide, dtype)
    rel = []
    for r in requests:
        a, b = np.asarray(g32(r), np.float64), np.asarray(gd(r), np.float64)
        m = np.isfinite(a) & np.isfinite(b) & (a > 0)
        rel.append(np.abs(b[m] - a[m]) / a[m])
    rel = np.concatenate(rel) if rel else np.zeros(0)
    if rel.size == 0:
        return {"dtype": dtype, "n_cells": 0, "median_rel_diff": None, "max_rel_diff": None}
    return {"dtype": dtype, "n_cells": int(rel.size), "median_rel_diff": float(np.median(rel)),
            "max_rel_diff": float(rel.max())}


def parameter_count(guide_or_params) -> int | None:
    """Scalar parameters of a network guide (or of a params pytree); ``None`` for a
    guide without parameters."""
    if _is_network(guide_or_params):
        return param_count(guide_or_params.params)
    if callable(guide_or_params) and not isinstance(guide_or_params, dict):
        return None
    return param_count(guide_or_params)


def peak_memory_bytes(device=None) -> int | None:
    """``peak_bytes_in_use`` of ``device`` (default: the first JAX device) from
    ``device.memory_stats()``: the peak since the process started, so read it in a
    process that ran only what it measures. ``None`` where the backend reports no
    statistics (the CPU backend)."""
    device = jax.devices()[0] if device is None else device
    stats_fn = getattr(device, "memory_stats", None)
    stats = stats_fn() if callable(stats_fn) else None
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def timing_report(planner, requests, *, dtypes: Sequence[str] = TIMING_DTYPES, repeats: int = 3,
                  warmup: int = 1) -> dict:
    """Every measurement for ``planner`` (a LearnedPlanner-like object) on ``requests``:
    ``timings`` (a list of :class:`Timing` dicts: per dtype forward, guide call and
    forward + decoder for a network guide; the decoder alone on the planner's own
    fields), ``agreement`` (:func:`dtype_agreement` per non-float32 dtype),
    ``param_count``, ``peak_memory_bytes`` and the ``device``."""
    requests = list(requests)
    guide = getattr(planner, "guide", None)
    timings = []
    agreement = []
    network = guide is not None and _is_network(guide)
    for dt in (dtypes if network else (None,)):
        g = with_dtype(guide, dt) if network else guide
        if network:
            timings.append(time_forward(guide, requests, dtype=dt, repeats=repeats, warmup=warmup))
        if g is not None:
            timings.append(time_guide(g, requests, repeats=repeats, warmup=warmup))
        p = copy.copy(planner)
        if g is not None:
            p.guide = g
        timings.append(time_plan(p, requests, repeats=repeats, warmup=warmup))
        if network and dt != "float32":
            agreement.append(dtype_agreement(guide, requests, dt))
    timings.append(time_decoder(planner, requests, repeats=repeats, warmup=warmup))
    device = jax.devices()[0]
    return {"timings": [t.to_dict() for t in timings], "agreement": agreement,
            "param_count": parameter_count(guide) if guide is not None else None,
            "peak_memory_bytes": peak_memory_bytes(device),
            "device": f"{device.platform}:{getattr(device, 'device_kind', '')}".rstrip(":")}
