"""The run spec's keys (contract §7): required keys, defaults, accepted values, and one
validator per key.

:data:`VALIDATORS` is an ordered table of ``(key, check)``: ``check(value, spec)``
returns the value to keep (normalised: a tuple of seeds, a :class:`BudgetSpec`, a
float weight ...) or raises :class:`Invalid` (what the value must be;
:func:`passage_jax.run.specification.parse_spec` names the key and echoes its value) or
:class:`Refused` (a message that stands alone). ``spec`` holds every key, the ones
earlier in the table already checked and normalised, so a check may read them (a
seed overlay reads ``seeds``, ``quality_repeat_index`` reads ``latency_repeats``). A
key may appear twice: first its own type, later its agreement with other keys. The
first failure is the error.

Every count and limit has a cap (:data:`CAPS`): generous, but finite, and checked here,
before anything is allocated or run, so that no value (``latency_repeats: 1000000000``)
can make a run allocate or loop without end. A value over its cap is refused naming the
key, the value and the cap (docs/runner.md, "Caps").
"""
from __future__ import annotations

import math
import re
from typing import Any

from passage_jax.budget import BudgetSpec, ProtocolError
from passage_jax.checks import MAX_COST_WEIGHT, cap_problem, cap_text, is_full_commit, is_int, is_number
from passage_jax.contract import (
    BATCHED_PROFILE,
    COMPLETE_REQUEST_PROFILE,
    DEFAULT_BATCH_WARMUP,
    DEFAULT_SEEDS,
    DEFAULT_SESSION_WARMUP,
    INFERENCE_FORMATS,
    OBJECTIVES,
    ONE_PASS_PROFILES,
    PROFILE_EXECUTION,
    SESSION_PROFILES,
    TIMING_PROFILES,
    VARIANTS,
)
from passage_jax.data.scene import SPLIT_ALIASES, SPLITS, canonical_split
from passage_jax.fileio import one_line

__all__ = ["REQUIRED", "DEFAULTS", "KNOWN", "REFERENCE_POLICIES", "EXECUTIONS", "ECHO_LIMIT",
           "PLAIN_NAME", "MAX_NAME_LENGTH", "SPLIT_ROLES", "ROLE_SPLITS", "DETERMINISM_CLAIMS",
           "COMPONENT_VARIANTS", "COMPONENT_GUIDES", "COMPONENT_KEYS", "VALIDATORS", "Invalid", "Refused",
           "shown", "plain_name_problem", "SESSION_SERIES", "session_defaults", "CAPS"]

#: the most characters of a value an error message echoes
ECHO_LIMIT = 200
#: the longest plain name (``method_name``)
MAX_NAME_LENGTH = 128
#: a plain name: ASCII letters, digits, ``.``, ``_`` and ``-``, not starting with ``.``
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")

REFERENCE_POLICIES = ("released_labels", "independent_analytic_reference")
#: How requests are executed: in the run's own process, or in a supervised worker process.
EXECUTIONS = ("in_process", "supervised")
COMPONENT_VARIANTS = ("direct", "bounded_repair", "prediction_free", "exact_fallback",
                      "exact_classical", "budgeted_classical", "oracle_diagnostic")
COMPONENT_GUIDES = ("learned", "prediction_free", "none", "oracle")
COMPONENT_KEYS = ("variant", "guide", "checkpoint_id", "machinery_id", "primary_learned")

REQUIRED = ("method_name", "inference", "resolution", "cost_model", "split")
#: Every accepted key with its default (REQUIRED keys have none).
DEFAULTS: dict[str, Any] = {
    "family": None,
    "architecture": None,
    "inference_format": "request",
    "inference_kwargs": {},
    "inference_kwargs_by_seed": {},
    "cost_weight": None,
    "task_variant": "obstacles",
    "n_samples": 1024,
    "seeds": list(DEFAULT_SEEDS),
    "dataset_path": None,
    "dataset_repo": None,
    "dataset_revision": None,
    "latency_warmup": 5,
    "latency_repeats": 3,
    "quality_repeat_index": 0,
    "budget": {},
    "reference_max_expansions": None,
    "reference_policy": "released_labels",
    "reference_cohort_id": None,
    "references_from": None,
    "results_root": "results",
    "component_control": None,
    "runtime_bundle_manifest": None,
    "device": None,
    "execution": "in_process",
    "worker_memory_mb": None,
    "worker_grace_ms": 200,
    "worker_warmup": 1,
    "timing_profile": COMPLETE_REQUEST_PROFILE,
    "session_warmup": None,  # DEFAULT_SESSION_WARMUP under a session profile
    "batch_size": None,  # required under the batched profile
    "batch_warmup": None,  # DEFAULT_BATCH_WARMUP under the batched profile
    "warmup_scene": None,
    "split_role": None,
    "calibration_decisions": None,
    "determinism": "non_deterministic",
    "container_digest": None,
    "roster": None,
    "roster_sha256": None,
}
KNOWN = REQUIRED + tuple(DEFAULTS)
#: what a run's split is used for (docs/runner.md, "Spec"); a ``test`` run must carry the calibration
#: decisions frozen before it (``calibration_decisions``)
SPLIT_ROLES = ("development", "calibration", "validation", "test")
#: the split each role may run on (``development`` runs on any split but the test split)
ROLE_SPLITS = {"calibration": ("calibration",), "validation": ("validation",), "test": ("test",),
               "development": ("train", "validation", "calibration")}
#: what a run states about the repeatability of its routes
DETERMINISM_CLAIMS = ("non_deterministic", "deterministic")
_DEVICE_KINDS = ("cpu", "gpu", "cuda", "rocm", "tpu")
#: the series keys a one-pass timing profile fixes (a session's warm-up is ``session_warmup``,
#: the batched procedure's ``batch_warmup``): the value each key resolves to there, and why a
#: spec may not set another
SESSION_SERIES = {
    "latency_warmup": (0, "its warm-up is session_warmup (batch_warmup under batched_v1)"),
    "latency_repeats": (1, "it times each task once"),
    "quality_repeat_index": (0, "its one timed repeat (0) is the quality repeat"),
    "worker_warmup": (0, "its warm-up is session_warmup (batch_warmup under batched_v1)"),
}
_LIMITS = ("max_expansions", "max_queue_operations", "max_live_states", "wall_time_ms")
#: The largest value of every count and limit of the spec (docs/runner.md, "Caps" says why
#: each): a larger one is refused when the spec is loaded, naming the key, its value and the
#: cap. ``seeds`` caps how many seeds there are, ``seed`` each seed's value (>= 0).
CAPS: dict[str, int | float] = {
    "resolution": 16_384,
    "n_samples": 10_000_000,
    "seeds": 1_000,
    "seed": 2**32 - 1,
    "latency_warmup": 1_000,
    "latency_repeats": 1_000,
    "session_warmup": 10_000,
    "batch_size": 65_536,
    "batch_warmup": 1_000,
    "worker_warmup": 1_000,
    "reference_max_expansions": 10**12,
    "worker_memory_mb": 1 << 24,
    "worker_grace_ms": 3_600_000,
    "cost_weight": MAX_COST_WEIGHT,
    "budget.max_expansions": 10**12,
    "budget.max_queue_operations": 10**12,
    "budget.max_live_states": 10**12,
    "budget.wall_time_ms": 86_400_000,
}


class Invalid(ValueError):
    """A key's value is refused; the message says what it must be."""


class Refused(ValueError):
    """The spec is refused with this message as it stands (no key or value added)."""


def shown(value, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` as an error message echoes it: at most ``limit`` characters, cut
    with ``...`` (a huge value is never copied into a message)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails is still named)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:max(0, limit - 3)] + "..."


def plain_name_problem(value) -> str | None:
    """What is wrong with ``value`` as a plain name (None: nothing)."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty plain name"
    if len(value) > MAX_NAME_LENGTH or not PLAIN_NAME.fullmatch(value):
        return (f"must be a plain name: ASCII letters, digits, '.', '_' and '-', not starting with "
                f"'.', at most {MAX_NAME_LENGTH} characters; it names output folders, so no '/', "
                f"'..' or absolute path")
    return None


def session_defaults(d: dict, given) -> dict:
    """``d`` (every key with its value or default) with the series keys a session timing
    profile fixes (:data:`SESSION_SERIES`) resolved to their session values where the
    spec ``given`` does not set them (a value it sets is checked by the validators)."""
    if d.get("timing_profile") in ONE_PASS_PROFILES:
        for key, (value, _) in SESSION_SERIES.items():
            if key not in given:
                d[key] = value
    return d


# --------------------------------------------------------------------------- #
# checks of one kind, made for a key
# --------------------------------------------------------------------------- #

def _one_of(choices, message: str):
    def check(v, d):
        if v not in choices:
            raise Invalid(message)
        return v
    return check


def _capped(key: str, v):
    """``v`` unless it is over ``key``'s cap (:data:`CAPS`): :class:`Refused` naming the key,
    the value and the cap."""
    problem = cap_problem(key, v, CAPS[key])
    if problem:
        raise Refused(f"{problem} (docs/runner.md, \"Caps\")")
    return v


def _integer(low: int, message: str, optional: bool = False, cap: str | None = None):
    """An integer >= ``low`` (None too when ``optional``), at most the cap of key ``cap``."""
    def check(v, d):
        if optional and v is None:
            return None
        if not is_int(v) or v < low:
            raise Invalid(message)
        return int(_capped(cap, v)) if cap else int(v)
    return check


def _optional_str(message: str = "must be a string or null"):
    def check(v, d):
        if v is not None and not isinstance(v, str):
            raise Invalid(message)
        return v
    return check


def _optional_path(what: str):
    """Null, or a non-empty path: an empty string (or only spaces) is not taken for null."""
    def check(v, d):
        if v is None:
            return None
        if not isinstance(v, str) or not v.strip() or "\0" in v:
            why = ("; an empty string names no file or folder" if isinstance(v, str) and not v.strip()
                   else "")
            raise Invalid(f"must be {what} (a non-empty path, no NUL) or null{why}")
        return v
    return check


def _optional_hex(pattern: str, message: str):
    def check(v, d):
        if v is not None and (not isinstance(v, str) or not re.fullmatch(pattern, v)):
            raise Invalid(message)
        return v
    return check


# --------------------------------------------------------------------------- #
# checks of one key
# --------------------------------------------------------------------------- #

def _method_name(v, d):
    problem = plain_name_problem(v)
    if problem:
        raise Invalid(problem)
    return v


def _inference(v, d):
    if not isinstance(v, str) or not v.strip():
        raise Invalid("must be a non-empty string")
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", v):
        raise Invalid("must look like 'package.module:attr'")
    return v


def _results_root(v, d):
    if not isinstance(v, str) or not v.strip() or "\0" in v:
        raise Invalid("must be a non-empty path (the folder bench writes under)")
    return v


def _kwargs(v, d):
    if not isinstance(v or {}, dict):
        raise Invalid("must be a mapping")
    return dict(v or {})


def _cost_weight(v, d):
    if v is None:
        return None
    if not is_number(v) or not math.isfinite(v) or v < 0:
        raise Invalid(f"must be a finite number in [0, {cap_text(MAX_COST_WEIGHT)}] (it only "
                      f"confirms the released weight)")
    return float(_capped("cost_weight", v))


def _split(v, d):
    try:
        return canonical_split(str(v))
    except ValueError:
        # the caller adds the value once ("(got ...)"); the message says only what it must be
        raise Invalid(f"must be one of {list(SPLITS)} (aliases {SPLIT_ALIASES})") from None


def _seeds(v, d):
    if not isinstance(v, (list, tuple)) or not v or not all(is_int(s) for s in v):
        raise Invalid("must be a non-empty list of integers")
    if len(v) > CAPS["seeds"]:
        raise Refused(f"seeds: {len(v):,} seeds exceed the cap {cap_text(CAPS['seeds'])} "
                      f"(docs/runner.md, \"Caps\")")
    for s in v:
        if s < 0:
            raise Invalid(f"must be integers in [0, {cap_text(CAPS['seed'])}] (seed {shown(s)} "
                          f"is negative)")
        if s > CAPS["seed"]:
            raise Refused(f"seeds: seed {shown(s)} exceeds its cap {cap_text(CAPS['seed'])} "
                          f"(docs/runner.md, \"Caps\")")
    if len(set(v)) != len(v):
        raise Invalid("must not repeat a seed")
    return tuple(int(s) for s in v)


def _kwargs_by_seed(v, d):
    by_seed = v or {}
    if not isinstance(by_seed, dict):
        raise Invalid("must be a mapping {seed: {kwargs}}")
    norm = {}
    for k, kw in by_seed.items():
        try:
            s = int(k)
        except (TypeError, ValueError):
            raise Invalid(f"key {shown(k)} is not a seed") from None
        if s not in d["seeds"]:
            raise Invalid(f"seed {s} is not one of seeds {list(d['seeds'])}")
        if not isinstance(kw, dict):
            raise Invalid(f"seed {s}: must map to a mapping of kwargs")
        norm[s] = dict(kw)
    return norm


def _dataset_source(v, d):
    if v is None and d["dataset_repo"] is None:
        raise Refused("missing required key: dataset_path (or dataset_repo with dataset_revision)")
    return v


def _dataset_revision(v, d):
    if v is None:
        return None
    if not is_full_commit(v):
        raise Invalid("must be exactly 40 hex characters (an immutable commit)")
    if d["dataset_repo"] is None:
        raise Invalid("is given without dataset_repo")
    if d["dataset_path"] is not None:
        raise Invalid("dataset_path and a dataset_repo revision are both given; choose one source")
    return v


def _dataset_repo(v, d):
    if v is not None and d["dataset_path"] is None and d["dataset_revision"] is None:
        raise Invalid("needs dataset_revision (40 hex characters) to download")
    return v


def _quality_repeat_index(v, d):
    if not is_int(v) or not 0 <= v < d["latency_repeats"]:
        raise Invalid(f"must be an integer in [0, latency_repeats={d['latency_repeats']})")
    return int(v)


def _budget(v, d):
    try:
        budget = BudgetSpec.from_dict(v or {})
    except (ProtocolError, TypeError, ValueError) as e:
        raise Refused(f"budget: {one_line(e, 2 * ECHO_LIMIT)}") from None
    for name in _LIMITS:
        _capped(f"budget.{name}", getattr(budget, name))
    return budget


def _cohort_for_policy(v, d):
    if d["reference_policy"] == "independent_analytic_reference" and not v:
        raise Invalid("is required by reference_policy independent_analytic_reference")
    if d["reference_policy"] == "released_labels" and v is not None:
        raise Invalid("only applies to reference_policy independent_analytic_reference")
    return v


def _component_control(cc, d):
    if cc is None:
        return None
    if not isinstance(cc, dict):
        raise Refused(f"component_control must be a mapping or null (got {shown(cc)})")
    bad = sorted(set(map(str, cc)) - set(COMPONENT_KEYS))
    if bad:
        raise Refused(f"component_control: unknown key(s) {shown(bad)}; known: {list(COMPONENT_KEYS)}")
    v, g = cc.get("variant"), cc.get("guide")
    if v not in COMPONENT_VARIANTS:
        raise Refused(f"component_control.variant {shown(v)} is not one of {list(COMPONENT_VARIANTS)}")
    if g not in COMPONENT_GUIDES:
        raise Refused(f"component_control.guide {shown(g)} is not one of {list(COMPONENT_GUIDES)}")
    pl = cc.get("primary_learned", False)
    if not isinstance(pl, bool):
        raise Refused("component_control.primary_learned must be true or false")
    if (v in ("direct", "bounded_repair") or g == "learned") and not cc.get("checkpoint_id"):
        raise Refused(f"component_control.variant {v!r} needs checkpoint_id")
    if v in ("bounded_repair", "prediction_free", "exact_fallback") and not cc.get("machinery_id"):
        raise Refused(f"component_control.variant {v!r} needs machinery_id")
    if v == "exact_fallback" and pl:
        raise Refused("component_control: exact_fallback cannot be a primary learned result")
    if (v == "oracle_diagnostic") != (g == "oracle"):
        raise Refused("component_control: the oracle guide belongs only to oracle_diagnostic")
    return {k: cc.get(k) for k in COMPONENT_KEYS}


def _device_kind(v, d):
    if v is not None and v not in _DEVICE_KINDS:
        raise Invalid("must be null (default device) or one of cpu, gpu, cuda, rocm, tpu")
    return v


def _worker_memory(v, d):
    v = _integer(1, "must be a positive integer (MiB of worker resident memory) or null", True,
                 "worker_memory_mb")(v, d)
    if v is not None and d["execution"] != "supervised":
        raise Invalid("only applies to execution: supervised")
    return v


def _worker_grace(v, d):
    if not is_number(v) or not math.isfinite(v) or v < 0:
        raise Invalid("must be a finite number of milliseconds >= 0")
    _capped("worker_grace_ms", v)
    return v if isinstance(v, (int, float)) else float(v)


def _supervised_deadline(v, d):
    if v == "supervised" and d["budget"].wall_time_ms is None:
        raise Invalid("supervised execution needs budget.wall_time_ms: the parent kills a request "
                      "that passes this deadline plus worker_grace_ms")
    return v


def _session_series(key: str):
    """Under a session timing profile ``key`` holds its session value (:data:`SESSION_SERIES`)."""
    value, why = SESSION_SERIES[key]

    def check(v, d):
        profile = d["timing_profile"]
        if profile in ONE_PASS_PROFILES and v != value:
            raise Refused(f"{key} does not apply to timing_profile {profile}; {why} "
                          f"(leave {key} out, or give {value}; got {shown(v)})")
        return v
    return check


def _session_warmup(v, d):
    if d["timing_profile"] not in SESSION_PROFILES:
        if v is not None:
            raise Invalid(f"only applies to the session timing profiles {list(SESSION_PROFILES)} "
                          f"(timing_profile is {d['timing_profile']})")
        return None
    if v is None:
        return DEFAULT_SESSION_WARMUP
    if not is_int(v) or v < 0:
        raise Invalid("must be an integer >= 0 (untimed calls before the first timed request)")
    return int(_capped("session_warmup", v))


def _batched_only(v, d):
    """None outside the batched profile (a value there is refused)."""
    if v is not None:
        raise Invalid(f"only applies to timing_profile {BATCHED_PROFILE} (timing_profile is "
                      f"{d['timing_profile']})")
    return None


def _batch_size(v, d):
    if d["timing_profile"] != BATCHED_PROFILE:
        return _batched_only(v, d)
    if v is None:
        raise Invalid(f"is required by timing_profile {BATCHED_PROFILE}: the scenes a planner's "
                      f"plan_batch takes at a time")
    if not is_int(v) or v < 1:
        raise Invalid("must be a positive integer (scenes per batch)")
    return int(_capped("batch_size", v))


def _batch_warmup(v, d):
    if d["timing_profile"] != BATCHED_PROFILE:
        return _batched_only(v, d)
    if v is None:
        return DEFAULT_BATCH_WARMUP
    if not is_int(v) or v < 0:
        raise Invalid("must be an integer >= 0 (untimed batches before the first timed one)")
    return int(_capped("batch_warmup", v))


def _batched_procedure(v, d):
    """Under the batched profile: the request format, and no budget limit (a batch has no
    per-request budget)."""
    if v != BATCHED_PROFILE:
        return v
    if d["inference_format"] != "request":
        raise Refused(f"timing_profile {BATCHED_PROFILE} needs inference_format: request (the "
                      f"planner object's plan_batch is called; got {d['inference_format']})")
    limits = [n for n in _LIMITS if getattr(d["budget"], n) is not None]
    if limits:
        raise Refused(f"timing_profile {BATCHED_PROFILE} has no per-request budget: leave "
                      f"budget.{', budget.'.join(limits)} out (a batch is timed whole)")
    return v


def _warmup_scene(v, d):
    if v is None:
        return None
    if d["timing_profile"] not in ONE_PASS_PROFILES:
        raise Invalid(f"only applies to the one-pass timing profiles {list(ONE_PASS_PROFILES)} "
                      f"(timing_profile is {d['timing_profile']})")
    if not isinstance(v, str) or not v.strip():
        raise Invalid("must be the sample id of a scene of the root's validation split, or null")
    return v


def _profile_execution(v, d):
    need = PROFILE_EXECUTION.get(v)
    if need is not None and d["execution"] != need:
        raise Refused(f"timing_profile {v} requires execution: {need} (got execution: "
                      f"{d['execution']})")
    return v


def _split_role(role, d):
    if role is None:
        return None
    if role not in SPLIT_ROLES:
        raise Invalid(f"must be one of {list(SPLIT_ROLES)} or null (undeclared)")
    if d["split"] not in ROLE_SPLITS[role]:
        raise Invalid(f"a {role} run cannot use the {d['split']!r} split (allowed: "
                      f"{list(ROLE_SPLITS[role])}); decisions are tuned on development and calibration "
                      f"splits and frozen before a test run")
    return role


def _calibration_decisions(cal, d):
    cal = _optional_path("the calibration-decisions file")(cal, d)
    if d["split_role"] == "test" and cal is None:
        raise Invalid("a test-role run needs the file of calibration decisions frozen before it (its "
                      "canonical-JSON sha256 is recorded in the manifest and the sidecar)")
    if cal is not None and d["split_role"] not in ("test", "validation"):
        raise Invalid("only applies to split_role test or validation")
    return cal


def _roster_sha256(v, d):
    if (d["roster"] is None) != (v is None):
        raise Invalid("a roster and its sealed sha256 are given together")
    return _optional_hex(r"[0-9a-f]{64}", "must be 64 lowercase hex characters")(v, d)


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def _own_limits(kw: dict):
    """(where, name, value) of each limit in a planner's kwargs: a top-level key of
    ``_LIMITS``, or one inside a stage of a ``stages`` list (the learned planner's
    ``{guided_astar: {max_expansions: n}}``, where ``stages[i].guided_astar``)."""
    for name in _LIMITS:
        if name in kw:
            yield "", name, kw[name]
    stages = kw.get("stages")
    for i, stage in enumerate(stages if isinstance(stages, list) else []):
        if isinstance(stage, dict) and len(stage) == 1:
            (key, settings), = stage.items()
            for name in _LIMITS:
                if isinstance(settings, dict) and name in settings:
                    yield f"stages[{i}].{key}.", name, settings[name]


def _within_budget(v, d):
    """A planner's own limit (per seed) may not exceed the declared budget."""
    for seed in d["seeds"]:
        kw = dict(v)
        kw.update(d["inference_kwargs_by_seed"].get(seed, {}))
        for where, name, value in _own_limits(kw):
            declared = getattr(d["budget"], name)
            if declared is not None and value is not None and _num(value) > declared:
                raise Refused(f"inference_kwargs {where}{name}={shown(value)} (seed {seed}) exceeds "
                              f"budget.{name}={declared!r}; a planner may not use more than the declared "
                              f"budget")
    return v


_STRINGS = ("family", "architecture", "dataset_repo", "reference_cohort_id", "device")
#: the keys that name a file or folder (null: none), with what they name
_PATHS = (("dataset_path", "a dataset root or 'shipped'"),
          ("references_from", "a finished run folder or one of its seed folders"),
          ("runtime_bundle_manifest", "the runtime bundle's manifest file"))

#: ``(key, check)`` in the order the checks run (see the module docstring).
VALIDATORS = (
    ("method_name", _method_name),
    ("inference", _inference),
    *((key, _optional_str()) for key in _STRINGS),
    *((key, _optional_path(what)) for key, what in _PATHS),
    ("results_root", _results_root),
    ("inference_format", _one_of(INFERENCE_FORMATS, f"must be one of {list(INFERENCE_FORMATS)}")),
    ("inference_kwargs", _kwargs),
    ("resolution", _integer(1, "must be a positive integer", cap="resolution")),
    ("cost_model", _one_of(OBJECTIVES, f"must be one of the released objectives {list(OBJECTIVES)}")),
    ("cost_weight", _cost_weight),
    ("split", _split),
    ("task_variant", _one_of(VARIANTS, f"must be one of {list(VARIANTS)}")),
    ("n_samples", _integer(1, "must be a positive integer or null (whole split)", optional=True,
                           cap="n_samples")),
    ("seeds", _seeds),
    ("inference_kwargs_by_seed", _kwargs_by_seed),
    ("dataset_path", _dataset_source),
    ("dataset_revision", _dataset_revision),
    ("dataset_repo", _dataset_repo),
    ("timing_profile", _one_of(TIMING_PROFILES, f"must be one of {list(TIMING_PROFILES)}")),
    ("latency_warmup", _integer(0, "must be an integer >= 0", cap="latency_warmup")),
    ("latency_repeats", _integer(1, "must be an integer >= 1", cap="latency_repeats")),
    ("quality_repeat_index", _quality_repeat_index),
    *((key, _session_series(key)) for key in ("latency_warmup", "latency_repeats",
                                                "quality_repeat_index")),
    ("session_warmup", _session_warmup),
    ("batch_size", _batch_size),
    ("batch_warmup", _batch_warmup),
    ("warmup_scene", _warmup_scene),
    ("budget", _budget),
    ("reference_max_expansions", _integer(1, "must be a positive integer or null", optional=True,
                                          cap="reference_max_expansions")),
    ("reference_policy", _one_of(REFERENCE_POLICIES, f"must be one of {list(REFERENCE_POLICIES)}")),
    ("reference_cohort_id", _cohort_for_policy),
    ("component_control", _component_control),
    ("device", _device_kind),
    ("execution", _one_of(EXECUTIONS, f"must be one of {list(EXECUTIONS)}")),
    ("worker_memory_mb", _worker_memory),
    ("worker_grace_ms", _worker_grace),
    ("worker_warmup", _integer(0, "must be an integer >= 0 (untimed warm-up requests per fresh worker)",
                               cap="worker_warmup")),
    ("execution", _supervised_deadline),
    ("worker_warmup", _session_series("worker_warmup")),
    ("timing_profile", _profile_execution),
    ("timing_profile", _batched_procedure),
    ("split_role", _split_role),
    ("calibration_decisions", _calibration_decisions),
    ("determinism", _one_of(DETERMINISM_CLAIMS, f"must be one of {list(DETERMINISM_CLAIMS)}")),
    ("container_digest", _optional_hex(r"sha256:[0-9a-f]{64}",
                                       "must look like 'sha256:<64 lowercase hex>' or be null")),
    ("roster", _optional_path("a roster file")),
    ("roster_sha256", _roster_sha256),
    ("inference_kwargs", _within_budget),
)
