"""The contract's constants, in one place (contract §5–7).

Every module that names a primary metric, its direction, the censoring of failed
routes, the default training seeds, the block of a task without a tile or a timing
profile imports it from here.
"""
from __future__ import annotations

__all__ = [
    "PRIMARY_METRICS", "PRIMARY_SHORT", "METRIC_SPEC", "DIRECTIONS", "PER_TASK_FIELDS",
    "GEOMETRY_FIELDS", "MEAN_FIELDS", "CENSOR_FACTOR", "FAILURE_REGRET", "DEFAULT_SEEDS",
    "UNPLACED", "IN_PROCESS_TIMING_PROFILE", "SUPERVISED_TIMING_PROFILE",
    "CENSORED_LATENCY_FORMAT", "CENSORED_STATUSES",
]

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
#: Format tag of the censored latency block in metrics.json.
CENSORED_LATENCY_FORMAT = "passage-censored-latency/v1"
#: Statuses whose latency is right-censored at the deadline.
CENSORED_STATUSES = ("timeout",)
