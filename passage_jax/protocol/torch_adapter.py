"""A PyTorch function or module as a request planner (:class:`TorchPlanner`).

``TorchPlanner(fn, device="cpu", dtype="float32")`` turns ``fn`` into an object
with ``plan(request)``, the ``request`` planner shape. On every request it copies
the request's arrays to tensors on ``device`` (inside the timed request: input
preparation counts), calls ``fn(elevation, obstacles, start, goal, **fields)``
under ``torch.no_grad()`` and copies what ``fn`` returned back to host NumPy
arrays, dtype unchanged, so that a malformed route (floats, a wrong shape) is
recorded as malformed exactly as any planner's would be.

PyTorch is imported only when a ``TorchPlanner`` is built: importing this module
(or ``passage_jax``) never imports it. Install it with the ``torch`` extra.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping

from passage_jax.protocol.contracts import PlanRequest, PlanResult, ProtocolError

__all__ = ["TORCH_DTYPES", "TORCH_FIELDS", "TorchPlanner", "import_torch"]

#: dtype names a ``TorchPlanner`` accepts -> the ``precision`` it records.
TORCH_DTYPES = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}
#: Keyword arguments ``fn`` may declare (it receives only those it names, all of them
#: when it takes ``**kwargs``).
TORCH_FIELDS = ("cost_model", "cost_weight", "pixel_size_m", "input_tensor", "remaining_wall_ms")

_INSTALL_HINT = "install the torch extra: pip install -c constraints.txt -e '.[torch]'"


def import_torch():
    """The ``torch`` module; ImportError saying how to install it when it is missing."""
    try:
        import torch  # noqa: PLC0415  (optional dependency: the torch extra)
    except ImportError as e:
        raise ImportError(f"TorchPlanner needs PyTorch, which is not installed ({e}); "
                          f"{_INSTALL_HINT}") from e
    return torch


def _dtype(torch, dtype) -> tuple:
    name = str(dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise ValueError(f"TorchPlanner dtype={dtype!r} is not one of {list(TORCH_DTYPES)}")
    return getattr(torch, name), name


def _device(torch, device):
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"TorchPlanner device={device!r} is not a PyTorch device: {e}") from None
    try:
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError, ValueError) as e:
        raise ValueError(f"TorchPlanner device={device!r} is not usable here: "
                         f"{type(e).__name__}: {e}") from None
    return dev


def _fields_taken(torch, fn) -> tuple:
    """The ``TORCH_FIELDS`` that ``fn`` declares; TypeError when it cannot take the
    four positional tensors (or requires an argument the adapter never passes)."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # not introspectable (a builtin): positional tensors only
        return ()
    params = sig.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        fields = TORCH_FIELDS
    else:
        fields = tuple(f for f in TORCH_FIELDS if f in sig.parameters)
    try:
        sig.bind(None, None, None, None, **dict.fromkeys(fields))
    except TypeError as e:
        raise TypeError(f"TorchPlanner: {_name_of(fn)} must take (elevation, obstacles, start, goal) "
                        f"and, as keywords, only fields of {list(TORCH_FIELDS)}: {e}") from None
    return fields


def _name_of(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class TorchPlanner:
    """``fn`` on PyTorch tensors as a planner with ``plan(request)``.

    ``fn(elevation, obstacles, start, goal, **fields)`` receives ``elevation``
    ``(H, W)`` in ``dtype``, ``obstacles`` ``(H, W)`` bool, ``start`` and ``goal``
    ``(2,)`` int64 ``(row, col)``, all on ``device``, and those of
    :data:`TORCH_FIELDS` it declares: ``cost_model`` (str), ``cost_weight`` and
    ``pixel_size_m`` (floats), ``input_tensor`` (the ``(H, W, 3)`` input tensor in
    ``dtype`` on ``device``, ``None`` when the request has none) and
    ``remaining_wall_ms`` (the request's callable). ``fn`` may be a
    ``torch.nn.Module`` (its ``forward`` is inspected).

    ``fn`` returns a route (an ``(L, 2)`` integer tensor, array or list, or
    ``None``), a pair ``(route, status)``, a mapping with ``PlanResult`` keys or a
    ``PlanResult``; tensors anywhere in it are copied to host NumPy arrays with
    their dtype. A bare route means status ``ok``, as everywhere in the protocol:
    return ``(None, "no_path")`` when there is no route. ``precision`` is
    recorded from ``dtype`` (e.g. ``fp32``) unless ``fn`` sets one.

    Construction imports torch (ImportError naming the ``torch`` extra when it is
    missing) and checks ``device`` (it must be usable here), ``dtype`` (one of
    :data:`TORCH_DTYPES`) and ``fn``'s signature.
    """

    def __init__(self, fn: Callable, *, device="cpu", dtype="float32", name: str | None = None):
        torch = import_torch()
        if not callable(fn):
            raise TypeError(f"TorchPlanner needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.torch_dtype, self.dtype = _dtype(torch, dtype)
        self.device = _device(torch, device)
        self.precision = TORCH_DTYPES[self.dtype]
        self.fields = _fields_taken(torch, fn)
        self.name = name or _name_of(fn)
        self._torch = torch

    def __repr__(self):
        return f"TorchPlanner({self.name!r}, device={str(self.device)!r}, dtype={self.dtype!r})"

    def inputs(self, request: PlanRequest) -> tuple[tuple, dict]:
        """The positional tensors and the keyword fields of one call of ``fn``."""
        torch, dev = self._torch, self.device
        args = (torch.tensor(request.elevation, dtype=self.torch_dtype, device=dev),
                torch.tensor(request.obstacles, dtype=torch.bool, device=dev),
                torch.tensor(request.start, dtype=torch.int64, device=dev),
                torch.tensor(request.goal, dtype=torch.int64, device=dev))
        kw = {}
        for f in self.fields:
            if f == "input_tensor":
                t = request.input_tensor
                kw[f] = None if t is None else torch.tensor(t, dtype=self.torch_dtype, device=dev)
            elif f == "pixel_size_m":
                kw[f] = float(request.graph.pixel_size_m)
            else:
                kw[f] = getattr(request, f)
        return args, kw

    def plan(self, request: PlanRequest) -> PlanResult:
        with self._torch.no_grad():
            args, kw = self.inputs(request)
            out = self.fn(*args, **kw)
            return self._result(out)

    def _result(self, out) -> PlanResult:
        if isinstance(out, PlanResult):
            res = dataclasses.replace(out)
        elif isinstance(out, Mapping):
            bad = sorted(set(map(str, out)) - _RESULT_FIELDS)
            if bad:
                raise ProtocolError(f"result mapping has unknown key(s) {bad}; "
                                    f"known: {sorted(_RESULT_FIELDS)}")
            res = PlanResult(**out)
        elif isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], str):
            res = PlanResult(path=out[0], status=out[1])
        else:
            res = PlanResult(path=out)
        res.path = self._host(res.path)
        for name in ("work", "resource_peaks"):
            value = getattr(res, name)
            if isinstance(value, Mapping):
                setattr(res, name, {k: self._host(v) for k, v in value.items()})
        if isinstance(res.stage_work, Mapping):
            res.stage_work = {s: ({k: self._host(v) for k, v in c.items()} if isinstance(c, Mapping)
                                  else c) for s, c in res.stage_work.items()}
        if res.precision is None:
            res.precision = self.precision
        return res

    def _host(self, value):
        """A tensor -> a host NumPy array of the same dtype (bfloat16 and other dtypes
        NumPy lacks -> float32, still floating); anything else unchanged."""
        torch = self._torch
        if not isinstance(value, torch.Tensor):
            return value
        t = value.detach().to("cpu")
        if t.dtype in (torch.bfloat16,) or (t.is_floating_point() and t.element_size() < 2):
            t = t.to(torch.float32)
        return t.numpy()


_RESULT_FIELDS = {f.name for f in dataclasses.fields(PlanResult)}
