"""The learned planner's stages: what it does with the guide's field, in order
(``docs/learned.md``, "The learned planner").

A composition is a list of stage objects, written in a run spec as ``stages: [{backups: 64},
{descent: {accept_ratio: 1.4}}, {guided_astar: {max_expansions: 32768}}, {exact: {}}]``:

* :class:`Backups` ``{backups: k}`` — k Bellman backups of the field before any search
  stage reads it (dense work, not expansions).
* :class:`Descent` ``{descent: {max_escapes, accept_ratio, refine_radius, max_steps}}`` —
  greedy descent on the field.
* :class:`GuidedAStar` ``{guided_astar: {max_expansions, weight, refine_radius,
  accept_ratio, start_from}}`` — A* on ``weight * field + (1 - weight) * octile`` under an
  expansion budget.
* :class:`Exact` ``{exact: {solver}}`` — an exact solver, no budget of its own.

The order is :data:`GRAMMAR`, checked in one place (:func:`check_order`): optional backups,
one primary search stage, an optional guided A* repair, an optional exact fallback. Each
later stage runs only when the one before it failed (or its route was rejected).
:func:`legacy_form` translates the planner's former flat keywords (``decoder:``,
``max_expansions:`` …) into this form, for the error that refuses them.
"""
from __future__ import annotations

import dataclasses
import math

from passage_jax.checks import is_int, is_number
from passage_jax.learned.decoders import FALLBACK_SOLVERS, START_FROM

__all__ = ["Backups", "Descent", "GuidedAStar", "Exact", "STAGES", "GRAMMAR", "LEGACY_KWARGS",
           "parse_stages", "check_order", "stage_roles", "legacy_form", "flow"]

#: The order a stage list must follow (``[x]``: optional, ``(a | b)``: exactly one).
GRAMMAR = "[backups] (descent | guided_astar) [guided_astar] [exact]"
#: The planner's former flat inference keywords, refused with their translation.
LEGACY_KWARGS = ("decoder", "max_expansions", "max_steps", "start_from", "fallback_solver",
                 "guide_weight", "accept_ratio", "refine_radius", "max_escapes", "backups")


def _positive(where, v):
    if v is None:
        return None
    if not is_int(v) or int(v) <= 0:
        raise ValueError(f"learned planner: {where}={v!r} must be a positive integer or null")
    return int(v)


def _ratio(where, v):
    if v is None:
        return None
    if not (is_number(v) and math.isfinite(v) and v >= 1.0):
        raise ValueError(f"learned planner: {where}={v!r} must be a finite number >= 1 or null")
    return float(v)


def _set(obj, **values):
    for name, value in values.items():
        object.__setattr__(obj, name, value)


@dataclasses.dataclass(frozen=True)
class Backups:
    """``k`` Bellman backups of the field on the request's own graph before any search
    stage reads it (:func:`~passage_jax.learned.decoders.bellman_backups`)."""

    k: int = 0
    key = "backups"

    def __post_init__(self):
        if not (is_int(self.k) and self.k >= 0):
            raise ValueError(f"learned planner: backups={self.k!r} must be a non-negative integer")
        _set(self, k=int(self.k))


@dataclasses.dataclass(frozen=True)
class Descent:
    """Greedy descent on the field (:func:`~passage_jax.learned.decoders.direct`):
    ``max_escapes`` (non-negative integer, None: no limit) escapes from a local minimum,
    ``max_steps`` (None: H·W) steps; its route refined (``refine_radius``) and tested
    (``accept_ratio``) as every guided stage's."""

    max_escapes: int | None = 0
    accept_ratio: float | None = None
    refine_radius: int | None = None
    max_steps: int | None = None
    key = "descent"

    def __post_init__(self):
        esc = self.max_escapes
        if esc is not None and not (is_int(esc) and esc >= 0):
            raise ValueError(f"learned planner: descent.max_escapes={esc!r} must be a non-negative "
                             f"integer or null (no limit)")
        _set(self, max_escapes=None if esc is None else int(esc),
             accept_ratio=_ratio("descent.accept_ratio", self.accept_ratio),
             refine_radius=_positive("descent.refine_radius", self.refine_radius),
             max_steps=_positive("descent.max_steps", self.max_steps))


@dataclasses.dataclass(frozen=True)
class GuidedAStar:
    """A* (:func:`~passage_jax.learned.decoders.bounded_repair`) on ``weight * field +
    (1 - weight) * octile`` (``weight`` in [0, 1]) under ``max_expansions`` (None: only the
    request's budget); ``start_from="failed_direct"`` (after a descent only) searches from
    where the descent stopped and keeps its walked prefix. Its route is refined and tested
    as every guided stage's."""

    max_expansions: int | None = None
    weight: float = 1.0
    refine_radius: int | None = None
    accept_ratio: float | None = None
    start_from: str = "replace"
    key = "guided_astar"

    def __post_init__(self):
        w = self.weight
        if not (is_number(w) and 0.0 <= w <= 1.0):
            raise ValueError(f"learned planner: guided_astar.weight={w!r} must be a number in [0, 1]")
        if self.start_from not in START_FROM:
            raise ValueError(f"learned planner: guided_astar.start_from={self.start_from!r} is not one "
                             f"of {list(START_FROM)}")
        _set(self, weight=float(w),
             max_expansions=_positive("guided_astar.max_expansions", self.max_expansions),
             refine_radius=_positive("guided_astar.refine_radius", self.refine_radius),
             accept_ratio=_ratio("guided_astar.accept_ratio", self.accept_ratio))


@dataclasses.dataclass(frozen=True)
class Exact:
    """An exact solver on the request's own graph
    (:func:`~passage_jax.learned.decoders.exact_fallback`), no budget of its own."""

    solver: str = "astar"
    key = "exact"

    def __post_init__(self):
        if self.solver not in FALLBACK_SOLVERS:
            raise ValueError(f"learned planner: exact.solver={self.solver!r} is not one of "
                             f"{list(FALLBACK_SOLVERS)}")


#: stage key -> stage class
STAGES = {cls.key: cls for cls in (Backups, Descent, GuidedAStar, Exact)}


def _stage(item):
    if isinstance(item, tuple(STAGES.values())):
        return item
    if not (isinstance(item, dict) and len(item) == 1):
        raise ValueError(f"learned planner: a stage is a mapping with one key of {list(STAGES)}, "
                         f"got {item!r}")
    (key, value), = item.items()
    if key not in STAGES:
        raise ValueError(f"learned planner: unknown stage {key!r}; stages: {list(STAGES)}")
    if key == "backups":
        return Backups(value)
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ValueError(f"learned planner: stage {key} takes a mapping of its settings, got {value!r}")
    names = [f.name for f in dataclasses.fields(STAGES[key])]
    bad = sorted(set(value) - set(names))
    if bad:
        raise ValueError(f"learned planner: stage {key} has no setting {bad}; its settings: {names}")
    return STAGES[key](**value)


def check_order(stages) -> None:
    """ValueError unless the stage keys follow :data:`GRAMMAR` and a ``start_from=
    "failed_direct"`` guided A* follows a descent."""
    keys = [s.key for s in stages]
    i = 1 if keys[:1] == ["backups"] else 0
    ok = keys[i:i + 1] in (["descent"], ["guided_astar"])
    i += 1
    for optional in ("guided_astar", "exact"):
        if ok and keys[i:i + 1] == [optional]:
            i += 1
    if not ok or i != len(keys):
        raise ValueError(f"learned planner: stages {keys} do not follow {GRAMMAR}")
    for before, s in zip([None, *stages], stages):
        if s.key == "guided_astar" and s.start_from == "failed_direct" \
                and getattr(before, "key", None) != "descent":
            raise ValueError("learned planner: guided_astar.start_from='failed_direct' continues a "
                             "failed descent; it needs a descent stage before it")


def parse_stages(stages) -> tuple:
    """The stage objects of a list of stages (objects, or their spec mappings), in order."""
    if not isinstance(stages, (list, tuple)) or not stages:
        raise ValueError(f"learned planner: stages must be a non-empty list following {GRAMMAR}, "
                         f"got {stages!r}")
    out = tuple(_stage(s) for s in stages)
    check_order(out)
    return out


def stage_roles(stages) -> list:
    """The docs/contract.md §6 stage of each search stage (backups are not one): the first is
    ``primary``, a guided A* after it ``repair``, the exact solver ``fallback``."""
    searches = [s for s in stages if s.key != "backups"]
    return ["fallback" if s.key == "exact" else "primary" if i == 0 else "repair"
            for i, s in enumerate(searches)]


def flow(v) -> str:
    """``v`` in YAML flow style (mappings, lists, numbers, strings, null)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {flow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(flow(x) for x in v) + "]"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v) if isinstance(v, (int, float, str)) else repr(v)


def legacy_form(kwargs: dict) -> dict:
    """The ``guide`` / ``stages`` keys that do what the former flat keywords ``kwargs``
    (``decoder`` and the settings :data:`LEGACY_KWARGS`) did, the other keys kept."""
    kw = dict(kwargs)
    old = {k: kw.pop(k) for k in LEGACY_KWARGS if k in kw}
    decoder = old.get("decoder", "direct")
    if decoder not in ("direct", "bounded_repair", "prediction_free", "exact_fallback", "guided_astar"):
        raise ValueError(f"decoder={decoder!r}")
    stages: list = []
    if old.get("backups"):
        stages.append({"backups": old["backups"]})
    ratio, radius = old.get("accept_ratio"), old.get("refine_radius")
    search = {k: v for k, v in (("max_expansions", old.get("max_expansions")),
                                ("weight", old.get("guide_weight", 1.0))) if v not in (None, 1.0)}
    if decoder == "prediction_free":  # its guide is the octile field: guide_weight never applied
        search.pop("weight", None)
        kw["guide"] = "octile"
    if decoder == "guided_astar":
        stages.append({"guided_astar": search})
    else:
        descent = {"max_escapes": old["max_escapes"]} if old.get("max_escapes", 0) != 0 else {}
        descent.update({k: v for k, v in (("accept_ratio", ratio), ("refine_radius", radius),
                                          ("max_steps", old.get("max_steps"))) if v is not None})
        stages.append({"descent": descent})
        if decoder != "direct":
            repair = dict(search)
            if radius is not None:
                repair["refine_radius"] = radius
            if ratio is not None and decoder == "exact_fallback":  # tested only where a stage follows
                repair["accept_ratio"] = ratio
            if old.get("start_from", "replace") != "replace":
                repair["start_from"] = old["start_from"]
            stages.append({"guided_astar": repair})
        if decoder == "exact_fallback":
            solver = old.get("fallback_solver", "astar")
            stages.append({"exact": {} if solver == "astar" else {"solver": solver}})
    kw["stages"] = stages
    return kw
