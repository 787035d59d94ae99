"""Run spec (SPEC §7): loading, validation, defaults, and the starter template.

A spec is a YAML or JSON mapping. Unknown keys are refused, required keys must
be present, and every value is type-checked with an error naming the key.

A spec file is read bounded: at most :data:`SPEC_MAX_BYTES`, UTF-8 text, no YAML
aliases (:func:`passage_jax.fileio.read_document`); an error echoes at most
:data:`ECHO_LIMIT` characters of a value (:func:`shown`). ``method_name`` becomes part
of output paths (``bench`` writes ``<results_root>/<method_name>-<time>``), so it must
be a plain name (:func:`check_plain_name`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.data.scene import canonical_split
from passage_jax.fileio import one_line, read_document, sha256_bytes
from passage_jax.graph.spec import OBJECTIVES, VARIANTS
from passage_jax.protocol.adapters import INFERENCE_FORMATS
from passage_jax.protocol.contracts import BudgetSpec, ProtocolError

__all__ = ["RunSpec", "SpecError", "parse_spec", "load_spec", "REQUIRED", "DEFAULTS", "KNOWN",
           "STARTER_SPEC", "REFERENCE_POLICIES", "EXECUTIONS", "SPEC_MAX_BYTES", "ECHO_LIMIT",
           "PLAIN_NAME", "MAX_NAME_LENGTH", "shown", "check_plain_name"]

#: the largest spec file (and calibration-decisions file) read, in bytes
SPEC_MAX_BYTES = 1 << 20
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
    "results_root": "results",
    "component_control": None,
    "runtime_bundle_manifest": None,
    "device": None,
    "execution": "in_process",
    "worker_memory_mb": None,
    "worker_grace_ms": 200,
    "worker_warmup": 1,
    "split_role": None,
    "calibration_decisions": None,
    "determinism": "non_deterministic",
    "container_digest": None,
    "roster": None,
    "roster_sha256": None,
}
KNOWN = REQUIRED + tuple(DEFAULTS)
#: what a run's split is used for (seed 000 §4); a ``test`` run must carry the calibration
#: decisions frozen before it (``calibration_decisions``)
SPLIT_ROLES = ("development", "calibration", "validation", "test")
#: the split each role may run on (``development`` runs on any split but the test split)
ROLE_SPLITS = {"calibration": ("calibration",), "validation": ("validation",), "test": ("test",),
               "development": ("train", "validation", "calibration")}
#: what a run states about the repeatability of its routes
DETERMINISM_CLAIMS = ("non_deterministic", "deterministic")


class SpecError(ValueError):
    """The run spec is malformed (the message names the file and key)."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def shown(value, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)`` as an error message echoes it: at most ``limit`` characters, cut
    with ``...`` (a huge value is never copied into a message)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (a value whose repr fails is still named)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:max(0, limit - 3)] + "..."


def check_plain_name(value, key: str, where: str) -> str:
    """``value`` when it is a plain name usable as one path component (ASCII letters,
    digits, ``._-``, not starting with ``.``, at most :data:`MAX_NAME_LENGTH`
    characters); :class:`SpecError` naming ``key`` otherwise."""
    if not isinstance(value, str) or not value:
        raise SpecError(f"{where}: {key}: must be a non-empty plain name (got {shown(value)})")
    if len(value) > MAX_NAME_LENGTH or not PLAIN_NAME.fullmatch(value):
        raise SpecError(f"{where}: {key}: must be a plain name: ASCII letters, digits, '.', '_' and "
                        f"'-', not starting with '.', at most {MAX_NAME_LENGTH} characters; it names "
                        f"output folders, so no '/', '..' or absolute path (got {shown(value)})")
    return value


@dataclasses.dataclass(frozen=True)
class RunSpec:
    method_name: str
    inference: str
    resolution: int
    cost_model: str
    split: str
    family: str | None = None
    architecture: str | None = None
    inference_format: str = "request"
    inference_kwargs: dict = dataclasses.field(default_factory=dict)
    inference_kwargs_by_seed: dict = dataclasses.field(default_factory=dict)
    cost_weight: float | None = None
    task_variant: str = "obstacles"
    n_samples: int | None = 1024
    seeds: tuple = DEFAULT_SEEDS
    dataset_path: str | None = None
    dataset_repo: str | None = None
    dataset_revision: str | None = None
    latency_warmup: int = 5
    latency_repeats: int = 3
    quality_repeat_index: int = 0
    budget: BudgetSpec = BudgetSpec()
    reference_max_expansions: int | None = None
    reference_policy: str = "released_labels"
    reference_cohort_id: str | None = None
    results_root: str = "results"
    component_control: dict | None = None
    runtime_bundle_manifest: str | None = None
    device: str | None = None
    execution: str = "in_process"
    worker_memory_mb: int | None = None
    worker_grace_ms: float = 200
    worker_warmup: int = 1
    split_role: str | None = None
    calibration_decisions: str | None = None
    determinism: str = "non_deterministic"
    container_digest: str | None = None
    roster: str | None = None
    roster_sha256: str | None = None
    source: str = "<dict>"  # where the spec came from (not a spec key)

    def kwargs_for_seed(self, seed: int) -> dict:
        """``inference_kwargs`` overlaid with ``inference_kwargs_by_seed[seed]``."""
        out = dict(self.inference_kwargs)
        out.update(self.inference_kwargs_by_seed.get(int(seed), {}))
        return out

    def to_dict(self) -> dict:
        d = {}
        for f in dataclasses.fields(self):
            if f.name == "source":
                continue
            v = getattr(self, f.name)
            if isinstance(v, BudgetSpec):
                v = {k: x for k, x in v.to_dict().items() if x is not None}
            elif isinstance(v, tuple):
                v = list(v)
            elif f.name == "inference_kwargs_by_seed":
                v = {str(k): x for k, x in v.items()}
            d[f.name] = v
        return d

    def sha256(self) -> str:
        return sha256_bytes(json.dumps(self.to_dict(), sort_keys=True).encode())


def parse_spec(data: Any, source: str = "<dict>") -> RunSpec:
    """Validate a spec mapping; raises :class:`SpecError` naming the key."""
    where = f"spec {source}"
    if not isinstance(data, dict):
        raise SpecError(f"{where}: the top level must be a mapping of keys, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - set(KNOWN))
    if unknown:
        more = f", ... ({len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise SpecError(f"{where}: unknown key(s) [{', '.join(shown(k, 60) for k in unknown[:5])}{more}]; "
                        f"known keys: {sorted(KNOWN)}")
    missing = [k for k in REQUIRED if data.get(k) is None]
    if missing:
        raise SpecError(f"{where}: missing required key(s) {missing}")
    d = {k: data.get(k, DEFAULTS.get(k)) for k in KNOWN}

    def fail(key, msg):
        raise SpecError(f"{where}: {key}: {msg} (got {shown(d[key])})")

    check_plain_name(d["method_name"], "method_name", where)
    if not isinstance(d["inference"], str) or not d["inference"].strip():
        fail("inference", "must be a non-empty string")
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", d["inference"]):
        fail("inference", "must look like 'package.module:attr'")
    for key in ("family", "architecture", "dataset_path", "dataset_repo", "reference_cohort_id",
                "runtime_bundle_manifest", "device"):
        if d[key] is not None and not isinstance(d[key], str):
            fail(key, "must be a string or null")
    if not isinstance(d["results_root"], str) or not d["results_root"].strip() \
            or "\0" in d["results_root"]:
        fail("results_root", "must be a non-empty path (the folder bench writes under)")
    if d["inference_format"] not in INFERENCE_FORMATS:
        fail("inference_format", f"must be one of {list(INFERENCE_FORMATS)}")
    if not isinstance(d["inference_kwargs"] or {}, dict):
        fail("inference_kwargs", "must be a mapping")
    d["inference_kwargs"] = dict(d["inference_kwargs"] or {})
    if not _is_int(d["resolution"]) or d["resolution"] <= 0:
        fail("resolution", "must be a positive integer")
    if d["cost_model"] not in OBJECTIVES:
        fail("cost_model", f"must be one of the released objectives {list(OBJECTIVES)}")
    if d["cost_weight"] is not None:
        if isinstance(d["cost_weight"], bool) or not isinstance(d["cost_weight"], (int, float)) \
                or not math.isfinite(d["cost_weight"]):
            fail("cost_weight", "must be a finite number (it only confirms the released weight)")
        d["cost_weight"] = float(d["cost_weight"])
    try:
        d["split"] = canonical_split(str(d["split"]))
    except ValueError as e:
        fail("split", one_line(e, ECHO_LIMIT))
    if d["task_variant"] not in VARIANTS:
        fail("task_variant", f"must be one of {list(VARIANTS)}")
    if d["n_samples"] is not None and (not _is_int(d["n_samples"]) or d["n_samples"] <= 0):
        fail("n_samples", "must be a positive integer or null (whole split)")
    seeds = d["seeds"]
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(_is_int(s) for s in seeds):
        fail("seeds", "must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        fail("seeds", "must not repeat a seed")
    d["seeds"] = tuple(int(s) for s in seeds)
    by_seed = d["inference_kwargs_by_seed"] or {}
    if not isinstance(by_seed, dict):
        fail("inference_kwargs_by_seed", "must be a mapping {seed: {kwargs}}")
    norm = {}
    for k, v in by_seed.items():
        try:
            s = int(k)
        except (TypeError, ValueError):
            fail("inference_kwargs_by_seed", f"key {shown(k)} is not a seed")
        if s not in d["seeds"]:
            fail("inference_kwargs_by_seed", f"seed {s} is not one of seeds {list(d['seeds'])}")
        if not isinstance(v, dict):
            fail("inference_kwargs_by_seed", f"seed {s}: must map to a mapping of kwargs")
        norm[s] = dict(v)
    d["inference_kwargs_by_seed"] = norm
    if d["dataset_path"] is None and d["dataset_repo"] is None:
        raise SpecError(f"{where}: missing required key: dataset_path (or dataset_repo with "
                        f"dataset_revision)")
    if d["dataset_revision"] is not None:
        if not isinstance(d["dataset_revision"], str) or \
                not re.fullmatch(r"[0-9a-fA-F]{40}", d["dataset_revision"]):
            fail("dataset_revision", "must be exactly 40 hex characters (an immutable commit)")
        if d["dataset_repo"] is None:
            fail("dataset_revision", "is given without dataset_repo")
        if d["dataset_path"] is not None:
            fail("dataset_revision", "dataset_path and a dataset_repo revision are both given; "
                 "choose one source")
    if d["dataset_repo"] is not None and d["dataset_path"] is None and d["dataset_revision"] is None:
        fail("dataset_repo", "needs dataset_revision (40 hex characters) to download")
    for key in ("latency_warmup",):
        if not _is_int(d[key]) or d[key] < 0:
            fail(key, "must be an integer >= 0")
    if not _is_int(d["latency_repeats"]) or d["latency_repeats"] < 1:
        fail("latency_repeats", "must be an integer >= 1")
    q = d["quality_repeat_index"]
    if not _is_int(q) or not 0 <= q < d["latency_repeats"]:
        fail("quality_repeat_index", f"must be an integer in [0, latency_repeats={d['latency_repeats']})")
    try:
        d["budget"] = BudgetSpec.from_dict(d["budget"] or {})
    except (ProtocolError, TypeError, ValueError) as e:
        raise SpecError(f"{where}: budget: {one_line(e, 2 * ECHO_LIMIT)}") from None
    rme = d["reference_max_expansions"]
    if rme is not None and (not _is_int(rme) or rme <= 0):
        fail("reference_max_expansions", "must be a positive integer or null")
    if d["reference_policy"] not in REFERENCE_POLICIES:
        fail("reference_policy", f"must be one of {list(REFERENCE_POLICIES)}")
    if d["reference_policy"] == "independent_analytic_reference" and not d["reference_cohort_id"]:
        fail("reference_cohort_id", "is required by reference_policy independent_analytic_reference")
    if d["reference_policy"] == "released_labels" and d["reference_cohort_id"] is not None:
        fail("reference_cohort_id", "only applies to reference_policy independent_analytic_reference")
    d["component_control"] = _check_component_control(d["component_control"], where)
    if d["device"] is not None and d["device"] not in ("cpu", "gpu", "cuda", "rocm", "tpu"):
        fail("device", "must be null (default device) or one of cpu, gpu, cuda, rocm, tpu")
    _check_execution(d, fail)
    _check_provenance(d, fail)
    # budgets consistent: a planner's own limit may not exceed the declared budget
    for seed in d["seeds"]:
        kw = dict(d["inference_kwargs"])
        kw.update(norm.get(seed, {}))
        for name in ("max_expansions", "max_queue_operations", "max_live_states", "wall_time_ms"):
            declared = getattr(d["budget"], name)
            if name in kw and declared is not None and kw[name] is not None \
                    and _num(kw[name]) > declared:
                raise SpecError(
                    f"{where}: inference_kwargs {name}={shown(kw[name])} (seed {seed}) exceeds "
                    f"budget.{name}={declared!r}; a planner may not use more than the declared budget")
    spec = RunSpec(source=source, **d)
    _check_plain_values(spec, where)
    return spec


def _check_plain_values(spec: RunSpec, where: str) -> None:
    """Every value must be plain JSON (what the spec hash, ``run_started.json`` and the
    manifests hold): SpecError naming the first key that is not (a YAML date, binary
    value or set, a mapping with keys of mixed types ...)."""
    for key, value in spec.to_dict().items():
        try:
            json.dumps(value, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as e:
            raise SpecError(f"{where}: {key}: must hold plain JSON values (strings, numbers, "
                            f"booleans, null, lists and mappings with string keys): "
                            f"{one_line(e, ECHO_LIMIT)}") from None


def _check_execution(d, fail):
    if d["execution"] not in EXECUTIONS:
        fail("execution", f"must be one of {list(EXECUTIONS)}")
    supervised = d["execution"] == "supervised"
    mem = d["worker_memory_mb"]
    if mem is not None:
        if not _is_int(mem) or mem <= 0:
            fail("worker_memory_mb", "must be a positive integer (MiB of worker resident memory) or null")
        if not supervised:
            fail("worker_memory_mb", "only applies to execution: supervised")
    g = d["worker_grace_ms"]
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
        fail("worker_grace_ms", "must be a finite number of milliseconds >= 0")
    if not _is_int(d["worker_warmup"]) or d["worker_warmup"] < 0:
        fail("worker_warmup", "must be an integer >= 0 (untimed warm-up requests per fresh worker)")
    if supervised and d["budget"].wall_time_ms is None:
        fail("execution", "supervised execution needs budget.wall_time_ms: the parent kills a request "
             "that passes this deadline plus worker_grace_ms")


def _check_provenance(d, fail):
    """split_role and its calibration record, the determinism claim, the container
    digest and the roster the run is bound to."""
    role = d["split_role"]
    if role is not None:
        if role not in SPLIT_ROLES:
            fail("split_role", f"must be one of {list(SPLIT_ROLES)} or null (undeclared)")
        if d["split"] not in ROLE_SPLITS[role]:
            fail("split_role", f"a {role} run cannot use the {d['split']!r} split (allowed: "
                 f"{list(ROLE_SPLITS[role])}); decisions are tuned on development and calibration "
                 f"splits and frozen before a test run")
    cal = d["calibration_decisions"]
    if cal is not None and not isinstance(cal, str):
        fail("calibration_decisions", "must be the path of the calibration-decisions file or null")
    if role == "test" and cal is None:
        fail("calibration_decisions", "a test-role run needs the file of calibration decisions frozen "
             "before it (its canonical-JSON sha256 is recorded in the manifest and the sidecar)")
    if cal is not None and role not in ("test", "validation"):
        fail("calibration_decisions", "only applies to split_role test or validation")
    if d["determinism"] not in DETERMINISM_CLAIMS:
        fail("determinism", f"must be one of {list(DETERMINISM_CLAIMS)}")
    cd = d["container_digest"]
    if cd is not None and (not isinstance(cd, str)
                           or not re.fullmatch(r"sha256:[0-9a-f]{64}", cd)):
        fail("container_digest", "must look like 'sha256:<64 lowercase hex>' or be null")
    if d["roster"] is not None and not isinstance(d["roster"], str):
        fail("roster", "must be the path of a roster file or null")
    rs = d["roster_sha256"]
    if (d["roster"] is None) != (rs is None):
        fail("roster_sha256", "a roster and its sealed sha256 are given together")
    if rs is not None and (not isinstance(rs, str) or not re.fullmatch(r"[0-9a-f]{64}", rs)):
        fail("roster_sha256", "must be 64 lowercase hex characters")


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def _check_component_control(cc, where):
    if cc is None:
        return None
    if not isinstance(cc, dict):
        raise SpecError(f"{where}: component_control must be a mapping or null (got {shown(cc)})")
    bad = sorted(set(map(str, cc)) - set(COMPONENT_KEYS))
    if bad:
        raise SpecError(f"{where}: component_control: unknown key(s) {shown(bad)}; "
                        f"known: {list(COMPONENT_KEYS)}")
    v, g = cc.get("variant"), cc.get("guide")
    if v not in COMPONENT_VARIANTS:
        raise SpecError(f"{where}: component_control.variant {shown(v)} is not one of "
                        f"{list(COMPONENT_VARIANTS)}")
    if g not in COMPONENT_GUIDES:
        raise SpecError(f"{where}: component_control.guide {shown(g)} is not one of "
                        f"{list(COMPONENT_GUIDES)}")
    pl = cc.get("primary_learned", False)
    if not isinstance(pl, bool):
        raise SpecError(f"{where}: component_control.primary_learned must be true or false")
    learned = v in ("direct", "bounded_repair") or g == "learned"
    if learned and not cc.get("checkpoint_id"):
        raise SpecError(f"{where}: component_control.variant {v!r} needs checkpoint_id")
    if v in ("bounded_repair", "prediction_free", "exact_fallback") and not cc.get("machinery_id"):
        raise SpecError(f"{where}: component_control.variant {v!r} needs machinery_id")
    if v == "exact_fallback" and pl:
        raise SpecError(f"{where}: component_control: exact_fallback cannot be a primary learned result")
    if (v == "oracle_diagnostic") != (g == "oracle"):
        raise SpecError(f"{where}: component_control: the oracle guide belongs only to oracle_diagnostic")
    return {k: cc.get(k) for k in COMPONENT_KEYS}


def load_spec(path) -> RunSpec:
    """Read a YAML or JSON spec file (at most :data:`SPEC_MAX_BYTES`, no YAML aliases) and
    validate it."""
    data = read_document(path, SpecError, "spec", yaml_allowed=True, max_bytes=SPEC_MAX_BYTES)
    return parse_spec(data, str(Path(path)))


STARTER_SPEC = """\
# passage_jax run spec (SPEC §7). Validate and run with:
#   python -m cli conform --spec THIS_FILE --output outputs/check
#   python -m cli run     --spec THIS_FILE --output outputs/run-a
# Unknown keys are refused. Relative paths are resolved from the working directory.

method_name: bounded_astar          # your method's name (required; letters, digits, ._- only)
family: classical                   # free text: classical, learned, ...
architecture: astar                 # free text
# The planner: 'package.module:attr'. A class, or a function named make_*, is a
# factory called once with inference_kwargs; any other function is called per
# request as fn(request, **inference_kwargs).
inference: passage_jax.planners.bounded:make_planner
inference_format: request           # request | scene (legacy predict_path) | tensor
inference_kwargs: {max_expansions: 10000}
inference_kwargs_by_seed: {}        # {seed: {kwargs}} overlays inference_kwargs per seed;
                                    # declare checkpoint files here (keys *checkpoint*/*params*)

# Tasks
resolution: 64                      # N of the <N>x<N>/ shard folder (required)
cost_model: energy                  # elevation | slope_uphill | energy (required)
split: test                         # train | validation | calibration | test (required)
task_variant: obstacles             # obstacles | free
n_samples: 8                        # deterministic prefix of the split; null = whole split
seeds: [1234, 2026, 3407]           # one run folder per seed (compare needs these three)
dataset_path: shipped               # "shipped": the cohort in the package; or a root with <N>x<N>/<split>/
dataset_repo: null                  # or a hub dataset ...
dataset_revision: null              # ... with an exact 40-hex-character commit

# Timing series: one cold pass, then warm-up passes, then measured warm repeats
latency_warmup: 1                   # the default is 5 (seed 000); 1 keeps this demo short
latency_repeats: 2
quality_repeat_index: 0             # which warm repeat is the headline quality

# Budgets (all optional). A work limit requires the planner to report the counter.
budget:
  max_expansions: 10000
  # wall_time_ms: 1000              # absolute deadline per request, cooperative
  # max_queue_operations: 100000
  # max_live_states: 10000

# References
reference_max_expansions: null      # CPU exact-search budget for qualification; null = none
reference_policy: released_labels   # or independent_analytic_reference (+ reference_cohort_id)
reference_cohort_id: null

results_root: outputs/passage-jax   # where `bench` writes
component_control: null             # {variant, guide, checkpoint_id, machinery_id, primary_learned}
runtime_bundle_manifest: null       # JSON passage-runtime-bundle-v1 {files: [{path, sha256}]}
device: null                        # null = JAX default device; or cpu | gpu | tpu
# Execution: in_process (default) or supervised (the planner runs in a worker process that
# is killed and replaced when a request passes budget.wall_time_ms + worker_grace_ms)
execution: in_process
worker_memory_mb: null              # supervised only: resident-memory cap of the worker (MiB)
worker_grace_ms: 200                # supervised: wait past the deadline before killing the worker
worker_warmup: 1                    # supervised: untimed warm-up requests per fresh worker

# Provenance
split_role: null                    # development | calibration | validation | test (null: undeclared)
calibration_decisions: null         # test role: the decisions frozen on calibration (JSON/YAML file)
determinism: non_deterministic      # or deterministic: the routes repeat exactly
container_digest: null              # 'sha256:<64 hex>' of the container image the run used
roster: null                        # a sealed task roster the run must match (roster_sha256 beside it)
roster_sha256: null
"""
