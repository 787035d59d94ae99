"""Adapters: every supported planner shape becomes one ``Planner`` callable.

Supported shapes (contract §6):

* an object with ``plan(request)`` (``inference_format: request``);
* a plain callable ``fn(request)`` (a ``module:function``);
* a legacy object with ``predict_path(scene)``, or a callable ``fn(scene)``, where
  ``scene`` is :meth:`PlanRequest.as_scene` (``inference_format: scene``);
* a callable or ``predict_path`` taking the normalised (H, W, 3) input tensor
  (``inference_format: tensor``);
* a Flax module with its params and a decoder (:class:`FlaxPlanner`).

Whatever the shape returns (a ``PlanResult``, a mapping, or a bare route) is
normalised by :func:`passage_jax.protocol.contracts.normalise_result`.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from passage_jax.contract import INFERENCE_FORMATS
from passage_jax.protocol.contracts import PlanRequest, PlanResult, normalise_result

__all__ = [
    "Planner", "FlaxPlanner", "as_planner", "import_entry", "is_factory", "planner_factory",
    "load_planner"
]

# INFERENCE_FORMATS (the input shapes a planner may take, the spec's ``inference_format``)
# lives in passage_jax.contract; it stays importable from here


class Planner:
    """A planner normalised to ``planner(request) -> PlanResult``."""

    def __init__(self, call: Callable[[PlanRequest], Any], name: str = "planner",
                 inference_format: str = "request", target: Any = None):
        self._call = call
        self.name = name
        self.inference_format = inference_format
        self.target = target

    def __call__(self, request: PlanRequest) -> PlanResult:
        return normalise_result(self._call(request))

    def raw(self, request: PlanRequest):
        """The planner's own return value, unnormalised (the runner times this)."""
        return self._call(request)

    def __repr__(self):
        return f"Planner({self.name!r}, format={self.inference_format!r})"


class FlaxPlanner:
    """A Flax module + params + decoder as a request planner.

    ``plan(request)``: ``x = input_fn(request)`` (default: the request's input
    tensor with a batch axis of one), ``out = module.apply(params, x)``,
    ``decoder(request, out)`` -> a route or a ``PlanResult``. ``precision`` is
    recorded when the decoder does not set one.
    """

    def __init__(self, module, params, decoder: Callable, input_fn: Callable | None = None,
                 precision: str | None = None, apply_kwargs: dict | None = None):
        self.module = module
        self.params = params
        self.decoder = decoder
        self.input_fn = input_fn or _default_flax_input
        self.apply_kwargs = dict(apply_kwargs or {})
        self.precision = precision or _params_precision(params)

    def plan(self, request: PlanRequest):
        x = self.input_fn(request)
        out = self.module.apply(self.params, x, **self.apply_kwargs)
        res = self.decoder(request, out)
        if isinstance(res, PlanResult):
            if res.precision is None:
                res.precision = self.precision
            return res
        if isinstance(res, dict) and "path" in res:
            res = dict(res)
            res.setdefault("precision", self.precision)
            return res
        return PlanResult(path=res, precision=self.precision)


def _default_flax_input(request: PlanRequest):
    if request.input_tensor is None:
        raise ValueError("FlaxPlanner needs request.input_tensor (the runner always provides it)")
    return np.asarray(request.input_tensor)[None]


def _params_precision(params) -> str | None:
    try:
        kinds = {str(np.asarray(leaf).dtype) for leaf in jax.tree_util.tree_leaves(params)}
    except Exception:  # noqa: BLE001
        return None
    names = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
    kinds = sorted(names.get(k, k) for k in kinds)
    return "+".join(kinds) if kinds else None


def as_planner(obj, inference_format: str = "request", name: str | None = None,
               call_kwargs: dict | None = None) -> Planner:
    """Normalise ``obj`` to a :class:`Planner` for ``inference_format``.

    ``call_kwargs`` are passed as keywords on every call (used for a
    ``module:function`` plan callable with ``inference_kwargs``).
    """
    if inference_format not in INFERENCE_FORMATS:
        raise ValueError(f"inference_format {inference_format!r} is not one of {list(INFERENCE_FORMATS)}")
    if isinstance(obj, Planner):
        return obj
    kw = dict(call_kwargs or {})
    name = name or getattr(obj, "__name__", type(obj).__name__)
    method = "plan" if inference_format == "request" else "predict_path"
    fn = getattr(obj, method, None)
    if fn is None:
        if not callable(obj):
            raise TypeError(f"{name}: a {inference_format} planner needs {method}({inference_format}) "
                            f"or must be callable")
        fn = obj
    if inference_format == "request":
        return Planner(lambda r: fn(r, **kw), name, inference_format, obj)
    if inference_format == "scene":
        return Planner(lambda r: fn(r.as_scene(), **kw), name, inference_format, obj)

    def call(r: PlanRequest):  # tensor
        if r.input_tensor is None:
            raise ValueError("a tensor planner needs request.input_tensor")
        return fn(r.input_tensor, **kw)

    return Planner(call, name, inference_format, obj)


def import_entry(spec: str):
    """Import ``"package.module:attr"`` (``attr`` may be dotted); clear errors."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"inference {spec!r} must look like 'package.module:attr'")
    mod_name, attr = spec.split(":")
    if not mod_name or not attr:
        raise ValueError(f"inference {spec!r} must look like 'package.module:attr'")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001
        raise ImportError(f"inference {spec!r}: cannot import module {mod_name!r}: "
                          f"{type(e).__name__}: {e}") from e
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ImportError(f"inference {spec!r}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def is_factory(obj) -> bool:
    """A class, or a function named ``make_*`` or marked ``passage_factory = True``,
    is a factory called once with ``**inference_kwargs``; any other callable is a
    plan callable called per request."""
    if inspect.isclass(obj):
        return True
    if getattr(obj, "passage_factory", False):
        return True
    return callable(obj) and getattr(obj, "__name__", "").startswith("make_")


def planner_factory(fn):
    """Decorator marking ``fn`` as a factory (see :func:`is_factory`)."""
    fn.passage_factory = True
    return fn


def load_planner(inference: str, inference_format: str = "request",
                 inference_kwargs: dict | None = None) -> Planner:
    """Resolve a spec's ``inference`` entry and build the planner (construction is
    not timed by the runner)."""
    obj = import_entry(inference)
    kwargs = dict(inference_kwargs or {})
    if is_factory(obj):
        built = obj(**kwargs)
        return as_planner(built, inference_format, name=inference)
    if not callable(obj):
        raise TypeError(f"inference {inference!r} is neither a factory nor a callable")
    return as_planner(obj, inference_format, name=inference, call_kwargs=kwargs)
