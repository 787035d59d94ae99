"""Run spec (contract §7): loading, validation, defaults, and the starter template.

A spec is a YAML or JSON mapping. Unknown keys are refused, required keys must
be present, and every value is type-checked with an error naming the key (the keys,
their defaults and one validator per key: :mod:`passage_jax.run.specification.schema`).

A spec file is read bounded: at most :data:`SPEC_MAX_BYTES`, UTF-8 text, no YAML
aliases (:func:`passage_jax.fileio.read_document`); an error echoes at most
:data:`ECHO_LIMIT` characters of a value (:func:`shown`). ``method_name`` becomes part
of output paths (``bench`` writes ``<results_root>/<method_name>-<time>``), so it must
be a plain name (:func:`check_plain_name`).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any

from passage_jax.budget import BudgetSpec
from passage_jax.contract import BATCHED_PROFILE, COMPLETE_REQUEST_PROFILE, DEFAULT_SEEDS, SESSION_PROFILES
from passage_jax.fileio import one_line, read_document, sha256_bytes
from passage_jax.run.specification.schema import (
    DEFAULTS,
    ECHO_LIMIT,
    KNOWN,
    REQUIRED,
    VALIDATORS,
    Invalid,
    Refused,
    plain_name_problem,
    session_defaults,
    shown,
)

__all__ = ["RunSpec", "SpecError", "parse_spec", "load_spec", "STARTER_SPEC", "SPEC_MAX_BYTES",
           "check_plain_name"]

#: the largest spec file (and calibration-decisions file) read, in bytes
SPEC_MAX_BYTES = 1 << 20


class SpecError(ValueError):
    """The run spec is malformed (the message names the file and key)."""


def check_plain_name(value, key: str, where: str) -> str:
    """``value`` when it is a plain name usable as one path component (ASCII letters,
    digits, ``._-``, not starting with ``.``, at most :data:`MAX_NAME_LENGTH`
    characters); :class:`SpecError` naming ``key`` otherwise."""
    problem = plain_name_problem(value)
    if problem:
        raise SpecError(f"{where}: {key}: {problem} (got {shown(value)})")
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
    references_from: str | None = None
    results_root: str = "results"
    component_control: dict | None = None
    runtime_bundle_manifest: str | None = None
    device: str | None = None
    execution: str = "in_process"
    worker_memory_mb: int | None = None
    worker_grace_ms: float = 200
    worker_warmup: int = 1
    timing_profile: str = COMPLETE_REQUEST_PROFILE
    session_warmup: int | None = None
    batch_size: int | None = None
    batch_warmup: int | None = None
    warmup_scene: str | None = None
    split_role: str | None = None
    calibration_decisions: str | None = None
    determinism: str = "non_deterministic"
    container_digest: str | None = None
    roster: str | None = None
    roster_sha256: str | None = None
    source: str = "<dict>"  # where the spec came from (not a spec key)

    @property
    def session_profile(self) -> bool:
        """Whether the timing profile is a session profile (no cold pass, one timed warm
        request per task after ``session_warmup`` untimed calls)."""
        return self.timing_profile in SESSION_PROFILES

    @property
    def batched(self) -> bool:
        """Whether the run follows the batched procedure (``batched_v1``: ``plan_batch``
        over ``batch_size`` scenes at a time, one timed pass)."""
        return self.timing_profile == BATCHED_PROFILE

    @property
    def one_pass(self) -> bool:
        """Whether each task is timed once in one warm pass (a session or the batched
        procedure): no cold pass, no repeats."""
        return self.session_profile or self.batched

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
            if v is None and f.name in _BATCHED_KEYS:
                continue  # outside the batched procedure: a spec (and its hash) as before it
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


#: the keys of the batched procedure, left out of :meth:`RunSpec.to_dict` where null
_BATCHED_KEYS = ("batch_size", "batch_warmup")


def _did_you_mean(unknown: list) -> str:
    """``" (did you mean 'n_samples'?)"`` for the unknown keys close to a known one (difflib);
    empty when none is."""
    hints = []
    for k in unknown:
        close = difflib.get_close_matches(str(k)[:200], KNOWN, n=1, cutoff=0.75)
        if close:
            hints.append(f"{shown(k, 60)}: did you mean {close[0]!r}?" if len(unknown) > 1
                         else f"did you mean {close[0]!r}?")
    return f" ({'; '.join(hints)})" if hints else ""


def _keys(data: Any, where: str) -> dict:
    """Every known key of ``data`` with its value or default; SpecError for a mapping
    that is not one, an unknown key or a missing required key."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: the top level must be a mapping of keys, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - set(KNOWN))
    if unknown:
        more = f", ... ({len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise SpecError(f"{where}: unknown key(s) [{', '.join(shown(k, 60) for k in unknown[:5])}{more}]"
                        f"{_did_you_mean(unknown[:5])}; known keys: {sorted(KNOWN)}")
    missing = [k for k in REQUIRED if data.get(k) is None]
    if missing:
        raise SpecError(f"{where}: missing required key(s) {missing}")
    return session_defaults({k: data.get(k, DEFAULTS.get(k)) for k in KNOWN}, data)


def parse_spec(data: Any, source: str = "<dict>") -> RunSpec:
    """Validate a spec mapping; raises :class:`SpecError` naming the key."""
    where = f"spec {source}"
    d = _keys(data, where)
    for key, check in VALIDATORS:
        try:
            d[key] = check(d[key], d)
        except Invalid as e:
            raise SpecError(f"{where}: {key}: {e} (got {shown(d[key])})") from None
        except Refused as e:
            raise SpecError(f"{where}: {e}") from None
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


def load_spec(path) -> RunSpec:
    """Read a YAML or JSON spec file (at most :data:`SPEC_MAX_BYTES`, no YAML aliases) and
    validate it."""
    data = read_document(path, SpecError, "spec", yaml_allowed=True, max_bytes=SPEC_MAX_BYTES)
    return parse_spec(data, str(Path(path)))


STARTER_SPEC = """\
# passage_jax run spec (docs/contract.md §7). Validate and run with:
#   python -m cli conform --spec THIS_FILE --output outputs/check
#   python -m cli run     --spec THIS_FILE --output outputs/run-a
# Unknown keys are refused. Relative paths are resolved from the working directory.

method_name: bounded_astar          # your method's name (required; letters, digits, ._- only)
family: classical                   # free text: classical, learned, ...
architecture: astar                 # free text
# The planner: 'package.module:attr'. A class, or a function named make_*, is a
# factory called once with inference_kwargs; any other function is called per
# request as fn(request, **inference_kwargs). A module next to this spec file is found
# (its folder goes first on the import path; --planner-path DIR adds more; docs/runner.md).
inference: passage_jax.planners.bounded:make_planner
inference_format: request           # request | scene (legacy predict_path) | tensor
inference_kwargs: {max_expansions: 20000}   # the planner's own search limit (configs/bounded.yaml)
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

# Timing series: one cold pass, then warm-up passes, then measured warm repeats. These
# three and the budget below are the shipped baselines' (configs/bfs.yaml, greedy.yaml,
# exact.yaml), so `compare` against a baseline pairs runs with identical procedure limits.
latency_warmup: 1                   # the default is 5 (docs/contract.md); 1 keeps this demo short
latency_repeats: 1
quality_repeat_index: 0             # which warm repeat is the headline quality
# Timing profile: complete_request_v1 (the default: the series above) or a session profile,
# native_raw_path_persistent_v1 (execution: in_process), supervised_service_v1 or
# supervised_service_rewarm_v1 (execution: supervised): one persistent session per seed,
# session_warmup untimed calls on a validation scene outside the roster, then one timed
# request per task, validation and recosting timed apart (docs/runner.md, Timing profiles).
# A session profile fixes the series: leave out latency_warmup, latency_repeats,
# quality_repeat_index and worker_warmup.
# timing_profile: complete_request_v1
# session_warmup: 16                # session profiles: untimed calls before the first timed one
# warmup_scene: null                # session profiles: a validation sample id (null: the first
                                    # validation scene outside the roster)

# Budgets (all optional; none, as in the baselines). A work limit requires the planner to
# report the counter; a run with a budget compared against one without is listed under
# "procedure limits differ" by `compare`.
budget: {}
  # max_expansions: 20000           # e.g. budget: {max_expansions: 20000} (configs/bounded.yaml)
  # wall_time_ms: 1000              # absolute deadline per request, cooperative
  # max_queue_operations: 100000
  # max_live_states: 10000

# References
reference_max_expansions: null      # CPU exact-search budget for qualification; null = none
reference_policy: released_labels   # or independent_analytic_reference (+ reference_cohort_id)
reference_cohort_id: null
references_from: null               # an earlier run's folder over the same tasks: its references
                                    # are taken (checked) instead of qualified again

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
