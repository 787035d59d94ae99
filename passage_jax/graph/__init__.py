"""Graph stage (contract §2): the move table (:mod:`~passage_jax.graph.moves`), grid
operators — shifts, neighbour gathers, Bellman backup, descent policy
(:mod:`~passage_jax.graph.grid`), ``GraphSpec`` (:mod:`~passage_jax.graph.spec`), the
cost-model registry and edge-cost fields (:mod:`~passage_jax.graph.costs`), and host
route legality and float64 recosting (:mod:`~passage_jax.graph.routes`)."""
from passage_jax.contract import OBJECTIVE_COLUMN, OBJECTIVES, VARIANTS
from passage_jax.graph.costs import (
    COST_MODELS,
    MODEL_INDEX,
    MODEL_NAMES,
    CostModel,
    CropStats,
    crop_stats,
    edge_cost_field,
    edge_cost_field_batched,
    edge_cost_field_by_index,
    edge_cost_field_np,
    get_cost_model,
    legal_move_mask,
    step_cost,
)
from passage_jax.graph.grid import (
    TIE_RTOL,
    bellman_backup,
    cell_mask,
    descent_policy,
    move_values,
    neighbours,
    shift,
)
from passage_jax.graph.moves import DIAGONAL, MOVES, STEP_PIXELS, move_index
from passage_jax.graph.routes import (
    as_route_array,
    route_cost,
    route_length_pixels,
    route_problem,
    route_step_costs,
)
from passage_jax.graph.spec import GraphSpec

__all__ = [
    # move table
    "MOVES", "DIAGONAL", "STEP_PIXELS", "move_index",
    # grid operators
    "shift", "neighbours", "cell_mask", "move_values", "bellman_backup", "descent_policy",
    "TIE_RTOL",
    # graph spec and objectives
    "GraphSpec", "OBJECTIVES", "VARIANTS", "OBJECTIVE_COLUMN",
    # cost models and edge-cost fields
    "CostModel", "CropStats", "COST_MODELS", "MODEL_NAMES", "MODEL_INDEX", "get_cost_model",
    "crop_stats", "step_cost", "legal_move_mask", "edge_cost_field", "edge_cost_field_np",
    "edge_cost_field_by_index", "edge_cost_field_batched",
    # host routes
    "as_route_array", "route_problem", "route_step_costs", "route_cost", "route_length_pixels",
]
