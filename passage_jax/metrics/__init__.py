"""Metrics stage (SPEC §4): route validity, recosting, censoring and regret,
geometry, primary aggregates, a training-loop accumulator and field
diagnostics. Every metric exists as a pure jittable JAX kernel on padded
inputs; :func:`score_routes` is the host entry point for ragged routes."""
from passage_jax.metrics.kernels import (  # noqa: F401
    CENSOR_FACTOR, FAILURE_REGRET, GEOMETRY_SPAN, METRIC_KEYS, censored_cost, connected_path,
    in_bounds, masked_percentile, obstacle_traversals, regret, route_cost, route_geometry,
    route_length_pixels, route_validity, score_batch, score_batch_gathered, score_batch_packed,
    score_task,
)
from passage_jax.metrics.host import (  # noqa: F401
    MIN_BUCKET, normalise_candidate, resolve_sharding, score_routes, sharding_devices,
)
from passage_jax.metrics.aggregate import (  # noqa: F401
    PRIMARY_METRICS, primary_metrics, primary_metrics_jax, regret_summary_jax,
)
from passage_jax.metrics.accumulator import PathMetrics  # noqa: F401
from passage_jax.metrics.fields import (  # noqa: F401
    bellman_backup, bellman_residual, boundary_f_score, component_count, component_labels,
    descent_direction, descent_direction_agreement, dilate, expansions_ratio,
    fallback_free_rate, neighbour_ranking_agreement, ssi_mae, start_goal_connected,
)
