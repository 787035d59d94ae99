"""The learned planner: a guide (any ``request -> (H, W)`` cost-to-go estimate, or the
prediction-free octile field) and a list of stages run on its field, behind the planner
protocol (docs/contract.md §6, §9; ``docs/learned.md``, "The learned planner").

The stages (:mod:`passage_jax.learned.stages`) follow
``[backups] (descent | guided_astar) [guided_astar] [exact]``: optional Bellman backups of
the field, a primary search stage, an optional guided A* repair, an optional exact
fallback. A search stage runs only when the one before it failed or its route was
rejected; the composition stops at the first route accepted. Every guided stage (a
descent or a guided A*) ends in one :meth:`LearnedPlanner._finish`: its route refined in a
corridor of ``refine_radius`` cells (the work charged to the stage, within the request's
budget; out of budget, the unrefined route is kept), then tested against ``accept_ratio``
times the octile bound at the start (over it: ``no_path``, the next stage runs).

``guide="octile"`` (the prediction-free control) is the same stage list on the octile
field instead of the network's; the guide is then never called.

Batches: a planner of the stages ``[backups] descent`` (the descent with ``max_escapes``
and ``max_steps`` only) on a network guide or the octile field also has ``plan_batch``
(docs/protocol.md, "Batches"; :mod:`passage_jax.learned.batched`), whose routes are
``plan``'s per scene; any other has none (:attr:`LearnedPlanner.batch_refusal` says why).

Budgets: the request's ``budget.max_expansions`` is one budget for the whole request; a
guided A* searches under the tighter of its own ``max_expansions`` and what the stages
before it left; a descent under its ``max_steps`` and the request's limit; the exact
solver has no limit of its own (its work is counted). Accounting: ``stage_work`` holds
the contract §6 counters of each stage that ran (``primary``, ``repair``, ``fallback``),
``work`` their totals, ``route_stage`` the stage whose route is returned (``None`` on
failure). The guide is called once per request; ``resource_peaks`` records ``forward_ms``
(the guide call), ``decode_ms`` (backups and every stage) and, with backups,
``backups_ms`` and ``backup_cell_updates``.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np

from passage_jax.learned.batched import (
    BatchConfig,
    batch_refusal,
    check_batch,
    device_parts,
    join_parts,
    on_one_device,
    plan_batch_kernel,
)
from passage_jax.learned.decoders import (
    DecodeResult,
    accepted,
    bellman_backups,
    bounded_repair,
    corridor_refine,
    direct,
    exact_fallback,
    octile_field,
    request_cost_field,
)
from passage_jax.learned.guide import NetworkGuide, load_guide
from passage_jax.learned.stages import (
    LEGACY_KWARGS,
    Descent,
    flow,
    legacy_form,
    parse_stages,
    stage_roles,
)
from passage_jax.learned.tiling import tiling_protocol
from passage_jax.options import merge_options
from passage_jax.precision import float64_available, kernel_x64
from passage_jax.protocol.batch import BatchRoutes, PlanBatch
from passage_jax.protocol.contracts import PlanRequest, PlanResult, accumulate_stages

__all__ = ["GUIDES", "INFERENCE_KWARGS", "PlannerOptions", "LearnedPlanner", "make_planner",
           "guide_from_flax"]

#: The fields a stage list can run on: the network's (a checkpoint or a callable) or the
#: prediction-free octile field.
GUIDES = ("learned", "octile")
#: ``inference_kwargs`` :func:`make_planner` takes.
INFERENCE_KWARGS = ("checkpoint", "guide", "dtype", "stages", "tile", "stride", "hflip", "blend", "stitch")
#: Tiled-inference keys of ``inference_kwargs`` (used when ``tile`` is set).
_TILING_KWARGS = ("tile", "stride", "hflip", "blend", "stitch")
_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def guide_from_flax(module, params, features_fn: Callable, *, output: str = "cost_to_go",
                    dtype: str = "float32") -> NetworkGuide:
    """A guide from one's own Flax module: ``module.apply(params, x)`` with
    ``x = features_fn(request)[None]`` (1, H, W, C) must return (1, H, W);
    ``output="cost_to_go"`` reads it as the estimate itself, ``"log_ratio"`` as the
    log of its ratio to the octile cost (see :class:`NetworkGuide`)."""
    return NetworkGuide(module, params, dtype=dtype, output=output, feature_fn=features_fn)


@dataclasses.dataclass(frozen=True)
class PlannerOptions:
    """A :class:`LearnedPlanner`'s stages (:mod:`passage_jax.learned.stages`: stage objects
    or their spec mappings, checked against the stage grammar), stored as a tuple of stage
    objects. Default: the descent alone."""

    stages: tuple = (Descent(),)

    def __post_init__(self):
        object.__setattr__(self, "stages", parse_stages(self.stages))


class LearnedPlanner:
    """``plan(request) -> PlanResult`` for a guide and a list of stages (see the module
    text): ``guide`` a callable ``request -> (H, W)`` field or ``"octile"`` (the
    prediction-free control); ``options`` (a :class:`PlannerOptions`) or ``stages=`` as a
    keyword, e.g. ``LearnedPlanner(guide, stages=[{"descent": {}}, {"guided_astar":
    {"max_expansions": 4096}}])``; an unknown keyword is a TypeError naming it."""

    def __init__(self, guide: Callable | str | None, options: PlannerOptions | None = None, **overrides):
        opts = merge_options(PlannerOptions, options, overrides, "LearnedPlanner")
        if isinstance(guide, str):
            if guide != "octile":
                raise ValueError(f"learned planner: guide={guide!r} is not a callable or 'octile'")
            guide = None
            self.octile = True
        else:
            if guide is None:
                raise ValueError("learned planner: the stages need a guide (a checkpoint, a callable "
                                 "request -> (H, W) field, or 'octile')")
            if not callable(guide):
                raise TypeError(f"learned planner: guide must be callable request -> (H, W) field, "
                                f"got {type(guide).__name__}")
            self.octile = False
        self.guide = guide
        self.options = opts
        self.stages = opts.stages
        self._roles = stage_roles(opts.stages)
        self.backups = sum(s.k for s in opts.stages if s.key == "backups")
        #: why this planner has no ``plan_batch`` (None: it has one)
        self.batch_refusal = batch_refusal(self.guide, self.octile, self.stages)
        self._device_params: dict = {}  # the guide's parameters put on each device of a split batch

    @property
    def plan_batch(self):
        """``plan_batch(batch) -> BatchRoutes`` (:meth:`_plan_batch`) where this planner's
        stages and guide can be batched (:attr:`batch_refusal` is None): ``[backups]
        descent`` with the descent's ``max_escapes`` and ``max_steps``, on a
        :class:`~passage_jax.learned.guide.NetworkGuide` with the default inputs and no tiling,
        or on the octile field. Any other planner has no ``plan_batch``: the attribute
        raises AttributeError naming why (its :attr:`batch_refusal`), so ``hasattr`` is False
        and the batched procedure refuses it before any record ("the planner has no
        plan_batch")."""
        if self.batch_refusal is not None:
            raise AttributeError(f"learned planner has no plan_batch: {self.batch_refusal}")
        return self._plan_batch

    def batch_config(self) -> BatchConfig:
        """The static description of this planner's batched kernel
        (:class:`~passage_jax.learned.batched.BatchConfig`); ValueError when it has none."""
        if self.batch_refusal is not None:
            raise ValueError(f"learned planner: {self.batch_refusal}")
        descent = next(s for s in self.stages if s.key == "descent")
        common = {"backups": self.backups, "max_escapes": descent.max_escapes,
                  "max_steps": descent.max_steps, "per_scene": jax.default_backend() == "cpu"}
        if self.octile:
            return BatchConfig(guide="octile", **common)
        return BatchConfig(guide="network", module=self.guide.module, dtype=self.guide.dtype,
                           output=self.guide.output, **common)

    def _plan_batch(self, batch: PlanBatch) -> BatchRoutes:
        """Routes of every scene of ``batch`` (:class:`~passage_jax.protocol.batch.PlanBatch`):
        the guide's field, the edge costs, the backups and the descent with its escapes of
        the whole batch in one jitted call
        (:func:`~passage_jax.learned.batched.plan_batch_kernel`, under
        :func:`~passage_jax.precision.kernel_x64`).

        Returns a :class:`~passage_jax.protocol.batch.BatchRoutes` of device arrays:
        ``cells`` (B, H*W, 2) int32 (a descent visits a cell at most once), ``length`` (B,)
        and ``status`` (B,) int32. Per live scene, with float64 kernels, the route and
        status :meth:`plan` returns for its request, cell for cell (``ok``; ``no_path``
        for a descent stuck or out of escapes; ``budget_exhausted`` at the step limit):
        every value the descent compares is bit for bit the batch-one value (module text of
        :mod:`passage_jax.learned.batched`). A padding row (``live`` False) is not walked:
        ``no_path``, no route. A batch split along its batch axis over several devices is
        planned on each device for its rows, one call a device, and its routes come back
        split as the batch was (:func:`~passage_jax.learned.batched.device_parts`); any other
        batch on several devices is gathered onto one
        (:func:`~passage_jax.learned.batched.on_one_device`). The shapes and, with float64
        kernels, the elevation's float64 dtype are checked (ValueError)."""
        check_batch(batch, float64_available())
        params = None if self.octile else self.guide.params
        config = self.batch_config()
        with kernel_x64():
            split = device_parts(batch)
            if split is None:
                return plan_batch_kernel(params, on_one_device(batch), config=config)
            parts, sharding = split
            return join_parts([plan_batch_kernel(self._params_on(params, part), part, config=config)
                               for part in parts], sharding)

    def _params_on(self, params, part):
        """``params`` on the device of ``part`` (a :class:`PlanBatch` on one device), put
        there once and kept (None stays None)."""
        if params is None:
            return None
        device = next(iter(part.elevation.devices()))
        kept = self._device_params.get(device)
        if kept is None:
            kept = self._device_params[device] = jax.device_put(params, device)
        return kept

    @property
    def precision(self) -> str:
        if self.guide is None:
            return "fp64"
        dtype = getattr(self.guide, "dtype", None)
        return _PRECISION.get(str(dtype), str(dtype)) if dtype is not None else "fp64"

    @staticmethod
    def _left(request: PlanRequest, spent: int) -> int | None:
        """What the request's expansion budget leaves after ``spent`` (None: no budget)."""
        if request.budget.max_expansions is None:
            return None
        return max(0, request.budget.max_expansions - spent)

    @staticmethod
    def _search_field(field, weight: float, request: PlanRequest, cost_field):
        """A guided A*'s heuristic: ``w * field + (1 - w) * octile`` (w = 1: the field itself)."""
        if weight == 1.0:
            return field
        bound = octile_field(request, cost_field=cost_field)
        f = np.asarray(field, np.float64)
        with np.errstate(invalid="ignore"):
            mixed = weight * f + (1.0 - weight) * bound
        return np.where(np.isinf(f) | np.isinf(bound), np.inf, mixed)

    def _finish(self, out: DecodeResult, stage, request: PlanRequest, cost_field, spent: int,
                what: str) -> DecodeResult:
        """A guided stage's route refined (``stage.refine_radius``) and tested
        (``stage.accept_ratio``); ``spent``: the request's expansions before this stage."""
        if out.status != "ok":
            return out
        if stage.refine_radius is not None:
            left = self._left(request, spent + out.work["expansions"])
            ref = corridor_refine(out.path, request, radius=stage.refine_radius, max_expansions=left,
                                  cost_field=cost_field)
            out = out._replace(path=ref.path, work=accumulate_stages({"a": out.work, "b": ref.work}))
        return accepted(out, request, stage.accept_ratio, cost_field, what=what)

    def _run(self, stage, role: str, field, request: PlanRequest, cost_field, spent: int,
             before: DecodeResult | None) -> DecodeResult:
        if stage.key == "exact":
            return exact_fallback(request, solver=stage.solver, cost_field=cost_field)
        if stage.key == "descent":
            out = direct(field, request, max_steps=stage.max_steps, cost_field=cost_field,
                         max_escapes=stage.max_escapes)
            return self._finish(out, stage, request, cost_field, spent, "descent")
        vals = [v for v in (stage.max_expansions, self._left(request, spent)) if v is not None]
        out = bounded_repair(self._search_field(field, stage.weight, request, cost_field), request,
                             max_expansions=min(vals) if vals else None, start_from=stage.start_from,
                             prefix=None if before is None else before.walked, cost_field=cost_field)
        return self._finish(out, stage, request, cost_field, spent,
                            "repair" if role == "repair" else "guided A*")

    def plan(self, request: PlanRequest) -> PlanResult:
        t0 = time.perf_counter()
        field = None if self.guide is None else self.guide(request)
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
        out, spent, role = None, 0, None
        for stage, nxt in zip([s for s in self.stages if s.key != "backups"], self._roles):
            if out is not None:
                if out.status == "ok":
                    break
                messages.append(f"{role}: {out.message}")
                if request.remaining_wall_ms() <= 0:
                    messages.append("deadline passed: later stages skipped")
                    skipped = True
                    break
            out = self._run(stage, nxt, field, request, cost_field, spent, out)
            role = nxt
            stage_work[role] = out.work
            spent += int(out.work.get("expansions") or 0)
        t2 = time.perf_counter()
        ok = out.status == "ok"
        if not ok and not skipped:
            messages.append(f"{role}: {out.message}")
        peaks = {"forward_ms": (t1 - t0) * 1000.0, "decode_ms": (t2 - t1) * 1000.0}
        if self.backups:
            peaks.update(backups_ms=head_ms,
                         backup_cell_updates=float(self.backups * field.size))
        return PlanResult(path=out.path if ok else None, status=out.status,
                          work=accumulate_stages(stage_work), stage_work=stage_work,
                          precision=self.precision, resource_peaks=peaks,
                          message=None if ok else "; ".join(messages), route_stage=role if ok else None)

    def __repr__(self):
        return f"LearnedPlanner({'octile' if self.octile else self.guide!r}, stages={list(self.stages)!r})"


def _refuse_legacy(kwargs: dict) -> None:
    old = sorted(set(kwargs) & set(LEGACY_KWARGS))
    if not old:
        return
    try:
        new = legacy_form({k: v for k, v in kwargs.items() if k not in ("checkpoint", "dtype")})
        shown = f"; for these settings write inference_kwargs: {flow(new)}"
    except (ValueError, TypeError):
        shown = ""
    raise ValueError(f"planner 'learned': inference_kwargs {old} are the former flat form; the "
                     f"planner takes guide (learned | octile) and a stages list "
                     f"[backups] (descent | guided_astar) [guided_astar] [exact] "
                     f"(docs/learned.md, \"The learned planner\"){shown}")


def make_planner(**inference_kwargs) -> LearnedPlanner:
    """Run-spec factory. ``guide``: ``"learned"`` (default: the network of ``checkpoint``,
    "shipped:<seed>" or a path, loaded with :func:`~passage_jax.learned.guide.load_guide`
    in ``dtype``), ``"octile"`` (the prediction-free control: a checkpoint given is not
    loaded, so one spec can switch guides) or any callable request -> field; ``stages``
    (:class:`PlannerOptions`). ``tile`` (int) applies the checkpoint's network tile by tile
    under the tiling protocol ``tiling_protocol(tile, stride, hflip, blend, stitch)``
    (defaults: the canonical ``passage_jax_tiled_v1``), decoding once on the reconstructed
    field; the other tiling keys need ``tile``. The former flat keys (``decoder``,
    ``max_expansions`` …) are refused with their stages written out."""
    _refuse_legacy(inference_kwargs)
    bad = sorted(set(inference_kwargs) - set(INFERENCE_KWARGS))
    if bad:  # the message of planners._common.check_kwargs (learned does not import planners)
        raise TypeError(f"planner 'learned': unknown inference_kwargs {bad}; known: "
                        f"{list(INFERENCE_KWARGS)}")
    kw = dict(inference_kwargs)
    checkpoint = kw.pop("checkpoint", None)
    guide = kw.pop("guide", None) or "learned"
    dtype = kw.pop("dtype", "float32")
    tiling_kw = {k: kw.pop(k) for k in _TILING_KWARGS if k in kw}
    tiling = None
    if tiling_kw.get("tile") is not None:
        tiling = tiling_protocol(**tiling_kw)
    elif any(v is not None for v in tiling_kw.values()):
        raise ValueError(f"learned planner: {sorted(tiling_kw)} given without tile")
    if isinstance(guide, str) and guide not in GUIDES:
        raise ValueError(f"learned planner: guide={guide!r} is not one of {list(GUIDES)} or a callable")
    if callable(guide):
        if tiling is not None:
            raise ValueError("learned planner: tile applies to a checkpoint's network, not to a given guide")
        if checkpoint is not None:
            raise ValueError("learned planner: pass checkpoint or guide, not both")
    elif guide == "learned":
        guide = None if checkpoint is None else load_guide(checkpoint, dtype=dtype, tiling=tiling)
    return LearnedPlanner(guide, **kw)
