"""The contract's constants, in one place (contract §2, §5–7).

Every module that names a primary metric, its direction, the censoring of failed
routes, the default training seeds, the block of a task without a tile, a timing
profile, an objective or task variant, or a planner's input format imports it from
here. This module imports nothing, so the run spec's check (``passage_jax.run.specification.parse``)
loads without JAX.
"""
from __future__ import annotations

__all__ = [
    "PRIMARY_METRICS", "PRIMARY_SHORT", "METRIC_SPEC", "DIRECTIONS", "PER_TASK_FIELDS",
    "GEOMETRY_FIELDS", "MEAN_FIELDS", "CENSOR_FACTOR", "FAILURE_REGRET", "DEFAULT_SEEDS",
    "UNPLACED", "IN_PROCESS_TIMING_PROFILE", "SUPERVISED_TIMING_PROFILE",
    "CENSORED_LATENCY_FORMAT", "CENSORED_STATUSES", "COMPLETE_REQUEST_PROFILE",
    "NATIVE_SESSION_PROFILE", "SUPERVISED_SERVICE_PROFILE", "SUPERVISED_SERVICE_REWARM_PROFILE",
    "TIMING_PROFILES", "SESSION_PROFILES", "PROFILE_EXECUTION", "DEFAULT_SESSION_WARMUP",
    "BATCHED_PROFILE", "ONE_PASS_PROFILES", "DEFAULT_BATCH_WARMUP",
    "timing_boundary", "OBJECTIVES", "VARIANTS", "OBJECTIVE_COLUMN", "INFERENCE_FORMATS",
]

OBJECTIVES = ("elevation", "slope_uphill", "energy")
"""The three objectives of PASSAGE v1.0 (contract §2 names)."""
#: The task variants (contract §2): without and with the obstacle mask.
VARIANTS = ("free", "obstacles")
#: Column-name stem of each objective in released shards (`slope` for `slope_uphill`).
OBJECTIVE_COLUMN = {"elevation": "elevation", "slope_uphill": "slope", "energy": "energy"}
#: Input shapes a planner may take (the spec's ``inference_format``, contract §6).
INFERENCE_FORMATS = ("request", "scene", "tensor")

#: The six primary metrics, in reporting order.
PRIMARY_METRICS = ("regret_median", "regret_p90", "assd_mean", "h95_mean", "success_rate",
                   "obstacle_violation_rate")
#: Column headers for console tables, in PRIMARY_METRICS order.
PRIMARY_SHORT = ("regret median", "regret p90", "ASSD mean", "H95 mean", "success", "violation")
#: metric -> (per-task field, quantile level or None for a mean, NaN policy)
METRIC_SPEC = {
    "regret_median": ("regret", 0.5, "raise"),
    "regret_p90": ("regret", 0.9, "raise"),
    "assd_mean": ("assd", None, "omit"),
    "h95_mean": ("h95", None, "omit"),
    "success_rate": ("success", None, "raise"),
    "obstacle_violation_rate": ("obstacle_violation", None, "raise"),
}
#: metric -> "lower" or "higher" (which value is better)
DIRECTIONS = {m: ("higher" if m == "success_rate" else "lower") for m in PRIMARY_METRICS}
#: per-task fields behind the primary metrics
PER_TASK_FIELDS = ("regret", "assd", "h95", "success", "obstacle_violation")
#: per-task fields defined only on a valid route (NaN elsewhere)
GEOMETRY_FIELDS = ("assd", "h95")
#: per-task fields reduced by a mean
MEAN_FIELDS = ("assd", "h95", "success", "obstacle_violation")

#: Censoring factor: a failed route costs ``K = CENSOR_FACTOR * c*``.
CENSOR_FACTOR = 1e6
#: Regret of a failed route, exactly ``CENSOR_FACTOR - 1``.
FAILURE_REGRET = 999999.0

#: The three training seeds of the canonical protocol.
DEFAULT_SEEDS = (1234, 2026, 3407)
#: Block of a task without a geographic tile (or outside a roster).
UNPLACED = "unplaced"

#: Timing profile of the in-process runner (one complete request, host to host).
IN_PROCESS_TIMING_PROFILE = "in_process_complete_request_v1"
#: Timing profile of supervised execution (the planner in a worker process; the parent's
#: timer includes sending the task and receiving the route snapshot, IPC included).
SUPERVISED_TIMING_PROFILE = "supervised_worker_request_v1"

#: The spec's ``timing_profile`` values (contract §7, Timing profiles). The default: a cold
#: pass, ``latency_warmup`` recorded warm-up passes and ``latency_repeats`` warm repeats, the
#: legality check and recosting inside the timer; its timing boundary is the executor's
#: profile (:data:`IN_PROCESS_TIMING_PROFILE` or :data:`SUPERVISED_TIMING_PROFILE`).
COMPLETE_REQUEST_PROFILE = "complete_request_v1"
#: One persistent in-process session per seed: ``session_warmup`` untimed calls on a
#: validation scene outside the roster, then one timed request per task, the timer from the
#: request's raw arrays in memory to the returned route; validation and recosting apart.
NATIVE_SESSION_PROFILE = "native_raw_path_persistent_v1"
#: The same session in a supervised worker (IPC inside the timed value, recosting outside);
#: a replacement worker is not warmed again.
SUPERVISED_SERVICE_PROFILE = "supervised_service_v1"
#: As :data:`SUPERVISED_SERVICE_PROFILE`, but a replacement worker runs the session warm-up
#: again before its next timed request.
SUPERVISED_SERVICE_REWARM_PROFILE = "supervised_service_rewarm_v1"
#: The batched procedure (docs/runner.md, "The batched procedure"): a planner's
#: ``plan_batch`` over ``batch_size`` scenes at a time in roster order (the last batch
#: padded, the padding never scored), after ``batch_warmup`` untimed batches of the warm-up
#: scene; the timer runs from the batch's raw arrays in device memory to every route on
#: the host. Its latency is per batch (``batch_ms``) and amortised per scene
#: (``per_scene_ms``), never a per-request latency.
BATCHED_PROFILE = "batched_v1"
TIMING_PROFILES = (COMPLETE_REQUEST_PROFILE, NATIVE_SESSION_PROFILE, SUPERVISED_SERVICE_PROFILE,
                   SUPERVISED_SERVICE_REWARM_PROFILE, BATCHED_PROFILE)
#: The session profiles (no cold pass, one timed warm request per task).
SESSION_PROFILES = (NATIVE_SESSION_PROFILE, SUPERVISED_SERVICE_PROFILE,
                    SUPERVISED_SERVICE_REWARM_PROFILE)
#: The profiles of one warm pass over the tasks, each task once (no cold pass, no repeats).
ONE_PASS_PROFILES = (*SESSION_PROFILES, BATCHED_PROFILE)
#: profile -> the ``execution`` it requires
PROFILE_EXECUTION = {NATIVE_SESSION_PROFILE: "in_process", SUPERVISED_SERVICE_PROFILE: "supervised",
                     SUPERVISED_SERVICE_REWARM_PROFILE: "supervised", BATCHED_PROFILE: "in_process"}
#: Untimed calls of a session before its first timed request (``session_warmup``).
DEFAULT_SESSION_WARMUP = 16
#: Untimed batches before the first timed one under :data:`BATCHED_PROFILE` (``batch_warmup``).
DEFAULT_BATCH_WARMUP = 2


def timing_boundary(timing_profile: str | None, execution: str = "in_process") -> str:
    """The timing boundary of a run: the session profile's name, or under the default
    profile the executor's (:data:`IN_PROCESS_TIMING_PROFILE` in process,
    :data:`SUPERVISED_TIMING_PROFILE` supervised)."""
    if timing_profile in ONE_PASS_PROFILES:
        return timing_profile
    return SUPERVISED_TIMING_PROFILE if execution == "supervised" else IN_PROCESS_TIMING_PROFILE


#: Format tag of the censored latency block in metrics.json.
CENSORED_LATENCY_FORMAT = "passage-censored-latency/v1"
#: Statuses whose latency is right-censored at the deadline.
CENSORED_STATUSES = ("timeout",)
