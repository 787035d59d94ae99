"""The learned planner: a guide (any ``request -> (H, W)`` cost-to-go estimate) and
a decoder composition, behind the planner protocol (contract §6, §9).

Compositions (``decoder=``), every stage a function of
:mod:`passage_jax.learned.decoders`:

===================  ============================  ===============================  ============
decoder              primary                       repair (when primary fails)      fallback
===================  ============================  ===============================  ============
``direct``           descent on the guide          —                                —
``bounded_repair``   descent on the guide          A* guided by the guide, budget   —
``prediction_free``  descent on the octile guide   A* guided by the octile guide    —
``exact_fallback``   descent on the guide          A* guided by the guide, budget   exact solver
``guided_astar``     guided A* from the start      —                                —
===================  ============================  ===============================  ============

``guided_astar`` is "A* on the learned heuristic alone" (the learned-search report of
``bench/learned.py``): the guided bounded A* of ``bounded_repair``'s repair, run from
the start with no descent before it (its one stage is ``primary``; ``start_from`` must
be ``"replace"``, ``max_steps`` does not apply).

``prediction_free`` is ``bounded_repair`` with the guide replaced by
:func:`~passage_jax.learned.decoders.octile_field` in both stages: same machinery,
same budget, same options, so the two differ only in the guide (seed 001 §3.B).
It never calls the guide.

``guide_weight`` w in [0, 1] (default 1) is the guided A* stages' operating point: their
heuristic is ``w * guide + (1 - w) * octile`` (the octile field of the prediction-free
control), so w = 1 is the guide itself and lower weights trade search work for a
heuristic closer to an admissible bound; the descent always follows the guide itself.
``prediction_free`` ignores it (its guide is the octile field).

``refine_radius`` k (default None: no refinement) makes each guided stage (the descent and
the repair) finish with :func:`~passage_jax.learned.decoders.corridor_refine`: the exact
best route through the cells within Chebyshev distance k of the stage's route (A* with the
admissible octile heuristic), never costlier than the route it refines. Its work is charged
to the stage it refines (contract §6 knows three stages: ``primary``, ``repair``,
``fallback``) and counts against the request's budget: a refinement that runs out of it
keeps the unrefined route. It applies to ``prediction_free``'s stages too (same
machinery), not to ``guided_astar`` (A* on the learned heuristic alone).

``accept_ratio`` r (default None: every route is accepted) is the acceptance test of a
guided stage's route, applied after its refinement: a route costing more than r times the
admissible octile bound at the start is rejected (``no_path``) and the composition goes on
to its next stage as after any failed stage. It tests every descent (no prefix kept; in
``direct`` a rejected descent is a failure), and the repair's route where a stage follows
it (``exact_fallback``); in ``bounded_repair`` and ``prediction_free`` the repair is the
last stage and its route is kept. Not for ``guided_astar`` (no descent).

``max_escapes`` e (default 0: the strict descent) lets every descent (``direct``'s, the
first stage of every composition but ``guided_astar``) escape a local minimum of its field
up to e times (None: no limit): where its Bellman choice is a cell it has visited, it steps
to the best unvisited neighbour instead (:func:`~passage_jax.learned.decoders.direct`). The
route never repeats a cell; the steps count as the descent's expansions as any other.

``backups`` k (default 0: none) passes the guide's field through k Bellman backups on the
request's own graph before any stage reads it (:func:`~passage_jax.learned.decoders.bellman_backups`,
``T^k field``: a fixed value-iteration head, one jitted kernel of 16·k·H·W floating
operations, each backup reaching one cell further): it raises the field's local minima and
makes it exact near the goal. ``prediction_free`` passes its octile field through the same
head (same machinery). The backups are dense device work, not search: they are not
expansions; ``resource_peaks`` records ``backup_cell_updates`` (k·H·W) and ``backups_ms``.

Budgets: the repair's expansion limit is the tighter of ``max_expansions`` and
what the request's ``budget.max_expansions`` leaves after the primary stage (one
budget for the whole request); the descent is bounded by ``max_steps`` and the
request's limit. The exact fallback has no limit of its own: its work is counted,
so a request budget it overruns makes the runner record ``budget_exhausted``.

Accounting: ``stage_work`` holds the contract §6 counters of each stage that ran (a
stage that did not run is absent), ``work`` their totals (sums; ``live_states``
the maximum), ``route_stage`` the stage whose route is returned (``None`` on
failure). The guide is called once per request; ``resource_peaks`` records
``forward_ms`` (the guide call) and ``decode_ms`` (the backups and all decoder stages).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from passage_jax.checks import is_int, is_number
from passage_jax.learned.decoders import (
    FALLBACK_SOLVERS,
    START_FROM,
    DecodeResult,
    acceptance,
    bellman_backups,
    bounded_repair,
    corridor_refine,
    direct,
    exact_fallback,
    octile_field,
    request_cost_field,
)
from passage_jax.learned.guide import NetworkGuide, load_guide
from passage_jax.learned.tiling import tiling_protocol
from passage_jax.options import merge_options
from passage_jax.protocol.contracts import PlanRequest, PlanResult, accumulate_stages

__all__ = ["DECODERS", "INFERENCE_KWARGS", "PlannerOptions", "LearnedPlanner", "make_planner",
           "guide_from_flax"]

#: Decoder compositions :class:`LearnedPlanner` offers.
DECODERS = ("direct", "bounded_repair", "prediction_free", "exact_fallback", "guided_astar")
#: ``inference_kwargs`` :func:`make_planner` takes.
INFERENCE_KWARGS = ("checkpoint", "guide", "dtype", "decoder", "max_expansions", "max_steps",
                    "start_from", "fallback_solver", "guide_weight", "accept_ratio", "refine_radius",
                    "max_escapes", "backups",
                    "tile", "stride", "hflip", "blend", "stitch")
#: Tiled-inference keys of ``inference_kwargs`` (used when ``tile`` is set).
_TILING_KWARGS = ("tile", "stride", "hflip", "blend", "stitch")
#: The stages each composition may run after the primary descent, in order.
_LATER_STAGES = {"direct": (), "bounded_repair": ("repair",), "prediction_free": ("repair",),
                 "exact_fallback": ("repair", "fallback"), "guided_astar": ()}
_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def guide_from_flax(module, params, features_fn: Callable, *, output: str = "cost_to_go",
                    dtype: str = "float32") -> NetworkGuide:
    """A guide from one's own Flax module: ``module.apply(params, x)`` with
    ``x = features_fn(request)[None]`` (1, H, W, C) must return (1, H, W);
    ``output="cost_to_go"`` reads it as the estimate itself, ``"log_ratio"`` as the
    log of its ratio to the octile cost (see :class:`NetworkGuide`)."""
    return NetworkGuide(module, params, dtype=dtype, output=output, feature_fn=features_fn)


def _positive(name, v):
    # the rule of protocol.contracts' BudgetSpec check, with this planner's error type
    if v is None:
        return None
    if not is_int(v) or int(v) <= 0:
        raise ValueError(f"learned planner: {name}={v!r} must be a positive integer or null")
    return int(v)


@dataclasses.dataclass(frozen=True)
class PlannerOptions:
    """A :class:`LearnedPlanner`'s decoder composition and its settings (the module text
    says what each does), validated here: ``decoder`` (one of :data:`DECODERS`),
    ``max_expansions`` / ``max_steps`` / ``refine_radius`` (positive integers or None),
    ``start_from`` (:data:`~passage_jax.learned.decoders.START_FROM`), ``fallback_solver``
    (:data:`~passage_jax.learned.decoders.FALLBACK_SOLVERS`), ``guide_weight`` (in [0, 1]),
    ``accept_ratio`` (a finite number >= 1 or None), ``max_escapes`` (a non-negative integer,
    or None: no limit), ``backups`` (a non-negative integer)."""

    decoder: str = "direct"
    max_expansions: int | None = None
    max_steps: int | None = None
    start_from: str = "replace"
    fallback_solver: str = "astar"
    guide_weight: float = 1.0
    accept_ratio: float | None = None
    refine_radius: int | None = None
    max_escapes: int | None = 0
    backups: int = 0

    def __post_init__(self):
        decoder, start_from = self.decoder, self.start_from
        if decoder not in DECODERS:
            raise ValueError(f"learned planner: decoder={decoder!r} is not one of {list(DECODERS)}")
        if start_from not in START_FROM:
            raise ValueError(f"learned planner: start_from={start_from!r} is not one of "
                             f"{list(START_FROM)}")
        if self.fallback_solver not in FALLBACK_SOLVERS:
            raise ValueError(f"learned planner: fallback_solver={self.fallback_solver!r} is not one of "
                             f"{list(FALLBACK_SOLVERS)}")
        if decoder == "guided_astar" and start_from != "replace":
            raise ValueError(f"learned planner: decoder='guided_astar' searches from the start "
                             f"(start_from='replace'), got start_from={start_from!r}")
        w, ratio = self.guide_weight, self.accept_ratio
        if not (is_number(w) and 0.0 <= w <= 1.0):
            raise ValueError(f"learned planner: guide_weight={w!r} must be a number in [0, 1]")
        if ratio is not None and not (is_number(ratio) and math.isfinite(ratio) and ratio >= 1.0):
            raise ValueError(f"learned planner: accept_ratio={ratio!r} must be a finite number "
                             f">= 1 or null")
        if ratio is not None and decoder == "guided_astar":
            raise ValueError("learned planner: accept_ratio applies to a descent; decoder='guided_astar' "
                             "has none")
        if self.refine_radius is not None and decoder == "guided_astar":
            raise ValueError("learned planner: refine_radius refines a descent or repair route; "
                             "decoder='guided_astar' is A* on the learned heuristic alone")
        esc = self.max_escapes
        if esc is not None and not (is_int(esc) and esc >= 0):
            raise ValueError(f"learned planner: max_escapes={esc!r} must be a non-negative integer "
                             f"or null (no limit)")
        if esc != 0 and decoder == "guided_astar":
            raise ValueError("learned planner: max_escapes applies to a descent; decoder='guided_astar' "
                             "has none")
        if not (is_int(self.backups) and self.backups >= 0):
            raise ValueError(f"learned planner: backups={self.backups!r} must be a non-negative integer")
        normal = {"guide_weight": float(w), "accept_ratio": None if ratio is None else float(ratio),
                  "max_escapes": None if esc is None else int(esc), "backups": int(self.backups)}
        for name in ("max_expansions", "max_steps", "refine_radius"):
            normal[name] = _positive(name, getattr(self, name))
        for name, value in normal.items():
            object.__setattr__(self, name, value)


class LearnedPlanner:
    """``plan(request) -> PlanResult`` for a guide and a decoder composition (see the
    module text): ``options`` (a :class:`PlannerOptions`, default its defaults) with any of
    its fields as keywords on top, e.g. ``LearnedPlanner(guide, decoder="exact_fallback",
    max_expansions=4096)``; an unknown keyword is a TypeError naming it. ``guide`` may be
    ``None`` only for ``decoder="prediction_free"``."""

    def __init__(self, guide: Callable | None, options: PlannerOptions | None = None, **overrides):
        opts = merge_options(PlannerOptions, options, overrides, "LearnedPlanner")
        if guide is None and opts.decoder != "prediction_free":
            raise ValueError(f"learned planner: decoder={opts.decoder!r} needs a guide (a checkpoint or "
                             f"a callable request -> (H, W) field)")
        if guide is not None and not callable(guide):
            raise TypeError(f"learned planner: guide must be callable request -> (H, W) field, "
                            f"got {type(guide).__name__}")
        self.guide = guide
        self.options = opts
        for f in dataclasses.fields(opts):  # the settings as attributes, as before the options object
            setattr(self, f.name, getattr(opts, f.name))

    @property
    def precision(self) -> str:
        if self.decoder == "prediction_free" or self.guide is None:
            return "fp64"
        dtype = getattr(self.guide, "dtype", None)
        return _PRECISION.get(str(dtype), str(dtype)) if dtype is not None else "fp64"

    def _repair_limit(self, request: PlanRequest, spent: int) -> int | None:
        left = None
        if request.budget.max_expansions is not None:
            left = max(0, request.budget.max_expansions - spent)
        vals = [v for v in (self.max_expansions, left) if v is not None]
        return min(vals) if vals else None

    def _search_field(self, field, request: PlanRequest, cost_field):
        """The heuristic of the guided A* stages: ``w * field + (1 - w) * octile`` for
        ``guide_weight`` w (1: the guide itself; 0: the prediction-free bound)."""
        w = self.guide_weight
        if w == 1.0 or self.decoder == "prediction_free":
            return field
        bound = octile_field(request, cost_field=cost_field)
        f = np.asarray(field, np.float64)
        with np.errstate(invalid="ignore"):
            mixed = w * f + (1.0 - w) * bound
        return np.where(np.isinf(f) | np.isinf(bound), np.inf, mixed)

    def _finish(self, out: DecodeResult, request: PlanRequest, cost_field, spent: int, *,
                test: bool, what: str) -> DecodeResult:
        """A guided stage's route refined (``refine_radius``) and tested (``accept_ratio``,
        when ``test``); ``spent``: the request's expansions before this stage."""
        if out.status != "ok":
            return out
        if self.refine_radius is not None:
            left = None
            if request.budget.max_expansions is not None:
                left = max(0, request.budget.max_expansions - spent - out.work["expansions"])
            ref = corridor_refine(out.path, request, radius=self.refine_radius, max_expansions=left,
                                  cost_field=cost_field)
            out = out._replace(path=ref.path, work=accumulate_stages({"a": out.work, "b": ref.work}))
        if test and self.accept_ratio is not None:
            rejected = acceptance(out.path, request, self.accept_ratio, cost_field, what=what)
            if rejected:
                return DecodeResult(None, "no_path", out.work, rejected,
                                    np.asarray([request.start], np.int32))
        return out

    def plan(self, request: PlanRequest) -> PlanResult:
        t0 = time.perf_counter()
        if self.decoder == "prediction_free":
            field = None
        else:
            field = self.guide(request)
        t1 = time.perf_counter()
        cost_field = request_cost_field(request)
        if field is None:
            field = octile_field(request, cost_field=cost_field)
        t_head = time.perf_counter()
        field = bellman_backups(field, request, backups=self.backups, cost_field=cost_field)
        head_ms = (time.perf_counter() - t_head) * 1000.0
        stage_work: dict = {}
        messages: list = []
        skipped = False
        if self.decoder == "guided_astar":  # A* on the guide alone, from the start
            out = bounded_repair(self._search_field(field, request, cost_field), request,
                                 max_expansions=self._repair_limit(request, 0),
                                 cost_field=cost_field)
        else:
            out = self._finish(direct(field, request, max_steps=self.max_steps, cost_field=cost_field,
                                      max_escapes=self.max_escapes),
                               request, cost_field, 0, test=True, what="descent")
        stage_work["primary"] = out.work
        stage = "primary"
        for nxt in _LATER_STAGES[self.decoder]:
            if out.status == "ok":
                break
            messages.append(f"{stage}: {out.message}")
            if request.remaining_wall_ms() <= 0:
                messages.append("deadline passed: later stages skipped")
                skipped = True
                break
            if nxt == "repair":
                spent = out.work["expansions"]
                out = bounded_repair(self._search_field(field, request, cost_field), request,
                                     max_expansions=self._repair_limit(request, spent),
                                     start_from=self.start_from, prefix=out.walked,
                                     cost_field=cost_field)
                out = self._finish(out, request, cost_field, spent,
                                   test="fallback" in _LATER_STAGES[self.decoder], what="repair")
            else:
                out = exact_fallback(request, solver=self.fallback_solver, cost_field=cost_field)
            stage_work[nxt] = out.work
            stage = nxt
        t2 = time.perf_counter()
        ok = out.status == "ok"
        if not ok and not skipped:
            messages.append(f"{stage}: {out.message}")
        peaks = {"forward_ms": (t1 - t0) * 1000.0, "decode_ms": (t2 - t1) * 1000.0}
        if self.backups:
            peaks.update(backups_ms=head_ms,
                         backup_cell_updates=float(self.backups * field.size))
        return PlanResult(path=out.path if ok else None, status=out.status,
                          work=accumulate_stages(stage_work), stage_work=stage_work,
                          precision=self.precision, resource_peaks=peaks,
                          message=None if ok else "; ".join(messages), route_stage=stage if ok else None)

    def __repr__(self):
        settings = ", ".join(f"{f.name}={getattr(self.options, f.name)!r}"
                             for f in dataclasses.fields(self.options))
        return f"LearnedPlanner({self.guide!r}, {settings})"


def make_planner(**inference_kwargs) -> LearnedPlanner:
    """Run-spec factory. ``checkpoint`` ("shipped:<seed>" or a path, loaded with
    :func:`~passage_jax.learned.guide.load_guide` in ``dtype``) or ``guide`` (any
    callable request -> field); neither is needed for ``decoder="prediction_free"``
    (a checkpoint given there is not loaded, so one spec can switch decoders).
    ``tile`` (int) applies the checkpoint's network tile by tile under the tiling protocol
    ``tiling_protocol(tile, stride, hflip, blend, stitch)`` (defaults: the canonical
    ``passage_jax_tiled_v1``), decoding once on the reconstructed field; the other
    tiling keys need ``tile``. The other keys are :class:`LearnedPlanner`'s options."""
    bad = sorted(set(inference_kwargs) - set(INFERENCE_KWARGS))
    if bad:  # the message of planners._common.check_kwargs (learned does not import planners)
        raise TypeError(f"planner 'learned': unknown inference_kwargs {bad}; known: "
                        f"{list(INFERENCE_KWARGS)}")
    kw = dict(inference_kwargs)
    checkpoint = kw.pop("checkpoint", None)
    guide = kw.pop("guide", None)
    dtype = kw.pop("dtype", "float32")
    tiling_kw = {k: kw.pop(k) for k in _TILING_KWARGS if k in kw}
    tiling = None
    if tiling_kw.get("tile") is not None:
        tiling = tiling_protocol(**tiling_kw)
    elif any(v is not None for v in tiling_kw.values()):
        raise ValueError(f"learned planner: {sorted(tiling_kw)} given without tile")
    if tiling is not None and guide is not None:
        raise ValueError("learned planner: tile applies to a checkpoint's network, not to a given guide")
    if checkpoint is not None and guide is not None:
        raise ValueError("learned planner: pass checkpoint or guide, not both")
    if guide is None and checkpoint is not None and kw.get("decoder", "direct") != "prediction_free":
        guide = load_guide(checkpoint, dtype=dtype, tiling=tiling)
    return LearnedPlanner(guide, **kw)
