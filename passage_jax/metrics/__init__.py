"""Metrics stage (contract §4): route validity, recosting, censoring and regret,
geometry, primary aggregates, a training-loop accumulator and field
diagnostics.

Every per-task metric is a pure jittable JAX kernel on padded inputs that
exchange pytrees (:class:`Route`, :class:`TaskArrays` / :class:`TaskAtCandidate`,
:class:`RouteMetrics`); :func:`score_task` scores one task and
:data:`score_tasks` a batch. :func:`score_routes` is the host entry point for
ragged routes and :func:`primary_metrics` its aggregates.
"""
from passage_jax.contract import CENSOR_FACTOR, FAILURE_REGRET, PRIMARY_METRICS
from passage_jax.metrics.accumulator import PathMetrics
from passage_jax.metrics.aggregate import primary_metrics, primary_metrics_jax, regret_summary_jax
from passage_jax.metrics.fields import (
    bellman_residual,
    boundary_f_score,
    descent_direction_agreement,
    expansions_ratio,
    fallback_free_rate,
    neighbour_ranking_agreement,
    ssi_mae,
    start_goal_connected,
)
from passage_jax.metrics.host import score_routes
from passage_jax.metrics.host_batch import MIN_BUCKET
from passage_jax.metrics.host_inputs import normalise_candidate
from passage_jax.metrics.host_stream import RouteStream
from passage_jax.metrics.kernels import (
    GEOMETRY_SPAN,
    censored_cost,
    connected_path,
    obstacle_traversals,
    padded_route_cost,
    regret,
    route_geometry,
    route_length_pixels,
    route_validity,
    score_task,
    score_tasks,
)
from passage_jax.metrics.search_report import (
    HARD_RATIO,
    OPTIMAL_RTOL,
    SEARCH_REPORT_FIGURES,
    hard_subset_mask,
    octile_lower_bound,
    search_report,
)
from passage_jax.metrics.sharding import resolve_sharding, sharding_devices
from passage_jax.metrics.types import METRIC_KEYS, Route, RouteMetrics, TaskArrays, TaskAtCandidate

__all__ = [
    # host entry points
    "score_routes", "RouteStream", "primary_metrics", "normalise_candidate", "MIN_BUCKET",
    "resolve_sharding", "sharding_devices",
    # pytrees at the kernel boundary
    "Route", "TaskArrays", "TaskAtCandidate", "RouteMetrics", "METRIC_KEYS",
    # per-task kernels and the batched kernel
    "score_task", "score_tasks", "route_validity", "connected_path", "obstacle_traversals",
    "padded_route_cost", "censored_cost", "regret", "route_geometry", "route_length_pixels",
    "GEOMETRY_SPAN",
    # jittable aggregates and the training-loop accumulator
    "primary_metrics_jax", "regret_summary_jax", "PathMetrics",
    # contract constants (defined in passage_jax.contract)
    "CENSOR_FACTOR", "FAILURE_REGRET", "PRIMARY_METRICS",
    # field diagnostics of learned cost-to-go predictors
    "bellman_residual", "descent_direction_agreement", "ssi_mae", "neighbour_ranking_agreement",
    "boundary_f_score", "start_goal_connected", "expansions_ratio", "fallback_free_rate",
    # the learned-search report against plain A* (host side)
    "search_report", "hard_subset_mask", "octile_lower_bound", "HARD_RATIO", "OPTIMAL_RTOL",
    "SEARCH_REPORT_FIGURES",
]
