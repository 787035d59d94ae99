"""Planner protocol: requests, results, budgets, statuses and work counters (contract §6).

A :class:`PlanRequest` holds the ordinary input of one task and nothing the
evaluator owns: no reference route, optimal cost, reachability or anything
derived from them. Its arrays are read-only and nobody else can write to them: a
private copy of what it was given, except an array that nobody can write to already
(read-only all the way down to a read-only buffer, such as a view of a read-only
memory map: the kept grids of :mod:`passage_jax.data.grid_store`), which it shares, and
an array handed over to it (:class:`HandedOver`: built for this request alone, such as
its input tensor), which it takes. Its metadata is frozen once (:class:`FrozenMapping`).
So a planner cannot change the runner's data. A :class:`PlanResult` is what a planner
returns.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from passage_jax.budget import LIMIT_COUNTER, BudgetSpec, ProtocolError
from passage_jax.graph.spec import GraphSpec

# BudgetSpec, ProtocolError and LIMIT_COUNTER live in passage_jax.budget (a leaf module, so
# that the run spec's check loads without JAX); they stay importable from here

__all__ = [
    "STATUSES", "WORK_KEYS", "STAGES", "LIMIT_COUNTER", "SUMMED_COUNTERS", "METADATA_ALLOWLIST",
    "REQUEST_FIELDS", "ProtocolError", "BudgetSpec", "PlanRequest", "PlanResult", "HandedOver",
    "FrozenMapping",
    "SEARCH_STATUS", "filter_metadata", "accumulate_stages", "normalise_result", "budget_problem",
    "work_counters",
]

#: Terminal statuses of a request.
STATUSES = ("ok", "no_path", "invalid_path", "budget_exhausted", "timeout", "oom",
            "runtime_error", "cancelled")
#: Work counters a planner reports (``PlanResult.work`` keys).
WORK_KEYS = ("expansions", "queue_operations", "live_states")
#: Stages a planner may break its work into (``PlanResult.stage_work`` keys).
STAGES = ("primary", "repair", "fallback")
#: Counters that accumulate over stages by summation; the others (``live_states``,
#: the number of states alive at once) by maximum.
SUMMED_COUNTERS = ("expansions", "queue_operations")
#: The status of an exact search (``passage_jax.reference.search.SearchResult.status``)
#: -> the request status a planner or decoder reports for it.
SEARCH_STATUS = {"ok": "ok", "unreachable": "no_path", "budget_exhausted": "budget_exhausted"}

#: Scene metadata keys a request may carry. Everything else (``solvers``,
#: ``index``, free-form ``source`` ...) stays with the evaluator.
METADATA_ALLOWLIST = ("resolution", "split", "calibration", "markers", "tile", "crop",
                      "obstacles")

#: The fields of a request, in order (tests assert nothing else is ever added).
REQUEST_FIELDS = ("sample_id", "elevation", "obstacles", "start", "goal", "cost_model",
                  "cost_weight", "graph", "budget", "metadata", "input_tensor",
                  "deadline_monotonic")


class HandedOver:
    """An array handed over to a :class:`PlanRequest`: the request takes it as its own
    (made read-only) without copying it. For an array built for that request alone (the
    caller keeps no other reference to write through)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array


def _immutable(a: np.ndarray) -> bool:
    """Whether nobody can write to ``a``'s memory: it and every array it views are
    read-only, and the memory under them is a read-only buffer (``bytes``, a read-only
    memory map). An array that owns its memory is not: its flag can be set again."""
    base = a
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if base is None:
        return False
    try:
        return memoryview(base).readonly
    except TypeError:
        return False


def _frozen_array(a, dtype, name: str, ndim: int | None = None) -> np.ndarray:
    if isinstance(a, HandedOver):
        a = a.array
        if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
            raise ProtocolError(f"PlanRequest.{name}: a handed-over array must be a C-contiguous "
                                f"{np.dtype(dtype).name} numpy array")
        arr = a
    elif type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous and _immutable(a):
        arr = a  # nobody can write to it: shared, not copied
    else:
        arr = np.array(a, dtype=dtype, copy=True, order="C")
    if ndim is not None and arr.ndim != ndim:
        raise ProtocolError(f"PlanRequest.{name} must have {ndim} dimensions, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


class FrozenMapping(Mapping):
    """A read-only mapping whose values are frozen too (tuples, frozen mappings, read-only
    arrays): what :func:`filter_metadata` returns. Made by freezing only, so a request
    given one takes it as it is."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping = ()):
        self._items = {str(k): _deep_freeze(v) for k, v in dict(items).items()}

    @classmethod
    def _of(cls, frozen: dict) -> FrozenMapping:
        """A frozen mapping around ``frozen``, whose values are frozen already."""
        out = cls.__new__(cls)
        out._items = frozen
        return out

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenMapping({self._items!r})"

    def __reduce__(self):
        return (FrozenMapping, (_thaw(self),))


#: values that are frozen already (exact types: a subclass takes the checks below)
_SCALARS = frozenset((str, int, float, bool, type(None), FrozenMapping))


def _deep_freeze(value):
    """JSON-like value -> read-only frozen mappings and tuples (deep copy); a frozen
    mapping is already frozen."""
    if type(value) in _SCALARS:
        return value
    if type(value) is dict or isinstance(value, Mapping):
        return FrozenMapping._of({str(k): _deep_freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple([_deep_freeze(v) for v in value])
    if isinstance(value, np.ndarray):
        return _frozen_array(value, value.dtype, "metadata")
    return value


def _thaw(value):
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def filter_metadata(metadata: Mapping | None) -> FrozenMapping:
    """The allowlisted part of a scene's metadata, deep-copied and read-only."""
    metadata = metadata or {}
    return _deep_freeze({k: metadata[k] for k in METADATA_ALLOWLIST if k in metadata})


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """One complete request: the ordinary input of a task and its budget.

    ``elevation`` is float64 metres, ``obstacles`` bool (cleared for the ``free``
    variant), ``start``/``goal`` ``(row, col)``, ``input_tensor`` the optional
    normalised (H, W, 3) float32 tensor, ``deadline_monotonic`` an absolute
    ``time.monotonic()`` instant (``None``: no wall-time limit).
    """

    sample_id: str
    elevation: np.ndarray
    obstacles: np.ndarray
    start: tuple
    goal: tuple
    cost_model: str
    cost_weight: float
    graph: GraphSpec
    budget: BudgetSpec = BudgetSpec()
    metadata: Mapping = dataclasses.field(default_factory=dict)
    input_tensor: np.ndarray | None = None
    deadline_monotonic: float | None = None

    def __post_init__(self):
        z = _frozen_array(self.elevation, np.float64, "elevation", 2)
        o = np.asarray(self.obstacles)
        if o.dtype != bool:
            if not np.isin(o, (0, 1)).all():
                raise ProtocolError("PlanRequest.obstacles must be boolean (or 0/1)")
        o = _frozen_array(o, bool, "obstacles", 2)
        if o.shape != z.shape:
            raise ProtocolError(f"PlanRequest.obstacles shape {o.shape} != elevation shape {z.shape}")
        object.__setattr__(self, "elevation", z)
        object.__setattr__(self, "obstacles", o)
        for name in ("start", "goal"):
            p = tuple(int(v) for v in getattr(self, name))
            if len(p) != 2 or not (0 <= p[0] < z.shape[0] and 0 <= p[1] < z.shape[1]):
                raise ProtocolError(f"PlanRequest.{name}={p} is not a cell of a {z.shape} grid")
            object.__setattr__(self, name, p)
        if self.input_tensor is not None:
            t = _frozen_array(self.input_tensor, np.float32, "input_tensor", 3)
            if t.shape != z.shape + (3,):
                raise ProtocolError(f"PlanRequest.input_tensor shape {t.shape} != {z.shape + (3,)}")
            object.__setattr__(self, "input_tensor", t)
        if not isinstance(self.graph, GraphSpec):
            raise ProtocolError("PlanRequest.graph must be a GraphSpec")
        if self.graph.cost_model != self.cost_model or \
                float(self.graph.cost_weight) != float(self.cost_weight):
            raise ProtocolError("PlanRequest.cost_model/cost_weight disagree with its graph")
        if not isinstance(self.budget, BudgetSpec):
            raise ProtocolError("PlanRequest.budget must be a BudgetSpec")
        if not isinstance(self.metadata, Mapping):
            raise ProtocolError(f"PlanRequest.metadata must be a mapping, got "
                                f"{type(self.metadata).__name__}")
        bad = sorted(set(self.metadata) - set(METADATA_ALLOWLIST))
        if bad:
            raise ProtocolError(f"PlanRequest.metadata key(s) {bad} are not allowlisted "
                                f"({list(METADATA_ALLOWLIST)})")
        object.__setattr__(self, "metadata", _deep_freeze(self.metadata))
        object.__setattr__(self, "sample_id", str(self.sample_id))
        object.__setattr__(self, "cost_weight", float(self.cost_weight))

    def remaining_wall_ms(self) -> float:
        """Milliseconds left before the absolute deadline (``inf`` without one;
        negative once it has passed)."""
        if self.deadline_monotonic is None:
            return math.inf
        return (self.deadline_monotonic - time.monotonic()) * 1000.0

    @property
    def shape(self) -> tuple:
        return self.elevation.shape

    def as_scene(self) -> dict:
        """The request fields as a plain dict (what a legacy ``predict_path(scene)``
        receives); arrays stay read-only, metadata becomes plain dicts/lists."""
        d = {name: getattr(self, name) for name in REQUEST_FIELDS}
        d["metadata"] = _thaw(self.metadata)
        d["remaining_wall_ms"] = self.remaining_wall_ms
        return d


@dataclasses.dataclass
class PlanResult:
    """What a planner returns for one request.

    ``path``: ordered integer ``(row, col)`` cells, start to goal, as produced
    (never rounded or clipped). ``work``: total counters (``WORK_KEYS``);
    ``stage_work``: ``{stage: {counter: value}}`` for ``STAGES``; ``precision``:
    e.g. ``"fp32"``; ``resource_peaks``: maxima such as ``{"host_bytes": ...}``;
    ``route_stage``: the stage of ``STAGES`` that produced the route (``None``:
    not reported, e.g. a single-stage classical planner).
    """

    path: Any = None
    status: str = "ok"
    work: dict = dataclasses.field(default_factory=dict)
    stage_work: dict = dataclasses.field(default_factory=dict)
    precision: str | None = None
    resource_peaks: dict = dataclasses.field(default_factory=dict)
    message: str | None = None
    route_stage: str | None = None


def work_counters(expansions, queue_operations, live_states) -> dict:
    """The work counters of one stage (``PlanResult.work``, ``WORK_KEYS`` order) as ints."""
    return {"expansions": int(expansions), "queue_operations": int(queue_operations),
            "live_states": int(live_states)}


def _counter_value(where: str, v) -> int:
    try:
        v = np.asarray(v)
    except Exception:  # noqa: BLE001
        raise ProtocolError(f"{where} is not a number") from None
    if v.shape != () or v.dtype.kind not in "iuf" or not np.isfinite(v) or float(v) < 0 \
            or float(v) != int(v):
        raise ProtocolError(f"{where}={v!r} must be a non-negative integer")
    return int(v)


def _check_counters(where: str, d) -> dict:
    if not isinstance(d, Mapping):
        raise ProtocolError(f"{where} must be a mapping of {list(WORK_KEYS)}, got {type(d).__name__}")
    bad = sorted(set(map(str, d)) - set(WORK_KEYS))
    if bad:
        raise ProtocolError(f"{where}: unknown counter(s) {bad}; known: {list(WORK_KEYS)}")
    return {str(k): _counter_value(f"{where}.{k}", v) for k, v in d.items() if v is not None}


def accumulate_stages(stage_work: Mapping) -> dict:
    """Totals implied by per-stage work: sums for expansions/queue operations,
    maximum for live states."""
    total: dict = {}
    for counters in stage_work.values():
        for k, v in counters.items():
            if k in SUMMED_COUNTERS:
                total[k] = total.get(k, 0) + v
            else:
                total[k] = max(total.get(k, 0), v)
    return total


def normalise_result(raw) -> PlanResult:
    """Coerce what a planner returned into a checked :class:`PlanResult`.

    Accepts a ``PlanResult``, a mapping with a ``path`` key (and optional result
    fields), or a bare route. Raises :class:`ProtocolError` on an unknown status,
    unknown/negative counters or stage names, or totals below the accumulated
    stage work. The path itself is not inspected here (the runner snapshots it).
    """
    if isinstance(raw, PlanResult):
        res = dataclasses.replace(raw)
    elif isinstance(raw, Mapping):
        names = {f.name for f in dataclasses.fields(PlanResult)}
        bad = sorted(set(raw) - names)
        if bad:
            raise ProtocolError(f"result mapping has unknown key(s) {bad}; known: {sorted(names)}")
        res = PlanResult(**raw)
    else:
        res = PlanResult(path=raw)
    if res.status not in STATUSES:
        raise ProtocolError(f"status {res.status!r} is not one of {list(STATUSES)}")
    res.work = _check_counters("work", res.work or {})
    sw = res.stage_work or {}
    if not isinstance(sw, Mapping):
        raise ProtocolError("stage_work must be a mapping {stage: {counter: value}}")
    bad = sorted(set(map(str, sw)) - set(STAGES))
    if bad:
        raise ProtocolError(f"stage_work: unknown stage(s) {bad}; known: {list(STAGES)}")
    res.stage_work = {str(s): _check_counters(f"stage_work.{s}", c) for s, c in sw.items()}
    acc = accumulate_stages(res.stage_work)
    for k, v in acc.items():
        if k not in res.work:
            res.work[k] = v  # totals derived from the stages
        elif res.work[k] < v:
            raise ProtocolError(f"work.{k}={res.work[k]} is below the accumulated stage work {v} "
                                f"(fallback and repair consume the same budget)")
    peaks = res.resource_peaks or {}
    if not isinstance(peaks, Mapping):
        raise ProtocolError("resource_peaks must be a mapping {name: maximum}")
    res.resource_peaks = {}
    for k, v in peaks.items():
        try:
            f = float(np.asarray(v))
        except (TypeError, ValueError):
            raise ProtocolError(f"resource_peaks.{k} is not a number") from None
        if not math.isfinite(f):
            raise ProtocolError(f"resource_peaks.{k}={f} is not finite")
        res.resource_peaks[str(k)] = f
    if res.precision is not None:
        res.precision = str(res.precision)
    if res.message is not None:
        res.message = str(res.message)
    if res.route_stage is not None:
        if not isinstance(res.route_stage, str) or res.route_stage not in STAGES:
            raise ProtocolError(f"route_stage={res.route_stage!r} must be null or one of {list(STAGES)}")
        res.route_stage = str(res.route_stage)
    return res


def budget_problem(result: PlanResult, budget: BudgetSpec) -> tuple[str, str] | None:
    """``(status, reason)`` when the result breaks a configured work limit:
    ``runtime_error`` if the required counter is missing, ``budget_exhausted`` if a
    counter exceeds its limit; ``None`` otherwise."""
    for limit, value in budget.limits().items():
        counter = LIMIT_COUNTER[limit]
        if counter not in result.work:
            return ("runtime_error",
                    f"protocol: budget.{limit}={value} is configured but the result reports "
                    f"no work.{counter}")
    for limit, value in budget.limits().items():
        counter = LIMIT_COUNTER[limit]
        if result.work[counter] > value:
            return ("budget_exhausted",
                    f"work.{counter}={result.work[counter]} exceeds budget.{limit}={value}")
    return None
